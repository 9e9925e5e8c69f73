-- begin.lua: take the lease of one idempotency key, or report what holds it.
-- KEYS[1]  the record (a hash)
-- ARGV[1]  new owner token   ARGV[2] request fingerprint (hex)
-- ARGV[3]  lease TTL in ms
-- Reply: {1} acquired | {2, status, headers, body, encoding, ref} replay |
--        {3, pttl_ms} in progress | {4} fingerprint mismatch |
--        {5, status} completed, not replayable.
-- Field names and codes are mirrored by constants in script.go.
local key = KEYS[1]
local rec = redis.call('HMGET', key, 'st', 'fp', 'tok')
local st, fp, tok = rec[1], rec[2], rec[3]
if not st then
  -- Free (or a stray hash without a state, which is overwritten whole).
  redis.call('DEL', key)
  redis.call('HSET', key, 'st', 'p', 'tok', ARGV[1], 'fp', ARGV[2])
  redis.call('PEXPIRE', key, ARGV[3])
  return {1}
end
if st == 'p' and tok == ARGV[1] then
  -- This very Begin, re-sent after its reply was lost: the lease is ours.
  return {1}
end
if fp ~= ARGV[2] then
  return {4}
end
if st == 'p' then
  local ttl = redis.call('PTTL', key)
  if ttl < 1 then ttl = 1 end
  return {3, ttl}
end
if st == 'n' then
  return {5, redis.call('HGET', key, 'status')}
end
local r = redis.call('HMGET', key, 'status', 'hdr', 'body', 'enc', 'ref')
return {2, r[1], r[2], r[3], r[4], r[5] or ''}
