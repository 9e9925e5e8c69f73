-- renew.lua: extend a held lease (compare-and-set on the owner token).
-- KEYS[1]  the record   ARGV[1] owner token   ARGV[2] lease TTL in ms
-- Reply: 1 renewed | 0 lease lost.
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
