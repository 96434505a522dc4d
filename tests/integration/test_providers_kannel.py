"""End to end through a real Kannel: otpd -> bearerbox/smsbox (Debian's
kannel) -> fakesmsc, and Kannel's delivery reports back to otpd."""
import os
import shutil
import sys
import tempfile

from harness import OtpdTest, code_of, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kannel"))
import kannel  # noqa: E402


def refused(otpd, reason):
    """otpd_delivery_reports_refused_total{reason}."""
    line = 'otpd_delivery_reports_refused_total{reason="%s"} ' % reason
    text = otpd.call("GET", "/metrics", auth=None)[2]
    return int(text.split(line, 1)[1].split("\n", 1)[0]) if line in text else None


class KannelTest(OtpdTest):
    """A real Kannel (kannel_args: Kannel's own options) and otpd's kannel
    adapter pointed at it; the tests are the subclasses'."""
    env = {"KANNEL_USER": "otpd", "KANNEL_PASS": "kannel-pass-secret"}
    kannel_args = {}

    def setUp(self):
        self.kdir = tempfile.mkdtemp(prefix="otpd-kannel-")
        self.kannel = kannel.Kannel(self.kdir, user="otpd", password="kannel-pass-secret", **self.kannel_args)
        self.kannel.start()
        super().setUp()

    def configure(self, cfg):
        cfg["provider"] = {"type": "kannel", "url": self.kannel.sendsms_url, "from": "OTPD",
                           "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS",
                           "callback_url": "http://" + cfg["listen"]}
        return cfg

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            self.kannel.stop()
            if not os.environ.get("OTPD_KEEP"):
                shutil.rmtree(self.kdir, ignore_errors=True)


class KannelEndToEndTest(KannelTest):
    def test_code_arrives_at_the_smsc_and_verifies(self):
        phone = "+919812345678"
        st, _, body = self.otpd.issue(phone)
        self.assertEqual(st, 202, body)
        msgs = self.kannel.wait_received(1, timeout=15)
        self.assertEqual(msgs[0]["receiver"], phone)
        self.assertEqual(msgs[0]["sender"], "OTPD")
        code = code_of(msgs[0]["text"])
        self.assertRegex(msgs[0]["text"], r"^\d{6} is your login code\. It expires in 5 minutes\.$")
        # Kannel's fake SMSC reports delivery through the dlr-url otpd passed.
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages")[0]["state"] == "delivered", 15,
                   what="the delivery report")
        self.assertEqual(refused(self.otpd, "status"), 0, "a report Kannel made was refused")
        self.assertEqual(self.otpd.verify(phone, code)[:1], (200,))
        sends = self.otpd.rows("SELECT http_status, outcome FROM sends")
        self.assertEqual(sends, [{"http_status": 202, "outcome": "sent"}])
        self.assertNotIn("kannel-pass-secret", self.otpd.log())

    def test_wrong_credentials_fail_permanently(self):
        self.restart(KANNEL_PASS="wrong-password")
        st, _, body = self.otpd.issue("+919812345679")
        self.assertEqual(st, 202)
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages")[0]["state"] == "failed", 10,
                   what="the permanent failure")
        self.assertEqual(self.otpd.rows("SELECT http_status, outcome FROM sends"),
                         [{"http_status": 403, "outcome": "permanent"}])
        self.assertEqual(self.kannel.received(), [])



class KannelRoutingTest(KannelTest):
    """Issue 14's sendsms fields through a real Kannel: the only SMSC takes
    only messages that name it (allowed-smsc-id), so a delivery proves smsc
    reached sendsms; priority and validity are accepted with it (Kannel
    answers 400 "... field misformed" to ones it cannot take), and the
    dlr-mask shows in bearerbox's access log."""
    kannel_args = {"smsc_id": "route-a", "extra_smsc": 'allowed-smsc-id = "route-a"'}

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["provider"].update({"smsc": "route-a", "priority": 3, "validity": "3m", "dlr_mask": 31})
        return cfg

    def test_routed_by_smsc_with_priority_and_validity(self):
        phone = "+919812345678"
        st, _, body = self.otpd.issue(phone)
        self.assertEqual(st, 202, body)
        msgs = self.kannel.wait_received(1, timeout=15)
        self.assertEqual((msgs[0]["receiver"], msgs[0]["sender"]), (phone, "OTPD"))
        self.assertIsNotNone(code_of(msgs[0]["text"]))
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages")[0]["state"] == "delivered", 15,
                   what="the delivery report")
        self.assertEqual(self.otpd.rows("SELECT http_status, outcome FROM sends"),
                         [{"http_status": 202, "outcome": "sent"}])
        with open(os.path.join(self.kdir, "bearerbox-access.log")) as f:
            sent = [line for line in f if "Sent SMS" in line]
        self.assertEqual(len(sent), 1, sent)
        self.assertIn("[SMSC:route-a]", sent[0])
        self.assertRegex(sent[0], r"\[flags:[-0-9]+:[-0-9]+:[-0-9]+:[-0-9]+:31\]")
        # Kannel's own reports (8, SMSC submit, and 1, delivered, for mask 31) match the mask the URL binds:
        # none is refused.
        for reason in ("unknown", "status", "expired"):
            self.assertEqual(refused(self.otpd, reason), 0, reason)
        # The route needs smsc: Kannel refuses a message without it outright.
        self.assertEqual(self.kannel.send(phone, "unrouted"), (403, "Not routable. Do not try again."))
        self.assertEqual(self.kannel.send(phone, "routed", smsc="route-a"), (202, "0: Accepted for delivery"))
        self.assertNotIn("kannel-pass-secret", self.otpd.log())
