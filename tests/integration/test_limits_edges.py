"""Each rule kind's arithmetic at its exact edges, on a fixed clock.

issue.lua and verify.lua run directly (EVAL of the tree's source) against a
private redis-server (no otpd), with the replay clock (at_ms) that otpctl
simulate uses, so every time is exact: for sliding_log, fixed_window,
token_bucket (with burst), resend_delay, sliding_window_counter,
wrong_guess_cap, the penalty and the cost caps, a step at the edge - 1 ms,
at the edge and at the edge + 1 ms; after a refusal, the accept comes
exactly when its wait said, not 1 ms before. Each step also checks what the
script stored: the field's value and the key's expiry, read in the same
MULTI/EXEC as the script, the expiry as PEXPIRETIME against Redis's TIME
read just before and after (the replay clock moves the script's arithmetic,
never Redis's own expiry clock).

reserve.lua, headroom.lua and slot.lua read Redis's clock only: their
window edges are checked against TIME read around the call."""
import collections
import os
import shutil
import socket
import tempfile
import unittest

from harness import ROOT, Redis
from luascript import limits_script

DAY_MS = 86400000
HOUR_MS = 3600000
T0 = 20140 * DAY_MS  # a day of 2025: aligned to every window below
P = "+919812345678"
PK, RK, CK = "t:{%s}" % P, "t:r", "t:c"  # the phone's hash, the rules' state, the cost hash
SCOPE = "s" * 12
VID = "v" * 32
RIGHT, WRONG = "r" * 16, "w" * 16

SL, FW, TB, RD, WG, SWC = 1, 2, 3, 4, 5, 6  # issue.lua's kinds
Rule = collections.namedtuple("Rule", "kind field limit window burst mode")
Rule.__new__.__defaults__ = (0, "0")


def script(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


ISSUE, VERIFY = limits_script("issue.lua"), limits_script("verify.lua")


def resp(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Step:
    """One script call's reply, what the keys hold after it, and their
    expiry: exp[key] is (latest, earliest), how many ms after the call the
    key expires, counted from Redis's TIME read just before the call and
    just after it; None when the key has no expiry or is gone."""

    def __init__(self, reply, after, exp, t1, t2):
        self.reply, self.after, self.exp = reply, after, exp
        self.t1, self.t2 = t1, t2  # Redis's TIME (ms) just before and after the call

    def rule(self, i):
        """(verdict, remaining, reset_ms) of rule i."""
        return tuple(self.reply[8 + 3 * i:11 + 3 * i])


class EdgeScriptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-edges-")
        self.redis = Redis(self.tmp).start()
        self.rid = 0

    def tearDown(self):
        self.redis.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def atomic(self, cmds):
        """The replies of cmds run in one MULTI/EXEC on one connection."""
        with socket.create_connection(("127.0.0.1", self.redis.port), timeout=5) as s:
            s.sendall(b"".join(resp(c) for c in [("MULTI",)] + cmds + [("EXEC",)]))
            f = s.makefile("rb")
            for _ in range(len(cmds) + 1):
                self.redis._read(f)  # OK, then QUEUED for each
            return self.redis._read(f)

    def run_script(self, src, keys, args, state, watch):
        """Sets each key of state ({key: {field: value}}, None: no key) as a
        fresh hash without expiry, runs src, and returns a Step with the
        watched keys' contents and expiries."""
        cmds = []
        for k, fields in state.items():
            cmds.append(("DEL", k))
            if fields:
                cmds.append(("HSET", k) + tuple(x for kv in sorted(fields.items()) for x in kv))
        n = len(cmds)
        cmds += [("TIME",), ("EVAL", src, len(keys)) + tuple(keys) + tuple(args)]
        for k in watch:
            cmds += [("HGETALL", k), ("PEXPIRETIME", k)]
        cmds.append(("TIME",))
        out = self.atomic(cmds)[n:]
        t1, t2 = (int(t[0]) * 1000 + int(t[1]) // 1000 for t in (out[0], out[-1]))
        after, exp = {}, {}
        for i, k in enumerate(watch):
            flat, at = out[2 + 2 * i], out[3 + 2 * i]
            after[k] = dict(zip(flat[::2], flat[1::2]))
            exp[k] = None if at < 0 else (at - t1, at - t2)
        return Step(out[1], after, exp, t1, t2)

    def assert_expires(self, step, key, ms):
        """The key expires ms after the call, on Redis's clock."""
        got = step.exp[key]
        self.assertIsNotNone(got, "%s has no expiry; want %d ms" % (key, ms))
        latest, earliest = got
        self.assertTrue(earliest <= ms <= latest, "%s expires in %d..%d ms; want %d" % (key, earliest, latest, ms))

    # -- issue.lua --------------------------------------------------------------------------------------
    def issue(self, at, rules, state=None, cost=None, caps=(), price=-1):
        """issue.lua at at_ms with rules (their state in RK, given as
        {field: value}) and caps ((field, window_ms, max), their sums in CK,
        given as {field: value}). Each call is a new request (rid)."""
        self.rid += 1
        rid = "r%d" % self.rid
        keys = [PK, RK, CK, "t:q", "t:holds", "t:msg:" + rid, "t:u:" + rid]
        args = ["i", VID, RIGHT, 300000, 3, price, len(rules), len(caps), 3 if caps else 0, 30000, SCOPE, at]
        for r in rules:
            args += [r.kind, 2, r.field, r.limit, r.window, r.burst, r.mode]
        for c in caps:
            args += list(c)
        args += [100000, 10000, "m" + rid, "login-web", ",".join(str(c[1]) for c in caps), P]
        st = {PK: None}
        if state is not None:
            st[RK] = state
        if cost is not None:
            st[CK] = cost
        return self.run_script(ISSUE, keys, args, st, [RK, CK])

    def refused_by(self, step, i, reset, remaining=0):
        self.assertEqual(step.reply[0], 0, step.reply)
        self.assertEqual(step.rule(i), (0, remaining, reset), step.reply)

    def accepted(self, step, i=None, remaining=None, reset=None):
        self.assertEqual(step.reply[0], 1, step.reply)
        if i is not None:
            self.assertEqual(step.rule(i), (1, remaining, reset), step.reply)

    # -- verify.lua -------------------------------------------------------------------------------------
    def verify(self, at, guess, rules=(), state=None, wrong=None, wlimit=3, wwindow=10000, attempts=0, wshadow="0"):
        """verify.lua at at_ms: a live verification (RIGHT, max 10
        attempts) and the wrong-guess log (wrong: its times, in PK's field
        'wg'), verify rules in RK (state as for issue)."""
        self.rid += 1
        keys = [PK, RK, "t:u:r%d" % self.rid]
        args = ["v", guess, 10, "wg", wlimit, wwindow, wshadow, 30000, SCOPE, len(rules), at]
        for r in rules:
            args += [r.kind, 2, r.field, r.limit, r.window, r.burst, r.mode]
        phone = {SCOPE: "%s%s%d:%d" % (VID, RIGHT, at + 300000, attempts)}
        if wrong:
            phone["wg"] = " ".join(str(t) for t in wrong)
        st = {PK: phone}
        if state is not None:
            st[RK] = state
        return self.run_script(VERIFY, keys, args, st, [PK, RK])


# 1. sliding_log -----------------------------------------------------------------------------------------
class SlidingLogEdgeTest(EdgeScriptTest):
    R = Rule(SL, "sl", 2, 10000)

    def test_an_entry_counts_until_its_window_ends(self):
        full = {"sl": "%d %d" % (T0, T0 + 4000)}
        s = self.issue(T0 + 9999, [self.R], full)
        self.refused_by(s, 0, 1)
        self.assertEqual(s.after[RK], full)
        self.assertIsNone(s.exp[RK], "a refusal set an expiry")
        s = self.issue(T0 + 10000, [self.R], full)
        self.accepted(s, 0, 0, 4000)  # full again: until T0 + 4000 leaves
        self.assertEqual(s.after[RK], {"sl": "%d %d" % (T0 + 4000, T0 + 10000)})
        self.assert_expires(s, RK, 10000)
        self.assertEqual(s.reply[6], 4000)  # next_ms
        s = self.issue(T0 + 10001, [self.R], full)
        self.accepted(s, 0, 0, 3999)
        self.assertEqual(s.after[RK], {"sl": "%d %d" % (T0 + 4000, T0 + 10001)})

    def test_the_wait_is_exact(self):
        full = {"sl": "%d %d" % (T0, T0 + 4000)}
        s = self.issue(T0 + 5000, [self.R], full)
        self.refused_by(s, 0, 5000)
        self.refused_by(self.issue(T0 + 5000 + 4999, [self.R], full), 0, 1)
        self.accepted(self.issue(T0 + 5000 + 5000, [self.R], full))

    def test_a_lowered_limit_waits_for_the_entry_that_makes_room(self):
        # Three entries live, a limit of 2 (an override lowered it): room
        # comes when the second oldest leaves, not the oldest.
        state = {"sl": "%d %d %d" % (T0, T0 + 1000, T0 + 2000)}
        self.refused_by(self.issue(T0 + 3000, [self.R], state), 0, 8000)
        self.refused_by(self.issue(T0 + 10999, [self.R], state), 0, 1)
        s = self.issue(T0 + 11000, [self.R], state)
        self.accepted(s, 0, 0, 1000)
        self.assertEqual(s.after[RK], {"sl": "%d %d" % (T0 + 2000, T0 + 11000)})

    def test_remaining_reset_and_next(self):
        s = self.issue(T0, [self.R], {})
        self.accepted(s, 0, 1, 10000)
        self.assertEqual(s.reply[6], 0)  # one more fits
        s = self.issue(T0 + 1, [self.R], {"sl": str(T0)})
        self.accepted(s, 0, 0, 9999)
        self.assertEqual(s.reply[6], 9999)
        # Entries that left are dropped from the stored log.
        s = self.issue(T0 + 20000, [self.R], {"sl": "%d %d" % (T0, T0 + 4000)})
        self.assertEqual(s.after[RK], {"sl": str(T0 + 20000)})


# 2. fixed_window ---------------------------------------------------------------------------------------
class FixedWindowEdgeTest(EdgeScriptTest):
    W = 60000
    R = Rule(FW, "fw", 2, W)
    IDX = T0 // W

    def test_the_window_ends_at_its_edge(self):
        full = {"fw": "%d:2" % self.IDX}
        s = self.issue(T0 + self.W - 1, [self.R], full)
        self.refused_by(s, 0, 1)
        self.assertEqual((s.after[RK], s.exp[RK]), (full, None))
        s = self.issue(T0 + self.W, [self.R], full)
        self.accepted(s, 0, 1, self.W)
        self.assertEqual(s.after[RK], {"fw": "%d:1" % (self.IDX + 1)})
        self.assert_expires(s, RK, self.W)
        s = self.issue(T0 + self.W + 1, [self.R], full)
        self.accepted(s, 0, 1, self.W - 1)
        self.assert_expires(s, RK, self.W - 1)

    def test_the_last_take_of_a_window(self):
        s = self.issue(T0 + self.W - 1, [self.R], {"fw": "%d:1" % self.IDX})
        self.accepted(s, 0, 0, 1)
        self.assertEqual(s.reply[6], 1)  # next_ms: the next window
        self.assertEqual(s.after[RK], {"fw": "%d:2" % self.IDX})
        self.assert_expires(s, RK, 1)

    def test_the_wait_is_exact(self):
        full = {"fw": "%d:2" % self.IDX}
        self.refused_by(self.issue(T0 + 30000, [self.R], full), 0, 30000)
        self.refused_by(self.issue(T0 + 30000 + 29999, [self.R], full), 0, 1)
        self.accepted(self.issue(T0 + 30000 + 30000, [self.R], full))

    def test_an_older_window_counts_nothing(self):
        s = self.issue(T0, [self.R], {"fw": "%d:2" % (self.IDX - 1)})
        self.accepted(s, 0, 1, self.W)
        self.assertEqual(s.after[RK], {"fw": "%d:1" % self.IDX})


# 3. token_bucket (GCRA with a burst) -------------------------------------------------------------------
class TokenBucketEdgeTest(EdgeScriptTest):
    R = Rule(TB, "tb", 10, 10000, 3)  # a token each 1000 ms, 3 at most

    def test_burst_then_one_token_per_step(self):
        tat = None
        for i, (left, nxt) in enumerate(((2, 0), (1, 0), (0, 1000))):
            s = self.issue(T0, [self.R], {} if tat is None else {"tb": tat})
            tat = s.after[RK]["tb"]
            self.accepted(s, 0, left, (i + 1) * 1000)
            self.assertEqual(int(tat), T0 + (i + 1) * 1000)
            self.assert_expires(s, RK, (i + 1) * 1000)
            self.assertEqual(s.reply[6], nxt)
        state = {"tb": str(T0 + 3000)}
        s = self.issue(T0, [self.R], state)
        self.refused_by(s, 0, 1000)
        self.assertEqual((s.after[RK], s.exp[RK]), (state, None))
        self.refused_by(self.issue(T0 + 999, [self.R], state), 0, 1)
        s = self.issue(T0 + 1000, [self.R], state)
        self.accepted(s, 0, 0, 3000)
        self.assertEqual(s.after[RK], {"tb": str(T0 + 4000)})
        self.assert_expires(s, RK, 3000)
        s = self.issue(T0 + 1001, [self.R], state)
        self.accepted(s, 0, 0, 2999)

    def test_full_again_once_the_bucket_drained(self):
        # tat T0 + 3000: the burst is whole again from T0 + 3000 on.
        state = {"tb": str(T0 + 3000)}
        for at, left in ((T0 + 2999, 1), (T0 + 3000, 2), (T0 + 3001, 2)):
            s = self.issue(at, [self.R], state)
            self.accepted(s, 0, left, max(T0 + 3000, at) + 1000 - at)
            self.assertEqual(s.after[RK], {"tb": str(max(T0 + 3000, at) + 1000)})

    def test_a_step_that_does_not_divide_is_rounded_up(self):
        r = Rule(TB, "tb", 3, 10000, 1)  # 3333.3 ms: 3334
        s = self.issue(T0, [r], {})
        self.accepted(s, 0, 0, 3334)
        state = s.after[RK]
        self.assertEqual(state, {"tb": str(T0 + 3334)})
        self.refused_by(self.issue(T0 + 3333, [r], state), 0, 1)
        self.accepted(self.issue(T0 + 3334, [r], state))


# 4. resend_delay ---------------------------------------------------------------------------------------
class ResendDelayEdgeTest(EdgeScriptTest):
    R = Rule(RD, "rd", 1, 30000, 1)

    def test_the_delay_ends_at_its_edge(self):
        state = {"rd": str(T0 + 30000)}
        s = self.issue(T0 + 29999, [self.R], state)
        self.refused_by(s, 0, 1)
        self.assertEqual((s.after[RK], s.exp[RK]), (state, None))
        for at in (T0 + 30000, T0 + 30001):
            s = self.issue(at, [self.R], state)
            self.accepted(s, 0, 0, 30000)
            self.assertEqual(s.reply[6], 30000)
            self.assertEqual(s.after[RK], {"rd": str(at + 30000)})
            self.assert_expires(s, RK, 30000)

    def test_the_wait_is_exact(self):
        s = self.issue(T0, [self.R], {})
        state = s.after[RK]
        s = self.issue(T0 + 100, [self.R], state)
        self.refused_by(s, 0, 29900)
        self.refused_by(self.issue(T0 + 100 + 29899, [self.R], state), 0, 1)
        self.accepted(self.issue(T0 + 100 + 29900, [self.R], state))


# 5. sliding_window_counter -----------------------------------------------------------------------------
class SlidingWindowCounterEdgeTest(EdgeScriptTest):
    W = 60000
    R = Rule(SWC, "sw", 10, W)
    IDX = T0 // W

    def test_a_full_window_across_its_edge(self):
        full = {"sw": "%d:10:0" % self.IDX}
        # Full on its own: the next window, once 10 x (1 - e / W) < 10.
        s = self.issue(T0 + self.W - 1, [self.R], full)
        self.refused_by(s, 0, 2)
        self.assertEqual((s.after[RK], s.exp[RK]), (full, None))
        self.refused_by(self.issue(T0 + self.W, [self.R], full), 0, 1)  # the previous weighs all 10
        s = self.issue(T0 + self.W + 1, [self.R], full)
        self.accepted(s, 0, 0, 2 * self.W - 1)
        self.assertEqual(s.after[RK], {"sw": "%d:1:10" % (self.IDX + 1)})
        self.assert_expires(s, RK, 2 * self.W - 1)  # until the end of the next window
        # 1 + 10 x (1 - e / W) < 10 first holds at e = 6001.
        self.assertEqual(s.reply[6], 6000)
        state = s.after[RK]
        self.refused_by(self.issue(T0 + self.W + 6000, [self.R], state), 0, 1)
        self.accepted(self.issue(T0 + self.W + 6001, [self.R], state))

    def test_the_wait_is_exact(self):
        # 5 now, 10 before, 10 s in: 5 + 10 x 5/6 = 13.3; < 10 from e > 30 s.
        state = {"sw": "%d:5:10" % self.IDX}
        s = self.issue(T0 + 10000, [self.R], state)
        self.refused_by(s, 0, 20001)
        self.refused_by(self.issue(T0 + 10000 + 20000, [self.R], state), 0, 1)
        s = self.issue(T0 + 10000 + 20001, [self.R], state)
        self.accepted(s, 0, 0, 2 * self.W - 30001)
        self.assertEqual(s.after[RK], {"sw": "%d:6:10" % self.IDX})

    def test_remaining_is_what_the_estimate_leaves(self):
        # 2 now, 10 before, half way: 2 + 5 = 7; after this take 8: 2 left.
        s = self.issue(T0 + self.W // 2, [self.R], {"sw": "%d:2:10" % self.IDX})
        self.accepted(s, 0, 2, self.W + self.W // 2)


# 6. wrong_guess_cap ------------------------------------------------------------------------------------
class WrongGuessCapEdgeTest(EdgeScriptTest):
    def test_the_lock_ends_when_the_oldest_guess_leaves(self):
        log = [T0, T0 + 1000]
        s = self.verify(T0 + 2000, WRONG, wrong=log)
        self.assertEqual(s.reply, ["locked", VID, 9, 8000, 0, 3])
        self.assertEqual(s.after[PK]["wg"], "%d %d %d" % (T0, T0 + 1000, T0 + 2000))
        self.assert_expires(s, PK, 10000)
        log.append(T0 + 2000)
        s = self.verify(T0 + 9999, RIGHT, wrong=log)
        self.assertEqual(s.reply, ["locked", "", 0, 1, 0, 3])
        self.assertEqual(s.after[PK]["wg"], " ".join(map(str, log)))  # nothing counted, the code still there
        self.assertIn(SCOPE, s.after[PK])
        s = self.verify(T0 + 10000, RIGHT, wrong=log)
        self.assertEqual(s.reply, ["ok", VID, 10, 1000, 0, 2])
        # One more wrong guess then locks until the next oldest leaves.
        s = self.verify(T0 + 10000, WRONG, wrong=log)
        self.assertEqual(s.reply, ["locked", VID, 9, 1000, 0, 3])
        self.assertEqual(s.after[PK]["wg"], "%d %d %d" % (T0 + 1000, T0 + 2000, T0 + 10000))

    def test_below_the_cap_a_wrong_guess_says_when_the_oldest_leaves(self):
        s = self.verify(T0 + 9999, WRONG, wrong=[T0])
        self.assertEqual(s.reply, ["wrong", VID, 9, 1, 0, 2])
        s = self.verify(T0 + 10000, WRONG, wrong=[T0])
        self.assertEqual(s.reply, ["wrong", VID, 9, 10000, 0, 1])  # T0 left: only this one counts
        self.assertEqual(s.after[PK]["wg"], str(T0 + 10000))

    def test_a_shadow_cap_counts_on_and_keeps_at_most_its_limit(self):
        log = [T0, T0 + 1000, T0 + 2000]
        s = self.verify(T0 + 3000, WRONG, wrong=log, wshadow="1")
        self.assertEqual(s.reply, ["wrong", VID, 9, 8000, 1, 3])  # would be locked; blocks nothing
        self.assertEqual(s.after[PK]["wg"], "%d %d %d" % (T0 + 1000, T0 + 2000, T0 + 3000))

    def test_the_issue_side_lock(self):
        r = Rule(WG, "wg", 3, 10000)
        state = {"wg": "%d %d %d" % (T0, T0 + 1000, T0 + 2000)}
        self.refused_by(self.issue(T0 + 9999, [r], state), 0, 1)
        s = self.issue(T0 + 10000, [r], state)
        self.accepted(s, 0, 1, 1000)
        self.assertEqual(s.after[RK], state)  # the issue counts no guess


# 7. penalties ------------------------------------------------------------------------------------------
class PenaltyEdgeTest(EdgeScriptTest):
    """A sliding log of 1 per 2 s, boxed for 5 s after 2 refusals within 10 s."""
    R = Rule(SL, "sl", 1, 2000, 0, "0:2:10000:5000")

    def test_refusals_count_within_the_window_of_the_first(self):
        s = self.issue(T0 + 100, [self.R], {"sl": str(T0)})
        self.refused_by(s, 0, 1900)
        self.assertEqual(s.after[RK]["!sl"], "%d:1:0" % (T0 + 100))
        self.assert_expires(s, RK, 10000)
        # The second 1 ms before the first's window ends: the block starts.
        at = T0 + 100 + 9999
        s = self.issue(at, [self.R], {"sl": str(at - 1000), "!sl": "%d:1:0" % (T0 + 100)})
        self.refused_by(s, 0, 5000, -5000)
        self.assertEqual(s.after[RK]["!sl"], "0:0:%d" % (at + 5000))
        self.assert_expires(s, RK, 5000)
        # At the window's end it counts afresh, as the first of a new one.
        at = T0 + 100 + 10000
        s = self.issue(at, [self.R], {"sl": str(at - 1000), "!sl": "%d:1:0" % (T0 + 100)})
        self.refused_by(s, 0, 1000)
        self.assertEqual(s.after[RK]["!sl"], "%d:1:0" % at)
        self.assert_expires(s, RK, 10000)

    def test_the_block_ends_at_its_edge(self):
        until = T0 + 20000
        state = {"!sl": "0:0:%d" % until}  # the rule itself would pass
        s = self.issue(until - 1, [self.R], state)
        self.refused_by(s, 0, 1, -1)
        self.assertEqual((s.after[RK], s.exp[RK]), (state, None))  # not counted, not extended
        for at in (until, until + 1):
            s = self.issue(at, [self.R], state)
            self.accepted(s, 0, 0, 2000)
            self.assertEqual(s.after[RK]["sl"], str(at))
        # Refused by the rule right at the block's end: counted afresh.
        s = self.issue(until, [self.R], dict(state, sl=str(until - 1)))
        self.refused_by(s, 0, 1999)
        self.assertEqual(s.after[RK]["!sl"], "%d:1:0" % until)

    def test_the_wait_after_a_block_is_exact(self):
        at = T0 + 5000
        s = self.issue(at, [self.R], {"sl": str(at - 10), "!sl": "%d:1:0" % (at - 10)})
        self.refused_by(s, 0, 5000, -5000)
        state = s.after[RK]
        self.refused_by(self.issue(at + 4999, [self.R], state), 0, 1, -1)
        self.accepted(self.issue(at + 5000, [self.R], state))

    def test_on_verify(self):
        r = Rule(SL, "sl", 1, 2000, 0, "0:2:10000:5000")
        at = T0 + 100
        s = self.verify(at, RIGHT, [r], {"sl": str(at - 1000), "!sl": "%d:1:0" % (at - 9999)})
        self.assertEqual(s.reply[0], "limited")
        self.assertEqual(s.reply[6:9], [0, -5000, 5000])
        self.assertEqual(s.after[RK]["!sl"], "0:0:%d" % (at + 5000))
        self.assert_expires(s, RK, 5000)
        s = self.verify(at, RIGHT, [r], {"sl": str(at - 1000), "!sl": "%d:1:0" % (at - 10000)})
        self.assertEqual(s.reply[6:9], [0, 0, 1000])
        self.assertEqual(s.after[RK]["!sl"], "%d:1:0" % at)
        state = {"!sl": "0:0:%d" % (at + 5000)}
        s = self.verify(at + 4999, RIGHT, [r], state)
        self.assertEqual((s.reply[0], s.reply[6:9]), ("limited", [0, -1, 1]))
        self.assertEqual(s.after[RK], state)
        s = self.verify(at + 5000, RIGHT, [r], state)
        self.assertEqual((s.reply[0], s.reply[6:9]), ("ok", [1, 0, 2000]))


# 8. the counter kinds on verify: the same edges as on issue --------------------------------------------
class VerifyRuleEdgeTest(EdgeScriptTest):
    def limited(self, s, reset, remaining=0):
        self.assertEqual((s.reply[0], s.reply[6:9]), ("limited", [0, remaining, reset]), s.reply)

    def passed(self, s, remaining, reset):
        self.assertEqual((s.reply[0], s.reply[6:9]), ("ok", [1, remaining, reset]), s.reply)

    def test_sliding_log(self):
        r = Rule(SL, "sl", 2, 10000)
        full = {"sl": "%d %d" % (T0, T0 + 4000)}
        s = self.verify(T0 + 9999, RIGHT, [r], full)
        self.limited(s, 1)
        self.assertEqual(s.after[RK], full)
        s = self.verify(T0 + 10000, RIGHT, [r], full)
        self.passed(s, 0, 4000)
        self.assertEqual(s.after[RK], {"sl": "%d %d" % (T0 + 4000, T0 + 10000)})
        self.assert_expires(s, RK, 10000)

    def test_fixed_window(self):
        r, idx = Rule(FW, "fw", 2, 60000), T0 // 60000
        full = {"fw": "%d:2" % idx}
        self.limited(self.verify(T0 + 59999, RIGHT, [r], full), 1)
        s = self.verify(T0 + 60000, RIGHT, [r], full)
        self.passed(s, 1, 60000)
        self.assertEqual(s.after[RK], {"fw": "%d:1" % (idx + 1)})
        self.assert_expires(s, RK, 60000)

    def test_token_bucket(self):
        r = Rule(TB, "tb", 10, 10000, 3)
        state = {"tb": str(T0 + 3000)}
        self.limited(self.verify(T0 + 999, RIGHT, [r], state), 1)
        s = self.verify(T0 + 1000, RIGHT, [r], state)
        self.passed(s, 0, 3000)
        self.assertEqual(s.after[RK], {"tb": str(T0 + 4000)})
        self.assert_expires(s, RK, 3000)

    def test_sliding_window_counter(self):
        r, idx = Rule(SWC, "sw", 10, 60000), T0 // 60000
        full = {"sw": "%d:10:0" % idx}
        self.limited(self.verify(T0 + 59999, RIGHT, [r], full), 2)
        self.limited(self.verify(T0 + 60000, RIGHT, [r], full), 1)
        s = self.verify(T0 + 60001, RIGHT, [r], full)
        self.passed(s, 0, 119999)
        self.assertEqual(s.after[RK], {"sw": "%d:1:10" % (idx + 1)})
        self.assert_expires(s, RK, 119999)


# 9. cost caps: issue.lua's fixed windows ---------------------------------------------------------------
class CostCapEdgeTest(EdgeScriptTest):
    CAP = ("c%d" % HOUR_MS, HOUR_MS, 100)
    H = T0 // HOUR_MS

    def spend(self, at, cost):
        return self.issue(at, [], cost={self.CAP[0]: cost}, caps=[self.CAP], price=20)

    def test_the_window_ends_at_its_edge(self):
        end = T0 + HOUR_MS
        s = self.spend(end - 1, "%d:81" % self.H)
        self.assertEqual((s.reply[0], s.reply[5]), (0, 1))  # cost_retry: the next window
        self.assertEqual((s.after[CK], s.exp[CK]), ({self.CAP[0]: "%d:81" % self.H}, None))
        for at in (end, end + 1):
            s = self.spend(at, "%d:100" % self.H)
            self.assertEqual((s.reply[0], s.reply[5]), (1, 0))
            self.assertEqual(s.after[CK], {self.CAP[0]: "%d:20" % (self.H + 1)})
            self.assert_expires(s, CK, end + HOUR_MS - at)

    def test_an_exact_fit_is_taken(self):
        s = self.spend(T0 + HOUR_MS - 1, "%d:80" % self.H)
        self.assertEqual(s.reply[0], 1, s.reply)
        self.assertEqual(s.after[CK], {self.CAP[0]: "%d:100" % self.H})
        self.assert_expires(s, CK, 1)
        self.assertEqual(s.reply[6], 1)  # next_ms: no room for another until the next window

    def test_the_wait_is_exact(self):
        full = "%d:100" % self.H
        s = self.spend(T0 + 1000, full)
        self.assertEqual((s.reply[0], s.reply[5]), (0, HOUR_MS - 1000))
        self.assertEqual(self.spend(T0 + HOUR_MS - 1, full).reply[:1], [0])
        self.assertEqual(self.spend(T0 + HOUR_MS, full).reply[:1], [1])

    def test_an_older_window_spent_nothing(self):
        s = self.spend(T0, "%d:100" % (self.H - 1))
        self.assertEqual(s.reply[0], 1, s.reply)
        self.assertEqual(s.after[CK], {self.CAP[0]: "%d:20" % self.H})


# 10. the scripts on Redis's own clock: reserve.lua, headroom.lua, slot.lua -----------------------------
class RedisClockEdgeTest(EdgeScriptTest):
    """No replay clock: a call's window is the one Redis's TIME gives
    around it. A day's window, so it rolls over between the two reads only
    at midnight (then the test is skipped, never wrong)."""
    W = DAY_MS
    F = "c%d" % DAY_MS
    RESERVE, HEADROOM = script("src", "limits", "reserve.lua"), script("src", "limits", "headroom.lua")
    SLOT = script("src", "pacer", "slot.lua")

    def day(self, s):
        if s.t1 // self.W != s.t2 // self.W:
            self.skipTest("the call straddled midnight on Redis's clock")
        return s.t1 // self.W

    def reserve(self, cost):
        """reserve.lua's reservation 2 of a message (its issue's is 1), price 20, against a cap of 100 a day."""
        return self.run_script(self.RESERVE, [CK, "t:msg"], [2, 20, 5, 0, 1, self.F, self.W, 100],
                               {CK: cost, "t:msg": None}, [CK])

    def test_reserve_fits_exactly_and_refuses_until_the_window_ends(self):
        idx = int(self.redis.cmd("TIME")[0]) * 1000 // self.W
        s = self.reserve({self.F: "%d:80" % idx})
        if self.day(s) != idx:
            self.skipTest("midnight on Redis's clock")
        self.assertEqual(s.reply[:2], [1, 2], s.reply)
        self.assertEqual(s.after[CK], {self.F: "%d:100" % idx})
        self.assert_expires(s, CK, (idx + 1) * self.W - int(s.reply[2]))  # until the window ends
        s = self.reserve({self.F: "%d:81" % idx})
        self.assertEqual((s.reply[0], s.reply[4]), (0, 0), s.reply)
        end = (self.day(s) + 1) * self.W
        self.assertTrue(end - s.t2 <= s.reply[3] <= end - s.t1, (s.reply, end - s.t2, end - s.t1))
        self.assertEqual((s.after[CK], s.exp[CK]), ({self.F: "%d:81" % idx}, None))
        # Yesterday's sum spends nothing of today's.
        s = self.reserve({self.F: "%d:100" % (idx - 1)})
        self.assertEqual(s.reply[0], 1, s.reply)
        self.assertEqual(s.after[CK], {self.F: "%d:20" % self.day(s)})

    def test_headroom_counts_the_current_window_only(self):
        idx = int(self.redis.cmd("TIME")[0]) * 1000 // self.W
        for cost, want in (("%d:30" % idx, 70), ("%d:30" % (idx - 1), 100), ("%d:100" % idx, 0)):
            s = self.run_script(self.HEADROOM, [CK], [self.F, self.W, 100], {CK: {self.F: cost}}, [])
            if self.day(s) != idx:
                self.skipTest("midnight on Redis's clock")
            self.assertEqual(s.reply, [want], cost)

    def slot(self, tat_us):
        """slot.lua's take for a message claimed by consumer c1, the slot key
        holding tat_us (None: absent), period 20 ms."""
        self.redis.cmd("DEL", "t:sq", "t:slot")
        self.redis.cmd("XGROUP", "CREATE", "t:sq", "senders", "$", "MKSTREAM")
        eid = self.redis.cmd("XADD", "t:sq", "*", "id", "m1")
        self.redis.cmd("XREADGROUP", "GROUP", "senders", "c1", "COUNT", 1, "STREAMS", "t:sq", ">")
        cmds = [("SET", "t:slot", tat_us)] if tat_us is not None else []
        cmds += [("TIME",), ("EVAL", self.SLOT, 4, "t:slot", "t:msg", PK, "t:sq", "take", VID, "", 2 ** 50, 0,
                             20000, "0", eid, "c1"),
                 ("GET", "t:slot"), ("PEXPIRETIME", "t:slot"), ("TIME",)]
        out = self.atomic(cmds)[-5:]
        return out[1], int(out[2]), out[3], [int(t[0]) * 1000000 + int(t[1]) for t in (out[0], out[4])]

    def test_slot_is_max_of_tat_and_now_then_a_period_on(self):
        # As sched_gcra_take (src/pacer/schedule.c): a tat ahead is the slot.
        t = self.redis.cmd("TIME")
        ahead = int(t[0]) * 1000000 + int(t[1]) + 10000000
        reply, tat, exp_ms, (t1, t2) = self.slot(ahead)
        self.assertEqual(reply[:2], ["ok", str(ahead)], reply)
        now_us = int(reply[2])
        self.assertTrue(t1 <= now_us <= t2, (t1, now_us, t2))
        self.assertEqual(tat, ahead + 20000)
        # It lives until tat has passed, plus a second: floor((tat - now) / 1000) + 1000 ms
        # from Redis's ms clock, which may read a ms off the script's TIME.
        self.assertLessEqual(abs(exp_ms - ((tat - now_us) // 1000 + 1000) - now_us // 1000), 1)
        # A tat behind now (an idle queue) earns nothing: the slot is now.
        reply, tat, _, _ = self.slot(t1 - 10000000)
        self.assertEqual(reply[1], reply[2], reply)
        self.assertEqual(tat, int(reply[2]) + 20000)
        reply, tat, _, _ = self.slot(None)
        self.assertEqual((reply[1], tat), (reply[2], int(reply[2]) + 20000))
