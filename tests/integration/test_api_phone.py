"""Phone numbers (docs/config.md, "Phone numbers"): one number has one spelling.

otpd parses every phone with libphonenumber. Spellings with a trunk prefix
after the country code are the canonical number or refused, never a second
phone: limits, codes, prices, the ledger and the provider all see the
canonical E.164 form. A number that is not valid for its country is 400
invalid_phone with a detail that says why; a number of a type outside
phone.types is 403 number_type before any rule, so it takes nothing.
"""
import json
import os
import unittest

from harness import OtpdTest, wait_until

PHONE = "+919812345699"
# The issue's three spellings: the second is PHONE, the third is refused.
TRUNK = "+9109812345699"
DOUBLE_TRUNK = "+91009812345699"
GB = "+447400123456"
GB_TRUNK = "+4407400123456"


class PhoneTest(OtpdTest):
    def problem(self, r, status, error, detail=None):
        st, h, p = r
        self.assertEqual(st, status, p)
        self.assertEqual(h["content-type"], "application/problem+json")
        self.assertEqual(p["error"], error, p)
        if detail is not None:
            self.assertEqual(p["detail"], detail)
        return p

    def requests(self, n):
        """The ledger's request rows once there are n (refusals are recorded
        without waiting for the commit)."""
        sql = "SELECT kind, phone, decision, http_status FROM requests ORDER BY id"
        return wait_until(lambda: (lambda r: r if len(r) >= n else None)(self.otpd.rows(sql)),
                          what="%d request rows" % n)

    def metric(self, name):
        st, _, text = self.otpd.call("GET", "/metrics", auth=None)
        self.assertEqual(st, 200)
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0


class TrunkPrefixTest(PhoneTest):
    """Trunk-prefix spellings are one phone: one limit, one code, one price."""
    limits = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10m"}]

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"+91": 20, "+447": 30, "*": 500},
                       "caps": [{"window": "1h", "max": 100000}]}
        return cfg

    def test_three_spellings_are_one_phone_or_refused(self):
        body, code = self.issue_and_code(PHONE)
        # The second spelling is the same phone: its one issue is spent.
        p = self.problem(self.otpd.issue(TRUNK), 429, "rate_limited")
        self.assertEqual(p["reason"], "phone_1")
        # The third is not a number India assigns.
        self.problem(self.otpd.issue(DOUBLE_TRUNK), 400, "invalid_phone",
                     "phone is not a valid number for IN (+91)")
        # The code sent to PHONE verifies under the trunk spelling.
        st, _, v = self.otpd.verify(TRUNK, code)
        self.assertEqual(st, 200, v)
        self.assertEqual(v["verified"], True)
        # One phone everywhere: the ledger's rows and the provider's message.
        self.assertEqual(self.requests(3), [
            {"kind": "issue", "phone": PHONE, "decision": "accepted", "http_status": 202},
            {"kind": "issue", "phone": PHONE, "decision": "rate_limited", "http_status": 429},
            {"kind": "verify", "phone": PHONE, "decision": "verified", "http_status": 200},
        ])
        self.assertEqual(self.otpd.rows("SELECT id, phone, price_minor FROM messages"),
                         [{"id": body["id"], "phone": PHONE, "price_minor": 20}])
        self.assertEqual([(m["id"], m["to"]) for m in self.fake.messages()], [(body["id"], PHONE)])
        self.assertEqual([r["phone"] for r in self.otpd.rows("SELECT phone FROM verifications")], [PHONE])

    def test_trunk_spelling_first_is_keyed_priced_and_sent_canonical(self):
        # Spelled with the trunk "0" first: priced on "+447" (30), not "*".
        body, code = self.issue_and_code(GB_TRUNK)
        self.assertEqual(self.otpd.rows("SELECT phone, price_minor FROM messages"),
                         [{"phone": GB, "price_minor": 30}])
        self.assertEqual([m["to"] for m in self.fake.messages()], [GB])
        p = self.problem(self.otpd.issue(GB), 429, "rate_limited")
        self.assertEqual(p["reason"], "phone_1")
        # The Redis state is under the canonical phone only.
        self.assertTrue(self.redis.cmd("KEYS", "*%s*" % GB))
        self.assertEqual(self.redis.cmd("KEYS", "*%s*" % GB_TRUNK), [])
        st, _, v = self.otpd.verify(GB, code)
        self.assertEqual(st, 200, v)

    def test_idempotency_key_sees_the_canonical_body(self):
        # The same request spelled two ways is the same request: a replay,
        # not 422 idempotency_key_reused.
        h = {"Idempotency-Key": "phone-spelling-1"}
        st, _, first = self.otpd.call("POST", "/v1/otp", {"phone": PHONE}, headers=h)
        self.assertEqual(st, 202, first)
        st, _, again = self.otpd.call("POST", "/v1/otp", {"phone": TRUNK}, headers=h)
        self.assertEqual(st, 202, again)
        self.assertEqual(again["id"], first["id"])
        self.wait_messages(1)
        self.assertEqual(len(self.otpd.rows("SELECT id FROM messages")), 1)


class InvalidPhoneTest(PhoneTest):
    """Each refusal says why; none is keyed, recorded as a phone, or sent."""
    limits = [{"name": "caller_1", "key": "api_key", "algorithm": "fixed_window", "limit": 1, "window": "10m"}]

    CASES = [
        ("+91009812345699", "phone is not a valid number for IN (+91)"),
        ("+447700900123", "phone is not a valid number for GB (+44)"),
        ("+919812345", "phone is too short for IN (+91)"),
        ("+1415555010", "phone is too short for US (+1)"),
        ("+447", "phone is too short for GB (+44)"),
        ("+4474001234567", "phone is too long for GB (+44)"),
        ("+91981234569900000000", "phone is too long for IN (+91)"),
        ("+6198765432109", "phone has no valid length for AU (+61)"),
        ("+999123456", "phone has no valid country calling code"),
        ("+0919812345699", "phone has no valid country calling code"),
        ("919812345699", "phone must be E.164: + then digits only"),
        ("+91 98123 45699", "phone must be E.164: + then digits only"),
        ("tel:+919812345699", "phone must be E.164: + then digits only"),
        ("+919812345699;ext=1", "phone must be E.164: + then digits only"),
        ("+1800FLOWERS", "phone must be E.164: + then digits only"),
        ("", "phone must be E.164: + then digits only"),
    ]

    def test_details_say_why(self):
        for phone, detail in self.CASES:
            with self.subTest(phone=phone):
                self.problem(self.otpd.issue(phone), 400, "invalid_phone", detail)
                self.problem(self.otpd.verify(phone, "123456"), 400, "invalid_phone", detail)
        # Nothing was taken: the caller's one issue is still there, and its
        # row and message are the only ones.
        body, _ = self.issue_and_code(PHONE)
        self.assertEqual(self.requests(1),
                         [{"kind": "issue", "phone": PHONE, "decision": "accepted", "http_status": 202}])
        self.assertEqual([m["id"] for m in self.fake.messages()], [body["id"]])


class NumberTypeTest(PhoneTest):
    """Default phone.types: mobile and fixed_line_or_mobile; the rest is 403."""
    limits = [{"name": "caller_1", "key": "api_key", "algorithm": "fixed_window", "limit": 1, "window": "10m"},
              {"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10m"}]

    REFUSED = [
        ("+911800123456", "toll_free", "IN"),
        ("+449012345678", "premium_rate", "GB"),
        ("+441212345678", "fixed_line", "GB"),
        ("+445612345678", "voip", "GB"),
        ("+18002345678", "toll_free", "US"),
        ("+80012345678", "toll_free", "001"),
    ]

    def test_other_types_are_refused_before_any_rule(self):
        for phone, kind, region in self.REFUSED:
            detail = "phone is a %s number (%s); this service does not send codes to that type" % (kind, region)
            with self.subTest(phone=phone):
                p = self.problem(self.otpd.issue(phone), 403, "number_type", detail)
                self.assertNotIn("reason", p)
                self.problem(self.otpd.verify(phone, "123456"), 403, "number_type", detail)
        # They took nothing: the caller's one issue and each phone are untouched.
        self.assertEqual(self.redis.cmd("KEYS", "otp:{+*"), [])
        self.assertEqual(self.metric('otpd_requests_total{op="issue",decision="number_type"}'), len(self.REFUSED))
        self.assertEqual(self.metric('otpd_requests_total{op="verify",decision="number_type"}'), len(self.REFUSED))
        # fixed_line_or_mobile (a US number) is served, and is the caller's first issue.
        body, _ = self.issue_and_code("+14155550100")
        rows = self.requests(2 * len(self.REFUSED) + 1)
        self.assertEqual(rows[:-1], [{"kind": k, "phone": p, "decision": "number_type", "http_status": 403}
                                     for p, _, _ in self.REFUSED for k in ("issue", "verify")])
        self.assertEqual(rows[-1], {"kind": "issue", "phone": "+14155550100", "decision": "accepted",
                                    "http_status": 202})
        self.assertEqual([m["to"] for m in self.fake.messages()], ["+14155550100"])


class PhoneTypesConfigTest(PhoneTest):
    """phone.types picks the served types; bad names are config errors."""

    def configure(self, cfg):
        cfg["phone"] = {"types": ["toll_free", "mobile"]}
        return cfg

    def test_configured_types(self):
        self.issue_and_code("+911800123456")
        self.issue_and_code(GB)
        self.problem(self.otpd.issue("+14155550100"), 403, "number_type",
                     "phone is a fixed_line_or_mobile number (US); this service does not send codes to that type")

    def test_bad_names_are_config_errors(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["phone"] = {"types": ["mobile", "cell", "mobile"]}
        path = os.path.join(self.tmp, "bad.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["--check", "-c", path])
        self.assertEqual(r.returncode, 1)
        self.assertIn("%s: phone.types.1: must be one of mobile, fixed_line" % path, r.stderr)
        self.assertIn('%s: phone.types.2: "mobile" is listed twice' % path, r.stderr)


if __name__ == "__main__":
    unittest.main()
