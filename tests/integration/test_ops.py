"""Operating otpd: config checking, the audit CLI, start-up errors, raw
malformed HTTP, and the policy for messages caught in 'sending'."""
import json
import os
import signal
import socket

from harness import ROOT, OtpdTest, wait_until


class ConfigCheckTest(OtpdTest):
    def check(self, cfg, env=None):
        path = os.path.join(self.tmp, "check.json")
        with open(path, "w") as f:
            f.write(cfg if isinstance(cfg, str) else json.dumps(cfg))
        r = self.run_bin("otpd", ["--check", "-c", path], env=dict(self.otpd.env, **(env or {})))
        return r.returncode, r.stderr.splitlines(), path

    def test_valid_config_passes(self):
        rc, errors, _ = self.check(self.otpd.config)
        self.assertEqual((rc, errors), (0, []))

    def test_every_error_is_reported_with_its_path(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["otp"]["length"] = 3
        cfg["redis"]["url"] = "http://nowhere"
        cfg["limits"] = [{"name": "x", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "10 m"}]
        cfg["pacer"]["rate"] = 0
        cfg["surprise"] = True
        # --check reads no secret (issue 12): an empty key variable is the
        # service's start-up error (test_start_fails_clearly_without_a_secret), not the file's.
        rc, errors, path = self.check(cfg, {"OTPD_KEY_LOGIN_APP": ""})
        self.assertEqual(rc, 1)
        want = ["otp.length", "redis.url", "limits.0.window", "pacer.rate", "surprise"]
        for key in want:
            self.assertTrue(any(e.startswith("%s: %s: " % (path, key)) for e in errors), (key, errors))
        self.assertEqual(len(errors), len(want), errors)

    def test_broken_json_and_missing_file(self):
        rc, errors, path = self.check('{"listen": ')
        self.assertEqual(rc, 1)
        self.assertTrue(errors[0].startswith(path + ": line "), errors)
        r = self.run_bin("otpd", ["--check", "-c", os.path.join(self.tmp, "none.json")])
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot read", r.stderr)

    def test_start_fails_clearly_without_a_secret(self):
        path = os.path.join(self.tmp, "start.json")
        with open(path, "w") as f:
            json.dump(self.otpd.config, f)
        env = dict(self.otpd.env)
        del env["OTPD_SECRET"]
        r = self.run_bin("otpd", ["-c", path], env=env, timeout=10)
        self.assertEqual(r.returncode, 78)  # EX_CONFIG
        self.assertIn("secret_env: environment variable OTPD_SECRET is not set", r.stderr)

    def test_port_in_use_is_a_start_up_error(self):
        cfg = dict(self.otpd.config, ledger={"path": os.path.join(self.tmp, "other.db")})
        path = os.path.join(self.tmp, "dup.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["-c", path], timeout=10)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot listen", r.stderr)


class FirstLedgerMigrationTest(OtpdTest):
    def test_a_version_1_ledger_is_migrated_and_its_queue_sent(self):
        import sqlite3
        import time
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        old = os.path.join(self.tmp, "v1.db")
        con = sqlite3.connect(old)
        with open(os.path.join(root, "schema", "001_init.sql")) as f:
            con.executescript(f.read())
        now = int(time.time() * 1000)
        con.execute("INSERT INTO messages (id, verification_id, api_key, phone, state, created_ms, expires_ms, "
                    "updated_ms) VALUES (?, ?, 'login-web', '+919812345678', 'queued', ?, ?, ?)",
                    ("a" * 32, "b" * 32, now, now + 60000, now))
        con.execute("PRAGMA user_version = 1")
        con.commit()
        con.close()
        cfg = dict(self.otpd.config, ledger={"path": old})
        self.restart(cfg)
        migrations = len([f for f in os.listdir(os.path.join(ROOT, "schema")) if f.endswith(".sql")])
        self.assertEqual(self.otpd.rows("PRAGMA user_version")[0]["user_version"], migrations)
        self.assertIn("purpose", [c["name"] for c in self.otpd.rows("PRAGMA table_info(requests)")])
        msgs = self.wait_messages(1)
        self.assertEqual(msgs[0]["id"], "a" * 32)
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages")[0]["state"] == "sent", what="sent")

    def test_a_newer_ledger_is_refused(self):
        self.otpd.stop()
        con = self.otpd.db()
        con.execute("PRAGMA user_version = 99")
        con.commit()
        con.close()
        r = self.run_bin("otpd", ["-c", self.otpd.conf_path], timeout=10)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("schema version 99 is newer than this otpd", r.stderr)


class AuditCliTest(OtpdTest):
    def test_otpctl_audit_and_check(self):
        _, code = self.issue_and_code("+919812345678")
        self.otpd.verify("+919812345678", code)
        wait_until(lambda: len(self.otpd.rows("SELECT * FROM requests")) == 2, what="2 rows")
        r = self.run_bin("otpctl", ["audit", "-c", self.otpd.conf_path, "-t", "requests", "-n", "5"])
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual([x["decision"] for x in rows], ["verified", "accepted"])  # newest first
        self.assertNotIn(code, r.stdout)
        r = self.run_bin("otpctl", ["audit", "-c", self.otpd.conf_path, "-t", "messages", "-p", "+10000000000"])
        self.assertEqual((r.returncode, r.stdout), (0, ""))
        r = self.run_bin("otpctl", ["audit", "-c", self.otpd.conf_path, "-t", "sqlite_master"])
        self.assertNotEqual(r.returncode, 0)
        r = self.run_bin("otpctl", ["check", "-c", self.otpd.conf_path])
        self.assertEqual(r.returncode, 0, r.stderr)


class RawHttpTest(OtpdTest):
    def raw(self, data, read=True):
        """Sends data and reads the answer; the server may close first (it
        may refuse an oversized header before reading it all)."""
        out = b""
        with socket.create_connection(("127.0.0.1", self.otpd.port), timeout=5) as s:
            try:
                s.sendall(data)
                if not read:
                    return b""
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    out += chunk
            except OSError:
                pass
        return out

    def test_malformed_requests_do_not_hurt(self):
        payloads = [
            b"\x00\xff\xfe garbage\r\n\r\n",
            b"GET\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
            b"POST /v1/otp HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
            b"POST /v1/otp HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST /v1/otp HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer x\r\n\r\nzz\r\n",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n",
            b"POST /v1/otp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"ph",
        ]
        for p in payloads:
            self.raw(p)
        self.assertIn(b" 413 ", self.raw(b"POST /v1/otp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                         b"Content-Length: 5000\r\n\r\n"))
        # Many idle half-open connections do not lock the API out.
        socks = [socket.create_connection(("127.0.0.1", self.otpd.port)) for _ in range(200)]
        try:
            self.assertEqual(self.otpd.call("GET", "/healthz", auth=None)[0], 200)
            self.assertEqual(self.otpd.issue("+919812345678")[0], 202)
        finally:
            for s in socks:
                s.close()
        self.assertEqual(self.otpd.call("GET", "/healthz", auth=None)[0], 200)


class SendingPolicyTest(OtpdTest):
    def configure(self, cfg):
        cfg["pacer"] = {"rate": 50, "capacity": 100, "max_inflight": 4, "timeout": "30s"}
        return cfg

    def crash_while_sending(self):
        self.fake.control(hang=True)
        mid = self.otpd.issue("+919812345678")[2]["id"]
        wait_until(lambda: self.fake.requests(), 5, what="the call in flight")
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages")[0]["state"] == "sending", 5,
                   what="'sending' committed")
        self.otpd.stop(signal.SIGKILL)
        self.fake.control(hang=False)
        return mid

    def state(self, mid):
        return self.otpd.rows("SELECT state FROM messages WHERE id = ?", mid)[0]["state"]

    def test_resend_is_the_default(self):
        mid = self.crash_while_sending()
        self.restart()
        wait_until(lambda: self.state(mid) == "sent", 10, what="the resend")
        self.assertEqual([m["id"] for m in self.fake.messages()], [mid, mid])  # at least once: one duplicate

    def test_fail_policy(self):
        mid = self.crash_while_sending()
        cfg = self.otpd.config
        cfg["pacer"]["on_restart_sending"] = "fail"
        self.restart(cfg)
        wait_until(lambda: self.state(mid) == "failed", 10, what="the fail policy")
        # A later message goes out: the failed one had its chance and was not resent.
        body, _ = self.issue_and_code("+14155550100")
        self.assertEqual([m["id"] for m in self.fake.messages()], [mid, body["id"]])


REDIS_PASS = "redis-pass-0123456789"


class RedisPasswordTest(OtpdTest):
    """redis.password_env: otpd authenticates; the password is never logged."""
    redis_password = REDIS_PASS
    env = {"OTPD_REDIS_PASS": REDIS_PASS}

    def configure(self, cfg):
        cfg["redis"]["password_env"] = "OTPD_REDIS_PASS"
        return cfg

    def test_password_is_used(self):
        _, code = self.issue_and_code("+919812345678")
        self.assertEqual(self.otpd.verify("+919812345678", code)[:1], (200,))
        st, _, p = self.otpd.call("GET", "/readyz", auth=None)
        self.assertEqual((st, p["status"]), (200, "ready"))
        # The server really demands the password: a client without it is refused.
        with socket.create_connection(("127.0.0.1", self.redis.port), timeout=2) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            self.assertTrue(s.recv(100).startswith(b"-NOAUTH"))
        self.assertEqual(self.otpd.stop(), 0)
        self.assertNotIn(REDIS_PASS, self.otpd.log())

    def test_wrong_password_is_a_clear_failure(self):
        self.restart(OTPD_REDIS_PASS="wrong-pass-0123456789")
        st, h, p = self.otpd.issue("+919812345678")
        self.assertEqual((st, p["error"], h["retry-after"]), (503, "store_unavailable", "1"))
        st, _, p = self.otpd.call("GET", "/readyz", auth=None)
        self.assertEqual((st, p["status"]), (503, "not_ready"))
        self.assertIn("WRONGPASS", p["detail"])
        # Nothing was decided: no key but the fleet's send stream, which the
        # instance before the restart created empty.
        self.assertLessEqual(set(self.redis.cmd("KEYS", "*")), {"otp:q", "otp:lanes"})
        self.assertEqual(self.redis.cmd("XLEN", "otp:q") if self.redis.cmd("EXISTS", "otp:q") else 0, 0)
        self.assertEqual(self.otpd.stop(), 0)
        log = self.otpd.log()
        self.assertIn("WRONGPASS", log)
        self.assertNotIn("wrong-pass-0123456789", log)
        self.assertNotIn(REDIS_PASS, log)

    def test_missing_password_variable_is_a_start_up_error(self):
        env = dict(self.otpd.env)
        del env["OTPD_REDIS_PASS"]
        r = self.run_bin("otpd", ["-c", self.otpd.conf_path], env=env, timeout=10)
        self.assertEqual(r.returncode, 78, r.stderr)  # EX_CONFIG
        self.assertIn("redis.password_env: environment variable OTPD_REDIS_PASS is not set", r.stderr)

    def test_a_password_in_the_url_is_refused(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["redis"]["url"] = "redis://:%s@127.0.0.1:%d/0" % (REDIS_PASS, self.redis.port)
        path = os.path.join(self.tmp, "url.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["--check", "-c", path])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith(path + ": redis.url: must not hold credentials"), r.stderr)
        self.assertNotIn(REDIS_PASS, r.stderr)


class RedisDatabaseTest(OtpdTest):
    """redis://host:port/3: every key otpd writes lands in database 3."""

    def configure(self, cfg):
        cfg["redis"]["url"] = "redis://127.0.0.1:%d/3" % self.redis.port
        cfg["limits"] = [{"name": "phone_hour", "key": "phone", "algorithm": "sliding_log", "limit": 5,
                          "window": "1h"}]
        return cfg

    def test_keys_land_in_db_3(self):
        phone = "+919812345678"
        _, code = self.issue_and_code(phone)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        self.assertEqual(self.otpd.verify(phone, wrong)[2]["attempts_left"], 2)
        keys3 = self.redis.cmd("KEYS", "*", db=3)
        self.assertTrue(keys3, "no key in db 3")
        self.assertTrue(any(phone in k for k in keys3), keys3)
        self.assertEqual(self.redis.cmd("DBSIZE", db=0), 0, self.redis.cmd("KEYS", "*", db=0))
        # The state otpd reads back is db 3's: the guess counted there.
        self.assertEqual(self.otpd.verify(phone, code)[:1], (200,))
        self.assertEqual(self.redis.cmd("DBSIZE", db=0), 0)


class CommandLineTest(OtpdTest):
    """otpd's own flags: --help is an answer (stdout, exit 0), a mistake is a usage error (stderr, 64)."""

    def test_help_and_usage_errors(self):
        for flag in ("--help", "-h"):
            r = self.run_bin("otpd", [flag])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("usage: otpd -c FILE", r.stdout)
            self.assertIn("SIGHUP reloads", r.stdout)
            self.assertEqual(r.stderr, "")
        for args in (["--bogus"], [], ["-c"]):
            r = self.run_bin("otpd", args)
            self.assertEqual(r.returncode, 64, args)
            self.assertIn("usage: otpd -c FILE", r.stderr)
            self.assertEqual(r.stdout, "")


class OneLineEventsTest(OtpdTest):
    """Every log event is one line: a refused reload names all of its errors on one line; a Redis outage is one
    line when housekeeping first fails and one when it works again, not two lines a second."""

    def events(self, name):
        return [l for l in self.otpd.log().splitlines() if name in l]

    def test_a_refused_reload_is_one_line_with_every_error(self):
        bad = json.loads(json.dumps(self.otpd.config))
        bad["otp"]["length"] = 3
        bad["pacer"]["rate"] = 0
        self.otpd.write_config(bad)
        self.otpd.kill(signal.SIGHUP)
        line = wait_until(lambda: self.events("reload refused"), what="the refusal")[0]
        self.assertIn("otp.length", line)
        self.assertIn("pacer.rate", line)
        self.assertIn("; ", line)
        self.assertEqual(len(self.events("pacer.rate")), 1, "an error on a line of its own")

    def test_redis_away_is_one_line_then_one_when_back(self):
        wait_until(lambda: self.otpd.healthy(), what="otpd")
        self.redis.pause()
        try:
            wait_until(lambda: self.events("housekeeping failing"), timeout=10, what="the tick's line")
            import time
            time.sleep(3.5)  # three more ticks, all failing
            self.assertEqual(len(self.events("housekeeping failing")), 1, self.otpd.log()[-3000:])
            for old in ("cannot look for lapsed holds", "cannot refresh the admin rows",
                        "cannot end the messages other instances sent"):
                self.assertEqual(self.events(old), [], old)
        finally:
            self.redis.resume()
        wait_until(lambda: self.events("housekeeping works again"), timeout=10, what="the recovery line")
        self.assertEqual(len(self.events("housekeeping failing")), 1)


class ReadyzLogTest(OtpdTest):
    """A 503 from /readyz is logged as what it is (outcome=not_ready, at warn), never as outcome=ok."""

    def test_not_ready_is_not_logged_ok(self):
        self.redis.pause()
        try:
            st = wait_until(lambda: (lambda r: r if r[0] == 503 else None)(
                self.otpd.call("GET", "/readyz", auth=None)), timeout=10, what="a 503 /readyz")
        finally:
            self.redis.resume()
        self.assertEqual(st[2]["status"], "not_ready")
        lines = [l for l in self.otpd.log().splitlines() if "GET /readyz 503" in l]
        self.assertTrue(lines, self.otpd.log()[-2000:])
        for l in lines:
            self.assertIn("outcome=not_ready", l)
            self.assertNotIn("outcome=ok", l)
