-- v2.lua: the Twilio Verify surface's records (src/v2/v2.c), on Redis's
-- clock. A service is one field of its account's hash, a verification one
-- hash of its own that lives as long as its code and a grace after.
--   KEYS[1]: otp:v2:svc:<account> (s*) or otp:v2:ve:<vid> (v*)
--   ARGV[1]: the op
-- Services, each field "<created s>\31<updated s>\31<the rest>":
--   sc sid rest cap      -> {1, now} | {-1} (at cap) | {0} (sid taken)
--   sg sid               -> {1, value} | {0}
--   sl                   -> {sid, value, ...}
--   su sid rest          -> {1, value} | {0}
--   sd sid               -> {1} | {0}
-- Verifications (fields a s to st c u e att; e the code's expiry in ms,
-- att "<s>:<mid>,..."), answered with Redis's time in ms last:
--   vs account service to mid life_ms grace_ms -> {1, a, s, to, st, c, u, e, att, now_ms} | {-1} (another's)
--   vg account service   -> as vs | {0}
--   vu account service st -> as vs | {0}
local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1])
local now_ms = now * 1000 + math.floor(tonumber(t[2]) / 1000)

local function rec(k)
  local r = redis.call('HMGET', k, 'a', 's', 'to', 'st', 'c', 'u', 'e', 'att')
  return {1, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], now_ms}
end

if op == 'sc' then
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then return {0} end
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return {-1} end
  redis.call('HSET', KEYS[1], ARGV[2], now .. '\31' .. now .. '\31' .. ARGV[3])
  return {1, now}
elseif op == 'sg' then
  local v = redis.call('HGET', KEYS[1], ARGV[2])
  if not v then return {0} end
  return {1, v}
elseif op == 'sl' then
  return redis.call('HGETALL', KEYS[1])
elseif op == 'su' then
  local v = redis.call('HGET', KEYS[1], ARGV[2])
  if not v then return {0} end
  local c = string.match(v, '^(%d+)\31')
  v = c .. '\31' .. now .. '\31' .. ARGV[3]
  redis.call('HSET', KEYS[1], ARGV[2], v)
  return {1, v}
elseif op == 'sd' then
  return {redis.call('HDEL', KEYS[1], ARGV[2])}
end

local k = KEYS[1]
local r0 = redis.call('HMGET', k, 'a', 's')
local a, s = r0[1], r0[2]
if a and (a ~= ARGV[2] or s ~= ARGV[3]) then
  if op == 'vs' then return {-1} end
  return {0}
end
if op == 'vs' then
  local life, grace = tonumber(ARGV[6]), tonumber(ARGV[7])
  local att = now .. ':' .. ARGV[5]
  if a then
    local old = redis.call('HGET', k, 'att')
    -- The last few attempts are kept: a pending verification takes at
    -- most a handful of sends under the resend delay and the phone's rules.
    local n = select(2, string.gsub(old, ',', ',')) + 1
    if n >= 10 then old = string.gsub(old, '^[^,]*,', '') end
    att = old .. ',' .. att
    redis.call('HSET', k, 'u', now, 'e', now_ms + life, 'att', att)
  else
    redis.call('HSET', k, 'a', ARGV[2], 's', ARGV[3], 'to', ARGV[4], 'st', 'pending', 'c', now, 'u', now,
               'e', now_ms + life, 'att', att)
  end
  redis.call('PEXPIRE', k, life + grace)
  return rec(k)
end
if not a then return {0} end
if op == 'vu' then
  redis.call('HSET', k, 'st', ARGV[4], 'u', now)
end
return rec(k)
