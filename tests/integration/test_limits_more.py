"""More of the limits over HTTP (issue 7): a code's expiry to the second,
several cost caps at once, `global`-keyed rules, concurrent wrong guesses,
SIGHUP reloads of prices, caps and rule order (and under traffic), and the
cost given back when the ledger refuses a message.

Expiries and Retry-After are checked against Redis's own TIME, read before
and after each call: the script decided at some moment in between."""
import concurrent.futures
import hashlib
import json
import os
import re
import signal
import threading

from harness import OTHER_KEY, wait_until
from test_limits import P, P2, P3, LimitsTest, verification, wrong_of

HOUR_MS = 3600000
DAY_MS = 86400000


# 1. a code's expiry --------------------------------------------------------------------------------
class ExpiryExactTest(LimitsTest):
    """otp.ttl is 5m in the test config: the 202's expires_in, the
    verification's expiry in Redis and in the ledger all say 300 s."""

    def expiry(self, phone):
        return verification(self.redis, phone)[2]

    def test_expires_in_and_stored_expiry_equal_ttl(self):
        ttl = 300000
        r, before, after = self.timed_redis(self.otpd.issue, P)
        body = self.accepted(r)
        e = self.expiry(P)
        self.assertTrue(before + ttl <= e <= after + ttl,
                        "the verification expires %.3fs after the decision, want otp.ttl (300 s)"
                        % ((e - after) / 1000.0))
        self.assertIn(body["expires_in"], (299, 300), body)
        # The phone's key lives at least as long as the verification, and not much longer.
        pttl, b2, a2 = self.timed_redis(self.redis.cmd, "PTTL", "otp:{%s}" % P)
        self.assertGreaterEqual(a2 + pttl, e, "the key expires before its verification")
        self.assertLessEqual(b2 + pttl, e + 1000)
        # The message row carries the same expiry (otpd's clock, the same host here).
        msgs = self.wait_messages(1)
        self.assertIn("It expires in 5 minutes.", msgs[0]["text"])
        row = self.otpd.rows("SELECT expires_ms FROM messages WHERE id = ?", body["id"])[0]
        self.assertLessEqual(abs(row["expires_ms"] - e), 1000, (row, e))
        # A resend continues the verification: the same expiry, and expires_in what is left of it.
        wait_until(lambda: self.rtime_ms() >= e - ttl + 1500, what="1.5 s of the code's life to pass")
        r, before, after = self.timed_redis(self.otpd.issue, P)
        body2 = self.accepted(r)
        self.assertEqual(self.expiry(P), e, "a resend moved the expiry")
        self.assertTrue((e - after) // 1000 - 1 <= body2["expires_in"] <= (e - before) // 1000 + 1,
                        "expires_in %d, but %.3fs are left" % (body2["expires_in"], (e - after) / 1000.0))
        self.assertLess(body2["expires_in"], 300)


class ShortTtlTest(LimitsTest):
    """A code verifies until its expiry and not after (otp.ttl 10s, the
    shortest allowed). The phone rule keeps the phone's hash alive for a
    minute, so the script's own expiry check decides, not the key's TTL."""
    limits = [{"name": "phone_keep", "key": "phone", "algorithm": "sliding_log", "limit": 10, "window": "1m"}]

    def configure(self, cfg):
        cfg["otp"]["ttl"] = "10s"
        return cfg

    def test_verifies_just_before_expiry_not_after(self):
        _, c1 = self.issue_and_code(P)
        _, c2 = self.issue_and_code(P2)
        e1 = verification(self.redis, P)[2]
        e2 = verification(self.redis, P2)[2]
        self.assertLessEqual(abs(e1 - e2), 2000)
        wait_until(lambda: self.rtime_ms() >= e1 - 600, 15, step=0.01, what="P's code to be 0.6 s from expiry")
        r, _, after = self.timed_redis(self.otpd.verify, P, c1)
        self.assertLess(after, e1, "the machine took too long to verify in time")
        self.assertEqual((r[0], r[2]["verified"]), (200, True), r)
        wait_until(lambda: self.rtime_ms() >= e2 + 100, 15, step=0.01, what="P2's code to expire")
        self.assertEqual(verification(self.redis, P2)[2], e2, "the key should outlive the code")
        st, _, p = self.otpd.verify(P2, c2)
        self.assertEqual((st, p.get("error")), (404, "no_active_code"), p)
        # The next issue starts a new verification with a full life.
        r, before, after = self.timed_redis(self.otpd.issue, P2)
        self.accepted(r)
        e3 = verification(self.redis, P2)[2]
        self.assertTrue(before + 10000 <= e3 <= after + 10000, (before, e3, after))


# 2. several cost caps at once ------------------------------------------------------------------------
class CapsBase(LimitsTest):
    caps = []

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"+91": 20, "*": 500}, "caps": self.caps}
        return cfg

    def scenario(self, fits, refusing_window_ms):
        """fits issues are accepted, the next is refused with Retry-After at
        the end of refusing_window_ms's window and changes nothing."""
        self.avoid_boundary(86400, 30)
        self.avoid_boundary(3600, 30)
        phones = ["+9198765432%02d" % i for i in range(fits + 2)]
        for p in phones[:fits]:
            self.accepted(self.otpd.issue(p))
        sums = self.cost_sums()
        self.assertEqual(set(sums.values()), {fits * 20}, sums)
        before_state = self.state()
        for p in phones[fits:]:
            r, before, after = self.timed_redis(self.otpd.issue, p)
            ra = self.refused(r, 503, "cost_cap")
            self.assert_no_rl(r)
            self.assert_retry_at(ra, self.window_end_ms(refusing_window_ms, before), before, after,
                                 "the %d s cap" % (refusing_window_ms // 1000))
        self.assertEqual(self.state(), before_state, "a cost refusal changed Redis")
        self.assertEqual(self.cost_sums(), sums)
        rows = self.decisions(fits + 2)
        self.assertEqual([r["decision"] for r in rows], ["accepted"] * fits + ["cost_cap"] * 2)
        self.assert_sms(fits)
        return sums


class CapsHourTighterTest(CapsBase):
    caps = [{"window": "1h", "max": 40}, {"window": "1d", "max": 60}]

    def test_the_hour_refuses(self):
        self.assertEqual(self.scenario(2, HOUR_MS), {HOUR_MS: 40, DAY_MS: 40})


class CapsDayTighterTest(CapsBase):
    caps = [{"window": "1h", "max": 1000}, {"window": "1d", "max": 60}]

    def test_the_day_refuses_to_its_end(self):
        # 60 fits exactly; the day's cap, not the roomy hour, sets Retry-After.
        self.assertEqual(self.scenario(3, DAY_MS), {HOUR_MS: 60, DAY_MS: 60})


class CapsBothRefuseTest(CapsBase):
    # The hour first: Retry-After is the latest end of every refusing cap, not the first's.
    caps = [{"window": "1h", "max": 40}, {"window": "1d", "max": 40}]

    def test_retry_after_is_the_later_end(self):
        self.assertEqual(self.scenario(2, DAY_MS), {HOUR_MS: 40, DAY_MS: 40})


# 3. global-keyed rules ------------------------------------------------------------------------------
class GlobalRuleTest(LimitsTest):
    limits = [{"name": "all_3", "key": "global", "algorithm": "sliding_log", "limit": 3, "window": "10s"},
              {"name": "all_hour", "key": "global", "algorithm": "fixed_window", "limit": 100, "window": "1h"}]

    def test_one_counter_for_every_phone_caller_and_device(self):
        self.avoid_boundary(3600, 30)
        for left, (phone, kw) in zip((2, 1, 0), ((P, {}), (P2, {"auth": OTHER_KEY}),
                                                  (P3, {"device_id": "d1", "client_ip": "198.51.100.7"}))):
            r = self.otpd.issue(phone, **kw)
            self.accepted(r)
            self.assert_rl(r, "all_3", 3, 10, left)
        log = [int(x) for x in self.redis.cmd("HGET", "otp:g", self.field("all_3")).split()]
        self.assertEqual(len(log), 3)
        before_state = self.state()
        for phone, kw in (("+919812345601", {}), ("+919812345602", {"auth": OTHER_KEY}), (P, {})):
            r, before, after = self.timed_redis(self.otpd.issue, phone, **kw)
            ra = self.refused(r, 429, "rate_limited", "all_3")
            self.assert_retry_at(ra, log[0] + 10000, before, after, "the global rule")
            self.assert_rl(r, "all_3", 3, 10, 0, ra)
        self.assertEqual(self.state(), before_state, "a refusal changed Redis")
        idx, count = self.redis.cmd("HGET", "otp:g", self.field("all_hour")).split(":")
        self.assertEqual((int(idx), int(count)), (self.rtime_ms() // HOUR_MS, 3))
        self.assertGreater(self.redis.cmd("PTTL", "otp:g"), 0)
        self.assertEqual(self.redis.cmd("EXISTS", "otp:{+919812345601}"), 0)
        self.assert_sms(3)


# 4. concurrent wrong guesses ------------------------------------------------------------------------
class GuessBase(LimitsTest):
    """N guesses at once never get more than max_attempts attempts (docs/architecture.md,
    "A request's path": the script compares and counts in one atomic step)."""
    n = 16

    def configure(self, cfg):
        cfg["redis"]["timeout_ms"] = 2000  # a loaded machine must not turn a decision into a 503
        cfg["http_threads"] = 8
        return cfg

    def guesses(self, phone, guess):
        gate = threading.Barrier(self.n)

        def one(_):
            gate.wait()
            st, _, p = self.otpd.call("POST", "/v1/otp/verify", {"phone": phone, "code": guess}, timeout=30)
            return st, p.get("error"), p.get("attempts_left")

        with concurrent.futures.ThreadPoolExecutor(self.n) as ex:
            return list(ex.map(one, range(self.n)))


class ConcurrentGuessTest(GuessBase):
    def test_max_attempts_under_concurrency(self):
        _, code = self.issue_and_code(P)
        out = self.guesses(P, wrong_of(code))
        wrong = sorted(a for st, e, a in out if st == 422)
        self.assertEqual(wrong, [0, 1, 2], out)  # max_attempts is 3
        self.assertEqual([(st, e) for st, e, _ in out if st != 422], [(404, "no_active_code")] * (self.n - 3), out)
        # The code died at its third wrong guess: the right one is too late.
        st, _, p = self.otpd.verify(P, code)
        self.assertEqual((st, p.get("error")), (404, "no_active_code"))
        rows = self.decisions(self.n + 1, "verify")
        self.assertEqual(sorted(r["decision"] for r in rows),
                         ["invalid_code"] * 3 + ["no_active_code"] * (self.n - 2))


class ConcurrentGuessCapTest(GuessBase):
    limits = [{"name": "wrong_4", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 4, "window": "1h"}]

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["otp"]["max_attempts"] = 10
        return cfg

    def test_wrong_guess_cap_under_concurrency(self):
        self.avoid_boundary(3600, 30)
        _, code = self.issue_and_code(P)
        out = self.guesses(P, wrong_of(code))
        self.assertEqual(sorted(a for st, e, a in out if st == 422), [7, 8, 9], out)
        self.assertEqual([(st, e) for st, e, _ in out if st != 422], [(429, "locked")] * (self.n - 3), out)
        log = self.redis.cmd("HGET", "otp:{%s}" % P, self.field("wrong_4")).split()
        self.assertEqual(len(log), 4, "the wrong-guess log went past the cap")
        self.assertEqual(verification(self.redis, P)[3], 4)
        self.refused(self.otpd.verify(P, code), 429, "locked", "wrong_4")


# 5. reloads ---------------------------------------------------------------------------------------------
class ReloadBase(LimitsTest):
    def reload(self, cfg, marker="reloaded"):
        n = self.otpd.log().count(marker)
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count(marker) > n, what="otpd to log %r" % marker)

    def with_(self, **top):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg.update(top)
        return cfg


class ReloadCostTest(ReloadBase):
    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"+91": 20, "*": 500}, "caps": [{"window": "1h", "max": 100}]}
        return cfg

    def test_reload_takes_new_prices_and_caps(self):
        self.avoid_boundary(86400, 30)
        self.avoid_boundary(3600, 30)
        self.accepted(self.otpd.issue(P))
        self.assertEqual(self.cost_sums(), {HOUR_MS: 20})
        self.reload(self.with_(cost={"currency": "INR", "prices": {"+91": 50, "*": 500},
                                     "caps": [{"window": "1h", "max": 100}, {"window": "1d", "max": 60}]}))
        self.accepted(self.otpd.issue(P2))
        self.assertEqual(self.cost_sums(), {HOUR_MS: 70, DAY_MS: 50}, "the reload's price (50) or day cap is not used")
        # The new day cap refuses the next 50, to the day's end.
        r, before, after = self.timed_redis(self.otpd.issue, P3)
        ra = self.refused(r, 503, "cost_cap")
        self.assert_retry_at(ra, self.window_end_ms(DAY_MS, before), before, after, "the reloaded day cap")
        self.assertEqual(self.cost_sums(), {HOUR_MS: 70, DAY_MS: 50})
        # And back: the old price and the hour cap alone.
        self.reload(self.with_(cost={"currency": "INR", "prices": {"+91": 30, "*": 500},
                                     "caps": [{"window": "1h", "max": 100}]}))
        self.accepted(self.otpd.issue(P3))
        self.assertEqual(self.cost_sums(), {HOUR_MS: 100})
        self.refused(self.otpd.issue("+919812345601"), 503, "cost_cap")
        self.assertEqual([r["price_minor"] for r in self.otpd.rows("SELECT price_minor FROM messages ORDER BY seq")],
                         [20, 50, 30])


class ReloadReorderTest(ReloadBase):
    rule_a = {"name": "phone_a", "key": "phone", "algorithm": "sliding_log", "limit": 2, "window": "30s"}
    rule_b = {"name": "caller_b", "key": "api_key", "algorithm": "fixed_window", "limit": 50, "window": "1h"}
    limits = [rule_a, rule_b]

    def test_reordered_rules_keep_their_state_renamed_start_afresh(self):
        self.avoid_boundary(3600, 30)
        for left in (1, 0):
            r = self.otpd.issue(P)
            self.accepted(r)
            self.assert_rl(r, "phone_a", 2, 30, left)
        self.reload(self.with_(limits=[self.rule_b, self.rule_a]))
        r = self.otpd.issue(P)
        self.refused(r, 429, "rate_limited", "phone_a")
        r = self.otpd.issue(P2)
        self.accepted(r)
        self.assert_rl(r, "phone_a", 2, 30, 1)
        self.assertEqual(self.redis.cmd("HGET", "otp:k:{login-web}", self.field("caller_b")).split(":")[1], "3")
        # Renaming a rule starts it afresh (docs/architecture.md, "Limits and rules").
        self.reload(self.with_(limits=[self.rule_b, dict(self.rule_a, name="phone_a2")]))
        r = self.otpd.issue(P)
        self.accepted(r)
        self.assert_rl(r, "phone_a2", 2, 30, 1)


class ReloadUnderTrafficTest(ReloadBase):
    """Threads issue while SIGHUPs land: every answer is a 202 decided on
    one whole set of rules and prices (the RateLimit rule and the message's
    price agree), otpd stays up, and the last reload's rules apply."""
    threads = 4
    reloads = 8

    def rules(self, name, price):
        return dict(limits=[{"name": name, "key": "api_key", "algorithm": "fixed_window", "limit": 1000000,
                             "window": "1h"}],
                    cost={"currency": "INR", "prices": {"+91": price, "*": 500},
                          "caps": [{"window": "1h", "max": 1000000000}]})

    def configure(self, cfg):
        cfg["redis"]["timeout_ms"] = 2000  # a loaded machine must not turn a decision into a 503
        cfg["http_threads"] = 8
        cfg["pacer"]["rate"] = 1000
        cfg["pacer"]["capacity"] = 100000
        cfg.update(self.rules("caller_a", 20))
        return cfg

    def test_reload_under_traffic(self):
        self.avoid_boundary(3600, 60)
        stop = threading.Event()
        seen = []  # (status, rule, id)
        lock = threading.Lock()

        def issuer(t):
            i = 0
            while not stop.is_set():
                st, h, p = self.otpd.call("POST", "/v1/otp", {"phone": "+91987%d%06d" % (t, i)}, timeout=30)
                pol, _ = self.headers(h) if st == 202 else (None, None)
                with lock:
                    seen.append((st, pol[0] if pol else None, p.get("id") if isinstance(p, dict) else p))
                i += 1

        prices = {"caller_a": 20, "caller_b": 30}
        with concurrent.futures.ThreadPoolExecutor(self.threads) as ex:
            futs = [ex.submit(issuer, t) for t in range(self.threads)]
            try:
                for k in range(self.reloads):
                    n = len(seen)
                    wait_until(lambda: len(seen) >= n + 5, what="traffic between reloads")
                    name = ("caller_b", "caller_a")[k % 2]
                    self.reload(self.with_(**self.rules(name, prices[name])))
            finally:
                stop.set()
                for f in futs:
                    f.result()
        bad = [s for s in seen if s[0] != 202]
        self.assertEqual(bad, [], "answers other than 202 under reloads")
        self.assertGreaterEqual(len(seen), 5 * self.reloads)
        self.assertEqual({s[1] for s in seen}, {"caller_a", "caller_b"})
        self.assertEqual(self.otpd.log().count("reloaded"), self.reloads)
        # One snapshot per request: the rule in the headers and the price reserved agree.
        price_of = {r["id"]: r["price_minor"] for r in self.otpd.rows("SELECT id, price_minor FROM messages")}
        self.assertEqual(len(price_of), len(seen))
        mixed = [(rule, price_of[i]) for _, rule, i in seen if price_of[i] != prices[rule]]
        self.assertEqual(mixed, [], "a request saw one reload's rule and another's price")
        # The last reload wins: a new rule and price apply at once.
        self.reload(self.with_(limits=[{"name": "phone_c", "key": "phone", "algorithm": "sliding_log", "limit": 1,
                                        "window": "1m"}],
                               cost={"currency": "INR", "prices": {"+91": 40, "*": 500},
                                     "caps": [{"window": "1h", "max": 1000000000}]}))
        r = self.otpd.issue(P)
        body = self.accepted(r)
        self.assert_rl(r, "phone_c", 1, 60, 0)
        self.refused(self.otpd.issue(P), 429, "rate_limited", "phone_c")
        self.assertEqual(self.otpd.rows("SELECT price_minor FROM messages WHERE id = ?", body["id"]),
                         [{"price_minor": 40}])
        self.assertEqual(self.otpd.call("GET", "/healthz", auth=None)[0], 200)


# 6. refunds when the ledger refuses --------------------------------------------------------------------
class LedgerRefundTest(LimitsTest):
    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"+91": 20, "*": 500}, "caps": [{"window": "1h", "max": 60}]}
        return cfg

    def trigger(self, on):
        # Every message insert fails inside SQLite, as a full disk would.
        con = self.otpd.db()
        con.execute("CREATE TRIGGER no_messages BEFORE INSERT ON messages BEGIN SELECT RAISE(ABORT, 'disk'); END"
                    if on else "DROP TRIGGER no_messages")
        con.commit()
        con.close()

    def test_refund_on_ledger_failure_and_recovery(self):
        self.avoid_boundary(3600, 30)
        self.issue_and_code(P)
        self.assertEqual(self.cost_sums(), {HOUR_MS: 20})
        self.trigger(True)
        for i in range(5):
            st, h, p = self.otpd.issue(P2)
            self.assertEqual((st, p["error"], h["retry-after"]), (503, "ledger_unavailable", "1"), p)
            # The reservation is given back before the answer, exactly.
            self.assertEqual(self.cost_sums(), {HOUR_MS: 20}, "after ledger failure %d" % (i + 1))
        sql = "SELECT decision FROM requests WHERE phone = ?"
        wait_until(lambda: len(self.otpd.rows(sql, P2)) >= 5, what="the refusals' ledger rows")
        self.assertEqual([r["decision"] for r in self.otpd.rows(sql, P2)], ["ledger_unavailable"] * 5)
        # Recovery: issues work, and the two refunded reservations are there to be taken.
        self.trigger(False)
        self.accepted(self.otpd.issue(P2))
        self.accepted(self.otpd.issue(P3))
        self.assertEqual(self.cost_sums(), {HOUR_MS: 60})
        r, before, after = self.timed_redis(self.otpd.issue, "+919812345601")
        ra = self.refused(r, 503, "cost_cap")
        self.assert_retry_at(ra, self.window_end_ms(HOUR_MS, before), before, after, "the cap after refunds")
        self.assertEqual(self.cost_sums(), {HOUR_MS: 60})
        # After the barrier of three SMS at the provider: none for the refused issues.
        msgs = self.wait_messages(3)
        self.assertEqual(sorted(m["to"] for m in msgs), sorted([P, P2, P3]))
        self.assertEqual([r["price_minor"] for r in self.otpd.rows("SELECT price_minor FROM messages")], [20] * 3)


class ElevenRuleKeysTest(LimitsTest):
    """Every key kind and four phone_prefix lengths: 11 Redis keys of rules in one issue, the most the config
    allows. The last rule's key (the fourth prefix length) must still be checked, never skipped for want of room
    (review of #11: with 10 it was dropped silently)."""
    limits = ([{"name": k, "key": k, "algorithm": "sliding_log", "limit": 5, "window": "1h"}
               for k in ("phone", "device", "client_ip", "api_key", "global", "purpose", "region")] +
              [{"name": "p%d" % n, "key": "phone_prefix:%d" % n, "algorithm": "sliding_log", "limit": 5,
                "window": "1h"} for n in (3, 4, 5)] +
              [{"name": "p6", "key": "phone_prefix:6", "algorithm": "sliding_log", "limit": 1, "window": "1h"}])

    def test_the_eleventh_key_is_checked(self):
        fields = dict(device_id="d1", client_ip="192.0.2.1", purpose="login")
        st, _, body = self.otpd.issue(P, **fields)
        self.assertEqual(st, 202, body)
        st, _, body = self.otpd.issue(P, **fields)
        self.assertEqual((st, body.get("reason")), (429, "p6"), body)


# 7. round trips of a verify -------------------------------------------------------------------------
class VerifyRoundTripsBase(LimitsTest):
    """Counts a batch of verifies' round trips: the calls of verify.lua and
    the commits (issue.lua's op 'c'), each told by its script's SHA1, from
    Redis's slow log with every command logged. otpd's background scripts
    (pacer, admin rows, each at least once a second) are other scripts or
    other ops and do not count, however slow a loaded machine makes the
    batch."""
    N = 10

    @staticmethod
    def sha(name):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "limits", name)
        with open(path, "rb") as f:
            return hashlib.sha1(f.read()).hexdigest()

    @classmethod
    def round_trip(cls, args):
        if len(args) < 3 or args[0].upper() != "EVALSHA":
            return False
        if args[1] == cls.sha("verify.lua"):
            return True
        op = 3 + int(args[2])
        return args[1] == cls.sha("issue.lua") and len(args) > op and args[op] == "c"

    def verify_calls(self, batch):
        self.redis.cmd("CONFIG", "SET", "slowlog-max-len", "100000")
        self.redis.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0")
        self.redis.cmd("SLOWLOG", "RESET")
        try:
            batch()
            log = self.redis.cmd("SLOWLOG", "GET", "-1")
        finally:
            self.redis.cmd("CONFIG", "SET", "slowlog-log-slower-than", "10000")
        self.assertLess(len(log), 100000, "the slow log overflowed: the count would be short")
        return sum(1 for e in log if self.round_trip(e[3]))

    def evalsha_per_batch(self, batch, want):
        self.assertEqual(self.verify_calls(batch), want, "verify.lua calls and commits per batch of %d verifies" % self.N)

    def undo_records(self):
        return self.redis.cmd("KEYS", "otp:u:*") or []

    def no_code_batch(self, first):
        def run():
            for i in range(self.N):
                st, _, p = self.otpd.verify("+9198765%05d" % (first[0] + i), "123456")
                self.assertEqual((st, p.get("error")), (404, "no_active_code"), p)
            first[0] += self.N
        return run


class VerifyRoundTripsTest(VerifyRoundTripsBase):
    """A verify that finds no live code and takes nothing changed nothing:
    verify.lua wrote no undo record, so there is none to commit and the
    verify is one EVALSHA. A wrong guess on a live code wrote one, and its
    commit deletes it."""
    limits = [{"name": "wrong_codes", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 1000,
               "window": "1h"}]

    def test_no_live_code_is_one_round_trip(self):
        self.evalsha_per_batch(self.no_code_batch([0]), self.N)
        self.assertEqual(self.undo_records(), [])

    def test_wrong_guess_still_commits(self):
        """Counted by its records, not by EVALSHA: once messages are out,
        the pacer's own scripts run tens of times a second here."""
        phones = ["+9198766%05d" % i for i in range(self.N)]
        codes = [self.issue_and_code(p)[1] for p in phones]
        for p, c in zip(phones, codes):
            st, _, body = self.otpd.verify(p, wrong_of(c))
            self.assertEqual((st, body.get("error")), (422, "invalid_code"), body)
        # Each guess wrote a record (an abandon would give its attempt
        # back); answered, each was committed, which deletes it.
        self.assertEqual(self.undo_records(), [], "a recorded verify was not committed")


class VerifyRuleRoundTripsTest(VerifyRoundTripsBase):
    """A verify rule takes even when no code is live: that verify wrote an
    undo record (an abandon gives the take back), so it is committed."""
    limits = [{"name": "verify_phone", "key": "phone", "algorithm": "sliding_log", "limit": 1000, "window": "1h",
               "on": "verify"}]

    def test_a_take_is_committed(self):
        self.evalsha_per_batch(self.no_code_batch([0]), 2 * self.N)
        self.assertEqual(self.undo_records(), [])

