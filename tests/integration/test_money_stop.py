"""reserve.lua's unuse (mode 3): a stopping instance gives back the use mark
of a message whose call never reached curl, once, and only while that mark
is the latest word on the message. Real redis-server."""
import os

from harness import ROOT
from test_money import PRICE, MoneyTest


class UnuseScriptTest(MoneyTest):
    def test_unuse_gives_a_mark_back_once_and_only_the_latest(self):
        """reserve.lua's unuse (mode 3) itself, run by the real Redis."""
        with open(os.path.join(ROOT, "src", "limits", "reserve.lua")) as f:
            script = f.read()
        window = 3600000  # MoneyTest's cap
        idx = int(self.redis.cmd("TIME")[0]) * 1000 // window
        self.redis.cmd("HSET", "otp:cost", "c%d" % window, "%d:%d" % (idx, 3 * PRICE))

        def unuse(mid, need):
            return self.redis.cmd("EVAL", script, 2, "otp:cost", "otp:msg:" + mid, need, PRICE, 5, 3, 1,
                                  "c%d" % window, window, 100 * PRICE)[0]

        def put(mid, **fields):
            self.redis.cmd("DEL", "otp:msg:" + mid)
            self.redis.cmd("HSET", "otp:msg:" + mid, *[x for kv in sorted(fields.items()) for x in kv])

        put("m1", r=2, u=2, s="queued", t=7)
        self.assertEqual(unuse("m1", 2), 1)
        self.assertEqual(self.money("m1"), {"r": "2", "u": "1", "s": "queued", "t": "7"})
        self.assertEqual(unuse("m1", 2), 0)  # once: a second run changes nothing
        self.assertEqual(self.money("m1"), {"r": "2", "u": "1", "s": "queued", "t": "7"})
        # Armed again since (an instance's own mark for a call of its own).
        put("m2", r=1, u=1, s="sending")
        self.assertEqual(unuse("m2", 1), 0)
        self.assertEqual(self.money("m2")["u"], "1")
        # A later reservation taken since (a restart reserved past the mark).
        put("m3", r=2, u=1, s="queued")
        self.assertEqual(unuse("m3", 1), 0)
        self.assertEqual(self.money("m3")["u"], "1")
        # Marked for another reservation, or never marked.
        put("m4", r=3, u=1, s="queued")
        self.assertEqual(unuse("m4", 3), 0)
        self.assertEqual(self.money("m4")["u"], "1")
        # Given back already (refund.lua): no mark to give back.
        put("m5", r=1, u=1, f=1, s="queued")
        self.assertEqual(unuse("m5", 1), 0)
        self.assertEqual(self.money("m5")["u"], "1")
        # The caps are never touched.
        self.assertEqual(self.reserved(), 3 * PRICE)
