-- verify.lua: one guess against the phone's live verification, in one
-- atomic step on Redis's clock: the lock check, the comparison of keyed
-- hashes, the attempt count on the code and on the phone's daily
-- wrong-guess counter, and the end of the verification on success.
--
-- KEYS[1] the phone's hash, otp:{+91...}
-- ARGV: guess hash, max_attempts, wrong-guess field ('' when no rule),
--       its limit, its window_ms, its shadow flag ('1' or '0')
-- Returns {status, id, attempts_left, window_left_ms, shadow_lock,
-- wrong_count}; status is 'ok', 'wrong', 'locked' or 'none'. A lock lasts
-- window_left_ms, until the wrong-guess window ends.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, guess, maxatt = KEYS[1], ARGV[1], tonumber(ARGV[2])
local wfield, wlimit, wwindow = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local shadow = ARGV[6] == '1'
local idx, wrong, retry = 0, 0, 0

if wfield ~= '' then
  idx = math.floor(now / wwindow)
  retry = (idx + 1) * wwindow - now
  local v = redis.call('HGET', key, wfield)
  if v then
    local i, c = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == idx then wrong = tonumber(c) end
  end
  if wrong >= wlimit and not shadow then return {'locked', '', 0, retry, 0, wrong} end
end
-- A shadow cap sees what enforcement would: a phone already at the cap
-- would be locked whatever the guess.
local slock = (shadow and wfield ~= '' and wrong >= wlimit) and 1 or 0

local cur = redis.call('HMGET', key, 'i', 'h', 'e', 'a')
local att = tonumber(cur[4] or 0) or 0
if not cur[1] or (tonumber(cur[3]) or 0) <= now or att >= maxatt then
  if cur[1] then redis.call('HDEL', key, 'i', 'h', 'e', 'a') end
  return {'none', '', 0, retry, slock, wrong}
end
if cur[2] == guess then
  redis.call('HDEL', key, 'i', 'h', 'e', 'a')
  return {'ok', cur[1], maxatt - att, retry, slock, wrong}
end

att = att + 1
if att >= maxatt then
  redis.call('HDEL', key, 'i', 'h', 'e', 'a')
else
  redis.call('HSET', key, 'a', att)
end
if wfield == '' then return {'wrong', cur[1], maxatt - att, 0, 0, 0} end
wrong = wrong + 1
redis.call('HSET', key, wfield, string.format('%.0f', idx) .. ':' .. wrong)
if redis.call('PTTL', key) < retry then redis.call('PEXPIRE', key, retry) end
if wrong >= wlimit then
  if shadow then return {'wrong', cur[1], maxatt - att, retry, 1, wrong} end
  return {'locked', cur[1], maxatt - att, retry, 0, wrong}
end
return {'wrong', cur[1], maxatt - att, retry, 0, wrong}
