-- complete.lua: store the response of a held lease (compare-and-set on the
-- owner token) and keep it for the record TTL.
-- KEYS[1]  the record   ARGV[1] owner token   ARGV[2] record TTL in ms
-- ARGV[3]  state: 'c' (replayable) or 'n' (ran, not replayable)
-- ARGV[4]  status       ARGV[5] encoded headers
-- ARGV[6]  body         ARGV[7] body encoding ('' or 'gzip')
-- ARGV[8]  encoded body reference ('' when the body is inline)
-- ARGV[9]  digest of ARGV[3..8]
-- Reply: 1 stored (or already stored by this very call, re-sent) |
--        0 lease lost (gone, another owner's, or completed differently).
local key = KEYS[1]
local rec = redis.call('HMGET', key, 'st', 'tok', 'rd')
if rec[2] == ARGV[1] and (rec[1] == 'c' or rec[1] == 'n') then
  if rec[3] == ARGV[9] then return 1 end
  return 0
end
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', key, 'st', ARGV[3], 'status', ARGV[4], 'hdr', ARGV[5], 'body', ARGV[6],
  'enc', ARGV[7], 'ref', ARGV[8], 'rd', ARGV[9])
redis.call('PEXPIRE', key, ARGV[2])
return 1
