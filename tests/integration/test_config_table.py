"""The config as a table (issue 12): docs/config.md's key table is the one
otpd prints; an unknown key names the nearest allowed one; an enum's error lists
its values; --check needs no secret; SIGHUP logs every changed key, applying
what it can and naming what needs a restart."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import unittest

from harness import ROOT, OtpdTest, wait_until

sys.path.insert(0, os.path.join(ROOT, "tests"))
import config_table  # noqa: E402


class ConfigDocTableTest(unittest.TestCase):
    def test_table_is_generated(self):
        with open(os.path.join(ROOT, "docs", "config.md")) as f:
            _, table, _ = config_table.split(f.read())
        want = config_table.generated(os.path.join(ROOT, "bin", "otpd"))
        self.assertEqual(table, want, "docs/config.md's key table is stale: run make config-doc")
        # Every row is a key: the table is not empty, and names keys of each level.
        for key in ("`listen`", "`otp.ttl`", "`pacer.retry.max`", "`limits.*.penalty.after`"):
            self.assertIn(key, table)

    def test_check_fails_on_a_stale_table_and_config_doc_mends_it(self):
        # A copy of docs/config.md whose table lost its last row.
        with open(os.path.join(ROOT, "docs", "config.md")) as f:
            head, table, tail = config_table.split(f.read())
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "config.md")
            with open(path, "w") as f:
                f.write(head + "".join(table.splitlines(True)[:-1]) + tail)
            script = [sys.executable, os.path.join(ROOT, "tests", "config_table.py"), "--doc", path]
            r = subprocess.run(script + ["--check"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1)
            self.assertIn("make config-doc", r.stderr)
            self.assertEqual(subprocess.run(script).returncode, 0)
            self.assertEqual(subprocess.run(script + ["--check"]).returncode, 0)
            with open(path) as f:
                self.assertEqual(f.read(), head + table + tail)


class CheckMessagesTest(OtpdTest):
    def check(self, cfg, env=None):
        path = os.path.join(self.tmp, "check.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["--check", "-c", path], env=env if env is not None else self.otpd.env)
        return r.returncode, r.stderr, path

    def test_unknown_keys_name_the_nearest(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["otp"]["tll"] = "5m"
        cfg["pacer"]["retry"] = {"mx": 2}
        cfg["limitz"] = []
        cfg["zzzzzz"] = 1
        rc, err, path = self.check(cfg)
        self.assertEqual(rc, 1)
        self.assertIn('%s: otp.tll: unknown key (did you mean "ttl"?)' % path, err)
        self.assertIn('%s: pacer.retry.mx: unknown key (did you mean "max"?)' % path, err)
        self.assertIn('%s: limitz: unknown key (did you mean "limits"?)' % path, err)
        # Nothing near: no guess.
        self.assertIn("%s: zzzzzz: unknown key\n" % path, err)
        self.assertEqual(len(err.splitlines()), 4, err)

    def test_enums_list_their_values(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["pacer"]["on_restart_sending"] = "retry"
        rc, err, path = self.check(cfg)
        self.assertEqual(rc, 1)
        self.assertIn('%s: pacer.on_restart_sending: "retry" is not one of the allowed values: resend, fail'
                      % path, err)

    def test_check_needs_no_secret(self):
        env = {k: v for k, v in self.otpd.env.items() if not k.startswith("OTPD_")}
        rc, err, path = self.check(self.otpd.config, env=env)
        self.assertEqual((rc, err), (0, ""))
        # The variables must still be named.
        cfg = json.loads(json.dumps(self.otpd.config))
        del cfg["secret_env"]
        rc, err, path = self.check(cfg, env=env)
        self.assertEqual(rc, 1)
        self.assertIn("%s: secret_env: is required" % path, err)


class ConfigReloadTest(OtpdTest):
    """SIGHUP applies otp.ttl and otp.template to the next issue and names
    every other changed key as needing a restart: no change is silent."""

    def reload(self, cfg, lines):
        n = self.otpd.log().count("reloaded ")
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("reloaded ") > n, what="otpd to reload")
        return self.otpd.log().splitlines()[lines:]

    def test_ttl_and_template_reload_and_the_rest_is_named(self):
        body, _ = self.issue_and_code("+919812345678")
        self.assertEqual(body["expires_in"], 300)
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["otp"]["ttl"] = "2m"
        cfg["otp"]["template"] = "Code {code}, {minutes} min."
        cfg["pacer"]["rate"] = cfg["pacer"]["rate"] + 1
        cfg["http_threads"] = 3
        start = len(self.otpd.log().splitlines())
        new = "\n".join(self.reload(cfg, start))
        self.assertIn("reload: otp.ttl changed: applied", new)
        self.assertIn("reload: otp.template changed: applied", new)
        self.assertIn("reload: pacer.rate changed: needs a restart", new)
        self.assertIn("reload: http_threads changed: needs a restart", new)
        self.assertNotIn("otp.length", new)
        body, code = self.issue_and_code("+919812345679")
        self.assertEqual(body["expires_in"], 120)
        text = [m for m in self.fake.messages() if m["id"] == body["id"]][0]["text"]
        self.assertEqual(text, "Code %s, 2 min." % code)
        # The same file again: the applied keys are quiet now; the one that
        # needs a restart is named again (it is still not in force).
        start = len(self.otpd.log().splitlines())
        new = "\n".join(self.reload(cfg, start))
        self.assertNotIn("otp.ttl", new)
        self.assertIn("reload: pacer.rate changed: needs a restart", new)

    def test_a_bad_file_changes_nothing(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["otp"]["ttl"] = "2h"
        n = self.otpd.log().count("reload refused")
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("reload refused") > n, what="the refusal")
        self.assertIn("otp.ttl: must be from 10s to 1h", self.otpd.log())
        body, _ = self.issue_and_code("+919812345678")
        self.assertEqual(body["expires_in"], 300)
