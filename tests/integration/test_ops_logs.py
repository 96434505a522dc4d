"""Logs (issue 12): the `log` config (json or text, a level that SIGHUP
changes), structured event lines (time, level, event, request id, rule,
outcome), X-Request-Id honoured when sane, generated otherwise and echoed on
every answer, provider failures logged with the provider's status, and never
a code, a key or a credential in the log."""
import http.client
import json
import os
import re
import signal
import socket
import time

from harness import API_KEY, OTHER_KEY, SECRET, OtpdTest, code_of, wait_until

P = "+919812345678"
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
GENERATED_RE = re.compile(r"^[0-9a-f]{32}$")


def json_lines(text):
    """Every line of otpd's log as a parsed object; fails on any line that is
    not one JSON object."""
    out = []
    for line in text.splitlines():
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise AssertionError("not an object: %r" % line)
        out.append(obj)
    return out


class LogTest(OtpdTest):
    log_conf = {"format": "json", "level": "info"}

    def configure(self, cfg):
        cfg["log"] = dict(self.log_conf)
        return cfg

    def lines(self):
        return json_lines(self.otpd.log())

    def raw_call(self, method, path, headers, body=b""):
        """One request with headers as given (a name may repeat); returns
        (status, list of X-Request-Id values of the answer)."""
        c = http.client.HTTPConnection("127.0.0.1", self.otpd.port, timeout=10)
        try:
            c.putrequest(method, path, skip_accept_encoding=True)
            for k, v in headers:
                c.putheader(k, v)
            if body:
                c.putheader("Content-Length", str(len(body)))
            c.endheaders(body or None)
            r = c.getresponse()
            r.read()
            return r.status, r.headers.get_all("X-Request-Id") or []
        finally:
            c.close()

    def line_of(self, rid):
        """The one line of request rid's answer (other events of the request,
        a Redis connection's warning say, carry its id too); waits for it."""
        def find():
            found = [l for l in self.lines() if l.get("request_id") == rid and "method" in l]
            return found or None
        found = wait_until(find, what="the log line of request %s" % rid)
        self.assertEqual(len(found), 1, found)
        return found[0]


class JsonLinesTest(LogTest):
    limits = [{"name": "phone_1", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1h"}]

    def test_every_line_parses_and_carries_the_fields(self):
        st, h, body = self.otpd.call("POST", "/v1/otp", {"phone": P}, headers={"X-Request-Id": "req-issue-1"})
        self.assertEqual(st, 202, body)
        st, h2, p = self.otpd.call("POST", "/v1/otp", {"phone": P}, headers={"X-Request-Id": "req-issue-2"})
        self.assertEqual((st, p["error"], p["reason"]), (429, "rate_limited", "phone_1"))
        st, _, p = self.otpd.call("POST", "/v1/otp/verify", {"phone": P, "code": "000000"},
                                  headers={"X-Request-Id": "req-verify-1"})
        self.assertIn(st, (200, 422), p)

        acc = self.line_of("req-issue-1")
        self.assertEqual((acc["event"], acc["level"], acc["status"], acc["outcome"]),
                         ("issue.accepted", "info", 202, "ok"))
        self.assertEqual((acc["method"], acc["path"], acc["caller"]), ("POST", "/v1/otp", "login-web"))
        self.assertNotIn("rule", acc)
        ref = self.line_of("req-issue-2")
        self.assertEqual((ref["event"], ref["status"], ref["outcome"], ref["rule"]),
                         ("issue.refused", 429, "rate_limited", "phone_1"))
        ver = self.line_of("req-verify-1")
        self.assertEqual(ver["event"], "verify.verified" if st == 200 else "verify.refused")
        self.assertEqual(ver["outcome"], "ok" if st == 200 else "invalid_code")

        lines = self.lines()
        self.assertTrue(any(l["event"] == "otpd.started" for l in lines))
        for l in lines:
            self.assertRegex(l["time"], TIME_RE)
            self.assertIn(l["level"], ("debug", "info", "warn", "error"))
            self.assertTrue(l["event"], l)
            self.assertIsInstance(l["msg"], str)
            # At info, the harness's /healthz polls (debug) are not written.
            self.assertNotEqual(l.get("path"), "/healthz", l)

    def test_a_hostile_request_id_is_replaced_and_the_line_stays_json(self):
        # Sane but awkward: quotes and backslashes are printable; JSON escapes them.
        awkward = 'a"b\\c{}'
        st, ids = self.raw_call("GET", "/v1/otp/" + "0" * 32, [("X-Request-Id", awkward),
                                                             ("Authorization", "Bearer " + API_KEY)])
        self.assertEqual((st, ids), (404, [awkward]))
        self.assertEqual(self.line_of(awkward)["status"], 404)


class RequestIdTest(LogTest):
    def test_honoured_echoed_and_logged(self):
        rid = "9f3c1e2a-7b4d-4c1e-9a2b-0123456789ab"
        st, h, _ = self.otpd.call("POST", "/v1/otp", {"phone": P}, headers={"X-Request-Id": rid})
        self.assertEqual(st, 202)
        self.assertEqual(h["x-request-id"], rid)
        self.assertEqual(self.line_of(rid)["event"], "issue.accepted")

    def test_generated_when_absent_and_each_its_own(self):
        st, h, _ = self.otpd.call("POST", "/v1/otp", {"phone": P})
        st2, h2, _ = self.otpd.call("POST", "/v1/otp", {"phone": "+919812345679"})
        self.assertEqual((st, st2), (202, 202))
        self.assertRegex(h["x-request-id"], GENERATED_RE)
        self.assertRegex(h2["x-request-id"], GENERATED_RE)
        self.assertNotEqual(h["x-request-id"], h2["x-request-id"])
        self.assertEqual(self.line_of(h["x-request-id"])["status"], 202)
        self.assertEqual(self.line_of(h2["x-request-id"])["status"], 202)

    def test_bounds_on_what_is_honoured(self):
        longest = "r" * 128
        st, ids = self.raw_call("GET", "/healthz", [("X-Request-Id", longest)])
        self.assertEqual((st, ids), (200, [longest]))
        one = "x"
        self.assertEqual(self.raw_call("GET", "/healthz", [("X-Request-Id", one)]), (200, [one]))
        for bad in ["r" * 129, "has space", "tab\there", "caf\xe9", ""]:
            st, ids = self.raw_call("GET", "/healthz", [("X-Request-Id", bad)])
            self.assertEqual(st, 200)
            self.assertEqual(len(ids), 1, (bad, ids))
            self.assertRegex(ids[0], GENERATED_RE, repr(bad))
        # Given twice: neither is trusted.
        st, ids = self.raw_call("GET", "/healthz", [("X-Request-Id", "one"), ("X-Request-Id", "two")])
        self.assertEqual(len(ids), 1, ids)
        self.assertRegex(ids[0], GENERATED_RE)

    def test_echoed_on_the_http_layers_own_errors(self):
        big = b'{"phone": "' + b"1" * 5000 + b'"}'
        cases = [
            ("GET", "/no/such/route", [], b"", 404),
            ("DELETE", "/v1/otp", [], b"", 405),
            ("POST", "/v1/otp", [("Content-Type", "application/json")], b'{"phone":"%s"}' % P.encode(), 401),
            ("POST", "/v1/otp", [("Authorization", "Bearer " + API_KEY), ("Content-Type", "application/json")],
             big, 413),
            ("POST", "/v1/otp", [("Authorization", "Bearer " + API_KEY), ("Content-Type", "text/plain")],
             b"x", 415),
            ("POST", "/v1/otp", [("Authorization", "Bearer " + API_KEY), ("Content-Type", "application/json")],
             b"[]", 400),
        ]
        for i, (method, path, headers, body, want) in enumerate(cases):
            rid = "err-%d" % i
            st, ids = self.raw_call(method, path, headers + [("X-Request-Id", rid)], body)
            self.assertEqual((st, ids), (want, [rid]), (method, path))
            line = self.line_of(rid)
            self.assertEqual(line["status"], want)
            self.assertEqual(line["event"], "issue.refused" if path == "/v1/otp" and want != 405 else
                             "http.request")
        self.assertEqual(self.line_of("err-2")["outcome"], "unauthorized")
        self.assertEqual(self.line_of("err-3")["outcome"], "payload_too_large")


ADMIN_KEY = "key-ops-admin-0123456789ab"


class AdminDeleteTest(LogTest):
    env = {"OTPD_KEY_OPS": ADMIN_KEY}

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
        return cfg

    def test_204_echoes_and_logs(self):
        st, h, out = self.otpd.call("POST", "/v1/admin/blocks", {"match": {"phone_prefix": "+9199988"},
                                                                  "expires_in": "1h", "note": "bot network"},
                                    auth=ADMIN_KEY, headers={"X-Request-Id": "adm-add"})
        self.assertEqual((st, h["x-request-id"]), (201, "adm-add"), out)
        added = [l for l in self.lines() if l["event"] == "admin.block_added"]
        self.assertEqual(len(added), 1, added)
        self.assertEqual((added[0]["request_id"], added[0]["admin"], added[0]["id"]), ("adm-add", "ops", out["id"]))
        st, h, _ = self.otpd.call("DELETE", "/v1/admin/blocks/" + out["id"], auth=ADMIN_KEY,
                                  headers={"X-Request-Id": "adm-del"})
        self.assertEqual((st, h.get("x-request-id")), (204, "adm-del"))
        line = self.line_of("adm-del")
        self.assertEqual((line["status"], line["caller"], line["outcome"]), (204, "ops", "ok"))
        self.assertTrue(any(l["event"] == "admin.block_removed" and l["request_id"] == "adm-del"
                            for l in self.lines()))
        self.assertEqual(self.otpd.stop(), 0)
        self.assertNotIn(ADMIN_KEY, self.otpd.log())


class ProviderFailureTest(LogTest):
    env = {"TWILIO_SID": "AC0123456789abcdef0123456789abcdef", "TWILIO_TOKEN": "twilio-token-secret"}

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["provider"] = {"type": "twilio", "base_url": self.fake.url, "from": "+15005550006",
                           "account_sid_env": "TWILIO_SID", "auth_token_env": "TWILIO_TOKEN"}
        return cfg

    def provider_lines(self, n):
        return wait_until(lambda: (lambda f: f if len(f) >= n else None)(
            [l for l in self.lines() if l["event"] == "provider.failed"]), what="%d provider.failed lines" % n)

    def test_a_401_is_an_error_line_with_the_status(self):
        self.fake.control(status=401)
        st, h, body = self.otpd.issue(P)
        self.assertEqual(st, 202, body)
        line = self.provider_lines(1)[0]
        self.assertEqual((line["level"], line["status"], line["outcome"], line["provider"]),
                         ("error", 401, "permanent", "twilio"))
        self.assertEqual(line["message_id"], body["id"])
        self.assertIn("credentials", line["msg"])
        # The request that queued it was answered long before: no request id.
        self.assertNotIn("request_id", line)
        self.assertEqual(len(self.fake.requests()), 1)  # permanent: never retried
        text = self.fake.requests()[0]["form"]["Body"]
        self.assertEqual(self.otpd.stop(), 0)
        log = self.otpd.log()
        self.assertNotIn("twilio-token-secret", log)
        self.assertNotIn(text, log)
        self.assertNotIn(code_of(text), log)

    def test_a_503_is_a_warning_then_retried(self):
        self.fake.control(statuses=[503, 0])
        st, _, body = self.otpd.issue(P)
        self.assertEqual(st, 202)
        line = self.provider_lines(1)[0]
        self.assertEqual((line["level"], line["status"], line["outcome"]), ("warn", 503, "transient"))
        self.assertEqual(line["attempt"], 1)


    def test_a_429_pauses_and_says_so(self):
        self.fake.control(statuses=[429, 0], retry_after=1)
        st, _, body = self.otpd.issue(P)
        self.assertEqual(st, 202)
        line = self.provider_lines(1)[0]
        self.assertEqual((line["level"], line["status"], line["outcome"]), ("warn", 429, "transient"))
        paused = [l for l in self.lines() if l["event"] == "provider.paused"]
        self.assertEqual(len(paused), 1, paused)
        self.assertEqual(paused[0]["status"], 429)
        self.assertGreaterEqual(paused[0]["pause_ms"], 1000)


class NoSecretsTest(LogTest):
    log_conf = {"format": "json", "level": "debug"}

    def test_no_code_key_or_secret_at_debug(self):
        # Each code by its own message id: the two may reach the provider in either order.
        codes = [self.issue_and_code(phone)[1] for phone in (P, "+919812345679")]
        msgs = self.wait_messages(2)
        # Every path a code or a key travels: a wrong guess, a right one,
        # another caller's key, a key that is wrong, an Idempotency replay.
        wrong = "%06d" % ((int(codes[0]) + 1) % 1000000)
        self.assertEqual(self.otpd.verify(P, wrong)[0], 422)
        self.assertEqual(self.otpd.verify(P, codes[0])[0], 200)
        self.assertEqual(self.otpd.verify("+919812345679", codes[1], auth=OTHER_KEY)[0], 404)
        self.assertEqual(self.otpd.verify("+919812345679", codes[1], auth=API_KEY + "x")[0], 401)
        for _ in range(2):
            self.otpd.call("POST", "/v1/otp/verify", {"phone": "+919812345679", "code": codes[1]},
                           headers={"Idempotency-Key": "idem-1"})
        self.assertEqual(self.otpd.stop(), 0)
        log = self.otpd.log()
        self.assertTrue(json_lines(log))
        for code in codes + [wrong]:
            self.assertRegex(code, r"^\d{6}$")
            self.assertNotIn(code, log)
        for s in (API_KEY, OTHER_KEY, SECRET, API_KEY + "x"):
            self.assertNotIn(s, log)
        for m in msgs:
            self.assertNotIn(m["text"], log)


class LogFloodTest(LogTest):
    """A flood of 401s, 403s and 404s: of each kind (status, outcome,
    route), the first answer is logged in full at once, the others of its
    10 s window at debug only, and one info line per kind and window
    (http.repeated) carries their count. Nothing logs the key presented."""

    BAD = "bad-key-flood-0123456789abcdef"
    N = 500

    def flood(self, n, method, path, key, want):
        c = http.client.HTTPConnection("127.0.0.1", self.otpd.port, timeout=10)
        try:
            for _ in range(n):
                c.request(method, path, b'{"phone":"%s"}' % P.encode(),
                          {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                self.assertEqual(r.status, want)
        finally:
            c.close()

    def counted(self, lines, status, route):
        """(request lines of the kind, the sum of its summaries' counts, the number of summaries)."""
        full = [l for l in lines if l.get("status") == status and "method" in l and l["level"] == "info"]
        summed = [l for l in lines if l["event"] == "http.repeated" and l["status"] == status
                  and l["route"] == route]
        return len(full), sum(l["count"] for l in summed), len(summed)

    def test_a_flood_is_written_in_summary(self):
        t0 = time.monotonic()
        # The first of a kind is written at once, not at the window's end.
        st, h = self.raw_call("POST", "/v1/otp", [("Authorization", "Bearer " + self.BAD),
                                                ("Content-Type", "application/json"), ("X-Request-Id", "first-401")])
        self.assertEqual(st, 401)
        first = self.line_of("first-401")
        self.assertEqual((first["level"], first["outcome"]), ("info", "unauthorized"))
        self.assertLess(time.monotonic() - t0, 5.0)
        self.flood(self.N - 1, "POST", "/v1/otp", self.BAD, 401)
        self.flood(50, "GET", "/no/such/route", API_KEY, 404)
        self.flood(50, "GET", "/v1/admin/blocks", API_KEY, 403)
        windows = int((time.monotonic() - t0) / 10) + 2
        self.assertEqual(self.otpd.stop(), 0)  # the last windows' summaries are written at the stop
        lines = self.lines()
        for status, route, n in ((401, "issue", self.N), (404, "none", 50), (403, "admin_blocks", 50)):
            full, summed, summaries = self.counted(lines, status, route)
            self.assertEqual(full + summed, n, (status, full, summed))
            self.assertLessEqual(full + summaries, 2 * windows, (status, full, summaries))
        repeated = [l for l in lines if l["event"] == "http.repeated" and l["status"] == 401]
        self.assertEqual((repeated[0]["outcome"], repeated[0]["window_s"]), ("unauthorized", 10))
        self.assertLess(len(lines), 60, "the flood grew the log")
        self.assertNotIn(self.BAD, self.otpd.log())
        self.assertNotIn(API_KEY, self.otpd.log())


class LevelTest(LogTest):
    log_conf = {"format": "json", "level": "warn"}

    def test_level_filters_and_sighup_changes_it(self):
        rid = "at-warn"
        self.assertEqual(self.otpd.call("POST", "/v1/otp", {"phone": P}, headers={"X-Request-Id": rid})[0], 202)
        # A line written after the answer proves the one before was judged.
        self.fake.control(status=401)
        self.otpd.issue("+919812345679")
        wait_until(lambda: any(l["event"] == "provider.failed" for l in self.lines()), what="the error line")
        lines = self.lines()
        self.assertEqual([l for l in lines if l.get("request_id") == rid and "method" in l], [])
        self.assertEqual({l["level"] for l in lines} - {"warn", "error"}, set(), lines)

        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["log"]["level"] = "debug"
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        reloaded = wait_until(lambda: [l for l in self.lines() if l["event"] == "config.reload"] or None,
                              what="the reload line")
        self.assertEqual(reloaded[0]["log_level"], "debug")
        st, ids = self.raw_call("GET", "/healthz", [("X-Request-Id", "probe-1")])
        self.assertEqual(st, 200)
        probe = self.line_of("probe-1")
        self.assertEqual((probe["level"], probe["event"], probe["path"]), ("debug", "http.request", "/healthz"))

        cfg["log"]["level"] = "warn"
        cfg["log"]["format"] = "text"
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        # The format waits for a restart, and the log says so (in JSON still).
        restart = wait_until(lambda: [l for l in self.lines() if l["event"] == "config.restart_needed"] or None,
                             what="the restart-needed line")
        self.assertEqual((restart[0]["level"], restart[0]["key"]), ("warn", "log.format"))
        # A request's line is written before its answer leaves: no wait needed.
        self.assertEqual(self.otpd.call("GET", "/healthz", headers={"X-Request-Id": "probe-2"}, auth=None)[0], 200)
        self.assertEqual(self.otpd.call("POST", "/v1/otp", {"phone": "+919812345670"},
                                        headers={"X-Request-Id": "info-2"})[0], 202)
        self.assertEqual(self.otpd.stop(), 0)
        lines = self.lines()  # still JSON: the format did not change
        self.assertEqual([l for l in lines if l.get("request_id") in ("probe-2", "info-2")], [])


class TextFormatTest(OtpdTest):
    """The default: the readable form plus key=value pairs."""

    def test_text_line_has_event_request_id_and_fields(self):
        st, h, _ = self.otpd.call("POST", "/v1/otp", {"phone": P}, headers={"X-Request-Id": "txt-1"})
        self.assertEqual(st, 202)
        st, _, _ = self.otpd.call("GET", "/v1/otp/" + "0" * 32, headers={"X-Request-Id": 'q"uote'})
        self.assertEqual(st, 404)

        def line(rid):
            return wait_until(lambda: [l for l in self.otpd.log().splitlines() if rid in l] or None,
                              what="the line of %s" % rid)[0]
        l1 = line("event=issue.accepted request_id=txt-1")
        self.assertRegex(l1, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info POST /v1/otp 202 "
                             r"event=issue\.accepted request_id=txt-1 method=POST path=/v1/otp status=202 "
                             r"outcome=ok caller=login-web duration_ms=\d+$")
        l2 = line(r'event=http.request request_id="q\"uote"')
        self.assertIn("status=404 outcome=not_found", l2)


FORGED = "2024-05-01T00:00:00.000Z info admin.block_removed forged=1"
LINE_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (debug|info|warn|error) ")


class InjectionTest(OtpdTest):
    """A path with a percent-encoded line break (libmicrohttpd decodes it)
    or raw control bytes must not forge a line: in the text form each is
    \\xHH in the message and in the path field; in JSON each line parses,
    with no raw control or C1 character in it."""

    log_format = "text"
    # Percent-encoded: a newline and a forged line, a carriage return, an
    # escape sequence, DEL, C1 NEL and CSI as UTF-8, a line separator.
    PATHS = ["/v1/otp/x%0a" + FORGED.replace(" ", "%20"), "/v1/otp/y%0d%0a%1b[2J%7f", "/v1/otp/z%c2%85%c2%9b%e2%80%a8"]
    # Raw in the request line: an escape byte, C1 CSI as UTF-8, a lone high byte.
    RAW = b"/v1/otp/w\x1b[31m\xc2\x9b\xff"

    def configure(self, cfg):
        cfg["log"] = {"format": self.log_format, "level": "debug"}
        return cfg

    def send(self):
        for i, path in enumerate(self.PATHS):
            st, _, _ = self.otpd.call("GET", path, headers={"X-Request-Id": "inj-%d" % i})
            self.assertEqual(st, 404, path)
        with socket.create_connection(("127.0.0.1", self.otpd.port), timeout=10) as s:
            s.sendall(b"GET " + self.RAW + b" HTTP/1.1\r\nHost: x\r\nX-Request-Id: inj-raw\r\n"
                      b"Authorization: Bearer " + API_KEY.encode() + b"\r\nConnection: close\r\n\r\n")
            self.assertTrue(s.recv(64).startswith(b"HTTP/1.1 404"))
        self.assertEqual(self.otpd.stop(), 0)
        with open(self.otpd.log_path, "rb") as f:
            return f.read()

    def test_lines_cannot_be_forged(self):
        raw = self.send()
        for line in raw.split(b"\n")[:-1]:
            self.assertRegex(line.decode("utf-8"), LINE_RE)
            self.assertFalse(re.search(rb"[\x00-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]", line), line)
        text = raw.decode()
        self.assertNotIn("\n" + FORGED, text)
        self.assertIn(" GET /v1/otp/x\\x0a" + FORGED + " 404 event=http.request request_id=inj-0 ", text)
        self.assertIn(" GET /v1/otp/y\\x0d\\x0a\\x1b[2J\\x7f 404 ", text)
        self.assertIn(" GET /v1/otp/z\\xc2\\x85\\xc2\\x9b\\xe2\\x80\\xa8 404 ", text)
        self.assertIn(" GET /v1/otp/w\\x1b[31m\\xc2\\x9b\\xff 404 ", text)


class JsonInjectionTest(InjectionTest):
    log_format = "json"

    def test_lines_cannot_be_forged(self):
        raw = self.send()
        self.assertFalse(re.search(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]", raw))
        lines = {l.get("request_id"): l for l in json_lines(raw.decode()) if "method" in l}
        self.assertEqual(lines["inj-0"]["path"], "/v1/otp/x\n" + FORGED)
        self.assertEqual(lines["inj-1"]["path"], "/v1/otp/y\r\n\x1b[2J\x7f")
        self.assertEqual(lines["inj-2"]["path"], "/v1/otp/z\x85\x9b\u2028")
        self.assertEqual(lines["inj-2"]["msg"], "GET /v1/otp/z\x85\x9b\u2028 404")
        self.assertEqual(lines["inj-raw"]["path"], "/v1/otp/w\x1b[31m\x9b\ufffd")


class LogConfigTest(LogTest):
    def check(self, log):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["log"] = log
        path = os.path.join(self.tmp, "check.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return self.run_bin("otpd", ["--check", "-c", path])

    def test_log_keys_are_checked(self):
        for log in ({}, {"format": "text"}, {"level": "error"}, {"format": "json", "level": "debug"}):
            r = self.check(log)
            self.assertEqual(r.returncode, 0, (log, r.stderr))
        cases = [({"format": "xml"}, 'log.format: "xml" is not one of the allowed values'),
                 ({"level": "verbose"}, 'log.level: "verbose" is not one of the allowed values'),
                 ({"colour": True}, "log.colour: unknown key"),
                 ("json", "log: must be an object")]
        for log, want in cases:
            r = self.check(log)
            self.assertEqual(r.returncode, 1, log)
            self.assertIn(want, r.stderr)
