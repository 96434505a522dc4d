"""Several otpd instances as one fleet, for the integration tests.

A fleet shares one redis-server and one or several fake providers. Each
instance is a harness.Otpd in its own directory (<test dir>/otpd<i>/) with
its own listen port, config file, log, ledger file and sanitizer logs; all
of them get the same secret and API keys (base_config and Otpd's
environment). Instance i sends to provider i % len(providers): with one
provider per instance, a provider's record is what that instance put on the
wire.

What the provider saw is read from the provider's own record: each request
carries t_us, the fake provider's CLOCK_REALTIME when the request's headers
arrived (see tests/fake_provider/fake_provider.c), and the webhook body
carries the message id ({"to", "text", "id"}). Times are compared with
time.time() on the test side, the same clock on the same machine.

FleetTest is the OtpdTest of fleets: a fresh Redis, providers and n
instances per test; the teardown stops every instance still running
(SIGTERM, which must exit 0), the providers and Redis, then scans every
sanitizer log and fails the test on a report.
"""
import concurrent.futures
import copy
import json
import os
import shutil
import signal
import tempfile
import time
import unittest

from harness import (API_KEY, FakeProvider, Otpd, PortClash, Redis, base_config, clear_of_window_edges, free_port,
                     owns_port, sanitizer_reports, wait_until)


def merged(cfg, over):
    """cfg with over applied: a dict value is merged one level into the
    dict it replaces (pacer={"rate": 30} keeps the other pacer keys), any
    other value replaces. Neither argument is changed."""
    out = copy.deepcopy(cfg)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = dict(out[k], **copy.deepcopy(v))
        else:
            out[k] = copy.deepcopy(v)
    return out


def phones(n, start=0):
    """n distinct Indian mobile numbers (no limits are shared between them)."""
    return ["+9197%08d" % (start + i) for i in range(n)]


# ---- what the providers saw ----

def provider_requests(fakes):
    """Every request the providers recorded on a provider route, oldest
    arrival first, each with 'fake' (the provider's index) added."""
    out = []
    for i, f in enumerate(fakes):
        for r in f.requests():
            if r.get("provider") != "none":
                out.append(dict(r, fake=i))
    out.sort(key=lambda r: (r["t_us"], r["fake"], r["seq"]))
    return out


def arrivals(fakes):
    """Arrival times at the providers (seconds, CLOCK_REALTIME), sorted."""
    return [r["t_us"] / 1e6 for r in provider_requests(fakes)]


def message_id(req):
    """The message id a webhook request carried, or None."""
    try:
        return json.loads(req["body"])["id"]
    except (ValueError, KeyError, TypeError):
        return None


def provider_ids(fakes):
    """The message ids the providers received, in arrival order, repeats kept."""
    return [message_id(r) for r in provider_requests(fakes)]


def duplicates(ids):
    """{id: times seen} for every id seen more than once."""
    seen = {}
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
    return {i: n for i, n in seen.items() if n > 1}


def extra_copies(ids):
    """How many requests repeated a message already sent (0: none)."""
    return len(ids) - len(set(ids))


def worst_window(ts, width=1.0):
    """The most arrivals in any window [t, t + width), sliding over the
    sorted times ts."""
    best, j = 0, 0
    for i in range(len(ts)):
        while ts[i] - ts[j] >= width:
            j += 1
        best = max(best, i - j + 1)
    return best


def steady_rate(ts):
    """(n - 1) / (last - first): the rate of a drain measured from its own
    arrivals, counting intervals, not calls."""
    if len(ts) < 2 or ts[-1] <= ts[0]:
        return float("inf")
    return (len(ts) - 1) / (ts[-1] - ts[0])


def prioritize(pid, nice=-10):
    """Raises the scheduling priority of every thread of process pid (Linux
    niceness is per thread; threads started later inherit their creator's).
    Used for the fake providers only: they are the instrument whose arrival
    stamps the pacing tests count, and a stamp taken late by a descheduled
    receiver bunches arrivals that were paced on the wire (seen: 34 arrivals
    within 0.97 s from one correct instance at rate 30 under a load of 3.4 on
    2 cores). otpd keeps its normal priority. Without the privilege to do
    it, nothing changes (False)."""
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        return True
    except OSError:
        return False


# ---- the fleet ----

class Fleet:
    """otpd instances sharing one Redis and the given providers.

    configure(cfg, i), when given, sees each instance's config before its
    first start (after the overrides) and returns the config to use."""

    def __init__(self, workdir, redis, fakes, env=None, configure=None):
        self.dir = workdir
        self.redis = redis
        self.fakes = list(fakes)
        self.env = dict(env or {})
        self.configure = configure
        self.otpds = []
        self.dead = set()  # indexes killed or stopped by the test
        self.paused = set()  # indexes SIGSTOPped by the test (pause)

    def __len__(self):
        return len(self.otpds)

    def __getitem__(self, i):
        return self.otpds[i]

    def config(self, i, port, **over):
        """Instance i's config on listen port: base_config on its own
        ledger, its provider, then over (see merged), then configure."""
        d = os.path.join(self.dir, "otpd%d" % i)
        os.makedirs(d, exist_ok=True)
        fake = self.fakes[i % len(self.fakes)]
        cfg = merged(base_config(self.redis.port, fake.url, os.path.join(d, "ledger.db"), port), over)
        return self.configure(cfg, i) if self.configure else cfg

    def start(self, n, **over):
        """Starts n more instances, each once /healthz answers from it;
        returns their indexes. A port taken by someone else moves the
        instance to another port (at most five tries)."""
        added = []
        for _ in range(n):
            i = len(self.otpds)
            for attempt in range(5):
                o = Otpd(os.path.join(self.dir, "otpd%d" % i), self.config(i, free_port(), **over), self.env)
                try:
                    o.start()
                    break
                except PortClash:
                    if attempt == 4:
                        raise
            self.otpds.append(o)
            added.append(i)
        return added

    def live(self):
        """Indexes of the instances whose process runs."""
        return [i for i, o in enumerate(self.otpds) if o.proc is not None and o.proc.poll() is None]

    def kill(self, i, sig=signal.SIGKILL):
        """Sends sig to instance i and waits for it to exit; it stays dead."""
        o = self.otpds[i]
        o.kill(sig)
        o.proc.wait(15)
        self.dead.add(i)
        return o.proc.returncode

    def pause(self, i):
        """SIGSTOPs instance i: it holds what it holds and answers nothing until resume(i)."""
        self.otpds[i].kill(signal.SIGSTOP)
        self.paused.add(i)

    def resume(self, i):
        self.otpds[i].kill(signal.SIGCONT)
        self.paused.discard(i)

    def stop(self, i, sig=signal.SIGTERM):
        """Stops instance i (Otpd.stop); returns its exit code."""
        self.dead.add(i)
        return self.otpds[i].stop(sig)

    def stop_all(self, sig=signal.SIGTERM, timeout=20):
        """Signals every running instance at once, then waits for all:
        {index: exit code}. One that does not exit in time is killed and
        reported as None."""
        live = self.live()
        for i in live:
            self.otpds[i].proc.send_signal(sig)
        out = {}
        end = time.monotonic() + timeout
        for i in live:
            p = self.otpds[i].proc
            try:
                out[i] = p.wait(max(0.1, end - time.monotonic()))
            except Exception:  # subprocess.TimeoutExpired
                p.kill()
                p.wait()
                out[i] = None
        return out

    def start_again(self, indexes=None):
        """Starts the given stopped instances (default: all) again with
        their own configs, ports and ledgers, all at once, and returns once
        every one answers /healthz from its own process."""
        indexes = list(range(len(self.otpds))) if indexes is None else list(indexes)
        for i in indexes:
            self.otpds[i].start(wait=False)
            self.dead.discard(i)
        for i in indexes:
            o = self.otpds[i]
            wait_until(o.healthy, 15, what="otpd%d /healthz" % i)
            if not owns_port(o.proc.pid, o.port):
                raise PortClash("port %d answers, but not from otpd%d" % (o.port, i))

    def restart_all(self, sig=signal.SIGTERM):
        """The whole fleet stopped at once with sig and started again with
        the same configs; returns the exit codes of the stop."""
        codes = self.stop_all(sig)
        self.start_again()
        return codes

    def issue(self, nums, on=None, workers=8, auth=API_KEY, **fields):
        """Issues one code per phone in nums, concurrently, round-robin over
        the instances on (default: the live ones, in index order). Returns,
        in nums' order, dicts {phone, on, status, headers, body, t} where t
        is time.time() when the answer came."""
        on = self.live() if on is None else list(on)

        def one(k):
            i = on[k % len(on)]
            st, h, body = self.otpds[i].issue(nums[k], auth=auth, **fields)
            return dict(phone=nums[k], on=i, status=st, headers=h, body=body, t=time.time())

        with concurrent.futures.ThreadPoolExecutor(workers) as ex:
            return list(ex.map(one, range(len(nums))))

    def sanitizer_reports(self):
        """Every instance's sanitizer report (otpd.log and san.otpd.*)."""
        out = []
        for i, o in enumerate(self.otpds):
            r = o.sanitizer_report()
            if r:
                out.append("otpd%d:\n%s" % (i, r))
        return out


class FleetTest(unittest.TestCase):
    """Per test: a fresh Redis, `providers` fake providers and `n`
    instances (pacer and limits from the class, merged into base_config).
    A test that wants to start its own instances sets n = 0."""

    n = 3
    providers = 1
    pacer = {}       # merged into base_config's pacer block
    limits = []
    env = {}         # extra environment for every instance
    # The fleet's Redis calls per request grow (holds, slots, status): a
    # 50 ms timeout (base_config) turns a loaded machine's hiccup into a
    # 503. 200 ms still answers a stopped Redis well within a second (one
    # timeout and one retry on a fresh connection).
    redis_timeout_ms = 200

    def configure(self, cfg, i):
        """Hook: instance i's config before its first start."""
        return cfg

    def overrides(self):
        return dict(pacer=dict(self.pacer), limits=[dict(r) for r in self.limits],
                    redis={"timeout_ms": self.redis_timeout_ms})

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-fleet-")
        self.redis, self.fakes, self.fleet = None, [], None
        try:
            self.redis = Redis(self.tmp).start()
            for _ in range(self.providers):
                self.fakes.append(FakeProvider(self.tmp).start())
                prioritize(self.fakes[-1].proc.pid)
            self.fleet = Fleet(self.tmp, self.redis, self.fakes, self.env, self.configure)
            if self.n:
                self.fleet.start(self.n, **self.overrides())
                clear_of_window_edges(self.redis, self.fleet[0].config)
        except BaseException:
            self._stop_all()
            raise

    @property
    def fake(self):
        return self.fakes[0]

    def _stop_all(self):
        for p in self.fakes + [self.redis]:
            if p is not None:
                p.stop()

    def tearDown(self):
        report = []
        try:
            if self.redis is not None and self.redis.proc is not None and self.redis.proc.poll() is None:
                self.redis.resume()  # a test that failed while Redis was stopped
            if self.fleet is not None:
                for i, rc in self.fleet.stop_all().items():
                    if rc != 0:
                        report.append("otpd%d exited with %s on SIGTERM:\n%s" % (
                            i, rc, self.fleet[i].log()[-3000:]))
        finally:
            self._stop_all()
            found = (self.fleet.sanitizer_reports() if self.fleet else []) + \
                [r for r in sanitizer_reports(self.tmp) if not r.startswith("san.otpd.")]
            report = found + report
            if not report and not os.environ.get("OTPD_KEEP"):
                shutil.rmtree(self.tmp, ignore_errors=True)
        if report:
            self.fail("a process reported a problem (files kept in %s):\n%s" % (self.tmp, "\n".join(report)))

    # ---- shared helpers ----

    def requests(self):
        return provider_requests(self.fakes)

    def ids(self):
        return provider_ids(self.fakes)

    def accepted(self, results):
        """The message ids of the 202'd results."""
        return [r["body"]["id"] for r in results if r["status"] == 202]

    def wait_arrived(self, ids, timeout, what="every 202'd message at a provider"):
        """Waits until every id in ids reached a provider; on a timeout the
        failure names how many never arrived."""
        want = set(ids)
        try:
            wait_until(lambda: want <= set(self.ids()), timeout, step=0.1, what=what)
        except AssertionError:
            missing = want - set(self.ids())
            self.fail("%d of %d 202'd messages never reached a provider within %ss (e.g. %s)" % (
                len(missing), len(want), timeout, sorted(missing)[:3]))

    def wait_provider_count(self, n, timeout=10, fake=None):
        """Waits until the providers (or provider fake) recorded n requests."""
        srcs = self.fakes if fake is None else [self.fakes[fake]]
        return wait_until(lambda: (lambda r: r if len(r) >= n else None)(provider_requests(srcs)), timeout,
                          what="%d requests at the provider" % n)

    def metric(self, i, name):
        """One unlabelled metric of instance i, or None."""
        text = self.fleet[i].call("GET", "/metrics", auth=None)[2]
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None
