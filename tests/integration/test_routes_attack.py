"""Adversarial tests of providers as a network (lanes, routes, failover, their money), written by a reviewer against
ce737a5; each failed there and passes since its fix (the findings and fixes: docs/providers.md, "Failover").

Each test here states one of the company's rules and drives real otpd instances, a real Redis and the fake
providers (tests/fake_provider) into a corner where ce737a5 breaks it. A failing test is a finding; each class says
which rule, the scenario and the code behind it.

  - FailModeBypassTest: pacer.on_restart_sending "fail" (a message taken over while 'sending' is never sent again)
    is bypassed when the instance that takes it over has the provider's breaker open: pacer_prepare fails it over
    (queue.lua move) before slot.lua's checks run, and the next provider sends it while the old owner's call is
    still open on the first provider: one code on two providers' wires at once, both accept and both bill.
  - RemovedProviderTest: a provider removed from the config (a restart, as docs/providers.md asks) leaves every
    message queued in its stream otp:q:<name> stranded: no pacer reads it, nothing sends, ends or refunds it.
  - UnpricedLaneTest: a provider without prices of its own (documented: it defaults to cost.prices) reserves and
    bills a failed-over message at the price of the provider it came from (pacer_rsv_price falls back to the
    entry's issue price), so the caps count less than the attempt costs.
  - EndedMoveTest: a move that finds the message ended (queue.lua move -> 2) leaves its entry pending in the old
    stream until pacer.takeover; the takeover then reserves again before slot.lua says 'done', and that reservation
    is never given back (the leak itself predates ce737a5: the same happens on a retry; the lingering entry is new).
  - MoveCapacityTest: queue.lua's move ignores the next provider's capacity.
"""
import json
import signal
import time
import unittest

from fleet import FleetTest
from harness import wait_until

from test_routes import ALPHA_PRICE, BETA_PRICE, IN_MOBILE, RoutesTest, webhook


class AttackTest(RoutesTest):
    n = 0

    def setUp(self):
        super().setUp()
        self.fleet.start(self.instances, **self.overrides())

    instances = 1

    def tearDown(self):
        for i in list(self.fleet.paused if self.fleet else ()):
            self.fleet.resume(i)
        super().tearDown()

    def ledger_sends(self):
        return [s for i in range(len(self.fleet)) for s in self.fleet[i].rows("SELECT * FROM sends ORDER BY id")]


class FailModeBypassTest(AttackTest):
    """Rule: a message is never on two providers' wires at once; pacer.on_restart_sending "fail": a message taken
    over while 'sending' is not sent again (docs/config.md).

    Two instances, route "*" -> alpha, beta; alpha's breaker opens after one failure. Instance 0 opens its alpha
    breaker on a first message (alpha answers 503 to +9198...: it fails over to beta, as designed). Then instance 1
    alone (instance 0 stopped with SIGSTOP) claims M and calls alpha, which takes 6 s to accept it. While that call
    is open, instance 1 is stopped and instance 0 resumed: after pacer.takeover (1 s) instance 0 takes M over
    (state 'sending', adopted). slot.lua would now refuse it ('sending' + fail), but pacer_prepare asks
    pacer_healthy first (src/pacer/pacer_qthread.c, the !pacer_healthy branch, before queue_slot), finds its own
    alpha breaker open and fails M over: queue.lua's move only checks ownership and FINAL states, sets s 'queued'
    and puts a fresh entry on beta's stream, which beta's pacer claims as a new (not adopted) message and sends.
    Then instance 1 resumes and alpha accepts its call too: the code went out twice, on two providers, billed twice.
    """
    instances = 2
    providers = 2
    # A 2 s timeout: the old call's bound (arm + timeout + 1 s) passes within the 5 s watched below, so only
    # slot.lua's word ('sending' + fail), not the wait for the wire, keeps M off beta.
    pacer = dict(RoutesTest.pacer, timeout="2s", takeover="1s", on_restart_sending="fail",
                 retry={"max": 0, "base": "100ms"})

    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE, breaker={"failures": 1, "open": "60s"}),
                              "beta": webhook(self.fakes[1], BETA_PRICE)},
                "routes": [{"match": "*", "providers": ["alpha", "beta"]}]}

    def test_a_message_taken_over_while_sending_is_not_sent_again_elsewhere(self):
        self.fleet.pause(1)
        # Instance 0 opens its alpha breaker (one 503), the first message goes to beta: as designed.
        self.fakes[0].control(rules=[{"to_prefix": "+9198", "status": 503}])
        p = self.issue_ok("+919800000001", i=0)
        wait_until(lambda: self.state(p) == "sent", 10, what="the first message sent by beta")
        self.assertEqual(self.metric(self.metrics(0), "otpd_provider_breaker_state", provider="alpha"), 1)
        # Instance 1 alone claims M and puts it on alpha's wire; alpha takes 6 s to accept it.
        self.fleet.pause(0)
        self.fleet.resume(1)
        self.fakes[0].control(latency_ms=6000)
        m = IN_MOBILE % 777
        mid = self.issue_ok(m, i=1)
        wait_until(lambda: m in [to for to, _ in self.got(0)], 10, what="M's call open at alpha")
        # Instance 1 goes silent with its call open; instance 0 takes M over.
        self.fleet.pause(1)
        self.fleet.resume(0)
        t_alpha = [r["t_us"] for r in self.fakes[0].requests() if json.loads(r["body"])["to"] == m][0]
        deadline = time.time() + 5
        while time.time() < deadline and m not in [to for to, _ in self.got(1)]:
            time.sleep(0.1)
        on_beta = [r for r in self.fakes[1].requests() if json.loads(r["body"])["to"] == m]
        self.fleet.resume(1)
        wait_until(lambda: self.state(mid) in ("sent", "failed"), 15, what="M ended")
        time.sleep(7)  # alpha answers instance 1's call (accepted)
        alpha_seen = [r for r in self.fakes[0].requests() if json.loads(r["body"])["to"] == m]
        self.assertEqual(len(on_beta), 0,
                         "M was taken over while 'sending' (on_restart_sending: fail) yet sent again by beta %.2f s "
                         "after alpha got it, while alpha's call was still open; alpha answered %s" % (
                             (on_beta[0]["t_us"] - t_alpha) / 1e6 if on_beta else 0,
                             [r["status"] for r in alpha_seen]))


class RemovedProviderTest(AttackTest):
    """Rule: nothing accepted is lost, whatever the config changes (a provider removed needs a restart,
    docs/providers.md).

    One instance, providers alpha and beta, route "*" -> alpha; alpha hangs and sends one call at a time, so the
    messages wait in otp:q:alpha (the first in flight, the others queued). The operator removes alpha (a restart
    with providers {beta}, route "*" -> beta). src/pacer/lanes.c builds one pacer per configured provider only, and
    nothing at start-up looks at other otp:q:<name> streams: the messages stay 'queued' in otp:q:alpha for ever,
    never sent, never failed, their reservations never given back and their callers' shares held.
    """
    providers = 2
    pacer = dict(RoutesTest.pacer, timeout="10s", max_inflight=1)

    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE), "beta": webhook(self.fakes[1], BETA_PRICE)},
                "routes": [{"match": "*", "providers": ["alpha"]}]}

    def test_messages_queued_on_a_removed_provider_are_still_sent(self):
        self.fakes[0].control(hang=True)
        ids = [self.issue_ok(IN_MOBILE % (900 + k)) for k in range(3)]
        wait_until(lambda: len(self.got(0)) >= 1, 10, what="the first call open at alpha")
        self.fleet.stop(0)
        o = self.fleet[0]
        cfg = dict(o.config)
        cfg["providers"] = {"beta": cfg["providers"]["beta"]}
        cfg["routes"] = [{"match": "*", "providers": ["beta"]}]
        o.write_config(cfg)
        self.fleet.start_again([0])
        deadline = time.time() + 10
        while time.time() < deadline and not all(self.state(m) == "sent" for m in ids):
            time.sleep(0.2)
        states = {m: self.state(m) for m in ids}
        left = self.redis.cmd("XLEN", "otp:q:alpha")
        self.assertEqual(set(states.values()), {"sent"},
                         "after alpha was removed: states %s, %s entries left in otp:q:alpha that no pacer reads; "
                         "beta got %d" % (sorted(states.values()), left, len(self.got(1))))


class UnpricedLaneTest(AttackTest):
    """Rule: each attempt is billed (and reserved against the caps) at the price of the provider that got it.

    alpha has prices {"*": 7}; beta has none, so per docs/providers.md ("each defaults to ... cost.prices") beta's
    price is cost.prices "*" = 100. alpha refuses every number with 403 (cause route, fails over, not billed). The
    message goes to beta, where pacer_rsv_price (src/pacer/pacer_money.c) has no lane prices and falls back to
    it->e.price_minor, the issue's reservation price: alpha's 7. beta's attempt is reserved and recorded at 7, and
    the caps count 7 for an SMS that costs 100.
    """
    providers = 2

    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE),
                              "beta": {"type": "webhook", "url": self.fakes[1].url + "/sms"}},
                "routes": [{"match": "*", "providers": ["alpha", "beta"]}]}

    def test_a_failed_over_attempt_is_billed_at_the_price_of_the_provider_that_got_it(self):
        self.fakes[0].control(rules=[{"to_prefix": "+", "status": 403}])
        mid = self.issue_ok(IN_MOBILE % 501)
        wait_until(lambda: self.state(mid) == "sent", 10, what="sent by beta")
        rows = [(s["provider"], s["outcome"], s["cost_minor"]) for s in self.ledger_sends()]
        self.assertIn(("alpha", "permanent", 0), rows)
        beta = [r for r in rows if r[0] == "beta"]
        wait_until(lambda: self.reserved() == self.billed(), 10, what="money settled")
        self.assertEqual((beta, self.reserved()), ([("beta", "sent", 100)], 100),
                         "beta (no prices of its own: cost.prices, 100) was reserved and billed at alpha's price")


class EndedMoveTest(AttackTest):
    """Rule: a reservation is never leaked; a message that ended leaves its stream.

    One instance, route "*" -> alpha, beta; alpha hangs (timeout 1.5 s), so M's call on alpha ends in a timeout,
    a cause that fails over. While that call is open a delivery report ends M 'delivered' (the test writes what
    queue.lua's report op writes: HSET s). The timeout hands M to pacer_fail_over: it gives nothing back (the
    timeout is billed), and queue.lua's move answers 2 (ended) without XACK/XDEL, so pacer_fail_over frees the item
    and leaves the entry pending in otp:q:alpha (src/pacer/pacer_failover.c, "Moved, or it had ended meanwhile").
    After pacer.takeover the same instance XAUTOCLAIMs its own idle entry as a takeover: pacer_prepare reserves
    first (reserve.lua restore: u = 1, so a new reservation 2 at alpha's price), then slot.lua says 'done' and the
    QUEUE_DONE verdict ends it with refund = 0: reservation 2, which no call ever used, stays in the caps.
    (That reserve-before-verdict leak also happens without failover, on a retry after the timeout, with the route
    "*" -> alpha alone and retry.max 1: it predates ce737a5. The entry left behind by move's 'ended' is new.)
    """
    providers = 2
    pacer = dict(RoutesTest.pacer, timeout="1500ms", takeover="1s", retry={"max": 0, "base": "100ms"})

    def test_a_message_ended_during_its_call_leaves_no_entry_and_no_reservation(self):
        self.fakes[0].control(hang=True)
        mid = self.issue_ok(IN_MOBILE % 611)
        wait_until(lambda: len(self.got(0)) == 1, 10, what="M's call open at alpha")
        # A delivery report ends it (queue.lua report: 'sending' -> 'delivered').
        self.assertEqual(self.redis.cmd("HGET", "otp:msg:" + mid, "s"), "sending")
        self.redis.cmd("HSET", "otp:msg:" + mid, "s", "delivered")
        time.sleep(2.0)  # the call times out (1.5 s): failover, move answers 'ended'
        pending_after_move = self.redis.cmd("XLEN", "otp:q:alpha")
        time.sleep(3.0)  # pacer.takeover passes: the instance takes its own entry back
        self.assertEqual(self.got(1), [], "beta never gets an ended message")
        self.assertEqual((pending_after_move, self.reserved(), self.billed()), (0, ALPHA_PRICE, ALPHA_PRICE),
                         "(entries left in otp:q:alpha after the move said 'ended', reserved, billed)")


class MoveCapacityTest(AttackTest):
    """Rule: a provider's capacity bounds the messages its queue holds, fleet-wide (docs/providers.md: "capacity").

    beta's capacity is 1 and it hangs (one call at a time); alpha refuses every number with 403 (route: fails
    over). Issued on alpha, every message is moved into otp:q:beta by queue.lua's move, which XADDs without looking
    at the destination's XLEN or capacity (issue.lua's check runs at the issue only, on the issue's lane): beta's
    queue ends up holding every one of them, while an issue that picks beta directly is refused 503 queue_full.
    """
    providers = 2
    pacer = dict(RoutesTest.pacer, timeout="10s", retry={"max": 0, "base": "100ms"})

    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE),
                              "beta": webhook(self.fakes[1], BETA_PRICE, capacity=1, max_inflight=1)},
                "routes": [{"match": "IN", "providers": ["alpha", "beta"]}, {"match": "*", "providers": ["beta"]}]}

    def test_failover_respects_the_next_providers_capacity(self):
        self.fakes[0].control(rules=[{"to_prefix": "+", "status": 403}])
        self.fakes[1].control(hang=True)
        for k in range(5):
            self.issue_ok(IN_MOBILE % (620 + k))
        wait_until(lambda: len(self.got(0)) == 5, 10, what="alpha refused all five")
        time.sleep(0.5)
        st, _, body = self.fleet[0].issue("+12015550123")
        self.assertEqual(st, 503, body)  # beta is full for an issue
        self.assertLessEqual(self.redis.cmd("XLEN", "otp:q:beta"), 1,
                             "beta (capacity 1) holds more than its capacity through failovers")


if __name__ == "__main__":
    unittest.main()
