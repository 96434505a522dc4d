"""Test harness: a real Kannel (bearerbox + smsbox) plus fakesmsc, on loopback.

Python 3 standard library only.  Typical use::

    from kannel import Kannel, DlrListener

    with DlrListener() as dlr, Kannel(workdir) as k:   # __enter__ calls start()
        status, body = k.send("+919812345678", "123456 is your login code",
                              dlr_mask=31, dlr_url=dlr.dlr_url("msg-1"))
        assert (status, body) == (202, "0: Accepted for delivery")
        msgs = k.wait_received(1)          # [{'sender': 'OTPD', 'receiver': ...}]
        reports = dlr.wait_for(tag="msg-1", types={1, 8})

What runs:
  * bearerbox: admin HTTP on 127.0.0.1:admin_port, box port on
    127.0.0.1:smsbox_port, and a "fake" SMSC that *listens* on
    127.0.0.1:smsc_port (smsc-id "fake").
  * fakesmsc: connects as a client to smsc_port.  Started with "-m 0" and a
    dummy message so it never sends mobile-originated messages and only logs
    what it receives ("-m 0" is needed: without a message argument it goes
    into interactive mode and reads stdin).
  * smsbox: sendsms HTTP on 127.0.0.1:sendsms_port, one sendsms-user.

Everything (kannel.conf, *.log, *.out) lives in workdir.  No store file is
configured (queued messages are kept in memory only), DLRs use the internal
storage.

What fakesmsc prints (on stderr, at DEBUG level) for each MT message is
    2026-01-01 12:00:00 [pid] [0] DEBUG: Got message 1: <OTPD +919812345678 text 123456 is your login code>
i.e. "<sender> <receiver> <type> <payload>" where type is
    text   payload is the raw bytes (UTF-8, after Kannel's GSM conversion)
    data   payload url-encoded (8-bit coding=1)
    ucs-2  payload url-encoded UTF-16BE bytes (coding=2)
    udh    "<url-encoded udh> data <url-encoded payload>"
Url-encoding is Kannel's octstr_url_encode: ' ' -> '+', others %XX.
A newline inside a "text" message splits it over two "Got message" lines;
received() glues such continuation lines back (best effort).

Delivery reports: smsc_fake fakes them itself.  With dlr-mask=31 the dlr-url
is called twice per message: first type 8 (SMSC ack, %A = "ACK/"), then
type 1 (delivered).  Never 2/4/16.  Both arrive within a few ms.

Quirks seen with Kannel 1.4.5:
  * sendsms answers HTTP 202 "0: Accepted for delivery" (no trailing
    newline); bad user/password -> 403 "Authorization failed for sendsms";
    missing from= -> 400 "Sender missing and no global set, rejected".
  * "+" in to= must be sent as %2B; a literal "+" is a space in the query
    string and Kannel then delivers to "919812345678" (no plus).  Spaces in
    to= mean several recipients (one SMS each).
  * Text > 160 GSM chars is silently truncated to 160 (sendsms-user default
    max-messages = 1).  With extra_user="max-messages = 3\nconcatenation = true"
    it is split into "udh" parts; use reassemble() to join them.
  * Non-GSM characters with the default coding become "?" (charset=UTF-8 is
    honoured, but e.g. "i-diaeresis" -> "?"); send coding=2 for UCS-2.
  * Empty text is accepted (202) and delivered as an empty message.
  * fakesmsc has no SIGTERM handler (dies with -15); bearerbox and smsbox
    shut down cleanly on SIGTERM in about 0-2 s.
"""

import atexit
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BEARERBOX = os.environ.get("KANNEL_BEARERBOX", "/usr/sbin/bearerbox")
SMSBOX = os.environ.get("KANNEL_SMSBOX", "/usr/sbin/smsbox")
FAKESMSC = os.environ.get("KANNEL_FAKESMSC", "/usr/lib/kannel/test/fakesmsc")

HOST = "127.0.0.1"


class KannelError(RuntimeError):
    pass


def free_ports(n=1, host=HOST):
    """Return n distinct currently-free TCP ports on host.

    All sockets are held open until every port is picked so the n ports are
    distinct; there is still the usual small race with other processes."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host=HOST):
    return free_ports(1, host)[0]


def _listen_inodes(port):
    """Socket inodes listening on TCP port (Linux /proc)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        out.add("socket:[%s]" % cols[9])
        except OSError:
            pass
    return out


def owns_port(pid, port):
    """True when process pid holds a socket listening on port."""
    inodes = _listen_inodes(port)
    fd_dir = "/proc/%d/fd" % pid
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                return True
        except OSError:
            pass
    return False


class KannelPortClash(KannelError):
    """Another process has one of the ports Kannel was given."""


def _port_in_use(port, host=HOST):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return False
    except OSError:
        return True
    finally:
        s.close()


def _http_get(url, timeout=5.0):
    """GET url -> (status, body str). HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        try:
            body = e.read().decode("utf-8", "replace")
        finally:
            e.close()
        return e.code, body


def _form_unquote(b):
    """Inverse of Kannel's octstr_url_encode ('+' is a space)."""
    return urllib.parse.unquote_to_bytes(b.replace(b"+", b" "))


# --------------------------------------------------------------------------
# fakesmsc output parsing

_GOT_RE = re.compile(
    rb"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \[\d+\] \[\d+\] [A-Z]+: "
    rb"Got message (\d+): <(.*)>\r?$")
# sender may contain spaces (alphanumeric from=), receiver never does: Kannel
# splits "to" on spaces into separate messages.  Non-greedy sender = first
# "<receiver> <type>" pair wins.
_LINE_RE = re.compile(rb"^(.+?) (\S+) (text|data|ucs-2|ucs2|udh)(?: (.*))?$", re.S)
_UDH_RE = re.compile(rb"^(\S*) data ?(.*)$", re.S)


def parse_fakesmsc_output(raw):
    """Parse fakesmsc's log output (bytes) into a list of message dicts.

    Each dict has: sender, receiver, text (str), type ('text', 'data',
    'ucs-2', 'udh'), data (payload bytes), udh (bytes or None), raw (the
    undecoded line, str), n (fakesmsc counter), logtime (str)."""
    out = []
    for line in raw.split(b"\n"):
        m = _GOT_RE.match(line)
        if not m:
            continue
        logtime, n, body = m.group(1), int(m.group(2)), m.group(3)
        lm = _LINE_RE.match(body)
        if not lm:
            # A '\n' inside a text message ends the line on the SMSC link;
            # the rest shows up as its own "Got message".  Glue it back.
            if out and out[-1]["type"] == "text":
                prev = out[-1]
                prev["data"] += b"\n" + body
                prev["text"] = prev["data"].decode("utf-8", "replace")
                prev["raw"] += "\n" + body.decode("utf-8", "replace")
                continue
            out.append(dict(n=n, logtime=logtime.decode(), sender=None,
                            receiver=None, type="unparsed", data=body,
                            udh=None, text=body.decode("utf-8", "replace"),
                            raw=body.decode("utf-8", "replace")))
            continue
        sender, receiver, typ, payload = lm.groups()
        payload = payload or b""
        typ = typ.decode()
        udh = None
        if typ == "text":
            data = payload
            text = data.decode("utf-8", "replace")
        elif typ == "data":
            data = _form_unquote(payload)
            text = data.decode("utf-8", "replace")
        elif typ in ("ucs-2", "ucs2"):
            typ = "ucs-2"
            data = _form_unquote(payload)
            text = data.decode("utf-16-be", "replace")
        else:  # udh
            um = _UDH_RE.match(payload)
            if um:
                udh = _form_unquote(um.group(1))
                data = _form_unquote(um.group(2))
            else:
                data = _form_unquote(payload)
            text = data.decode("utf-8", "replace")
        out.append(dict(n=n, logtime=logtime.decode(),
                        sender=sender.decode("utf-8", "replace"),
                        receiver=receiver.decode("utf-8", "replace"),
                        type=typ, data=data, udh=udh, text=text,
                        raw=body.decode("utf-8", "replace")))
    return out


def reassemble(messages, encoding="utf-8"):
    """Merge concatenated-SMS parts (UDH IE 0x00 or 0x08) into one message
    each.  The fake SMSC line does not carry the data coding, so the caller
    chooses `encoding` for the joined udh payload ('utf-16-be' for coding=2).
    Non-udh messages pass through unchanged; order follows the first part."""
    out, groups = [], {}
    for m in messages:
        key = total = seq = None
        udh = m.get("udh") or b""
        i = 1
        while i + 1 < len(udh):          # walk the information elements
            iei, ln = udh[i], udh[i + 1]
            ie = udh[i + 2:i + 2 + ln]
            if iei == 0x00 and ln == 3:
                key, total, seq = ie[0], ie[1], ie[2]
            elif iei == 0x08 and ln == 4:
                key, total, seq = (ie[0] << 8) | ie[1], ie[2], ie[3]
            i += 2 + ln
        if key is None:
            out.append(m)
            continue
        gk = (m["sender"], m["receiver"], key, total)
        if gk not in groups:
            g = dict(m, parts={}, total=total)
            groups[gk] = g
            out.append(g)
        groups[gk]["parts"][seq] = m["data"]
    for g in groups.values():
        data = b"".join(g["parts"][s] for s in sorted(g["parts"]))
        g.update(data=data, text=data.decode(encoding, "replace"),
                 complete=len(g["parts"]) == g["total"])
    return out


# --------------------------------------------------------------------------

_live = weakref.WeakSet()


@atexit.register
def _stop_all():
    for k in list(_live):
        try:
            k.stop()
        except Exception:
            pass


class Kannel:
    """A real Kannel on loopback, with fakesmsc as the SMSC."""

    def __init__(self, workdir, sendsms_port=None, admin_port=None,
                 smsbox_port=None, smsc_port=None, user="otpd",
                 password="otpd-secret", admin_password="kannel-admin",
                 smsc_id="fake", extra_core="", extra_smsbox="",
                 extra_user="", extra_smsc=""):
        """Ports left as None are picked with free_ports().

        extra_core / extra_smsc / extra_smsbox / extra_user: raw
        "key = value" lines appended to the core, smsc, smsbox and
        sendsms-user groups."""
        self.workdir = os.path.abspath(workdir)
        self._fixed = dict(sendsms_port=sendsms_port, admin_port=admin_port,
                           smsbox_port=smsbox_port, smsc_port=smsc_port)
        self._pick_ports()
        self.user = user
        self.password = password
        self.admin_password = admin_password
        self.smsc_id = smsc_id
        self.extra_core = extra_core
        self.extra_smsbox = extra_smsbox
        self.extra_user = extra_user
        self.extra_smsc = extra_smsc
        self.procs = {}          # name -> Popen
        self._files = []
        self.startup_seconds = None
        self.conf_path = os.path.join(self.workdir, "kannel.conf")
        self.fakesmsc_out = os.path.join(self.workdir, "fakesmsc.out")

    def _pick_ports(self):
        """Ports the caller left as None are picked with free_ports(): only
        candidates; start() proves bearerbox and smsbox own them."""
        need = [k for k, v in self._fixed.items() if v is None]
        auto = dict(zip(need, free_ports(len(need)) if need else []))
        for k, v in self._fixed.items():
            setattr(self, k, v if v is not None else auto[k])

    # ---- urls -------------------------------------------------------------
    @property
    def sendsms_url(self):
        return "http://%s:%d/cgi-bin/sendsms" % (HOST, self.sendsms_port)

    @property
    def admin_url(self):
        return "http://%s:%d" % (HOST, self.admin_port)

    def sendsms_query_url(self, to, text, sender="OTPD", **params):
        """Full sendsms URL.  params are extra sendsms args; '_' in names
        becomes '-' (dlr_mask -> dlr-mask).  None values are dropped."""
        q = {"username": self.user, "password": self.password,
             "from": sender, "to": to, "text": text}
        for k, v in params.items():
            if v is not None:
                q[k.replace("_", "-")] = v
        return self.sendsms_url + "?" + urllib.parse.urlencode(
            q, quote_via=urllib.parse.quote)

    # ---- config -----------------------------------------------------------
    def _p(self, name):
        return os.path.join(self.workdir, name)

    def config_text(self):
        return f"""\
# generated by tests/kannel/kannel.py
group = core
admin-port = {self.admin_port}
admin-interface = "{HOST}"
admin-password = "{self.admin_password}"
status-password = "{self.admin_password}"
admin-deny-ip = "*.*.*.*"
admin-allow-ip = "{HOST}"
smsbox-port = {self.smsbox_port}
smsbox-interface = "{HOST}"
box-deny-ip = "*.*.*.*"
box-allow-ip = "{HOST}"
log-file = "{self._p('bearerbox.log')}"
log-level = 0
access-log = "{self._p('bearerbox-access.log')}"
dlr-storage = internal
{self.extra_core}

group = smsc
smsc = fake
smsc-id = "{self.smsc_id}"
port = {self.smsc_port}
our-host = "{HOST}"
connect-allow-ip = "{HOST}"
{self.extra_smsc}

group = smsbox
bearerbox-host = "{HOST}"
bearerbox-port = {self.smsbox_port}
sendsms-port = {self.sendsms_port}
sendsms-interface = "{HOST}"
log-file = "{self._p('smsbox.log')}"
log-level = 0
access-log = "{self._p('smsbox-access.log')}"
{self.extra_smsbox}

group = sendsms-user
username = "{self.user}"
password = "{self.password}"
user-deny-ip = "*.*.*.*"
user-allow-ip = "{HOST}"
{self.extra_user}
"""

    # ---- process helpers --------------------------------------------------
    def _spawn(self, name, argv):
        out = open(self._p(name + ".out"), "ab")
        self._files.append(out)
        p = subprocess.Popen(argv, cwd=self.workdir, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, close_fds=True)
        self.procs[name] = p
        return p

    def _check_alive(self, *names):
        for n in names:
            p = self.procs.get(n)
            if p is not None and p.poll() is not None:
                raise KannelError("%s exited early with code %s\n%s"
                                  % (n, p.returncode, self.diagnostics()))

    def _tail(self, name, n=25):
        try:
            with open(self._p(name), "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(missing)"

    def diagnostics(self):
        parts = []
        for f in ("bearerbox.out", "smsbox.out", "fakesmsc.out",
                  "bearerbox.log", "smsbox.log"):
            parts.append("---- %s (tail) ----\n%s" % (f, self._tail(f)))
        return "\n".join(parts)

    def status(self):
        """bearerbox admin status.txt (str), or None if not reachable."""
        try:
            code, body = _http_get("%s/status.txt?password=%s" % (
                self.admin_url, urllib.parse.quote(self.admin_password)),
                timeout=2)
        except (OSError, urllib.error.URLError):
            return None
        return body if code == 200 else None

    def _smsc_line(self, status):
        for line in status.splitlines():
            if "FAKE:%d" % self.smsc_port in line:
                return line
        return None

    # ---- lifecycle --------------------------------------------------------
    def start(self, timeout=20):
        """Write kannel.conf, start bearerbox, fakesmsc and smsbox, and wait
        until the SMSC is online, smsbox is connected and sendsms answers.
        Returns the startup time in seconds.  Raises KannelError."""
        if self.procs:
            raise KannelError("already started")
        t0 = time.monotonic()
        os.makedirs(self.workdir, exist_ok=True)
        auto = any(v is None for v in self._fixed.values())
        for attempt in range(3):
            try:
                self._start_once(t0 + timeout)
                break
            except KannelPortClash:
                # Picked ports are only candidates: another process took one.
                if not auto or attempt == 2:
                    raise
                self._pick_ports()
        self.startup_seconds = time.monotonic() - t0
        return self.startup_seconds

    def _start_once(self, deadline):
        for port in (self.sendsms_port, self.admin_port, self.smsbox_port,
                     self.smsc_port):
            if _port_in_use(port):
                raise KannelPortClash("port %d on %s already in use" % (port, HOST))
        with open(self.conf_path, "w") as f:
            f.write(self.config_text())
        # fakesmsc.out is parsed by received(); start from a clean file.
        open(self.fakesmsc_out, "wb").close()
        _live.add(self)
        try:
            self._start(deadline)
            self._check_owners()
        except KannelError:
            clash = self._clash()
            self.stop()
            if clash:
                raise KannelPortClash(clash)
            raise
        except BaseException:
            self.stop()
            raise

    def _owners(self):
        return {"bearerbox": (self.admin_port, self.smsbox_port, self.smsc_port),
                "smsbox": (self.sendsms_port,)}

    def _check_owners(self):
        """Whatever answered on our ports must be our bearerbox and smsbox."""
        for name, ports in self._owners().items():
            for port in ports:
                if not owns_port(self.procs[name].pid, port):
                    raise KannelError("port %d answers, but not from our %s" % (port, name))

    def _clash(self):
        """Why a failed start was a port clash (a port of ours listened on
        by a process that is not ours), or None."""
        ours = [p.pid for p in self.procs.values() if p.poll() is None]
        for ports in self._owners().values():
            for port in ports:
                if _listen_inodes(port) and not any(owns_port(pid, port) for pid in ours):
                    return "port %d is held by another process" % port
        return None

    def _start(self, deadline):
        # -v 1: INFO and up on stdout/err; full DEBUG goes to *.log.
        self._spawn("bearerbox", [BEARERBOX, "-v", "1", self.conf_path])
        # Wait for the admin interface and the fake SMSC listening socket
        # (status lists "FAKE:<port>" once smsc_fake has bound it).
        while True:
            self._check_alive("bearerbox")
            st = self.status()
            if st and self._smsc_line(st):
                break
            if time.monotonic() > deadline:
                raise KannelError("bearerbox did not come up\n"
                                  + self.diagnostics())
            time.sleep(0.05)

        self._spawn("smsbox", [SMSBOX, "-v", "1", self.conf_path])
        self._start_fakesmsc()
        fake_restarts = 0
        while True:
            self._check_alive("bearerbox", "smsbox")
            fp = self.procs["fakesmsc"]
            if fp.poll() is not None:
                # fakesmsc panics if its connect fails; retry a few times.
                fake_restarts += 1
                if fake_restarts > 5:
                    self._check_alive("fakesmsc")
                time.sleep(0.2)
                self._start_fakesmsc()
            st = self.status() or ""
            smsc = self._smsc_line(st) or ""
            if "(online" in smsc and self._smsbox_connected(st) \
                    and self._sendsms_answers():
                return
            if time.monotonic() > deadline:
                raise KannelError("kannel not ready before timeout\nstatus:\n%s\n%s"
                                  % (st, self.diagnostics()))
            time.sleep(0.05)

    def _start_fakesmsc(self):
        # -m 0: send no MO messages; the message argument is required only to
        # keep fakesmsc out of interactive (stdin) mode.  Received MT
        # messages are logged at DEBUG level (default verbosity).
        self._spawn("fakesmsc", [FAKESMSC, "-H", HOST, "-r", str(self.smsc_port),
                                 "-m", "0", "0 0 text unused"])

    @staticmethod
    def _smsbox_connected(status):
        # "Box connections:\n    smsbox:(none), IP 127.0.0.1 (on-line 0d 0h 0m 0s)"
        return re.search(r"^\s*smsbox:.*IP 127\.0\.0\.1", status, re.M) is not None

    def _sendsms_answers(self):
        try:
            code, _ = _http_get(self.sendsms_url, timeout=2)
            return code > 0
        except (OSError, urllib.error.URLError):
            return False

    def stop(self, grace=8.0):
        """SIGTERM all processes (each runs in its own session/process group),
        wait up to `grace` seconds in total, then SIGKILL what is left."""
        procs = self.procs
        self.procs = {}
        order = ["fakesmsc", "smsbox", "bearerbox"]
        for name in order:
            p = procs.get(name)
            if p is not None and p.poll() is None:
                self._signal(p, signal.SIGTERM)
        # any stale fakesmsc instances from restarts are already dead (poll)
        deadline = time.monotonic() + grace
        for name in order:
            p = procs.get(name)
            if p is None:
                continue
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(p, signal.SIGKILL)
                p.wait(5)
        for f in self._files:
            try:
                f.close()
            except OSError:
                pass
        self._files = []
        _live.discard(self)

    @staticmethod
    def _signal(p, sig):
        try:
            os.killpg(p.pid, sig)   # p.pid is its own process group leader
        except ProcessLookupError:
            pass
        except PermissionError:
            p.send_signal(sig)

    def running(self):
        return bool(self.procs) and all(p.poll() is None
                                        for p in self.procs.values())

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # ---- messages ---------------------------------------------------------
    def received(self):
        """Messages fakesmsc has received so far (list of dicts, oldest
        first): sender, receiver, text, type, data, udh, raw, n, logtime."""
        try:
            with open(self.fakesmsc_out, "rb") as f:
                return parse_fakesmsc_output(f.read())
        except FileNotFoundError:
            return []

    def wait_received(self, count=1, timeout=10.0, predicate=None):
        """Wait until at least `count` received messages (matching predicate,
        if given) exist; return them.  Raises KannelError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            msgs = self.received()
            if predicate is not None:
                msgs = [m for m in msgs if predicate(m)]
            if len(msgs) >= count:
                return msgs
            if time.monotonic() > deadline:
                raise KannelError("timeout waiting for %d message(s), have %r"
                                  % (count, msgs))
            time.sleep(0.05)

    def send(self, to, text, sender="OTPD", timeout=10.0, **params):
        """sendsms GET.  Returns (http_status, body).  Extra sendsms args as
        keywords, e.g. dlr_mask=31, dlr_url=..., coding=2, charset='UTF-8'."""
        return _http_get(self.sendsms_query_url(to, text, sender, **params),
                         timeout=timeout)


# --------------------------------------------------------------------------
# DLR callback receiver

class DlrListener:
    """Tiny HTTP server on 127.0.0.1 that records Kannel dlr-url callbacks."""

    def __init__(self, port=0):
        self.requests = []
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                u = urllib.parse.urlsplit(self.path)
                q = {k: v[-1] for k, v in
                     urllib.parse.parse_qs(u.query, keep_blank_values=True).items()}
                try:
                    typ = int(q.get("type", ""))
                except ValueError:
                    typ = None
                rec = dict(time=time.time(), method=self.command, path=u.path,
                           query=q, type=typ, tag=q.get("tag"), body=body)
                with outer._cond:
                    outer.requests.append(rec)
                    outer._cond.notify_all()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            do_GET = do_POST = _handle

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer((HOST, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join(5)
            self._thread = None
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    @property
    def base_url(self):
        return "http://%s:%d" % (HOST, self.port)

    def dlr_url(self, tag=""):
        """dlr-url template for sendsms (pass it url-encoded as dlr-url).
        Kannel substitutes %d (type), %p (receiver), %P (sender),
        %i (smsc-id), %A (SMSC answer), %T (unix time)."""
        return ("%s/dlr?tag=%s&type=%%d&to=%%p&from=%%P&smsc=%%i&answer=%%A&ts=%%T"
                % (self.base_url, urllib.parse.quote(tag, safe="")))

    def reports(self, tag=None):
        with self._cond:
            return [r for r in self.requests if tag is None or r["tag"] == tag]

    def wait_for(self, tag=None, types=(1,), timeout=10.0):
        """Wait until reports for `tag` include every DLR type in `types`
        (e.g. {8, 1}); return all reports for the tag.  Raises KannelError."""
        deadline = time.monotonic() + timeout
        want = set(types)
        with self._cond:
            while True:
                rs = [r for r in self.requests if tag is None or r["tag"] == tag]
                if want <= {r["type"] for r in rs}:
                    return rs
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KannelError("timeout waiting for DLR types %s (tag %r), got %r"
                                      % (sorted(want), tag, rs))
                self._cond.wait(left)


if __name__ == "__main__":
    # Manual use: python3 kannel.py [workdir]  -> runs until Ctrl-C.
    import sys
    import tempfile
    wd = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kannel-")
    k = Kannel(wd)
    took = k.start()
    print("kannel up in %.2fs, workdir %s" % (took, wd))
    print("sendsms: %s?username=%s&password=%s&from=..&to=..&text=.."
          % (k.sendsms_url, k.user, k.password))
    print("admin:   %s/status.txt?password=%s" % (k.admin_url, k.admin_password))
    try:
        while k.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        k.stop()
