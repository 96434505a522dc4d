"""Issue 13's table (`make bench`, `python3 bench/run.py perf`): every
figure a ratio against a ceiling measured in the same run, on the same
machine, because these machines are shared and noisy.

Ceilings:
  A  redis-benchmark EVALSHA/s of a 6-key script (P=1, 50 clients) on the
     redis-server the otpd of this run uses. The script reads Redis's TIME,
     then INCRs six counters (a PEXPIRE when one is new) and returns the
     largest: the shape of a small limits script with six fixed windows.
     Each key is drawn from 1,000 (redis-benchmark's -r).
  B  bench/bare429 (build/bench/bare429): libmicrohttpd with otpd's thread
     model answering a fixed 429 problem+json with otpd's refusal headers;
     wrk with the hot-key requests, 64 connections.
  fsync  write + fdatasync of 128 bytes in a loop for 2 s, on a file in the
     ledger's directory, just before the accepted run: what the accepted
     path should be bounded by.

Figures (one otpd, one redis-server; rules as bench/run.py's decisions
section but a 1-h resend delay, a cost cap nothing reaches, a queue that
never fills, the file provider to /dev/null):
  hot       wrk, 64 connections, rotating over 1,000 phones that are already
            refused (each issued once, 202, then once more to check the
            429 resend): refusals/s / A (>= 2.0) and / B (>= 0.7); p99
            (<= 2 ms).
  distinct  verify with a wrong guess for phones with no live code (a new
            phone each request): verify.lua runs in Redis every time and
            answers 404 no_active_code. Decisions/s / B (>= 0.5).
  accepted  issue for a new phone each request (the ledger's commit waited
            for): accepted/s / B (>= 0.3); also shown / the fsync rate.
  ledger    bench/ledger_bench.c built against this tree, 8 threads of
            the writer alone (group commit, chain): rows/s (>= 20,000).
  rss       wrk with 10x the accepted run's connections (640, each sending
            its next issue for a new phone as soon as it has its answer:
            wrk is closed-loop, so 10x is ten times the requests in flight),
            VmRSS sampled each second: the median of the last 10 samples
            against the first 10 (flat within 10 %).
Every otpd figure is checked against otpd's own /metrics: a decision
other than the one the row is about, or a count that does not match
wrk's, is noted with the row (and its result marked *).

Settings: BENCH_SECONDS (default 10): each wrk run; the RSS run lasts 6x
that (60 s). BENCH_HTTP_THREADS (default 32, otpd's default): otpd's and
bare429's worker pool. BENCH_PERF=1: `perf record -g` on otpd during the
hot and accepted runs; the reports go to build/bench/perf-{hot,accepted}.txt
(those runs' figures carry perf's overhead; the JSON says profiled).
OTPD_KEEP=1 keeps the run's directory (logs, ledger).

Each run is saved as bench/results/<date>-<commit>.json (-2, -3... when
that name is taken).
"""
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import threading
import time
import http.client

from harness import API_KEY, ROOT, Otpd, Redis, free_port, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "build", "bench")
RESULTS = os.path.join(HERE, "results")

SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
RSS_SECONDS = 6 * SECONDS
THREADS = int(os.environ.get("BENCH_HTTP_THREADS", "32"))
PROFILE = os.environ.get("BENCH_PERF", "") not in ("", "0")
CONNS = 64
HOT_PHONES = 1000
RSS_WINDOW = 10  # samples (seconds) at each end of the RSS run

# The 6-key script of ceiling A (see the module doc).
SIX_KEYS_LUA = """\
local t = redis.call('TIME')
local most = 0
for i = 1, 6 do
  local n = redis.call('INCR', KEYS[i])
  if n == 1 then redis.call('PEXPIRE', KEYS[i], 60000) end
  if n > most then most = n end
end
return most"""

# (key, figure, ceiling key or None, target, comparison, run) in the order printed.
TARGETS = [
    ("hot_vs_a", "hot-key refusals/s / A", "a", 2.0, ">=", "hot"),
    ("hot_vs_b", "hot-key refusals/s / B", "b", 0.7, ">=", "hot"),
    ("hot_p99_ms", "refused p99 at that load (ms)", None, 2.0, "<=", "hot"),
    ("distinct_vs_b", "distinct-key decisions/s / B", "b", 0.5, ">=", "distinct"),
    ("accepted_vs_b", "accepted issues/s / B", "b", 0.3, ">=", "accepted"),
    ("ledger_rows_s", "ledger durable rows/s", None, 20000, ">=", "ledger"),
    ("rss_growth", "RSS growth under 10x overload", None, 0.10, "|x|<=", "rss"),
]


def load(name):
    """A module of bench/ by path: tests/integration (on sys.path for the
    harness) has files of the same names."""
    spec = importlib.util.spec_from_file_location("bench_" + name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- load generators -------------------------------------------------------

def wrk(port, mode, conns=CONNS, seconds=SECONDS, first=0, proc_hook=None):
    """wrk with bench/wrk.lua against 127.0.0.1:port; returns its figures.
    proc_hook(popen) runs while wrk does (the RSS sampler)."""
    # --timeout: an answer later than wrk's default 2 s is slow, not an error
    # (the overload run queues 640 requests).
    argv = ["wrk", "-t2", "-c%d" % conns, "-d%ds" % max(1, round(seconds)), "--timeout", "30s", "--latency", "-s",
            os.path.join(HERE, "wrk.lua"), "http://127.0.0.1:%d" % port]
    env = dict(os.environ, OTPD_KEY=API_KEY, MODE=mode, HOT_PHONES=str(HOT_PHONES), FIRST=str(first))
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc_hook:
        proc_hook(p)
    out, err = p.communicate()
    m = re.search(r"RESULT requests=(\d+) seconds=([\d.]+) p50_ms=([\d.]+) p99_ms=([\d.]+) non2xx=(\d+) errors=(\d+)",
                  out)
    if p.returncode != 0 or not m:
        raise RuntimeError("wrk failed (%s):\n%s\n%s" % (p.returncode, out[-2000:], err[-2000:]))
    req, sec, p50, p99, non2xx, errors = m.groups()
    kinds = dict(re.findall(r"(connect|read|write|timeout)=(\d+)", out))
    return dict(requests=int(req), seconds=float(sec), rps=int(req) / float(sec), p50_ms=float(p50),
                p99_ms=float(p99), non2xx=int(non2xx), errors=int(errors),
                error_kinds={k: int(v) for k, v in kinds.items()})


def ceiling_a(redis):
    sha = redis.cmd("SCRIPT", "LOAD", SIX_KEYS_LUA)
    keys = ["bench13:k%d:__rand_int__" % i for i in range(1, 7)]
    # About SECONDS of work at the rates seen here (tens of thousands a second).
    n = str(int(30000 * SECONDS))
    out = subprocess.run(["redis-benchmark", "-p", str(redis.port), "-c", "50", "-P", "1", "-n", n, "-r",
                          str(HOT_PHONES), "-q", "EVALSHA", sha, "6"] + keys,
                         capture_output=True, text=True, check=True).stdout
    m = re.findall(r"([\d.]+) requests per second", out)
    if not m:
        raise RuntimeError("redis-benchmark said: %r" % out[-500:])
    return dict(rps=float(m[-1]), requests=int(n))


def ceiling_b():
    exe = os.path.join(OUT, "bare429")
    if not os.access(exe, os.X_OK):
        raise RuntimeError("%s is missing: `make bench` builds it" % exe)
    p = subprocess.Popen([exe, "0", str(THREADS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        m = re.match(r"ready (\d+)", p.stdout.readline())
        if not m:
            raise RuntimeError("bare429 did not start: %s" % p.stderr.read())
        r = wrk(int(m.group(1)), "hot")
    finally:
        p.terminate()
        p.wait(10)
    if r["errors"] or r["non2xx"] != r["requests"]:
        raise RuntimeError("bare429 answered something but 429s: %r" % r)
    return r


def fsync_rate(directory, seconds=2.0):
    """write + fdatasync of 128 bytes a time on a file in directory, per second."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            os.write(fd, b"x" * 128)
            os.fdatasync(fd)
            n += 1
        return dict(rps=n / (time.monotonic() - t0), writes=n)
    finally:
        os.close(fd)
        os.unlink(path)


def ledger_rows(directory, runs=3, loops=500, threads=8):
    """bench/ledger_bench.c against this tree's ledger: median rows/s."""
    exe = os.path.join(OUT, "ledger_bench")
    load("ledger").build(ROOT, exe)
    got = []
    for i in range(runs):
        d = os.path.join(directory, "ledger-bench-%d" % i)
        os.mkdir(d)
        out = subprocess.run([exe, d, str(loops), str(threads)], capture_output=True, text=True, check=True).stdout
        got.append(float(out.split()[1]))
        shutil.rmtree(d)
    return dict(rps=statistics.median(got), runs=got, loops=loops, threads=threads)


# ---- otpd ------------------------------------------------------------------

def otpd_config(redis_port, ledger, port):
    cfg = load("run").decisions_config(redis_port, ledger, port)
    for rule in cfg["limits"]:
        if rule["algorithm"] == "resend_delay":
            rule["delay"] = "1h"  # the hot phones stay refused for the whole run
    cfg["http_threads"] = THREADS
    return cfg


# otpd's own counters read around each run (see internals()).
INTERNALS = ("otpd_redis_call_duration_seconds_sum", "otpd_redis_call_duration_seconds_count",
             "otpd_ledger_commit_duration_seconds_sum", "otpd_ledger_commit_duration_seconds_count",
             "otpd_ledger_rows_total")


def metrics_text(otpd):
    st, _, text = otpd.call("GET", "/metrics", auth=None)
    if st != 200:
        raise RuntimeError("/metrics answered %s" % st)
    return text


def decisions(otpd, text=None):
    """{(op, decision): count} from otpd's /metrics."""
    text = text or metrics_text(otpd)
    return {(op, d): int(v) for op, d, v in
            re.findall(r'^otpd_requests_total\{op="(\w+)",decision="(\w+)"\} (\d+)$', text, re.M)}


def internals(otpd):
    """INTERNALS from otpd's /metrics: {name: float}."""
    text = metrics_text(otpd)
    return {k: float(v) for k, v in re.findall(r"^(otpd_\w+) ([\d.e+-]+)$", text, re.M) if k in INTERNALS}


def proc_cpu(pid):
    """(CPU seconds, context switches) of a process, all its threads."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    switches = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                switches += sum(int(v) for v in re.findall(r"^(?:non)?voluntary_ctxt_switches:\s+(\d+)$", f.read(),
                                                           re.M))
        except OSError:
            pass  # a thread that ended
    return cpu, switches


def internals_per_request(i0, i1, n):
    """Redis calls (otpd's view: a script, a ping) and ledger commits per
    request, with their mean duration, between two internals() reads."""
    d = {k: i1.get(k, 0) - i0.get(k, 0) for k in INTERNALS}
    rc, lc = d["otpd_redis_call_duration_seconds_count"], d["otpd_ledger_commit_duration_seconds_count"]
    return dict(redis_calls=round(rc / n, 3),
                redis_call_mean_us=round(d["otpd_redis_call_duration_seconds_sum"] / rc * 1e6, 1) if rc else None,
                ledger_commits=round(lc / n, 3),
                ledger_commit_mean_us=round(d["otpd_ledger_commit_duration_seconds_sum"] / lc * 1e6, 1) if lc else None,
                ledger_rows=round(d["otpd_ledger_rows_total"] / n, 3))


def quiet(otpd):
    """otpd's decisions once the requests wrk left in flight are counted:
    two reads 200 ms apart that agree."""
    last = decisions(otpd)
    for _ in range(50):
        time.sleep(0.2)
        now = decisions(otpd)
        if now == last:
            return now
        last = now
    raise RuntimeError("otpd's decisions still moving 10 s after wrk stopped")


def gauge(otpd, name):
    st, _, text = otpd.call("GET", "/metrics", auth=None)
    m = re.search(r"^%s (\d+)$" % name, text, re.M)
    return int(m.group(1)) if m else None


def settle(otpd):
    """Waits for the queue to drain, so a run does not carry the sends of
    the one before it."""
    wait_until(lambda: gauge(otpd, "otpd_queue_depth") == 0, 60, 0.2, "the send queue to drain")


def prime(otpd):
    """Each hot phone issued once (202: the resend delay starts), then once
    more, which must be the 429 the hot run will see."""
    conn = http.client.HTTPConnection("127.0.0.1", otpd.port, timeout=10)
    headers = {"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"}
    try:
        for want in (202, 429):
            for i in range(HOT_PHONES):
                conn.request("POST", "/v1/otp", json.dumps({"phone": "+9198%08d" % i}), headers)
                r = conn.getresponse()
                body = r.read()
                if r.status != want:
                    raise RuntimeError("priming +9198%08d: %s, not %s: %r" % (i, r.status, want, body[:200]))
    finally:
        conn.close()


def redis_cpu(redis):
    i = redis.info("cpu")
    return float(i["used_cpu_user"]) + float(i["used_cpu_sys"])


def commandstats(redis):
    """{command: (calls, usec)} from INFO commandstats."""
    out = {}
    for k, v in redis.info("commandstats").items():
        if k.startswith("cmdstat_"):
            m = re.search(r"calls=(\d+),usec=(\d+)", v)
            out[k[len("cmdstat_"):]] = (int(m.group(1)), int(m.group(2)))
    return out


def measured(otpd, mode, want, profile_as=None, redis=None, **kw):
    """A wrk run against otpd, with the decisions otpd counted meanwhile;
    want is the (op, decision) every request must get. With redis: the
    commands otpd sent meanwhile, per request, and Redis's time on them."""
    before = decisions(otpd)
    i0 = internals(otpd)
    cs0 = commandstats(redis) if redis else None
    cpu0 = proc_cpu(otpd.proc.pid)
    rcpu0 = redis_cpu(redis) if redis else None
    rec = perf_start(otpd, profile_as) if profile_as else None
    try:
        r = wrk(otpd.port, mode, **kw)
    finally:
        if rec:
            r_perf = perf_stop(rec, profile_as)
    cpu1 = proc_cpu(otpd.proc.pid)
    rcpu1 = redis_cpu(redis) if redis else None
    after = quiet(otpd)
    delta = {"%s/%s" % k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    r["decisions"] = delta
    n = max(1, sum(delta.values()))
    r["otpd_per_request"] = internals_per_request(i0, internals(otpd), n)
    # Per request wrk counted: the CPU was read when wrk stopped.
    r["otpd_per_request"].update(cpu_us=round((cpu1[0] - cpu0[0]) / max(1, r["requests"]) * 1e6, 1),
                                 ctx_switches=round((cpu1[1] - cpu0[1]) / max(1, r["requests"]), 2))
    if redis:
        r["redis_cpu_us_per_request"] = round((rcpu1 - rcpu0) / max(1, r["requests"]) * 1e6, 1)
    if redis:
        cs1, n = commandstats(redis), max(1, sum(delta.values()))
        r["redis_per_request"] = {c: dict(calls=round((cs1[c][0] - cs0.get(c, (0, 0))[0]) / n, 3),
                                          usec=round((cs1[c][1] - cs0.get(c, (0, 0))[1]) / n, 2))
                                  for c in cs1 if cs1[c][0] != cs0.get(c, (0, 0))[0]}
    # Anything but the decision the row is about is noted with the row (a
    # shared machine can push a Redis call past its timeout: 503), and so is
    # a count that does not match wrk's, which stops mid-request: the two
    # differ by at most the connections open at the end.
    other = {k: v for k, v in delta.items() if k != "%s/%s" % want}
    if other or r["errors"] or abs(sum(delta.values()) - r["requests"]) > kw.get("conns", CONNS):
        r["note"] = "wrk %d requests, %d errors; otpd's decisions %s" % (
            r["requests"], r["errors"], ", ".join("%s %d" % kv for kv in sorted(delta.items())))
    if rec:
        r["perf_report"] = r_perf
    return r


def perf_start(otpd, name):
    os.makedirs(OUT, exist_ok=True)
    data = os.path.join(OUT, "perf-%s.data" % name)
    p = subprocess.Popen(["perf", "record", "-g", "-o", data, "-p", str(otpd.proc.pid)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf attaches to every thread before the load starts (a profile, not a figure)
    return p, data


def perf_stop(rec, name):
    p, data = rec
    p.send_signal(signal.SIGINT)
    p.wait(60)
    txt = os.path.join(OUT, "perf-%s.txt" % name)
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--percent-limit", "2", "--stdio"],
                         capture_output=True, text=True).stdout
    with open(txt, "w") as f:
        f.write(rep)
    return os.path.relpath(txt, ROOT)


def rss_run(otpd, first):
    """The overload run: VmRSS (kB) each second while wrk floods."""
    samples = []
    status = "/proc/%d/status" % otpd.proc.pid

    def sampler(p):
        def loop():
            while p.poll() is None:
                with open(status) as f:
                    m = re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M)
                samples.append(int(m.group(1)))
                time.sleep(1.0)
        threading.Thread(target=loop, daemon=True).start()

    r = measured(otpd, "issue", ("issue", "accepted"), conns=10 * CONNS, seconds=RSS_SECONDS, first=first,
                 proc_hook=sampler)
    w = max(1, min(RSS_WINDOW, len(samples) // 2))
    r.update(samples_kb=samples, first_kb=statistics.median(samples[:w]), last_kb=statistics.median(samples[-w:]),
             window=w)
    r["growth"] = (r["last_kb"] - r["first_kb"]) / r["first_kb"]
    return r


# ---- the run ---------------------------------------------------------------

def machine():
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
        if m:
            model = m.group(1).strip()
    return dict(nproc=len(os.sched_getaffinity(0)), model=model, kernel=platform.release())


def commit():
    git = lambda *a: subprocess.run(["git", "-C", ROOT] + list(a), capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "diff", "--quiet", "HEAD", "--", "src", "cmd", "schema"]).returncode
    return git("rev-parse", "--short=7", "HEAD") or "unknown", bool(dirty)


def passed(value, target, how):
    return value >= target if how == ">=" else value <= target if how == "<=" else abs(value) <= target


def bench_perf(tmp):
    started = datetime.datetime.now(datetime.timezone.utc)
    res = dict(date=started.strftime("%Y-%m-%dT%H:%M:%SZ"), machine=machine(), seconds=SECONDS,
               rss_seconds=RSS_SECONDS, http_threads=THREADS, connections=CONNS, profiled=PROFILE)
    res["commit"], res["dirty"] = commit()
    res["build"] = sorted(f[len(".mode-"):] for f in os.listdir(os.path.join(ROOT, "bin")) if f.startswith(".mode-"))
    redis = Redis(tmp).start()
    otpd = None
    try:
        ceil, fig = {}, {}
        ceil["a"] = ceiling_a(redis)
        ceil["b"] = ceiling_b()
        otpd = Otpd(tmp, otpd_config(redis.port, os.path.join(tmp, "ledger.db"), free_port())).start()
        prime(otpd)
        settle(otpd)
        fig["hot"] = measured(otpd, "hot", ("issue", "rate_limited"), "hot" if PROFILE else None, redis)
        fig["distinct"] = measured(otpd, "verify", ("verify", "no_active_code"), None, redis)
        # Just before the run it bounds: the disk is shared too.
        ceil["fsync"] = fsync_rate(tmp)
        fig["accepted"] = measured(otpd, "issue", ("issue", "accepted"), "accepted" if PROFILE else None, redis)
        settle(otpd)
        # Phones past every one the accepted run can have used (wrk.lua
        # numbers them per thread from FIRST).
        fig["rss"] = rss_run(otpd, first=50000000)
        otpd.stop()
        otpd = None
        fig["ledger"] = ledger_rows(tmp)
    finally:
        if otpd:
            otpd.stop()
        redis.stop()
    res["ceilings"], res["figures"] = ceil, fig
    value = dict(hot_vs_a=fig["hot"]["rps"] / ceil["a"]["rps"], hot_vs_b=fig["hot"]["rps"] / ceil["b"]["rps"],
                 hot_p99_ms=fig["hot"]["p99_ms"], distinct_vs_b=fig["distinct"]["rps"] / ceil["b"]["rps"],
                 accepted_vs_b=fig["accepted"]["rps"] / ceil["b"]["rps"], ledger_rows_s=fig["ledger"]["rps"],
                 rss_growth=fig["rss"]["growth"])
    res["targets"] = [dict(key=k, figure=name, value=value[k], ceiling=c, target=t, how=how,
                           passed=passed(value[k], t, how), noted=bool(fig[run].get("note")))
                      for k, name, c, t, how, run in TARGETS]
    res["accepted_vs_fsync"] = fig["accepted"]["rps"] / ceil["fsync"]["rps"]
    print_table(res)
    save(res, started)
    return res


def print_table(res):
    c, f = res["ceilings"], res["figures"]
    m = res["machine"]
    print("otpd bench (issue 13) at %s%s, %s, %d CPUs (%s), kernel %s; wrk %d s, %d connections, %d http threads%s" % (
        res["commit"], " (dirty)" if res["dirty"] else "", res["date"], m["nproc"], m["model"], m["kernel"],
        res["seconds"], res["connections"], res["http_threads"], "; PROFILED (perf record)" if res["profiled"] else ""))
    print("ceilings:")
    print("  A  redis-benchmark EVALSHA, 6-key script, P=1, 50 clients   %9.0f /s" % c["a"]["rps"])
    print("  B  bare libmicrohttpd 429 (bench/bare429.c), wrk           %9.0f /s  p99 %.2f ms" % (
        c["b"]["rps"], c["b"]["p99_ms"]))
    print("     fsync: write + fdatasync in the ledger's directory      %9.0f /s" % c["fsync"]["rps"])
    print("figures:")
    for k, name in (("hot", "hot-key refusals (429 resend, 1,000 phones)"), ("distinct", "distinct-key decisions "
                    "(verify, 404 no_active_code)"), ("accepted", "accepted issues (202, new phones)")):
        r = f[k]
        print("  %-52s %9.0f /s  p50 %.2f ms  p99 %.2f ms" % (name, r["rps"], r["p50_ms"], r["p99_ms"]))
        if r.get("note"):
            print("      NOTE: %s" % r["note"])
        print("      otpd per request: %s" % ", ".join("%s %s" % kv for kv in r["otpd_per_request"].items()))
        print("      redis CPU per request: %s us" % r.get("redis_cpu_us_per_request"))
        print("      redis per request: %s" % ", ".join(
            "%s %.2f (%.1f us)" % (c, v["calls"], v["usec"])
            for c, v in sorted(r.get("redis_per_request", {}).items(), key=lambda kv: -kv[1]["usec"])
            if v["calls"] >= 0.01))
    print("  %-52s %9.0f /s  (%d threads, runs %s)" % ("ledger writer alone, durable rows", f["ledger"]["rps"],
                                                        f["ledger"]["threads"],
                                                        " ".join("%.0f" % x for x in f["ledger"]["runs"])))
    r = f["rss"]
    print("  %-52s %9.0f /s  RSS first %d s median %d kB, last %d s %d kB, max %d kB" % (
        "overload: %d connections of issues, %.0f s" % (10 * res["connections"], res["rss_seconds"]), r["rps"],
        r["window"], r["first_kb"], r["window"], r["last_kb"], max(r["samples_kb"])))
    if r.get("note"):
        print("      NOTE: %s" % r["note"])
    print("  accepted issues/s / fsync/s: %.3f (group commit: above 1 means more than one issue per fsync)" %
          res["accepted_vs_fsync"])
    print()
    print("| figure | value | ceiling | target | result |")
    print("|---|---|---|---|---|")
    for t in res["targets"]:
        ceiling = "%s %.0f/s" % (t["ceiling"].upper(), c[t["ceiling"]]["rps"]) if t["ceiling"] else "-"
        if t["key"] == "hot_p99_ms":  # no ceiling for a latency, but the bare stack's own p99 at its load
            ceiling = "B's own p99 %.2f ms" % c["b"]["p99_ms"]
        if t["key"] == "rss_growth":
            val, tgt = "%+.1f %%" % (t["value"] * 100), "within %.0f %%" % (t["target"] * 100)
        elif t["key"] == "ledger_rows_s":
            val, tgt = "%.0f" % t["value"], ">= %.0f" % t["target"]
        else:
            val, tgt = "%.3f" % t["value"], "%s %s" % (t["how"], t["target"])
        print("| %s | %s | %s | %s | %s |" % (t["figure"], val, ceiling, tgt, ("pass" if t["passed"] else "FAIL") + ("*" if t["noted"] else "")))


def save(res, started):
    os.makedirs(RESULTS, exist_ok=True)
    stem = "%s-%s" % (started.strftime("%Y-%m-%d"), res["commit"])
    path, n = os.path.join(RESULTS, stem + ".json"), 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(RESULTS, "%s-%d.json" % (stem, n))
    with open(path, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    print("\nsaved %s" % os.path.relpath(path, ROOT))
