-- Reserves, in the region's own Redis, what the region's RLQS Envoys may
-- admit of one key, and records their demand. KEYS[1]: the key's local
-- hash. ARGV[1]: period in ms, ARGV[2]: floor in hits, ARGV[3]: key TTL in
-- ms, ARGV[4]: now in ms, or "" to read Redis's clock, ARGV[5]: horizon in
-- ms, ARGV[6]: hits per window wanted for RLQS, ARGV[7]: the Envoys' demand
-- in hits per window ("" to leave it), ARGV[8]: its TTL in ms.
-- For the current window, and the next one when it starts within the
-- horizon, "q:<window>" (hits reserved for RLQS, never lowered in its
-- window: Envoys may hold assignments sized from it) rises towards the
-- wanted hits as far as the window's cap leaves room after what it
-- admitted ("u:<window>") and reserved. "qd" = "<expiry ms> <demand>".
-- Reply: {the least reservation of those windows} as a string: what
-- assignments made now may use (more than wanted when an earlier call
-- reserved more).
local now = tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local period, floor, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[6])
local w = math.floor(now / period)
local caps = {0, 0}
local c = redis.call('HGET', KEYS[1], 'c')
if c then
  local cw, c0, c1 = string.match(c, '^(%S+) (%S+) (%S+)$')
  cw = tonumber(cw)
  if cw == w then caps = {tonumber(c0), tonumber(c1)} elseif cw and cw + 1 == w then caps = {tonumber(c1), 0} end
end
redis.call('HDEL', KEYS[1], 'q:' .. (w - 1), 'q:' .. (w - 2))
local n = 1
if (w + 1) * period - now <= tonumber(ARGV[5]) then n = 2 end
local got
for i = 1, n do
  local v = w + i - 1
  local cap = math.max(caps[i], floor)
  local used = tonumber(redis.call('HGET', KEYS[1], 'u:' .. v)) or 0
  local q = tonumber(redis.call('HGET', KEYS[1], 'q:' .. v)) or 0
  local nq = math.max(q, math.min(want, cap - used))
  if nq > q then redis.call('HSET', KEYS[1], 'q:' .. v, nq) end
  got = math.min(got or nq, nq)
end
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'qd', (now + tonumber(ARGV[8])) .. ' ' .. ARGV[7])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return {tostring(got)}
