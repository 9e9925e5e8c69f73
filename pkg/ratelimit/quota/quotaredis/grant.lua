-- Records one client's grant of one bucket and returns the rate recorded.
-- KEYS[1]: the bucket's grants hash. ARGV[1]: client ID (the field),
-- ARGV[2]: the rate as Go formats it, ARGV[3]: the budget, or "" to record
-- the rate as it is (SetGrant), ARGV[4]: TTL in ms, ARGV[5]: now in ms, or
-- "" to read Redis's clock, ARGV[6]: the peer whose smallest orphan the
-- grant may take over when it does not fit otherwise, or "".
-- Values are "<expiry ms> <rate>", and "<expiry ms> <rate> <peer>" for an
-- orphan (orphan.lua). With a budget (GrowGrant) the rate is lowered to
-- what the budget leaves after the other clients' live grants, forgiving
-- 1e-9 of the budget (quota.GrantSlack); expired and malformed fields are
-- deleted on the way. The reply is a string: Lua numbers reach Go as
-- integers.
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local rate = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local peer = ARGV[6]
local function fits(others)
  return rate <= budget - others + budget * 1e-9
end
if budget then
  local all = redis.call('HGETALL', KEYS[1])
  local others, dead = 0, {}
  local orphan, orphanRate
  for i = 1, #all, 2 do
    local id, v = all[i], all[i + 1]
    local e1 = string.find(v, ' ', 1, true)
    local e2 = e1 and string.find(v, ' ', e1 + 1, true)
    local expiry = e1 and tonumber(string.sub(v, 1, e1 - 1))
    local r = e1 and tonumber(string.sub(v, e1 + 1, (e2 or 0) - 1))
    if not (expiry and r) or expiry <= now then
      dead[#dead + 1] = id
    elseif id ~= ARGV[1] then
      others = others + r
      local of = e2 and string.sub(v, e2 + 1)
      if peer ~= '' and of == peer and (not orphan or r < orphanRate or (r == orphanRate and id < orphan)) then
        orphan, orphanRate = id, r
      end
    end
  end
  if orphan and not fits(others) then
    others = others - orphanRate
    dead[#dead + 1] = orphan
  end
  -- HDEL in chunks: unpack of a very long list overflows Lua's stack.
  for i = 1, #dead, 1000 do
    redis.call('HDEL', KEYS[1], unpack(dead, i, math.min(i + 999, #dead)))
  end
  if not fits(others) then
    rate = math.max(budget - others, 0)
  end
end
local recorded = string.format('%.17g', rate)
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now + ttl) .. ' ' .. recorded)
-- The key outlives its newest field; only ever extended, never shortened.
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return recorded
