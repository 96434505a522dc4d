"""otpctl stats --by provider,region: every provider call of the ledgers given, grouped by the provider's name
and the destination's region, with what each group's accepted calls became (delivered, verified).

FleetByTest: two providers as a network (alpha for IN, beta for the rest; webhook fakes) and two instances, each
with its own ledger. Instance 0 sends two Indian codes through alpha (one verified) and three US codes through
beta: one after a 500 (a failed attempt, billed, then sent; verified), one sent, one refused with a 400 (failed,
not billed). A third Indian code is accepted by instance 0, whose alpha hangs on it; instance 0 is killed with
the call on the wire (no sends row), and instance 1 takes the message over and sends it through its own alpha
(its sends row is in ledger 1, its messages row in ledger 0); it is verified through instance 1 (the verify
request's row in ledger 1; the verification's row in ledger 0 stays pending). The figures are exact with both
ledgers, and show what each ledger alone cannot join.

DeliveredTest: alpha speaks Kannel, whose delivery reports come back to otpd: of two Indian codes one is
reported delivered and the other failed; one is verified.

UsageTest needs no otpd: --by refuses anything but provider, region or both (EX_USAGE, as every otpctl usage
error), and a file that is no ledger is EX_NOINPUT as without --by.
"""
import json
import os
import shutil
import tempfile
import unittest
import urllib.parse

from fleet import FleetTest
from harness import OtpdTest, code_of, run_bin, sanitizer_reports, wait_until

EX_USAGE, EX_NOINPUT = 64, 66
ALPHA_PRICE, BETA_PRICE = 7, 13
IN1, IN2, IN3 = "+919700000001", "+919700000002", "+919700000003"
US1, US2, US3 = "+12015550101", "+12015550102", "+12015550103"
# The keys of `otpctl stats --format json` without --by: unchanged by --by.
PLAIN_KEYS = ["requests", "accepted", "refusals", "sends", "spend_minor", "messages", "verifications"]


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTPD_", "OTPCTL_", "KANNEL_"))}


def webhook(fake, price):
    return {"type": "webhook", "url": fake.url + "/sms", "prices": {"*": price}}


def network(alpha, beta):
    """The providers and routes: alpha for Indian numbers, beta for every other."""
    return {"providers": {"alpha": alpha, "beta": beta},
            "routes": [{"match": "IN", "providers": ["alpha"]}, {"match": "*", "providers": ["beta"]}]}


def cost(cfg):
    cfg["cost"] = {"currency": "EUR", "prices": {"*": 100}, "caps": [{"window": "1h", "max": 1000000}]}
    return cfg


def group(attempts, sent, failed, spend, delivered, verified, **keys):
    """A group as --format json prints it (the shares of sent aside: compared apart, as floats)."""
    return dict(keys, attempts=attempts, sent=sent, failed=failed, spend_minor=spend, delivered=delivered,
                verified=verified)


class ByBase:
    """What the test classes share: otpctl and its JSON."""

    def otpctl(self, *args):
        return run_bin(self.tmp, "otpctl", list(args), clean_env())

    def groups(self, by, *dbs, extra=()):
        """otpctl stats --by by on dbs as JSON: the groups, each share checked against its figures and left out."""
        args = ["stats", "--by", by, "--format", "json"] + list(extra)
        for db in dbs:
            args += ["--db", db]
        r = self.otpctl(*args)
        self.assertEqual((r.returncode, r.stderr), (0, ""), args)
        out = json.loads(r.stdout)
        self.assertEqual(out["by"], [k for k in ("provider", "region") if k in by.split(",")])  # in this order
        got = []
        for g in out["groups"]:
            g = dict(g)
            for share, part in (("delivered_per_sent", "delivered"), ("verified_per_sent", "verified")):
                if g["sent"]:
                    self.assertAlmostEqual(g.pop(share), g[part] / g["sent"], msg=(share, g))
                else:
                    self.assertIsNone(g.pop(share), g)
            got.append(g)
        return got


class FleetByTest(ByBase, FleetTest):
    n = 0
    providers = 3  # 0: instance 0's alpha, 1: beta (both), 2: instance 1's alpha
    pacer = {"rate": 200, "capacity": 100, "max_inflight": 4, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s", "takeover": "1s"}

    def configure(self, cfg, i):
        cfg.pop("provider")
        cfg.update(network(webhook(self.fakes[0 if i == 0 else 2], ALPHA_PRICE), webhook(self.fakes[1], BETA_PRICE)))
        if i == 0:
            cfg["pacer"]["timeout"] = "20s"  # its hung call stays on the wire until the kill
        return cost(cfg)

    def ledger(self, i):
        return self.fleet[i].config["ledger"]["path"]

    def sends(self, i):
        return self.fleet[i].rows("SELECT message_id, provider, outcome, cost_minor FROM sends ORDER BY id")

    def code(self, fake, phone):
        texts = [m["text"] for m in self.fakes[fake].messages() if m["to"] == phone]
        self.assertTrue(texts, "no message to %s at fake %d" % (phone, fake))
        return code_of(texts[-1])

    def issue(self, i, phone, calls):
        """Issues phone on instance i and waits for ledger i to hold calls sends rows in all."""
        st, _, body = self.fleet[i].issue(phone)
        self.assertEqual(st, 202, body)
        wait_until(lambda: len(self.sends(i)) == calls, 10, what="%d sends rows in ledger %d" % (calls, i))
        return body["id"]

    def verify(self, i, phone, code):
        st, _, body = self.fleet[i].verify(phone, code)
        self.assertEqual(st, 200, body)

    def traffic(self):
        self.fleet.start(1, **self.overrides())
        self.issue(0, IN1, 1)
        self.verify(0, IN1, self.code(0, IN1))
        self.issue(0, IN2, 2)
        self.fakes[1].control(statuses=[500])  # beta's next answer: a 5xx, billed, retried
        self.issue(0, US1, 4)
        self.verify(0, US1, self.code(1, US1))
        self.issue(0, US2, 5)
        self.fakes[1].control(rules=[{"to_prefix": US3, "status": 400}])  # refused: failed, never billed
        self.issue(0, US3, 6)
        self.assertEqual([(s["provider"], s["outcome"], s["cost_minor"] or 0) for s in self.sends(0)],
                         [("alpha", "sent", ALPHA_PRICE)] * 2 + [("beta", "transient", BETA_PRICE)] +
                         [("beta", "sent", BETA_PRICE)] * 2 + [("beta", "permanent", 0)])
        # IN3: accepted by instance 0, its call hung on 0's wire when 0 dies; instance 1 takes it over.
        self.fakes[0].control(hang=True)
        st, _, body = self.fleet[0].issue(IN3)
        self.assertEqual(st, 202, body)
        wait_until(lambda: any(m["to"] == IN3 for m in self.fakes[0].messages()), 10, what="IN3 on alpha's wire")
        self.fleet.kill(0)
        self.fleet.start(1, **self.overrides())
        wait_until(lambda: len(self.sends(1)) == 1, 20, what="instance 1 to take IN3 over and send it")
        self.assertEqual(self.sends(1), [{"message_id": body["id"], "provider": "alpha", "outcome": "sent",
                                          "cost_minor": ALPHA_PRICE}])
        self.verify(1, IN3, self.code(2, IN3))
        self.assertEqual(self.fleet.stop(1), 0)
        # The join is needed: ledger 0 holds IN3's message and its pending verification, ledger 1 its call and
        # the verify request that verified it.
        self.assertEqual(len(self.fleet[0].rows("SELECT 1 FROM sends WHERE message_id = ?", body["id"])), 0)
        self.assertEqual(self.fleet[0].rows("SELECT v.status FROM verifications v JOIN messages m "
                                            "ON m.verification_id = v.id WHERE m.id = ?", body["id"]),
                         [{"status": "pending"}])
        self.assertEqual(len(self.fleet[1].rows("SELECT 1 FROM messages")), 0)

    def test_by_provider_and_region_across_ledgers(self):
        self.traffic()
        a, b = self.ledger(0), self.ledger(1)
        alpha_in = group(3, 3, 0, 3 * ALPHA_PRICE, 0, 2, provider="alpha", region="IN")
        beta_us = group(4, 2, 2, 3 * BETA_PRICE, 0, 1, provider="beta", region="US")
        self.assertEqual(self.groups("provider,region", a, b), [alpha_in, beta_us])
        self.assertEqual(self.groups("region,provider", b, a), [alpha_in, beta_us])  # any order of keys and files
        self.assertEqual(self.groups("provider", a, b), [
            group(3, 3, 0, 3 * ALPHA_PRICE, 0, 2, provider="alpha"), group(4, 2, 2, 3 * BETA_PRICE, 0, 1, provider="beta")])
        self.assertEqual(self.groups("region", a, b), [
            group(3, 3, 0, 3 * ALPHA_PRICE, 0, 2, region="IN"), group(4, 2, 2, 3 * BETA_PRICE, 0, 1, region="US")])
        # One ledger alone: instance 0's calls; instance 1's call of a message it holds no row of (no region, no
        # verification to join).
        self.assertEqual(self.groups("provider,region", a), [
            group(2, 2, 0, 2 * ALPHA_PRICE, 0, 1, provider="alpha", region="IN"), beta_us])
        self.assertEqual(self.groups("provider,region", b), [
            group(1, 1, 0, ALPHA_PRICE, 0, 0, provider="alpha", region=None)])
        # --until before everything: no call, no group.
        self.assertEqual(self.groups("provider,region", a, b, extra=["--until", "1000"]), [])

        r = self.otpctl("stats", "--by", "provider,region", "--db", a, "--db", b)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "ledgers: 2")
        self.assertEqual(lines[1].split(), ["PROVIDER", "REGION", "ATTEMPTS", "SENT", "FAILED", "SPEND", "DELIVERED",
                                            "VERIFIED", "DELIVERED/SENT", "VERIFIED/SENT"])
        self.assertEqual([x.split() for x in lines[2:]], [
            ["alpha", "IN", "3", "3", "0", str(3 * ALPHA_PRICE), "0", "2", "0.0%", "66.7%"],
            ["beta", "US", "4", "2", "2", str(3 * BETA_PRICE), "0", "1", "0.0%", "50.0%"]])
        r = self.otpctl("stats", "--by", "provider,region", "--db", b)
        self.assertEqual(r.stdout.splitlines()[2].split(), ["alpha", "none", "1", "1", "0", str(ALPHA_PRICE), "0",
                                                            "0", "0.0%", "0.0%"])

        # Without --by, stats is as it was: the same keys, the same sums.
        r = self.otpctl("stats", "--db", a, "--db", b, "--format", "json")
        self.assertEqual(r.returncode, 0, r.stderr)
        s = json.loads(r.stdout)
        self.assertEqual(list(s), PLAIN_KEYS)
        self.assertEqual(s["sends"], {"calls": 7, "sent": 5, "transient": 1, "permanent": 1})
        self.assertEqual(s["spend_minor"], 3 * ALPHA_PRICE + 3 * BETA_PRICE)


class DeliveredTest(ByBase, OtpdTest):
    env = {"KANNEL_USER": "kuser", "KANNEL_PASS": "kpass-secret"}

    def configure(self, cfg):
        cfg.pop("provider")
        kannel = {"type": "kannel", "url": self.fake.url + "/cgi-bin/sendsms", "from": "OTPD",
                  "username_env": "KANNEL_USER", "password_env": "KANNEL_PASS",
                  "callback_url": "http://" + cfg["listen"], "prices": {"*": ALPHA_PRICE}}
        cfg.update(network(kannel, webhook(self.fake, BETA_PRICE)))
        return cost(cfg)

    def sent(self, phone):
        """Issues phone; its Kannel request once its message is sent."""
        st, _, body = self.otpd.issue(phone)
        self.assertEqual(st, 202, body)
        wait_until(lambda: self.otpd.rows("SELECT state FROM messages WHERE id = ?", body["id"])[0]["state"] == "sent",
                   10, what="%s sent" % phone)
        return [r for r in self.fake.requests() if r.get("provider") == "kannel" and r["args"]["to"] == phone][0]

    def report(self, req, dlr_type):
        """Kannel's delivery report of req's message, as Kannel calls the dlr-url it was given."""
        url = urllib.parse.urlsplit(req["args"]["dlr-url"].replace("%d", str(dlr_type)))
        self.assertEqual(self.otpd.call("GET", url.path + "?" + url.query, auth=None)[0], 200)

    def test_delivered_and_verified_shares(self):
        one, two = self.sent(IN1), self.sent(IN2)
        self.report(one, 1)  # delivered
        self.report(two, 2)  # failed
        st, _, body = self.otpd.verify(IN2, code_of(two["args"]["text"]))
        self.assertEqual(st, 200, body)
        self.assertEqual(self.otpd.stop(), 0)
        db = self.otpd.config["ledger"]["path"]
        got = self.groups("provider,region", db)
        self.assertEqual(got, [group(2, 2, 0, 2 * ALPHA_PRICE, 1, 1, provider="alpha", region="IN")])
        r = self.otpctl("stats", "--by", "provider", "--db", db)
        self.assertEqual(r.stdout.splitlines()[2].split(), ["alpha", "2", "2", "0", str(2 * ALPHA_PRICE), "1", "1",
                                                            "50.0%", "50.0%"])


class UsageTest(ByBase, unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-it-statsby-")

    def tearDown(self):
        found = sanitizer_reports(self.tmp)
        if found:
            self.fail("a process reported a problem (files kept in %s):\n%s" % (self.tmp, "\n".join(found)))
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_bad_by(self):
        for by in ("caller", "", "provider,", ",region", "provider,provider", "provider,region,provider",
                   "Provider", "provider region"):
            r = self.otpctl("stats", "--db", "x.db", "--by", by)
            self.assertEqual((r.returncode, r.stdout), (EX_USAGE, ""), by)
            self.assertEqual(r.stderr.splitlines()[0],
                             "otpctl stats: --by must be provider, region or provider,region, not %s" % by)
            self.assertTrue(r.stderr.splitlines()[1].startswith("usage: otpctl stats "), r.stderr)
        self.assertEqual(self.otpctl("stats", "--by", "provider").returncode, EX_USAGE)  # --db is required
        self.assertEqual(self.otpctl("stats", "--db", "x.db", "--by", "region", "--by", "region").returncode,
                         EX_USAGE)

    def test_help_names_by(self):
        r = self.otpctl("stats", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("  --by KEYS", r.stdout)

    def test_no_ledger(self):
        path = os.path.join(self.tmp, "none.db")
        r = self.otpctl("stats", "--by", "provider,region", "--db", path)
        self.assertEqual(r.returncode, EX_NOINPUT, r.stderr)
        self.assertIn(path, r.stderr)
        with open(os.path.join(self.tmp, "text.db"), "w") as f:
            f.write("not a ledger\n")
        r = self.otpctl("stats", "--by", "provider", "--db", os.path.join(self.tmp, "text.db"))
        self.assertEqual(r.returncode, EX_NOINPUT, r.stderr)


if __name__ == "__main__":
    unittest.main()
