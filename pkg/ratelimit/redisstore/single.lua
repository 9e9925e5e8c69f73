-- single.lua: decide.lua for a request with exactly one limit, written
-- straight through for the two algorithms such requests use most (gcra and
-- fixed_window; the others run decide.lua).
--
-- Why a second copy: EVALSHA runs a script's whole chunk on every call, so
-- decide.lua's helper closures, decider table, charge closures and reply
-- loop are built and collected per decision. Measured with
-- bench/scriptcost.sh's method (redis-benchmark, INFO commandstats), they
-- are about a third of Redis's time per call for one fixed_window limit.
--
-- KEYS, ARGV and the reply are decide.lua's, for one limit:
-- KEYS[1]; ARGV = hits, now ("" = Redis's clock), algorithm code, requests,
-- period (us), burst; reply {all_allowed, allowed, limit, remaining,
-- reset_after_us, retry_after_us}. The arithmetic is decide.lua's, line for
-- line: TestScriptMatchesGoAlgorithms holds both scripts to package
-- ratelimit's algorithms. Change them together.

local hits = tonumber(ARGV[1])
local now, ttlFloor
if ARGV[2] ~= '' then
  now, ttlFloor = tonumber(ARGV[2]), 3600000
else
  local t = redis.call('TIME')
  now, ttlFloor = tonumber(t[1]) * 1000000 + tonumber(t[2]), 1
end
local key, code = KEYS[1], ARGV[3]
local r, p, b = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])

-- A TTL in whole milliseconds, rounded up, as decide.lua's ms().
local function pttl(us)
  return string.format('%.0f', math.max(math.floor((us + 999) / 1000), ttlFloor))
end

if code == '1' then -- gcra
  if b == 0 then b = r end
  local t = math.max(math.floor(p / r), 1)
  local dvt = t * b
  local tat = math.max(tonumber(redis.call('GET', key)) or now, now)
  local newTat = tat + hits * t
  local allowAt = newTat - dvt
  local limit = math.max(r, b)
  if now < allowAt then
    return {0, 0, limit, math.max(math.floor((dvt - (tat - now)) / t), 0), tat - now, allowAt - now}
  end
  if hits > 0 then
    redis.call('SET', key, string.format('%.0f', newTat), 'PX', pttl(newTat - now))
  end
  return {1, 1, limit, math.floor((dvt - (newTat - now)) / t), newTat - now, 0}
end

if code == '4' then -- fixed_window
  local got = redis.call('HMGET', key, 'w', 'c')
  local sw = tonumber(got[1])
  local at, w = now, math.floor(now / p)
  if sw ~= nil and sw > w then at, w = sw * p, sw end
  local c = 0
  if sw == w then c = tonumber(got[2]) or 0 end
  local windowEnd = (w + 1) * p
  if c + hits > r then
    return {0, 0, r, math.max(r - c, 0), windowEnd - at, windowEnd - at}
  end
  if hits > 0 then
    redis.call('HSET', key, 'w', string.format('%.0f', w), 'c', string.format('%.0f', c + hits))
    if c == 0 then redis.call('PEXPIRE', key, pttl(windowEnd - now)) end
  end
  return {1, 1, r, r - c - hits, windowEnd - at, 0}
end

return redis.error_reply('ERR single.lua: algorithm code ' .. code .. ' is decide.lua\'s')
