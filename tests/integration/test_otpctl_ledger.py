"""otpctl ledger: several instances' ledgers read as one history.

FleetLedgerTest starts two otpd instances on one Redis and one fake provider,
each with its own ledger (A sends through Kannel, so a delivery report can
reach it; B through the webhook), and walks one phone through both: issued
on A, a wrong guess and a resend on B, refused on A by a rule the two share
in Redis, verified on B, delivered on A; another phone on B. Between steps
the test waits for the wall clock to move on a millisecond, so every step
has its own time and the merged order is the order the test made them.

It reads the two ledgers with otpctl while both instances run (WAL: the
files stay as they were, the -shm index aside) and again once they stopped
(no -wal or -shm file appears beside them), with no secret in otpctl's
environment, in all three formats, with --phone, --since and --until.

LedgerErrorsTest needs no otpd: the exit codes (sysexits) and messages for
bad flags, bad values, and files that are missing or no ledger.
"""
import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
import signal
import sqlite3
import tempfile
import time
import unittest
import urllib.parse
from datetime import datetime, timedelta, timezone

from harness import (API_KEY, ROOT, FakeProvider, Otpd, PortClash, Redis, base_config, code_of, free_port,
                     run_bin, sanitizer_reports, wait_until)

EX_USAGE, EX_DATAERR, EX_NOINPUT = 64, 65, 66
P = "+447400123456"        # the phone followed through both instances
P_TRUNK = "+4407400123456"  # the same phone with its trunk prefix: not canonical
Q = "+919812345678"        # another phone, on B only
WRONG = "000000"

LIMITS = [
    # Shared by the two instances through Redis: the third issue for P (on A) is refused.
    {"name": "phone_2", "key": "phone", "algorithm": "sliding_log", "limit": 2, "window": "10m"},
    # Would refuse the second issue: its row's shadow column is "shadow_a,shadow_b" (a comma for csv).
    {"name": "shadow_a", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10m", "mode": "shadow"},
    {"name": "shadow_b", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "10m", "mode": "shadow"},
]
COLUMNS = ["time", "ts_ms", "ledger", "file", "event", "state", "phone", "api_key", "purpose", "device_id",
           "client_ip", "rule", "shadow", "http_status", "count", "request_id", "verification_id", "message_id",
           "provider", "provider_id", "attempt", "latency_ms", "cost_minor", "wrong", "detail"]
INT_COLUMNS = {"ts_ms", "ledger", "http_status", "count", "request_id", "attempt", "latency_ms", "cost_minor",
               "wrong"}
TABLE_HEADINGS = ["TIME", "LEDGER", "EVENT", "STATE", "PHONE", "CALLER", "RULE", "HTTP", "REQUEST",
                  "VERIFICATION", "MESSAGE", "DETAIL"]


def now_ms():
    return time.time_ns() // 1000000


def clean_env():
    """An environment with no otpd secret or key in it."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTPD_", "KANNEL_", "TWILIO_"))}


def snapshot(paths):
    """mtime, size and content hash of each path that exists."""
    out = {}
    for p in paths:
        if os.path.exists(p):
            st = os.stat(p)
            with open(p, "rb") as f:
                out[p] = (st.st_mtime_ns, st.st_size, hashlib.sha256(f.read()).hexdigest())
    return out


def rfc3339(ms, offset_minutes=0):
    tz = timezone(timedelta(minutes=offset_minutes))
    return datetime.fromtimestamp(ms / 1000, tz).isoformat(timespec="milliseconds")


class FleetLedgerTest(unittest.TestCase):
    """Two instances, one history. The instances run in setUpClass only:
    the tests read what they left (and what setUpClass read while they
    ran)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="otpd-it-ledger-")
        cls.redis = cls.fake = None
        cls.nodes = []
        try:
            cls.redis = Redis(cls.tmp).start()
            cls.fake = FakeProvider(cls.tmp).start()
            cls.a = cls.start_node("a", kannel=True)
            cls.b = cls.start_node("b", kannel=False)
            cls.dbs = [cls.a.config["ledger"]["path"], cls.b.config["ledger"]["path"]]
            cls.walk()
            cls.read_while_running()
            for node in cls.nodes:
                rc = node.stop()
                if rc != 0:
                    raise AssertionError("otpd exited with %s:\n%s" % (rc, node.log()[-2000:]))
        except BaseException:
            cls.stop_all()
            raise

    @classmethod
    def start_node(cls, name, kannel):
        workdir = os.path.join(cls.tmp, name)
        os.mkdir(workdir)
        env = {"KANNEL_USER": "kuser", "KANNEL_PASS": "kpass-secret"} if kannel else {}
        for attempt in range(5):
            cfg = base_config(cls.redis.port, cls.fake.url, os.path.join(workdir, "ledger.db"), free_port(),
                              limits=[dict(r) for r in LIMITS])
            cfg["cost"] = {"currency": "INR", "prices": {"*": 20}, "caps": [{"window": "1h", "max": 100000}]}
            if kannel:
                cfg["provider"] = {"type": "kannel", "url": cls.fake.url + "/cgi-bin/sendsms", "from": "OTPD",
                                   "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS",
                                   "callback_url": "http://" + cfg["listen"]}
            node = Otpd(workdir, cfg, env)
            try:
                node.start()
                cls.nodes.append(node)
                return node
            except PortClash:
                if attempt == 4:
                    raise

    @classmethod
    def stop_all(cls):
        for node in cls.nodes:
            if node.proc and node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait()
        for p in (cls.fake, cls.redis):
            if p is not None:
                p.stop()

    @classmethod
    def tearDownClass(cls):
        cls.stop_all()
        found = [r for r in (n.sanitizer_report() for n in cls.nodes) if r]
        found += [r for r in sanitizer_reports(cls.tmp) if not r.startswith("san.otpd.")]
        for node in cls.nodes:
            found += [r for r in sanitizer_reports(node.dir) if not r.startswith("san.otpd.")]
        if found:
            raise AssertionError("a process reported a problem (files kept in %s):\n%s" % (cls.tmp, "\n".join(found)))
        if not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    # The walk through both instances.
    @classmethod
    def step(cls, node, method, *args, want=None):
        """One call; afterwards the wall clock moves on a millisecond, so the
        next step's rows have a later time than this one's."""
        st, _, body = getattr(node, method)(*args)
        if want is not None and st != want:
            raise AssertionError("%s %s: %s %s" % (method, args, st, body))
        done = now_ms()
        wait_until(lambda: now_ms() > done, what="the next millisecond")
        return st, body

    @classmethod
    def state(cls, node, mid):
        rows = node.rows("SELECT state FROM messages WHERE id = ?", mid)
        return rows[0]["state"] if rows else None

    @classmethod
    def kannel_request(cls, mid):
        reqs = [r for r in cls.fake.requests() if (r.get("args") or {}).get("dlr-url", "").find(mid) >= 0]
        return reqs[0] if reqs else None

    @classmethod
    @contextlib.contextmanager
    def only_sender(cls, node):
        """The two instances share one send queue, and either may send a
        message: the other one is SIGSTOPped meanwhile (well within
        pacer.takeover, and it holds no claim then), so node sends, and the
        history is the same on every run."""
        other = cls.b if node is cls.a else cls.a
        os.kill(other.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(other.proc.pid, signal.SIGCONT)

    @classmethod
    def walk(cls):
        a, b = cls.a, cls.b
        with cls.only_sender(a):
            _, m1 = cls.step(a, "issue", P, want=202)
            wait_until(lambda: cls.state(a, m1["id"]) == "sent", what="m1 sent")
        req = cls.kannel_request(m1["id"])
        cls.code = code_of(req["args"]["text"])
        if cls.code is None or cls.code == WRONG:
            raise AssertionError("no usable code in %r" % req["args"])
        cls.step(b, "verify", P, WRONG, want=422)
        with cls.only_sender(b):
            _, m2 = cls.step(b, "issue", P, want=202)  # a resend: the same verification, a new message
            wait_until(lambda: cls.state(b, m2["id"]) == "sent", what="m2 sent")
        st, body = cls.step(a, "issue", P, want=429)
        if body.get("reason") != "phone_2":
            raise AssertionError("refused by %r" % body)
        cls.step(b, "verify", P, cls.code, want=200)
        # Kannel's delivery report for m1, on A's dlr-url (type 1: delivered).
        url = urllib.parse.urlsplit(req["args"]["dlr-url"].replace("%d", "1"))
        st, _, _ = a.call("GET", url.path + "?" + url.query, auth=None)
        if st != 200 or cls.state(a, m1["id"]) != "delivered":
            raise AssertionError("report: %s, m1 %s" % (st, cls.state(a, m1["id"])))
        with cls.only_sender(b):
            cls.step(b, "issue", Q, want=202)
            cls.m1, cls.m2, cls.vid = m1["id"], m2["id"], m1["verification_id"]
            cls.mq = [r["id"] for r in b.rows("SELECT id FROM messages WHERE phone = ?", Q)][0]
            wait_until(lambda: cls.state(b, cls.mq) == "sent", what="Q's message sent")
        # Every row is committed: the counted 4xx rows once their second is over.
        wait_until(lambda: a.rows("SELECT 1 FROM requests WHERE decision = 'rate_limited'"), what="A's 429 row")
        wait_until(lambda: b.rows("SELECT 1 FROM requests WHERE decision = 'invalid_code'"), what="B's 422 row")

    @classmethod
    def otpctl(cls, *args, env=None, **kw):
        return run_bin(cls.tmp, "otpctl", ["ledger"] + list(args), clean_env() if env is None else env, **kw)

    @classmethod
    def read_while_running(cls):
        """Reads both live ledgers in every format; the ledger files and their
        WALs must be byte for byte and mtime as they were. (The -shm file is
        the WAL's shared index, in which readers take their read locks: not
        ledger content.)"""
        files = [p + sfx for p in cls.dbs for sfx in ("", "-wal")]
        if not all(os.path.exists(f) for f in files):
            raise AssertionError("a live ledger without its WAL: %s" % os.listdir(os.path.dirname(cls.dbs[0])))
        cls.live_before = snapshot(files)
        cls.live = {fmt: cls.otpctl("--db", cls.dbs[0], "--db", cls.dbs[1], "--format", fmt)
                    for fmt in ("json", "csv", "table")}
        cls.live_after = snapshot(files)

    # Helpers for the tests.
    def run_ok(self, *args, env=None):
        """otpctl ledger's output, as bytes decoded without newline
        translation (csv ends its records in CRLF)."""
        r = self.otpctl(*args, env=env, text=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, b"")
        out = r.stdout.decode()
        self.assertNotIn(self.code, out)
        return out

    def json_rows(self, *args):
        rows = [json.loads(line) for line in self.run_ok(*args, "--format", "json").splitlines()]
        for r in rows:
            self.assertEqual(list(r), COLUMNS)
        return rows

    def both(self):
        return ["--db", self.dbs[0], "--db", self.dbs[1]]

    def key(self, r):
        """What identifies an event in a check's messages."""
        return (r["ledger"], r["event"], r["state"], r["phone"], r["message_id"])

    # The tests.
    def test_json_is_one_history_merged_by_time(self):
        rows = self.json_rows(*self.both())
        self.assertEqual([r["ts_ms"] for r in rows], sorted(r["ts_ms"] for r in rows))
        for r in rows:
            self.assertEqual(r["file"], self.dbs[r["ledger"] - 1])
            self.assertEqual(r["time"], rfc3339(r["ts_ms"]).replace("+00:00", "Z"))
        # The requests, in the order the test made them, from both files.
        reqs = [(r["ledger"], r["event"], r["state"], r["phone"]) for r in rows if r["event"] in ("issue", "verify")]
        self.assertEqual(reqs, [(1, "issue", "accepted", P), (2, "verify", "invalid_code", P),
                                (2, "issue", "accepted", P), (1, "issue", "rate_limited", P),
                                (2, "verify", "verified", P), (2, "issue", "accepted", Q)])
        by = {(r["ledger"], r["event"], r["state"], r["phone"]): r for r in rows if r["event"] in ("issue", "verify")}
        refused = by[(1, "issue", "rate_limited", P)]
        self.assertEqual((refused["rule"], refused["http_status"], refused["count"], refused["api_key"]),
                         ("phone_2", 429, 1, "login-web"))
        self.assertIsNone(refused["message_id"])
        resend = by[(2, "issue", "accepted", P)]
        self.assertEqual((resend["message_id"], resend["verification_id"], resend["http_status"], resend["shadow"]),
                         (self.m2, self.vid, 202, "shadow_a,shadow_b"))
        self.assertIsInstance(resend["request_id"], int)
        self.assertEqual(by[(1, "issue", "accepted", P)]["message_id"], self.m1)
        self.assertEqual(by[(2, "verify", "verified", P)]["verification_id"], self.vid)
        # m1's life on A, with its provider call and B's verification in between.
        life = [(r["ledger"], r["event"], r["state"]) for r in rows if r["message_id"] == self.m1]
        self.assertEqual(life, [(1, "message", "queued"), (1, "issue", "accepted"), (1, "message", "sending"),
                                (1, "send", "sent"), (1, "message", "sent"), (1, "message", "delivered")])
        i_verified = [self.key(r) for r in rows].index((2, "verify", "verified", P, None))
        i_delivered = [self.key(r) for r in rows].index((1, "message", "delivered", P, self.m1))
        self.assertLess(i_verified, i_delivered)
        send = [r for r in rows if r["event"] == "send" and r["message_id"] == self.m1][0]
        self.assertEqual((send["provider"], send["attempt"], send["cost_minor"], send["phone"],
                          send["verification_id"]), ("kannel", 1, 20, P, self.vid))
        self.assertIsInstance(send["latency_ms"], int)
        self.assertEqual([r["provider"] for r in rows if r["event"] == "send" and r["message_id"] == self.m2],
                         ["webhook"])
        delivered = [r for r in rows if r["state"] == "delivered"][0]
        self.assertEqual(delivered["detail"], "kannel dlr 1")
        # The verification: started in each ledger that accepted one of its
        # messages, and ended on B, which verified it.
        ver = [(r["ledger"], r["state"]) for r in rows if r["event"] == "verification" and r["phone"] == P]
        self.assertEqual(ver, [(1, "started"), (2, "started"), (2, "verified")])
        self.assertTrue(all(r["verification_id"] == self.vid for r in rows
                            if r["event"] == "verification" and r["phone"] == P))

    def test_ties_keep_a_message_in_its_order(self):
        """Rows of one millisecond read in the order otpd writes them: a
        verification started and its message queued before the request's
        row, a verification's end before the verify's row, sending before
        the provider call before its outcome."""
        rows = self.json_rows(*self.both())
        rank = {("verification", "started"): 0, ("message", "queued"): 1, ("verification", "verified"): 2,
                ("message", "sending"): 4, ("message", "sent"): 6, ("message", "delivered"): 6}

        def rank_of(r):
            return 3 if r["event"] in ("issue", "verify") else 5 if r["event"] == "send" else \
                rank[(r["event"], r["state"])]
        ties = 0
        for x, y in zip(rows, rows[1:]):
            if x["ts_ms"] == y["ts_ms"]:
                ties += 1
                self.assertLessEqual((rank_of(x), x["ledger"]), (rank_of(y), y["ledger"]), (x, y))
        # A new verification starts at its first message's queued time, to
        # the millisecond: there are ties to check.
        self.assertGreater(ties, 0)

    def test_csv_and_table_say_what_json_says(self):
        rows = self.json_rows(*self.both())
        raw = self.run_ok(*self.both(), "--format", "csv")
        # RFC 4180: CRLF ends every record, and a field with a comma is quoted.
        self.assertTrue(raw.endswith("\r\n"))
        self.assertNotIn("\n", raw.replace("\r\n", ""))
        self.assertIn('"shadow_a,shadow_b"', raw)
        parsed = list(csv.reader(io.StringIO(raw, newline="")))
        self.assertEqual(parsed[0], COLUMNS)
        want = [[("" if r[c] is None else str(r[c])) for c in COLUMNS] for r in rows]
        self.assertEqual(parsed[1:], want)

        table = self.run_ok(*self.both()).splitlines()
        self.assertEqual(table[:2], ["# ledger 1: %s" % self.dbs[0], "# ledger 2: %s" % self.dbs[1]])
        head = table[2]
        self.assertEqual(head.split(), TABLE_HEADINGS)
        starts = [head.index(h) for h in TABLE_HEADINGS]
        body = table[3:]
        self.assertEqual(len(body), len(rows))
        for line, r in zip(body, rows):
            # Aligned: every column starts where its heading does, after a gap.
            for s in starts[1:]:
                self.assertEqual(line[s - 2:s], "  ", line)
                self.assertNotEqual(line[s], " ", line)
            cells = [line[s:e].strip() for s, e in zip(starts, starts[1:] + [None])]
            self.assertEqual(cells[0], r["time"])
            self.assertEqual(cells[1:4], [str(r["ledger"]), r["event"], r["state"]])
            self.assertEqual(cells[9:11], [r["verification_id"] or "-", r["message_id"] or "-"])
            if r["event"] == "send":
                self.assertIn("provider=%s" % r["provider"], cells[11])
                self.assertIn("cost_minor=20", cells[11])
            if r["state"] == "delivered":
                self.assertIn('detail="kannel dlr 1"', cells[11])

    def test_phone_filter(self):
        everything = self.json_rows(*self.both())
        for phone in (P, P_TRUNK):  # the trunk prefix is dropped, as otpd does
            rows = self.json_rows(*self.both(), "--phone", phone)
            self.assertEqual(rows, [r for r in everything if r["phone"] == P])
            self.assertEqual({r["ledger"] for r in rows}, {1, 2})
        rows = self.json_rows(*self.both(), "--phone", Q)
        self.assertEqual(rows, [r for r in everything if r["phone"] == Q])
        self.assertEqual({r["message_id"] for r in rows if r["event"] == "send"}, {self.mq})
        self.assertEqual(self.json_rows(*self.both(), "--phone", "+919812345679"), [])

    def test_since_and_until(self):
        everything = self.json_rows(*self.both())
        refused = [r for r in everything if r["state"] == "rate_limited"][0]
        delivered = [r for r in everything if r["state"] == "delivered"][0]
        lo, hi = refused["ts_ms"], delivered["ts_ms"]
        want = [r for r in everything if lo <= r["ts_ms"] < hi]
        self.assertIn(refused, want)
        self.assertNotIn(delivered, want)
        # --since inclusive, --until exclusive; RFC 3339 with any offset, or Unix ms.
        for since, until in ((str(lo), str(hi)), (rfc3339(lo, 330), rfc3339(hi, -300)),
                             (rfc3339(lo).replace("+00:00", "Z"), str(hi))):
            self.assertEqual(self.json_rows(*self.both(), "--since", since, "--until", until), want, (since, until))
        self.assertEqual(self.json_rows(*self.both(), "--since", str(hi + 1)),
                         [r for r in everything if r["ts_ms"] > hi])
        self.assertEqual(self.json_rows(*self.both(), "--until", str(lo)),
                         [r for r in everything if r["ts_ms"] < lo])
        rows = self.json_rows(*self.both(), "--phone", P, "--since", str(lo))
        self.assertEqual(rows, [r for r in everything if r["phone"] == P and r["ts_ms"] >= lo])

    def test_read_while_running_changed_nothing(self):
        for fmt, r in self.live.items():
            self.assertEqual(r.returncode, 0, "%s: %s" % (fmt, r.stderr))
            self.assertNotIn(self.code, r.stdout)
        self.assertEqual(len(self.live_before), 4)
        self.assertEqual(self.live_after, self.live_before)
        # The instances committed nothing since (every row was in before the
        # reads), so the stopped ledgers say what the live ones said.
        self.assertEqual(self.run_ok(*self.both(), "--format", "json"), self.live["json"].stdout)

    def test_read_when_stopped_changes_nothing(self):
        """With no otpd running a ledger has no -wal file; reading it must not
        make one (nor a -shm), which could belong to another user than
        otpd's and keep it from opening its ledger."""
        dirs = sorted({os.path.dirname(p) for p in self.dbs})
        listing = {d: sorted(os.listdir(d)) for d in dirs}
        for d in dirs:
            self.assertFalse([f for f in listing[d] if f.endswith(("-wal", "-shm"))], listing[d])
        before = snapshot(self.dbs)
        for fmt in ("table", "json", "csv"):
            self.run_ok(*self.both(), "--format", fmt, "--phone", P)
        self.assertEqual({d: sorted(os.listdir(d)) for d in dirs}, listing)
        self.assertEqual(snapshot(self.dbs), before)

    def test_follows_a_message_into_another_ledger(self):
        """After a takeover (issue #10) an instance sends, and hears reports
        for, messages another one accepted; its ledger then holds rows of a
        message whose messages row is elsewhere. Today's instances send only
        their own, so a copy of B's ledger gets such rows by hand: a second
        try and its delivery for A's m1."""
        copy = os.path.join(self.tmp, "takeover.db")
        shutil.copyfile(self.dbs[1], copy)
        everything = self.json_rows(*self.both())
        t = max(r["ts_ms"] for r in everything) + 10
        con = sqlite3.connect(copy)
        con.execute("INSERT INTO sends (message_id, ts_ms, attempt, provider, http_status, latency_ms, outcome, "
                    "cost_minor) VALUES (?, ?, 2, 'webhook', 200, 7, 'sent', 20)", (self.m1, t))
        con.execute("INSERT INTO message_events (message_id, ts_ms, state, detail) VALUES (?, ?, 'delivered', "
                    "'late report')", (self.m1, t + 1))
        con.commit()
        con.close()
        pair = ["--db", self.dbs[0], "--db", copy]
        rows = self.json_rows(*pair, "--phone", P)
        tail = [(r["ledger"], r["event"], r["state"], r["phone"], r["message_id"]) for r in rows if r["ts_ms"] >= t]
        self.assertEqual(tail, [(2, "send", "sent", P, self.m1), (2, "message", "delivered", P, self.m1)])
        self.assertEqual([r["ts_ms"] for r in rows], sorted(r["ts_ms"] for r in rows))
        # Another phone's history does not take them; without a filter they
        # are there, with no phone (their message row is in the other file).
        self.assertFalse([r for r in self.json_rows(*pair, "--phone", Q) if r["message_id"] == self.m1])
        rows = self.json_rows(*pair)
        self.assertEqual([(r["event"], r["phone"]) for r in rows if r["ts_ms"] >= t],
                         [("send", None), ("message", None)])
        # Alone, the copy cannot tell whose message that was.
        self.assertFalse([r for r in self.json_rows("--db", copy, "--phone", P) if r["ts_ms"] >= t])

    def test_one_ledger_alone_and_the_order_of_files(self):
        everything = self.json_rows(*self.both())
        for i, db in enumerate(self.dbs):
            rows = self.json_rows("--db", db)
            mine = [dict(r, ledger=1) for r in everything if r["ledger"] == i + 1]
            self.assertEqual(rows, mine)
        swapped = self.json_rows("--db", self.dbs[1], "--db", self.dbs[0])
        self.assertEqual(sorted((r["ts_ms"], r["file"], r["event"], r["state"]) for r in swapped),
                         sorted((r["ts_ms"], r["file"], r["event"], r["state"]) for r in everything))
        self.assertEqual({(r["file"], r["ledger"]) for r in swapped}, {(self.dbs[1], 1), (self.dbs[0], 2)})

    def test_errors_name_the_file(self):
        missing = os.path.join(self.tmp, "nope.db")
        r = self.otpctl(*self.both(), "--db", missing)
        self.assertEqual((r.returncode, r.stdout), (EX_NOINPUT, ""))
        self.assertIn(missing, r.stderr)
        r = self.otpctl("--db", self.dbs[0], "--phone", "+4474001234567")
        self.assertEqual((r.returncode, r.stdout), (EX_DATAERR, ""))
        self.assertIn("phone is too long for GB (+44)", r.stderr)


def empty_ledger(path, version=None):
    """A ledger as otpd creates it, from schema/*.sql, with no rows."""
    con = sqlite3.connect(path)
    names = sorted(n for n in os.listdir(os.path.join(ROOT, "schema")) if n.endswith(".sql"))
    for n in names:
        with open(os.path.join(ROOT, "schema", n)) as f:
            con.executescript(f.read())
    con.execute("PRAGMA user_version = %d" % (len(names) if version is None else version))
    con.commit()
    con.close()


class LedgerErrorsTest(unittest.TestCase):
    """Exit codes and messages; no otpd needed."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-it-ledger-err-")
        self.good = os.path.join(self.tmp, "good.db")
        empty_ledger(self.good)

    def tearDown(self):
        found = sanitizer_reports(self.tmp)
        if found:
            self.fail("a process reported a problem (files kept in %s):\n%s" % (self.tmp, "\n".join(found)))
        shutil.rmtree(self.tmp, ignore_errors=True)

    def otpctl(self, *args, **kw):
        return run_bin(self.tmp, "otpctl", list(args), clean_env(), **kw)

    def expect(self, code, args, *said):
        r = self.otpctl(*args)
        self.assertEqual(r.returncode, code, (args, r.stdout, r.stderr))
        self.assertEqual(r.stdout, "", args)
        for s in said:
            self.assertIn(s, r.stderr, args)
        return r

    def test_empty_ledger_prints_only_headings(self):
        r = self.otpctl("ledger", "--db", self.good)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(r.stdout.splitlines()[1].split(), TABLE_HEADINGS)
        self.assertEqual(len(r.stdout.splitlines()), 2)
        r = self.otpctl("ledger", "--db=" + self.good, "--format=csv", text=False)
        self.assertEqual((r.returncode, r.stdout), (0, (",".join(COLUMNS) + "\r\n").encode()))
        r = self.otpctl("ledger", "--db", self.good, "--format", "json")
        self.assertEqual((r.returncode, r.stdout), (0, ""))

    def test_bad_flags(self):
        good = ["--db", self.good]
        for args in ([], ["--phone", P], good + ["--format", "xml"], good + ["--db"], good + ["--bogus"],
                     good + ["extra"], good + ["--phone", P, "--phone", P], good + ["--since", "1", "--since", "2"],
                     good + ["-c", "otpd.json"]):
            self.expect(EX_USAGE, ["ledger"] + args, "otpctl ledger: ", "usage:")

    def test_bad_values(self):
        good = ["ledger", "--db", self.good]
        self.expect(EX_DATAERR, good + ["--phone", "447400123456"], "--phone 447400123456")
        self.expect(EX_DATAERR, good + ["--phone", "+44 7400 123456"], "--phone")
        self.expect(EX_DATAERR, good + ["--phone", "+4474001234567"], "phone is too long for GB (+44)")
        for t in ("yesterday", "2024-05-01", "2024-05-01T12:00:00", "2024-02-30T00:00:00Z", "-5", "1.5"):
            self.expect(EX_DATAERR, good + ["--since", t], "--since %s" % t, "RFC 3339")
            self.expect(EX_DATAERR, good + ["--until", t], "--until %s" % t)
        self.expect(EX_DATAERR, good + ["--since", "2024-05-01T12:00:00Z", "--until", "1714564800000"],
                    "is not before --until")

    def test_missing_or_not_a_ledger(self):
        missing = os.path.join(self.tmp, "missing.db")
        text = os.path.join(self.tmp, "notes.txt")
        with open(text, "w") as f:
            f.write("not a database, but long enough to have a header of sorts\n" * 200)
        bare = os.path.join(self.tmp, "bare.db")
        con = sqlite3.connect(bare)
        con.execute("CREATE TABLE t (a)")
        con.commit()
        con.close()
        hollow = os.path.join(self.tmp, "hollow.db")  # says schema 4, holds no tables
        con = sqlite3.connect(hollow)
        con.execute("PRAGMA user_version = 4")
        con.commit()
        con.close()
        old = os.path.join(self.tmp, "old.db")
        empty_ledger(old, version=2)
        cases = [(missing, "No such file"), (text, "not a ledger"), (bare, "not a ledger"),
                 (hollow, "not a ledger"), (old, "schema 2 is older"), (self.tmp, "not a regular file")]
        for path, said in cases:
            self.expect(EX_NOINPUT, ["ledger", "--db", path], path + ": ", said)
            # One bad file fails the run, whichever place it has.
            self.expect(EX_NOINPUT, ["ledger", "--db", self.good, "--db", path, "--format", "json"], path + ": ")
        # A path with characters a URI gives a meaning to opens as itself.
        odd = os.path.join(self.tmp, "odd %3F?#name.db")
        shutil.copyfile(self.good, odd)
        r = self.otpctl("ledger", "--db", odd, "--format", "csv")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        rel = os.path.relpath(self.good)
        r = self.otpctl("ledger", "--db", rel, "--format", "csv")
        self.assertEqual((r.returncode, r.stderr), (0, ""))

    def test_other_commands_still_parse(self):
        r = self.otpctl()
        self.assertEqual(r.returncode, EX_USAGE)
        self.assertIn("otpctl ledger --db FILE", r.stderr)
        self.assertIn("otpctl audit -c FILE", r.stderr)
        r = self.otpctl("ledger", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("--since is inclusive, --until exclusive", r.stdout)


if __name__ == "__main__":
    unittest.main()
