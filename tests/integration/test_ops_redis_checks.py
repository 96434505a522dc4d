"""Redis settings otpd's promises rest on (docs/operations.md, "A fleet"; issue 8).

maxmemory-policy must be noeviction (eviction would silently wipe limits,
locks and verifications) and appendonly yes (a restart would forget them).
otpd reads both with CONFIG GET on every new connection, so at start and
after every reconnect, and reports a risky or unreadable value in the log,
in /readyz's detail (readiness stays 200) and as
otpd_redis_config_risky{setting=...} 1.
"""
import os
import re
import subprocess
import tempfile
import unittest

import harness
from harness import wait_until

POLICY_LINE = "redis: maxmemory-policy is %s, not noeviction"
AOF_LINE = "redis: appendonly is %s, not yes"


class SettingsRedis(harness.Redis):
    """harness.Redis with the settings under test (later arguments win)."""

    def __init__(self, workdir, args):
        super().__init__(workdir)
        self.args = list(args)

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
             "--logfile", os.path.join(self.dir, "redis.log")] + self.args,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.ping, what="redis")
        return self


class RedisSettingsTest(harness.OtpdTest):
    redis_args = []

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-it-")
        self.redis = SettingsRedis(self.tmp, self.redis_args).start()
        self.fake = harness.FakeProvider(self.tmp).start()
        cfg = harness.base_config(self.redis.port, self.fake.url, os.path.join(self.tmp, "ledger.db"),
                                  harness.free_port(), limits=[])
        self.otpd = harness.Otpd(self.tmp, cfg)
        self.otpd.start()

    def ready(self):
        st, _, body = self.otpd.call("GET", "/readyz", auth=None)
        self.assertEqual(st, 200, body)
        self.assertEqual(body["status"], "ready")
        return body["detail"]

    def risky(self):
        """{setting: value} of otpd_redis_config_risky."""
        st, _, text = self.otpd.call("GET", "/metrics", auth=None)
        self.assertEqual(st, 200)
        return {m.group(1): int(m.group(2))
                for m in re.finditer(r'^otpd_redis_config_risky\{setting="([^"]+)"\} (\d+)$', text, re.M)}


class RiskySettingsTest(RedisSettingsTest):
    redis_args = ["--maxmemory-policy", "allkeys-lru", "--appendonly", "no"]

    def test_reported_in_log_readyz_and_metric(self):
        # /readyz makes otpd's first Redis connection, which checks.
        self.assertEqual(self.ready(), "ok; redis: maxmemory-policy is allkeys-lru, must be noeviction"
                                       "; redis: appendonly is no, must be yes")
        self.assertEqual(self.risky(), {"maxmemory-policy": 1, "appendonly": 1})
        log = self.otpd.log()
        self.assertEqual(log.count(POLICY_LINE % "allkeys-lru"), 1, log)
        self.assertEqual(log.count(AOF_LINE % "no"), 1, log)
        # A warning, not a refusal: requests are still served.
        st, _, body = self.otpd.issue("+919812345678")
        self.assertEqual(st, 202, body)


class SafeSettingsTest(RedisSettingsTest):
    redis_args = ["--maxmemory-policy", "noeviction", "--appendonly", "yes"]

    def test_nothing_reported(self):
        # The /readyz answer comes after the check and its log lines.
        self.assertEqual(self.ready(), "ok")
        self.assertEqual(self.risky(), {"maxmemory-policy": 0, "appendonly": 0})
        log = self.otpd.log()
        self.assertNotIn("maxmemory-policy", log)
        self.assertNotIn("appendonly", log)

    def test_checked_again_after_reconnect(self):
        self.assertEqual(self.ready(), "ok")
        self.redis.cmd("CONFIG", "SET", "maxmemory-policy", "volatile-lru")
        self.redis.cmd("CONFIG", "SET", "appendonly", "no")
        # Still the pooled connection: no new check yet.
        self.assertEqual(self.ready(), "ok")
        self.redis.cmd("CLIENT", "KILL", "TYPE", "normal")
        # The pooled connection is dead: one /readyz fails on it, the next
        # connects afresh and checks.
        detail = wait_until(lambda: (lambda r: r[2]["detail"] if r[0] == 200 and r[2]["detail"] != "ok" else None)(
            self.otpd.call("GET", "/readyz", auth=None)), 10, what="/readyz after the reconnect")
        self.assertEqual(detail, "ok; redis: maxmemory-policy is volatile-lru, must be noeviction"
                                 "; redis: appendonly is no, must be yes")
        self.assertEqual(self.risky(), {"maxmemory-policy": 1, "appendonly": 1})
        log = self.otpd.log()
        self.assertEqual(log.count(POLICY_LINE % "volatile-lru"), 1, log)
        self.assertEqual(log.count(AOF_LINE % "no"), 1, log)


class ConfigRenamedTest(RedisSettingsTest):
    """A managed Redis may rename CONFIG away: nothing proves the settings
    safe, so both are reported as unknown."""
    redis_args = ["--maxmemory-policy", "noeviction", "--appendonly", "yes", "--rename-command", "CONFIG", ""]

    def test_unknown(self):
        self.assertEqual(self.ready(), "ok; redis: maxmemory-policy is unknown, must be noeviction"
                                       "; redis: appendonly is unknown, must be yes")
        self.assertEqual(self.risky(), {"maxmemory-policy": 1, "appendonly": 1})
        log = self.otpd.log()
        self.assertIn(POLICY_LINE % "unknown", log)
        self.assertIn(AOF_LINE % "unknown", log)


if __name__ == "__main__":
    unittest.main()
