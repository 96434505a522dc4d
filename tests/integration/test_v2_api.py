"""The Twilio Verify v2 surface over raw HTTP (src/http/http_v2.c, http_v2_ver.c, src/v2): Basic auth by a
caller's account SID and key or by an API key SID and its secret, and nothing else; services per account, each
change an admin-action row; verifications as otp issues with the service as the purpose (so codes never cross
services, and no /v1 purpose can name one), checks, cancel and approve; fields otpd does not implement refused by
name with nothing sent or taken (a RateLimits that names no rate limit of the service too); otpd's refusals in
Twilio's codes; Twilio's error shape for every answer of /v2.

Nothing here depends on where the wall clock falls: the rules' windows are an hour long and none is aligned, and
the one test that needs two different seconds sleeps past one."""
import base64
import http.client
import json
import re
import time
import urllib.parse

from harness import API_KEY, OTHER_KEY, OtpdTest, code_of, wait_until

ACCT = "AC" + "0123456789abcdef" * 2
SK = "SK" + "fedcba9876543210" * 2
SK_SECRET = "sk-secret-login-web-0123456789"
ACCT2 = "AC" + "89abcdef01234567" * 2
PARTNER_KEY = "key-partner-0123456789ab"
ADMIN_KEY = "key-ops-admin-0123456789ab"
PHONE = "+919812345678"
P2 = "+919812345679"
P3 = "+919812345670"
SID_RE = re.compile(r"^VA[0-9a-f]{32}$")
VE_RE = re.compile(r"^VE[0-9a-f]{32}$")
DATE_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
BASIC = 'Basic realm="Twilio API"'


def wrong_of(code):
    return "%0*d" % (len(code), (int(code) + 1) % 10 ** len(code))


class V2Test(OtpdTest):
    """login-web has a Twilio account (ACCT, its key, and an API key SK); partner another (ACCT2); login-app none."""
    env = {"OTPD_TW_SK": SK_SECRET, "OTPD_KEY_PARTNER": PARTNER_KEY}

    def configure(self, cfg):
        cfg["api_keys"][0]["twilio"] = {"account_sid": ACCT,
                                        "api_keys": [{"sid": SK, "secret_env": "OTPD_TW_SK"}]}
        cfg["api_keys"].append({"name": "partner", "key_env": "OTPD_KEY_PARTNER",
                                "twilio": {"account_sid": ACCT2}})
        return cfg

    # ---- HTTP ----
    def v2(self, method, path, form=None, user=ACCT, secret=API_KEY, headers=None, raw=None, timeout=10):
        """One request over http.client: (status, headers with lower-case names, parsed JSON or text). form: a
        dict or (name, value) pairs, url-encoded; raw: bytes, or a list of byte strings sent as chunks; user
        None: no Authorization of ours."""
        h = dict(headers or {})
        if user is not None:
            h["Authorization"] = "Basic " + base64.b64encode(("%s:%s" % (user, secret)).encode()).decode()
        body = raw
        if form is not None:
            body = urllib.parse.urlencode(form).encode()
            h.setdefault("Content-Type", "application/x-www-form-urlencoded")
        con = http.client.HTTPConnection("127.0.0.1", self.otpd.port, timeout=timeout)
        try:
            if isinstance(body, list):
                con.request(method, path, body=iter(body), headers=h, encode_chunked=True)
            else:
                con.request(method, path, body=body, headers=h)
            r = con.getresponse()
            text = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
        finally:
            con.close()
        ctype = hdrs.get("content-type", "")
        payload = json.loads(text) if "json" in ctype and text else text.decode(errors="replace")
        return r.status, hdrs, payload

    def twilio_error(self, resp, status, code, names=None):
        """resp is Twilio's error JSON for status and code; names: a word its message must hold."""
        st, h, p = resp
        self.assertEqual(st, status, p)
        self.assertTrue(h.get("content-type", "").startswith("application/json"), h)
        self.assertIsInstance(p, dict, p)
        self.assertEqual(sorted(p), ["code", "message", "more_info", "status"], p)
        self.assertEqual((p["status"], p["code"]), (status, code), p)
        self.assertEqual(p["more_info"], "https://www.twilio.com/docs/errors/%d" % code)
        self.assertTrue(p["message"], p)
        if names is not None:
            self.assertIn(names, p["message"])
        if status == 401:
            self.assertEqual(h.get("www-authenticate"), BASIC)
        return p

    # ---- Resources ----
    def service(self, name="My App", **kw):
        st, _, s = self.v2("POST", "/v2/Services", {"FriendlyName": name}, **kw)
        self.assertEqual(st, 201, s)
        return s

    def services(self, **kw):
        st, _, out = self.v2("GET", "/v2/Services?PageSize=1000", **kw)
        self.assertEqual(st, 200, out)
        return out["services"]

    def send(self, svc, phone=PHONE, **kw):
        return self.v2("POST", "/v2/Services/%s/Verifications" % svc, {"To": phone, "Channel": "sms"}, **kw)

    def start(self, svc, phone=PHONE, **kw):
        """Starts a verification of phone in service svc (a SID): (its JSON, the code its SMS carried)."""
        st, _, v = self.send(svc, phone, **kw)
        self.assertEqual(st, 201, v)
        mid = v["send_code_attempts"][-1]["attempt_sid"][2:]
        mine = wait_until(lambda: [m for m in self.fake.messages() if m["id"] == mid] or None, 10,
                          what="message %s at the provider" % mid)
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["to"], phone)
        return v, code_of(mine[0]["text"])

    def check(self, svc, code, to=PHONE, sid=None, **kw):
        form = {"Code": code}
        if sid is not None:
            form["VerificationSid"] = sid
        else:
            form["To"] = to
        return self.v2("POST", "/v2/Services/%s/VerificationCheck" % svc, form, **kw)

    def fetch(self, svc, ve, **kw):
        return self.v2("GET", "/v2/Services/%s/Verifications/%s" % (svc, ve), **kw)

    def state(self):
        """Redis's keys but the admin rows', and the queue's length."""
        keys = sorted(k for k in self.redis.cmd("KEYS", "*") if not k.startswith("otp:adm:"))
        return keys, self.redis.cmd("XLEN", "otp:q")


# ---- Auth -----------------------------------------------------------------------------------------------------
class AuthTest(V2Test):
    def test_account_sid_and_key_or_api_key_and_secret(self):
        st, _, out = self.v2("GET", "/v2/Services")
        self.assertEqual((st, out["services"]), (200, []), out)
        s = self.service("by-account")
        self.assertEqual(s["account_sid"], ACCT)
        # The API key is the same caller and account: it sees the service and makes its own.
        st, _, out = self.v2("GET", "/v2/Services/" + s["sid"], user=SK, secret=SK_SECRET)
        self.assertEqual(st, 200, out)
        self.assertEqual((out["sid"], out["account_sid"]), (s["sid"], ACCT), out)
        s2 = self.service("by-key", user=SK, secret=SK_SECRET)
        self.assertEqual(s2["account_sid"], ACCT)
        self.assertEqual({x["sid"] for x in self.services()}, {s["sid"], s2["sid"]})
        # The ledger names the caller, whichever credential it used.
        rows = self.otpd.rows("SELECT admin, row_id FROM admin_actions ORDER BY id")
        self.assertEqual(rows, [{"admin": "login-web", "row_id": s["sid"]},
                                {"admin": "login-web", "row_id": s2["sid"]}])
        # The other account's caller, by its own account and key.
        self.assertEqual(self.services(user=ACCT2, secret=PARTNER_KEY), [])

    def test_refused_credentials(self):
        same_len = API_KEY[:-1] + ("x" if API_KEY[-1] != "x" else "y")
        same_len_sk = SK_SECRET[:-1] + ("x" if SK_SECRET[-1] != "x" else "y")
        self.assertEqual(len(same_len), len(API_KEY))
        unknown_ac = "AC" + "5" * 32
        cases = [
            dict(user=ACCT, secret=same_len),              # wrong secret, same length
            dict(user=ACCT, secret=API_KEY + "x"),         # longer
            dict(user=ACCT, secret=API_KEY[:-1]),          # a prefix
            dict(user=ACCT, secret=""),
            dict(user=SK, secret=same_len_sk),
            dict(user=SK, secret=API_KEY),                 # the caller's key is not the API key's secret
            dict(user=ACCT, secret=SK_SECRET),             # nor the other way round
            dict(user=ACCT, secret=PARTNER_KEY),           # another caller's key
            dict(user=ACCT2, secret=API_KEY),
            dict(user=unknown_ac, secret=API_KEY),         # unknown SID
            dict(user="SK" + "5" * 32, secret=SK_SECRET),
            dict(user=ACCT.lower(), secret=API_KEY),
            dict(user="login-web", secret=API_KEY),        # a caller's name is no account
            dict(user="login-app", secret=OTHER_KEY),      # login-app has no Twilio account
            dict(user="", secret=OTHER_KEY),
            dict(user="", secret=API_KEY),
            dict(user=ACCT, secret=OTHER_KEY),
            dict(user=None, secret=None),                  # no header
            dict(user=None, headers={"Authorization": "Bearer " + API_KEY}),
            dict(user=None, headers={"Authorization": "Bearer " + OTHER_KEY}),
            dict(user=None, headers={"Authorization": "Basic " + ACCT}),   # not base64 of user:pass
            dict(user=None, headers={"Authorization": "Basic"}),
        ]
        for kw in cases:
            for method, path, form in (("GET", "/v2/Services", None), ("POST", "/v2/Services", {"FriendlyName": "x"}),
                                       ("GET", "/v2/Nope", None)):
                self.twilio_error(self.v2(method, path, form, **kw), 401, 20003)
        self.assertEqual(self.services(), [], "a refused create made a service")
        self.assertEqual(self.otpd.rows("SELECT * FROM admin_actions"), [])

    def test_basic_credentials_are_not_v1_credentials(self):
        for user, secret in ((ACCT, API_KEY), (SK, SK_SECRET), ("login-web", API_KEY)):
            auth = "Basic " + base64.b64encode(("%s:%s" % (user, secret)).encode()).decode()
            st, h, p = self.otpd.call("POST", "/v1/otp", {"phone": PHONE}, auth=None, headers={"Authorization": auth})
            self.assertEqual((st, p["error"]), (401, "unauthorized"), (user, p))
            self.assertEqual(h["www-authenticate"], "Bearer")
            self.assertTrue(h["content-type"].startswith("application/problem+json"))
            st, _, p = self.otpd.call("POST", "/v1/otp/verify", {"phone": PHONE, "code": "123456"}, auth=None,
                                      headers={"Authorization": auth})
            self.assertEqual(st, 401, p)
        self.assertEqual(self.fake.messages(), [])
        # The caller's own Bearer key still works on /v1.
        self.assertEqual(self.otpd.issue(PHONE)[0], 202)


# ---- Services ---------------------------------------------------------------------------------------------------
class ServicesTest(V2Test):
    def base(self):
        return "http://127.0.0.1:%d" % self.otpd.port

    def test_crud_and_the_ledger(self):
        st, h, s = self.v2("POST", "/v2/Services", {"FriendlyName": "My App"})
        self.assertEqual(st, 201, s)
        self.assertTrue(h["content-type"].startswith("application/json"))
        sid = s["sid"]
        self.assertRegex(sid, SID_RE)
        self.assertEqual((s["account_sid"], s["friendly_name"], s["code_length"]), (ACCT, "My App", 6))
        self.assertEqual((s["lookup_enabled"], s["skip_sms_to_landlines"], s["psd2_enabled"]), (False, False, False))
        self.assertEqual(s["url"], self.base() + "/v2/Services/" + sid)
        self.assertEqual(s["links"]["verifications"], self.base() + "/v2/Services/%s/Verifications" % sid)
        self.assertEqual(s["links"]["verification_checks"], self.base() + "/v2/Services/%s/VerificationCheck" % sid)
        self.assertRegex(s["date_created"], DATE_RE)
        self.assertEqual(s["date_updated"], s["date_created"])
        st, _, got = self.v2("GET", "/v2/Services/" + sid)
        self.assertEqual((st, got), (200, s))

        time.sleep(1.1)  # the update's second is a later one than the create's
        st, _, u = self.v2("POST", "/v2/Services/" + sid, {"FriendlyName": "Renamed"})
        self.assertEqual(st, 200, u)
        self.assertEqual((u["sid"], u["friendly_name"], u["code_length"]), (sid, "Renamed", 6))
        self.assertEqual(u["date_created"], s["date_created"])
        self.assertGreater(u["date_updated"], u["date_created"])
        st, _, got = self.v2("GET", "/v2/Services/" + sid)
        self.assertEqual((st, got), (200, u))
        # An update of no field keeps the name.
        st, _, u2 = self.v2("POST", "/v2/Services/" + sid, {})
        self.assertEqual((st, u2["friendly_name"], u2["date_created"]), (200, "Renamed", s["date_created"]), u2)

        st, _, out = self.v2("GET", "/v2/Services")
        self.assertEqual(st, 200, out)
        self.assertEqual([x["sid"] for x in out["services"]], [sid])
        self.assertEqual(out["services"][0]["friendly_name"], "Renamed")
        self.assertEqual(out["meta"]["key"], "services")

        st, h, out = self.v2("DELETE", "/v2/Services/" + sid)
        self.assertEqual((st, out), (204, ""))
        self.twilio_error(self.v2("GET", "/v2/Services/" + sid), 404, 20404)
        self.twilio_error(self.v2("DELETE", "/v2/Services/" + sid), 404, 20404)
        self.twilio_error(self.v2("POST", "/v2/Services/" + sid, {"FriendlyName": "back"}), 404, 20404)
        self.twilio_error(self.send(sid), 404, 20404)
        self.assertEqual(self.services(), [])

        rows = self.otpd.rows("SELECT admin, action, kind, row_id, body FROM admin_actions ORDER BY id")
        self.assertEqual([(r["admin"], r["action"], r["kind"], r["row_id"]) for r in rows],
                         [("login-web", "add", "service", sid), ("login-web", "update", "service", sid),
                          ("login-web", "update", "service", sid), ("login-web", "remove", "service", sid)])
        self.assertEqual(json.loads(rows[0]["body"])["code_length"], 6)
        self.assertIsNone(rows[3]["body"])
        self.assertEqual(self.fake.messages(), [])

    def test_paging(self):
        sids = [self.service("s%d" % i)["sid"] for i in range(5)]
        seen = []
        for page, n, prev, nxt in ((0, 2, False, True), (1, 2, True, True), (2, 1, True, False)):
            st, _, out = self.v2("GET", "/v2/Services?PageSize=2&Page=%d" % page)
            self.assertEqual(st, 200, out)
            m = out["meta"]
            self.assertEqual((len(out["services"]), m["page"], m["page_size"]), (n, page, 2), out)
            url = self.base() + "/v2/Services?PageSize=2&Page=%d"
            self.assertEqual(m["url"], url % page)
            self.assertEqual(m["first_page_url"], url % 0)
            self.assertEqual(m["previous_page_url"], url % (page - 1) if prev else None)
            self.assertEqual(m["next_page_url"], url % (page + 1) if nxt else None)
            seen += [x["sid"] for x in out["services"]]
        self.assertEqual(sorted(seen), sorted(sids))
        # A page that ends exactly at the last service has no next page; one past it is empty.
        st, _, out = self.v2("GET", "/v2/Services?PageSize=5")
        self.assertEqual((st, len(out["services"]), out["meta"]["next_page_url"]), (200, 5, None))
        st, _, out = self.v2("GET", "/v2/Services?PageSize=5&Page=1")
        self.assertEqual((st, out["services"], out["meta"]["next_page_url"]), (200, [], None))
        st, _, out = self.v2("GET", "/v2/Services")
        self.assertEqual((st, len(out["services"]), out["meta"]["page_size"]), (200, 5, 50))
        for q in ("PageSize=0", "PageSize=1001", "PageSize=x", "Page=-1", "PageSize=2&Page=x"):
            self.twilio_error(self.v2("GET", "/v2/Services?" + q), 400, 60200, "PageSize")

    def test_accounts_apart(self):
        mine = self.service("mine")
        theirs = self.service("theirs", user=ACCT2, secret=PARTNER_KEY)
        self.assertEqual(theirs["account_sid"], ACCT2)
        self.assertEqual([x["sid"] for x in self.services()], [mine["sid"]])
        self.assertEqual([x["sid"] for x in self.services(user=ACCT2, secret=PARTNER_KEY)], [theirs["sid"]])
        for user, secret, other in ((ACCT, API_KEY, theirs), (SK, SK_SECRET, theirs), (ACCT2, PARTNER_KEY, mine)):
            kw = dict(user=user, secret=secret)
            path = "/v2/Services/" + other["sid"]
            self.twilio_error(self.v2("GET", path, **kw), 404, 20404)
            self.twilio_error(self.v2("POST", path, {"FriendlyName": "stolen"}, **kw), 404, 20404)
            self.twilio_error(self.v2("DELETE", path, **kw), 404, 20404)
            self.twilio_error(self.send(other["sid"], **kw), 404, 20404)
            self.twilio_error(self.check(other["sid"], "123456", **kw), 404, 20404)
        # Both still there, unchanged; only their own creates are in the ledger.
        st, _, out = self.v2("GET", "/v2/Services/" + theirs["sid"], user=ACCT2, secret=PARTNER_KEY)
        self.assertEqual((st, out), (200, theirs))
        st, _, out = self.v2("GET", "/v2/Services/" + mine["sid"])
        self.assertEqual((st, out), (200, mine))
        rows = self.otpd.rows("SELECT admin, action, row_id FROM admin_actions ORDER BY id")
        self.assertEqual(rows, [{"admin": "login-web", "action": "add", "row_id": mine["sid"]},
                                {"admin": "partner", "action": "add", "row_id": theirs["sid"]}])
        self.assertEqual(self.fake.messages(), [])

    def test_bad_fields_change_nothing(self):
        s = self.service("keep")
        bad = [
            ({}, "FriendlyName"),
            ({"FriendlyName": ""}, "FriendlyName"),
            ({"FriendlyName": "x" * 33}, "FriendlyName"),
            ({"FriendlyName": "\u00e9" * 33}, "FriendlyName"),
            ({"FriendlyName": "a\x01b"}, "FriendlyName"),
            ({"FriendlyName": "a\nb"}, "FriendlyName"),
            ({"FriendlyName": "a\u0085b"}, "FriendlyName"),
            ({"FriendlyName": "a", "CodeLength": "5"}, "CodeLength"),
            ({"FriendlyName": "a", "CodeLength": "4"}, "CodeLength"),
            ({"FriendlyName": "a", "CodeLength": "11"}, "CodeLength"),
            ({"FriendlyName": "a", "CodeLength": "six"}, "CodeLength"),
            ({"FriendlyName": "a", "TtsName": "Alice"}, "TtsName"),
            ({"FriendlyName": "a", "Psd2Enabled": "true"}, "Psd2Enabled"),
            ({"FriendlyName": "a", "Psd2Enabled": "True"}, "Psd2Enabled"),
            ({"FriendlyName": "a", "DtmfInputRequired": "true"}, "DtmfInputRequired"),
            ({"FriendlyName": "a", "CustomCodeEnabled": "true"}, "CustomCodeEnabled"),
            ({"FriendlyName": "a", "Totp.Issuer": "x"}, "Totp.Issuer"),
            ({"FriendlyName": "a", "DefaultTemplateSid": "HJ" + "0" * 32}, "DefaultTemplateSid"),
            ({"FriendlyName": "a", "LookupEnabled": "maybe"}, "LookupEnabled"),
            ({"FriendlyName": "a", "SkipSmsToLandlines": "true"}, "SkipSmsToLandlines"),
            ({"FriendlyName": "a", "Bogus": "1"}, "Bogus"),
            ([("FriendlyName", "a"), ("FriendlyName", "b")], "FriendlyName"),
        ]
        for form, field in bad:
            self.twilio_error(self.v2("POST", "/v2/Services", form), 400, 60200, field)
            if form:  # an update refuses the same (a create's required name aside)
                self.twilio_error(self.v2("POST", "/v2/Services/" + s["sid"], form), 400, 60200, field)
        for raw in (b"FriendlyName=%zz", b"FriendlyName=%4", b"FriendlyName=%FF", b"FriendlyName"):
            self.twilio_error(self.v2("POST", "/v2/Services", raw=raw,
                                      headers={"Content-Type": "application/x-www-form-urlencoded"}),
                              400, 60200)
        self.assertEqual([x["sid"] for x in self.services()], [s["sid"]])
        st, _, out = self.v2("GET", "/v2/Services/" + s["sid"])
        self.assertEqual((st, out), (200, s))
        self.assertEqual([r["action"] for r in self.otpd.rows("SELECT action FROM admin_actions")], ["add"])
        # The edges that are allowed: 32 characters (2-byte ones too), otp.length as CodeLength, a false switch.
        for form in ({"FriendlyName": "x" * 32}, {"FriendlyName": "\u00e9" * 32}, {"FriendlyName": "\U0001F600" * 32},
                     {"FriendlyName": "a b", "CodeLength": "6"},
                     {"FriendlyName": "a", "Psd2Enabled": "False"}, {"FriendlyName": "a", "Psd2Enabled": "false"},
                     {"FriendlyName": "a", "LookupEnabled": "true", "SkipSmsToLandlines": "true"}):
            st, _, out = self.v2("POST", "/v2/Services", form)
            self.assertEqual(st, 201, (form, out))
            self.assertEqual(out["friendly_name"], form["FriendlyName"])
            self.assertEqual(out["code_length"], 6)
        self.assertEqual(len(self.services()), 8)


# ---- Verifications ----------------------------------------------------------------------------------------------
class VerificationsTest(V2Test):
    def test_send_check_approve(self):
        svc = self.service()["sid"]
        v, code = self.start(svc)
        self.assertRegex(v["sid"], VE_RE)
        self.assertEqual((v["status"], v["valid"], v["to"], v["channel"]), ("pending", False, PHONE, "sms"))
        self.assertEqual((v["service_sid"], v["account_sid"]), (svc, ACCT))
        self.assertEqual(v["url"], "http://127.0.0.1:%d/v2/Services/%s/Verifications/%s"
                         % (self.otpd.port, svc, v["sid"]))
        self.assertEqual(len(v["send_code_attempts"]), 1)
        self.assertEqual(v["send_code_attempts"][0]["channel"], "sms")
        self.assertRegex(v["date_created"], DATE_RE)
        self.assertRegex(code, r"^\d{6}$")
        # The verification is otp's: its SID is the ledger's verification id, its attempt the message.
        ver = wait_until(lambda: self.otpd.rows("SELECT id, phone, api_key FROM verifications"), what="the row")
        self.assertEqual(ver, [{"id": v["sid"][2:], "phone": PHONE, "api_key": "login-web"}])
        msg = self.otpd.rows("SELECT id FROM messages")
        self.assertEqual(["VL" + m["id"] for m in msg], [v["send_code_attempts"][0]["attempt_sid"]])
        req = wait_until(lambda: self.otpd.rows("SELECT kind, decision, api_key, purpose FROM requests"),
                         what="the request row")
        self.assertEqual(req, [{"kind": "issue", "decision": "accepted", "api_key": "login-web", "purpose": svc}])
        st, _, got = self.fetch(svc, v["sid"])
        self.assertEqual((st, got["status"], got["sid"], got["to"]), (200, "pending", v["sid"], PHONE), got)

        st, _, c = self.check(svc, wrong_of(code))
        self.assertEqual(st, 200, c)
        self.assertEqual((c["status"], c["valid"], c["sid"], c["service_sid"], c["to"]),
                         ("pending", False, v["sid"], svc, PHONE))
        st, _, c = self.check(svc, code)
        self.assertEqual(st, 200, c)
        self.assertEqual((c["status"], c["valid"], c["sid"], c["account_sid"]), ("approved", True, v["sid"], ACCT))
        st, _, got = self.fetch(svc, v["sid"])
        self.assertEqual((st, got["status"], got["valid"]), (200, "approved", True), got)
        # Used: the code is gone.
        self.twilio_error(self.check(svc, code), 404, 20404)
        self.assertEqual(len(self.fake.messages()), 1)

    def test_a_second_send_is_an_attempt_of_the_same_verification(self):
        svc = self.service()["sid"]
        v1, code1 = self.start(svc)
        v2, code2 = self.start(svc)
        self.assertEqual((v2["sid"], code2), (v1["sid"], code1))
        self.assertEqual(len(v2["send_code_attempts"]), 2)
        self.assertEqual(v2["send_code_attempts"][0], v1["send_code_attempts"][0])

    def test_unsupported_fields_send_and_take_nothing(self):
        svc = self.service()["sid"]
        path = "/v2/Services/%s/Verifications" % svc
        ok = {"To": PHONE, "Channel": "sms"}
        bad = [
            (dict(ok, Channel="call"), "call"),
            (dict(ok, Channel="whatsapp"), "whatsapp"),
            (dict(ok, Channel="email"), "email"),
            (dict(ok, Channel="SMS"), "SMS"),
            (dict(ok, CustomCode="123456"), "CustomCode"),
            (dict(ok, CustomMessage="Your code"), "CustomMessage"),
            (dict(ok, RateLimits='{"k": "v"}'), "RateLimits"),  # no rate limit of this service is "k"
            (dict(ok, RateLimits="k=v"), "RateLimits"),
            (dict(ok, CustomFriendlyName="x" * 33), "CustomFriendlyName"),
            (dict(ok, CustomFriendlyName=""), "CustomFriendlyName"),
            (dict(ok, TemplateSid="HJ" + "0" * 32), "TemplateSid"),
            (dict(ok, Amount="1"), "Amount"),
            (dict(ok, EnableSnaClientToken="true"), "EnableSnaClientToken"),
            (dict(ok, Bogus="1"), "Bogus"),
            (dict(ok, Tags="[]"), "Tags"),
            (dict(ok, RiskCheck="disable"), "RiskCheck"),
            ({"Channel": "sms"}, "To"),
            ({"To": PHONE}, "Channel"),
            (dict(ok, To="9812345678"), "To"),
            (dict(ok, To="+0919812345678"), "To"),
            (dict(ok, To="+91 98123 45678"), "To"),
            (dict(ok, To="12"), "To"),
            (dict(ok, To=""), "To"),
        ]
        before = self.state()
        for form, field in bad:
            self.twilio_error(self.v2("POST", path, form), 400, 60200, field)
        self.twilio_error(self.v2("POST", path, [("To", PHONE), ("To", P2), ("Channel", "sms")]), 400, 60200, "To")
        self.assertEqual(self.state(), before, "a refused verification took something")
        self.assertEqual(self.fake.messages(), [])
        self.assertEqual(self.otpd.rows("SELECT * FROM messages"), [])
        self.assertEqual(self.otpd.rows("SELECT * FROM verifications"), [])
        # What is accepted: a false switch, tags, RiskCheck enable, a DeviceIp. Then only its message went out and
        # only its issue is in the ledger.
        st, _, v = self.v2("POST", path, dict(ok, EnableSnaClientToken="False", Tags='{"a": "b"}',
                                               RiskCheck="enable", DeviceIp="203.0.113.7"))
        self.assertEqual(st, 201, v)
        mid = v["send_code_attempts"][0]["attempt_sid"][2:]
        wait_until(lambda: self.fake.messages(), what="its message")
        self.assertEqual([m["id"] for m in self.fake.messages()], [mid])
        rows = wait_until(lambda: self.otpd.rows("SELECT kind, decision, client_ip FROM requests"), what="its row")
        self.assertEqual(rows, [{"kind": "issue", "decision": "accepted", "client_ip": "203.0.113.7"}])

    def test_missing_service(self):
        gone = self.service("gone")["sid"]
        self.assertEqual(self.v2("DELETE", "/v2/Services/" + gone)[0], 204)
        for svc in ("VA" + "0" * 32, gone, "VAnot-a-sid", "VE" + "0" * 32):
            self.twilio_error(self.send(svc), 404, 20404)
            self.twilio_error(self.check(svc, "123456"), 404, 20404)
            self.twilio_error(self.fetch(svc, "VE" + "0" * 32), 404, 20404)
        self.assertEqual(self.fake.messages(), [])
        self.assertEqual(self.otpd.rows("SELECT * FROM messages"), [])

    def test_max_attempts_kill_the_code(self):
        """otp.max_attempts (3) wrong guesses spend the code: the last one's answer and the record say
        max_attempts_reached, and every later check, the right code's too, is 429 60202 as Twilio answers."""
        svc = self.service()["sid"]
        v, code = self.start(svc)
        wrong = wrong_of(code)
        for _ in range(2):
            st, _, c = self.check(svc, wrong)
            self.assertEqual((st, c["status"], c["valid"], c["sid"]), (200, "pending", False, v["sid"]), c)
        st, _, c = self.check(svc, wrong)
        self.assertEqual((st, c["status"], c["valid"], c["sid"]), (200, "max_attempts_reached", False, v["sid"]), c)
        self.twilio_error(self.check(svc, code), 429, 60202)
        self.twilio_error(self.check(svc, code, sid=v["sid"]), 429, 60202)
        self.twilio_error(self.check(svc, wrong), 429, 60202)
        st, _, got = self.fetch(svc, v["sid"])
        self.assertEqual((st, got["status"], got["valid"]), (200, "max_attempts_reached", False), got)
        self.twilio_error(self.v2("POST", "/v2/Services/%s/Verifications/%s" % (svc, v["sid"]),
                                  {"Status": "canceled"}), 404, 20404)
        row = wait_until(lambda: (lambda r: r if r and r[0]["wrong"] == 3 else None)(
            self.otpd.rows("SELECT status, wrong FROM verifications")), what="3 wrong guesses in the ledger")
        self.assertEqual(row[0]["status"], "exhausted")

    def test_two_wrong_then_right(self):
        svc = self.service()["sid"]
        v, code = self.start(svc)
        for _ in range(2):
            self.assertEqual(self.check(svc, wrong_of(code))[2]["status"], "pending")
        # A malformed code is no guess: it counts for nothing.
        for bad in ("12345", "1234567", "12a456", "", " 12345"):
            self.twilio_error(self.check(svc, bad), 400, 60200)
        st, _, c = self.check(svc, code)
        self.assertEqual((st, c["status"], c["valid"]), (200, "approved", True), c)

    def test_check_by_verification_sid(self):
        svc = self.service()["sid"]
        v, code = self.start(svc)
        st, _, c = self.check(svc, wrong_of(code), sid=v["sid"])
        self.assertEqual((st, c["status"], c["to"]), (200, "pending", PHONE), c)
        for form in ({"Code": code}, {"Code": code, "To": PHONE, "VerificationSid": v["sid"]},
                     {"To": PHONE}, {"VerificationSid": v["sid"]}):
            self.twilio_error(self.v2("POST", "/v2/Services/%s/VerificationCheck" % svc, form), 400, 60200)
        for bad in ("VE" + "0" * 32, "VE123", "VA" + v["sid"][2:]):
            self.twilio_error(self.check(svc, code, sid=bad), 404, 20404)
        st, _, c = self.check(svc, code, sid=v["sid"])
        self.assertEqual((st, c["status"], c["valid"], c["sid"]), (200, "approved", True, v["sid"]), c)
        # Approved: no longer pending, so no longer checked.
        self.twilio_error(self.check(svc, code, sid=v["sid"]), 404, 20404)

    def test_sids_of_another_service_or_account(self):
        a = self.service("a")["sid"]
        b = self.service("b")["sid"]
        va, code_a = self.start(a)
        vb, code_b = self.start(b)
        self.assertNotEqual(va["sid"], vb["sid"])
        # b's verification is not a's: not fetched, checked, cancelled or approved through a, even with a live
        # code of a for the same phone.
        self.twilio_error(self.fetch(a, vb["sid"]), 404, 20404)
        self.twilio_error(self.check(a, code_a, sid=vb["sid"]), 404, 20404)
        for status in ("canceled", "approved"):
            self.twilio_error(self.v2("POST", "/v2/Services/%s/Verifications/%s" % (a, vb["sid"]),
                                      {"Status": status}), 404, 20404)
        # Another account holding both SIDs gets nothing either, with its own service in the path or theirs.
        mine = self.service("partner's", user=ACCT2, secret=PARTNER_KEY)["sid"]
        kw = dict(user=ACCT2, secret=PARTNER_KEY)
        for svc in (a, mine):
            self.twilio_error(self.fetch(svc, va["sid"], **kw), 404, 20404)
            self.twilio_error(self.check(svc, code_a, sid=va["sid"], **kw), 404, 20404)
            self.twilio_error(self.check(svc, code_a, **kw), 404, 20404)
            self.twilio_error(self.v2("POST", "/v2/Services/%s/Verifications/%s" % (svc, va["sid"]),
                                      {"Status": "canceled"}, **kw), 404, 20404)
        # Both still pending and their codes still good, each in its own service.
        self.assertEqual(self.fetch(a, va["sid"])[2]["status"], "pending")
        self.assertEqual(self.fetch(b, vb["sid"])[2]["status"], "pending")
        self.assertEqual(self.check(a, code_a, sid=va["sid"])[2]["status"], "approved")
        self.assertEqual(self.check(b, code_b)[2]["status"], "approved")

    def test_codes_never_cross_services(self):
        a = self.service("a")["sid"]
        b = self.service("b")["sid"]
        va, code_a = self.start(a)
        # No verification of PHONE in b: a's code is nothing there.
        self.twilio_error(self.check(b, code_a), 404, 20404)
        # Nor on /v1: the default purpose is not the service, and no /v1 purpose can name one.
        st, _, p = self.otpd.verify(PHONE, code_a)
        self.assertEqual((st, p["error"]), (404, "no_active_code"), p)
        for purpose in (a, a[:32]):
            st, _, p = self.otpd.verify(PHONE, code_a, purpose=purpose)
            self.assertEqual(st, 400 if len(purpose) > 32 else 404, (purpose, p))
        st, _, p = self.otpd.call("POST", "/v1/otp/cancel", {"phone": PHONE, "purpose": a})
        self.assertEqual(st, 400, p)
        st, _, p = self.otpd.issue(PHONE, purpose=a)
        self.assertEqual((st, p["error"]), (400, "invalid_request"), p)
        # With a verification of its own in b, a's code approves in b only if b's code is the same.
        vb, code_b = self.start(b)
        if code_b != code_a:
            st, _, c = self.check(b, code_a)
            self.assertEqual((st, c["status"], c["sid"]), (200, "pending", vb["sid"]), c)
        # None of that touched a's verification.
        st, _, c = self.check(a, code_a)
        self.assertEqual((st, c["status"], c["sid"]), (200, "approved", va["sid"]), c)
        self.assertEqual(self.fetch(b, vb["sid"])[2]["status"], "pending")
        self.assertEqual(self.check(b, code_b)[2]["status"], "approved")

    def test_cancel_and_approve_by_status(self):
        svc = self.service()["sid"]
        v, code = self.start(svc)
        path = "/v2/Services/%s/Verifications/%s" % (svc, v["sid"])
        for form in ({}, {"Status": "pending"}, {"Status": "Canceled"}, {"Status": "expired"},
                     {"Status": "canceled", "To": PHONE}):
            self.twilio_error(self.v2("POST", path, form), 400, 60200)
        st, _, out = self.v2("POST", path, {"Status": "canceled"})
        self.assertEqual((st, out["status"], out["sid"], out["valid"]), (200, "canceled", v["sid"], False), out)
        self.twilio_error(self.check(svc, code), 404, 20404)
        self.twilio_error(self.check(svc, code, sid=v["sid"]), 404, 20404)
        self.assertEqual(self.fetch(svc, v["sid"])[2]["status"], "canceled")
        self.twilio_error(self.v2("POST", path, {"Status": "approved"}), 404, 20404)
        st, _, p = self.otpd.call("POST", "/v1/otp/cancel", {"phone": PHONE})
        self.assertEqual(st, 404, p)

        # A new verification of the same phone, approved by the caller: it ends too.
        v2, code2 = self.start(svc)
        self.assertNotEqual(v2["sid"], v["sid"])
        self.assertEqual(self.fetch(svc, v["sid"])[2]["status"], "canceled")
        path2 = "/v2/Services/%s/Verifications/%s" % (svc, v2["sid"])
        st, _, out = self.v2("POST", path2, {"Status": "approved"})
        self.assertEqual((st, out["status"], out["valid"]), (200, "approved", True), out)
        st, _, out = self.fetch(svc, v2["sid"])
        self.assertEqual((st, out["status"], out["valid"]), (200, "approved", True), out)
        self.twilio_error(self.check(svc, code2), 404, 20404)
        self.twilio_error(self.v2("POST", path2, {"Status": "canceled"}), 404, 20404)
        self.assertEqual(self.fetch(svc, v2["sid"])[2]["status"], "approved")


class CancelQueuedTest(V2Test):
    """One send a second: a message behind three others is still queued when its verification is canceled."""

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["pacer"]["rate"] = 1
        return cfg

    def test_cancel_stops_a_queued_message(self):
        svc = self.service()["sid"]
        ahead = [self.otpd.issue(p)[2]["id"] for p in ("+919800000001", "+919800000002", "+919800000003")]
        self.assertTrue(all(ahead), ahead)
        st, _, v = self.send(svc)
        self.assertEqual(st, 201, v)
        mid = v["send_code_attempts"][0]["attempt_sid"][2:]
        st, _, out = self.v2("POST", "/v2/Services/%s/Verifications/%s" % (svc, v["sid"]), {"Status": "canceled"})
        self.assertEqual((st, out["status"]), (200, "canceled"), out)
        # A message queued after it reaches the provider: it had its turn first.
        later = self.otpd.issue(P2)[2]["id"]
        wait_until(lambda: any(m["id"] == later for m in self.fake.messages()), 15, what="the later message")
        self.assertNotIn(mid, {m["id"] for m in self.fake.messages()})
        row = self.otpd.rows("SELECT state, detail, attempts FROM messages WHERE id = ?", mid)[0]
        self.assertEqual((row["state"], row["detail"], row["attempts"]), ("failed", "cancelled", 0))
        self.twilio_error(self.check(svc, "123456"), 404, 20404)


# ---- otpd's refusals in Twilio's codes -------------------------------------------------------------------------
class SendRulesTest(V2Test):
    limits = [{"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "1h"},
              {"name": "caller", "key": "api_key", "algorithm": "token_bucket", "limit": 2, "window": "1h",
               "burst": 2}]

    def test_a_phone_rule_is_60203_another_20429(self):
        svc = self.service()["sid"]
        self.start(svc, PHONE)
        p = self.twilio_error(self.send(svc, PHONE), 429, 60203)
        st, h, _ = self.send(svc, PHONE)
        self.assertEqual(st, 429)
        self.assertTrue(0 < int(h["retry-after"]) <= 3600, h)
        self.assertIn("Max send attempts reached", p["message"])
        # A refused send took nothing: the caller's second token is still there.
        self.start(svc, P2)
        p = self.twilio_error(self.send(svc, P3), 429, 20429)
        self.assertIn("Too many requests", p["message"])
        self.assertEqual(len(self.fake.messages()), 2)


class LockTest(V2Test):
    limits = [{"name": "wrong_codes", "key": ["phone", "api_key"], "algorithm": "wrong_guess_cap", "limit": 2,
               "window": "1h"}]

    def test_a_lock_is_60202(self):
        svc = self.service()["sid"]
        _, code = self.start(svc)
        st, _, c = self.check(svc, wrong_of(code))
        self.assertEqual((st, c["status"]), (200, "pending"), c)
        st, _, c = self.check(svc, wrong_of(code))  # the second reaches the cap: it may already say locked
        self.assertIn(st, (200, 429), c)
        self.twilio_error(self.check(svc, code), 429, 60202, "Max check attempts reached")


class CheckPhoneRuleTest(V2Test):
    limits = [{"name": "checks", "key": "phone", "algorithm": "sliding_log", "limit": 1, "window": "1h",
               "on": "verify"}]

    def test_a_phone_rule_on_checks_is_60202(self):
        svc = self.service()["sid"]
        _, code = self.start(svc)
        self.assertEqual(self.check(svc, wrong_of(code))[0], 200)
        self.twilio_error(self.check(svc, code), 429, 60202, "Max check attempts reached")


class CheckCallerRuleTest(V2Test):
    limits = [{"name": "caller_checks", "key": "api_key", "algorithm": "sliding_log", "limit": 1, "window": "1h",
               "on": "verify"}]

    def test_a_caller_rule_on_checks_is_20429(self):
        svc = self.service()["sid"]
        _, code = self.start(svc)
        self.assertEqual(self.check(svc, wrong_of(code))[0], 200)
        self.twilio_error(self.check(svc, code), 429, 20429, "Too many requests")


class BlockTest(V2Test):
    env = dict(V2Test.env, OTPD_KEY_OPS=ADMIN_KEY)

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
        return cfg

    def test_an_admin_block_is_60410(self):
        svc = self.service()["sid"]
        st, _, out = self.otpd.call("POST", "/v1/admin/blocks", {"match": {"phone": PHONE}, "expires_in": "1h"},
                                    auth=ADMIN_KEY)
        self.assertEqual(st, 201, out)
        # A verify of a phone without a code takes nothing: poll /v1 until the block is in force.
        wait_until(lambda: self.otpd.verify(PHONE, "123456")[0] == 403, timeout=5, what="the block in force")
        before = self.state()
        self.twilio_error(self.send(svc, PHONE), 403, 60410, "blocked")
        self.twilio_error(self.check(svc, "123456", PHONE), 403, 60410)
        self.assertEqual(self.state(), before)
        self.start(svc, P2)
        self.assertEqual([m["to"] for m in self.fake.messages()], [P2])


class CountryTest(V2Test):
    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["countries"] = {"deny": ["GB"]}
        return cfg

    def test_a_denied_country_is_60605(self):
        svc = self.service()["sid"]
        self.twilio_error(self.send(svc, "+447400123456"), 403, 60605)
        self.start(svc, PHONE)
        self.assertEqual(len(self.fake.messages()), 1)


class StoreDownTest(V2Test):
    def test_fail_closed_and_quick(self):
        svc = self.service()["sid"]
        _, code = self.start(svc)
        self.fake.reset()
        self.redis.stop()
        for call in (lambda: self.send(svc, P2), lambda: self.send(svc, PHONE), lambda: self.check(svc, code),
                     lambda: self.v2("GET", "/v2/Services"), lambda: self.v2("GET", "/v2/Services/" + svc),
                     lambda: self.v2("POST", "/v2/Services", {"FriendlyName": "x"})):
            t0 = time.monotonic()
            resp = call()
            self.assertLess(time.monotonic() - t0, 2.0, "a refusal with Redis away must be quick")
            self.twilio_error(resp, 503, 20503)
            self.assertEqual(resp[1].get("retry-after"), "1")
        time.sleep(0.5)
        self.assertEqual(self.fake.requests(), [])
        self.assertEqual([r["action"] for r in self.otpd.rows("SELECT action FROM admin_actions")], ["add"])


# ---- Routing ----------------------------------------------------------------------------------------------------
class RoutingTest(V2Test):
    def test_unknown_paths(self):
        svc = self.service()["sid"]
        ve = "VE" + "0" * 32
        for path in ("/v2", "/v2/", "/v2/Nope", "/v2/services", "/v2/Services/", "/v2/Services/VA123",
                     "/v2/Services/%s/" % svc, "/v2/Services/%s/Nope" % svc, "/v2/Services/%s/verifications" % svc,
                     "/v2/Services/%s/Verifications/%s/Nope" % (svc, ve),
                     "/v2/Services/%s/VerificationCheck/x" % svc, "/v2/Services/%s/Entities" % svc,
                     "/v2/Services/%s/a/b/c/d/e/f" % svc, "/v2/Services/%s/Verifications/%s" % (svc, "x" * 80)):
            for method in ("GET", "POST"):
                self.twilio_error(self.v2(method, path, {} if method == "POST" else None), 404, 20404)

    def test_wrong_methods(self):
        svc = self.service()["sid"]
        ve = "VE" + "0" * 32
        for method, path, allow in (("DELETE", "/v2/Services/%s/Verifications" % svc, "POST"),
                                    ("GET", "/v2/Services/%s/Verifications" % svc, "POST"),
                                    ("DELETE", "/v2/Services/%s/VerificationCheck" % svc, "POST"),
                                    ("GET", "/v2/Services/%s/VerificationCheck" % svc, "POST"),
                                    ("DELETE", "/v2/Services", "GET, HEAD, POST"),
                                    ("DELETE", "/v2/Services/%s/Verifications/%s" % (svc, ve), "GET, HEAD, POST")):
            st, h, p = self.v2(method, path)
            self.twilio_error((st, h, p), 405, 20004)
            self.assertEqual(h.get("allow"), allow, (method, path))
        # A method no /v2 route takes: 405 in Twilio's shape, with the resource's own Allow.
        for method in ("PUT", "PATCH"):
            for path, allow in (("/v2/Services/%s/Verifications" % svc, "POST"),
                                ("/v2/Services/%s/VerificationCheck" % svc, "POST"),
                                ("/v2/Services/%s" % svc, "GET, HEAD, POST, DELETE")):
                st, h, p = self.v2(method, path, {"To": PHONE})
                self.twilio_error((st, h, p), 405, 20004)
                self.assertEqual(h.get("allow"), allow, (method, path))
        self.assertEqual(self.fake.messages(), [])
        self.assertEqual([x["sid"] for x in self.services()], [svc])

    def test_a_repeated_framing_header_is_refused_in_twilios_shape(self):
        """The framing checks run before any route, but a /v2 request's refusal is still Twilio's JSON."""
        body = b"FriendlyName=x"
        auth = "Basic " + base64.b64encode(("%s:%s" % (ACCT, API_KEY)).encode()).decode()
        con = http.client.HTTPConnection("127.0.0.1", self.otpd.port, timeout=10)
        try:
            con.putrequest("POST", "/v2/Services")
            con.putheader("Authorization", auth)
            con.putheader("Content-Type", "application/x-www-form-urlencoded")
            con.putheader("Content-Type", "application/x-www-form-urlencoded")
            con.putheader("Content-Length", str(len(body)))
            con.endheaders(body)
            r = con.getresponse()
            st, ctype, p = r.status, r.getheader("Content-Type"), json.loads(r.read())
        finally:
            con.close()
        self.assertEqual((st, ctype), (400, "application/json"), p)
        self.assertEqual((p["code"], p["status"]), (60200, 400), p)
        self.assertEqual(self.services(), [])

    def test_a_body_over_4_kib(self):
        """Refused in Twilio's shape, as a 4xx, by its Content-Length or as it comes in chunks; nothing made."""
        svc = self.service()["sid"]
        ctype = {"Content-Type": "application/x-www-form-urlencoded"}
        big = urllib.parse.urlencode({"FriendlyName": "x", "Tags": '{"a": "%s"}' % ("y" * 5000)}).encode()
        chunks = [b"FriendlyName=" + b"a" * 3000, b"b" * 3000]
        for path in ("/v2/Services", "/v2/Services/%s/Verifications" % svc):
            for raw in (big, chunks):
                st, h, p = self.v2("POST", path, raw=raw, headers=ctype)
                self.assertTrue(400 <= st < 500, (st, p))
                self.assertIsInstance(p, dict, p)
                self.twilio_error((st, h, p), st, p.get("code"))
                self.assertIn((st, p["code"]), ((400, 60200), (413, 20413)))
        self.assertEqual([x["sid"] for x in self.services()], [svc])
        self.assertEqual(self.fake.messages(), [])


class MetricsTest(V2Test):
    """otp's decisions answered on /v2 are counted twice: with every API's in
    otpd_requests_total, and alone under otpd_api_requests_total{api="twilio"}."""

    def metric(self, name):
        text = self.otpd.call("GET", "/metrics", auth=None)[2]
        m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
        return int(m.group(1)) if m else None

    def test_twilio_decisions_have_their_own_series(self):
        svc = self.service()["sid"]
        v, code = self.start(svc)
        self.assertEqual(self.check(svc, "000000" if code != "000000" else "111111")[0], 200)
        self.assertEqual(self.check(svc, code)[0], 200)
        self.assertEqual(self.v2("POST", "/v2/Services/%s/Verifications/%s" % (svc, self.start(svc, "+919812349999")[0]["sid"]),
                                 {"Status": "canceled"})[0], 200)
        st, _, body = self.otpd.issue("+919812340777")  # /v1: counted in the total only
        self.assertEqual(st, 202, body)
        twilio = 'otpd_api_requests_total{api="twilio",op="%s",decision="%s"}'
        self.assertEqual(self.metric(twilio % ("issue", "accepted")), 2)
        self.assertEqual(self.metric(twilio % ("verify", "invalid_code")), 1)
        self.assertEqual(self.metric(twilio % ("verify", "verified")), 1)
        self.assertEqual(self.metric(twilio % ("cancel", "cancelled")), 1)
        self.assertEqual(self.metric(twilio % ("issue", "rate_limited")), 0)
        self.assertEqual(self.metric('otpd_requests_total{op="issue",decision="accepted"}'), 3)


class NameTest(V2Test):
    """A template's {name} is the service's FriendlyName, or a verification's CustomFriendlyName; rendered once,
    so a name that holds a placeholder stays as it is."""

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["otp"]["template"] = "Your {name} verification code is: {code}"
        return cfg

    def text(self, v):
        mid = v["send_code_attempts"][-1]["attempt_sid"][2:]
        return wait_until(lambda: [m for m in self.fake.messages() if m["id"] == mid] or None, 10,
                          what="message %s" % mid)[0]["text"]

    def test_the_service_name_and_a_custom_one(self):
        svc = self.service("Acme Login")["sid"]
        st, _, v = self.send(svc)
        self.assertEqual(st, 201, v)
        self.assertRegex(self.text(v), r"^Your Acme Login verification code is: \d{6}$")
        st, _, v = self.v2("POST", "/v2/Services/%s/Verifications" % svc,
                           {"To": P2, "Channel": "sms", "CustomFriendlyName": "Acme {code} Shop"})
        self.assertEqual(st, 201, v)
        self.assertRegex(self.text(v), r"^Your Acme \{code\} Shop verification code is: \d{6}$")
        # On /v1 the name is empty.
        st, _, body = self.otpd.issue("+919812340888")
        self.assertEqual(st, 202, body)
        text = wait_until(lambda: [m for m in self.fake.messages() if m["id"] == body["id"]] or None, 10,
                          what="its message")[0]["text"]
        self.assertRegex(text, r"^Your  verification code is: \d{6}$")
