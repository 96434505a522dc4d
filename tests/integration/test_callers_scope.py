"""A verification belongs to (phone, caller, purpose) (issue 9): another
caller or purpose gets its own verification and code, another caller's wrong
guesses leave my code and my phone alone, composite and new rule keys,
rules that apply to verify, cancelling a verification (its queued messages
are never sent and their cost comes back once), verification_id, and message
status for the issuing key only."""
import json
import os
import re

from harness import API_KEY, OTHER_KEY, wait_until
from luascript import limits_script
from test_limits import P, P2, LimitsTest, verification, wrong_of

PAY_KEY = "key-payments-0123456789"
HEX32 = re.compile(r"^[0-9a-f]{32}$")


class ScopeTest(LimitsTest):
    """Three callers: login-web (API_KEY), login-app (OTHER_KEY), payments."""
    env = {"OTPD_KEY_PAYMENTS": PAY_KEY}

    def configure(self, cfg):
        cfg["api_keys"].append({"name": "payments", "key_env": "OTPD_KEY_PAYMENTS"})
        cfg["otp"]["max_attempts"] = 5
        return cfg

    def scoped_code(self, phone, auth, **fields):
        """Issues for (phone, auth, fields' purpose) and returns (202 body, code)."""
        before = len(self.fake.messages())
        st, _, body = self.otpd.issue(phone, auth=auth, **fields)
        self.assertEqual(st, 202, body)
        mine = [m for m in self.wait_messages(before + 1) if m["id"] == body["id"]]
        self.assertEqual(len(mine), 1)
        return body, re.search(r"\b(\d{6})\b", mine[0]["text"]).group(1)


# 1. a code verifies only for its caller and purpose ----------------------------------------------------
class CrossScopeTest(ScopeTest):
    def test_code_of_login_web_login_does_not_verify_elsewhere(self):
        body, code = self.scoped_code(P, API_KEY, purpose="login")
        self.assertRegex(body["verification_id"], HEX32)
        # Nobody else has a live code for P: another caller, another purpose
        # of the same caller, and the default purpose all find none.
        for auth, fields in ((PAY_KEY, {"purpose": "login"}), (PAY_KEY, {}),
                             (API_KEY, {"purpose": "reset"}), (API_KEY, {})):
            r = self.otpd.verify(P, code, auth=auth, **fields)
            self.assertEqual((r[0], r[2]["error"]), (404, "no_active_code"), (auth, fields, r[2]))
        # Those guesses cost my code nothing: it still has every attempt.
        self.assertEqual(verification(self.redis, P)[3], 0)
        r = self.otpd.verify(P, code, purpose="login")
        self.assertEqual((r[0], r[2]), (200, {"verified": True, "verification_id": body["verification_id"]}))

    def test_each_scope_its_own_verification_and_code(self):
        web, c_web = self.scoped_code(P, API_KEY, purpose="login")
        pay, c_pay = self.scoped_code(P, PAY_KEY, purpose="login")
        reset, c_reset = self.scoped_code(P, API_KEY, purpose="reset")
        ids = {web["verification_id"], pay["verification_id"], reset["verification_id"]}
        self.assertEqual(len(ids), 3, "three scopes, three verifications")
        # One Redis key for the phone, one field per scope.
        flat = self.redis.cmd("HGETALL", "otp:{%s}" % P)
        vfields = [k for k in flat[::2] if len(k) == 12]
        self.assertEqual(len(vfields), 3, flat)
        # A code of login-web/login is refused by payments/login and by
        # login-web/reset (each has a live code of its own): a wrong guess there.
        if c_web != c_pay:
            r = self.otpd.verify(P, c_web, auth=PAY_KEY, purpose="login")
            self.assertEqual((r[0], r[2]["error"], r[2]["attempts_left"]), (422, "invalid_code", 4), r[2])
        if c_web != c_reset:
            r = self.otpd.verify(P, c_web, purpose="reset")
            self.assertEqual((r[0], r[2]["error"], r[2]["attempts_left"]), (422, "invalid_code", 4), r[2])
        for auth, purpose, code, v in ((API_KEY, "login", c_web, web), (PAY_KEY, "login", c_pay, pay),
                                       (API_KEY, "reset", c_reset, reset)):
            r = self.otpd.verify(P, code, auth=auth, purpose=purpose)
            self.assertEqual((r[0], r[2].get("verification_id")), (200, v["verification_id"]), r[2])

    def test_issue_again_continues_only_its_own_scope(self):
        first, code = self.scoped_code(P, API_KEY)
        other, _ = self.scoped_code(P, OTHER_KEY)
        again, code2 = self.scoped_code(P, API_KEY, purpose="default")
        self.assertEqual(again["verification_id"], first["verification_id"])
        self.assertEqual(code2, code)
        self.assertNotEqual(other["verification_id"], first["verification_id"])

    def test_purpose_checked_on_verify_and_cancel(self):
        for path, body in (("/v1/otp/verify", {"phone": P, "code": "123456", "purpose": "x" * 33}),
                           ("/v1/otp/verify", {"phone": P, "code": "123456", "purpose": "bad\u00e9"}),
                           ("/v1/otp/cancel", {"phone": P, "purpose": ""}),
                           ("/v1/otp/cancel", {"phone": P, "code": "123456"})):
            r = self.otpd.call("POST", path, body)
            self.assertEqual((r[0], r[2]["error"]), (400, "invalid_request"), (path, body, r[2]))


# 2. another caller's wrong guesses -------------------------------------------------------------------------
class PerCallerLockTest(ScopeTest):
    limits = [{"name": "wrong_codes", "key": ["phone", "api_key"], "algorithm": "wrong_guess_cap",
               "limit": 3, "window": "1h"}]

    def test_other_callers_guesses_leave_my_code_and_phone_alone(self):
        mine, code = self.scoped_code(P, API_KEY, purpose="login")
        _, theirs = self.scoped_code(P, PAY_KEY, purpose="login")
        # payments guesses wrong three times on its own verification: locked, for payments.
        for left in (4, 3):
            r = self.otpd.verify(P, wrong_of(theirs), auth=PAY_KEY, purpose="login")
            self.assertEqual((r[0], r[2]["error"], r[2]["attempts_left"]), (422, "invalid_code", left), r[2])
        r = self.otpd.verify(P, wrong_of(theirs), auth=PAY_KEY, purpose="login")
        self.assertEqual((r[0], r[2]["error"], r[2]["reason"]), (429, "locked", "wrong_codes"), r[2])
        r = self.otpd.issue(P, auth=PAY_KEY, purpose="login")
        self.assertEqual((r[0], r[2]["error"]), (429, "locked"), r[2])
        # The lock is payments' own: its field carries the caller's name.
        field = self.field("wrong_codes")
        self.assertEqual(len(self.redis.cmd("HGET", "otp:{%s}" % P, field + "\x1fpayments").split()), 3)
        self.assertIsNone(self.redis.cmd("HGET", "otp:{%s}" % P, field + "\x1flogin-web"))
        self.assertIsNone(self.redis.cmd("HGET", "otp:{%s}" % P, field))
        # My code kept every attempt, my phone is not locked for me.
        r = self.otpd.verify(P, wrong_of(code), purpose="login")
        self.assertEqual((r[0], r[2]["error"], r[2]["attempts_left"]), (422, "invalid_code", 4), r[2])
        r = self.otpd.verify(P, code, purpose="login")
        self.assertEqual((r[0], r[2]["verification_id"]), (200, mine["verification_id"]), r[2])
        self.accepted(self.otpd.issue(P, purpose="login"))


# 3. composite and new keys ----------------------------------------------------------------------------------
class CompositeKeysTest(ScopeTest):
    limits = [
        {"name": "caller_purpose", "key": ["api_key", "purpose"], "algorithm": "sliding_log", "limit": 2,
         "window": "1h"},
        {"name": "prefix6", "key": "phone_prefix:6", "algorithm": "sliding_log", "limit": 3, "window": "1h"},
        {"name": "purpose_all", "key": "purpose", "algorithm": "fixed_window", "limit": 4, "window": "1d"},
    ]

    def test_caller_and_purpose(self):
        self.avoid_boundary(86400, 30)
        self.accepted(self.otpd.issue("+919811000001", purpose="signup"))
        self.accepted(self.otpd.issue("+919822000002", purpose="signup"))
        r = self.otpd.issue("+919833000003", purpose="signup")
        self.refused(r, 429, "rate_limited", "caller_purpose")
        # Another purpose of the same caller, and another caller, count apart.
        self.accepted(self.otpd.issue("+919833000003", purpose="login"))
        self.accepted(self.otpd.issue("+919844000004", auth=OTHER_KEY, purpose="signup"))
        # purpose alone spans callers: signup has 3 of 4 taken (the refusal took nothing).
        r = self.otpd.issue("+919855000005", auth=PAY_KEY, purpose="signup")
        self.accepted(r)
        r = self.otpd.issue("+919866000006", auth=PAY_KEY, purpose="signup")
        self.refused(r, 429, "rate_limited", "purpose_all")
        self.assertEqual(self.redis.cmd("HGET", "otp:pu:{signup}", self.field("purpose_all")).split(":")[1], "4")
        self.assertEqual(len(self.redis.cmd("HGET", "otp:k:{login-web}",
                                            self.field("caller_purpose") + "\x1fsignup").split()), 2)

    def test_phone_prefix(self):
        # A purpose each, so that only prefix6 can refuse.
        for i, p in enumerate(("+919812000001", "+919812000002", "+919812000003")):
            self.accepted(self.otpd.issue(p, purpose="p%d" % i))
        self.refused(self.otpd.issue("+919812000004", purpose="p4"), 429, "rate_limited", "prefix6")
        self.accepted(self.otpd.issue("+919813000004", purpose="p5"))  # another 6-digit prefix
        self.assertEqual(len(self.redis.cmd("HGET", "otp:pp:{919812}", self.field("prefix6")).split()), 3)
        self.assertEqual(len(self.redis.cmd("HGET", "otp:pp:{919813}", self.field("prefix6")).split()), 1)

    def test_bad_keys_refused_at_load(self):
        for key, why in (("phone_prefix:0", "is not one of the allowed values"),
                         ("phone_prefix:16", "is not one of the allowed values"),
                         (["phone", "phone"], "names \"phone\" twice"),
                         (["global", "phone"], "global cannot be part of a composite key"),
                         ([], "must be a key name or a list of 1 to 4 key names")):
            cfg = dict(self.otpd.config, limits=[{"name": "r", "key": key, "algorithm": "sliding_log",
                                                  "limit": 1, "window": "1m"}])
            path = os.path.join(self.tmp, "check.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            r = self.run_bin("otpd", ["--check", "-c", path], env=self.otpd.env)
            self.assertEqual(r.returncode, 1, (key, r.stderr))
            self.assertIn("%s: limits.0.key: " % path, r.stderr)
            self.assertIn(why, r.stderr, key)


class RegionRuleTest(ScopeTest):
    """A region-keyed rule counts by the region the phone's parse gives:
    the number's own (CA, not US, for a Canadian +1), and "001" for a
    non-geographic number, so every accepted number has one and the rule
    is never skipped for want of it (limits_rule_key's skip of an empty
    region is unit-tested in test_limits_keys)."""
    limits = [{"name": "region_1", "key": "region", "algorithm": "sliding_log", "limit": 1, "window": "1h"}]

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["phone"] = {"types": ["mobile", "fixed_line_or_mobile", "toll_free"]}
        return cfg

    def test_region_rule_applies_per_region(self):
        self.accepted(self.otpd.issue(P))
        # Another Indian phone, another caller: the same region, refused.
        self.refused_log("otp:r:{IN}", "region_1", 1, 3600000, self.otpd.issue, P2, auth=PAY_KEY)
        for p in ("+447400123456", "+14155550100", "+16135550123"):
            self.accepted(self.otpd.issue(p))
        self.refused(self.otpd.issue("+12015550123"), 429, "rate_limited", "region_1")  # US again
        for region in ("IN", "GB", "US", "CA"):
            log = self.redis.cmd("HGET", "otp:r:{%s}" % region, self.field("region_1")).split()
            self.assertEqual(len(log), 1, region)

    def test_non_geographic_number_has_region_001(self):
        self.accepted(self.otpd.issue("+80012345678"))
        self.assertEqual(len(self.redis.cmd("HGET", "otp:r:{001}", self.field("region_1")).split()), 1)
        self.assertEqual(sorted(self.redis.cmd("KEYS", "otp:r:*")), ["otp:r:{001}"])


# 4. rules on verify -----------------------------------------------------------------------------------------
class ScopeVerifyRulesTest(ScopeTest):
    limits = [
        {"name": "verify_caller", "key": "api_key", "algorithm": "sliding_log", "limit": 3, "window": "1h",
         "on": "verify"},
        {"name": "ip_both", "key": "client_ip", "algorithm": "sliding_log", "limit": 3, "window": "1h",
         "on": "both"},
    ]

    def test_verify_rate_per_caller(self):
        _, code = self.scoped_code(P, API_KEY)
        for _ in range(2):
            r = self.otpd.verify(P, wrong_of(code))
            self.assertEqual(r[0], 422, r[2])
        r = self.otpd.verify(P2, "123456")  # no code: still counted
        self.assertEqual(r[0], 404, r[2])
        r, before, after = self.timed_redis(self.otpd.verify, P, code)
        self.refused(r, 429, "rate_limited", "verify_caller")
        log = self.redis.cmd("HGET", "otp:k:{login-web}", self.field("verify_caller")).split()
        self.assertEqual(len(log), 3)
        self.assert_retry_at(int(r[1]["retry-after"]), int(log[0]) + 3600000, before, after, "Retry-After")
        # The refusal changed nothing: my code keeps its attempts (2 used).
        self.assertEqual(verification(self.redis, P)[3], 2)
        # Issue does not count against a verify-only rule; another caller's verifies are its own.
        self.accepted(self.otpd.issue(P2))
        self.assertEqual(self.otpd.verify(P, code, auth=OTHER_KEY)[0], 404)

    def test_ip_counts_issue_and_verify(self):
        _, code = self.scoped_code(P, API_KEY, client_ip="203.0.113.9")
        self.assertEqual(self.otpd.verify(P, wrong_of(code), client_ip="203.0.113.9")[0], 422)
        self.assertEqual(self.otpd.verify(P, wrong_of(code), client_ip="203.0.113.9")[0], 422)
        self.refused(self.otpd.verify(P, code, client_ip="203.0.113.9"), 429, "rate_limited", "ip_both")
        self.refused(self.otpd.issue(P2, client_ip="203.0.113.9"), 429, "rate_limited", "ip_both")
        r = self.otpd.verify(P, code, client_ip="203.0.113.10")
        self.assertEqual(r[0], 200, r[2])


# 5. cancel -------------------------------------------------------------------------------------------------
class CancelTest(ScopeTest):
    PRICE = 20

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["pacer"]["rate"] = 1  # one send a second: the later messages wait in the queue
        cfg["cost"] = {"currency": "INR", "prices": {"*": self.PRICE}, "caps": [{"window": "1d", "max": 100000}]}
        return cfg

    def refunds(self):
        return self.metric('otpd_cost_refunds_total{result="refunded"}') or 0

    def test_cancel_stops_queued_messages_and_gives_cost_back_once(self):
        self.avoid_boundary(86400, 30)
        ahead = ["+919800000001", "+919800000002", "+919800000003"]
        for p in ahead:
            self.accepted(self.otpd.issue(p))
        st, _, mine = self.otpd.issue(P, purpose="login")
        self.assertEqual(st, 202, mine)
        st, _, mine2 = self.otpd.issue(P, purpose="login")  # the same code again, a second message
        self.assertEqual(st, 202, mine2)
        self.assertEqual(mine2["verification_id"], mine["verification_id"])
        self.assertEqual(self.cost_sums()[86400000], 5 * self.PRICE)
        r = self.otpd.call("POST", "/v1/otp/cancel", {"phone": P, "purpose": "login"})
        self.assertEqual((r[0], r[2]), (200, {"cancelled": True, "verification_id": mine["verification_id"]}))
        self.assertIsNone(verification(self.redis, P))
        # A message queued after mine reaches the provider: mine had its turn first.
        st, _, later = self.otpd.issue(P2)
        self.assertEqual(st, 202, later)
        wait_until(lambda: any(m["id"] == later["id"] for m in self.fake.messages()), 15,
                   what="the message queued after the cancelled ones")
        sent = {m["id"] for m in self.fake.messages()}
        self.assertNotIn(mine["id"], sent)
        self.assertNotIn(mine2["id"], sent)
        for m in (mine, mine2):
            row = self.otpd.rows("SELECT state, detail, attempts FROM messages WHERE id = ?", m["id"])[0]
            self.assertEqual((row["state"], row["detail"], row["attempts"]), ("failed", "cancelled", 0))
            st, _, body = self.otpd.call("GET", "/v1/otp/" + m["id"])
            self.assertEqual((st, body["status"]), (200, "failed"))
        # Each unsent message's reservation came back once: 4 sent are paid.
        wait_until(lambda: self.refunds() >= 2, what="two refunds")
        self.assertEqual(self.refunds(), 2)
        self.assertEqual(self.cost_sums()[86400000], 4 * self.PRICE)
        # The code is dead, and a second cancel finds nothing.
        r = self.otpd.verify(P, "000000", purpose="login")
        self.assertEqual((r[0], r[2]["error"]), (404, "no_active_code"))
        r = self.otpd.call("POST", "/v1/otp/cancel", {"phone": P, "purpose": "login"})
        self.assertEqual((r[0], r[2]["error"]), (404, "no_active_code"))

    def test_cancel_is_scoped(self):
        self.accepted(self.otpd.issue(P, purpose="login"))
        for auth, body in ((OTHER_KEY, {"phone": P, "purpose": "login"}), (API_KEY, {"phone": P}),
                           (API_KEY, {"phone": P, "purpose": "reset"})):
            r = self.otpd.call("POST", "/v1/otp/cancel", body, auth=auth)
            self.assertEqual((r[0], r[2]["error"]), (404, "no_active_code"), (auth, body))
        self.assertIsNotNone(verification(self.redis, P))
        r = self.otpd.call("GET", "/v1/otp/cancel")
        self.assertEqual((r[0], r[1].get("allow")), (405, "POST"))


# 6. status for the issuing key only ------------------------------------------------------------------------
class StatusScopeTest(ScopeTest):
    def test_status_answers_only_the_issuing_key(self):
        body, _ = self.scoped_code(P, API_KEY)
        wait_until(lambda: self.otpd.call("GET", "/v1/otp/" + body["id"])[2].get("status") == "sent",
                   what="the message sent")
        for auth in (OTHER_KEY, PAY_KEY):
            r = self.otpd.call("GET", "/v1/otp/" + body["id"], auth=auth)
            self.assertEqual((r[0], r[2]["error"]), (404, "not_found"), auth)
        r = self.otpd.call("GET", "/v1/otp/" + body["id"], auth=None)
        self.assertEqual(r[0], 401)


# 7. Redis memory per phone: one scope, and what a second adds ---------------------------------------------
class ScopeMemoryTest(ScopeTest):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "dev.json")) as _f:
        _dev = json.load(_f)
    # dev.json's rules; its resend delay is per phone, so it would refuse the other scopes' issues here.
    limits = [r for r in _dev["limits"] if r["algorithm"] != "resend_delay"]

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["cost"] = self._dev["cost"]
        cfg["otp"] = self._dev["otp"]
        return cfg

    def usage(self):
        return self.redis.cmd("MEMORY", "USAGE", "otp:{%s}" % P, "SAMPLES", "0")

    def test_one_scope_within_200_bytes_and_what_a_second_adds(self):
        self.avoid_boundary(86400, 30)
        self.accepted(self.otpd.issue(P, purpose="login"))
        one = self.usage()
        self.accepted(self.otpd.issue(P, auth=OTHER_KEY, purpose="login"))
        two = self.usage()
        self.accepted(self.otpd.issue(P, auth=PAY_KEY, purpose="payment"))
        three = self.usage()
        print("\n[scope] MEMORY USAGE of a phone's key: one scope %d B, two %d B, three %d B" % (one, two, three))
        self.assertLessEqual(one, 200)
        # A scope is one field: its 12-character name and a 63-byte value.
        self.assertLessEqual(two - one, 96)
        self.assertLessEqual(three - two, 96)
        self.assertEqual(len([k for k in self.redis.cmd("HKEYS", "otp:{%s}" % P) if len(k) == 12]), 3)


# 8. a verify's abandon gives back its verify-rule takes ---------------------------------------------------
class VerifyAbandonTest(ScopeTest):
    """verify.lua run directly (EVAL of the tree's source): a verify that was
    answered 503 is abandoned, and the abandon puts back the verification and
    every verify rule it took, in the keys of composite rules too."""

    def eval_verify(self, op, rid, guess):
        src = limits_script("verify.lua")
        keys = ["otp:{%s}" % P, "otp:k:{login-web}", "otp:u:" + rid]
        args = [op, guess, 5, "wg\x1flogin-web", 3, 3600000, 0, 30000, "s" * 12, 2, 0,
                1, 2, "vr\x1flogin", 3, 3600000, 3, 0,   # sliding_log on ["api_key", "purpose"]
                3, 2, "tb", 10, 60000, 2, 0]              # token_bucket on api_key
        return self.redis.cmd("EVAL", src, len(keys), *(keys + [str(a) for a in args]))

    def snapshot(self):
        return {k: self.redis.cmd("HGETALL", k) for k in ("otp:{%s}" % P, "otp:k:{login-web}")}

    def test_abandon_gives_back_verify_rule_takes(self):
        now = int(self.redis.cmd("TIME")[0]) * 1000
        self.redis.cmd("HSET", "otp:{%s}" % P, "s" * 12, "v" * 32 + "h" * 16 + "%d:0" % (now + 300000))
        self.redis.cmd("HSET", "otp:k:{login-web}", "vr\x1flogin", str(now - 1000))
        # A bucket already in use (its TAT ahead of now, a token left): the
        # abandon puts that TAT back exactly. (From an idle bucket it leaves
        # the TAT at the verify's time, which allows the same as no state.)
        self.redis.cmd("HSET", "otp:k:{login-web}", "tb", str(now + 3000))
        before = self.snapshot()
        r = self.eval_verify("v", "r1", "x" * 16)  # a wrong guess
        self.assertEqual(r[:3], ["wrong", "v" * 32, 4])
        self.assertEqual(r[6:], [1, 1, r[8], 1, 0, r[11]])  # log: 1 of 3 left; bucket: none
        self.assertNotEqual(self.snapshot(), before)
        self.assertEqual(self.eval_verify("v", "r1", "x" * 16), r)  # replayed, nothing taken again
        self.assertEqual(self.eval_verify("a", "r1", ""), 1)
        self.assertEqual(self.snapshot(), before)
        # A verify refused by a rule changes nothing and leaves no record.
        self.redis.cmd("HSET", "otp:k:{login-web}", "vr\x1flogin", " ".join(str(now - i) for i in (3, 2, 1)))
        before = self.snapshot()
        r = self.eval_verify("v", "r2", "h" * 16)
        self.assertEqual(r[0], "limited")
        self.assertEqual(r[6], 0)
        self.assertEqual(self.snapshot(), before)
        self.assertIsNone(self.redis.cmd("GET", "otp:u:r2"))

    def test_abandon_gives_back_a_token_only_while_it_is_held(self):
        # A bucket of 10 a second (one token each 100 ms): r1 takes one,
        # its time passes (the token is back by itself), r2 takes the next.
        def eval_tb(op, rid):
            src = limits_script("verify.lua")
            keys = ["otp:{%s}" % P, "otp:k:{login-web}", "otp:u:" + rid]
            args = [op, "x" * 16, 5, "", 3, 3600000, 0, 30000, "s" * 12, 1, 0,
                    3, 2, "tb", 10, 1000, 1, 0]
            return self.redis.cmd("EVAL", src, len(keys), *(keys + [str(a) for a in args]))

        self.assertEqual(eval_tb("v", "r1")[0], "none")  # no code: the rule is taken all the same
        first = int(self.redis.cmd("HGET", "otp:k:{login-web}", "tb"))
        wait_until(lambda: self.rtime_ms() > first + 50, 3, what="r1's token to come back")
        self.assertEqual(eval_tb("v", "r2")[0], "none")
        held = int(self.redis.cmd("HGET", "otp:k:{login-web}", "tb"))
        self.assertGreater(held, first)
        self.assertEqual(eval_tb("a", "r1"), 1)
        self.assertEqual(int(self.redis.cmd("HGET", "otp:k:{login-web}", "tb")), held,
                         "r1's abandon gave back r2's token")
