"""What a message says on /v1 (src/otp/sms.c, otp_text.c): the template of
the issue's locale (itself, then its language, else otp.template), Android's
SMS Retriever hash on a line of its own, the caller's WebOTP origin line
last, a text that could not fit refused before anything is taken, and
otp.templates reloaded on SIGHUP (a locale a reload removed gets
otp.template)."""
import re
import signal

from harness import API_KEY, OTHER_KEY, OtpdTest, code_of, wait_until

HI = "{code} aapka login code hai"
PT = "O seu codigo: {code}"
PT_BR = "Seu codigo: {code}"
HASH = "FA+9qCX9VSu"


def text_of(tmpl, code):
    return tmpl.replace("{code}", code)


class MessagesTest(OtpdTest):
    def configure(self, cfg):
        cfg["otp"]["templates"] = {"hi": HI, "pt": PT, "pt-BR": PT_BR}
        cfg["api_keys"][1]["webotp_origin"] = "login.example.com"  # login-app's
        return cfg

    def sent(self, body):
        """The text of the message an accepted issue queued."""
        mine = wait_until(lambda: [m for m in self.fake.messages() if m["id"] == body["id"]] or None, 10,
                          what="message %s at the provider" % body["id"])
        return mine[0]["text"]

    def issue_text(self, phone, auth=API_KEY, **fields):
        st, _, body = self.otpd.issue(phone, auth=auth, **fields)
        self.assertEqual(st, 202, body)
        return self.sent(body)

    def test_locale_picks_its_template_then_its_language(self):
        for phone, locale, tmpl in (("+919812340001", "hi", HI), ("+919812340002", "HI-in", HI),
                                    ("+919812340003", "pt-BR", PT_BR), ("+919812340004", "pt-PT", PT),
                                    ("+919812340005", "pt_AO", PT)):
            text = self.issue_text(phone, locale=locale)
            self.assertEqual(text, text_of(tmpl, code_of(text)), (locale, text))
        for phone, locale in (("+919812340006", "fr"), ("+919812340007", "h")):
            text = self.issue_text(phone, locale=locale)
            self.assertRegex(text, r"^\d{6} is your login code\. It expires in \d+ minutes\.$", locale)

    def test_the_code_verifies_whatever_the_text(self):
        text = self.issue_text("+919812340011", locale="hi", app_hash=HASH)
        st, _, body = self.otpd.verify("+919812340011", code_of(text))
        self.assertEqual(st, 200, body)

    def test_app_hash_on_its_own_line_and_the_origin_last(self):
        text = self.issue_text("+919812340021", locale="pt", app_hash=HASH)
        code = code_of(text)
        self.assertEqual(text, "%s\n%s" % (text_of(PT, code), HASH))
        text = self.issue_text("+919812340022", auth=OTHER_KEY, app_hash=HASH)
        code = code_of(text)
        lines = text.split("\n")
        self.assertEqual(lines[-2:], [HASH, "@login.example.com #%s" % code], text)
        text = self.issue_text("+919812340023", auth=OTHER_KEY)
        self.assertEqual(text.split("\n")[-1], "@login.example.com #%s" % code_of(text))

    def test_bad_fields_take_nothing(self):
        for fields in ({"app_hash": "FA+9qCX9VS"}, {"app_hash": "FA-9qCX9VSu"}, {"app_hash": ""},
                       {"locale": "pt BR"}, {"locale": ""}, {"locale": "x" * 36}):
            st, _, body = self.otpd.issue("+919812340031", **fields)
            self.assertEqual((st, body["error"]), (400, "invalid_request"), (fields, body))
        # Nothing was taken: the same number is sent to at once, and nothing went out before.
        self.assertEqual(self.fake.messages(), [])
        self.issue_text("+919812340031", app_hash=HASH)


class TooLongTest(OtpdTest):
    """A text that could not fit one message is refused at issue (400, nothing
    taken) and at start (the config), never cut."""
    TEMPLATE = "x" * 300 + " {code}"

    def configure(self, cfg):
        cfg["otp"]["template"] = self.TEMPLATE
        return cfg

    def test_an_origin_too_long_for_the_template_is_refused_by_the_config(self):
        cfg = dict(self.otpd.config)
        cfg["api_keys"] = [dict(k) for k in cfg["api_keys"]]
        cfg["api_keys"][0]["webotp_origin"] = ("a" * 60 + ".") * 3 + "example.com"
        self.otpd.write_config(cfg)
        r = self.run_bin("otpd", ["--check", "-c", self.otpd.conf_path])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("otp.template: renders longer than 479 bytes", r.stderr)

    def test_fits_with_an_app_hash(self):
        st, _, body = self.otpd.issue("+919812340041", app_hash=HASH)
        self.assertEqual(st, 202, body)


class ReloadTest(OtpdTest):
    def configure(self, cfg):
        cfg["otp"]["templates"] = {"hi": HI}
        return cfg

    def test_templates_reload_and_a_removed_locale_falls_back(self):
        st, _, body = self.otpd.issue("+919812340051", locale="hi")
        self.assertEqual(st, 202, body)
        cfg = dict(self.otpd.config)
        cfg["otp"] = dict(cfg["otp"], templates={"pt": PT})
        n = self.otpd.log().count("reloaded ")
        self.otpd.write_config(cfg)
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("reloaded ") > n, what="otpd to reload")
        text = MessagesTest.sent(self, self.otpd.issue("+919812340052", locale="pt")[2])
        self.assertEqual(text, text_of(PT, code_of(text)))
        text = MessagesTest.sent(self, self.otpd.issue("+919812340053", locale="hi")[2])
        self.assertTrue(re.match(r"^\d{6} is your login code", text), text)
