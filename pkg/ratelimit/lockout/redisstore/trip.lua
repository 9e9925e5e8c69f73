-- trip.lua: count one trip of a key and lock it out, unless it is locked.
-- KEYS[1] the key's lockout hash: n (trips), d (latest lockout, ms),
--         u (when it ends, ms on Redis TIME)
-- ARGV[1] initial ms   ARGV[2] factor   ARGV[3] max ms   ARGV[4] forget ms
-- Reply: {lockout ms, trips}: the new lockout, or the time left of the
-- current one (then nothing changes: in-flight requests that fail during
-- a lockout are the same offence, not new ones).
-- The next lockout mirrors lockout.Policy.Next (same float64 arithmetic).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st = redis.call('HMGET', KEYS[1], 'n', 'd', 'u')
local n, d, u = tonumber(st[1]) or 0, tonumber(st[2]) or 0, tonumber(st[3]) or 0
if now < u then
  return {u - now, n}
end
local initial, factor, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if d <= 0 then
  d = initial
else
  d = math.floor(d * factor)
  if d >= cap then d = cap elseif d < initial then d = initial end
end
n = n + 1
u = now + d
redis.call('HSET', KEYS[1], 'n', n, 'd', d, 'u', u)
-- the trips are forgotten (the key vanishes) forget ms after the lockout ends
redis.call('PEXPIREAT', KEYS[1], u + tonumber(ARGV[4]))
return {d, n}
