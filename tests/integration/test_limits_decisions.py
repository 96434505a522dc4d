"""Decisions that are never lost (issue 8, limits side), against a real
redis-server and the real bin/otpd:

- a Redis that stalls (DEBUG SLEEP, SIGSTOP) after or before the issue
  script ran costs the user nothing: the retry on a fresh connection returns
  the recorded outcome, and a 503's takes are given back (abandon), so the
  retry after a 503 is decided as if the unanswered attempt had not happened;
- both orders of a script and its abandon, run directly in Redis;
- a verification with less than a third of otp.ttl left is replaced;
- resend_after is when the next issue really passes every rule;
- wrong_guess_cap counts over a sliding window;
- cost-cap state is named by the cap's window, not its position.

Times are read from Redis's clock (the scripts' clock); each timed step
keeps at least 0.3 s between the moment it tests and the rule's edge."""
import concurrent.futures
import json
import math
import os
import signal
import socket
import time

import fleet
import harness
from harness import Redis, wait_until
from luascript import limits_script
from test_limits import LimitsTest, verification

P = "+919812345678"
P2 = "+919812345679"
PHONES = ["+91981234567%d" % i for i in range(1, 4)]
PRICE = 100


def wrong_of(code):
    return "%06d" % ((int(code) + 1) % 1000000)


class DebugRedis(Redis):
    """A private redis-server that accepts DEBUG (off by default since Redis 7)."""

    def start(self):
        self.proc = harness.subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--logfile", os.path.join(self.dir, "redis.log"),
             "--enable-debug-command", "local"],
            stdout=harness.subprocess.DEVNULL, stderr=harness.subprocess.DEVNULL)
        wait_until(self.ping, what="redis")
        return self


class DecisionsTest(LimitsTest):
    """Helpers: Redis's clock, the scripts' state, a stalled Redis."""

    def setUp(self):
        orig = harness.Redis
        harness.Redis = DebugRedis
        try:
            super().setUp()
        finally:
            harness.Redis = orig

    def sleep_until(self, redis_ms):
        """Sleeps until Redis's clock reads redis_ms (the test's schedule, not a synchronisation)."""
        left = redis_ms - self.rtime_ms()
        if left > 0:
            time.sleep(left / 1000.0)

    def log_of(self, phone, rule):
        v = self.redis.cmd("HGET", "otp:{%s}" % phone, self.field(rule))
        return [int(x) for x in v.split()] if v else []

    def cost_sum(self, window_ms):
        v = self.redis.cmd("HGET", "otp:cost", "c%d" % window_ms)
        if not v:
            return 0
        idx, s = v.split(":")
        return int(s) if int(idx) == self.rtime_ms() // window_ms else 0

    def undo_keys(self):
        return sorted(self.redis.cmd("KEYS", "otp:u:*"))

    def decision_state(self):
        """Every key but the undo records and the messages' money marks
        (otp:msg:<id>, written by the pacer when a message goes out): what a
        decision depends on."""
        return {k: v for k, v in self.state().items() if not k.startswith(("otp:u:", "otp:msg:"))}

    def debug_sleep(self, seconds):
        """Starts DEBUG SLEEP on its own connection and returns that socket
        once a PING on another connection proves Redis is asleep. First it
        waits until every message has ended: the pacer's money thread marks a
        message's reservation used before it goes out, and while it holds a
        pooled connection the request under test may find none idle; a new
        connection's settings check then stalls with Redis, a plain 503 with
        no script sent (not the retry or the abandon under test)."""
        wait_until(lambda: not self.otpd.rows("SELECT id FROM messages WHERE state IN ('queued', 'sending')"),
                   what="every message to end before Redis sleeps")
        s = socket.create_connection(("127.0.0.1", self.redis.port), timeout=5)
        s.sendall(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$%d\r\n%s\r\n" % (len(str(seconds)), str(seconds).encode()))
        probe = socket.create_connection(("127.0.0.1", self.redis.port), timeout=5)
        probe.settimeout(0.03)
        probe.sendall(b"*1\r\n$4\r\nPING\r\n")
        try:
            probe.recv(16)
            self.fail("Redis answered a PING: DEBUG SLEEP did not start first")
        except socket.timeout:
            pass  # asleep
        finally:
            probe.close()
        return s

    def woke(self, s):
        """Waits for DEBUG SLEEP's reply: Redis is awake again."""
        s.settimeout(10)
        self.assertEqual(s.recv(16), b"+OK\r\n")
        s.close()

    def pending(self):
        return self.metric("otpd_store_abandons_pending")


# 1. a timeout after the script ran -------------------------------------------------------------------
class DebugSleepTest(DecisionsTest):
    limits = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1m"}]

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"*": PRICE}, "caps": [{"window": "1h", "max": 100000}]}
        return cfg

    def test_retry_on_fresh_connection_returns_recorded_outcome(self):
        """The first try times out while Redis sleeps; the retry on a fresh
        connection (sent before Redis wakes) is answered with the outcome the
        first run recorded: one 202, one take, one SMS."""
        self.otpd.stop()
        self.otpd.config["redis"]["timeout_ms"] = 300
        self.otpd.start()
        self.avoid_boundary(3600, 10)
        self.accepted(self.otpd.issue(P2))  # loads the script and warms the pool
        # > one timeout, < two, with 150 ms on each side: the retry's fresh
        # connection also waits for Redis (its settings check), and a loaded
        # machine adds its own delays.
        s = self.debug_sleep(0.45)
        r = self.otpd.issue(P)
        self.woke(s)
        self.accepted(r)
        self.assertEqual(len(self.log_of(P, "phone_1")), 1)
        self.assertEqual(self.cost_sum(3600000), 2 * PRICE)
        self.assert_sms(2)

    def test_sleep_longer_than_both_tries(self):
        """Both tries time out: 503. Redis then runs both buffered calls (the
        first takes, the second finds the record). The retry of the request
        is decided as if the 503'd one had not happened, and no quota or cost
        is left taken without an SMS."""
        self.avoid_boundary(3600, 10)
        self.accepted(self.otpd.issue(P2))
        before = self.decision_state()
        s = self.debug_sleep(0.5)
        self.refused(self.otpd.issue(P), 503, "store_unavailable")
        self.woke(s)
        # The stalled call did run after Redis woke: it took the phone's only slot and the price.
        wait_until(lambda: len(self.log_of(P, "phone_1")) == 1 or None, what="the stalled issue to run")
        # The retry: the instance abandons the 503'd call first, then decides.
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assertEqual(self.metric("otpd_store_abandons_total"), 1)
        self.assertEqual(len(self.log_of(P, "phone_1")), 1)
        self.assertEqual(self.cost_sum(3600000), 2 * PRICE)
        self.refused(self.otpd.issue(P), 429, "rate_limited", "phone_1")
        self.assert_sms(2)
        # Nothing else moved: P's state is the retry's alone.
        after = self.decision_state()
        self.assertEqual(set(after) - set(before), {"otp:{%s}" % P})


class VerifySleepTest(DecisionsTest):
    limits = [{"name": "wrong_codes", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 5, "window": "1h"}]

    def test_unanswered_guesses_cost_nothing(self):
        """A right guess and a wrong one answered 503 ran when Redis woke
        (the first ended the verification, the second counted an attempt);
        the retries are decided as if they had not happened."""
        self.avoid_boundary(3600, 10)
        _, code = self.issue_and_code(P)
        r = self.otpd.verify(P, wrong_of(code))
        self.assertEqual(r[2]["attempts_left"], 2, r[2])
        s = self.debug_sleep(0.5)
        self.refused(self.otpd.verify(P, wrong_of(code)), 503, "store_unavailable")
        self.woke(s)
        # The abandon may run before or after the stalled script (once a second
        # from the main thread, or before the next request): both orders take
        # nothing (ScriptOrderTest runs each), so wait for the abandon itself.
        wait_until(lambda: self.metric("otpd_store_abandons_total") == 1 or None, what="the first abandon")
        r = self.otpd.verify(P, wrong_of(code))
        self.assertEqual((r[0], r[2]["attempts_left"]), (422, 1), r[2])
        self.assertEqual(len(self.log_of(P, "wrong_codes")), 2)
        s = self.debug_sleep(0.5)
        self.refused(self.otpd.verify(P, code), 503, "store_unavailable")
        self.woke(s)
        wait_until(lambda: self.metric("otpd_store_abandons_total") == 2 or None, what="the second abandon")
        r = self.otpd.verify(P, code)
        self.assertEqual(r[0], 200, r[2])
        self.assertEqual(self.metric("otpd_store_abandons_total"), 2)


# 2. SIGSTOP with several issues in flight --------------------------------------------------------------
class StoppedRedisTest(DecisionsTest):
    limits = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1m"},
              {"name": "all_hour", "key": "global", "algorithm": "fixed_window", "limit": 100, "window": "1h"},
              {"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "30s"}]

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"*": PRICE}, "caps": [{"window": "1h", "max": 100000}]}
        return cfg

    def test_takes_given_back_after_resume(self):
        self.avoid_boundary(3600, 30)
        self.accepted(self.otpd.issue(P2))  # the script is loaded
        before, undo = self.decision_state(), self.undo_keys()
        self.redis.pause()
        try:
            with concurrent.futures.ThreadPoolExecutor(len(PHONES)) as ex:
                answers = list(ex.map(self.otpd.issue, PHONES))
        finally:
            self.redis.resume()
        for r in answers:
            self.refused(r, 503, "store_unavailable")
        # Redis runs the buffered calls on resume (each takes, and records
        # it), and the abandons the instance sent while it waited. Once
        # /readyz (no API traffic) has run every queued abandon, each 503'd
        # request is given back or tombstoned, whatever the order.
        wait_until(lambda: self.otpd.call("GET", "/readyz", auth=None)[0] == 200 and self.pending() == 0 or None,
                   10, step=0.2, what="the abandons to run")
        self.assertGreaterEqual(self.metric("otpd_store_abandons_total"), 1)
        self.assertEqual(self.decision_state(), before)
        new = set(self.undo_keys()) - set(undo)
        self.assertTrue(new)
        for k in new:
            self.assertEqual(self.redis.cmd("GET", k), "x")  # tombstones: a late copy takes nothing
        # As if the 503s never happened: each phone gets its one issue now.
        for p in PHONES:
            r = self.otpd.issue(p)
            self.accepted(r)
            self.assert_rl(r, "phone_1", 1, 60, 0)
        self.assertEqual(self.cost_sum(3600000), (1 + len(PHONES)) * PRICE)
        self.assert_sms(1 + len(PHONES))


# 3. both orders of a script and its abandon, in Redis itself ---------------------------------------------
def queue_keys(rid):
    """issue.lua's last KEYS: the fleet's stream, the holds, the message's hash, the undo key."""
    return ["otp:q", "otp:holds", "otp:msg:m" + rid, "otp:u:" + rid]


def queue_args(rid):
    """issue.lua's last ARGV: capacity, hold_ms, message id, API key, cap windows, phone."""
    return [100, 10000, "m" + rid, "login-web", "3600000", P]


class ScriptOrderTest(DecisionsTest):
    """issue.lua run directly (EVAL of the tree's source), so the order of a
    stalled issue and its abandon can be chosen."""
    limits = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 2, "window": "1m"}]

    def eval_issue(self, op, rid):
        src = limits_script("issue.lua")
        keys = ["otp:{%s}" % P, "otp:cost"] + queue_keys(rid)
        args = [op, "" if op == "a" else "v" * 32, "h" * 16, 300000, 3, PRICE, 1, 1, 2, 30000, "s" * 12, 0,
                1, 1, "pl", 2, 60000, 2, 0,
                "c3600000", 3600000, 100000] + queue_args(rid)
        return self.redis.cmd("EVAL", src, len(keys), *(keys + [str(a) for a in args]))

    def test_abandon_before_the_issue_runs(self):
        before = self.decision_state()
        self.assertEqual(self.eval_issue("a", "r1"), 0)
        r = self.eval_issue("i", "r1")
        self.assertEqual(r[0], -1, r)
        self.assertEqual(self.decision_state(), before)

    def test_abandon_after_the_issue_ran(self):
        before = self.decision_state()
        r = self.eval_issue("i", "r2")
        self.assertEqual(r[0], 1, r)
        self.assertNotEqual(self.decision_state(), before)
        self.assertEqual(self.eval_issue("i", "r2"), r)  # a second run replays, takes nothing
        self.assertEqual(self.eval_issue("a", "r2"), 1)
        self.assertEqual(self.decision_state(), before)
        self.assertEqual(self.eval_issue("a", "r2"), 0)  # a second abandon gives nothing back twice
        self.assertEqual(self.decision_state(), before)
        self.assertEqual(self.eval_issue("i", "r2")[0], -1)
        ttl = self.redis.cmd("PTTL", "otp:u:r2")
        self.assertTrue(0 < ttl <= 30000, ttl)


    def eval_hold(self, op, rid, hold_ms=10000):
        """issue.lua's hold ops on a stream and holds of the test's own (t:q,
        t:holds), so the running pacer never claims what they release."""
        src = limits_script("issue.lua")
        keys = ["otp:{%s}" % P, "otp:cost", "t:q", "t:holds", "otp:msg:m" + rid, "otp:u:" + rid]
        args = [op, "v" * 32 if op == "i" else "m%s:%s" % (rid, rid), "h" * 16, 300000, 3, PRICE, 1, 1, 2, 30000,
                "s" * 12, 0, 1, 1, "pl", 2, 60000, 2, 0, "c3600000", 3600000, 100000,
                100, hold_ms, "m" + rid, "login-web", "3600000", P]
        return self.redis.cmd("EVAL", src, len(keys), *(keys + [str(a) for a in args]))

    def takes(self):
        return {k: v for k, v in self.decision_state().items() if not k.startswith("t:")}

    def test_a_live_hold_is_released_never_dropped_and_an_abandon_after_ends_it(self):
        before = self.takes()
        self.assertEqual(self.eval_hold("i", "r5")[0], 1)
        self.assertEqual(self.eval_hold("d", "r5"), 0)  # not lapsed: not the dropper's
        self.assertEqual(self.redis.cmd("HGET", "otp:msg:mr5", "s"), "held")
        self.assertEqual(self.eval_hold("c", "r5"), 1)
        self.assertEqual((self.redis.cmd("XLEN", "t:q"), self.redis.cmd("ZCARD", "t:holds")), (1, 0))
        self.assertEqual(self.redis.cmd("HGET", "otp:msg:mr5", "s"), "queued")
        # The commit's reply lost, the caller answered 503: the abandon ends
        # the message unsent and gives back its unused reservation.
        self.assertEqual(self.eval_hold("a", "r5"), 0)
        self.assertEqual(self.redis.cmd("HMGET", "otp:msg:mr5", "s", "f"), ["failed", "1"])
        self.assertEqual(self.cost_sum(3600000), 0)
        self.assertNotEqual(self.takes(), before)  # the rule's take stays: its record went with the commit

    def test_a_lapsed_hold_is_dropped_never_released(self):
        before = self.takes()
        self.assertEqual(self.eval_hold("i", "r6", hold_ms=50)[0], 1)
        score = float(self.redis.cmd("ZSCORE", "t:holds", "mr6:r6"))
        wait_until(lambda: self.rtime_ms() > score, 5, step=0.02, what="the hold to lapse on Redis's clock")
        self.assertEqual(self.eval_hold("c", "r6"), 0)  # the dropper's now
        self.assertEqual(self.redis.cmd("XLEN", "t:q"), 0)
        self.assertEqual(self.eval_hold("d", "r6"), 1)
        self.assertIsNone(self.redis.cmd("HGET", "otp:msg:mr6", "s"))
        self.assertEqual(self.takes(), before)  # every take given back
        self.assertEqual(self.eval_hold("c", "r6"), 0)


class AbandonInterleavingTest(DecisionsTest):
    """An abandon gives back only what its own request did, never what other
    requests (on this or another instance) did since: the scripts run
    directly, in the orders a fleet with 503s can produce. The verification
    is the scope's packed field: vid (32), code hash (16), "exp:att", with
    '+' for ':' once another issue continued it."""
    limits = [{"name": "phone_2", "key": "phone", "algorithm": "sliding_log", "limit": 5, "window": "1m"},
              {"name": "tb", "key": "phone", "algorithm": "token_bucket", "limit": 1, "window": "1s", "burst": 1}]
    K = "otp:{%s}" % P
    SCOPE = "s" * 12
    RIGHT, WRONG = "r" * 16, "w" * 16

    def verify_script(self, op, rid, guess):
        src = limits_script("verify.lua")
        return self.redis.cmd("EVAL", src, 2, self.K, "otp:u:" + rid, op, guess, "3", "wg", "10", "3600000", "0",
                              "30000", self.SCOPE, "0", "0")

    def issue_script(self, op, rid, vid):
        src = limits_script("issue.lua")
        keys = [self.K, "otp:cost"] + queue_keys(rid)
        args = [op, "" if op == "a" else vid, "h" * 16, 300000, 3, PRICE, 2, 1, 2, 30000, self.SCOPE, 0,
                1, 1, "pl", 5, 60000, 0, 0,
                3, 1, "tb", 1, 1000, 1, 0,
                "c3600000", 3600000, 100000] + queue_args(rid)
        return self.redis.cmd("EVAL", src, len(keys), *(keys + [str(a) for a in args]))

    def field(self):
        """(vid, exp:att) of the scope's verification, or None."""
        v = self.redis.cmd("HGET", self.K, self.SCOPE)
        return v and (v[:32], v[48:])

    def live(self, vid="1", attempts=0):
        self.redis.cmd("DEL", self.K)
        self.redis.cmd("HSET", self.K, self.SCOPE, vid * 32 + self.RIGHT + "%d:%d" % (10 ** 13, attempts))
        self.redis.cmd("PEXPIRE", self.K, 600000)

    def test_wrong_guess_abandon_takes_back_one_attempt_only(self):
        self.live()
        self.assertEqual(self.verify_script("v", "r1", self.WRONG)[0], "wrong")
        self.assertEqual(self.verify_script("v", "r2", self.WRONG)[0], "wrong")
        self.assertEqual(self.verify_script("a", "r1", ""), 1)
        self.assertEqual(self.field(), ("1" * 32, "%d:1" % 10 ** 13))  # r2's attempt stays
        self.assertEqual(len(self.redis.cmd("HGET", self.K, "wg").split()), 1)

    def test_abandoned_wrong_guess_never_revives_a_used_code(self):
        self.live()
        self.assertEqual(self.verify_script("v", "r3", self.WRONG)[0], "wrong")
        self.assertEqual(self.verify_script("v", "r4", self.RIGHT)[0], "ok")
        self.assertEqual(self.verify_script("a", "r3", ""), 1)
        self.assertEqual(self.verify_script("v", "r5", self.RIGHT)[0], "none", "one code verified twice")

    def test_abandoned_right_guess_comes_back_unless_replaced(self):
        self.live()
        self.assertEqual(self.verify_script("v", "r6", self.RIGHT)[0], "ok")
        self.assertEqual(self.verify_script("a", "r6", ""), 1)
        self.assertEqual(self.verify_script("v", "r7", self.RIGHT)[0], "ok")  # nobody got the first answer
        self.live()
        self.assertEqual(self.verify_script("v", "r8", self.RIGHT)[0], "ok")
        self.live(vid="2")  # a new issue took its place
        self.assertEqual(self.verify_script("a", "r8", ""), 1)
        self.assertEqual(self.field(), ("2" * 32, "%d:0" % 10 ** 13))

    def test_abandoned_issue_keeps_a_verification_another_issue_continued(self):
        self.redis.cmd("DEL", self.K)
        r1 = self.issue_script("i", "q1", "V" * 32)  # answered 503 on instance A
        self.assertEqual((r1[0], r1[2], r1[4]), (1, "V" * 32, 1))
        self.assertEqual(self.field()[1].lstrip("0123456789"), ":0")  # created, not continued
        self.redis.cmd("PEXPIRE", self.K, 600000)
        tb = self.redis.cmd("HGET", self.K, "tb")
        self.redis.cmd("HSET", self.K, "tb", "0")  # let the second issue through the bucket
        r2 = self.issue_script("i", "q2", "W" * 32)  # 202 on instance B: continues V, its SMS carries V's code
        self.assertEqual((r2[0], r2[2], r2[4]), (1, "V" * 32, 0))
        self.assertEqual(self.field()[1].lstrip("0123456789"), "+0")  # continued, in the same 63 bytes
        self.assertEqual(len(self.redis.cmd("HGET", self.K, self.SCOPE)), 63)
        self.assertEqual(self.issue_script("a", "q1", ""), 1)
        self.assertEqual(self.field()[0], "V" * 32, "the abandon deleted a code in use")
        self.assertIsNotNone(tb)

    def test_abandoned_issue_deletes_its_verification_nobody_continued(self):
        self.redis.cmd("DEL", self.K)
        self.assertEqual(self.issue_script("i", "q3", "V" * 32)[2], "V" * 32)
        self.assertEqual(self.verify_script("v", "r9", self.WRONG)[0], "wrong")  # a guess keeps it uncontinued
        self.assertEqual(self.field()[1].lstrip("0123456789"), ":1")
        self.assertEqual(self.issue_script("a", "q3", ""), 1)
        self.assertIsNone(self.field())

    def test_token_bucket_abandon_gives_back_only_a_token_still_held(self):
        self.redis.cmd("DEL", self.K)
        self.assertEqual(self.issue_script("i", "t1", "A" * 32)[0], 1)
        after = int(self.redis.cmd("HGET", self.K, "tb"))
        # The take's time passes (the bucket refills by itself); another take follows.
        wait_until(lambda: int(self.redis.cmd("TIME")[0]) * 1000 > after + 50, 3, what="the token to come back")
        self.assertEqual(self.issue_script("i", "t2", "B" * 32)[0], 1)
        held = int(self.redis.cmd("HGET", self.K, "tb"))
        self.assertEqual(self.issue_script("a", "t1", ""), 1)
        self.assertEqual(int(self.redis.cmd("HGET", self.K, "tb")), held, "t1's abandon gave back t2's token")


# 4. a near-dead verification is replaced ---------------------------------------------------------------
class NearDeadTest(DecisionsTest):
    def configure(self, cfg):
        cfg["otp"]["ttl"] = "10s"
        return cfg

    def test_replaced_with_less_than_a_third_left(self):
        body, code = self.issue_and_code(P)
        self.assertEqual(body["expires_in"], 10)
        exp = verification(self.redis, P)[2]
        # 3.7 s left (more than a third of 10 s): the same code again.
        self.sleep_until(exp - 3700)
        body2, code2 = self.issue_and_code(P)
        self.assertEqual(code2, code)
        self.assertLessEqual(body2["expires_in"], 3)
        self.assertEqual(verification(self.redis, P)[2], exp)
        # 3 s left: a new verification, a new code, a full life.
        self.sleep_until(exp - 3000)
        body3, code3 = self.issue_and_code(P)
        self.assertNotEqual(code3, code)
        self.assertEqual(body3["expires_in"], 10)
        self.assertGreater(verification(self.redis, P)[2], exp + 6000)
        r = self.otpd.verify(P, code)
        self.assertEqual((r[0], r[2]["error"]), (422, "invalid_code"), r[2])
        self.assertEqual(self.otpd.verify(P, code3)[0], 200)


# 5. resend_after over every rule ------------------------------------------------------------------------
class ResendAfterTest(DecisionsTest):
    limits = [{"name": "phone_log", "key": "phone", "algorithm": "sliding_log", "limit": 2, "window": "3s"},
              {"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1s"},
              {"name": "phone_fw", "key": "phone", "algorithm": "fixed_window", "limit": 3, "window": "6s"}]

    def issue_at(self, at_ms):
        self.sleep_until(at_ms)
        t = self.rtime_ms()
        return t, self.otpd.issue(P)

    def check_next(self, t, ra, refuser):
        """The issue at t said resend_after ra: one second earlier is refused
        by refuser, at ra it passes. Returns (time, answer) of the pass."""
        self.refused(self.issue_at(t + (ra - 1) * 1000)[1], 429, "rate_limited", refuser)
        t2, r = self.issue_at(t + ra * 1000 + 20)
        self.accepted(r)
        return t2, r

    def test_resend_after_is_when_the_next_issue_passes(self):
        w = self.rtime_ms() // 6000 * 6000 + 6000  # the start of the next fixed window
        t, r = self.issue_at(w + 100)
        self.assertEqual(self.accepted(r)["resend_after"], 1)  # only the resend delay binds
        self.refused(self.issue_at(t + 500)[1], 429, "rate_limited", "resend")
        # At w+1.5: the log is full until w+0.1 leaves at w+3.1: 1.6 s.
        t, r = self.issue_at(w + 1500)
        ra = self.accepted(r)["resend_after"]
        self.assertEqual(ra, 2)
        t, r = self.check_next(t, ra, "phone_log")
        # At w+3.5: the fixed window is full until w+6: 2.5 s.
        ra = self.accepted(r)["resend_after"]
        self.assertEqual(ra, math.ceil((w + 6000 - t) / 1000.0))
        self.assertEqual(ra, 3)
        self.check_next(t, ra, "phone_fw")


# 6. wrong_guess_cap over a sliding window ----------------------------------------------------------------
class WrongGuessSlidingTest(DecisionsTest):
    limits = [{"name": "wrong_codes", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 2, "window": "4s"}]

    def configure(self, cfg):
        cfg["otp"]["max_attempts"] = 5
        return cfg

    def test_lock_before_a_boundary_lasts_the_window(self):
        # Warm first (a pooled connection, the scripts loaded): the timed steps
        # below must not pay a cold start within the 50 ms Redis timeout.
        self.issue_and_code(P2)
        b = self.rtime_ms() // 4000 * 4000 + 8000  # a 4 s boundary at least 6 s away
        self.sleep_until(b - 2500)
        _, code = self.issue_and_code(P)
        self.sleep_until(b - 1500)
        r = self.otpd.verify(P, wrong_of(code))
        self.assertEqual((r[0], r[2]["attempts_left"]), (422, 4), r[2])
        first = self.log_of(P, "wrong_codes")[0]
        self.sleep_until(b - 300)
        t = self.rtime_ms()
        r = self.otpd.verify(P, wrong_of(code))
        ra = self.refused(r, 429, "locked", "wrong_codes")
        # Locked until the first wrong guess leaves the window, not until the boundary.
        self.assertEqual(ra, math.ceil((first + 4000 - t) / 1000.0), (first, t))
        self.assertGreaterEqual(ra, 2)
        self.sleep_until(b + 500)
        self.refused(self.otpd.verify(P, code), 429, "locked", "wrong_codes")
        self.refused(self.otpd.issue(P), 429, "locked", "wrong_codes")
        # The first wrong guess has left: unlocked, but the second still counts,
        # so one more wrong guess locks again (no fresh allowance at the boundary).
        self.sleep_until(first + 4000 + 100)
        t = self.rtime_ms()
        r = self.otpd.verify(P, wrong_of(code))
        second = self.log_of(P, "wrong_codes")[0]
        ra = self.refused(r, 429, "locked", "wrong_codes")
        self.assertEqual(ra, math.ceil((second + 4000 - t) / 1000.0))
        self.assertEqual(len(self.log_of(P, "wrong_codes")), 2)  # bounded by the limit


# 7. cost caps named by window ---------------------------------------------------------------------------
class CapNamesTest(DecisionsTest):
    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"*": PRICE},
                       "caps": [{"window": "1h", "max": 3 * PRICE}, {"window": "1d", "max": 100 * PRICE}]}
        return cfg

    def test_reordering_caps_changes_nothing(self):
        self.avoid_boundary(3600, 30)
        self.accepted(self.otpd.issue(P))
        self.accepted(self.otpd.issue(P2))
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["cost"]["caps"].reverse()
        n = self.otpd.log().count("reloaded")
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("reloaded") > n, what="otpd to reload")
        self.accepted(self.otpd.issue("+919812345670"))
        r = self.otpd.issue("+919812345671")
        self.refused(r, 503, "cost_cap")
        self.assertEqual(self.cost_sum(3600000), 3 * PRICE)
        self.assertEqual(self.cost_sum(86400000), 3 * PRICE)


class LapsedHoldEscapedKeysTest(fleet.FleetTest):
    """A lapsed hold gives back every take even when a rule's key holds bytes JSON escapes: the undo record keeps
    the keys as JSON text (Redis's cjson writes '/' as '\\/', '"' as '\\"'), and the sweep must read them back as
    the keys they are, not fall back to the hold alone and leave the device's take counted for ever. The hold is
    made to lapse by the instance that holds it: its ledger's write lock (taken here) keeps it between its decision
    and its release, and it is SIGKILLed there; the other instance's sweep drops the hold."""
    n = 2
    limits = [{"name": "dev_1", "key": "device", "algorithm": "sliding_log", "limit": 1, "window": "10m"}]

    def test_a_device_id_with_escaped_bytes_gets_its_take_back(self):
        import sqlite3
        import threading
        a, b = self.fleet[0], self.fleet[1]
        dev = 'tab/let"\\7'
        lock = sqlite3.connect(a.config["ledger"]["path"], timeout=5, isolation_level=None)
        try:
            lock.execute("BEGIN IMMEDIATE")
            def held_issue():
                try:
                    a.issue(P, device_id=dev)
                except OSError:
                    pass  # SIGKILLed while it waits for its ledger: no answer
            t = threading.Thread(target=held_issue, daemon=True)
            t.start()
            wait_until(lambda: self.redis.cmd("ZCARD", "otp:holds") == 1, what="A's decision, held")
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait()
        finally:
            lock.close()
        wait_until(lambda: self.redis.cmd("ZCARD", "otp:holds") == 0, timeout=30, step=0.1,
                   what="B's sweep to drop the lapsed hold")
        st, _, body = b.issue(P2, device_id=dev)
        self.assertEqual(st, 202, "the device's take of the dropped hold was never given back: %s" % (body,))
