-- reset.lua: resets one limit's state, keeping charged the tokens that
-- allotment leases recorded in its ledger (lease.lua) and that may still
-- be used: the holders use them without asking Redis, so a state that
-- forgot them would let the fleet admit the limit plus those tokens.
--
-- KEYS[1] = the limit's state, KEYS[2] = its ledger (same hash tag).
-- ARGV = algorithm code, requests, period (us), now ("" = Redis's clock).
-- Reply: the tokens kept charged. A limit without a ledger (exact mode)
-- is simply deleted. The ledger stays: a second reset keeps its tokens too.
local code, r, p = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now, ttlFloor
if ARGV[4] ~= '' then
  now, ttlFloor = tonumber(ARGV[4]), 3600000
else
  local t = redis.call('TIME')
  now, ttlFloor = tonumber(t[1]) * 1000000 + tonumber(t[2]), 1
end
local function ms(us) return string.format('%.0f', math.max(math.floor((us + 999) / 1000), ttlFloor)) end

-- The window in force: now's, or a later stored one (Redis's clock
-- stepped back; decide.lua's windowOf).
local windows = code == 3 or code == 4 -- sliding_window, fixed_window
local w = math.floor(now / p)
if windows then
  local sw = tonumber(redis.call('HGET', KEYS[1], 'w'))
  if sw and sw > w then w = sw end
end

local held = 0
local fields = redis.call('HGETALL', KEYS[2])
for i = 2, #fields, 2 do
  local n, mark = string.match(fields[i], '^(%d+):(%-?%d+)$')
  n, mark = tonumber(n), tonumber(mark)
  if n and ((code == 1 and mark > now) or (windows and mark == w)) then
    held = held + n
  end
end

redis.call('DEL', KEYS[1])
if held == 0 then return 0 end
if code == 1 then -- gcra: the held tokens as cells from now
  local tat = now + held * math.max(math.floor(p / r), 1)
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', ms(tat - now))
elseif code == 4 then -- fixed_window
  redis.call('HSET', KEYS[1], 'w', string.format('%.0f', w), 'c', string.format('%.0f', held))
  redis.call('PEXPIRE', KEYS[1], ms((w + 1) * p - now))
elseif code == 3 then -- sliding_window: counted in the current window, nothing before it
  redis.call('HSET', KEYS[1], 'w', string.format('%.0f', w), 'c', string.format('%.0f', held), 'p', 0)
  redis.call('PEXPIRE', KEYS[1], ms((w + 2) * p - now))
end
return held
