-- wrk script for bench/run.py. MODE=issue: POST /v1/otp for a new phone
-- each request (the accepted path: one Redis script, one ledger commit).
-- MODE=verify: a wrong guess for phones with no live code (the refusal
-- path: one Redis script, no commit wait). OTPD_KEY is the API key.
local counter = 0
local threads = 0
local key = os.getenv("OTPD_KEY")
local mode = os.getenv("MODE") or "issue"

-- Each wrk thread numbers its own phones, so no two requests share one.
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

request = function()
  counter = counter + 1
  local headers = {["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}
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
end
