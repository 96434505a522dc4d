"""docs/openapi.yaml against the real server: every route is driven through
Stoplight Prism's validating proxy (@stoplight/prism-cli, pinned in
tests/openapi/package.json, installed into build/npm by `make npm-tools`), so
a status, header or body that the document does not describe fails here.

Two proxies stand in front of one otpd:
  - strict (`prism proxy --errors`): every request the document allows. Any
    `sl-violations` header fails the test, whether about the request (then
    Prism answers for otpd: the document refuses what otpd takes) or about
    the response (otpd answered something the document does not describe).
  - lenient (no --errors): requests the document itself calls bad (no key, an
    unknown field, a body over 4 KiB, text/plain...). Prism only forwards
    those when not told to refuse them. Their `sl-violations` must name the
    request (the document agrees the request is bad) and never the response.
Every operation of the document must be called at least once, with its
answer validated: when the whole class ran, tearDownClass fails naming any
operation that was not. The document is read as JSON through `redocly bundle`.

/v2 (Twilio Verify v2) runs through the same proxies: login-web has a Twilio
account (Basic "AC...:" and its API key), bodies are forms with booleans as
true/false, and errors are Twilio's {code, message, more_info, status}. Every
/v2 operation is driven to its success, a 401, a 404 (or a 400) and a 503
20503 (Redis paused); sends and checks also to 429 (60203 from phone_10m,
60202 from wrong_codes' lock and from spent attempts, 20429 from a bucket of
a service's rate limit), 403 60410 (a block) and 400 60205 (a landline for a
service that skips them). Every window used is a sliding one of ten minutes
or more, so no wall-clock boundary can move a result. Prism reads a form by
its schema's properties and drops the others unseen, so a field the
document does not list goes through the lenient proxy as "maybe" bad.

The examples under docs/examples/ run here too, through the strict proxy.

Skipped only when node or npm is absent (`make test` installs them).
"""
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from harness import (API_KEY, OTHER_KEY, ROOT, SECRET, FakeProvider, Otpd, PortClash, Redis, base_config,
                     code_of, free_port, sanitizer_reports, wait_until)

SPEC = os.path.join(ROOT, "docs", "openapi.yaml")
NPM_BIN = os.path.join(ROOT, "build", "npm", "node_modules", ".bin")
ADMIN_KEY = "key-ops-admin-0123456789"
LIMIT = 2  # phone_10m: issues per phone and 10 minutes

ACCOUNT = "AC" + "5e" * 16  # login-web's Twilio account: Basic ACCOUNT:API_KEY on /v2
OTHER_ACCOUNT = "AC" + "a7" * 16  # login-app's, filled up to the 100 services an account may hold
# A template for the locale "fr" (otp.templates): /v1's locale and /v2's Locale pick it.
FR_TEMPLATE = "Votre code : {code}. Il expire dans {minutes} minutes."
APP_HASH = "FA+9qCX9VSu"

LIMITS = [
    {"name": "phone_10m", "key": "phone", "algorithm": "sliding_log", "limit": LIMIT, "window": "10m"},
    # Only requests with a device_id: the examples' 429 (a 2-s window keeps the wait short).
    {"name": "device_2s", "key": "device", "algorithm": "sliding_log", "limit": 1, "window": "2s"},
    {"name": "wrong_codes", "key": ["phone", "api_key"], "algorithm": "wrong_guess_cap", "limit": 2,
     "window": "1d"},
]

NODE_MISSING = shutil.which("node") is None or shutil.which("npm") is None


def french(code, app_hash):
    """The SMS of FR_TEMPLATE for code with app_hash's line, as a regex (any minutes)."""
    return "^%s\n%s$" % (re.escape(FR_TEMPLATE).replace(re.escape("{code}"), code)
                          .replace(re.escape("{minutes}"), "[0-9]+"), re.escape(app_hash))


def _violations(headers):
    raw = headers.get("sl-violations")
    if raw is None:
        return []
    try:
        return json.loads(raw)
    except ValueError:
        return [{"location": ["?"], "message": raw}]


class Prism:
    """One `prism proxy` in front of upstream, on a loopback port."""

    def __init__(self, workdir, name, upstream, strict):
        self.dir, self.name, self.upstream, self.strict = workdir, name, upstream, strict
        self.proc = self.port = None
        self.log_path = os.path.join(workdir, "prism-%s.log" % name)

    def start(self):
        for attempt in range(5):
            self.port = free_port()
            args = [os.path.join(NPM_BIN, "prism"), "proxy", "-h", "127.0.0.1", "-p", str(self.port), "--cors",
                    "false"] + (["--errors"] if self.strict else []) + [SPEC, self.upstream]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
            # Node's start and the document's parse take seconds on a loaded machine.
            try:
                wait_until(self._up, timeout=120, step=0.2, what="prism %s listening" % self.name)
                return self
            except PortClash:
                self.stop()
        raise PortClash("prism %s found no free port" % self.name)

    def _up(self):
        if self.proc.poll() is not None:
            text = self.log()
            if "EADDRINUSE" in text:
                raise PortClash(text[-300:])
            raise AssertionError("prism %s exited:\n%s" % (self.name, text[-3000:]))
        return "Prism is listening on" in self.log()

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def bundle_json(workdir):
    """The document as JSON (redocly bundle; the standard library reads no YAML)."""
    out = os.path.join(workdir, "openapi.json")
    subprocess.run([os.path.join(NPM_BIN, "redocly"), "bundle", SPEC, "--output", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir)
    with open(out) as f:
        return json.load(f)


def template_of(doc, method, path):
    """The document's (method, path template) for a concrete path, or None."""
    path = path.split("?", 1)[0]
    exact = [(method, p) for p, ops in doc["paths"].items() if p == path and method in ops]
    if exact:
        return exact[0]
    for p, ops in doc["paths"].items():
        if "{" in p and method in ops and re.fullmatch(re.sub(r"\{[^/]+\}", "[^/]+", p), path):
            return (method, p)
    return None


@unittest.skipIf(NODE_MISSING, "node and npm are not installed (make test installs nodejs and npm)")
class OpenApiTest(unittest.TestCase):
    """One otpd (Kannel-style provider, so delivery reports have real URLs)
    behind both proxies for the whole class; tests use their own phones."""

    @classmethod
    def setUpClass(cls):
        # The pinned tools, installed once (a stamp makes this a no-op later).
        subprocess.run(["make", "-s", "npm-tools"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        cls.tmp = tempfile.mkdtemp(prefix="otpd-openapi-")
        cls.redis = cls.fake = cls.otpd = None
        cls.proxies = []
        cls.seen = {}       # (method, template) -> {status: requests}
        cls.requests = 0
        cls.violations = 0  # unexpected ones: each also fails its test
        cls.rid = 0
        cls.ran = set()     # the test methods that ran (coverage is checked when all did)
        try:
            cls.doc = bundle_json(cls.tmp)
            cls.redis = Redis(cls.tmp).start()
            cls.fake = FakeProvider(cls.tmp).start()
            for attempt in range(5):
                port = free_port()
                cfg = base_config(cls.redis.port, cls.fake.url, os.path.join(cls.tmp, "ledger.db"), port,
                                  limits=LIMITS)
                cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
                cfg["api_keys"][0]["twilio"] = {"account_sid": ACCOUNT}
                cfg["api_keys"][1]["twilio"] = {"account_sid": OTHER_ACCOUNT}
                cfg["otp"]["templates"] = {"fr": FR_TEMPLATE}
                cfg["provider"] = {"type": "kannel", "url": cls.fake.url + "/cgi-bin/sendsms", "from": "OTPD",
                                   "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS",
                                   "callback_url": "http://" + cfg["listen"]}
                cls.otpd = Otpd(cls.tmp, cfg, {"OTPD_KEY_OPS": ADMIN_KEY, "KANNEL_USER": "kuser",
                                               "KANNEL_PASS": "kpass-secret"})
                try:
                    cls.otpd.start()
                    break
                except PortClash:
                    if attempt == 4:
                        raise
            upstream = "http://127.0.0.1:%d" % cls.otpd.port
            cls.strict = Prism(cls.tmp, "strict", upstream, True)
            cls.lenient = Prism(cls.tmp, "lenient", upstream, False)
            for p in (cls.strict, cls.lenient):
                cls.proxies.append(p)
                p.start()
        except BaseException:
            cls._stop_all()
            raise

    @classmethod
    def _stop_all(cls):
        for p in cls.proxies:
            p.stop()
        if cls.otpd is not None and cls.otpd.proc is not None and cls.otpd.proc.poll() is None:
            cls.otpd.stop()
        for p in (cls.fake, cls.redis):
            if p is not None:
                p.stop()

    @classmethod
    def tearDownClass(cls):
        rc = cls.otpd.stop() if cls.otpd.proc.poll() is None else cls.otpd.proc.returncode
        cls._stop_all()
        pairs = sum(len(s) for s in cls.seen.values())
        ops = [(m, p) for p, o in cls.doc["paths"].items() for m in o if m in ("get", "post", "delete")]
        documented = sorted((m.upper(), p, s) for m, p in ops for s in cls.doc["paths"][p][m]["responses"]
                            if int(s) not in cls.seen.get((m, p), {}))
        print("\nprism: %d requests through the validating proxy, %d of %d operations, %d (operation, status) "
              "pairs, %d violations" % (cls.requests, len(cls.seen), len(ops), pairs, cls.violations), file=sys.stderr)
        print("prism: documented but not driven: %s" % ", ".join("%s %s %s" % d for d in documented),
              file=sys.stderr)
        found = [r for r in [cls.otpd.sanitizer_report()] if r] + \
            [r for r in sanitizer_reports(cls.tmp) if not r.startswith("san.otpd.")]
        if rc != 0:
            found.append("otpd exited with %s on SIGTERM:\n%s" % (rc, cls.otpd.log()[-3000:]))
        # Every operation called, with its answer validated: checked when every test of the class ran.
        missed = sorted("%s %s" % (m.upper(), p) for m, p in ops if (m, p) not in cls.seen)
        if cls.ran >= set(unittest.defaultTestLoader.getTestCaseNames(cls)) and missed:
            found.append("operations of the document never called: %s" % ", ".join(missed))
        if found:
            raise AssertionError("a process reported a problem (files kept in %s):\n%s" % (cls.tmp, "\n".join(found)))
        if not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        type(self).ran.add(self._testMethodName)

    # -- calls through a proxy --------------------------------------------------------------------------------

    def call(self, method, path, body=None, auth=API_KEY, headers=None, raw=None, bad_request=False):
        """One request through the strict proxy (or, with bad_request, the
        lenient one: the document must call the request bad; "maybe": it
        may). Returns
        (status, headers with lower-case names, parsed JSON or text)."""
        proxy = self.lenient if bad_request else self.strict
        cls = type(self)
        cls.rid += 1
        rid = "openapi-%d" % cls.rid
        h = {"X-Request-Id": rid}
        h.update(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        if auth:
            h["Authorization"] = "Bearer " + auth
        req = urllib.request.Request(proxy.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, hdrs, text = r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, text = e.code, e.headers, e.read()
        hdrs = {k.lower(): v for k, v in hdrs.items()}
        what = "%s %s -> %s %s" % (method, path, status, text[:300])
        v = _violations(hdrs)
        if bad_request:
            response = [x for x in v if x.get("location", [""])[0] != "request"]
            cls.violations += len(response) + (0 if v or bad_request == "maybe" else 1)
            if bad_request != "maybe":
                self.assertTrue(v, "the document accepts a request otpd refuses: " + what)
            self.assertEqual(response, [], "the answer violates the document: " + what)
        else:
            cls.violations += len(v)
            self.assertEqual(v, [], "sl-violations: " + what)
        # Echoed when the server echoes it (the logs part of issue 12); never another id.
        if "x-request-id" in hdrs:
            self.assertEqual(hdrs["x-request-id"], rid, what)
        op = template_of(self.doc, method.lower(), path)
        self.assertIsNotNone(op, "not in the document: " + what)
        cls.requests += 1
        cls.seen.setdefault(op, {}).setdefault(status, 0)
        cls.seen[op][status] += 1
        ctype = hdrs.get("content-type", "")
        payload = json.loads(text) if "json" in ctype and text else text.decode(errors="replace")
        # Prism's own refusals (a request the document refuses, with --errors) carry no sl-violations.
        if isinstance(payload, dict) and str(payload.get("type", "")).startswith("https://stoplight.io/prism"):
            cls.violations += 1
            self.fail("Prism answered, not otpd: " + what)
        if status >= 400 and path.startswith("/v2/"):
            # Twilio's error, exactly its four fields.
            self.assertIn("application/json", ctype, what)
            self.assertEqual(sorted(payload), ["code", "message", "more_info", "status"], what)
            self.assertEqual(payload["status"], status, what)
            self.assertEqual(payload["more_info"], "https://www.twilio.com/docs/errors/%d" % payload["code"], what)
        elif status >= 400 and not path.startswith("/readyz"):
            self.assertIn("application/problem+json", ctype, what)
            self.assertEqual(payload["status"], status, what)
            self.assertEqual(payload["type"], "urn:otpd:problem:" + payload.get("error", "?"), what)
        # /v2: the document says which answers must carry Retry-After (Prism checks it); a 429 60202 of a
        # verification whose attempts are spent has none, as that never ends.
        if status in (429, 503) and not path.startswith("/readyz") and not path.startswith("/v2/"):
            self.assertIn("retry-after", hdrs, what)
            self.assertGreaterEqual(int(hdrs["retry-after"]), 1, what)
        return status, hdrs, payload

    def v2(self, method, path, form=None, user=ACCOUNT, password=API_KEY, bad_request=False, headers=None):
        """One /v2 request through a proxy (as call): form, (name, value)
        pairs sent form-encoded; Basic user:password (user None: no
        Authorization)."""
        h = dict(headers or {})
        if user is not None:
            h["Authorization"] = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
        raw = None
        if form is not None:
            raw = urllib.parse.urlencode(form).encode()
            h["Content-Type"] = "application/x-www-form-urlencoded"
        return self.call(method, path, auth=None, headers=h, raw=raw, bad_request=bad_request)

    def v2_service(self, *fields):
        st, _, svc = self.v2("POST", "/v2/Services", [("FriendlyName", "openapi")] + list(fields))
        self.assertEqual(st, 201, svc)
        return svc["sid"]

    def v2_send(self, svc, phone, *fields):
        """A verification sent: (its answer, the code the provider got, the SMS text)."""
        st, _, ver = self.v2("POST", "/v2/Services/%s/Verifications" % svc, [("To", phone), ("Channel", "sms")] +
                             list(fields))
        self.assertEqual(st, 201, ver)
        text = self.provider_request(ver["send_code_attempts"][-1]["attempt_sid"][2:])["args"]["text"]
        return ver, code_of(text), text

    def twilio_error(self, answer, status, code):
        st, h, p = answer
        self.assertEqual((st, p["code"]), (status, code), p)
        return h, p

    def provider_request(self, mid):
        """The fake Kannel's request for message mid."""
        def find():
            got = [r for r in self.fake.requests() if mid in str(r.get("args", ""))]
            return got[0] if got else None
        return wait_until(find, what="the provider's request for %s" % mid)

    def issue_code(self, phone, **fields):
        st, h, body = self.call("POST", "/v1/otp", dict(phone=phone, **fields))
        self.assertEqual(st, 202, body)
        return body, code_of(self.provider_request(body["id"])["args"]["text"])

    # -- the tests ---------------------------------------------------------------------------------------------

    def test_issue_verify_status(self):
        phone = "+919812340001"
        body, code = self.issue_code(phone, device_id="dev-1", client_ip="203.0.113.7", purpose="login")
        self.assertEqual(body["expires_in"], 300)
        st, h, _ = self.call("POST", "/v1/otp", {"phone": phone, "purpose": "login"})
        self.assertEqual(st, 202)  # the same code again; the rule's headers say what is left
        self.assertEqual(h["ratelimit-policy"], '"phone_10m";q=%d;w=600' % LIMIT)
        self.assertRegex(h["ratelimit"], r'^"phone_10m";r=0;t=\d+$')
        st, h, p = self.call("POST", "/v1/otp", {"phone": phone, "purpose": "login"})
        self.assertEqual((st, p["error"], p["reason"]), (429, "rate_limited", "phone_10m"))
        st, _, p = self.call("GET", "/v1/otp/" + body["id"])
        self.assertEqual((st, p["id"]), (200, body["id"]))
        self.assertIn(p["status"], ("queued", "sending", "sent"))
        st, _, p = self.call("GET", "/v1/otp/" + "0" * 32)
        self.assertEqual((st, p["error"]), (404, "not_found"))
        st, _, p = self.call("GET", "/v1/otp/" + body["id"], auth=OTHER_KEY)
        self.assertEqual(st, 404)  # another caller's message
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        st, h, p = self.call("POST", "/v1/otp/verify", {"phone": phone, "code": wrong, "purpose": "login"})
        self.assertEqual((st, p["error"], p["attempts_left"]), (422, "invalid_code", 2))
        st, _, p = self.call("POST", "/v1/otp/verify", {"phone": phone, "code": "12345", "purpose": "login"})
        self.assertEqual((st, p["error"]), (400, "invalid_request"))  # not otp.length digits
        st, _, p = self.call("POST", "/v1/otp/verify", {"phone": phone, "code": code, "purpose": "login"})
        self.assertEqual((st, p["verified"], p["verification_id"]), (200, True, body["verification_id"]))
        st, _, p = self.call("POST", "/v1/otp/verify", {"phone": phone, "code": code, "purpose": "login"})
        self.assertEqual((st, p["error"]), (404, "no_active_code"))

    def test_bad_phone_and_key(self):
        st, _, p = self.call("POST", "/v1/otp", {"phone": "+44123"})
        self.assertEqual((st, p["error"]), (400, "invalid_phone"))
        st, h, p = self.call("POST", "/v1/otp", {"phone": "+919812340002"}, auth="not-a-key")
        self.assertEqual((st, p["error"], h["www-authenticate"]), (401, "unauthorized", "Bearer"))
        st, _, p = self.call("POST", "/v1/otp", {"phone": "+919812340002", "client_ip": "not-an-ip"})
        self.assertEqual((st, p["error"]), (400, "invalid_request"))

    def test_idempotency_key(self):
        phone = "+919812340003"
        key = {"Idempotency-Key": "openapi-idem-1"}
        st1, _, first = self.call("POST", "/v1/otp", {"phone": phone}, headers=key)
        st2, _, again = self.call("POST", "/v1/otp", {"phone": phone}, headers=key)
        self.assertEqual((st1, st2, again), (202, 202, first))
        st, _, p = self.call("POST", "/v1/otp", {"phone": phone, "purpose": "other"}, headers=key)
        self.assertEqual((st, p["error"]), (422, "idempotency_key_reused"))
        st, _, p = self.call("POST", "/v1/otp/verify", {"phone": phone, "code": "000000"}, headers=key)
        self.assertIn(st, (404, 422))  # verify is its own operation: the key is fresh there

    def test_lock_and_unlock(self):
        phone = "+919812340004"
        _, code = self.issue_code(phone)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        statuses = [self.call("POST", "/v1/otp/verify", {"phone": phone, "code": wrong})[0] for _ in range(2)]
        self.assertEqual(statuses[0], 422)
        st, h, p = self.call("POST", "/v1/otp/verify", {"phone": phone, "code": code})
        self.assertEqual((st, p["error"], p["reason"]), (429, "locked", "wrong_codes"))
        st, _, p = self.call("POST", "/v1/admin/unlock", {"phone": phone, "api_key": "login-web", "note": "test"},
                             auth=ADMIN_KEY)
        self.assertEqual(st, 200)
        self.assertGreaterEqual(p["unlocked"], 1)
        st, _, p = self.call("POST", "/v1/otp/verify", {"phone": phone, "code": code})
        self.assertIn(st, (200, 404), p)  # the lock is gone; the code may have died at max_attempts

    def test_cancel(self):
        phone = "+919812340005"
        body, _ = self.issue_code(phone)
        st, _, p = self.call("POST", "/v1/otp/cancel", {"phone": phone})
        self.assertEqual((st, p["cancelled"], p["verification_id"]), (200, True, body["verification_id"]))
        st, _, p = self.call("POST", "/v1/otp/cancel", {"phone": phone})
        self.assertEqual((st, p["error"]), (404, "no_active_code"))

    def test_roles(self):
        st, _, p = self.call("POST", "/v1/otp", {"phone": "+919812340006"}, auth=ADMIN_KEY)
        self.assertEqual((st, p["error"]), (403, "forbidden"))
        st, _, p = self.call("GET", "/v1/admin/blocks")
        self.assertEqual((st, p["error"]), (403, "forbidden"))

    def test_blocks(self):
        phone = "+919812340007"
        st, _, row = self.call("POST", "/v1/admin/blocks", {"match": {"phone": phone}, "expires_in": "1h",
                                                            "note": "openapi"}, auth=ADMIN_KEY)
        self.assertEqual(st, 201, row)
        st, _, p = self.call("GET", "/v1/admin/blocks", auth=ADMIN_KEY)
        self.assertEqual(st, 200)
        self.assertIn(row["id"], [i["id"] for i in p["items"]])
        # Every instance sees a block within 2 s (the refresh): wait for this one to.
        wait_until(lambda: self.otpd.issue(phone)[0] == 403, step=0.1, what="the block in force")
        st, _, p = self.call("POST", "/v1/otp", {"phone": phone})
        self.assertEqual((st, p["error"]), (403, "blocked"))
        st, _, p = self.call("DELETE", "/v1/admin/blocks/" + row["id"], auth=ADMIN_KEY)
        self.assertEqual(st, 204)
        st, _, p = self.call("DELETE", "/v1/admin/blocks/" + row["id"], auth=ADMIN_KEY)
        self.assertEqual((st, p["error"]), (404, "not_found"))
        st, _, p = self.call("POST", "/v1/admin/blocks", {"match": {"planet": "mars"}, "expires_in": "1h"},
                             auth=ADMIN_KEY, bad_request=True)
        self.assertEqual((st, p["error"]), (400, "invalid_request"))

    def test_overrides(self):
        st, _, row = self.call("POST", "/v1/admin/overrides",
                               {"rule": "phone_10m", "key": {"phone": "+919812340008"}, "limit": 5,
                                "expires_in": "1h", "note": "openapi"}, auth=ADMIN_KEY)
        self.assertEqual(st, 201, row)
        st, _, p = self.call("GET", "/v1/admin/overrides", auth=ADMIN_KEY)
        self.assertEqual(st, 200)
        mine = [i for i in p["items"] if i["id"] == row["id"]]
        self.assertEqual([(i["rule"], i["limit"], i["created_by"]) for i in mine], [("phone_10m", 5, "ops")])
        st, _, p = self.call("POST", "/v1/admin/overrides",
                             {"rule": "no_such_rule", "key": {"phone": "+919812340008"}, "limit": 5,
                              "expires_in": "1h"}, auth=ADMIN_KEY)
        self.assertEqual((st, p["error"]), (400, "invalid_request"))
        self.assertEqual(self.call("DELETE", "/v1/admin/overrides/" + row["id"], auth=ADMIN_KEY)[0], 204)
        st, _, p = self.call("DELETE", "/v1/admin/overrides/" + "0" * 16, auth=ADMIN_KEY)
        self.assertEqual((st, p["error"]), (404, "not_found"))

    def test_delivery_reports(self):
        body, _ = self.issue_code("+919812340009")
        url = urllib.parse.urlsplit(self.provider_request(body["id"])["args"]["dlr-url"].replace("%d", "1"))
        self.assertEqual(url.path, "/v1/dlr/kannel")
        wait_until(lambda: self.otpd.call("GET", "/v1/otp/" + body["id"])[2]["status"] == "sent",
                   what="message sent")
        st, _, p = self.call("GET", url.path + "?" + url.query, auth=None)
        self.assertEqual((st, p), (200, {"ok": True}))
        st, _, p = self.call("GET", "/v1/otp/" + body["id"])
        self.assertEqual((st, p["status"]), (200, "delivered"))
        st, _, p = self.call("GET", "/v1/dlr/kannel?" + url.query.replace("tag=", "tag=0"), auth=None)
        self.assertEqual((st, p["error"]), (404, "not_found"))
        st, _, p = self.call("POST", "/v1/dlr/twilio?" + url.query, auth=None, raw=b"MessageStatus=delivered",
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual((st, p["error"]), (403, "invalid_signature"))  # no Twilio account: nothing signs

    def test_operations(self):
        st, _, p = self.call("GET", "/healthz", auth=None)
        self.assertEqual((st, p), (200, {"status": "ok"}))
        st, _, p = self.call("GET", "/readyz", auth=None)
        self.assertEqual((st, p["status"]), (200, "ready"))
        st, h, text = self.call("GET", "/metrics", auth=None)
        self.assertEqual(st, 200)
        self.assertIn("# TYPE", text)

    def test_refused_requests(self):
        """Requests the document calls bad: through the lenient proxy."""
        phone = "+919812340010"
        st, h, p = self.call("POST", "/v1/otp", {"phone": phone}, auth=None, bad_request=True)
        self.assertEqual((st, p["error"], h["www-authenticate"]), (401, "unauthorized", "Bearer"))
        st, _, p = self.call("GET", "/v1/admin/overrides", auth=None, bad_request=True)
        self.assertEqual(st, 401)
        for body in ({"phone": phone, "colour": "red"}, {"purpose": "login"}, {"phone": 919812340010},
                     {"phone": phone, "device_id": "d" * 129}, {"phone": phone, "purpose": ""}):
            st, _, p = self.call("POST", "/v1/otp", body, bad_request=True)
            self.assertEqual((st, p["error"]), (400, "invalid_request"), body)
        st, _, p = self.call("POST", "/v1/otp", {"phone": phone}, headers={"Idempotency-Key": "k" * 65},
                             bad_request=True)
        self.assertEqual((st, p["error"]), (400, "invalid_request"))
        st, _, p = self.call("POST", "/v1/otp/verify", {"phone": phone}, bad_request=True)
        self.assertEqual((st, p["error"]), (400, "invalid_request"))  # no code
        st, _, p = self.call("POST", "/v1/otp/cancel", {"phone": phone, "code": "1"}, bad_request=True)
        self.assertEqual((st, p["error"]), (400, "invalid_request"))
        st, _, p = self.call("POST", "/v1/admin/unlock", {"api_key": "login-web"}, auth=ADMIN_KEY,
                             bad_request=True)
        self.assertEqual((st, p["error"]), (400, "invalid_request"))
        st, _, p = self.call("POST", "/v1/otp", {"phone": phone, "device_id": "d" * 5000}, bad_request=True)
        self.assertEqual((st, p["error"]), (413, "payload_too_large"))
        st, _, p = self.call("POST", "/v1/otp", raw=json.dumps({"phone": phone}).encode(),
                             headers={"Content-Type": "text/plain"}, bad_request=True)
        self.assertEqual((st, p["error"]), (415, "unsupported_media_type"))

    def operations(self):
        """(method, concrete path, needs a body, admin) of every /v1
        operation with an API key."""
        out = []
        for path, ops in self.doc["paths"].items():
            for method, op in ops.items():
                if method not in ("get", "post", "delete") or op.get("security") == [] or \
                        not path.startswith("/v1/"):
                    continue
                concrete = path.replace("{id}", "0" * (16 if "/admin/" in path else 32))
                out.append((method.upper(), concrete, "requestBody" in op, path.startswith("/v1/admin/")))
        return out

    def test_every_operation_refuses_the_wrong_caller(self):
        """401 without a key, 403 with the other role's key; a body over
        4 KiB is 413 and one that is not JSON 415, before any key is read."""
        phone = "+919812340012"
        bodies = {"/v1/otp": {"phone": phone}, "/v1/otp/verify": {"phone": phone, "code": "123456"},
                  "/v1/otp/cancel": {"phone": phone}, "/v1/admin/unlock": {"phone": phone},
                  "/v1/admin/blocks": {"match": {"region": "ZZ"}, "expires_in": "1h"},
                  "/v1/admin/overrides": {"rule": "phone_10m", "key": {"phone": phone}, "limit": 5,
                                          "expires_in": "1h"}}
        for method, path, has_body, admin in self.operations():
            body = bodies[path] if has_body else None
            st, h, p = self.call(method, path, body, auth=None, bad_request=True)
            self.assertEqual((st, p["error"]), (401, "unauthorized"), path)
            st, _, p = self.call(method, path, body, auth=API_KEY if admin else ADMIN_KEY)
            self.assertEqual((st, p["error"]), (403, "forbidden"), path)
            if has_body:
                st, _, p = self.call(method, path, {"note": "n" * 5000}, bad_request=True)
                self.assertEqual((st, p["error"]), (413, "payload_too_large"), path)
                st, _, p = self.call(method, path, raw=b"{}", headers={"Content-Type": "text/plain"},
                                     bad_request=True)
                self.assertEqual((st, p["error"]), (415, "unsupported_media_type"), path)
        st, _, p = self.call("POST", "/v1/dlr/twilio?id=x", raw=b"MessageStatus=" + b"d" * 5000, auth=None,
                             headers={"Content-Type": "application/x-www-form-urlencoded"}, bad_request="maybe")
        self.assertEqual((st, p["error"]), (413, "payload_too_large"))

    def test_issue_locale_and_app_hash(self):
        """/v1: locale picks otp.templates' template (its language when the
        tag itself has none), app_hash is the message's last line."""
        body, code = self.issue_code("+919812340013", locale="fr-CA", app_hash=APP_HASH)
        text = self.provider_request(body["id"])["args"]["text"]
        self.assertRegex(text, french(code, APP_HASH))
        body, code = self.issue_code("+919812340014", locale="de")  # no template: otp.template
        self.assertTrue(self.provider_request(body["id"])["args"]["text"].startswith(code + " is your login code"))
        for bad in ({"locale": ""}, {"locale": "fr.FR"}, {"locale": "x" * 36}, {"app_hash": "short"},
                    {"app_hash": "FA+9qCX9VS!"}, {"app_hash": APP_HASH + "x"}):
            st, _, p = self.call("POST", "/v1/otp", dict(phone="+919812340014", **bad), bad_request=True)
            self.assertEqual((st, p["error"]), (400, "invalid_request"), bad)

    # -- /v2 -----------------------------------------------------------------------------------------------------

    def v2_operations(self, svc="VA" + "0" * 32, rl="RK" + "0" * 32):
        """(method, concrete path, a form it takes or None) of every /v2
        operation, with SIDs of the right kinds (svc, rl, and zeros)."""
        forms = {"/v2/Services": [("FriendlyName", "x")], "/v2/Services/{Sid}": [("FriendlyName", "x")],
                 "/v2/Services/{ServiceSid}/RateLimits/{Sid}": [("Description", "x")],
                 "/v2/Services/{ServiceSid}/RateLimits/{RateLimitSid}/Buckets/{Sid}": [("Max", "1")],
                 "/v2/Services/{ServiceSid}/Verifications": [("To", "+919812340199"), ("Channel", "sms")],
                 "/v2/Services/{ServiceSid}/Verifications/{Sid}": [("Status", "canceled")],
                 "/v2/Services/{ServiceSid}/VerificationCheck": [("To", "+919812340199"), ("Code", "123456")],
                 "/v2/Services/{ServiceSid}/RateLimits": [("UniqueName", "x")],
                 "/v2/Services/{ServiceSid}/RateLimits/{RateLimitSid}/Buckets": [("Max", "1"), ("Interval", "60")]}
        out = []
        for path, ops in self.doc["paths"].items():
            if not path.startswith("/v2/"):
                continue
            last = {"Services": svc, "Verifications": "VE" + "0" * 32, "RateLimits": rl,
                    "Buckets": "BL" + "0" * 32}.get(path.split("/")[-2], "")
            concrete = path.replace("{ServiceSid}", svc).replace("{RateLimitSid}", rl).replace("{Sid}", last)
            for method, op in ops.items():
                if method in ("get", "post", "delete"):
                    form = forms[path] if "requestBody" in op else None
                    out.append((method.upper(), concrete, form))
        return out

    def test_v2_credentials(self):
        """Every /v2 operation: 401 20003 with Basic's challenge without
        credentials, with a wrong key, and with /v1's Bearer key; 404 20404
        for SIDs of the right kind that are no rows of this account."""
        for method, path, form in self.v2_operations():
            h, _ = self.twilio_error(self.v2(method, path, form, user=None, bad_request=True), 401, 20003)
            self.assertEqual(h["www-authenticate"], 'Basic realm="Twilio API"', path)
            h, _ = self.twilio_error(self.v2(method, path, form, password="not-the-key"), 401, 20003)
            self.assertEqual(h["www-authenticate"], 'Basic realm="Twilio API"', path)
            self.twilio_error(self.v2(method, path, form, user=None, headers={"Authorization": "Bearer " + API_KEY},
                                      bad_request=True), 401, 20003)
            if path != "/v2/Services":
                self.twilio_error(self.v2(method, path, form), 404, 20404)
        # Another caller's account does not reach this one's rows.
        svc = self.v2_service()
        self.assertEqual(self.v2("GET", "/v2/Services/" + svc)[0], 200)
        st, _, p = self.v2("GET", "/v2/Services/" + svc, user=ACCOUNT, password=OTHER_KEY)
        self.assertEqual(st, 401, p)  # login-app's key is not login-web's account's
        self.twilio_error(self.v2("GET", "/v2/Services/" + svc, user=OTHER_ACCOUNT, password=OTHER_KEY), 404, 20404)

    def test_v2_service_cap(self):
        """An account holds at most 100 services: the 101st is 400 60200."""
        st, _, page = self.v2("GET", "/v2/Services?PageSize=1000", user=OTHER_ACCOUNT, password=OTHER_KEY)
        self.assertEqual(st, 200, page)
        for i in range(100 - len(page["services"])):
            st, _, p = self.v2("POST", "/v2/Services", [("FriendlyName", "cap %d" % i)], user=OTHER_ACCOUNT,
                               password=OTHER_KEY)
            self.assertEqual(st, 201, p)
        _, p = self.twilio_error(self.v2("POST", "/v2/Services", [("FriendlyName", "one more")], user=OTHER_ACCOUNT,
                                         password=OTHER_KEY), 400, 60200)
        self.assertIn("100 services", p["message"])

    def test_v2_services(self):
        svc = self.v2_service(("CodeLength", "6"), ("LookupEnabled", "true"), ("SkipSmsToLandlines", "false"),
                              ("Psd2Enabled", "false"), ("Push.IncludeDate", "false"))
        st, _, p = self.v2("GET", "/v2/Services/" + svc)
        self.assertEqual((st, p["sid"], p["account_sid"], p["friendly_name"], p["code_length"], p["lookup_enabled"]),
                         (200, svc, ACCOUNT, "openapi", 6, True))
        self.assertTrue(p["url"].endswith("/v2/Services/" + svc), p["url"])
        st, _, p = self.v2("POST", "/v2/Services/" + svc, [("FriendlyName", "renamed"), ("SkipSmsToLandlines", "true")])
        self.assertEqual((st, p["friendly_name"], p["skip_sms_to_landlines"]), (200, "renamed", True))
        other = self.v2_service()
        st, _, page = self.v2("GET", "/v2/Services?PageSize=1&Page=0")
        self.assertEqual((st, len(page["services"]), page["meta"]["key"], page["meta"]["previous_page_url"]),
                         (200, 1, "services", None))
        self.assertIsNotNone(page["meta"]["next_page_url"])
        st, _, page = self.v2("GET", "/v2/Services?PageSize=1000")
        self.assertIn(other, [x["sid"] for x in page["services"]])
        self.assertIsNone(page["meta"]["next_page_url"])
        # What otpd refuses, the document refuses too (true for an off-only flag, an empty or missing name, a
        # page size out of range); CodeLength other than otp.length it allows.
        for form in ([("FriendlyName", "x"), ("Psd2Enabled", "true")], [("FriendlyName", "")], []):
            self.twilio_error(self.v2("POST", "/v2/Services", form, bad_request=True), 400, 60200)
        self.twilio_error(self.v2("POST", "/v2/Services", [("FriendlyName", "x"), ("CodeLength", "4")]), 400, 60200)
        self.twilio_error(self.v2("GET", "/v2/Services?PageSize=0", bad_request=True), 400, 60200)
        # A field the document does not list (additionalProperties: false): Prism reads a form by the schema's
        # properties and drops the others unseen, so it may not say so; the answer is validated all the same.
        for form in ([("FriendlyName", "x"), ("TtsName", "x")], [("FriendlyName", "x"), ("Colour", "red")]):
            self.twilio_error(self.v2("POST", "/v2/Services", form, bad_request="maybe"), 400, 60200)
        self.twilio_error(self.v2("POST", "/v2/Services/" + svc, [("Totp.Issuer", "x")], bad_request="maybe"), 400,
                          60200)
        self.assertEqual(self.v2("DELETE", "/v2/Services/" + other)[0], 204)
        self.twilio_error(self.v2("DELETE", "/v2/Services/" + other), 404, 20404)
        self.twilio_error(self.v2("GET", "/v2/Services/" + other), 404, 20404)
        self.twilio_error(self.v2("POST", "/v2/Services/" + other, [("FriendlyName", "x")]), 404, 20404)

    def test_v2_send_check_update(self):
        svc = self.v2_service()
        # Locale and AppHash as /v1's locale and app_hash.
        ver, code, text = self.v2_send(svc, "+919812340101", ("Locale", "fr"), ("AppHash", APP_HASH),
                                       ("DeviceIp", "203.0.113.9"), ("Tags", '{"order":"1"}'), ("RiskCheck", "enable"),
                                       ("EnableSnaClientToken", "false"))
        self.assertRegex(text, french(code, APP_HASH))
        self.assertEqual((ver["status"], ver["valid"], ver["to"], ver["service_sid"]),
                         ("pending", False, "+919812340101", svc))
        base = "/v2/Services/%s/Verifications/" % svc
        st, _, p = self.v2("GET", base + ver["sid"])
        self.assertEqual((st, p["sid"], p["status"]), (200, ver["sid"], "pending"))
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        check = "/v2/Services/%s/VerificationCheck" % svc
        st, _, p = self.v2("POST", check, [("To", "+919812340101"), ("Code", wrong)])
        self.assertEqual((st, p["status"], p["valid"]), (200, "pending", False))
        self.twilio_error(self.v2("POST", check, [("To", "+919812340101"), ("Code", "12345")]), 400, 60200)
        st, _, p = self.v2("POST", check, [("VerificationSid", ver["sid"]), ("Code", code)])
        self.assertEqual((st, p["sid"], p["status"], p["valid"]), (200, ver["sid"], "approved", True))
        st, _, p = self.v2("GET", base + ver["sid"])
        self.assertEqual((st, p["status"], p["valid"]), (200, "approved", True))
        self.twilio_error(self.v2("POST", check, [("To", "+919812340101"), ("Code", code)]), 404, 20404)
        self.twilio_error(self.v2("POST", base + ver["sid"], [("Status", "canceled")]), 404, 20404)  # not pending
        # Cancel, approve.
        ver, _, _ = self.v2_send(svc, "+919812340102")
        st, _, p = self.v2("POST", base + ver["sid"], [("Status", "canceled")])
        self.assertEqual((st, p["status"], p["valid"]), (200, "canceled", False))
        self.twilio_error(self.v2("POST", check, [("To", "+919812340102"), ("Code", "123456")]), 404, 20404)
        ver, _, _ = self.v2_send(svc, "+919812340103")
        st, _, p = self.v2("POST", base + ver["sid"], [("Status", "approved")])
        self.assertEqual((st, p["status"], p["valid"]), (200, "approved", True))
        # Refused: by the document too (a channel but sms, no channel, both To and VerificationSid, a status
        # but canceled and approved; a Twilio field otpd does not implement, which Prism may not see), or by
        # otpd alone (a number not valid for its country).
        send = "/v2/Services/%s/Verifications" % svc
        for form in ([("To", "+919812340104"), ("Channel", "call")], [("To", "+919812340104")]):
            self.twilio_error(self.v2("POST", send, form, bad_request=True), 400, 60200)
        self.twilio_error(self.v2("POST", send, [("To", "+919812340104"), ("Channel", "sms"), ("CustomCode", "123456")],
                                  bad_request="maybe"), 400, 60200)
        self.twilio_error(self.v2("POST", send, [("To", "+44123"), ("Channel", "sms")]), 400, 60200)
        self.twilio_error(self.v2("POST", check, [("To", "+919812340104"), ("VerificationSid", ver["sid"]),
                                                  ("Code", "123456")], bad_request=True), 400, 60200)
        self.twilio_error(self.v2("POST", base + ver["sid"], [("Status", "expired")], bad_request=True), 400, 60200)
        self.twilio_error(self.v2("GET", base + "VE" + "0" * 32), 404, 20404)

    def test_v2_refusals(self):
        """429 60203 (phone_10m), 429 and 60202 (wrong_codes' lock, on
        checks and sends), 400 60205 (a landline, the service skipping
        them), 403 60410 (a block), with Retry-After where they end."""
        svc = self.v2_service()
        send = "/v2/Services/%s/Verifications" % svc
        check = "/v2/Services/%s/VerificationCheck" % svc
        phone = "+919812340111"
        first, code, _ = self.v2_send(svc, phone)
        again, _, _ = self.v2_send(svc, phone)  # the same verification, a second attempt
        self.assertEqual((again["sid"], len(again["send_code_attempts"])), (first["sid"], 2))
        h, p = self.twilio_error(self.v2("POST", send, [("To", phone), ("Channel", "sms")]), 429, 60203)
        self.assertEqual(h["ratelimit-policy"], '"phone_10m";q=%d;w=600' % LIMIT)
        self.assertTrue(0 < int(h["retry-after"]) <= 600, h)
        # The second wrong guess reaches wrong_codes' cap and locks the number: that check, the next one and
        # a send are 429 60202.
        phone = "+919812340112"
        _, code, _ = self.v2_send(svc, phone)
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        st, _, p = self.v2("POST", check, [("To", phone), ("Code", wrong)])
        self.assertEqual((st, p["status"]), (200, "pending"))
        h, _ = self.twilio_error(self.v2("POST", check, [("To", phone), ("Code", wrong)]), 429, 60202)
        self.assertEqual(h["ratelimit-policy"], '"wrong_codes";q=2;w=86400')
        self.assertTrue(0 < int(h["retry-after"]) <= 86400, h)
        self.twilio_error(self.v2("POST", check, [("To", phone), ("Code", code)]), 429, 60202)
        self.twilio_error(self.v2("POST", send, [("To", phone), ("Channel", "sms")]), 429, 60202)
        # Unlocked, the code's third wrong guess (otp.max_attempts) spends it: max_attempts_reached, and a
        # check after it is 429 60202 without Retry-After (it never ends).
        st, _, p = self.call("POST", "/v1/admin/unlock", {"phone": phone, "api_key": "login-web"}, auth=ADMIN_KEY)
        self.assertEqual(st, 200, p)
        st, _, p = self.v2("POST", check, [("To", phone), ("Code", wrong)])
        self.assertEqual((st, p["status"], p["valid"]), (200, "max_attempts_reached", False))
        st, _, ver = self.v2("GET", "/v2/Services/%s/Verifications/%s" % (svc, p["sid"]))
        self.assertEqual((st, ver["status"]), (200, "max_attempts_reached"))
        for form in ([("VerificationSid", ver["sid"]), ("Code", code)], [("To", phone), ("Code", code)]):
            h, _ = self.twilio_error(self.v2("POST", check, form), 429, 60202)
            self.assertNotIn("retry-after", h)
        # A landline, for a service that skips them.
        landline = self.v2_service(("LookupEnabled", "true"), ("SkipSmsToLandlines", "true"))
        self.twilio_error(self.v2("POST", "/v2/Services/%s/Verifications" % landline,
                                  [("To", "+911123456789"), ("Channel", "sms")]), 400, 60205)
        # An operator's block: 403 60410 for sends and checks.
        phone = "+919812340113"
        st, _, row = self.call("POST", "/v1/admin/blocks", {"match": {"phone": phone}, "expires_in": "1h"},
                               auth=ADMIN_KEY)
        self.assertEqual(st, 201, row)
        wait_until(lambda: self.otpd.issue(phone)[0] == 403, step=0.1, what="the block in force")
        self.twilio_error(self.v2("POST", send, [("To", phone), ("Channel", "sms")]), 403, 60410)
        self.twilio_error(self.v2("POST", check, [("To", phone), ("Code", "123456")]), 403, 60410)
        self.assertEqual(self.call("DELETE", "/v1/admin/blocks/" + row["id"], auth=ADMIN_KEY)[0], 204)

    def test_v2_rate_limits_and_buckets(self):
        svc = self.v2_service()
        rls = "/v2/Services/%s/RateLimits" % svc
        st, _, rl = self.v2("POST", rls, [("UniqueName", "end_user_ip"), ("Description", "per end user")])
        self.assertEqual((st, rl["unique_name"], rl["description"], rl["service_sid"]),
                         (201, "end_user_ip", "per end user", svc))
        st, _, p = self.v2("GET", rls)
        self.assertEqual((st, [x["sid"] for x in p["rate_limits"]], p["meta"]["key"]),
                         (200, [rl["sid"]], "rate_limits"))
        st, _, p = self.v2("GET", rls + "/" + rl["sid"])
        self.assertEqual((st, p["sid"]), (200, rl["sid"]))
        st, _, p = self.v2("POST", rls + "/" + rl["sid"], [("Description", "changed")])
        self.assertEqual((st, p["description"]), (200, "changed"))
        self.twilio_error(self.v2("POST", rls, [("UniqueName", "end_user_ip")]), 400, 60200)  # taken
        self.twilio_error(self.v2("POST", rls, [("UniqueName", "bad name")], bad_request=True), 400, 60200)
        self.twilio_error(self.v2("POST", rls + "/" + rl["sid"], [("UniqueName", "x")], bad_request="maybe"), 400,
                          60200)
        bks = rls + "/" + rl["sid"] + "/Buckets"
        st, _, bk = self.v2("POST", bks, [("Max", "5"), ("Interval", "60")])
        self.assertEqual((st, bk["max"], bk["interval"], bk["rate_limit_sid"]), (201, 5, 60, rl["sid"]))
        st, _, p = self.v2("GET", bks)
        self.assertEqual((st, [x["sid"] for x in p["buckets"]], p["meta"]["key"]), (200, [bk["sid"]], "buckets"))
        st, _, p = self.v2("GET", bks + "/" + bk["sid"])
        self.assertEqual((st, p["sid"]), (200, bk["sid"]))
        # One send per hour for each end user IP: the second send with the same value is 429 20429.
        st, _, p = self.v2("POST", bks + "/" + bk["sid"], [("Max", "1"), ("Interval", "3600")])
        self.assertEqual((st, p["max"], p["interval"]), (200, 1, 3600))
        limits = [("RateLimits", '{"end_user_ip":"198.51.100.7"}')]
        self.v2_send(svc, "+919812340121", *limits)
        h, _ = self.twilio_error(self.v2("POST", "/v2/Services/%s/Verifications" % svc,
                                         [("To", "+919812340122"), ("Channel", "sms")] + limits), 429, 20429)
        self.assertTrue(0 < int(h["retry-after"]) <= 3600, h)
        self.v2_send(svc, "+919812340122", ("RateLimits", '{"end_user_ip":"198.51.100.8"}'))
        self.twilio_error(self.v2("POST", bks, [("Max", "0"), ("Interval", "60")], bad_request=True), 400, 60200)
        self.twilio_error(self.v2("POST", bks, [("Max", "5")], bad_request=True), 400, 60200)
        self.twilio_error(self.v2("POST", bks + "/" + bk["sid"], [("Interval", "0")], bad_request=True), 400, 60200)
        for path in (rls, bks):
            self.twilio_error(self.v2("GET", path + "?PageSize=1001", bad_request=True), 400, 60200)
        self.assertEqual(self.v2("DELETE", bks + "/" + bk["sid"])[0], 204)
        self.twilio_error(self.v2("DELETE", bks + "/" + bk["sid"]), 404, 20404)
        self.twilio_error(self.v2("GET", bks + "/" + bk["sid"]), 404, 20404)
        self.assertEqual(self.v2("DELETE", rls + "/" + rl["sid"])[0], 204)
        self.twilio_error(self.v2("GET", rls + "/" + rl["sid"]), 404, 20404)
        self.twilio_error(self.v2("GET", bks), 404, 20404)
        self.twilio_error(self.v2("POST", "/v2/Services/%s/Verifications" % svc,
                                  [("To", "+919812340123"), ("Channel", "sms")] + limits), 400, 60200)

    def test_store_down(self):
        """Redis stopped: 503 store_unavailable with Retry-After, /readyz 503;
        after it resumes, ready again (so the other tests are unaffected)."""
        self.redis.pause()
        try:
            st, h, p = self.call("POST", "/v1/otp", {"phone": "+919812340011"})
            self.assertEqual((st, p["error"]), (503, "store_unavailable"))
            st, _, p = self.call("POST", "/v1/otp/verify", {"phone": "+919812340011", "code": "123456"})
            self.assertEqual((st, p["error"]), (503, "store_unavailable"))
            st, _, p = self.call("POST", "/v1/otp/cancel", {"phone": "+919812340011"})
            self.assertEqual((st, p["error"]), (503, "store_unavailable"))
            st, _, p = self.call("GET", "/v1/otp/" + "0" * 32)
            self.assertEqual((st, p["error"]), (503, "store_unavailable"))
            for path, body in (("/v1/admin/blocks", {"match": {"region": "ZZ"}, "expires_in": "1h"}),
                               ("/v1/admin/overrides", {"rule": "phone_10m", "key": {"phone": "+919812340011"},
                                                        "limit": 5, "expires_in": "1h"}),
                               ("/v1/admin/unlock", {"phone": "+919812340011"})):
                st, _, p = self.call("POST", path, body, auth=ADMIN_KEY)
                self.assertEqual((st, p["error"]), (503, "store_unavailable"), path)
            for path in ("/v1/admin/blocks", "/v1/admin/overrides"):
                st, _, p = self.call("DELETE", path + "/" + "0" * 16, auth=ADMIN_KEY)
                self.assertEqual((st, p["error"]), (503, "store_unavailable"), path)
                st, _, p = self.call("GET", path, auth=ADMIN_KEY)
                self.assertEqual((st, p["error"]), (503, "store_unavailable"), path)
            # /v2: every operation fails closed, 503 20503 with Retry-After.
            for method, path, form in self.v2_operations():
                self.twilio_error(self.v2(method, path, form), 503, 20503)
            # The breaker is open after these failures: not ready.
            st, _, p = self.call("GET", "/readyz", auth=None)
            self.assertEqual((st, p["status"]), (503, "not_ready"))
        finally:
            self.redis.resume()
        wait_until(lambda: self.otpd.call("GET", "/readyz", auth=None)[0] == 200, timeout=20, what="ready again")

    def test_examples(self):
        """docs/examples/: issue, a 429 waited out through Retry-After, then
        verify with the code the provider got, through the strict proxy."""
        runs = [[sys.executable, os.path.join(ROOT, "docs", "examples", "client.py")]]
        if shutil.which("node"):
            runs.append(["node", os.path.join(ROOT, "docs", "examples", "client.mjs")])
        for i, argv in enumerate(runs):
            phone = "+91981234002%d" % i
            device = "dev-example-%d" % i
            # Spend device_2s's one issue: the example's first try is a 429.
            self.assertEqual(self.otpd.issue("+91981234003%d" % i, device_id=device)[0], 202)
            env = dict(os.environ, OTPD_URL=self.strict.url, OTPD_KEY=API_KEY)
            proc = subprocess.Popen(argv + [phone, device], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            try:
                lines = []
                while True:
                    line = proc.stdout.readline()
                    self.assertTrue(line, "the example ended early:\n" + "".join(lines))
                    lines.append(line)
                    m = re.match(r"sent: message (\w+)", line)
                    if m:
                        break
                code = code_of(self.provider_request(m.group(1))["args"]["text"])
                out, _ = proc.communicate(code + "\n", timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            text = "".join(lines) + out
            self.assertEqual(proc.returncode, 0, text)
            self.assertRegex(text, r"rate limited \(device_2s\); retrying in \d+ s", text)
            self.assertIn("verified", text)


if __name__ == "__main__":
    unittest.main()
