"""Black-box harness for otpd's integration tests.

Starts real processes on free loopback ports: redis-server, the fake SMS
provider (bin/fake_provider) and bin/otpd with a config written per test.
Talks to otpd over HTTP and reads its SQLite ledger afterwards. Standard
library only.

Ports: free_port() only proposes a port that was free a moment ago. Every
server we start proves it owns its port (redis: the process_id in INFO
server; otpd: our child holds the listening socket) and is started again on
another port on a clash, so a foreign server can never answer for ours.
Tests that run at the same time also never share a port: each worker of
tests/integration/run.py and each copy of the mutation gate gives its tests
a range of their own (OTPD_TEST_PORTS, "lo-hi", below the kernel's ephemeral
ports), and a process never proposes one port twice. Otherwise a port one
test's otpd still sends to (its provider stopped on purpose) could be handed
to another test's fake provider, which would count those requests.

Sanitizers: every process of ours (bin/*) runs with san_env(), which sends
ASan/UBSan reports to <test dir>/san.<name>.<pid>. OtpdTest scans them all
at teardown, whatever the exit code, and fails the test that started them.
"""
import glob
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "bin")
SECRET = "integration-secret-0123456789abcdef0123456789"
API_KEY = "key-login-web-0123456789"
OTHER_KEY = "key-login-app-0123456789"


PORT_RANGE = os.environ.get("OTPD_TEST_PORTS")
_proposed = set()


def free_port():
    """A port that was free when asked: a candidate only (see the module doc). From this process's range when
    OTPD_TEST_PORTS gives one, else the kernel's choice."""
    if not PORT_RANGE:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    lo, hi = (int(x) for x in PORT_RANGE.split("-"))
    for _ in range(1000):
        port = random.randint(lo, hi)
        if port in _proposed:
            continue
        _proposed.add(port)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("OTPD_TEST_PORTS=%s: no free port left" % PORT_RANGE)


def port_ranges(n, lo, hi):
    """n disjoint "lo-hi" ranges that split lo..hi, one for each of n tests that run at once."""
    size = (hi - lo + 1) // n
    return ["%d-%d" % (lo + i * size, lo + (i + 1) * size - 1) for i in range(n)]


class PortClash(RuntimeError):
    """A server we started could not have the port it was given."""


def _listen_inodes(port):
    """Socket inodes listening on TCP port (any local address)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        out.add(cols[9])
        except OSError:
            pass
    return out


def owns_port(pid, port):
    """True when process pid holds a socket listening on port."""
    inodes = {"socket:[%s]" % i for i in _listen_inodes(port)}
    if not inodes:
        return False
    fd_dir = "/proc/%d/fd" % pid
    try:
        for fd in os.listdir(fd_dir):
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                    return True
            except OSError:
                pass
    except OSError:
        pass
    return False


SAN_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def san_env(workdir, name, env=None):
    """The environment for one of our processes: its sanitizer reports go to
    workdir/san.<name>.<pid> (the exit codes and halt settings stay)."""
    prefix = os.path.join(workdir, "san." + name)
    out = dict(os.environ if env is None else env)
    out["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=66:log_path=" + prefix
    out["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1:exitcode=67:log_path=" + prefix
    return out


def san_excerpt(text):
    """The text from the first sanitizer marker on, or None."""
    hits = [text.index(m) for m in SAN_MARKERS if m in text]
    if not hits:
        return None
    at = min(hits)
    return text[max(0, at - 200):][:4000]


def sanitizer_reports(workdir):
    """Every non-empty sanitizer log in workdir (san.*), and any report in
    the stderr logs of our processes (fake.log): GCC's UBSan, linked with
    ASan, ignores log_path and writes to stderr. As 'file:\ntext' strings."""
    out = []
    for path in sorted(glob.glob(os.path.join(workdir, "san.*"))):
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        if text.strip():
            out.append("%s:\n%s" % (os.path.basename(path), text[:4000]))
    try:
        with open(os.path.join(workdir, "fake.log"), errors="replace") as f:
            found = san_excerpt(f.read())
        if found:
            out.append("fake.log:\n" + found)
    except OSError:
        pass
    return out


def run_bin(workdir, name, args, env=None, **kw):
    """subprocess.run of bin/<name> (or an absolute path) with its own
    sanitizer log under workdir; output captured as text unless overridden."""
    exe = name if os.path.isabs(name) else os.path.join(BIN, name)
    if "stdout" not in kw and "stderr" not in kw:
        kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 30)
    tag = os.path.basename(name)
    r = subprocess.run([exe] + list(args), env=san_env(workdir, tag, env), **kw)
    # UBSan (with ASan) reports on stderr whatever log_path says: keep a copy
    # where the teardown scan looks.
    err = r.stderr if isinstance(r.stderr, str) else (r.stderr or b"").decode(errors="replace")
    found = san_excerpt(err)
    if found:
        with open(os.path.join(workdir, "san.%s.stderr.%d" % (tag, time.monotonic_ns())), "w") as f:
            f.write(found)
    return r


def duration_ms(text):
    """A config duration ("500ms", "30s", "10m", "1h", "1d", "1w") in ms."""
    m = re.match(r"^(\d+)(ms|s|m|h|d|w)$", text)
    return int(m.group(1)) * {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000, "w": 604800000}[m.group(2)]


# Windows aligned to Unix time (fixed_window, sliding_window_counter, cost
# caps) at least this long are kept clear of by every test's start: a test
# that counts in one must never see it roll over, wherever the clock falls.
# Shorter ones the tests align to themselves (they sleep to a chosen edge).
EDGE_MIN_WINDOW_MS = 600000
EDGE_MARGIN_MS = 30000


def aligned_windows_ms(cfg):
    """The lengths of cfg's Unix-aligned windows, in ms."""
    texts = [r.get("window") for r in cfg.get("limits", [])
             if r.get("algorithm") in ("fixed_window", "sliding_window_counter")]
    texts += [c.get("window") for c in (cfg.get("cost") or {}).get("caps", [])]
    return sorted({duration_ms(t) for t in texts if isinstance(t, str) and re.match(r"^\d+(ms|s|m|h|d|w)$", t)})


def clear_of_window_edges(redis, cfg, margin_ms=EDGE_MARGIN_MS):
    """Sleeps past the next edge of cfg's long aligned windows when fewer
    than margin_ms are left before it on Redis's clock (the scripts' clock)."""
    for w in aligned_windows_ms(cfg):
        if w < EDGE_MIN_WINDOW_MS:
            continue
        s, us = redis.cmd("TIME")
        left = w - (int(s) * 1000 + int(us) // 1000) % w
        if left < margin_ms:
            time.sleep(left / 1000.0 + 0.05)


def wait_until(pred, timeout=10.0, step=0.02, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError("timed out waiting for " + what)


class Redis:
    """A private redis-server on a free port. args are extra server
    arguments; a port set by the caller before start() is kept (a clash is
    then an error), otherwise a clash moves the server to another port."""

    def __init__(self, workdir, args=(), name="redis", password=None):
        self.dir = workdir
        self.args = list(args)
        self.name = name
        self.password = password  # with it, the server runs with --requirepass
        self.port = self._picked = free_port()
        self.proc = None

    def argv(self):
        return ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no",
                "--logfile", os.path.join(self.dir, "%s.log" % self.name)] + \
            (["--requirepass", self.password] if self.password else []) + self.args

    def start(self):
        for _ in range(5):
            self.proc = subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if wait_until(self._up, what=self.name) == "ours":
                return self
            self.stop()
            if self.port != self._picked:
                raise PortClash("%s could not have port %d" % (self.name, self.port))
            self.port = self._picked = free_port()
        raise PortClash("%s: five ports taken in a row" % self.name)

    def _up(self):
        """'ours' once our server answers; 'clash' when ours exited or a
        foreign server answers on the port."""
        if self.proc.poll() is not None:
            return "clash"
        try:
            info = self.cmd("INFO", "server")
        except (OSError, RuntimeError):
            return None  # not listening yet, or still loading
        m = re.search(r"^process_id:(\d+)", info or "", re.M)
        return "ours" if m and int(m.group(1)) == self.proc.pid else "clash"

    def ping(self):
        try:
            return self.cmd("PING") == "PONG"
        except OSError:
            return False

    def cmd(self, *args, timeout=2.0, db=None):
        """One RESP command (after AUTH and SELECT db when set); returns the
        decoded reply."""
        pre = ([("AUTH", self.password)] if self.password else []) + ([("SELECT", db)] if db is not None else [])
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            out = b""
            for c in pre + [args]:
                out += b"*%d\r\n" % len(c)
                for a in c:
                    a = str(a).encode()
                    out += b"$%d\r\n%s\r\n" % (len(a), a)
            s.sendall(out)
            f = s.makefile("rb")
            for _ in pre:
                self._read(f)
            return self._read(f)

    def _read(self, f):
        line = f.readline()
        if not line:
            raise OSError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = f.read(n + 2)[:-2]
            return data.decode(errors="replace")
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read(f) for _ in range(n)]
        raise OSError("bad RESP reply %r" % line)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def info(self, section="server"):
        """INFO section as a dict of strings."""
        out = {}
        for line in (self.cmd("INFO", section) or "").splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v.strip()
        return out

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)


class FakeProvider:
    """bin/fake_provider: a real HTTP server with failure injection."""

    def __init__(self, workdir):
        self.dir = workdir
        self.proc = None
        self.port = None

    def start(self):
        # Port 0: the kernel picks a free port and the provider prints it; with this process's own range
        # (OTPD_TEST_PORTS), a port from it, and another one if that was taken meanwhile.
        for attempt in range(5):
            with open(os.path.join(self.dir, "fake.log"), "ab") as err:
                self.proc = subprocess.Popen(
                    [os.path.join(BIN, "fake_provider"), "--port", str(free_port() if PORT_RANGE else 0)],
                    env=san_env(self.dir, "fake_provider"), stdout=subprocess.PIPE, stderr=err)
            line = self.proc.stdout.readline().decode()
            m = re.match(r"ready (\d+)", line)
            if m:
                self.port = int(m.group(1))
                return self
            self.proc.wait()
            self.proc.stdout.close()
        raise RuntimeError("fake provider did not start: %r (see fake.log)" % line)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def _call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read() or b"null")

    def control(self, **kw):
        return self._call("POST", "/_control", kw)

    def reset(self):
        return self._call("POST", "/_reset", {})

    def requests(self):
        return self._call("GET", "/_requests")

    def messages(self):
        """Webhook bodies received, oldest first."""
        out = []
        for r in self.requests():
            try:
                out.append(json.loads(r["body"]))
            except (ValueError, KeyError, TypeError):
                pass
        return out

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()


def base_config(redis_port, provider_url, ledger, listen_port, **over):
    """The test config: short windows, webhook provider. over replaces top-level keys."""
    cfg = {
        "listen": "127.0.0.1:%d" % listen_port,
        "http_threads": 4,
        "redis": {"url": "redis://127.0.0.1:%d/0" % redis_port, "timeout_ms": 50,
                  "breaker_failures": 3, "breaker_open": "1s"},
        "ledger": {"path": ledger},
        "secret_env": "OTPD_SECRET",
        "api_keys": [{"name": "login-web", "key_env": "OTPD_KEY_LOGIN_WEB"},
                     {"name": "login-app", "key_env": "OTPD_KEY_LOGIN_APP"}],
        "otp": {"length": 6, "ttl": "5m", "max_attempts": 3,
                "template": "{code} is your login code. It expires in {minutes} minutes."},
        "limits": [],
        "pacer": {"rate": 200, "capacity": 100, "max_inflight": 16, "retry": {"max": 2, "base": "100ms"},
                  "timeout": "2s"},
        "provider": {"type": "webhook", "url": provider_url + "/sms"},
    }
    cfg.update(over)
    return cfg


class Otpd:
    """bin/otpd with a config dict, as a child process."""

    def __init__(self, workdir, config, env=None):
        self.dir = workdir
        self.config = config
        self.port = int(config["listen"].rsplit(":", 1)[1])
        # With tls in the config, calls to listen go over HTTPS trusting
        # cafile (default: tls.cert itself, a self-signed certificate).
        self.cafile = None
        self.conf_path = os.path.join(workdir, "otpd.json")
        self.log_path = os.path.join(workdir, "otpd.log")
        # Every otpd run with this env (the server, --check, otpctl-like
        # runs by tests) logs sanitizer reports to san.otpd.<pid>.
        self.env = san_env(workdir, "otpd", dict(os.environ, OTPD_SECRET=SECRET, OTPD_KEY_LOGIN_WEB=API_KEY,
                                                  OTPD_KEY_LOGIN_APP=OTHER_KEY))
        self.env.update(env or {})
        self.proc = None
        self._log_from = 0

    def write_config(self, config=None):
        if config is not None:
            self.config = config
        with open(self.conf_path, "w") as f:
            json.dump(self.config, f, indent=1)

    def start(self, wait=True):
        """Starts otpd; with wait, returns once /healthz answers from our
        child, which holds the listening socket. PortClash when another
        process has the port."""
        self.write_config()
        self._log_from = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as err:
            self.proc = subprocess.Popen([os.path.join(BIN, "otpd"), "-c", self.conf_path], env=self.env,
                                         stdout=subprocess.DEVNULL, stderr=err)
        if wait:
            wait_until(self.healthy, what="otpd /healthz")
            if not owns_port(self.proc.pid, self.port):
                # A foreign server answered /healthz; ours cannot listen.
                self.proc.kill()
                self.proc.wait()
                raise PortClash("port %d answers, but not from our otpd" % self.port)
        return self

    def healthy(self):
        if self.proc.poll() is not None:
            mine = self.log()[self._log_from:]
            if "cannot listen" in mine:
                raise PortClash("otpd cannot listen on %d:\n%s" % (self.port, mine[-1000:]))
            raise AssertionError("otpd exited with %s:\n%s" % (self.proc.returncode, self.log()))
        try:
            return self.call("GET", "/healthz", auth=None, port=self.internal_port)[0] == 200
        except OSError:
            return False

    @property
    def internal_port(self):
        """listen_internal's port (probes and metrics there), else None."""
        where = self.config.get("listen_internal")
        return int(where.rsplit(":", 1)[1]) if where else None

    def ssl_context(self):
        """A client context trusting cafile (or tls.cert), checking 127.0.0.1."""
        return ssl.create_default_context(cafile=self.cafile or self.config["tls"]["cert"])

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def call(self, method, path, body=None, auth=API_KEY, headers=None, raw=None, timeout=10, port=None):
        """Returns (status, headers dict with lower-case names, parsed JSON or text).
        port: another listener of ours (listen_internal), always plain HTTP."""
        h = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        if auth:
            h["Authorization"] = "Bearer " + auth
        tls = "tls" in self.config and port in (None, self.port)
        req = urllib.request.Request("%s://127.0.0.1:%d%s" % ("https" if tls else "http", port or self.port, path),
                                     data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context() if tls else None) as r:
                status, hdrs, text = r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, text = e.code, e.headers, e.read()
        hdrs = {k.lower(): v for k, v in hdrs.items()}
        ctype = hdrs.get("content-type", "")
        payload = json.loads(text) if "json" in ctype and text else text.decode(errors="replace")
        return status, hdrs, payload

    def issue(self, phone, auth=API_KEY, **fields):
        return self.call("POST", "/v1/otp", dict(phone=phone, **fields), auth=auth)

    def verify(self, phone, code, auth=API_KEY, **fields):
        return self.call("POST", "/v1/otp/verify", dict(phone=phone, code=code, **fields), auth=auth)

    def kill(self, sig):
        os.kill(self.proc.pid, sig)

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Stops otpd; returns its exit code. A sanitizer report fails the test."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("otpd did not stop within %ss" % timeout)
        return self.proc.returncode

    def sanitizer_report(self):
        """A sanitizer report in otpd.log or in otpd's own sanitizer logs."""
        found = san_excerpt(self.log())
        if found:
            return found
        reports = [r for r in sanitizer_reports(self.dir) if r.startswith("san.otpd.")]
        return "\n".join(reports) or None

    def db(self):
        con = sqlite3.connect(self.config["ledger"]["path"], timeout=5)
        con.row_factory = sqlite3.Row
        return con

    def rows(self, sql, *args):
        con = self.db()
        try:
            return [dict(r) for r in con.execute(sql, args)]
        finally:
            con.close()


B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def rule_fields(names):
    """The Redis hash field of each rule name, as otpd assigns them
    (cfg_fields in src/base/config.c): FNV-1a of the name into 62*62 slots."""
    out = {}
    for name in names:
        h = 2166136261
        for ch in name.encode():
            h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
        h %= 62 * 62
        out[name] = B62[h // 62] + B62[h % 62]
    return out


def twilio_signature(token, url, params):
    """X-Twilio-Signature as Twilio computes it: base64 of HMAC-SHA1 under
    the auth token of the URL it called followed by each POST parameter's
    name and value, sorted by name. params: (name, value) pairs."""
    import base64
    import hashlib
    import hmac
    data = url + "".join(k + v for k, v in sorted(params))
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


CODE_RE = re.compile(r"\b(\d{4,10})\b")


def code_of(text):
    m = CODE_RE.search(text)
    return m.group(1) if m else None


class OtpdTest(unittest.TestCase):
    """Per test: a fresh redis, fake provider and otpd; torn down after."""

    # Subclasses may change the config through this hook.
    def configure(self, cfg):
        return cfg

    limits = []
    env = {}  # extra environment for otpd (provider credentials)
    redis_password = None  # start redis-server with --requirepass
    cafile = None  # with tls in the config: the CA that signed tls.cert (None: tls.cert is self-signed)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-it-")
        self.redis = self.fake = self.otpd = None
        try:
            self.redis = Redis(self.tmp, password=self.redis_password).start()
            self.fake = FakeProvider(self.tmp).start()
            for attempt in range(5):
                # configure() sees the final listen address (callback URLs use it).
                cfg = base_config(self.redis.port, self.fake.url, os.path.join(self.tmp, "ledger.db"),
                                  free_port(), limits=[dict(r) for r in self.limits])
                self.otpd = Otpd(self.tmp, self.configure(cfg), self.env)
                self.otpd.cafile = self.cafile
                try:
                    self.otpd.start()
                    break
                except PortClash:
                    if attempt == 4:
                        raise
            clear_of_window_edges(self.redis, self.otpd.config)
        except BaseException:
            self._stop_all()
            raise

    def run_bin(self, name, args, env=None, **kw):
        """Runs bin/<name> (otpd --check, otpctl...) with otpd's environment
        by default and its own sanitizer log, scanned at teardown."""
        return run_bin(self.tmp, name, args, self.otpd.env if env is None else env, **kw)

    def _stop_all(self):
        for p in (self.fake, self.redis):
            if p is not None:
                p.stop()

    def restart(self, config=None, **env):
        """Stops otpd with SIGTERM unless it is already gone (a test may have
        killed it) and starts a new one on the same ledger and log."""
        if self.otpd.proc.poll() is None:
            self.assertEqual(self.otpd.stop(), 0, self.otpd.log()[-2000:])
        self.otpd = Otpd(self.tmp, config or self.otpd.config, dict(self.env, **env))
        self.otpd.cafile = self.cafile
        self.otpd.start()

    def tearDown(self):
        report = None
        try:
            if self.otpd.proc and self.otpd.proc.poll() is None:
                rc = self.otpd.stop()
                if rc not in (0,):
                    report = "otpd exited with %s on SIGTERM:\n%s" % (rc, self.otpd.log()[-3000:])
        finally:
            self._stop_all()
            # Every process of this test has exited: scan all their reports,
            # those of runs that were expected to fail included.
            found = [r for r in [self.otpd.sanitizer_report()] if r] + \
                [r for r in sanitizer_reports(self.tmp) if not r.startswith("san.otpd.")]
            if found:
                report = "\n".join(found + ([report] if report else []))
            if report is None and not os.environ.get("OTPD_KEEP"):
                shutil.rmtree(self.tmp, ignore_errors=True)
        if report:
            self.fail("a process reported a problem (files kept in %s):\n%s" % (self.tmp, report))

    # Helpers shared by the suites.
    def field(self, rule):
        """The Redis hash field holding rule's state."""
        return rule_fields([r["name"] for r in self.otpd.config["limits"]])[rule]

    def wait_messages(self, n, timeout=10):
        return wait_until(lambda: (lambda m: m if len(m) >= n else None)(self.fake.messages()), timeout,
                          what="%d messages at the provider" % n)

    def issue_and_code(self, phone, **fields):
        st, h, body = self.otpd.issue(phone, **fields)
        self.assertEqual(st, 202, body)
        # Its own message: an earlier issue's may arrive first.
        mine = wait_until(lambda: [m for m in self.fake.messages() if m["id"] == body["id"]] or None, 10,
                          what="message %s at the provider" % body["id"])
        self.assertEqual(len(mine), 1)
        return body, code_of(mine[0]["text"])
