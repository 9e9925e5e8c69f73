-- Records one region's demand for one key and returns every live demand and
-- grant of the key. KEYS[1]: the key's global hash. ARGV[1]: region,
-- ARGV[2]: demand (hits per window, "inf" when not measured yet), ARGV[3]:
-- demand TTL in ms, ARGV[4]: key TTL in ms, ARGV[5]: now in ms, or "" to
-- read Redis's clock. Fields: "d:<region>" = "<expiry ms> <demand>",
-- "g:<region>" = "<gen> <window> <budget(window)> <budget(window+1)>".
-- Reply: {now, field, value, field, value, ...} as strings; expired demands
-- are deleted on the way.
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
redis.call('HSET', KEYS[1], 'd:' .. ARGV[1], (now + tonumber(ARGV[3])) .. ' ' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
local all = redis.call('HGETALL', KEYS[1])
local out = {tostring(now)}
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if string.sub(f, 1, 2) == 'd:' then
    local exp = tonumber(string.match(v, '^(%S+)'))
    if not exp or exp <= now then
      redis.call('HDEL', KEYS[1], f)
    else
      out[#out + 1] = f
      out[#out + 1] = v
    end
  else
    out[#out + 1] = f
    out[#out + 1] = v
  end
end
return out
