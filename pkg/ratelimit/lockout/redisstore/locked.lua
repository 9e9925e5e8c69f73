-- locked.lua: how long a key stays locked out; reads, never writes.
-- KEYS[1] the key's lockout hash (see trip.lua)
-- Reply: ms left of the lockout, 0 when the key is not locked.
local u = tonumber(redis.call('HGET', KEYS[1], 'u'))
if not u then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= u then
  return 0
end
return u - now
