-- lease.lua: decides the one limit of an allotment lease as decide.lua
-- does, and when it is charged records in the limit's lease ledger what
-- the lease's holder may still use, so that a reset (reset.lua) keeps
-- those tokens charged: a replica uses its leased tokens without asking
-- Redis again, so a reset cannot take them back, only keep counting them.
--
-- KEYS[1] = the limit's state, KEYS[2] = its ledger (same hash tag).
-- ARGV = decide.lua's for one limit (hits, now, code, requests, period,
-- burst), then the holder and the tokens it still held when it sent this
-- lease. Reply: decide.lua's.
--
-- Ledger: a hash, one field per holder (a slice of one replica), value
-- "<tokens>:<mark>": the tokens it may still use (held + hits) and when
-- they lapse: for gcra the latest slot among them (the newest lease's new
-- TAT, or an older one's when a reset lowered the TAT since), for the
-- window algorithms the index of the window they were charged in (they
-- lapse at its end). The field names, the format and the ledger key
-- (ledgerKey in keys.go) are shared with reset.lua: change them together.
-- A lease is charged only if admitted: a charge mode after the limit's
-- arguments would shift the holder and its tokens, so any other count of
-- arguments is refused, never misread.
if #ARGV ~= 8 then
  return redis.error_reply('ERR lease.lua: a lease takes 8 arguments (no charge mode: a lease is charged only if admitted), got ' .. #ARGV)
end
local LEDGER = KEYS[2]
KEYS[2] = nil -- decide.lua decides every key of KEYS

local function decide()
-- @decide.lua@
end

local out = decide()
local hits = tonumber(ARGV[1])
if out.err or out[1] ~= 1 or hits == 0 then return out end

local now, ttlFloor
if ARGV[2] ~= '' then
  now, ttlFloor = tonumber(ARGV[2]), 3600000
else
  local t = redis.call('TIME')
  now, ttlFloor = tonumber(t[1]) * 1000000 + tonumber(t[2]), 1
end
local code, p = tonumber(ARGV[3]), tonumber(ARGV[5])
local holder, held = ARGV[7], tonumber(ARGV[8])
local mark, lapse
if code == 1 then -- gcra: the state is the new TAT
  mark = tonumber(redis.call('GET', KEYS[1]))
  local prev = redis.call('HGET', LEDGER, holder)
  if prev then
    local pm = tonumber(string.match(prev, ':(%-?%d+)$'))
    if pm and pm > mark then mark = pm end
  end
  lapse = mark - now
else -- the window algorithms: the window charged
  mark = tonumber(redis.call('HGET', KEYS[1], 'w'))
  lapse = (mark + 1) * p - now
end
redis.call('HSET', LEDGER, holder, string.format('%.0f:%.0f', held + hits, mark))
-- Each slice is a holder of its own, so a ledger whose key stays hot
-- gathers the fields of slices long gone: past maxHolders, the lapsed ones
-- are dropped (a gcra field once its mark passed, a window field once its
-- window did).
local maxHolders = 64
if redis.call('HLEN', LEDGER) > maxHolders then
  local fields = redis.call('HGETALL', LEDGER)
  for i = 1, #fields, 2 do
    local m = tonumber(string.match(fields[i + 1], ':(%-?%d+)$'))
    if m == nil or (code == 1 and m <= now) or (code ~= 1 and m < mark) then
      redis.call('HDEL', LEDGER, fields[i])
    end
  end
end
local ttl = math.max(math.floor((lapse + 999) / 1000), ttlFloor)
if redis.call('PTTL', LEDGER) < ttl then
  redis.call('PEXPIRE', LEDGER, string.format('%.0f', ttl))
end
return out
