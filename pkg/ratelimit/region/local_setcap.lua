-- Writes the region's caps of one key for a window and the next, fenced by
-- the exchanger lease. KEYS[1]: the key's local hash. ARGV[1]: owner,
-- ARGV[2]: mode, "lower" or "mirror", ARGV[3]: window, ARGV[4], ARGV[5]:
-- the values for window and window+1, ARGV[6]: key TTL in ms, ARGV[7]: now
-- in ms, or "" to read Redis's clock.
-- lower (before the global grant shrinks): each cap becomes min(cap,
-- value) but never below what the window has admitted and reserved for
-- RLQS ("q:<window>"), so that the global
-- grant written next can be this and still cover every admission.
-- mirror (after the global grant): the caps become the global grants, which
-- are never below the local caps.
-- Reply: {-1} when the caller does not hold the lease, else {1, cap(window),
-- cap(window+1)} as strings.
local now = tonumber(ARGV[7])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local x = redis.call('HGET', KEYS[1], 'x')
local owner, exp
if x then owner, exp = string.match(x, '^(%S+) (%S+)$') end
if owner ~= ARGV[1] or not tonumber(exp) or tonumber(exp) <= now then return {-1} end
local w = tonumber(ARGV[3])
local v = {tonumber(ARGV[4]), tonumber(ARGV[5])}
local cur = {0, 0}
local c = redis.call('HGET', KEYS[1], 'c')
if c then
  local cw, c0, c1 = string.match(c, '^(%S+) (%S+) (%S+)$')
  cw = tonumber(cw)
  if cw == w then cur = {tonumber(c0), tonumber(c1)} elseif cw and cw + 1 == w then cur = {tonumber(c1), 0} end
end
local n = {}
for i = 1, 2 do
  if ARGV[2] == 'lower' then
    local used = (tonumber(redis.call('HGET', KEYS[1], 'u:' .. (w + i - 1))) or 0)
      + (tonumber(redis.call('HGET', KEYS[1], 'q:' .. (w + i - 1))) or 0)
    n[i] = math.max(math.min(cur[i], v[i]), used)
  else
    n[i] = v[i]
  end
end
redis.call('HSET', KEYS[1], 'c', w .. ' ' .. n[1] .. ' ' .. n[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[6]))
return {1, tostring(n[1]), tostring(n[2])}
