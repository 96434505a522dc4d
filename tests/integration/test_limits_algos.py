"""Issue 11, algorithms: the sliding window counter and penalties, against a
real redis-server and the real bin/otpd.

- sliding_window_counter at a window boundary (10 at the end of one window,
  then at most one more half a second into the next), on Redis's clock;
- the chapter's worked example (80 previous, 30 current, a quarter in:
  estimate 90), issue.lua run directly with the replay clock so every time is
  exact, and its abandon giving back exactly its one;
- a penalty that outlasts its rule's own refill, with a truthful
  Retry-After, other keys untouched, and the key free again after the block;
- shadow refusals never counted; a refused request takes nothing but its
  penalty count;
- a sliding window counter and a penalty on verify rules;
- config errors for bad penalty and counter fields.

Times are read from Redis's clock (the scripts' clock). Each timed step keeps
at least 0.3 s between the moment it tests and the rule's edge; where the
server decided "somewhere between two Redis TIME reads", the expected value
is computed at both ends."""
import json
import os
import time

from harness import rule_fields
from luascript import limits_script
from test_limits_decisions import queue_args
from test_limits import LimitsTest

P = "+919812345678"
P2 = "+919812345679"
PHONES = ["+9198123456%02d" % i for i in range(10, 40)]


def ceil_s(ms):
    return 0 if ms <= 0 else (ms + 999) // 1000


class AlgosTest(LimitsTest):
    def sleep_until(self, redis_ms):
        """Sleeps until Redis's clock reads redis_ms (the test's schedule, not a synchronisation)."""
        left = redis_ms - self.rtime_ms()
        if left > 0:
            time.sleep(left / 1000.0)

    def timed(self, fn, *a, **kw):
        """(fn's result, Redis ms before, Redis ms after)."""
        before = self.rtime_ms()
        r = fn(*a, **kw)
        return r, before, self.rtime_ms()

    def hget(self, key, field):
        return self.redis.cmd("HGET", key, field)


# 1. the sliding window counter at a boundary, over HTTP ------------------------------------------------
class SwcBoundaryTest(AlgosTest):
    W = 10000
    limits = [{"name": "all_10s", "key": "global", "algorithm": "sliding_window_counter", "limit": 10,
               "window": "10s"}]

    def fill_end_of_window(self):
        """10 issues ~9.3 s into a 10 s window (Unix-aligned on Redis's
        clock); returns that window's index. A window that rolls over while
        they run (a loaded machine) is retried in a later one."""
        for attempt in range(3):
            self.redis.cmd("HDEL", "otp:g", self.field("all_10s"))
            now = self.rtime_ms()
            idx = now // self.W
            if now - idx * self.W > 9000:
                idx += 1
            self.sleep_until(idx * self.W + 9300)
            resps = [self.otpd.issue(PHONES[i]) for i in range(10)]
            state = self.hget("otp:g", self.field("all_10s"))
            if state == "%d:10:0" % idx:
                for i, r in enumerate(resps):
                    self.accepted(r)
                    self.assert_rl(r, "all_10s", 10, 10, 9 - i)
                return idx
        self.fail("10 issues never fitted in the last 0.7 s of a window (last state %r)" % state)

    def test_ten_at_the_end_then_at_most_one_half_a_second_in(self):
        idx = self.fill_end_of_window()
        # An 11th in the same window: current alone is at the limit, so it
        # waits for the next window (the previous one then weighs 10 x
        # (1 - 1 ms / 10 s) < 10): Retry-After is the boundary + 1 ms, rounded up.
        r, t0, t1 = self.timed(self.otpd.issue, PHONES[10])
        ra = self.refused(r, 429, "rate_limited", "all_10s")
        end = (idx + 1) * self.W
        self.assertTrue(t1 < end, "the 11th issue ran after the boundary (loaded machine?)")
        self.assertIn(ra, range(ceil_s(end + 1 - t1), ceil_s(end + 1 - t0) + 1))
        self.assertEqual(self.hget("otp:g", self.field("all_10s")), "%d:10:0" % idx)  # took nothing

        # Half a second into the next window: estimate 10 x 0.95 = 9.5 < 10,
        # one passes; then 1 + 9.5 = 10.5: refused.
        start = (idx + 1) * self.W
        self.sleep_until(start + 500)
        r = self.otpd.issue(PHONES[11])
        self.accepted(r)
        self.assert_rl(r, "all_10s", 10, 10, 0)  # floor(10 - 10.5) left, shown as 0
        self.assertEqual(self.hget("otp:g", self.field("all_10s")), "%d:1:10" % (idx + 1))
        r, t0, t1 = self.timed(self.otpd.issue, PHONES[12])
        # 1 + 10 x (1 - e / 10 s) < 10 first holds at e = 1001 ms.
        self.assertLess(t1 - start, 1000, "the second issue came after the edge (loaded machine?)")
        ra = self.refused(r, 429, "rate_limited", "all_10s")
        self.assertIn(ra, range(ceil_s(start + 1001 - t1), ceil_s(start + 1001 - t0) + 1))
        self.assert_rl(r, "all_10s", 10, 10, 0)
        self.assertEqual(self.hget("otp:g", self.field("all_10s")), "%d:1:10" % (idx + 1))

        # Retry-After told the truth: once it is over, one more passes (at
        # e = 1.5 s: 1 + 8.5 = 9.5), then 2 + 8.5 = 10.5 refuses again.
        self.sleep_until(t1 + ra * 1000)
        self.accepted(self.otpd.issue(PHONES[13]))
        r, t0, t1 = self.timed(self.otpd.issue, PHONES[14])
        self.assertLess(t1 - start, 2000, "the fourth issue came after the next edge (loaded machine?)")
        ra = self.refused(r, 429, "rate_limited", "all_10s")
        # 2 + 10 x (1 - e / 10 s) < 10 first holds at e = 2001 ms.
        self.assertIn(ra, range(ceil_s(start + 2001 - t1), ceil_s(start + 2001 - t0) + 1))
        self.assertEqual(self.hget("otp:g", self.field("all_10s")), "%d:2:10" % (idx + 1))
        # Idle state expires two windows on at the latest.
        ttl = self.redis.cmd("PTTL", "otp:g")
        self.assertTrue(0 < ttl <= 2 * self.W, ttl)


# 2. the chapter's worked example, issue.lua with the replay clock ---------------------------------------
class SwcScriptTest(AlgosTest):
    """issue.lua run directly (EVAL of the tree's source) with at_ms, on the
    test's own stream and holds (t:q, t:holds), so otpd never touches them."""
    W = 60000
    IDX = 29000000  # a minute of 2025
    FIELD = "sw"

    def eval_issue(self, op, rid, limit, at_ms, state=None, mode="0"):
        if state is not None:
            self.redis.cmd("HSET", "otp:g", self.FIELD, state)
        src = limits_script("issue.lua")
        keys = ["otp:{%s}" % P, "otp:g", "t:q", "t:holds", "otp:msg:m" + rid, "otp:u:" + rid]
        args = [op, "v" * 32, "h" * 16, 300000, 3, -1, 1, 0, 0, 30000, "s" * 12, at_ms,
                6, 2, self.FIELD, limit, self.W, limit, mode] + queue_args(rid)
        return self.redis.cmd("EVAL", src, len(keys), *(keys + [str(a) for a in args]))

    def state(self):
        return self.hget("otp:g", self.FIELD)

    def test_worked_example_estimate_90(self):
        quarter = self.IDX * self.W + self.W // 4
        # limit 91: 30 + 80 x 0.75 = 90 < 91, exactly one passes...
        r = self.eval_issue("i", "r1", 91, quarter, "%d:30:80" % self.IDX)
        self.assertEqual(r[0], 1, r)
        self.assertEqual(r[1], quarter)
        self.assertEqual(r[8:11], [1, 0, 2 * self.W - self.W // 4])  # floor(91 - 91) left
        self.assertEqual(self.state(), "%d:31:80" % self.IDX)
        # ...and the next would pass once 31 + 80 x (1 - e / W) < 91: e > 15000 ms.
        self.assertEqual(r[6], 1)
        # ...then refused, taking nothing, until that first millisecond.
        r = self.eval_issue("i", "r2", 91, quarter)
        self.assertEqual(r[0], 0, r)
        self.assertEqual(r[8:11], [0, 0, 1])
        self.assertEqual(self.state(), "%d:31:80" % self.IDX)
        r = self.eval_issue("i", "r3", 91, quarter + 1)
        self.assertEqual(r[0], 1, r)
        self.assertEqual(self.state(), "%d:32:80" % self.IDX)

    def test_worked_example_limit_90_refuses(self):
        quarter = self.IDX * self.W + self.W // 4
        r = self.eval_issue("i", "r1", 90, quarter, "%d:30:80" % self.IDX)
        self.assertEqual(r[0], 0, r)
        # 30 + 80 x (1 - e / W) < 90 first holds at e = 15001 ms.
        self.assertEqual(r[8:11], [0, 0, 1])
        self.assertEqual(self.state(), "%d:30:80" % self.IDX)
        # Later in the window the previous one weighs less: at half, 30 + 40 = 70.
        r = self.eval_issue("i", "r2", 90, quarter + self.W // 4)
        self.assertEqual(r[0], 1, r)
        self.assertEqual(r[8:10], [1, 90 - 71])
        self.assertEqual(self.state(), "%d:31:80" % self.IDX)

    def test_counts_roll_into_the_previous_window(self):
        # 80 in the window before: a quarter into this one, 80 x 0.75 = 60.
        r = self.eval_issue("i", "r1", 61, self.IDX * self.W + self.W // 4, "%d:80:5" % (self.IDX - 1))
        self.assertEqual(r[0], 1, r)
        self.assertEqual(self.state(), "%d:1:80" % self.IDX)
        # Two windows on, nothing weighs any more.
        r = self.eval_issue("i", "r2", 1, (self.IDX + 2) * self.W, "%d:80:80" % self.IDX)
        self.assertEqual(r[0], 1, r)
        self.assertEqual(self.state(), "%d:1:0" % (self.IDX + 2))

    def test_full_current_window_waits_for_the_next(self):
        # 10 of 10 taken, 9.3 s into a 10 s-like window: the wait is to the
        # boundary plus the first ms at which 10 x (1 - e / W) < 10.
        at = self.IDX * self.W + self.W - 700
        r = self.eval_issue("i", "r1", 10, at, "%d:10:0" % self.IDX)
        self.assertEqual(r[0], 0, r)
        self.assertEqual(r[8:11], [0, 0, 701])
        # Above the limit (a lowered limit): 20 counted, limit 10: the
        # estimate 20 x (1 - e / W) < 10 from e = W / 2 + 1 of the next window.
        r = self.eval_issue("i", "r2", 10, at, "%d:20:0" % self.IDX)
        self.assertEqual(r[8:11], [0, 0, 700 + self.W // 2 + 1])

    def test_abandon_gives_back_exactly_its_one(self):
        # An abandon gives back to the window its take counted in, while
        # that window's count is still the current one. Half a minute in
        # (30 + 80 x 0.5 = 70 < 100), on the replay clock: at Redis's own
        # time this would hold only past the first eighth of its minute.
        idx = self.IDX
        at = idx * self.W + self.W // 2
        r = self.eval_issue("i", "r1", 100, at, "%d:30:80" % idx)
        self.assertEqual(r[0], 1, r)
        r = self.eval_issue("i", "r2", 100, at)
        self.assertEqual(r[0], 1, r)
        self.assertEqual(self.state(), "%d:32:80" % idx)
        self.assertEqual(self.eval_issue("a", "r1", 100, 0), 1)
        self.assertEqual(self.state(), "%d:31:80" % idx)
        self.assertEqual(self.eval_issue("a", "r1", 100, 0), 0)  # never twice
        self.assertEqual(self.state(), "%d:31:80" % idx)
        # Once a later take rolled the state into the next window, its count
        # is the previous one there, where it still weighs: given back from it
        # (a 503 never costs quota).
        self.redis.cmd("HSET", "otp:g", self.FIELD, "%d:1:31" % (idx + 1))
        self.assertEqual(self.eval_issue("a", "r2", 100, 0), 1)
        self.assertEqual(self.state(), "%d:1:30" % (idx + 1))

    def test_abandon_two_windows_later_gives_nothing(self):
        # Two windows on, the take weighs nothing: nothing to give back.
        idx = self.IDX
        at = idx * self.W + self.W // 2
        self.assertEqual(self.eval_issue("i", "r1", 100, at, "%d:0:0" % idx)[0], 1)
        self.redis.cmd("HSET", "otp:g", self.FIELD, "%d:5:7" % (idx + 2))
        self.assertEqual(self.eval_issue("a", "r1", 100, 0), 1)
        self.assertEqual(self.state(), "%d:5:7" % (idx + 2))

    def eval_verify(self, rid, limit, at_ms, state=None):
        if state is not None:
            self.redis.cmd("HSET", "otp:g", self.FIELD, state)
        src = limits_script("verify.lua")
        keys = ["otp:{%s}" % P, "otp:g", "otp:u:" + rid]
        args = ["v", "x" * 16, 3, "", 0, 1, 0, 30000, "s" * 12, 1, at_ms,
                6, 2, self.FIELD, limit, self.W, limit, "0"]
        return self.redis.cmd("EVAL", src, len(keys), *(keys + [str(a) for a in args]))

    def test_verify_weighs_the_previous_window(self):
        # 80 in the window before, a quarter in: estimate 60.
        quarter = self.IDX * self.W + self.W // 4
        r = self.eval_verify("r1", 60, quarter, "%d:80:0" % (self.IDX - 1))
        self.assertEqual(r[0], "limited", r)
        self.assertEqual(r[6:], [0, 0, 1])  # 80 x (1 - e / W) < 60 from e = 15001 ms
        self.assertEqual(self.state(), "%d:80:0" % (self.IDX - 1))
        r = self.eval_verify("r2", 61, quarter)
        self.assertEqual(r[0], "none", r)  # no code to guess at: the rule is taken all the same
        self.assertEqual(r[6:], [1, 0, 2 * self.W - self.W // 4])
        self.assertEqual(self.state(), "%d:1:80" % self.IDX)
        r = self.eval_verify("r3", 61, quarter)
        self.assertEqual(r[0], "limited", r)
        self.assertEqual(r[6:], [0, 0, 1])  # 1 + 80 x (1 - e / W) < 61 from e = 15001 ms

    def test_mode_with_a_penalty_is_read_not_taken_as_shadow(self):
        # A penalty rides in the mode value; a shadow rule with one blocks nothing.
        quarter = self.IDX * self.W + self.W // 4
        r = self.eval_issue("i", "r1", 90, quarter, "%d:30:80" % self.IDX, mode="0:1:10000:5000")
        self.assertEqual(r[0], 0, r)
        # The first refusal starts a 5 s block (remaining: minus the block's ms, for the refusal cache).
        self.assertEqual(r[8:11], [0, -5000, 5000])
        self.assertEqual(self.hget("otp:g", "!" + self.FIELD), "0:0:%d" % (quarter + 5000))
        self.redis.cmd("HDEL", "otp:g", "!" + self.FIELD)
        r = self.eval_issue("i", "r2", 90, quarter, mode="1:1:10000:5000")
        self.assertEqual(r[0], 1, r)  # shadow: refused by the rule, not blocked
        self.assertEqual(r[8:11], [0, 0, 1])
        self.assertIsNone(self.hget("otp:g", "!" + self.FIELD))


# 3. a penalty that outlasts its rule's refill, over HTTP ------------------------------------------------
class PenaltyTest(AlgosTest):
    limits = [{"name": "tb_phone", "key": "phone", "algorithm": "token_bucket", "limit": 1, "window": "1s",
               "burst": 1, "penalty": {"after": 3, "within": "10s", "block": "6s"}}]

    def test_penalty_outlasts_the_refill_and_tells_the_truth(self):
        K, F = "otp:{%s}" % P, self.field("tb_phone")
        self.accepted(self.otpd.issue(P))
        refusals = []
        while len(refusals) < 3:
            r, t0, t1 = self.timed(self.otpd.issue, P)
            if r[0] == 202:  # the bucket refilled between two (a loaded machine): not a refusal
                self.assertLess(len(refusals), 3)
                continue
            refusals.append((r, t0, t1))
        for r, _, _ in refusals[:2]:
            self.assertEqual(self.refused(r, 429, "rate_limited", "tb_phone"), 1)  # the bucket's own wait
        r, t0, t1 = refusals[2]
        self.assertEqual(self.refused(r, 429, "rate_limited", "tb_phone"), 6)  # the block, whole
        self.assert_rl(r, "tb_phone", 1, 1, 0, 6)
        start, count, until = (int(x) for x in self.hget(K, "!" + F).split(":"))
        self.assertEqual((start, count), (0, 0))
        self.assertTrue(t0 + 6000 <= until <= t1 + 6000, (t0, until, t1))
        self.assertGreaterEqual(self.redis.cmd("PTTL", K), until - self.rtime_ms() - 5)  # outlives the block

        # The bucket has refilled; the key is still out, and a refusal
        # during the block neither counts nor extends it.
        self.sleep_until(until - 4000)
        tat = int(self.hget(K, F))
        self.assertLessEqual(tat, self.rtime_ms(), "the bucket has not refilled")
        r, t0, t1 = self.timed(self.otpd.issue, P)
        ra = self.refused(r, 429, "rate_limited", "tb_phone")
        self.assertIn(ra, range(ceil_s(until - t1), ceil_s(until - t0) + 1))
        self.assert_rl(r, "tb_phone", 1, 1, 0)
        self.assertEqual(self.hget(K, "!" + F), "0:0:%d" % until)
        self.assertEqual(int(self.hget(K, F)), tat)  # took nothing

        # Other keys are untouched.
        self.accepted(self.otpd.issue(P2))

        # After the block, it passes again.
        self.sleep_until(until + 50)
        self.accepted(self.otpd.issue(P))


# 4. shadow refusals, and what a refusal takes -------------------------------------------------------
class ShadowAndTakesTest(AlgosTest):
    limits = [{"name": "sh_fw", "key": "phone", "algorithm": "fixed_window", "limit": 1, "window": "1h",
               "mode": "shadow", "penalty": {"after": 1, "within": "1m", "block": "1m"}},
              {"name": "sl_phone", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1m",
               "penalty": {"after": 3, "within": "1m", "block": "5m"}},
              # A token each 36 s: its state outlives the test (a faster bucket's key expires on its own).
              {"name": "caller", "key": "api_key", "algorithm": "token_bucket", "limit": 100, "window": "1h",
               "burst": 100},
              {"name": "swc_ip", "key": "client_ip", "algorithm": "sliding_window_counter", "limit": 1000,
               "window": "1h", "penalty": {"after": 1, "within": "1m", "block": "1m"}}]

    def configure(self, cfg):
        # The penalty's count in Redis to the refusal: the refusal cache counts its own hits a
        # tick later (test_limits_rcache.CachedPenaltyTest), so here it is off.
        cfg["refusal_cache"] = {"max_entries": 0}
        return cfg

    def snapshot(self):
        return {k: self.redis.cmd("HGETALL", k) for k in ("otp:{%s}" % P, "otp:k:{login-web}", "otp:ip:{10.0.0.1}")}

    def test_shadow_refusals_are_never_counted(self):
        self.avoid_boundary(3600, 60)
        f = self.field("sh_fw")
        self.accepted(self.otpd.issue(P2))
        for _ in range(3):  # refused by the shadow rule each time, blocked never
            self.redis.cmd("HDEL", "otp:{%s}" % P2, self.field("sl_phone"))  # let the enforced rule pass
            self.accepted(self.otpd.issue(P2, client_ip="10.0.0.1"))
        # Refused by the enforced rule too: its refusal counts, the shadow one's does not.
        self.refused(self.otpd.issue(P2, client_ip="10.0.0.1"), 429, "rate_limited", "sl_phone")
        self.assertEqual(self.hget("otp:{%s}" % P2, "!" + self.field("sl_phone")).split(":")[1:], ["1", "0"])
        self.assertIsNone(self.hget("otp:{%s}" % P2, "!" + f))
        self.assertEqual(self.hget("otp:{%s}" % P2, f).split(":")[1], "1")  # one take; the refusals took none

    def test_a_refused_request_takes_nothing_but_its_penalty_count(self):
        self.avoid_boundary(3600, 60)
        F = rule_fields(["sl_phone"])["sl_phone"]
        self.accepted(self.otpd.issue(P, client_ip="10.0.0.1"))
        before = self.snapshot()
        undo_before = sorted(self.redis.cmd("KEYS", "otp:u:*"))
        r, t0, t1 = self.timed(self.otpd.issue, P, client_ip="10.0.0.1")
        self.refused(r, 429, "rate_limited", "sl_phone")
        after = self.snapshot()
        added = {k: dict(zip(v[::2], v[1::2])) for k, v in after.items()}
        was = {k: dict(zip(v[::2], v[1::2])) for k, v in before.items()}
        pen = added["otp:{%s}" % P].pop("!" + F)
        start, count, until = (int(x) for x in pen.split(":"))
        self.assertTrue(t0 <= start <= t1 and (count, until) == (1, 0), pen)
        self.assertEqual(added, was)  # the caller's bucket, the IP's counter, the verification: as they were
        self.assertEqual(sorted(self.redis.cmd("KEYS", "otp:u:*")), undo_before)
        # The third refusal within the minute starts the 5 min block.
        self.refused(self.otpd.issue(P, client_ip="10.0.0.1"), 429, "rate_limited", "sl_phone")
        r = self.otpd.issue(P, client_ip="10.0.0.1")
        self.assertEqual(self.refused(r, 429, "rate_limited", "sl_phone"), 300)
        _, _, until = (int(x) for x in self.hget("otp:{%s}" % P, "!" + F).split(":"))
        self.assertGreater(until, t1 + 299000)
        was["otp:{%s}" % P]["!" + F] = self.hget("otp:{%s}" % P, "!" + F)
        now = {k: dict(zip(v[::2], v[1::2])) for k, v in self.snapshot().items()}
        self.assertEqual(now, was)


# 5. verify rules ------------------------------------------------------------------------------------
class VerifyRulesTest(AlgosTest):
    limits = [{"name": "v_swc", "key": "phone", "algorithm": "sliding_window_counter", "limit": 2,
               "window": "1h", "on": "verify"},
              {"name": "v_ip", "key": "client_ip", "algorithm": "sliding_log", "limit": 1, "window": "1m",
               "on": "verify", "penalty": {"after": 2, "within": "1m", "block": "5m"}}]

    def configure(self, cfg):
        # The penalty's count in Redis to the refusal: the refusal cache counts its own hits a
        # tick later (test_limits_rcache.CachedPenaltyTest), so here it is off.
        cfg["refusal_cache"] = {"max_entries": 0}
        return cfg

    def test_swc_on_verify(self):
        self.avoid_boundary(3600, 60)
        F = self.field("v_swc")
        body, code = self.issue_and_code(P)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        self.assertEqual(self.otpd.verify(P, wrong)[0], 422)
        self.assertEqual(self.otpd.verify(P, wrong)[0], 422)
        idx = self.rtime_ms() // 3600000
        self.assertEqual(self.hget("otp:{%s}" % P, F), "%d:2:0" % idx)
        r, t0, t1 = self.timed(self.otpd.verify, P, code)
        ra = self.refused(r, 429, "rate_limited", "v_swc")
        end = (idx + 1) * 3600000
        # Current alone is at the limit: the next window, 1 ms in.
        self.assertIn(ra, range(ceil_s(end + 1 - t1), ceil_s(end + 1 - t0) + 1))
        self.assertEqual(self.hget("otp:{%s}" % P, F), "%d:2:0" % idx)

    def test_penalty_on_verify(self):
        F = self.field("v_ip")
        body, code = self.issue_and_code(P)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        self.assertEqual(self.otpd.verify(P, wrong, client_ip="10.0.0.2")[0], 422)
        r = self.otpd.verify(P, wrong, client_ip="10.0.0.2")
        self.assertLessEqual(self.refused(r, 429, "rate_limited", "v_ip"), 60)
        r, t0, t1 = self.timed(self.otpd.verify, P, code, client_ip="10.0.0.2")
        self.assertEqual(self.refused(r, 429, "rate_limited", "v_ip"), 300)  # the block, not the log's minute
        self.assertEqual(self.hget("otp:ip:{10.0.0.2}", "!" + F).split(":")[:2], ["0", "0"])
        # Refused: the right code was not even looked at; another IP verifies it.
        self.assertEqual(self.otpd.verify(P, code, client_ip="10.0.0.3")[0], 200)


# 6. config --------------------------------------------------------------------------------------------
class ConfigTest(AlgosTest):
    def check(self, rule):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["limits"] = [rule]
        path = os.path.join(self.tmp, "check.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["--check", "-c", path])
        return r.returncode, [e[len(path) + 2:] for e in r.stderr.splitlines()]

    SWC = {"name": "s", "key": "phone", "algorithm": "sliding_window_counter", "limit": 10, "window": "1d"}
    PEN = {"after": 20, "within": "1m", "block": "15m"}

    def test_good_rules_pass(self):
        self.assertEqual(self.check(dict(self.SWC, penalty=self.PEN)), (0, []))
        self.assertEqual(self.check(dict(self.SWC, window="30d", limit=1000000, on="both")), (0, []))
        self.assertEqual(self.check({"name": "r", "key": "phone", "algorithm": "resend_delay", "delay": "30s",
                                     "penalty": {"after": 1000000, "within": "1s", "block": "30d"}}), (0, []))

    def test_bad_fields_are_named(self):
        cases = [
            (dict(self.SWC, limit=1000001), "limits.0.limit: must be an integer from 1 to 1000000"),
            (dict(self.SWC, limit=0), "limits.0.limit: must be an integer from 1 to 1000000"),
            (dict(self.SWC, window="31d"), "limits.0.window: must be at most 30d for sliding_window_counter"),
            ({k: v for k, v in self.SWC.items() if k != "window"}, "limits.0.window: is required"),
            (dict(self.SWC, burst=3), "limits.0.burst: applies to token_bucket only"),
            (dict(self.SWC, penalty=dict(self.PEN, after=0)),
             "limits.0.penalty.after: must be an integer from 1 to 1000000"),
            (dict(self.SWC, penalty=dict(self.PEN, after=1000001)),
             "limits.0.penalty.after: must be an integer from 1 to 1000000"),
            (dict(self.SWC, penalty=dict(self.PEN, within="999ms")), "limits.0.penalty.within: must be from 1s to 30d"),
            (dict(self.SWC, penalty=dict(self.PEN, block="31d")), "limits.0.penalty.block: must be from 1s to 30d"),
            (dict(self.SWC, penalty=dict(self.PEN, block="soon")), "limits.0.penalty.block: must be a duration"),
            (dict(self.SWC, penalty={"after": 3, "within": "1m"}), "limits.0.penalty.block: is required"),
            (dict(self.SWC, penalty=dict(self.PEN, until="1h")), "limits.0.penalty.until: unknown key"),
            (dict(self.SWC, penalty=20), "limits.0.penalty: must be an object"),
            ({"name": "w", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 5, "window": "1h",
              "penalty": self.PEN}, "limits.0.penalty: does not apply to wrong_guess_cap"),
        ]
        for rule, want in cases:
            rc, errors = self.check(rule)
            self.assertEqual(rc, 1, (rule, errors))
            self.assertEqual(len(errors), 1, (rule, errors))
            self.assertTrue(errors[0].startswith(want), (rule, errors, want))
