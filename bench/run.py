"""otpd benchmarks. Figures are ratios against baselines measured in the
same run, because these machines are shared and noisy.

  decisions: otpd issue and verify decisions/s (wrk) / redis-benchmark
             EVALSHA/s of a trivial script on the same redis-server; p99.
  latency:   issue -> provider arrival on loopback (p50, p99), against a
             direct POST to the same fake provider from the same client.
  pacing:    at 50/s and 1000/s, from the fake provider's arrival times:
             the worst 1-s window / rate, achieved rate error, p99 gap error
             as a fraction of the period.
  fleet:     1 and 3 instances on one Redis (bench/fleet.py): pacing,
             Redis commands per message, and accepted-issue throughput of
             BENCH_BEFORE_REV's otpd against bin/otpd. Not run by default.
  perf:      issue 13's table (bench/perf.py), what `make bench` runs:
             refusals, decisions and accepted issues against redis-benchmark
             and a bare libmicrohttpd server, the ledger's rows/s, RSS under
             overload; saved in bench/results/. Not run by default.

Usage: python3 bench/run.py [decisions] [latency] [pacing] [fleet] [perf]
"""
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
from harness import API_KEY, FakeProvider, Otpd, Redis, base_config, free_port, wait_until  # noqa: E402

DURATION = os.environ.get("BENCH_SECONDS", "8")


def wrk(otpd, mode, conns=32, threads=2, duration=None):
    out = subprocess.run(["wrk", "-t%d" % threads, "-c%d" % conns, "-d%ss" % (duration or DURATION), "-s",
                          os.path.join(HERE, "wrk.lua"), "http://127.0.0.1:%d" % otpd.port],
                         env=dict(os.environ, OTPD_KEY=API_KEY, MODE=mode), capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"RESULT requests=(\d+) seconds=([\d.]+) p50_ms=([\d.]+) p99_ms=([\d.]+) non2xx=(\d+) errors=(\d+)",
                  out)
    req, sec, p50, p99, non2xx, errors = m.groups()
    return int(req) / float(sec), float(p50), float(p99), int(non2xx), int(errors)


def evalsha_baseline(redis):
    sha = redis.cmd("SCRIPT", "LOAD", "return redis.call('TIME')")
    out = subprocess.run(["redis-benchmark", "-p", str(redis.port), "-n", "200000", "-c", "32", "-q", "EVALSHA", sha,
                          "0"], capture_output=True, text=True, check=True).stdout
    return float(re.search(r"([\d.]+) requests per second", out).group(1))


def decisions_config(redis_port, ledger, port):
    """Production-shaped rules that never refuse a new phone, a cap nothing
    reaches, a queue that never fills, and the file provider to /dev/null."""
    cfg = base_config(redis_port, "http://127.0.0.1:9", ledger, port)
    cfg["limits"] = [dict(name="phone_10m", key="phone", algorithm="sliding_log", limit=3, window="10m"),
                     dict(name="phone_day", key="phone", algorithm="fixed_window", limit=10, window="1d"),
                     dict(name="resend", key="phone", algorithm="resend_delay", delay="30s"),
                     dict(name="wrong_codes", key="phone", algorithm="wrong_guess_cap", limit=10, window="1d")]
    cfg["cost"] = {"currency": "INR", "prices": {"+91": 20, "*": 500},
                   "caps": [{"window": "1h", "max": 10 ** 12}]}
    cfg["pacer"] = {"rate": 10000, "capacity": 1000000, "max_inflight": 64}
    cfg["http_threads"] = int(os.environ.get("BENCH_HTTP_THREADS", "4"))
    cfg["provider"] = {"type": "file", "path": "/dev/null"}
    return cfg


def bench_decisions(tmp):
    redis = Redis(tmp).start()
    fake = FakeProvider(tmp).start()
    try:
        otpd = Otpd(tmp, decisions_config(redis.port, os.path.join(tmp, "bench.db"), free_port())).start()
        base = evalsha_baseline(redis)
        issue = wrk(otpd, "issue")
        verify = wrk(otpd, "verify")
        otpd.stop()
        print("baseline: redis-benchmark EVALSHA (trivial script), 32 clients: %.0f/s" % base)
        for name, (rps, p50, p99, non2xx, err) in (("issue (accepted path, ledger commit)", issue),
                                                  ("verify (refusal path)", verify)):
            print("%-38s %8.0f decisions/s  ratio %.3f of EVALSHA/s  p50 %.2f ms  p99 %.2f ms  non-2xx %d  "
                  "errors %d" % (name, rps, rps / base, p50, p99, non2xx, err))
    finally:
        fake.stop()
        redis.stop()


def pacing(tmp, rate, n):
    """Queues n messages while otpd sends at 1/s, SIGKILLs it, and lets a
    fresh otpd drain the recovered queue at rate: the queue is full from the
    first tick, whatever the intake speed."""
    redis = Redis(tmp).start()
    fake = FakeProvider(tmp).start()
    try:
        ledger = os.path.join(tmp, "pace-%d.db" % rate)
        cfg = base_config(redis.port, fake.url, ledger, free_port())
        cfg["pacer"] = {"rate": 1, "capacity": n + 10, "max_inflight": 64, "timeout": "5s"}
        otpd = Otpd(tmp, cfg).start()
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            codes = list(ex.map(lambda i: otpd.issue("+9195%08d" % i)[0], range(n)))
        assert codes.count(202) == n, codes[:5]
        otpd.stop(signal.SIGKILL)
        n -= len(fake.requests())  # sent at 1/s before the kill
        fake.reset()
        cfg["pacer"]["rate"] = rate
        otpd = Otpd(tmp, cfg).start()
        wait_until(lambda: len(fake.requests()) >= n, 60, 0.2, "the drain")
        otpd.stop()
        ts = sorted(r["t_us"] / 1e6 for r in fake.requests())[:n]
        best, j = 0, 0
        for i in range(len(ts)):
            while ts[i] - ts[j] >= 1.0:
                j += 1
            best = max(best, i - j + 1)
        achieved = (len(ts) - 1) / (ts[-1] - ts[0])
        period = 1.0 / rate
        gaps = sorted(abs((b - a) - period) for a, b in zip(ts, ts[1:]))
        p99 = gaps[int(len(gaps) * 0.99)]
        print("pacing %5d/s, %5d msgs: worst 1-s window %d (%.3f of rate)  rate error %+.2f%%  "
              "p99 gap error %.3f ms (%.2f of the period)" % (rate, n, best, best / rate,
                                                             (achieved - rate) / rate * 100, p99 * 1000,
                                                             p99 / period))
    finally:
        fake.stop()
        redis.stop()


def bench_latency(tmp, n=100):
    import json
    import urllib.request
    redis = Redis(tmp).start()
    fake = FakeProvider(tmp).start()
    try:
        cfg = base_config(redis.port, fake.url, os.path.join(tmp, "latency.db"), free_port())
        cfg["pacer"] = {"rate": 50, "capacity": 500, "max_inflight": 16}
        otpd = Otpd(tmp, cfg).start()
        sent = {}
        for i in range(n):
            t0 = time.time()
            st, _, body = otpd.issue("+9194%08d" % i)
            sent[body["id"]] = t0
            time.sleep(0.05)
        direct = []
        for i in range(n):
            t0 = time.time()
            req = urllib.request.Request(fake.url + "/direct", data=json.dumps({"id": "d%d" % i}).encode(),
                                         headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=5).read()
            direct.append(t0)
        reqs = fake.requests()
        otpd.stop()
        lat = sorted(r["t_us"] / 1e6 - sent[json.loads(r["body"])["id"]] for r in reqs
                     if json.loads(r["body"]).get("id") in sent)
        base = sorted(r["t_us"] / 1e6 - t0 for r, t0 in zip([r for r in reqs if r["path"] == "/direct"], direct))
        pct = lambda xs, q: xs[min(len(xs) - 1, int(len(xs) * q))] * 1000
        print("latency issue->provider: p50 %.2f ms p99 %.2f ms; direct POST->provider: p50 %.2f ms p99 %.2f ms; "
              "ratio p50 %.1f" % (pct(lat, .5), pct(lat, .99), pct(base, .5), pct(base, .99),
                                  pct(lat, .5) / max(pct(base, .5), 1e-3)))
    finally:
        fake.stop()
        redis.stop()


def main():
    what = sys.argv[1:] or ["decisions", "latency", "pacing"]
    tmp = tempfile.mkdtemp(prefix="otpd-bench-")
    if "decisions" in what:
        bench_decisions(tmp)
    if "latency" in what:
        bench_latency(tmp)
    if "pacing" in what:
        pacing(tmp, 50, 250)
        pacing(tmp, 1000, 5000)
    if "fleet" in what:
        # By path: tests/integration (on sys.path for the harness) may hold a
        # fleet.py of its own.
        spec = importlib.util.spec_from_file_location("bench_fleet", os.path.join(HERE, "fleet.py"))
        fleet = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fleet)
        fleet.bench_fleet(tmp, wrk, evalsha_baseline, decisions_config)
    if "perf" in what:
        spec = importlib.util.spec_from_file_location("bench_perf", os.path.join(HERE, "perf.py"))
        perf = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(perf)
        perf_tmp = os.path.join(tmp, "perf")
        os.mkdir(perf_tmp)
        perf.bench_perf(perf_tmp)
        if not os.environ.get("OTPD_KEEP"):
            # Its otpd logs a line per request: a run leaves hundreds of MB.
            shutil.rmtree(perf_tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
