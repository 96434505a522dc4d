"""The limits over HTTP: each algorithm at its exact boundary, the
problem+json refusals and their Retry-After and RateLimit headers, keying
(absent keys, client_ip /64 and IPv4-mapped), all-or-nothing, atomicity
under concurrency, the wrong-guess lock, the cost cap, shadow mode, SIGHUP
reload, failing closed when Redis is down or stalled, and the Redis keys
(TTL, hash tag, memory per phone).

Windows are short (1-3 s). fixed_window, wrong_guess_cap and cost caps align
to Unix time (Redis's clock, the same host clock here), so those tests
either start at a window boundary or make sure a long window cannot roll
over while they run."""
# It measures time or rates: tests/integration/run.py runs it alone, after the parallel workers.
SERIAL = True
import concurrent.futures
import json
import math
import os
import re
import signal
import threading
import time

from harness import OTHER_KEY, ROOT, OtpdTest, Redis, code_of, duration_ms, wait_until

P = "+919812345678"
P2 = "+919812345679"
P3 = "+919812345670"
POLICY_RE = re.compile(r'^"([a-z0-9_]+)";q=(\d+);w=(\d+)$')
RATELIMIT_RE = re.compile(r'^"([a-z0-9_]+)";r=(\d+);t=(\d+)$')


def wrong_of(code):
    return "%06d" % ((int(code) + 1) % 1000000)


def verification(redis, phone):
    """(vid, hash, exp_ms, attempts) of the phone's one live verification:
    the field of LIMITS_SCOPE_LEN (12) characters in its hash (issue.lua
    packs it), or None."""
    flat = redis.cmd("HGETALL", "otp:{%s}" % phone) or []
    vs = [v for k, v in zip(flat[::2], flat[1::2]) if len(k) == 12]
    if not vs:
        return None
    assert len(vs) == 1, vs
    # "exp:att", or "exp+att" once another issue continued it.
    e, a = re.split(r"[:+]", vs[0][48:])
    return vs[0][:32], vs[0][32:48], int(e), int(a)


class LimitsTest(OtpdTest):
    """Helpers shared by the limit suites."""

    # -- HTTP answers --------------------------------------------------------
    def headers(self, h):
        """(policy, ratelimit) as ((name, q, w), (name, r, t)), or (None, None)."""
        pol, rl = h.get("ratelimit-policy"), h.get("ratelimit")
        if pol is None and rl is None:
            return None, None
        self.assertIsNotNone(pol, "RateLimit without RateLimit-Policy: %r" % h)
        self.assertIsNotNone(rl, "RateLimit-Policy without RateLimit: %r" % h)
        m1, m2 = POLICY_RE.match(pol), RATELIMIT_RE.match(rl)
        self.assertTrue(m1, "bad RateLimit-Policy %r" % pol)
        self.assertTrue(m2, "bad RateLimit %r" % rl)
        self.assertEqual(m1.group(1), m2.group(1), "policy and ratelimit name different rules")
        return ((m1.group(1), int(m1.group(2)), int(m1.group(3))),
                (m2.group(1), int(m2.group(2)), int(m2.group(3))))

    def assert_rl(self, resp, name, q, w, r, t=None):
        """The response's RateLimit fields name rule `name` with q, w and r (and t if given)."""
        pol, rl = self.headers(resp[1])
        self.assertIsNotNone(pol, "no RateLimit headers on %r" % (resp,))
        self.assertEqual(pol, (name, q, w), resp)
        self.assertEqual(rl[:2], (name, r), resp)
        if t is not None:
            self.assertEqual(rl[2], t, resp)
        return rl[2]

    def assert_no_rl(self, resp):
        self.assertNotIn("ratelimit", resp[1], resp)
        self.assertNotIn("ratelimit-policy", resp[1], resp)

    def accepted(self, resp):
        st, h, body = resp
        self.assertEqual(st, 202, body)
        self.assertEqual(h["content-type"], "application/json")
        self.assertEqual(sorted(body), ["expires_in", "id", "resend_after", "verification_id"])
        return body

    def refused(self, resp, status, error, reason=None):
        """Checks a problem+json refusal; returns its Retry-After in seconds."""
        st, h, p = resp
        self.assertEqual(st, status, p)
        self.assertEqual(h["content-type"], "application/problem+json")
        self.assertEqual((p["status"], p["error"]), (status, error), p)
        self.assertEqual(p["type"], "urn:otpd:problem:" + error)
        if reason is None:
            self.assertNotIn("reason", p)
        else:
            self.assertEqual(p.get("reason"), reason, p)
        self.assertIn("retry-after", h, "a %d without Retry-After" % status)
        self.assertRegex(h["retry-after"], r"^\d+$")
        ra = int(h["retry-after"])
        self.assertGreaterEqual(ra, 1)
        self.assertEqual(p.get("retry_after"), ra, p)
        return ra

    # -- Redis ---------------------------------------------------------------
    def rtime_ms(self):
        s, us = self.redis.cmd("TIME")
        return int(s) * 1000 + int(us) // 1000

    def avoid_boundary(self, window_s, need_s):
        """Sleeps past the next Unix-aligned window boundary if fewer than
        need_s seconds are left in the current window."""
        now = self.rtime_ms() / 1000.0
        left = window_s - now % window_s
        if left < need_s:
            time.sleep(left + 0.05)

    def window_start(self, window_s):
        """Sleeps to just after the start of the next Unix-aligned window."""
        now = self.rtime_ms() / 1000.0
        time.sleep(window_s - now % window_s + 0.05)

    def timed_redis(self, fn, *a, **kw):
        """(fn's result, Redis TIME before, Redis TIME after) in ms: the
        server decided at some moment between the two."""
        before = self.rtime_ms()
        r = fn(*a, **kw)
        return r, before, self.rtime_ms()

    def assert_retry_at(self, ra, end_ms, before, after, what="refusal"):
        """Retry-After ra (s) for a refusal that ends at end_ms (Redis time),
        decided at a moment in [before, after]: never early, and rounded up
        by at most one second (never below 1)."""
        lo = max(1, math.ceil((end_ms - after) / 1000.0))
        hi = max(1, math.ceil((end_ms - before) / 1000.0))
        self.assertTrue(lo <= ra <= hi, "%s: Retry-After %ds, but the refusal ends %.3fs to %.3fs after the "
                                        "decision, so it must be in [%d, %d]"
                        % (what, ra, (end_ms - after) / 1000.0, (end_ms - before) / 1000.0, lo, hi))

    def refused_log(self, key, rule, limit, window_ms, fn, *a, **kw):
        """Calls fn(*a, **kw), which sliding-log rule `rule` (its log in
        Redis key `key`) must refuse: 429 rate_limited, Retry-After when the
        limit-th newest entry leaves the window."""
        log = sorted(int(x) for x in self.redis.cmd("HGET", key, self.field(rule)).split())
        self.assertGreaterEqual(len(log), limit, log)
        r, before, after = self.timed_redis(fn, *a, **kw)
        ra = self.refused(r, 429, "rate_limited", rule)
        self.assert_retry_at(ra, log[-limit] + window_ms, before, after, rule)
        self.assert_rl(r, rule, limit, window_ms // 1000, 0, ra)
        return ra

    def lock_end_ms(self, phone, rule, window_ms):
        """When a wrong-guess lock on phone ends: the oldest counted wrong
        guess (rule's log in Redis, at most `limit` times) leaves the window."""
        log = self.redis.cmd("HGET", "otp:{%s}" % phone, self.field(rule)).split()
        return int(log[0]) + window_ms

    def window_end_ms(self, window_ms, at_ms):
        """The end of the Unix-aligned fixed window holding at_ms."""
        return (at_ms // window_ms + 1) * window_ms

    def cost_sums(self):
        """{cap window in ms: minor units reserved in its current window},
        read from the cost hash by the window index each value carries
        ("idx:sum"), so the test does not depend on the fields' names.
        A cap with nothing reserved in its current window reads 0."""
        now = self.rtime_ms()
        flat = self.redis.cmd("HGETALL", "otp:cost") or []
        pairs = [tuple(int(x) for x in v.split(":")) for v in flat[1::2]]
        out = {}
        for cap in self.otpd.config.get("cost", {}).get("caps", []):
            w = duration_ms(cap["window"])
            out[w] = sum(s for i, s in pairs if i == now // w)
        return out

    def state(self):
        """Every key with its type and value, for 'nothing changed' checks;
        but the messages' hashes (otp:msg:<id>), the fleet's send stream
        (otp:q) and its send slots (otp:slot), which the pacer writes as an
        accepted message goes out, whenever that is. (The holds, otp:holds,
        count: a refused or abandoned issue must leave none.)"""
        out = {}
        for k in sorted(self.redis.cmd("KEYS", "*")):
            if k.startswith("otp:msg:") or k in ("otp:q", "otp:slot"):
                continue
            kind = self.redis.cmd("TYPE", k)
            out[k] = self.redis.cmd("HGETALL", k) if kind == "hash" else (kind, self.redis.cmd("DUMP", k))
        return out

    # -- side effects --------------------------------------------------------
    def assert_sms(self, n):
        """Exactly n messages were accepted and exactly n reached the
        provider. Only accepted messages are ever queued, and the barrier is
        every one of them recorded 'sent' (after its provider call): then no
        further call can come for them."""
        self.assertEqual(len(self.otpd.rows("SELECT id FROM messages")), n)
        wait_until(lambda: all(r["state"] == "sent" for r in self.otpd.rows("SELECT state FROM messages")),
                   what="every accepted message to be sent")
        self.assertEqual(len(self.fake.requests()), n)

    def decisions(self, n, kind="issue"):
        """The first n requests of kind in the ledger (refusals are recorded
        without waiting), one entry per request: a 4xx row of one key and
        second stands for its count of requests."""
        sql = "SELECT decision, rule, shadow, http_status, count FROM requests WHERE kind = ? ORDER BY id"

        def expanded():
            return [r for r in self.otpd.rows(sql, kind) for _ in range(r.pop("count"))]
        wait_until(lambda: len(expanded()) >= n, what="%d %s rows in the ledger" % (n, kind))
        return expanded()

    def metric(self, line_prefix):
        st, _, text = self.otpd.call("GET", "/metrics", auth=None)
        self.assertEqual(st, 200)
        for line in text.splitlines():
            if line.startswith(line_prefix + " "):
                return float(line.split()[-1])
        return None


# 1. sliding_log ----------------------------------------------------------------
class SlidingLogTest(LimitsTest):
    limits = [{"name": "phone_2s", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "2s"}]

    def log(self):
        v = self.redis.cmd("HGET", "otp:{%s}" % P, self.field("phone_2s"))
        return [int(x) for x in v.split()] if v else []

    def refused_in_bracket(self):
        """A refusal whose Retry-After is never early: at least the time until
        the entry that must leave does leave, measured against the latest
        moment Redis can have decided, and no more than one second above
        the earliest."""
        log = self.log()
        self.assertEqual(len(log), 3)
        before = self.rtime_ms()
        resp = self.otpd.issue(P)
        after = self.rtime_ms()
        ra = self.refused(resp, 429, "rate_limited", "phone_2s")
        leaves = log[0] + 2000  # the oldest of the last 3 entries; it counts while ts > now - window
        self.assertGreaterEqual(ra * 1000, leaves - after, "Retry-After %ds is earlier than the refusal ends" % ra)
        self.assertLessEqual(ra, math.ceil((leaves - before) / 1000.0))
        self.assertGreaterEqual(ra, 1)
        self.assertLessEqual(ra, 2)
        self.assert_rl(resp, "phone_2s", 3, 2, 0, ra)
        self.assertEqual(self.log(), log, "a refusal wrote to the log")
        return ra

    def test_boundary_slide_and_retry_after(self):
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_2s", 3, 2, 2, 2)
        # Entries 2 and 3 come more than 1 s after entry 1, so that retrying at
        # the rounded-up Retry-After of the 4th cannot also free entry 2.
        time.sleep(1.1)
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_2s", 3, 2, 1)
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_2s", 3, 2, 0)
        # The 4th within the window is refused, until the first entry leaves.
        ra = self.refused_in_bracket()
        t_ra = time.monotonic()
        self.refused(self.otpd.issue(P), 429, "rate_limited", "phone_2s")
        time.sleep(max(0.0, ra - (time.monotonic() - t_ra)))
        # Retrying exactly at Retry-After succeeds: only the first entry left.
        self.accepted(self.otpd.issue(P))
        # Sliding, not fixed: entries 2 and 3 still count, so the next is refused
        # again, and only until entry 2 leaves.
        ra = self.refused_in_bracket()
        time.sleep(ra)
        self.accepted(self.otpd.issue(P))
        self.assert_sms(5)
        rows = self.decisions(8)
        self.assertEqual([(r["decision"], r["rule"], r["http_status"]) for r in rows],
                         [("accepted", None, 202)] * 3 + [("rate_limited", "phone_2s", 429)] * 2 +
                         [("accepted", None, 202), ("rate_limited", "phone_2s", 429), ("accepted", None, 202)])

    def test_other_phone_has_its_own_log(self):
        for _ in range(3):
            self.accepted(self.otpd.issue(P))
        self.refused(self.otpd.issue(P), 429, "rate_limited", "phone_2s")
        r = self.otpd.issue(P2)
        self.accepted(r)
        self.assert_rl(r, "phone_2s", 3, 2, 2)


# 2. fixed_window, token_bucket, resend_delay --------------------------------------
class FixedWindowTest(LimitsTest):
    limits = [{"name": "caller_2s", "key": "api_key", "algorithm": "fixed_window", "limit": 2, "window": "2s"}]

    def test_boundary_and_window_roll(self):
        self.window_start(2)
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "caller_2s", 2, 2, 1)
        r = self.otpd.issue(P2)  # keyed on the API key, not the phone
        self.accepted(r)
        self.assert_rl(r, "caller_2s", 2, 2, 0)
        before = self.rtime_ms()
        r = self.otpd.issue(P3)
        after = self.rtime_ms()
        ra = self.refused(r, 429, "rate_limited", "caller_2s")
        end = (before // 2000 + 1) * 2000  # the window's end on Unix time
        self.assertEqual(after // 2000, before // 2000, "the test straddled a window; machine too slow")
        self.assertGreaterEqual(ra * 1000, end - after)
        self.assertLessEqual(ra, math.ceil((end - before) / 1000.0))
        self.assert_rl(r, "caller_2s", 2, 2, 0, ra)
        # The other API key has its own window.
        r = self.otpd.issue(P3, auth=OTHER_KEY)
        self.accepted(r)
        self.assert_rl(r, "caller_2s", 2, 2, 1)
        # At Retry-After a new window starts with the whole quota.
        time.sleep(ra)
        for left in (1, 0):
            r = self.otpd.issue(P3)
            self.accepted(r)
            self.assert_rl(r, "caller_2s", 2, 2, left)
        self.refused(self.otpd.issue(P), 429, "rate_limited", "caller_2s")
        self.assert_sms(5)


class TokenBucketTest(LimitsTest):
    limits = [{"name": "device_tb", "key": "device", "algorithm": "token_bucket", "limit": 2, "window": "2s",
               "burst": 2}]

    def test_burst_then_refill(self):
        for left in (1, 0):
            r = self.otpd.issue(P, device_id="dev-1")
            self.accepted(r)
            self.assert_rl(r, "device_tb", 2, 2, left)
        r = self.otpd.issue(P, device_id="dev-1")
        ra = self.refused(r, 429, "rate_limited", "device_tb")
        self.assertEqual(ra, 1)  # one token per 1000 ms
        self.assert_rl(r, "device_tb", 2, 2, 0, 1)
        # Another device has its own bucket; a request without a device has none.
        self.accepted(self.otpd.issue(P, device_id="dev-2"))
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_no_rl(r)
        # One token back after Retry-After, not two.
        time.sleep(ra)
        r = self.otpd.issue(P2, device_id="dev-1")
        self.accepted(r)
        self.assert_rl(r, "device_tb", 2, 2, 0)
        self.refused(self.otpd.issue(P2, device_id="dev-1"), 429, "rate_limited", "device_tb")
        # After a whole window the bucket is full again: the burst, then a refusal.
        time.sleep(2.05)
        self.accepted(self.otpd.issue(P3, device_id="dev-1"))
        self.accepted(self.otpd.issue(P3, device_id="dev-1"))
        self.refused(self.otpd.issue(P3, device_id="dev-1"), 429, "rate_limited", "device_tb")
        self.assert_sms(7)


class ResendDelayTest(LimitsTest):
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1s"}]

    def test_immediate_resend_refused_then_ok(self):
        r = self.otpd.issue(P)
        body = self.accepted(r)
        self.assertEqual(body["resend_after"], 1)
        self.assert_rl(r, "resend", 1, 1, 0, 1)
        r = self.otpd.issue(P)
        ra = self.refused(r, 429, "rate_limited", "resend")
        self.assertEqual(ra, 1)
        self.assert_rl(r, "resend", 1, 1, 0, 1)
        # Another phone is not delayed.
        self.accepted(self.otpd.issue(P2))
        time.sleep(ra)
        body2 = self.accepted(self.otpd.issue(P))
        self.assertEqual(body2["resend_after"], 1)
        # The resend carries the same code (same live verification).
        msgs = self.wait_messages(3)
        texts = {m["id"]: m["text"] for m in msgs}
        self.assertEqual(code_of(texts[body["id"]]), code_of(texts[body2["id"]]))
        self.assert_sms(3)


class TokenBucketPolicyTest(LimitsTest):
    """docs/architecture.md, "HTTP": q and w are the rule's limit and window; the
    burst only bounds r."""
    limits = [{"name": "device_tb", "key": "device", "algorithm": "token_bucket", "limit": 4, "window": "2s",
               "burst": 2}]

    def test_policy_q_is_the_limit(self):
        r = self.otpd.issue(P, device_id="dev-1")
        self.accepted(r)
        pol, rl = self.headers(r[1])
        self.assertEqual(rl[:2], ("device_tb", 1))
        self.assertEqual(pol, ("device_tb", 4, 2), "RateLimit-Policy q must be the rule's limit (4), not its burst")


class LongestRefusalTest(LimitsTest):
    """When several rules refuse, Retry-After is the longest of them."""
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1s"},
              {"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "3s"}]

    def test_retry_after_is_the_longest_refusal(self):
        self.accepted(self.otpd.issue(P))
        r = self.otpd.issue(P)
        ra = self.refused(r, 429, "rate_limited", "phone_1")
        self.assertEqual(ra, 3)
        self.assert_rl(r, "phone_1", 1, 3, 0, 3)
        time.sleep(1.1)  # the resend delay is over, the sliding log is not
        self.refused(self.otpd.issue(P), 429, "rate_limited", "phone_1")
        time.sleep(ra - 1.1)
        self.accepted(self.otpd.issue(P))
        self.assert_sms(2)


class LockAndLimitTest(LimitsTest):
    """A lock is the reason, but Retry-After waits for every refusal."""
    SERIAL = False  # measures no time or rate: runs beside the other workers

    limits = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10m"},
              {"name": "wrong_1", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 1, "window": "1m"}]

    def test_retry_after_covers_the_longer_limit(self):
        self.accepted(self.otpd.issue(P))
        r, before, after = self.timed_redis(self.otpd.verify, P, "000000")  # the first wrong guess locks
        ra = self.refused(r, 429, "locked", "wrong_1")
        self.assert_retry_at(ra, self.lock_end_ms(P, "wrong_1", 60000), before, after, "the lock alone")
        entry = int(self.redis.cmd("HGET", "otp:{%s}" % P, self.field("phone_1")))
        r, before, after = self.timed_redis(self.otpd.issue, P)
        ra = self.refused(r, 429, "locked", "wrong_1")
        # The sliding log refuses until its entry leaves (600 s), the lock for < 60 s.
        self.assert_retry_at(ra, entry + 600000, before, after, "a lock beside a longer limit")


class CostAndLimitTest(LimitsTest):
    limits = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "2s"}]

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"*": 20}, "caps": [{"window": "1h", "max": 20}]}
        return cfg

    def test_retry_after_covers_the_cost_cap(self):
        self.avoid_boundary(3600, 10)
        self.accepted(self.otpd.issue(P))
        r, before, after = self.timed_redis(self.otpd.issue, P)
        ra = self.refused(r, 429, "rate_limited", "phone_1")
        # The cap's hour, not the log's 2 s.
        self.assert_retry_at(ra, self.window_end_ms(3600000, before), before, after, "a limit beside a full cap")


# 3. absent keys ----------------------------------------------------------------
class AbsentKeyTest(LimitsTest):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    limits = [{"name": "dev_one", "key": "device", "algorithm": "sliding_log", "limit": 1, "window": "10s"},
              {"name": "ip_one", "key": "client_ip", "algorithm": "sliding_log", "limit": 1, "window": "10s"}]

    def test_rule_without_its_key_does_not_apply(self):
        for _ in range(3):
            r = self.otpd.issue(P)
            self.accepted(r)
            self.assert_no_rl(r)  # no rule applied, so no RateLimit fields
        r = self.otpd.issue(P, device_id="d1")
        self.accepted(r)
        self.assert_rl(r, "dev_one", 1, 10, 0)
        self.refused_log("otp:d:{d1}", "dev_one", 1, 10000, self.otpd.issue, P, device_id="d1")
        r = self.otpd.issue(P, client_ip="203.0.113.9")
        self.accepted(r)
        self.assert_rl(r, "ip_one", 1, 10, 0)
        self.refused_log("otp:ip:{203.0.113.9}", "ip_one", 1, 10000, self.otpd.issue, P, client_ip="203.0.113.9")
        # Still nothing applies without the keys.
        self.accepted(self.otpd.issue(P))
        self.assertEqual(sorted(self.redis.cmd("KEYS", "otp:d:*") + self.redis.cmd("KEYS", "otp:ip:*")),
                         ["otp:d:{d1}", "otp:ip:{203.0.113.9}"])


# 4. client_ip keying --------------------------------------------------------------
class ClientIpTest(LimitsTest):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    limits = [{"name": "ip_2", "key": "client_ip", "algorithm": "sliding_log", "limit": 2, "window": "10s"}]

    def test_ipv6_slash64(self):
        r = self.otpd.issue(P, client_ip="2001:db8:1:2::1")
        self.accepted(r)
        self.assert_rl(r, "ip_2", 2, 10, 1)
        r = self.otpd.issue(P2, client_ip="2001:db8:1:2:ffff:ffff:ffff:ffff")
        self.accepted(r)
        self.assert_rl(r, "ip_2", 2, 10, 0)
        self.refused_log("otp:ip:{2001:db8:1:2::/64}", "ip_2", 2, 10000, self.otpd.issue, P3,
                         client_ip="2001:db8:1:2::abcd")
        self.refused(self.otpd.issue(P3, client_ip="2001:0DB8:0001:0002:0000:0000:0000:0009"), 429,
                     "rate_limited", "ip_2")
        # A different /64 (even the neighbouring one) has its own counter.
        r = self.otpd.issue(P3, client_ip="2001:db8:1:3::1")
        self.accepted(r)
        self.assert_rl(r, "ip_2", 2, 10, 1)
        r = self.otpd.issue(P3, client_ip="2001:db8:1:2:1::1")
        self.assertEqual(r[0], 429, "2001:db8:1:2:1::1 is in 2001:db8:1:2::/64")

    def test_ipv4_and_mapped(self):
        r = self.otpd.issue(P, client_ip="198.51.100.7")
        self.accepted(r)
        self.assert_rl(r, "ip_2", 2, 10, 1)
        r = self.otpd.issue(P2, client_ip="::ffff:198.51.100.7")
        self.accepted(r)
        self.assert_rl(r, "ip_2", 2, 10, 0)
        self.refused(self.otpd.issue(P3, client_ip="198.51.100.7"), 429, "rate_limited", "ip_2")
        self.refused(self.otpd.issue(P3, client_ip="::FFFF:198.51.100.7"), 429, "rate_limited", "ip_2")
        # IPv4 is keyed on the whole address.
        r = self.otpd.issue(P3, client_ip="198.51.100.8")
        self.accepted(r)
        self.assert_rl(r, "ip_2", 2, 10, 1)
        self.assert_sms(3)

    def test_malformed_client_ip_is_400_and_takes_nothing(self):
        self.accepted(self.otpd.issue(P, client_ip="198.51.100.7"))
        self.assert_sms(1)
        before = self.state()
        for ip in ("198.51.100", "1.2.3.4.5", "198.51.100.256", "2001:db8::1::2", "fe80::1%eth0",
                   "2001:db8:1:3::1/64", " 198.51.100.7", "198.51.100.7 ", "", "localhost", "::ffff:1.2.3",
                   "x" * 100):
            st, h, p = self.otpd.issue(P2, client_ip=ip)
            self.assertEqual((st, p.get("error")), (400, "invalid_request"), ip)
            self.assertEqual(h["content-type"], "application/problem+json")
            self.assert_no_rl((st, h, p))
            st, _, p = self.otpd.verify(P, "123456", client_ip=ip)
            self.assertEqual((st, p.get("error")), (400, "invalid_request"), ip)
        self.assertEqual(self.state(), before, "a malformed client_ip changed Redis")
        self.assert_sms(1)
        # The counter of the well-formed address is where it was: one left.
        r = self.otpd.issue(P2, client_ip="198.51.100.7")
        self.accepted(r)
        self.assert_rl(r, "ip_2", 2, 10, 0)


# 5. all or nothing -------------------------------------------------------------------
class AllOrNothingTest(LimitsTest):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    limits = [{"name": "phone_3", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "10s"},
              {"name": "dev_1", "key": "device", "algorithm": "sliding_log", "limit": 1, "window": "10s"},
              {"name": "caller_10", "key": "api_key", "algorithm": "fixed_window", "limit": 10, "window": "1h"}]

    def test_refusal_takes_nothing_and_sends_nothing(self):
        self.avoid_boundary(3600, 30)
        r = self.otpd.issue(P, device_id="d")
        self.accepted(r)
        self.assert_rl(r, "dev_1", 1, 10, 0)
        self.assert_sms(1)
        before = self.state()
        for _ in range(4):
            self.refused_log("otp:d:{d}", "dev_1", 1, 10000, self.otpd.issue, P, device_id="d")
        self.assertEqual(self.state(), before, "a refusal changed Redis")
        # The phone and the caller quotas are intact: 2 more for the phone.
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_3", 3, 10, 1)
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_3", 3, 10, 0)
        self.refused_log("otp:{%s}" % P, "phone_3", 3, 10000, self.otpd.issue, P)
        # The caller's window counted only the 3 accepted requests.
        r = self.otpd.issue(P2)
        self.accepted(r)
        self.assert_rl(r, "phone_3", 3, 10, 2)
        self.assertEqual(self.redis.cmd("HGET", "otp:k:{login-web}", self.field("caller_10")).split(":")[1], "4")
        self.assert_sms(4)
        rows = self.decisions(9)
        self.assertEqual([(r["decision"], r["rule"]) for r in rows],
                         [("accepted", None)] + [("rate_limited", "dev_1")] * 4 + [("accepted", None)] * 2 +
                         [("rate_limited", "phone_3"), ("accepted", None)])


# 6. atomicity under concurrency ------------------------------------------------------------
class ConcurrencyTest(LimitsTest):
    limits = [{"name": "phone_5", "key": "phone", "algorithm": "sliding_log", "limit": 5, "window": "30s"}]

    def configure(self, cfg):
        cfg["redis"]["timeout_ms"] = 2000  # a loaded machine must not turn a decision into a 503
        cfg["http_threads"] = 8
        return cfg

    def test_60_concurrent_issues_5_accepted(self):
        n = 60
        gate = threading.Barrier(n)

        def one(_):
            gate.wait()
            return self.otpd.call("POST", "/v1/otp", {"phone": P}, timeout=30)[0]

        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            statuses = list(ex.map(one, range(n)))
        self.assertEqual((statuses.count(202), statuses.count(429)), (5, 55), statuses)
        self.assertEqual(len(self.redis.cmd("HGET", "otp:{%s}" % P, self.field("phone_5")).split()), 5)
        self.assert_sms(5)
        rows = self.decisions(n)
        self.assertEqual(sum(r["decision"] == "accepted" for r in rows), 5)
        self.assertEqual(sum(r["decision"] == "rate_limited" for r in rows), 55)
        # One live verification: every accepted SMS carries the same code.
        self.assertEqual(len({code_of(m["text"]) for m in self.fake.messages()}), 1)


# 7. wrong_guess_cap ------------------------------------------------------------------------
class WrongGuessCapTest(LimitsTest):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    limits = [{"name": "wrong_codes", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 3, "window": "1h"}]

    def configure(self, cfg):
        cfg["otp"]["max_attempts"] = 5
        return cfg

    def test_lock_across_codes(self):
        body, code = self.issue_and_code(P)
        r, before, after = self.timed_redis(self.otpd.verify, P, wrong_of(code))
        self.assertEqual((r[0], r[2]["error"], r[2]["attempts_left"]), (422, "invalid_code", 4), r[2])
        self.assertEqual(r[1]["content-type"], "application/problem+json")
        t = self.assert_rl(r, "wrong_codes", 3, 3600, 2)
        # The wrong-guess window slides: the lock ends an hour after the
        # oldest counted guess, here the first.
        end = self.lock_end_ms(P, "wrong_codes", 3600000)
        self.assertTrue(before + 3600000 <= end <= after + 3600000, "the first guess's time in Redis")
        self.assert_retry_at(t, end, before, after, "RateLimit t of the wrong-guess rule")
        r = self.otpd.verify(P, wrong_of(code))
        self.assertEqual((r[0], r[2]["attempts_left"]), (422, 3), r[2])
        self.assert_rl(r, "wrong_codes", 3, 3600, 1)
        r = self.otpd.verify(P, code)
        self.assertEqual((r[0], r[2]), (200, {"verified": True, "verification_id": body["verification_id"]}))
        self.assert_rl(r, "wrong_codes", 3, 3600, 1)
        # A new code: the wrong guesses of the old one still count.
        _, code2 = self.issue_and_code(P)
        r, before, after = self.timed_redis(self.otpd.verify, P, wrong_of(code2))
        ra = self.refused(r, 429, "locked", "wrong_codes")
        self.assert_retry_at(ra, end, before, after, "the lock")
        self.assert_rl(r, "wrong_codes", 3, 3600, 0, ra)
        # Locked: even the right code, and issuing, answer 429 locked, until the lock's end.
        r, before, after = self.timed_redis(self.otpd.verify, P, code2)
        ra = self.refused(r, 429, "locked", "wrong_codes")
        self.assert_retry_at(ra, end, before, after, "the lock on a right code")
        self.assert_rl(r, "wrong_codes", 3, 3600, 0, ra)
        r, before, after = self.timed_redis(self.otpd.issue, P)
        ra = self.refused(r, 429, "locked", "wrong_codes")
        self.assert_retry_at(ra, end, before, after, "the lock on an issue")
        self.assert_rl(r, "wrong_codes", 3, 3600, 0, ra)
        self.assert_sms(2)
        # Another phone is not locked.
        self.accepted(self.otpd.issue(P2))
        rows = self.decisions(5, "verify")
        self.assertEqual([(r["decision"], r["rule"], r["http_status"]) for r in rows],
                         [("invalid_code", None, 422)] * 2 + [("verified", None, 200)] +
                         [("locked", "wrong_codes", 429)] * 2)
        self.assertEqual(self.decisions(4)[2]["decision"], "locked")

    def test_locked_issue_takes_nothing(self):
        _, code = self.issue_and_code(P)
        for left in (4, 3):
            self.assertEqual(self.otpd.verify(P, wrong_of(code))[2]["attempts_left"], left)
        r, t0, t1 = self.timed_redis(self.otpd.verify, P, wrong_of(code))
        end = self.lock_end_ms(P, "wrong_codes", 3600000)
        self.assert_retry_at(self.refused(r, 429, "locked", "wrong_codes"), end, t0, t1, "the lock")
        before = self.state()
        r, t0, t1 = self.timed_redis(self.otpd.issue, P)
        self.assert_retry_at(self.refused(r, 429, "locked", "wrong_codes"), end, t0, t1, "the lock on an issue")
        self.assertEqual(self.state(), before)


# 8. cost cap -------------------------------------------------------------------------------
class CostBase(LimitsTest):
    limits = [{"name": "phone_10", "key": "phone", "algorithm": "sliding_log", "limit": 10, "window": "30s"}]
    cap = 50

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"+91": 20, "+1": 70, "*": 500},
                       "caps": [{"window": "1h", "max": self.cap}]}
        return cfg

    def cost_cap(self, resp, before=None, after=None, window_ms=3600000):
        """A cost_cap 503; with before and after (Redis time around the
        call), its Retry-After is checked against the cap window's end."""
        ra = self.refused(resp, 503, "cost_cap")
        self.assertLessEqual(ra, window_ms // 1000)
        if before is not None:
            self.assert_retry_at(ra, self.window_end_ms(window_ms, before), before, after, "cost cap")
        self.assert_no_rl(resp)
        return ra

    def issue_capped(self, phone):
        """An issue that the hourly cap refuses, Retry-After checked exactly."""
        r, before, after = self.timed_redis(self.otpd.issue, phone)
        return self.cost_cap(r, before, after)


class CostCapTest(CostBase):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    def test_cap_inr(self):
        self.avoid_boundary(3600, 30)
        self.accepted(self.otpd.issue(P))
        self.accepted(self.otpd.issue(P2))
        before = self.state()
        self.issue_capped(P3)
        self.issue_capped(P)
        self.assertEqual(self.state(), before, "a cost refusal changed Redis")
        self.assertEqual(self.cost_sums(), {3600000: 40})
        self.assertIsNone(verification(self.redis, P3), "a cost refusal started a verification")
        self.assert_sms(2)
        rows = self.decisions(4)
        self.assertEqual([(r["decision"], r["http_status"]) for r in rows],
                         [("accepted", 202)] * 2 + [("cost_cap", 503)] * 2)

    def test_us_price_refused_at_once(self):
        self.avoid_boundary(3600, 30)
        self.issue_capped("+14155550100")
        self.assert_sms(0)
        # India still fits: the refusal reserved nothing.
        self.accepted(self.otpd.issue(P))
        self.accepted(self.otpd.issue(P2))
        self.issue_capped(P3)

    def test_star_price_for_other_prefixes(self):
        self.avoid_boundary(3600, 30)
        self.issue_capped("+447400123456")
        self.issue_capped("+8613800138000")
        self.assertEqual(self.cost_sums(), {3600000: 0})
        self.assert_sms(0)


class CostStarTest(CostBase):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    cap = 1000

    def test_star_price_is_500(self):
        # "*" is 500: exactly two fit under 1000, then even a 20 does not.
        self.avoid_boundary(3600, 30)
        self.accepted(self.otpd.issue("+447400123456"))
        self.accepted(self.otpd.issue("+33612345678"))
        self.issue_capped("+4915112345678")
        self.issue_capped(P)
        self.assertEqual(self.cost_sums(), {3600000: 1000})
        self.assert_sms(2)


# 9. shadow mode ---------------------------------------------------------------------------------
class ShadowTest(LimitsTest):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    limits = [{"name": "phone_shadow", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10s",
               "mode": "shadow"},
              {"name": "phone_enf", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "10s"}]

    def test_shadow_blocks_nothing_is_counted_and_recorded(self):
        for left in (2, 1, 0):
            r = self.otpd.issue(P)
            self.accepted(r)
            self.assert_rl(r, "phone_enf", 3, 10, left)  # never the shadow rule, though it has less room
        self.refused_log("otp:{%s}" % P, "phone_enf", 3, 10000, self.otpd.issue, P)
        self.assert_sms(3)
        rows = self.decisions(4)
        self.assertEqual([(r["decision"], r["shadow"]) for r in rows[:3]],
                         [("accepted", None), ("accepted", "phone_shadow"), ("accepted", "phone_shadow")])
        self.assertEqual(rows[3]["rule"], "phone_enf")
        shadowed = sum(1 for r in rows if r["shadow"] and "phone_shadow" in r["shadow"])
        self.assertEqual(self.metric('otpd_shadow_refusals_total{rule="phone_shadow"}'), shadowed)
        self.assertIn("phone_shadow", self.otpd.log())


class ShadowOnlyTest(LimitsTest):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    limits = [{"name": "dev_shadow", "key": "device", "algorithm": "token_bucket", "limit": 1, "window": "1h",
               "burst": 1, "mode": "shadow"}]

    def test_shadow_alone_sets_no_headers(self):
        for _ in range(3):
            r = self.otpd.issue(P, device_id="d1")
            self.accepted(r)
            self.assert_no_rl(r)
        self.assert_sms(3)
        self.assertEqual(self.metric('otpd_shadow_refusals_total{rule="dev_shadow"}'), 2)
        rows = self.decisions(3)
        self.assertEqual([r["shadow"] for r in rows], [None, "dev_shadow", "dev_shadow"])


class ShadowWrongGuessTest(LimitsTest):
    limits = [{"name": "wrong_shadow", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 2,
               "window": "1h", "mode": "shadow"}]

    def configure(self, cfg):
        cfg["otp"]["max_attempts"] = 5
        return cfg

    def scenario(self):
        """Three wrong guesses (the 2nd reaches the shadow cap), the right
        code, then an issue: enforced, the rule would have refused the last
        four. Shadow, all pass."""
        self.avoid_boundary(3600, 60)
        _, code = self.issue_and_code(P)
        for left in (4, 3, 2):
            r = self.otpd.verify(P, wrong_of(code))
            self.assertEqual((r[0], r[2].get("attempts_left")), (422, left), r[2])
            self.assert_no_rl(r)
        r = self.otpd.verify(P, code)  # an enforced lock would refuse even the right code
        self.assertEqual(r[0], 200)
        self.assert_no_rl(r)
        r = self.otpd.issue(P)  # and this issue
        self.accepted(r)
        self.assert_no_rl(r)
        self.assert_sms(2)
        self.assertEqual([r["shadow"] for r in self.decisions(2)], [None, "wrong_shadow"])
        st, _, text = self.otpd.call("GET", "/metrics", auth=None)
        return [l for l in text.splitlines() if l.startswith("otpd_shadow_refusals_total{")]

    def test_shadow_lock_blocks_nothing_and_is_counted_by_rule_name(self):
        lines = self.scenario()
        self.assertTrue(lines and all('{rule="wrong_shadow"}' in l for l in lines),
                        "shadow refusals must be labelled with the rule's name: %s" % lines)

    def test_right_code_during_shadow_lock_is_a_would_be_refusal(self):
        """Enforced, the lock refuses even the right code (docs/architecture.md,
        "A request's path": 'locked' is checked first), so in shadow that verify is a
        would-be refusal: counted, and recorded on its ledger row."""
        lines = self.scenario()
        verifies = self.decisions(4, "verify")
        self.assertEqual([(r["decision"], r["shadow"]) for r in verifies],
                         [("invalid_code", None), ("invalid_code", "wrong_shadow"), ("invalid_code", "wrong_shadow"),
                          ("verified", "wrong_shadow")])
        total = sum(float(l.split()[-1]) for l in lines)
        self.assertEqual(total, 4, "want 4 would-be lock refusals (guess 2, guess 3, the right code, the issue): "
                                   "%s" % lines)


# 10. RateLimit headers: the enforced rule with the least room -----------------------------------
class HeaderChoiceTest(LimitsTest):
    limits = [{"name": "phone_3", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "10s"},
              {"name": "caller_4", "key": "api_key", "algorithm": "sliding_log", "limit": 4, "window": "20s"},
              {"name": "tight_shadow", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10s",
               "mode": "shadow"}]

    def test_least_remaining_rule(self):
        r = self.otpd.issue(P)  # phone 2 left, caller 3
        self.accept_with(r, "phone_3", 3, 10, 2)
        r = self.otpd.issue(P)  # phone 1, caller 2
        self.accept_with(r, "phone_3", 3, 10, 1)
        r = self.otpd.issue(P2)  # phone(P2) 2, caller 1
        t = self.accept_with(r, "caller_4", 4, 20, 1)
        self.assertTrue(18 <= t <= 20, t)
        r = self.otpd.issue(P3)  # phone(P3) 2, caller 0
        self.accept_with(r, "caller_4", 4, 20, 0)
        oldest = int(self.redis.cmd("HGET", "otp:k:{login-web}", self.field("caller_4")).split()[0])
        r, before, after = self.timed_redis(self.otpd.issue, "+919812345600")
        ra = self.refused(r, 429, "rate_limited", "caller_4")
        self.assert_retry_at(ra, oldest + 20000, before, after, "caller_4")
        self.assert_rl(r, "caller_4", 4, 20, 0, ra)
        # The other key's caller rule has room; the phone rule is now the tightest.
        r = self.otpd.issue(P, auth=OTHER_KEY)  # phone 0, caller(other) 3
        self.accept_with(r, "phone_3", 3, 10, 0)
        self.refused_log("otp:{%s}" % P, "phone_3", 3, 10000, self.otpd.issue, P, auth=OTHER_KEY)

    def accept_with(self, r, *want):
        self.accepted(r)
        return self.assert_rl(r, *want)


# 11. SIGHUP reload ---------------------------------------------------------------------------------
class ReloadTest(LimitsTest):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    limits = [{"name": "phone_a", "key": "phone", "algorithm": "sliding_log", "limit": 5, "window": "30s"}]

    def reload(self, text=None, cfg=None, marker="reloaded"):
        n = self.otpd.log().count(marker)
        if cfg is not None:
            self.otpd.write_config(cfg)
        else:
            with open(self.otpd.conf_path, "w") as f:
                f.write(text)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count(marker) > n, what="otpd to log %r" % marker)

    def rules(self, **rule):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["limits"] = [dict({"name": "phone_a", "key": "phone", "algorithm": "sliding_log", "limit": 5,
                               "window": "30s"}, **rule)]
        return cfg

    def test_tighter_rule_then_bad_files_keep_it(self):
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_a", 5, 30, 4)
        good = self.rules(limit=2)
        self.reload(cfg=good)
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_a", 2, 30, 0)
        self.refused_log("otp:{%s}" % P, "phone_a", 2, 30000, self.otpd.issue, P)

        # Invalid JSON: logged, the limit-2 rule stays.
        self.reload(text='{"listen": "127.0.0.1:1", "limits": [', marker="reload refused")
        self.assertEqual(self.otpd.call("GET", "/healthz", auth=None)[0], 200)
        self.accepted(self.otpd.issue(P2))
        r = self.otpd.issue(P2)
        self.accepted(r)
        self.assert_rl(r, "phone_a", 2, 30, 0)
        self.refused_log("otp:{%s}" % P2, "phone_a", 2, 30000, self.otpd.issue, P2)

        # A bad rule (valid JSON): logged with its path, the old rules stay.
        bad = self.rules(limit=0)
        n = self.otpd.log().count("limits.0.limit")
        self.reload(cfg=bad, marker="reload refused")
        self.assertGreater(self.otpd.log().count("limits.0.limit"), n, self.otpd.log()[-2000:])
        bad2 = self.rules(algorithm="leaky_bucket")
        self.reload(cfg=bad2, marker="reload refused")
        self.assertIn("limits.0.algorithm", self.otpd.log())
        self.accepted(self.otpd.issue(P3))
        self.accepted(self.otpd.issue(P3))
        self.refused_log("otp:{%s}" % P3, "phone_a", 2, 30000, self.otpd.issue, P3)

        # A good file after bad ones is taken: a looser rule, a new one beside it.
        looser = self.rules(limit=4)
        looser["limits"].append({"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1s"})
        self.reload(cfg=looser)
        r = self.otpd.issue(P)  # P has 2 in its log: one more fits under 4
        self.accepted(r)
        self.assert_rl(r, "resend", 1, 1, 0)
        self.refused(self.otpd.issue(P), 429, "rate_limited", "resend")
        self.assertEqual(self.otpd.call("GET", "/healthz", auth=None)[0], 200)


# 12. fail closed ------------------------------------------------------------------------------------
class FailClosedTest(LimitsTest):
    limits = [{"name": "phone_2", "key": "phone", "algorithm": "sliding_log", "limit": 2, "window": "1m"}]

    def timed(self, fn, *a, **kw):
        t = time.monotonic()
        r = fn(*a, **kw)
        return r, time.monotonic() - t

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"*": 20}, "caps": [{"window": "1h", "max": 100000}]}
        return cfg

    def unavailable(self, n, phone=P, limit_s=0.5):
        for i in range(n):
            r, took = self.timed(self.otpd.issue, phone)
            self.refused(r, 503, "store_unavailable")
            self.assert_no_rl(r)
            self.assertLess(took, limit_s, "issue %d took %.3fs with Redis down" % (i, took))
        r, took = self.timed(self.otpd.verify, phone, "123456")
        self.refused(r, 503, "store_unavailable")
        self.assertLess(took, limit_s)

    def ready(self):
        return self.otpd.call("GET", "/readyz", auth=None)[0]

    def recover_by_traffic(self, phone=P, timeout=15):
        def ok():
            return self.otpd.issue(phone)[0] == 202 or None
        wait_until(ok, timeout, step=0.2, what="issue 202 after Redis came back")
        self.assertEqual(self.ready(), 200)

    def test_redis_stopped_then_restarted_on_same_port(self):
        port = self.redis.port
        self.redis.stop()
        self.unavailable(6)
        self.assertEqual(self.ready(), 503)
        self.assert_sms(0)
        rows = self.decisions(6)
        self.assertTrue(all(r["decision"] == "store_unavailable" and r["http_status"] == 503 for r in rows))
        # A new redis-server on the same port (empty, no scripts loaded).
        fresh = Redis(self.tmp)
        fresh.port = port
        self.redis = fresh.start()
        self.recover_by_traffic()
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_2", 2, 60, 0)
        self.refused(self.otpd.issue(P), 429, "rate_limited", "phone_2")
        self.assert_sms(2)

    def test_restart_with_a_warm_pool_recovers_fast(self):
        # Warm the connection pool with concurrent requests, then restart Redis.
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: self.otpd.verify("+9198%08d" % i, "123456"), range(64)))
        port = self.redis.port
        self.redis.stop()
        self.unavailable(3)
        fresh = Redis(self.tmp)
        fresh.port = port
        self.redis = fresh.start()
        t0 = time.monotonic()
        wait_until(lambda: self.otpd.issue(P)[0] == 202 or None, 10, step=0.05, what="recovery")
        took = time.monotonic() - t0
        # breaker_open is 1 s in the test config: one probe on a fresh connection is enough.
        self.assertLess(took, 1.5, "recovered after %.2fs" % took)

    def paused_after_warmup(self):
        """One accepted issue first, so otpd has loaded its script and holds
        warm connections (paused before that, the buffered EVALSHAs would
        only meet NOSCRIPT). Then Redis paused: three issues for P2 time out
        (503, the breaker opens), three more and a verify are refused by the
        open breaker. Then Redis resumed, and a barrier: a command on a new
        connection (Redis's event loop reads what was buffered on the old
        ones first), then otpd's own recovery, an issue for P3 that is
        accepted and whose SMS reaches the provider."""
        self.avoid_boundary(3600, 30)
        self.issue_and_code(P)
        self.assertEqual(self.cost_sums(), {3600000: 20})
        self.redis.pause()
        try:
            self.unavailable(3, P2)
            # The breaker is open now: fast 503s without touching Redis, not ready.
            rejects = self.metric("otpd_store_breaker_rejects_total") or 0
            self.assertEqual(self.metric("otpd_store_breaker_open"), 1)
            st, _, p = self.otpd.call("GET", "/readyz", auth=None)
            self.assertEqual((st, p["status"]), (503, "not_ready"))
            for _ in range(3):
                r, took = self.timed(self.otpd.issue, P2)
                self.refused(r, 503, "store_unavailable")
                self.assertLess(took, 0.5)
            self.assertGreaterEqual(self.metric("otpd_store_breaker_rejects_total"), rejects + 1)
        finally:
            self.redis.resume()
        self.assertTrue(self.redis.ping())
        self.recover_by_traffic(P3)
        self.assertEqual(self.metric("otpd_store_breaker_open"), 0)
        self.wait_messages(2)

    def test_redis_paused_breaker_and_recovery(self):
        self.paused_after_warmup()
        # No non-202 answer caused an SMS, a message row or a verification row.
        self.assertEqual(sorted(m["to"] for m in self.fake.messages()), sorted([P, P3]))
        self.assertEqual(sorted(r["phone"] for r in self.otpd.rows("SELECT phone FROM messages")), sorted([P, P3]))
        self.assertEqual(len(self.otpd.rows("SELECT * FROM verifications")), 2)
        sql = "SELECT decision, http_status FROM requests WHERE phone = ? ORDER BY id"
        wait_until(lambda: len(self.otpd.rows(sql, P2)) >= 7, what="the 503s' ledger rows")
        self.assertEqual([(r["decision"], r["http_status"]) for r in self.otpd.rows(sql, P2)],
                         [("store_unavailable", 503)] * 7)
        # P and P3 were decided normally: one more fits under the limit of 2.
        self.accepted(self.otpd.issue(P))
        self.refused(self.otpd.issue(P), 429, "rate_limited", "phone_2")
        st, _, p = self.otpd.verify(P, "123456")
        self.assertIn(st, (200, 422), p)
        self.assert_sms(3)

    # A Redis timeout after the script ran: the EVALSHAs that timed out stay
    # in Redis's socket buffers while it is paused and run when it resumes.
    # Without the abandons (issue 8) P2's sliding log filled, a verification
    # started with no message and the cost went from 40 to 80, all for
    # answers that were 503s.
    def test_redis_paused_503s_take_nothing(self):
        self.paused_after_warmup()
        self.assertEqual(self.redis.cmd("HGETALL", "otp:{%s}" % P2), [],
                         "issues answered 503 left state for P2 after Redis resumed (fields %s: rule %s's log; "
                         "i/h/e/a: a verification without a message)" % (
                             self.redis.cmd("HKEYS", "otp:{%s}" % P2), self.field("phone_2")))
        self.assertEqual(self.cost_sums(), {3600000: 40}, "cost reserved for issues answered 503")
        # Decided as if the 503'd attempts had not happened: the whole quota is there.
        r = self.otpd.issue(P2)
        self.accepted(r)
        self.assert_rl(r, "phone_2", 2, 60, 1)

    def test_breaker_retry_after_not_early(self):
        """While the breaker is open, a 503's Retry-After must not end before
        the breaker lets a request through again."""
        self.otpd.stop()
        self.otpd.config["redis"]["breaker_open"] = "3s"
        self.otpd.start()
        self.redis.pause()
        self.unavailable(3)
        self.assertEqual(self.metric("otpd_store_breaker_open"), 1)
        r = self.otpd.issue(P)
        ra = self.refused(r, 503, "store_unavailable")
        self.redis.resume()
        self.assertTrue(self.redis.ping())
        time.sleep(ra)
        r = self.otpd.issue(P)
        self.assertEqual(r[0], 202, "Redis is back and Retry-After (%ds) has passed, yet %r; the breaker opens "
                                    "for 3 s but the 503 said Retry-After: %d" % (ra, r[2], ra))

    def test_readyz_recovers_without_api_traffic(self):
        """A load balancer stops sending traffic while /readyz is 503, so
        /readyz itself must see Redis come back (docs/architecture.md, "Redis keys
        and scripts": the breaker answers 503 for a few seconds, then probes)."""
        self.redis.pause()
        self.unavailable(3)
        self.assertEqual(self.ready(), 503)
        self.redis.resume()
        try:
            wait_until(lambda: self.ready() == 200, 10, step=0.2, what="/readyz 200 after Redis resumed")
        except AssertionError:
            self.fail("/readyz stayed 503 for 10 s after Redis resumed when only /readyz was polled: "
                      "the open breaker is never probed by /readyz (%s)"
                      % self.otpd.call("GET", "/readyz", auth=None)[2])


# 13. keys: TTL, hash tag, memory per phone ----------------------------------------------------------------
class KeysTest(LimitsTest):
    SERIAL = False  # measures no time or rate: runs beside the other workers

    with open(os.path.join(ROOT, "configs", "dev.json")) as _f:
        _dev = json.load(_f)
    limits = _dev["limits"]

    def configure(self, cfg):
        cfg["cost"] = self._dev["cost"]
        cfg["otp"] = self._dev["otp"]
        cfg["pacer"]["capacity"] = 1000
        return cfg

    def assert_all_expire(self):
        keys = self.redis.cmd("KEYS", "*")
        self.assertTrue(keys)
        for k in keys:
            self.assertTrue(k.startswith("otp:"), k)
            if k == "otp:q":
                # The fleet's send stream and its consumer group live on;
                # it holds only messages not yet ended (pacer.capacity).
                self.assertLessEqual(self.redis.cmd("XLEN", k), 1000)
                continue
            if k == "otp:lanes":
                # The providers' streams any instance ran (a handful of names): read to adopt a removed one's.
                self.assertLessEqual(self.redis.cmd("SCARD", k), 8)
                continue
            ttl = self.redis.cmd("PTTL", k)
            self.assertNotEqual(ttl, -1, "key %s has no expiry" % k)  # -2: expired since KEYS
        return keys

    def test_ttl_hash_tag_and_memory(self):
        self.avoid_boundary(3600, 30)
        _, code = self.issue_and_code(P, device_id="android-7f3a9c", client_ip="203.0.113.7")
        keys = self.assert_all_expire()
        phone_keys = [k for k in keys if P in k]
        self.assertTrue(phone_keys)
        for k in phone_keys:
            self.assertIn("{%s}" % P, k)
        self.assertEqual(phone_keys, ["otp:{%s}" % P])
        # The verification's life bounds the phone key's TTL from below.
        self.assertGreaterEqual(self.redis.cmd("PTTL", "otp:{%s}" % P), 290 * 1000)
        per_phone = sum(self.redis.cmd("MEMORY", "USAGE", k, "SAMPLES", "0") for k in phone_keys)
        fields = self.redis.cmd("HLEN", "otp:{%s}" % P)
        print("\n[limits] bytes per active phone after a typical issue (dev.json rules): %d "
              "(MEMORY USAGE of %s, %d fields, %s)" % (per_phone, ", ".join(phone_keys), fields,
                                                     self.redis.cmd("OBJECT", "ENCODING", phone_keys[0])))
        others = {k: self.redis.cmd("MEMORY", "USAGE", k, "SAMPLES", "0") for k in keys if k not in phone_keys}
        print("[limits] other keys: %s" % others)
        self.assertLessEqual(per_phone, 200)  # the goal: <= 200 B per active phone
        # Wrong guesses and a verify keep every key expiring.
        self.assertEqual(self.otpd.verify(P, wrong_of(code))[0], 422)
        self.assert_all_expire()
        self.assertEqual(self.otpd.verify(P, code)[0], 200)
        self.assert_all_expire()

    def test_memory_many_phones(self):
        self.avoid_boundary(3600, 60)
        n = 100
        nums = ["+9197%08d" % i for i in range(n)]

        def used():
            info = self.redis.cmd("INFO", "memory")
            return int(re.search(r"used_memory:(\d+)", info).group(1))

        self.accepted(self.otpd.issue("+919700000999"))  # warm up the cost and caller keys
        base = used()
        for p in nums:
            self.accepted(self.otpd.issue(p))
        grown = used() - base
        usage = [self.redis.cmd("MEMORY", "USAGE", "otp:{%s}" % p, "SAMPLES", "0") for p in nums]
        print("\n[limits] %d phones: used_memory grew %d bytes (%.0f per phone); MEMORY USAGE per phone key "
              "min %d max %d" % (n, grown, grown / n, min(usage), max(usage)))
        self.assertLessEqual(max(usage), 200)
        self.assert_all_expire()
