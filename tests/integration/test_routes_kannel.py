"""Routes with a real Kannel as one provider (docs/providers.md's worked example, on loopback): a local Kannel
whose only SMSC refuses +44 (denied-prefix: Kannel answers 403 "Not routable"), with a webhook provider behind it.
An Indian number is sent by Kannel and its report comes back; a British one is refused by Kannel for its route and
fails over to the webhook with the same code, its money exact."""
import os
import sys

from harness import code_of, wait_until
from test_providers_kannel import KannelTest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kannel"))

KANNEL_PRICE, GLOBAL_PRICE = 20, 450


class KannelLaneTest(KannelTest):
    kannel_args = {"extra_smsc": 'denied-prefix = "+44"'}

    def configure(self, cfg):
        cfg = super().configure(cfg)
        kannel = dict(cfg.pop("provider"), rate=20, prices={"*": KANNEL_PRICE})
        cfg["providers"] = {"local-kannel": kannel,
                            "global": {"type": "webhook", "url": self.fake.url + "/sms", "prices": {"*": GLOBAL_PRICE}}}
        cfg["routes"] = [{"match": "+91", "providers": ["local-kannel", "global"]},
                         {"match": "*", "providers": ["local-kannel", "global"]}]
        cfg["cost"] = {"currency": "INR", "prices": {"*": 1000}, "caps": [{"window": "1h", "max": 100000}]}
        return cfg

    def reserved(self):
        v = self.redis.cmd("HGET", "otp:cost", "c3600000")
        return int(v.split(":")[1]) if v else 0

    def test_kannel_sends_its_own_and_a_refused_route_fails_over(self):
        st, _, india = self.otpd.issue("+919812345678")
        self.assertEqual(st, 202, india)
        msgs = self.kannel.wait_received(1, timeout=15)
        self.assertEqual(msgs[0]["receiver"], "+919812345678")
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages WHERE id = ?", india["id"])[0]["state"]
                   == "delivered", 15, what="Kannel's delivery report")

        st, _, uk = self.otpd.issue("+447400123456")
        self.assertEqual(st, 202, uk)
        got = self.wait_messages(1)
        self.assertEqual(got[0]["to"], "+447400123456")
        code = code_of(got[0]["text"])
        sends = [(s["message_id"], s["provider"], s["http_status"], s["cost_minor"])
                 for s in self.otpd.rows("SELECT * FROM sends ORDER BY id")]
        self.assertIn((uk["id"], "local-kannel", 403, 0), sends)  # "Not routable": never billed
        self.assertIn((uk["id"], "global", 200, GLOBAL_PRICE), sends)
        self.assertEqual(len(self.kannel.received()), 1)  # nothing more reached the SMSC
        st, _, view = self.otpd.call("GET", "/v1/otp/" + uk["id"])
        self.assertEqual([a["provider"] + ":" + a["cause"] for a in view["attempts"]],
                         ["local-kannel:route", "global:accepted"])
        wait_until(lambda: self.reserved() == KANNEL_PRICE + GLOBAL_PRICE, 10, what="the caps hold both attempts")
        st, _, body = self.otpd.verify("+447400123456", code)
        self.assertEqual(st, 200, body)
        self.assertNotIn("kannel-pass-secret", self.otpd.log())
