"""Delivery reports: Kannel's dlr-url and Twilio's StatusCallback against
the fake provider. A report that says delivered or failed moves the message
and leaves a message_events row and a metric; a report of a passing stage
changes nothing. A report URL is good for one message, one provider and
callback_ttl: a wrong tag, another message's id, another provider's route
or an expired URL is refused. A Kannel URL also binds the dlr-mask Kannel
was given: a status that is not one of its types is refused, counted and
logged (with the message id, never the tag), and the mask cannot be
changed under the tag. delivered, failed and expired are final: a
later report changes nothing, is answered 200 and is counted only in
otpd_delivery_reports_ignored_total. Twilio's reports must carry a right
X-Twilio-Signature.

A report is answered after its ledger commit, so the ledger and the metrics
can be read as soon as its answer is in."""
import time
import urllib.parse

from harness import OtpdTest, twilio_signature, wait_until

PHONE = "+919812345678"
DAY_S = 86400
TOKEN = "twilio-token-secret"


class ReportTest(OtpdTest):
    def state(self, mid):
        return self.otpd.rows("SELECT state FROM messages WHERE id = ?", mid)[0]["state"]

    def wait_state(self, mid, state):
        wait_until(lambda: self.state(mid) == state, what="message %s %s" % (mid, state))

    def events(self, mid):
        return [(e["state"], e["detail"]) for e in
                self.otpd.rows("SELECT state, detail FROM message_events WHERE message_id = ? ORDER BY id", mid)]

    def metric(self, name, label, values):
        text = self.otpd.call("GET", "/metrics", auth=None)[2]
        out = {}
        for v in values:
            line = '%s{%s="%s"} ' % (name, label, v)
            out[v] = int(text.split(line, 1)[1].split("\n", 1)[0])
        return out

    def reports_metric(self):
        return self.metric("otpd_delivery_reports_total", "status", ("delivered", "failed"))

    def ignored_metric(self):
        return self.metric("otpd_delivery_reports_ignored_total", "status", ("delivered", "failed"))

    def refused_metric(self, reasons=("unknown", "expired", "signature")):
        return self.metric("otpd_delivery_reports_refused_total", "reason", reasons)

    def sent(self, phone=PHONE):
        """Issues, waits for 'sent'; returns the id and the provider request."""
        st, _, body = self.otpd.issue(phone)
        self.assertEqual(st, 202, body)
        self.wait_state(body["id"], "sent")
        req = [r for r in self.fake.requests() if body["id"] in r.get("body", "") + str(r.get("args", ""))
               + str(r.get("form", ""))]
        self.assertEqual(len(req), 1)
        return body["id"], req[0]


def kannel_provider(test, cfg):
    return {"type": "kannel", "url": test.fake.url + "/cgi-bin/sendsms", "from": "OTPD",
            "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS", "callback_url": "http://" + cfg["listen"]}


def twilio_provider(test, cfg):
    return {"type": "twilio", "base_url": test.fake.url, "from": "+15005550006",
            "account_sid_env": "TWILIO_SID", "auth_token_env": "TWILIO_TOKEN",
            "callback_url": "http://" + cfg["listen"]}


class KannelBase(ReportTest):
    """Kannel's configuration and its reports; no tests of its own."""
    env = {"KANNEL_USER": "kuser", "KANNEL_PASS": "kpass-secret"}

    def configure(self, cfg):
        cfg["provider"] = kannel_provider(self, cfg)
        return cfg

    def report(self, req, dlr_type, tag=None, query=None):
        """Calls the dlr-url Kannel was given, as Kannel does (%d = the type)."""
        url = urllib.parse.urlsplit(req["args"]["dlr-url"].replace("%d", str(dlr_type)))
        self.assertEqual(url.path, "/v1/dlr/kannel")
        query = query or url.query
        if tag is not None:
            query = query.replace("tag=", "tag=" + tag, 1)
        return self.otpd.call("GET", url.path + "?" + query, auth=None)[0]

    def query(self, req):
        return urllib.parse.parse_qs(urllib.parse.urlsplit(req["args"]["dlr-url"]).query)

    def url(self, req, status):
        """The path and query of the dlr-url with status put in for %d (as given: no encoding)."""
        u = urllib.parse.urlsplit(req["args"]["dlr-url"])
        return u.path + "?" + u.query.replace("%d", status)


class KannelReportTest(KannelBase):

    def test_dlr_url_carries_id_expiry_and_tag(self):
        mid, req = self.sent()
        self.assertEqual(req["args"]["dlr-mask"], "19")  # delivered (1), failed (2), SMSC reject (16)
        q = self.query(req)
        self.assertEqual(sorted(q), ["exp", "id", "m", "status", "tag"])
        self.assertEqual(q["id"], [mid])
        self.assertEqual(q["m"], ["19"])  # the mask Kannel was given, under the tag
        self.assertRegex(q["tag"][0], r"^[0-9a-f]{32}$")
        self.assertEqual(q["status"], ["%d"])
        # callback_ttl (7 days by default) after the message was accepted, rounded up to a second.
        created_ms = self.otpd.rows("SELECT created_ms FROM messages WHERE id = ?", mid)[0]["created_ms"]
        self.assertEqual(int(q["exp"][0]), (created_ms + 7 * DAY_S * 1000 + 999) // 1000)

    def failed_by(self, dlr_type):
        mid, req = self.sent()
        self.assertEqual(self.report(req, dlr_type), 200)
        self.assertEqual(self.state(mid), "failed")
        self.assertEqual(self.events(mid), [("queued", None), ("sending", None), ("sent", None),
                                            ("failed", "kannel dlr %d" % dlr_type)])
        self.assertEqual(self.reports_metric(), {"delivered": 0, "failed": 1})
        st, _, p = self.otpd.call("GET", "/v1/otp/" + mid)
        self.assertEqual((st, p["status"]), (200, "failed"))

    def test_type_2_failed(self):
        self.failed_by(2)

    def test_type_16_rejected_by_the_smsc(self):
        self.failed_by(16)

    def test_status_outside_the_mask_is_refused(self):
        """Kannel sends only the types its dlr-mask asked for (19: 1, 2, 16),
        as a bare number: anything else came from someone holding the URL.
        Refused (400), counted, logged once a second with the message id and
        nothing of the URL; the message stays as it was."""
        mid, req = self.sent()
        tag = self.query(req)["tag"][0]
        bad = ["4", "8", "3", "0", "32", "17", "01", "1x", "+1", "%2B1", "-1", "%201", "1%20", "1.0", ""]
        for status in bad:
            st, _, p = self.otpd.call("GET", self.url(req, status), auth=None)
            self.assertEqual((st, p["error"]), (400, "invalid_request"), status)
        no_status = self.url(req, "X").replace("&status=X", "")
        self.assertEqual(self.otpd.call("GET", no_status, auth=None)[0], 400)
        self.assertEqual(self.state(mid), "sent")
        self.assertEqual(self.refused_metric(("unknown", "status")), {"unknown": 0, "status": len(bad) + 1})
        self.assertEqual(self.report(req, 1), 200)  # the genuine report
        self.assertEqual(self.state(mid), "delivered")
        log = self.otpd.log()
        lines = [l for l in log.splitlines() if "report.status_refused" in l or "dlr-mask asked for" in l]
        self.assertTrue(lines and all(mid in l for l in lines), lines)
        self.assertLessEqual(len(lines), 3, "one line a second, not one a report")
        self.assertNotIn(tag, log)

    def test_the_mask_is_bound_to_the_tag(self):
        """A URL holder cannot widen the mask to claim other types: the tag
        binds m, written as otpd writes it."""
        mid, req = self.sent()
        for m in ("31", "019", "4", "", None):
            url = self.url(req, "4" if m in ("31", "4") else "2")
            url = url.replace("&m=19", "" if m is None else "&m=" + m)
            st, _, p = self.otpd.call("GET", url, auth=None)
            self.assertEqual((st, p["error"]), (404, "not_found"), m)
        self.assertEqual(self.state(mid), "sent")
        self.assertEqual(self.refused_metric(("unknown", "status")), {"unknown": 5, "status": 0})

    def test_failure_after_delivery_does_not_undo_it(self):
        mid, req = self.sent()
        self.assertEqual(self.report(req, 1), 200)
        self.assertEqual(self.state(mid), "delivered")
        self.assertEqual(self.report(req, 2), 200)  # 200, so Kannel stops sending it
        self.assertEqual(self.report(req, 16), 200)
        self.assertEqual(self.state(mid), "delivered")
        self.assertEqual([e[0] for e in self.events(mid)], ["queued", "sending", "sent", "delivered"])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})
        self.assertEqual(self.ignored_metric(), {"delivered": 0, "failed": 2})

    def test_delivery_after_failure_does_not_undo_it(self):
        mid, req = self.sent()
        self.assertEqual(self.report(req, 2), 200)
        for _ in range(3):  # failed -> delivered -> failed ... was possible forever
            self.assertEqual(self.report(req, 1), 200)
            self.assertEqual(self.report(req, 2), 200)
        self.assertEqual(self.state(mid), "failed")
        self.assertEqual(self.events(mid)[3:], [("failed", "kannel dlr 2")])
        self.assertEqual(self.reports_metric(), {"delivered": 0, "failed": 1})
        self.assertEqual(self.ignored_metric(), {"delivered": 3, "failed": 3})

    def test_replayed_report_changes_nothing(self):
        mid, req = self.sent()
        for _ in range(5):
            self.assertEqual(self.report(req, 1), 200)
        self.assertEqual(self.events(mid)[3:], [("delivered", "kannel dlr 1")])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})
        self.assertEqual(self.ignored_metric(), {"delivered": 4, "failed": 0})

    def test_wrong_tag_or_id_is_refused(self):
        mid, req = self.sent()
        self.assertEqual(self.report(req, 2, tag="x"), 404)
        url = req["args"]["dlr-url"].replace("%d", "2").replace("id=" + mid, "id=" + "0" * 32)
        u = urllib.parse.urlsplit(url)
        self.assertEqual(self.otpd.call("GET", u.path + "?" + u.query, auth=None)[0], 404)
        self.assertEqual(self.otpd.call("GET", "/v1/dlr/kannel?status=2", auth=None)[0], 404)
        self.assertEqual(self.state(mid), "sent")
        self.assertEqual(self.report(req, 1), 200)  # the genuine report
        self.assertEqual([e[0] for e in self.events(mid)], ["queued", "sending", "sent", "delivered"])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})
        self.assertEqual(self.refused_metric(), {"unknown": 3, "expired": 0, "signature": 0})

    def test_a_report_for_another_message_is_refused(self):
        a, req_a = self.sent()
        b, req_b = self.sent("+919812345679")
        qa, qb = self.query(req_a), self.query(req_b)
        # A's tag (and expiry) with B's id; and B's id and expiry with A's tag.
        for query in ("id=%s&exp=%s&tag=%s&status=2" % (b, qa["exp"][0], qa["tag"][0]),
                      "id=%s&exp=%s&tag=%s&status=2" % (b, qb["exp"][0], qa["tag"][0])):
            st, _, p = self.otpd.call("GET", "/v1/dlr/kannel?" + query, auth=None)
            self.assertEqual((st, p["error"]), (404, "not_found"), query)
        self.assertEqual((self.state(a), self.state(b)), ("sent", "sent"))
        self.assertEqual(self.report(req_b, 2), 200)
        self.assertEqual((self.state(a), self.state(b)), ("sent", "failed"))

    def test_a_later_expiry_under_the_same_tag_is_refused(self):
        mid, req = self.sent()
        exp = self.query(req)["exp"][0]
        query = urllib.parse.urlsplit(req["args"]["dlr-url"].replace("%d", "2")).query
        for longer in (str(int(exp) + 30 * DAY_S), "0" + exp, exp + "0"):
            self.assertEqual(self.report(req, 2, query=query.replace("exp=" + exp, "exp=" + longer)), 404, longer)
        self.assertEqual(self.state(mid), "sent")

    def test_a_twilio_route_is_closed_to_kannel_reports(self):
        """No Twilio account configured: nothing can check a signature, so
        every report on the Twilio route is refused."""
        mid, req = self.sent()
        q = urllib.parse.urlsplit(req["args"]["dlr-url"]).query.replace("&status=%d", "").replace("&m=19", "")
        st, _, p = self.otpd.call("POST", "/v1/dlr/twilio?" + q, raw=b"MessageSid=x&MessageStatus=failed",
                                  auth=None, headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual((st, p["error"]), (403, "invalid_signature"))
        self.assertEqual(self.state(mid), "sent")


class KannelAllTypesTest(KannelBase):
    """dlr_mask 31: every type asked for; buffered (4) and SMSC submit (8)
    are passing stages that change nothing."""

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["provider"]["dlr_mask"] = 31
        return cfg

    def test_passing_stages_change_nothing(self):
        mid, req = self.sent()
        self.assertEqual(self.query(req)["m"], ["31"])
        for dlr_type in (4, 8):  # buffered, SMSC accepted: not an end
            self.assertEqual(self.report(req, dlr_type), 200)
        self.assertEqual(self.events(mid), [("queued", None), ("sending", None), ("sent", None)])
        self.assertEqual(self.report(req, 1), 200)
        self.assertEqual(self.events(mid)[3:], [("delivered", "kannel dlr 1")])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})
        self.assertEqual(self.ignored_metric(), {"delivered": 0, "failed": 0})


class KannelDeliveredOnlyTest(KannelBase):
    """dlr_mask 1 (delivered only): whoever holds a URL can claim delivered
    and nothing else; a failure cannot be made up."""

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["provider"]["dlr_mask"] = 1
        return cfg

    def test_only_delivered_is_taken(self):
        mid, req = self.sent()
        self.assertEqual(req["args"]["dlr-mask"], "1")
        for dlr_type in (2, 16, 4, 8):
            self.assertEqual(self.report(req, dlr_type), 400, dlr_type)
        self.assertEqual(self.state(mid), "sent")
        self.assertEqual(self.report(req, 1), 200)
        self.assertEqual(self.state(mid), "delivered")


class ExpiredTagTest(KannelBase):
    """callback_ttl 3s: a URL is good for 3 s after its message was accepted."""

    def configure(self, cfg):
        cfg = super().configure(cfg)
        cfg["provider"]["callback_ttl"] = "3s"
        return cfg

    def test_an_expired_url_is_refused(self):
        a, req_a = self.sent()
        b, req_b = self.sent("+919812345679")
        created_ms = self.otpd.rows("SELECT created_ms FROM messages WHERE id = ?", a)[0]["created_ms"]
        exp = int(self.query(req_a)["exp"][0])
        self.assertEqual(exp, (created_ms + 3000 + 999) // 1000)
        self.assertEqual(self.report(req_b, 1), 200)  # within its life (B was accepted after A)
        wait_until(lambda: time.time() >= exp, what="A's report URL to expire")
        u = urllib.parse.urlsplit(req_a["args"]["dlr-url"].replace("%d", "1"))
        st, _, p = self.otpd.call("GET", u.path + "?" + u.query, auth=None)
        self.assertEqual((st, p["error"], p["status"]), (410, "report_expired", 410))
        self.assertEqual((self.state(a), self.state(b)), ("sent", "delivered"))
        self.assertEqual(self.refused_metric(), {"unknown": 0, "expired": 1, "signature": 0})
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})


class ExpiredMessageReportTest(KannelBase):
    """A message the pacer ended 'expired' after an attempt the provider
    may have acted on (a 503 asking to come back later than the code
    lives): its late delivery report changes nothing."""

    def test_a_report_after_expired_changes_nothing(self):
        self.fake.control(status=503, retry_after=600)
        st, _, body = self.otpd.issue(PHONE)
        self.assertEqual(st, 202, body)
        mid = body["id"]
        self.wait_state(mid, "expired")
        req = self.fake.requests()[0]
        url = urllib.parse.urlsplit(req["args"]["dlr-url"].replace("%d", "1"))
        self.assertEqual(self.otpd.call("GET", url.path + "?" + url.query, auth=None)[0], 200)
        self.assertEqual(self.state(mid), "expired")
        self.assertEqual([e[0] for e in self.events(mid)], ["queued", "sending", "expired"])
        self.assertEqual(self.reports_metric(), {"delivered": 0, "failed": 0})
        self.assertEqual(self.ignored_metric(), {"delivered": 1, "failed": 0})


class TwilioReportTest(ReportTest):
    env = {"TWILIO_SID": "AC0123456789abcdef0123456789abcdef", "TWILIO_TOKEN": TOKEN}

    def configure(self, cfg):
        cfg["provider"] = twilio_provider(self, cfg)
        return cfg

    def params(self, status):
        """A callback's parameters as Twilio sends them, in its order."""
        return [("SmsSid", "SM0123"), ("SmsStatus", status), ("MessageStatus", status), ("To", "+14155550100"),
                ("MessageSid", "SM0123"), ("AccountSid", "AC0123456789abcdef0123456789abcdef"), ("From", "+15005550006"),
                ("ApiVersion", "2010-04-01")]

    def report(self, req, status, query=None, token=TOKEN, signature=None, sign_params=None):
        """Posts a status callback to the StatusCallback otpd gave (or to its
        path with query), signed as Twilio signs it: over the URL it calls."""
        given = req["form"]["StatusCallback"]
        cb = urllib.parse.urlsplit(given)
        self.assertEqual(cb.path, "/v1/dlr/twilio")
        url = given if query is None else urllib.parse.urlunsplit(cb._replace(query=query))
        params = self.params(status)
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if signature is None and token is not None:
            signature = twilio_signature(token, url, sign_params or params)
        if signature is not None:
            headers["X-Twilio-Signature"] = signature
        path = cb.path + "?" + (cb.query if query is None else query)
        return self.otpd.call("POST", path, raw=urllib.parse.urlencode(params).encode(), auth=None,
                              headers=headers)[0]

    def failed_by(self, status):
        mid, req = self.sent()
        self.assertEqual(self.report(req, status), 200)
        self.assertEqual(self.state(mid), "failed")
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
        self.assertEqual(self.events(mid)[3:], [("delivered", "twilio delivered")])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})

    def test_final_states_and_replays(self):
        mid, req = self.sent()
        self.assertEqual(self.report(req, "delivered"), 200)
        for status in ("delivered", "undelivered", "failed", "delivered"):
            self.assertEqual(self.report(req, status), 200)
        self.assertEqual(self.state(mid), "delivered")
        self.assertEqual(self.events(mid)[3:], [("delivered", "twilio delivered")])
        self.assertEqual(self.reports_metric(), {"delivered": 1, "failed": 0})
        self.assertEqual(self.ignored_metric(), {"delivered": 2, "failed": 2})

    def test_wrong_tag_is_refused(self):
        mid, req = self.sent()
        q = urllib.parse.urlsplit(req["form"]["StatusCallback"]).query
        self.assertEqual(self.report(req, "failed", q.replace("tag=", "tag=0", 1)), 404)
        self.assertEqual(self.report(req, "undelivered"), 200)
        self.assertEqual([e for e in self.events(mid) if e[0] == "failed"], [("failed", "twilio undelivered")])
        self.assertEqual(self.reports_metric(), {"delivered": 0, "failed": 1})

    def test_signature_missing_or_wrong_is_403(self):
        mid, req = self.sent()
        url = req["form"]["StatusCallback"]
        forged = [
            dict(token=None),                                            # no header
            dict(signature=""),                                          # empty
            dict(token="another-account-token"),                         # another account's token
            dict(sign_params=self.params("delivered")),                  # signed for another body
            dict(signature=twilio_signature(TOKEN, url + "&x=1", self.params("failed"))),  # another URL
            dict(signature=twilio_signature(TOKEN, url, self.params("failed")) + "="),       # longer
            dict(signature=twilio_signature(TOKEN, url, self.params("failed"))[:-2]),        # shorter
        ]
        for kw in forged:
            self.assertEqual(self.report(req, "failed", **kw), 403, kw)
        self.assertEqual(self.state(mid), "sent")
        self.assertEqual(self.refused_metric(), {"unknown": 0, "expired": 0, "signature": len(forged)})
        # The parameters' order on the wire does not matter: Twilio signs them sorted.
        self.assertEqual(self.report(req, "failed"), 200)
        self.assertEqual(self.state(mid), "failed")
        self.assertEqual(self.reports_metric(), {"delivered": 0, "failed": 1})

    def test_the_query_in_another_order_still_checks(self):
        """otpd checks the URL it gave, not the one it was called at."""
        mid, req = self.sent()
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(req["form"]["StatusCallback"]).query)
        other = "tag=%s&id=%s&exp=%s" % (q["tag"][0], q["id"][0], q["exp"][0])
        params = self.params("delivered")
        sig = twilio_signature(TOKEN, req["form"]["StatusCallback"], params)
        self.assertEqual(self.report(req, "delivered", query=other, signature=sig), 200)
        self.assertEqual(self.state(mid), "delivered")

    def test_kannel_route_refuses_a_twilio_tag(self):
        mid, req = self.sent()
        q = urllib.parse.urlsplit(req["form"]["StatusCallback"]).query
        st, _, p = self.otpd.call("GET", "/v1/dlr/kannel?" + q + "&status=2", auth=None)
        self.assertEqual((st, p["error"]), (404, "not_found"))
        self.assertEqual(self.state(mid), "sent")
        self.assertEqual(self.report(req, "undelivered"), 200)  # the genuine report, on its own route
        self.assertEqual(self.state(mid), "failed")


class CrossProviderTest(ReportTest):
    """A message sent through Kannel, then otpd restarted on Twilio: the
    Kannel URL, correctly signed by the Twilio account, is refused on the
    Twilio route, and still works on Kannel's."""
    env = {"KANNEL_USER": "kuser", "KANNEL_PASS": "kpass-secret", "TWILIO_SID": "AC0123456789abcdef0123456789abcdef", "TWILIO_TOKEN": TOKEN}

    def configure(self, cfg):
        cfg["provider"] = kannel_provider(self, cfg)
        return cfg

    def test_a_kannel_tag_is_refused_on_the_twilio_route(self):
        mid, req = self.sent()
        kannel_url = req["args"]["dlr-url"]
        cfg = dict(self.otpd.config, provider=twilio_provider(self, self.otpd.config))
        self.restart(cfg)
        # Signed as the Twilio route rebuilds its URL (id, exp, tag): only the tag can refuse it.
        q = urllib.parse.urlsplit(kannel_url).query.replace("&status=%d", "").replace("&m=19", "")
        url = "http://%s/v1/dlr/twilio?%s" % (cfg["listen"], q)
        params = [("MessageSid", "SM1"), ("MessageStatus", "failed")]
        st, _, p = self.otpd.call("POST", "/v1/dlr/twilio?" + q, raw=urllib.parse.urlencode(params).encode(),
                                  auth=None, headers={"Content-Type": "application/x-www-form-urlencoded",
                                                      "X-Twilio-Signature": twilio_signature(TOKEN, url, params)})
        self.assertEqual((st, p["error"]), (404, "not_found"))
        self.assertEqual(self.state(mid), "sent")
        u = urllib.parse.urlsplit(kannel_url.replace("%d", "1"))
        self.assertEqual(self.otpd.call("GET", u.path + "?" + u.query, auth=None)[0], 200)
        self.assertEqual(self.state(mid), "delivered")
