-- reserve.lua: makes sure a message holds a cost reservation before a
-- provider call, checked and taken against every cost cap in one atomic
-- step on Redis's clock, like issue.lua's cost part. The pacer calls it
-- for a retry after a call that may have been billed (each such attempt
-- needs a reservation of its own), for a message restored after a
-- restart, and just before every call goes on the wire (mode 1, "use").
--
-- Reservations of a message are numbered: 1 is the one issue.lua took;
-- KEYS[2], the message's money hash otp:msg:ID, holds r (the latest
-- reservation, 1 when absent), its price p, Redis time t and k, the cap
-- windows it was counted in (the cap windows text of limits_caps_text:
-- global window_ms comma-separated, then the caller's own after a ';' with
-- no digits; refund.lua gives back only to those), f (the latest one given back by refund.lua, 0 when
-- absent), u (the highest one used on the wire, 0 when absent) and uo
-- (the consumer that marked u). It lives a day.
--
-- "need" asks for reservation need or a later one that is still held: if
-- r >= need and r was not given back, nothing is taken (so a call repeated
-- after a lost reply never takes twice); else reservation max(r + 1, need)
-- is taken when every cap has room.
-- mode 0: just that. mode 1 (use): the reservation held is then marked
-- used (u, by this consumer: uo), before the call goes on the wire: a
-- restart reads it, since the ledger's 'sending' row may not have
-- committed before a crash. A reservation another consumer marked is never
-- used again here (it may have been spent: a takeover raced this
-- instance's arm, or this instance holds a message it lost and got back):
-- need is raised past it. mode 2
-- (restore): need is raised past u, so a restored message never goes out
-- again on a reservation an earlier call may have spent. mode 3 (unuse):
-- a stopping instance gives back the use mark of reservation need, made
-- for a call that was never written (src/pacer: pacer_unmark), so the next
-- start sends on it rather than count the price again. Only while that
-- mark is the latest word on the message: r == u == need, not given back,
-- and the message back in the queue (s 'queued', queue.lua's retry): an
-- instance that armed it since (s 'sending') may have marked it for a call
-- of its own, and only the consumer that marked it (uo). u goes to
-- need - 1 (u is only ever read against r: below r, every value means the
-- same). Nothing else changes; a second run finds u below need and
-- changes nothing.
--
-- KEYS[1] the global cost hash; KEYS[2] the message hash
-- ARGV: need, price, issue_ms (Redis time of reservation 1), mode, ncaps,
--       then 3 per cap: field, window_ms, max. A field k<window_ms> is a
--       per-caller cap: its sum is k<window_ms>:<caller>, the caller being
--       the message's api key (a in the message hash), so a retry's later
--       reservations count against that caller's budget too. Then,
--       last, this instance's consumer name (pacer.instance; modes 1 and 3
--       need it).
-- Returns {ok, idx, at_ms, retry_ms, cap}: ok 1 with the reservation held
-- (idx, taken at at_ms), or 0 when cap number `cap` (0-based) has no room
-- until retry_ms from now. mode 3: ok 1 when the mark was given back, 0
-- (cap -1) when nothing changed.

-- The arguments by name, read once (limits_money.c names each on the C
-- side). KEYS (enum money_keys): MK_COST, MK_MSG. ARGV (enum reserve_argv,
-- RV_NEED to RV_NCAPS), then from RV_CAPS ncaps caps (CA_*: field,
-- window_ms, max), then the consumer.
local cost_key, msg_key = KEYS[1], KEYS[2]
local need, price, issue_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local mode, ncaps = tonumber(ARGV[4]), tonumber(ARGV[5])
local RV_CAPS = 6
local CA_FIELD, CA_WINDOW, CA_MAX, CA_N = 0, 1, 2, 3
local me = ARGV[RV_CAPS + ncaps * CA_N] or ''

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local DAY_MS = 86400000

local function fmt(n) return string.format('%.0f', n) end

if me == '' and (mode == 1 or mode == 3) then return redis.error_reply('reserve.lua: no consumer name') end

local m = redis.call('HMGET', msg_key, 'r', 'f', 't', 'u', 'a', 's', 'uo')
local r, f, u = tonumber(m[1] or 1), tonumber(m[2] or 0), tonumber(m[4] or 0)
if mode == 3 then
  if r == need and u == need and f < need and m[6] == 'queued' and m[7] == me then
    redis.call('HSET', msg_key, 'u', need - 1)
    return {1, need, tonumber(m[3] or issue_ms), 0, -1}
  end
  return {0, r, 0, 0, -1}
end
if (mode == 2 or (mode == 1 and m[7] ~= me)) and need <= u then need = u + 1 end
if r >= need and f < r then
  if mode == 1 and u < r then
    redis.call('HSET', msg_key, 'u', r, 'uo', me)
    redis.call('PEXPIRE', msg_key, DAY_MS)
  end
  return {1, r, tonumber(m[3] or issue_ms), 0, -1}
end

local caller = m[5] or ''
local writes, windows, kwindows = {}, {}, {}
for c = 0, ncaps - 1 do
  local a = RV_CAPS + c * CA_N
  local field, window, max = ARGV[a + CA_FIELD], tonumber(ARGV[a + CA_WINDOW]), tonumber(ARGV[a + CA_MAX])
  local per_key = string.sub(field, 1, 1) == 'k'
  if per_key then field = field .. ':' .. caller end
  local idx = math.floor(now / window)
  local sum = 0
  local v = redis.call('HGET', cost_key, field)
  if v then
    local i, s = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == idx then sum = tonumber(s) end
  end
  if sum + price > max then
    return {0, r, 0, (idx + 1) * window - now, c}
  end
  writes[#writes + 1] = {field, fmt(idx) .. ':' .. fmt(sum + price), (idx + 1) * window - now}
  if per_key then
    -- A letter per digit: an older parser of this text (gmatch '%d+') sees
    -- only the global windows (limits_caps_text).
    kwindows[#kwindows + 1] = string.gsub(ARGV[a + CA_WINDOW], '%d', function(d) return string.char(string.byte(d) + 49) end)
  else
    windows[#windows + 1] = ARGV[a + CA_WINDOW]
  end
end
local text = table.concat(windows, ',')
if #kwindows > 0 then
  text = text .. ';' .. string.gsub(caller, '.', function(ch)
    local b = string.byte(ch)
    return string.char(97 + math.floor(b / 16), 97 + b % 16)
  end) .. ':' .. table.concat(kwindows, ',')
end

local keep = 0
for _, w in ipairs(writes) do
  redis.call('HSET', cost_key, w[1], w[2])
  if w[3] > keep then keep = w[3] end
end
if keep > 0 and redis.call('PTTL', cost_key) < keep then redis.call('PEXPIRE', cost_key, keep) end
local idx = math.max(r + 1, need)
redis.call('HSET', msg_key, 'r', idx, 'p', fmt(price), 't', fmt(now), 'k', text)
if mode == 1 then redis.call('HSET', msg_key, 'u', idx, 'uo', me) end
redis.call('PEXPIRE', msg_key, DAY_MS)
return {1, idx, now, 0, -1}
