-- decide.lua: decides every limit of one rate-limit request, all or none.
--
-- KEYS[i] holds the state of limit i; all keys share one hash tag, so the
-- script runs unchanged on Redis Cluster.
-- ARGV[1] = hits (0 checks without charging; negative only when charging
--           always: a refund)
-- ARGV[2] = now in microseconds, or "" to read Redis's clock (production
--           always sends ""; a fixed instant is for tests only)
-- ARGV[3 + 4*(i-1) .. 6 + 4*(i-1)] = algorithm code, requests, period (us), burst
-- ARGV[3 + 4*#KEYS] = charge mode, optional: absent or 0 charges the hits
--           only when every limit admits them, 1 never charges them, 2
--           charges them to every limit whatever it decides (see
--           ratelimit.ChargeMode; the "always" branches mirror charge.go),
--           3 admits on one hit and charges the admitted hits whatever the
--           limits say (a reservation taken with its check, in this one
--           call: see reserve below)
-- The layout and the algorithm codes are mirrored by constants in script.go:
-- change both together.
--
-- Reply: {all_allowed, then per limit: allowed, limit, remaining,
-- reset_after_us, retry_after_us}, integers only.
--
-- Every number is an integer held in a Lua double (exact below 2^53, and
-- microsecond timestamps are ~2^51). Numbers sent to Redis go through fmt():
-- Lua's tostring keeps only 14 significant digits.

local function fmt(n) return string.format('%.0f', n) end
local function floor(n) return math.floor(n) end
local function max(a, b) if a > b then return a end return b end

local hits = tonumber(ARGV[1])
local CHARGE_NEVER, CHARGE_ALWAYS, CHARGE_RESERVE = 1, 2, 3
local charge = tonumber(ARGV[3 + 4 * #KEYS]) or 0
local now
-- Fixed instants (tests) move only when the test says so, while Redis
-- expires keys by its real clock: keys then live at least an hour. Every
-- decider ignores stale state, so a key that outlives its state is harmless.
local ttlFloor = 1
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
  ttlFloor = 3600000
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- ms rounds a positive duration in microseconds up to whole milliseconds.
local function ms(us) return fmt(max(floor((us + 999) / 1000), ttlFloor)) end

-- Each decider returns {allowed, limit, remaining, reset, retry} and a
-- function that charges the hits, called only when every limit admits.
-- deciders[code] is the decider of an algorithm code (algCodes in script.go).
-- Each decider sits between "-- >>> alg NAME" and "-- <<< alg NAME" lines:
-- script.go also builds one script per algorithm by dropping the others'
-- blocks, so Redis does not build four closures per call to use one.
local deciders = {}

-- >>> alg gcra
-- gcra: one string, the theoretical arrival time (TAT) in microseconds.

-- gcraAlways moves TAT by hits whatever the outcome, never before now.
local function gcraAlways(key, r, b, t, dvt, tat)
  local newTat = max(tat + hits * t, now)
  local used = newTat - now
  local allowed, retry = 1, 0
  if used > dvt then allowed, retry = 0, newTat + t - dvt - now end
  return {allowed, max(r, b), max(floor((dvt - used) / t), 0), used, retry}, function()
    if used > 0 then
      redis.call('SET', key, fmt(newTat), 'PX', ms(used))
    else
      redis.call('DEL', key)
    end
  end
end

local function gcra(key, r, p, b)
  if b == 0 then b = r end
  local t = max(floor(p / r), 1)
  local dvt = t * b
  local tat = tonumber(redis.call('GET', key)) or now
  tat = max(tat, now)
  if charge == CHARGE_ALWAYS then return gcraAlways(key, r, b, t, dvt, tat) end
  local newTat = tat + hits * t
  local allowAt = newTat - dvt
  local limit = max(r, b)
  if now < allowAt then
    local rem = max(floor((dvt - (tat - now)) / t), 0)
    return {0, limit, rem, tat - now, allowAt - now}, nil
  end
  local rem = floor((dvt - (newTat - now)) / t)
  return {1, limit, rem, newTat - now, 0}, function()
    redis.call('SET', key, fmt(newTat), 'PX', ms(newTat - now))
  end
end
deciders[1] = gcra
-- <<< alg gcra

-- The window algorithms keep a hash: F_WINDOW = index of the counted window
-- (floor(now / period)), F_COUNT = its hits, F_PREV = the previous window's
-- hits (sliding_window only). Field names: see fieldWindow... in script.go.
local F_WINDOW, F_COUNT, F_PREV = 'w', 'c', 'p'

-- windowOf returns the instant to decide at and its window index. When the
-- stored window is later than now's (Redis's clock stepped back, e.g. after
-- a failover), time is treated as not having passed: the start of the stored
-- window, keeping its count in force.
local function windowOf(stored, p)
  local w = floor(now / p)
  if stored ~= nil and stored > w then return stored * p, stored end
  return now, w
end

-- >>> alg fixed_window
-- fixed_window: hits counted per window aligned to the epoch.
local function fixedWindow(key, r, p)
  local got = redis.call('HMGET', key, F_WINDOW, F_COUNT)
  local sw = tonumber(got[1])
  local at, w = windowOf(sw, p)
  local c = 0
  if sw == w then c = tonumber(got[2]) or 0 end
  local windowEnd = (w + 1) * p
  if charge == CHARGE_ALWAYS then
    c = max(c + hits, 0)
    local allowed, retry = 1, 0
    if c > r then allowed, retry = 0, windowEnd - at end
    return {allowed, r, max(r - c, 0), windowEnd - at, retry}, function()
      if c == 0 then return redis.call('DEL', key) end
      redis.call('HSET', key, F_WINDOW, fmt(w), F_COUNT, fmt(c))
      redis.call('PEXPIRE', key, ms(windowEnd - now))
    end
  end
  if c + hits > r then
    return {0, r, max(r - c, 0), windowEnd - at, windowEnd - at}, nil
  end
  return {1, r, r - c - hits, windowEnd - at, 0}, function()
    redis.call('HSET', key, F_WINDOW, fmt(w), F_COUNT, fmt(c + hits))
    -- The window's first charge sets the expiry at its end; later charges
    -- in the same window would set the same instant again.
    if c == 0 then redis.call('PEXPIRE', key, ms(windowEnd - now)) end
  end
end
deciders[4] = fixedWindow
-- <<< alg fixed_window

-- >>> alg sliding_window
-- sliding_window: the current window's count plus the previous one's,
-- weighted by how much of it the rolling window still overlaps.
local function slidingWindow(key, r, p)
  local got = redis.call('HMGET', key, F_WINDOW, F_COUNT, F_PREV)
  local sw = tonumber(got[1])
  local at, w = windowOf(sw, p)
  local cur, prev = 0, 0
  if sw == w then
    cur, prev = tonumber(got[2]) or 0, tonumber(got[3]) or 0
  elseif sw == w - 1 then
    prev = tonumber(got[2]) or 0
  end
  local elapsed = at - w * p
  local est = floor(prev * (p - elapsed) / p) + cur
  local function reset(c)
    if c > 0 then return 2 * p - elapsed end
    if prev > 0 then return p - elapsed end
    return 0
  end
  local function retryAfter(h)
    if h > r then
      return 2 * p - elapsed
    elseif r - cur - h >= 0 and prev > 0 then
      return max(math.ceil(p - (r - cur - h) * p / prev) - elapsed, 1)
    end
    return (p - elapsed) + max(math.ceil(p - (r - h) * p / cur), 0)
  end
  if charge == CHARGE_ALWAYS then
    -- A refund takes from this window first, then from the previous one.
    cur = cur + hits
    if cur < 0 then prev, cur = max(prev + cur, 0), 0 end
    est = floor(prev * (p - elapsed) / p) + cur
    local allowed, retry = 1, 0
    if est > r then allowed, retry = 0, retryAfter(1) end
    return {allowed, r, max(r - est, 0), reset(cur), retry}, function()
      if cur == 0 and prev == 0 then return redis.call('DEL', key) end
      redis.call('HSET', key, F_WINDOW, fmt(w), F_COUNT, fmt(cur), F_PREV, fmt(prev))
      redis.call('PEXPIRE', key, ms((w + 2) * p - now))
    end
  end
  if est + hits > r then
    return {0, r, max(r - est, 0), reset(cur), retryAfter(hits)}, nil
  end
  return {1, r, r - est - hits, reset(cur + hits), 0}, function()
    redis.call('HSET', key, F_WINDOW, fmt(w), F_COUNT, fmt(cur + hits), F_PREV, fmt(prev))
    redis.call('PEXPIRE', key, ms((w + 2) * p - now))
  end
end
deciders[3] = slidingWindow
-- <<< alg sliding_window

-- >>> alg sliding_log
-- sliding_log: a sorted set of admitted hits scored by their time; members
-- "<now>#<index>" are unique per key without any global counter: index
-- counts on from the highest index already at this exact instant (a clock
-- that stepped back can return to one), so a new member never names an
-- existing one, which ZADD would only rescore. Not from how many there are:
-- forced charges (charging always) trim and refund by rank, which can leave
-- gaps in the indices at one instant. Members written as "<now>:<index>"
-- (an older scheme) never collide with these.
local function addHits(key, k)
  local score = fmt(now)
  local first = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, score, score)) do
    local i = tonumber(string.match(m, '#(%d+)$'))
    if i ~= nil and i >= first then first = i + 1 end
  end
  -- ZADD in chunks: unpack() is bounded by the Lua C stack.
  local i = 0
  while i < k do
    local args = {}
    local stop = math.min(i + 500, k)
    while i < stop do
      args[#args + 1] = score
      args[#args + 1] = score .. '#' .. fmt(first + i)
      i = i + 1
    end
    redis.call('ZADD', key, unpack(args))
  end
end

-- slidingLogAlways logs hits at now whatever the outcome and keeps the
-- newest r (no decision looks further back); a refund removes the newest.
-- It writes at once: charging always, the final loop would anyway.
local function slidingLogAlways(key, r, p, floorScore, n)
  local total = max(n + hits, 0)
  if hits ~= 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - p))
    if hits > 0 then
      addHits(key, math.min(hits, r))
      redis.call('ZREMRANGEBYRANK', key, 0, -(r + 1))
    elseif n > 0 then -- (Redis reads "-0" as no integer)
      redis.call('ZREMRANGEBYRANK', key, -math.min(-hits, n), -1)
    end
    n = redis.call('ZCARD', key)
  end
  local reset, retry, allowed = 0, 0, 1
  if n > 0 then
    reset = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) + p - now
    if hits ~= 0 then redis.call('PEXPIRE', key, ms(reset)) end
  end
  if total > r then
    allowed = 0
    local oldest = redis.call('ZRANGEBYSCORE', key, floorScore, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    retry = tonumber(oldest[2]) + p - now
  end
  return {allowed, r, max(r - total, 0), reset, retry}, function() end
end

local function slidingLog(key, r, p)
  local floorScore = '(' .. fmt(now - p)
  local n = redis.call('ZCOUNT', key, floorScore, '+inf')
  if charge == CHARGE_ALWAYS then return slidingLogAlways(key, r, p, floorScore, n) end
  local function reset()
    if n == 0 then return 0 end
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    return tonumber(newest[2]) + p - now
  end
  if hits > r then
    return {0, r, max(r - n, 0), reset(), p}, nil
  end
  if n + hits > r then
    local idx = n + hits - r - 1
    local e = redis.call('ZRANGEBYSCORE', key, floorScore, '+inf', 'WITHSCORES', 'LIMIT', idx, 1)
    return {0, r, max(r - n, 0), reset(), tonumber(e[2]) + p - now}, nil
  end
  local resetAfter = reset()
  -- The newest entry is now's, unless the clock stepped back.
  if hits > 0 then resetAfter = max(resetAfter, p) end
  return {1, r, r - n - hits, resetAfter, 0}, function()
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - p))
    addHits(key, hits)
    redis.call('PEXPIRE', key, ms(resetAfter))
  end
end
deciders[2] = slidingLog
-- <<< alg sliding_log

-- decideAll runs every limit's decider: the reply, and each limit's
-- function that charges its hits.
local function decideAll()
  local out, writes = {1}, {}
  for i = 1, #KEYS do
    local a = 3 + 4 * (i - 1)
    local decide = deciders[tonumber(ARGV[a])]
    if decide == nil then return redis.error_reply('ERR unknown algorithm code ' .. ARGV[a]), nil end
    local res, write = decide(KEYS[i], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]))
    if res[1] == 0 then out[1] = 0 end
    writes[i] = write
    for j = 1, 5 do out[#out + 1] = res[j] end
  end
  return out, writes
end

-- reserve (charge mode 3): every limit is checked on one hit, nothing
-- written; a refusal answers those checks. Admitted, the hits are charged
-- to every limit as charging always does, and each limit reports the state
-- after the charge, admitted even when it ends over (by this reservation).
-- Mirrors ratelimit's reserve (decide.go).
local function reserve()
  local full = hits
  hits, charge = 1, 0
  local out = decideAll()
  hits, charge = full, CHARGE_ALWAYS
  if out.err or out[1] == 0 then return out end
  local writes
  out, writes = decideAll()
  if out.err then return out end
  out[1] = 1
  for i = 0, #KEYS - 1 do
    out[2 + 5 * i], out[6 + 5 * i] = 1, 0
  end
  if hits ~= 0 then
    for i = 1, #writes do writes[i]() end
  end
  return out
end

if charge == CHARGE_RESERVE then return reserve() end

local out, charges = decideAll()
if out.err then return out end
-- Charge the hits: to every limit when charging always, to all or none
-- otherwise, and never when told not to.
if hits ~= 0 and (charge == CHARGE_ALWAYS or charge == 0 and out[1] == 1) then
  for i = 1, #charges do charges[i]() end
end
return out
