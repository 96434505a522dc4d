"""otpd's Twilio Verify v2 surface (/v2) against Twilio's own OpenAPI
document: every request goes through Stoplight Prism's validating proxy
(`prism proxy --errors`, @stoplight/prism-cli pinned in
tests/openapi/package.json, installed into build/npm by `make npm-tools`),
so an answer whose shape the document does not describe fails here.

The document is tests/openapi/twilio_verify_v2.otpd.json: Twilio's
twilio_verify_v2.json reduced to the operations otpd serves, made by
tests/openapi/make_twilio_subset.py (see there), with one change: Prism
5.14.2 cannot compile `nullable: true` without `type` and then validates
nothing of that response, so the copy adds `"type": "object"` to the six
such properties (a service's push/totp/whatsapp/passkeys, a verification's
lookup/sna). The rate limit and bucket schemas need no such change.

  - V2OpenApiTest: one otpd (login-web has a Twilio account and an API
    key, login-app another account) behind the strict proxy. Every
    operation of the copy is called and its answer validated
    (test_every_operation the services, verifications and checks;
    test_rate_limits_and_buckets the ten RateLimits and Buckets operations,
    a 404 from each, and a verification whose RateLimits value exceeds a
    bucket of Max 1: the documented 429, code 20429); any
    `sl-violations` fails, except Prism's warning that an error status
    (4xx/5xx) is not in the document, which it has for only one error (429
    of CreateVerification): those warnings are counted and printed. Error
    bodies are checked here against the document's one error schema
    (Twilio's {code, message, more_info, status}), and 2xx bodies carry
    exactly the document's properties (Prism checks types, not which keys
    are there: Twilio's schemas allow any extra key and require none).
  - CanaryTest: proof that the check can fail. A tiny upstream in this
    process answers every operation with a body of the wrong type
    (code_length "six", status 12345, meta.page "zero", valid "yes", a rate
    limit's unique_name 12345, a bucket's max "ten", a 429 with code
    "20429"); through the same copy Prism must refuse each (500 with
    --errors, the field named in sl-violations), and must pass the
    document's own examples. Through the copy without the fix (the six
    "type" keys taken out again) the broken service, list and verification
    answers pass unnoticed: that is why the copy carries the fix (the
    check, rate limit and bucket answers are refused either way).

Python-style booleans ("True") are refused by Prism's request validation
(the document says boolean); this test sends true/false.

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
import threading
import unittest
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import (API_KEY, OTHER_KEY, ROOT, FakeProvider, Otpd, PortClash, Redis, base_config, code_of, free_port,
                     sanitizer_reports, wait_until)

sys.path.insert(0, os.path.join(ROOT, "tests", "openapi"))
import make_twilio_subset as subset  # noqa: E402  (after the path)

SPEC = os.path.join(ROOT, "tests", "openapi", "twilio_verify_v2.otpd.json")
NPM_BIN = os.path.join(ROOT, "build", "npm", "node_modules", ".bin")
NODE_MISSING = shutil.which("node") is None or shutil.which("npm") is None

ACCOUNT = "AC" + "5e" * 16          # login-web's Twilio account
OTHER_ACCOUNT = "AC" + "a7" * 16    # login-app's
KEY_SID = "SK" + "3c" * 16          # an API key of ACCOUNT
KEY_SECRET = "sk-secret-login-web-0123456789"
LIMIT = 2  # phone_10m: verifications sent per phone and 10 minutes
LIMITS = [{"name": "phone_10m", "key": "phone", "algorithm": "sliding_log", "limit": LIMIT, "window": "10m"}]
UNMATCHED = "Unable to match the returned status code with those defined in the document"
# The rate limit and bucket operations (test_rate_limits_and_buckets); test_every_operation calls the others.
RL_OPERATIONS = ("CreateRateLimit", "ListRateLimit", "FetchRateLimit", "UpdateRateLimit", "DeleteRateLimit",
                 "CreateBucket", "ListBucket", "FetchBucket", "UpdateBucket", "DeleteBucket")
APP_HASH = "He42w354ol9"  # Twilio's example of an SMS Retriever hash (CreateVerification's AppHash)
OPS = ("get", "post", "delete")


def violations(headers):
    raw = headers.get("sl-violations")
    if raw is None:
        return []
    try:
        return json.loads(raw)
    except ValueError:
        return [{"location": ["?"], "severity": "Error", "message": raw}]


def load(path):
    with open(path) as f:
        return json.load(f)


def operation_of(doc, method, path):
    """The operationId of method on a concrete path, or None."""
    path = path.split("?", 1)[0]
    for p, item in doc["paths"].items():
        if method in item and re.fullmatch(re.sub(r"\{[^/]+\}", "[^/]+", p), path):
            return item[method]["operationId"]
    return None


def operation(doc, op_id):
    """(method, path template, operation object) of op_id."""
    for p, item in doc["paths"].items():
        for m, op in item.items():
            if m in OPS and op.get("operationId") == op_id:
                return m, p, op
    raise KeyError(op_id)


def deref(doc, schema):
    while "$ref" in schema:
        schema = subset.resolve(doc, schema["$ref"][1:])
    return schema


def json_schema(doc, op, status):
    """The response schema of op for status, or None."""
    resp = op["responses"].get(str(status), {})
    media = resp.get("content", {}).get("application/json")
    return deref(doc, media["schema"]) if media else None


def key_problems(doc, schema, value, where="body"):
    """Keys value has and schema does not name, and keys schema names that
    value lacks, recursively through objects with properties and arrays."""
    schema = deref(doc, schema)
    out = []
    if isinstance(value, dict) and "properties" in schema:
        props = schema["properties"]
        out += ["%s.%s is not in the document" % (where, k) for k in sorted(set(value) - set(props))]
        out += ["%s.%s is missing" % (where, k) for k in sorted(set(props) - set(value))]
        for k in sorted(set(value) & set(props)):
            out += key_problems(doc, props[k], value[k], "%s.%s" % (where, k))
    elif isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            out += key_problems(doc, schema["items"], v, "%s[%d]" % (where, i))
    return out


def type_problems(schema, value, where="body"):
    """The flat type check of a Twilio error body against the document's
    error schema (type and format int32 only: that schema has no more)."""
    names = {"integer": int, "string": str, "object": dict, "boolean": bool}
    out = []
    for k, s in schema["properties"].items():
        want = names[s["type"]]
        v = value.get(k)
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            out.append("%s.%s is %r, not %s" % (where, k, v, s["type"]))
    return out


class Prism:
    """One `prism proxy --errors` on spec in front of upstream, on a loopback port."""

    def __init__(self, workdir, name, spec, upstream):
        self.dir, self.name, self.spec, self.upstream = workdir, name, spec, upstream
        self.proc = self.port = None
        self.log_path = os.path.join(workdir, "prism-%s.log" % name)

    def start(self):
        for attempt in range(5):
            self.port = free_port()
            args = [os.path.join(NPM_BIN, "prism"), "proxy", "-h", "127.0.0.1", "-p", str(self.port), "--cors",
                    "false", "--errors", self.spec, self.upstream]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
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


def send(base, method, path, form=None, user=ACCOUNT, password=API_KEY, timeout=30):
    """One request; form: (name, value) pairs sent form-encoded. Returns
    (status, headers with lower-case names, parsed JSON or text)."""
    h = {"Accept": "application/json"}
    data = None
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        h["Content-Type"] = "application/x-www-form-urlencoded"
    if user is not None:
        h["Authorization"] = "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    req = urllib.request.Request(base + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, hdrs, text = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, text = e.code, e.headers, e.read()
    hdrs = {k.lower(): v for k, v in hdrs.items()}
    payload = json.loads(text) if "json" in hdrs.get("content-type", "") and text else text.decode(errors="replace")
    return status, hdrs, payload


def stop_proxies(proxies):
    for p in proxies:
        p.stop()


# ---------------------------------------------------------------------------------------------------------------
# otpd through the copy
# ---------------------------------------------------------------------------------------------------------------

@unittest.skipIf(NODE_MISSING, "node and npm are not installed (make test installs nodejs and npm)")
class V2OpenApiTest(unittest.TestCase):
    """One otpd behind the strict proxy for the whole class; tests use
    their own services and phones."""

    RUN_SECONDS = 12

    @classmethod
    def setUpClass(cls):
        subprocess.run(["make", "-s", "npm-tools"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        cls.tmp = tempfile.mkdtemp(prefix="otpd-v2-openapi-")
        cls.redis = cls.fake = cls.otpd = None
        cls.proxies = []
        cls.doc = load(SPEC)
        cls.seen = {}      # operationId -> {status: requests}
        cls.warned = {}    # (operationId, status) -> Prism's warning text
        cls.requests = 0
        try:
            cls.redis = Redis(cls.tmp).start()
            cls.fake = FakeProvider(cls.tmp).start()
            for attempt in range(5):
                cfg = base_config(cls.redis.port, cls.fake.url, os.path.join(cls.tmp, "ledger.db"), free_port(),
                                  limits=[dict(r) for r in LIMITS])
                # A loaded machine must not turn an answer into a 503 (the harness's 50 ms Redis timeout did,
                # once: a DeleteBucket's 404 came back 503 20503 with the host's load at 12 on 2 CPUs).
                cfg["redis"]["timeout_ms"] = 2000
                cfg["api_keys"][0]["twilio"] = {"account_sid": ACCOUNT, "api_keys": [
                    {"sid": KEY_SID, "secret_env": "OTPD_TWILIO_KEY_SECRET"}]}
                cfg["api_keys"][1]["twilio"] = {"account_sid": OTHER_ACCOUNT}
                cls.otpd = Otpd(cls.tmp, cfg, {"OTPD_TWILIO_KEY_SECRET": KEY_SECRET})
                try:
                    cls.otpd.start()
                    break
                except PortClash:
                    if attempt == 4:
                        raise
            cls.strict = Prism(cls.tmp, "otpd", SPEC, "http://127.0.0.1:%d" % cls.otpd.port)
            cls.proxies.append(cls.strict)
            cls.strict.start()
        except BaseException:
            cls._stop_all()
            raise

    @classmethod
    def _stop_all(cls):
        stop_proxies(cls.proxies)
        if cls.otpd is not None and cls.otpd.proc is not None and cls.otpd.proc.poll() is None:
            cls.otpd.stop()
        for p in (cls.fake, cls.redis):
            if p is not None:
                p.stop()

    @classmethod
    def tearDownClass(cls):
        rc = cls.otpd.stop() if cls.otpd.proc.poll() is None else cls.otpd.proc.returncode
        cls._stop_all()
        pairs = sorted("%s %s x%d" % (op, st, n) for op, s in cls.seen.items() for st, n in s.items())
        print("\nprism (v2): %d requests through `prism proxy --errors` on %s, %d of %d operations; "
              "(operation, status): %s" % (cls.requests, os.path.relpath(SPEC, ROOT), len(cls.seen),
                                           len(subset.OPERATIONS), ", ".join(pairs)), file=sys.stderr)
        print("prism (v2): accepted warnings (error statuses the document does not list): %s"
              % ("; ".join("%s %s: %s" % (op, st, w) for (op, st), w in sorted(cls.warned.items())) or "none"),
              file=sys.stderr)
        found = [r for r in [cls.otpd.sanitizer_report()] if r] + \
            [r for r in sanitizer_reports(cls.tmp) if not r.startswith("san.otpd.")]
        if rc != 0:
            found.append("otpd exited with %s on SIGTERM:\n%s" % (rc, cls.otpd.log()[-3000:]))
        if found:
            raise AssertionError("a process reported a problem (files kept in %s):\n%s" % (cls.tmp, "\n".join(found)))
        if not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    # -- one call through the proxy ---------------------------------------------------------------------------

    def call(self, method, path, form=None, user=ACCOUNT, password=API_KEY):
        """One request through the strict proxy. Returns (status, headers, payload)."""
        cls = type(self)
        status, hdrs, payload = send(self.strict.url, method, path, form, user, password)
        what = "%s %s %s -> %s %s" % (method, path, urllib.parse.urlencode(form or []), status,
                                      json.dumps(payload)[:400] if not isinstance(payload, str) else payload[:400])
        op_id = operation_of(self.doc, method.lower(), path)
        self.assertIsNotNone(op_id, "not in the document: " + what)
        for v in violations(hdrs):
            if status >= 400 and v.get("location") == ["response"] and v.get("severity") == "Warning" and \
                    v.get("message", "").startswith(UNMATCHED):
                cls.warned[(op_id, status)] = v["message"]
                continue
            self.fail("sl-violations %s: %s" % (json.dumps(v), what))
        if isinstance(payload, dict) and str(payload.get("type", "")).startswith("https://stoplight.io/prism"):
            self.fail("Prism answered, not otpd: " + what)
        cls.requests += 1
        cls.seen.setdefault(op_id, {}).setdefault(status, 0)
        cls.seen[op_id][status] += 1
        _, _, op = operation(self.doc, op_id)
        if status >= 400:
            # Twilio's error JSON: the document's one error schema (CreateVerification's 429).
            schema = json_schema(self.doc, operation(self.doc, "CreateVerification")[2], 429)
            self.assertIn("application/json", hdrs.get("content-type", ""), what)
            self.assertIsInstance(payload, dict, what)
            self.assertEqual(sorted(payload), sorted(schema["properties"]), what)
            self.assertEqual(type_problems(schema, payload), [], what)
            self.assertEqual(payload["status"], status, what)
            self.assertEqual(payload["more_info"], "https://www.twilio.com/docs/errors/%d" % payload["code"], what)
        elif status != 204:
            schema = json_schema(self.doc, op, status)
            self.assertIsNotNone(schema, "a 2xx the document does not list: " + what)
            self.assertEqual(key_problems(self.doc, schema, payload), [], what)
        return status, hdrs, payload

    def create_service(self, name):
        st, _, s = self.call("POST", "/v2/Services", [("FriendlyName", name)])
        self.assertEqual(st, 201, s)
        self.assertRegex(s["sid"], r"^VA[0-9a-f]{32}$")
        self.assertEqual((s["account_sid"], s["friendly_name"]), (ACCOUNT, name))
        return s

    def code_sent(self, verification):
        """The code the fake provider got for verification's last send."""
        mid = verification["send_code_attempts"][-1]["attempt_sid"][2:]
        got = wait_until(lambda: [m for m in self.fake.messages() if m.get("id") == mid] or None, 10,
                         what="message %s at the provider" % mid)
        return code_of(got[0]["text"])

    # -- the tests ---------------------------------------------------------------------------------------------

    def test_every_operation(self):
        """Each operation of the copy, answered 2xx and validated."""
        seen = set()
        svc = self.create_service("Login web")
        seen.add("CreateService")
        base = "/v2/Services/" + svc["sid"]
        self.assertEqual(svc["code_length"], 6)
        st, _, s = self.call("GET", base)
        self.assertEqual((st, s["sid"], s["friendly_name"]), (200, svc["sid"], "Login web"))
        seen.add("FetchService")
        st, _, s = self.call("GET", base, user=KEY_SID, password=KEY_SECRET)  # the account's API key
        self.assertEqual((st, s["sid"], s["account_sid"]), (200, svc["sid"], ACCOUNT))
        st, _, s = self.call("POST", base, [("FriendlyName", "Login web 2"), ("CodeLength", "6"),
                                            ("LookupEnabled", "true"), ("SkipSmsToLandlines", "false"),
                                            ("Psd2Enabled", "false")])
        self.assertEqual((st, s["friendly_name"], s["lookup_enabled"], s["skip_sms_to_landlines"]),
                         (200, "Login web 2", True, False))
        seen.add("UpdateService")

        # A verification: sent, fetched, a wrong code, the right one.
        phone = "+919876543210"
        st, _, v = self.call("POST", base + "/Verifications", [("To", phone), ("Channel", "sms")])
        self.assertEqual((st, v["status"], v["valid"], v["to"], v["channel"], v["service_sid"]),
                         (201, "pending", False, phone, "sms", svc["sid"]))
        self.assertRegex(v["sid"], r"^VE[0-9a-f]{32}$")
        seen.add("CreateVerification")
        code = self.code_sent(v)
        self.assertIsNotNone(code)
        st, _, got = self.call("GET", base + "/Verifications/" + v["sid"])
        self.assertEqual((st, got["sid"], got["status"]), (200, v["sid"], "pending"))
        seen.add("FetchVerification")
        wrong = "%06d" % ((int(code) + 1) % 1000000)
        st, _, c = self.call("POST", base + "/VerificationCheck", [("To", phone), ("Code", wrong)])
        self.assertEqual((st, c["status"], c["valid"], c["sid"]), (200, "pending", False, v["sid"]))
        st, _, c = self.call("POST", base + "/VerificationCheck", [("To", phone), ("Code", code)])
        self.assertEqual((st, c["status"], c["valid"], c["sid"]), (200, "approved", True, v["sid"]))
        seen.add("CreateVerificationCheck")
        st, _, got = self.call("GET", base + "/Verifications/" + v["sid"])
        self.assertEqual((st, got["status"], got["valid"]), (200, "approved", True))

        # Another one, canceled; its code no longer works.
        st, _, v2 = self.call("POST", base + "/Verifications", [("To", phone), ("Channel", "sms")])
        self.assertEqual((st, v2["status"]), (201, "pending"))
        self.assertNotEqual(v2["sid"], v["sid"])
        code2 = self.code_sent(v2)
        st, _, u = self.call("POST", base + "/Verifications/" + v2["sid"], [("Status", "canceled")])
        self.assertEqual((st, u["sid"], u["status"], u["valid"]), (200, v2["sid"], "canceled", False))
        seen.add("UpdateVerification")
        st, _, p = self.call("POST", base + "/VerificationCheck", [("VerificationSid", v2["sid"]), ("Code", code2)])
        self.assertEqual((st, p["code"]), (404, 20404))

        # A third one checked by its SID; a fourth approved by UpdateVerification.
        other = "+919876543212"
        st, _, v3 = self.call("POST", base + "/Verifications", [("To", other), ("Channel", "sms")])
        self.assertEqual(st, 201)
        st, _, c = self.call("POST", base + "/VerificationCheck", [("VerificationSid", v3["sid"]),
                                                                   ("Code", self.code_sent(v3))])
        self.assertEqual((st, c["status"], c["valid"], c["to"], c["sid"]), (200, "approved", True, other, v3["sid"]))
        st, _, v4 = self.call("POST", base + "/Verifications", [("To", "+919876543216"), ("Channel", "sms")])
        self.assertEqual(st, 201)
        st, _, u = self.call("POST", base + "/Verifications/" + v4["sid"], [("Status", "approved")])
        self.assertEqual((st, u["status"], u["valid"]), (200, "approved", True))
        st, _, got = self.call("GET", base + "/Verifications/" + v4["sid"])
        self.assertEqual((st, got["status"]), (200, "approved"))

        # Lists: one page of one service, the next, the whole.
        svc2 = self.create_service("Second app")
        st, _, page = self.call("GET", "/v2/Services?PageSize=1&Page=0")
        self.assertEqual((st, page["meta"]["key"], page["meta"]["page"], page["meta"]["page_size"]),
                         (200, "services", 0, 1))
        seen.add("ListService")
        self.assertEqual(len(page["services"]), 1)
        self.assertIsNone(page["meta"]["previous_page_url"])
        self.assertIsNotNone(page["meta"]["next_page_url"])
        nxt = urllib.parse.urlsplit(page["meta"]["next_page_url"])
        self.assertEqual(nxt.path, "/v2/Services")
        st, _, page2 = self.call("GET", nxt.path + "?" + nxt.query)
        self.assertEqual((st, page2["meta"]["page"]), (200, 1))
        self.assertIsNotNone(page2["meta"]["previous_page_url"])
        st, _, full = self.call("GET", "/v2/Services")
        sids = [s["sid"] for s in full["services"]]
        self.assertEqual((st, full["meta"]["page_size"]), (200, 50))
        self.assertIn(svc["sid"], sids)
        self.assertIn(svc2["sid"], sids)

        st, _, body = self.call("DELETE", "/v2/Services/" + svc2["sid"])
        self.assertEqual((st, body), (204, ""))
        seen.add("DeleteService")
        st, _, full = self.call("GET", "/v2/Services")
        self.assertNotIn(svc2["sid"], [s["sid"] for s in full["services"]])
        st, _, p = self.call("GET", "/v2/Services/" + svc2["sid"])
        self.assertEqual((st, p["code"]), (404, 20404))

        self.assertEqual(sorted(seen), sorted(set(subset.OPERATIONS) - set(RL_OPERATIONS)))
        ops = {op["operationId"] for item in self.doc["paths"].values() for m, op in item.items() if m in OPS}
        self.assertEqual(ops, set(subset.OPERATIONS), "the copy's operations are make_twilio_subset's")

    def test_errors(self):
        """Twilio's error JSON for the refusals the document allows to
        happen: 404 20404, 401 20003, 400 60200, 429 (documented for
        CreateVerification: validated by Prism too)."""
        svc = self.create_service("Errors")
        base = "/v2/Services/" + svc["sid"]
        unknown = "VA" + "0" * 32
        st, _, p = self.call("GET", "/v2/Services/" + unknown)
        self.assertEqual((st, p["code"]), (404, 20404))
        self.assertIn("/v2/Services/" + unknown, p["message"])
        st, _, p = self.call("POST", "/v2/Services/" + unknown, [("FriendlyName", "x")])
        self.assertEqual((st, p["code"]), (404, 20404))
        st, _, p = self.call("DELETE", "/v2/Services/" + unknown)
        self.assertEqual((st, p["code"]), (404, 20404))
        st, _, p = self.call("POST", "/v2/Services/%s/Verifications" % unknown, [("To", "+919876543213"),
                                                                                  ("Channel", "sms")])
        self.assertEqual((st, p["code"]), (404, 20404))
        st, _, p = self.call("GET", base + "/Verifications/VE" + "0" * 32)
        self.assertEqual((st, p["code"]), (404, 20404))
        st, _, p = self.call("POST", base + "/Verifications/VE" + "0" * 32, [("Status", "canceled")])
        self.assertEqual((st, p["code"]), (404, 20404))
        st, _, p = self.call("POST", base + "/VerificationCheck", [("To", "+919876543214"), ("Code", "123456")])
        self.assertEqual((st, p["code"]), (404, 20404))  # nothing pending for that phone
        st, _, p = self.call("GET", base, user=OTHER_ACCOUNT, password=OTHER_KEY)
        self.assertEqual((st, p["code"]), (404, 20404))  # another account's service

        st, h, p = self.call("GET", base, password="not-the-key-0123456789")
        self.assertEqual((st, p["code"]), (401, 20003))
        st, _, p = self.call("GET", "/v2/Services", user=KEY_SID, password=API_KEY)
        self.assertEqual((st, p["code"]), (401, 20003))

        st, _, p = self.call("POST", base, [("CodeLength", "5")])
        self.assertEqual((st, p["code"]), (400, 60200))  # every code has otp.length (6) digits
        st, _, p = self.call("POST", base + "/Verifications", [("To", "+919876543215"), ("Channel", "call")])
        self.assertEqual((st, p["code"]), (400, 60200))
        st, _, p = self.call("POST", base + "/Verifications", [("To", "12"), ("Channel", "sms")])
        self.assertEqual((st, p["code"]), (400, 60200))
        st, _, p = self.call("POST", base + "/Verifications", [("To", "+919876543215"), ("Channel", "sms"),
                                                               ("CustomCode", "424242")])
        self.assertEqual((st, p["code"]), (400, 60200))

        phone = "+919876543219"
        for i in range(LIMIT):
            self.assertEqual(self.call("POST", base + "/Verifications", [("To", phone), ("Channel", "sms")])[0], 201)
        st, h, p = self.call("POST", base + "/Verifications", [("To", phone), ("Channel", "sms")])
        self.assertEqual((st, p["code"]), (429, 60203))
        self.assertGreaterEqual(int(h["retry-after"]), 1)
        self.assertNotIn(("CreateVerification", 429), self.warned, "the 429 is documented")

    def test_rate_limits_and_buckets(self):
        """Each rate limit and bucket operation answered 2xx and validated;
        a verification limited by its RateLimits value: a bucket of Max 1
        refuses the value's second send with the documented 429 (20429),
        another value still passes. The bucket's Interval is an hour of a
        sliding log, so both sends fall in it wherever the clock is."""
        seen = set()
        svc = self.create_service("Rate limited")
        base = "/v2/Services/" + svc["sid"]
        rls = base + "/RateLimits"

        st, _, rl = self.call("POST", rls, [("UniqueName", "end_user_id"), ("Description", "Per user")])
        self.assertEqual(st, 201, rl)
        self.assertRegex(rl["sid"], r"^RK[0-9a-f]{32}$")
        self.assertEqual((rl["unique_name"], rl["description"], rl["service_sid"], rl["account_sid"]),
                         ("end_user_id", "Per user", svc["sid"], ACCOUNT))
        self.assertTrue(rl["url"].endswith("%s/%s" % (rls, rl["sid"])), rl["url"])
        self.assertEqual(rl["links"]["buckets"], rl["url"] + "/Buckets")
        seen.add("CreateRateLimit")
        st, _, ip = self.call("POST", rls, [("UniqueName", "ip_address")])
        self.assertEqual((st, ip["unique_name"]), (201, "ip_address"))
        rl_path, ip_path = rls + "/" + rl["sid"], rls + "/" + ip["sid"]

        st, _, page = self.call("GET", rls)
        self.assertEqual((st, page["meta"]["key"], page["meta"]["page"], page["meta"]["page_size"]),
                         (200, "rate_limits", 0, 50))
        self.assertEqual(sorted(r["sid"] for r in page["rate_limits"]), sorted([rl["sid"], ip["sid"]]))
        self.assertIsNone(page["meta"]["next_page_url"])
        seen.add("ListRateLimit")
        st, _, page = self.call("GET", rls + "?PageSize=1&Page=1")
        self.assertEqual((st, len(page["rate_limits"]), page["meta"]["page"]), (200, 1, 1))
        self.assertIsNotNone(page["meta"]["previous_page_url"])
        st, _, got = self.call("GET", rl_path)
        self.assertEqual((st, got["sid"], got["unique_name"], got["description"]),
                         (200, rl["sid"], "end_user_id", "Per user"))
        seen.add("FetchRateLimit")
        st, _, got = self.call("POST", rl_path, [("Description", "Per end user")])
        self.assertEqual((st, got["sid"], got["unique_name"], got["description"]),
                         (200, rl["sid"], "end_user_id", "Per end user"))
        seen.add("UpdateRateLimit")
        st, _, got = self.call("GET", rl_path)
        self.assertEqual((st, got["description"]), (200, "Per end user"))

        # Buckets: one of Max 1 an hour, one more changed and deleted.
        st, _, bk = self.call("POST", rl_path + "/Buckets", [("Max", "1"), ("Interval", "3600")])
        self.assertEqual(st, 201, bk)
        self.assertRegex(bk["sid"], r"^BL[0-9a-f]{32}$")
        self.assertEqual((bk["max"], bk["interval"], bk["rate_limit_sid"], bk["service_sid"], bk["account_sid"]),
                         (1, 3600, rl["sid"], svc["sid"], ACCOUNT))
        self.assertTrue(bk["url"].endswith("%s/Buckets/%s" % (rl_path, bk["sid"])), bk["url"])
        seen.add("CreateBucket")
        st, _, bk2 = self.call("POST", rl_path + "/Buckets", [("Max", "5"), ("Interval", "60")])
        self.assertEqual((st, bk2["max"], bk2["interval"]), (201, 5, 60))
        st, _, page = self.call("GET", rl_path + "/Buckets")
        self.assertEqual((st, page["meta"]["key"]), (200, "buckets"))
        self.assertEqual(sorted(b["sid"] for b in page["buckets"]), sorted([bk["sid"], bk2["sid"]]))
        seen.add("ListBucket")
        st, _, got = self.call("GET", "%s/Buckets/%s" % (rl_path, bk["sid"]))
        self.assertEqual((st, got["sid"], got["max"], got["interval"]), (200, bk["sid"], 1, 3600))
        seen.add("FetchBucket")
        st, _, got = self.call("POST", "%s/Buckets/%s" % (rl_path, bk2["sid"]), [("Max", "10")])
        self.assertEqual((st, got["sid"], got["max"], got["interval"]), (200, bk2["sid"], 10, 60))
        seen.add("UpdateBucket")
        st, _, body = self.call("DELETE", "%s/Buckets/%s" % (rl_path, bk2["sid"]))
        self.assertEqual((st, body), (204, ""))
        seen.add("DeleteBucket")
        st, _, page = self.call("GET", rl_path + "/Buckets")
        self.assertEqual((st, [b["sid"] for b in page["buckets"]]), (200, [bk["sid"]]))
        st, _, p = self.call("GET", "%s/Buckets/%s" % (rl_path, bk2["sid"]))
        self.assertEqual((st, p["code"]), (404, 20404))
        st, _, p = self.call("GET", "%s/Buckets/%s" % (ip_path, bk["sid"]))  # a bucket of another rate limit
        self.assertEqual((st, p["code"]), (404, 20404))

        # A verification limited by the value of end_user_id: the bucket of Max 1 takes one send an hour.
        limits = [("RateLimits", json.dumps({"end_user_id": "user-1"}))]
        st, _, v = self.call("POST", base + "/Verifications", [("To", "+919876543220"), ("Channel", "sms"),
                                                               ("Locale", "en"), ("AppHash", APP_HASH)] + limits)
        self.assertEqual((st, v["status"], v["to"]), (201, "pending", "+919876543220"))
        got = wait_until(lambda: [m for m in self.fake.messages()
                                  if m.get("id") == v["send_code_attempts"][-1]["attempt_sid"][2:]] or None, 10,
                         what="the first limited message at the provider")
        self.assertIn(APP_HASH, got[0]["text"])
        st, h, p = self.call("POST", base + "/Verifications", [("To", "+919876543221"), ("Channel", "sms")] + limits)
        self.assertEqual((st, p["code"], p["message"].split(".")[0]), (429, 20429, "Too many requests"), p)
        self.assertGreaterEqual(int(h["retry-after"]), 1)
        self.assertNotIn(("CreateVerification", 429), self.warned, "the 429 is documented")
        st, _, v = self.call("POST", base + "/Verifications", [
            ("To", "+919876543222"), ("Channel", "sms"), ("RateLimits", json.dumps({"end_user_id": "user-2"}))])
        self.assertEqual((st, v["status"]), (201, "pending"))  # another value has its own bucket
        st, _, p = self.call("POST", base + "/Verifications", [
            ("To", "+919876543223"), ("Channel", "sms"), ("RateLimits", json.dumps({"no_such_limit": "x"}))])
        self.assertEqual((st, p["code"]), (400, 60200))

        # 404 20404 from each operation: another service's, an unknown SID, a deleted one.
        unknown_va, unknown_rk, unknown_bl = "VA" + "0" * 32, "RK" + "0" * 32, "BL" + "0" * 32
        st, _, body = self.call("DELETE", ip_path)
        self.assertEqual((st, body), (204, ""))
        seen.add("DeleteRateLimit")
        for method, path, form in (
                ("POST", "/v2/Services/%s/RateLimits" % unknown_va, [("UniqueName", "x")]),
                ("GET", "/v2/Services/%s/RateLimits" % unknown_va, None),
                ("GET", ip_path, None),
                ("GET", rls + "/" + unknown_rk, None),
                ("POST", rls + "/" + unknown_rk, [("Description", "x")]),
                ("DELETE", ip_path, None),
                ("POST", rls + "/%s/Buckets" % unknown_rk, [("Max", "1"), ("Interval", "60")]),
                ("GET", ip_path + "/Buckets", None),
                ("GET", "%s/Buckets/%s" % (rl_path, unknown_bl), None),
                ("POST", "%s/Buckets/%s" % (rl_path, unknown_bl), [("Max", "2")]),
                ("DELETE", "%s/Buckets/%s" % (rl_path, unknown_bl), None),
                ("DELETE", "%s/Buckets/%s" % (rl_path, bk2["sid"]), None)):
            with self.subTest(method=method, path=path):
                st, _, p = self.call(method, path, form)
                self.assertEqual((st, p["code"]), (404, 20404))
        st, _, p = self.call("GET", rl_path, user=OTHER_ACCOUNT, password=OTHER_KEY)  # another account's
        self.assertEqual((st, p["code"]), (404, 20404))
        st, _, p = self.call("POST", rl_path + "/Buckets", [("Max", "0"), ("Interval", "60")])
        self.assertEqual((st, p["code"]), (400, 60200))

        self.assertEqual(sorted(seen), sorted(RL_OPERATIONS))
        self.assertEqual(set(RL_OPERATIONS) - set(subset.OPERATIONS), set(), "RL_OPERATIONS are in the copy")


# ---------------------------------------------------------------------------------------------------------------
# The canary: the check fails when it must
# ---------------------------------------------------------------------------------------------------------------

VA = "VA" + "a" * 32
VE = "VE" + "d" * 32
RK = "RK" + "b" * 32
BL = "BL" + "c" * 32
# A wrong JSON type in each answer: (operationId, status, body, the field Prism must name).
BROKEN = {
    "CreateService": (201, {"sid": VA, "friendly_name": "x", "code_length": "six"}, ["code_length"]),
    "FetchService": (200, {"sid": VA, "friendly_name": "x", "code_length": "six", "push": None, "totp": None},
                     ["code_length"]),
    "UpdateService": (200, {"sid": VA, "code_length": "six", "whatsapp": None}, ["code_length"]),
    "ListService": (200, {"services": [], "meta": {"page": "zero", "page_size": 50, "key": "services"}},
                    ["meta", "page"]),
    "CreateVerification": (201, {"sid": VE, "status": 12345, "channel": "sms", "lookup": {}, "sna": None},
                           ["status"]),
    "FetchVerification": (200, {"sid": VE, "status": 12345, "channel": "sms", "lookup": {}, "sna": None},
                          ["status"]),
    "UpdateVerification": (200, {"sid": VE, "status": 12345, "channel": "sms"}, ["status"]),
    "CreateVerificationCheck": (200, {"sid": VE, "status": "approved", "valid": "yes"}, ["valid"]),
    "CreateRateLimit": (201, {"sid": RK, "service_sid": VA, "unique_name": 12345, "description": "x"},
                        ["unique_name"]),
    "FetchRateLimit": (200, {"sid": RK, "unique_name": 12345, "links": {"buckets": "https://x.test/b"}},
                       ["unique_name"]),
    "UpdateRateLimit": (200, {"sid": RK, "unique_name": 12345, "description": "y"}, ["unique_name"]),
    "ListRateLimit": (200, {"rate_limits": [{"sid": RK, "unique_name": 12345}],
                            "meta": {"page": 0, "page_size": 50, "key": "rate_limits"}},
                      ["rate_limits", "0", "unique_name"]),
    "CreateBucket": (201, {"sid": BL, "rate_limit_sid": RK, "max": "ten", "interval": 60}, ["max"]),
    "FetchBucket": (200, {"sid": BL, "rate_limit_sid": RK, "max": "ten", "interval": 60}, ["max"]),
    "UpdateBucket": (200, {"sid": BL, "max": "ten"}, ["max"]),
    "ListBucket": (200, {"buckets": [{"sid": BL, "max": "ten", "interval": 60}],
                         "meta": {"page": 0, "page_size": 50, "key": "buckets"}}, ["buckets", "0", "max"]),
}
# The documented error: CreateVerification's 429 with code as a string.
BROKEN_429 = (429, {"code": "20429", "message": "Too many requests", "status": 429}, ["code"])
# Which answers the unfixed copy (Twilio's own schemas) lets through unchecked.
SILENT_WITHOUT_FIX = ("CreateService", "FetchService", "UpdateService", "ListService", "CreateVerification",
                      "FetchVerification", "UpdateVerification")
# The others' schemas need no fix: refused with it or without (the control).
CHECKED_WITHOUT_FIX = tuple(sorted(set(BROKEN) - set(SILENT_WITHOUT_FIX)))

# The requests that reach each operation (valid for the document).
REQUESTS = {
    "CreateService": ("POST", "/v2/Services", [("FriendlyName", "x")]),
    "ListService": ("GET", "/v2/Services", None),
    "FetchService": ("GET", "/v2/Services/" + VA, None),
    "UpdateService": ("POST", "/v2/Services/" + VA, [("FriendlyName", "y")]),
    "DeleteService": ("DELETE", "/v2/Services/" + VA, None),
    "CreateVerification": ("POST", "/v2/Services/%s/Verifications" % VA, [("To", "+919876543210"),
                                                                           ("Channel", "sms")]),
    "FetchVerification": ("GET", "/v2/Services/%s/Verifications/%s" % (VA, VE), None),
    "UpdateVerification": ("POST", "/v2/Services/%s/Verifications/%s" % (VA, VE), [("Status", "canceled")]),
    "CreateVerificationCheck": ("POST", "/v2/Services/%s/VerificationCheck" % VA, [("To", "+919876543210"),
                                                                                    ("Code", "123456")]),
    "CreateRateLimit": ("POST", "/v2/Services/%s/RateLimits" % VA, [("UniqueName", "end_user_id")]),
    "ListRateLimit": ("GET", "/v2/Services/%s/RateLimits" % VA, None),
    "FetchRateLimit": ("GET", "/v2/Services/%s/RateLimits/%s" % (VA, RK), None),
    "UpdateRateLimit": ("POST", "/v2/Services/%s/RateLimits/%s" % (VA, RK), [("Description", "y")]),
    "DeleteRateLimit": ("DELETE", "/v2/Services/%s/RateLimits/%s" % (VA, RK), None),
    "CreateBucket": ("POST", "/v2/Services/%s/RateLimits/%s/Buckets" % (VA, RK), [("Max", "1"), ("Interval", "60")]),
    "ListBucket": ("GET", "/v2/Services/%s/RateLimits/%s/Buckets" % (VA, RK), None),
    "FetchBucket": ("GET", "/v2/Services/%s/RateLimits/%s/Buckets/%s" % (VA, RK, BL), None),
    "UpdateBucket": ("POST", "/v2/Services/%s/RateLimits/%s/Buckets/%s" % (VA, RK, BL), [("Max", "2")]),
    "DeleteBucket": ("DELETE", "/v2/Services/%s/RateLimits/%s/Buckets/%s" % (VA, RK, BL), None),
}


class Canary:
    """The upstream that answers wrongly: a ThreadingHTTPServer in this
    process. Mode per request, in the X-Canary header: "broken" (BROKEN),
    "429" (BROKEN_429) or "example" (the document's first example of the
    operation's first documented status)."""

    def __init__(self, doc):
        self.doc = doc
        self.hits = []
        canary = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                op_id = operation_of(canary.doc, self.command.lower(), self.path)
                mode = self.headers.get("X-Canary", "broken")
                canary.hits.append((op_id, mode))
                status, body = 404, {"code": 20404}
                if op_id is not None and mode == "example":
                    _, _, op = operation(canary.doc, op_id)
                    status = int(sorted(op["responses"])[0])
                    examples = op["responses"][str(status)].get("content", {}).get("application/json", {})
                    body = next(iter(examples.get("examples", {}).values()), {}).get("value")
                elif op_id is not None and mode == "429":
                    status, body, _ = BROKEN_429
                elif op_id in BROKEN:
                    status, body, _ = BROKEN[op_id]
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                if data:
                    self.send_header("Content-Type", "application/json")
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = answer

            def log_message(self, *a):
                pass

        for attempt in range(5):
            try:
                self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
                break
            except OSError:
                if attempt == 4:
                    raise
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@unittest.skipIf(NODE_MISSING, "node and npm are not installed (make test installs nodejs and npm)")
class CanaryTest(unittest.TestCase):
    """The same copy in front of an upstream that answers wrongly: Prism
    must refuse every wrong answer and pass the document's examples; the
    copy without the fix lets the wrong ones through."""

    RUN_SECONDS = 10

    @classmethod
    def setUpClass(cls):
        subprocess.run(["make", "-s", "npm-tools"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        cls.tmp = tempfile.mkdtemp(prefix="otpd-v2-canary-")
        cls.doc = load(SPEC)
        cls.canary = None
        cls.proxies = []
        try:
            cls.canary = Canary(cls.doc)
            unfixed = load(SPEC)
            for ptr in subset.FIXED_NULLABLE:
                node = subset.resolve(unfixed, ptr)
                assert node.pop("type") == "object" and node["nullable"] is True, ptr
            cls.unfixed_path = os.path.join(cls.tmp, "twilio_verify_v2.unfixed.json")
            with open(cls.unfixed_path, "w") as f:
                json.dump(unfixed, f)
            cls.fixed = Prism(cls.tmp, "canary-fixed", SPEC, cls.canary.url)
            cls.unfixed = Prism(cls.tmp, "canary-unfixed", cls.unfixed_path, cls.canary.url)
            for p in (cls.fixed, cls.unfixed):
                cls.proxies.append(p)
                p.start()
        except BaseException:
            cls._stop_all()
            raise

    @classmethod
    def _stop_all(cls):
        stop_proxies(cls.proxies)
        if cls.canary is not None:
            cls.canary.stop()

    @classmethod
    def tearDownClass(cls):
        cls._stop_all()
        if not os.environ.get("OTPD_KEEP"):
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def via(self, proxy, op_id, mode):
        method, path, form = REQUESTS[op_id]
        h = {"Accept": "application/json", "X-Canary": mode,
             "Authorization": "Basic " + base64.b64encode(("%s:%s" % (ACCOUNT, API_KEY)).encode()).decode()}
        data = None
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            h["Content-Type"] = "application/x-www-form-urlencoded"
        req = urllib.request.Request(proxy.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, hdrs, text = r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, text = e.code, e.headers, e.read()
        hdrs = {k.lower(): v for k, v in hdrs.items()}
        what = "%s %s (%s, %s) -> %s %s" % (method, path, op_id, mode, status, text[:400])
        return status, violations(hdrs), text, what

    def test_the_copy_is_what_the_script_makes(self):
        """No untyped nullable left, the fix in place and said, every $ref resolves."""
        self.assertEqual(subset.untyped_nullables(self.doc), [])
        for ptr in subset.FIXED_NULLABLE:
            node = subset.resolve(self.doc, ptr)
            self.assertEqual((node.get("type"), node.get("nullable")), ("object", True), ptr)
            self.assertIn(ptr, self.doc["info"]["description"])
        self.assertIn(subset.SOURCE["commit"], self.doc["info"]["description"])
        refs = set()
        subset.refs_in(self.doc, refs)
        self.assertEqual(refs, set(self.doc["components"]["schemas"]), "every schema used, no other")
        self.assertEqual(sorted(REQUESTS), sorted(subset.OPERATIONS))
        with_body = [o for o in subset.OPERATIONS
                     if any(json_schema(self.doc, operation(self.doc, o)[2], st) for st in (200, 201))]
        self.assertEqual(sorted(BROKEN), sorted(with_body), "a broken answer for every operation with a body")

    def test_wrong_answers_are_refused(self):
        for op_id, (status, body, field) in sorted(BROKEN.items()) + [("CreateVerification 429", BROKEN_429)]:
            mode = "429" if op_id.endswith(" 429") else "broken"
            op_id = op_id.split()[0]
            with self.subTest(op=op_id, mode=mode):
                st, v, text, what = self.via(self.fixed, op_id, mode)
                self.assertEqual(st, 500, "Prism passed a wrong answer: " + what)
                self.assertIn(["response", "body"] + field, [x.get("location") for x in v], what)
                self.assertTrue(all(x.get("severity") == "Error" for x in v if x.get("location")[:1] == ["response"]),
                                what)
                problem = json.loads(text)
                self.assertEqual(problem["type"], "https://stoplight.io/prism/errors#VIOLATIONS", what)

    def test_the_documents_examples_pass(self):
        for op_id in subset.OPERATIONS:
            with self.subTest(op=op_id):
                st, v, text, what = self.via(self.fixed, op_id, "example")
                self.assertLess(st, 300, what)
                self.assertEqual(v, [], what)

    def test_without_the_fix_prism_checks_nothing(self):
        """The trap the fix is for: with Twilio's schemas as they are,
        Prism 5.14.2 passes these wrong answers unchecked (if this fails,
        Prism learnt to compile them: make_twilio_subset's FIXED_NULLABLE
        may go). The check's answer is validated either way (control)."""
        for op_id in SILENT_WITHOUT_FIX:
            with self.subTest(op=op_id):
                st, v, text, what = self.via(self.unfixed, op_id, "broken")
                self.assertEqual((st, v), (BROKEN[op_id][0], []), what)
        self.assertIn("CreateVerificationCheck", CHECKED_WITHOUT_FIX)
        for op_id in CHECKED_WITHOUT_FIX:
            with self.subTest(op=op_id, control=True):
                st, v, text, what = self.via(self.unfixed, op_id, "broken")
                self.assertEqual(st, 500, what)
                self.assertIn(["response", "body"] + BROKEN[op_id][2], [x.get("location") for x in v], what)


if __name__ == "__main__":
    unittest.main()
