-- verify.lua: one guess against the live verification of (phone, caller,
-- purpose), in one atomic step on Redis's clock: the lock check, the
-- comparison of keyed hashes, the attempt count on the code and on the
-- phone's wrong-guess log, and the end of the verification on success.
-- Like issue.lua, it starts with prelude.lua (the build puts it before
-- this text).
--
-- wrong_guess_cap counts over a sliding window: its field holds the times
-- of the wrong guesses still inside the window ("ts ts ..."), at most
-- limit of them. The key is locked while limit of them are inside the
-- window, and a lock lasts until the oldest counted one leaves it: no
-- midnight reset, no doubling across a boundary.
--
-- Decisions that are never lost (see issue.lua): every call carries a
-- request id and its undo key otp:u:<rid>. A guess that changed something
-- records its reply and what it changed (the verification's fields before
-- it, the wrong-guess time it added) there for undo_ttl_ms. A second call
-- with that rid returns the recorded reply and changes nothing; op 'a'
-- (abandon) gives back only what this guess did, never what others did
-- since: a wrong guess that only counted an attempt takes one attempt off
-- the same verification (if it is still there); a guess that ended the
-- verification (right, or the last attempt) puts it back only while no
-- verification has taken its place and its code is still alive (so a code
-- used since by another request is never revived); and the wrong-guess
-- time is removed. Or it leaves a tombstone when the guess has not run yet.
-- Once otpd has read the reply it deletes the record (issue.lua's op 'c').
--
-- Rules with "on": "verify" or "both" (counter kinds only: sliding_log,
-- fixed_window, token_bucket, sliding_window_counter) are checked first,
-- all or nothing: an enforced refusal is 'limited' and changes nothing but
-- the refusing rules' penalty counts (see issue.lua, "Penalties"), else
-- every one of them is taken (and recorded for an abandon), whatever the
-- guess.
--
-- Idempotency-Key: as in issue.lua. A guess that changes something (the
-- one that writes an undo record) claims the key in the same step; one
-- whose key is another request's takes nothing ('taken'), and a caller at
-- its max_keys is refused before anything is taken ('keys', window_left_ms
-- the wait until its oldest key lapses). otpd commits a claimed guess with
-- its answer through issue.lua's op 'C', fenced by the claim.
--
-- KEYS[1] the phone's hash, otp:{+91...}; KEYS[2..#KEYS-1] the keys of the
-- verify rules (and the pumping guard's, and an Idempotency-Key's two);
-- KEYS[#KEYS] the undo key
-- ARGV (named below as limits_int.h names them: enum verify_argv and the
-- groups' enums): op ('v' verify, 'a' abandon), guess hash, max_attempts,
--       wrong-guess field ('' when no rule), its limit, its window_ms, its
--       shadow flag ('1' or '0'), undo_ttl_ms, scope (the verification's
--       field in the phone's hash; see issue.lua for its value), nrules,
--       at_ms (0: Redis's clock; else the replay clock, as in issue.lua),
--       then 7 per rule as in issue.lua: kind, key index, field, limit,
--       window_ms, burst, mode (as in issue.lua: shadow and penalty)
--       then an Idempotency-Key's 4, as in issue.lua (absent: none)
--       then, LAST (read from the end), the pumping guard's 3: the word
--       'pump' (none passed: the guard is off), its key index among
--       KEYS[2..#KEYS-1] (0: off) and window_ms. A success
--       counts one verified for the phone's prefix (issue.lua, "The pumping
--       guard"), unless the prefix is held; its abandon gives it back.
-- op 'k' (cancel) ends the scope's live verification and returns {vid},
-- {''} when none is live.
-- Returns {status, id, attempts_left, window_left_ms, shadow_lock,
-- wrong_count, then 3 per rule: verdict, remaining, reset_ms (as in
-- issue.lua: a refusal's remaining is minus its penalty block's ms left
-- when a block refuses or starts, else 0)}; status is
-- 'ok', 'wrong', 'locked', 'none', 'limited', 'abandoned', 'taken' or 'keys'
-- (the last two without rule verdicts).
-- window_left_ms is when the oldest counted wrong guess leaves the window
-- (the lock's end for 'locked'). Abandon returns 1 when it gave back, else 0.

-- The arguments by name, read once (limits_int.h names each on the C side).
-- KEYS (enum verify_keys): the phone's hash first, the undo key last (the
-- prelude's undo_key).
local key = KEYS[1]                                                -- VK_PHONE
-- ARGV (enum verify_argv, VA_OP to VA_AT); then from VA_RULES nrules rules
-- (RA_*), an Idempotency-Key's group (XA_*) and last the pumping guard's
-- first PA_VERIFY_N (PA_*). Op 'a' reads VA_UNDO_TTL, op 'k' VA_SCOPE.
local op, guess, maxatt = ARGV[1], ARGV[2], tonumber(ARGV[3])
local wfield, wlimit, wwindow, wshadow = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local undo_ttl, scope, nrules, at_ms = tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10]) or 0, tonumber(ARGV[11]) or 0
local VA_RULES = 12
local pump_at = #ARGV - PA_VERIFY_N + 1

-- The replay clock (otpctl simulate); otpd always passes 0: Redis's own.
if op == 'v' and at_ms > 0 then now = at_ms end

if op == 'k' then
  local cur = vget(redis.call('HGET', key, scope))
  if not cur then return {''} end
  redis.call('HDEL', key, scope)
  if cur[3] <= now then return {''} end
  return {cur[1]}
end

if op == 'a' then
  local rec = redis.call('GET', undo_key)
  redis.call('SET', undo_key, TOMB, 'PX', undo_ttl)
  if not rec or rec == TOMB then return 0 end
  rec = cjson.decode(rec)
  idem_drop()
  -- rec.p: the pumping guard's verified this guess counted (issue.lua's
  -- abandon gives back its sent the same way).
  if rec.p then pump_back(rec.p) end
  -- rec.v: the verification's field before the guess ('' when none).
  local cur = vget(redis.call('HGET', key, rec.s))
  if rec.k == 'count' then
    if cur and cur[1] == string.sub(rec.v, 1, 32) then
      redis.call('HSET', key, rec.s, vput(cur[1], cur[2], cur[3], math.max(0, cur[4] - 1), cur[5]))
    end
  elseif rec.v ~= '' and not cur then
    local left = vget(rec.v)[3] - now
    if left > 0 then
      redis.call('HSET', key, rec.s, rec.v)
      if redis.call('PTTL', key) < left then redis.call('PEXPIRE', key, left) end
    end
  end
  for _, w in ipairs(rec.t or {}) do take_back(w) end
  if rec.w ~= '' then
    local v, rest, gone = redis.call('HGET', key, rec.f), {}, false
    for ts in string.gmatch(v or '', '%d+') do
      if not gone and ts == rec.w then gone = true else rest[#rest + 1] = ts end
    end
    if #rest > 0 then redis.call('HSET', key, rec.f, table.concat(rest, ' '))
    else redis.call('HDEL', key, rec.f) end
  end
  return 1
end

local rec = redis.call('GET', undo_key)
if rec == TOMB then return {'abandoned', '', 0, 0, 0, 0} end
if rec then return cjson.decode(rec).o end

local shadow = wshadow == '1'
local log, retry = {}, 0

local idem = idem_args(VA_RULES + nrules * RA_N)
if idem then
  local wait = idem_check(idem)
  if wait == -1 then return {'taken', '', 0, 0, 0, 0} end
  if wait then return {'keys', '', 0, wait, 0, 0} end
end
local rout, takes, refused, pens = {}, {}, false, {}
for r = 0, nrules - 1 do
  local c = rule_check(VA_RULES + r * RA_N)
  if c.pen then pens[#pens + 1] = c.pen end
  if not c.ok and not c.shadow then refused = true end
  if c.ok and c.new then takes[#takes + 1] = c end
  verdict_add(rout, c)
end

-- The reply with the rules' verdicts after the fixed values.
local function reply_of(r)
  for _, x in ipairs(rout) do r[#r + 1] = x end
  return r
end

-- Penalty counts come only from enforced refusals: a refused verify
-- writes them, and nothing else.
pens_write(pens)
if refused then return reply_of({'limited', '', 0, 0, 0, 0}) end
local undo_t = {}
for _, c in ipairs(takes) do
  redis.call('HSET', KEYS[c.k], c.field, c.new)
  if redis.call('PTTL', KEYS[c.k]) < c.hold then redis.call('PEXPIRE', KEYS[c.k], c.hold) end
  -- A bucket's take also records the time it set (see the abandon).
  undo_t[#undo_t + 1] = take_record(c)
end

-- The pumping guard's verified, counted by a success (set below).
local pumped = nil

-- The undo record, written when the guess changes something. kind: 'end'
-- when this guess ended the verification, 'count' when it only counted an
-- attempt on it.
local function done(reply, prev, kind, added)
  reply = reply_of(reply)
  redis.call('SET', undo_key, cjson.encode({o = reply, v = prev, k = kind, w = added or '', f = wfield,
                                            s = scope, t = undo_t, p = pumped}), 'PX', undo_ttl)
  if idem then idem_claim(idem) end
  return reply
end

-- A reply that changed nothing but the verify rules' takes.
local function plain(reply)
  if #undo_t > 0 then return done(reply, '', 'none') end
  return reply_of(reply)
end

if wfield ~= '' then
  log = live_log(redis.call('HGET', key, wfield), wwindow)
  if #log > 0 then retry = tonumber(log[math.max(1, #log - wlimit + 1)]) + wwindow - now end
  if #log >= wlimit and not shadow then return plain({'locked', '', 0, retry, 0, #log}) end
end
-- A shadow cap sees what enforcement would: a phone already at the cap
-- would be locked whatever the guess.
local slock = (shadow and wfield ~= '' and #log >= wlimit) and 1 or 0

local prev = redis.call('HGET', key, scope)
local cur = vget(prev)
local att = cur and cur[4] or 0
prev = prev or ''
if not cur or cur[3] <= now or att >= maxatt then
  if cur then redis.call('HDEL', key, scope) end
  return plain({'none', '', 0, retry, slock, #log})
end
if cur[2] == guess then
  redis.call('HDEL', key, scope)
  local pk = ARGV[pump_at + PA_WORD] == 'pump' and tonumber(ARGV[pump_at + PA_KEY]) or 0
  if pk > 0 and (tonumber(redis.call('HGET', KEYS[pk], 'h') or '0') or 0) <= now then
    local width = math.ceil(tonumber(ARGV[pump_at + PA_WINDOW]) / PUMP_BUCKETS)
    pumped = {pk, 'v' .. fmt(math.floor(now / width))}
    redis.call('HINCRBY', KEYS[pk], pumped[2], 1)
    if redis.call('PTTL', KEYS[pk]) < width * PUMP_BUCKETS then redis.call('PEXPIRE', KEYS[pk], width * PUMP_BUCKETS) end
  end
  return done({'ok', cur[1], maxatt - att, retry, slock, #log}, prev, 'end')
end

att = att + 1
local kind = 'count'
if att >= maxatt then
  redis.call('HDEL', key, scope)
  kind = 'end'
else
  redis.call('HSET', key, scope, vput(cur[1], cur[2], cur[3], att, cur[5]))
end
if wfield == '' then return done({'wrong', cur[1], maxatt - att, 0, 0, 0}, prev, kind) end
-- Keep at most limit times: older ones can no longer decide a lock.
local stamp = fmt(now)
log[#log + 1] = stamp
while #log > wlimit do table.remove(log, 1) end
redis.call('HSET', key, wfield, table.concat(log, ' '))
if redis.call('PTTL', key) < wwindow then redis.call('PEXPIRE', key, wwindow) end
retry = tonumber(log[1]) + wwindow - now
if #log >= wlimit then
  if shadow then return done({'wrong', cur[1], maxatt - att, retry, 1, #log}, prev, kind, stamp) end
  return done({'locked', cur[1], maxatt - att, retry, 0, #log}, prev, kind, stamp)
end
return done({'wrong', cur[1], maxatt - att, retry, 0, #log}, prev, kind, stamp)
