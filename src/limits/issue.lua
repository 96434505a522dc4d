-- issue.lua: every limit of one issue request, checked and taken in one
-- atomic step on Redis's clock, plus the cost reservation and the start (or
-- continuation) of the verification of (phone, caller, purpose). All or
-- nothing: when an enforced rule or a cost cap refuses, nothing is written.
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
-- Holds: the visibility rule (DESIGN.md, "One request, issue path"). An
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
-- ARGV: op ('i' issue, 'a' abandon, 'c' commit), vid, vhash, ttl_ms, max_attempts,
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
-- returns up to ARGV[2] lapsed holds; 'k' (KEYS: an undo key) returns the
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
-- The pumping guard (DESIGN.md, "Fraud"): per phone prefix, one hash
-- otp:pump:{+4474001} with a count of accepted issues ('s<bucket>') and of
-- successful verifies ('v<bucket>', by verify.lua) per bucket of
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

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The replay clock (otpctl simulate runs a ledger's requests at their own
-- times in a private Redis); otpd always passes 0: Redis's own clock.
if ARGV[1] == 'i' and (tonumber(ARGV[12]) or 0) > 0 then now = tonumber(ARGV[12]) end
local undo_key = KEYS[#KEYS]
local undo_ttl = tonumber(ARGV[10])
local TOMB = 'x'

local function fmt(n) return string.format('%.0f', n) end
local PUMP_BUCKETS = 12

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

-- A rule's mode: shadow (true/false), and its penalty {after, within_ms,
-- block_ms} or nil.
local function mode_of(s)
  local sh, pa, pw, pb = string.match(s, '^([01]):(%d+):(%d+):(%d+)$')
  if not sh then return s == '1', nil end
  return sh == '1', {tonumber(pa), tonumber(pw), tonumber(pb)}
end

-- A penalty field: start, count, until (see "Penalties").
local function pen_read(v)
  local st, c, u = string.match(v or '', '^(%d+):(%d+):(%d+)$')
  return tonumber(st) or 0, tonumber(c) or 0, tonumber(u) or 0
end

-- Counts n refusals, now, toward penalty pen ({after, within_ms,
-- block_ms}) whose field held pstart and pcount (pen_read) and no block in
-- force: the field's new value, how long it must live (ms) and, when the
-- count reached after, the block's length (else 0). The rules below count
-- each refusal through it, op 'p' a refusal cache's hits.
local function pen_add(pen, pstart, pcount, n)
  if pstart + pen[2] <= now then pstart, pcount = now, 0 end
  pcount = pcount + n
  if pcount >= pen[1] then return '0:0:' .. fmt(now + pen[3]), pen[3], pen[3] end
  return fmt(pstart) .. ':' .. pcount .. ':0', pstart + pen[2] - now, 0
end

-- "idx:cur:prev" sliding-window-counter state: the counts of window idx
-- and of the window before it.
local function swc_read(v, idx)
  local i, c, p = string.match(v or '', '^(%d+):(%d+):(%d+)$')
  i = tonumber(i)
  if i == idx then return tonumber(c), tonumber(p) end
  if i == idx - 1 then return 0, tonumber(c) end
  return 0, 0
end

-- How long until the estimate cur + prev x (window - elapsed) / window
-- drops below limit; 0 when it already is. In integer ms (limit x window
-- < 2^53: config.c bounds both), never early: the first ms at which the
-- comparison holds.
local function swc_wait(cur, prev, elapsed, limit, window)
  if cur * window + prev * (window - elapsed) < limit * window then return 0 end
  if cur >= limit then
    -- Full on its own: in the next window it weighs as the previous one.
    return window - elapsed + math.floor(window * (cur - limit) / cur) + 1
  end
  -- The previous window's weight falls until the estimate is below limit,
  -- at the latest at the boundary, where only cur (< limit) is left.
  return math.min(math.floor(window * (cur + prev - limit) / prev) + 1, window) - elapsed
end

-- "idx:count" fixed-window state; returns the count for window idx.
local function window_count(v, idx)
  if v then
    local i, c = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == idx then return tonumber(c) end
  end
  return 0
end

-- The entries of a log field ("ts ts ts") still inside the window.
local function live_log(v, window)
  local log = {}
  if v then
    for ts in string.gmatch(v, '%d+') do
      if tonumber(ts) > now - window then log[#log + 1] = ts end
    end
  end
  return log
end

-- A verification's field: {vid, hash, exp, att, continued}, or nil.
local function vget(v)
  if not v then return nil end
  local e, sep, n = string.match(string.sub(v, 49), '^(%d+)([:+])(%d+)$')
  return {string.sub(v, 1, 32), string.sub(v, 33, 48), tonumber(e) or 0, tonumber(n) or 0, sep == '+'}
end

local function vput(vid, hash, exp, att, continued)
  return vid .. hash .. fmt(exp) .. (continued and '+' or ':') .. att
end

-- This call's request id: the undo key's last part.
local rid = string.match(undo_key, '[^:]+$')

-- An Idempotency-Key's 4 ARGV from index a (see "Idempotency-Key"), or nil.
local function idem_args(a)
  local k = tonumber(ARGV[a] or '') or 0
  if k == 0 then return nil end
  return {k = KEYS[k], c = KEYS[k + 1], h = ARGV[a + 1], ms = tonumber(ARGV[a + 2]), max = tonumber(ARGV[a + 3])}
end

-- Before anything is taken: nil when the request may decide; -1 when the
-- key is another request's; else the caller is at max_keys, and the wait
-- until its oldest key lapses (ms). Lapsed keys leave the count here.
local function idem_check(I)
  if redis.call('EXISTS', I.k) == 1 then return -1 end
  redis.call('ZREMRANGEBYSCORE', I.c, '-inf', now)
  if redis.call('ZCARD', I.c) < I.max then return nil end
  local first = redis.call('ZRANGE', I.c, 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(first[2]) - now)
end

-- Counts key k in the caller's c until ms from now.
local function idem_count(k, c, ms)
  redis.call('ZADD', c, now + ms, k)
  if redis.call('PTTL', c) < ms then redis.call('PEXPIRE', c, ms) end
end

-- The claim of a decision that took something, this rid's for claim_ms.
local function idem_claim(I)
  redis.call('HSET', I.k, 'h', I.h, 'o', rid)
  redis.call('PEXPIRE', I.k, I.ms)
  idem_count(I.k, I.c, I.ms)
end

-- An abandon's: the key goes with the decision while it is this rid's.
local function idem_drop()
  local k, c = nil, nil
  for i = 1, #KEYS do
    if string.sub(KEYS[i], 1, 10) == 'otpd:idem:' then k = KEYS[i] end
    if string.sub(KEYS[i], 1, 11) == 'otpd:idemc:' then c = KEYS[i] end
  end
  if k and c and redis.call('HGET', k, 'o') == rid then
    redis.call('DEL', k)
    redis.call('ZREM', c, k)
  end
end

if ARGV[1] == 'h' then
  return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
end

if ARGV[1] == 'k' then
  local rec = redis.call('GET', undo_key)
  if not rec or rec == TOMB then return false end
  return cjson.encode(cjson.decode(rec).k)
end

if ARGV[1] == 'p' then
  local started = 0
  for a = 2, #ARGV - 5, 6 do
    local key, field = KEYS[tonumber(ARGV[a])], '!' .. ARGV[a + 1]
    local pen = {tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])}
    local pstart, pcount, puntil = pen_read(redis.call('HGET', key, field))
    -- Refusals during a block are not counted (see "Penalties").
    if puntil <= now then
      local v, ttl, block = pen_add(pen, pstart, pcount, tonumber(ARGV[a + 5]))
      redis.call('HSET', key, field, v)
      if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
      if block > 0 then started = started + 1 end
    end
  end
  return started
end

if ARGV[1] == 'c' or ARGV[1] == 'C' then
  -- 'C': with an answer (an Idempotency-Key's): only while the claim is
  -- this rid's, and the answer kept in the same step as the release.
  local answer, keep = ARGV[1] == 'C' and ARGV[3] or '', tonumber(ARGV[4] or '') or 0
  if answer ~= '' and redis.call('HGET', KEYS[1], 'o') ~= rid then return -1 end
  local function kept()
    if answer == '' then return end
    redis.call('HSET', KEYS[1], 'a', answer)
    redis.call('PEXPIRE', KEYS[1], keep)
    idem_count(KEYS[1], KEYS[2], keep)
  end
  if #KEYS == 1 then return redis.call('DEL', undo_key) end
  if answer ~= '' and #KEYS == 3 then
    kept()
    redis.call('DEL', undo_key)
    return 1
  end
  local q, holds, msg = KEYS[#KEYS - 3], KEYS[#KEYS - 2], KEYS[#KEYS - 1]
  local s = redis.call('HGET', msg, 's')
  if s == 'held' then
    -- A hold past its time may be being dropped: it is the dropper's.
    local score = redis.call('ZSCORE', holds, ARGV[2])
    if not score or tonumber(score) <= now then return 0 end
    redis.call('ZREM', holds, ARGV[2])
    local f = redis.call('HMGET', msg, 'v', 'to', 'e', 'sc', 'p', 't', 'k', 'pk')
    if redis.call('EXISTS', q) == 0 then redis.call('XGROUP', 'CREATE', q, 'senders', '0', 'MKSTREAM') end
    local eid = redis.call('XADD', q, '*', 'id', string.match(ARGV[2], '^[^:]+'), 'v', f[1], 'to', f[2],
                           'e', f[3], 'sc', f[4], 'p', f[5] or '-1', 't', f[6] or '0', 'k', f[7] or '',
                           'pk', f[8])
    -- The entry carries them from here; the hash keeps what changes
    -- (state, attempts, money) and who may read it, for a day.
    redis.call('HDEL', msg, 'v', 'to', 'e', 'sc', 'pk')
    redis.call('HSET', msg, 's', 'queued')
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
if ARGV[1] == 'd' then
  local score = redis.call('ZSCORE', KEYS[#KEYS - 2], ARGV[2])
  if not score or tonumber(score) > now then return 0 end
  redis.call('ZREM', KEYS[#KEYS - 2], ARGV[2])
  share_end(KEYS[#KEYS - 1])
  redis.call('DEL', KEYS[#KEYS - 1])
  -- Its record expired: its takes end with their windows.
  if redis.call('EXISTS', undo_key) == 0 then return 1 end
  ARGV[1] = 'a'
end

if ARGV[1] == 'a' then
  local rec = redis.call('GET', undo_key)
  redis.call('SET', undo_key, TOMB, 'PX', undo_ttl)
  if not rec or rec == TOMB then
    -- Committed before this abandon (its reply was lost): the message ends
    -- unsent unless a sender has started it.
    local msg = #KEYS >= 4 and KEYS[#KEYS - 1]
    if msg and redis.call('HGET', msg, 's') == 'queued' then
      redis.call('HSET', msg, 's', 'failed', 'd', 'abandoned: its request was answered 503')
      share_end(msg)
      idem_drop() -- its answer, kept by the commit, is no longer true
      -- Its reservation never reached the provider unless marked used.
      local m = redis.call('HMGET', msg, 'r', 'f', 'u', 'p', 't', 'k')
      local r, f, u, price = tonumber(m[1] or 1), tonumber(m[2] or 0), tonumber(m[3] or 0), tonumber(m[4] or -1)
      local cost = nil
      for i = 1, #KEYS do if KEYS[i] == 'otp:cost' then cost = KEYS[i] end end
      if cost and price > 0 and u < r and f < r then
        redis.call('HSET', msg, 'f', r)
        for _, fw in ipairs(cap_fields(m[6] or '')) do
          local widx = math.floor(tonumber(m[5]) / fw[2])
          local sum = window_count(redis.call('HGET', cost, fw[1]), widx)
          if sum >= price then redis.call('HSET', cost, fw[1], fmt(widx) .. ':' .. fmt(sum - price)) end
        end
      end
    end
    return 0
  end
  rec = cjson.decode(rec)
  idem_drop()
  if rec.m and redis.call('ZSCORE', KEYS[#KEYS - 2], rec.m) then share_end(KEYS[#KEYS - 1]) end
  if rec.m and redis.call('ZREM', KEYS[#KEYS - 2], rec.m) == 1 then redis.call('DEL', KEYS[#KEYS - 1]) end
  for _, w in ipairs(rec.w) do
    local key, field, kind = KEYS[w[1]], w[2], w[3]
    local v = redis.call('HGET', key, field)
    local new = nil
    if kind == 1 and v then
      local rest, gone = {}, false
      for ts in string.gmatch(v, '%d+') do
        if not gone and ts == w[4] then gone = true else rest[#rest + 1] = ts end
      end
      new = table.concat(rest, ' ')
    elseif kind == 2 then
      local c = window_count(v, w[4])
      if c > 0 then new = fmt(w[4]) .. ':' .. (c - 1) end
    elseif kind == 3 and v and tonumber(w[5]) > now then
      -- Only while this take still holds the bucket back: once its time has
      -- passed, its token has come back by itself.
      new = fmt(math.max(now, tonumber(v) - w[4]))
    elseif kind == 4 and v == w[5] then
      new = w[4]
    elseif kind == 6 then
      -- Its own window's count while that is the current one, or the
      -- previous count once the next window began; later, it weighs nothing.
      local i, c, p = string.match(v or '', '^(%d+):(%d+):(%d+)$')
      if tonumber(i) == w[4] and tonumber(c) > 0 then new = fmt(w[4]) .. ':' .. (tonumber(c) - 1) .. ':' .. p
      -- Rolled into the next window by a later take: it weighs there as
      -- part of the previous count.
      elseif tonumber(i) == w[4] + 1 and tonumber(p) > 0 then new = i .. ':' .. c .. ':' .. (tonumber(p) - 1) end
    end
    if new == '' then redis.call('HDEL', key, field)
    elseif new then redis.call('HSET', key, field, new) end
  end
  -- rec.p: the pumping guard's sent this issue counted. Gone (a hold
  -- cleared the counts since, or its bucket aged out): nothing to give.
  if rec.p then
    local c = tonumber(redis.call('HGET', KEYS[rec.p[1]], rec.p[2]) or '0') or 0
    if c > 1 then redis.call('HINCRBY', KEYS[rec.p[1]], rec.p[2], -1)
    elseif c == 1 then redis.call('HDEL', KEYS[rec.p[1]], rec.p[2]) end
  end
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
  local now_v = rec.v and vget(redis.call('HGET', KEYS[1], rec.v[1]))
  if now_v and now_v[1] == rec.v[2] and not now_v[5] then
    if rec.v[3] ~= '' then
      redis.call('HSET', KEYS[1], rec.v[1], rec.v[3])
    else
      redis.call('HDEL', KEYS[1], rec.v[1])
    end
  end
  return 1
end

local rec = redis.call('GET', undo_key)
if rec == TOMB then return {-1, now, '', 0, 0, 0, 0, -1} end
if rec then return cjson.decode(rec).o end

local ttl, maxatt, price = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local nrules, ncaps, costkey = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local scope = ARGV[11]
local idem = idem_args(13 + nrules * 7 + ncaps * 3 + 8)
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
local pk = ARGV[#ARGV - 6] == 'pump' and tonumber(ARGV[#ARGV - 5]) or 0
if pk > 0 then
  local pkey = KEYS[pk]
  local width = math.ceil(tonumber(ARGV[#ARGV - 4]) / PUMP_BUCKETS)
  local pmin, pppm, phold = tonumber(ARGV[#ARGV - 3]), tonumber(ARGV[#ARGV - 2]), tonumber(ARGV[#ARGV - 1])
  local pshadow = ARGV[#ARGV] == '1'
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
  local a = 13 + r * 7
  local kind, k, field = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2]
  local limit, window, burst = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local shadow, pen = mode_of(ARGV[a + 6])
  if shadow then pen = nil end -- shadow refusals are never counted: it blocks nothing
  local v = redis.call('HGET', KEYS[k], field)
  local ok, remaining, reset, new, hold, nxt, u = true, 0, 0, nil, 0, 0, nil
  local blk = 0 -- on a refusal, how long its penalty block lasts from now (ms)
  local pstart, pcount, puntil = pen_read(pen and redis.call('HGET', KEYS[k], '!' .. field))
  if pen and puntil > now then
    -- Blocked: refused outright, not counted, the block not extended.
    ok, reset, blk = false, puntil - now, puntil - now
  elseif kind == 1 or kind == 5 then
    local log = live_log(v, window)
    if #log >= limit then
      ok, reset = false, tonumber(log[#log - limit + 1]) + window - now
    elseif kind == 1 then
      log[#log + 1] = fmt(now)
      new, hold, u = table.concat(log, ' '), window, fmt(now)
      remaining, reset = limit - #log, tonumber(log[1]) + window - now
      -- Full now: the next issue passes when the oldest counted entry leaves.
      if #log >= limit then nxt = tonumber(log[#log - limit + 1]) + window - now end
    else
      remaining = limit - #log
      reset = #log > 0 and tonumber(log[1]) + window - now or 0
    end
  elseif kind == 2 then
    local idx = math.floor(now / window)
    local count = window_count(v, idx)
    reset = (idx + 1) * window - now
    if count >= limit then
      ok = false
    else
      new, hold, remaining, u = fmt(idx) .. ':' .. (count + 1), reset, limit - count - 1, idx
      if count + 1 >= limit then nxt = reset end
    end
  elseif kind == 3 then
    local step = math.ceil(window / limit)
    local tat = math.max(tonumber(v or 0) or 0, now)
    local allow_at = tat + step - step * burst
    if now < allow_at then
      ok, reset = false, allow_at - now
    else
      new, hold, u = fmt(tat + step), tat + step - now, {step, fmt(tat + step)}
      remaining, reset = math.floor((now - allow_at) / step), tat + step - now
      nxt = math.max(0, allow_at + step - now)
    end
  elseif kind == 4 then
    local untl = tonumber(v or 0) or 0
    if now < untl then
      ok, reset = false, untl - now
    else
      new, hold, reset, nxt = fmt(now + window), window, window, window
      u = {v or '', fmt(now + window)}
    end
  elseif kind == 6 then
    local idx = math.floor(now / window)
    local cur, prev = swc_read(v, idx)
    local elapsed = now - idx * window
    local wait = swc_wait(cur, prev, elapsed, limit, window)
    if wait > 0 then
      ok, reset = false, wait
    else
      -- Every count taken so far weighs until the end of the next window.
      new, hold, u = fmt(idx) .. ':' .. (cur + 1) .. ':' .. prev, (idx + 2) * window - now, idx
      remaining = math.max(0, math.floor((limit * window - (cur + 1) * window - prev * (window - elapsed)) / window))
      reset, nxt = hold, swc_wait(cur + 1, prev, elapsed, limit, window)
    end
  end
  if not ok and pen and puntil <= now then
    local pv, pttl, block = pen_add(pen, pstart, pcount, 1)
    if block > reset then reset = block end
    blk = block
    pens[#pens + 1] = {k, '!' .. field, pv, pttl}
  end
  if not ok and not shadow then refused = true end
  if ok and new then
    writes[#writes + 1] = {k, field, new}
    want(k, hold)
    if type(u) == 'table' then
      undo[#undo + 1] = {k, field, kind, u[1], u[2]}
    else
      undo[#undo + 1] = {k, field, kind, u}
    end
  end
  if ok and not shadow and nxt > next_ms then next_ms = nxt end
  out[#out + 1] = ok and 1 or 0
  out[#out + 1] = blk > 0 and -blk or remaining
  out[#out + 1] = reset
end

-- Caps are named by their window, so two caps with one window share one
-- sum (and take the price once).
local cost_new, cost_undo = {}, {}
if price >= 0 and costkey > 0 then
  local a = 13 + nrules * 7
  for c = 0, ncaps - 1 do
    local field, window, max = ARGV[a + c * 3], tonumber(ARGV[a + c * 3 + 1]), tonumber(ARGV[a + c * 3 + 2])
    local idx = math.floor(now / window)
    local sum = window_count(redis.call('HGET', KEYS[costkey], field), idx)
    local reset = (idx + 1) * window - now
    if sum + price > max then
      refused = true
      if reset > out[6] then out[6] = reset end
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
  for _, p in ipairs(pens) do
    redis.call('HSET', KEYS[p[1]], p[2], p[3])
    if redis.call('PTTL', KEYS[p[1]]) < p[4] then redis.call('PEXPIRE', KEYS[p[1]], p[4]) end
  end
  return out
end

-- The fleet's queue: messages in the stream (queued, claimed or in flight)
-- and held ones. Checked last, so a refusal by a rule says which rule.
local qa = 13 + nrules * 7 + ncaps * 3
local capacity, hold_ms, mid = tonumber(ARGV[qa]), tonumber(ARGV[qa + 1]), ARGV[qa + 2]
local depth = redis.call('XLEN', KEYS[#KEYS - 3]) + redis.call('ZCARD', KEYS[#KEYS - 2])
if depth >= capacity then
  out[8] = depth
  return out
end
-- The caller's share: its members not yet past their code's expiry (the
-- others are pruned: their instance died before their end).
local smax, skey = tonumber(ARGV[qa + 6] or ''), tonumber(ARGV[qa + 7] or '') or 0
local share_at = nil
if skey > 0 then
  share_at = ARGV[qa + 3] .. '\031'
  redis.call('ZREMRANGEBYLEX', KEYS[skey], '[' .. share_at, '(' .. share_at .. string.format('%013.0f', now))
  if smax and redis.call('ZLEXCOUNT', KEYS[skey], '[' .. share_at, '(' .. share_at .. ':') >= smax then
    out[5], out[8] = 1, depth
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
local raw = redis.call('HGET', KEYS[1], scope)
local cur = vget(raw)
local exp = cur and cur[3] or 0
local vrec = nil
if cur and (exp - now) * 3 >= ttl and cur[4] < maxatt then
  out[3], out[5] = cur[1], 0
  -- Continued: an abandon of the issue that created it keeps it.
  redis.call('HSET', KEYS[1], scope, vput(cur[1], cur[2], exp, cur[4], true))
else
  vrec = {scope, ARGV[2], raw or ''}
  exp = now + ttl
  redis.call('HSET', KEYS[1], scope, vput(ARGV[2], ARGV[3], exp, 0, false))
  out[3], out[5] = ARGV[2], 1
end
out[1], out[4], out[7] = 1, exp - now, next_ms
want(1, exp - now)

local member = mid .. ':' .. rid
local msg = KEYS[#KEYS - 1]
redis.call('ZADD', KEYS[#KEYS - 2], now + hold_ms, member)
redis.call('HSET', msg, 's', 'held', 'v', out[3], 'to', ARGV[qa + 5], 'e', fmt(exp), 'sc', scope,
           'a', ARGV[qa + 3], 'p', fmt(price), 't', fmt(now), 'k', ARGV[qa + 4], 'n', 0, 'pk', KEYS[1])
redis.call('PEXPIRE', msg, 86400000)
if share_at then
  local sh = share_at .. string.format('%013.0f', exp) .. '\031' .. mid
  redis.call('ZADD', KEYS[skey], 0, sh)
  redis.call('HSET', msg, 'sh', sh)
end

for k, ms in pairs(keep) do
  if redis.call('PTTL', KEYS[k]) < ms then redis.call('PEXPIRE', KEYS[k], ms) end
end
redis.call('SET', undo_key, cjson.encode({o = out, w = undo, c = cost_undo, v = vrec, m = member, k = KEYS, p = pumped}), 'PX', undo_ttl)
if idem then idem_claim(idem) end
return out
