-- Moves one region's grants of one key towards what it wants, never past
-- the room the others leave; with a demand, records it first and returns
-- the key's live demands and grants too (an exchange step in one round
-- trip). KEYS[1]: the key's global hash. ARGV[1]: region, ARGV[2]: limit
-- per window, ARGV[3]: period in ms, ARGV[4]: lease in ms, ARGV[5]: floor
-- in hits, ARGV[6]: the configured regions, comma-separated, ARGV[7],
-- ARGV[8]: wanted budget for the current and the next window, ARGV[12]: the
-- window index ARGV[7] is for (ARGV[8] is for the one after; a window the
-- caller named no value for keeps its grant, so a call that crosses a
-- window boundary never applies a value to the wrong window), ARGV[9]: the
-- generation the caller read (a shrink applies only if the record is still
-- that one), ARGV[10]: key TTL in ms, ARGV[11]: now in ms, or "" to read
-- Redis's clock, ARGV[13] (optional): the region's demand (hits per window,
-- "inf" when not measured yet), ARGV[14]: demand TTL in ms (both "" for a
-- call that reports nothing), ARGV[15] (optional): what the window after
-- ARGV[12]'s next may grow to (never shrink) when the call lands a window
-- later than it was asked for: a step that crosses a window boundary still
-- grants its new next window. A call with a demand deletes the expired
-- ones before it divides.
--
-- Fields: "d:<region>" = "<expiry ms> <demand>", "g:<region>" = "<gen>
-- <window> <budget(window)> <budget(window+1)>".
--
-- Invariant kept, for every window x: the sum over regions of
-- max(budget(x), floor) <= limit. A grow takes at most limit minus the
-- others' max(budget, floor); a shrink only lowers. The next window is
-- granted only within lease of its start. Reply: {window, gen, budget
-- (window), budget(window+1)} as strings; with a demand, followed by now
-- and every field and value of the hash after the call.
local now = tonumber(ARGV[11])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local me = ARGV[1]
local limit, period, lease, floor = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local w = math.floor(now / period)
local horizon = 1
if (w + 1) * period - now <= lease then horizon = 2 end

local reporting = ARGV[13] ~= nil and ARGV[13] ~= ''
if reporting then
  redis.call('HSET', KEYS[1], 'd:' .. me, (now + tonumber(ARGV[14])) .. ' ' .. ARGV[13])
end

local recs, regions = {}, {}
for r in string.gmatch(ARGV[6], '[^,]+') do regions[r] = true end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  local kind, r = string.sub(f, 1, 2), string.sub(f, 3)
  if kind == 'd:' and reporting then
    local exp = tonumber(string.match(v, '^(%S+)'))
    if not exp or exp <= now then
      redis.call('HDEL', KEYS[1], f)
      kind = ''
    end
  end
  if kind == 'd:' or kind == 'g:' then regions[r] = true end
  if kind == 'g:' then
    local g, rw, b0, b1 = string.match(v, '^(%S+) (%S+) (%S+) (%S+)$')
    if g then
      recs[r] = {gen = tonumber(g), w = tonumber(rw), b0 = tonumber(b0), b1 = tonumber(b1)}
    end
  end
end

local function budget(rec, x)
  if not rec then return 0 end
  if x == rec.w then return rec.b0 end
  if x == rec.w + 1 then return rec.b1 end
  return 0
end

local own = recs[me]
local gen = 0
if own then gen = own.gen end
local wc = tonumber(ARGV[12])
local afterNext = tonumber(ARGV[15] or "")
local function wanted(x, keep)
  if x == wc then return tonumber(ARGV[7]) end
  if x == wc + 1 then return tonumber(ARGV[8]) end
  -- No local cap was lowered for this window: grow only.
  if x == wc + 2 and afterNext then return math.max(keep, afterNext) end
  return keep
end
local cur, new = {}, {}
for i = 1, 2 do
  local x = w + i - 1
  cur[i] = budget(own, x)
  new[i] = cur[i]
  local want = wanted(x, cur[i])
  if i <= horizon then
    if want > cur[i] then
      local others = 0
      for r in pairs(regions) do
        if r ~= me then others = others + math.max(budget(recs[r], x), floor) end
      end
      new[i] = math.max(cur[i], math.min(want, limit - others))
    elseif want < cur[i] and tonumber(ARGV[9]) == gen then
      new[i] = math.max(want, 0)
    end
  end
end
-- Every call moves the generation on, changed or not: a shrink read
-- before this call (a replica whose lease lapsed) must not land after it,
-- since the caller mirrors this reply into its local caps next.
gen = gen + 1
redis.call('HSET', KEYS[1], 'g:' .. me, gen .. ' ' .. w .. ' ' .. new[1] .. ' ' .. new[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[10]))
local out = {tostring(w), tostring(gen), tostring(new[1]), tostring(new[2])}
if reporting then
  out[#out + 1] = tostring(now)
  local after = redis.call('HGETALL', KEYS[1])
  for i = 1, #after do out[#out + 1] = after[i] end
end
return out
