"""HTTPS on listen and the private listener (issue 14, "TLS").

Certificates come from Debian's openssl, made per test in its directory: a
small CA signs every leaf, so one --cacert trusts the old certificate and its
replacement while their fingerprints differ. curl is the outside client for
the API; Python's ssl reads fingerprints and holds a keep-alive connection
across a SIGHUP.
"""
import hashlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import time

from harness import API_KEY, OtpdTest, code_of, free_port, wait_until

CA_CNF = """[ca]
default_ca = d
[d]
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = p
unique_subject = no
[p]
commonName = supplied
"""
LEAF_EXT = "basicConstraints = CA:FALSE\nsubjectAltName = IP:127.0.0.1, DNS:localhost\n"


def stamp(t):
    """openssl ca's date form of Unix time t."""
    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(t))


class Certs:
    """A CA in dir and the leaves it signs, each valid from start to end
    (Unix seconds; default an hour ago to 30 days ahead)."""

    def __init__(self, dir):
        self.dir = os.path.join(dir, "pki")
        os.makedirs(self.dir)
        with open(self.path("ca.cnf"), "w") as f:
            f.write(CA_CNF.format(dir=self.dir))
        with open(self.path("ext.cnf"), "w") as f:
            f.write(LEAF_EXT)
        open(self.path("index.txt"), "w").close()
        with open(self.path("serial"), "w") as f:
            f.write("01\n")
        self.ca = self.path("ca.pem")
        self.run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", self.path("ca.key"), "-out", self.ca, "-days", "60", "-subj", "/CN=otpd test CA",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")

    def path(self, name):
        return os.path.join(self.dir, name)

    def run(self, *args):
        r = subprocess.run(["openssl"] + list(args), capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise AssertionError("openssl %s: %s" % (args[0], r.stderr))

    def leaf(self, name, start=None, end=None):
        """(cert path, key path) of a new leaf for 127.0.0.1."""
        now = time.time()
        key, csr, cert = self.path(name + ".key"), self.path(name + ".csr"), self.path(name + ".pem")
        self.run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                 "-out", csr, "-subj", "/CN=" + name)
        self.run("ca", "-batch", "-notext", "-config", self.path("ca.cnf"), "-cert", self.ca, "-keyfile",
                 self.path("ca.key"), "-in", csr, "-out", cert, "-extfile", self.path("ext.cnf"),
                 "-startdate", stamp(now - 3600 if start is None else start),
                 "-enddate", stamp(now + 30 * 86400 if end is None else end))
        return cert, key


def fingerprint(pem_path):
    """SHA-256 of the certificate's DER, hex."""
    with open(pem_path) as f:
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(f.read())).hexdigest()


def key_body(key_path):
    """The base64 lines of a PEM key: what must never reach a log."""
    with open(key_path) as f:
        return [l for l in f.read().splitlines() if l and not l.startswith("-----")]


def install(src, dst):
    """Replaces dst by src's content at once (rename), as a renewal tool does."""
    with open(src, "rb") as f:
        data = f.read()
    with open(dst + ".new", "wb") as f:
        f.write(data)
    os.replace(dst + ".new", dst)


class TlsBase(OtpdTest):
    """otpd serving HTTPS with a leaf of the test's CA, from files at fixed
    paths (server.pem, server.key) that a test may overwrite."""

    internal = False

    def configure(self, cfg):
        if not hasattr(self, "certs"):
            self.certs = Certs(self.tmp)
            self.first = self.certs.leaf("first")
            self.cert_path, self.key_path = os.path.join(self.tmp, "server.pem"), os.path.join(self.tmp, "server.key")
            install(self.first[0], self.cert_path)
            install(self.first[1], self.key_path)
            self.cafile = self.certs.ca
        cfg["tls"] = {"cert": self.cert_path, "key": self.key_path}
        if self.internal:
            cfg["listen_internal"] = "127.0.0.1:%d" % free_port()
        return cfg

    def curl(self, method, path, body=None, auth=API_KEY, scheme="https", port=None):
        """(status, parsed body) from curl trusting only the test's CA."""
        args = ["curl", "-sS", "--max-time", "10", "--cacert", self.certs.ca, "-X", method,
                "-o", "-", "-w", "\n%{http_code}"]
        if auth:
            args += ["-H", "Authorization: Bearer " + auth]
        if body is not None:
            args += ["-H", "Content-Type: application/json", "--data", json.dumps(body)]
        args.append("%s://127.0.0.1:%d%s" % (scheme, port or self.otpd.port, path))
        r = subprocess.run(args, capture_output=True, text=True, timeout=30)
        text, _, status = r.stdout.rpartition("\n")
        return int(status), r, (json.loads(text) if text.startswith("{") else text)

    def served(self):
        """The fingerprint a new TLS connection to listen is shown."""
        ctx = self.otpd.ssl_context()
        with socket.create_connection(("127.0.0.1", self.otpd.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                return hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()

    def reloaded(self, event):
        """Sends SIGHUP and waits for the tls line it must log (event)."""
        before = self.otpd.log().count("event=" + event)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("event=" + event) > before, what=event)


class HttpsTest(TlsBase):
    def test_issue_and_verify_over_https_with_curl(self):
        st, r, body = self.curl("POST", "/v1/otp", {"phone": "+919876543210"})
        self.assertEqual(st, 202, r.stderr)
        msg = wait_until(lambda: [m for m in self.fake.messages() if m["id"] == body["id"]] or None,
                         what="the message")[0]
        st, r, ver = self.curl("POST", "/v1/otp/verify", {"phone": "+919876543210", "code": code_of(msg["text"])})
        self.assertEqual((st, ver.get("verified")), (200, True), (r.stderr, ver))
        self.assertEqual(self.served(), fingerprint(self.first[0]))
        self.assertIn("event=tls.loaded fingerprint_sha256=" + fingerprint(self.first[0]), self.otpd.log())

    def test_plain_http_to_the_tls_port_gets_no_answer(self):
        st, r, _ = self.curl("GET", "/healthz", auth=None, scheme="http")
        self.assertEqual(st, 0, r.stdout)  # curl: no HTTP status at all
        with socket.create_connection(("127.0.0.1", self.otpd.port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while True:
                try:
                    chunk = s.recv(4096)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                got += chunk
        self.assertFalse(got.startswith(b"HTTP/"), got[:80])
        # And the port still serves HTTPS.
        self.assertEqual(self.curl("GET", "/healthz", auth=None)[0], 200)

    def test_sighup_swaps_the_certificate_and_open_connections_stay(self):
        old = fingerprint(self.first[0])
        conn = http.client.HTTPSConnection("127.0.0.1", self.otpd.port, timeout=10,
                                           context=self.otpd.ssl_context())
        conn.connect()
        conn.auto_open = 0  # a dropped connection raises instead of reconnecting unseen
        conn.request("GET", "/healthz")
        self.assertEqual(conn.getresponse().read(), b'{"status":"ok"}')
        sock = conn.sock
        self.assertEqual(hashlib.sha256(sock.getpeercert(binary_form=True)).hexdigest(), old)
        second = self.certs.leaf("second")
        install(second[0], self.cert_path)
        install(second[1], self.key_path)
        self.reloaded("tls.reloaded")
        new = fingerprint(second[0])
        self.assertNotEqual(new, old)
        self.assertIn("event=tls.reloaded fingerprint_sha256=" + new, self.otpd.log())
        # New handshakes get the new certificate: Python's and curl's.
        self.assertEqual(self.served(), new)
        st, r, body = self.curl("POST", "/v1/otp", {"phone": "+919876543210"})
        self.assertEqual(st, 202, r.stderr)
        # The connection opened before the swap is the same socket and still answers.
        for _ in range(3):
            conn.request("GET", "/v1/otp/" + body["id"], headers={"Authorization": "Bearer " + API_KEY})
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            resp.read()
        self.assertIs(conn.sock, sock)
        self.assertEqual(hashlib.sha256(sock.getpeercert(binary_form=True)).hexdigest(), old)
        conn.close()

    def test_a_bad_certificate_on_sighup_is_refused_and_the_old_one_stays(self):
        old = fingerprint(self.first[0])
        cases = [("expired", self.certs.leaf("expired", time.time() - 40 * 86400, time.time() - 86400),
                  "expired at"),
                 ("wrong key", (self.certs.leaf("other")[0], self.first[1]), "is not the key of the certificate"),
                 ("missing key", (self.first[0], os.path.join(self.tmp, "nowhere.key")), "cannot read")]
        for name, (cert, key), why in cases:
            with self.subTest(name):
                install(cert, self.cert_path)
                if os.path.exists(key):
                    install(key, self.key_path)
                else:
                    os.remove(self.key_path)
                self.reloaded("tls.reload_refused")
                line = self.otpd.log().splitlines()[-1]
                self.assertIn(why, line)
                self.assertIn(old, line)  # the one that stays is named
                self.assertEqual(self.served(), old)
                self.assertEqual(self.curl("GET", "/healthz", auth=None)[0], 200)
                install(self.first[0], self.cert_path)
                install(self.first[1], self.key_path)
        self.assertNotIn("event=tls.reloaded", self.otpd.log())


class KeyModeTest(TlsBase):
    """A key file its group or others may read is loaded, and said at start
    and on each reload that reads it (tls.key_permissions), until mended."""

    def configure(self, cfg):
        cfg = super().configure(cfg)
        os.chmod(self.key_path, 0o600)
        return cfg

    def warnings(self):
        return self.otpd.log().count("event=tls.key_permissions")

    def test_loose_key_mode_is_warned_at_start_and_reload(self):
        self.assertEqual(self.warnings(), 0)
        os.chmod(self.key_path, 0o644)
        self.otpd.kill(signal.SIGHUP)  # the same certificate: no tls.reloaded line, the warning still
        wait_until(lambda: self.warnings() == 1, what="the warning on reload")
        line = [l for l in self.otpd.log().splitlines() if "event=tls.key_permissions" in l][0]
        self.assertIn(" warn ", line)
        self.assertIn("%s is open to its group or others (mode 0644)" % self.key_path, line)
        os.chmod(self.key_path, 0o640)
        self.restart()
        wait_until(lambda: "(mode 0640)" in self.otpd.log(), what="the warning at start")
        # Mended: a reload says nothing more.
        os.chmod(self.key_path, 0o600)
        before, reloads = self.warnings(), self.otpd.log().count("event=config.reload ")
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("event=config.reload ") > reloads, what="the reload")
        self.otpd.kill(signal.SIGHUP)  # a second reload's line proves the first one's tls part ended
        wait_until(lambda: self.otpd.log().count("event=config.reload ") > reloads + 1, what="the second reload")
        self.assertEqual(self.warnings(), before)
        for line in key_body(self.first[1]):
            self.assertNotIn(line, self.otpd.log())


class FifoTest(TlsBase):
    """A FIFO (or another file that is not regular) named as the
    certificate or the key is refused without being opened for a blocking
    read: SIGHUP returns at once and the old certificate stays; a start
    stops with EX_CONFIG instead of hanging."""

    def fifo(self, path):
        os.remove(path)
        os.mkfifo(path)

        def unblock():
            # Were otpd stuck reading it, a writer that comes and goes ends the read.
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        self.addCleanup(unblock)

    def test_sighup_with_a_fifo_returns_and_keeps_the_certificate(self):
        old = fingerprint(self.first[0])
        for path in (self.cert_path, self.key_path):
            with self.subTest(path):
                self.fifo(path)
                t0 = time.monotonic()
                self.reloaded("tls.reload_refused")
                self.assertLess(time.monotonic() - t0, 5.0)
                line = self.otpd.log().splitlines()[-1]
                self.assertIn("%s is not a PEM file (not a regular file)" % path, line)
                self.assertIn(old, line)
                self.assertEqual(self.served(), old)
                os.remove(path)
                install(self.first[0] if path == self.cert_path else self.first[1], path)
        # The signal thread is free: the next SIGHUP is handled as usual.
        second = self.certs.leaf("second")
        install(second[0], self.cert_path)
        install(second[1], self.key_path)
        self.reloaded("tls.reloaded")
        self.assertEqual(self.served(), fingerprint(second[0]))

    def test_a_fifo_at_start_is_a_clear_error(self):
        self.assertEqual(self.otpd.stop(), 0)
        self.fifo(self.key_path)
        path = os.path.join(self.tmp, "fifo.json")
        with open(path, "w") as f:
            json.dump(self.otpd.config, f)
        started = self.run_bin("otpd", ["-c", path], timeout=20)
        self.assertEqual(started.returncode, 78, started.stderr)
        self.assertIn("tls.key: %s is not a PEM file (not a regular file)" % self.key_path, started.stderr)
        checked = self.run_bin("otpd", ["--check", "-c", path], timeout=20)
        self.assertEqual(checked.returncode, 1, checked.stderr)
        self.assertIn("not a regular file", checked.stderr)


class ChainTest(TlsBase):
    def test_an_out_of_date_intermediate_is_served_with_a_warning(self):
        """Only the leaf's dates stop a start: an extra certificate out of its
        dates (an old cross-sign left in a chain) is logged and served."""
        now = time.time()
        old = self.certs.leaf("old", now - 40 * 86400, now - 86400)[0]
        with open(self.first[0]) as a, open(old) as b, open(self.cert_path + ".new", "w") as out:
            out.write(a.read() + b.read())
        os.replace(self.cert_path + ".new", self.cert_path)
        self.restart()
        log = self.otpd.log()
        self.assertIn("event=tls.chain_out_of_date", log)
        self.assertIn("(certificate 2 of 2) expired at", log)
        self.assertIn("chain=2", log)
        self.assertEqual(self.served(), fingerprint(self.first[0]))
        self.assertEqual(self.curl("GET", "/healthz", auth=None)[0], 200)


class StartupErrorTest(TlsBase):
    """A bad certificate or key stops otpd before it listens, with EX_CONFIG
    and the reason; --check says the same with exit code 1."""

    def attempt(self, cert, key):
        cfg = json.loads(json.dumps(self.otpd.config))
        cfg["listen"] = "127.0.0.1:%d" % free_port()
        cfg["ledger"] = {"path": os.path.join(self.tmp, "other.db")}
        cfg["tls"] = {"cert": cert, "key": key}
        path = os.path.join(self.tmp, "start.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        started = self.run_bin("otpd", ["-c", path], timeout=20)
        checked = self.run_bin("otpd", ["--check", "-c", path], timeout=20)
        return started, checked, path

    def test_each_bad_file_is_a_clear_start_up_error(self):
        now = time.time()
        notpem = os.path.join(self.tmp, "notpem.pem")
        with open(notpem, "w") as f:
            f.write("just text\n")
        cases = [
            ("expired", self.certs.leaf("expired", now - 40 * 86400, now - 86400), "tls.cert: ", "expired at"),
            ("not yet valid", self.certs.leaf("future", now + 86400, now + 40 * 86400), "tls.cert: ",
             "is not valid before"),
            ("wrong key", (self.first[0], self.certs.leaf("other")[1]), "tls.key: ",
             "is not the key of the certificate"),
            ("missing cert", (os.path.join(self.tmp, "none.pem"), self.first[1]), "tls.cert: ",
             "cannot read %s (No such file or directory)" % os.path.join(self.tmp, "none.pem")),
            ("missing key", (self.first[0], os.path.join(self.tmp, "none.key")), "tls.key: ", "cannot read"),
            ("cert not PEM", (notpem, self.first[1]), "tls.cert: ", "is not a PEM certificate"),
            ("key not PEM", (self.first[0], self.first[0]), "tls.key: ", "is not a PEM private key"),
        ]
        secrets = key_body(self.first[1])
        for name, (cert, key), where, why in cases:
            with self.subTest(name):
                started, checked, path = self.attempt(cert, key)
                self.assertEqual(started.returncode, 78, started.stderr)  # EX_CONFIG
                self.assertIn("cannot start: %s: %s" % (path, where), started.stderr)
                self.assertIn(why, started.stderr)
                self.assertNotIn("listening", started.stderr)
                self.assertEqual(checked.returncode, 1, checked.stderr)
                self.assertIn("%s: %s" % (path, where), checked.stderr)
                self.assertIn(why, checked.stderr)
                for out in (started.stdout, started.stderr, checked.stdout, checked.stderr):
                    for line in secrets:
                        self.assertNotIn(line, out)

    def test_check_passes_good_files(self):
        started, checked, path = None, None, None
        cfg = json.loads(json.dumps(self.otpd.config))
        path = os.path.join(self.tmp, "good.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        checked = self.run_bin("otpd", ["--check", "-c", path])
        self.assertEqual((checked.returncode, checked.stderr), (0, ""))
        self.assertEqual(checked.stdout, "%s: ok\n" % path)


class InternalListenerTest(TlsBase):
    """listen_internal alone serves the probes and metrics, in plain HTTP;
    listen answers 404 there, as for any unknown path."""

    internal = True

    def test_probes_and_metrics_only_on_the_internal_listener(self):
        port = self.otpd.internal_port
        for path in ("/healthz", "/readyz", "/metrics"):
            with self.subTest(path):
                st, h, _ = self.otpd.call("GET", path, auth=None, port=port)
                self.assertEqual(st, 200)
                st, h, body = self.otpd.call("GET", path, auth=None)
                self.assertEqual(st, 404)
                self.assertEqual(h["content-type"], "application/problem+json")
                self.assertEqual(body["error"], "not_found")
                # A wrong method is no hint either: 404, not 405.
                self.assertEqual(self.otpd.call("POST", path, body={}, auth=None)[0], 404)
        st, r, _ = self.curl("GET", "/metrics", auth=None)
        self.assertEqual(st, 404, r.stderr)

    def test_the_internal_listener_refuses_the_api(self):
        port = self.otpd.internal_port
        st, _, body = self.otpd.call("POST", "/v1/otp", {"phone": "+919876543210"}, port=port)
        self.assertEqual((st, body["error"]), (404, "not_found"))
        self.assertEqual(self.otpd.call("POST", "/v1/otp/verify", {"phone": "+919876543210", "code": "123456"},
                                        port=port)[0], 404)
        self.assertEqual(self.otpd.call("GET", "/v1/admin/blocks", port=port)[0], 404)
        self.assertEqual(self.fake.requests(), [])
        # The API itself is on listen, over HTTPS.
        st, r, body = self.curl("POST", "/v1/otp", {"phone": "+919876543210"})
        self.assertEqual(st, 202, r.stderr)
        # And the scrape sees it.
        st, _, text = self.otpd.call("GET", "/metrics", auth=None, port=port)
        self.assertIn("otpd_tls_certificate_expiry_timestamp_seconds", text)
