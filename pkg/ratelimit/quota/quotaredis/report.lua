-- Records one client's demand for one bucket.
-- KEYS[1]: the bucket's hash. ARGV[1]: client ID (the field), ARGV[2]: the
-- demand as Go formats it, ARGV[3]: TTL in ms, ARGV[4]: now in ms, or "" to
-- read Redis's clock.
-- The field's value is "<expiry ms> <demand>": demands.lua and store.go
-- parse that layout (sep in store.go).
local now = tonumber(ARGV[4])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl = tonumber(ARGV[3])
local demand = ARGV[2]
-- An unknown demand ('+Inf', unknownArg in store.go) does not replace a
-- known one that is still live: it only extends it.
if demand == '+Inf' then
  local old = redis.call('HGET', KEYS[1], ARGV[1])
  local sp = old and string.find(old, ' ', 1, true)
  local expiry = sp and tonumber(string.sub(old, 1, sp - 1))
  if expiry and expiry > now and string.sub(old, sp + 1) ~= '+Inf' then
    demand = string.sub(old, sp + 1)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now + ttl) .. ' ' .. demand)
-- The key outlives its newest field, so a bucket nobody reports any more
-- disappears by itself; only ever extended, never shortened.
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
