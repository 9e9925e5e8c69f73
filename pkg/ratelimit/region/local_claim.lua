-- Takes or renews the exchanger lease of one key in the region's Redis and
-- reads what the exchange needs. KEYS[1]: the key's local hash. ARGV[1]:
-- owner (a replica's random ID), ARGV[2]: lease TTL in ms, ARGV[3]: key TTL
-- in ms, ARGV[4]: now in ms, or "" to read Redis's clock, ARGV[5]: period
-- in ms.
-- "x" = "<owner> <expiry ms>". Reply: {0} when another owner holds a live
-- lease, else {1, now, asked ("a"), admitted and reserved for RLQS in the
-- current window, the RLQS Envoys' live demand in hits per window ("qd",
-- "" when none)} as strings.
local now = tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local x = redis.call('HGET', KEYS[1], 'x')
if x then
  local owner, exp = string.match(x, '^(%S+) (%S+)$')
  if owner ~= ARGV[1] and tonumber(exp) and tonumber(exp) > now then return {0} end
end
redis.call('HSET', KEYS[1], 'x', ARGV[1] .. ' ' .. (now + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
local w = math.floor(now / tonumber(ARGV[5]))
local used = (tonumber(redis.call('HGET', KEYS[1], 'u:' .. w)) or 0) + (tonumber(redis.call('HGET', KEYS[1], 'q:' .. w)) or 0)
local qd = ''
local q = redis.call('HGET', KEYS[1], 'qd')
if q then
  local exp, d = string.match(q, '^(%S+) (%S+)$')
  if tonumber(exp) and tonumber(exp) > now then qd = d end
end
return {1, tostring(now), redis.call('HGET', KEYS[1], 'a') or '0', tostring(used), qd}
