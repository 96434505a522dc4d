"""otpctl override|block|unlock: the operator's client for the admin API
(docs/openapi.yaml, the admin routes), run as bin/otpctl against the real
bin/otpd on a real Redis, with an admin key and a caller key.

AdminCommandsTest: each command's rows, seen through the server's own GET,
act on real requests (a block refuses an issue with 403; an override raises
a caller's limit and its removal brings the rule's back; unlock lifts a
wrong-guess lock), and list prints them as a table or as the server's JSON.
ErrorsTest: the exit codes (sysexits) and the server's problem detail on
stderr: no OTPCTL_KEY, a caller key, a wrong key, a bad --expires-in, an
unknown row, a server that is not there, a Redis that is away (503).
OtpctlWireTest: the HTTP client (libcurl) against small socket servers in this
file: the request it writes, an ID that cannot change the route, chunked and
close-delimited answers, an answer larger than the cap, a server that never
answers (the --timeout bound), and a proxy in the environment that is not
used. test_otpctl_tls.py has the https:// side.

Every otpctl run is checked for the key in its stdout and stderr (ctl()).

Bounds: a change reaches otpd's snapshot within 2 s (docs/readme-admin.md);
polls allow 2.5 s, the extra half second for the polls themselves on a loaded
2-core machine.
"""
import json
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import unittest

from harness import API_KEY, OTHER_KEY, OtpdTest, free_port, run_bin, sanitizer_reports, wait_until

EX_USAGE, EX_DATAERR, EX_UNAVAILABLE, EX_PROTOCOL, EX_NOPERM, EX_CONFIG = 64, 65, 69, 76, 77, 78
ADMIN_KEY = "key-ops-admin-0123456789ab"
SEEN_S = 2.5
P1 = "+919812345671"
P2 = "+919812345672"
ID_RE = re.compile(r"^[0-9a-f]{16}$")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def ctl_env(key):
    """otpctl's environment: none of otpd's secrets, the key (if any) in OTPCTL_KEY."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTPD_", "OTPCTL_"))}
    if key is not None:
        env["OTPCTL_KEY"] = key
    return env


class CtlMixin:
    def ctl(self, *args, key=ADMIN_KEY, server=None, timeout=30):
        """Runs bin/otpctl -s URL ARGS with key in OTPCTL_KEY; asserts that
        no key of the test appears in what it printed."""
        url = server or "http://127.0.0.1:%d" % self.otpd.port
        r = run_bin(self.tmp, "otpctl", ["-s", url] + list(args), ctl_env(key), timeout=timeout)
        for secret in (ADMIN_KEY, API_KEY, OTHER_KEY) + ((key,) if key else ()):
            self.assertNotIn(secret, r.stdout, args)
            self.assertNotIn(secret, r.stderr, args)
        return r


class OtpctlAdminTest(CtlMixin, OtpdTest):
    env = {"OTPD_KEY_OPS": ADMIN_KEY}
    limits = [{"name": "caller", "key": "api_key", "algorithm": "sliding_log", "limit": 2, "window": "1h"},
              {"name": "wrong_codes", "key": ["phone", "api_key"], "algorithm": "wrong_guess_cap", "limit": 2,
               "window": "1h"}]

    def configure(self, cfg):
        cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
        return cfg

    def get(self, kind):
        st, _, out = self.otpd.call("GET", "/v1/admin/" + kind, auth=ADMIN_KEY)
        self.assertEqual(st, 200, out)
        return out

    def added(self, r):
        """The {id, expires_at} an add printed."""
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(sorted(out), ["expires_at", "id"])
        self.assertRegex(out["id"], ID_RE)
        self.assertRegex(out["expires_at"], TIME_RE)
        return out

    def blocked(self, phone, **fields):
        """Whether otpd refuses a verify for phone as blocked. A verify of a
        phone without a code takes nothing (404), so polling is free."""
        st, _, out = self.otpd.verify(phone, "123456", **fields)
        self.assertIn(st, (403, 404), out)
        return st == 403 and out["error"] == "blocked"

    def table(self, r):
        """list's table as rows of cells (split on runs of 2+ spaces)."""
        self.assertEqual(r.returncode, 0, r.stderr)
        return [re.split(r"\s{2,}", line.rstrip()) for line in r.stdout.splitlines()]


class AdminCommandsTest(OtpctlAdminTest):
    def test_block_add_list_rm_acts(self):
        out = self.added(self.ctl("block", "add", "--phone-prefix", "+9199", "--expires-in", "1h",
                                  "--note", "bot network"))
        [item] = self.get("blocks")["items"]
        self.assertEqual((item["id"], item["match"], item["note"], item["created_by"], item["expires_at"]),
                         (out["id"], {"phone_prefix": "+9199"}, "bot network", "ops", out["expires_at"]))
        wait_until(lambda: self.blocked("+919900000001"), timeout=SEEN_S, what="the block in force")
        st, _, body = self.otpd.issue("+919900000001")
        self.assertEqual((st, body["error"]), (403, "blocked"))
        self.assertEqual(self.otpd.issue(P1)[0], 202, "another prefix is not blocked")

        rows = self.table(self.ctl("block", "list"))
        self.assertEqual(rows[0], ["ID", "MATCH", "EXPIRES_AT", "CREATED_BY", "NOTE"])
        self.assertEqual(rows[1:], [[out["id"], "phone_prefix=+9199", out["expires_at"], "ops", "bot network"]])
        r = self.ctl("block", "list", "--format", "json")
        self.assertEqual((r.returncode, json.loads(r.stdout)), (0, self.get("blocks")))

        r = self.ctl("block", "rm", out["id"])
        self.assertEqual((r.returncode, r.stdout), (0, ""), r.stderr)
        self.assertEqual(self.get("blocks"), {"items": []})
        wait_until(lambda: not self.blocked("+919900000001"), timeout=SEEN_S, what="the block gone")
        self.assertEqual(self.otpd.issue("+919900000001")[0], 202)
        self.assertEqual(self.table(self.ctl("block", "list")), [["ID", "MATCH", "EXPIRES_AT", "CREATED_BY",
                                                                  "NOTE"]])

    def test_every_match_flag(self):
        """Each match flag fills its own member (the server's GET shows what
        was stored), and --client-ip with a CIDR range refuses in range."""
        cases = [("--phone", P1, {"phone": P1}), ("--phone-prefix", "+4474", {"phone_prefix": "+4474"}),
                 ("--region", "GB", {"region": "GB"}), ("--device", "dev-1", {"device": "dev-1"}),
                 ("--client-ip", "10.1.0.0/16", {"client_ip": "10.1.0.0/16"}),
                 ("--api-key", "login-app", {"api_key": "login-app"})]
        ids = {}
        for flag, value, match in cases:
            # --flag=VALUE is the same as --flag VALUE.
            args = [flag, value] if flag != "--device" else ["--device=" + value]
            ids[self.added(self.ctl("block", "add", *args, "--expires-in", "10m"))["id"]] = match
        stored = {it["id"]: it["match"] for it in self.get("blocks")["items"]}
        self.assertEqual(stored, ids)
        # The refresh may fall between two adds: wait for the last one too.
        wait_until(lambda: self.blocked(P2, client_ip="10.1.2.3") and self.blocked(P2, auth=OTHER_KEY),
                   timeout=SEEN_S, what="the blocks in force")
        st, _, body = self.otpd.issue(P2, client_ip="10.1.2.3")
        self.assertEqual((st, body["reason"]), (403, "block:client_ip"))
        self.assertEqual(self.otpd.issue(P2, client_ip="10.2.2.3")[0], 202, "outside the range")
        st, _, body = self.otpd.issue(P2, auth=OTHER_KEY)
        self.assertEqual((st, body["reason"]), (403, "block:api_key"))

    def test_override_raises_limit_until_removed(self):
        phones = ["+9198123400%02d" % i for i in range(10)]
        for p in phones[:2]:
            self.assertEqual(self.otpd.issue(p)[0], 202)
        st, _, body = self.otpd.issue(phones[2])
        self.assertEqual((st, body["reason"]), (429, "caller"))
        out = self.added(self.ctl("override", "add", "--rule", "caller", "--key", "api_key=login-web",
                                  "--limit", "4", "--expires-in", "1h", "--note", "sale"))
        [item] = self.get("overrides")["items"]
        self.assertEqual((item["id"], item["rule"], item["key"], item["limit"], item["note"]),
                         (out["id"], "caller", {"api_key": "login-web"}, 4, "sale"))
        self.assertNotIn("burst", item)
        wait_until(lambda: self.otpd.issue(phones[2])[0] == 202, timeout=SEEN_S, what="the override in force")
        st, h, _ = self.otpd.issue(phones[3])
        self.assertEqual(st, 202)
        st, h, body = self.otpd.issue(phones[4])
        self.assertEqual((st, body["reason"]), (429, "caller"), "the override's 4, no more")
        self.assertIn("q=4", h["ratelimit-policy"])
        self.assertEqual(self.otpd.issue(phones[5], auth=OTHER_KEY)[0], 202, "another caller keeps the rule")

        rows = self.table(self.ctl("override", "list"))
        self.assertEqual(rows[0], ["ID", "RULE", "KEY", "LIMIT", "BURST", "EXPIRES_AT", "CREATED_BY", "NOTE"])
        self.assertEqual(rows[1:], [[out["id"], "caller", "api_key=login-web", "4", "-", out["expires_at"], "ops",
                                     "sale"]])
        r = self.ctl("override", "rm", out["id"])
        self.assertEqual((r.returncode, r.stdout), (0, ""), r.stderr)
        # 4 taken; the rule's own 2 again: the next is refused with q=2.
        wait_until(lambda: "q=2" in self.otpd.issue(phones[6])[1].get("ratelimit-policy", ""), timeout=SEEN_S,
                   what="the rule's limit back")
        self.assertEqual(self.otpd.issue(phones[6])[0], 429)

    def test_override_composite_key_and_burst(self):
        """--key repeated names a composite key; --burst reaches the server,
        which refuses it for a rule that is not a token bucket (its detail
        on stderr, EX_DATAERR)."""
        out = self.added(self.ctl("override", "add", "--rule", "wrong_codes", "--key", "phone=" + P1,
                                  "--key", "api_key=login-web", "--limit", "5", "--expires-in", "1h"))
        [item] = self.get("overrides")["items"]
        self.assertEqual((item["id"], item["key"], item["limit"]),
                         (out["id"], {"phone": P1, "api_key": "login-web"}, 5))
        r = self.ctl("override", "add", "--rule", "caller", "--key", "api_key=login-web", "--limit", "5",
                     "--burst", "9", "--expires-in", "1h")
        self.assertEqual(r.returncode, EX_DATAERR, r.stderr)
        st, _, problem = self.otpd.call("POST", "/v1/admin/overrides",
                                        {"rule": "caller", "key": {"api_key": "login-web"}, "limit": 5,
                                         "burst": 9, "expires_in": "1h"}, auth=ADMIN_KEY)
        self.assertEqual(st, 400)
        self.assertEqual(r.stderr, "otpctl: HTTP 400 invalid_request: %s\n" % problem["detail"])
        self.assertEqual(len(self.get("overrides")["items"]), 1)

    def lock(self, auth):
        """Issues to P1 for auth's caller and guesses wrong until locked; returns the right code."""
        _, code = self.issue_and_code(P1, auth=auth)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        for _ in range(2):  # the second wrong guess reaches the cap of 2
            self.assertIn(self.otpd.verify(P1, wrong, auth=auth)[0], (422, 429))
        st, _, out = self.otpd.verify(P1, code, auth=auth)
        self.assertEqual((st, out["error"]), (429, "locked"))
        return code

    def test_unlock_after_lock(self):
        web = self.lock(API_KEY)
        app = self.lock(OTHER_KEY)
        r = self.ctl("unlock", "--phone", P1, "--api-key", "login-web", "--note", "support 42")
        self.assertEqual((r.returncode, json.loads(r.stdout)), (0, {"unlocked": 1}), r.stderr)
        self.assertEqual(self.otpd.verify(P1, web)[0], 200)
        self.assertEqual(self.otpd.verify(P1, app, auth=OTHER_KEY)[0], 429, "the other caller stays locked")
        r = self.ctl("unlock", "--phone", P1)
        self.assertEqual((r.returncode, json.loads(r.stdout)), (0, {"unlocked": 1}), r.stderr)
        self.assertEqual(self.otpd.verify(P1, app, auth=OTHER_KEY)[0], 200)
        rows = self.otpd.rows("SELECT admin, action, note FROM admin_actions ORDER BY id")
        self.assertEqual([(x["admin"], x["action"], x["note"]) for x in rows],
                         [("ops", "unlock", "support 42"), ("ops", "unlock", None)])


class ErrorsTest(OtpctlAdminTest):
    def test_no_key(self):
        for key in (None, ""):
            r = self.ctl("block", "list", key=key)
            self.assertEqual(r.returncode, EX_CONFIG, r.stderr)
            self.assertIn("OTPCTL_KEY", r.stderr)
            self.assertEqual(r.stdout, "")
        r = self.ctl("block", "list", key="two words")
        self.assertEqual(r.returncode, EX_CONFIG, "a key that cannot go in a header")

    def test_caller_key_and_wrong_key(self):
        for args in (("block", "list"), ("override", "add", "--rule", "caller", "--key", "api_key=login-web",
                                         "--limit", "5", "--expires-in", "1h"), ("unlock", "--phone", P1)):
            r = self.ctl(*args, key=API_KEY)
            self.assertEqual(r.returncode, EX_NOPERM, (args, r.stderr))
            self.assertTrue(r.stderr.startswith("otpctl: HTTP 403 forbidden: only an admin key"), r.stderr)
            r = self.ctl(*args, key="not-a-key-0123456789")
            self.assertEqual(r.returncode, EX_NOPERM, (args, r.stderr))
            self.assertIn("HTTP 401 unauthorized", r.stderr)
        self.assertEqual(self.get("overrides"), {"items": []})

    def test_bad_expires_in_and_unknown_row(self):
        r = self.ctl("block", "add", "--phone", P1, "--expires-in", "soon")
        self.assertEqual(r.returncode, EX_DATAERR, r.stderr)
        st, _, problem = self.otpd.call("POST", "/v1/admin/blocks", {"match": {"phone": P1}, "expires_in": "soon"},
                                        auth=ADMIN_KEY)
        self.assertEqual(st, 400)
        self.assertTrue(problem["detail"])
        self.assertEqual(r.stderr, "otpctl: HTTP 400 invalid_request: %s\n" % problem["detail"])
        self.assertEqual(r.stdout, "")
        self.assertEqual(self.get("blocks"), {"items": []})
        r = self.ctl("override", "rm", "0123456789abcdef")
        self.assertEqual(r.returncode, EX_DATAERR, r.stderr)
        self.assertIn("HTTP 404 not_found", r.stderr)

    def test_usage_errors_send_nothing(self):
        """Bad flags are EX_USAGE before any request (the server's ledger
        holds no admin action afterwards, and no OTPCTL_KEY is needed)."""
        cases = [("block", "add", "--phone", P1, "--device", "d", "--expires-in", "1h"),
                 ("block", "add", "--expires-in", "1h"),
                 ("block", "add", "--phone", P1),
                 ("block", "add", "--phone", P1, "--expires-in", "1h", "--limit", "3"),
                 ("block", "add", "--phone", P1, "--phone", P2, "--expires-in", "1h"),
                 ("block", "rm"), ("block", "drop", "x"), ("block",), ("unlock",),
                 ("override", "add", "--rule", "caller", "--key", "api_key", "--limit", "3", "--expires-in", "1h"),
                 ("override", "add", "--rule", "caller", "--key", "api_key=a", "--key", "api_key=b", "--limit",
                  "3", "--expires-in", "1h"),
                 ("override", "add", "--rule", "caller", "--key", "api_key=a", "--limit", "3x",
                  "--expires-in", "1h"),
                 ("block", "list", "--format", "yaml"), ("block", "list", "--expires-in"),
                 ("--timeout", "0", "block", "list")]
        for args in cases:
            r = self.ctl(*args, key=None)
            self.assertEqual(r.returncode, EX_USAGE, (args, r.stderr))
            self.assertEqual(r.stdout, "")
        for url in ("ftp://x", "http://user@127.0.0.1", "http://127.0.0.1:99999", "http://[::1",
                    "http://127.0.0.1/?q", "http://127.0.0.1/#f"):
            r = self.ctl("block", "list", server=url)
            self.assertEqual(r.returncode, EX_USAGE, (url, r.stderr))
            self.assertIn("http[s]://HOST[:PORT][/PATH]", r.stderr)
        self.assertEqual(self.otpd.rows("SELECT * FROM admin_actions"), [])

    def test_server_down_and_store_down(self):
        r = self.ctl("block", "list", server="http://127.0.0.1:%d" % free_port())
        self.assertEqual(r.returncode, EX_UNAVAILABLE, r.stderr)
        self.assertIn("refused", r.stderr)
        self.redis.pause()
        try:
            r = self.ctl("block", "add", "--phone", P1, "--expires-in", "1h")
        finally:
            self.redis.resume()
        self.assertEqual(r.returncode, EX_UNAVAILABLE, r.stderr)
        self.assertIn("HTTP 503 store_unavailable", r.stderr)


class LedgerTextTest(OtpctlAdminTest):
    """A ledger is a file anyone with access may have edited: what otpctl
    prints from it (audit's JSON lines, ledger's json, csv and table) holds
    no raw control character (C0 but the line ends, DEL, C1)."""

    RAW = "[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f]"

    def test_control_characters_from_a_ledger_are_escaped(self):
        self.assertEqual(self.otpd.issue(P1, device_id="dev-1")[0], 202)
        self.added(self.ctl("block", "add", "--phone", P2, "--expires-in", "1h", "--note", "plain"))
        wait_until(lambda: self.otpd.rows("SELECT id FROM admin_actions") and
                   self.otpd.rows("SELECT id FROM requests"), what="the rows")
        self.assertEqual(self.otpd.stop(), 0)
        evil = "x\x1b[2J\u009b31m\u0085\x7f\r\n\u00e9"
        con = self.otpd.db()
        with con:
            con.execute("UPDATE admin_actions SET note = ?", (evil,))
            con.execute("UPDATE requests SET device_id = ?", (evil,))
        con.close()
        db = self.otpd.config["ledger"]["path"]
        r = run_bin(self.tmp, "otpctl", ["audit", "--db", db, "-t", "admin_actions"], ctl_env(None))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(re.search(self.RAW, r.stdout.rstrip("\n")), repr(r.stdout))
        self.assertEqual(json.loads(r.stdout.splitlines()[0])["note"], evil)
        for fmt in ("json", "csv", "table"):
            r = run_bin(self.tmp, "otpctl", ["ledger", "--db", db, "--format", fmt], ctl_env(None))
            self.assertEqual(r.returncode, 0, (fmt, r.stderr))
            self.assertNotIn("\x1b", r.stdout, fmt)
            self.assertFalse(re.search(self.RAW, r.stdout.replace("\r\n", "\n")), (fmt, repr(r.stdout)))
            if fmt == "json":
                rows = [json.loads(l) for l in r.stdout.splitlines()]
                self.assertIn(evil, [row["device_id"] for row in rows])
            if fmt == "csv":
                self.assertIn("x\\x1B[2J\\xC2\\x9B31m\\xC2\\x85\\x7F\\x0D\\x0A\u00e9", r.stdout)


class WireServer:
    """One-connection socket server: records the request it reads (head and
    Content-Length body) and answers with reply(request bytes) (None: holds
    the connection open until hold_s passes, then closes)."""

    def __init__(self, reply, hold_s=10.0):
        self.reply, self.hold_s = reply, hold_s
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.sock.settimeout(30)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.request = b""
        self.accepted = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            con, _ = self.sock.accept()
        except OSError:
            return
        self.accepted.set()
        with con:
            con.settimeout(self.hold_s)
            try:
                while b"\r\n\r\n" not in self.request:
                    self.request += con.recv(65536)
                head, _, body = self.request.partition(b"\r\n\r\n")
                m = re.search(rb"\r\ncontent-length: (\d+)", head, re.I)
                while m and len(body) < int(m.group(1)):
                    body += con.recv(65536)
                self.request = head + b"\r\n\r\n" + body
                answer = self.reply(self.request)
                if answer is None:
                    con.recv(1)  # until otpctl gives up and closes, or hold_s passes
                else:
                    con.sendall(answer)
            except OSError:
                pass

    def close(self):
        self.sock.close()
        self.thread.join(timeout=15)


class OtpctlWireTest(CtlMixin, unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpctl-wire-")

    def tearDown(self):
        found = sanitizer_reports(self.tmp)
        if not found:
            shutil.rmtree(self.tmp, ignore_errors=True)
        self.assertEqual(found, [], "files kept in " + self.tmp)

    def serve(self, reply, hold_s=10.0):
        s = WireServer(reply, hold_s)
        self.addCleanup(s.close)
        return s

    def test_request_it_writes(self):
        answer = b'{"id":"00000000000000aa","expires_at":"2024-05-01T00:00:00.000Z"}'
        s = self.serve(lambda req: b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                                   b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer))
        r = self.ctl("override", "add", "--rule", "pair", "--key", "phone=+91 98", "--key", 'api_key=a"b',
                     "--limit", "7", "--burst", "9", "--expires-in", "2h", "--note", "line\nbreak", server=s.url)
        head, _, body = s.request.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        self.assertEqual(lines[0], "POST /v1/admin/overrides HTTP/1.1")
        self.assertIn("Authorization: Bearer " + ADMIN_KEY, lines)
        self.assertIn("Connection: close", lines)
        self.assertIn("Content-Type: application/json", lines)
        self.assertIn("Host: " + s.url[len("http://"):], lines)
        # Built with jansson: quotes and line breaks travel as JSON escapes, numbers as numbers.
        self.assertEqual(json.loads(body), {"rule": "pair", "key": {"phone": "+91 98", "api_key": 'a"b'},
                                            "limit": 7, "burst": 9, "expires_in": "2h", "note": "line\nbreak"})
        self.assertEqual((r.returncode, r.stdout), (0, answer.decode() + "\n"), r.stderr)

    def test_rm_id_cannot_change_the_route(self):
        s = self.serve(lambda req: b"HTTP/1.1 204 No Content\r\n\r\n")
        r = self.ctl("block", "rm", "../unlock x\r\nX: y", server=s.url + "/base/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(s.request.split(b"\r\n")[0],
                         b"DELETE /base/v1/admin/blocks/..%2Funlock%20x%0D%0AX%3A%20y HTTP/1.1")

    def test_dot_segments_stay(self):
        """An ID of ".." is sent as it is: a client that resolves dot
        segments would send DELETE /v1/admin/, another route."""
        s = self.serve(lambda req: b"HTTP/1.1 204 No Content\r\n\r\n")
        r = self.ctl("block", "rm", "..", server=s.url)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(s.request.split(b"\r\n")[0], b"DELETE /v1/admin/blocks/.. HTTP/1.1")

    def test_proxy_in_the_environment_is_not_used(self):
        """http_proxy and kin would carry the admin key to a third host:
        otpctl talks to -s and nothing else (the proxy here refuses)."""
        s = self.serve(lambda req: b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{\"items\": []}")
        env = ctl_env(ADMIN_KEY)
        dead = "http://127.0.0.1:%d" % free_port()
        env.update(http_proxy=dead, HTTP_PROXY=dead, https_proxy=dead, ALL_PROXY=dead, all_proxy=dead, no_proxy="")
        r = run_bin(self.tmp, "otpctl", ["-s", s.url, "block", "list", "--format", "json"], env)
        self.assertEqual((r.returncode, r.stdout), (0, '{"items":[]}\n'), r.stderr)
        self.assertIn(b"Authorization: Bearer " + ADMIN_KEY.encode(), s.request)

    def test_chunked_and_close_delimited_answers(self):
        items = {"items": [{"id": "00000000000000a1", "match": {"region": "GB"}, "expires_at": "T1",
                            "created_by": "ops", "note": "n\x1b[31m"}]}
        text = json.dumps(items).encode()
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(text[i:i + 7]), text[i:i + 7]) for i in range(0, len(text), 7))
        s = self.serve(lambda req: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                                   b"Content-Type: application/json\r\n\r\n" + chunks + b"0\r\n\r\n")
        r = self.ctl("block", "list", "--format", "json", server=s.url)
        self.assertEqual((r.returncode, json.loads(r.stdout)), (0, items), r.stderr)
        s = self.serve(lambda req: b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + text)
        r = self.ctl("block", "list", server=s.url)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The table writes control bytes from the server as '?'.
        self.assertEqual(r.stdout.splitlines()[1].split(), ["00000000000000a1", "region=GB", "T1", "ops", "n?[31m"])

    def test_control_characters_from_the_server_never_reach_the_terminal(self):
        """C0, DEL and C1 (U+009B is CSI to many terminals) from a server:
        '?' in a table and a refusal, \\u escapes in JSON."""
        note = "n\x1b[31m\u009b2J\u0085\x7f\u00e9"
        items = {"items": [{"id": "00000000000000a1", "match": {"region": "G\u009bB"}, "expires_at": "T1",
                            "created_by": "o\x07ps", "note": note}]}
        text = json.dumps(items, ensure_ascii=False).encode()
        s = self.serve(lambda req: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(text), text))
        r = self.ctl("block", "list", server=s.url)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines()[1].split(), ["00000000000000a1", "region=G?B", "T1", "o?ps",
                                                            "n?[31m?2J??\u00e9"])
        self.assertFalse(re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", r.stdout), repr(r.stdout))
        for args in (("block", "list", "--format", "json"), ("block", "add", "--region", "GB", "--expires-in", "1h")):
            s = self.serve(lambda req: b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(text), text))
            r = self.ctl(*args, server=s.url)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertFalse(re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", r.stdout), repr(r.stdout))
            self.assertEqual(json.loads(r.stdout), items)  # the same text, escaped
        problem = json.dumps({"error": "inv\u009balid", "detail": "bad\x1b]0;title\x07 \u0085note"},
                             ensure_ascii=False).encode()
        s = self.serve(lambda req: b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/problem+json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(problem), problem))
        r = self.ctl("block", "list", server=s.url)
        self.assertEqual((r.returncode, r.stderr), (EX_DATAERR, "otpctl: HTTP 400 inv?alid: bad?]0;title? ?note\n"))

    def test_answer_too_big(self):
        s = self.serve(lambda req: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n{" % (16 * 1024 * 1024 + 1))
        r = self.ctl("block", "list", server=s.url)
        self.assertEqual(r.returncode, EX_PROTOCOL, r.stderr)
        self.assertIn("larger than 16777216 bytes", r.stderr)
        # Close-delimited: the cap is counted as the bytes arrive.
        big = b"HTTP/1.1 200 OK\r\n\r\n" + b" " * (16 * 1024 * 1024 + 1)
        s = self.serve(lambda req: big)
        r = self.ctl("block", "list", server=s.url)
        self.assertEqual(r.returncode, EX_PROTOCOL, r.stderr)
        self.assertIn("larger than 16777216 bytes", r.stderr)

    def test_silent_server_times_out(self):
        """A server that takes the connection and never answers: --timeout 1
        ends the call. Bound: 1 s plus 3 s for starting otpctl on a loaded
        machine; the server holds the connection 10 s, so a client without
        the deadline fails the bound."""
        s = self.serve(lambda req: None, hold_s=10.0)
        t0 = time.monotonic()
        r = self.ctl("--timeout", "1", "block", "list", server=s.url)
        took = time.monotonic() - t0
        self.assertTrue(s.accepted.is_set())
        self.assertEqual(r.returncode, EX_UNAVAILABLE, r.stderr)
        self.assertIn("no whole answer within", r.stderr)
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 4.0)

    def test_answer_that_is_not_http(self):
        s = self.serve(lambda req: b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        r = self.ctl("block", "list", server=s.url)
        self.assertEqual(r.returncode, EX_PROTOCOL, r.stderr)
        s = self.serve(lambda req: b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 5\r\n\r\noops!")
        r = self.ctl("block", "list", server=s.url)
        self.assertEqual((r.returncode, r.stderr), (EX_UNAVAILABLE, "otpctl: HTTP 502\n"))


if __name__ == "__main__":
    unittest.main()
