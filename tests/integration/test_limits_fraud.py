"""Fraud guards (docs/architecture.md, "Limits and rules"; issue 11): countries, number types, the pumping guard.

countries (allow, deny, monitor by region) and phone.types are decided before any Redis call: a refusal is 403
country_blocked or number_type, recorded in the ledger, and takes nothing. monitor serves, counts
(otpd_country_monitored_total{region}) and logs the region and caller with the number masked.

The pumping guard counts, per phone prefix, accepted issues ("sent") and successful verifies ("verified") over a
sliding window. Once a prefix has min_sent sends and verified / sent below min_verified_ratio it is held: 429
suspected_pumping with Retry-After to the hold's end, otpd_pumping_holds_total rises and one log line names the
prefix. The hold ends by itself, and the prefix is then judged afresh.
"""
import json
import os
import re
import time
import unittest

from harness import OtpdTest, code_of, wait_until

GB_MOBILE = "+447400123456"
GB_FIXED = "+441212345678"
IN_MOBILE = "+919812345699"
US_NUMBER = "+14155550100"  # fixed_line_or_mobile


class FraudTest(OtpdTest):
    def problem(self, r, status, error):
        st, h, p = r
        self.assertEqual(st, status, p)
        self.assertEqual(h["content-type"], "application/problem+json")
        self.assertEqual(p["error"], error, p)
        return p, h

    def metrics(self):
        st, _, text = self.otpd.call("GET", "/metrics", auth=None)
        self.assertEqual(st, 200)
        return text

    def metric(self, name):
        for line in self.metrics().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def requests(self, n):
        sql = "SELECT kind, phone, decision, http_status FROM requests ORDER BY id"
        return wait_until(lambda: (lambda r: r if len(r) >= n else None)(self.otpd.rows(sql)),
                          what="%d request rows" % n)

    def redis_state(self):
        """Every key with its type and value: what a refusal must leave as it was."""
        out = {}
        for k in self.redis.cmd("KEYS", "*"):
            t = self.redis.cmd("TYPE", k)
            if t == "hash":
                out[k] = self.redis.cmd("HGETALL", k)
            elif t == "string":
                out[k] = self.redis.cmd("GET", k)
            else:
                out[k] = t
        return out

    def check_config(self, cfg):
        path = os.path.join(self.tmp, "bad.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["--check", "-c", path])
        return r, path


class CountriesDenyMonitorTest(FraudTest):
    limits = [{"name": "phone_10m", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "10m"},
              {"name": "caller", "key": "api_key", "algorithm": "fixed_window", "limit": 100, "window": "1h"}]

    def configure(self, cfg):
        cfg["countries"] = {"deny": ["GB", "001"], "monitor": ["IN"]}
        cfg["phone"] = {"types": ["mobile", "fixed_line_or_mobile", "toll_free"]}
        return cfg

    def test_deny_refuses_before_redis_and_takes_nothing(self):
        self.issue_and_code(US_NUMBER)  # state in Redis to compare against
        before = self.redis_state()
        for phone in (GB_MOBILE, "+447400123457"):
            p, h = self.problem(self.otpd.issue(phone), 403, "country_blocked")
            self.assertIn("GB", p["detail"])
            self.assertNotIn("retry-after", h)
            self.assertNotIn("ratelimit", h)
        self.assertEqual(self.redis_state(), before)
        # A denied region's verify is not refused by countries (codes sent before a change still verify).
        self.problem(self.otpd.verify(GB_MOBILE, "123456"), 404, "no_active_code")
        rows = self.requests(4)
        self.assertEqual(rows[1:3], [{"kind": "issue", "phone": GB_MOBILE, "decision": "country_blocked",
                                      "http_status": 403},
                                     {"kind": "issue", "phone": "+447400123457", "decision": "country_blocked",
                                      "http_status": 403}])
        self.assertEqual([m["to"] for m in self.fake.messages()], [US_NUMBER])
        self.assertEqual(self.metric('otpd_requests_total{op="issue",decision="country_blocked"}'), 2)
        # Regions are libphonenumber's: +447911 is Guernsey (GG), not GB, though it shares +44.
        self.issue_and_code("+447911123456")

    def test_monitor_serves_counts_and_logs_masked(self):
        self.assertEqual(self.metric('otpd_country_monitored_total{region="IN"}'), None)
        for _ in range(2):
            self.otpd.issue(IN_MOBILE)
        body, _ = self.issue_and_code("+919812345600")
        self.assertEqual(self.metric('otpd_country_monitored_total{region="IN"}'), 3)
        self.issue_and_code(US_NUMBER)
        text = self.metrics()
        # Labels only from the config's list: no US, no GB.
        self.assertEqual(re.findall(r'otpd_country_monitored_total\{region="(\w+)"\}', text), ["IN"])
        self.assertEqual(text.count("# TYPE otpd_country_monitored_total counter"), 1)
        # At most a line a second per region (a flood is no log flood), each
        # counting the requests since the last: 3 requests within a second or two.
        lines = [l for l in self.otpd.log().splitlines() if "countries: monitored" in l]
        self.assertTrue(1 <= len(lines) <= 3, lines)
        self.assertIn("region=IN caller=login-web phone=+9198******99 requests=1", lines[0])
        for l in lines:
            self.assertNotIn(IN_MOBILE, l)
            self.assertNotIn("+919812345600", l)

    def test_non_geographic_region_is_denied(self):
        # +800 is toll_free (served here) in libphonenumber's non-geographic region "001".
        p, _ = self.problem(self.otpd.issue("+80012345678"), 403, "country_blocked")
        self.assertIn("001", p["detail"])
        self.assertEqual(self.redis.cmd("KEYS", "otp:{*"), [])


class CountriesAllowTest(FraudTest):
    def configure(self, cfg):
        cfg["countries"] = {"allow": ["IN", "US"], "monitor": ["US"]}
        return cfg

    def test_allow_serves_only_its_regions(self):
        self.issue_and_code(IN_MOBILE)
        self.issue_and_code(US_NUMBER)
        p, _ = self.problem(self.otpd.issue(GB_MOBILE), 403, "country_blocked")
        self.assertIn("GB", p["detail"])
        self.assertEqual(sorted(m["to"] for m in self.fake.messages()), [US_NUMBER, IN_MOBILE])
        self.assertEqual(self.redis.cmd("KEYS", "otp:{+44*"), [])
        self.assertEqual(self.metric('otpd_country_monitored_total{region="US"}'), 1)


class CountriesConfigTest(FraudTest):
    def test_bad_countries_are_config_errors(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["countries"] = {"allow": ["IN", "gb", "UK", "XX", 12, "IN", "FR"], "deny": ["FR", "DE"],
                            "monitor": ["ZZ"], "watch": []}
        r, path = self.check_config(cfg)
        self.assertEqual(r.returncode, 1, r.stderr)
        for key in ("countries.allow.1", "countries.allow.2", "countries.allow.3", "countries.allow.4",
                    "countries.monitor.0"):
            self.assertIn("%s: %s: must be a region code" % (path, key), r.stderr)
        self.assertIn('%s: countries.allow.5: "IN" is listed twice' % path, r.stderr)
        self.assertIn('%s: countries.deny.0: "FR" is in both allow and deny' % path, r.stderr)
        self.assertNotIn("countries.deny.1", r.stderr)
        self.assertIn("%s: countries.watch: unknown key" % path, r.stderr)
        cfg["countries"] = {"allow": []}
        r, path = self.check_config(cfg)
        self.assertIn("%s: countries.allow: must list at least one region" % path, r.stderr)
        cfg["countries"] = {"deny": ["GB", "001"], "monitor": [], "allow": ["IN"]}
        r, path = self.check_config(cfg)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_bad_pumping_is_config_error(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["pumping"] = {"prefix_digits": 2, "window": "10s", "min_sent": 0, "min_verified_ratio": 1.5,
                          "hold": "45d", "mode": "log", "ratio": 1}
        r, path = self.check_config(cfg)
        self.assertEqual(r.returncode, 1)
        for key in ("prefix_digits", "window", "min_sent", "min_verified_ratio", "hold", "mode"):
            self.assertIn("%s: pumping.%s: " % (path, key), r.stderr)
        self.assertIn("%s: pumping.ratio: unknown key" % path, r.stderr)
        cfg["pumping"] = {"prefix_digits": 7, "window": "1h", "min_sent": 30, "min_verified_ratio": 0.2,
                          "hold": "12h", "mode": "shadow"}
        r, path = self.check_config(cfg)
        self.assertEqual(r.returncode, 0, r.stderr)


class FraudNumberTypeTest(FraudTest):
    """phone.types (403 number_type) before any rule; fixed lines served only when listed."""
    limits = [{"name": "caller_1", "key": "api_key", "algorithm": "fixed_window", "limit": 1, "window": "10m"}]

    def test_fixed_line_refused_by_default_served_when_listed(self):
        p, _ = self.problem(self.otpd.issue(GB_FIXED), 403, "number_type")
        self.assertIn("fixed_line", p["detail"])
        self.assertEqual(self.redis.cmd("KEYS", "otp:{*"), [])
        self.assertEqual(self.redis.cmd("KEYS", "otp:k:*"), [])
        self.assertEqual(self.requests(1), [{"kind": "issue", "phone": GB_FIXED, "decision": "number_type",
                                             "http_status": 403}])
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["phone"] = {"types": ["mobile", "fixed_line_or_mobile", "fixed_line"]}
        self.restart(cfg)
        # Served, and the caller's one issue was still there: the refusal took nothing.
        self.issue_and_code(GB_FIXED)
        self.problem(self.otpd.issue(GB_MOBILE), 429, "rate_limited")


RING_PREFIX = "+4474001"
RING = ["+4474001%05d" % i for i in range(60)]
# Real users: three other prefixes, 12 each (more than min_sent), all verifying.
REAL = (["+91981234%04d" % (5600 + i) for i in range(12)] + ["+1415555%04d" % (100 + i) for i in range(12)] +
        ["+4479111%05d" % (23400 + i) for i in range(12)])
MIN_SENT = 10
# Long enough that the whole ring is judged inside one hold even on a loaded machine (each real user waits for its
# SMS); PumpingHoldEndTest checks a hold's end with a short one.
HOLD_S = 60


class PumpingTest(FraudTest):
    limits = [{"name": "phone_10m", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "10m"}]

    def configure(self, cfg):
        cfg["pumping"] = {"prefix_digits": 7, "window": "1h", "min_sent": MIN_SENT, "min_verified_ratio": 0.2,
                          "hold": "%ds" % HOLD_S}
        cfg["pacer"]["capacity"] = 200
        return cfg

    def real_user(self, phone):
        """One real user: issue, read the code at the provider, verify. Returns the issue's status."""
        st, _, body = self.otpd.issue(phone)
        if st != 202:
            return st
        text = wait_until(lambda: next((m["text"] for m in self.fake.messages() if m["id"] == body["id"]), None),
                          what="the code sent to %s" % phone)
        st, _, v = self.otpd.verify(phone, code_of(text))
        self.assertEqual(st, 200, v)
        return 202

    def test_ring_is_held_real_users_are_not(self):
        real_status, ring_status, started_at = [], [], None
        real = iter(REAL)
        for i, phone in enumerate(RING):
            if i % 5 < 3:
                r = next(real, None)
                if r:
                    real_status.append(self.real_user(r))
            t0 = time.monotonic()
            st, h, p = self.otpd.issue(phone)
            ring_status.append(st)
            if st == 429:
                self.assertEqual(p["error"], "suspected_pumping", p)
                self.assertIn(RING_PREFIX, p["detail"])
                self.assertNotIn("ratelimit", h)
                retry = int(h["retry-after"])
                self.assertTrue(1 <= retry <= HOLD_S, retry)
                if started_at is None:
                    started_at = t0
            else:
                self.assertEqual(st, 202, p)
        for r in real:
            real_status.append(self.real_user(r))

        # Figures for the issue note.
        ring_sms = len(wait_until(lambda: (lambda m: m if len(m) >= MIN_SENT else None)(
            [m for m in self.fake.messages() if m["to"].startswith(RING_PREFIX)]), what="ring messages"))
        refused_real = len([s for s in real_status if s != 202])
        print("\npumping figures: ring numbers %d, ring issues accepted %d, SMS spent on the ring %d (min_sent %d); "
              "real users %d, real users refused %d" % (len(RING), ring_status.count(202), ring_sms, MIN_SENT,
                                                        len(REAL), refused_real))
        self.assertEqual(refused_real, 0, real_status)
        self.assertEqual(len(real_status), len(REAL))
        # The guard judges exactly at min_sent: the ring got min_sent codes, and every later number was refused.
        self.assertEqual(ring_status, [202] * MIN_SENT + [429] * (len(RING) - MIN_SENT))
        self.assertEqual(ring_sms, MIN_SENT)
        real_sms = [m for m in self.fake.messages() if not m["to"].startswith(RING_PREFIX)]
        self.assertEqual(len(real_sms), len(REAL))

        # One hold, counted and logged once, naming the prefix and no number.
        self.assertEqual(self.metric("otpd_pumping_holds_total"), 1)
        self.assertEqual(self.metrics().count("# TYPE otpd_pumping_holds_total counter"), 1)
        lines = [l for l in self.otpd.log().splitlines() if "pumping: prefix" in l]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("pumping: prefix %s held for %ds: %d sent, 0 verified" % (RING_PREFIX, HOLD_S, MIN_SENT),
                      lines[0])
        for phone in RING:
            self.assertNotIn(phone, lines[0])
        self.assertEqual(self.metric('otpd_requests_total{op="issue",decision="suspected_pumping"}'),
                         len(RING) - MIN_SENT)
        sql = "SELECT phone, decision, http_status FROM requests WHERE decision = 'suspected_pumping'"
        rows = wait_until(lambda: (lambda r: r if len(r) >= len(RING) - MIN_SENT else None)(self.otpd.rows(sql)),
                          what="the refusals' rows")
        self.assertEqual(sorted(r["phone"] for r in rows), RING[MIN_SENT:])
        self.assertEqual({r["http_status"] for r in rows}, {429})

        # Refused numbers took nothing: no phone state for them, and the guard's key expires.
        for phone in RING[MIN_SENT:]:
            self.assertEqual(self.redis.cmd("EXISTS", "otp:{%s}" % phone), 0)
        ring_ttl = self.redis.cmd("PTTL", "otp:pump:{%s}" % RING_PREFIX)
        self.assertTrue(0 < ring_ttl <= HOLD_S * 1000, ring_ttl)
        for prefix in ("+9198123", "+1415555", "+4479111"):
            ttl = self.redis.cmd("PTTL", "otp:pump:{%s}" % prefix)
            self.assertTrue(0 < ttl <= 3600 * 1000, (prefix, ttl))

        self.assertIsNotNone(started_at)


class PumpingHoldEndTest(FraudTest):
    """A hold ends by itself: refused (taking nothing) until it ends, then served afresh."""
    HOLD = 2

    def configure(self, cfg):
        cfg["pumping"] = {"prefix_digits": 7, "window": "1h", "min_sent": 3, "min_verified_ratio": 0.2,
                          "hold": "%ds" % self.HOLD}
        return cfg

    def test_hold_ends_by_itself(self):
        for phone in RING[:3]:
            st, _, p = self.otpd.issue(phone)
            self.assertEqual(st, 202, p)
        t0 = time.monotonic()
        st, h, p = self.otpd.issue(RING[3])
        self.assertEqual((st, p["error"]), (429, "suspected_pumping"), p)
        self.assertTrue(1 <= int(h["retry-after"]) <= self.HOLD, h)
        fresh = "+447400199999"

        def served():
            st, _, p = self.otpd.issue(fresh)
            if st == 429:
                self.assertEqual(p["error"], "suspected_pumping", p)
                return None
            self.assertEqual(st, 202, p)
            return time.monotonic()
        ended_at = wait_until(served, timeout=self.HOLD + 10, step=0.1, what="the hold's end")
        # Redis's clock started the hold after t0 and ended it before ended_at (ms granularity).
        self.assertGreaterEqual(ended_at - t0, self.HOLD - 0.01)
        self.assertEqual(self.metric("otpd_pumping_holds_total"), 1)


class PumpingShadowTest(FraudTest):
    def configure(self, cfg):
        cfg["pumping"] = {"prefix_digits": 7, "window": "1h", "min_sent": 5, "min_verified_ratio": 0.5,
                          "hold": "1h", "mode": "shadow"}
        return cfg

    def test_shadow_counts_and_logs_holds_nothing(self):
        for phone in RING[:12]:
            st, _, p = self.otpd.issue(phone)
            self.assertEqual(st, 202, p)
        self.assertEqual(self.metric("otpd_pumping_holds_total"), 0)
        self.assertEqual(self.metric("otpd_pumping_shadow_holds_total"), 1)
        # Judged at the 6th (5 sent, 0 verified); the 6 after it fall in the would-be hold.
        self.assertEqual(self.metric("otpd_pumping_shadow_refusals_total"), 6)
        lines = [l for l in self.otpd.log().splitlines() if "pumping (shadow): prefix" in l]
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("prefix %s would be held for 3600s: 5 sent, 0 verified" % RING_PREFIX, lines[0])
        self.wait_messages(12)


if __name__ == "__main__":
    unittest.main()
