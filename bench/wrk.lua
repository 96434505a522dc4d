-- wrk script for bench/run.py. MODE=issue: POST /v1/otp for a new phone
-- each request (the accepted path: one Redis script, one ledger commit).
-- MODE=verify: a wrong guess for phones with no live code (the refusal
-- path: one Redis script, no commit wait). MODE=hot: POST /v1/otp
-- rotating over HOT_PHONES phones (+9198 and 8 digits, from 0), which the
-- bench has already had refused (the hot-key refusal path); each thread
-- starts at its own offset. OTPD_KEY is the API key.
-- FIRST: where each thread's numbering starts, so that two runs on one
-- Redis use distinct phones.
local counter = tonumber(os.getenv("FIRST") or "0")
local threads = 0
local key = os.getenv("OTPD_KEY")
local mode = os.getenv("MODE") or "issue"
local hot = tonumber(os.getenv("HOT_PHONES") or "1000")

-- Each wrk thread numbers its own phones, so no two requests share one.
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

request = function()
  counter = counter + 1
  local headers = {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}
  if mode == "hot" then
    local phone = string.format("+9198%08d", (counter + tid * 7919) % hot)
    return wrk.format("POST", "/v1/otp", headers, '{"phone":"' .. phone .. '"}')
  end
  if mode == "verify" then
    local phone = string.format("+916%d%08d", tid, counter % 100000000)
    return wrk.format("POST", "/v1/otp/verify", headers, '{"phone":"' .. phone .. '","code":"123456"}')
  end
  local phone = string.format("+917%d%08d", tid, counter % 100000000)
  return wrk.format("POST", "/v1/otp", headers, '{"phone":"' .. phone .. '"}')
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d seconds=%.3f p50_ms=%.2f p99_ms=%.2f non2xx=%d errors=%d\n",
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
  io.write(string.format("ERRORS connect=%d read=%d write=%d timeout=%d\n", summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.timeout))
end
