-- headroom.lua: what each cost cap has left in its current window, for
-- /metrics (read only; one call per scrape).
--
-- KEYS[1] the cost hash otp:cost (issue.lua's "Caps"): one field per cap,
--         "<window index>:<sum spent in it>" (minor units).
-- ARGV    3 per cap: field (c<window_ms>, or k<window_ms>:<api key> for a
--         per-caller cap), window_ms, max.
-- Returns one integer per cap: max minus what its current window (on
-- Redis's clock, as issue.lua's) has spent; a window that has rolled over
-- has spent nothing.

-- The arguments by name (limits_money.c names each on the C side): KEYS
-- (enum money_keys) MK_COST; ARGV groups of CA_N from 1 (CA_*).
local cost_key = KEYS[1]
local CA_FIELD, CA_WINDOW, CA_MAX, CA_N = 0, 1, 2, 3

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for a = 1, #ARGV, CA_N do
  local window, max = tonumber(ARGV[a + CA_WINDOW]), tonumber(ARGV[a + CA_MAX])
  local v = redis.call('HGET', cost_key, ARGV[a + CA_FIELD])
  local spent = 0
  if v then
    local i, c = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == math.floor(now / window) then spent = tonumber(c) end
  end
  out[#out + 1] = max - spent
end
return out
