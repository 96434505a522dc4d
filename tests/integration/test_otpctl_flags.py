"""otpctl's flags: one parser (cmd/otpctl/flags.c) for every command, so
every command reads its flags, prints its help and refuses bad flags the same
way. No otpd is needed: nothing here gets past the flags but `check` on a
file that is not there (EX_CONFIG naming the path it was given).

HelpTest: --help, -h and `otpctl help COMMAND` on otpctl and on every
command print the usage made from the command's table on stdout and exit 0.
UsageErrorTest: an unknown flag, a missing value, a flag given twice, a
required flag missing, a bad number, an operand too many: each says
"otpctl COMMAND: what" on stderr, then the usage line, and exits 64
(EX_USAGE) with nothing on stdout.
ValueTest: a value is taken as --name VALUE, --name=VALUE, -n VALUE and
-nVALUE, even when it starts with '-', and "--" ends the flags.
"""
import os
import shutil
import tempfile
import unittest

from harness import run_bin, sanitizer_reports

EX_USAGE, EX_CONFIG = 64, 78

# Every command and the flags its help must list.
COMMANDS = {
    "check": ["-c, --config FILE"],
    "audit": ["-c, --config FILE", "--db FILE", "-t, --table TABLE", "-n, --rows ROWS", "-p, --phone PHONE"],
    "ledger": ["--db FILE", "--phone E164", "--since T", "--until T", "--format F"],
    "verify": ["--db FILE"],
    "stats": ["--db FILE", "--since T", "--until T", "--format F"],
    "simulate": ["--db LEDGER", "-c, --config NEW.json", "--format F", "--top N", "--reveal-phones"],
    "block add": ["--phone E164", "--phone-prefix +DIGITS", "--region CC", "--device ID", "--client-ip IP[/BITS]",
                  "--api-key NAME", "--expires-in D", "--note TEXT", "-s, --server URL", "--timeout S",
                  "--cacert FILE"],
    "block list": ["--format F", "-s, --server URL", "--timeout S", "--cacert FILE"],
    "block rm": ["-s, --server URL", "--timeout S", "--cacert FILE"],
    "override add": ["--rule R", "--key KIND=VALUE", "--limit N", "--burst N", "--expires-in D", "--note TEXT",
                     "--cacert FILE"],
    "override list": ["--format F", "--cacert FILE"],
    "override rm": ["--cacert FILE"],
    "unlock": ["--phone E164", "--api-key NAME", "--note TEXT", "--cacert FILE"],
}


def clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTPD_", "OTPCTL_"))}


class FlagsBase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="otpd-it-flags-")

    def tearDown(self):
        found = sanitizer_reports(self.tmp)
        if found:
            self.fail("a process reported a problem (files kept in %s):\n%s" % (self.tmp, "\n".join(found)))
        shutil.rmtree(self.tmp, ignore_errors=True)

    def otpctl(self, *args):
        return run_bin(self.tmp, "otpctl", list(args), clean_env())


class HelpTest(FlagsBase):
    def test_every_command_has_help(self):
        for cmd, flags in COMMANDS.items():
            words = cmd.split()
            outs = []
            for args in (words + ["--help"], words + ["-h"], ["help"] + words):
                r = self.otpctl(*args)
                self.assertEqual((r.returncode, r.stderr), (0, ""), args)
                self.assertTrue(r.stdout.startswith("usage: otpctl %s " % cmd) or
                                r.stdout == "usage: otpctl %s\n" % cmd, (args, r.stdout))
                outs.append(r.stdout)
            self.assertEqual(outs[0], outs[1], cmd)
            self.assertEqual(outs[0], outs[2], cmd)
            for flag in flags + ["-h, --help"]:
                self.assertIn("  " + flag, outs[0], cmd)

    def test_otpctl_itself(self):
        for args in (["--help"], ["-h"], ["help"]):
            r = self.otpctl(*args)
            self.assertEqual((r.returncode, r.stderr), (0, ""), args)
            self.assertTrue(r.stdout.startswith("usage: otpctl "), r.stdout)
            for cmd in COMMANDS:
                self.assertIn("\n  otpctl %s " % cmd, r.stdout, cmd)
            self.assertIn("--cacert FILE", r.stdout)
        # With no command at all: the same help, on stderr, and EX_USAGE.
        r = self.otpctl()
        self.assertEqual((r.returncode, r.stdout), (EX_USAGE, ""))
        self.assertIn("otpctl: a command is needed", r.stderr)
        self.assertIn("  otpctl block add ", r.stderr)

    def test_help_among_other_flags(self):
        """-h wins over what comes before it (nothing is read or sent), but
        not over a flag that takes it as its value."""
        r = self.otpctl("verify", "--db", os.path.join(self.tmp, "none.db"), "-h")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertTrue(r.stdout.startswith("usage: otpctl verify --db FILE [options]\n"), r.stdout)
        r = self.otpctl("check", "-c", "--help")
        self.assertEqual(r.returncode, EX_CONFIG, r.stderr)

    def test_a_noun_alone_lists_its_commands(self):
        for args in (["block", "--help"], ["help", "override"]):
            r = self.otpctl(*args)
            self.assertEqual((r.returncode, r.stderr), (0, ""), args)
            noun = [a for a in args if not a.startswith("-") and a != "help"][0]
            for verb in ("add", "list", "rm"):
                self.assertIn("  otpctl %s %s " % (noun, verb), r.stdout)


class UsageErrorTest(FlagsBase):
    def expect(self, args, first):
        r = self.otpctl(*args)
        self.assertEqual((r.returncode, r.stdout), (EX_USAGE, ""), (args, r.stderr))
        lines = r.stderr.splitlines()
        self.assertEqual(lines[0], first, args)
        self.assertTrue(lines[1].startswith("usage:"), (args, r.stderr))

    def test_each_kind_of_mistake(self):
        cases = [
            (["block", "add", "--x"], "otpctl block add: unknown flag --x"),
            (["block", "add", "--x=1"], "otpctl block add: unknown flag --x"),
            (["ledger", "-q"], "otpctl ledger: unknown flag -q"),
            (["block", "add", "--phone"], "otpctl block add: --phone needs a value"),
            (["verify", "--db", "a", "--db", "b"], "otpctl verify: --db given twice"),
            (["audit", "-c", "a", "--config", "b"], "otpctl audit: --config given twice"),
            (["simulate", "--db", "a", "-c", "b", "--reveal-phones", "--reveal-phones"],
             "otpctl simulate: --reveal-phones given twice"),
            (["verify"], "otpctl verify: --db is required"),
            (["simulate", "--db", "a"], "otpctl simulate: --config is required"),
            (["override", "add", "--rule", "r", "--limit", "1", "--expires-in", "1h"],
             "otpctl override add: --key is required"),
            (["simulate", "--db", "a", "-c", "b", "--reveal-phones=yes"],
             "otpctl simulate: --reveal-phones takes no value"),
            (["audit", "--db", "x", "-n", "0"], "otpctl audit: -n 0: a whole number from 1 to 100000 is needed"),
            (["audit", "--db", "x", "--rows=5x"], "otpctl audit: --rows 5x: a whole number is needed"),
            (["override", "add", "--rule", "r", "--key", "a=b", "--limit", "99999999999999999999",
              "--expires-in", "1h"], "otpctl override add: --limit 99999999999999999999: a whole number is needed"),
            (["--timeout", "601", "block", "list"], "otpctl: --timeout 601: a whole number from 1 to 600 is needed"),
            (["block", "rm", "a", "b"], "otpctl block rm: unexpected argument b"),
            (["verify", "--db", "a", "extra"], "otpctl verify: unexpected argument extra"),
            (["nonsense"], "otpctl: unknown command nonsense"),
            (["-s", "http://127.0.0.1:1", "ledger", "--db", "a"],
             "otpctl: -s, --timeout and --cacert go with block, override and unlock, not with ledger"),
            (["-s", "http://127.0.0.1:1", "block", "list", "--server", "http://127.0.0.1:2"],
             "otpctl block list: -s given twice (before the command and after it)"),
            (["audit"], "otpctl audit: exactly one of -c and --db is needed"),
            (["stats", "--db", "a", "--format", "xml"], "otpctl stats: --format must be table or json, not xml"),
        ]
        for args, first in cases:
            self.expect(args, first)


class ValueTest(FlagsBase):
    def check(self, args, path):
        """`otpctl check` on a path that is not there: EX_CONFIG naming the
        path, which shows the value reached its place."""
        r = self.otpctl(*args)
        self.assertEqual(r.returncode, EX_CONFIG, (args, r.stderr))
        self.assertTrue(r.stderr.startswith(path + ": "), (args, r.stderr))

    def test_every_way_to_give_a_value(self):
        path = os.path.join(self.tmp, "none.json")
        for args in (["-c", path], ["-c" + path], ["--config", path], ["--config=" + path]):
            self.check(["check"] + args, path)
        # A value may start with '-', and may hold '='.
        self.check(["check", "-c", "-odd=name.json"], "-odd=name.json")
        self.check(["check", "--config=--x"], "--x")

    def test_double_dash_ends_the_flags(self):
        r = self.otpctl("verify", "--", "--db")
        self.assertEqual(r.returncode, EX_USAGE)
        self.assertTrue(r.stderr.startswith("otpctl verify: unexpected argument --db\n"), r.stderr)


if __name__ == "__main__":
    unittest.main()
