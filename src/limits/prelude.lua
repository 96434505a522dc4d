-- prelude.lua: what issue.lua and verify.lua share, once. The Makefile
-- prepends it to each of them at build time (one C string: this file, then
-- the script), so a script's own text reads as if these locals were its
-- first lines. It runs nothing but TIME; the rest are locals: Redis's
-- clock, the request id, the argument groups both scripts take (named as
-- limits_int.h names them), a rule's check and its give-back, the penalty
-- counts, a verification's field and an Idempotency-Key's part.
--
-- Each script reads its own fixed ARGV once at its top; the groups below
-- sit where that script's layout puts them, so they are read from a base
-- index (the group's first ARGV) plus the group's named offsets.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The undo key otp:u:<rid> is every call's last KEYS (limits_int.h's
-- IK_UNDO and VK_UNDO, counted from the end); the request id is its last part.
local undo_key = KEYS[#KEYS]
local rid = string.match(undo_key, '[^:]+$')
local TOMB = 'x'
-- The pumping guard's buckets per window (issue.lua, "The pumping guard").
local PUMP_BUCKETS = 12

-- A rule's 7 ARGV from its base (enum rule_argv): kind, key index, field,
-- limit, window_ms, burst, mode; the next rule's start RA_N further on.
local RA_KIND, RA_KEY, RA_FIELD, RA_LIMIT, RA_WINDOW, RA_BURST, RA_MODE, RA_N = 0, 1, 2, 3, 4, 5, 6, 7
-- An Idempotency-Key's 4 ARGV from its base (enum idem_argv): the KEYS
-- index of its hash (0: none; the caller's count is the next key), the
-- request's hash, claim_ms, max_keys.
local XA_KEY, XA_HASH, XA_CLAIM_MS, XA_MAX_KEYS, XA_N = 0, 1, 2, 3, 4
-- The pumping guard's ARGV, the last of the list (enum pump_argv): counted
-- from #ARGV - PA_N + 1, so they never depend on the counts before them.
-- The word 'pump' (a caller that passes none has the guard off), its KEYS
-- index (0: off), window_ms; issue.lua's also min_sent, the min verified
-- ratio in millionths, hold_ms and shadow ('1' or '0'). verify.lua's
-- group is the first PA_VERIFY_N.
local PA_WORD, PA_KEY, PA_WINDOW, PA_MIN_SENT, PA_RATIO, PA_HOLD, PA_SHADOW, PA_N = 0, 1, 2, 3, 4, 5, 6, 7
local PA_VERIFY_N = 3

local function fmt(n) return string.format('%.0f', n) end

-- A rule's mode: shadow (true/false), and its penalty {after, within_ms,
-- block_ms} or nil.
local function mode_of(s)
  local sh, pa, pw, pb = string.match(s, '^([01]):(%d+):(%d+):(%d+)$')
  if not sh then return s == '1', nil end
  return sh == '1', {tonumber(pa), tonumber(pw), tonumber(pb)}
end

-- A penalty field: start, count, until (issue.lua, "Penalties").
local function pen_read(v)
  local st, c, u = string.match(v or '', '^(%d+):(%d+):(%d+)$')
  return tonumber(st) or 0, tonumber(c) or 0, tonumber(u) or 0
end

-- Counts n refusals, now, toward penalty pen ({after, within_ms,
-- block_ms}) whose field held pstart and pcount (pen_read) and no block in
-- force: the field's new value, how long it must live (ms) and, when the
-- count reached after, the block's length (else 0). The rules count each
-- refusal through it, issue.lua's op 'p' a refusal cache's hits.
local function pen_add(pen, pstart, pcount, n)
  if pstart + pen[2] <= now then pstart, pcount = now, 0 end
  pcount = pcount + n
  if pcount >= pen[1] then return '0:0:' .. fmt(now + pen[3]), pen[3], pen[3] end
  return fmt(pstart) .. ':' .. pcount .. ':0', pstart + pen[2] - now, 0
end

-- Writes the penalty counts of refused rules: {key index, field, value,
-- ttl_ms} each. The only write a refused request makes.
local function pens_write(pens)
  for _, p in ipairs(pens) do
    redis.call('HSET', KEYS[p[1]], p[2], p[3])
    if redis.call('PTTL', KEYS[p[1]]) < p[4] then redis.call('PEXPIRE', KEYS[p[1]], p[4]) end
  end
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

-- One rule of kind on its state v, now: ok, remaining, reset (ms), and
-- when it takes, its new state, how long that must live (hold, ms), when a
-- next request would pass (nxt, ms) and what its abandon needs (u, a list:
-- the undo record's last values). kinds: 1 sliding_log, 2 fixed_window,
-- 3 token_bucket, 4 resend_delay, 5 wrong_guess_cap (checked only: verify
-- writes it), 6 sliding_window_counter (issue.lua's header).
local function rule_eval(kind, v, limit, window, burst)
  local ok, remaining, reset, new, hold, nxt, u = true, 0, 0, nil, 0, 0, nil
  if kind == 1 or kind == 5 then
    local log = live_log(v, window)
    if #log >= limit then
      ok, reset = false, tonumber(log[#log - limit + 1]) + window - now
    elseif kind == 1 then
      log[#log + 1] = fmt(now)
      new, hold, u = table.concat(log, ' '), window, {fmt(now)}
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
      new, hold, remaining, u = fmt(idx) .. ':' .. (count + 1), reset, limit - count - 1, {idx}
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
      new, hold, u = fmt(idx) .. ':' .. (cur + 1) .. ':' .. prev, (idx + 2) * window - now, {idx}
      remaining = math.max(0, math.floor((limit * window - (cur + 1) * window - prev * (window - elapsed)) / window))
      reset, nxt = hold, swc_wait(cur + 1, prev, elapsed, limit, window)
    end
  end
  return ok, remaining, reset, new, hold, nxt, u
end

-- The rule whose ARGV group starts at base (RA_*), checked on its state
-- now (issue.lua, "Penalties": a block refuses outright, uncounted; any
-- other enforced refusal counts toward the penalty). A verdict: {ok, rem
-- (the reply's remaining: minus the penalty block's ms from now when a
-- block refuses or starts), reset, shadow, k (its KEYS index), field,
-- kind, new, hold, nxt, u (rule_eval's), pen (the penalty count to write
-- if the request is refused: {k, field, value, ttl_ms}, or nil)}.
local function rule_check(base)
  local kind, k, field = tonumber(ARGV[base + RA_KIND]), tonumber(ARGV[base + RA_KEY]), ARGV[base + RA_FIELD]
  local limit, window, burst = tonumber(ARGV[base + RA_LIMIT]), tonumber(ARGV[base + RA_WINDOW]), tonumber(ARGV[base + RA_BURST])
  local shadow, pen = mode_of(ARGV[base + RA_MODE])
  if shadow then pen = nil end -- shadow refusals are never counted: it blocks nothing
  local v = redis.call('HGET', KEYS[k], field)
  local ok, remaining, reset, new, hold, nxt, u = true, 0, 0, nil, 0, 0, nil
  local blk = 0 -- on a refusal, how long its penalty block lasts from now (ms)
  local pv = nil
  local pstart, pcount, puntil = pen_read(pen and redis.call('HGET', KEYS[k], '!' .. field))
  if pen and puntil > now then
    -- Blocked: refused outright, not counted, the block not extended.
    ok, reset, blk = false, puntil - now, puntil - now
  else
    ok, remaining, reset, new, hold, nxt, u = rule_eval(kind, v, limit, window, burst)
  end
  if not ok and pen and puntil <= now then
    local value, pttl, block = pen_add(pen, pstart, pcount, 1)
    if block > reset then reset = block end
    blk = block
    pv = {k, '!' .. field, value, pttl}
  end
  return {ok = ok, rem = blk > 0 and -blk or remaining, reset = reset, shadow = shadow, k = k, field = field,
          kind = kind, new = new, hold = hold, nxt = nxt, u = u, pen = pv}
end

-- Appends a verdict's 3 reply values (enum issue_reply's per rule: ok,
-- remaining, reset) to reply.
local function verdict_add(reply, c)
  reply[#reply + 1] = c.ok and 1 or 0
  reply[#reply + 1] = c.rem
  reply[#reply + 1] = c.reset
end

-- The undo record of a verdict that took: {key index, field, kind, u...}.
local function take_record(c)
  return {c.k, c.field, c.kind, c.u[1], c.u[2]}
end

-- Gives back one take of an undo record (take_record): only what it took,
-- never what others took since.
local function take_back(w)
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

-- Gives back the pumping guard's count an undo record holds ({key index,
-- field}: issue.lua's sent, verify.lua's verified). Gone (a hold cleared
-- the counts since, or its bucket aged out): nothing to give.
local function pump_back(p)
  local c = tonumber(redis.call('HGET', KEYS[p[1]], p[2]) or '0') or 0
  if c > 1 then redis.call('HINCRBY', KEYS[p[1]], p[2], -1)
  elseif c == 1 then redis.call('HDEL', KEYS[p[1]], p[2]) end
end

-- A verification's field: {vid, hash, exp, att, continued}, or nil
-- (issue.lua: the separator is '+' once another issue continued it).
local function vget(v)
  if not v then return nil end
  local e, sep, n = string.match(string.sub(v, 49), '^(%d+)([:+])(%d+)$')
  return {string.sub(v, 1, 32), string.sub(v, 33, 48), tonumber(e) or 0, tonumber(n) or 0, sep == '+'}
end

local function vput(vid, hash, exp, att, continued)
  return vid .. hash .. fmt(exp) .. (continued and '+' or ':') .. att
end

-- An Idempotency-Key's group from base (XA_*; issue.lua,
-- "Idempotency-Key"), or nil when the request has none.
local function idem_args(base)
  local k = tonumber(ARGV[base + XA_KEY] or '') or 0
  if k == 0 then return nil end
  return {k = KEYS[k], c = KEYS[k + 1], h = ARGV[base + XA_HASH], ms = tonumber(ARGV[base + XA_CLAIM_MS]),
          max = tonumber(ARGV[base + XA_MAX_KEYS])}
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
