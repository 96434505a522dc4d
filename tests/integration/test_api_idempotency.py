"""Idempotency-Key on POST /v1/otp and /v1/otp/verify (docs/architecture.md,
"A request's path"; issue 8).

The same key from the same caller within 24 h replays the first answer
(status, body, Retry-After and RateLimit headers) and nothing else happens:
no limit taken, no SMS, no ledger row. The same key with another request is
422 idempotency_key_reused. Two identical requests at once get one decision.
A key is 1 to 64 printable ASCII bytes, else 400 invalid_request. A 503
store_unavailable is never stored: a retry is decided afresh.

What may fill Redis: only a decision that took something (an accepted issue,
a verify that counted) claims its key, in the same script step as the
decision, so blocks, every rule and the caller's own rate come first and a
refusal leaves nothing; a caller holds at most otp.idempotency_keys keys.
What may decide twice: the answer is stored with the release of its message,
in one step, and only while the claim is still the deciding request's, so an
instance that stalled past its claim never sends or answers its own decision.
"""
import hashlib
import http.client
import json
import re
import signal
import sqlite3
import threading
import time
import unittest

import harness
from fleet import FleetTest, message_id
from harness import OTHER_KEY, OtpdTest, wait_until
from luascript import limits_script, limits_script_sha
from netproxy import NetProxy

PHONE = "+919812345678"
OTHER_PHONE = "+919812345679"
LATER_PHONE = "+919812345670"
# The headers a replay must repeat exactly.
REPLAYED = ("content-type", "retry-after", "ratelimit-policy", "ratelimit")
ADMIN_KEY = "key-ops-admin-0123456789ab"


def idem_keys(redis):
    """The Idempotency-Keys held in Redis (claims and stored answers)."""
    return redis.cmd("KEYS", "otpd:idem:*") or []


def count_key(caller):
    """The sorted set of the keys caller holds."""
    return "otpd:idemc:" + caller.encode().hex()


def keyed_issue(otpd, phone, key, **kw):
    return otpd.call("POST", "/v1/otp", {"phone": phone}, headers={"Idempotency-Key": key}, **kw)


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


class IdemReplayTest(IdemTest):
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


class RefusalTest(IdemTest):
    """A refusal is not kept. (The refusal cache is off: the test ends a
    refusal behind otpd's back, which that cache would not see.)"""

    def configure(self, cfg):
        cfg["refusal_cache"] = {"max_entries": 0}
        return cfg

    def test_refusal_not_kept(self):
        """A refusal took nothing: it leaves no key, and the same key is
        decided afresh once the limit allows."""
        for _ in range(3):
            self.assertEqual(self.issue(PHONE)[0], 202)
        first = self.issue(PHONE, "r-1")
        self.assertEqual((first[0], first[2]["error"]), (429, "rate_limited"), first[2])
        self.assertTrue(first[1]["retry-after"])
        self.assertEqual(first[1]["ratelimit-policy"], '"phone_10m";q=3;w=600')
        self.assertEqual(idem_keys(self.redis), [])
        self.redis.cmd("HDEL", "otp:{%s}" % PHONE, self.field("phone_10m"))  # the window, over
        st, _, body = self.issue(PHONE, "r-1")
        self.assertEqual(st, 202, body)
        self.assertEqual(self.issue(PHONE, "r-1")[2], body)
        self.settle()
        self.assertEqual([r["http_status"] for r in self.requests_for(PHONE)], [202, 202, 202, 429, 202])

    def test_verify_refusal_not_kept(self):
        """No live code: 404, not kept; the same key verifies once a code is out."""
        st, _, p = self.post("/v1/otp/verify", {"phone": PHONE, "code": "123456"}, "v-early")
        self.assertEqual((st, p["error"]), (404, "no_active_code"))
        self.assertEqual(idem_keys(self.redis), [])
        _, code = self.issue_and_code(PHONE)
        st, _, p = self.post("/v1/otp/verify", {"phone": PHONE, "code": code}, "v-early")
        self.assertEqual(st, 200, p)
        # Not a refusal: kept, with the first answer.
        self.assertEqual(self.post("/v1/otp/verify", {"phone": PHONE, "code": code}, "v-early")[2], p)


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


class IdemConcurrencyTest(IdemTest):
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
    """A claim whose owner has not answered yet: a real key's claim with its
    answer taken away, as an owner stalled between its decision and its
    commit leaves it."""

    def plant(self, key, px_ms):
        st, _, body = self.issue(PHONE, key)
        self.assertEqual(st, 202, body)
        (rkey,) = idem_keys(self.redis)
        self.assertEqual(self.redis.cmd("HDEL", rkey, "a"), 1)
        self.redis.cmd("PEXPIRE", rkey, px_ms)
        return body

    def test_the_answer_arriving_during_the_wait_is_replayed(self):
        """A duplicate that finds the key claimed but unanswered waits for
        the first request's answer and repeats it: not a second decision,
        and not a 409 while the answer is on its way."""
        st, _, first = self.issue(PHONE, "late")
        self.assertEqual(st, 202, first)
        (rkey,) = idem_keys(self.redis)
        answer = self.redis.cmd("HGET", rkey, "a")
        self.assertEqual(self.redis.cmd("HDEL", rkey, "a"), 1)
        later = threading.Timer(0.4, lambda: self.redis.cmd("HSET", rkey, "a", answer))
        later.start()
        try:
            t0 = time.monotonic()
            st, _, body = self.issue(PHONE, "late")
            took = time.monotonic() - t0
        finally:
            later.join()
        self.assertEqual((st, body), (202, first))
        self.assertGreaterEqual(took, 0.3)
        self.settle()
        self.assertEqual(len(self.sms_to(PHONE)), 1)
        self.assertEqual(self.metric('otpd_idempotency_total{result="replayed"}'), 1)
        self.assertEqual(self.metric('otpd_idempotency_total{result="in_use"}'), 0)

    def test_still_deciding_after_the_wait(self):
        self.plant("slow", 5000)
        t0 = time.monotonic()
        st, h, p = self.issue(PHONE, "slow")
        took = time.monotonic() - t0
        self.assertEqual((st, p["error"], h["retry-after"]), (409, "idempotency_key_in_use", "1"))
        self.assertGreaterEqual(took, 2.0)  # IDEM_WAIT_MS
        self.settle()
        self.assertEqual(len(self.sms_to(PHONE)), 1)  # the plant's
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
        (rkey,) = idem_keys(self.redis)
        h = self.redis.cmd("HGET", rkey, "h")
        canon = json.dumps({"phone": PHONE, "code": code}, sort_keys=True, separators=(",", ":"))
        for text in ("verify\n" + canon, "idem:verify\n" + canon):
            self.assertNotEqual(h, hashlib.sha256(text.encode()).hexdigest())
        self.assertNotIn(code, json.dumps(self.redis.cmd("HGETALL", rkey)))


class IdemFailClosedTest(IdemTest):
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


class IdemFloodTest(IdemTest):
    """Only a decision that took something keeps its key: a blocked caller,
    or one over its own rate, sending a fresh key with each request leaves
    nothing in Redis (each such refusal was once kept for 24 h)."""
    env = {"OTPD_KEY_OPS": ADMIN_KEY}
    limits = [{"name": "caller_rate", "key": "api_key", "algorithm": "token_bucket", "limit": 2, "window": "1h",
               "burst": 2},
              {"name": "caller_verify", "key": "api_key", "algorithm": "fixed_window", "limit": 1, "window": "1h",
               "on": "verify"}]
    N = 30

    def configure(self, cfg):
        cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
        return cfg

    def test_blocked_caller_leaves_no_key(self):
        st, _, row = self.otpd.call("POST", "/v1/admin/blocks", {"match": {"api_key": "login-web"},
                                                                 "expires_in": "1h"}, auth=ADMIN_KEY)
        self.assertEqual(st, 201, row)
        wait_until(lambda: self.otpd.verify(PHONE, "123456")[0] == 403, what="the block in force")
        for i in range(self.N):
            st, _, p = self.issue(PHONE, "b-%d" % i)
            self.assertEqual((st, p["error"]), (403, "blocked"))
            st, _, p = self.post("/v1/otp/verify", {"phone": PHONE, "code": "123456"}, "bv-%d" % i)
            self.assertEqual((st, p["error"]), (403, "blocked"))
        self.assertEqual(idem_keys(self.redis), [])
        self.assertEqual(self.redis.cmd("EXISTS", count_key("login-web")), 0)

    def test_caller_over_its_rate_leaves_no_key(self):
        for i in range(self.N):
            st, _, p = self.issue("+9198123%05d" % i, "o-%d" % i)
            self.assertEqual(st, 202 if i < 2 else 429, p)
        self.assertEqual(len(idem_keys(self.redis)), 2)  # the two accepted
        for i in range(self.N):
            st, _, p = self.post("/v1/otp/verify", {"phone": PHONE, "code": "123456"}, "ov-%d" % i)
            self.assertEqual(st, 404 if i == 0 else 429, p)
        # The first verify took the caller's one verify (a decision: kept);
        # the refusals after it left nothing.
        self.assertEqual(len(idem_keys(self.redis)), 3)
        self.assertEqual(self.redis.cmd("ZCARD", count_key("login-web")), 3)


class CapTest(IdemTest):
    """A caller holds at most otp.idempotency_keys keys: past that, a new
    key is refused (429, reason idempotency_keys) until its oldest lapses."""

    def configure(self, cfg):
        cfg["otp"]["idempotency_keys"] = 3
        return cfg

    def test_per_caller_bound(self):
        phones = ["+91981230%04d" % i for i in range(6)]
        firsts = [self.issue(phones[i], "c-%d" % i) for i in range(3)]
        for f in firsts:
            self.assertEqual(f[0], 202, f[2])
        st, h, p = self.issue(phones[3], "c-3")
        self.assertEqual((st, p["error"], p.get("reason")), (429, "rate_limited", "idempotency_keys"), p)
        self.assertGreater(int(h["retry-after"]), 86000)
        self.assertEqual(len(idem_keys(self.redis)), 3)
        # The keys held still replay; a request without a key, and another
        # caller's key, are not this caller's bound.
        self.assertSameAnswer(firsts[0], self.issue(phones[0], "c-0"))
        self.assertEqual(self.issue(phones[3])[0], 202)
        self.assertEqual(self.issue(phones[4], "c-3", auth=OTHER_KEY)[0], 202)
        # The oldest key's day ends (its end moved to now): its place is free.
        ck = count_key("login-web")
        oldest = self.redis.cmd("ZRANGE", ck, 0, 0)[0]
        self.redis.cmd("DEL", oldest)
        self.redis.cmd("ZADD", ck, "XX", 1, oldest)
        st, _, body = self.issue(phones[5], "c-5")
        self.assertEqual(st, 202, body)
        self.assertEqual(self.redis.cmd("ZCARD", ck), 3)
        self.settle()
        self.assertEqual(self.metric('otpd_refusals_total{rule="idempotency_keys"}'), 1)


class IdemScriptTest(IdemTest):
    """verify.lua's part in a key and the fenced commit (issue.lua's op 'C'),
    run directly (EVAL of the tree's source): the claim is written only by a
    decision that took something, given up by its abandon, and an answer is
    kept only while the claim is still its request's."""
    K = "otp:{%s}" % PHONE
    SCOPE = "s" * 12
    RIGHT, WRONG = "r" * 16, "w" * 16
    IK, CK = "otpd:idem:" + "a" * 32, "otpd:idemc:ab"

    @staticmethod
    def source(name):
        return limits_script(name)

    def rtime_ms(self):
        s, us = self.redis.cmd("TIME")
        return int(s) * 1000 + int(us) // 1000

    def verify(self, rid, guess, max_keys=5):
        return self.redis.cmd("EVAL", self.source("verify.lua"), 4, self.K, self.IK, self.CK, "otp:u:" + rid,
                              "v", guess, "3", "", "10", "3600000", "0", "30000", self.SCOPE, "0", "0",
                              "2", "h" * 32, "10000", str(max_keys))

    def abandon(self, rid):
        return self.redis.cmd("EVAL", self.source("verify.lua"), 4, self.K, self.IK, self.CK, "otp:u:" + rid,
                              "a", "", "", "", "", "", "", "30000")

    def commit(self, rid, text):
        return self.redis.cmd("EVAL", self.source("issue.lua"), 3, self.IK, self.CK, "otp:u:" + rid,
                              "C", "", text, "86400000")

    def live(self):
        self.redis.cmd("HSET", self.K, self.SCOPE, "1" * 32 + self.RIGHT + "%d:0" % 10 ** 13)

    def issue_script(self, op, rid, answer=None):
        """issue.lua with the key (on a stream and holds of the test's own,
        t:q and t:holds, which no sender reads); op 'C' commits with answer."""
        keys = [self.K, self.IK, self.CK, "t:q", "t:holds", "otp:msg:m" + rid, "otp:u:" + rid]
        if op == "C":
            return self.redis.cmd("EVAL", self.source("issue.lua"), 6, *(keys[1:] + ["C", "m%s:%s" % (rid, rid),
                                                                                      answer, "86400000"]))
        args = [op, "v" * 32, "h" * 16, 300000, 3, -1, 0, 0, 0, 30000, self.SCOPE, 0,
                100, 10000, "m" + rid, "login-web", "", PHONE, 0, 0, "",
                2, "h" * 32, 10000, 5]
        return self.redis.cmd("EVAL", self.source("issue.lua"), len(keys), *(keys + [str(a) for a in args]))

    def attempts(self):
        return int(self.redis.cmd("HGET", self.K, self.SCOPE).split(":")[-1])

    def test_a_verify_claims_its_key_and_its_abandon_gives_it_up(self):
        self.live()
        self.assertEqual(self.verify("r1", self.WRONG)[0], "wrong")
        self.assertEqual(self.redis.cmd("HMGET", self.IK, "h", "o", "a"), ["h" * 32, "r1", None])
        self.assertTrue(0 < self.redis.cmd("PTTL", self.IK) <= 10000)
        self.assertEqual(self.redis.cmd("ZCARD", self.CK), 1)
        # Another request with the key: taken, nothing counted.
        self.assertEqual(self.verify("r2", self.WRONG)[0], "taken")
        self.assertEqual(self.attempts(), 1)
        # The abandon gives back the attempt and the key.
        self.assertEqual(self.abandon("r1"), 1)
        self.assertEqual(self.attempts(), 0)
        self.assertEqual((self.redis.cmd("EXISTS", self.IK), self.redis.cmd("ZCARD", self.CK)), (0, 0))

    def test_an_issue_claims_its_key_and_its_abandon_gives_it_up(self):
        self.assertEqual(self.issue_script("i", "r1")[0], 1)
        self.assertEqual(self.redis.cmd("HMGET", self.IK, "h", "o", "a"), ["h" * 32, "r1", None])
        self.assertEqual(self.issue_script("i", "r2")[0], -2)  # another request's key: nothing taken
        self.assertEqual(self.redis.cmd("ZCARD", "t:holds"), 1)
        self.assertEqual(self.issue_script("a", "r1"), 1)
        self.assertEqual((self.redis.cmd("EXISTS", self.IK), self.redis.cmd("ZCARD", self.CK)), (0, 0))
        self.assertEqual(self.redis.cmd("ZCARD", "t:holds"), 0)

    def test_an_abandon_after_the_release_takes_the_answer_back_with_the_message(self):
        """The release ran but its reply was lost (the instance answered
        503): its abandon ends the message unsent, and the answer kept with
        the release goes too, so a retry is decided afresh."""
        self.assertEqual(self.issue_script("i", "r1")[0], 1)
        self.assertEqual(self.issue_script("C", "r1", "202 of r1"), 1)
        self.assertEqual(self.redis.cmd("HGET", self.IK, "a"), "202 of r1")
        self.assertEqual(self.redis.cmd("HGET", "otp:msg:mr1", "s"), "queued")
        self.assertEqual(self.issue_script("a", "r1"), 0)
        self.assertEqual(self.redis.cmd("HGET", "otp:msg:mr1", "s"), "failed")
        self.assertEqual((self.redis.cmd("EXISTS", self.IK), self.redis.cmd("ZCARD", self.CK)), (0, 0))

    def test_the_commit_is_fenced_by_the_claim(self):
        self.live()
        self.assertEqual(self.verify("r1", self.WRONG)[0], "wrong")
        # Its claim lapsed, and another request claimed the key since.
        self.redis.cmd("HSET", self.IK, "o", "r9")
        self.assertEqual(self.commit("r1", "answer of r1"), -1)
        self.assertIsNone(self.redis.cmd("HGET", self.IK, "a"))
        self.redis.cmd("HSET", self.IK, "o", "r1")
        self.assertEqual(self.commit("r1", "answer of r1"), 1)
        self.assertEqual(self.redis.cmd("HGET", self.IK, "a"), "answer of r1")
        self.assertTrue(86000000 < self.redis.cmd("PTTL", self.IK) <= 86400000)
        self.assertGreater(float(self.redis.cmd("ZSCORE", self.CK, self.IK)), self.rtime_ms() + 86000000)
        self.assertEqual(self.redis.cmd("EXISTS", "otp:u:r1"), 0)

    def test_at_its_cap_a_caller_is_refused_before_anything_is_taken(self):
        self.live()
        now = self.rtime_ms()
        self.redis.cmd("ZADD", self.CK, now + 60000, "otpd:idem:x1", now + 90000, "otpd:idem:x2",
                       now - 1, "otpd:idem:lapsed")
        r = self.verify("r1", self.WRONG, max_keys=2)
        self.assertEqual(r[0], "keys", r)
        self.assertTrue(55000 < r[3] <= 60000, r)  # until the oldest key held lapses
        self.assertEqual((self.attempts(), self.redis.cmd("EXISTS", self.IK)), (0, 0))
        self.assertEqual(self.redis.cmd("ZCARD", self.CK), 2)  # the lapsed one pruned
        self.assertEqual(self.verify("r2", self.WRONG, max_keys=3)[0], "wrong")


class StaleOwnerTest(FleetTest):
    """An instance stopped (SIGSTOP) between its decision and the commit of
    its message, for longer than its claim lives: another instance decides
    the key; the stopped one, woken, neither sends its own message nor gives
    its own answer, but the stored one. It is held at that point by what the
    test controls: its ledger's write lock, taken here (BEGIN IMMEDIATE),
    which its rows wait on between the decision and the release."""
    n = 2

    def rtime_ms(self):
        s, us = self.redis.cmd("TIME")
        return int(s) * 1000 + int(us) // 1000

    def test_woken_owner_answers_the_stored_answer(self):
        a, b = self.fleet[0], self.fleet[1]
        got = []
        t = threading.Thread(target=lambda: got.append(keyed_issue(a, PHONE, "stale", timeout=60)))
        lock = sqlite3.connect(a.config["ledger"]["path"], timeout=5, isolation_level=None)
        stopped = False
        try:
            lock.execute("BEGIN IMMEDIATE")
            t.start()
            held = wait_until(lambda: self.redis.cmd("ZRANGE", "otp:holds", 0, -1, "WITHSCORES"),
                              what="A's decision, held")
            a.proc.send_signal(signal.SIGSTOP)
            stopped = True
            lock.rollback()
            lapse_ms = float(held[1])
            wait_until(lambda: self.rtime_ms() > lapse_ms + 50 and not idem_keys(self.redis), timeout=20,
                       step=0.1, what="A's hold and claim to lapse")
            st, _, body = keyed_issue(b, PHONE, "stale")
            self.assertEqual(st, 202, body)
        finally:
            lock.close()
            if stopped:
                a.proc.send_signal(signal.SIGCONT)
        t.join(60)
        self.assertEqual(len(got), 1)
        self.assertEqual((got[0][0], got[0][2]), (202, body))
        # One SMS, B's; A's message ended unsent in A's ledger.
        self.wait_provider_count(1)
        wait_until(lambda: a.rows("SELECT state FROM messages") == [{"state": "failed"}],
                   what="A's message to end unsent")
        time.sleep(1)
        self.assertEqual([message_id(r) for r in self.requests()], [body["id"]])


class LostReleaseReplyTest(FleetTest):
    """The answer is kept in the same step as the release of its message:
    an instance cut off from Redis just after its release went out (its
    reply lost: the instance answers 503) leaves that answer for the retry,
    which never decides the key again (a second SMS)."""
    n = 2

    def configure(self, cfg, i):
        if i == 0:
            self.proxy = NetProxy(self.redis.port)
            cfg["redis"] = dict(cfg["redis"], url="redis://127.0.0.1:%d/0" % self.proxy.port)
        return cfg

    def tearDown(self):
        proxy = getattr(self, "proxy", None)
        if proxy is not None:
            proxy.set_mode("pass")  # so that instance stops as it should
        try:
            super().tearDown()
        finally:
            if proxy is not None:
                proxy.stop()

    def test_the_retry_gets_the_answer_kept_with_the_release(self):
        a, b = self.fleet[0], self.fleet[1]
        sha = limits_script_sha("issue.lua").encode()
        # issue.lua's commit: op 'c', or 'C' with an answer to keep.
        release = re.compile(rb"\r\n\$1\r\n[cC]\r\n")
        self.proxy.trip = lambda data: "blackhole" if sha in data and release.search(data) else None
        st, _, p = keyed_issue(a, PHONE, "lost", timeout=30)
        self.assertEqual((st, p.get("error")), (503, "store_unavailable"), p)
        self.assertEqual(self.proxy.mode, "blackhole", "the release went out")
        # The release ran: the fleet sends its message.
        sent = message_id(self.wait_provider_count(1)[0])
        # A retry gets that attempt's answer, not a second decision.
        def answered():
            r = keyed_issue(b, PHONE, "lost")
            return r if r[0] != 409 else None
        st, _, body = wait_until(answered, timeout=20, step=0.1, what="an answer other than 409")
        self.assertEqual((st, body.get("id")), (202, sent), body)
        self.proxy.set_mode("pass")
        st, _, body = wait_until(lambda: (lambda r: r if r[0] != 503 else None)(keyed_issue(a, PHONE, "lost")),
                                 timeout=10, step=0.2, what="A back")
        self.assertEqual((st, body.get("id")), (202, sent), body)
        time.sleep(1)
        self.assertEqual(self.ids(), [sent])


if __name__ == "__main__":
    unittest.main()
