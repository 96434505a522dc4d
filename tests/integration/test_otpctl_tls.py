"""otpctl's admin commands over https:// to otpd's TLS listener, whose
certificate test_http_tls.py's small CA signs (a leaf for 127.0.0.1).

- With --cacert naming that CA the call succeeds, the flag given before the
  command or among its flags.
- Without it (the system's CAs do not know the test's CA), or with another
  CA, the certificate is refused: EX_PROTOCOL, a sentence naming the
  certificate and --cacert, nothing on stdout and nothing done on the server.
- A --cacert that is no file of certificates is EX_NOINPUT; --cacert with an
  http:// URL is a usage error.
- The wrong scheme for the port says so: http:// to the TLS port, https:// to
  the plain listen_internal port.
"""
import json
import os

from test_otpctl_admin import ADMIN_KEY, EX_PROTOCOL, EX_USAGE, P1, CtlMixin
from test_http_tls import Certs, TlsBase

EX_NOINPUT = 66


class OtpctlTlsTest(CtlMixin, TlsBase):
    env = {"OTPD_KEY_OPS": ADMIN_KEY}
    internal = True  # a plain port to send https:// to

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["api_keys"].append({"name": "ops", "key_env": "OTPD_KEY_OPS", "role": "admin"})
        return cfg

    def https(self):
        return "https://127.0.0.1:%d" % self.otpd.port

    def nothing_done(self):
        self.assertEqual(self.otpd.rows("SELECT * FROM admin_actions"), [])

    def test_cacert_trusts_the_servers_ca(self):
        r = self.ctl("--cacert", self.certs.ca, "block", "add", "--phone", P1, "--expires-in", "1h",
                     server=self.https())
        self.assertEqual(r.returncode, 0, r.stderr)
        added = json.loads(r.stdout)
        self.assertEqual(r.stderr, "", "no clear-text warning over https://")
        r = self.ctl("block", "list", "--format", "json", "--cacert", self.certs.ca, server=self.https())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([it["id"] for it in json.loads(r.stdout)["items"]], [added["id"]])

    def test_without_cacert_the_certificate_is_refused(self):
        r = self.ctl("block", "add", "--phone", P1, "--expires-in", "1h", server=self.https())
        self.assertEqual(r.returncode, EX_PROTOCOL, r.stderr)
        self.assertIn("certificate is not trusted", r.stderr)
        self.assertIn("--cacert", r.stderr)
        self.assertEqual(r.stdout, "")
        other = Certs(os.path.join(self.tmp, "other"))
        r = self.ctl("--cacert", other.ca, "block", "add", "--phone", P1, "--expires-in", "1h", server=self.https())
        self.assertEqual(r.returncode, EX_PROTOCOL, r.stderr)
        self.assertIn("certificate is not trusted", r.stderr)
        self.nothing_done()

    def test_cacert_that_cannot_be_read(self):
        for path in (os.path.join(self.tmp, "missing.pem"), self.otpd.conf_path):
            r = self.ctl("--cacert", path, "block", "list", server=self.https())
            self.assertEqual(r.returncode, EX_NOINPUT, (path, r.stderr))
            self.assertIn("--cacert " + path, r.stderr)
        r = self.ctl("--cacert", self.certs.ca, "block", "list", server="http://127.0.0.1:%d" % self.otpd.port)
        self.assertEqual(r.returncode, EX_USAGE, r.stderr)
        self.assertIn("--cacert goes with an https:// URL", r.stderr)

    def test_wrong_scheme_for_the_port(self):
        r = self.ctl("block", "list", server="http://127.0.0.1:%d" % self.otpd.port)
        self.assertEqual(r.returncode, EX_PROTOCOL, r.stderr)
        self.assertIn("https://", r.stderr)
        r = self.ctl("--cacert", self.certs.ca, "block", "list", server="https://127.0.0.1:%d" % self.otpd.internal_port)
        self.assertEqual(r.returncode, EX_PROTOCOL, r.stderr)
        self.assertIn("TLS handshake failed", r.stderr)
        self.nothing_done()
