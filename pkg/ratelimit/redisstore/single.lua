-- single.lua: decide.lua for a request with exactly one limit, written
-- straight through for the two algorithms such requests use most (gcra and
-- fixed_window; the others run decide.lua), charged if admitted, or charged
-- always for fixed_window (envoyproxy/ratelimit's counting, which its users
-- get by default; other charge modes run decide.lua). The file holds two scripts
-- (script.go cuts them apart at the "-- >>> main" lines): "single" decides
-- one request, "batch" decides many in one call.
--
-- Why a second copy: EVALSHA runs a script's whole chunk on every call, so
-- decide.lua's helper closures, decider table, charge closures and reply
-- loop are built and collected per decision. Measured with
-- bench/scriptcost.sh's method (redis-benchmark, INFO commandstats), they
-- are about a third of Redis's time per call for one fixed_window limit.
--
-- Why a batch: Redis's fixed cost of a script call (finding it, setting up
-- KEYS and ARGV, TIME, turning the reply into RESP) is as large as the
-- decision itself; coalesced decisions bound for one standalone server share
-- it (a third less Redis CPU per decision; docs/benchmarks-redis.md). Each
-- decision in a batch runs under pcall, so one that fails (a key of the
-- wrong type, out of memory) answers with its own error and the others
-- stand, exactly as separate calls in a pipeline would. A cluster never gets
-- a batch: its keys would span slots.
--
-- single: KEYS, ARGV and the reply are decide.lua's, for one limit:
-- KEYS[1]; ARGV = hits, now ("" = Redis's clock), algorithm code, requests,
-- period (us), burst, and the charge mode if not 0 (only 2, always, with
-- fixed_window); reply {all_allowed, allowed, limit, remaining,
-- reset_after_us, retry_after_us}.
-- batch: KEYS[i] per decision; ARGV = now, then per decision hits,
-- algorithm code, requests, period (us), burst, charge mode (0 or 2); reply:
-- per decision the single reply, or an error.
--
-- The arithmetic is decide.lua's, line for line: TestScriptMatchesGoAlgorithms
-- holds both scripts to package ratelimit's algorithms. Change them together.

-- clock is now in microseconds and the floor of every TTL in ms: Redis's
-- clock, or a fixed instant (tests) whose keys must outlive real time.
local function clock(arg)
  if arg ~= '' then
    return tonumber(arg), 3600000
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), 1
end

-- A TTL in whole milliseconds, rounded up, as decide.lua's ms().
local function pttl(us, ttlFloor)
  return string.format('%.0f', math.max(math.floor((us + 999) / 1000), ttlFloor))
end

-- fixedWindowAlways is decide.lua's fixedWindow charging always: the hits
-- (a refund when negative, never below empty) are charged whatever the
-- limit says; admitted when the count after the charge is within it.
local function fixedWindowAlways(key, now, ttlFloor, hits, r, c, w, at, windowEnd)
  c = math.max(c + hits, 0)
  local allowed, retry = 1, 0
  if c > r then allowed, retry = 0, windowEnd - at end
  if hits ~= 0 then
    if c == 0 then
      redis.call('DEL', key)
    else
      redis.call('HSET', key, 'w', string.format('%.0f', w), 'c', string.format('%.0f', c))
      redis.call('PEXPIRE', key, pttl(windowEnd - now, ttlFloor))
    end
  end
  return {allowed, allowed, r, math.max(r - c, 0), windowEnd - at, retry}
end

local function decide(key, now, ttlFloor, hits, code, r, p, b, mode)
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
      redis.call('SET', key, string.format('%.0f', newTat), 'PX', pttl(newTat - now, ttlFloor))
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
    if mode == '2' then
      return fixedWindowAlways(key, now, ttlFloor, hits, r, c, w, at, windowEnd)
    end
    if c + hits > r then
      return {0, 0, r, math.max(r - c, 0), windowEnd - at, windowEnd - at}
    end
    if hits > 0 then
      redis.call('HSET', key, 'w', string.format('%.0f', w), 'c', string.format('%.0f', c + hits))
      if c == 0 then redis.call('PEXPIRE', key, pttl(windowEnd - now, ttlFloor)) end
    end
    return {1, 1, r, r - c - hits, windowEnd - at, 0}
  end

  return redis.error_reply('ERR single.lua: algorithm code ' .. tostring(code) .. ' is decide.lua\'s')
end

-- >>> main single
local now, ttlFloor = clock(ARGV[2])
return decide(KEYS[1], now, ttlFloor, tonumber(ARGV[1]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7])
-- <<< main single
-- >>> main batch
local now, ttlFloor = clock(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local a = 1 + (i - 1) * 6
  local ok, res = pcall(decide, KEYS[i], now, ttlFloor, tonumber(ARGV[a + 1]), ARGV[a + 2],
    tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), ARGV[a + 6])
  if ok or (type(res) == 'table' and res.err) then
    out[i] = res -- a reply, or redis.call's error
  else
    out[i] = redis.error_reply('ERR single.lua: ' .. tostring(res))
  end
end
return out
-- <<< main batch
