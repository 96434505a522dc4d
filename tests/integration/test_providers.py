"""What each provider adapter puts on the wire (issue 14), asserted exactly
at the fake provider: Twilio with an API key and a Messaging Service, the
webhook's bearer token and X-Otpd-Signature (recomputed here with hmac), and
Kannel's smsc, priority, validity and dlr-mask. Plus the config errors of
each bad input, as `otpd --check` prints them, and the secrets of all of it
kept out of the log and of --check's output."""
import base64
import hashlib
import hmac
import json
import os
import re
import time
import urllib.parse

from harness import ROOT, OtpdTest, code_of, twilio_signature, wait_until

AC = "AC0123456789abcdef0123456789abcdef"
SK = "SKfedcba9876543210fedcba9876543210"
MG = "MG00112233445566778899aabbccddeeff"
KEY_SECRET = "twilio-api-key-secret-value"
TOKEN = "twilio-auth-token-value"
BEARER = "webhook-bearer-token-0123456789"
SIGNING = "webhook-signing-secret-0123456789abcdef"
KPASS = "kannel-pass-secret"
SECRETS = (KEY_SECRET, TOKEN, BEARER, SIGNING, KPASS)


class ProviderTest(OtpdTest):
    def one_request(self, body):
        """The fake provider's one request for the message of issue answer body."""
        self.assertIn("id", body, body)
        wait_until(lambda: len(self.fake.requests()) >= 1, 10, what="the provider request")
        reqs = self.fake.requests()
        self.assertEqual(len(reqs), 1, reqs)
        return reqs[0]

    def check(self, cfg, env=None):
        path = os.path.join(self.tmp, "check.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["--check", "-c", path], env=env)
        return r.returncode, r.stdout + r.stderr, path

    def load(self, cfg, env=None):
        """otpd -c on a config that must be refused: unlike --check, it reads
        the secrets' values, so their shape is checked too. It exits before
        listening (EX_CONFIG, 78) with every error on stderr."""
        path = os.path.join(self.tmp, "load.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        r = self.run_bin("otpd", ["-c", path], env=env)
        return r.returncode, r.stdout + r.stderr, path

    def assert_no_secrets(self, text):
        for s in SECRETS:
            self.assertNotIn(s, text)


class TwilioApiKeyTest(ProviderTest):
    """An API key authenticates (basic auth SK...:secret) while the account
    SID still names the Messages URL; a Messaging Service is the sender; the
    auth token is there only to check status callbacks."""
    env = {"TWILIO_SID": AC, "TWILIO_TOKEN": TOKEN, "TWILIO_KEY_SID": SK, "TWILIO_KEY_SECRET": KEY_SECRET}

    def configure(self, cfg):
        cfg["provider"] = {"type": "twilio", "base_url": self.fake.url, "messaging_service_sid": MG,
                           "account_sid_env": "TWILIO_SID", "api_key_sid_env": "TWILIO_KEY_SID",
                           "api_key_secret_env": "TWILIO_KEY_SECRET", "auth_token_env": "TWILIO_TOKEN",
                           "callback_url": "http://" + cfg["listen"]}
        return cfg

    def test_messages_api_with_an_api_key_and_a_messaging_service(self):
        st, _, body = self.otpd.issue("+14155550100")
        self.assertEqual(st, 202, body)
        req = self.one_request(body)
        self.assertEqual((req["method"], req["provider"], req["path"]),
                         ("POST", "twilio", "/2010-04-01/Accounts/%s/Messages.json" % AC))
        self.assertEqual(req["authorization"], "Basic " + base64.b64encode(("%s:%s" % (SK, KEY_SECRET)).encode()).decode())
        self.assertEqual(req["content_type"], "application/x-www-form-urlencoded")
        form = req["form"]
        self.assertEqual(sorted(form), ["Body", "MessagingServiceSid", "StatusCallback", "To"])
        self.assertEqual((form["To"], form["MessagingServiceSid"]), ("+14155550100", MG))
        self.assertRegex(form["Body"], r"^\d{6} is your login code\. It expires in 5 minutes\.$")
        # The status callback is checked with the auth token, as Twilio signs it.
        cb = urllib.parse.urlsplit(form["StatusCallback"])
        params = [("MessageSid", "SMx"), ("MessageStatus", "delivered")]
        for key, want in ((KEY_SECRET, 403), (TOKEN, 200)):
            st, _, _ = self.otpd.call("POST", cb.path + "?" + cb.query, raw=b"MessageSid=SMx&MessageStatus=delivered",
                                      auth=None, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                          "X-Twilio-Signature": twilio_signature(
                                                              key, form["StatusCallback"], params)})
            self.assertEqual(st, want, key)
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages")[0]["state"] == "delivered", 10,
                   what="the delivery report")
        self.assert_no_secrets(self.otpd.log())

    def test_config_errors(self):
        base = json.loads(json.dumps(self.otpd.config))
        env = dict(self.otpd.env, TWILIO_SHORT="AC0123", TWILIO_AC_AS_KEY=AC)

        def provider(**over):
            cfg = json.loads(json.dumps(base))
            p = {k: v for k, v in cfg["provider"].items()}
            p.update(over)
            cfg["provider"] = {k: v for k, v in p.items() if v is not None}
            return cfg

        cases = [
            (provider(api_key_sid_env=None, api_key_secret_env=None, auth_token_env=None),
             "provider: twilio needs auth_token_env, or api_key_sid_env and api_key_secret_env"),
            (provider(callback_url=None),
             "provider.auth_token_env: give auth_token_env or the API key (api_key_sid_env, api_key_secret_env), "
             "not both; with an API key the auth token only checks status callbacks, which needs callback_url"),
            (provider(auth_token_env=None),
             "provider.callback_url: needs auth_token_env with an API key: Twilio signs status callbacks with the "
             "account's auth token, never an API key"),
            (provider(api_key_secret_env=None), "provider.api_key_sid_env: needs provider.api_key_secret_env"),
            (provider(api_key_sid_env=None), "provider.api_key_secret_env: needs provider.api_key_sid_env"),
            (provider(messaging_service_sid=None),
             "provider: twilio needs from or messaging_service_sid (one of them, none is set)"),
            (provider(**{"from": "+15005550006"}),
             "provider: twilio needs from or messaging_service_sid (one of them, not both)"),
            (provider(messaging_service_sid="MG0123"),
             "provider.messaging_service_sid: must be a Messaging Service SID: MG and 32 hex digits"),
            (provider(messaging_service_sid=SK),
             "provider.messaging_service_sid: must be a Messaging Service SID: MG and 32 hex digits"),
            (provider(account_sid_env="TWILIO_SHORT"),
             "provider.account_sid_env: environment variable TWILIO_SHORT must hold an account SID: AC and 32 hex "
             "digits"),
            (provider(api_key_sid_env="TWILIO_AC_AS_KEY"),
             "provider.api_key_sid_env: environment variable TWILIO_AC_AS_KEY must hold an API key SID: SK and 32 "
             "hex digits"),
            (provider(smsc="route-a"), "provider.smsc: applies to kannel only, not twilio"),
        ]
        for cfg, want in cases:
            rc, out, path = self.load(cfg, env)
            self.assertEqual((rc, out), (78, "%s: %s\n" % (path, want)))
            self.assert_no_secrets(out)
        rc, out, path = self.check(base, env)
        self.assertEqual((rc, out), (0, "%s: ok\n" % path))


class TwilioTokenFromTest(ProviderTest):
    """The auth token form, unchanged: basic auth AC...:token and From."""
    env = {"TWILIO_SID": AC, "TWILIO_TOKEN": TOKEN}

    def configure(self, cfg):
        cfg["provider"] = {"type": "twilio", "base_url": self.fake.url, "from": "+15005550006",
                           "account_sid_env": "TWILIO_SID", "auth_token_env": "TWILIO_TOKEN"}
        return cfg

    def test_basic_auth_with_the_account_and_from(self):
        st, _, body = self.otpd.issue("+14155550100")
        self.assertEqual(st, 202, body)
        req = self.one_request(body)
        self.assertEqual(req["path"], "/2010-04-01/Accounts/%s/Messages.json" % AC)
        self.assertEqual(req["authorization"], "Basic " + base64.b64encode(("%s:%s" % (AC, TOKEN)).encode()).decode())
        self.assertEqual(sorted(req["form"]), ["Body", "From", "To"])
        self.assertEqual(req["form"]["From"], "+15005550006")
        self.assert_no_secrets(self.otpd.log())


class WebhookSignedTest(ProviderTest):
    """Bearer token and X-Otpd-Signature over the exact body sent."""
    env = {"WEBHOOK_TOKEN": BEARER, "WEBHOOK_SIGNING_SECRET": SIGNING}

    def configure(self, cfg):
        cfg["provider"] = {"type": "webhook", "url": self.fake.url + "/sms", "token_env": "WEBHOOK_TOKEN",
                           "signing_secret_env": "WEBHOOK_SIGNING_SECRET"}
        return cfg

    def test_bearer_and_signature(self):
        before = int(time.time())
        st, _, body = self.otpd.issue("+919812345678")
        self.assertEqual(st, 202, body)
        req = self.one_request(body)
        after = int(time.time())
        self.assertEqual((req["method"], req["provider"], req["path"]), ("POST", "webhook", "/sms"))
        self.assertEqual(req["authorization"], "Bearer " + BEARER)
        self.assertEqual(req["content_type"], "application/json")
        sent = json.loads(req["body"])
        self.assertEqual(sorted(sent), ["id", "text", "to"])
        self.assertEqual((sent["id"], sent["to"]), (body["id"], "+919812345678"))
        self.assertIsNotNone(code_of(sent["text"]))
        sig = {k.lower(): v for k, v in req["headers"].items()}["x-otpd-signature"]
        m = re.match(r"^t=(\d+),v1=([0-9a-f]{64})$", sig)
        self.assertTrue(m, sig)
        t = int(m.group(1))
        # Signed when the request was built: between the issue and its arrival.
        self.assertTrue(before <= t <= after, (before, t, after))
        want = hmac.new(SIGNING.encode(), ("%d." % t).encode() + req["body"].encode(), hashlib.sha256).hexdigest()
        self.assertEqual(m.group(2), want)
        # Another secret, time or body gives another signature: the check means something.
        self.assertNotEqual(m.group(2), hmac.new(SIGNING.encode(), ("%d." % (t + 1)).encode() + req["body"].encode(),
                                                 hashlib.sha256).hexdigest())
        # docs/providers.md's receiver-side check accepts it, and refuses it altered or stale.
        with open(os.path.join(ROOT, "docs", "providers.md")) as f:
            doc = f.read()
        code = re.search(r"```python\n(.*?)```", doc[doc.index("### Webhook signatures"):], re.S).group(1)
        ns = {}
        exec(code, ns)
        ok = ns["otpd_request_ok"]
        raw = req["body"].encode()
        self.assertTrue(ok(SIGNING.encode(), sig, raw))
        self.assertFalse(ok(SIGNING.encode(), sig, raw.replace(b"+9198", b"+9199")))
        self.assertFalse(ok(b"another-secret", sig, raw))
        self.assertFalse(ok(SIGNING.encode(), sig, raw, max_age_s=int(time.time()) - t - 1))
        self.assert_no_secrets(self.otpd.log())

    def test_secrets_stay_out_of_check_and_log(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        rc, out, _ = self.check(cfg)
        self.assertEqual(rc, 0, out)
        self.assert_no_secrets(out)
        env = dict(self.otpd.env, SHORT_SECRET="x" * 31, SPACE_TOKEN="webhook token with spaces")
        for over, want in (({"signing_secret_env": "SHORT_SECRET"},
                            "provider.signing_secret_env: environment variable SHORT_SECRET must hold at least 32 "
                            "bytes"),
                           ({"token_env": "SPACE_TOKEN"},
                            "provider.token_env: environment variable SPACE_TOKEN must hold 16 to 1000 printable "
                            "ASCII bytes without spaces"),
                           ({"validity": "5m"}, "provider.validity: applies to kannel only, not webhook")):
            c = json.loads(json.dumps(cfg))
            c["provider"].update(over)
            rc, out, path = self.load(c, env)
            self.assertEqual((rc, out), (78, "%s: %s\n" % (path, want)))
            self.assertNotIn("webhook token with spaces", out)
            self.assert_no_secrets(out)
        self.assert_no_secrets(self.otpd.log())


class WebhookPlainTest(ProviderTest):
    """Without the keys: no Authorization, no signature (as before)."""

    def test_bare_post(self):
        st, _, body = self.otpd.issue("+919812345678")
        self.assertEqual(st, 202, body)
        req = self.one_request(body)
        self.assertIsNone(req["authorization"])
        self.assertNotIn("x-otpd-signature", {k.lower() for k in req["headers"]})


class KannelFieldsTest(ProviderTest):
    """smsc, priority, validity and dlr-mask in the sendsms query."""
    env = {"KANNEL_USER": "otpd", "KANNEL_PASS": KPASS}

    def configure(self, cfg):
        cfg["provider"] = {"type": "kannel", "url": self.fake.url + "/cgi-bin/sendsms", "from": "OTPD",
                           "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS", "smsc": "route-a",
                           "priority": 0, "validity": "7m", "dlr_mask": 31, "callback_url": "http://" + cfg["listen"]}
        return cfg

    def test_configured_fields(self):
        st, _, body = self.otpd.issue("+919812345678")
        self.assertEqual(st, 202, body)
        req = self.one_request(body)
        self.assertEqual((req["method"], req["provider"], req["path"]), ("GET", "kannel", "/cgi-bin/sendsms"))
        args = req["args"]
        self.assertEqual(sorted(args), ["dlr-mask", "dlr-url", "from", "password", "priority", "smsc", "text", "to",
                                        "username", "validity"])
        self.assertEqual((args["smsc"], args["priority"], args["validity"], args["dlr-mask"]), ("route-a", "0", "7", "31"))
        self.assertEqual((args["to"], args["from"], args["username"], args["password"]),
                         ("+919812345678", "OTPD", "otpd", KPASS))
        self.assertTrue(args["dlr-url"].startswith("http://%s/v1/dlr/kannel?" % self.otpd.config["listen"]), args)
        self.assertNotIn(KPASS, self.otpd.log())

    def test_validity_from_the_code_by_default(self):
        # Unset: the code's remaining life in minutes, rounded up (5m ttl: 5;
        # 90s: 2; 60s: 1), and no smsc, priority or dlr-mask (no callback_url).
        cfg = json.loads(json.dumps(self.otpd.config))
        for k in ("smsc", "priority", "validity", "dlr_mask", "callback_url"):
            del cfg["provider"][k]
        for i, (ttl, want) in enumerate((("5m", "5"), ("90s", "2"), ("60s", "1"))):
            cfg["otp"]["ttl"] = ttl
            self.restart(cfg)
            self.fake.reset()
            st, _, body = self.otpd.issue("+91981234567%d" % i)
            self.assertEqual(st, 202, body)
            args = self.one_request(body)["args"]
            self.assertEqual(sorted(args), ["from", "password", "text", "to", "username", "validity"])
            # The send comes a moment after the issue, so a little less than
            # the whole life is left: rounded up, the whole minutes (up to
            # 29 s of delay for 90s).
            self.assertEqual(args["validity"], want, ttl)

    def test_config_errors(self):
        cfg = json.loads(json.dumps(self.otpd.config))
        for over, want in (({"priority": 4}, "provider.priority: must be an integer from 0 to 3"),
                           ({"validity": "90s"}, "provider.validity: must be whole minutes from 1m to 1d (Kannel "
                                                 "takes minutes)"),
                           ({"validity": "2d"}, "provider.validity: must be whole minutes from 1m to 1d (Kannel "
                                                "takes minutes)"),
                           ({"smsc": "a;b"}, "provider.smsc: must be an smsc-id: 1 to 63 printable ASCII bytes "
                                             "without spaces or ';'"),
                           ({"dlr_mask": 32}, "provider.dlr_mask: must be an integer from 1 to 31"),
                           ({"callback_url": None}, "provider.dlr_mask: needs provider.callback_url, where Kannel "
                                                    "sends the reports"),
                           ({"token_env": "KANNEL_PASS"}, "provider.token_env: applies to webhook only, not kannel")):
            c = json.loads(json.dumps(cfg))
            c["provider"].update(over)
            c["provider"] = {k: v for k, v in c["provider"].items() if v is not None}
            rc, out, path = self.check(c)
            self.assertEqual((rc, out), (1, "%s: %s\n" % (path, want)))
            rc, out, path = self.load(c)
            self.assertEqual((rc, out), (78, "%s: %s\n" % (path, want)))
            self.assertNotIn(KPASS, out)
