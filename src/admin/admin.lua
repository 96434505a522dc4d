-- admin.lua: the admin rows (overrides and blocks, docs/architecture.md,
-- "Limits and rules": overrides and blocks are rows, not code) and the
-- wrong-guess unlock, each in one atomic step on Redis's clock.
--
-- Rows: a hash id -> row (JSON text) and a sorted set id -> expires_at
-- (Unix ms, Redis's clock) per kind. Every op first removes the rows whose
-- time is up (at most 1,000 per kind and call), so only live rows are ever
-- listed, and each change (add, remove, expiry) increments the change
-- counter: an instance whose snapshot carries the counter's value knows
-- it has every row, at the price of one GET-sized reply.
--
-- KEYS (ops 'add', 'del', 'snap'): the overrides' hash and set, the blocks'
-- hash and set, the change counter.
-- ARGV:
--   'add', kind ('o' or 'b'), id, row (a JSON object, without id and times),
--     ttl_ms, max rows of that kind
--     -> {1, expires_at_ms, created_at_ms}, or {0, live rows} when full
--   'del', kind, id -> {1} removed, {0} no such live row
--   'snap', known counter ('' for none)
--     -> {counter, now_ms} when known is current, else
--        {counter, now_ms, n_overrides, override rows..., block rows...}
--     (each row with "id", "created_at" and "expires_at" added, in ms)
-- op 'u' (unlock) has KEYS[1] the phone's hash and KEYS[2] the change
-- counter, and ARGV 'u', api_key ('':
-- every caller), then pairs (rule field, position of the api_key value
-- among the field's 0x1f-separated parts, 0 when the rule's key has no
-- api_key): deletes the wrong-guess state of each such rule, every caller's
-- or only that caller's; returns {fields deleted}. An unlock that deleted
-- something moves the counter, so every instance drops the locks its
-- refusal cache holds within its next refresh.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op = ARGV[1]

local function fmt(n) return string.format('%.0f', n) end

if op == 'u' then
  local key, who = KEYS[1], ARGV[2]
  local fields = redis.call('HKEYS', key)
  local n = 0
  for i = 3, #ARGV, 2 do
    local rf, pos = ARGV[i], tonumber(ARGV[i + 1])
    for _, f in ipairs(fields) do
      local hit = f == rf
      if not hit and string.sub(f, 1, #rf + 1) == rf .. '\31' then
        if who == '' or pos == 0 then
          hit = true
        else
          -- The part at pos (1-based) of what follows the rule's field.
          local rest = string.sub(f, #rf + 2)
          for _ = 2, pos do
            local at = string.find(rest, '\31', 1, true)
            if not at then rest = nil break end
            rest = string.sub(rest, at + 1)
          end
          if rest then
            local at = string.find(rest, '\31', 1, true)
            hit = (at and string.sub(rest, 1, at - 1) or rest) == who
          end
        end
      end
      if hit then n = n + redis.call('HDEL', key, f) end
    end
  end
  if n > 0 and KEYS[2] then redis.call('INCR', KEYS[2]) end
  return {n}
end

local counter = KEYS[5]

-- Removes kind's rows whose time is up; returns how many went.
local function purge(hash, set)
  local gone = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'LIMIT', 0, 1000)
  if #gone > 0 then
    redis.call('HDEL', hash, unpack(gone))
    redis.call('ZREM', set, unpack(gone))
  end
  return #gone
end

if purge(KEYS[1], KEYS[2]) + purge(KEYS[3], KEYS[4]) > 0 then redis.call('INCR', counter) end

local function pick(kind)
  if kind == 'o' then return KEYS[1], KEYS[2] end
  return KEYS[3], KEYS[4]
end

if op == 'add' then
  local hash, set = pick(ARGV[2])
  local id, row, ttl, max = ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local live = redis.call('ZCARD', set)
  if live >= max then return {0, live} end
  local exp = now + ttl
  -- The row is C's JSON object; its closing brace makes room for ours.
  row = string.sub(row, 1, -2) .. ',"id":"' .. id .. '","created_at":' .. fmt(now) ..
        ',"expires_at":' .. fmt(exp) .. '}'
  redis.call('HSET', hash, id, row)
  redis.call('ZADD', set, exp, id)
  redis.call('INCR', counter)
  return {1, exp, now}
end

if op == 'del' then
  local hash, set = pick(ARGV[2])
  if redis.call('HDEL', hash, ARGV[3]) == 0 then return {0} end
  redis.call('ZREM', set, ARGV[3])
  redis.call('INCR', counter)
  return {1}
end

-- 'snap'
local v = redis.call('GET', counter) or '0'
if v == ARGV[2] then return {v, now} end
local out = {v, now, 0}
local o = redis.call('HVALS', KEYS[1])
out[3] = #o
for _, r in ipairs(o) do out[#out + 1] = r end
for _, r in ipairs(redis.call('HVALS', KEYS[3])) do out[#out + 1] = r end
return out
