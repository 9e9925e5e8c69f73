-- held.lua: count the live slots of a key, changing nothing.
-- KEYS[1] the slot set (ZSET member = slot token, score = expiry in ms)
-- Reply: {live slots, ms until the soonest live slot expires (0: none)}.
-- A slot whose expiry equals the time is expired, as the other scripts
-- prune it (ZREMRANGEBYSCORE -inf now).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if n == 0 then
  return {0, 0}
end
local first = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {n, tonumber(first[2]) - now}
