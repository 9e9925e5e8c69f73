-- Marks one client's live grant of one bucket as an orphan left to a peer
-- (quota.GrantStore.OrphanGrant), keeping its rate and expiry.
-- KEYS[1]: the bucket's grants hash. ARGV[1]: client ID, ARGV[2]: the peer,
-- ARGV[3]: now in ms, or "" to read Redis's clock.
-- A grant is "<expiry ms> <rate>" (grant.lua); an orphan is that and
-- " <peer>". Nothing to mark (no grant, expired, malformed): returns 0.
local now = tonumber(ARGV[3])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local v = redis.call('HGET', KEYS[1], ARGV[1])
local e1 = v and string.find(v, ' ', 1, true)
local expiry = e1 and tonumber(string.sub(v, 1, e1 - 1))
if not expiry or expiry <= now then
  return 0
end
local e2 = string.find(v, ' ', e1 + 1, true)
local head = e2 and string.sub(v, 1, e2 - 1) or v
redis.call('HSET', KEYS[1], ARGV[1], head .. ' ' .. ARGV[2])
return 1
