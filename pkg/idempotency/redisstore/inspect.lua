-- inspect.lua: describe one idempotency record and, when asked, delete it.
-- KEYS[1]  the record   ARGV[1] '' inspect | 'del' delete unless in progress |
--          'force' delete whatever its state
-- Reply: {} no record | {deleted, pttl_ms, st, tok, fp, status, hdr, body, enc, ref}
-- deleted is 1 when the record was deleted, 0 otherwise (an in-progress
-- record is kept unless forced). Field names: see script.go.
local key = KEYS[1]
local rec = redis.call('HMGET', key, 'st', 'tok', 'fp', 'status', 'hdr', 'body', 'enc', 'ref')
if not rec[1] then return {} end
local pttl = redis.call('PTTL', key)
local deleted = 0
if ARGV[1] == 'force' or (ARGV[1] == 'del' and rec[1] ~= 'p') then
  redis.call('DEL', key)
  deleted = 1
end
local out = {deleted, pttl}
for i = 1, 8 do out[#out + 1] = rec[i] or '' end
return out
