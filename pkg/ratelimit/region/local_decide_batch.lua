-- The batch script's main, after local_decide.lua's functions (local.go
-- joins them): KEYS[i] per decision; ARGV[1] = now in ms or "" (read once
-- for the whole batch), then per decision the single script's ARGV[1..4]
-- and ARGV[6] (hits, period ms, floor, key TTL ms, mode). Reply: per
-- decision the single reply, or its own error (one key of the wrong type
-- fails alone, as separate calls in a pipeline would).
local now = clock(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local a = 1 + (i - 1) * 5
  local ok, res = pcall(decide, KEYS[i], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
    tonumber(ARGV[a + 4]), now, ARGV[a + 5])
  if ok or (type(res) == 'table' and res.err) then
    out[i] = res
  else
    out[i] = redis.error_reply('ERR local_decide_batch.lua: ' .. tostring(res))
  end
end
return out
