"""The refusal cache (issue 13; docs/architecture.md, "Limits and rules": "The refusal cache") over HTTP, on a
real Redis: repeats of a certain refusal are answered without Redis, with
the same status, reason, headers and Retry-After as the uncached answer; a
cached refusal never outlives the Redis state it came from; a reload, an
override (on a second instance), and an unlock clear it; cached hits count
toward penalties; token-bucket refusals are not cached; the metrics.

Bounds: an admin change reaches every instance within 2 s (each refreshes
once a second); checks allow 2.5 s, as test_admin does, for the polls on a
loaded 2-core machine."""
import datetime
import json
import os
import re
import signal
import time

from harness import Otpd, PortClash, free_port, wait_until
from netproxy import NetProxy
from test_admin import ADMIN_KEY, AdminTest
from test_limits import P, P2, LimitsTest, wrong_of

SEEN_S = 2.5


def evalsha_calls(redis):
    m = re.search(r"calls=(\d+)", redis.info("commandstats").get("cmdstat_evalsha", "calls=0"))
    return int(m.group(1))


def metric(otpd, name, labels=""):
    st, _, text = otpd.call("GET", "/metrics", auth=None)
    for line in (text if isinstance(text, str) else text.decode()).splitlines():
        if line.startswith(name + labels + " "):
            return int(float(line.split()[-1]))
    return None


class CacheTest(LimitsTest, AdminTest):
    """Both suites' helpers; an admin key in the config."""

    def hits(self, op="issue", inst=None):
        return metric(inst or self.otpd, "otpd_refusal_cache_hits_total", '{op="%s"}' % op)


class RepeatsTest(CacheTest):
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "30s"}]

    def test_repeats_answered_without_redis_same_answer(self):
        self.accepted(self.otpd.issue(P))
        first = self.otpd.issue(P)  # decided by Redis, then remembered
        ra = self.refused(first, 429, "rate_limited", "resend")
        t = self.assert_rl(first, "resend", 1, 30, 0)
        self.assertEqual(self.hits(), 0)
        n = 50
        before = evalsha_calls(self.redis)
        for _ in range(n):
            r = self.otpd.issue(P)
            ra2 = self.refused(r, 429, "rate_limited", "resend")
            # The same answer; its waits rounded as Redis's, so never longer and at most
            # a second shorter (a whole second may pass, or a ms cross a second boundary).
            self.assertIn(ra2, (ra, ra - 1), r)
            self.assertIn(self.assert_rl(r, "resend", 1, 30, 0), (t, t - 1), r)
            self.assertEqual(r[2]["detail"], first[2]["detail"])
        calls = evalsha_calls(self.redis) - before
        # Uncached, each would be one EVALSHA at least (50); the main thread's tick
        # makes a few a second (admin refresh, lapsed holds), and 50 loopback
        # requests take well under 5 s even on a loaded machine.
        self.assertLess(calls, n // 2, "%d EVALSHA for %d cached refusals" % (calls, n))
        self.assertEqual(self.hits(), n)
        self.assertGreaterEqual(metric(self.otpd, "otpd_refusal_cache_entries"), 1)
        # Another phone is not refused by P's entry.
        self.accepted(self.otpd.issue(P2))
        # With Redis stopped, the cached refusal still answers (a Redis call would be a 503)
        # while the last admin read is fresh; a tick whose read falls in the pause ends that at once.
        self.redis.pause()
        try:
            r = self.otpd.issue(P)
        finally:
            self.redis.resume()
        if r[0] == 503:
            self.refused(r, 503, "store_unavailable")
            n -= 1
        else:
            self.refused(r, 429, "rate_limited", "resend")
        # The ledger has every refusal, cached ones included (aggregated rows).
        rows = wait_until(lambda: (lambda r: r if r and r[0]["n"] == n + 2 else None)(
            self.otpd.rows("SELECT SUM(count) AS n FROM requests WHERE decision = 'rate_limited'")),
            what="the refusals in the ledger")
        self.assertEqual(rows[0]["n"], n + 2)


class ExactEndTest(CacheTest):
    """A cached refusal ends no later than the Redis state it came from: a
    request sent once Redis's clock has passed the resend delay's end (read
    from Redis, the state itself) is accepted, never answered from memory."""
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "2s"}]

    def test_ends_no_later_than_redis(self):
        self.accepted(self.otpd.issue(P))
        until = int(self.redis.cmd("HGET", "otp:{%s}" % P, self.field("resend")))
        self.refused(self.otpd.issue(P), 429, "rate_limited", "resend")
        while True:
            t = self.rtime_ms()
            st, _, body = self.otpd.issue(P)
            if t >= until:
                self.assertEqual(st, 202, "refused at Redis time %d, after the state's end %d: %r"
                                 % (t, until, body))
                break
            self.assertIn(st, (202, 429), body)
            if st == 202:
                break
        self.assertGreater(self.hits(), 0, "no refusal was answered from the cache")


class ReloadClearsTest(CacheTest):
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1m"}]

    def test_reload_clears(self):
        self.accepted(self.otpd.issue(P))
        self.refused(self.otpd.issue(P), 429, "rate_limited", "resend")
        self.refused(self.otpd.issue(P), 429, "rate_limited", "resend")
        self.assertEqual(self.hits(), 1)
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["limits"] = [{"name": "other", "key": "phone", "algorithm": "sliding_log", "limit": 5, "window": "1m"}]
        n = self.otpd.log().count("reloaded")
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("reloaded") > n, what="the reload")
        self.accepted(self.otpd.issue(P))
        self.assertEqual(metric(self.otpd, "otpd_refusal_cache_entries"), 0)


class OverrideClearsTest(CacheTest):
    limits = [{"name": "per_phone", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1h"}]

    def test_override_clears_on_second_instance(self):
        self.start_b()
        self.accepted(self.otpd.issue(P))
        self.refused(self.b.issue(P), 429, "rate_limited", "per_phone")
        self.refused(self.b.issue(P), 429, "rate_limited", "per_phone")
        self.assertEqual(self.hits(inst=self.b), 1)
        self.add("overrides", {"rule": "per_phone", "key": {"phone": P}, "limit": 5, "expires_in": "1h"})
        wait_until(lambda: self.b.issue(P)[0] == 202, timeout=SEEN_S, what="B accepts within 2 s of the override")


class UnlockClearsTest(CacheTest):
    limits = [{"name": "guesses", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 2, "window": "1h"}]

    def test_unlock_clears_cached_lock(self):
        _, code = self.issue_and_code(P)
        self.assertEqual(self.otpd.verify(P, wrong_of(code))[0], 422)
        self.refused(self.otpd.verify(P, wrong_of(code)), 429, "locked", "guesses")
        r = self.otpd.verify(P, code)  # the lock, from the cache
        self.refused(r, 429, "locked", "guesses")
        self.assert_rl(r, "guesses", 2, 3600, 0)
        self.assertEqual(self.hits("verify"), 1)
        st, _, out = self.admin("POST", "unlock", {"phone": P})
        self.assertEqual(st, 200, out)
        # The instance that ran the unlock forgets at once.
        self.assertEqual(self.otpd.verify(P, code)[0], 200)

    def test_unlock_clears_on_second_instance(self):
        self.start_b()
        # B's first refresh hands it the (empty) overrides, which clears its cache: let it pass first.
        wait_until(lambda: "admin overrides in force" in self.b.log(), what="B's first admin refresh")
        _, code = self.issue_and_code(P)
        self.assertEqual(self.b.verify(P, wrong_of(code))[0], 422)
        self.refused(self.b.verify(P, wrong_of(code)), 429, "locked", "guesses")
        self.refused(self.b.verify(P, code), 429, "locked", "guesses")
        self.assertEqual(self.hits("verify", inst=self.b), 1)
        st, _, out = self.admin("POST", "unlock", {"phone": P})  # through A
        self.assertEqual((st, out), (200, {"unlocked": 1}))
        wait_until(lambda: self.b.verify(P, code)[0] == 200, timeout=SEEN_S,
                   what="B verifies the right code within 2 s of the unlock on A")


class CachedPenaltyTest(CacheTest):
    limits = [{"name": "per_phone", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1h",
               "penalty": {"after": 5, "within": "1m", "block": "15m"}}]

    def test_cached_hits_count_toward_penalty(self):
        self.accepted(self.otpd.issue(P))
        for _ in range(5):  # one decided by Redis, four answered from the cache
            self.refused(self.otpd.issue(P), 429, "rate_limited", "per_phone")
        self.assertEqual(self.hits(), 4)
        pen = "!" + self.field("per_phone")
        state = wait_until(lambda: (lambda v: v if v and v.startswith("0:0:") else None)(
            self.redis.cmd("HGET", "otp:{%s}" % P, pen)), timeout=SEEN_S,
            what="the penalty's block in Redis within a tick")
        left = int(state.split(":")[2]) - self.rtime_ms()
        self.assertGreater(left, 14 * 60000, state)


class TokenBucketNotCachedTest(CacheTest):
    limits = [{"name": "bucket", "key": "phone", "algorithm": "token_bucket", "limit": 1, "window": "1h",
               "burst": 1}]

    def test_not_cached(self):
        self.accepted(self.otpd.issue(P))
        for _ in range(3):
            self.refused(self.otpd.issue(P), 429, "rate_limited", "bucket")
        self.assertEqual(self.hits(), 0)
        self.assertEqual(metric(self.otpd, "otpd_refusal_cache_entries"), 0)


class BoundTest(CacheTest):
    """A cache of 16 (one per shard): many refused phones evict, never grow it."""
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1m"}]

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["refusal_cache"] = {"max_entries": 16}
        return cfg

    def test_bound_and_evictions(self):
        phones = ["+9198123%05d" % i for i in range(40)]
        for p in phones:
            self.accepted(self.otpd.issue(p))
            self.refused(self.otpd.issue(p), 429, "rate_limited", "resend")
        self.assertLessEqual(metric(self.otpd, "otpd_refusal_cache_entries"), 16)
        self.assertGreater(metric(self.otpd, "otpd_refusal_cache_evictions_total"), 0)


class LogLevelTest(CacheTest):
    """A flood of repeats does not grow the log at info: the first refusal
    of a key (Redis decided it) is an info line, the cached repeats are at
    debug; the metric and the ledger still have each of them."""
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1m"}]

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["log"] = {"format": "json", "level": "info"}
        return cfg

    def refused_lines(self):
        out = []
        for line in self.otpd.log().splitlines():
            if line.startswith("{"):
                obj = json.loads(line)
                if obj.get("event") == "issue.refused":
                    out.append(obj)
        return out

    def test_cached_repeats_at_debug(self):
        self.accepted(self.otpd.issue(P))
        for _ in range(6):
            self.refused(self.otpd.issue(P), 429, "rate_limited", "resend")
        self.assertEqual(self.hits(), 5)
        # The same barrier as any line: the otpd answered before it wrote, so stop it first.
        self.assertEqual(self.otpd.stop(), 0)
        lines = self.refused_lines()
        self.assertEqual([(l["level"], l["rule"], l["status"]) for l in lines], [("info", "resend", 429)], lines)


class OffTest(CacheTest):
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1m"}]

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["refusal_cache"] = {"max_entries": 0}
        return cfg

    def test_off(self):
        self.accepted(self.otpd.issue(P))
        for _ in range(3):
            self.refused(self.otpd.issue(P), 429, "rate_limited", "resend")
        self.assertEqual(self.hits(), 0)


class PenaltyBlockHitsTest(CacheTest):
    """Refusals answered from memory during a penalty block are not counted,
    as Redis counts none during a block: hits taken in the block's last
    second and flushed after its end must not start a new block. A second
    rule (on device_id, no block yet) gives the flush a barrier: its one
    cached hit, made after P's, reaches Redis in the same flush or a later
    one."""
    limits = [{"name": "per_phone", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1s",
               "penalty": {"after": 1, "within": "1m", "block": "3s"}},
              {"name": "per_device", "key": "device", "algorithm": "sliding_log", "limit": 1, "window": "1h",
               "penalty": {"after": 5, "within": "1h", "block": "1h"}}]

    def test_hits_during_a_block_never_start_another(self):
        # The first admin refresh hands over the (empty) overrides, which clears the cache: let it pass.
        wait_until(lambda: "admin overrides in force" in self.otpd.log(), what="the first admin refresh")
        dev_pen = ("otp:d:{dev-1}", "!" + self.field("per_device"))
        self.accepted(self.otpd.issue(P2, device_id="dev-1"))
        self.refused(self.otpd.issue(P2, device_id="dev-1"), 429, "rate_limited", "per_device")  # Redis: count 1
        self.assertEqual(self.redis.cmd("HGET", *dev_pen).split(":")[1], "1")
        pen = "!" + self.field("per_phone")
        self.accepted(self.otpd.issue(P))
        # Redis refuses and starts the block: a refusal that lasts the block.
        self.refused(self.otpd.issue(P), 429, "rate_limited", "per_phone")
        block = self.redis.cmd("HGET", "otp:{%s}" % P, pen)
        self.assertTrue(block.startswith("0:0:"), block)
        before = self.hits()
        # Hammer until a request is accepted (the block and the 1 s log are over):
        # every refusal until then came from the block, most of them from memory.
        while True:
            st, _, body = self.otpd.issue(P)
            if st == 202:
                break
            self.assertEqual(st, 429, body)
        self.assertGreater(self.hits() - before, 0, "no refusal of the block answered from memory")
        # The barrier: one more cached hit on the device rule, after every hit on P.
        self.refused(self.otpd.issue(P2, device_id="dev-1"), 429, "rate_limited", "per_device")
        wait_until(lambda: self.redis.cmd("HGET", *dev_pen).split(":")[1] == "2", timeout=SEEN_S,
                   what="the device rule's cached hit counted in Redis")
        # P's penalty field is the block's, untouched: no refusal was counted since.
        self.assertEqual(self.redis.cmd("HGET", "otp:{%s}" % P, pen), block)


class PartitionTest(CacheTest):
    """Instance A reaches Redis through a netproxy, B directly. An admin
    change made through B while A is cut off must not be contradicted by
    A's memory for more than about 2 s: A stops answering a cached lock, or
    a block from its snapshot, and answers 503 store_unavailable (it can
    ask nobody) until Redis is back; then the change holds on A too."""
    RUN_SECONDS = 19

    limits = [{"name": "guesses", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 2, "window": "1h"}]
    CUT_S = 3.0  # the refresh fails within a tick (about 1 s), or ages past 2 s: 3 s on a loaded machine

    def configure(self, cfg):
        cfg = super().configure(cfg)
        self.direct = cfg["redis"]["url"]
        self.proxy = NetProxy(self.redis.port)
        # The proxy is a Python thread: on a loaded machine it may take longer than 50 ms to pass a reply.
        cfg["redis"] = dict(cfg["redis"], url="redis://127.0.0.1:%d/0" % self.proxy.port, timeout_ms=200)
        return cfg

    def tearDown(self):
        self.proxy.set_mode("pass")
        try:
            super().tearDown()
        finally:
            self.proxy.stop()

    def start_direct_b(self):
        """B, straight to Redis, after A's first admin refresh (which clears A's cache)."""
        url = self.otpd.config["redis"]["url"]
        self.otpd.config["redis"]["url"] = self.direct
        try:
            self.start_b()
        finally:
            self.otpd.config["redis"]["url"] = url
        wait_until(lambda: "admin overrides in force" in self.otpd.log(), what="A's first admin refresh")

    def after_cut(self, mode, change, ask, was, then=3):
        """Cuts A off (mode), makes change through B, then polls ask() (a
        (status, headers, body) from A): the answer `was` may last until the
        cut is CUT_S old, then only 503 store_unavailable, `then` times running."""
        self.proxy.set_mode(mode)
        cut = time.monotonic()
        change()
        seen = []
        while True:
            st, _, body = ask()
            answer = (st, body.get("error") if isinstance(body, dict) else body)
            seen.append((round(time.monotonic() - cut, 2), answer))
            if answer != was:
                self.assertEqual(answer, (503, "store_unavailable"), seen)
            if time.monotonic() - cut > self.CUT_S:
                break
            time.sleep(0.2)
        for _ in range(then):
            self.assertEqual(ask()[0], 503, seen)
        return seen

    def unlock_b(self):
        st, _, out = self.admin("POST", "unlock", {"phone": P}, inst=self.b)
        self.assertEqual((st, out), (200, {"unlocked": 1}))

    def cached_lock_outlives_unlock(self, mode):
        self.start_direct_b()
        _, code = self.issue_and_code(P)
        self.assertEqual(self.otpd.verify(P, wrong_of(code))[0], 422)
        self.refused(self.otpd.verify(P, wrong_of(code)), 429, "locked", "guesses")
        self.refused(self.otpd.verify(P, code), 429, "locked", "guesses")
        self.assertEqual(self.hits("verify"), 1, "A answers the lock from its cache")
        self.after_cut(mode, self.unlock_b, lambda: self.otpd.verify(P, code), (429, "locked"))
        self.proxy.reset_all()
        self.proxy.set_mode("pass")
        wait_until(lambda: self.otpd.verify(P, code)[0] == 200, what="A verifies once Redis is back")

    def test_unlock_during_blackhole(self):
        self.cached_lock_outlives_unlock("blackhole")

    def test_unlock_during_refuse(self):
        self.cached_lock_outlives_unlock("refuse")

    def test_unlock_during_stalled_tick(self):
        """A's tick stalls on a Redis call that hears nothing for 2.5 s (its
        timeout) before its admin read can even fail: the read's age alone
        stops the cache."""
        self.otpd.config["redis"]["timeout_ms"] = 2500
        self.restart()
        self.CUT_S = 2.5
        self.start_direct_b()
        _, code = self.issue_and_code(P)
        self.assertEqual(self.otpd.verify(P, wrong_of(code))[0], 422)
        self.refused(self.otpd.verify(P, wrong_of(code)), 429, "locked", "guesses")
        self.refused(self.otpd.verify(P, code), 429, "locked", "guesses")
        # A cached answer is instant; one that went to Redis waits for the timeout (twice: one retry).
        seen = self.after_cut("blackhole", self.unlock_b, lambda: self.otpd.verify(P, code), (429, "locked"),
                              then=0)
        self.assertEqual(seen[-1][1], (503, "store_unavailable"), seen)
        self.proxy.reset_all()
        self.proxy.set_mode("pass")
        wait_until(lambda: self.otpd.verify(P, code)[0] == 200, what="A verifies once Redis is back")

    def test_block_removed_during_cut(self):
        self.start_direct_b()
        row = self.add("blocks", {"match": {"phone": P}, "expires_in": "1h"}, inst=self.b)
        wait_until(lambda: self.blocked(self.otpd, P), timeout=SEEN_S, what="A sees the block")

        def remove():
            st, _, out = self.admin("DELETE", "blocks/" + row["id"], inst=self.b)
            self.assertEqual(st, 204, out)
        self.after_cut("blackhole", remove, lambda: self.otpd.verify(P, "123456"), (403, "blocked"))
        self.proxy.reset_all()
        self.proxy.set_mode("pass")
        wait_until(lambda: self.otpd.verify(P, "123456")[0] == 404, what="A unblocked once Redis is back")


class FailingReadTest(CacheTest):
    """An admin read that fails while Redis itself answers (the change
    counter made the wrong type, so the read errs): from the first failed
    read on, no refusal is answered from memory (the lock is asked of
    Redis, which still has it) and a block in the snapshot is a 503, not a
    403, though the last good read is under 2 s old. A good read restores
    both."""
    limits = [{"name": "guesses", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 2, "window": "1h"}]

    def failures(self):
        return metric(self.otpd, "otpd_admin_refresh_failures_total")

    def test_failed_read_stops_memory_at_once(self):
        self.add("blocks", {"match": {"phone": P2}, "expires_in": "1h"})
        wait_until(lambda: self.blocked(self.otpd, P2), timeout=SEEN_S, what="the block in the snapshot")
        _, code = self.issue_and_code(P)
        self.assertEqual(self.otpd.verify(P, wrong_of(code))[0], 422)
        self.refused(self.otpd.verify(P, wrong_of(code)), 429, "locked", "guesses")
        self.refused(self.otpd.verify(P, code), 429, "locked", "guesses")
        self.assertEqual(self.hits("verify"), 1)
        f0 = self.failures()
        self.redis.cmd("DEL", "otp:adm:v")
        self.redis.cmd("HSET", "otp:adm:v", "x", "1")
        wait_until(lambda: self.failures() > f0, step=0.005, what="a failed admin read")
        time.sleep(0.05)  # the tick vouches for nothing just after it counts the failure
        # The last good read is about a second old: only the failure stops the cache here.
        self.refused(self.otpd.verify(P, code), 429, "locked", "guesses")
        self.assertEqual(self.hits("verify"), 1, "a lock answered from memory after a failed admin read")
        self.refused(self.otpd.verify(P2, "123456"), 503, "store_unavailable")
        self.redis.cmd("DEL", "otp:adm:v")
        wait_until(lambda: self.otpd.verify(P2, "123456")[0] == 403, timeout=SEEN_S,
                   what="the block again after a good read")
        # The counter moved (deleted): the cache was cleared; Redis refuses, then memory again.
        for _ in range(3):
            self.refused(self.otpd.verify(P, code), 429, "locked", "guesses")
            if self.hits("verify") == 2:
                break
        self.assertEqual(self.hits("verify"), 2, "the cache answers again after a good read")


def shadow_count(otpd, rule):
    return metric(otpd, "otpd_shadow_refusals_total", '{rule="%s"}' % rule) or 0


class ModesTest(CacheTest):
    """Every issue algorithm, enforced then shadow: an enforced refusal is
    answered from memory only for the algorithms whose end is certain; a
    reload that turns the same rule (the same Redis state) to shadow is
    never answered by the old cached refusal; a shadow rule's would-be
    refusal is never answered from memory as a refusal, under any algorithm
    or with a penalty, and each one is counted. Then the same for the
    verify side (a verify rate and the wrong-guess lock)."""
    PEN = {"after": 1, "within": "1m", "block": "15m"}
    ISSUE = [("sliding_log", {"limit": 1, "window": "1h"}, True),
             ("sliding_log", {"limit": 1, "window": "1h", "penalty": PEN}, True),
             ("fixed_window", {"limit": 1, "window": "1h"}, True),
             ("resend_delay", {"delay": "1h"}, True),
             ("token_bucket", {"limit": 1, "window": "1h", "burst": 1}, False),
             ("sliding_window_counter", {"limit": 1, "window": "1h"}, False)]

    def reload(self, limits):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["limits"] = limits
        n = self.otpd.log().count("reloaded")
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("reloaded") > n, what="the reload")

    def test_issue_rules_enforced_then_shadow(self):
        self.avoid_boundary(3600, 120)  # fixed windows and counters align to the hour
        for i, (algo, params, cached) in enumerate(self.ISSUE):
            with self.subTest(algo=algo, params=params):
                phone = "+91981200%04d" % i
                rule = dict(name="r", key="phone", algorithm=algo, **params)
                self.reload([rule])
                self.accepted(self.otpd.issue(phone))
                self.refused(self.otpd.issue(phone), 429, "rate_limited", "r")  # Redis decides
                h0 = self.hits()
                for _ in range(3):
                    r = self.otpd.issue(phone)
                    self.refused(r, 429, "rate_limited", "r")
                    self.assertEqual(self.headers(r[1])[0][0], "r")
                self.assertEqual(self.hits() - h0, 3 if cached else 0)
                # The same rule, the same state, now shadow: it never refuses, from memory neither.
                self.reload([dict(rule, mode="shadow")])
                s0 = shadow_count(self.otpd, "r")
                for _ in range(3):
                    r = self.otpd.issue(phone)
                    self.accepted(r)
                    self.assert_no_rl(r)
                self.assertEqual(self.hits() - h0, 3 if cached else 0, "a shadow refusal answered from memory")
                self.assertEqual(shadow_count(self.otpd, "r") - s0, 3, "each would-be refusal counted")
                self.assertEqual(metric(self.otpd, "otpd_refusal_cache_entries"), 0)
                if "penalty" in params:
                    # The shadow rule's refusals start no block of their own (the enforced one's stays).
                    block = self.redis.cmd("HGET", "otp:{%s}" % phone, "!" + self.field("r"))
                    self.assertTrue(block is None or block.startswith("0:0:"), block)

    def test_verify_rules_enforced_then_shadow(self):
        self.avoid_boundary(3600, 60)
        rate = {"name": "vrate", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1h",
                "on": "verify"}
        lock = {"name": "guesses", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 2, "window": "1h"}
        for rule, phone, error, wrongs in ((rate, P, "rate_limited", 1), (lock, P2, "locked", 2)):
            with self.subTest(rule=rule["name"]):
                self.reload([rule])
                _, code = self.issue_and_code(phone)
                for _ in range(wrongs - 1):
                    self.assertEqual(self.otpd.verify(phone, wrong_of(code))[0], 422)
                first = self.otpd.verify(phone, wrong_of(code))
                if rule is lock:
                    self.refused(first, 429, "locked", "guesses")
                else:
                    self.assertEqual(first[0], 422, first)
                    self.refused(self.otpd.verify(phone, wrong_of(code)), 429, error, rule["name"])
                h0 = self.hits("verify")
                self.refused(self.otpd.verify(phone, code), 429, error, rule["name"])
                self.assertEqual(self.hits("verify") - h0, 1)
                self.reload([dict(rule, mode="shadow")])
                s0 = shadow_count(self.otpd, rule["name"])
                r = self.otpd.verify(phone, code)
                self.assertEqual(r[0], 200, r)
                self.assertEqual(self.hits("verify") - h0, 1, "a shadow refusal answered from memory")
                self.assertEqual(shadow_count(self.otpd, rule["name"]) - s0, 1)

    def test_enforced_and_shadow_on_one_key(self):
        """Both refuse, the shadow rule longer: the answer, cached or not, is
        the enforced rule's, never the shadow rule's reason or RateLimit
        fields; once the enforced refusal is over, the request passes,
        though the shadow rule would still refuse it (counted, not from
        memory)."""
        self.reload([{"name": "shad", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1h",
                      "mode": "shadow"},
                     {"name": "enf", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "2s"}])
        self.accepted(self.otpd.issue(P))
        h0 = self.hits()
        while True:
            r = self.otpd.issue(P)
            if r[0] == 202:
                break
            self.refused(r, 429, "rate_limited", "enf")
            self.assertEqual(self.headers(r[1])[0], ("enf", 1, 2))
            time.sleep(0.05)
        self.assertGreater(self.hits() - h0, 0, "no refusal answered from memory")
        self.assert_rl(r, "enf", 1, 2, 0)
        self.assertGreaterEqual(shadow_count(self.otpd, "shad"), 1)


class OverrideRaisesTest(CacheTest):
    """An override that raises a limit, set on A, is honoured by B's cache
    within 2 s for each cached algorithm with a limit (sliding_log: see
    OverrideClearsTest); an override that lowers a shadow rule's limit
    never makes it refuse, from memory or not."""
    limits = [{"name": "fw", "key": "device", "algorithm": "fixed_window", "limit": 1, "window": "1h"},
              {"name": "guesses", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 2, "window": "1h"},
              {"name": "sh", "key": "client_ip", "algorithm": "sliding_log", "limit": 5, "window": "1h",
               "mode": "shadow"}]

    def test_overrides_on_each_algorithm(self):
        self.avoid_boundary(3600, 60)
        self.start_b()
        wait_until(lambda: "admin overrides in force" in self.b.log(), what="B's first admin refresh")
        # fixed_window, keyed on a device.
        self.accepted(self.b.issue("+919812300001", device_id="d1"))
        self.refused(self.b.issue("+919812300002", device_id="d1"), 429, "rate_limited", "fw")
        self.refused(self.b.issue("+919812300003", device_id="d1"), 429, "rate_limited", "fw")
        self.assertEqual(self.hits(inst=self.b), 1)
        self.add("overrides", {"rule": "fw", "key": {"device": "d1"}, "limit": 5, "expires_in": "1h"})
        wait_until(lambda: self.b.issue("+919812300004", device_id="d1")[0] == 202, timeout=SEEN_S,
                   what="B honours the raised fixed window within 2 s")
        # The wrong-guess lock.
        _, code = self.issue_and_code(P)
        self.assertEqual(self.b.verify(P, wrong_of(code))[0], 422)
        self.refused(self.b.verify(P, wrong_of(code)), 429, "locked", "guesses")
        self.refused(self.b.verify(P, code), 429, "locked", "guesses")
        self.assertEqual(self.hits("verify", inst=self.b), 1)
        self.add("overrides", {"rule": "guesses", "key": {"phone": P}, "limit": 5, "expires_in": "1h"})
        wait_until(lambda: self.b.verify(P, code)[0] == 200, timeout=SEEN_S,
                   what="B honours the raised wrong-guess cap within 2 s")
        # A shadow rule lowered to 1: would-be refusals, counted; never a refusal.
        self.add("overrides", {"rule": "sh", "key": {"client_ip": "192.0.2.7"}, "limit": 1, "expires_in": "1h"})
        time.sleep(SEEN_S)
        h0, s0 = self.hits(inst=self.b), shadow_count(self.b, "sh")
        for i in range(4):
            self.accepted(self.b.issue("+91981231000%d" % i, client_ip="192.0.2.7"))
        self.assertEqual(self.hits(inst=self.b), h0)
        self.assertEqual(shadow_count(self.b, "sh") - s0, 3)


def rfc3339_ms(text):
    """Unix ms of an RFC 3339 UTC time with milliseconds ("...T12:00:00.123Z")."""
    dt = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return round(dt.timestamp() * 1000)


class SnapshotExpiryTest(CacheTest):
    """The admin snapshot between two reads: a block ends at its own time
    (by the local estimate of Redis's clock), not at the next read, which
    may be up to a second later. Three blocks whose ends fall at different
    points of the once-a-second read, so that a read landing just between
    one block's end and its check cannot hide a snapshot that ignores ends."""

    def test_block_ends_between_reads(self):
        phones = (P, P2, "+919812345677")
        ends = []
        for p in phones:
            ends.append(rfc3339_ms(self.add("blocks", {"match": {"phone": p}, "expires_in": "3s"})["expires_at"]))
            time.sleep(0.3)
        for p in phones:
            wait_until(lambda: self.blocked(self.otpd, p), timeout=SEEN_S, what="the block in force")
        for p, end in zip(phones, ends):
            while self.rtime_ms() < end + 20:
                time.sleep(0.005)
            self.assertFalse(self.blocked(self.otpd, p), "a block still refusing after its end")
