-- refund.lua: gives back the cost reserved for a message that expired
-- unsent or failed for good, in every cap window that is still the one it
-- was reserved in. Windows that have rolled over are left alone.
--
-- KEYS[1] the global cost hash
-- ARGV: price, reserved_ms (Redis time of the reservation), ncaps, then
--       2 per cap: field, window_ms
local price, at, ncaps = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
for c = 0, ncaps - 1 do
  local field, window = ARGV[4 + c * 2], tonumber(ARGV[5 + c * 2])
  local idx = math.floor(at / window)
  local v = redis.call('HGET', KEYS[1], field)
  if v then
    local i, sum = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == idx then
      local left = math.max(0, tonumber(sum) - price)
      redis.call('HSET', KEYS[1], field, string.format('%.0f', idx) .. ':' .. string.format('%.0f', left))
    end
  end
end
return 1
