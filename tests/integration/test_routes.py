"""Providers as a network (docs/providers.md, "Routes and failover"): routes pick a destination's providers,
each provider is paced, priced and broken on its own, and a message fails over to the next provider of its
route with the same code, its money exact.

Real parts only: redis-server, bin/otpd over HTTP (one instance, or three as a fleet), and two or three fake
providers (tests/fake_provider), one of them speaking Twilio's API where a test needs Twilio's own refusal
(21408: the region is not enabled). Money is read from Redis (the cap window's sum) and from the ledgers'
sends rows, and the two must agree: every attempt a provider could have billed, at that provider's price.
"""
import json
import os
import shutil
import signal
import tempfile
import time
import unittest
import urllib.parse

from fleet import FleetTest, worst_window
from harness import ROOT, Redis, code_of, twilio_signature, wait_until

AC = "AC0123456789abcdef0123456789abcdef"
TOKEN = "twilio-auth-token-value"
ALPHA_PRICE, BETA_PRICE, GAMMA_PRICE = 7, 13, 5
WINDOW_MS = 3600000
IN_MOBILE, GB_MOBILE, US_NUMBER = "+9197%08d", "+4474001%05d", "+12015550%03d"
REGION_21408 = json.dumps({"code": 21408, "message": "Permission to send an SMS has not been enabled for the "
                                                      "region indicated by the 'To' number", "status": 400})


def webhook(fake, price, **over):
    return dict({"type": "webhook", "url": fake.url + "/sms", "prices": {"*": price}}, **over)


def twilio(fake, price, **over):
    return dict({"type": "twilio", "base_url": fake.url, "from": "+15005550006", "account_sid_env": "TW_SID",
                 "auth_token_env": "TW_TOKEN", "prices": {"*": price}}, **over)


class RoutesTest(FleetTest):
    """One instance unless a test says otherwise; providers alpha and beta (fakes 0 and 1)."""
    n = 1
    providers = 2
    env = {"TW_SID": AC, "TW_TOKEN": TOKEN}
    pacer = {"rate": 200, "capacity": 100, "max_inflight": 8, "retry": {"max": 1, "base": "100ms"}, "timeout": "2s"}
    caps = [{"window": "1h", "max": 1000000}]

    def network(self):
        """providers, routes and failover for the config."""
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE), "beta": webhook(self.fakes[1], BETA_PRICE)},
                "routes": [{"match": "IN", "providers": ["alpha", "beta"]}, {"match": "*", "providers": ["beta"]}]}

    def configure(self, cfg, i):
        cfg.pop("provider")
        cfg.update(self.network())
        cfg["cost"] = {"currency": "EUR", "prices": {"*": 100}, "caps": [dict(c) for c in self.caps]}
        return cfg

    # What happened.
    def reserved(self):
        v = self.redis.cmd("HGET", "otp:cost", "c%d" % WINDOW_MS)
        return int(v.split(":")[1]) if v else 0

    def sends(self, i=0):
        return self.fleet[i].rows("SELECT * FROM sends ORDER BY id")

    def all_sends(self):
        return [s for i in range(len(self.fleet)) for s in self.sends(i)]

    def billed(self):
        """What the ledgers say providers could have billed: every attempt's cost."""
        return sum(s["cost_minor"] or 0 for s in self.all_sends())

    def got(self, k):
        """Fake k's provider requests: (to, text) each."""
        out = []
        for r in self.fakes[k].requests():
            if r.get("provider") == "webhook":
                b = json.loads(r["body"])
                out.append((b["to"], b["text"]))
            elif r.get("provider") == "twilio":
                out.append((r["form"]["To"], r["form"]["Body"]))
        return out

    def state(self, mid, i=0):
        st, _, body = self.fleet[i].call("GET", "/v1/otp/" + mid)
        return body.get("status") if st == 200 else None

    def issue_ok(self, phone, i=0):
        st, _, body = self.fleet[i].issue(phone)
        self.assertEqual(st, 202, body)
        return body["id"]

    def metrics(self, i=0):
        return self.fleet[i].call("GET", "/metrics", auth=None)[2]

    def metric(self, text, name, **labels):
        want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith(name + "{"):
                got = ",".join(sorted(line[len(name) + 1:line.index("}")].split(",")))
                if got == want:
                    return float(line.rsplit(" ", 1)[1])
        return None

    def assert_money_exact(self):
        """The cap window holds exactly what the ledgers say could be billed."""
        wait_until(lambda: self.reserved() == self.billed(), 10,
                   what="reserved %d == billed %d" % (self.reserved(), self.billed()))


class PickTest(RoutesTest):
    def test_each_destination_to_its_route_at_its_price(self):
        a, b = self.issue_ok(IN_MOBILE % 1), self.issue_ok(US_NUMBER % 101)
        wait_until(lambda: self.state(a) == "sent" and self.state(b) == "sent", 10, what="both sent")
        self.assertEqual([to for to, _ in self.got(0)], [IN_MOBILE % 1])
        self.assertEqual([to for to, _ in self.got(1)], [US_NUMBER % 101])
        rows = {s["message_id"]: (s["provider"], s["cost_minor"]) for s in self.sends()}
        self.assertEqual(rows, {a: ("alpha", ALPHA_PRICE), b: ("beta", BETA_PRICE)})
        self.assertEqual(self.reserved(), ALPHA_PRICE + BETA_PRICE)
        text = self.metrics()
        self.assertEqual(self.metric(text, "otpd_provider_sends_total", provider="alpha", cause="accepted"), 1)
        self.assertEqual(self.metric(text, "otpd_provider_sends_total", provider="beta", cause="accepted"), 1)
        self.assertEqual(self.metric(text, "otpd_provider_breaker_state", provider="alpha"), 0)


class NoRouteTest(RoutesTest):
    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE)},
                "routes": [{"match": "IN", "providers": ["alpha"]}, {"match": "+447400", "providers": ["alpha"]}]}

    def test_a_destination_no_route_covers_is_refused_before_anything_is_taken(self):
        st, _, body = self.fleet[0].issue(US_NUMBER % 102)
        self.assertEqual((st, body.get("error")), (403, "no_route"), body)
        # No cost, no verification, no message (the providers' queues and their registry are there from the start).
        self.assertEqual([k for k in self.redis.cmd("KEYS", "otp:*") if not k.startswith("otp:q:") and k != "otp:lanes"],
                         [])
        wait_until(lambda: [r["decision"] for r in self.fleet[0].rows("SELECT decision FROM requests")] == ["no_route"],
                   5, what="the refusal's ledger row")
        self.assertEqual(self.metric(self.metrics(), "otpd_requests_total", op="issue", decision="no_route"), 1)
        # A prefix route covers its own numbers only.
        self.issue_ok(GB_MOBILE % 2)
        st, _, body = self.fleet[0].issue("+447911123456")
        self.assertEqual((st, body.get("error")), (403, "no_route"), body)


class RegionFailoverTest(RoutesTest):
    """alpha speaks Twilio and refuses GB numbers (21408: this account may not send to that region); the route
    for both IN and GB is alpha then beta."""

    def network(self):
        return {"providers": {"alpha": twilio(self.fakes[0], ALPHA_PRICE), "beta": webhook(self.fakes[1], BETA_PRICE)},
                "routes": [{"match": "IN", "providers": ["alpha", "beta"]},
                           {"match": "GB", "providers": ["alpha", "beta"]}]}

    def test_only_the_refused_region_fails_over_with_the_same_code(self):
        self.fakes[0].control(rules=[{"to_prefix": "+44", "status": 400, "body": REGION_21408}])
        gb, ind = self.issue_ok(GB_MOBILE % 3), self.issue_ok(IN_MOBILE % 3)
        wait_until(lambda: self.state(gb) == "sent" and self.state(ind) == "sent", 10, what="both sent")
        alpha, beta = self.got(0), self.got(1)
        self.assertEqual(sorted(to for to, _ in alpha), sorted([GB_MOBILE % 3, IN_MOBILE % 3]))
        self.assertEqual([to for to, _ in beta], [GB_MOBILE % 3])  # IN never left alpha
        gb_alpha = [t for to, t in alpha if to == GB_MOBILE % 3][0]
        self.assertEqual(code_of(gb_alpha), code_of(beta[0][1]))  # the same code
        rows = [(s["message_id"], s["provider"], s["outcome"], s["cost_minor"]) for s in self.sends()]
        self.assertIn((gb, "alpha", "permanent", 0), rows)  # refused, never created: not billed, given back
        self.assertIn((gb, "beta", "sent", BETA_PRICE), rows)
        self.assertIn((ind, "alpha", "sent", ALPHA_PRICE), rows)
        self.assert_money_exact()
        self.assertEqual(self.reserved(), ALPHA_PRICE + BETA_PRICE)
        self.assertEqual(self.metric(self.metrics(), "otpd_provider_failovers_total", provider="alpha", cause="route"),
                         1)
        st, _, view = self.fleet[0].call("GET", "/v1/otp/" + gb)
        self.assertEqual((st, view["provider"], view["attempts"]),
                         (200, "beta", [{"provider": "alpha", "cause": "route"}, {"provider": "beta", "cause": "accepted"}]))
        # The code verifies once, wherever it went.
        st, _, body = self.fleet[0].verify(GB_MOBILE % 3, code_of(beta[0][1]))
        self.assertEqual(st, 200, body)


class BreakerTest(RoutesTest):
    """alpha hangs: each call costs pacer's timeout once, its breaker opens after two, and the messages behind
    it go to beta with their codes, without a call to alpha; it closes again after its probe succeeds."""
    pacer = dict(RoutesTest.pacer, timeout="400ms", max_inflight=1)
    OPEN_S = 2.0

    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE, breaker={"failures": 2, "open": "2s"},
                                               rate=20),
                              "beta": webhook(self.fakes[1], BETA_PRICE)},
                "routes": [{"match": "*", "providers": ["alpha", "beta"]}]}

    def test_a_hung_provider_fails_over_and_recovers(self):
        self.fakes[0].control(hang=True)
        ids = [self.issue_ok(IN_MOBILE % (10 + k)) for k in range(6)]
        wait_until(lambda: all(self.state(m) == "sent" for m in ids), 20, what="all sent")
        alpha, beta = self.got(0), self.got(1)
        self.assertEqual(sorted(to for to, _ in beta), sorted(IN_MOBILE % (10 + k) for k in range(6)))
        # Two timeouts opened the breaker; nothing else reached alpha.
        self.assertEqual(len(alpha), 2, alpha)
        for to, text in alpha:
            self.assertEqual(code_of(text), code_of([t for t2, t in beta if t2 == to][0]))
        text = self.metrics()
        self.assertEqual(self.metric(text, "otpd_provider_breaker_state", provider="alpha"), 1)
        self.assertEqual(self.metric(text, "otpd_provider_failovers_total", provider="alpha", cause="timeout"), 2)
        self.assert_money_exact()
        self.assertEqual(self.reserved(), 2 * ALPHA_PRICE + 6 * BETA_PRICE)  # a timeout may be billed
        # Recovery: past its open time, one probe goes to alpha and closes it.
        self.fakes[0].control(hang=False)
        time.sleep(self.OPEN_S + 0.1)
        m = self.issue_ok(IN_MOBILE % 30)
        wait_until(lambda: self.state(m) == "sent", 10, what="the probe's message sent")
        self.assertIn(IN_MOBILE % 30, [to for to, _ in self.got(0)])
        self.assertEqual(self.metric(self.metrics(), "otpd_provider_breaker_state", provider="alpha"), 0)
        self.assert_money_exact()


class CapacityTest(RoutesTest):
    """Each provider's queue is bounded by its own capacity: alpha (2) is full while beta (pacer.capacity) is not."""
    pacer = dict(RoutesTest.pacer, timeout="5s")

    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE, rate=1, capacity=2),
                              "beta": webhook(self.fakes[1], BETA_PRICE)},
                "routes": [{"match": "IN", "providers": ["alpha"]}, {"match": "*", "providers": ["beta"]}]}

    def test_a_full_provider_refuses_alone(self):
        self.fakes[0].control(hang=True)  # what alpha took stays in its queue
        self.issue_ok(IN_MOBILE % 70)
        self.issue_ok(IN_MOBILE % 71)
        st, h, body = self.fleet[0].issue(IN_MOBILE % 72)
        self.assertEqual((st, body.get("error")), (503, "queue_full"), body)
        self.assertGreaterEqual(int(h["retry-after"]), 2)  # alpha's depth over alpha's rate
        self.issue_ok(US_NUMBER % 170)
        self.fakes[0].control(hang=False)


class DoneRefundTest(RoutesTest):
    """A message a delivery report ended while its call hung: the call times out, its retry reserves again, then
    slot.lua says it was sent: that reservation, which no call used, goes back (it once stayed in the caps)."""
    pacer = dict(RoutesTest.pacer, timeout="400ms", retry={"max": 1, "base": "100ms"})

    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE)},
                "routes": [{"match": "*", "providers": ["alpha"]}]}

    def test_a_retry_of_a_message_sent_elsewhere_gives_its_reservation_back(self):
        self.fakes[0].control(hang=True)
        mid = self.issue_ok(IN_MOBILE % 80)
        wait_until(lambda: len(self.got(0)) == 1, 10, what="its call open at alpha")
        self.redis.cmd("HSET", "otp:msg:" + mid, "s", "delivered")  # what queue.lua's report writes
        wait_until(lambda: self.redis.cmd("XLEN", "otp:q:alpha") == 0, 10, what="its entry gone")
        self.assertEqual(len(self.got(0)), 1)  # never sent again
        self.assert_money_exact()
        self.assertEqual(self.reserved(), ALPHA_PRICE)  # the timed-out call may be billed; nothing more


class ReportFailoverTest(RoutesTest):
    """A delivery report that says a message failed, while enough of its code's life is left
    (failover.report_min_life), sends it again on the route's next provider with the same code; when that
    provider refuses it too and none is left, it ends failed."""

    def network(self):
        return {"providers": {"alpha": twilio(self.fakes[0], ALPHA_PRICE, callback_url="http://" + self.listen),
                              "beta": webhook(self.fakes[1], BETA_PRICE)},
                "routes": [{"match": "*", "providers": ["alpha", "beta"]}]}

    def configure(self, cfg, i):
        self.listen = cfg["listen"]
        return super().configure(cfg, i)

    def report(self, req, status):
        """A status callback to the URL otpd gave alpha, signed as Twilio signs it."""
        url = req["form"]["StatusCallback"]
        cb = urllib.parse.urlsplit(url)
        params = [("MessageSid", "SM0123"), ("MessageStatus", status), ("AccountSid", AC)]
        headers = {"Content-Type": "application/x-www-form-urlencoded",
                   "X-Twilio-Signature": twilio_signature(TOKEN, url, params)}
        return self.fleet[0].call("POST", cb.path + "?" + cb.query, raw=urllib.parse.urlencode(params).encode(),
                                  auth=None, headers=headers)[0]

    def test_an_undelivered_report_sends_the_code_again_on_the_next_provider(self):
        m = self.issue_ok(IN_MOBILE % 90)
        wait_until(lambda: self.state(m) == "sent", 10, what="sent by alpha")
        req = [r for r in self.fakes[0].requests() if r.get("provider") == "twilio"][0]
        self.assertEqual(self.report(req, "undelivered"), 200)
        wait_until(lambda: len(self.got(1)) == 1, 10, what="the code again on beta")
        self.assertEqual(code_of(self.got(1)[0][1]), code_of(req["form"]["Body"]))
        wait_until(lambda: self.state(m) == "sent", 10, what="sent by beta")
        st, _, view = self.fleet[0].call("GET", "/v1/otp/" + m)
        self.assertEqual((view["provider"], [a["provider"] + ":" + a["cause"] for a in view["attempts"]]),
                         ("beta", ["alpha:accepted", "alpha:undelivered", "beta:accepted"]))
        text = self.metrics()
        self.assertEqual(self.metric(text, "otpd_provider_failovers_total", provider="alpha", cause="report"), 1)
        self.assertEqual(self.metric(text, "otpd_provider_reports_total", provider="alpha", state="failed"), 1)
        self.assert_money_exact()
        self.assertEqual(self.reserved(), ALPHA_PRICE + BETA_PRICE)  # both attempts reached a provider
        st, _, body = self.fleet[0].verify(IN_MOBILE % 90, code_of(self.got(1)[0][1]))
        self.assertEqual(st, 200, body)

    def test_with_no_provider_left_a_failed_report_fails_it(self):
        m = self.issue_ok(IN_MOBILE % 91)
        wait_until(lambda: self.state(m) == "sent", 10, what="sent by alpha")
        req = [r for r in self.fakes[0].requests() if r.get("provider") == "twilio"][0]
        self.fakes[1].control(status=403)  # beta refuses for its account: no provider is left after it
        self.assertEqual(self.report(req, "undelivered"), 200)
        wait_until(lambda: self.state(m) == "failed", 10, what="refused by beta, then failed")
        self.assertEqual(len(self.got(0)), 1)  # never back to alpha
        self.assert_money_exact()


class MaxProvidersTest(RoutesTest):
    """Three providers on the route, failover.max_providers 2: alpha and beta refuse (403: their accounts), so
    the message ends failed and gamma never sees it."""
    providers = 3

    def network(self):
        f = self.fakes
        return {"providers": {"alpha": webhook(f[0], ALPHA_PRICE), "beta": webhook(f[1], BETA_PRICE),
                              "gamma": webhook(f[2], GAMMA_PRICE)},
                "routes": [{"match": "*", "providers": ["alpha", "beta", "gamma"]}],
                "failover": {"max_providers": 2}}

    def test_a_code_goes_to_at_most_max_providers(self):
        self.fakes[0].control(status=403)
        self.fakes[1].control(status=403)
        m = self.issue_ok(IN_MOBILE % 60)
        wait_until(lambda: self.state(m) == "failed", 10, what="the message failed")
        self.assertEqual([len(self.got(k)) for k in range(3)], [1, 1, 0])
        self.assertEqual([(s["provider"], s["http_status"]) for s in self.sends()], [("alpha", 403), ("beta", 403)])
        self.assert_money_exact()
        self.assertEqual(self.reserved(), 0)  # both refusals were never billed: given back, once each


class MoveScriptTest(unittest.TestCase):
    """queue.lua's own and move, run by a real Redis as otpd runs them: consumer otpd0 owns the entry on
    alpha's stream."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-move-")
        self.redis = Redis(self.tmp).start()
        with open(os.path.join(ROOT, "src", "pacer", "queue.lua")) as f:
            self.queue = f.read()
        r = self.redis.cmd
        r("XGROUP", "CREATE", "otp:q:alpha", "senders", "0", "MKSTREAM")
        self.eid = r("XADD", "otp:q:alpha", "*", "id", "m1", "v", "v" * 32, "to", "+919700000001",
                     "e", "9999999999999", "sc", "", "p", 7, "t", 0, "k", "", "pk", "")
        r("HSET", "otp:msg:m1", "s", "sending", "a", "login-web")
        r("XREADGROUP", "GROUP", "senders", "otpd0", "COUNT", 1, "STREAMS", "otp:q:alpha", ">")

    def tearDown(self):
        self.redis.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def move(self, consumer, capacity=100):
        return self.redis.cmd("EVAL", self.queue, 4, "otp:q:alpha", "otp:msg:m1", "otp:q:beta", "otp:share", "move",
                              consumer,
                              self.eid, "m1", "v" * 32, "+919700000001", "9999999999999", "", "7", "0", "", "", "",
                              "1", "alpha", "failed over from alpha to beta: timeout", "beta", "alpha:timeout",
                              capacity)

    def msg(self):
        flat = self.redis.cmd("HGETALL", "otp:msg:m1") or []
        return dict(zip(flat[::2], flat[1::2]))

    def test_only_the_owner_moves_and_in_one_step(self):
        self.assertEqual(self.move("otpd1"), 0)  # not its message: nothing changes
        self.assertEqual(self.redis.cmd("XLEN", "otp:q:alpha"), 1)
        self.assertEqual(self.redis.cmd("EXISTS", "otp:q:beta"), 0)
        self.assertEqual(self.redis.cmd("EVAL", self.queue, 2, "otp:q:alpha", "otp:msg:m1", "own", "otpd1",
                                        self.eid), 0)
        self.assertNotIn("o", self.msg())
        self.assertEqual(self.move("otpd0"), 1)
        self.assertEqual(self.redis.cmd("XLEN", "otp:q:alpha"), 0)
        self.assertEqual(self.redis.cmd("XPENDING", "otp:q:alpha", "senders")[0], 0)
        entries = self.redis.cmd("XRANGE", "otp:q:beta", "-", "+")
        self.assertEqual(len(entries), 1)
        f = dict(zip(entries[0][1][::2], entries[0][1][1::2]))
        self.assertEqual((f["id"], f["r"], f["pl"], f["p"]), ("m1", "1", "alpha", "7"))
        self.assertEqual((self.msg()["s"], self.msg()["pv"]), ("queued", "beta"))
        self.assertEqual(self.move("otpd0"), 0)  # its entry is gone from alpha: never moved twice

    def test_an_ended_message_never_moves_and_its_entry_leaves(self):
        self.redis.cmd("HSET", "otp:msg:m1", "s", "delivered", "sh", "member")  # a report won the race
        self.redis.cmd("ZADD", "otp:share", 0, "member")
        self.assertEqual(self.move("otpd1"), 0)  # not the owner's: nothing at all
        self.assertEqual(self.redis.cmd("XLEN", "otp:q:alpha"), 1)
        self.assertEqual(self.move("otpd0"), 2)
        self.assertEqual(self.redis.cmd("XLEN", "otp:q:alpha"), 0)  # it leaves, as an end's entry does
        self.assertEqual(self.redis.cmd("XPENDING", "otp:q:alpha", "senders")[0], 0)
        self.assertEqual(self.redis.cmd("ZCARD", "otp:share"), 0)
        self.assertEqual(self.redis.cmd("EXISTS", "otp:q:beta"), 0)
        self.assertEqual((self.msg()["s"], self.msg()["o"]), ("delivered", "otpd0"))

    def test_never_past_the_next_providers_capacity(self):
        self.redis.cmd("XGROUP", "CREATE", "otp:q:beta", "senders", "0", "MKSTREAM")
        self.redis.cmd("XADD", "otp:q:beta", "*", "id", "m0")
        self.assertEqual(self.move("otpd0", capacity=1), 4)  # beta holds its capacity: nothing moves
        self.assertEqual((self.redis.cmd("XLEN", "otp:q:alpha"), self.redis.cmd("XLEN", "otp:q:beta")), (1, 1))
        self.assertEqual(self.move("otpd0", capacity=2), 1)

    def test_a_call_armed_by_another_is_waited_for(self):
        now_ms = int(self.redis.cmd("TIME")[0]) * 1000
        self.redis.cmd("HSET", "otp:msg:m1", "ao", "otpd1", "w", now_ms + 60000)  # otpd1's call may be out
        r = self.move("otpd0")
        self.assertEqual(r[0], 3)
        self.assertGreater(r[1], 50000)
        self.assertEqual(self.redis.cmd("XLEN", "otp:q:alpha"), 1)
        self.redis.cmd("HSET", "otp:msg:m1", "w", now_ms - 1)  # its bound has passed
        self.assertEqual(self.move("otpd0"), 1)

    def test_own_makes_the_owner_the_one_that_may_refund(self):
        self.assertEqual(self.redis.cmd("EVAL", self.queue, 2, "otp:q:alpha", "otp:msg:m1", "own", "otpd0",
                                        self.eid), 1)
        self.assertEqual(self.msg()["o"], "otpd0")


class ReportScriptTest(unittest.TestCase):
    """queue.lua's end (a sent message keeps its entry), report (a failed one with life left is handed back, not
    failed) and again (queued on the next provider's stream), run by a real Redis as otpd runs them."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-report-")
        self.redis = Redis(self.tmp).start()
        with open(os.path.join(ROOT, "src", "pacer", "queue.lua")) as f:
            self.queue = f.read()
        r = self.redis.cmd
        self.now_ms = int(r("TIME")[0]) * 1000
        r("XGROUP", "CREATE", "otp:q:alpha", "senders", "0", "MKSTREAM")
        self.eid = r("XADD", "otp:q:alpha", "*", "id", "m1", "v", "v" * 32, "to", "+919700000001",
                     "e", self.now_ms + 300000, "sc", "", "p", 7, "t", 0, "k", "", "pk", "", "x", "")
        r("HSET", "otp:msg:m1", "s", "sending", "a", "login-web", "pv", "alpha", "r", 1)
        r("XREADGROUP", "GROUP", "senders", "otpd0", "COUNT", 1, "STREAMS", "otp:q:alpha", ">")
        self.assertEqual(r("EVAL", self.queue, 3, "otp:q:alpha", "otp:msg:m1", "otp:share", "end", "otpd0", self.eid,
                           "sent", "", "SM1", "alpha:accepted"), 1)

    def tearDown(self):
        self.redis.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def report(self, min_life):
        return self.redis.cmd("EVAL", self.queue, 2, "otp:q:alpha", "otp:msg:m1", "report", "otpd0", "failed",
                              min_life)

    def again(self):
        return self.redis.cmd("EVAL", self.queue, 2, "otp:q:beta", "otp:msg:m1", "again", "otpd0", "beta",
                              "alpha:undelivered", "report failed at alpha: again on beta")

    def test_a_failed_report_with_life_left_queues_it_again(self):
        self.assertEqual(self.report(60000), [2, "alpha", "+919700000001", ""])
        self.assertEqual(self.redis.cmd("HGET", "otp:msg:m1", "s"), "sent")  # nothing changed yet
        self.assertEqual(self.again(), 1)
        entries = self.redis.cmd("XRANGE", "otp:q:beta", "-", "+")
        f = dict(zip(entries[0][1][::2], entries[0][1][1::2]))
        self.assertEqual((f["id"], f["v"], f["r"], f["pl"]), ("m1", "v" * 32, "1", "alpha"))
        self.assertEqual(self.redis.cmd("HMGET", "otp:msg:m1", "s", "pv", "en"), ["queued", "beta", None])
        self.assertEqual(self.again(), 0)  # once only

    def test_too_little_life_left_fails_it(self):
        self.assertEqual(self.report(400000)[0], 1)  # 5 min left, 6.7 min asked: failed as reported
        self.assertEqual(self.redis.cmd("HGET", "otp:msg:m1", "s"), "failed")
        self.assertEqual(self.again(), 0)


class ReloadTest(RoutesTest):
    """A reload changes the routes; what alpha holds queued is still sent, by alpha."""

    def network(self):
        return {"providers": {"alpha": webhook(self.fakes[0], ALPHA_PRICE, rate=2), "beta": webhook(self.fakes[1], BETA_PRICE)},
                "routes": [{"match": "*", "providers": ["alpha"]}]}

    def test_reload_moves_new_messages_and_loses_none(self):
        queued = [self.issue_ok(IN_MOBILE % (40 + k)) for k in range(4)]
        cfg = dict(self.fleet[0].config, routes=[{"match": "*", "providers": ["beta", "alpha"]}])
        self.fleet[0].write_config(cfg)
        self.fleet[0].proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "reloaded" in self.fleet[0].log(), 5, what="the reload line")
        time.sleep(0.5)  # the routes are swapped just after that line (cmd/otpd/main.c's reload)
        new = self.issue_ok(IN_MOBILE % 50)
        wait_until(lambda: all(self.state(m) == "sent" for m in queued + [new]), 15, what="all sent")
        self.assertEqual(sorted(to for to, _ in self.got(0)), sorted(IN_MOBILE % (40 + k) for k in range(4)))
        self.assertEqual([to for to, _ in self.got(1)], [IN_MOBILE % 50])


class FleetLanesTest(RoutesTest):
    """Three instances, three providers at three rates; alpha hangs for a while, then recovers. Each provider's
    worst 1-second window on its own wire stays at or under its rate."""
    n = 3
    providers = 3
    pacer = dict(RoutesTest.pacer, timeout="500ms", max_inflight=4)
    redis_timeout_ms = 300
    RATES = {"alpha": 5, "beta": 20, "gamma": 10}

    def network(self):
        f = self.fakes
        return {"providers": {"alpha": webhook(f[0], ALPHA_PRICE, rate=5, breaker={"failures": 3, "open": "1s"}),
                              "beta": webhook(f[1], BETA_PRICE, rate=20),
                              "gamma": webhook(f[2], GAMMA_PRICE, rate=10)},
                "routes": [{"match": "IN", "providers": ["alpha", "beta"]}, {"match": "*", "providers": ["gamma"]}]}

    def test_each_wire_holds_its_rate_through_a_hang(self):
        self.fakes[0].control(hang=True)
        ins = ["+9198%08d" % k for k in range(30)]
        uss = [US_NUMBER % (120 + k) for k in range(20)]
        res = self.fleet.issue(ins + uss, workers=6)
        ids = [r["body"]["id"] for r in res if r["status"] == 202]
        self.assertEqual(len(ids), 50, [r for r in res if r["status"] != 202][:3])
        time.sleep(1.5)
        self.fakes[0].control(hang=False)
        more = self.fleet.issue(["+9199%08d" % k for k in range(15)], workers=6)
        ids += [r["body"]["id"] for r in more if r["status"] == 202]
        self.assertEqual(len(ids), 65)
        wait_until(lambda: all(self.state(m) in ("sent",) for m in ids), 40, what="all sent")
        for k, name in enumerate(["alpha", "beta", "gamma"]):
            ts = sorted(r["t_us"] / 1e6 for r in self.fakes[k].requests() if r.get("provider") == "webhook")
            self.assertLessEqual(worst_window(ts), self.RATES[name], "%s: %d in one second" % (name, worst_window(ts)))
            print("worst window %s: %d of rate %d (%d requests)" % (name, worst_window(ts), self.RATES[name], len(ts)))
        # Every US number went to gamma only; every IN number was delivered by alpha or beta, once.
        self.assertEqual(sorted(to for to, _ in self.got(2)), sorted(uss))
        delivered = [to for k in (0, 1) for to, _ in self.got(k)]
        for p in ins:
            self.assertIn(p, delivered)
        self.assert_money_exact()


if __name__ == "__main__":
    unittest.main()
