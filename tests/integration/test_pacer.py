"""The pacer and the providers: pacing measured from the provider's own
arrival times, the bulkhead, queue admission, TTL expiry, retries, crash
recovery, and the Kannel and Twilio adapters against the fake provider."""
# It measures time or rates: tests/integration/run.py runs it alone, after the parallel workers.
SERIAL = True
import concurrent.futures
import json
import re
import signal
import time
import urllib.parse

from fleet import worst_window
from harness import OtpdTest, code_of, twilio_signature, wait_until


def phones(n, start=0):
    return ["+9198%08d" % (start + i) for i in range(n)]


def issue_all(otpd, nums, workers=8):
    with concurrent.futures.ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda p: otpd.issue(p), nums))


def arrivals(fake):
    return sorted(r["t_us"] / 1e6 for r in fake.requests())


def tightest(ts, rate):
    """The shortest time spanned by rate + 1 consecutive arrivals. The pacer
    keeps any rate + 1 calls >= 1.005 s apart on the wire; the fake provider
    stamps arrivals in its per-connection threads, whose scheduling on a
    loaded 2-core machine adds up to tens of ms (seen: 21 arrivals in a 1-s
    window at rate 20 under a parallel build). So the tests allow 3 % for the
    receiver (>= 0.97 s); test_pacer_wire checks the wire itself."""
    return min((ts[i + rate] - ts[i] for i in range(len(ts) - rate)), default=float("inf"))


class PacerTest(OtpdTest):
    pacer = {"rate": 50, "capacity": 500, "max_inflight": 16, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s"}
    ttl = "5m"

    def configure(self, cfg):
        cfg["pacer"] = dict(self.pacer)
        cfg["otp"]["ttl"] = self.ttl
        return cfg

    def sends(self, mid):
        return self.otpd.rows("SELECT * FROM sends WHERE message_id = ? ORDER BY id", mid)

    def state(self, mid):
        rows = self.otpd.rows("SELECT state FROM messages WHERE id = ?", mid)
        return rows[0]["state"] if rows else None

    def wait_state(self, mid, state, timeout=10):
        wait_until(lambda: self.state(mid) == state, timeout, what="message %s %s" % (mid, state))


class PacingTest(PacerTest):
    def test_rate_50_exact(self):
        n = 150
        res = issue_all(self.otpd, phones(n))
        self.assertEqual([r[0] for r in res], [202] * n)
        self.wait_messages(n, timeout=20)
        ts = arrivals(self.fake)
        self.assertGreaterEqual(tightest(ts, 50), 0.97, "51 arrivals within %.3f s" % tightest(ts, 50))
        rate = (n - 1) / (ts[-1] - ts[0])
        # Never faster than the rate (3 % for the receiver's stamps); slower only by slots missed, which a missed
        # slot never makes up (no idle credit): under AddressSanitizer, alone on 2 cores, CI saw 48.12/s once.
        self.assertLessEqual(rate, 50 * 1.03, "achieved %.2f/s" % rate)
        self.assertGreaterEqual(rate, 50 * 0.9, "achieved %.2f/s" % rate)

    def test_slow_provider_does_not_lower_the_rate(self):
        self.fake.control(latency_ms=300)
        cfg = self.otpd.config
        cfg["pacer"]["rate"] = 20
        self.restart(cfg)
        n = 60
        res = issue_all(self.otpd, phones(n))
        self.assertEqual([r[0] for r in res], [202] * n)
        self.wait_messages(n, timeout=20)
        ts = arrivals(self.fake)
        rate = (n - 1) / (ts[-1] - ts[0])
        # Never faster than the rate; slower only by slots missed on a loaded machine (a CI run with other work
        # on its 2 cores saw 19.1/s). One call at a time would give 300 ms apart: 3.3/s.
        self.assertLessEqual(rate, 20 * 1.03, "achieved %.2f/s with a 300 ms provider" % rate)
        self.assertGreaterEqual(rate, 20 * 0.9, "achieved %.2f/s with a 300 ms provider" % rate)
        self.assertGreaterEqual(tightest(ts, 20), 0.97, "21 arrivals within %.3f s" % tightest(ts, 20))


class IdleTest(PacerTest):
    pacer = dict(PacerTest.pacer, rate=5)

    def test_idle_time_earns_no_burst(self):
        self.issue_and_code("+919800000001")
        # Not a barrier: the scenario itself is 2.5 s (12 ticks at 5/s) with
        # nothing to send, which a token bucket would bank as a burst.
        time.sleep(2.5)
        n = 6
        self.assertEqual([r[0] for r in issue_all(self.otpd, phones(n, 100))], [202] * n)
        self.wait_messages(n + 1, timeout=10)
        ts = arrivals(self.fake)[1:]
        self.assertGreaterEqual(ts[-1] - ts[0], (n - 1) * 0.2 - 0.02, "the idle time was spent as a burst")
        # A banked burst would put several calls within a few ms of each
        # other; a tick is 200 ms, and the receiver's own scheduling moves an
        # arrival by tens of ms under load (seen: 172 ms), so each gap is held
        # to half a tick and the span above to the whole schedule.
        for a, b in zip(ts, ts[1:]):
            self.assertGreaterEqual(b - a, 0.1)


class BulkheadTest(PacerTest):
    pacer = dict(PacerTest.pacer, max_inflight=2)

    def test_at_most_max_inflight(self):
        self.fake.control(latency_ms=400)
        n = 8
        self.assertEqual([r[0] for r in issue_all(self.otpd, phones(n))], [202] * n)
        self.wait_messages(n, timeout=20)
        ts = arrivals(self.fake)
        # With two calls of 400 ms at once, any three arrivals span a call.
        for i in range(len(ts) - 2):
            self.assertGreaterEqual(ts[i + 2] - ts[i], 0.38, ts)
        # And the waiting did not turn into a burst later.
        self.assertLessEqual(worst_window(ts, 0.39), 2)


class QueueTest(PacerTest):
    pacer = dict(PacerTest.pacer, rate=1, capacity=3, max_inflight=1)
    limits = [{"name": "phone_hour", "key": "phone", "algorithm": "sliding_log", "limit": 2, "window": "1h"}]

    def test_full_queue_answers_503_and_charges_nothing(self):
        self.fake.control(hang=True)  # the first call hangs: the bulkhead holds the rest
        # The capacity counts every message accepted and not ended, fleet-wide:
        # the one in flight and the two queued behind it.
        res = [self.otpd.issue(p) for p in phones(3)]
        self.assertEqual([r[0] for r in res], [202] * 3)
        wait_until(lambda: len(self.fake.requests()) == 1, 5, what="the first call on the wire, hanging")
        st, h, p = self.otpd.issue("+14155550100")
        self.assertEqual((st, p["error"]), (503, "queue_full"))
        self.assertEqual(h["retry-after"], "3")  # ceil(depth 3 / rate 1)
        self.assertEqual(p["retry_after"], 3)
        self.assertNotIn("ratelimit", h)
        st, _, p = self.otpd.call("GET", "/readyz", auth=None)
        self.assertEqual((st, p["detail"]), (503, "the send queue is full"))
        # The refused request took no quota: two issues still pass once there is room.
        self.fake.control(hang=False)
        # Refusals are recorded without waiting for the commit: let it land
        # before the SIGKILL, or the kill may take it along.
        q = "SELECT decision FROM requests WHERE phone = '+14155550100' ORDER BY id"
        wait_until(lambda: self.otpd.rows(q), 5, what="the queue_full row")
        self.otpd.stop(signal.SIGKILL)
        self.restart()
        wait_until(lambda: len(self.fake.messages()) >= 4, 20, what="the queue to drain")
        self.assertEqual(self.otpd.issue("+14155550100")[0], 202)
        self.assertEqual(self.otpd.issue("+14155550100")[0], 202)
        self.assertEqual(self.otpd.issue("+14155550100")[0], 429)
        rows = wait_until(lambda: (lambda r: r if len(r) == 4 else None)(self.otpd.rows(q)), 5, what="4 rows")
        self.assertEqual([r["decision"] for r in rows], ["queue_full", "accepted", "accepted", "rate_limited"])


class ExpiryTest(PacerTest):
    pacer = dict(PacerTest.pacer, rate=1, capacity=50)
    ttl = "10s"

    def test_expired_codes_are_never_sent(self):
        n = 14
        res = issue_all(self.otpd, phones(n))
        self.assertEqual([r[0] for r in res], [202] * n)
        ids = [r[2]["id"] for r in res]
        wait_until(lambda: all(self.state(i) in ("sent", "expired") for i in ids), 25, what="every message to end")
        states = {i: self.state(i) for i in ids}
        sent = [i for i in ids if states[i] == "sent"]
        expired = [i for i in ids if states[i] == "expired"]
        # A message goes out only while its code has min(30 s, ttl/4) = 2.5 s
        # of life left (docs/architecture.md, "Money": `expired`). At 1/s, a code living 10 s goes out
        # if its turn comes within 7.5 s: the first eight (one more or less on
        # a boundary), the rest expire queued.
        min_life_ms = 2500
        self.assertIn(len(sent), (7, 8, 9), states)
        self.assertEqual(len(sent) + len(expired), n)
        at_provider = {m["id"]: m for m in self.fake.messages()}
        self.assertEqual(set(at_provider), set(sent))
        rows = {r["id"]: r for r in self.otpd.rows("SELECT id, expires_ms FROM messages")}
        arrived_ms = {json.loads(r["body"])["id"]: r["t_us"] / 1000 for r in self.fake.requests()}
        for i in sent:  # each went out while its code had its minimum life left
            self.assertLess(arrived_ms[i], rows[i]["expires_ms"] - min_life_ms + 100, i)
        for i in expired:  # and each expired one was dropped no earlier than that, never sent
            self.assertEqual(self.sends(i), [])
            ev = self.otpd.rows("SELECT state, ts_ms FROM message_events WHERE message_id = ? ORDER BY id", i)
            self.assertEqual([e["state"] for e in ev], ["queued", "expired"])
            self.assertGreaterEqual(ev[-1]["ts_ms"], rows[i]["expires_ms"] - min_life_ms)
        text = self.otpd.call("GET", "/metrics", auth=None)[2]
        self.assertIn('otpd_messages_total{state="expired"} %d\n' % len(expired), text)
        self.assertIn('otpd_messages_total{state="sent"} %d\n' % len(sent), text)


class FailedSendLogTest(PacerTest):
    """A failed send never logs the message text, which carries the code."""

    def failed_code(self, phone, status, state_sends):
        self.fake.reset()
        self.fake.control(status=status)
        body = self.otpd.issue(phone)[2]
        self.wait_state(body["id"], "failed")
        sends = self.sends(body["id"])
        self.assertEqual([(s["outcome"], s["http_status"]) for s in sends], state_sends)
        text = [m["text"] for m in self.fake.messages() if m["id"] == body["id"]][0]
        return code_of(text), text

    def test_text_not_logged_on_500_and_4xx(self):
        seen = []
        seen.append(self.failed_code("+919800000001", 500, [("transient", 500)] * 3))
        seen.append(self.failed_code("+919800000002", 400, [("permanent", 400)]))
        seen.append(self.failed_code("+919800000003", 403, [("permanent", 403)]))
        self.assertEqual(self.otpd.stop(), 0)  # the log is complete once otpd has exited
        log = self.otpd.log()
        for code, text in seen:
            self.assertRegex(code, r"^\d{6}$")
            self.assertNotIn(code, log)
            self.assertNotIn(text, log)
            self.assertNotIn("is your login code", log)


class RetryTest(PacerTest):
    def test_transient_then_sent(self):
        self.fake.control(statuses=[500, 503, 0])
        body = self.otpd.issue("+919800000001")[2]
        self.wait_state(body["id"], "sent")
        self.assertEqual([(s["outcome"], s["http_status"]) for s in self.sends(body["id"])],
                         [("transient", 500), ("transient", 503), ("sent", 200)])
        rows = self.otpd.rows("SELECT state, detail FROM message_events WHERE message_id = ? ORDER BY id",
                              body["id"])
        self.assertEqual([e["state"] for e in rows],
                         ["queued", "sending", "queued", "sending", "queued", "sending", "sent"])
        # Backoff: base * 2^(n-1) plus a jitter under base (100 ms), as recorded.
        waits = [int(re.match(r"retry in (\d+) ms: ", e["detail"]).group(1)) for e in rows[2:5:2]]
        self.assertTrue(100 <= waits[0] < 200 and 200 <= waits[1] < 300, waits)
        ts = arrivals(self.fake)
        self.assertGreaterEqual(ts[1] - ts[0], waits[0] / 1000)
        self.assertGreaterEqual(ts[2] - ts[1], waits[1] / 1000)

    def test_retries_exhausted(self):
        self.fake.control(status=500)
        body = self.otpd.issue("+919800000001")[2]
        self.wait_state(body["id"], "failed")
        self.assertEqual(len(self.sends(body["id"])), 3)  # the first try and retry.max = 2

    def test_429_retry_after_is_honoured(self):
        self.fake.control(statuses=[429], retry_after=1)
        body = self.otpd.issue("+919800000001")[2]
        self.wait_state(body["id"], "sent")
        detail = self.otpd.rows("SELECT detail FROM message_events WHERE message_id = ? AND state = 'queued' "
                                "ORDER BY id", body["id"])[1]["detail"]
        self.assertTrue(detail.startswith("retry in 1000 ms: "), detail)  # the provider's 1 s, not the backoff
        ts = arrivals(self.fake)
        self.assertGreaterEqual(ts[1] - ts[0], 1.0)

    def test_hang_times_out_and_retries(self):
        cfg = self.otpd.config
        cfg["pacer"]["timeout"] = "500ms"
        self.restart(cfg)
        self.fake.control(hang=True)
        body = self.otpd.issue("+919800000001")[2]
        wait_until(lambda: len(self.sends(body["id"])) >= 1, 5, what="the timed-out call")
        self.fake.control(hang=False)
        self.wait_state(body["id"], "sent")
        first = self.sends(body["id"])[0]
        self.assertEqual(first["outcome"], "transient")
        self.assertIsNone(first["http_status"])

    def test_permanent_failure_alerts(self):
        self.fake.control(status=401)
        body = self.otpd.issue("+919800000001")[2]
        self.wait_state(body["id"], "failed")
        self.assertEqual(len(self.sends(body["id"])), 1)
        self.assertEqual(self.sends(body["id"])[0]["outcome"], "permanent")
        text = self.otpd.call("GET", "/metrics", auth=None)[2]
        self.assertIn("otpd_provider_permanent_failures_total 1\n", text)


class RefundTest(PacerTest):
    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["cost"] = {"currency": "INR", "prices": {"+91": 20, "*": 500}, "caps": [{"window": "1d", "max": 20}]}
        return cfg

    def test_failed_message_gives_its_cost_back(self):
        self.fake.control(status=403, latency_ms=500)  # the refusal comes after the next issue
        body = self.otpd.issue("+919800000001")[2]
        self.assertEqual(self.otpd.issue("+919800000002")[2]["error"], "cost_cap")
        self.wait_state(body["id"], "failed")
        self.fake.control(status=0, latency_ms=0)
        wait_until(lambda: self.otpd.issue("+919800000003")[0] == 202, 5, what="the refund")


class CrashTest(PacerTest):
    pacer = dict(PacerTest.pacer, rate=10, capacity=200, max_inflight=4)

    def test_sigkill_with_a_full_queue_loses_nothing(self):
        n = 50
        res = issue_all(self.otpd, phones(n))
        ids = [r[2]["id"] for r in res]
        # The fleet's queue order is the stream's (the commits' order, not the
        # ledger's acceptance order when issues run concurrently).
        stream = [e[1][1] for e in self.redis.cmd("XRANGE", "otp:q", "-", "+")]
        self.otpd.stop(signal.SIGKILL)
        sent_before = len(self.fake.requests())
        self.assertLess(sent_before, n - 10)
        self.restart()
        wait_until(lambda: all(self.state(i) == "sent" for i in ids), 20, what="every message sent")
        got = [m["id"] for m in self.fake.messages()]
        self.assertEqual(set(got), set(ids))
        self.assertLessEqual(len(got) - n, self.pacer["max_inflight"], "duplicates after the restart")
        # Order: what was queued is sent in the queue's order after the
        # restart; a message that misses its slot (its request could not be
        # written in time) takes the next one, behind the at most 2 that
        # hold slots already.
        pos = {mid: k for k, mid in enumerate(stream)}
        after = []
        for i in got[sent_before:]:
            if i in pos and pos[i] not in after:
                after.append(pos[i])
        ranked = sorted(after)
        self.assertTrue(all(abs(k - ranked.index(p)) <= 2 for k, p in enumerate(after)), after)

    def test_sigterm_persists_the_queue(self):
        ids = [r[2]["id"] for r in issue_all(self.otpd, phones(30))]
        self.assertEqual(self.otpd.stop(signal.SIGTERM), 0)
        self.assertTrue(any(self.state(i) == "queued" for i in ids))
        self.restart()
        wait_until(lambda: all(self.state(i) == "sent" for i in ids), 20, what="every message sent")
        self.assertEqual(len(self.fake.messages()), 30)


class KannelAdapterTest(PacerTest):
    env = {"KANNEL_USER": "kuser", "KANNEL_PASS": "kpass-secret"}

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["provider"] = {"type": "kannel", "url": self.fake.url + "/cgi-bin/sendsms", "from": "OTPD",
                           "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS",
                           "callback_url": "http://" + cfg["listen"]}
        return cfg

    def test_sendsms_and_delivery_report(self):
        body = self.otpd.issue("+919812345678")[2]
        self.wait_state(body["id"], "sent")
        req = self.fake.requests()[0]
        self.assertEqual((req["method"], req["provider"]), ("GET", "kannel"))
        args = req["args"]
        self.assertEqual((args["username"], args["password"], args["from"], args["to"]),
                         ("kuser", "kpass-secret", "OTPD", "+919812345678"))
        self.assertRegex(args["text"], r"^\d{6} is your login code")
        dlr = urllib.parse.urlsplit(args["dlr-url"].replace("%d", "1"))
        path = dlr.path + "?" + dlr.query
        self.assertEqual(self.otpd.call("GET", path.replace("tag=", "tag=0"), auth=None)[0], 404)
        self.assertEqual(self.otpd.call("GET", path, auth=None)[0], 200)
        self.wait_state(body["id"], "delivered")
        self.assertNotIn("kpass-secret", self.otpd.log())


class TwilioAdapterTest(PacerTest):
    env = {"TWILIO_SID": "AC0123456789abcdef0123456789abcdef", "TWILIO_TOKEN": "twilio-token-secret"}

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["provider"] = {"type": "twilio", "base_url": self.fake.url, "from": "+15005550006",
                           "account_sid_env": "TWILIO_SID", "auth_token_env": "TWILIO_TOKEN",
                           "callback_url": "http://" + cfg["listen"]}
        return cfg

    def test_messages_api_and_status_callback(self):
        import base64
        body = self.otpd.issue("+14155550100")[2]
        self.wait_state(body["id"], "sent")
        req = self.fake.requests()[0]
        self.assertEqual((req["method"], req["provider"], req["path"]),
                         ("POST", "twilio", "/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages.json"))
        self.assertEqual(req["authorization"], "Basic " + base64.b64encode(b"AC0123456789abcdef0123456789abcdef:twilio-token-secret").decode())
        form = req["form"]
        self.assertEqual((form["To"], form["From"]), ("+14155550100", "+15005550006"))
        msg = self.otpd.rows("SELECT provider_id FROM messages")[0]
        self.assertRegex(msg["provider_id"], r"^SM[0-9a-f]{32}$")
        cb = urllib.parse.urlsplit(form["StatusCallback"])
        sig = twilio_signature("twilio-token-secret", form["StatusCallback"],
                               [("MessageSid", "x"), ("MessageStatus", "delivered")])
        st, _, _ = self.otpd.call("POST", cb.path + "?" + cb.query, raw=b"MessageSid=x&MessageStatus=delivered",
                                  auth=None, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                      "X-Twilio-Signature": sig})
        self.assertEqual(st, 200)
        self.wait_state(body["id"], "delivered")
        self.assertNotIn("twilio-token-secret", self.otpd.log())
