"""The lanes benchmark (providers as a network): what routing costs Redis.

Runs against whatever bin/otpd this tree holds (run it from a clone built at
each revision to compare them). Every figure is read from Redis's own
INFO commandstats and INFO cpu, before and after, less our own INFO calls.

  drain:    as bench/fleet.py's pacing drain, one instance at BENCH_RATE
            (default 1000/s), provider latency 0, priced and unpriced: the
            queue is filled at 1/s, otpd stopped, started again at the rate,
            and Redis is measured from that start until the drain's last
            arrival and otpd's exit. Per message sent: EVALSHA (round trips),
            top-level commands (what otpd sent: EVALSHA, PING, SCRIPT LOAD,
            CONFIG GET...), every command (script-internal ones included, as
            fleet.py counts), EVALSHA's usec (each script's whole run),
            the sum of every command's usec (counts a script's inner
            commands twice: EVALSHA's usec includes them) and the
            redis-server process's CPU (INFO cpu, user + sys).
  accepted: issues for a new phone each request under wrk (bench/wrk.lua,
            MODE=issue; bench/run.py's decisions config: the file provider
            to /dev/null, a queue that never fills), then the wait for the
            queue to drain, so every accepted message's sends are counted:
            the same figures per accepted issue. `make bench` (perf.py)
            reads Redis right after wrk instead, before the queue drains.
  idle:     one otpd, no traffic: after a settling time, the commands it
            sends per second for BENCH_IDLE_SECONDS (default 10).

Networks (--net, default every one this otpd accepts):
  1p        the single "provider" section (the lane 'default').
  2p        providers alpha and beta, routes IN -> [alpha, beta],
            * -> [beta]; every phone is Indian, so alpha sends and beta is
            the failover that never has to serve (its pacer polls).
  2p-split  the same network, half the phones Indian and half British:
            alpha and beta each send half, each at half the rate.
  3p        (idle only) providers alpha, beta and gamma, route * -> all.
A tree without routes (before ce737a5) runs 1p only.

Settings: BENCH_SECONDS (default 5) is both the length of each drain (rate
x seconds messages) and of each wrk run; BENCH_RATE (1000) the drain's
rate; BENCH_COST=1 or 0 runs only the priced or the unpriced drains;
BENCH_ROUNDS (1) repeats every run; BENCH_IDLE_SECONDS (10);
BENCH_HTTP_THREADS (32) the accepted run's workers; BENCH_SCRIPTS=1 also
logs every EVALSHA in Redis's SLOWLOG during the drains and prints them per
script and op (those drains' CPU figures then carry the slow log's cost);
OTPD_KEEP keeps each run's directory.

Usage: python3 bench/lanes.py [drain] [accepted] [idle] [--net 1p,2p,...]
"""
import concurrent.futures
import hashlib
import http.client
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
from harness import API_KEY, ROOT, Redis, free_port, wait_until  # noqa: E402

SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
RATE = int(os.environ.get("BENCH_RATE", "1000"))
COSTS = {"1": (True,), "0": (False,)}.get(os.environ.get("BENCH_COST"), (True, False))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1"))
IDLE_SECONDS = float(os.environ.get("BENCH_IDLE_SECONDS", "10"))
THREADS = int(os.environ.get("BENCH_HTTP_THREADS", "32"))
SCRIPTS = os.environ.get("BENCH_SCRIPTS", "") not in ("", "0")
IN_PHONE, GB_PHONE = "+9195%08d", "+4474001%05d"

# Commands otpd sends itself (src/store/store.c); the rest of commandstats
# are a script's inner commands.
TOP_LEVEL = {"evalsha", "eval", "ping", "script", "role", "config", "auth", "select", "hello", "client", "sentinel"}


def load(name):
    """A module of bench/ by path: tests/integration (on sys.path for the
    harness) has files of the same names."""
    spec = importlib.util.spec_from_file_location("bench_" + name, os.path.join(HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fleet = load("fleet")
perf = load("perf")
run = load("run")


def has_routes():
    """Whether this tree's otpd knows providers and routes."""
    return os.path.exists(os.path.join(ROOT, "src", "base", "route.c"))


# ---- Redis's side ----------------------------------------------------------

def snapshot(redis):
    """({command: (calls, usec)}, redis-server CPU seconds); two INFO calls."""
    return perf.commandstats(redis), perf.redis_cpu(redis)


def redis_between(s0, s1, n, own_info=2):
    """Per unit of n between two snapshots: calls and usec, our INFO calls
    (own_info of them: the two of s0 are counted in s1) taken out."""
    (c0, cpu0), (c1, cpu1) = s0, s1
    d = {}
    for cmd in set(c0) | set(c1):
        calls = c1.get(cmd, (0, 0))[0] - c0.get(cmd, (0, 0))[0]
        usec = c1.get(cmd, (0, 0))[1] - c0.get(cmd, (0, 0))[1]
        if cmd == "info":
            calls -= own_info
            usec = 0  # ours, nearly all; otpd sends no INFO
        if calls:
            d[cmd] = (calls, usec)
    top = {c: v for c, v in d.items() if c.split("|")[0] in TOP_LEVEL}
    n = max(1, n)
    return dict(n=n, evalsha=d.get("evalsha", (0, 0))[0] / n, top=sum(v[0] for v in top.values()) / n,
                cmds=sum(v[0] for v in d.values()) / n, evalsha_us=d.get("evalsha", (0, 0))[1] / n,
                top_us=sum(v[1] for v in top.values()) / n, all_us=sum(v[1] for v in d.values()) / n,
                cpu_us=(cpu1 - cpu0) * 1e6 / n,
                by_cmd=sorted(((c, v[0] / n, v[1] / n) for c, v in d.items()), key=lambda x: -x[1]))


def script_names():
    """{sha1: name} of the scripts otpd loads, as the Makefile embeds them
    (issue.lua and verify.lua after prelude.lua)."""
    out = {}
    for d in ("limits", "pacer", "admin", "v2"):
        for f in sorted(os.listdir(os.path.join(ROOT, "src", d))):
            if f.endswith(".lua") and f != "prelude.lua":
                with open(os.path.join(ROOT, "src", d, f), "rb") as fh:
                    src = fh.read()
                if f in ("issue.lua", "verify.lua"):
                    with open(os.path.join(ROOT, "src", d, "prelude.lua"), "rb") as fh:
                        src = fh.read() + src
                out[hashlib.sha1(src).hexdigest()] = f[:-4]
    return out


def slowlog_on(redis):
    redis.cmd("CONFIG", "SET", "slowlog-max-len", "2000000")
    redis.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0")
    redis.cmd("SLOWLOG", "RESET")


def slowlog_scripts(redis):
    """{script[:op]: calls} of the EVALSHAs in the slow log (queue.lua's and
    slot.lua's op is their ARGV[1])."""
    names = script_names()
    out = {}
    for e in redis.cmd("SLOWLOG", "GET", "-1", timeout=60):
        argv = e[3]
        if not argv or argv[0].lower() != "evalsha":
            continue
        name = names.get(argv[1], argv[1][:8])
        if name in ("queue", "slot"):
            nkeys = int(argv[2])
            name += ":" + (argv[3 + nkeys] if len(argv) > 3 + nkeys else "?")
        out[name] = out.get(name, 0) + 1
    return out


# ---- networks --------------------------------------------------------------

def network(cfg, net, adapters, rate=None):
    """cfg with net's providers (adapters: name -> adapter keys) and routes."""
    if net == "1p":
        cfg["provider"] = dict(adapters["default"])
        return cfg
    cfg.pop("provider", None)
    names = {"2p": ("alpha", "beta"), "2p-split": ("alpha", "beta"), "3p": ("alpha", "beta", "gamma")}[net]
    cfg["providers"] = {n: dict(adapters[n], **({"rate": rate} if rate else {})) for n in names}
    if net == "3p":
        cfg["routes"] = [{"match": "*", "providers": list(names)}]
    else:
        cfg["routes"] = [{"match": "IN", "providers": ["alpha", "beta"]}, {"match": "*", "providers": ["beta"]}]
    return cfg


def lanes_of(net):
    return {"1p": ("default",), "2p": ("alpha", "beta"), "2p-split": ("alpha", "beta"),
            "3p": ("alpha", "beta", "gamma")}[net]


def file_adapters(net):
    return {n: {"type": "file", "path": "/dev/null"} for n in lanes_of(net)}


# ---- drain -----------------------------------------------------------------

def drain(tmp, net, priced):
    """One drain of one instance: returns the figures per message sent."""
    n = max(50, int(RATE * SECONDS))
    inflight = min(1024, max(16, int(math.ceil(RATE * 0.02 * 2))))
    run_dir = tempfile.mkdtemp(prefix="drain-%s-%s-" % (net, "priced" if priced else "free"), dir=tmp)
    redis = Redis(run_dir).start()
    fakes = {}
    inst = None
    done = False
    try:
        for lane in lanes_of(net):
            os.makedirs(os.path.join(run_dir, lane))
            fakes[lane] = fleet.LoggedProvider(os.path.join(run_dir, lane)).start()
        adapters = {lane: {"type": "webhook", "url": f.url + "/sms"} for lane, f in fakes.items()}
        # 2p-split: each provider at half the rate, so the wire carries RATE in all.
        lane_rate = RATE // 2 if net == "2p-split" else None
        if net == "2p-split":  # alternately Indian (alpha) and British (beta)
            phones = [(IN_PHONE if i % 2 == 0 else GB_PHONE) % (i // 2) for i in range(n)]
        else:
            phones = [IN_PHONE % i for i in range(n)]

        def config(port):
            cfg = fleet.loose_config(redis.port, "http://127.0.0.1:9", os.path.join(run_dir, "ledger.db"), port, 1,
                                     n + 100, inflight, priced)
            return network(cfg, net, adapters, 1 if lane_rate else None)

        for attempt in range(5):
            try:
                inst = fleet.Instance(os.path.join(run_dir, "otpd"), config(free_port())).start()
                break
            except fleet.PortClash:
                if attempt == 4:
                    raise
        accepted = fleet.fill([inst], len(phones), phones=phones)
        fleet.stop_fleet([inst])
        expected = accepted - sum(len(f.requests()) for f in fakes.values())
        for f in fakes.values():
            f.reset()
        base = sum(f.logged() for f in fakes.values())
        if SCRIPTS:
            slowlog_on(redis)
        s0 = snapshot(redis)
        inst.config["pacer"]["rate"] = RATE
        for p in inst.config.get("providers", {}).values():
            p["rate"] = lane_rate or RATE
        inst.start()
        deadline = time.monotonic() + expected / RATE * 3 + 30
        while sum(f.logged() for f in fakes.values()) - base < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        fleet.stop_fleet([inst])
        s1 = snapshot(redis)
        scripts = slowlog_scripts(redis) if SCRIPTS else None
        reqs = [r for f in fakes.values() for r in f.requests() if r["status"] != 404]
        ids = [json.loads(r["body"]).get("id") for r in reqs]
        per_lane = {lane: sum(1 for r in f.requests() if r["status"] != 404) for lane, f in fakes.items()}
        sent = len(reqs)
        if sent < 2:
            raise RuntimeError("drain sent %d of %d messages" % (sent, expected))
        ts = sorted(r["t_us"] / 1e6 for r in reqs)
        achieved = (len(ts) - 1) / (ts[-1] - ts[0]) if ts[-1] > ts[0] else float("inf")
        done = True
        return dict(run="drain", net=net, priced=priced, expected=expected, sent=sent, dups=sent - len(set(ids)),
                    per_lane=per_lane, achieved=achieved, scripts=scripts, **redis_between(s0, s1, sent))
    finally:
        if inst is not None and inst.proc and inst.proc.poll() is None:
            inst.proc.kill()
            inst.proc.wait()
        for f in fakes.values():
            f.stop()
        redis.stop()
        if done and not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(run_dir, ignore_errors=True)


# ---- accepted --------------------------------------------------------------

def sent_total(otpd):
    m = re.search(r'^otpd_messages_total\{state="sent"\} (\d+)$', perf.metrics_text(otpd), re.M)
    return int(m.group(1)) if m else 0


def accepted(tmp, net):
    """wrk's accepted issues, then the queue's drain: figures per accepted
    issue and per message sent."""
    run_dir = tempfile.mkdtemp(prefix="accepted-%s-" % net, dir=tmp)
    redis = Redis(run_dir).start()
    inst = None
    done = False
    try:
        for attempt in range(5):
            cfg = run.decisions_config(redis.port, os.path.join(run_dir, "ledger.db"), free_port())
            cfg["http_threads"] = THREADS
            network(cfg, net, file_adapters(net))
            try:
                inst = fleet.Instance(os.path.join(run_dir, "otpd"), cfg).start()
                break
            except fleet.PortClash:
                if attempt == 4:
                    raise
        time.sleep(1)  # start-up's calls out of the way
        d0, m0 = perf.decisions(inst), sent_total(inst)
        s0 = snapshot(redis)
        w = perf.wrk(inst.port, "issue", seconds=SECONDS)
        d1 = perf.quiet(inst)
        acc = d1.get(("issue", "accepted"), 0) - d0.get(("issue", "accepted"), 0)
        perf.settle(inst)
        wait_until(lambda: sent_total(inst) - m0 >= acc, 60, 0.2, "every accepted message sent")
        s1 = snapshot(redis)
        m1 = sent_total(inst)
        other = {"%s/%s" % k: d1[k] - d0.get(k, 0) for k in d1 if k != ("issue", "accepted") and d1[k] != d0.get(k, 0)}
        done = True
        # Our own INFO in between: perf.metrics_text is otpd's, not Redis's; s0 took 2.
        return dict(run="accepted", net=net, rps=w["rps"], accepted=acc, sent=m1 - m0, other=other,
                    **redis_between(s0, s1, acc))
    finally:
        if inst is not None:
            fleet.stop_fleet([inst])
        redis.stop()
        if done and not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(run_dir, ignore_errors=True)


# ---- idle ------------------------------------------------------------------

def idle(tmp, net):
    run_dir = tempfile.mkdtemp(prefix="idle-%s-" % net, dir=tmp)
    redis = Redis(run_dir).start()
    inst = None
    done = False
    try:
        for attempt in range(5):
            cfg = run.decisions_config(redis.port, os.path.join(run_dir, "ledger.db"), free_port())
            cfg["http_threads"] = 4
            network(cfg, net, file_adapters(net))
            try:
                inst = fleet.Instance(os.path.join(run_dir, "otpd"), cfg).start()
                break
            except fleet.PortClash:
                if attempt == 4:
                    raise
        time.sleep(3)  # start-up's calls out of the way
        s0 = snapshot(redis)
        t0 = time.monotonic()
        time.sleep(IDLE_SECONDS)
        s1 = snapshot(redis)
        secs = time.monotonic() - t0
        r = redis_between(s0, s1, 1)
        # Per second, not per message.
        for k in ("evalsha", "top", "cmds", "evalsha_us", "top_us", "all_us", "cpu_us"):
            r[k] /= secs
        r["by_cmd"] = [(c, k / secs, u / secs) for c, k, u in r["by_cmd"]]
        done = True
        return dict(run="idle", net=net, seconds=secs, **r)
    finally:
        if inst is not None:
            fleet.stop_fleet([inst])
        redis.stop()
        if done and not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(run_dir, ignore_errors=True)


# ---- printing --------------------------------------------------------------

def print_rows(rows, unit):
    print("%-8s %-6s %7s %9s %9s %9s %11s %10s %10s %10s" % (
        "net", "priced", "n", "evalsha", "top-level", "all cmds", "evalsha us", "top us", "all us", "redis cpu"))
    for r in rows:
        print("%-8s %-6s %7d %9.2f %9.2f %9.2f %11.1f %10.1f %10.1f %10.1f%s" % (
            r["net"], {True: "yes", False: "no", None: "-"}[r.get("priced")],
            r.get("sent") if r["run"] == "drain" else r.get("accepted", round(r.get("seconds", 0))),
            r["evalsha"], r["top"], r["cmds"], r["evalsha_us"], r["top_us"], r["all_us"], r["cpu_us"],
            extra(r)))
    print("  (%s; by command, calls and usec each:)" % unit)
    for r in rows:
        print("  %-8s %-4s %s" % (r["net"], {True: "$", False: "", None: ""}[r.get("priced")], ", ".join(
            "%s %.2f (%.1f us)" % (c, k, u) for c, k, u in r["by_cmd"] if k >= 0.01)))
        if r.get("scripts"):
            n = r["sent"]
            print("  %-13s scripts: %s" % ("", ", ".join("%s %.2f" % (s, k / n) for s, k in
                                                          sorted(r["scripts"].items(), key=lambda kv: -kv[1]))))


def extra(r):
    out = []
    if r["run"] == "drain":
        out.append("achieved %.0f/s" % r["achieved"])
        if len(r["per_lane"]) > 1:
            out.append("per lane " + " ".join("%s %d" % kv for kv in r["per_lane"].items()))
        if r["sent"] != r["expected"] or r["dups"]:
            out.append("expected %d, duplicates %d" % (r["expected"], r["dups"]))
    if r["run"] == "accepted":
        out.append("%.0f issues/s, %d sent" % (r["rps"], r["sent"]))
        if r["other"]:
            out.append("other decisions %s" % r["other"])
    return ("  " + "; ".join(out)) if out else ""


def main():
    args = sys.argv[1:]
    nets = None
    if "--net" in args:
        i = args.index("--net")
        nets = args[i + 1].split(",")
        del args[i:i + 2]
    what = args or ["drain", "accepted", "idle"]
    routes = has_routes()
    tmp = tempfile.mkdtemp(prefix="otpd-lanes-")
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=7", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    print("lanes bench at %s (%s): %.0f s runs, drains at %d/s, %d round(s)%s" % (
        rev, "routes" if routes else "no routes: 1p only", SECONDS, RATE, ROUNDS,
        "; SLOWLOG on in the drains" if SCRIPTS else ""))

    def pick(default):
        ok = [n for n in (nets or default) if routes or n == "1p"]
        return ok
    try:
        if "drain" in what:
            rows = [drain(tmp, net, priced) for _ in range(ROUNDS) for priced in COSTS
                    for net in pick(["1p", "2p", "2p-split"])]
            print("drain: Redis per message sent (one instance, one redis-server; otpd's start and exit included)")
            print_rows(rows, "per message sent")
        if "accepted" in what:
            rows = [accepted(tmp, net) for _ in range(ROUNDS) for net in pick(["1p", "2p"])]
            print("accepted: Redis per accepted issue (wrk %.0f s, %d http threads, file provider to /dev/null, "
                  "the queue drained after)" % (SECONDS, THREADS))
            print_rows(rows, "per accepted issue")
        if "idle" in what:
            rows = [idle(tmp, net) for _ in range(ROUNDS) for net in pick(["1p", "2p", "3p"])]
            print("idle: Redis per second of one otpd with no traffic (%.0f s)" % IDLE_SECONDS)
            print_rows(rows, "per second")
    finally:
        if not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
