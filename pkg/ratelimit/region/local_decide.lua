-- Decides hits of one key in the region's own Redis against the region's
-- cap for the current window. KEYS[1]: the key's local hash. ARGV[1]: hits,
-- ARGV[2]: period in ms, ARGV[3]: floor in hits, ARGV[4]: key TTL in ms,
-- ARGV[5]: now in ms, or "" to read Redis's clock, ARGV[6]: charge mode:
-- "i" charge if admitted (all or none), "n" never charge (a check), "a"
-- always charge (a cost known after the fact; negative hits refund, never
-- below zero; allowed says whether the count is within the cap after it),
-- "r" reserve (admit when one hit is left, then charge all hits, which may
-- pass the cap by that one reservation; a refusal charges nothing).
-- Fields: "c" = "<window> <cap(window)> <cap(window+1)>" (written by the
-- exchanger, setcap.lua), "u:<window>" = hits admitted in that window,
-- "q:<window>" = hits reserved in that window for the region's RLQS
-- Envoys (local_quota.lua; they count against the cap as admitted hits
-- do), "a" = hits asked since the key was created (admitted or not: the
-- demand the exchanger reports). Admits all hits or none; a denial charges
-- nothing. Reply: {allowed (0/1), cap, remaining, reset ms}.
--
-- The file is the "decide" function and the single script's main; the
-- batch script (local_decide_batch.lua) is the same function and a main
-- that decides many keys in one call (coalesced decisions on one server).
local function decide(key, hits, period, floor, ttl, now, mode)
  local w = math.floor(now / period)
  local cap = 0
  local c = redis.call('HGET', key, 'c')
  if c then
    local cw, c0, c1 = string.match(c, '^(%S+) (%S+) (%S+)$')
    cw = tonumber(cw)
    if cw == w then cap = tonumber(c0) elseif cw and cw + 1 == w then cap = tonumber(c1) end
  end
  cap = math.max(cap, floor)
  local uf = 'u:' .. w
  local used = tonumber(redis.call('HGET', key, uf))
  if not used then
    used = 0
    redis.call('HDEL', key, 'u:' .. (w - 1), 'u:' .. (w - 2), 'q:' .. (w - 1), 'q:' .. (w - 2))
  end
  -- What the region's RLQS Envoys may admit in the window (q) is taken
  -- from the cap before any decision here: it counts as admitted.
  local q = tonumber(redis.call('HGET', key, 'q:' .. w)) or 0
  local allowed = 0
  if mode == 'a' then
    if hits > 0 then redis.call('HINCRBY', key, 'a', hits) end
    used = math.max(used + hits, 0)
    redis.call('HSET', key, uf, used)
    if q + used <= cap then allowed = 1 end
  elseif mode == 'r' then
    redis.call('HINCRBY', key, 'a', hits)
    if q + used + 1 <= cap then
      allowed = 1
      used = redis.call('HINCRBY', key, uf, hits)
    end
  else
    if mode == 'i' then redis.call('HINCRBY', key, 'a', hits) end
    if q + used + hits <= cap then
      allowed = 1
      if mode == 'i' then used = redis.call('HINCRBY', key, uf, hits) end
    end
  end
  redis.call('PEXPIRE', key, ttl)
  return {allowed, cap, math.max(cap - q - used, 0), (w + 1) * period - now}
end

-- clock is ARGV's now in ms, or Redis's clock when it is "".
local function clock(arg)
  local now = tonumber(arg)
  if now then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- >>> main
return decide(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
  clock(ARGV[5]), ARGV[6])
