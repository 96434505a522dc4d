-- verify.lua: one guess against the live verification of (phone, caller,
-- purpose), in one
-- atomic step on Redis's clock: the lock check, the comparison of keyed
-- hashes, the attempt count on the code and on the phone's wrong-guess
-- log, and the end of the verification on success.
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
-- ARGV: op ('v' verify, 'a' abandon), guess hash, max_attempts,
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

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The replay clock (otpctl simulate); otpd always passes 0: Redis's own.
if ARGV[1] == 'v' and (tonumber(ARGV[11]) or 0) > 0 then now = tonumber(ARGV[11]) end
local key, undo_key = KEYS[1], KEYS[#KEYS]
local undo_ttl = tonumber(ARGV[8])
local TOMB = 'x'

local scope = ARGV[9]

local function fmt(n) return string.format('%.0f', n) end

-- A rule's mode, a penalty field, a sliding-window-counter's state and its
-- wait: as in issue.lua.
local function mode_of(s)
  local sh, pa, pw, pb = string.match(s, '^([01]):(%d+):(%d+):(%d+)$')
  if not sh then return s == '1', nil end
  return sh == '1', {tonumber(pa), tonumber(pw), tonumber(pb)}
end

local function pen_read(v)
  local st, c, u = string.match(v or '', '^(%d+):(%d+):(%d+)$')
  return tonumber(st) or 0, tonumber(c) or 0, tonumber(u) or 0
end

local function swc_read(v, idx)
  local i, c, p = string.match(v or '', '^(%d+):(%d+):(%d+)$')
  i = tonumber(i)
  if i == idx then return tonumber(c), tonumber(p) end
  if i == idx - 1 then return 0, tonumber(c) end
  return 0, 0
end

local function swc_wait(cur, prev, elapsed, limit, window)
  if cur * window + prev * (window - elapsed) < limit * window then return 0 end
  if cur >= limit then return window - elapsed + math.floor(window * (cur - limit) / cur) + 1 end
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

-- A verification's field: {vid, hash, exp, att, continued}, or nil (see
-- issue.lua: the separator is '+' once another issue continued it).
local function vget(v)
  if not v then return nil end
  local e, sep, n = string.match(string.sub(v, 49), '^(%d+)([:+])(%d+)$')
  return {string.sub(v, 1, 32), string.sub(v, 33, 48), tonumber(e) or 0, tonumber(n) or 0, sep == '+'}
end

local function vput(vid, hash, exp, att, continued)
  return vid .. hash .. fmt(exp) .. (continued and '+' or ':') .. att
end

-- An Idempotency-Key's ARGV, its check, claim and drop: as in issue.lua.
local rid = string.match(undo_key, '[^:]+$')

local function idem_args(a)
  local k = tonumber(ARGV[a] or '') or 0
  if k == 0 then return nil end
  return {k = KEYS[k], c = KEYS[k + 1], h = ARGV[a + 1], ms = tonumber(ARGV[a + 2]), max = tonumber(ARGV[a + 3])}
end

local function idem_check(I)
  if redis.call('EXISTS', I.k) == 1 then return -1 end
  redis.call('ZREMRANGEBYSCORE', I.c, '-inf', now)
  if redis.call('ZCARD', I.c) < I.max then return nil end
  local first = redis.call('ZRANGE', I.c, 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(first[2]) - now)
end

local function idem_claim(I)
  redis.call('HSET', I.k, 'h', I.h, 'o', rid)
  redis.call('PEXPIRE', I.k, I.ms)
  redis.call('ZADD', I.c, now + I.ms, I.k)
  if redis.call('PTTL', I.c) < I.ms then redis.call('PEXPIRE', I.c, I.ms) end
end

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

if ARGV[1] == 'k' then
  local cur = vget(redis.call('HGET', key, scope))
  if not cur then return {''} end
  redis.call('HDEL', key, scope)
  if cur[3] <= now then return {''} end
  return {cur[1]}
end

if ARGV[1] == 'a' then
  local rec = redis.call('GET', undo_key)
  redis.call('SET', undo_key, TOMB, 'PX', undo_ttl)
  if not rec or rec == TOMB then return 0 end
  rec = cjson.decode(rec)
  idem_drop()
  -- rec.p: the pumping guard's verified this guess counted (issue.lua's
  -- abandon gives back its sent the same way).
  if rec.p then
    local c = tonumber(redis.call('HGET', KEYS[rec.p[1]], rec.p[2]) or '0') or 0
    if c > 1 then redis.call('HINCRBY', KEYS[rec.p[1]], rec.p[2], -1)
    elseif c == 1 then redis.call('HDEL', KEYS[rec.p[1]], rec.p[2]) end
  end
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
  for _, w in ipairs(rec.t or {}) do
    local k, field, kind = KEYS[w[1]], w[2], w[3]
    local v = redis.call('HGET', k, field)
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
      -- Only while this take still holds the bucket back (as in issue.lua).
      new = fmt(math.max(now, tonumber(v) - w[4]))
    elseif kind == 6 then
      local i, c, p = string.match(v or '', '^(%d+):(%d+):(%d+)$')
      if tonumber(i) == w[4] and tonumber(c) > 0 then new = fmt(w[4]) .. ':' .. (tonumber(c) - 1) .. ':' .. p
      -- Rolled into the next window by a later take: it weighs there as
      -- part of the previous count.
      elseif tonumber(i) == w[4] + 1 and tonumber(p) > 0 then new = i .. ':' .. c .. ':' .. (tonumber(p) - 1) end
    end
    if new == '' then redis.call('HDEL', k, field)
    elseif new then redis.call('HSET', k, field, new) end
  end
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

local guess, maxatt = ARGV[2], tonumber(ARGV[3])
local wfield, wlimit, wwindow = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local shadow = ARGV[7] == '1'
local log, retry = {}, 0

local nrules = tonumber(ARGV[10]) or 0
local idem = idem_args(12 + nrules * 7)
if idem then
  local wait = idem_check(idem)
  if wait == -1 then return {'taken', '', 0, 0, 0, 0} end
  if wait then return {'keys', '', 0, wait, 0, 0} end
end
local rout, takes, refused, pens = {}, {}, false, {}
for r = 0, nrules - 1 do
  local a = 12 + r * 7
  local kind, k, field = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2]
  local limit, window, burst = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local shadow_r, pen = mode_of(ARGV[a + 6])
  if shadow_r then pen = nil end -- shadow refusals are never counted
  local v = redis.call('HGET', KEYS[k], field)
  local ok, remaining, reset, new, hold, u = true, 0, 0, nil, 0, nil
  local blk = 0 -- on a refusal, how long its penalty block lasts from now (ms)
  local pstart, pcount, puntil = pen_read(pen and redis.call('HGET', KEYS[k], '!' .. field))
  if pen and puntil > now then
    ok, reset, blk = false, puntil - now, puntil - now
  elseif kind == 1 then
    local entries = {}
    for ts in string.gmatch(v or '', '%d+') do
      if tonumber(ts) > now - window then entries[#entries + 1] = ts end
    end
    if #entries >= limit then
      ok, reset = false, tonumber(entries[#entries - limit + 1]) + window - now
    else
      entries[#entries + 1] = fmt(now)
      new, hold, u = table.concat(entries, ' '), window, fmt(now)
      remaining, reset = limit - #entries, tonumber(entries[1]) + window - now
    end
  elseif kind == 2 then
    local idx = math.floor(now / window)
    local count = window_count(v, idx)
    reset = (idx + 1) * window - now
    if count >= limit then
      ok = false
    else
      new, hold, remaining, u = fmt(idx) .. ':' .. (count + 1), reset, limit - count - 1, idx
    end
  elseif kind == 3 then
    local step = math.ceil(window / limit)
    local tat = math.max(tonumber(v or 0) or 0, now)
    local allow_at = tat + step - step * burst
    if now < allow_at then
      ok, reset = false, allow_at - now
    else
      new, hold, u = fmt(tat + step), tat + step - now, step
      remaining, reset = math.floor((now - allow_at) / step), tat + step - now
    end
  elseif kind == 6 then
    local idx = math.floor(now / window)
    local cur, prev = swc_read(v, idx)
    local elapsed = now - idx * window
    local wait = swc_wait(cur, prev, elapsed, limit, window)
    if wait > 0 then
      ok, reset = false, wait
    else
      new, hold, u = fmt(idx) .. ':' .. (cur + 1) .. ':' .. prev, (idx + 2) * window - now, idx
      remaining = math.max(0, math.floor((limit * window - (cur + 1) * window - prev * (window - elapsed)) / window))
      reset = hold
    end
  end
  if not ok and pen and puntil <= now then
    if pstart + pen[2] <= now then pstart, pcount = now, 0 end
    pcount = pcount + 1
    if pcount >= pen[1] then
      puntil = now + pen[3]
      if pen[3] > reset then reset = pen[3] end
      blk = pen[3]
      pens[#pens + 1] = {k, '!' .. field, '0:0:' .. fmt(puntil), pen[3]}
    else
      pens[#pens + 1] = {k, '!' .. field, fmt(pstart) .. ':' .. pcount .. ':0', pstart + pen[2] - now}
    end
  end
  if not ok and not shadow_r then refused = true end
  if ok and new then takes[#takes + 1] = {k, field, kind, u, new, hold} end
  rout[#rout + 1] = ok and 1 or 0
  rout[#rout + 1] = blk > 0 and -blk or remaining
  rout[#rout + 1] = reset
end

-- The reply with the rules' verdicts after the fixed values.
local function reply_of(r)
  for _, x in ipairs(rout) do r[#r + 1] = x end
  return r
end

-- Penalty counts come only from enforced refusals: a refused verify
-- writes them, and nothing else.
for _, p in ipairs(pens) do
  redis.call('HSET', KEYS[p[1]], p[2], p[3])
  if redis.call('PTTL', KEYS[p[1]]) < p[4] then redis.call('PEXPIRE', KEYS[p[1]], p[4]) end
end
if refused then return reply_of({'limited', '', 0, 0, 0, 0}) end
local undo_t = {}
for _, w in ipairs(takes) do
  redis.call('HSET', KEYS[w[1]], w[2], w[5])
  if redis.call('PTTL', KEYS[w[1]]) < w[6] then redis.call('PEXPIRE', KEYS[w[1]], w[6]) end
  -- A bucket's take also records the time it set (see the abandon).
  undo_t[#undo_t + 1] = {w[1], w[2], w[3], w[4], w[3] == 3 and w[5] or nil}
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
  for ts in string.gmatch(redis.call('HGET', key, wfield) or '', '%d+') do
    if tonumber(ts) > now - wwindow then log[#log + 1] = ts end
  end
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
  local pk = ARGV[#ARGV - 2] == 'pump' and tonumber(ARGV[#ARGV - 1]) or 0
  if pk > 0 and (tonumber(redis.call('HGET', KEYS[pk], 'h') or '0') or 0) <= now then
    local width = math.ceil(tonumber(ARGV[#ARGV]) / 12) -- issue.lua's PUMP_BUCKETS
    pumped = {pk, 'v' .. string.format('%.0f', math.floor(now / width))}
    redis.call('HINCRBY', KEYS[pk], pumped[2], 1)
    if redis.call('PTTL', KEYS[pk]) < width * 12 then redis.call('PEXPIRE', KEYS[pk], width * 12) end
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
local stamp = string.format('%.0f', now)
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
