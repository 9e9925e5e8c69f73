-- Registers one replica until now + TTL and counts the live ones.
-- KEYS[1]: the fleet's sorted set, member = replica ID, score = expiry in ms.
-- ARGV[1]: replica ID, ARGV[2]: TTL in ms, ARGV[3]: now in ms, or "" to read
-- Redis's clock (so that replicas whose clocks disagree agree on expiry).
-- Reply: the number of live replicas, this one included.
local now = tonumber(ARGV[3])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
-- The set outlives its last member's expiry by nothing: once every replica
-- has stopped beating, it is gone.
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
