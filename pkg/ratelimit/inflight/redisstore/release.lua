-- release.lua: free a live slot.
-- KEYS[1] the slot set   ARGV[1] slot token
-- Reply: 1 released | 0 already released or expired. Expired slots are
-- pruned first, so an expired token reports 0 as in the memory store. The
-- key's TTL may now outlast its slots by a little; it still ends.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZREM', KEYS[1], ARGV[1])
