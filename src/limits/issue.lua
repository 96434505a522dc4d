-- issue.lua: every limit of one issue request, checked and taken in one
-- atomic step on Redis's clock, plus the cost reservation and the start (or
-- continuation) of the phone's verification. All or nothing: when an
-- enforced rule or a cost cap refuses, nothing is written.
--
-- KEYS[1]   the phone's hash, otp:{+91...}: verification fields and one
--           field per phone rule
-- KEYS[2..] the other keys that rules (and the cost caps) use, each a hash
--           with one field per rule
-- ARGV: vid, vhash, ttl_ms, max_attempts, price (-1: none), nrules, ncaps,
--       cost key index (0: none), then 7 per rule:
--       kind, key index, field, limit, window_ms, burst, shadow
--       then 3 per cap: field, window_ms, max
-- kinds: 1 sliding_log, 2 fixed_window, 3 token_bucket, 4 resend_delay,
--        5 wrong_guess_cap
-- Returns {allowed, now_ms, vid, expires_in_ms, is_new, cost_retry_ms,
--          then 3 per rule: verdict (1 ok, 0 refused), remaining, reset_ms
--          (the retry time when refused)}

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, maxatt, price = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local nrules, ncaps, costkey = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local out = {0, now, '', 0, 0, 0}
local writes = {}
local keep = {}
local refused = false

local function fmt(n) return string.format('%.0f', n) end

-- "idx:count" fixed-window state; returns the count for window idx.
local function window_count(v, idx)
  if v then
    local i, c = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == idx then return tonumber(c) end
  end
  return 0
end

local function want(k, ms)
  if not keep[k] or keep[k] < ms then keep[k] = ms end
end

for r = 0, nrules - 1 do
  local a = 9 + r * 7
  local kind, k, field = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2]
  local limit, window, burst = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local shadow = ARGV[a + 6] == '1'
  local v = redis.call('HGET', KEYS[k], field)
  local ok, remaining, reset, new, hold = true, 0, 0, nil, 0
  if kind == 1 then
    local log = {}
    if v then
      for ts in string.gmatch(v, '%d+') do
        if tonumber(ts) > now - window then log[#log + 1] = ts end
      end
    end
    if #log >= limit then
      ok, reset = false, tonumber(log[#log - limit + 1]) + window - now
    else
      log[#log + 1] = fmt(now)
      new, hold = table.concat(log, ' '), window
      remaining, reset = limit - #log, tonumber(log[1]) + window - now
    end
  elseif kind == 2 or kind == 5 then
    local idx = math.floor(now / window)
    local count = window_count(v, idx)
    reset = (idx + 1) * window - now
    if count >= limit then
      ok = false
    elseif kind == 2 then
      new, hold, remaining = fmt(idx) .. ':' .. (count + 1), reset, limit - count - 1
    else
      remaining = limit - count
    end
  elseif kind == 3 then
    local step = math.ceil(window / limit)
    local tat = math.max(tonumber(v or 0) or 0, now)
    local allow_at = tat + step - step * burst
    if now < allow_at then
      ok, reset = false, allow_at - now
    else
      new, hold = fmt(tat + step), tat + step - now
      remaining, reset = math.floor((now - allow_at) / step), tat + step - now
    end
  elseif kind == 4 then
    local untl = tonumber(v or 0) or 0
    if now < untl then
      ok, reset = false, untl - now
    else
      new, hold, reset = fmt(now + window), window, window
    end
  end
  if not ok and not shadow then refused = true end
  if ok and new then writes[#writes + 1] = {k, field, new} ; want(k, hold) end
  out[#out + 1] = ok and 1 or 0
  out[#out + 1] = remaining
  out[#out + 1] = reset
end

local cost_new = {}
if price >= 0 and costkey > 0 then
  local a = 9 + nrules * 7
  for c = 0, ncaps - 1 do
    local field, window, max = ARGV[a + c * 3], tonumber(ARGV[a + c * 3 + 1]), tonumber(ARGV[a + c * 3 + 2])
    local idx = math.floor(now / window)
    local sum = window_count(redis.call('HGET', KEYS[costkey], field), idx)
    local reset = (idx + 1) * window - now
    if sum + price > max then
      refused = true
      if reset > out[6] then out[6] = reset end
    else
      cost_new[#cost_new + 1] = {field, fmt(idx) .. ':' .. fmt(sum + price)}
      want(costkey, reset)
    end
  end
end
if refused then return out end

for _, w in ipairs(writes) do redis.call('HSET', KEYS[w[1]], w[2], w[3]) end
for _, w in ipairs(cost_new) do redis.call('HSET', KEYS[costkey], w[1], w[2]) end

local cur = redis.call('HMGET', KEYS[1], 'i', 'e', 'a')
local exp = tonumber(cur[2] or 0) or 0
if cur[1] and exp > now and (tonumber(cur[3]) or 0) < maxatt then
  out[3], out[5] = cur[1], 0
else
  exp = now + ttl
  redis.call('HSET', KEYS[1], 'i', ARGV[1], 'h', ARGV[2], 'e', fmt(exp), 'a', 0)
  out[3], out[5] = ARGV[1], 1
end
out[1], out[4] = 1, exp - now
want(1, exp - now)

for k, ms in pairs(keep) do
  if redis.call('PTTL', KEYS[k]) < ms then redis.call('PEXPIRE', KEYS[k], ms) end
end
return out
