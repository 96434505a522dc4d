"""Secrets and files (issue 9): the ledger, its WAL and SHM and the file
sink are 0600 whatever the umask; the running otpd has no core limit and
is not dumpable; its environment no longer holds a secret (and SIGHUP still
reloads); redis.username authenticates as a Redis ACL user."""
import os
import signal
import stat
import subprocess
import unittest

import harness
from harness import API_KEY, OTHER_KEY, SECRET, Otpd, OtpdTest, wait_until

PHONE = "+14155550100"
NOBODY = 65534
REDIS_ACL_PASSWORD = "acl-password-0123456789"


class NobodyOtpd(Otpd):
    """otpd run as nobody, so /proc shows what being non-dumpable changes:
    its /proc/PID files then belong to root, not to the process's user."""

    def start(self, wait=True):
        real = harness.subprocess.Popen
        harness.subprocess.Popen = lambda *a, **kw: real(*a, user=NOBODY, **kw)
        try:
            return super().start(wait)
        finally:
            harness.subprocess.Popen = real


class FilesTest(OtpdTest):
    def configure(self, cfg):
        cfg["provider"] = {"type": "file", "path": os.path.join(os.path.dirname(cfg["ledger"]["path"]), "sms.jsonl")}
        return cfg

    def setUp(self):
        self.old_umask = os.umask(0)  # otpd must not rely on the umask it is given
        try:
            super().setUp()
        finally:
            os.umask(self.old_umask)

    def test_files_are_private(self):
        st, _, body = self.otpd.issue(PHONE)
        self.assertEqual(st, 202, body)
        sink = self.otpd.config["provider"]["path"]
        wait_until(lambda: os.path.exists(sink) and os.path.getsize(sink) > 0, what="the sink's line")
        ledger = self.otpd.config["ledger"]["path"]
        for path in (ledger, ledger + "-wal", ledger + "-shm", sink):
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600, path)


class ProcessTest(OtpdTest):
    def test_environment_holds_no_secret_and_reload_still_works(self):
        with open("/proc/%d/environ" % self.otpd.proc.pid, "rb") as f:
            environ = f.read()
        self.assertIn(b"OTPD_KEEP_ME=1", environ)  # the region read is the environment
        for secret in (SECRET, API_KEY, OTHER_KEY):
            self.assertNotIn(secret.encode(), environ)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: "reloaded" in self.otpd.log(), what="the reload")
        self.assertNotIn("reload refused", self.otpd.log())
        st, _, body = self.otpd.issue(PHONE, auth=OTHER_KEY)
        self.assertEqual(st, 202, body)

    env = {"OTPD_KEEP_ME": "1"}

    def test_no_core_dumps(self):
        self.assertEqual(self.otpd.stop(), 0)
        os.chmod(self.tmp, 0o777)
        for name in os.listdir(self.tmp):
            os.chown(os.path.join(self.tmp, name), NOBODY, -1)
        self.otpd = NobodyOtpd(self.tmp, self.otpd.config, self.env)
        self.otpd.start()
        pid = self.otpd.proc.pid
        with open("/proc/%d/status" % pid) as f:
            status = f.read()
        self.assertIn("\nUid:\t%d\t" % NOBODY, status)
        # Not dumpable: the kernel hands its /proc files to root.
        self.assertEqual(os.stat("/proc/%d/status" % pid).st_uid, 0)
        with open("/proc/%d/limits" % pid) as f:
            limits = {line[:26].strip(): line[26:].split() for line in f.read().splitlines()[1:]}
        self.assertEqual(limits["Max core file size"][:2], ["0", "0"])
        self.assertEqual(limits["Max open files"][0], limits["Max open files"][1])


class RedisAclTest(OtpdTest):
    def test_username_authenticates_as_acl_user(self):
        self.assertEqual(self.redis.cmd("ACL", "SETUSER", "otpd", "on", ">" + REDIS_ACL_PASSWORD, "~*", "&*",
                                        "+@all"), "OK")
        cfg = dict(self.otpd.config)
        cfg["redis"] = dict(cfg["redis"], username="otpd", password_env="OTPD_REDIS_PASSWORD")
        self.restart(cfg, OTPD_REDIS_PASSWORD=REDIS_ACL_PASSWORD)
        st, _, body = self.otpd.issue(PHONE)
        self.assertEqual(st, 202, body)
        clients = self.redis.cmd("CLIENT", "LIST")
        self.assertIn("user=otpd ", clients)
        with open("/proc/%d/environ" % self.otpd.proc.pid, "rb") as f:
            self.assertNotIn(REDIS_ACL_PASSWORD.encode(), f.read())

    def test_wrong_password_is_not_ready(self):
        self.redis.cmd("ACL", "SETUSER", "otpd", "on", ">" + REDIS_ACL_PASSWORD, "~*", "&*", "+@all")
        cfg = dict(self.otpd.config)
        cfg["redis"] = dict(cfg["redis"], username="otpd", password_env="OTPD_REDIS_PASSWORD")
        self.restart(cfg, OTPD_REDIS_PASSWORD="not-the-password")
        st, _, p = self.otpd.call("GET", "/readyz", auth=None)
        self.assertEqual((st, p["status"]), (503, "not_ready"))
        self.assertIn("WRONGPASS", p["detail"])


if __name__ == "__main__":
    unittest.main()
