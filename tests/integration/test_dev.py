"""make run (tests/run_dev.sh), as a newcomer meets it: the examples are printed only once otpd answers, they work
as printed (the issue, the verify, the otpctl line with the dev config's admin key), /readyz has nothing to warn
about, pid files say how to reload and stop, and a start otpd refuses prints its reason and no example. The script
runs on ports of the test's own, in a copy of the tree's configs, with run/dev under a temporary directory."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

from harness import BIN, ROOT, free_port, wait_until


class DevRunTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-dev-")
        # The script runs from the tree's root (cd "$(dirname "$0")/.."): a copy holding what it reads.
        for d in ("tests", "configs"):
            os.makedirs(os.path.join(self.tmp, d))
        shutil.copy(os.path.join(ROOT, "tests", "run_dev.sh"), os.path.join(self.tmp, "tests"))
        shutil.copy(os.path.join(ROOT, "configs", "dev.json"), os.path.join(self.tmp, "configs"))
        os.symlink(BIN, os.path.join(self.tmp, "bin"))
        self.port, self.redis_port = free_port(), free_port()
        self.proc = None

    def start(self, **env):
        e = dict(os.environ, OTPD_DEV_PORT=str(self.port), OTPD_DEV_REDIS_PORT=str(self.redis_port), **env)
        self.out = os.path.join(self.tmp, "out.txt")
        self.proc = subprocess.Popen(["sh", os.path.join(self.tmp, "tests", "run_dev.sh")], env=e,
                                     stdout=open(self.out, "w"), stderr=subprocess.STDOUT, start_new_session=True)

    def text(self):
        with open(self.out) as f:
            return f.read()

    def tearDown(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def sh(self, line):
        return subprocess.run(line, shell=True, cwd=self.tmp, capture_output=True, text=True, timeout=20)

    def test_examples_work_as_printed(self):
        self.start()
        wait_until(lambda: "Reload the config" in self.text(), timeout=30, what="the examples")
        text = self.text()
        self.assertLess(text.index("otpd listening"), text.index("answers on"), "examples before otpd answered")
        lines = [l.strip() for l in text.splitlines()]
        i = next(k for k, l in enumerate(lines) if l.startswith("curl -s -X POST") and l.endswith("\\"))
        issue = json.loads(self.sh(lines[i][:-1] + " " + lines[i + 1]).stdout)
        self.assertIn("verification_id", issue)
        sms = wait_until(lambda: self.sh("tail -n 1 run/dev/sms.jsonl").stdout.strip(), what="the SMS")
        code = re.search(r"\b(\d{6})\b", json.loads(sms)["text"]).group(1)
        j = next(k for k, l in enumerate(lines) if "/v1/otp/verify" in l)
        verified = json.loads(self.sh((lines[j][:-1] + " " + lines[j + 1]).replace("<the code>", code)).stdout)
        self.assertEqual(verified.get("verified"), True, verified)
        ctl = next(l for l in lines if l.startswith("OTPCTL_KEY="))
        r = self.sh(ctl)
        self.assertEqual(r.returncode, 0, r.stderr)
        ready = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/readyz" % self.port, timeout=5).read())
        self.assertEqual(ready, {"status": "ready", "detail": "ok"})
        pid = int(open(os.path.join(self.tmp, "run", "dev", "otpd.pid")).read())
        os.kill(pid, signal.SIGHUP)
        wait_until(lambda: "reloaded" in self.text(), what="the reload")
        os.kill(pid, signal.SIGTERM)
        self.assertEqual(self.proc.wait(20), 0)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "run", "dev", "otpd.pid")))

    def test_a_refused_start_prints_its_reason_and_no_example(self):
        self.start(OTPD_SECRET="short")
        self.assertEqual(self.proc.wait(30), 1)
        text = self.text()
        self.assertIn("OTPD_SECRET", text)
        self.assertIn("did not start", text)
        self.assertNotIn("curl -s", text)


if __name__ == "__main__":
    unittest.main()
