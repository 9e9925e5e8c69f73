-- complete.lua: store the response of a held lease (compare-and-set on the
-- owner token) and keep it for the record TTL.
-- KEYS[1]  the record   ARGV[1] owner token   ARGV[2] record TTL in ms
-- ARGV[3]  status       ARGV[4] encoded headers
-- ARGV[5]  body         ARGV[6] body encoding ('' or 'gzip')
-- Reply: 1 stored | 0 lease lost (gone, completed, or another owner's).
local key = KEYS[1]
local rec = redis.call('HMGET', key, 'st', 'tok')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', key, 'st', 'c', 'status', ARGV[3], 'hdr', ARGV[4], 'body', ARGV[5], 'enc', ARGV[6])
redis.call('PEXPIRE', key, ARGV[2])
return 1
