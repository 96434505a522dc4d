-- refund.lua: gives back a cost reservation in every cap window that is
-- still the one it was reserved in (windows that have rolled over are left
-- alone: that money was counted in a window that is gone).
--
-- KEYS[2] is the message's money hash (otp:msg:ID, see reserve.lua): the
-- refund is idempotent per reservation: reservation idx is given back at
-- most once, and the mark is made in the same atomic step as the refund, so
-- a crash between this script and the ledger row can never refund twice.
-- The price and time of a reservation reserve.lua took are read from that
-- hash; ARGV's are the issue's own (reservation 1).
--
-- A window whose sum is below the price can only mean money was given back
-- twice or never taken: it is not clamped to 0 (that would hide the bug and
-- eat another message's reservation); it is left as it is and reported.
--
-- KEYS[1] the global cost hash; KEYS[2] the message hash
-- ARGV: price, reserved_ms (Redis time of the reservation), ncaps, then
--       2 per cap: field, window_ms; then idx, the
--       reservation to give back (0: the latest, for a message never tried)
-- Returns {status, anomalies}: status 1 given back, 0 already given back
-- (nothing done), -1 idx is not the message's latest reservation (nothing
-- done); anomalies counts the windows that would have gone below zero.
local price, at, ncaps = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local DAY_MS = 86400000

local idx = tonumber(ARGV[4 + ncaps * 2])
local m = redis.call('HMGET', KEYS[2], 'r', 'f', 'p', 't')
local r, f = tonumber(m[1] or 1), tonumber(m[2] or 0)
if idx == 0 then idx = r end
if f >= idx then return {0, 0} end
if idx ~= r then return {-1, 0} end
if m[3] then price, at = tonumber(m[3]), tonumber(m[4]) end
redis.call('HSET', KEYS[2], 'f', idx)
redis.call('PEXPIRE', KEYS[2], DAY_MS)

local anomalies = 0
for c = 0, ncaps - 1 do
  local field, window = ARGV[4 + c * 2], tonumber(ARGV[5 + c * 2])
  local widx = math.floor(at / window) -- the window the reservation was counted in
  local v = redis.call('HGET', KEYS[1], field)
  if v then
    local i, sum = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == widx then
      local left = tonumber(sum) - price
      if left < 0 then
        anomalies = anomalies + 1
      else
        redis.call('HSET', KEYS[1], field, string.format('%.0f', widx) .. ':' .. string.format('%.0f', left))
      end
    end
  end
end
return {1, anomalies}
