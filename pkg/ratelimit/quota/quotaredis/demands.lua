-- Returns the live demands of one bucket and deletes the expired ones.
-- KEYS[1]: the bucket's hash. ARGV[1]: now in ms, or "" to read Redis's
-- clock. Reply: a flat array client ID, demand, client ID, demand...
-- Values are "<expiry ms> <demand>" (report.lua); a value in any other
-- shape is deleted like an expired one.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local all = redis.call('HGETALL', KEYS[1])
local live, dead = {}, {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sp = string.find(v, ' ', 1, true)
  local expiry = sp and tonumber(string.sub(v, 1, sp - 1))
  if expiry and expiry > now then
    live[#live + 1] = all[i]
    live[#live + 1] = string.sub(v, sp + 1)
  else
    dead[#dead + 1] = all[i]
  end
end
-- HDEL in chunks: unpack of a very long list overflows Lua's stack.
for i = 1, #dead, 1000 do
  redis.call('HDEL', KEYS[1], unpack(dead, i, math.min(i + 999, #dead)))
end
return live
