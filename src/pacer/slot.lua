-- slot.lua: the fleet's send rate, one GCRA on Redis's clock
-- (docs/architecture.md, "The pacer and the fleet"; the arithmetic is
-- modelled in schedule.c). Before each provider call a sender takes the
-- next slot: slot = max(tat, now) and tat moves one period on, so slots
-- are a period apart whoever takes them and an idle queue earns no burst.
-- The key expires once its tat has passed, when it would make no
-- difference.
--
-- KEYS[1] the slot key otp:slot; KEYS[2] the message's hash; KEYS[3] the
--         phone's hash (the verification lives there); KEYS[4] the stream
-- ARGV[1] op:
-- take: ARGV vid, scope, expires_ms, min_life_ms, period_us, fail_sending
--   ('1': a message taken over while 'sending' is not sent again, as
--   pacer.on_restart_sending 'fail' asks: {'sending'}), entry id, consumer.
--   The message is checked first, on Redis's clock: one another consumer
--   owns now ({'lost'}), one sent already ({'done'}), one that ended unsent
--   ({'ended'}: failed or expired), one whose
--   verification has ended (verified, cancelled or replaced: {'gone'}), one
--   with less than min_life_ms of its code's life left ({'expired'}). Else
--   {'ok', slot_us, now_us, 0}.
-- arm: the same ARGV as take, a new attempt ('1') or the same one again
--   ('0': its last slot was missed before any byte left), and how long its
--   call may be on the wire from now (ms: w in the hash, with ao the
--   consumer that armed it): the same
--   checks, again, just before the message's slot (a cancel or an end
--   meanwhile, on any instance); then it is 'sending' from here:
--   {'ok', '0', now_us, attempt}.
-- pause: ARGV pause_us: a provider 429 holds every slot back until
--   now + pause_us. Returns {'ok', tat_us, now_us, 0}.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local op = ARGV[1]
local FINAL = {sent = true, delivered = true, failed = true, expired = true}

local function fmt(n) return string.format('%.0f', n) end

local function tat_set(tat)
  redis.call('SET', KEYS[1], fmt(tat), 'PX', math.floor((tat - now_us) / 1000) + 1000)
end

local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0

if op == 'pause' then
  local until_us = now_us + tonumber(ARGV[2])
  if until_us > tat then tat = until_us; tat_set(tat) end
  return {'ok', fmt(tat), fmt(now_us), 0}
end

if op ~= 'take' and op ~= 'arm' then return redis.error_reply('slot.lua: unknown op ' .. tostring(op)) end

local vid, scope = ARGV[2], ARGV[3]
local expires_ms, min_life_ms, period = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local s = redis.call('HGET', KEYS[2], 's')
local p = redis.call('XPENDING', KEYS[4], 'senders', ARGV[8], ARGV[8], 1)
if not p[1] or p[1][2] ~= ARGV[9] then return {'lost', '0', fmt(now_us), 0} end
if s == 'sent' or s == 'delivered' then return {'done', '0', fmt(now_us), 0} end
if s and FINAL[s] then return {'ended', '0', fmt(now_us), 0} end
if s == 'sending' and ARGV[7] == '1' then return {'sending', '0', fmt(now_us), 0} end
if scope ~= '' then -- '' for a message imported from an old ledger (queue.lua)
  local v = redis.call('HGET', KEYS[3], scope)
  if not v or string.sub(v, 1, 32) ~= vid then return {'gone', '0', fmt(now_us), 0} end
end
if expires_ms - math.floor(now_us / 1000) < min_life_ms then return {'expired', '0', fmt(now_us), 0} end

if op == 'arm' then
  -- w: until when a call of this message may be on a wire (ARGV[11], the
  -- provider's timeout and a margin, from now; never earlier than another
  -- consumer's call armed before: a takeover's arm keeps the old owner's
  -- bound); ao: who armed it, unless that older call ends later. A
  -- failover by another consumer waits for w (queue.lua's own and move).
  local m = redis.call('HMGET', KEYS[2], 'ao', 'w')
  local w_old, w_new = tonumber(m[2] or '0') or 0, math.floor(now_us / 1000) + (tonumber(ARGV[11]) or 0)
  if m[1] == ARGV[9] or w_old <= math.floor(now_us / 1000) then redis.call('HSET', KEYS[2], 'ao', ARGV[9]) end
  redis.call('HSET', KEYS[2], 's', 'sending', 'w', fmt(math.max(w_old, w_new)))
  -- ARGV[10] '0': the same attempt again (its last slot was missed: no call left)
  local n = ARGV[10] == '0' and tonumber(redis.call('HGET', KEYS[2], 'n') or '0') or
            redis.call('HINCRBY', KEYS[2], 'n', 1)
  redis.call('PEXPIRE', KEYS[2], 86400000)
  return {'ok', '0', fmt(now_us), n}
end

local slot = math.max(tat, now_us)
tat_set(slot + period)
return {'ok', fmt(slot), fmt(now_us), 0}
