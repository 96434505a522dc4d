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
-- (abandon) puts the verification back as it was and removes the
-- wrong-guess time, or leaves a tombstone when the guess has not run yet.
-- Once otpd has read the reply it deletes the record (issue.lua's op 'c').
--
-- KEYS[1] the phone's hash, otp:{+91...}; KEYS[2] the undo key
-- ARGV: op ('v' verify, 'a' abandon), guess hash, max_attempts,
--       wrong-guess field ('' when no rule), its limit, its window_ms, its
--       shadow flag ('1' or '0'), undo_ttl_ms, scope (the verification's
--       field in the phone's hash; see issue.lua for its value)
-- op 'k' (cancel) ends the scope's live verification and returns {vid},
-- {''} when none is live.
-- Returns {status, id, attempts_left, window_left_ms, shadow_lock,
-- wrong_count}; status is 'ok', 'wrong', 'locked', 'none' or 'abandoned'.
-- window_left_ms is when the oldest counted wrong guess leaves the window
-- (the lock's end for 'locked'). Abandon returns 1 when it gave back, else 0.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, undo_key = KEYS[1], KEYS[2]
local undo_ttl = tonumber(ARGV[8])
local TOMB = 'x'

local scope = ARGV[9]

-- A verification's field: {vid, hash, exp, att}, or nil (see issue.lua).
local function vget(v)
  if not v then return nil end
  local e, n = string.match(string.sub(v, 49), '^(%d+):(%d+)$')
  return {string.sub(v, 1, 32), string.sub(v, 33, 48), tonumber(e) or 0, tonumber(n) or 0}
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
  -- rec.v: the verification's field before the guess ('' when none);
  -- put back unless a newer issue replaced it since.
  local cur = vget(redis.call('HGET', key, rec.s))
  if rec.v ~= '' and (not cur or cur[1] == string.sub(rec.v, 1, 32)) then
    redis.call('HSET', key, rec.s, rec.v)
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

-- The undo record, written when the guess changes something.
local function done(reply, prev, added)
  redis.call('SET', undo_key, cjson.encode({o = reply, v = prev, w = added or '', f = wfield, s = scope}),
             'PX', undo_ttl)
  return reply
end

if wfield ~= '' then
  for ts in string.gmatch(redis.call('HGET', key, wfield) or '', '%d+') do
    if tonumber(ts) > now - wwindow then log[#log + 1] = ts end
  end
  if #log > 0 then retry = tonumber(log[math.max(1, #log - wlimit + 1)]) + wwindow - now end
  if #log >= wlimit and not shadow then return {'locked', '', 0, retry, 0, #log} end
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
  return {'none', '', 0, retry, slock, #log}
end
if cur[2] == guess then
  redis.call('HDEL', key, scope)
  return done({'ok', cur[1], maxatt - att, retry, slock, #log}, prev)
end

att = att + 1
if att >= maxatt then
  redis.call('HDEL', key, scope)
else
  redis.call('HSET', key, scope, cur[1] .. cur[2] .. string.format('%.0f', cur[3]) .. ':' .. att)
end
if wfield == '' then return done({'wrong', cur[1], maxatt - att, 0, 0, 0}, prev) end
-- Keep at most limit times: older ones can no longer decide a lock.
local stamp = string.format('%.0f', now)
log[#log + 1] = stamp
while #log > wlimit do table.remove(log, 1) end
redis.call('HSET', key, wfield, table.concat(log, ' '))
if redis.call('PTTL', key) < wwindow then redis.call('PEXPIRE', key, wwindow) end
retry = tonumber(log[1]) + wwindow - now
if #log >= wlimit then
  if shadow then return done({'wrong', cur[1], maxatt - att, retry, 1, #log}, prev, stamp) end
  return done({'locked', cur[1], maxatt - att, retry, 0, #log}, prev, stamp)
end
return done({'wrong', cur[1], maxatt - att, retry, 0, #log}, prev, stamp)
