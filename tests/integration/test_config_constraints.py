"""otpd --check on constraints of every kind, end to end: the key table's
rows and the hooks' cross-key rules are driven case by case by
tests/unit/test_config_rows.c (through config_parse); here the binary
itself, without any secret, refuses one file holding one broken key of each
kind with exit 1 and a line "FILE: PATH: ..." for each, and loads the
same file mended."""
import json
import os
import shutil
import tempfile
import unittest

from harness import base_config, run_bin

# (path as --check names it, where to break it, the broken value; None removes the key)
BROKEN = [
    ("http_threads", ("http_threads",), 257),                       # an integer above its bound
    ("otp.ttl", ("otp", "ttl"), "2h"),                               # a duration above its bound
    ("ledger.retention", ("ledger", "retention"), "soon"),           # not a duration
    ("log.level", ("log", "level"), "loud"),                         # not one of an enum's values
    ("ledger.path", ("ledger", "path"), ""),                         # an empty string
    ("secret_env", ("secret_env",), "NOT A NAME"),                   # no variable can have that name
    ("api_keys.0.name", ("api_keys", 0, "name"), 'a"b'),             # a name that would need quoting
    ("otp.tll", ("otp", "tll"), "5m"),                               # an unknown key
    ("limits.0.limit", ("limits", 0, "limit"), 2),                   # a key the rule's algorithm does not take
    ("limits.1.limit", ("limits", 1, "limit"), 1001),                # a log's bound
    ("cost.currency", ("cost", "currency"), "rupees"),
    ("pacer.share_per_key", ("pacer", "share_per_key"), 0),          # a ratio above 0
    ("provider.base_url", ("provider", "base_url"), "https://api.twilio.com"),  # a key of another type
    ("provider.url", ("provider", "url"), "ftp://127.0.0.1/sms"),
    ("redis.url", ("redis", "url"), None),                           # required
]


def put(cfg, where, value):
    for k in where[:-1]:
        cfg = cfg[k]
    if value is None:
        del cfg[where[-1]]
    else:
        cfg[where[-1]] = value


class CheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-check-")
        self.cfg = base_config(6379, "http://127.0.0.1:9", os.path.join(self.tmp, "l.db"), 8080)
        self.cfg["log"] = {"level": "info"}
        self.cfg["ledger"]["retention"] = "1w"  # a week is a duration
        self.cfg["limits"] = [
            {"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "30s"},
            {"name": "wrong", "key": "phone", "algorithm": "wrong_guess_cap", "limit": 1000, "window": "1d"},
            {"name": "ip", "key": "client_ip", "algorithm": "sliding_window_counter", "limit": 1000000,
             "window": "30d"},
        ]
        self.cfg["cost"] = {"currency": "INR", "prices": {"*": 20}, "caps": [{"window": "1w", "max": 1000}]}
        self.cfg["pacer"]["share_per_key"] = 0.5

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, cfg):
        path = os.path.join(self.tmp, "check.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        # No secret in the environment: --check reads none.
        r = run_bin(self.tmp, "otpd", ["--check", "-c", path], env={"PATH": os.environ.get("PATH", "")})
        return r, path

    def test_the_mended_file_loads(self):
        r, path = self.check(self.cfg)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(r.stdout, "%s: ok\n" % path)

    def test_each_broken_key_is_named(self):
        cfg = json.loads(json.dumps(self.cfg))
        for _, where, value in BROKEN:
            put(cfg, where, value)
        r, path = self.check(cfg)
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = r.stderr.splitlines()
        for name, _, value in BROKEN:
            self.assertTrue([l for l in lines if l.startswith("%s: %s: " % (path, name))],
                            "no error names %s (= %r):\n%s" % (name, value, r.stderr))
        # Every line names one of them: nothing else in the file is wrong.
        names = tuple("%s: %s: " % (path, name) for name, _, _ in BROKEN)
        self.assertEqual([l for l in lines if not l.startswith(names)], [], r.stderr)
