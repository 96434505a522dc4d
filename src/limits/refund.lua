-- refund.lua: gives back a cost reservation in the cap windows it was
-- counted in, and only those: the caps in force at refund time may differ
-- (a SIGHUP added or removed one), and a cap that never counted the money
-- must never be given it. Windows that have rolled over are left alone:
-- that money was counted in a window that is gone.
--
-- KEYS[2] is the message's money hash (otp:msg:ID, see reserve.lua): the
-- refund is idempotent per reservation: reservation idx is given back at
-- most once, and the mark is made in the same atomic step as the refund, so
-- a crash between this script and the ledger row can never refund twice.
-- The price, time and cap windows of a reservation reserve.lua took are
-- read from that hash; ARGV's are the issue's own (reservation 1: the
-- windows issue.lua counted it in, carried by the pacer and the ledger).
--
-- Only the instance that owns the message gives its money back: the
-- consumer that ended it (o, written by queue.lua's end while it owned the
-- stream entry), and never a reservation another consumer marked used (uo,
-- reserve.lua): an instance cut off from Redis while another took its
-- messages over and sent them must not refund what that one spent, even
-- when a late refund reaches Redis after the partition.
--
-- A window whose sum is below the price can only mean money was given back
-- twice or never taken: it is not clamped to 0 (that would hide the bug and
-- eat another message's reservation); it is left as it is and reported.
--
-- KEYS[1] the global cost hash; KEYS[2] the message hash
-- ARGV: price, reserved_ms (Redis time of reservation 1), windows (the
--       cap windows text of reservation 1, limits_caps_text: the window_ms
--       of each global cap it was counted in, comma-separated, field
--       c<window_ms>; then, when a caller's own caps counted it, ';', the
--       caller (two letters a-p per byte), ':' and its windows (a letter a-j
--       per digit), field k<window_ms>:<caller>), idx, the reservation to give
--       back (0: the latest, for a message restored and never tried),
--       the consumer asking (pacer.instance)
-- Returns {status, anomalies}: status 1 given back, 0 already given back
-- (nothing done), -1 idx is not the message's latest reservation (nothing
-- done), 2 (idx 0 only) the latest was used on the wire before a restart
-- (u, see reserve.lua): it may be billed, so it is kept, 3 not this
-- consumer's to give back (another ended the message, or marked the
-- reservation used): kept; anomalies counts the windows that would have
-- gone below zero.

-- The arguments by name, read once (limits_money.c names each on the C
-- side): KEYS (enum money_keys) MK_COST, MK_MSG; ARGV (enum refund_argv)
-- RF_PRICE to RF_OWNER.
local cost_key, msg_key = KEYS[1], KEYS[2]
local price, at, windows = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local idx, me = tonumber(ARGV[4]), ARGV[5] or ''
local DAY_MS = 86400000

local m = redis.call('HMGET', msg_key, 'r', 'f', 'p', 't', 'k', 'u', 'o', 'uo')
local r, f, u = tonumber(m[1] or 1), tonumber(m[2] or 0), tonumber(m[6] or 0)
if me == '' or m[7] ~= me then return {3, 0} end
if idx == 0 then
  idx = r
  if u >= r and f < r then return {2, 0} end
end
if f >= idx then return {0, 0} end
if idx ~= r then return {-1, 0} end
if u >= idx and m[8] ~= me then return {3, 0} end
if m[3] then price, at, windows = tonumber(m[3]), tonumber(m[4]), m[5] or windows end
redis.call('HSET', msg_key, 'f', idx)
redis.call('PEXPIRE', msg_key, DAY_MS)

-- A cap windows text (limits_caps_text) is the global windows (digits,
-- the whole of an old text), then, after a ';', the caller (two letters a-p
-- per byte), ':' and its own windows (a letter a-j per digit).
local caller, kwindows = nil, ''
do
  local g, who, kw = string.match(windows, '^([^;]*);(%l*):([%l,]*)$')
  if g then
    windows, kwindows = g, kw
    caller = string.gsub(who, '(%l)(%l)', function(h, l)
      return string.char((string.byte(h) - 97) * 16 + string.byte(l) - 97)
    end)
  end
end

local anomalies = 0
local function give(field, window)
  local widx = math.floor(at / window) -- the window the reservation was counted in
  local v = redis.call('HGET', cost_key, field)
  if v then
    local i, sum = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == widx then
      local left = tonumber(sum) - price
      if left < 0 then
        anomalies = anomalies + 1
      else
        redis.call('HSET', cost_key, field, string.format('%.0f', widx) .. ':' .. string.format('%.0f', left))
      end
    end
  end
end

for w in string.gmatch(windows, '%d+') do
  give('c' .. w, tonumber(w))
end
for kw in string.gmatch(kwindows, '%l+') do
  local w = string.gsub(kw, '%l', function(c) return string.char(string.byte(c) - 49) end)
  give('k' .. w .. ':' .. caller, tonumber(w))
end
return {1, anomalies}
