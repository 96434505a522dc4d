"""Delivery reports: Kannel's dlr-url and Twilio's StatusCallback against
the fake provider. A report that says delivered or failed moves the message
and leaves a message_events row and a metric; a report of a passing stage
changes nothing; a report with a wrong tag is refused."""
import urllib.parse

from harness import OtpdTest, wait_until

PHONE = "+919812345678"


class ReportTest(OtpdTest):
    def state(self, mid):
        return self.otpd.rows("SELECT state FROM messages WHERE id = ?", mid)[0]["state"]

    def wait_state(self, mid, state):
        wait_until(lambda: self.state(mid) == state, what="message %s %s" % (mid, state))

    def events(self, mid):
        return [(e["state"], e["detail"]) for e in
                self.otpd.rows("SELECT state, detail FROM message_events WHERE message_id = ? ORDER BY id", mid)]

    def reports_metric(self):
        text = self.otpd.call("GET", "/metrics", auth=None)[2]
        out = {}
        for result in ("delivered", "failed"):
            line = 'otpd_delivery_reports_total{result="%s"} ' % result
            out[result] = int(text.split(line, 1)[1].split("\n", 1)[0])
        return out

    def sent(self, phone=PHONE):
        """Issues, waits for 'sent'; returns the id and the provider request."""
        st, _, body = self.otpd.issue(phone)
        self.assertEqual(st, 202, body)
        self.wait_state(body["id"], "sent")
        req = [r for r in self.fake.requests() if body["id"] in r.get("body", "") + str(r.get("args", ""))
               + str(r.get("form", ""))]
        self.assertEqual(len(req), 1)
        return body["id"], req[0]


class KannelReportTest(ReportTest):
    env = {"KANNEL_USER": "kuser", "KANNEL_PASS": "kpass-secret"}

    def configure(self, cfg):
        cfg["provider"] = {"type": "kannel", "url": self.fake.url + "/cgi-bin/sendsms", "from": "OTPD",
                           "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS",
                           "callback_url": "http://" + cfg["listen"]}
        return cfg

    def report(self, req, dlr_type, tag=None):
        """Calls the dlr-url Kannel was given, as Kannel does (%d = the type)."""
        url = urllib.parse.urlsplit(req["args"]["dlr-url"].replace("%d", str(dlr_type)))
        self.assertEqual(url.path, "/v1/dlr/kannel")
        query = url.query if tag is None else url.query.replace("tag=", "tag=" + tag, 1)
        return self.otpd.call("GET", url.path + "?" + query, auth=None)[0]

    def test_dlr_url_carries_id_and_tag(self):
        mid, req = self.sent()
        self.assertEqual(req["args"]["dlr-mask"], "19")  # delivered (1), failed (2), SMSC reject (16)
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(req["args"]["dlr-url"]).query)
        self.assertEqual(q["id"], [mid])
        self.assertRegex(q["tag"][0], r"^[0-9A-Za-z_-]{16,}$")
        self.assertEqual(q["status"], ["%d"])

    def failed_by(self, dlr_type):
        mid, req = self.sent()
        self.assertEqual(self.report(req, dlr_type), 200)
        self.wait_state(mid, "failed")
        self.assertEqual(self.events(mid), [("queued", None), ("sending", None), ("sent", None),
                                            ("failed", "kannel dlr %d" % dlr_type)])
        self.assertEqual(self.reports_metric(), {"delivered": 0, "failed": 1})
        st, _, p = self.otpd.call("GET", "/v1/otp/" + mid)
        self.assertEqual((st, p["status"]), (200, "failed"))

    def test_type_2_failed(self):
        self.failed_by(2)

    def test_type_16_rejected_by_the_smsc(self):
        self.failed_by(16)

    def test_passing_stages_change_nothing(self):
        mid, req = self.sent()
        for dlr_type in (4, 8):  # buffered, SMSC accepted: not an end
            self.assertEqual(self.report(req, dlr_type), 200)
        self.assertEqual(self.report(req, 1), 200)  # the later event
        self.wait_state(mid, "delivered")
        self.assertEqual(self.events(mid)[3:], [("delivered", "kannel dlr 1")])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})

    def test_failure_after_delivery_does_not_undo_it(self):
        mid, req = self.sent()
        self.assertEqual(self.report(req, 1), 200)
        self.wait_state(mid, "delivered")
        self.assertEqual(self.report(req, 2), 200)
        # A later report on a second message is written after the first's.
        mid2, req2 = self.sent("+919812345679")
        self.assertEqual(self.report(req2, 16), 200)
        self.wait_state(mid2, "failed")
        self.assertEqual(self.state(mid), "delivered")
        self.assertEqual([e[0] for e in self.events(mid)], ["queued", "sending", "sent", "delivered"])

    def test_wrong_tag_or_id_is_refused(self):
        mid, req = self.sent()
        self.assertEqual(self.report(req, 2, tag="x"), 404)
        url = req["args"]["dlr-url"].replace("%d", "2").replace("id=" + mid, "id=" + "0" * 32)
        u = urllib.parse.urlsplit(url)
        self.assertEqual(self.otpd.call("GET", u.path + "?" + u.query, auth=None)[0], 404)
        self.assertEqual(self.otpd.call("GET", "/v1/dlr/kannel?status=2", auth=None)[0], 404)
        self.assertEqual(self.report(req, 1), 200)  # the later event: the genuine report
        self.wait_state(mid, "delivered")
        self.assertEqual([e[0] for e in self.events(mid)], ["queued", "sending", "sent", "delivered"])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})


class TwilioReportTest(ReportTest):
    env = {"TWILIO_SID": "AC123", "TWILIO_TOKEN": "twilio-token-secret"}

    def configure(self, cfg):
        cfg["provider"] = {"type": "twilio", "base_url": self.fake.url, "from": "+15005550006",
                           "account_sid_env": "TWILIO_SID", "auth_token_env": "TWILIO_TOKEN",
                           "callback_url": "http://" + cfg["listen"]}
        return cfg

    def report(self, req, status, query=None):
        cb = urllib.parse.urlsplit(req["form"]["StatusCallback"])
        self.assertEqual(cb.path, "/v1/dlr/twilio")
        return self.otpd.call("POST", cb.path + "?" + (query or cb.query),
                              raw=("MessageSid=SMx&MessageStatus=%s" % status).encode(), auth=None,
                              headers={"Content-Type": "application/x-www-form-urlencoded"})[0]

    def failed_by(self, status):
        mid, req = self.sent()
        self.assertEqual(self.report(req, status), 200)
        self.wait_state(mid, "failed")
        self.assertEqual(self.events(mid), [("queued", None), ("sending", None), ("sent", None),
                                            ("failed", "twilio " + status)])
        self.assertEqual(self.reports_metric(), {"delivered": 0, "failed": 1})

    def test_undelivered(self):
        self.failed_by("undelivered")

    def test_failed(self):
        self.failed_by("failed")

    def test_passing_stages_change_nothing(self):
        mid, req = self.sent()
        for status in ("queued", "sending", "sent", "accepted"):
            self.assertEqual(self.report(req, status), 200)
        self.assertEqual(self.report(req, "delivered"), 200)
        self.wait_state(mid, "delivered")
        self.assertEqual(self.events(mid)[3:], [("delivered", "twilio delivered")])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})

    def test_wrong_tag_is_refused(self):
        mid, req = self.sent()
        q = urllib.parse.urlsplit(req["form"]["StatusCallback"]).query
        self.assertEqual(self.report(req, "failed", q.replace("tag=", "tag=0", 1)), 404)
        self.assertEqual(self.report(req, "undelivered"), 200)
        self.wait_state(mid, "failed")
        self.assertEqual([e for e in self.events(mid) if e[0] == "failed"], [("failed", "twilio undelivered")])
        self.assertEqual(self.reports_metric(), {"delivered": 0, "failed": 1})
