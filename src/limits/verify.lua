-- verify.lua: one guess against the phone's live verification, in one
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
-- KEYS[1] the phone's hash, otp:{+91...}; KEYS[2] the undo key
-- ARGV: op ('v' verify, 'a' abandon), guess hash, max_attempts,
--       wrong-guess field ('' when no rule), its limit, its window_ms, its
--       shadow flag ('1' or '0'), undo_ttl_ms
-- Returns {status, id, attempts_left, window_left_ms, shadow_lock,
-- wrong_count}; status is 'ok', 'wrong', 'locked', 'none' or 'abandoned'.
-- window_left_ms is when the oldest counted wrong guess leaves the window
-- (the lock's end for 'locked'). Abandon returns 1 when it gave back, else 0.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, undo_key = KEYS[1], KEYS[2]
local undo_ttl = tonumber(ARGV[8])
local TOMB = 'x'

if ARGV[1] == 'a' then
  local rec = redis.call('GET', undo_key)
  redis.call('SET', undo_key, TOMB, 'PX', undo_ttl)
  if not rec or rec == TOMB then return 0 end
  rec = cjson.decode(rec)
  local cur = redis.call('HMGET', key, 'i', 'a')
  if rec.k == 'count' then
    if cur[1] == rec.v[1] then
      redis.call('HSET', key, 'a', math.max(0, (tonumber(cur[2]) or 0) - 1))
    end
  elseif rec.v[1] ~= '' and not cur[1] then
    local left = (tonumber(rec.v[3]) or 0) - now
    if left > 0 then
      redis.call('HSET', key, 'i', rec.v[1], 'h', rec.v[2], 'e', rec.v[3], 'a', rec.v[4])
      if redis.call('PTTL', key) < left then redis.call('PEXPIRE', key, left) end
    end
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

-- The undo record, written when the guess changes something. kind: 'end'
-- when this guess ended the verification, 'count' when it only counted an
-- attempt on it.
local function done(reply, prev, kind, added)
  redis.call('SET', undo_key, cjson.encode({o = reply, v = prev, k = kind, w = added or '', f = wfield}),
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

local cur = redis.call('HMGET', key, 'i', 'h', 'e', 'a')
local att = tonumber(cur[4] or 0) or 0
local prev = {cur[1] or '', cur[2] or '', cur[3] or '', cur[4] or ''}
if not cur[1] or (tonumber(cur[3]) or 0) <= now or att >= maxatt then
  if cur[1] then redis.call('HDEL', key, 'i', 'h', 'e', 'a', 'n') end
  return {'none', '', 0, retry, slock, #log}
end
if cur[2] == guess then
  redis.call('HDEL', key, 'i', 'h', 'e', 'a', 'n')
  return done({'ok', cur[1], maxatt - att, retry, slock, #log}, prev, 'end')
end

att = att + 1
local kind = 'count'
if att >= maxatt then
  redis.call('HDEL', key, 'i', 'h', 'e', 'a', 'n')
  kind = 'end'
else
  redis.call('HSET', key, 'a', att)
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
