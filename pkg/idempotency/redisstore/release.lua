-- release.lua: delete a held lease (compare-and-delete on the owner token)
-- so that a retry runs again.
-- KEYS[1]  the record   ARGV[1] owner token
-- Reply: 1 released (or already free: a re-sent release) | 0 lease lost.
local rec = redis.call('HMGET', KEYS[1], 'st', 'tok')
if not rec[1] then
  return 1
end
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
