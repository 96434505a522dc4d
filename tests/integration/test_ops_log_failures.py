"""Logs on every failure path, checked as test_ops_logs checks the happy path's:
each line one JSON event (time, level, event, msg), the failure's own event
with its fields, and never a code, the message text, an API key, the secret
or a provider's credential, whatever the failure echoes back.

- the ledger failing (a commit refused, a full disk, a send's row refused, a
  ledger that cannot be opened);
- Redis down, stalled, or refusing otpd's password;
- the provider answering 4xx and 5xx, 429, too late, never, not at all
  (refused connections), with a reset, with garbage, or with an error page
  that echoes the request (and so the code and the credentials);
- TLS: handshakes that fail, a certificate refused on SIGHUP."""
import http.server
import json
import os
import re
import signal
import socket
import socketserver
import ssl
import threading
import urllib.parse

from harness import API_KEY, OTHER_KEY, SECRET, OtpdTest, code_of, free_port, wait_until
from test_http_tls import Certs, install, key_body

P = "+919812345678"
PHONES = ["+9198123456%02d" % i for i in range(40, 60)]
TW_SID = "AC0123456789abcdef0123456789abcdef"
TW_TOKEN = "twilio-token-secret-0001"
K_USER, K_PASS = "kannel-user-0001", "kannel-pass-secret-0001"
WH_TOKEN, WH_SIGN = "webhook-token-secret-0001", "webhook-signing-secret-0123456789abcdef"
REDIS_PASSWORD = "redis-acl-password-0001"


class FailureLogTest(OtpdTest):
    """JSON logs at debug (the most otpd writes), and the checks every
    failure's log must pass."""
    secrets = (API_KEY, OTHER_KEY, SECRET)

    def configure(self, cfg):
        cfg["log"] = {"format": "json", "level": "debug"}
        cfg["pacer"] = dict(cfg["pacer"], timeout="1s", retry={"max": 1, "base": "100ms"})
        return cfg

    def lines(self):
        """Every line of the log, each one JSON object: one event."""
        out = []
        for line in self.otpd.log().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                self.fail("a log line is not JSON: %r" % line)
            self.assertIsInstance(obj, dict, line)
            for k in ("time", "level", "event", "msg"):
                self.assertIsInstance(obj.get(k), str, "no %s in %r" % (k, line))
            self.assertIn(obj["level"], ("debug", "info", "warn", "error"), line)
            out.append(obj)
        return out

    def events(self, name, **fields):
        return [l for l in self.lines() if l["event"] == name and all(l.get(k) == v for k, v in fields.items())]

    def wait_event(self, name, n=1, **fields):
        return wait_until(lambda: (lambda f: f if len(f) >= n else None)(self.events(name, **fields)), 15,
                          what="%d %s lines with %r" % (n, name, fields))

    def assert_clean(self, *more):
        """No line holds a secret, a code or a text (more: the test's own)."""
        self.lines()
        log = self.otpd.log()
        for s in self.secrets + tuple(more):
            self.assertTrue(s)
            self.assertNotIn(s, log)

    def sent(self):
        """The codes and texts the provider was given (even when it refused them)."""
        texts = [t for t in (text_of(r) for r in self.fake.requests()) if t]
        return [code_of(t) for t in texts] + texts

    def request_line(self, rid):
        return wait_until(lambda: [l for l in self.lines() if l.get("request_id") == rid and "method" in l] or None,
                          what="the line of request %s" % rid)[0]


def text_of(rec):
    """The message text of a provider request the fake recorded."""
    if rec.get("form"):
        return rec["form"].get("Body")
    if rec.get("args", {}).get("text"):
        return rec["args"]["text"]
    try:
        return json.loads(rec.get("body") or "{}").get("text")
    except ValueError:
        return None


# 1. the ledger -------------------------------------------------------------------------------------------
class LedgerFailureLogTest(FailureLogTest):
    def refuse(self, table, error):
        con = self.otpd.db()
        con.execute("CREATE TRIGGER fail_%s BEFORE INSERT ON %s BEGIN SELECT RAISE(ABORT, '%s'); END"
                    % (table, table, error))
        con.commit()
        con.close()

    def test_a_refused_commit(self):
        for table, error in (("messages", "disk I/O error"), ("requests", "database or disk is full")):
            self.refuse(table, error)
            rid = "ledger-" + table
            st, _, p = self.otpd.call("POST", "/v1/otp", {"phone": P}, headers={"X-Request-Id": rid})
            self.assertEqual((st, p["error"]), (503, "ledger_unavailable"), p)
            line = self.request_line(rid)
            self.assertEqual((line["event"], line["level"], line["status"], line["outcome"], line["caller"]),
                             ("issue.refused", "warn", 503, "ledger_unavailable", "login-web"))
            self.assertTrue([l for l in self.lines() if l.get("request_id") == rid and l["level"] == "error"
                             and "ledger" in l["msg"]], "no error line says the ledger failed")
            self.wait_event("ledger.failed", reason=error)
            con = self.otpd.db()
            con.execute("DROP TRIGGER fail_" + table)
            con.commit()
            con.close()
        self.assert_clean()

    def test_a_send_that_cannot_be_recorded(self):
        self.refuse("sends", "disk I/O error")
        st, _, body = self.otpd.issue(P)
        self.assertEqual(st, 202, body)
        self.wait_messages(1)
        # Nobody waits for a send's row: the ledger itself says it was lost.
        line = self.wait_event("ledger.failed")[0]
        self.assertEqual((line["level"], line["groups"], line["reason"]), ("error", 1, "disk I/O error"))
        self.assertEqual(self.otpd.stop(), 0)
        self.assert_clean(*self.sent())

    def test_a_ledger_that_cannot_be_opened(self):
        self.assertEqual(self.otpd.stop(), 0)
        cfg = json.loads(json.dumps(self.otpd.config))
        blocker = os.path.join(self.tmp, "not-a-dir")
        open(blocker, "w").close()
        cfg["ledger"] = {"path": os.path.join(blocker, "ledger.db")}
        cfg["listen"] = "127.0.0.1:%d" % free_port()
        path = os.path.join(self.tmp, "bad-ledger.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["-c", path], timeout=20)
        self.assertNotEqual(r.returncode, 0)
        lines = [json.loads(l) for l in r.stderr.splitlines()]
        self.assertTrue([l for l in lines if l["level"] == "error" and "ledger" in l["msg"]], r.stderr)
        for s in self.secrets:
            self.assertNotIn(s, r.stderr)


# 2. Redis --------------------------------------------------------------------------------------------------
class StoreFailureLogTest(FailureLogTest):
    def test_redis_down_then_stalled(self):
        body, code = self.issue_and_code(P)
        self.redis.stop()
        for i, (path, req) in enumerate((("/v1/otp", {"phone": P}), ("/v1/otp/verify", {"phone": P, "code": code}))):
            rid = "down-%d" % i
            st, _, p = self.otpd.call("POST", path, req, headers={"X-Request-Id": rid})
            self.assertEqual((st, p["error"]), (503, "store_unavailable"), p)
            line = self.request_line(rid)
            self.assertEqual((line["status"], line["outcome"], line["level"]), (503, "store_unavailable", "warn"))
            self.assertEqual(line["event"], "issue.refused" if path == "/v1/otp" else "verify.refused")
        self.assertEqual(self.otpd.call("GET", "/readyz", auth=None)[0], 503)
        self.wait_event("store.unavailable", op="issue")
        self.assert_clean(code, *self.sent())

    def test_redis_stalled(self):
        self.redis.pause()
        try:
            st, _, p = self.otpd.call("POST", "/v1/otp", {"phone": P}, headers={"X-Request-Id": "stalled"})
        finally:
            self.redis.resume()
        self.assertEqual((st, p["error"]), (503, "store_unavailable"), p)
        self.assertEqual(self.request_line("stalled")["outcome"], "store_unavailable")
        self.assert_clean()

    def test_redis_refuses_the_password(self):
        self.redis.cmd("ACL", "SETUSER", "otpd", "on", ">" + REDIS_PASSWORD, "~*", "&*", "+@all")
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["redis"] = dict(cfg["redis"], username="otpd", password_env="OTPD_REDIS_PASSWORD")
        self.restart(cfg, OTPD_REDIS_PASSWORD="wrong-" + REDIS_PASSWORD)
        st, _, p = self.otpd.call("GET", "/readyz", auth=None)
        self.assertEqual(st, 503, p)
        st, _, p = self.otpd.call("POST", "/v1/otp", {"phone": P}, headers={"X-Request-Id": "wrongpass"})
        self.assertEqual((st, p["error"]), (503, "store_unavailable"), p)
        self.assertTrue([l for l in self.lines() if "WRONGPASS" in l["msg"]], "the refusal is not said")
        self.assert_clean(REDIS_PASSWORD)  # neither the password given nor the right one


# 3. the provider -------------------------------------------------------------------------------------------
class EchoHandler(http.server.BaseHTTPRequestHandler):
    """A provider that misbehaves as told by the server's mode: 'echo'
    answers 400 with everything it was sent, decoded (a proxy's error page);
    'quote' answers 400 quoting the message it refuses; 'garbage' answers
    200 with bytes no adapter can read; 'reset' closes the connection
    without a word."""

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        self.server.seen.append(self.path.encode() + b" " + body)
        mode = self.server.mode
        if mode == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.close()
            return
        if mode == "garbage":
            out, status = b"\xff\xfe{not json\x00\n\r\x1b[31m", 200
        elif mode == "quote":
            # Only the message, as a provider quotes what it refused.
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            q.update(urllib.parse.parse_qs(body.decode(errors="replace")))
            try:
                text = json.loads(body).get("text")  # a webhook's JSON
            except ValueError:
                text = None
            text = text or (q.get("text") or q.get("Body") or [""])[0]  # Kannel's query, Twilio's form
            out, status = ("Message '%s' rejected" % text).encode(), 400
        else:
            parts = [self.path, urllib.parse.unquote_plus(self.path), str(self.headers),
                     body.decode(errors="replace"), urllib.parse.unquote_plus(body.decode(errors="replace"))]
            out, status = ("rejected: " + " | ".join(parts)).encode(), 400
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = answer

    def log_message(self, *a):
        pass


class EchoProvider(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self, mode):
        super().__init__(("127.0.0.1", 0), EchoHandler)
        self.mode, self.seen = mode, []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]


class ProviderFailureLogBase(FailureLogTest):
    secrets = FailureLogTest.secrets + (TW_SID, TW_TOKEN, K_USER, K_PASS, WH_TOKEN, WH_SIGN)
    env = {"TW_SID": TW_SID, "TW_TOKEN": TW_TOKEN, "K_USER": K_USER, "K_PASS": K_PASS, "WH_TOKEN": WH_TOKEN,
           "WH_SIGN": WH_SIGN}

    def provider(self, url):
        return {}

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["provider"] = self.provider(self.fake.url)
        return cfg

    def use(self, url):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["provider"] = self.provider(url)
        self.restart(cfg)

    def failed_lines(self, mid, n=1):
        return self.wait_event("provider.failed", n, message_id=mid)

    def state(self, mid):
        rows = self.otpd.rows("SELECT state FROM messages WHERE id = ?", mid)
        return rows[0]["state"] if rows else None

    def run_case(self, phone, status, level, outcome, attempts=1):
        """One message through a provider failure: its provider.failed lines."""
        st, _, body = self.otpd.issue(phone)
        self.assertEqual(st, 202, body)
        lines = self.failed_lines(body["id"], attempts)
        for i, l in enumerate(lines[:attempts]):
            self.assertEqual((l["level"], l["status"], l["outcome"], l["provider"]),
                             (level, status, outcome, self.otpd.config["provider"]["type"]), l)
            self.assertEqual(l["attempt"], i + 1)
            self.assertIn("cause", l)
            self.assertNotIn("request_id", l)  # its request was answered long before
        return body["id"]

    def statuses_then_clean(self):
        ph = iter(PHONES)
        for status, level, outcome in ((400, "error", "permanent"), (401, "error", "permanent"),
                                       (403, "error", "permanent"), (500, "warn", "transient"),
                                       (503, "warn", "transient")):
            self.fake.control(status=status)
            mid = self.run_case(next(ph), status, level, outcome, 2 if outcome == "transient" else 1)
            wait_until(lambda: self.state(mid) == "failed", 15, what="message %s failed" % mid)
        self.fake.control(status=429, retry_after=1)
        self.run_case(next(ph), 429, "warn", "transient")
        self.wait_event("provider.paused", status=429)
        # Too late, and never: no answer within pacer.timeout.
        self.fake.control(status=0, latency_ms=1500, retry_after=None)
        self.run_case(next(ph), 0, "warn", "transient")
        self.fake.control(latency_ms=0, hang=True)
        self.run_case(next(ph), 0, "warn", "transient")
        self.fake.control(hang=False)
        texts = self.sent()
        self.assertTrue(texts)
        # Nobody listening: refused connections.
        self.use("http://127.0.0.1:%d" % free_port())
        self.run_case(next(ph), 0, "warn", "transient")
        self.assertEqual(self.otpd.stop(), 0)
        self.assert_clean(*texts)

    def misbehaving(self, mode, status, outcome):
        srv = EchoProvider(mode)
        try:
            self.use(srv.url)
            level = "error" if outcome == "permanent" else "warn"
            st, _, body = self.otpd.issue(P)
            self.assertEqual(st, 202, body)
            line = self.failed_lines(body["id"])[0]
            self.assertEqual((line["level"], line["status"], line["outcome"]), (level, status, outcome), line)
            wait_until(lambda: srv.seen, what="the request")
            self.assertEqual(self.otpd.stop(), 0)
            sent = [urllib.parse.unquote_plus(b.decode(errors="replace")) for b in srv.seen]
            # A code stands alone in the text (not in a phone number or a hex id).
            codes = sorted({c for s in sent for c in re.findall(r"(?<![0-9A-Za-z+])\d{6}(?![0-9A-Za-z])", s)})
            self.assertTrue(codes or mode == "reset", sent)
            self.assert_clean(*codes)
            # The failure's reason is in the ledger too, where no code may be either.
            con = self.otpd.db()
            dump = "\n".join(con.iterdump())
            con.close()
            for s in codes + list(self.secrets):
                self.assertNotIn(s, dump)
        finally:
            srv.shutdown()
            srv.server_close()


class TwilioFailureLogTest(ProviderFailureLogBase):
    def provider(self, url):
        return {"type": "twilio", "base_url": url, "from": "+15005550006", "account_sid_env": "TW_SID",
                "auth_token_env": "TW_TOKEN"}

    def test_statuses_timeouts_and_refusals(self):
        self.statuses_then_clean()

    def test_an_echoed_request(self):
        self.misbehaving("echo", 400, "permanent")

    def test_a_quoted_message(self):
        self.misbehaving("quote", 400, "permanent")

    def test_garbage(self):
        # 200 is a send whatever its body says; garbage must not reach the log.
        srv = EchoProvider("garbage")
        try:
            self.use(srv.url)
            st, _, body = self.otpd.issue(P)
            self.assertEqual(st, 202, body)
            wait_until(lambda: self.state(body["id"]) == "sent", what="the message sent")
            self.assertEqual(self.otpd.stop(), 0)
            self.assertNotIn("not json", self.otpd.log())
            self.assert_clean()
        finally:
            srv.shutdown()
            srv.server_close()

    def test_a_reset_connection(self):
        self.misbehaving("reset", 0, "transient")


class KannelFailureLogTest(ProviderFailureLogBase):
    def provider(self, url):
        return {"type": "kannel", "url": url + "/cgi-bin/sendsms", "from": "OTPD", "username_env": "K_USER",
                "password_env": "K_PASS"}

    def test_statuses_timeouts_and_refusals(self):
        self.statuses_then_clean()

    def test_an_echoed_request(self):
        # Kannel's own answers are logged (they help); an echo of the
        # request, whatever its form, never is.
        self.misbehaving("echo", 400, "permanent")

    def test_a_quoted_message(self):
        self.misbehaving("quote", 400, "permanent")


class WebhookFailureLogTest(ProviderFailureLogBase):
    def provider(self, url):
        return {"type": "webhook", "url": url + "/sms", "token_env": "WH_TOKEN", "signing_secret_env": "WH_SIGN"}

    def test_statuses_timeouts_and_refusals(self):
        self.statuses_then_clean()

    def test_an_echoed_request(self):
        self.misbehaving("echo", 400, "permanent")

    def test_a_quoted_message(self):
        self.misbehaving("quote", 400, "permanent")


# 4. TLS ----------------------------------------------------------------------------------------------------
class TlsFailureLogTest(FailureLogTest):
    def configure(self, cfg):
        cfg = super().configure(cfg)
        self.certs = Certs(self.tmp)
        cert, key = self.certs.leaf("first")
        self.cert_path, self.key_path = os.path.join(self.tmp, "server.pem"), os.path.join(self.tmp, "server.key")
        install(cert, self.cert_path)
        install(key, self.key_path)
        self.cafile = self.certs.ca
        cfg["tls"] = {"cert": self.cert_path, "key": self.key_path}
        return cfg

    def test_failed_handshakes_and_a_refused_reload(self):
        secrets = key_body(self.key_path)
        # Plain HTTP, bytes that are no TLS, a client that trusts another CA.
        for raw in (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\x00\x05garbage" + b"\x00" * 64):
            with socket.create_connection(("127.0.0.1", self.otpd.port), timeout=5) as s:
                s.sendall(raw)
                try:
                    s.recv(100)
                except OSError:
                    pass
        other = ssl.create_default_context()
        with self.assertRaises(ssl.SSLError):
            with socket.create_connection(("127.0.0.1", self.otpd.port), timeout=5) as raw:
                other.wrap_socket(raw, server_hostname="127.0.0.1")
        self.assertEqual(self.otpd.call("GET", "/healthz", auth=None)[0], 200)  # still serving
        # A key that is not the certificate's, on SIGHUP: refused, the old pair kept.
        install(self.certs.leaf("other")[1], self.key_path)
        self.otpd.kill(signal.SIGHUP)
        line = self.wait_event("tls.reload_refused")[0]
        self.assertEqual(line["level"], "error")
        self.assertIn("tls.key", line["msg"])
        self.assertEqual(self.otpd.call("GET", "/healthz", auth=None)[0], 200)
        self.assertEqual(self.otpd.stop(), 0)
        log = self.otpd.log()
        for s in secrets + key_body(self.key_path):
            self.assertNotIn(s, log)
        self.assert_clean()
