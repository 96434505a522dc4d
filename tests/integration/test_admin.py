"""The admin API (docs/architecture.md, "Limits and rules": overrides and blocks
are rows; docs/rules.md, the admin section): two otpd instances on one Redis see each other's rows and their
ends within 2 s; every kind of block refuses before any Redis call and takes
nothing; an override gives its key another limit; unlock clears wrong-guess
locks; roles keep admin keys and callers apart; bad bodies change nothing;
the ledger names the admin and the note.

Bounds: the design promises 2 s from a change (or an expiry) to every
instance (each refreshes once a second). Checks allow 2.5 s: the extra half
second is for the polling requests themselves on a loaded 2-core machine."""
import json
import os
import time

from harness import API_KEY, OTHER_KEY, Otpd, OtpdTest, PortClash, free_port, wait_until

ADMIN_KEY = "key-ops-admin-0123456789ab"
SEEN_S = 2.5  # the 2 s promise plus slack for the polls (see the module's doc)
P1 = "+919812345671"
P2 = "+919812345672"
P3 = "+919812345673"


class AdminTest(OtpdTest):
    env = {"OTPD_KEY_OPS": ADMIN_KEY}
    limits = []

    def configure(self, cfg):
        cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
        return cfg

    def tearDown(self):
        b = getattr(self, "b", None)
        if b is not None and b.proc and b.proc.poll() is None:
            b.stop()
        super().tearDown()

    def start_b(self):
        """A second instance on the same Redis, its own ledger and port."""
        d = os.path.join(self.tmp, "b")
        os.makedirs(d, exist_ok=True)
        for attempt in range(5):
            cfg = json.loads(json.dumps(self.otpd.config))
            cfg["listen"] = "127.0.0.1:%d" % free_port()
            cfg["ledger"] = {"path": os.path.join(d, "ledger.db")}
            cfg.setdefault("pacer", {})["instance"] = "otpd-b"
            self.b = Otpd(d, cfg, self.env)
            try:
                return self.b.start()
            except PortClash:
                if attempt == 4:
                    raise

    def admin(self, method, path, body=None, inst=None, auth=ADMIN_KEY):
        return (inst or self.otpd).call(method, "/v1/admin/" + path, body, auth=auth)

    def add(self, kind, body, inst=None):
        st, _, out = self.admin("POST", kind, body, inst)
        self.assertEqual(st, 201, out)
        self.assertEqual(sorted(out), ["expires_at", "id"])
        return out

    def blocked(self, inst, phone, **fields):
        """Whether inst refuses a verify for phone as blocked. A verify of a
        phone without a code takes nothing (404), so polling is free."""
        st, _, out = inst.verify(phone, "123456", **fields)
        self.assertIn(st, (403, 404), out)
        return st == 403 and out["error"] == "blocked"


class FleetTest(AdminTest):
    limits = [{"name": "caller", "key": "api_key", "algorithm": "sliding_log", "limit": 2, "window": "1h"}]

    def test_block_seen_everywhere_and_ends(self):
        self.start_b()
        row = self.add("blocks", {"match": {"phone": P1}, "expires_in": "2s", "note": "bot"})
        t0 = time.monotonic()
        wait_until(lambda: self.blocked(self.b, P1), timeout=SEEN_S, what="B blocks within 2 s")
        wait_until(lambda: self.blocked(self.otpd, P1), timeout=SEEN_S, what="A blocks within 2 s")
        self.assertFalse(self.blocked(self.b, P2))
        # Ends by itself on both within 2 s of its end.
        wait_until(lambda: not self.blocked(self.b, P1) and not self.blocked(self.otpd, P1),
                   timeout=2 + SEEN_S, what="the block ends on both")
        self.assertGreater(time.monotonic() - t0, 1.5, "ended before its 2 s")
        st, _, out = self.admin("GET", "blocks", inst=self.b)
        self.assertEqual((st, out), (200, {"items": []}))
        st, _, out = self.admin("DELETE", "blocks/" + row["id"], inst=self.b)
        self.assertEqual(st, 404, out)

    def test_redis_down_block_fails_closed(self):
        """With Redis away the snapshot may be out of date (the block may
        have been removed meanwhile): it blocks (403, no Redis call) only
        while its last read is under 2 s old and did not fail, then the
        request is 503 store_unavailable, as anything needing Redis is;
        never let through. Back with Redis, the block again."""
        self.add("blocks", {"match": {"phone": P1}, "expires_in": "1h"})
        wait_until(lambda: self.blocked(self.otpd, P1), timeout=SEEN_S, what="the block in force")
        self.redis.pause()
        try:
            wait_until(lambda: self.otpd.verify(P1, "123456")[0] == 503, timeout=SEEN_S,
                       what="503 once the snapshot is stale")
            for _ in range(3):
                self.assertEqual(self.otpd.verify(P1, "123456")[0], 503)
        finally:
            self.redis.resume()
        wait_until(lambda: self.otpd.verify(P1, "123456")[0] == 403, timeout=SEEN_S,
                   what="the block again with Redis back")

    def test_delete_ends_early(self):
        self.start_b()
        row = self.add("blocks", {"match": {"phone_prefix": "+9198123"}, "expires_in": "1h"})
        wait_until(lambda: self.blocked(self.otpd, P1), timeout=SEEN_S, what="A blocks")
        st, _, items = self.admin("GET", "blocks", inst=self.b)
        self.assertEqual(st, 200)
        [item] = items["items"]
        self.assertEqual(item["id"], row["id"])
        self.assertEqual(item["match"], {"phone_prefix": "+9198123"})
        self.assertEqual(item["created_by"], "ops")
        self.assertEqual(item["expires_at"], row["expires_at"])
        self.assertRegex(item["created_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        st, _, out = self.admin("DELETE", "blocks/" + row["id"], inst=self.b)
        self.assertEqual(st, 204, out)
        wait_until(lambda: not self.blocked(self.otpd, P1) and not self.blocked(self.b, P1), timeout=SEEN_S,
                   what="the removal seen on both")
        self.assertEqual(self.admin("DELETE", "blocks/" + row["id"])[0], 404)
        self.assertEqual(self.admin("DELETE", "blocks/0123456789abcdef")[0], 404)

    def test_override_five_times_then_ends(self):
        self.start_b()
        phones = ["+9198123400%02d" % i for i in range(20)]
        for p in phones[:2]:
            self.assertEqual(self.b.issue(p)[0], 202)
        st, _, out = self.b.issue(phones[2])
        self.assertEqual((st, out["reason"]), (429, "caller"))
        self.add("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 10,
                               "expires_in": "1h", "note": "sale"})
        # A refused issue takes nothing, so polling B until it passes is free.
        wait_until(lambda: self.b.issue(phones[2])[0] == 202, timeout=SEEN_S, what="the override on B")
        for p in phones[3:10]:
            self.assertEqual(self.b.issue(p)[0], 202, p)
        st, h, out = self.b.issue(phones[10])
        self.assertEqual((st, out["reason"]), (429, "caller"), "5x the limit of 2 is 10, no more")
        self.assertIn("q=10", h["ratelimit-policy"])
        # The other caller keeps the rule's own limit, also on A.
        for p in phones[11:13]:
            self.assertEqual(self.otpd.issue(p, auth=OTHER_KEY)[0], 202)
        self.assertEqual(self.otpd.issue(phones[13], auth=OTHER_KEY)[0], 429)

    def test_two_overrides_of_one_key_the_lower_limit_wins(self):
        # A partner's raise and an emergency tightening of the same rule and
        # key: the tightening applies whichever row sorts first (review of #11).
        phones = ["+9198123401%02d" % i for i in range(6)]
        self.add("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 10, "expires_in": "1h"})
        self.add("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 1, "expires_in": "1h"})
        wait_until(lambda: (lambda m: 'otpd_admin_rows{kind="override"} 2' in m)(self.otpd.call("GET", "/metrics")[2]),
                   timeout=SEEN_S, what="both overrides on A")
        self.assertEqual(self.otpd.issue(phones[0])[0], 202)
        st, h, out = self.otpd.issue(phones[1])
        self.assertEqual((st, out["reason"]), (429, "caller"))
        self.assertIn("q=1", h["ratelimit-policy"])

    def test_override_expires(self):
        self.start_b()
        for p in (P1, P2):
            self.assertEqual(self.otpd.issue(p, auth=OTHER_KEY)[0], 202)
        self.add("overrides", {"rule": "caller", "key": {"api_key": "login-app"}, "limit": 3,
                               "expires_in": "2s"})
        t0 = time.monotonic()
        wait_until(lambda: self.b.issue(P3, auth=OTHER_KEY)[0] == 202, timeout=SEEN_S, what="override on B")
        # 3 taken: at the override's limit now; once it ends, the rule's 2 apply and there is no room.
        wait_until(lambda: (lambda m: 'otpd_admin_rows{kind="override"} 0' in m)(self.b.call("GET", "/metrics")[2])
                   and (lambda m: 'otpd_admin_rows{kind="override"} 0' in m)(self.otpd.call("GET", "/metrics")[2]),
                   timeout=2 + SEEN_S, what="the override ends on both")
        self.assertGreater(time.monotonic() - t0, 1.5)
        st, _, out = self.admin("GET", "overrides")
        self.assertEqual(out, {"items": []})


class BlockKindsTest(AdminTest):
    limits = [{"name": "caller", "key": "api_key", "algorithm": "sliding_log", "limit": 2, "window": "1h"}]

    def state(self):
        """Everything in Redis but the admin rows and the fleet's clocks."""
        keys = sorted(k for k in self.redis.cmd("KEYS", "*") if not k.startswith("otp:adm:"))
        return keys, self.redis.cmd("XLEN", "otp:q")

    def test_every_kind(self):
        cases = [
            ({"phone": P1}, dict(phone=P1), dict(phone=P2)),
            ({"phone_prefix": "+9199"}, dict(phone="+919900000001"), dict(phone="+919812345681")),
            ({"region": "GB"}, dict(phone="+447400123456"), dict(phone=P2)),
            ({"device": "dev-1"}, dict(phone=P2, device_id="dev-1"), dict(phone=P2, device_id="dev-2")),
            ({"client_ip": "10.1.0.0/16"}, dict(phone=P2, client_ip="10.1.255.3"),
             dict(phone=P2, client_ip="10.0.255.3")),
            ({"client_ip": "10.9.0.0/16"}, dict(phone=P2, client_ip="::ffff:10.9.1.1"),
             dict(phone=P2, client_ip="::ffff:10.10.1.1")),
            ({"client_ip": "192.0.2.7"}, dict(phone=P2, client_ip="192.0.2.7"), dict(phone=P2, client_ip="192.0.2.6")),
            ({"client_ip": "2001:db8:abcd::/48"}, dict(phone=P2, client_ip="2001:db8:abcd:ffff::5"),
             dict(phone=P2, client_ip="2001:db8:abce::5")),
            ({"client_ip": "2001:db8::1:0:0:1/127"}, dict(phone=P2, client_ip="2001:db8::1:0:0:0"),
             dict(phone=P2, client_ip="2001:db8::1:0:0:2")),
            # One IPv6 address blocks its /64, as the limits key it: the next address is no escape.
            ({"client_ip": "2001:db8:5:6::1"}, dict(phone=P2, client_ip="2001:db8:5:6:ffff::9"),
             dict(phone=P2, client_ip="2001:db8:5:7::1")),
            # A device_id may hold a space, as requests take it.
            ({"device": "my phone"}, dict(phone=P2, device_id="my phone"), dict(phone=P2, device_id="my-phone")),
            ({"api_key": "login-app"}, dict(phone=P2, auth=OTHER_KEY), dict(phone=P2)),
        ]
        ids = []
        for match, _, _ in cases:
            ids.append(self.add("blocks", {"match": match, "expires_in": "1h", "note": "kinds"})["id"])
        wait_until(lambda: self.blocked(self.otpd, P1), timeout=SEEN_S, what="blocks in force")
        before = self.state()
        for match, hit, miss in cases:
            hit, miss = dict(hit), dict(miss)
            st, _, out = self.otpd.issue(hit.pop("phone"), **hit)
            self.assertEqual((st, out.get("error")), (403, "blocked"), (match, out))
            st, _, out = self.otpd.verify(miss.pop("phone"), "123456", **miss)
            self.assertEqual(st, 404, (match, "not blocked", out))
        self.assertEqual(self.state(), before, "a blocked request takes nothing")
        self.assertEqual(self.fake.messages(), [])
        # Refusals are counted per second and committed once it is over.
        q = "SELECT decision, http_status, rule, count FROM requests WHERE kind = 'issue'"
        wait_until(lambda: sum(r["count"] for r in self.otpd.rows(q)) >= len(cases), timeout=5,
                   what="the blocked rows in the ledger")
        rows = self.otpd.rows(q)
        self.assertEqual(sum(r["count"] for r in rows if r["decision"] == "blocked"), len(cases), rows)
        self.assertIn("block:client_ip", {r["rule"] for r in rows})
        self.assertTrue(all(r["http_status"] == 403 for r in rows))
        m = self.otpd.call("GET", "/metrics")[2]
        self.assertIn('otpd_blocked_total{match="client_ip"} 6', m)
        self.assertIn('otpd_admin_rows{kind="block"} %d' % len(cases), m)
        # Nothing was taken from the caller rule: its 2 are still there.
        for i in ids:
            self.assertEqual(self.admin("DELETE", "blocks/" + i)[0], 204)
        wait_until(lambda: not self.blocked(self.otpd, P1), timeout=SEEN_S, what="blocks gone")
        self.assertEqual(self.otpd.issue(P1)[0], 202)
        self.assertEqual(self.otpd.issue(P2)[0], 202)
        self.assertEqual(self.otpd.issue(P3)[0], 429)


class UnlockTest(AdminTest):
    limits = [{"name": "wrong_codes", "key": ["phone", "api_key"], "algorithm": "wrong_guess_cap", "limit": 2,
               "window": "1h"}]

    def lock(self, auth):
        """Issues to P1 for auth's caller and guesses wrong until locked; returns the right code."""
        _, code = self.issue_and_code(P1, auth=auth)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        for _ in range(2):  # the second wrong guess reaches the cap of 2 (its answer may say locked)
            self.assertIn(self.otpd.verify(P1, wrong, auth=auth)[0], (422, 429))
        st, _, out = self.otpd.verify(P1, code, auth=auth)
        self.assertEqual((st, out["error"]), (429, "locked"))
        return code

    def test_unlock_one_caller_then_all(self):
        web = self.lock(API_KEY)
        app = self.lock(OTHER_KEY)
        st, _, out = self.admin("POST", "unlock", {"phone": P1, "api_key": "login-web", "note": "support 42"})
        self.assertEqual((st, out), (200, {"unlocked": 1}))
        self.assertEqual(self.otpd.verify(P1, web)[0], 200)
        self.assertEqual(self.otpd.verify(P1, app, auth=OTHER_KEY)[0], 429, "the other caller stays locked")
        st, _, out = self.admin("POST", "unlock", {"phone": P1})
        self.assertEqual((st, out), (200, {"unlocked": 1}))
        self.assertEqual(self.otpd.verify(P1, app, auth=OTHER_KEY)[0], 200)
        st, _, out = self.admin("POST", "unlock", {"phone": P1})
        self.assertEqual((st, out), (200, {"unlocked": 0}))
        rows = self.otpd.rows("SELECT admin, action, kind, note, result FROM admin_actions ORDER BY id")
        self.assertEqual([(r["admin"], r["action"], r["kind"], r["note"], r["result"]) for r in rows],
                         [("ops", "unlock", "lock", "support 42", 1), ("ops", "unlock", "lock", None, 1),
                          ("ops", "unlock", "lock", None, 0)])


class RolesAndBodiesTest(AdminTest):
    limits = [{"name": "caller", "key": "api_key", "algorithm": "token_bucket", "limit": 5, "window": "1s",
               "burst": 5},
              {"name": "pair", "key": ["phone", "api_key"], "algorithm": "sliding_log", "limit": 3,
               "window": "1h"},
              {"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1s"}]

    def test_roles(self):
        st, _, out = self.otpd.issue(P1, auth=ADMIN_KEY)
        self.assertEqual((st, out["error"]), (403, "forbidden"))
        st, _, out = self.otpd.verify(P1, "123456", auth=ADMIN_KEY)
        self.assertEqual((st, out["error"]), (403, "forbidden"))
        st, _, out = self.otpd.call("GET", "/v1/otp/0123456789abcdef0123456789abcdef", auth=ADMIN_KEY)
        self.assertEqual(st, 403)
        for method, path, body in (("GET", "blocks", None), ("POST", "blocks", {"match": {"phone": P1},
                                                                                  "expires_in": "1h"}),
                                   ("GET", "overrides", None), ("POST", "unlock", {"phone": P1}),
                                   ("DELETE", "blocks/0123456789abcdef", None)):
            st, _, out = self.admin(method, path, body, auth=API_KEY)
            self.assertEqual((st, out["error"]), (403, "forbidden"), (method, path))
            st, h, out = self.admin(method, path, body, auth=None)
            self.assertEqual(st, 401, (method, path))
            self.assertEqual(h.get("www-authenticate"), "Bearer")
            st, _, out = self.admin(method, path, body, auth="not-a-key-0123456789")
            self.assertEqual(st, 401)
        st, _, out = self.admin("GET", "blocks")
        self.assertEqual((st, out), (200, {"items": []}))
        self.assertEqual(self.otpd.issue(P1)[0], 202, "the caller key still works")

    def test_note_refuses_control_characters(self):
        """A note is listed back to operators' terminals (otpctl): C0, DEL
        and C1 (U+0080 to U+009F; U+009B is CSI to many terminals) are 400
        naming the field; other text, accents and a no-break space included,
        is kept."""
        bodies = {"blocks": {"match": {"phone": P1}, "expires_in": "1h"},
                  "overrides": {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 10, "expires_in": "1h"},
                  "unlock": {"phone": P1}}
        for note in ("a\x1b[31mb", "tab\there", "del\x7f", "nel\u0085", "csi\u009b2J", "\u0080", "\u009f"):
            for path, body in bodies.items():
                st, _, out = self.admin("POST", path, dict(body, note=note))
                self.assertEqual((st, out.get("error")), (400, "invalid_request"), (path, note, out))
                self.assertTrue(out["detail"].startswith("note must be 1 to "), out)
                self.assertIn("without control characters", out["detail"])
        self.assertEqual(self.otpd.rows("SELECT * FROM admin_actions"), [])
        note = "caf\u00e9\u00a0bot \u2013 \u00a0\u00ff"
        self.add("blocks", dict(bodies["blocks"], note=note))
        self.assertEqual(self.admin("GET", "blocks")[2]["items"][0]["note"], note)

    def test_bad_bodies_change_nothing(self):
        bad = [
            ("blocks", {}),
            ("blocks", {"match": {"phone": P1}}),
            ("blocks", {"match": {"phone": P1}, "expires_in": "31d"}),
            ("blocks", {"match": {"phone": P1}, "expires_in": "0s"}),
            ("blocks", {"match": {"phone": P1}, "expires_in": "-1s"}),
            ("blocks", {"match": {"phone": P1}, "expires_in": "soon"}),
            ("blocks", {"match": {"phone": P1}, "expires_in": 3600}),
            ("blocks", {"match": {"phone": P1}, "expires_in": "1h", "extra": 1}),
            ("blocks", {"match": {"phone": P1, "device": "d"}, "expires_in": "1h"}),
            ("blocks", {"match": {}, "expires_in": "1h"}),
            ("blocks", {"match": {"email": "x@y"}, "expires_in": "1h"}),
            ("blocks", {"match": {"phone": "12345"}, "expires_in": "1h"}),
            ("blocks", {"match": {"phone_prefix": "91999"}, "expires_in": "1h"}),
            ("blocks", {"match": {"region": "india"}, "expires_in": "1h"}),
            ("blocks", {"match": {"client_ip": "10.0.0.0/33"}, "expires_in": "1h"}),
            ("blocks", {"match": {"client_ip": "2001:db8::/129"}, "expires_in": "1h"}),
            ("blocks", {"match": {"client_ip": "10.0.0.300"}, "expires_in": "1h"}),
            ("blocks", {"match": {"client_ip": "10.0.0.0/"}, "expires_in": "1h"}),
            ("blocks", {"match": {"phone": 919812345671}, "expires_in": "1h"}),
            ("blocks", {"match": {"phone": P1}, "expires_in": "1h", "note": 5}),
            ("overrides", {"rule": "nope", "key": {"api_key": "login-web"}, "limit": 10, "expires_in": "1h"}),
            ("overrides", {"rule": "caller", "key": {"phone": P1}, "limit": 10, "expires_in": "1h"}),
            ("overrides", {"rule": "caller", "key": {}, "limit": 10, "expires_in": "1h"}),
            ("overrides", {"rule": "pair", "key": {"phone": P1}, "limit": 10, "expires_in": "1h"}),
            ("overrides", {"rule": "pair", "key": {"phone": P1, "api_key": "login-web", "device": "d"},
                           "limit": 10, "expires_in": "1h"}),
            ("overrides", {"rule": "pair", "key": {"phone": "+1", "api_key": "login-web"}, "limit": 10,
                           "expires_in": "1h"}),
            ("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": "10", "expires_in": "1h"}),
            ("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 0, "expires_in": "1h"}),
            ("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 10}),
            ("overrides", {"rule": "pair", "key": {"phone": P1, "api_key": "login-web"}, "limit": 10,
                           "burst": 20, "expires_in": "1h"}),
            ("overrides", {"rule": "resend", "key": {"phone": P1}, "limit": 10, "expires_in": "1h"}),
            ("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 10, "expires_in": "31d"}),
            ("unlock", {}),
            ("unlock", {"phone": "abc"}),
            ("unlock", {"phone": P1, "api_key": 7}),
            ("unlock", {"phone": P1, "who": "x"}),
        ]
        version = self.redis.cmd("GET", "otp:adm:v")
        for path, body in bad:
            st, h, out = self.admin("POST", path, body)
            self.assertEqual((st, out.get("error")), (400, "invalid_request"), (path, body, out))
            self.assertTrue(h["content-type"].startswith("application/problem+json"))
            self.assertTrue(out["detail"], body)
        for raw in (b"{", b"[]", b'{"match": {"phone": "+919812345671"}, "match": {}, "expires_in": "1h"}'):
            st, _, out = self.otpd.call("POST", "/v1/admin/blocks", raw=raw, auth=ADMIN_KEY,
                                        headers={"Content-Type": "application/json"})
            self.assertEqual(st, 400, raw)
        self.assertEqual(self.redis.cmd("GET", "otp:adm:v"), version, "nothing changed in Redis")
        self.assertEqual(self.otpd.rows("SELECT * FROM admin_actions"), [])
        self.assertEqual(self.admin("GET", "blocks")[2], {"items": []})
        self.assertEqual(self.admin("GET", "overrides")[2], {"items": []})
        # The edges that are allowed: 30 days exactly, a composite key named whole, a token bucket's burst.
        self.add("blocks", {"match": {"phone": P1}, "expires_in": "30d"})
        self.add("overrides", {"rule": "pair", "key": {"api_key": "login-web", "phone": "+919812345671"},
                               "limit": 10, "expires_in": "1h", "note": "vip"})
        self.add("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 50, "burst": 60,
                               "expires_in": "1h"})
        rows = self.otpd.rows("SELECT admin, action, kind, row_id, body, note, expires_ms FROM admin_actions "
                              "ORDER BY id")
        self.assertEqual([(r["admin"], r["action"], r["kind"]) for r in rows],
                         [("ops", "add", "block"), ("ops", "add", "override"), ("ops", "add", "override")])
        self.assertEqual(rows[1]["note"], "vip")
        self.assertEqual(json.loads(rows[1]["body"])["key"], {"api_key": "login-web", "phone": P1})
        self.assertTrue(all(r["expires_ms"] > 0 and len(r["row_id"]) == 16 for r in rows))
        self.assertNotIn(ADMIN_KEY, json.dumps(rows))

    def test_row_bound(self):
        """The 10,001st live row of a kind is refused (filled directly in
        Redis: 10,000 HTTP adds would only test patience)."""
        far = int(time.time() * 1000) + 3600 * 1000
        for i in range(0, 10000, 500):
            args = []
            zargs = []
            for k in range(i, i + 500):
                rid = "%016x" % k
                args += [rid, json.dumps({"match": {"device": "d%d" % k}, "id": rid, "expires_at": far,
                                          "created_at": far - 1})]
                zargs += [far, rid]
            self.redis.cmd("HSET", "otp:adm:b", *args)
            self.redis.cmd("ZADD", "otp:adm:bz", *zargs)
        st, _, out = self.admin("POST", "blocks", {"match": {"phone": P1}, "expires_in": "1h"})
        self.assertEqual((st, out["error"]), (409, "too_many_rows"), out)
        self.assertIn("10000", out["detail"])
        self.add("overrides", {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 6, "expires_in": "1h"})
