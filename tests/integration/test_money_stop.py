"""A graceful stop never counts one message's price twice (docs/architecture.md,
"Money"): the pacer marks a message's reservation
used in Redis just before its slot (reserve.lua's use), so that a restart
never sends again on a reservation a call may have spent. A SIGTERM that
lands after that mark and before the call was written left the mark, and
the next start took a new reservation: the price counted twice for one
message. The stopping instance knows that call never left, so it gives the
mark back (reserve.lua's unuse), once; a mark a call on that reservation
may have been written on (curl's prereq) stays, and when Redis cannot take
the mark back it stays too: the caps then count more than was spent, never
less.

A 429 holds a marked message before the wire for as long as its
Retry-After: the message next in line is armed (marked) at its slot, finds
the fleet paused and takes a slot after the pause, so a SIGTERM lands
between its mark and its call at a barrier, not by luck.

A message whose only call was refused a connection (curl never wrote it)
and that waits for its retry at the stop gives its mark back too (the
review's finding: only a missed slot's did at first)."""
import copy
import os

from harness import ROOT, free_port, wait_until
from test_money import PRICE, MoneyTest, metric

# Long enough that the stop lands inside it whatever the load (the marked
# message is armed about a second after the 429, at rate 1); the test ends
# the pause itself after the stop (it deletes the fleet's slot key).
RETRY_AFTER = 10


class MoneyStopTest(MoneyTest):
    RUN_SECONDS = 18

    pacer = dict(MoneyTest.pacer, rate=1)
    ttl = "10m"

    def slots(self, use):
        return metric(self.metrics(), "otpd_pacer_slots_total", use=use) or 0

    def held_by_the_pause(self, latency_ms=500):
        """Issues two messages: the first on the wire is answered 429
        (latency_ms late, so the second holds its slot, a second on, before
        the pause), the second is armed at its slot, its reservation marked
        used, and then waits out the pause (it misses its slot and takes one
        after the pause). Returns (first, second) once the second is marked
        with the pause on: from then on it is held before the wire whichever
        of those steps it is at (each is what a stop must handle)."""
        self.fake.control(statuses=[429], retry_after=RETRY_AFTER, latency_ms=latency_ms)
        mids = [self.issue_ok("+919800000001"), self.issue_ok("+919800000002")]

        def held():
            # Which goes first is the queue's order (each joins it when its
            # ledger rows are durable), not the order of the issues.
            tried = [m for m in mids if self.sends(m)]
            if len(tried) != 1:
                return None
            other = mids[1 - mids.index(tried[0])]
            return (tried[0], other) if self.money(other).get("u") == "1" else None

        first, second = wait_until(held, 15, what="the first message's 429, and the second marked used")
        self.assertEqual(self.sends(second), [])
        return first, second

    def latest(self, mid):
        """The message's latest reservation (reserve.lua's r; 1, the issue's, when absent)."""
        return int(self.money(mid).get("r", 1))

    def restart_and_send(self, *mids):
        """After the stop: the provider answers 200 again, the pause is over,
        a new otpd sends every message."""
        self.fake.reset()
        self.redis.cmd("DEL", "otp:slot")
        self.restart()
        for mid in mids:
            self.wait_state(mid, "sent", timeout=15)

    def test_a_stop_between_the_mark_and_the_call_counts_the_price_once(self):
        first, second = self.held_by_the_pause()
        self.assertEqual(self.otpd.stop(), 0)
        self.assertEqual(len(self.fake.requests()), 1, "the second message reached the provider before the stop")
        left = self.money(second).get("u")
        log = self.otpd.log()
        self.restart_and_send(first, second)
        # The second message went out once, on its issue's reservation: its
        # price is counted once. The first keeps the mark of its 429 (a call
        # that reached the provider), so the restart reserved it again.
        self.assertEqual(self.latest(second), 1, "the second message's price was counted twice")
        self.assertEqual(self.latest(first), 2)
        self.assertEqual(self.reserved(), 3 * PRICE)
        self.assertEqual(len(self.fake.requests()), 2)
        # How: its mark given back at the stop, and said so.
        self.assertEqual(left, "0")
        self.assertIn("message %s never reached the provider: use mark of reservation 1 given back" % second, log)
        self.assertNotIn("message %s never reached" % first, log)

    def test_redis_down_at_the_stop_keeps_the_mark(self):
        """Redis does not answer while otpd stops: nothing is given back, the
        message is sent again on a new reservation, its price counted twice:
        more than was spent, never less (logged)."""
        first, second = self.held_by_the_pause()
        self.redis.pause()
        try:
            self.assertEqual(self.otpd.stop(), 0)
        finally:
            self.redis.resume()
        self.assertIn("of message %s lost at stop" % second, self.otpd.log())
        self.assertEqual(self.money(second).get("u"), "1")
        self.restart_and_send(first, second)
        self.assertEqual(self.latest(second), 2)
        self.assertEqual(self.reserved(), 4 * PRICE)

    def test_a_mark_redis_refuses_to_give_back_stays(self):
        """The message goes back to the queue, but Redis fails the script that
        gives its mark back (here: a field it cannot read): the mark stays,
        logged, and the price is counted twice, never less."""
        first, second = self.held_by_the_pause()
        self.redis.cmd("HSET", "otp:msg:" + second, "f", "x")  # reserve.lua cannot compare it: a script error
        self.assertEqual(self.otpd.stop(), 0)
        self.assertEqual(self.state(second), "queued")
        self.assertIn("message %s keeps the use mark of reservation 1" % second, self.otpd.log())
        self.assertEqual(self.money(second).get("u"), "1")
        self.redis.cmd("HDEL", "otp:msg:" + second, "f")
        self.restart_and_send(first, second)
        self.assertEqual(self.latest(second), 2)
        self.assertEqual(self.reserved(), 4 * PRICE)


    def test_a_mark_whose_reservation_reached_the_provider_stays(self):
        """A message answered 429 (its request was written: it reached the
        provider) keeps its reservation, and its mark, for its retry; the
        retry holds a slot far ahead (another instance's 429 paused the
        fleet: slot.lua's pause, run here). At the stop its mark stays: a
        call on that reservation was written, so the restart reserves
        again."""
        with open(os.path.join(ROOT, "src", "pacer", "slot.lua")) as f:
            slot_lua = f.read()
        self.fake.control(statuses=[429], retry_after=8)
        mid = self.issue_ok("+919800000001")
        wait_until(lambda: self.sends(mid), 10, what="the 429")
        taken = self.slots("taken")
        # Within the 8 s before its retry takes a slot (room for a loaded
        # machine): the fleet paused for far longer.
        self.redis.cmd("EVAL", slot_lua, 4, "otp:slot", "x", "x", "x", "pause", 60000000)
        wait_until(lambda: self.slots("taken") > taken, 30, what="the retry's slot, after the fleet's pause")
        self.assertEqual(self.otpd.stop(), 0)
        self.assertEqual(len(self.fake.requests()), 1)
        self.assertEqual(self.money(mid).get("u"), "1")
        self.assertNotIn("never reached the provider", self.otpd.log())
        self.restart_and_send(mid)
        self.assertEqual(self.latest(mid), 2)
        self.assertEqual(self.reserved(), 2 * PRICE)

    def test_a_call_in_curl_at_the_stop_keeps_its_mark(self):
        """A call on the wire when otpd stops (the provider never answers; it
        times out during the drain): it may be billed, its mark stays."""
        self.fake.control(hang=True)
        mid = self.issue_ok("+919800000001")
        wait_until(lambda: self.fake.requests(), 10, what="the request on the wire")
        self.assertEqual(self.otpd.stop(), 0)
        self.assertEqual(self.money(mid).get("u"), "1")
        self.assertNotIn("never reached the provider", self.otpd.log())
        self.restart_and_send(mid)
        self.assertEqual(self.latest(mid), 2)
        self.assertEqual(self.reserved(), 2 * PRICE)


class UnuseScriptTest(MoneyTest):
    def test_unuse_gives_a_mark_back_once_and_only_the_latest(self):
        """reserve.lua's unuse (mode 3) itself, run by the real Redis."""
        with open(os.path.join(ROOT, "src", "limits", "reserve.lua")) as f:
            script = f.read()
        window = 3600000  # MoneyTest's cap
        idx = int(self.redis.cmd("TIME")[0]) * 1000 // window
        self.redis.cmd("HSET", "otp:cost", "c%d" % window, "%d:%d" % (idx, 3 * PRICE))

        def unuse(mid, need):
            return self.redis.cmd("EVAL", script, 2, "otp:cost", "otp:msg:" + mid, need, PRICE, 5, 3, 1,
                                  "c%d" % window, window, 100 * PRICE, "otpd0")[0]

        def put(mid, **fields):
            self.redis.cmd("DEL", "otp:msg:" + mid)
            self.redis.cmd("HSET", "otp:msg:" + mid, *[x for kv in sorted(fields.items()) for x in kv])

        put("m1", r=2, u=2, uo="otpd0", s="queued", t=7)
        self.assertEqual(unuse("m1", 2), 1)
        self.assertEqual(self.money("m1"), {"r": "2", "u": "1", "uo": "otpd0", "s": "queued", "t": "7"})
        self.assertEqual(unuse("m1", 2), 0)  # once: a second run changes nothing
        self.assertEqual(self.money("m1"), {"r": "2", "u": "1", "uo": "otpd0", "s": "queued", "t": "7"})
        # Marked by another instance (it took the message over): its mark, never given back here.
        put("m6", r=2, u=2, uo="otpd1", s="queued")
        self.assertEqual(unuse("m6", 2), 0)
        self.assertEqual(self.money("m6")["u"], "2")
        # Armed again since (an instance's own mark for a call of its own).
        put("m2", r=1, u=1, uo="otpd0", s="sending")
        self.assertEqual(unuse("m2", 1), 0)
        self.assertEqual(self.money("m2")["u"], "1")
        # A later reservation taken since (a restart reserved past the mark).
        put("m3", r=2, u=1, uo="otpd0", s="queued")
        self.assertEqual(unuse("m3", 1), 0)
        self.assertEqual(self.money("m3")["u"], "1")
        # Marked for another reservation, or never marked.
        put("m4", r=3, u=1, uo="otpd0", s="queued")
        self.assertEqual(unuse("m4", 3), 0)
        self.assertEqual(self.money("m4")["u"], "1")
        # Given back already (refund.lua): no mark to give back.
        put("m5", r=1, u=1, f=1, uo="otpd0", s="queued")
        self.assertEqual(unuse("m5", 1), 0)
        self.assertEqual(self.money("m5")["u"], "1")
        # The caps are never touched.
        self.assertEqual(self.reserved(), 3 * PRICE)


class UnsentThenStopTest(MoneyTest):
    closed_port = free_port()
    provider_url = staticmethod(lambda: "http://127.0.0.1:%d/sms" % UnsentThenStopTest.closed_port)
    # A long backoff: the stop lands while the message waits for its retry.
    pacer = dict(MoneyTest.pacer, retry={"max": 3, "base": "60s"})
    ttl = "10m"

    def test_a_refused_connection_then_a_stop_counts_the_price_once(self):
        mid = self.issue_ok("+919800000001")
        wait_until(lambda: [s["outcome"] for s in self.sends(mid)] == ["transient"], 10,
                   what="the refused call")
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages WHERE id = ?", mid)[0]["state"] == "queued",
                   10, what="its retry queued")
        self.assertEqual(self.money(mid).get("u"), "1")  # marked before its call
        self.assertEqual(self.reserved(), PRICE)
        self.assertEqual(self.otpd.stop(), 0)
        # Nothing reached the provider: nothing may stay counted twice.
        cfg = copy.deepcopy(self.otpd.config)
        cfg["provider"] = {"type": "webhook", "url": self.fake.url + "/sms"}
        self.restart(cfg)
        self.wait_state(mid, "sent", timeout=15)
        self.assertEqual(len(self.fake.requests()), 1)
        self.assertEqual(int(self.money(mid).get("r", 1)), 1, "the price of one call was reserved twice")
        self.assertEqual(self.reserved(), PRICE)
