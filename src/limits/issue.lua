-- issue.lua: every limit of one issue request, checked and taken in one
-- atomic step on Redis's clock, plus the cost reservation and the start (or
-- continuation) of the verification of (phone, caller, purpose). All or
-- nothing: when an enforced rule or a cost cap refuses, nothing is written.
-- What it shares with verify.lua (Redis's clock `now`, the request id, a
-- rule's check and give-back, the penalty counts, an Idempotency-Key's
-- part) is in prelude.lua, which the build puts before this text.
--
-- Decisions that are never lost. Every call carries a request id (rid,
-- random per HTTP request) and its undo key otp:u:<rid> (the last KEYS).
-- An accepted issue records there, for undo_ttl_ms (seconds), its reply
-- and everything it took: the sliding-log members it added, the counters
-- and token-bucket times it advanced, the resend delay it set, the cost it
-- reserved and the verification it created or replaced. Then:
-- * a second call with the same rid (otpd retries once on a fresh
--   connection after a timeout) takes nothing and returns the recorded
--   reply, so an answer lost on the wire is not paid twice;
-- * op 'a' (abandon), sent by an instance that answered 503 (or could not
--   commit its ledger rows) for that rid: if the record is there, every
--   take is given back; if the issue has not run yet, a tombstone is left
--   so that when it runs later it takes nothing. The undo key then holds
--   the tombstone, so a repeated abandon gives nothing back twice.
-- Each script is atomic, so both orders are safe: a retry after a 503 is
-- decided as if the unanswered attempt had not happened.
-- * op 'c' (commit), sent once the instance's ledger rows are committed,
--   releases the message's hold (below) and deletes the record; a record
--   whose commit is lost simply expires. (verify.lua's records are deleted
--   by a commit whose KEYS is the undo key alone.)
--
-- Holds: the visibility rule (docs/architecture.md, "A request's path"). An
-- accepted issue writes its message's hash (otp:msg:<mid>, state 'held')
-- and puts "<mid>:<rid>" in the holds set, scored by when the hold lapses
-- (hold_ms from now). Only the commit moves the message into the send
-- stream (queue.lua), and only while the hold is there; a hold that
-- lapses (its instance died or lost Redis before it could commit) is
-- dropped by any instance (limits_holds): an abandon of its rid, which
-- gives back every take and deletes the held message. So a message is
-- sent only if its commit ran, and the commit runs only after the ledger
-- rows are durable, before the 202. An abandon that comes after its
-- commit (the commit's reply was lost, the caller got a 503) ends the
-- message 'failed' if no sender has started it yet.
--
-- Idempotency-Key (src/otp/idem.h). A key is a hash otpd:idem:<tag>: the
-- request's keyed hash (h), the request id that decided it (o) and, once
-- committed, the answer (a); the caller's keys are a sorted set
-- otpd:idemc:<hex of its name>, each key's name scored by when it lapses.
-- Both are among KEYS (no rule key starts with 'otpd:'). Before anything is
-- taken, a request whose key exists takes nothing and is told so (another
-- request decided or is deciding it: otpd looks the key up again), and a
-- caller that holds max_keys unlapsed keys is refused. Only an accepted
-- issue claims the key (h, o = its rid), for claim_ms: a refusal leaves
-- nothing. The commit stores the answer, for 24 h, in the same step as the
-- release and only while the claim is still this rid's (a fence: an owner
-- that stalled past claim_ms releases nothing; it abandons). An abandon
-- gives the claim up with the takes while it is its own, and after a
-- commit, the stored answer with the message it ends unsent.
--
-- KEYS[1]   the phone's hash, otp:{+91...}: one field per verification
--           (named by its scope: caller and purpose) and one per phone rule
--           (a composite key's other values follow the rule's field)
-- KEYS[2..#KEYS-1] the other keys that rules (and the cost caps) use, each
--           a hash with one field per rule, and an Idempotency-Key's two
-- KEYS[#KEYS-3], [#KEYS-2], [#KEYS-1] the send stream otp:q, the holds
--           otp:holds and the message's hash otp:msg:<mid>
-- KEYS[#KEYS] the undo key otp:u:<rid>
-- ARGV (named below as limits_int.h names them: enum issue_argv and the
-- groups' enums): op ('i' issue, 'a' abandon, 'c' commit), vid, vhash, ttl_ms, max_attempts,
--       price (-1: none), nrules, ncaps, cost key index (0: none),
--       undo_ttl_ms, scope (the verification's field), at_ms (0: Redis's
--       clock; else the replay clock, see above), then 7 per rule:
--       kind, key index, field, limit, window_ms, burst, mode
--       (mode: '0' enforced, '1' shadow, or with a penalty
--       '<0|1>:<after>:<within_ms>:<block_ms>'; see "Penalties")
--       then 3 per cap: field (named by the cap's window: c<window_ms>; a
--       per-caller cap's also by the caller: k<window_ms>:<api key>),
--       window_ms, max
--       then the message: capacity (pacer.capacity, fleet-wide), hold_ms,
--       mid, api key, cap windows text, phone, share (at most this many
--       messages not yet ended per caller, pacer.share_per_key), the KEYS
--       index of the shares (otp:share, 0: none)
--       then an Idempotency-Key's 4: the KEYS index of its hash (0: none;
--       the caller's count is the next key), the request's hash, claim_ms,
--       max_keys
--       then, LAST (read from the end, #ARGV - n, so they never depend on
--       the counts before them), the pumping guard's 7: the word 'pump'
--       (a caller that passes none, such as a test driving the script
--       directly, has the guard off), its key index (0: off), window_ms,
--       min_sent, min verified ratio in millionths, hold_ms, shadow ('1'
--       or '0')
--       (abandon reads op, the hold "<mid>:<rid>" when dropping a lapsed
--       one, and undo_ttl_ms; commit: op, "<mid>:<rid>"; a verify's
--       commit: KEYS the undo key alone. Op 'C' is the commit of a request
--       with an Idempotency-Key: ARGV then also the answer and how long to
--       keep it (ms), KEYS first its hash and count; it returns -1, having
--       done nothing, when the claim is no longer this request's)
-- Op 'p' (penalty hits) counts refusals answered from an instance's
-- refusal cache (src/limits/rcache.h) toward their rules' penalties, as the
-- same refusals here would have: KEYS the rules' keys; ARGV 'p', then 6
-- per rule state: key index, the rule's field (as given to the rules
-- below), after, within_ms, block_ms and n, the refusals to count now.
-- Returns how many blocks it started.
-- Two more ops serve the drop of lapsed holds: 'h' (KEYS: the holds)
-- returns up to IA_HOLDS_MAX lapsed holds; 'k' (KEYS: an undo key) returns the
-- KEYS its issue ran with (JSON), or false when its record is gone.
-- kinds: 1 sliding_log, 2 fixed_window, 3 token_bucket, 4 resend_delay,
--        5 wrong_guess_cap (a log of wrong-guess times, written by verify),
--        6 sliding_window_counter ("idx:cur:prev": the counts of window idx,
--          aligned to Unix time, and of the one before; estimate = cur +
--          prev x (1 - elapsed fraction of window idx); allowed while the
--          estimate is below limit)
--
-- Penalties. A rule with a penalty (enforced; a shadow rule's refusals are
-- never counted, so it blocks nothing) counts its refusals in the same
-- key, field '!' .. the rule's field (so a renamed rule starts afresh), as
-- "start:count:until": the refusals since start, counted while they fall
-- within within_ms of the first, and the end of a block (0: none). The
-- refusal that makes the count reach after starts a block of block_ms:
-- until then the rule refuses the key outright, whatever its own state,
-- with the block's end as its reset. Refusals during a block are not
-- counted and never extend it. That count is the only write a refused
-- request makes.
-- Returns {allowed (1 yes, 0 refused, -1 abandoned before it ran), now_ms,
--          vid, expires_in_ms, is_new (on a refusal for the queue: 1 when
--          the caller's share refused it, 0 the fleet's capacity), cost_retry_ms,
--          next_ms (when a new issue would pass every enforced rule and cap),
--          full (the queue's depth when it refused for capacity or share
--          alone, else -1), then 3 per rule:
--          verdict (1 ok, 0 refused), remaining (on a refusal: 0, or minus
--          the ms its penalty block lasts from now when a block refuses or
--          starts, so a refusal cache counts no hit in the block),
--          reset_ms (the retry time when refused), then 4 for the pumping guard (the last values:
--          read from the end): state (0 nothing to say, 1 refused: the
--          prefix is held, 2 refused: this request started a hold, 3
--          shadow: a hold would start now, 4 shadow: a hold would refuse),
--          its wait in ms (the hold's end), and the sent and verified
--          counts it judged (for 2 and 3)}
--          A refusal by the guard (1, 2) comes before the rules: its reply
--          has no rule verdicts. Before it, {-2, now}: the Idempotency-Key
--          is another request's; {-3, now, wait_ms}: the caller holds its
--          max_keys keys, the oldest lapsing in wait_ms.
-- Abandon returns 1 when it gave takes back, 0 when it left a tombstone
-- or found one.
--
-- The pumping guard (docs/architecture.md, "Limits and rules"): per phone
-- prefix, one hash otp:pump:{+4474001} with a count of accepted issues
-- ('s<bucket>') and of successful verifies ('v<bucket>', by verify.lua) per bucket of
-- window / PUMP_BUCKETS on this clock, summed over the last PUMP_BUCKETS
-- buckets (a sliding window in steps of a twelfth), and 'h', the end of a
-- hold. It is checked before the rules: a held prefix is refused and takes
-- nothing. Else, once sent >= min_sent and verified / sent is below the
-- ratio, the prefix is held for hold_ms and this request refused. A hold
-- clears the counts, so when it ends the prefix is judged afresh (a ring
-- that goes on gets at most min_sent more per hold); while held, nothing
-- is counted (shadow mode too, so it sees what enforcement would). An
-- accepted issue's sent is given back by its abandon (the undo record's
-- p). The hash expires when idle: a window after its last count, or at the
-- hold's end.
-- Shares (pacer.share_per_key): otp:share holds one member per message
-- accepted and not yet ended, "<api key>\x1f<its code's expiry, 13
-- digits>\x1f<mid>", all scored 0, so a caller's members are one lexical
-- range ordered by expiry. The message's hash keeps its member (sh); every
-- end removes it: queue.lua's end (sent, failed, expired, cancelled), an
-- abandon (of a held message, or after its commit) and the drop of a lapsed
-- hold. A member whose instance died before the end is pruned once its code
-- has expired: no message is sent past that, so the count heals itself.
--
-- A verification is one field: vid (32 hex), the code's keyed hash (16
-- hex), then "exp_ms:attempts", 63 bytes for fewer than 10 attempts, so
-- the phone's hash stays within 200 bytes of Redis memory. The separator
-- is '+' instead of ':' once another issue has continued the verification
-- (sent its code again): an abandon of the issue that created it then
-- keeps it, at no byte's cost.

-- The arguments by name, read once (limits_int.h names each on the C side).
-- KEYS (enum issue_keys): ops 'i', 'a' and 'd' run on the phone's hash
-- first, and on the stream, the holds and the message's hash just before
-- the undo key (the prelude's undo_key, the last); op 'c' on those four
-- alone; op 'C' on an Idempotency-Key's hash and count, then those four or
-- (a verify's commit) the undo key alone; op 'h' on the holds alone.
local IK_PHONE = 1
local phone_key = KEYS[IK_PHONE]
local queue_key, holds_key, msg_key = KEYS[#KEYS - 3], KEYS[#KEYS - 2], KEYS[#KEYS - 1] -- IK_QUEUE, IK_HOLDS, IK_MSG
local first_key, second_key = KEYS[1], KEYS[2]                     -- op 'h': the holds; op 'C': an Idempotency-Key's hash, its count
-- ARGV of op 'i' (enum issue_argv, IA_OP to IA_AT); its groups follow from
-- IA_RULES: nrules rules (RA_*), ncaps caps (CA_*), the message (MA_*), an
-- Idempotency-Key's (XA_*), and last the pumping guard's (PA_*).
local op, vid, vhash, ttl, maxatt = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local price, nrules, ncaps, costkey = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local undo_ttl, scope, at_ms = tonumber(ARGV[10]), ARGV[11], tonumber(ARGV[12]) or 0
local IA_RULES = 13
-- The other ops' (the same enum): IA_HOLD, "<mid>:<rid>" (ops 'a', 'd',
-- 'c', 'C'); IA_ANSWER and IA_KEEP, the answer and how long to keep it
-- (op 'C'); IA_HOLDS_MAX (op 'h'); op 'p' has groups of PN_N from
-- IA_PENALTIES (PN_*: key index, field, after, within_ms, block_ms, n).
local hold, answer_arg, keep_arg, holds_max = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[2])
local IA_PENALTIES = 2
local PN_KEY, PN_FIELD, PN_AFTER, PN_WITHIN, PN_BLOCK, PN_COUNT, PN_N = 0, 1, 2, 3, 4, 5, 6
-- A cap's group (enum cap_argv) and the message's (enum msg_argv).
local CA_FIELD, CA_WINDOW, CA_MAX, CA_N = 0, 1, 2, 3
local MA_CAPACITY, MA_HOLD_MS, MA_MID, MA_API_KEY, MA_CAPS_TEXT, MA_PHONE, MA_SHARE, MA_SHARE_KEY, MA_STYLE, MA_N =
  0, 1, 2, 3, 4, 5, 6, 7, 8, 9
local pump_at = #ARGV - PA_N + 1
-- The reply's fixed values (enum issue_reply, counted from 1 here).
local IR_ALLOWED, IR_NOW, IR_VID, IR_EXPIRES, IR_IS_NEW, IR_COST_RETRY, IR_NEXT, IR_FULL = 1, 2, 3, 4, 5, 6, 7, 8

-- The replay clock (otpctl simulate runs a ledger's requests at their own
-- times in a private Redis); otpd always passes 0: Redis's own clock.
if op == 'i' and at_ms > 0 then now = at_ms end

-- The cost fields a cap windows text names (limits_caps_text): {field,
-- window_ms} per window. Digits before a ';' are global windows (the old
-- text is only those); after it, the caller (two letters a-p per byte) and
-- its windows (a letter a-j per digit).
local function cap_fields(text)
  local out = {}
  local g, who, kw = string.match(text, '^([^;]*);(%l*):([%l,]*)$')
  for w in string.gmatch(g or text, '%d+') do out[#out + 1] = {'c' .. w, tonumber(w)} end
  if who then
    local name = string.gsub(who, '(%l)(%l)', function(h, l)
      return string.char((string.byte(h) - 97) * 16 + string.byte(l) - 97)
    end)
    for kwin in string.gmatch(kw, '%l+') do
      local w = string.gsub(kwin, '%l', function(c) return string.char(string.byte(c) - 49) end)
      out[#out + 1] = {'k' .. w .. ':' .. name, tonumber(w)}
    end
  end
  return out
end

-- Removes the message's share member (sh in its hash), if any and if the
-- shares are among KEYS.
local function share_end(msg)
  local sk = nil
  for i = 1, #KEYS do if KEYS[i] == 'otp:share' then sk = KEYS[i] end end
  local sh = sk and redis.call('HGET', msg, 'sh')
  if sh then redis.call('ZREM', sk, sh) end
end

if op == 'h' then
  return redis.call('ZRANGEBYSCORE', first_key, '-inf', now, 'LIMIT', 0, holds_max)
end

if op == 'k' then
  local rec = redis.call('GET', undo_key)
  if not rec or rec == TOMB then return false end
  return cjson.encode(cjson.decode(rec).k)
end

if op == 'p' then
  local started = 0
  for a = IA_PENALTIES, #ARGV - PN_N + 1, PN_N do
    local key, field = KEYS[tonumber(ARGV[a + PN_KEY])], '!' .. ARGV[a + PN_FIELD]
    local pen = {tonumber(ARGV[a + PN_AFTER]), tonumber(ARGV[a + PN_WITHIN]), tonumber(ARGV[a + PN_BLOCK])}
    local pstart, pcount, puntil = pen_read(redis.call('HGET', key, field))
    -- Refusals during a block are not counted (see "Penalties").
    if puntil <= now then
      local v, ttl_ms, block = pen_add(pen, pstart, pcount, tonumber(ARGV[a + PN_COUNT]))
      redis.call('HSET', key, field, v)
      if redis.call('PTTL', key) < ttl_ms then redis.call('PEXPIRE', key, ttl_ms) end
      if block > 0 then started = started + 1 end
    end
  end
  return started
end

if op == 'c' or op == 'C' then
  -- 'C': with an answer (an Idempotency-Key's): only while the claim is
  -- this rid's, and the answer kept in the same step as the release.
  local answer, keep = op == 'C' and answer_arg or '', tonumber(keep_arg or '') or 0
  if answer ~= '' and redis.call('HGET', first_key, 'o') ~= rid then return -1 end
  local function kept()
    if answer == '' then return end
    redis.call('HSET', first_key, 'a', answer)
    redis.call('PEXPIRE', first_key, keep)
    idem_count(first_key, second_key, keep)
  end
  if #KEYS == 1 then return redis.call('DEL', undo_key) end
  if answer ~= '' and #KEYS == 3 then
    kept()
    redis.call('DEL', undo_key)
    return 1
  end
  local s = redis.call('HGET', msg_key, 's')
  if s == 'held' then
    -- A hold past its time may be being dropped: it is the dropper's.
    local score = redis.call('ZSCORE', holds_key, hold)
    if not score or tonumber(score) <= now then return 0 end
    redis.call('ZREM', holds_key, hold)
    local f = redis.call('HMGET', msg_key, 'v', 'to', 'e', 'sc', 'p', 't', 'k', 'pk', 'x')
    if redis.call('EXISTS', queue_key) == 0 then redis.call('XGROUP', 'CREATE', queue_key, 'senders', '0', 'MKSTREAM') end
    local eid = redis.call('XADD', queue_key, '*', 'id', string.match(hold, '^[^:]+'), 'v', f[1], 'to', f[2],
                           'e', f[3], 'sc', f[4], 'p', f[5] or '-1', 't', f[6] or '0', 'k', f[7] or '',
                           'pk', f[8], 'x', f[9] or '')
    -- The entry carries them from here; the hash keeps what changes
    -- (state, attempts, money) and who may read it, for a day.
    redis.call('HDEL', msg_key, 'v', 'to', 'e', 'sc', 'pk', 'x')
    -- pv: the provider it is queued on (the stream's name; otp:q is the single provider's, default)
    redis.call('HSET', msg_key, 's', 'queued', 'pv', string.match(queue_key, '^otp:q:(.+)$') or 'default')
  elseif not s then
    return 0 -- dropped, or abandoned: never visible
  end
  kept()
  redis.call('DEL', undo_key)
  return 1
end

-- 'd' drops a lapsed hold, and only that: when the hold is still there
-- and past its time, in the same step as the release's check, so a hold
-- is either released (the message is sent) or dropped (it never is), never
-- both. Then it gives back the issue's takes like an abandon.
if op == 'd' then
  local score = redis.call('ZSCORE', holds_key, hold)
  if not score or tonumber(score) > now then return 0 end
  redis.call('ZREM', holds_key, hold)
  share_end(msg_key)
  redis.call('DEL', msg_key)
  -- Its record expired: its takes end with their windows.
  if redis.call('EXISTS', undo_key) == 0 then return 1 end
  op = 'a'
end

-- An abandon that finds no record: its issue was committed before it (the
-- commit's reply was lost), so the message ends unsent unless a sender has
-- started it.
local function abandon_committed()
  local msg = #KEYS >= 4 and msg_key
  if msg and redis.call('HGET', msg, 's') == 'queued' then
    redis.call('HSET', msg, 's', 'failed', 'd', 'abandoned: its request was answered 503')
    share_end(msg)
    idem_drop() -- its answer, kept by the commit, is no longer true
    -- Its reservation never reached the provider unless marked used.
    local m = redis.call('HMGET', msg, 'r', 'f', 'u', 'p', 't', 'k')
    local r, f, u, mprice = tonumber(m[1] or 1), tonumber(m[2] or 0), tonumber(m[3] or 0), tonumber(m[4] or -1)
    local cost = nil
    for i = 1, #KEYS do if KEYS[i] == 'otp:cost' then cost = KEYS[i] end end
    if cost and mprice > 0 and u < r and f < r then
      redis.call('HSET', msg, 'f', r)
      for _, fw in ipairs(cap_fields(m[6] or '')) do
        local widx = math.floor(tonumber(m[5]) / fw[2])
        local sum = window_count(redis.call('HGET', cost, fw[1]), widx)
        if sum >= mprice then redis.call('HSET', cost, fw[1], fmt(widx) .. ':' .. fmt(sum - mprice)) end
      end
    end
  end
  return 0
end

if op == 'a' then
  local rec = redis.call('GET', undo_key)
  redis.call('SET', undo_key, TOMB, 'PX', undo_ttl)
  if not rec or rec == TOMB then
    return abandon_committed()
  end
  rec = cjson.decode(rec)
  idem_drop()
  if rec.m and redis.call('ZSCORE', holds_key, rec.m) then share_end(msg_key) end
  if rec.m and redis.call('ZREM', holds_key, rec.m) == 1 then redis.call('DEL', msg_key) end
  for _, w in ipairs(rec.w) do take_back(w) end
  -- rec.p: the pumping guard's sent this issue counted.
  if rec.p then pump_back(rec.p) end
  for _, c in ipairs(rec.c) do
    local key = KEYS[c[1]]
    local sum = window_count(redis.call('HGET', key, c[2]), c[3])
    if sum > c[4] then
      redis.call('HSET', key, c[2], fmt(c[3]) .. ':' .. fmt(sum - c[4]))
    elseif sum == c[4] then
      redis.call('HDEL', key, c[2])
    elseif sum > 0 then
      -- Less than this issue reserved: money was given back twice or never
      -- counted. Never clamp (that would eat another reservation); say so.
      redis.log(redis.LOG_WARNING, 'otpd: abandon found ' .. sum .. ' in cost field ' .. c[2] ..
                ', less than its price ' .. c[4] .. '; left as it is')
    end
  end
  -- rec.v: {scope, the verification this issue set, the field it replaced
  -- or ''}. It goes (or the one it replaced comes back) only while no other
  -- issue has continued it: a '+' in its field marks one that has, and that
  -- issue's message carries its code.
  local now_v = rec.v and vget(redis.call('HGET', phone_key, rec.v[1]))
  if now_v and now_v[1] == rec.v[2] and not now_v[5] then
    if rec.v[3] ~= '' then
      redis.call('HSET', phone_key, rec.v[1], rec.v[3])
    else
      redis.call('HDEL', phone_key, rec.v[1])
    end
  end
  return 1
end

-- Op 'i'. The groups' bases, and the message's values.
local caps_at = IA_RULES + nrules * RA_N
local msg_at = caps_at + ncaps * CA_N
local capacity, hold_ms, mid = tonumber(ARGV[msg_at + MA_CAPACITY]), tonumber(ARGV[msg_at + MA_HOLD_MS]), ARGV[msg_at + MA_MID]
local api_key, caps_text, phone = ARGV[msg_at + MA_API_KEY], ARGV[msg_at + MA_CAPS_TEXT], ARGV[msg_at + MA_PHONE]
local smax, skey = tonumber(ARGV[msg_at + MA_SHARE] or ''), tonumber(ARGV[msg_at + MA_SHARE_KEY] or '') or 0
local style = ARGV[msg_at + MA_STYLE] or ''

local rec = redis.call('GET', undo_key)
if rec == TOMB then return {-1, now, '', 0, 0, 0, 0, -1} end
if rec then return cjson.decode(rec).o end

local idem = idem_args(msg_at + MA_N)
if idem then
  local wait = idem_check(idem)
  if wait == -1 then return {-2, now} end
  if wait then return {-3, now, wait} end
end
local out = {0, now, '', 0, 0, 0, 0, -1}
local writes = {}
local undo = {}
local keep = {}
local refused = false
local next_ms = 0
local pens = {} -- penalty counts to write if the request is refused: {key index, field, value, ttl_ms}

local function want(k, ms)
  if not keep[k] or keep[k] < ms then keep[k] = ms end
end

-- The pumping guard, before every rule (see above). pump.count: whether an
-- accepted issue counts one sent.
local pump, ptail = nil, {0, 0, 0, 0}
local pk = ARGV[pump_at + PA_WORD] == 'pump' and tonumber(ARGV[pump_at + PA_KEY]) or 0
if pk > 0 then
  local pkey = KEYS[pk]
  local width = math.ceil(tonumber(ARGV[pump_at + PA_WINDOW]) / PUMP_BUCKETS)
  local pmin, pppm = tonumber(ARGV[pump_at + PA_MIN_SENT]), tonumber(ARGV[pump_at + PA_RATIO])
  local phold, pshadow = tonumber(ARGV[pump_at + PA_HOLD]), ARGV[pump_at + PA_SHADOW] == '1'
  local held = tonumber(redis.call('HGET', pkey, 'h') or '0') or 0
  pump = {k = pk, width = width, count = true, dead = {}}
  if held > now then
    if not pshadow then return {0, now, '', 0, 0, 0, 0, -1, 1, held - now, 0, 0} end
    ptail, pump.count = {4, held - now, 0, 0}, false
  else
    local cur = math.floor(now / width)
    local sent, verified, fields = 0, 0, {}
    local all = redis.call('HGETALL', pkey)
    for i = 1, #all, 2 do
      local kind, idx = string.match(all[i], '^([sv])(%d+)$')
      if kind then
        fields[#fields + 1] = all[i]
        if tonumber(idx) > cur - PUMP_BUCKETS then
          if kind == 's' then sent = sent + tonumber(all[i + 1]) else verified = verified + tonumber(all[i + 1]) end
        else
          pump.dead[#pump.dead + 1] = all[i]
        end
      end
    end
    if sent >= pmin and verified * 1000000 < pppm * sent then
      -- A hold starts: the counts go, so its end is a fresh start.
      if #fields > 0 then redis.call('HDEL', pkey, unpack(fields)) end
      redis.call('HSET', pkey, 'h', fmt(now + phold))
      if redis.call('PTTL', pkey) < phold then redis.call('PEXPIRE', pkey, phold) end
      if not pshadow then return {0, now, '', 0, 0, 0, 0, -1, 2, phold, sent, verified} end
      ptail, pump.count = {3, phold, sent, verified}, false
    end
  end
end

for r = 0, nrules - 1 do
  local c = rule_check(IA_RULES + r * RA_N)
  if c.pen then pens[#pens + 1] = c.pen end
  if not c.ok and not c.shadow then refused = true end
  if c.ok and c.new then
    writes[#writes + 1] = {c.k, c.field, c.new}
    want(c.k, c.hold)
    undo[#undo + 1] = take_record(c)
  end
  if c.ok and not c.shadow and c.nxt > next_ms then next_ms = c.nxt end
  verdict_add(out, c)
end

-- Caps are named by their window, so two caps with one window share one
-- sum (and take the price once).
local cost_new, cost_undo = {}, {}
if price >= 0 and costkey > 0 then
  for c = 0, ncaps - 1 do
    local a = caps_at + c * CA_N
    local field, window, max = ARGV[a + CA_FIELD], tonumber(ARGV[a + CA_WINDOW]), tonumber(ARGV[a + CA_MAX])
    local idx = math.floor(now / window)
    local sum = window_count(redis.call('HGET', KEYS[costkey], field), idx)
    local reset = (idx + 1) * window - now
    if sum + price > max then
      refused = true
      if reset > out[IR_COST_RETRY] then out[IR_COST_RETRY] = reset end
    else
      if not cost_new[field] then cost_undo[#cost_undo + 1] = {costkey, field, idx, price} end
      cost_new[field] = fmt(idx) .. ':' .. fmt(sum + price)
      want(costkey, reset)
      if sum + 2 * price > max and reset > next_ms then next_ms = reset end
    end
  end
end
for _, x in ipairs(ptail) do out[#out + 1] = x end
if refused then
  pens_write(pens)
  return out
end

-- The fleet's queue: messages in the stream (queued, claimed or in flight)
-- and held ones. Checked last, so a refusal by a rule says which rule.
local depth = redis.call('XLEN', queue_key) + redis.call('ZCARD', holds_key)
if depth >= capacity then
  out[IR_FULL] = depth
  return out
end
-- The caller's share: its members not yet past their code's expiry (the
-- others are pruned: their instance died before their end).
local share_at = nil
if skey > 0 then
  share_at = api_key .. '\031'
  redis.call('ZREMRANGEBYLEX', KEYS[skey], '[' .. share_at, '(' .. share_at .. string.format('%013.0f', now))
  if smax and redis.call('ZLEXCOUNT', KEYS[skey], '[' .. share_at, '(' .. share_at .. ':') >= smax then
    out[IR_IS_NEW], out[IR_FULL] = 1, depth
    return out
  end
end

for _, w in ipairs(writes) do redis.call('HSET', KEYS[w[1]], w[2], w[3]) end
local pumped = nil
if pump and pump.count then
  pumped = {pump.k, 's' .. fmt(math.floor(now / pump.width))}
  redis.call('HINCRBY', KEYS[pump.k], pumped[2], 1)
  if #pump.dead > 0 then redis.call('HDEL', KEYS[pump.k], unpack(pump.dead)) end
  want(pump.k, pump.width * PUMP_BUCKETS)
end
for field, v in pairs(cost_new) do redis.call('HSET', KEYS[costkey], field, v) end

-- A live verification is continued (same code, a new message) while at
-- least a third of otp.ttl is left; with less, an SMS would arrive nearly
-- dead, so a new verification (a new code) replaces it.
local raw = redis.call('HGET', phone_key, scope)
local cur = vget(raw)
local exp = cur and cur[3] or 0
local vrec = nil
if cur and (exp - now) * 3 >= ttl and cur[4] < maxatt then
  out[IR_VID], out[IR_IS_NEW] = cur[1], 0
  -- Continued: an abandon of the issue that created it keeps it.
  redis.call('HSET', phone_key, scope, vput(cur[1], cur[2], exp, cur[4], true))
else
  vrec = {scope, vid, raw or ''}
  exp = now + ttl
  redis.call('HSET', phone_key, scope, vput(vid, vhash, exp, 0, false))
  out[IR_VID], out[IR_IS_NEW] = vid, 1
end
out[IR_ALLOWED], out[IR_EXPIRES], out[IR_NEXT] = 1, exp - now, next_ms
want(IK_PHONE, exp - now)

local member = mid .. ':' .. rid
redis.call('ZADD', holds_key, now + hold_ms, member)
redis.call('HSET', msg_key, 's', 'held', 'v', out[IR_VID], 'to', phone, 'e', fmt(exp), 'sc', scope,
           'a', api_key, 'p', fmt(price), 't', fmt(now), 'k', caps_text, 'n', 0, 'pk', phone_key, 'x', style)
redis.call('PEXPIRE', msg_key, 86400000)
if share_at then
  local sh = share_at .. string.format('%013.0f', exp) .. '\031' .. mid
  redis.call('ZADD', KEYS[skey], 0, sh)
  redis.call('HSET', msg_key, 'sh', sh)
end

for k, ms in pairs(keep) do
  if redis.call('PTTL', KEYS[k]) < ms then redis.call('PEXPIRE', KEYS[k], ms) end
end
redis.call('SET', undo_key, cjson.encode({o = out, w = undo, c = cost_undo, v = vrec, m = member, k = KEYS, p = pumped}), 'PX', undo_ttl)
if idem then idem_claim(idem) end
return out
