"""The Twilio Verify v2 surface (/v2) driven by Twilio's own SDKs: twilio-python
(Debian's python3-twilio, run by /usr/bin/python3) and twilio-node (the npm
package `twilio`, pinned in tests/openapi/package.json and installed into
build/npm by `make npm-tools`). Each SDK is pointed at otpd by its own base
URL override (client.verify.base_url / baseUrl) and authenticates with Basic
auth as a caller's Twilio account or API key (api_keys[].twilio).

The SDK runs in a child (tests/integration/v2_sdk/drive.py or drive.js) that
takes one JSON op a line and answers with the SDK's result or the exception it
raised; the scenarios below are written once and run against both children.
The config gives login-web a Twilio account and an API key, login-app another
account and a WebOTP origin (api_keys[].webotp_origin), and otp.templates two
locales (hi, pt). The children's environment has no TWILIO_REGION/
TWILIO_EDGE (both SDKs would rewrite 127.0.0.1 into another host name) nor
TWILIO_ACCOUNT_SID/TWILIO_AUTH_TOKEN, and NO_PROXY covers the loopback.

Skipped only when an SDK's runtime is absent: /usr/bin/python3 with twilio
(python3-twilio), node and npm (`make deps-test` installs them all).
"""
import json
import os
import select
import shutil
import subprocess
import time
import unittest

from harness import API_KEY, OTHER_KEY, ROOT, OtpdTest, code_of, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVE_PY = os.path.join(HERE, "v2_sdk", "drive.py")
DRIVE_JS = os.path.join(HERE, "v2_sdk", "drive.js")
DEB_PYTHON = "/usr/bin/python3"

ACCOUNT = "AC0123456789abcdef0123456789abcdef"        # login-web's account
OTHER_ACCOUNT = "ACfedcba9876543210fedcba9876543210"  # login-app's
KEY_SID = "SK00112233445566778899aabbccddeeff"        # an API key of login-web's account
KEY_SECRET = "sk-secret-login-web-0123456789"
WRONG = "not-the-secret-0123456789"

RESEND = {"name": "resend", "key": "phone", "algorithm": "resend_delay", "delay": "30s"}

# otp.templates by locale (a Locale's exact tag, then its language alone; else otp.template, DEFAULT_TEXT), an
# SMS Retriever hash (Twilio's example of AppHash) and login-app's WebOTP origin (api_keys[].webotp_origin).
TEMPLATES = {"hi": "आपका लॉगिन कोड {code} है।", "pt": "Seu código de acesso é {code}."}
DEFAULT_TEXT = r"(\d{6}) is your login code\. It expires in \d+ minutes\."
APP_HASH = "He42w354ol9"
ORIGIN = "login.example.com"


def python_sdk_missing():
    if not os.access(DEB_PYTHON, os.X_OK):
        return "no %s (make deps-test installs python3 and python3-twilio)" % DEB_PYTHON
    r = subprocess.run([DEB_PYTHON, "-c", "import twilio.rest"], capture_output=True)
    return None if r.returncode == 0 else \
        "%s cannot import twilio (make deps-test installs python3-twilio)" % DEB_PYTHON


PYTHON_SDK_MISSING = python_sdk_missing()


NODE_MISSING = shutil.which("node") is None or shutil.which("npm") is None


def child_env():
    """The SDK child's environment: ours without what would send its requests elsewhere."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TWILIO_REGION", "TWILIO_EDGE", "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN",
                        "TWILIO_API_KEY", "TWILIO_API_SECRET")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


class SdkError(AssertionError):
    """The child died or broke the protocol."""


class Drive:
    """One SDK child: call(op, **args) sends a request line and returns its answer line as a dict."""

    def __init__(self, argv, workdir, name, timeout=20):
        self.timeout = timeout
        self.err_path = os.path.join(workdir, "%s.stderr" % name)
        with open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         env=child_env(), cwd=ROOT)
        self.buf = b""

    def stderr(self):
        try:
            with open(self.err_path, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def call(self, op, **args):
        try:
            self.proc.stdin.write((json.dumps(dict(args, op=op)) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise SdkError("the SDK child exited (%s) before %s:\n%s" % (self.proc.wait(), op, self.stderr()))
        end = time.monotonic() + self.timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise SdkError("no answer to %s in %ss:\n%s" % (op, self.timeout, self.stderr()))
            chunk = os.read(fd, 65536)
            if not chunk:
                raise SdkError("the SDK child exited (%s) during %s:\n%s" % (self.proc.wait(), op, self.stderr()))
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise SdkError("not a JSON answer to %s: %r\n%s" % (op, line[:500], self.stderr()))

    def close(self):
        """Ends the child; its exit code (it exits 0 at the end of its input)."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


class Scenarios:
    """The scenarios, for any SDK child. Mixed into an OtpdTest with drive_argv() and the SDK's names: rest_class
    (the exception class its errors must be), sdk_prefix (the start of its version string)."""

    rest_class = None
    sdk_prefix = None
    limits = [RESEND]
    env = {"OTPD_TW_LOGIN_WEB_SK": KEY_SECRET}

    def configure(self, cfg):
        web, app = cfg["api_keys"]
        web["twilio"] = {"account_sid": ACCOUNT,
                         "api_keys": [{"sid": KEY_SID, "secret_env": "OTPD_TW_LOGIN_WEB_SK"}]}
        app["twilio"] = {"account_sid": OTHER_ACCOUNT}
        app["webotp_origin"] = ORIGIN
        cfg["otp"]["templates"] = dict(TEMPLATES)
        return cfg

    def setUp(self):
        super().setUp()
        try:
            self.drive = Drive(self.drive_argv(), self.tmp, self.sdk_name)
            self.addCleanup(self.close_drive)
            v = self.ok(self.drive.call("version"))
            self.assertTrue(v["sdk"].startswith(self.sdk_prefix), v)
            self.base = "http://127.0.0.1:%d" % self.otpd.port
            self.client("web", ACCOUNT, API_KEY)
        except BaseException:
            self.tearDown()  # unittest runs no tearDown after a failed setUp
            raise

    def close_drive(self):
        rc = self.drive.close()
        self.assertEqual(rc, 0, "the SDK child exited with %s:\n%s" % (rc, self.drive.stderr()))

    # ---- Helpers ----

    def ok(self, answer):
        """The result of a call that must have succeeded."""
        self.assertIn("ok", answer, answer)
        return answer["ok"]

    def refused(self, answer, status, code):
        """The SDK's exception of a call that must have failed with status and Twilio code."""
        self.assertIn("error", answer, answer)
        e = answer["error"]
        self.assertEqual((e["class"], e["rest"]), (self.rest_class, True), e)
        self.assertEqual((e["status"], e["code"]), (status, code), e)
        return e

    def client(self, name, username, password, account_sid=None):
        args = dict(name=name, username=username, password=password, base_url=self.base)
        if account_sid:
            args["account_sid"] = account_sid
        self.ok(self.drive.call("client", **args))

    def call(self, op, client="web", **args):
        return self.drive.call(op, client=client, **args)

    def new_service(self, name="My App", client="web", account=ACCOUNT):
        s = self.ok(self.call("service_create", client=client, friendly_name=name, code_length=6))
        self.assertRegex(s["sid"], r"^VA[0-9a-f]{32}$")
        self.assertEqual((s["account_sid"], s["friendly_name"], s["code_length"]), (account, name, 6))
        self.assertEqual(s["url"], "%s/v2/Services/%s" % (self.base, s["sid"]))
        self.assertTrue(s["date_created"]["parsed"], s)
        return s["sid"]

    def send(self, svc, phone, client="web", account=ACCOUNT, **fields):
        """A verification created through the SDK (fields: ver_create's rate_limits, locale, app_hash), checked,
        and the code of its SMS at the provider."""
        v = self.ok(self.call("ver_create", client=client, service=svc, to=phone, channel="sms", **fields))
        self.assertRegex(v["sid"], r"^VE[0-9a-f]{32}$")
        self.assertEqual((v["service_sid"], v["account_sid"], v["to"], v["channel"], v["status"], v["valid"]),
                         (svc, account, phone, "sms", "pending", False))
        self.assertEqual(v["url"], "%s/v2/Services/%s/Verifications/%s" % (self.base, svc, v["sid"]))
        self.assertTrue(v["date_created"]["parsed"] and v["date_created"]["utc"], v)
        attempts = v["send_code_attempts"]
        self.assertEqual(len(attempts), 1, v)
        self.assertEqual(attempts[0]["channel"], "sms")
        self.assertRegex(attempts[0]["attempt_sid"], r"^VL")
        text = self.sms(v)
        code = code_of(text)
        self.assertRegex(code or "", r"^\d{6}$", text)
        return v, code

    def sms(self, v):
        """The text of verification v's SMS at the provider. The attempt's SID carries the message's id: its SMS,
        whichever others arrive."""
        mid = v["send_code_attempts"][0]["attempt_sid"][2:]
        msg = wait_until(lambda: [m for m in self.fake.messages() if m["id"] == mid] or None, 10,
                         what="message %s at the provider" % mid)
        self.assertEqual(len(msg), 1, msg)
        self.assertEqual(msg[0]["to"], v["to"])
        return msg[0]["text"]

    # ---- The scenarios ----

    def test_wrong_then_right_code(self):
        phone = "+919812340101"
        svc = self.new_service()
        v, code = self.send(svc, phone)
        wrong = "%06d" % ((int(code) + 1) % 1000000)

        # Another service of the same account knows neither the verification nor its code.
        other = self.new_service("Other")
        self.refused(self.call("ver_fetch", service=other, sid=v["sid"]), 404, 20404)
        self.refused(self.call("check", service=other, to=phone, code=code), 404, 20404)
        self.refused(self.call("check", service=other, verification_sid=v["sid"], code=code), 404, 20404)

        c = self.ok(self.call("check", service=svc, to=phone, code=wrong))
        self.assertEqual((c["sid"], c["service_sid"], c["to"], c["channel"], c["status"], c["valid"]),
                         (v["sid"], svc, phone, "sms", "pending", False))
        c = self.ok(self.call("check", service=svc, to=phone, code=code))
        self.assertEqual((c["sid"], c["service_sid"], c["account_sid"], c["to"], c["status"], c["valid"]),
                         (v["sid"], svc, ACCOUNT, phone, "approved", True))
        self.assertTrue(c["date_created"]["parsed"], c)

        # Approved: the verification says so, and its code is spent.
        f = self.ok(self.call("ver_fetch", service=svc, sid=v["sid"]))
        self.assertEqual((f["sid"], f["status"], f["valid"]), (v["sid"], "approved", True))
        e = self.refused(self.call("check", service=svc, to=phone, code=code), 404, 20404)
        self.assertIn("was not found", e["message"])
        self.refused(self.call("check", service=svc, verification_sid=v["sid"], code=code), 404, 20404)

    def test_fetch_cancel_approve(self):
        svc = self.new_service()
        v, code = self.send(svc, "+919812340102")
        f = self.ok(self.call("ver_fetch", service=svc, sid=v["sid"]))
        self.assertEqual({k: f[k] for k in ("sid", "service_sid", "to", "status", "valid", "send_code_attempts")},
                         {k: v[k] for k in ("sid", "service_sid", "to", "status", "valid", "send_code_attempts")})
        self.assertEqual(f["date_created"], v["date_created"])

        c = self.ok(self.call("ver_update", service=svc, sid=v["sid"], status="canceled"))
        self.assertEqual((c["sid"], c["status"], c["valid"]), (v["sid"], "canceled", False))
        self.assertEqual(self.ok(self.call("ver_fetch", service=svc, sid=v["sid"]))["status"], "canceled")
        # Its code no longer works, by number or by SID, and it cannot be canceled twice.
        self.refused(self.call("check", service=svc, to=v["to"], code=code), 404, 20404)
        self.refused(self.call("check", service=svc, verification_sid=v["sid"], code=code), 404, 20404)
        self.refused(self.call("ver_update", service=svc, sid=v["sid"], status="canceled"), 404, 20404)

        # Approved by the application itself (Status=approved): its code is spent too.
        v2, code2 = self.send(svc, "+919812340103")
        a = self.ok(self.call("ver_update", service=svc, sid=v2["sid"], status="approved"))
        self.assertEqual((a["sid"], a["status"], a["valid"]), (v2["sid"], "approved", True))
        self.refused(self.call("check", service=svc, to=v2["to"], code=code2), 404, 20404)

        # Unknown verifications and services.
        self.refused(self.call("ver_fetch", service=svc, sid="VE" + "0" * 32), 404, 20404)
        self.refused(self.call("ver_fetch", service="VA" + "0" * 32, sid=v["sid"]), 404, 20404)

    def test_send_limit(self):
        svc = self.new_service()
        phone = "+919812340104"
        v, _ = self.send(svc, phone)
        # resend (keyed on the phone, 30 s) refuses the second send to the number: Twilio's 60203, 429.
        e = self.refused(self.call("ver_create", service=svc, to=phone, channel="sms"), 429, 60203)
        self.assertIn("Max send attempts reached", e["message"])
        # The first is still pending; another number is not held back by this number's rule.
        self.assertEqual(self.ok(self.call("ver_fetch", service=svc, sid=v["sid"]))["status"], "pending")
        self.send(svc, "+919812340105")

    def test_api_key_auth(self):
        self.client("sk", KEY_SID, KEY_SECRET, account_sid=ACCOUNT)
        svc = self.new_service("By API key", client="sk")
        # The key is the account's: one caller, whichever credential.
        self.assertEqual(self.ok(self.call("service_fetch", sid=svc))["friendly_name"], "By API key")
        v, code = self.send(svc, "+919812340106")
        c = self.ok(self.call("check", client="sk", service=svc, to=v["to"], code=code))
        self.assertEqual((c["sid"], c["status"], c["valid"]), (v["sid"], "approved", True))

        # Wrong secrets: 401, Twilio's 20003.
        self.client("sk_wrong", KEY_SID, WRONG, account_sid=ACCOUNT)
        self.client("ac_wrong", ACCOUNT, WRONG)
        self.client("ac_sk_secret", ACCOUNT, KEY_SECRET)           # the key's secret is not the account's token
        self.client("ac_other_key", ACCOUNT, OTHER_KEY)            # nor is another caller's key
        for name in ("sk_wrong", "ac_wrong", "ac_sk_secret", "ac_other_key"):
            with self.subTest(client=name):
                e = self.refused(self.call("service_fetch", client=name, sid=svc), 401, 20003)
                self.assertIn("Authenticate", e["message"])
                self.refused(self.call("ver_create", client=name, service=svc, to="+919812340107",
                                       channel="sms"), 401, 20003)

        # Another caller's account does not see this one's services.
        self.client("app", OTHER_ACCOUNT, OTHER_KEY)
        self.refused(self.call("service_fetch", client="app", sid=svc), 404, 20404)
        self.assertEqual(self.ok(self.call("service_list", client="app"))["sids"], [])

    def test_list_pages_delete(self):
        sids = [self.new_service("Service %d" % i) for i in range(3)]
        # Two a page: the SDK follows meta.next_page_url to the third.
        listed = self.ok(self.call("service_list", page_size=2))["sids"]
        self.assertEqual(sorted(listed), sorted(sids))
        pages = self.ok(self.call("service_pages", page_size=2))["pages"]
        self.assertEqual([len(p) for p in pages], [2, 1], pages)
        self.assertEqual(sorted(sum(pages, [])), sorted(sids))
        self.assertEqual(pages[0] + pages[1], listed)
        self.assertEqual(len(self.ok(self.call("service_list", limit=2))["sids"]), 2)
        self.assertEqual(sorted(self.ok(self.call("service_list"))["sids"]), sorted(sids))

        u = self.ok(self.call("service_update", sid=sids[0], friendly_name="Renamed"))
        self.assertEqual((u["sid"], u["friendly_name"]), (sids[0], "Renamed"))

        self.assertEqual(self.ok(self.call("service_delete", sid=sids[1])), {"deleted": True})
        self.refused(self.call("service_fetch", sid=sids[1]), 404, 20404)
        self.refused(self.call("service_delete", sid=sids[1]), 404, 20404)
        self.refused(self.call("ver_create", service=sids[1], to="+919812340108", channel="sms"), 404, 20404)
        left = self.ok(self.call("service_list", page_size=1))["sids"]
        self.assertEqual(sorted(left), sorted([sids[0], sids[2]]))

    def test_invalid_service(self):
        # CodeLength must be otp.length (6 here); FriendlyName 1 to 32 characters: 400, Twilio's 60200.
        e = self.refused(self.call("service_create", friendly_name="Four digits", code_length=4), 400, 60200)
        self.assertIn("CodeLength", e["message"])
        self.refused(self.call("service_create", friendly_name="x" * 33), 400, 60200)
        self.assertEqual(self.ok(self.call("service_list"))["sids"], [])

    def test_rate_limits_and_buckets(self):
        svc = self.new_service()
        other = self.new_service("Other")
        rls_url = "%s/v2/Services/%s/RateLimits" % (self.base, svc)

        # Rate limits: created, listed (one a page: the SDK follows next_page_url), fetched, updated.
        rl = self.ok(self.call("rl_create", service=svc, unique_name="end_user_id", description="Per user"))
        self.assertRegex(rl["sid"], r"^RK[0-9a-f]{32}$")
        self.assertEqual((rl["service_sid"], rl["account_sid"], rl["unique_name"], rl["description"]),
                         (svc, ACCOUNT, "end_user_id", "Per user"))
        self.assertEqual(rl["url"], "%s/%s" % (rls_url, rl["sid"]))
        self.assertEqual(rl["links"], {"buckets": rl["url"] + "/Buckets"})
        self.assertTrue(rl["date_created"]["parsed"] and rl["date_updated"]["parsed"], rl)
        ip = self.ok(self.call("rl_create", service=svc, unique_name="ip_address"))
        self.assertEqual((ip["unique_name"], ip["service_sid"]), ("ip_address", svc))
        self.assertNotEqual(ip["sid"], rl["sid"])
        # A unique name is the service's once, of A-Z, a-z, 0-9, '.', '_' and '-': 400, Twilio's 60200.
        e = self.refused(self.call("rl_create", service=svc, unique_name="end_user_id"), 400, 60200)
        self.assertIn("taken", e["message"])
        self.refused(self.call("rl_create", service=svc, unique_name="end user"), 400, 60200)
        # ...and another service's name is its own.
        self.assertEqual(self.ok(self.call("rl_create", service=other, unique_name="end_user_id"))["service_sid"],
                         other)

        listed = self.ok(self.call("rl_list", service=svc, page_size=1))["items"]
        self.assertEqual(sorted(r["sid"] for r in listed), sorted([rl["sid"], ip["sid"]]))
        self.assertEqual([r for r in listed if r["sid"] == rl["sid"]], [rl])
        self.assertEqual(self.ok(self.call("rl_fetch", service=svc, sid=rl["sid"])), rl)
        u = self.ok(self.call("rl_update", service=svc, sid=rl["sid"], description="Per end user"))
        self.assertEqual((u["sid"], u["unique_name"], u["description"], u["url"]),
                         (rl["sid"], "end_user_id", "Per end user", rl["url"]))
        self.assertEqual(self.ok(self.call("rl_fetch", service=svc, sid=rl["sid"]))["description"], "Per end user")
        # Not another service's, nor another account's.
        self.refused(self.call("rl_fetch", service=other, sid=rl["sid"]), 404, 20404)
        self.client("app", OTHER_ACCOUNT, OTHER_KEY)
        self.refused(self.call("rl_fetch", client="app", service=svc, sid=rl["sid"]), 404, 20404)

        # Buckets: Max sends an Interval (seconds; an hour's sliding log holds every send of this test, wherever
        # the clock is).
        bk = self.ok(self.call("bk_create", service=svc, rate_limit=rl["sid"], max=2, interval=3600))
        self.assertRegex(bk["sid"], r"^BL[0-9a-f]{32}$")
        self.assertEqual((bk["rate_limit_sid"], bk["service_sid"], bk["account_sid"], bk["max"], bk["interval"]),
                         (rl["sid"], svc, ACCOUNT, 2, 3600))
        self.assertEqual(bk["url"], "%s/Buckets/%s" % (rl["url"], bk["sid"]))
        self.assertTrue(bk["date_created"]["parsed"], bk)
        bk2 = self.ok(self.call("bk_create", service=svc, rate_limit=rl["sid"], max=5, interval=60))
        self.assertEqual((bk2["max"], bk2["interval"]), (5, 60))
        listed = self.ok(self.call("bk_list", service=svc, rate_limit=rl["sid"], page_size=1))["items"]
        self.assertEqual(sorted(b["sid"] for b in listed), sorted([bk["sid"], bk2["sid"]]))
        self.assertEqual(self.ok(self.call("bk_list", service=svc, rate_limit=ip["sid"]))["items"], [])
        self.assertEqual(self.ok(self.call("bk_fetch", service=svc, rate_limit=rl["sid"], sid=bk["sid"])), bk)
        u = self.ok(self.call("bk_update", service=svc, rate_limit=rl["sid"], sid=bk2["sid"], max=10))
        self.assertEqual((u["sid"], u["max"], u["interval"]), (bk2["sid"], 10, 60))
        u = self.ok(self.call("bk_update", service=svc, rate_limit=rl["sid"], sid=bk2["sid"], interval=120))
        self.assertEqual((u["sid"], u["max"], u["interval"]), (bk2["sid"], 10, 120))
        f = self.ok(self.call("bk_fetch", service=svc, rate_limit=rl["sid"], sid=bk2["sid"]))
        self.assertEqual((f["max"], f["interval"]), (10, 120))
        self.refused(self.call("bk_update", service=svc, rate_limit=rl["sid"], sid=bk2["sid"], max=0), 400, 60200)
        self.refused(self.call("bk_create", service=svc, rate_limit=rl["sid"], max=1, interval=0), 400, 60200)
        # A bucket is found under its own rate limit only.
        self.refused(self.call("bk_fetch", service=svc, rate_limit=ip["sid"], sid=bk["sid"]), 404, 20404)
        self.refused(self.call("bk_delete", service=svc, rate_limit=ip["sid"], sid=bk["sid"]), 404, 20404)
        self.assertEqual(self.ok(self.call("bk_delete", service=svc, rate_limit=rl["sid"], sid=bk2["sid"])),
                         {"deleted": True})
        self.refused(self.call("bk_fetch", service=svc, rate_limit=rl["sid"], sid=bk2["sid"]), 404, 20404)
        self.assertEqual([b["sid"] for b in self.ok(self.call("bk_list", service=svc, rate_limit=rl["sid"]))["items"]],
                         [bk["sid"]])

        # RateLimits (the SDK serializes the object as JSON): end_user_id's bucket takes two sends of a value.
        user1 = {"end_user_id": "user-1"}
        self.send(svc, "+919812340201", rate_limits=user1)
        self.send(svc, "+919812340202", rate_limits=user1)
        e = self.refused(self.call("ver_create", service=svc, to="+919812340203", channel="sms", rate_limits=user1),
                         429, 20429)
        self.assertIn("Too many requests", e["message"])
        # Another value has its own count; the refused number took nothing (it is sent to without RateLimits); a
        # rate limit without buckets limits nothing; another service's end_user_id is not this one's.
        self.send(svc, "+919812340204", rate_limits={"end_user_id": "user-2"})
        self.send(svc, "+919812340203")
        self.send(svc, "+919812340205", rate_limits={"ip_address": "192.0.2.1"})
        self.send(other, "+919812340206", rate_limits=user1)
        # A name the service has no rate limit of: 400, Twilio's 60200.
        e = self.refused(self.call("ver_create", service=svc, to="+919812340207", channel="sms",
                                   rate_limits={"no_such_limit": "x"}), 400, 60200)
        self.assertIn("no_such_limit", e["message"])

        # A bucket's update holds from the next send: Max 3 takes a third send of user-1, not a fourth.
        self.ok(self.call("bk_update", service=svc, rate_limit=rl["sid"], sid=bk["sid"], max=3))
        self.send(svc, "+919812340208", rate_limits=user1)
        self.refused(self.call("ver_create", service=svc, to="+919812340209", channel="sms", rate_limits=user1),
                     429, 20429)

        # Deleted with its buckets: neither is found, and a send naming it is refused like any unknown name.
        self.assertEqual(self.ok(self.call("rl_delete", service=svc, sid=rl["sid"])), {"deleted": True})
        self.refused(self.call("rl_fetch", service=svc, sid=rl["sid"]), 404, 20404)
        self.refused(self.call("rl_delete", service=svc, sid=rl["sid"]), 404, 20404)
        self.refused(self.call("bk_fetch", service=svc, rate_limit=rl["sid"], sid=bk["sid"]), 404, 20404)
        self.refused(self.call("bk_update", service=svc, rate_limit=rl["sid"], sid=bk["sid"], max=5), 404, 20404)
        self.assertEqual([r["sid"] for r in self.ok(self.call("rl_list", service=svc))["items"]], [ip["sid"]])
        self.refused(self.call("ver_create", service=svc, to="+919812340209", channel="sms", rate_limits=user1),
                     400, 60200)
        # The name again: a new rate limit, without buckets, that limits nothing yet.
        again = self.ok(self.call("rl_create", service=svc, unique_name="end_user_id"))
        self.assertNotEqual(again["sid"], rl["sid"])
        self.assertEqual(self.ok(self.call("bk_list", service=svc, rate_limit=again["sid"]))["items"], [])
        self.send(svc, "+919812340209", rate_limits=user1)

    def test_locale_app_hash_origin(self):
        svc = self.new_service()
        hi, pt = TEMPLATES["hi"], TEMPLATES["pt"]

        # No Locale: otp.template, and nothing after it (login-web has no webotp_origin).
        v, code = self.send(svc, "+919812340301")
        self.assertRegex(self.sms(v), r"\A%s\Z" % DEFAULT_TEXT)
        # A Locale's own template; pt-BR has none, its language pt has; fr has neither: otp.template.
        v, code = self.send(svc, "+919812340302", locale="hi")
        self.assertEqual(self.sms(v), hi.replace("{code}", code))
        v, code = self.send(svc, "+919812340303", locale="pt-BR")
        self.assertEqual(self.sms(v), pt.replace("{code}", code))
        v, code = self.send(svc, "+919812340304", locale="fr-FR")
        self.assertRegex(self.sms(v), r"\A%s\Z" % DEFAULT_TEXT)
        # AppHash: its own last line, after any template.
        v, code = self.send(svc, "+919812340305", app_hash=APP_HASH)
        self.assertRegex(self.sms(v), r"\A%s\n%s\Z" % (DEFAULT_TEXT, APP_HASH))
        v, code = self.send(svc, "+919812340306", locale="hi-IN", app_hash=APP_HASH)
        self.assertEqual(self.sms(v), "%s\n%s" % (hi.replace("{code}", code), APP_HASH))
        # The code of a localized message is the verification's.
        c = self.ok(self.call("check", service=svc, to=v["to"], code=code))
        self.assertEqual((c["sid"], c["status"], c["valid"]), (v["sid"], "approved", True))

        # A Locale that is no tag, an AppHash that is not 11 of A-Z a-z 0-9 + /: 400, Twilio's 60200, before
        # anything is taken (the number's resend delay is not: the same number is sent to next).
        for fields in ({"locale": "pt BR"}, {"app_hash": APP_HASH[:10]}, {"app_hash": APP_HASH[:10] + "!"}):
            with self.subTest(**fields):
                self.refused(self.call("ver_create", service=svc, to="+919812340307", channel="sms", **fields),
                             400, 60200)
        v, code = self.send(svc, "+919812340307", locale="pt", app_hash=APP_HASH)
        self.assertEqual(self.sms(v), "%s\n%s" % (pt.replace("{code}", code), APP_HASH))

        # login-app has webotp_origin: WebOTP's origin-bound line, "@<origin> #<code>", is every message's last.
        self.client("app", OTHER_ACCOUNT, OTHER_KEY)
        app_svc = self.new_service("App", client="app", account=OTHER_ACCOUNT)
        v, code = self.send(app_svc, "+919812340308", client="app", account=OTHER_ACCOUNT)
        self.assertRegex(self.sms(v), r"\A%s\n@%s #%s\Z" % (DEFAULT_TEXT, ORIGIN.replace(".", r"\."), code))
        v, code = self.send(app_svc, "+919812340309", client="app", account=OTHER_ACCOUNT, locale="hi",
                            app_hash=APP_HASH)
        self.assertEqual(self.sms(v), "%s\n%s\n@%s #%s" % (hi.replace("{code}", code), APP_HASH, ORIGIN, code))
        c = self.ok(self.call("check", client="app", service=app_svc, verification_sid=v["sid"], code=code))
        self.assertEqual((c["sid"], c["status"], c["valid"]), (v["sid"], "approved", True))

    def test_max_attempts(self):
        svc = self.new_service()
        phone = "+919812340401"
        v, code = self.send(svc, phone)
        wrong = "%06d" % ((int(code) + 1) % 1000000)

        # otp.max_attempts (3) wrong checks, by number or by SID alike: the third spends the verification.
        for i, by in enumerate(({"to": phone}, {"verification_sid": v["sid"]}, {"to": phone})):
            c = self.ok(self.call("check", service=svc, code=wrong, **by))
            self.assertEqual((c["sid"], c["to"], c["status"], c["valid"]),
                             (v["sid"], phone, "max_attempts_reached" if i == 2 else "pending", False), (i, c))

        # Any further check, right code or wrong, by number or by SID: 429, Twilio's 60202.
        e = self.refused(self.call("check", service=svc, to=phone, code=code), 429, 60202)
        self.assertIn("Max check attempts reached", e["message"])
        self.refused(self.call("check", service=svc, verification_sid=v["sid"], code=code), 429, 60202)
        self.refused(self.call("check", service=svc, to=phone, code=wrong), 429, 60202)
        f = self.ok(self.call("ver_fetch", service=svc, sid=v["sid"]))
        self.assertEqual((f["sid"], f["status"], f["valid"]), (v["sid"], "max_attempts_reached", False))

        # Another number's verification is its own.
        v2, code2 = self.send(svc, "+919812340402")
        c = self.ok(self.call("check", service=svc, to=v2["to"], code=code2))
        self.assertEqual((c["sid"], c["status"], c["valid"]), (v2["sid"], "approved", True))


@unittest.skipIf(PYTHON_SDK_MISSING, PYTHON_SDK_MISSING)
class PythonSdkTest(Scenarios, OtpdTest):
    sdk_name = "python"
    sdk_prefix = "twilio-python "
    rest_class = "TwilioRestException"

    def drive_argv(self):
        return [DEB_PYTHON, DRIVE_PY]

    def test_list_error_is_not_a_rest_exception(self):
        # twilio-python reads no error out of a list page that is not a 200 (its own behaviour, kept here so a
        # change of it is seen): a plain TwilioException.
        self.client("ac_wrong", ACCOUNT, WRONG)
        e = self.drive.call("service_list", client="ac_wrong")["error"]
        self.assertEqual((e["class"], e["rest"], e["message"]), ("TwilioException", False, "Unable to fetch page"))


@unittest.skipIf(NODE_MISSING, "node and npm are not installed (make deps-test installs nodejs and npm)")
class NodeSdkTest(Scenarios, OtpdTest):
    sdk_name = "node"
    sdk_prefix = "twilio-node "
    rest_class = "RestException"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # The pinned packages, twilio among them, installed once (a stamp makes this a no-op later).
        subprocess.run(["make", "-s", "npm-tools"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)

    def drive_argv(self):
        return ["node", DRIVE_JS]

    def test_list_error_is_a_rest_exception(self):
        # twilio-node reads a failed list page's error like any other.
        self.client("ac_wrong", ACCOUNT, WRONG)
        self.refused(self.call("service_list", client="ac_wrong"), 401, 20003)

