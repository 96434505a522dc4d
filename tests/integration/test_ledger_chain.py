"""The ledger's hash chain once retention has pruned it (src/ledger/chain.h).

PrunedForgeryTest runs otpd with a 2 s retention until a prune has moved the
chain's base, then tampers with copies of its ledger the way an insider with
the file would: a forged verified verification or admin action hidden below
a raised start mark, the base edited, rows reordered, the newest row
deleted. `otpctl verify` must say BROKEN and why. A cut tail (an earlier
backup of the same ledger) is a whole chain: only a head kept elsewhere
shows it (`--head`).

RowidReuseTest: retention empties the tables, new rows arrive, and verify
still says ok (no row id is used twice, so an old row's link never meets a
new row), three times over.

MigrationTest: a ledger as schema 7 wrote it (built here in Python, with a
prune, an emptied table and a message left queued) is migrated by otpd,
keeps every row and its chain, hands out no row id twice, and from its
first prune on detects a deleted queued message.

FleetSweepTest: in a fleet of two, messages instance A accepted and B sent
end in A's ledger from the fleet's record (or as unknown once Redis forgot
them); while they wait, prunes do not link them again and deleting one is
detected.
"""
import glob
import hashlib
import os
import sqlite3
import struct
import time

import test_otpctl_kit as kit
from fleet import FleetTest, message_id
from harness import ROOT, run_bin, wait_until

EX_USAGE, EX_DATAERR = 64, 65
ADMIN_KEY = "key-ops-admin-0123456789ab"
DAY_MS = 86400 * 1000
# Each table's retention time among its chained columns (chain.c, chain_tables[].ts_col).
TS_COL = {"requests": 1, "verifications": 5, "messages": 8, "message_events": 2, "sends": 2, "admin_actions": 1}


def now_ms():
    return time.time_ns() // 1000000


def backup(src, dst):
    """A consistent copy of a live ledger (its WAL included), as a backup tool makes one."""
    a, b = sqlite3.connect(src, timeout=5), sqlite3.connect(dst)
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()
    return dst


def sql_on(path, *sql):
    con = sqlite3.connect(path)
    try:
        for s in sql:
            con.execute(s)
        con.commit()
    finally:
        con.close()


def one(path, sql, *args):
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        return con.execute(sql, args).fetchone()
    finally:
        con.close()


class PyChain:
    """A writer of the chain's format in Python (chain.h), for ledgers as an
    older otpd left them: links each row given, and prunes as schema 7 did."""

    def __init__(self, con):
        self.con = con
        marks = con.execute("SELECT requests, verifications, messages, message_events, sends, admin_actions "
                            "FROM chain_start").fetchone()
        self.seq, self.prev = 0, hashlib.sha256(b"otpd-chain-v1\0" + b"".join(
            t.encode() + b"\0" + struct.pack(">q", m) for (t, _), m in zip(kit.TABLES, marks))).digest()

    def append(self, tbl, rid, ts, digest):
        self.seq += 1
        self.prev = hashlib.sha256(self.prev + struct.pack(">q", self.seq) + tbl.encode() + b"\0" +
                                   struct.pack(">qq", rid, ts) + digest).digest()
        self.con.execute("INSERT INTO chain VALUES (?, ?, ?, ?, ?, ?)", (self.seq, tbl, rid, ts, digest, self.prev))

    def link(self, tbl, rid):
        row = self.con.execute("SELECT %s FROM %s WHERE rowid = ?" % (dict(kit.TABLES)[tbl], tbl), (rid,)).fetchone()
        digest = hashlib.sha256(b"otpd-row-v1\0" + tbl.encode() + b"\0" + b"".join(kit.enc(v) for v in row)).digest()
        self.append(tbl, rid, row[TS_COL[tbl]], digest)

    def prune_v7(self, cutoff):
        """Schema 7's prune: old rows go (messages queued or sending stay and
        are linked again), links before the first one a row needs go, and a
        prune link with 32 zero bytes for a digest says where the base is."""
        c = self.con
        for t, col in (("requests", "ts_ms"), ("sends", "ts_ms"), ("message_events", "ts_ms"),
                       ("admin_actions", "ts_ms"), ("verifications", "expires_ms")):
            c.execute("DELETE FROM %s WHERE %s < ?" % (t, col), (cutoff,))
        c.execute("DELETE FROM messages WHERE updated_ms < ? AND state NOT IN ('queued', 'sending')", (cutoff,))
        for (seq,) in c.execute("SELECT seq FROM messages WHERE state IN ('queued', 'sending') AND updated_ms < ?",
                                (cutoff,)).fetchall():
            self.link("messages", seq)
        keep = c.execute("SELECT min(seq) FROM chain WHERE ts_ms >= ? AND tbl <> 'prune'", (cutoff,)).fetchone()[0]
        base = min(keep or self.seq + 1, self.seq + 1) - 1
        if base > 0:
            h = c.execute("SELECT hash FROM chain WHERE seq = ?", (base,)).fetchone()[0]
            c.execute("UPDATE chain_base SET seq = ?, hash = ?", (base, h))
            c.execute("DELETE FROM chain WHERE seq <= ?", (base,))
        self.append("prune", base, cutoff, bytes(32))


class PrunedForgeryTest(kit.KitBase):
    """One ledger pruned by retention, stopped, and tampered with on copies."""
    RUN_SECONDS = 52
    RUN_APART = True

    env = {"OTPD_KEY_OPS": ADMIN_KEY}

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
        cfg["ledger"]["retention"] = "2s"
        cfg["otp"]["ttl"] = "10s"
        return cfg

    def block(self, phone):
        st, _, out = self.otpd.call("POST", "/v1/admin/blocks", {"match": {"phone": phone}, "expires_in": "1h",
                                                                 "note": "test"}, auth=ADMIN_KEY)
        self.assertEqual(st, 201, out)

    def issue_and_verify(self, phone):
        _, code = self.issue_and_code(phone)
        st, _, body = self.otpd.verify(phone, code)
        self.assertEqual(st, 200, body)

    def setUp(self):
        super().setUp()
        self.db_path = self.otpd.config["ledger"]["path"]
        # An admin action first (no verification's link, which would hold the base back until its code
        # expired): retention prunes it, its link and the genesis within a few seconds.
        self.block("+919800000001")
        first = self.otpd.rows("SELECT max(seq) AS s FROM chain WHERE tbl = 'admin_actions'")[0]["s"]
        wait_until(lambda: self.otpd.rows("SELECT seq FROM chain_base")[0]["seq"] >= first, timeout=20,
                   what="a prune that moved the chain's base past the first admin action")
        self.assertEqual(self.otpd.rows("SELECT count(*) AS n FROM admin_actions")[0]["n"], 0)
        self.issue_and_verify(kit.P)
        # A backup taken now: a true earlier state of the same ledger, as a cut tail would leave it.
        self.early = backup(self.db_path, os.path.join(self.tmp, "early.db"))
        self.block("+919800000002")
        last = self.otpd.rows("SELECT max(seq) AS s FROM chain")[0]["s"]
        wait_until(lambda: self.otpd.rows("SELECT 1 FROM chain WHERE tbl = 'prune' AND seq > ?", last), timeout=10,
                   what="a prune link after the last row's")
        self.assertEqual(self.otpd.stop(), 0)
        r = self.otpctl("verify", "--db", self.db_path)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.head = [x for x in r.stdout.splitlines() if x.startswith("head: ")][0][len("head: "):]
        self.marks = dict(zip([t for t, _ in kit.TABLES], one(
            self.db_path, "SELECT requests, verifications, messages, message_events, sends, admin_actions "
                          "FROM chain_start")))

    def verify(self, path, *args):
        return self.otpctl("verify", "--db", path, *args)

    def forged_under_raised_mark(self, table, insert):
        """A copy with table's start mark raised by 1000 and a row forged just
        below the new mark, where verify does not look for links."""
        mark = self.marks[table] + 1000
        return self.tamper(table + ".db", "UPDATE chain_start SET %s = %d" % (table, mark), insert % (mark - 1))

    def assert_marks_broken(self, path):
        line = self.broken(path)
        self.assertIn("chain_start", line)
        self.assertIn("start marks", line)
        r = self.verify(path)
        self.assertNotIn(self.head, r.stdout)  # no ok head for a forged ledger

    def test_untouched_verifies_from_its_moved_base(self):
        r = self.verify(self.db_path)
        self.assertIn("pruned (retention)", r.stdout)
        seq, hexhash, rows_ok = kit.py_chain(self.db_path)
        self.assertEqual(self.head, "%d %s" % (seq, hexhash))
        self.assertTrue(rows_ok)
        # Every prune link binds the start marks: its digest is the genesis hash of chain_start's marks.
        con = sqlite3.connect(self.db_path)
        marks = con.execute("SELECT requests, verifications, messages, message_events, sends, admin_actions "
                            "FROM chain_start").fetchone()
        genesis = hashlib.sha256(b"otpd-chain-v1\0" + b"".join(
            t.encode() + b"\0" + struct.pack(">q", m) for (t, _), m in zip(kit.TABLES, marks))).digest()
        digests = {d for (d,) in con.execute("SELECT digest FROM chain WHERE tbl = 'prune'")}
        con.close()
        self.assertEqual(digests, {genesis})

    def test_forged_verified_row_below_a_raised_mark(self):
        now = now_ms()
        self.assert_marks_broken(self.forged_under_raised_mark(
            "verifications", "INSERT INTO verifications (rowid, id, phone, api_key, created_ms, expires_ms, status, "
                             "ended_ms) VALUES (%%d, 'forged0123456789abcdef', '%s', 'login-web', %d, %d, 'verified', "
                             "%d)" % (kit.P, now, now + 600000, now)))

    def test_forged_admin_action_below_a_raised_mark(self):
        self.assert_marks_broken(self.forged_under_raised_mark(
            "admin_actions", "INSERT INTO admin_actions (id, ts_ms, admin, action, kind, row_id, body) VALUES "
                             "(%%d, %d, 'ops', 'remove', 'block', 'b-forged', NULL)" % now_ms()))

    def test_mark_raised_alone(self):
        # Every table's mark is bound, not only the two the forgeries use.
        for t, _ in kit.TABLES:
            self.assert_marks_broken(self.tamper("m-%s.db" % t, "UPDATE chain_start SET %s = %s + 1" % (t, t)))

    def test_base_edited(self):
        self.assertIn("links out of order", self.broken(self.tamper("b1.db", "UPDATE chain_base SET seq = seq + 1")))
        self.assertIn("hash is wrong", self.broken(self.tamper("b2.db", "UPDATE chain_base SET hash = zeroblob(32)")))
        self.assertIn("missing", self.broken(self.tamper("b3.db", "UPDATE chain_base SET seq = 0")))
        # The base moved on to a later link, the links and rows before it deleted as if pruned.
        last = one(self.db_path, "SELECT max(seq) FROM chain WHERE tbl = 'prune'")[0]
        to = last - 1
        path = self.tamper("b4.db", "UPDATE chain_base SET seq = %d, hash = (SELECT hash FROM chain WHERE seq = %d)"
                           % (to, to), "DELETE FROM chain WHERE seq <= %d" % to)
        self.assertIn("where the last prune put it", self.broken(path))
        # And past the newest prune link too.
        path = self.tamper("b5.db", "UPDATE chain_base SET seq = %d, hash = (SELECT hash FROM chain WHERE seq = %d)"
                           % (last, last), "DELETE FROM chain WHERE seq <= %d" % last)
        self.assertIn("without a prune link", self.broken(path))

    def test_rows_reordered_after_the_prune(self):
        a, b = [r["id"] for r in self.otpd.rows("SELECT id FROM requests ORDER BY id")[-2:]]
        path = self.tamper("swap.db", "UPDATE requests SET id = -1 WHERE id = %d" % a,
                           "UPDATE requests SET id = %d WHERE id = %d" % (a, b),
                           "UPDATE requests SET id = %d WHERE id = -1" % b)
        self.assertIn("requests id %d " % a, self.broken(path))

    def test_newest_row_deleted(self):
        newest = self.otpd.rows("SELECT tbl, row_id FROM chain WHERE tbl <> 'prune' ORDER BY seq DESC LIMIT 1")[0]
        key = "id" if newest["tbl"] != "verifications" else "rowid"
        line = self.broken(self.tamper("newest.db", "DELETE FROM %s WHERE %s = %d" % (newest["tbl"], key,
                                                                                        newest["row_id"])))
        self.assertIn("%s id %d " % (newest["tbl"], newest["row_id"]), line)
        self.assertIn("missing", line)

    def test_tail_cut_shows_against_a_kept_head(self):
        # The earlier backup is a whole chain: alone, it cannot show that rows came after it.
        r = self.verify(self.early)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        early = [x for x in r.stdout.splitlines() if x.startswith("head: ")][0][len("head: "):].replace(" ", ":")
        head = self.head.replace(" ", ":")
        self.assertNotEqual(early, head)
        # Against the head kept from the full ledger, it is a cut tail.
        self.assertIn("tail was cut or rewritten", self.broken_with(self.early, "--head", head))
        # The full ledger holds its own head and the earlier one.
        for h in (head, early):
            r = self.verify(self.db_path, "--head", h)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("holds the head given: link %s" % h.split(":")[0], r.stdout)
        # A head whose hash differs: the chain was rewritten from before it.
        bad = head[:-1] + ("0" if head[-1] != "0" else "1")
        self.assertIn("tail was cut or rewritten", self.broken_with(self.db_path, "--head", bad))
        for arg in ("12", "x:00", "5:abc", head + "0"):
            self.assertEqual(self.verify(self.db_path, "--head", arg).returncode, EX_USAGE, arg)

    def broken_with(self, path, *args):
        r = self.verify(path, *args)
        self.assertEqual(r.returncode, EX_DATAERR, r.stdout + r.stderr)
        return [x for x in r.stdout.splitlines() if x.startswith("BROKEN: ")][0]


class RowidReuseTest(kit.KitBase):
    """Retention empties the tables; the next rows must not take the ids of
    rows whose links the chain still holds."""

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["ledger"]["retention"] = "2s"
        cfg["otp"]["ttl"] = "10s"
        return cfg

    def test_emptied_tables_then_new_rows_verify(self):
        db = self.otpd.config["ledger"]["path"]

        def issue(phone):
            """Issues for phone; its request row's id is past every id the chain has linked."""
            top = one(db, "SELECT COALESCE(max(row_id), 0) FROM chain WHERE tbl = 'requests'")[0]
            body, _ = self.issue_and_code(phone)
            rid = self.otpd.rows("SELECT id FROM requests WHERE message_id = ?", body["id"])[0]["id"]
            self.assertGreater(rid, top)
            return rid

        for i in range(3):
            rid = issue("+9198100000%02d" % i)
            # Retention empties the requests and sends tables; the verification's link (it expires in 10 s)
            # keeps theirs in the chain.
            wait_until(lambda: not self.otpd.rows("SELECT 1 FROM requests UNION ALL SELECT 1 FROM sends"),
                       timeout=20, what="retention emptying requests and sends")
            self.assertTrue(self.otpd.rows("SELECT 1 FROM chain WHERE tbl = 'requests' AND row_id = ?", rid))
            issue("+9198200000%02d" % i)
            r = self.otpctl("verify", "--db", db)
            self.assertEqual(r.returncode, 0, "round %d:\n%s%s" % (i, r.stdout, r.stderr))


class MigrationTest(kit.KitBase):
    """A schema 7 ledger, as the version before this one left it, migrated."""

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["ledger"]["retention"] = "1h"
        return cfg

    def make_v7(self, path, now):
        """Requests pruned with their links kept (a live verification's link
        holds the base back), the requests table empty, a message sent and
        one queued (another instance sends those) linked again by the prune."""
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        con = sqlite3.connect(path)
        for f in sorted(glob.glob(os.path.join(ROOT, "schema", "00[1-7]_*.sql"))):
            with open(f) as fh:
                con.executescript(fh.read())
        con.execute("PRAGMA user_version = 7")
        ch, old = PyChain(con), now - 3 * 3600 * 1000

        def req(ts, phone):
            cur = con.execute("INSERT INTO requests (ts_ms, kind, api_key, phone, decision, http_status, purpose) "
                              "VALUES (?, 'issue', 'login-web', ?, 'accepted', 202, 'default')", (ts, phone))
            ch.link("requests", cur.lastrowid)

        def msg(mid, state, ts, expires):
            cur = con.execute("INSERT INTO messages (id, verification_id, api_key, phone, state, created_ms, "
                              "expires_ms, updated_ms) VALUES (?, 'v-live', 'login-web', '+919811111111', ?, ?, ?, ?)",
                              (mid, state, ts, expires, ts))
            ch.link("messages", cur.lastrowid)

        req(old, "+919811111110")
        con.execute("INSERT INTO verifications (id, phone, api_key, created_ms, expires_ms) VALUES "
                    "('v-live', '+919811111111', 'login-web', ?, ?)", (old, now + 1800 * 1000))
        ch.link("verifications", 1)
        req(old + 1, "+919811111111")
        req(old + 2, "+919811111112")
        msg("m-sent", "sent", old + 3, old + 600000)
        # Queued for two hours (a code's life is an hour at most, but sending is not the point here): older
        # than the prune's cutoff, so schema 7 linked it again with its own time.
        msg("m-queued", "queued", now - 2 * 3600 * 1000, now + 3000 * 1000)
        ch.prune_v7(now - 3600 * 1000)
        con.commit()
        con.close()
        self.assertEqual(one(path, "SELECT count(*) FROM requests")[0], 0)
        self.assertEqual(one(path, "SELECT max(row_id) FROM chain WHERE tbl = 'requests'")[0], 3)

    def test_migrate_a_schema_7_ledger(self):
        db = self.db_path = self.otpd.config["ledger"]["path"]
        self.assertEqual(self.otpd.stop(), 0)
        self.make_v7(db, now_ms())
        r = self.otpctl("verify", "--db", db)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.restart()
        self.issue_and_code(kit.P)
        self.assertEqual(self.otpd.stop(), 0)
        self.assertGreaterEqual(one(db, "PRAGMA user_version")[0], 8)
        # New rows take ids after every one the chain has seen, whatever the tables hold.
        self.assertEqual(one(db, "SELECT min(id) FROM requests")[0], 4)
        self.assertEqual(one(db, "SELECT seq FROM messages WHERE id = 'm-queued'")[0], 2)
        self.assertGreater(one(db, "SELECT min(seq) FROM messages WHERE id NOT LIKE 'm-%'")[0], 2)
        # The rows retention keeps kept their ids (and, below, their links: rows_ok).
        self.assertEqual(one(db, "SELECT seq FROM verifications WHERE id = 'v-live'")[0], 1)
        r = self.otpctl("verify", "--db", db)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        seq, hexhash, rows_ok = kit.py_chain(db)
        self.assertIn("head: %d %s" % (seq, hexhash), r.stdout)
        self.assertTrue(rows_ok)
        # The queued message's link from schema 7 carried a time the new prune's cutoff is past; the first
        # prune linked it again, so deleting it now is seen.
        line = self.broken(self.tamper("q.db", "DELETE FROM messages WHERE id = 'm-queued'"))
        self.assertIn("messages id 2 ", line)
        self.assertIn("missing", line)


class FleetSweepTest(FleetTest):
    """Instance 0 (A) accepts; its first provider call hangs, so with
    max_inflight 1 it claims nothing more, and instance 1 (B), started
    after that call, sends the rest."""
    RUN_SECONDS = 19

    n = 0
    providers = 2

    def configure(self, cfg, i):
        cfg["otp"]["ttl"] = "10s"
        cfg["ledger"]["retention"] = "2s"
        if i == 0:
            cfg["pacer"]["max_inflight"] = 1
            cfg["pacer"]["timeout"] = "3s"
        return cfg

    def links(self, db, seq):
        return one(db, "SELECT count(*) FROM chain WHERE tbl = 'messages' AND row_id = ?", seq)[0]

    def prunes(self, db, after):
        """after 0: the newest prune link's seq; else how many prune links came after link after."""
        if after == 0:
            return one(db, "SELECT max(seq) FROM chain WHERE tbl = 'prune'")[0]
        return one(db, "SELECT count(*) FROM chain WHERE tbl = 'prune' AND seq > ?", after)[0]

    def test_messages_b_sent_end_in_a_ledger(self):
        # A alone first, so that its call is the one that hangs; then B.
        self.fakes[0].control(hang=True)
        self.fleet.start(1, **self.overrides())
        a = self.fleet[0]
        db = a.config["ledger"]["path"]
        st, _, body = a.issue("+919830000000")
        self.assertEqual(st, 202, body)
        self.wait_provider_count(1, fake=0)
        self.fleet.start(1, **self.overrides())
        b = self.fleet[1]
        mids = []
        for k in range(3):
            st, _, body = a.issue("+91983000000%d" % (k + 1))
            self.assertEqual(st, 202, body)
            mids.append(body["id"])
        wait_until(lambda: set(mids) <= {message_id(r) for r in self.fakes[1].requests()}, timeout=15,
                   what="B sending A's messages")
        seqs = {m: a.rows("SELECT seq FROM messages WHERE id = ?", m)[0]["seq"] for m in mids}
        self.assertEqual({a.rows("SELECT state FROM messages WHERE id = ?", m)[0]["state"] for m in mids}, {"queued"})
        # While they wait, prunes come and go (every 2 s): the first one past a message's time links it once
        # more (a keep link, dated a day past its code's expiry), and no later one does.
        wait_until(lambda: all(self.links(db, s) == 2 for s in seqs.values()), timeout=10, what="the keep links")
        last = self.prunes(db, 0)
        wait_until(lambda: self.prunes(db, last) >= 2, timeout=10, what="two more prunes")
        self.assertEqual({m: self.links(db, s) for m, s in seqs.items()}, {m: 2 for m in seqs})
        keep = one(db, "SELECT c.ts_ms, m.expires_ms FROM chain c, messages m WHERE c.tbl = 'messages' AND "
                       "c.row_id = m.seq AND m.id = ? ORDER BY c.seq DESC", mids[0])
        self.assertEqual(keep[0], keep[1] + DAY_MS)
        # A copy taken now: deleting a waiting row is seen.
        copy = backup(db, os.path.join(self.tmp, "a-copy.db"))
        sql_on(copy, "DELETE FROM messages WHERE id = '%s'" % mids[0])
        r = run_bin(self.tmp, "otpctl", ["verify", "--db", copy], kit.clean_env())
        self.assertEqual(r.returncode, EX_DATAERR, r.stdout + r.stderr)
        self.assertIn("messages id %d " % seqs[mids[0]], r.stdout)
        # Redis forgets the last one (as after its hash's 24 h): it ends as unknown.
        self.redis.cmd("DEL", "otp:msg:" + mids[2])
        # The sweep: once the code's life (10 s) and A's provider timeout (3 s) are over.
        wait_until(lambda: all(a.rows("SELECT state FROM messages WHERE id = ?", m)[0]["state"] != "queued"
                               for m in mids), timeout=30, what="A's sweep ending the messages B sent")
        rows = {m: a.rows("SELECT state, detail FROM messages WHERE id = ?", m)[0] for m in mids}
        for m in mids[:2]:
            self.assertEqual(rows[m]["state"], "sent", rows[m])
            self.assertIn("the fleet", rows[m]["detail"])
        self.assertEqual(rows[mids[2]]["state"], "expired", rows[mids[2]])
        self.assertIn("unknown", rows[mids[2]]["detail"])
        events = a.rows("SELECT state, detail FROM message_events WHERE message_id = ? ORDER BY id", mids[0])
        self.assertEqual([e["state"] for e in events][-1], "sent")
        # Ended, they go with retention like any row, and the ledger verifies.
        wait_until(lambda: not a.rows("SELECT 1 FROM messages WHERE id IN (?, ?, ?)", *mids), timeout=15,
                   what="retention pruning the ended messages")
        r = run_bin(self.tmp, "otpctl", ["verify", "--db", db], kit.clean_env())
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.fakes[0].control(hang=False)
        for i, rc in self.fleet.stop_all().items():
            self.assertEqual(rc, 0, i)
        for o in (a, b):
            r = run_bin(self.tmp, "otpctl", ["verify", "--db", o.config["ledger"]["path"]], kit.clean_env())
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

