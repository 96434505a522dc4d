"""The fleet benchmark (issue 10): several otpd instances sharing one Redis.

Runs against whatever bin/otpd is built. Before the fleet pacer each
instance keeps its own queue and its own rate, so 3 instances put about 3x
the rate on the wire; that is what today's binary shows, and the figures
are then the single-process ones.

  pacing:    at 50/s (provider latency 0 and 300 ms) and 1000/s (latency 0),
             for 1 and 3 instances sharing one redis-server and one fake
             provider: the worst 1-s window of provider arrivals / rate, the
             rate error ((achieved - rate) / rate, achieved = (n - 1) / the
             drain span), the p99 of |gap - period| / period.
  redis ops: INFO commandstats before and after each drain, less our own
             INFO: commands otpd issued per message sent, EVALSHA alone, and
             the commands that make up the total.
  throughput: accepted issues/s under wrk (distinct phones, file provider to
             /dev/null, queue never full) of an otpd built from
             BENCH_BEFORE_REV (default aa3d1a6, the last commit before the
             fleet work; built once into build/bench-before) and of bin/otpd,
             each as a ratio to redis-benchmark's EVALSHA/s on its own
             redis-server, measured in the same run.

Queueing. A drain needs the queue full from its first send, whatever the
intake speed: the instances run at 1/s while the phones are issued, stop
with SIGTERM (calls in flight finish, the rest stays queued), and start
again at the measured rate. Today each instance recovers its own queue from
its ledger; in a fleet the queue is in Redis and any instance drains it.
The provider's record is cleared between the two, so every arrival it
holds afterwards belongs to the drain.

Settings: BENCH_SECONDS (default 5) is both the length of each drain (rate
x seconds messages) and of each wrk run; BENCH_COST=1 or 0 runs only the
priced or the unpriced drains (default both); BENCH_ROUNDS (default 3) the
before/after wrk rounds; BENCH_BEFORE_REV the "before" revision; OTPD_KEEP
keeps each drain's directory (logs, ledgers).
"""
import concurrent.futures
import http.client
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from harness import (API_KEY, BIN, ROOT, FakeProvider, Otpd, PortClash, Redis, base_config, free_port, owns_port,
                     san_env, wait_until)

SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))
# Each case runs priced (the money path: a reservation and a use mark per
# message, as in production) and unpriced (the pacer alone, as the older
# `pacing` section runs). BENCH_COST=1 or 0 runs one of them only.
COSTS = {"1": (True,), "0": (False,)}.get(os.environ.get("BENCH_COST"), (True, False))
# Interleaved before/after wrk runs; the figures are their medians.
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
BEFORE_REV = os.environ.get("BENCH_BEFORE_REV", "aa3d1a6")
BEFORE_DIR = os.path.join(ROOT, "build", "bench-before")

# (instances, rate/s, provider latency ms), in the order printed.
CASES = [(1, 50, 0), (1, 50, 300), (1, 1000, 0), (3, 50, 0), (3, 50, 300), (3, 1000, 0)]

# Issue requests in flight at once while the queue is filled.
FILL_CLIENTS = 12


class Instance(Otpd):
    """An otpd of the fleet: its own directory (config, log, sanitizer
    logs, ledger), and any otpd executable (the "before" build)."""

    def __init__(self, workdir, config, exe=None):
        os.makedirs(workdir, exist_ok=True)
        super().__init__(workdir, config)
        self.exe = exe or os.path.join(BIN, "otpd")

    def start(self, wait=True):
        # As Otpd.start, with self.exe.
        self.write_config()
        self._log_from = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen([self.exe, "-c", self.conf_path], env=self.env, stdout=subprocess.DEVNULL,
                                         stderr=err)
        if wait:
            self.wait_up()
        return self

    def wait_up(self):
        wait_until(self.healthy, 30, what="otpd /healthz")
        if not owns_port(self.proc.pid, self.port):
            self.proc.kill()
            self.proc.wait()
            raise PortClash("port %d answers, but not from our otpd" % self.port)


class LoggedProvider(FakeProvider):
    """The fake provider with --log: a line per request, so the drain's
    progress is read from a file instead of asking the provider for its
    whole record while it is being measured."""

    def start(self):
        self.log_file = os.path.join(self.dir, "fake-requests.jsonl")
        with open(os.path.join(self.dir, "fake.log"), "ab") as err:
            self.proc = subprocess.Popen([os.path.join(BIN, "fake_provider"), "--port", "0", "--log", self.log_file],
                                         env=san_env(self.dir, "fake_provider"), stdout=subprocess.PIPE, stderr=err)
        line = self.proc.stdout.readline().decode()
        m = re.match(r"ready (\d+)", line)
        if not m:
            raise RuntimeError("fake provider did not start: %r" % line)
        self.port = int(m.group(1))
        return self

    def logged(self):
        """Requests logged so far (every request, control routes excepted)."""
        try:
            with open(self.log_file, "rb") as f:
                return f.read().count(b"\n")
        except OSError:
            return 0


def loose_config(redis_port, provider_url, ledger, port, rate, capacity, max_inflight, priced):
    """Nothing refuses a distinct phone: no rules, and when priced a cap no
    run reaches."""
    cfg = base_config(redis_port, provider_url, ledger, port)
    if priced:
        cfg["cost"] = {"currency": "INR", "prices": {"+91": 20, "*": 500},
                       "caps": [{"window": "1h", "max": 10 ** 12}]}
    cfg["pacer"] = {"rate": rate, "capacity": capacity, "max_inflight": max_inflight, "timeout": "5s",
                    "retry": {"max": 2, "base": "100ms"}}
    return cfg


def start_fleet(run_dir, n, make_config, exe=None):
    """n instances, started one after another; make_config(i, port)."""
    fleet = []
    for i in range(n):
        for attempt in range(5):
            inst = Instance(os.path.join(run_dir, "otpd%d" % i), make_config(i, free_port()), exe)
            try:
                fleet.append(inst.start())
                break
            except PortClash:
                if attempt == 4:
                    raise
    return fleet


def stop_fleet(fleet, timeout=20):
    """SIGTERM to every instance at once, then wait for each: calls in
    flight finish. A non-zero exit is reported, not fatal (a benchmark)."""
    for inst in fleet:
        if inst.proc.poll() is None:
            inst.proc.send_signal(signal.SIGTERM)
    for inst in fleet:
        try:
            rc = inst.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            inst.proc.kill()
            rc = inst.proc.wait()
        if rc != 0:
            print("  warning: otpd in %s exited with %s:\n%s" % (inst.dir, rc, inst.log()[-1500:]))


def restart_fleet(fleet, rate):
    """Every instance again at rate, started together (none waits for the
    one before to answer)."""
    for inst in fleet:
        inst.config["pacer"]["rate"] = rate
        inst.start(wait=False)
    for inst in fleet:
        inst.wait_up()


def fill(fleet, n, prefix="+9195", phones=None):
    """Issues n distinct phones (prefix and a counter, or phones[:n] when
    given) round-robin over the fleet on keep-alive connections; returns how
    many were accepted (202). Anything else is an error here: the config
    lets every one of them through."""
    headers = {"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"}
    clients = FILL_CLIENTS - FILL_CLIENTS % len(fleet) or len(fleet)

    def client(w):
        inst = fleet[w % len(fleet)]
        conn = http.client.HTTPConnection("127.0.0.1", inst.port, timeout=10)
        ok, bad = 0, []
        try:
            for i in range(w, n, clients):
                phone = phones[i] if phones else "%s%08d" % (prefix, i)
                conn.request("POST", "/v1/otp", json.dumps({"phone": phone}), headers)
                r = conn.getresponse()
                body = r.read()
                if r.status == 202:
                    ok += 1
                else:
                    bad.append((r.status, body[:200]))
        finally:
            conn.close()
        return ok, bad

    with concurrent.futures.ThreadPoolExecutor(clients) as ex:
        results = list(ex.map(client, range(clients)))
    bad = [b for _, bs in results for b in bs]
    if bad:
        raise RuntimeError("%d of %d issues refused, first: %r" % (len(bad), n, bad[0]))
    return sum(ok for ok, _ in results)


def commandstats(redis):
    """{command: calls} from INFO commandstats."""
    out = {}
    for k, v in redis.info("commandstats").items():
        if k.startswith("cmdstat_"):
            out[k[len("cmdstat_"):]] = int(re.search(r"calls=(\d+)", v).group(1))
    return out


def ops_between(before, after, own):
    """Commands issued between two commandstats snapshots, less our own
    (own: {command: calls} we know we made in between)."""
    out = {}
    for cmd in set(before) | set(after):
        d = after.get(cmd, 0) - before.get(cmd, 0) - own.get(cmd, 0)
        if d:
            out[cmd] = d
    return out


def pacing_figures(ts, rate):
    """From sorted arrival times in seconds: worst 1-s window, achieved rate,
    p99 of |gap - period| as a fraction of the period, the longest gap."""
    worst, j = 0, 0
    for i in range(len(ts)):
        while ts[i] - ts[j] >= 1.0:
            j += 1
        worst = max(worst, i - j + 1)
    span = ts[-1] - ts[0]
    achieved = (len(ts) - 1) / span if span > 0 else float("inf")
    period = 1.0 / rate
    gaps = sorted(abs((b - a) - period) for a, b in zip(ts, ts[1:]))
    p99 = gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))] if gaps else 0.0
    return worst, achieved, p99 / period, max((b - a for a, b in zip(ts, ts[1:])), default=0.0)


def pace(tmp, instances, rate, latency_ms, priced):
    """One drain: returns a row of figures (see the module doc)."""
    n = max(50, int(rate * SECONDS))
    # Little's law with room: rate x (latency + loopback) in flight, doubled;
    # every instance may have to carry the whole rate.
    inflight = min(1024, max(16, int(math.ceil(rate * (latency_ms / 1000.0 + 0.02) * 2))))
    run_dir = tempfile.mkdtemp(prefix="pace-%dx%d-%d-" % (instances, rate, latency_ms), dir=tmp)
    redis = Redis(run_dir).start()
    fake = LoggedProvider(run_dir).start()
    fleet = []
    done = False
    try:
        fake.control(latency_ms=latency_ms)
        fleet = start_fleet(run_dir, instances, lambda i, port: loose_config(
            redis.port, fake.url, os.path.join(run_dir, "otpd%d" % i, "ledger.db"), port, 1, n + 100, inflight, priced))
        accepted = fill(fleet, n)
        stop_fleet(fleet)
        expected = accepted - len(fake.requests())  # sent at 1/s while filling
        fake.reset()
        fake.control(latency_ms=latency_ms)  # the reset cleared it
        base = fake.logged()
        stats0 = commandstats(redis)
        restart_fleet(fleet, rate)
        deadline = time.monotonic() + expected / rate * 3 + 30
        while fake.logged() - base < expected and time.monotonic() < deadline:
            time.sleep(0.1)
        stop_fleet(fleet)
        # The one INFO that took stats0 is counted after its own reply.
        ops = ops_between(stats0, commandstats(redis), {"info": 1})
        reqs = [r for r in fake.requests() if r["status"] != 404]
        ts = sorted(r["t_us"] / 1e6 for r in reqs)
        ids = [json.loads(r["body"]).get("id") for r in reqs]
        if len(ts) < 2:
            raise RuntimeError("drain sent %d of %d messages" % (len(ts), expected))
        worst, achieved, gap_err, max_gap = pacing_figures(ts, rate)
        sent = len(ts)
        done = True
        return dict(instances=instances, rate=rate, latency_ms=latency_ms, priced=priced, expected=expected,
                    sent=sent, dups=sent - len(set(ids)), worst=worst, achieved=achieved, gap_err=gap_err,
                    max_gap=max_gap,
                    cmds=sum(ops.values()) / sent, evalsha=ops.get("evalsha", 0) / sent,
                    top=sorted(ops.items(), key=lambda kv: -kv[1])[:6])
    finally:
        for inst in fleet:
            if inst.proc and inst.proc.poll() is None:
                inst.proc.kill()
                inst.proc.wait()
        fake.stop()
        redis.stop()
        if done and not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(run_dir, ignore_errors=True)


def print_pacing(rows):
    print("fleet pacing (one redis-server, one fake provider; %.0f s of messages per drain)" % SECONDS)
    print("%4s %6s %8s %6s %7s %10s %9s %12s %10s %9s %11s" % (
        "inst", "rate", "latency", "priced", "sent", "worst/rate", "rate err", "p99 gap err", "max gap", "cmds/msg",
        "evalsha/msg"))
    for r in rows:
        print("%4d %6d %5d ms %6s %7d %10.3f %+8.1f%% %12.2f %7.1f ms %9.2f %11.2f%s" % (
            r["instances"], r["rate"], r["latency_ms"], "yes" if r["priced"] else "no", r["sent"],
            r["worst"] / r["rate"],
            (r["achieved"] - r["rate"]) / r["rate"] * 100, r["gap_err"], r["max_gap"] * 1000, r["cmds"], r["evalsha"],
            "" if r["sent"] == r["expected"] and not r["dups"] else
            "  (expected %d, duplicates %d)" % (r["expected"], r["dups"])))
    print("redis commands per message sent, by command (otpd's only: our INFO subtracted; start-up and shutdown "
          "of the drain included):")
    for r in rows:
        print("  %dx %4d/s %3d ms %-8s %s" % (r["instances"], r["rate"], r["latency_ms"],
                                              "priced:" if r["priced"] else "unpriced:",
                                              ", ".join("%s %.2f" % (c, k / r["sent"]) for c, k in r["top"]) or "-"))


def build_before(rev=BEFORE_REV):
    """bin/otpd of rev, built once into build/bench-before (a .rev file names
    the commit it holds); returns its path."""
    full = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", rev + "^{commit}"], capture_output=True,
                          text=True, check=True).stdout.strip()
    exe = os.path.join(BEFORE_DIR, "bin", "otpd")
    stamp = os.path.join(BEFORE_DIR, ".rev")
    try:
        with open(stamp) as f:
            if f.read().strip() == full and os.access(exe, os.X_OK):
                return exe, full
    except OSError:
        pass
    shutil.rmtree(BEFORE_DIR, ignore_errors=True)
    os.makedirs(BEFORE_DIR)
    archive = subprocess.Popen(["git", "-C", ROOT, "archive", full], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", BEFORE_DIR], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise RuntimeError("git archive %s failed" % full)
    log = os.path.join(BEFORE_DIR, "build.log")
    with open(log, "w") as out:
        if subprocess.run(["make", "-C", BEFORE_DIR, "-j2", "all"], stdout=out, stderr=subprocess.STDOUT).returncode:
            raise RuntimeError("building %s failed, see %s" % (full, log))
    with open(stamp, "w") as f:
        f.write(full + "\n")
    return exe, full


def throughput(tmp, exe, wrk, evalsha_baseline, decisions_config):
    """Accepted issues/s of exe under wrk, and EVALSHA/s of its redis-server."""
    run_dir = tempfile.mkdtemp(prefix="issue-", dir=tmp)
    redis = Redis(run_dir).start()
    inst = None
    try:
        for attempt in range(5):
            cfg = decisions_config(redis.port, os.path.join(run_dir, "ledger.db"), free_port())
            try:
                inst = Instance(os.path.join(run_dir, "otpd"), cfg, exe).start()
                break
            except PortClash:
                if attempt == 4:
                    raise
        base = evalsha_baseline(redis)
        rps, p50, p99, non2xx, errors = wrk(inst, "issue", duration=max(1, int(round(SECONDS))))
        return dict(base=base, rps=rps, p50=p50, p99=p99, non2xx=non2xx, errors=errors)
    finally:
        if inst is not None:
            stop_fleet([inst])
        redis.stop()


def bench_fleet(tmp, wrk, evalsha_baseline, decisions_config):
    rows = [pace(tmp, *case, priced=priced) for priced in COSTS for case in CASES]
    print_pacing(rows)
    exe, rev = build_before()
    runs = {"before": [], "after": []}
    for _ in range(ROUNDS):
        runs["before"].append(throughput(tmp, exe, wrk, evalsha_baseline, decisions_config))
        runs["after"].append(throughput(tmp, None, wrk, evalsha_baseline, decisions_config))
    print("accepted-issue throughput (wrk %d s x %d rounds, interleaved; file provider to /dev/null), each over "
          "EVALSHA/s of its own redis-server:" % (max(1, int(round(SECONDS))), ROUNDS))
    med = {}
    for side, name in (("before", "before (%s)" % rev[:12]), ("after", "after (bin/otpd)")):
        for r in runs[side]:
            print("  %-22s %8.0f issues/s  EVALSHA %8.0f/s  ratio %.4f  p50 %.2f ms  p99 %.2f ms  non-2xx %d  "
                  "errors %d" % (name, r["rps"], r["base"], r["rps"] / r["base"], r["p50"], r["p99"], r["non2xx"],
                                 r["errors"]))
        med[side] = median([r["rps"] / r["base"] for r in runs[side]])
    print("  median ratio: before %.4f, after %.4f; after/before %.3f" % (med["before"], med["after"],
                                                                        med["after"] / med["before"]))


def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2
