-- acquire.lua: take one of ARGV[2] slots of the key if fewer are live.
-- KEYS[1] the slot set (ZSET member = slot token, score = expiry in ms)
-- ARGV[1] slot token   ARGV[2] limit   ARGV[3] slot ttl in ms
-- Reply: {1, in flight after, 0} acquired | {0, in flight, ms until the
-- soonest slot expires} over the limit.
-- The clock is Redis TIME, so replicas' clocks never disagree.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[2]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, n, tonumber(first[2]) - now}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
-- the key lives as long as its longest slot, so idle keys vanish
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]))
return {1, n + 1, 0}
