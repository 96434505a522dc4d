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
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for a = 1, #ARGV, 3 do
  local window, max = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local v = redis.call('HGET', KEYS[1], ARGV[a])
  local spent = 0
  if v then
    local i, c = string.match(v, '^(%d+):(%d+)$')
    if tonumber(i) == math.floor(now / window) then spent = tonumber(c) end
  end
  out[#out + 1] = max - spent
end
return out
