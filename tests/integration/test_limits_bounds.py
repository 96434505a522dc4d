"""Limits that fit real traffic (issue 14): an IP limit of 5,000 an hour
loads as a counter and holds at its exact boundary; the same limit as a
sliding log is refused, saying why and what to use."""
import json
import os

from test_limits import LimitsTest

IP = "10.0.0.7"
RULE = {"name": "ip_hour", "key": "client_ip", "algorithm": "sliding_window_counter", "limit": 5000, "window": "1h"}


class IpHourCounterTest(LimitsTest):
    limits = [RULE]

    def test_five_thousand_an_hour(self):
        self.avoid_boundary(3600, 30)
        # Real takes count: q is the rule's 5000 and r what is left.
        for i in range(3):
            st, h, body = self.otpd.issue("+9198765%05d" % i, client_ip=IP)
            self.assertEqual(st, 202, body)
            self.assertEqual(self.headers(h), (("ip_hour", 5000, 3600), ("ip_hour", 4999 - i, self.headers(h)[1][2])))
        # 4,998 taken in this hour (issuing them here would be 4,998 SMS):
        # two more pass, the 5,001st is refused.
        idx = self.rtime_ms() // 3600000
        self.redis.cmd("HSET", "otp:ip:{%s}" % IP, self.field("ip_hour"), "%d:4998:0" % idx)
        for i in range(2):
            st, h, body = self.otpd.issue("+9198766%05d" % i, client_ip=IP)
            self.assertEqual(st, 202, body)
        st, h, body = self.otpd.issue("+919876700000", client_ip=IP)
        self.assertEqual((st, body["error"], body["reason"]), (429, "rate_limited", "ip_hour"), body)
        self.assertGreater(int(h["retry-after"]), 0)
        # Another address has its own 5,000.
        st, _, body = self.otpd.issue("+919876700001", client_ip="10.0.0.8")
        self.assertEqual(st, 202, body)

    def test_as_a_sliding_log_it_is_refused_with_the_reason(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["limits"] = [dict(RULE, algorithm="sliding_log")]
        path = os.path.join(self.tmp, "log.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["--check", "-c", path])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "%s: limits.0.limit: must be at most 1000 for sliding_log, which keeps every request "
                         "of its window (its memory grows with the limit); use sliding_window_counter, fixed_window "
                         "or token_bucket for larger limits\n" % path)
        # The counter kinds take it, up to 10^6.
        for algo, limit in (("fixed_window", 1000000), ("sliding_window_counter", 1000000),
                            ("token_bucket", 1000000)):
            cfg["limits"] = [dict(RULE, algorithm=algo, limit=limit)]
            with open(path, "w") as f:
                json.dump(cfg, f)
            r = self.run_bin("otpd", ["--check", "-c", path])
            self.assertEqual((r.returncode, r.stderr), (0, ""), algo)
