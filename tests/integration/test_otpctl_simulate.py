"""otpctl simulate: a ledger's traffic replayed against other rules.

SimulateReplayTest runs bin/otpd once (setUpClass) with loose rules and drives a
known pattern through it over HTTP:
- phone P (login-web): 8 issues, all accepted and sent (each billed PRICE);
- phone R (login-web, device "dev-r"): 6 issues; the served rule device_2
  (2 per device per 10 minutes) refuses the last 4, sent in a burst, so
  the ledger holds them in aggregate (fewer rows than requests, count > 1);
- phone Q (login-app, the second caller): 1 issue, a malformed code (400
  invalid_request: never reaches the rules, skipped), a wrong code, the
  right code.
It stops otpd and simulates on the ledger it left, with no secret in
otpctl's environment:
- STRICT (phone_10m, a sliding_log of 3 per phone per 10 minutes, instead
  of the loose phone rule) refuses exactly P's issues 4 to 8: 5 requests, 1
  key, the money the ledger shows spent on those 5 messages, and changes
  nothing else;
- the very config otpd ran reproduces every decision the ledger holds;
- a copy of the ledger with P's issues 4 minutes apart (as a slower caller
  would have left it) passes STRICT: the rules run on each row's time;
- phone.types without mobile refuses every request before any rule.
SimulateErrorsTest needs no otpd: a bad NEW.json (EX_CONFIG with its
errors), a missing ledger (EX_NOINPUT), bad flags (EX_USAGE), no
redis-server on PATH (EX_UNAVAILABLE). ServerLifeTest checks that the
private redis-server is gone afterwards: after a run, after SIGTERM to
otpctl while it waits for the server, and after SIGKILL (the kernel's
parent-death signal).
"""
import copy
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import unittest

from harness import BIN, FakeProvider, Otpd, PortClash, Redis, base_config, code_of, free_port, run_bin, \
    wait_until

EX_USAGE, EX_NOINPUT, EX_UNAVAILABLE, EX_CONFIG = 64, 66, 69, 78
PRICE = 20
P = "+447400123456"
Q = "+919812345678"
R = "+447400123457"
P_MASKED = "phone=+44******3456"
OTHER_KEY_NAME = "login-app"

LOOSE = [
    {"name": "phone_loose", "key": "phone", "algorithm": "sliding_log", "limit": 100, "window": "10m"},
    {"name": "device_2", "key": "device", "algorithm": "sliding_log", "limit": 2, "window": "10m"},
]
STRICT = [
    {"name": "phone_10m", "key": "phone", "algorithm": "sliding_log", "limit": 3, "window": "10m"},
    {"name": "device_2", "key": "device", "algorithm": "sliding_log", "limit": 2, "window": "10m"},
]


def clean_env(**extra):
    """An environment with no otpd secret or key in it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTPD_", "KANNEL_", "TWILIO_"))}
    env.update(extra)
    return env


def pid_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone for our purpose only once reaped; ours are reaped by otpctl.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


class SimulateReplayTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="otpd-it-simulate-")
        cls.redis = cls.fake = cls.otpd = None
        try:
            cls.redis = Redis(cls.tmp).start()
            cls.fake = FakeProvider(cls.tmp).start()
            for attempt in range(5):
                cfg = base_config(cls.redis.port, cls.fake.url, os.path.join(cls.tmp, "ledger.db"), free_port(),
                                  limits=copy.deepcopy(LOOSE))
                cfg["cost"] = {"currency": "INR", "prices": {"*": PRICE}, "caps": [{"window": "1h", "max": 100000}]}
                cls.otpd = Otpd(cls.tmp, cfg)
                try:
                    cls.otpd.start()
                    break
                except PortClash:
                    if attempt == 4:
                        raise
            cls.drive()
            rc = cls.otpd.stop()
            if rc != 0:
                raise AssertionError("otpd exited with %s:\n%s" % (rc, cls.otpd.log()[-2000:]))
        except BaseException:
            cls.stop_all()
            raise
        cls.db = cls.otpd.config["ledger"]["path"]

    @classmethod
    def stop_all(cls):
        if cls.otpd and cls.otpd.proc and cls.otpd.proc.poll() is None:
            cls.otpd.proc.kill()
            cls.otpd.proc.wait()
        for p in (cls.fake, cls.redis):
            if p is not None:
                p.stop()

    @classmethod
    def tearDownClass(cls):
        cls.stop_all()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def expect(cls, got, want, what):
        if got != want:
            raise AssertionError("%s: %r, want %r\n%s" % (what, got, want, cls.otpd.log()[-2000:]))

    @classmethod
    def drive(cls):
        o = cls.otpd
        cls.p_ids = []
        for i in range(8):
            st, _, body = o.issue(P)
            cls.expect(st, 202, "issue %d for P" % (i + 1))
            cls.p_ids.append(body["id"])
        cls.r_ids = []
        for i in range(6):
            st, _, body = o.issue(R, device_id="dev-r")
            cls.expect(st, 202 if i < 2 else 429, "issue %d for R" % (i + 1))
            if st == 202:
                cls.r_ids.append(body["id"])
        cls.expect(body.get("reason"), "device_2", "R's third issue")
        st, _, body = o.issue(Q, auth=o.env["OTPD_KEY_LOGIN_APP"])
        cls.expect(st, 202, "issue for Q")
        q_id = body["id"]
        msgs = wait_until(lambda: (lambda m: m if len(m) >= 11 else None)(cls.fake.messages()), 20,
                          what="11 messages at the provider")
        code = code_of([m for m in msgs if m["id"] == q_id][0]["text"])
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        cls.expect(o.verify(Q, "12", auth=o.env["OTPD_KEY_LOGIN_APP"])[0], 400, "malformed code for Q")
        cls.expect(o.verify(Q, wrong, auth=o.env["OTPD_KEY_LOGIN_APP"])[0], 422, "wrong code for Q")
        cls.expect(o.verify(Q, code, auth=o.env["OTPD_KEY_LOGIN_APP"])[0], 200, "right code for Q")
        # Every send is in the ledger before otpd stops: the money is read from there.
        wait_until(lambda: o.rows("SELECT COUNT(*) AS n FROM sends WHERE outcome = 'sent'")[0]["n"] >= 11, 20,
                   what="11 sends in the ledger")

    def write_config(self, name, limits=None, **over):
        cfg = copy.deepcopy(self.otpd.config)
        if limits is not None:
            cfg["limits"] = copy.deepcopy(limits)
        cfg.update(over)
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def simulate(self, conf, *args, expect=0):
        r = run_bin(self.tmp, "otpctl", ["simulate", "--db", self.db, "-c", conf] + list(args), env=clean_env())
        self.assertEqual(r.returncode, expect, r.stderr)
        return r

    def simulate_json(self, conf, *args):
        return json.loads(self.simulate(conf, *args).stdout)

    def spent_on(self, ids):
        """What the ledger shows spent on these messages (sends.cost_minor)."""
        rows = self.otpd.rows("SELECT COALESCE(SUM(cost_minor), 0) AS s FROM sends WHERE message_id IN (%s)" %
                              ",".join("?" * len(ids)), *ids)
        return rows[0]["s"]

    def test_ledger_is_as_driven(self):
        # The premise of the figures below: R's 4 refusals are fewer rows (aggregated).
        rows = self.otpd.rows("SELECT count FROM requests WHERE phone = ? AND decision = 'rate_limited'", R)
        self.assertEqual(sum(r["count"] for r in rows), 4)
        self.assertLess(len(rows), 4)

    def test_stricter_rules(self):
        out = self.simulate_json(self.write_config("strict.json", STRICT))
        print("\n--- otpctl simulate --db ledger.db -c strict.json ---\n" + json.dumps(out, indent=2))
        self.assertEqual(out["requests"], 17)  # 8 + 6 + 1 issues, 2 verifies
        self.assertEqual((out["issues"], out["verifies"], out["skipped"]), (15, 2, 1))
        self.assertEqual(list(out["rules"]), ["phone_10m", "device_2"])
        phone = out["rules"]["phone_10m"]
        # P's issues 4 to 8, one key, and exactly what their messages cost.
        saved = self.spent_on(self.p_ids[3:])
        self.assertEqual(saved, 5 * PRICE)
        self.assertEqual(phone, {"mode": "enforce", "refused": 5, "keys": 1, "spend_saved_minor": saved,
                                 "top": [{"key": P_MASKED, "refused": 5, "spend_saved_minor": saved}]})
        # The device rule refuses R's last 4 issues, as it did in the ledger (nothing was spent on them).
        self.assertEqual(out["rules"]["device_2"],
                         {"mode": "enforce", "refused": 4, "keys": 1, "spend_saved_minor": 0,
                          "top": [{"key": "device=dev-r", "refused": 4, "spend_saved_minor": 0}]})
        self.assertEqual(out["spend_saved_minor"], saved)
        self.assertEqual(out["ledger"]["spend_minor"], 11 * PRICE)
        self.assertEqual(out["ledger"]["decisions"],
                         {"accepted": 11, "rate_limited": 4, "invalid_code": 1, "verified": 1})
        self.assertEqual(out["simulated"]["decisions"],
                         {"accepted": 6, "rate_limited": 9, "invalid_code": 1, "verified": 1})
        self.assertEqual(out["changes"], [{"ledger": "accepted", "simulated": "rate_limited", "requests": 5}])
        self.assertEqual(out["agree"], 12)
        self.assertEqual(out["other"]["cost_cap"], {"refused": 0, "spend_saved_minor": 0})

    def test_same_rules_reproduce_the_ledger(self):
        out = self.simulate_json(self.otpd.conf_path)
        self.assertEqual(out["requests"], 17)
        self.assertEqual(out["changes"], [])
        self.assertEqual(out["agree"], 17)
        self.assertEqual(out["simulated"]["decisions"], out["ledger"]["decisions"])
        self.assertEqual(out["rules"]["phone_loose"]["refused"], 0)
        self.assertEqual(out["rules"]["device_2"]["refused"], 4)

    def test_queue_is_never_full(self):
        # Nothing is sent in a replay: a small pacer.capacity refuses nothing.
        pacer = dict(self.otpd.config["pacer"], capacity=2)
        out = self.simulate_json(self.write_config("small_queue.json", STRICT, pacer=pacer))
        self.assertEqual(out["simulated"]["decisions"],
                         {"accepted": 6, "rate_limited": 9, "invalid_code": 1, "verified": 1})

    def test_queue_share_is_never_full_either(self):
        # No message ends in a replay: a caller's share of the queue would
        # fill with messages a real fleet sends in seconds (review of #11).
        pacer = dict(self.otpd.config["pacer"], capacity=10, share_per_key=0.2)
        out = self.simulate_json(self.write_config("share.json", STRICT, pacer=pacer))
        self.assertEqual(out["simulated"]["decisions"],
                         {"accepted": 6, "rate_limited": 9, "invalid_code": 1, "verified": 1})

    def test_countries_deny_refuses_before_the_rules(self):
        # P and R are GB numbers (+44...): their 14 issues are denied before any rule; Q (+91) is served.
        out = self.simulate_json(self.write_config("deny.json", STRICT, countries={"deny": ["GB"]}))
        self.assertEqual(out["simulated"]["decisions"].get("country_blocked"), 14, out["simulated"])
        self.assertEqual(out["other"]["country_blocked"]["refused"], 14)
        self.assertEqual(out["rules"]["phone_10m"]["refused"], 0)

    def test_rules_run_on_each_rows_time(self):
        # A copy of the ledger in which P's issues came 4 minutes apart: 3 per
        # 10 minutes never refuses them. On the replay's own clock it would.
        spread = os.path.join(self.tmp, "spread.db")
        src = sqlite3.connect(self.db)
        dst = sqlite3.connect(spread)
        src.backup(dst)
        src.close()
        ids = [r[0] for r in dst.execute("SELECT id FROM requests WHERE phone = ? ORDER BY id", (P,))]
        self.assertEqual(len(ids), 8)
        base = dst.execute("SELECT MAX(ts_ms) FROM requests").fetchone()[0] + 1000
        for i, rid in enumerate(ids):
            dst.execute("UPDATE requests SET ts_ms = ? WHERE id = ?", (base + i * 240000, rid))
        dst.commit()
        dst.close()
        r = run_bin(self.tmp, "otpctl", ["simulate", "--db", spread, "-c", self.write_config("strict.json", STRICT)],
                    env=clean_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["rules"]["phone_10m"]["refused"], 0)
        self.assertEqual(out["changes"], [])

    def test_keys_ranked(self):
        # One per phone: P's 7 refusals outrank R's 5; two keys; --top 1 keeps P.
        rules = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10m"}]
        conf = self.write_config("one.json", rules)
        out = self.simulate_json(conf)
        r = out["rules"]["phone_1"]
        self.assertEqual((r["refused"], r["keys"]), (12, 2))
        self.assertEqual([(t["key"], t["refused"]) for t in r["top"]], [(P_MASKED, 7), ("phone=+44******3457", 5)])
        self.assertEqual(r["spend_saved_minor"], self.spent_on(self.p_ids[1:] + self.r_ids[1:]))
        self.assertEqual(len(self.simulate_json(conf, "--top", "1")["rules"]["phone_1"]["top"]), 1)

    def test_reveal_phones_and_top(self):
        out = self.simulate_json(self.write_config("strict.json", STRICT), "--reveal-phones", "--top", "0")
        self.assertEqual(out["rules"]["phone_10m"]["top"], [])
        out = self.simulate_json(self.write_config("strict.json", STRICT), "--reveal-phones")
        self.assertEqual(out["rules"]["phone_10m"]["top"][0]["key"], "phone=" + P)

    def test_composite_key_and_shadow(self):
        # A shadow rule refuses nothing, and says what it would have refused.
        rules = copy.deepcopy(LOOSE) + [{"name": "caller_phone", "key": ["phone", "api_key"],
                                         "algorithm": "sliding_log", "limit": 6, "window": "10m",
                                         "mode": "shadow"}]
        out = self.simulate_json(self.write_config("shadow.json", rules))
        self.assertEqual(out["changes"], [])
        self.assertEqual(out["rules"]["caller_phone"]["mode"], "shadow")
        self.assertEqual(out["rules"]["caller_phone"]["refused"], 2)  # P's 7th and 8th
        self.assertEqual(out["rules"]["caller_phone"]["top"][0]["key"], P_MASKED + ",api_key=login-web")

    def test_phone_types(self):
        out = self.simulate_json(self.write_config("fixed.json", phone={"types": ["fixed_line"]}))
        self.assertEqual(out["simulated"]["decisions"], {"number_type": 17})
        self.assertEqual(out["other"]["number_type"], {"refused": 17, "spend_saved_minor": 11 * PRICE})

    def test_table(self):
        r = self.simulate(self.write_config("strict.json", STRICT), "--format", "table")
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("requests  17 (issues 15, verifies 2; skipped 1)"), r.stdout)
        row = [l for l in lines if l.startswith("phone_10m ")]
        self.assertEqual(len(row), 1, r.stdout)
        self.assertEqual(row[0].split()[:5], ["phone_10m", "enforce", "5", "1", str(5 * PRICE)])
        self.assertIn(P_MASKED + " (5)", row[0])
        self.assertIn("changed   accepted -> rate_limited: 5", lines)


class SimulateErrorsTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-it-simulate-err-")
        cfg = base_config(6379, "http://127.0.0.1:1", os.path.join(self.tmp, "ledger.db"), 8080,
                          limits=copy.deepcopy(STRICT))
        self.conf = os.path.join(self.tmp, "new.json")
        with open(self.conf, "w") as f:
            json.dump(cfg, f)
        # An empty but real ledger: otpd --check does not make one, so use the schema via sqlite3.
        self.db = os.path.join(self.tmp, "ledger.db")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_sim(self, *args, env=None):
        return run_bin(self.tmp, "otpctl", ["simulate"] + list(args), env=env or clean_env())

    def test_bad_config_is_ex_config_with_its_errors(self):
        bad = os.path.join(self.tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump(dict(json.load(open(self.conf)),
                           limits=[{"name": "x", "key": "phone", "algorithm": "leaky", "limit": 3,
                                    "window": "10m"}]), f)
        r = self.run_sim("--db", self.db, "-c", bad)
        self.assertEqual(r.returncode, EX_CONFIG, r.stderr)
        self.assertIn("limits.0.algorithm", r.stderr)
        self.assertEqual(r.stdout, "")

    def test_missing_ledger_is_ex_noinput(self):
        r = self.run_sim("--db", os.path.join(self.tmp, "nope.db"), "-c", self.conf)
        self.assertEqual(r.returncode, EX_NOINPUT, r.stderr)
        self.assertIn("nope.db", r.stderr)

    def test_usage(self):
        for args in ([], ["-c", self.conf], ["--db", self.db], ["--db", self.db, "-c", self.conf, "--format", "xml"],
                     ["--db", self.db, "-c", self.conf, "--top", "-1"], ["--bogus"]):
            r = self.run_sim(*args)
            self.assertEqual(r.returncode, EX_USAGE, (args, r.stderr))

    def test_secrets_are_not_needed(self):
        # The config names OTPD_SECRET and the keys' variables; none is set, and it still loads.
        r = self.run_sim("--db", os.path.join(self.tmp, "nope.db"), "-c", self.conf)
        self.assertNotIn("OTPD_SECRET", r.stderr)
        self.assertEqual(r.returncode, EX_NOINPUT)


class ServerLifeTest(unittest.TestCase):
    """The private redis-server: started through a redis-server on PATH that
    records its pid, then execs the real one (or something that never
    answers), so the test knows which process to look for."""

    @classmethod
    def setUpClass(cls):
        # One small real ledger, made by a short otpd run.
        cls.tmp = tempfile.mkdtemp(prefix="otpd-it-simulate-life-")
        cls.redis = cls.fake = cls.otpd = None
        try:
            cls.redis = Redis(cls.tmp).start()
            cls.fake = FakeProvider(cls.tmp).start()
            for attempt in range(5):
                cfg = base_config(cls.redis.port, cls.fake.url, os.path.join(cls.tmp, "ledger.db"), free_port(),
                                  limits=copy.deepcopy(LOOSE))
                cls.otpd = Otpd(cls.tmp, cfg)
                try:
                    cls.otpd.start()
                    break
                except PortClash:
                    if attempt == 4:
                        raise
            for _ in range(2):
                st = cls.otpd.issue(P)[0]
                if st != 202:
                    raise AssertionError("issue: %s" % st)
            if cls.otpd.stop() != 0:
                raise AssertionError(cls.otpd.log()[-2000:])
        finally:
            for p in (cls.fake, cls.redis):
                if p is not None:
                    p.stop()
        cls.db = cls.otpd.config["ledger"]["path"]
        cls.conf = cls.otpd.conf_path
        cls.real = shutil.which("redis-server")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(dir=self.tmp)
        self.bindir = os.path.join(self.work, "bin")
        self.tmpdir = os.path.join(self.work, "tmp")
        os.mkdir(self.bindir)
        os.mkdir(self.tmpdir)
        self.pidfile = os.path.join(self.work, "redis.pid")

    def wrapper(self, then):
        path = os.path.join(self.bindir, "redis-server")
        with open(path, "w") as f:
            f.write("#!/bin/sh\necho $$ > %s.tmp && mv %s.tmp %s\nexec %s\n" %
                    (self.pidfile, self.pidfile, self.pidfile, then))
        os.chmod(path, 0o755)

    def env(self):
        return clean_env(PATH=self.bindir + ":" + os.environ["PATH"], TMPDIR=self.tmpdir)

    def server_pid(self):
        with open(self.pidfile) as f:
            return int(f.read())

    def test_gone_after_a_run(self):
        self.wrapper('%s "$@"' % self.real)
        r = run_bin(self.tmp, "otpctl", ["simulate", "--db", self.db, "-c", self.conf], env=self.env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["requests"], 2)
        self.assertTrue(pid_gone(self.server_pid()))
        self.assertEqual(os.listdir(self.tmpdir), [])  # its directory, config and log removed

    def start_waiting(self):
        """otpctl with a redis-server that never answers: it waits for it."""
        self.wrapper("sleep 60")
        p = subprocess.Popen([os.path.join(BIN, "otpctl"), "simulate", "--db", self.db, "-c", self.conf],
                             env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        wait_until(lambda: os.path.exists(self.pidfile), what="the private server's pid")
        return p

    def test_gone_after_sigterm(self):
        p = self.start_waiting()
        pid = self.server_pid()
        self.assertFalse(pid_gone(pid))
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=10)
        self.assertEqual(p.returncode, -signal.SIGTERM)
        self.assertTrue(pid_gone(pid))
        self.assertEqual(os.listdir(self.tmpdir), [])

    def test_gone_after_sigkill(self):
        p = self.start_waiting()
        pid = self.server_pid()
        p.kill()
        p.communicate(timeout=10)
        # The kernel's parent-death signal; the server is init's child then, reaped by it.
        wait_until(lambda: pid_gone(pid), 5, what="the server to die with otpctl")

    def test_no_redis_server_is_ex_unavailable(self):
        env = self.env()
        env["PATH"] = self.bindir  # empty: no redis-server anywhere
        r = run_bin(self.tmp, "otpctl", ["simulate", "--db", self.db, "-c", self.conf], env=env)
        self.assertEqual(r.returncode, EX_UNAVAILABLE, r.stderr)
        self.assertIn("redis-server", r.stderr)
        self.assertEqual(os.listdir(self.tmpdir), [])


if __name__ == "__main__":
    unittest.main()
