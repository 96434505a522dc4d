"""The walking skeleton over HTTP: issue, SMS, verify, the contract's
errors, and what lands in the ledger."""
import subprocess
import urllib.error
import urllib.request

from harness import API_KEY, OTHER_KEY, OtpdTest, wait_until

PHONE = "+919812345678"


class IssueVerifyTest(OtpdTest):
    def test_issue_sms_wrong_right_reuse(self):
        body, code = self.issue_and_code(PHONE, device_id="dev-1", client_ip="203.0.113.7", purpose="login")
        self.assertEqual(len(body["id"]), 32)
        self.assertEqual(body["expires_in"], 300)
        self.assertRegex(code, r"^\d{6}$")
        wrong = "%06d" % ((int(code) + 1) % 1000000)

        st, _, p = self.otpd.verify(PHONE, wrong, purpose="login")
        self.assertEqual(st, 422, p)
        self.assertEqual(p["error"], "invalid_code")
        self.assertEqual(p["attempts_left"], 2)
        st, _, p = self.otpd.verify(PHONE, code, purpose="login")
        self.assertEqual((st, p), (200, {"verified": True, "verification_id": body["verification_id"]}))
        st, _, p = self.otpd.verify(PHONE, code, purpose="login")
        self.assertEqual(st, 404, p)
        self.assertEqual(p["error"], "no_active_code")

        # 'sent' is written once the provider has answered: wait for it.
        st, _, p = wait_until(lambda: (lambda r: r if r[2].get("status") not in ("queued", "sending") else None)(
            self.otpd.call("GET", "/v1/otp/" + body["id"])), what="the status past sending")
        self.assertEqual((st, p), (200, {"id": body["id"], "status": "sent", "provider": "default",
                                         "attempts": [{"provider": "default", "cause": "accepted"}]}))

        # The ledger: every decision, the message, the send and the verification
        # (written after the answers: wait for the last of each).
        wait_until(lambda: len(self.otpd.rows("SELECT * FROM requests")) == 4, what="4 request rows")
        wait_until(lambda: self.otpd.rows("SELECT status FROM verifications")[0]["status"] == "verified",
                   what="the verification row verified")
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages")[0]["state"] == "sent", what="sent")
        reqs = self.otpd.rows("SELECT kind, decision, http_status, api_key, device_id, client_ip FROM requests "
                              "ORDER BY id")
        self.assertEqual([(r["kind"], r["decision"], r["http_status"]) for r in reqs],
                         [("issue", "accepted", 202), ("verify", "invalid_code", 422), ("verify", "verified", 200),
                          ("verify", "no_active_code", 404)])
        self.assertEqual(reqs[0]["api_key"], "login-web")
        self.assertEqual((reqs[0]["device_id"], reqs[0]["client_ip"]), ("dev-1", "203.0.113.7"))
        self.assertEqual(self.otpd.rows("SELECT purpose FROM requests ORDER BY id")[0]["purpose"], "login")
        msg = self.otpd.rows("SELECT * FROM messages")[0]
        self.assertEqual((msg["id"], msg["state"], msg["phone"], msg["attempts"]), (body["id"], "sent", PHONE, 1))
        sends = self.otpd.rows("SELECT * FROM sends")
        self.assertEqual(len(sends), 1)
        self.assertEqual((sends[0]["http_status"], sends[0]["outcome"], sends[0]["provider"]), (200, "sent", "webhook"))
        self.assertGreaterEqual(sends[0]["latency_ms"], 0)
        events = [e["state"] for e in self.otpd.rows("SELECT state FROM message_events ORDER BY id")]
        self.assertEqual(events, ["queued", "sending", "sent"])
        ver = self.otpd.rows("SELECT * FROM verifications")[0]
        self.assertEqual((ver["status"], ver["wrong"], ver["phone"]), ("verified", 1, PHONE))

        # The code is nowhere but in the SMS.
        self.otpd.stop()
        con = self.otpd.db()
        dump = "\n".join(con.iterdump())
        con.close()
        self.assertNotIn(code, dump)
        self.assertNotIn(code, self.otpd.log())

    def test_issue_while_live_resends_same_code(self):
        first, code1 = self.issue_and_code(PHONE)
        second, code2 = self.issue_and_code(PHONE)
        self.assertNotEqual(first["id"], second["id"])
        self.assertEqual(code1, code2)
        self.assertLessEqual(second["expires_in"], first["expires_in"])
        self.assertEqual(len(self.otpd.rows("SELECT * FROM verifications")), 1)
        # Asking again buys no guesses: the attempt count carries over.
        wrong = "%06d" % ((int(code1) + 1) % 1000000)
        self.assertEqual(self.otpd.verify(PHONE, wrong)[2]["attempts_left"], 2)
        self.issue_and_code(PHONE)
        self.assertEqual(self.otpd.verify(PHONE, wrong)[2]["attempts_left"], 1)

    def test_max_attempts_kills_the_code(self):
        _, code = self.issue_and_code(PHONE)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        lefts = [self.otpd.verify(PHONE, wrong)[2].get("attempts_left") for _ in range(3)]
        self.assertEqual(lefts, [2, 1, 0])
        st, _, p = self.otpd.verify(PHONE, code)
        self.assertEqual((st, p["error"]), (404, "no_active_code"))
        # The row is updated after each answer: wait for the third wrong guess.
        row = wait_until(lambda: (lambda r: r if r[0]["wrong"] == 3 else None)(
            self.otpd.rows("SELECT status, wrong FROM verifications")), what="3 wrong guesses in the ledger")
        self.assertEqual(row[0]["status"], "exhausted")
        # The next issue starts a new verification with a fresh code.
        _, code2 = self.issue_and_code(PHONE)
        self.assertEqual(self.otpd.verify(PHONE, code2)[0], 200)
        self.assertEqual(len(self.otpd.rows("SELECT * FROM verifications")), 2)

    def test_malformed_guess_does_not_count(self):
        _, code = self.issue_and_code(PHONE)
        for guess in ("12345", "1234567", "12a456", "", " 12345"):
            st, _, p = self.otpd.verify(PHONE, guess)
            self.assertEqual((st, p["error"]), (400, "invalid_request"), guess)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        self.assertEqual(self.otpd.verify(PHONE, wrong)[2]["attempts_left"], 2)
        # Every verify lands in the ledger, the malformed ones too (without
        # the guess); 4xx rows of one key and second are one row with a count.
        q = "SELECT decision, count FROM requests WHERE kind = 'verify' ORDER BY id"
        rows = wait_until(lambda: (lambda r: r if sum(x["count"] for x in r) == 6 else None)(self.otpd.rows(q)),
                          what="6 verifies counted")
        self.assertEqual([r["decision"] for r in rows for _ in range(r["count"])],
                         ["invalid_request"] * 5 + ["invalid_code"])

    def test_accepted_only_when_the_rows_commit(self):
        # Make every message insert fail inside SQLite, as a full disk would.
        con = self.otpd.db()
        con.execute("CREATE TRIGGER no_messages BEFORE INSERT ON messages BEGIN SELECT RAISE(ABORT, 'disk'); END")
        con.commit()
        con.close()
        st, h, p = self.otpd.issue(PHONE)
        self.assertEqual((st, p["error"]), (503, "ledger_unavailable"), p)
        self.assertEqual(h["retry-after"], "1")
        self.assertEqual(self.otpd.rows("SELECT * FROM messages"), [])
        self.assertEqual(self.otpd.rows("SELECT * FROM verifications"), [])  # the group rolled back whole
        wait_until(lambda: self.otpd.rows("SELECT decision FROM requests"), what="the refusal row")
        self.assertEqual([r["decision"] for r in self.otpd.rows("SELECT decision FROM requests")],
                         ["ledger_unavailable"])
        con = self.otpd.db()
        con.execute("DROP TRIGGER no_messages")
        con.commit()
        con.close()
        body, _ = self.issue_and_code(PHONE)
        # The refused issue sent nothing: the provider, which has since seen
        # the accepted one, saw only it.
        self.assertEqual([m["id"] for m in self.fake.messages()], [body["id"]])
        # The verification Redis started for the refused issue lives on; its row comes with this message.
        self.assertEqual(len(self.otpd.rows("SELECT * FROM verifications")), 1)

    def test_verify_without_code(self):
        st, _, p = self.otpd.verify("+14155550100", "123456")
        self.assertEqual((st, p["error"]), (404, "no_active_code"))

    def test_status_only_for_the_issuing_key(self):
        body, _ = self.issue_and_code(PHONE)
        self.assertEqual(self.otpd.call("GET", "/v1/otp/" + body["id"], auth=OTHER_KEY)[0], 404)
        self.assertEqual(self.otpd.call("GET", "/v1/otp/" + "0" * 32)[0], 404)
        self.assertEqual(self.otpd.call("GET", "/v1/otp/not-an-id")[0], 404)
        self.assertEqual(self.otpd.call("GET", "/v1/otp/" + body["id"], auth=None)[0], 401)


class ContractErrorsTest(OtpdTest):
    def problem(self, resp, status, error):
        st, h, p = resp
        self.assertEqual(st, status, p)
        self.assertEqual(h["content-type"], "application/problem+json")
        self.assertEqual((p["status"], p["error"]), (status, error))
        self.assertTrue(p["type"] and p["title"] and p["detail"])
        return p

    def test_auth(self):
        self.problem(self.otpd.issue(PHONE, auth=None), 401, "unauthorized")
        self.problem(self.otpd.issue(PHONE, auth="key-login-web-012345678"), 401, "unauthorized")
        self.problem(self.otpd.issue(PHONE, auth=API_KEY + "x"), 401, "unauthorized")
        self.problem(self.otpd.call("POST", "/v1/otp", {"phone": PHONE}, auth=None,
                                    headers={"Authorization": "Basic " + API_KEY}), 401, "unauthorized")
        self.assertEqual(self.otpd.issue(PHONE, auth=OTHER_KEY)[0], 202)

    def test_body_limits_and_media_type(self):
        big = {"phone": PHONE, "device_id": "x" * 5000}
        self.problem(self.otpd.call("POST", "/v1/otp", big), 413, "payload_too_large")
        chunked = urllib.request.Request("http://127.0.0.1:%d/v1/otp" % self.otpd.port,
                                         data=iter([b'{"phone":"' + b"1" * 3000, b"2" * 3000 + b'"}']),
                                         headers={"Authorization": "Bearer " + API_KEY,
                                                  "Content-Type": "application/json",
                                                  "Transfer-Encoding": "chunked"}, method="POST")
        try:
            urllib.request.urlopen(chunked, timeout=5)
            self.fail("a chunked 6 KB body was accepted")
        except urllib.error.HTTPError as e:
            self.assertEqual(e.code, 413)
        self.problem(self.otpd.call("POST", "/v1/otp", raw=b'{"phone":"+919812345678"}',
                                    headers={"Content-Type": "text/plain"}), 415, "unsupported_media_type")
        self.problem(self.otpd.call("POST", "/v1/otp", raw=b'{"phone":"+919812345678"}'), 415,
                     "unsupported_media_type")
        for ctype in ("application/jsonp", "application/json-seq", "application/json+x"):
            self.problem(self.otpd.call("POST", "/v1/otp", raw=b'{"phone":"+919812345678"}',
                                        headers={"Content-Type": ctype}), 415, "unsupported_media_type")
        st, _, _ = self.otpd.call("POST", "/v1/otp", raw=b'{"phone":"+919812345678"}',
                                  headers={"Content-Type": "application/json; charset=utf-8"})
        self.assertEqual(st, 202)

    def test_bad_bodies(self):
        cases = [
            ({"phone": "919812345678"}, "invalid_phone"),
            ({"phone": "+0919812345678"}, "invalid_phone"),
            ({"phone": "+91 98123 45678"}, "invalid_phone"),
            ({"phone": "+1234567890123456"}, "invalid_phone"),
            ({}, "invalid_request"),
            ({"phone": PHONE, "extra": 1}, "invalid_request"),
            ({"phone": PHONE, "purposes": "login"}, "invalid_request"),
            ({"phone": PHONE, "phone_2": PHONE}, "invalid_request"),
            ({"phone": 919812345678}, "invalid_request"),
            ({"phone": PHONE, "device_id": ""}, "invalid_request"),
            ({"phone": PHONE, "device_id": "d" * 129}, "invalid_request"),
            ({"phone": PHONE, "device_id": "tab\there"}, "invalid_request"),
            ({"phone": PHONE, "purpose": "p" * 33}, "invalid_request"),
            ({"phone": PHONE, "client_ip": "300.1.2.3"}, "invalid_request"),
            ({"phone": PHONE, "client_ip": "2001:db8::g"}, "invalid_request"),
            ({"phone": PHONE, "client_ip": None}, "invalid_request"),
        ]
        for body, error in cases:
            self.problem(self.otpd.call("POST", "/v1/otp", body), 400, error)
        for raw in (b"", b"{", b"[]", b'"x"', b'{"phone":"+919812345678","phone":"+919812345679"}',
                    b'{"phone":"+91981234\\u00005678"}'):
            self.problem(self.otpd.call("POST", "/v1/otp", raw=raw, headers={"Content-Type": "application/json"}),
                         400, "invalid_request")
        self.problem(self.otpd.call("POST", "/v1/otp/verify", {"phone": PHONE}), 400, "invalid_request")
        self.problem(self.otpd.call("POST", "/v1/otp/verify", {"phone": PHONE, "code": 123456}), 400,
                     "invalid_request")
        self.problem(self.otpd.call("POST", "/v1/otp/verify", {"phone": "12", "code": "123456"}), 400,
                     "invalid_phone")
        # Bad input changes nothing: after a good issue has gone all the way
        # through, its row and its SMS are the only ones.
        body, _ = self.issue_and_code(PHONE)
        rows = wait_until(lambda: self.otpd.rows("SELECT decision, message_id FROM requests"), what="the row")
        self.assertEqual(rows, [{"decision": "accepted", "message_id": body["id"]}])
        self.assertEqual([m["id"] for m in self.fake.messages()], [body["id"]])

    def test_routes_and_methods(self):
        st, h, p = self.otpd.call("GET", "/v1/otp")
        self.problem((st, h, p), 405, "method_not_allowed")
        self.assertEqual(h["allow"], "POST")
        self.assertEqual(self.otpd.call("DELETE", "/healthz", auth=None)[0], 405)
        self.problem(self.otpd.call("GET", "/nope"), 404, "not_found")
        self.problem(self.otpd.call("GET", "/v1/otp/a/b"), 404, "not_found")

    def test_health_ready_metrics(self):
        self.assertEqual(self.otpd.call("GET", "/healthz", auth=None)[:1], (200,))
        st, _, p = self.otpd.call("GET", "/readyz", auth=None)
        self.assertEqual((st, p["status"]), (200, "ready"))
        self.issue_and_code(PHONE)
        # The depth is the fleet's, as the queue thread last saw it: it
        # reaches 0 once the message's end is written to Redis.
        wait_until(lambda: "otpd_queue_depth 0\n" in self.otpd.call("GET", "/metrics", auth=None)[2],
                   what="the queue to empty")
        st, h, text = self.otpd.call("GET", "/metrics", auth=None)
        self.assertEqual(st, 200)
        self.assertIn('otpd_requests_total{op="issue",decision="accepted"} 1\n', text)
        self.assertIn('otpd_requests_total{op="issue",decision="rate_limited"} 0\n', text)
        self.assertIn("otpd_queue_depth 0\n", text)
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        self.redis.stop()
        st, _, p = self.otpd.call("GET", "/readyz", auth=None)
        self.assertEqual((st, p["status"]), (503, "not_ready"))

    def test_secrets_never_logged(self):
        self.otpd.issue(PHONE, auth="wrong-key-000000000000")
        self.issue_and_code(PHONE)
        self.otpd.stop()
        log = self.otpd.log()
        for secret in (API_KEY, OTHER_KEY, "wrong-key-000000000000", "integration-secret"):
            self.assertNotIn(secret, log)


class LedgerFailureRefundTest(OtpdTest):
    """An issue refused because the ledger cannot commit gives back what it
    took: the queue slot and the cost reservation (one SMS of budget, one
    slot of queue here, so a leak of either refuses the next issue)."""

    def configure(self, cfg):
        cfg["cost"] = {"currency": "INR", "prices": {"*": 20}, "caps": [{"window": "1d", "max": 20}]}
        cfg["pacer"]["capacity"] = 1
        return cfg

    def test_refused_issue_gives_back_slot_and_cost(self):
        con = self.otpd.db()
        con.execute("CREATE TRIGGER no_messages BEFORE INSERT ON messages BEGIN SELECT RAISE(ABORT, 'disk'); END")
        con.commit()
        for _ in range(2):  # twice: a leak would show even if one refusal were free
            st, _, p = self.otpd.issue(PHONE)
            self.assertEqual((st, p["error"]), (503, "ledger_unavailable"), p)
        con.execute("DROP TRIGGER no_messages")
        con.commit()
        con.close()
        body, _ = self.issue_and_code(PHONE)
        # The budget is now spent by the one message that went out.
        st, _, p = self.otpd.issue("+14155550100")
        self.assertEqual((st, p["error"]), (503, "cost_cap"), p)
        q = "SELECT decision, http_status FROM requests ORDER BY id"
        rows = wait_until(lambda: (lambda r: r if len(r) == 4 else None)(self.otpd.rows(q)), what="4 rows")
        self.assertEqual([(r["decision"], r["http_status"]) for r in rows],
                         [("ledger_unavailable", 503)] * 2 + [("accepted", 202), ("cost_cap", 503)])
