"""/metrics (issue 12): one outcome table decides each answer's status, code
and title; decisions are counted by operation and outcome (only the pairs
that can occur), the HTTP layer's own 4xx too; refusals by rule; cost cap
headroom from Redis; latency histograms; build info. `promtool check
metrics` stays clean, docs/prometheus/otpd.rules.yml passes `promtool check
rules`, and docs/grafana/otpd.json parses and queries only metrics a real
scrape serves."""
import json
import os
import re
import subprocess

from harness import API_KEY, OTHER_KEY, ROOT, OtpdTest, wait_until

PHONE = "+919812345678"
US_PHONE = "+12015550123"
ADMIN_KEY = "key-ops-admin-0123456789ab"
PRICE = 20
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')

# The contract's pairs (docs/openapi.yaml; docs/architecture.md, "HTTP"): what each operation
# can answer. Written out here, not read from the code under test.
CAN = {
    "issue": {"accepted", "invalid_request", "number_type", "blocked", "country_blocked", "no_route", "rate_limited",
              "locked", "suspected_pumping", "queue_full", "store_unavailable", "cost_cap", "ledger_unavailable"},
    "verify": {"verified", "invalid_request", "number_type", "blocked", "no_active_code", "invalid_code",
               "rate_limited", "locked", "store_unavailable"},
    "cancel": {"cancelled", "no_active_code", "store_unavailable"},
}


def samples(text):
    """{(name, frozenset of label pairs): value} of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


class MetricsTest(OtpdTest):
    limits = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10m"}]
    env = {"OTPD_KEY_OPS": ADMIN_KEY}

    def configure(self, cfg):
        cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
        cfg["countries"] = {"deny": ["US"]}
        cfg["cost"] = {"currency": "INR", "prices": {"+91": PRICE, "*": 500},
                       "caps": [{"window": "1h", "max": 100}, {"window": "1d", "max": 60, "key": "api_key"}]}
        return cfg

    def scrape(self):
        st, h, text = self.otpd.call("GET", "/metrics", auth=None)
        self.assertEqual(st, 200)
        return text

    def value(self, text, name, **labels):
        return samples(text).get((name, frozenset(labels.items())))

    def problem(self, answer, status, error):
        st, h, body = answer
        self.assertEqual((st, body.get("error"), body.get("status")), (status, error, status), body)
        self.assertEqual(h.get("content-type"), "application/problem+json")
        self.assertEqual(body["type"], "urn:otpd:problem:" + error)
        self.assertTrue(body["title"], body)
        return body

    def test_outcomes_statuses_and_counts(self):
        text = self.scrape()
        # Declared from the start, at 0: every possible pair and each rule.
        for op, decisions in CAN.items():
            for d in decisions:
                self.assertEqual(self.value(text, "otpd_requests_total", op=op, decision=d), 0, (op, d))
        for rule in ("phone_1", "cost_cap", "blocked", "country_blocked", "suspected_pumping"):
            self.assertEqual(self.value(text, "otpd_refusals_total", rule=rule), 0, rule)

        self.issue_and_code(PHONE)
        self.problem(self.otpd.issue(PHONE), 429, "rate_limited")
        self.problem(self.otpd.issue(US_PHONE), 403, "country_blocked")
        self.problem(self.otpd.issue(PHONE, client_ip="300.1.2.3"), 400, "invalid_request")
        self.problem(self.otpd.verify(PHONE, "000000"), 422, "invalid_code")
        st, _, body = self.otpd.call("POST", "/v1/otp/cancel", {"phone": PHONE})
        self.assertEqual((st, body.get("cancelled")), (200, True), body)
        self.problem(self.otpd.call("POST", "/v1/otp/cancel", {"phone": PHONE}), 404, "no_active_code")
        self.problem(self.otpd.verify(PHONE, "000000"), 404, "no_active_code")
        text = self.scrape()
        want = {("issue", "accepted"): 1, ("issue", "rate_limited"): 1, ("issue", "country_blocked"): 1,
                ("issue", "invalid_request"): 1, ("verify", "invalid_code"): 1, ("verify", "no_active_code"): 1,
                ("cancel", "cancelled"): 1, ("cancel", "no_active_code"): 1}
        for op, decisions in CAN.items():
            for d in decisions:
                self.assertEqual(self.value(text, "otpd_requests_total", op=op, decision=d), want.get((op, d), 0),
                                 (op, d))
        self.assertEqual(self.value(text, "otpd_refusals_total", rule="phone_1"), 1)
        self.assertEqual(self.value(text, "otpd_refusals_total", rule="country_blocked"), 1)
        self.assertEqual(self.value(text, "otpd_refusals_total", rule="cost_cap"), 0)

    def test_http_layer_problems_counted(self):
        big = {"phone": PHONE, "device_id": "d" * 5000}
        cases = [
            (lambda: self.otpd.issue(PHONE, auth=None), 401, "unauthorized"),
            (lambda: self.otpd.call("GET", "/nope"), 404, "not_found"),
            (lambda: self.otpd.call("GET", "/v1/otp"), 405, "method_not_allowed"),
            (lambda: self.otpd.call("POST", "/v1/otp", big), 413, "payload_too_large"),
            (lambda: self.otpd.call("POST", "/v1/otp", raw=b"x", headers={"Content-Type": "text/plain"}), 415,
             "unsupported_media_type"),
            (lambda: self.otpd.call("POST", "/v1/otp", raw=b"{", headers={"Content-Type": "application/json"}),
             400, "invalid_request"),
            (lambda: self.otpd.issue("12"), 400, "invalid_phone"),
            (lambda: self.otpd.issue(PHONE, auth=ADMIN_KEY), 403, "forbidden"),
        ]
        for call, status, error in cases:
            self.problem(call(), status, error)
        text = self.scrape()
        for _, status, error in cases:
            self.assertEqual(self.value(text, "otpd_http_refusals_total", status=str(status), error=error), 1,
                             error)
        # Not decisions: nothing reached otp.
        for op, decisions in CAN.items():
            for d in decisions:
                self.assertEqual(self.value(text, "otpd_requests_total", op=op, decision=d), 0, (op, d))

    def test_only_possible_pairs_and_promtool(self):
        self.issue_and_code(PHONE)
        text = self.scrape()
        got = {}
        for (name, labels), _ in samples(text).items():
            if name == "otpd_requests_total":
                d = dict(labels)
                got.setdefault(d["op"], set()).add(d["decision"])
        self.assertEqual(got, CAN)
        for (name, labels), _ in samples(text).items():
            if name == "otpd_http_refusals_total":
                d = dict(labels)
                self.assertTrue(d["status"].startswith(("4", "5")), d)
                self.assertNotIn(d["error"], ("accepted", "verified", "rate_limited", "cost_cap"), d)
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)

    def test_histograms(self):
        self.issue_and_code(PHONE)
        names = ("otpd_redis_call_duration_seconds", "otpd_ledger_commit_duration_seconds",
                 "otpd_provider_call_duration_seconds")
        # The provider's call is observed once its answer is handled, just
        # after the fake recorded the message: wait for that.
        text = wait_until(lambda: (lambda t: t if (self.value(t, names[2] + "_count") or 0) >= 1 else None)(
            self.scrape()), what="the provider call observed")
        for name in names:
            count = self.value(text, name + "_count")
            self.assertGreaterEqual(count, 1, name)
            self.assertGreater(self.value(text, name + "_sum"), 0, name)
            buckets = sorted(((float(dict(l)["le"]), v) for (n, l), v in samples(text).items()
                              if n == name + "_bucket"), key=lambda b: b[0])
            self.assertEqual(len(buckets), 15, name)
            self.assertEqual(buckets[-1], (float("inf"), count), name)
            values = [v for _, v in buckets]
            self.assertEqual(values, sorted(values), name)
        self.assertEqual(self.value(text, names[2] + "_count"), 1)

    def test_build_info(self):
        version = subprocess.run([os.path.join(ROOT, "bin", "otpd"), "--version"], capture_output=True,
                                 text=True).stdout.split()[1]
        self.assertEqual(self.value(self.scrape(), "otpd_build_info", version=version), 1)

    def test_cost_cap_headroom(self):
        text = self.scrape()
        self.assertEqual(self.value(text, "otpd_cost_cap_max_minor", currency="INR", window="1h"), 100)
        self.assertEqual(self.value(text, "otpd_cost_cap_headroom_minor", currency="INR", window="1h"), 100)
        self.issue_and_code(PHONE)
        text = self.scrape()
        self.assertEqual(self.value(text, "otpd_cost_cap_headroom_minor", currency="INR", window="1h"), 100 - PRICE)
        self.assertEqual(self.value(text, "otpd_cost_cap_caller_headroom_minor", currency="INR", window="1d",
                                    api_key="login-web"), 60 - PRICE)
        self.assertEqual(self.value(text, "otpd_cost_cap_caller_headroom_minor", currency="INR", window="1d",
                                    api_key="login-app"), 60)
        self.assertNotIn('api_key="ops"', text)  # an admin key never issues
        # Redis gone: the headroom is left out, never shown stale; the
        # refusal is counted.
        self.redis.stop()
        self.problem(self.otpd.issue("+919800000001"), 503, "store_unavailable")
        text = self.scrape()
        self.assertIsNone(self.value(text, "otpd_cost_cap_headroom_minor", currency="INR", window="1h"))
        self.assertEqual(self.value(text, "otpd_cost_cap_max_minor", currency="INR", window="1h"), 100)
        self.assertEqual(self.value(text, "otpd_requests_total", op="issue", decision="store_unavailable"), 1)

    def test_rules_and_dashboard(self):
        rules = os.path.join(ROOT, "docs", "prometheus", "otpd.rules.yml")
        check = subprocess.run(["promtool", "check", "rules", rules], capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.issue_and_code(PHONE)
        served = {name for name, _ in samples(self.scrape())}
        with open(os.path.join(ROOT, "docs", "grafana", "otpd.json")) as f:
            dash = json.load(f)
        exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
        self.assertGreaterEqual(len(exprs), 10)
        with open(rules) as f:
            rule_text = f.read()
        for where, text in (("dashboard", "\n".join(exprs)), ("rules", rule_text)):
            used = set(re.findall(r"\botpd_[a-z0-9_]+", text))
            self.assertTrue(used, where)
            self.assertEqual(used - served, set(), "%s queries metrics /metrics does not serve" % where)
