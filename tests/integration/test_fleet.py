"""One fleet (issue 10): several otpd processes sharing one Redis are one
queue, one provider rate, one status store, and survive the death of any
of them. Black-box: real redis-server, real bin/otpd processes (fleet.py),
the fake provider; every time is the provider's own arrival time.

The window the rate is checked over: the fleet puts at most `rate` calls on
the wire in any 1-second window; the fake provider stamps an arrival in its
per-connection thread, whose scheduling on a loaded 2-core machine moves it
by tens of ms (test_pacer.tightest, seen: 21 arrivals in a 1-s window at
rate 20 from one correct instance). So the tests count arrivals in windows
of WINDOW = 0.97 s: rate + 1 arrivals inside 0.97 s is a burst on the wire,
not receiver jitter. Three instances pacing alone put 3 x rate there.
"""
# It measures time or rates: tests/integration/run.py runs it alone, after the parallel workers.
SERIAL = True
import math
import time
import urllib.parse

from fleet import (FleetTest, arrivals, duplicates, extra_copies, message_id, phones, steady_rate,
                   worst_window)
from harness import OTHER_KEY, code_of, wait_until

WINDOW = 0.97


class FleetPacingTest(FleetTest):
    """3 instances at pacer.rate 30, 120 messages issued as fast as the
    fleet answers, round-robin: the provider sees at most 30 in any window
    and at least 97 % of 30 a second over the drain.

    The drain's rate is measured from the first arrival to the last, counting
    intervals ((n - 1) / span). Assumption: the span starts no earlier than
    the moment every issue was answered (the queue may run dry while the
    issues still trickle in on a loaded machine: that is the client's rate,
    not the fleet's); at least 60 arrivals must remain in it."""

    n = 3
    rate = 30
    latency_ms = 50
    pacer = {"rate": 30, "capacity": 300, "max_inflight": 16, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s"}

    def test_one_rate_for_the_fleet(self):
        self.fake.control(latency_ms=self.latency_ms)
        total = 120
        res = self.fleet.issue(phones(total))
        self.assertEqual([r["status"] for r in res], [202] * total, [r["body"] for r in res if r["status"] != 202])
        ids = self.accepted(res)
        issued_at = max(r["t"] for r in res)
        self.wait_arrived(ids, 25)
        ts = arrivals(self.fakes)
        worst = worst_window(ts, WINDOW)
        self.assertLessEqual(worst, self.rate, "%d arrivals within %.2f s (%d in 1 s) from 3 instances at rate %d"
                             % (worst, WINDOW, worst_window(ts), self.rate))
        drain = [t for t in ts if t >= issued_at] if ts[0] < issued_at else ts
        self.assertGreaterEqual(len(drain), 60, "the issues took longer than half the drain: nothing to measure")
        rate = steady_rate(drain)
        self.assertGreaterEqual(rate, 0.97 * self.rate, "the fleet drained at %.2f/s (%d arrivals over %.2f s)"
                                % (rate, len(drain), drain[-1] - drain[0]))
        self.assertEqual(duplicates(self.ids()), {}, "a message went out twice with no failure")


class FleetPacingSlowProviderTest(FleetPacingTest):
    """The same with a 300 ms provider: 30/s x 0.3 s = 9 calls in flight
    fleet-wide, within each instance's max_inflight of 16, so latency must
    not lower the rate (Little's law; docs/architecture.md,
    "The pacer and the fleet")."""

    latency_ms = 300


class FleetTakeoverTest(FleetTest):
    """One instance SIGKILLed mid-drain and never restarted: its messages,
    queued and in flight, are sent by the others.

    Each instance has its own provider, so what instance 0 put on the wire
    is exactly provider 0's record. Provider 0 hangs (it never answers): once
    it has recorded max_inflight (4) requests, instance 0 holds 4 calls
    whose outcome it can never learn, and it is killed then. Its pacer
    timeout is long (20 s) so it cannot retry them itself before the kill.
    The others' providers answer in 300 ms.

    Contract: every 202'd message id reaches some provider within
    pacer.takeover (2 s) plus the drain (about 3 s at 30/s), well within
    the codes' life (5 min; the test waits 25 s); a message goes out at most
    twice, and the repeats number at most instance 0's max_inflight (the
    calls it had on the wire)."""

    n = 0
    providers = 3
    max_inflight = 4
    pacer = {"rate": 30, "capacity": 300, "max_inflight": 4, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s", "takeover": "2s"}

    def configure(self, cfg, i):
        if i == 0:
            cfg["pacer"]["timeout"] = "20s"
        return cfg

    def test_sigkilled_instance_loses_nothing(self):
        self.fakes[0].control(hang=True)
        for f in self.fakes[1:]:
            f.control(latency_ms=300)
        self.fleet.start(3, **self.overrides())
        total = 90
        res = self.fleet.issue(phones(total))
        self.assertEqual([r["status"] for r in res], [202] * total, [r["body"] for r in res if r["status"] != 202])
        ids = self.accepted(res)
        self.wait_provider_count(self.max_inflight, 15, fake=0)
        self.fleet.kill(0)
        on_wire = len(self.fakes[0].requests())
        self.assertEqual(on_wire, self.max_inflight, "instance 0 had more calls on the wire than max_inflight")
        self.assertLess(len(set(self.ids())), total, "the drain ended before the kill: nothing left to take over")
        self.wait_arrived(ids, 25)
        got = self.ids()
        self.assertLessEqual(set(got), set(ids), "a message nobody accepted reached the provider")
        self.assertLessEqual(extra_copies(got), self.max_inflight,
                             "duplicates beyond the dead instance's calls in flight: %s" % duplicates(got))
        self.assertLessEqual(max(duplicates(got).values(), default=1), 2, duplicates(got))


class FleetCapacityTest(FleetTest):
    """pacer.capacity 30 for the whole fleet under 90 concurrent issues
    spread over 3 instances, with the provider at rate 1, so the queue
    hardly drains while they are answered.

    Bound: 202s <= 30 + the messages that left the queue meanwhile, read
    from the provider: every arrival up to one slot (1 s at rate 1) after
    the last answer, a lenient count of what may have been claimed while
    the issues were decided. At least 30 are accepted (limits are loose, so
    a refusal with room left would be a bug); every other answer is 503
    queue_full with a Retry-After of depth / rate, at most
    ceil((capacity + left) / rate) (whether a claimed message still counts
    in the depth is the implementation's choice); no message refused
    reaches the provider."""

    n = 3
    capacity = 30
    pacer = {"rate": 1, "capacity": 30, "max_inflight": 4, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s"}

    def test_capacity_is_fleet_wide(self):
        total = 90
        res = self.fleet.issue(phones(total), workers=12)
        last = max(r["t"] for r in res)
        ok = [r for r in res if r["status"] == 202]
        refused = [r for r in res if r["status"] != 202]
        # One slot later, anything claimed before the last answer is at the provider.
        wait_until(lambda: time.time() >= last + 1.0, 3, what="one slot past the last answer")
        left = len([t for t in arrivals(self.fakes) if t <= last + 1.0])
        self.assertLessEqual(len(ok), self.capacity + left,
                             "%d accepted by 3 instances with a fleet capacity of %d (%d left the queue meanwhile); "
                             "per instance: %s" % (len(ok), self.capacity, left,
                                                   [len([r for r in ok if r["on"] == i]) for i in range(3)]))
        self.assertGreaterEqual(len(ok), self.capacity, [r["body"] for r in refused][:3])
        for r in refused:
            self.assertEqual((r["status"], r["body"].get("error")), (503, "queue_full"), r["body"])
            ra = int(r["headers"]["retry-after"])
            self.assertTrue(1 <= ra <= math.ceil((self.capacity + left) / self.pacer["rate"]), ra)
        self.assertLessEqual(set(self.ids()), set(self.accepted(res)), "a refused request caused an SMS")


class FleetStatusTest(FleetTest):
    """Status and verify through an instance other than the accepting one:
    B answers GET /v1/otp/{id} for the issuing key (queued, sending, then
    sent), 404 for another key, and verifies the code from the SMS."""

    n = 2
    pacer = {"rate": 20, "capacity": 100, "max_inflight": 4, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s"}

    def test_status_and_verify_on_another_instance(self):
        a, b = self.fleet[0], self.fleet[1]
        phone = "+919812345678"
        self.fake.control(latency_ms=300)  # so B may well see it before it is sent
        st, _, body = a.issue(phone)
        self.assertEqual(st, 202, body)
        mid = body["id"]
        st, _, p = b.call("GET", "/v1/otp/" + mid)
        self.assertEqual(st, 200, "instance B does not know message %s accepted by A: %r" % (mid, p))
        self.assertEqual(p["id"], mid)
        self.assertIn(p["status"], ("queued", "sending", "sent"))
        self.assertEqual(b.call("GET", "/v1/otp/" + mid, auth=OTHER_KEY)[0], 404)
        st, _, p = wait_until(lambda: (lambda r: r if r[0] == 200 and r[2].get("status") == "sent" else None)(
            b.call("GET", "/v1/otp/" + mid)), 10, what="B to report the message sent")
        sent = {"id": mid, "status": "sent", "provider": "default",
                "attempts": [{"provider": "default", "cause": "accepted"}]}
        self.assertEqual(p, sent)
        self.assertEqual(a.call("GET", "/v1/otp/" + mid)[2], sent)
        msgs = [m for m in self.fake.messages() if m["id"] == mid]
        self.assertEqual(len(msgs), 1)
        st, _, p = b.verify(phone, code_of(msgs[0]["text"]))
        self.assertEqual((st, p), (200, {"verified": True, "verification_id": body["verification_id"]}))
        self.assertEqual(a.verify(phone, code_of(msgs[0]["text"]))[0], 404)  # single use, fleet-wide


class FleetCancelTest(FleetTest):
    """A cancel on B stops a message A accepted: the message's state is the
    fleet's, not its accepting instance's. At rate 1 with three messages
    ahead of it, the message is still queued when B cancels; a message
    queued after it reaching the provider is the barrier that it had its
    turn. Both instances then report it failed."""

    n = 2
    pacer = {"rate": 1, "capacity": 100, "max_inflight": 4, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s"}

    def test_cancel_on_another_instance(self):
        a, b = self.fleet[0], self.fleet[1]
        for p in phones(3):
            self.assertEqual(a.issue(p)[0], 202)
        phone = "+919812345678"
        st, _, mine = a.issue(phone, purpose="login")
        self.assertEqual(st, 202, mine)
        r = b.call("POST", "/v1/otp/cancel", {"phone": phone, "purpose": "login"})
        self.assertEqual((r[0], r[2]), (200, {"cancelled": True, "verification_id": mine["verification_id"]}))
        st, _, later = a.issue(phones(1, 100)[0])
        self.assertEqual(st, 202, later)
        wait_until(lambda: later["id"] in self.ids(), 15, step=0.1,
                   what="the message queued after the cancelled one")
        self.assertNotIn(mine["id"], self.ids(), "a message cancelled on B went out from A")
        for o in (a, b):
            st, _, body = o.call("GET", "/v1/otp/" + mine["id"])
            self.assertEqual((st, body.get("status")), (200, "failed"), body)


class FleetDeliveryReportTest(FleetTest):
    """A Kannel delivery report for A's message, delivered to the instance
    that did not send it (a load balancer picks any instance): the status
    becomes 'delivered' on both."""

    n = 2
    env = {"KANNEL_USER": "kuser", "KANNEL_PASS": "kpass-secret"}

    def configure(self, cfg, i):
        cfg["provider"] = {"type": "kannel", "url": self.fake.url + "/cgi-bin/sendsms", "from": "OTPD",
                           "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS",
                           "callback_url": "http://" + cfg["listen"]}
        return cfg

    def test_report_on_another_instance(self):
        a, b = self.fleet[0], self.fleet[1]
        st, _, body = a.issue("+919812345678")
        self.assertEqual(st, 202, body)
        mid = body["id"]
        wait_until(lambda: a.call("GET", "/v1/otp/" + mid)[2].get("status") == "sent", 10, what="sent")
        req = [r for r in self.requests() if r["args"].get("to") == "+919812345678"][0]
        dlr = urllib.parse.urlsplit(req["args"]["dlr-url"].replace("%d", "1"))
        # The report URL names the instance that sent it (each here has its
        # own callback_url; in production it is the load balancer's): the
        # other instance gets the report.
        sender = a if dlr.port == a.port else b
        self.assertIn(dlr.port, (a.port, b.port))
        other = b if sender is a else a
        st, _, p = other.call("GET", dlr.path + "?" + dlr.query, auth=None)
        self.assertEqual(st, 200, p)
        for o in (a, b):
            st, _, p = wait_until(lambda: (lambda r: r if r[2].get("status") == "delivered" else None)(
                o.call("GET", "/v1/otp/" + mid)), 5, what="the report applied, seen on port %d" % o.port)
            self.assertEqual(p, {"id": mid, "status": "delivered", "provider": "default",
                                 "attempts": [{"provider": "default", "cause": "accepted"}]})


class FleetRestartTest(FleetTest):
    """The whole fleet stopped with SIGTERM mid-drain and started again with
    the same configs: no burst across the restart (the slots live in Redis,
    not in the processes) and every 202'd message arrives.

    Assumption: a SIGTERM lets calls in flight finish, so a repeat should be
    rare; the test allows each instance's max_inflight of them (a call cut
    at the end of the grace is resent)."""

    n = 3
    rate = 30
    pacer = {"rate": 30, "capacity": 300, "max_inflight": 8, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s"}

    def test_full_fleet_restart_does_not_burst(self):
        self.fake.control(latency_ms=50)
        total = 150
        res = self.fleet.issue(phones(total))
        self.assertEqual([r["status"] for r in res], [202] * total, [r["body"] for r in res if r["status"] != 202])
        ids = self.accepted(res)
        self.wait_provider_count(40, 15)
        self.assertLess(len(set(self.ids())), total, "the drain ended before the restart")
        codes = self.fleet.restart_all()
        self.assertEqual(set(codes.values()), {0}, codes)
        self.wait_arrived(ids, 25)
        ts = arrivals(self.fakes)
        worst = worst_window(ts, WINDOW)
        self.assertLessEqual(worst, self.rate, "%d arrivals within %.2f s (%d in 1 s) across a full restart" % (
            worst, WINDOW, worst_window(ts)))
        self.assertLessEqual(extra_copies(self.ids()), 3 * self.pacer["max_inflight"], duplicates(self.ids()))


class FleetRedisPausedTest(FleetTest):
    """Redis SIGSTOPped mid-drain, then resumed: fail closed, then resume.

    While Redis is stopped, an issue on any instance answers 503
    store_unavailable in under a second, and the provider receives nothing
    new. Calls already on the wire are allowed: assumption, a call is on the
    wire if it arrives within GRACE (0.5 s, 15 ticks at rate 30) of the
    stop, covering a slot taken just before it and the receiver's
    scheduling. The stop lasts STOPPED seconds (the scenario itself, not a
    barrier: the fleet would otherwise send 30 a second). After the resume,
    every 202'd message arrives (at-least-once: repeats up to each
    instance's max_inflight are allowed, their acks may have been lost) and
    issues are accepted again."""

    n = 3
    pacer = {"rate": 30, "capacity": 300, "max_inflight": 4, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s"}
    GRACE = 0.5
    STOPPED = 3.0

    def test_fail_closed_then_resume(self):
        self.fake.control(latency_ms=300)
        total = 120
        res = self.fleet.issue(phones(total))
        self.assertEqual([r["status"] for r in res], [202] * total, [r["body"] for r in res if r["status"] != 202])
        ids = self.accepted(res)
        self.wait_provider_count(20, 15)
        self.redis.pause()
        try:
            t_stop = time.time()
            for k, i in enumerate(self.fleet.live()):
                t0 = time.monotonic()
                st, h, p = self.fleet[i].issue(phones(1, 5000 + k)[0])
                took = time.monotonic() - t0
                self.assertEqual((st, p.get("error") if isinstance(p, dict) else p), (503, "store_unavailable"))
                self.assertLess(took, 1.0, "instance %d took %.2f s to refuse with Redis stopped" % (i, took))
            wait_until(lambda: time.time() >= t_stop + self.STOPPED, self.STOPPED + 1, what="the stop's end")
            t_resume = time.time()
            reqs = self.requests()
        finally:
            self.redis.resume()
        late = [r["t_us"] / 1e6 - t_stop for r in reqs if t_stop + self.GRACE < r["t_us"] / 1e6 < t_resume]
        self.assertEqual(len(late), 0, "%d calls went out with Redis stopped (at +%s s)" % (
            len(late), ", ".join("%.2f" % t for t in late[:5])))
        before = {message_id(r) for r in reqs if r["t_us"] / 1e6 <= t_stop}
        self.assertLess(len(before), total, "the drain ended before Redis stopped")
        st = wait_until(lambda: (lambda r: r if r[0] == 202 else None)(self.fleet[1].issue(phones(1, 6000)[0])), 10,
                        step=0.2, what="an issue accepted after the resume")
        ids.append(st[2]["id"])
        self.wait_arrived(ids, 25)
        self.assertLessEqual(extra_copies(self.ids()), 3 * self.pacer["max_inflight"], duplicates(self.ids()))


class FleetPause429Test(FleetTest):
    """A provider 429 with a Retry-After pauses the fleet's slots, not only
    the instance that got it: from a little after the 429 until its
    Retry-After (2 s) is over, nothing reaches the provider from any
    instance. The little after (0.3 s) covers the calls given a slot before
    the pause reached Redis: at most 2 per instance, each due within a
    tenth of a second at 20/s. Without the fleet's pause the other instance
    keeps sending at 20/s through the whole pause."""

    n = 2
    pacer = {"rate": 20, "capacity": 200, "max_inflight": 8, "retry": {"max": 3, "base": "100ms"},
             "timeout": "2s"}

    def test_a_429_pauses_every_instance(self):
        self.fake.control(statuses=[200] * 5 + [429], retry_after=2)
        ids = self.accepted(self.fleet.issue(phones(60)))
        self.wait_arrived(ids, 25)
        reqs = sorted(self.requests(), key=lambda r: r["t_us"])
        t429 = [r["t_us"] / 1e6 for r in reqs if r.get("status") == 429]
        self.assertEqual(len(t429), 1, [r.get("status") for r in reqs])
        during = [r["t_us"] / 1e6 - t429[0] for r in reqs if t429[0] + 0.3 < r["t_us"] / 1e6 < t429[0] + 1.9]
        self.assertEqual(during, [], "calls %s s after the 429 with Retry-After 2" % ["%.2f" % d for d in during])
