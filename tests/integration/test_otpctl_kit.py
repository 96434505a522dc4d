"""otpctl verify, stats and audit on ledgers written by the real service.

KitTest drives one otpd through known traffic (issues, a wrong and a right
guess, a refusal by a rule, three sends at a known price), stops it, and
then reads its ledger with otpctl and no secret in the environment:
- verify passes, and its head hash is the one this file recomputes in
  Python from the documented format (src/ledger/chain.h), so the chain is
  checkable without otpd's code;
- a copy with one field changed, one with a row deleted, one with two rows
  swapped, one with a link changed, one with a link removed and one with a
  row added behind otpd's back each fail with EX_DATAERR, naming the row;
- stats' figures are exact for the traffic; audit reads without secrets;
  none of them changes the file.
UpgradeTest: a ledger from before the chain (schema 6) is chained from the
upgrade on, and verify says where the chain starts. PruneTest: retention
deletes old rows and links, and the chain still verifies.
"""
import hashlib
import json
import os
import shutil
import sqlite3
import struct

from harness import OtpdTest, wait_until

EX_USAGE, EX_DATAERR, EX_NOINPUT = 64, 65, 66
P, Q = "+919812345678", "+447400123456"
PRICE = 20

TABLES = [
    ("requests", "id, ts_ms, kind, api_key, phone, device_id, client_ip, decision, rule, shadow, verification_id, "
                 "message_id, http_status, purpose, count"),
    ("verifications", "rowid, id, phone, api_key, created_ms, expires_ms, status, wrong, ended_ms"),
    ("messages", "seq, id, verification_id, api_key, phone, state, created_ms, expires_ms, updated_ms, attempts, "
                 "price_minor, cost_ms, provider_id, detail, cost_caps, legacy"),
    ("message_events", "id, message_id, ts_ms, state, detail"),
    ("sends", "id, message_id, ts_ms, attempt, provider, http_status, latency_ms, outcome, provider_id, error, "
              "cost_minor"),
    ("admin_actions", "id, ts_ms, admin, action, kind, row_id, body, note, expires_ms, result"),
]


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTPD_", "KANNEL_", "TWILIO_"))}


def enc(v):
    if v is None:
        return b"N"
    if isinstance(v, int):
        return b"I" + struct.pack(">q", v)
    if isinstance(v, str):
        b = v.encode()
        return b"T" + struct.pack(">I", len(b)) + b
    return b"B" + struct.pack(">I", len(v)) + v


def py_chain(path):
    """The chain recomputed from chain.h's format: (head seq, head hex,
    True when every newest link matches its row)."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        marks = con.execute("SELECT requests, verifications, messages, message_events, sends, admin_actions "
                            "FROM chain_start").fetchone()
        base_seq, base_hash = con.execute("SELECT seq, hash FROM chain_base").fetchone()
        prev = base_hash if base_seq else hashlib.sha256(b"otpd-chain-v1\0" + b"".join(
            t.encode() + b"\0" + struct.pack(">q", m) for (t, _), m in zip(TABLES, marks))).digest()
        seq, newest = base_seq, {}
        for seq, tbl, rid, ts, dg, h in con.execute("SELECT seq, tbl, row_id, ts_ms, digest, hash FROM chain "
                                                    "ORDER BY seq"):
            prev = hashlib.sha256(prev + struct.pack(">q", seq) + tbl.encode() + b"\0" + struct.pack(">q", rid) +
                                  struct.pack(">q", ts) + dg).digest()
            if prev != h:
                return seq, None, False
            newest[(tbl, rid)] = dg
        rows_ok = True
        for t, cols in TABLES:
            for row in con.execute("SELECT %s FROM %s" % (cols, t)):
                d = hashlib.sha256(b"otpd-row-v1\0" + t.encode() + b"\0" + b"".join(enc(v) for v in row)).digest()
                if row[0] > marks[[x for x, _ in TABLES].index(t)] and newest.get((t, row[0])) != d:
                    rows_ok = False
        return seq, prev.hex(), rows_ok
    finally:
        con.close()


class KitBase(OtpdTest):
    limits = [{"name": "phone_2", "key": "phone", "algorithm": "sliding_log", "limit": 2, "window": "10m"}]

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"*": PRICE}, "caps": [{"window": "1h", "max": 100000}]}
        return cfg

    def otpctl(self, *args):
        return self.run_bin("otpctl", list(args), env=clean_env())

    def copy(self, name):
        dst = os.path.join(self.tmp, name)
        shutil.copyfile(self.db_path, dst)
        return dst

    def tamper(self, name, *sql):
        path = self.copy(name)
        con = sqlite3.connect(path)
        for s in sql:
            con.execute(s)
        con.commit()
        con.close()
        return path

    def broken(self, path):
        r = self.otpctl("verify", "--db", path)
        self.assertEqual(r.returncode, EX_DATAERR, r.stdout + r.stderr)
        line = [x for x in r.stdout.splitlines() if x.startswith("BROKEN: ")]
        self.assertEqual(len(line), 1, r.stdout)
        return line[0]

    def traffic(self):
        """Known traffic: P issued, guessed wrong, verified, issued again,
        refused by phone_2; Q issued. Three sends."""
        _, code = self.issue_and_code(P)
        st, _, _ = self.otpd.verify(P, "000000" if code != "000000" else "111111")
        self.assertEqual(st, 422)
        st, _, _ = self.otpd.verify(P, code)
        self.assertEqual(st, 200)
        self.issue_and_code(P)
        st, _, body = self.otpd.issue(P)
        self.assertEqual(st, 429, body)
        self.issue_and_code(Q)
        wait_until(lambda: len(self.otpd.rows("SELECT * FROM sends")) == 3, what="3 sends rows")


class KitTest(KitBase):
    def setUp(self):
        super().setUp()
        self.db_path = self.otpd.config["ledger"]["path"]
        self.traffic()
        self.assertEqual(self.otpd.stop(), 0)

    def test_verify_ok_and_independent(self):
        r = self.otpctl("verify", "--db", self.db_path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        head = [x.split() for x in r.stdout.splitlines() if x.startswith("head: ")][0]
        seq, hexhash, rows_ok = py_chain(self.db_path)
        self.assertEqual((int(head[1]), head[2]), (seq, hexhash))
        self.assertTrue(rows_ok)
        # Every row is linked: 6 requests rows (the refusal counted), 3 verifications, 3 messages with their
        # updates, 3 sends, the message events.
        n = {t: len(self.otpd.rows("SELECT 1 FROM %s" % t)) for t, _ in TABLES}
        self.assertGreaterEqual(seq, sum(n.values()))

    def test_changed_field(self):
        rid = self.otpd.rows("SELECT id FROM requests WHERE decision = 'rate_limited'")[0]["id"]
        path = self.tamper("changed.db", "UPDATE requests SET rule = NULL WHERE id = %d" % rid)
        line = self.broken(path)
        self.assertIn("requests id %d " % rid, line)
        self.assertIn("differs from its link", line)
        # A mutable row: its newest state changed.
        path = self.tamper("changed2.db", "UPDATE verifications SET status = 'verified' WHERE status = 'pending'")
        self.assertIn("verifications id ", self.broken(path))

    def test_deleted_row(self):
        sid = self.otpd.rows("SELECT id FROM sends ORDER BY id")[1]["id"]
        line = self.broken(self.tamper("deleted.db", "DELETE FROM sends WHERE id = %d" % sid))
        self.assertIn("sends id %d " % sid, line)
        self.assertIn("missing", line)
        # The row and its link deleted: the chain has a gap.
        line = self.broken(self.tamper("deleted2.db", "DELETE FROM sends WHERE id = %d" % sid,
                                       "DELETE FROM chain WHERE tbl = 'sends' AND row_id = %d" % sid))
        self.assertIn("missing", line)

    def test_reordered_rows(self):
        a, b = [r["id"] for r in self.otpd.rows("SELECT id FROM requests WHERE kind = 'issue' ORDER BY id")[:2]]
        path = self.tamper("swapped.db", "UPDATE requests SET id = -1 WHERE id = %d" % a,
                           "UPDATE requests SET id = %d WHERE id = %d" % (a, b),
                           "UPDATE requests SET id = %d WHERE id = -1" % b)
        line = self.broken(path)
        self.assertIn("requests id %d " % a, line)
        # Two links swapped (their seq exchanged).
        s1, s2 = [r["seq"] for r in self.otpd.rows("SELECT seq FROM chain ORDER BY seq")[2:4]]
        path = self.tamper("swapped2.db", "UPDATE chain SET seq = -1 WHERE seq = %d" % s1,
                           "UPDATE chain SET seq = %d WHERE seq = %d" % (s1, s2),
                           "UPDATE chain SET seq = %d WHERE seq = -1" % s2)
        self.assertIn("(link %d)" % s1, self.broken(path))

    def test_added_row_and_changed_link(self):
        line = self.broken(self.tamper(
            "added.db", "INSERT INTO requests (ts_ms, kind, api_key, phone, decision, http_status) "
                        "VALUES (1, 'issue', 'login-web', '+15550000000', 'accepted', 202)"))
        self.assertIn("has no link", line)
        line = self.broken(self.tamper("link.db", "UPDATE chain SET ts_ms = ts_ms + 1 WHERE seq = 5"))
        self.assertIn("(link 5)", line)
        self.assertIn("hash is wrong", line)

    def test_stats_exact(self):
        r = self.otpctl("stats", "--db", self.db_path, "--format", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        s = json.loads(r.stdout)
        self.assertEqual(s["requests"], {"issue": 4, "verify": 2})
        self.assertEqual(s["accepted"], 3)
        self.assertEqual(s["refusals"]["by_rule"], {"phone_2": 1})
        self.assertEqual(s["refusals"]["by_decision"], {"rate_limited": 1, "invalid_code": 1})
        self.assertEqual(s["sends"], {"calls": 3, "sent": 3, "transient": 0, "permanent": 0})
        self.assertEqual(s["spend_minor"], 3 * PRICE)
        self.assertEqual(s["verifications"]["started"], 3)
        self.assertEqual(s["verifications"]["verified"], 1)
        self.assertAlmostEqual(s["verifications"]["conversion"], 1 / 3)
        # --until before everything: nothing.
        r = self.otpctl("stats", "--db", self.db_path, "--until", "1000", "--format", "json")
        self.assertEqual(json.loads(r.stdout)["requests"], {"issue": 0, "verify": 0})
        # Two ledgers holding one verification (a resend through another instance writes its row there too,
        # still pending): it counts once, verified; the requests and sends of both files add up.
        other = self.tamper("other.db", "UPDATE verifications SET status = 'pending', ended_ms = NULL")
        r = self.otpctl("stats", "--db", self.db_path, "--db", other, "--format", "json")
        s = json.loads(r.stdout)
        self.assertEqual((s["verifications"]["started"], s["verifications"]["verified"]), (3, 1))
        self.assertEqual((s["requests"]["issue"], s["spend_minor"]), (8, 6 * PRICE))
        r = self.otpctl("stats", "--db", self.db_path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("phone_2", r.stdout)
        self.assertIn("33.3%", r.stdout)

    def test_read_only_and_no_secret(self):
        before = sorted(os.listdir(self.tmp))
        with open(self.db_path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        for args in (["verify", "--db", self.db_path], ["stats", "--db", self.db_path],
                     ["audit", "--db", self.db_path, "-t", "sends"],
                     ["audit", "-c", self.otpd.conf_path, "-t", "requests", "-n", "2"]):
            r = self.otpctl(*args)
            self.assertEqual(r.returncode, 0, (args, r.stderr))
        with open(self.db_path, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)
        self.assertEqual([x for x in sorted(os.listdir(self.tmp)) if not x.startswith("san.")],
                         [x for x in before if not x.startswith("san.")])

    def test_exit_codes(self):
        self.assertEqual(self.otpctl("verify").returncode, EX_USAGE)
        self.assertEqual(self.otpctl("verify", "--db", self.db_path, "--db", self.db_path).returncode, EX_USAGE)
        self.assertEqual(self.otpctl("verify", "--bogus").returncode, EX_USAGE)
        self.assertEqual(self.otpctl("verify", "--db", os.path.join(self.tmp, "none.db")).returncode, EX_NOINPUT)
        self.assertEqual(self.otpctl("verify", "--db", self.otpd.conf_path).returncode, EX_NOINPUT)
        self.assertEqual(self.otpctl("stats").returncode, EX_USAGE)
        self.assertEqual(self.otpctl("stats", "--db", self.db_path, "--format", "xml").returncode, EX_USAGE)
        self.assertEqual(self.otpctl("stats", "--db", self.db_path, "--since", "yesterday").returncode, EX_DATAERR)
        self.assertEqual(self.otpctl("audit", "--db", self.db_path, "-t", "sqlite_master").returncode, EX_DATAERR)
        self.assertEqual(self.otpctl("nonsense").returncode, EX_USAGE)


class UpgradeTest(KitBase):
    """A ledger written before the chain: its rows stay unlinked, rows from
    the upgrade on are chained, and verify says where the chain starts."""

    def test_upgrade(self):
        self.db_path = self.otpd.config["ledger"]["path"]
        self.issue_and_code(P)
        self.assertEqual(self.otpd.stop(), 0)
        con = sqlite3.connect(self.db_path)
        con.executescript("DROP TABLE chain; DROP TABLE chain_start; DROP TABLE chain_base; PRAGMA user_version = 6")
        con.close()
        old = max(r["id"] for r in self.otpd.rows("SELECT id FROM requests"))
        r = self.otpctl("verify", "--db", self.db_path)
        self.assertEqual(r.returncode, EX_DATAERR)
        self.assertIn("no hash chain", r.stderr)
        self.restart()
        self.issue_and_code(Q)
        self.assertEqual(self.otpd.stop(), 0)
        r = self.otpctl("verify", "--db", self.db_path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("older than the chain: requests up to id %d (1 rows left" % old, r.stdout)
        self.assertIn("chain started: ", r.stdout)
        # A pre-chain row is not covered; a chained one is.
        self.assertIn("requests id %d " % (old + 1), self.broken(self.tamper(
            "t.db", "UPDATE requests SET phone = '+15550000000' WHERE id = %d" % (old + 1))))


class PruneTest(KitBase):
    """Retention deletes old rows and the links before the first one still
    needed; the chain verifies from its new base."""
    RUN_SECONDS = 17

    def configure(self, cfg):
        cfg = super().configure(cfg)
        # A verification's rows go once it has expired: the shortest code life.
        cfg["ledger"]["retention"] = "2s"
        cfg["otp"]["ttl"] = "10s"
        return cfg

    def test_prune(self):
        self.db_path = self.otpd.config["ledger"]["path"]
        self.issue_and_code(P)
        first = self.otpd.rows("SELECT max(seq) AS s FROM chain")[0]["s"]
        # The writer prunes every 2 s: wait until the first issue's rows and links are gone (its
        # verification's once it expired, 10 s after the issue, and 2 s more).
        wait_until(lambda: self.otpd.rows("SELECT seq FROM chain_base")[0]["seq"] >= first, timeout=40,
                   what="a prune past the first links")
        self.issue_and_code(Q)
        # A prune after Q's verification's link, which no prune may remove yet (it expires in 10 s).
        vq = self.otpd.rows("SELECT rowid AS r FROM verifications WHERE phone = ?", Q)[0]["r"]
        link = self.otpd.rows("SELECT seq FROM chain WHERE tbl = 'verifications' AND row_id = ?", vq)[0]["seq"]
        wait_until(lambda: self.otpd.rows("SELECT 1 FROM chain WHERE tbl = 'prune' AND seq > ?", link), timeout=10,
                   what="a prune link after Q's verification")
        self.assertEqual(self.otpd.stop(), 0)
        r = self.otpctl("verify", "--db", self.db_path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("pruned (retention)", r.stdout)
        # A row retention could not have removed yet is not taken for pruned.
        line = self.broken(self.tamper("gone.db", "DELETE FROM verifications WHERE rowid = %d" % vq))
        self.assertIn("verifications id %d " % vq, line)
        self.assertIn("missing", line)
        seq, hexhash, rows_ok = py_chain(self.db_path)
        self.assertIn("head: %d %s" % (seq, hexhash), r.stdout)
        # Moving the base by hand (hiding deleted links) is caught.
        line = self.broken(self.tamper("base.db", "UPDATE chain_base SET seq = seq + 1"))
        self.assertIn("links out of order", line)
