"""Idempotency-Key on POST /v1/otp and /v1/otp/verify (DESIGN.md, "One
request, issue path"; issue 8).

The same key from the same caller within 24 h replays the first answer
(status, body, Retry-After and RateLimit headers) and nothing else happens:
no limit taken, no SMS, no ledger row. The same key with another request is
422 idempotency_key_reused. Two identical requests at once get one decision.
A key is 1 to 64 printable ASCII bytes, else 400 invalid_request. A 503
store_unavailable is never stored: a retry is decided afresh.
"""
import hashlib
import http.client
import json
import re
import threading
import time
import unittest

import harness
from harness import OTHER_KEY, OtpdTest, wait_until

PHONE = "+919812345678"
OTHER_PHONE = "+919812345679"
LATER_PHONE = "+919812345670"
# The headers a replay must repeat exactly.
REPLAYED = ("content-type", "retry-after", "ratelimit-policy", "ratelimit")


class IdemTest(OtpdTest):
    limits = [{"name": "phone_10m", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "10m"}]

    def post(self, path, body, key=None, auth=harness.API_KEY, raw=None):
        headers = {} if key is None else {"Idempotency-Key": key}
        if raw is not None:
            headers["Content-Type"] = "application/json"
            return self.otpd.call("POST", path, raw=raw, auth=auth, headers=headers)
        return self.otpd.call("POST", path, body, auth=auth, headers=headers)

    def issue(self, phone, key=None, **kw):
        return self.post("/v1/otp", {"phone": phone}, key, **kw)

    def assertSameAnswer(self, a, b):
        self.assertEqual(a[0], b[0])
        self.assertEqual(a[2], b[2])
        for h in REPLAYED:
            self.assertEqual(a[1].get(h), b[1].get(h), h)

    def metric(self, name):
        text = self.otpd.call("GET", "/metrics", auth=None)[2]
        m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
        return int(m.group(1)) if m else None

    def sms_to(self, phone):
        return [m for m in self.fake.messages() if m["to"] == phone]

    def settle(self):
        """Issues for LATER_PHONE and waits until it and every message before
        it has ended in the ledger: a message is 'sent' only once the
        provider answered, so by then the provider has recorded each of
        them. (Arrivals alone are no barrier: calls run in parallel, and a
        later body can be read before an earlier one.)"""
        before = len(self.sms_to(LATER_PHONE))
        st, _, body = self.issue(LATER_PHONE)
        self.assertEqual(st, 202, body)
        wait_until(lambda: len(self.sms_to(LATER_PHONE)) > before, what="the later SMS")
        wait_until(lambda: not self.otpd.rows("SELECT id FROM messages WHERE state IN ('queued', 'sending')"),
                   what="every message to end")

    def requests_for(self, phone):
        """One entry per request: a 4xx row of one key and second stands for its count."""
        rows = self.otpd.rows("SELECT kind, decision, http_status, count FROM requests WHERE phone = ? ORDER BY id",
                              phone)
        return [r for r in rows for _ in range(r.pop("count"))]


class ReplayTest(IdemTest):
    def test_issue_replayed_without_a_second_decision(self):
        first = self.issue(PHONE, "order-1")
        self.assertEqual(first[0], 202, first[2])
        self.assertEqual(first[1]["ratelimit"], '"phone_10m";r=2;t=600')
        wait_until(lambda: self.sms_to(PHONE), what="the first SMS")
        again = self.issue(PHONE, "order-1")
        self.assertSameAnswer(first, again)
        # The same fields in another order and spacing are the same request.
        raw = b'{ "phone" :"%s" }' % PHONE.encode()
        self.assertSameAnswer(first, self.post("/v1/otp", None, "order-1", raw=raw))
        self.settle()
        self.assertEqual(len(self.sms_to(PHONE)), 1)
        # One take only: a request without the key takes the second slot.
        st, h, body = self.issue(PHONE)
        self.assertEqual(st, 202, body)
        self.assertEqual(h["ratelimit"], '"phone_10m";r=1;t=600')
        self.assertNotEqual(body["id"], first[2]["id"])
        # And the key still replays the first answer, headers included.
        self.assertSameAnswer(first, self.issue(PHONE, "order-1"))
        self.settle()
        self.assertEqual([r["decision"] for r in self.requests_for(PHONE)], ["accepted", "accepted"])
        self.assertEqual(self.metric('otpd_idempotency_total{result="decided"}'), 1)
        self.assertEqual(self.metric('otpd_idempotency_total{result="replayed"}'), 3)
        self.assertEqual(self.metric('otpd_requests_total{op="issue",decision="accepted"}'), 4)

    def test_refusal_replayed_with_its_headers(self):
        for _ in range(3):
            self.assertEqual(self.issue(PHONE)[0], 202)
        first = self.issue(PHONE, "r-1")
        self.assertEqual(first[0], 429, first[2])
        self.assertEqual(first[2]["error"], "rate_limited")
        self.assertTrue(first[1]["retry-after"])
        self.assertEqual(first[1]["ratelimit-policy"], '"phone_10m";q=3;w=600')
        again = self.issue(PHONE, "r-1")
        self.assertSameAnswer(first, again)
        self.settle()  # refusals are recorded without waiting; this commit comes after them
        self.assertEqual([r["http_status"] for r in self.requests_for(PHONE)], [202, 202, 202, 429])

    def test_verify_replayed(self):
        body, code = self.issue_and_code(PHONE)
        first = self.post("/v1/otp/verify", {"phone": PHONE, "code": code}, "v-1")
        self.assertEqual(first[0], 200, first[2])
        # The code is used up: a fresh verify finds none, the replay still says verified.
        st, _, p = self.otpd.verify(PHONE, code)
        self.assertEqual((st, p["error"]), (404, "no_active_code"))
        self.assertSameAnswer(first, self.post("/v1/otp/verify", {"phone": PHONE, "code": code}, "v-1"))
        # Verify rows are written in order without waiting: a last verify's
        # row comes after any row the replay could have written.
        self.assertEqual(self.otpd.verify(PHONE, code)[0], 404)
        rows = wait_until(lambda: (lambda r: r if len(r) >= 4 else None)(self.requests_for(PHONE)),
                          what="four request rows")
        self.assertEqual([(r["kind"], r["http_status"]) for r in rows],
                         [("issue", 202), ("verify", 200), ("verify", 404), ("verify", 404)])

    def test_wrong_guess_replayed_without_a_second_attempt(self):
        body, code = self.issue_and_code(PHONE)
        wrong = "000000" if code != "000000" else "111111"
        first = self.post("/v1/otp/verify", {"phone": PHONE, "code": wrong}, "g-1")
        self.assertEqual((first[0], first[2]["error"], first[2]["attempts_left"]), (422, "invalid_code", 2))
        self.assertSameAnswer(first, self.post("/v1/otp/verify", {"phone": PHONE, "code": wrong}, "g-1"))
        st, _, p = self.otpd.verify(PHONE, wrong)
        self.assertEqual((st, p["attempts_left"]), (422, 1))


class MismatchTest(IdemTest):
    def test_other_body_same_key(self):
        first = self.issue(PHONE, "k-1")
        self.assertEqual(first[0], 202, first[2])
        st, h, p = self.issue(OTHER_PHONE, "k-1")
        self.assertEqual(st, 422, p)
        self.assertEqual(h["content-type"], "application/problem+json")
        self.assertEqual((p["error"], p["status"], p["type"]),
                         ("idempotency_key_reused", 422, "urn:otpd:problem:idempotency_key_reused"))
        # The same key on the other operation is another request too.
        st, _, p = self.post("/v1/otp/verify", {"phone": PHONE, "code": "123456"}, "k-1")
        self.assertEqual((st, p["error"]), (422, "idempotency_key_reused"))
        self.settle()
        self.assertEqual(self.sms_to(OTHER_PHONE), [])
        self.assertEqual(self.requests_for(OTHER_PHONE), [])
        self.assertEqual(len(self.requests_for(PHONE)), 1)
        # The first answer is still there.
        self.assertSameAnswer(first, self.issue(PHONE, "k-1"))


class KeyFormatTest(IdemTest):
    def bad(self, key):
        st, h, p = self.issue(PHONE, key)
        self.assertEqual((st, p["error"]), (400, "invalid_request"), repr(key))
        self.assertIn("Idempotency-Key", p["detail"])

    def test_bounds(self):
        self.bad("k" * 65)
        self.bad("a\x01b")
        self.bad("a\x7fb")
        self.bad("caf\xe9")
        self.settle()
        self.assertEqual(self.requests_for(PHONE), [])
        self.assertEqual(self.redis.cmd("KEYS", "otpd:idem:*"), [])
        # 64 printable bytes, spaces and punctuation included, are fine.
        key = ("k ~!" * 16)
        st, _, body = self.issue(PHONE, key)
        self.assertEqual(st, 202, body)
        self.assertEqual(self.issue(PHONE, key)[2], body)

    def test_given_twice(self):
        con = http.client.HTTPConnection("127.0.0.1", self.otpd.port, timeout=10)
        try:
            data = json.dumps({"phone": PHONE}).encode()
            con.putrequest("POST", "/v1/otp")
            con.putheader("Authorization", "Bearer " + harness.API_KEY)
            con.putheader("Content-Type", "application/json")
            con.putheader("Idempotency-Key", "one")
            con.putheader("Idempotency-Key", "one")
            con.putheader("Content-Length", str(len(data)))
            con.endheaders(data)
            r = con.getresponse()
            p = json.loads(r.read())
        finally:
            con.close()
        self.assertEqual((r.status, p["error"]), (400, "invalid_request"))


class CallerTest(IdemTest):
    def test_each_caller_has_its_own_keys(self):
        web = self.issue(PHONE, "shared")
        app = self.issue(PHONE, "shared", auth=OTHER_KEY)
        self.assertEqual((web[0], app[0]), (202, 202))
        self.assertNotEqual(web[2]["id"], app[2]["id"])
        self.assertSameAnswer(web, self.issue(PHONE, "shared"))
        self.assertSameAnswer(app, self.issue(PHONE, "shared", auth=OTHER_KEY))
        # Another caller's different body under the same key is no reuse.
        self.assertEqual(self.issue(OTHER_PHONE, "only-app", auth=OTHER_KEY)[0], 202)
        self.assertEqual(self.issue(PHONE, "only-app")[0], 202)
        self.settle()
        self.assertEqual(len(self.sms_to(PHONE)), 3)


class ConcurrencyTest(IdemTest):
    def test_ten_at_once_one_decision(self):
        n = 10
        barrier = threading.Barrier(n)
        answers = [None] * n

        def one(i):
            barrier.wait()
            answers[i] = self.issue(PHONE, "burst")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(answers[0][0], 202, answers[0][2])
        for a in answers[1:]:
            self.assertSameAnswer(answers[0], a)
        self.settle()
        self.assertEqual(len(self.sms_to(PHONE)), 1)
        self.assertEqual(len(self.requests_for(PHONE)), 1)
        self.assertEqual(self.requests_for(LATER_PHONE)[0]["decision"], "accepted")
        self.assertEqual(self.metric('otpd_idempotency_total{result="decided"}'), 1)
        self.assertEqual(self.metric('otpd_idempotency_total{result="replayed"}'), n - 1)
        # One take: the next request without a key has two of three left.
        self.assertEqual(self.issue(PHONE)[1]["ratelimit"], '"phone_10m";r=1;t=600')


class InFlightTest(IdemTest):
    """A claim whose owner has not answered, planted the way idem.c writes
    one (the request's keyed hash and an owner token, no answer). The hash
    is keyed with otpd's secret, so it is taken from a real claim of the
    same request under another key."""

    def plant(self, key, px_ms):
        st, _, body = self.issue(PHONE, "probe")
        self.assertEqual(st, 202, body)
        h = self.redis.cmd("HGET", "otpd:idem:%d:%s:probe" % (len("login-web"), "login-web"), "h")
        self.assertTrue(h)
        rkey = "otpd:idem:%d:%s:%s" % (len("login-web"), "login-web", key)
        self.redis.cmd("HSET", rkey, "h", h, "o", "0" * 32)
        self.redis.cmd("PEXPIRE", rkey, px_ms)
        return body

    def test_still_deciding_after_the_wait(self):
        self.plant("slow", 5000)
        t0 = time.monotonic()
        st, h, p = self.issue(PHONE, "slow")
        took = time.monotonic() - t0
        self.assertEqual((st, p["error"], h["retry-after"]), (409, "idempotency_key_in_use", "1"))
        self.assertGreaterEqual(took, 2.0)  # IDEM_WAIT_MS
        self.settle()
        self.assertEqual(len(self.sms_to(PHONE)), 1)  # the probe's
        self.assertEqual(len(self.requests_for(PHONE)), 1)
        self.assertEqual(self.metric('otpd_idempotency_total{result="in_use"}'), 1)

    def test_abandoned_claim_expires_and_the_retry_decides(self):
        probe = self.plant("dead", 300)
        st, _, body = self.issue(PHONE, "dead")
        self.assertEqual(st, 202, body)
        self.assertNotEqual(body["id"], probe["id"])
        self.assertEqual(self.issue(PHONE, "dead")[2], body)
        self.settle()
        self.assertEqual(len(self.sms_to(PHONE)), 2)

    def test_no_code_in_redis(self):
        """The stored request hash is keyed: a verify's body holds the live
        code, and Redis holds only keyed hashes of codes."""
        _, code = self.issue_and_code(PHONE)
        self.assertEqual(self.post("/v1/otp/verify", {"phone": PHONE, "code": code}, "v-probe")[0], 200)
        h = self.redis.cmd("HGET", "otpd:idem:%d:%s:v-probe" % (len("login-web"), "login-web"), "h")
        canon = json.dumps({"phone": PHONE, "code": code}, sort_keys=True, separators=(",", ":"))
        for text in ("verify\n" + canon, "idem:verify\n" + canon):
            self.assertNotEqual(h, hashlib.sha256(text.encode()).hexdigest())
        self.assertNotIn(code, json.dumps(self.redis.cmd("HGETALL", "otpd:idem:9:login-web:v-probe")))


class FailClosedTest(IdemTest):
    def test_store_down(self):
        self.redis.stop()
        st, h, p = self.issue(PHONE, "down-1")
        self.assertEqual((st, p["error"]), (503, "store_unavailable"))
        self.assertGreaterEqual(int(h["retry-after"]), 1)

    def test_store_unavailable_not_stored(self):
        """The claim succeeds but the issue script fails: the 503 is not
        kept, and the retry with the same key is decided afresh."""
        self.assertEqual(self.issue(PHONE)[0], 202)
        keys = [k for k in self.redis.cmd("KEYS", "*") if PHONE in k]
        self.assertTrue(keys)
        for k in keys:
            self.redis.cmd("DEL", k)
            self.redis.cmd("SET", k, "not a hash")  # WRONGTYPE for the script
        st, _, p = self.issue(PHONE, "retry-me")
        self.assertEqual((st, p["error"]), (503, "store_unavailable"))
        for k in keys:
            self.redis.cmd("DEL", k)
        # The breaker saw one failure of three: the retry goes through.
        st, h, body = self.issue(PHONE, "retry-me")
        self.assertEqual(st, 202, body)
        self.assertSameAnswer((st, h, body), self.issue(PHONE, "retry-me"))
        self.settle()
        self.assertEqual([r["decision"] for r in self.requests_for(PHONE)],
                         ["accepted", "store_unavailable", "accepted"])


if __name__ == "__main__":
    unittest.main()
