-- v2.lua: the Twilio Verify surface's records (src/v2/v2.c), on Redis's
-- clock.
--
-- Rows: a service is a field of its account's hash (otp:v2:svc:<AC>), a
-- rate limit one of its service's (otp:v2:rl:<VA>), a bucket one of the
-- service's buckets (otp:v2:bk:<VA>). Each value is
-- "<created s>\31<updated s>\31<rest>"; a rate limit's rest starts with its
-- unique name, a bucket's with its rate limit's SID. Every op names the
-- account's hash (KEYS[1]) and the service (ARGV[2]), so no account reaches
-- another's rows; ARGV[3] is the row's SID, "" for the service itself.
--   KEYS: the account's services, then the service's rate limits and buckets for a service's
--         delete and sx; the row's hash and the other one (a bucket's parents, a rate limit's
--         children) for a rate limit or a bucket
--   rc svc sid rest cap uniq parent -> {1, now} | {0} sid taken | {-1} at cap | {-2} uniq taken
--                                      | {-3} no such service or parent
--   rg svc sid              -> {1, value} | {0}
--   rl svc                  -> {1, sid, value, ...} | {0}
--   ru svc sid rest uniq    -> {1, value} | {0} | {-2}
--   rd svc sid              -> {1} | {0}: a service takes its rate limits and buckets, a rate
--                              limit its buckets
--   sx svc                  -> {1, service, n, rl sid, rl value, ..., bk sid, bk value, ...} | {0}
--
-- Verifications: one hash each, otp:v2:ve:<vid> (fields a s to st c u e att;
-- e the code's expiry in ms, att "<s>:<mid>,..."), living as long as the
-- code and a grace after, and the service's latest one for a number,
-- otp:v2:pv:<service>:<number> (KEYS[2] of vs; KEYS[1] of vp), as long;
-- answered with Redis's time in ms last:
--   vs account service to mid life_ms grace_ms -> {1, a, s, to, st, c, u, e, att, now_ms, vid} | {-1} (another's)
--   vg account service      -> as vs | {0}
--   vu account service st   -> as vs | {0}
--   vp account service      -> as vs, the record the number's key names (KEYS[2]: "otp:v2:ve:") | {0}
local op = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1])
local now_ms = now * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The rest of a row's value (past its two dates).
local function rest_of(v)
  return (string.gsub(v, '^%d+\31%d+\31', '', 1))
end

-- 1 when a row of hash k other than sid has a rest that starts with uniq.
local function taken(k, sid, uniq)
  if uniq == '' then return false end
  local all = redis.call('HGETALL', k)
  for i = 1, #all, 2 do
    if all[i] ~= sid and string.sub(rest_of(all[i + 1]), 1, #uniq + 1) == uniq .. '\31' then return true end
  end
  return false
end

if string.sub(op, 1, 1) == 'r' or op == 'sx' then
  local svc, sid = ARGV[2], ARGV[3]
  local top = sid == '' or op == 'sx'
  local row = KEYS[1]
  if top then
    sid = svc
  else
    row = KEYS[2]
    if redis.call('HEXISTS', KEYS[1], svc) == 0 then
      if op == 'rc' then return {-3} end
      return {0}
    end
  end
  if op == 'sx' then
    local s = redis.call('HGET', KEYS[1], svc)
    if not s then return {0} end
    local rl, bk = redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3])
    local out = {1, s, #rl / 2}
    for i = 1, #rl do out[#out + 1] = rl[i] end
    for i = 1, #bk do out[#out + 1] = bk[i] end
    return out
  elseif op == 'rc' then
    if redis.call('HEXISTS', row, sid) == 1 then return {0} end
    if redis.call('HLEN', row) >= tonumber(ARGV[5]) then return {-1} end
    if taken(row, sid, ARGV[6]) then return {-2} end
    if ARGV[7] ~= '' and redis.call('HEXISTS', KEYS[3], ARGV[7]) == 0 then return {-3} end
    redis.call('HSET', row, sid, now .. '\31' .. now .. '\31' .. ARGV[4])
    return {1, now}
  elseif op == 'rg' then
    local v = redis.call('HGET', row, sid)
    if not v then return {0} end
    return {1, v}
  elseif op == 'rl' then
    local all = redis.call('HGETALL', row)
    local out = {1}
    for i = 1, #all do out[#out + 1] = all[i] end
    return out
  elseif op == 'ru' then
    local v = redis.call('HGET', row, sid)
    if not v then return {0} end
    if taken(row, sid, ARGV[5]) then return {-2} end
    v = string.match(v, '^(%d+)\31') .. '\31' .. now .. '\31' .. ARGV[4]
    redis.call('HSET', row, sid, v)
    return {1, v}
  elseif op == 'rd' then
    if redis.call('HDEL', row, sid) == 0 then return {0} end
    if top then
      redis.call('DEL', KEYS[2], KEYS[3])
    else
      local all = redis.call('HGETALL', KEYS[3])
      for i = 1, #all, 2 do
        if string.sub(rest_of(all[i + 1]), 1, #sid + 1) == sid .. '\31' then redis.call('HDEL', KEYS[3], all[i]) end
      end
    end
    return {1}
  end
  return redis.error_reply('v2.lua: unknown op')
end

local function rec(k)
  local r = redis.call('HMGET', k, 'a', 's', 'to', 'st', 'c', 'u', 'e', 'att')
  return {1, r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], now_ms, string.sub(k, 11)}
end

local k = KEYS[1]
if op == 'vp' then
  local vid = redis.call('GET', KEYS[1])
  if not vid then return {0} end
  k = KEYS[2] .. vid
end
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
  redis.call('SET', KEYS[2], string.sub(k, 11), 'PX', life + grace)
  return rec(k)
end
if not a then return {0} end
if op == 'vu' then
  redis.call('HSET', k, 'st', ARGV[4], 'u', now)
end
return rec(k)
