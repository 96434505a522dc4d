"""What a send attempt costs (issue 8, docs/architecture.md "Money"): every attempt the
provider could bill is reserved against the caps and counted in
otpd_spend_minor_total; one it never reached gives its reservation back,
exactly once, even across a SIGKILL; a 429 pauses every send; a restart
keeps the spacing of the sends before it; a code with too little life left
is never sent. Real redis-server, the fake provider, bin/otpd."""
# It measures time or rates: tests/integration/run.py runs it alone, after the parallel workers.
SERIAL = True
import concurrent.futures
import json
import os
import re
import signal
import socket
import sqlite3
import threading
import time

from harness import ROOT, OtpdTest, free_port, wait_until

PRICE = 20  # "+91"


def phones(n, start=0):
    return ["+9198%08d" % (start + i) for i in range(n)]


def metric(text, name, **labels):
    """The value of one sample of /metrics, or None."""
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+)(?:\{([^}]*)\})? (\d+)$", line)
        if m and m.group(1) == name:
            got = ",".join(sorted((m.group(2) or "").split(","))) if m.group(2) else ""
            if got == want:
                return int(m.group(3))
    return None


class ResetServer:
    """A provider that reads the whole request, then resets the connection:
    the request left, so the attempt may have been billed."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                m = re.search(rb"content-length: *(\d+)", data, re.I)
                if m:
                    want = data.index(b"\r\n\r\n") + 4 + int(m.group(1))
                    while len(data) < want:
                        chunk = c.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                # A connection that carried no request (a client's own re-send, aborted before it wrote:
                # xfer.c) reached nobody's bill; one that carried a request did.
                if data:
                    self.count += 1
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    def close(self):
        self.sock.close()


class ReuseResetServer:
    """A provider that keeps each connection open: the first request on a connection it answers 200, the second it
    reads whole and then resets. The request left, and a client that sends it again on a fresh connection (curl does
    so by itself for a reused connection that died before any answer) puts a second copy on the provider's wire.
    log: (connection, request on it, answered) per request read."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = 0
        self.log = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @property
    def count(self):
        with self.lock:
            return len(self.log)

    @staticmethod
    def read_request(c):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(65536)
            if not chunk:
                return None
            data += chunk
        m = re.search(rb"content-length: *(\d+)", data, re.I)
        want = data.index(b"\r\n\r\n") + 4 + (int(m.group(1)) if m else 0)
        while len(data) < want:
            chunk = c.recv(65536)
            if not chunk:
                return None
            data += chunk
        return data

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
                n = self.conns
            threading.Thread(target=self.one, args=(c, n), daemon=True).start()

    def one(self, c, conn):
        with c:
            for n in range(2):
                try:
                    if self.read_request(c) is None:
                        return
                except OSError:
                    return
                with self.lock:
                    self.log.append((conn, n, n == 0))
                if n == 1:
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    return
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")

    def close(self):
        self.sock.close()


class MoneyTest(OtpdTest):
    pacer = {"rate": 20, "capacity": 100, "max_inflight": 8, "retry": {"max": 2, "base": "100ms"},
             "timeout": "2s"}
    caps = [{"window": "1h", "max": 100000}]
    ttl = "5m"
    provider_url = None  # None: the fake provider

    def configure(self, cfg):
        cfg["pacer"] = dict(self.pacer)
        cfg["otp"]["ttl"] = self.ttl
        cfg["cost"] = {"currency": "INR", "prices": {"+91": PRICE, "*": 500}, "caps": [dict(c) for c in self.caps]}
        if self.provider_url is not None:
            cfg["provider"] = {"type": "webhook", "url": self.provider_url()}
        return cfg

    # Observations.
    def msg(self, mid):
        rows = self.otpd.rows("SELECT * FROM messages WHERE id = ?", mid)
        return rows[0] if rows else None

    def state(self, mid):
        m = self.msg(mid)
        return m["state"] if m else None

    def wait_state(self, mid, *states, timeout=10):
        wait_until(lambda: self.state(mid) in states, timeout, what="message %s in %s" % (mid, states))
        return self.state(mid)

    def sends(self, mid):
        return self.otpd.rows("SELECT * FROM sends WHERE message_id = ? ORDER BY id", mid)

    def reserved(self, cap=0):
        """The sum reserved in the current window of caps[cap] (otp:cost's
        field c<window_ms>: cap state is named by its window)."""
        window_ms = {"1h": 3600000, "1d": 86400000}[self.caps[cap]["window"]]
        v = self.redis.cmd("HGET", "otp:cost", "c%d" % window_ms)
        return int(v.split(":")[1]) if v else 0

    def money(self, mid):
        """The message's money hash (reserve.lua, refund.lua)."""
        flat = self.redis.cmd("HGETALL", "otp:msg:" + mid) or []
        return dict(zip(flat[::2], flat[1::2]))

    def metrics(self):
        return self.otpd.call("GET", "/metrics", auth=None)[2]

    def spend(self, outcome):
        """otpd_spend_minor_total: each attempt counted once, when its request was written."""
        return metric(self.metrics(), "otpd_spend_minor_total", currency="INR", outcome=outcome)

    def settled(self, outcome):
        """otpd_spend_settled_minor_total: the same attempts once their verdict is in."""
        return metric(self.metrics(), "otpd_spend_settled_minor_total", currency="INR", outcome=outcome)

    def issue_ok(self, phone):
        st, _, body = self.otpd.issue(phone)
        self.assertEqual(st, 202, body)
        return body["id"]


class SlowProviderTest(MoneyTest):
    """The issue's opening case: a provider slower than pacer.timeout."""
    pacer = dict(MoneyTest.pacer, timeout="300ms", retry={"max": 5, "base": "100ms"})
    caps = [{"window": "1h", "max": 3 * PRICE}]

    def test_attempts_times_price_within_the_cap_and_all_counted(self):
        self.fake.control(latency_ms=3000)
        mid = self.issue_ok("+919800000001")
        self.assertEqual(self.wait_state(mid, "failed", "sent", timeout=15), "failed")
        attempts = len(self.fake.requests())
        sends = self.sends(mid)
        spend = self.spend("unknown")
        print("\nslow provider: %d attempts reached the provider, %d sends rows, cost %d, cap %d, "
              "spend{unknown} %d, spend{accepted} %d, reserved %d"
              % (attempts, len(sends), attempts * PRICE, 3 * PRICE, spend, self.spend("accepted"), self.reserved()))
        self.assertLessEqual(attempts * PRICE, 3 * PRICE)
        self.assertEqual(attempts, 3)  # the issue's reservation and two retries'; the fourth had no room
        self.assertEqual([(s["outcome"], s["http_status"], s["cost_minor"]) for s in sends],
                         [("transient", None, PRICE)] * 3)
        self.assertEqual(spend, attempts * PRICE)  # every attempt the provider could bill
        self.assertEqual(self.spend("accepted"), 0)
        self.assertEqual(self.reserved(), 3 * PRICE)  # nothing that may have been billed was given back
        self.assertTrue(self.msg(mid)["detail"].startswith("cost_cap: no room in the 3600s cap"),
                        self.msg(mid)["detail"])
        self.assertEqual(self.otpd.issue("+919800000002")[2]["error"], "cost_cap")


class RefusedConnectionTest(MoneyTest):
    """A provider nobody listens on: never reached, so never billed."""
    closed_port = free_port()
    provider_url = staticmethod(lambda: "http://127.0.0.1:%d/sms" % RefusedConnectionTest.closed_port)
    pacer = dict(MoneyTest.pacer, retry={"max": 1, "base": "100ms"})
    caps = [{"window": "1d", "max": PRICE}]

    def test_refunded_exactly_once_across_sigkill(self):
        a = self.issue_ok("+919800000001")
        self.assertEqual(self.reserved(), PRICE)
        # The ledger is held: the writer blocks after Redis was refunded.
        lock = sqlite3.connect(self.otpd.config["ledger"]["path"], timeout=5, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            wait_until(lambda: self.money(a).get("f") == "1", 10, what="the refund in Redis")
            self.assertEqual(self.reserved(), 0)
            self.otpd.kill(signal.SIGKILL)
            self.otpd.proc.wait()
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        self.assertIn(self.state(a), ("queued", "sending"))  # its ledger row never landed
        # The queue and the message's end live in Redis: it ended there
        # before its refund, so the restart neither sends it again nor
        # reserves for it, whatever this ledger's stale row says.
        self.restart()
        st, _, p = self.otpd.call("GET", "/v1/otp/" + a)
        self.assertEqual((st, p.get("status")), (200, "failed"), p)
        self.assertEqual(self.money(a).get("r", "1"), "1")  # no new reservation
        self.assertEqual(self.money(a).get("f"), "1")  # given back once, before the kill
        self.assertEqual(self.reserved(), 0)
        text = self.metrics()
        self.assertEqual(metric(text, "otpd_cost_refunds_total", result="refunded"), 0)  # nothing twice
        self.assertEqual(metric(text, "otpd_cost_refunds_total", result="anomaly"), 0)
        self.assertEqual(self.spend("unknown"), 0)
        self.issue_ok("+919800000003")  # the cap has room for one again
        self.assertEqual(self.reserved(), PRICE)

    def test_refund_script_marks_and_reports_instead_of_clamping(self):
        """refund.lua itself, run by the real Redis: a second refund of one
        reservation does nothing, and a window holding less than the price
        is reported and left alone, never clamped to 0 in silence."""
        with open(os.path.join(ROOT, "src", "limits", "refund.lua")) as f:
            script = f.read()
        now_ms = int(self.redis.cmd("TIME")[0]) * 1000
        window = 86400000
        idx = now_ms // window
        self.redis.cmd("HSET", "otp:cost", "c%d" % window, "%d:%d" % (idx, 3 * PRICE))
        args = [PRICE, now_ms, str(window)]
        for mid in ("m1", "m2", "m3"):  # ended by this consumer (queue.lua's end): its to give back
            self.redis.cmd("HSET", "otp:msg:" + mid, "o", "otpd0")
        self.assertEqual(self.redis.cmd("EVAL", script, 2, "otp:cost", "otp:msg:m1", *args, 1, "otpd0"), [1, 0])
        self.assertEqual(self.redis.cmd("HGET", "otp:cost", "c%d" % window), "%d:%d" % (idx, 2 * PRICE))
        self.assertEqual(self.redis.cmd("EVAL", script, 2, "otp:cost", "otp:msg:m1", *args, 1, "otpd0"), [0, 0])
        self.assertEqual(self.redis.cmd("HGET", "otp:cost", "c%d" % window), "%d:%d" % (idx, 2 * PRICE))
        self.assertGreater(self.redis.cmd("PTTL", "otp:msg:m1"), 86000000)  # the mark lives a day
        # idx 0: the latest reservation, here reserve.lua's second one.
        self.redis.cmd("HSET", "otp:msg:m3", "r", 2, "p", PRICE, "t", now_ms, "k", str(window))
        self.assertEqual(self.redis.cmd("EVAL", script, 2, "otp:cost", "otp:msg:m3", *args, 0, "otpd0"), [1, 0])
        self.assertEqual(self.redis.cmd("HGET", "otp:msg:m3", "f"), "2")
        self.assertEqual(self.redis.cmd("HGET", "otp:cost", "c%d" % window), "%d:%d" % (idx, PRICE))
        # Less in the window than the price: reported, and the window kept.
        self.redis.cmd("HSET", "otp:cost", "c%d" % window, "%d:%d" % (idx, PRICE // 2))
        self.assertEqual(self.redis.cmd("EVAL", script, 2, "otp:cost", "otp:msg:m2", *args, 1, "otpd0"), [1, 1])
        self.assertEqual(self.redis.cmd("HGET", "otp:cost", "c%d" % window), "%d:%d" % (idx, PRICE // 2))


    def test_reserve_script_takes_again_after_a_refund(self):
        """reserve.lua itself: a held reservation is not taken twice, and
        one already given back is never counted as held."""
        with open(os.path.join(ROOT, "src", "limits", "reserve.lua")) as f:
            script = f.read()
        window, cap = 86400000, 10 * PRICE
        idx = int(self.redis.cmd("TIME")[0]) * 1000 // window

        def reserve(mid, need):
            return self.redis.cmd("EVAL", script, 2, "otp:cost", "otp:msg:" + mid, need, PRICE, 5, 0, 1, "c%d" % window,
                                  window, cap)

        self.redis.cmd("HSET", "otp:cost", "c%d" % window, "%d:%d" % (idx, PRICE))  # m1's issue reservation
        self.assertEqual(reserve("m1", 1)[:2], [1, 1])  # held: nothing taken
        self.assertEqual(self.reserved(), PRICE)
        self.redis.cmd("HSET", "otp:msg:m1", "f", 1)  # given back (by refund.lua)
        self.assertEqual(reserve("m1", 1)[:2], [1, 2])  # so a new one
        self.assertEqual(self.reserved(), 2 * PRICE)
        self.assertEqual(reserve("m1", 2)[:2], [1, 2])  # asked again: still the one
        self.assertEqual(reserve("m1", 3)[:2], [1, 3])  # after a billed attempt: the next
        self.assertEqual(self.reserved(), 3 * PRICE)
        self.redis.cmd("HSET", "otp:cost", "c%d" % window, "%d:%d" % (idx, cap))
        got = reserve("m1", 4)
        self.assertEqual((got[0], got[1], got[4]), (0, 3, 0))  # the cap is full: refused, nothing written
        self.assertEqual(self.reserved(), cap)
        self.assertEqual(self.money("m1")["r"], "3")


class Pause429Test(MoneyTest):
    def test_a_429_pauses_every_send(self):
        self.fake.control(statuses=[429], retry_after=1)
        first = self.issue_ok("+919800000001")
        wait_until(lambda: self.fake.requests(), 5, what="the 429")
        t429 = self.fake.requests()[0]["t_us"] / 1e6
        others = [self.issue_ok(p) for p in phones(3, 100)]
        for mid in [first] + others:
            self.wait_state(mid, "sent", timeout=10)
        reqs = self.fake.requests()
        self.assertEqual(reqs[0]["status"], 429)
        later = [r["t_us"] / 1e6 - t429 for r in reqs[1:]]
        self.assertEqual(len(later), 4)
        self.assertGreaterEqual(min(later), 1.0, later)  # nobody went out during the Retry-After
        self.assertEqual(metric(self.metrics(), "otpd_pacer_paused_total"), 1)
        # Never reached: the first message kept its one reservation.
        self.assertEqual(self.reserved(), 4 * PRICE)
        self.assertEqual([s["cost_minor"] for s in self.sends(first)], [0, PRICE])

    def test_a_429_without_retry_after_backs_off(self):
        self.fake.control(statuses=[429])
        first = self.issue_ok("+919800000001")
        wait_until(lambda: self.fake.requests(), 5, what="the 429")
        t429 = self.fake.requests()[0]["t_us"] / 1e6
        other = self.issue_ok("+919800000002")
        self.wait_state(first, "sent")
        self.wait_state(other, "sent")
        later = [r["t_us"] / 1e6 - t429 for r in self.fake.requests()[1:]]
        self.assertGreaterEqual(min(later), 1.0, later)


class PauseStopTest(MoneyTest):
    ttl = "10m"

    def test_sigterm_during_a_long_pause_stops_at_once(self):
        """A 429's pause (here a minute) never holds a SIGTERM: nothing is on
        the wire, so otpd stops without waiting for the pause to end."""
        self.fake.control(statuses=[429], retry_after=60)
        mid = self.issue_ok("+919800000001")
        wait_until(lambda: self.sends(mid), 5, what="the 429's send row")
        other = self.issue_ok("+919800000002")  # picked, and held by the pause
        wait_until(lambda: "paused" in self.otpd.log(), 5, what="the pause logged")
        t0 = time.monotonic()
        self.assertEqual(self.otpd.stop(), 0)
        self.assertLess(time.monotonic() - t0, 3.0, "SIGTERM waited for the 429's pause")
        self.assertEqual((self.state(mid), self.state(other)), ("queued", "queued"))  # sent after the next start


class RestartTest(MoneyTest):
    pacer = dict(MoneyTest.pacer, rate=1)

    def test_restart_at_rate_1_keeps_the_spacing(self):
        a = self.issue_ok("+919800000001")
        self.wait_state(a, "sent")
        wait_until(lambda: self.sends(a), 5, what="a's send row")
        self.otpd.kill(signal.SIGKILL)
        self.otpd.proc.wait()
        self.restart()
        b = self.issue_ok("+919800000002")
        self.wait_state(b, "sent")
        ts = [r["t_us"] / 1e6 for r in self.fake.requests()]
        self.assertEqual(len(ts), 2)
        self.assertGreaterEqual(ts[1] - ts[0], 1.0, "the first send after the restart came too early")


class RecoveryTest(MoneyTest):
    """Codes that died while otpd was down: found at the restart, never sent,
    and only what provably never reached the provider is given back, once."""
    pacer = dict(MoneyTest.pacer, rate=1)
    ttl = "10s"

    def test_dead_codes_found_at_restart_are_refunded_once(self):
        # The first call answers 500 (billed: the outcome is unknown) and waits
        # for its retry; at 1/s the others wait their turn. Killed right after
        # the 500, the first was tried and the others never were.
        self.fake.control(statuses=[500])
        ids = [self.issue_ok(p) for p in phones(5, 100)]
        # Killed as soon as the 500 reached the provider and its attempt is in
        # the ledger (its 'sending' row is written as the request is): the
        # next slot is a second later. The first call is the queue's head's,
        # unless that one missed its slot (a loaded machine): then another.
        wait_until(lambda: self.fake.requests(), 5, step=0.005, what="the first call at the provider")
        first = json.loads(self.fake.requests()[0]["body"])["id"]
        never = [m for m in ids if m != first]
        wait_until(lambda: self.msg(first)["attempts"] == 1, 5, step=0.005, what="its attempt in the ledger")
        self.otpd.kill(signal.SIGKILL)
        self.otpd.proc.wait()
        states = {m: (self.msg(m)["state"], self.msg(m)["attempts"]) for m in ids}
        self.assertIn(states[first], [("queued", 1), ("sending", 1)], "the kill came late: %s" % states)
        self.assertEqual([states[m] for m in never], [("queued", 0)] * 4, "the kill came late: %s" % states)
        # Down until every code has less than its minimum life (2.5 s) left.
        last_ms = max(self.msg(m)["expires_ms"] for m in ids)
        wait_until(lambda: int(self.redis.cmd("TIME")[0]) * 1000 > last_ms - 2000, 15, step=0.2,
                   what="the codes to (nearly) die while otpd is down")
        self.restart()
        for mid in ids:
            self.wait_state(mid, "expired")
        # The never tried are given back, once. The tried one keeps every
        # reservation it holds: after a crash nobody can prove that its
        # retry never reached the provider.
        # A message whose slot came before the kill but whose request was never
        # written (a missed slot) was marked used all the same: Redis cannot
        # tell it from one that left, so it keeps its cost too (at most one
        # here: the first call's slot came first).
        wait_until(lambda: sum(metric(self.metrics(), "otpd_cost_refunds_total", result=r)
                               for r in ("refunded", "kept")) == 5, 5, what="every reservation decided")
        kept = [m for m in ids if "f" not in self.money(m)]
        self.assertIn(first, kept)
        self.assertLessEqual(len(kept), 2, kept)
        self.assertEqual(metric(self.metrics(), "otpd_cost_refunds_total", result="refunded"), 5 - len(kept))
        held = sum(int(self.money(m).get("r", "1")) for m in kept)
        self.assertEqual(self.reserved(), held * PRICE)
        self.assertEqual(len(self.fake.requests()), 1, "a dead code was sent")
        for mid in never:
            if mid not in kept:
                self.assertEqual(self.money(mid).get("f"), "1", mid)
        # Another restart finds nothing to end and gives nothing back again.
        self.restart()
        self.issue_ok("+919800000099")
        wait_until(lambda: len(self.fake.requests()) == 2, 5, what="a new message sent")
        self.assertEqual(self.reserved(), (held + 1) * PRICE)


class MinLifeTest(MoneyTest):
    # min(30 s, ttl / 4) = 2.5 s; at 8 a second the 62nd message onwards has less.
    pacer = dict(MoneyTest.pacer, rate=8, capacity=100)
    ttl = "10s"

    def test_too_little_life_left_is_never_sent(self):
        n = 66
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            res = list(ex.map(self.otpd.issue, phones(n)))
        self.assertEqual([r[0] for r in res], [202] * n)
        ids = [r[2]["id"] for r in res]
        wait_until(lambda: all(self.state(i) in ("sent", "expired") for i in ids), 15, what="every message to end")
        arrivals = {json.loads(q["body"])["id"]: q["t_us"] / 1e3 for q in self.fake.requests()}
        expired = [i for i in ids if self.state(i) == "expired"]
        self.assertGreaterEqual(len(expired), 3)
        for i in ids:
            m = self.msg(i)
            if m["state"] == "sent":
                left = m["expires_ms"] - arrivals[i]
                self.assertGreaterEqual(left, 2500 - 75, "sent with %d ms left" % left)  # 3 % of 2.5 s
            else:
                self.assertNotIn(i, arrivals)
                self.assertEqual(self.sends(i), [])
                self.assertLess(m["expires_ms"] - m["updated_ms"], 2500)
        wait_until(lambda: self.reserved() == (n - len(expired)) * PRICE, 5, what="the expired ones refunded")


class AttemptClassTest(MoneyTest):
    """One message per class: what reaches the ledger, the caps and the spend."""
    pacer = dict(MoneyTest.pacer, timeout="300ms", retry={"max": 1, "base": "100ms"})

    def settle(self, mid, state):
        self.assertEqual(self.wait_state(mid, "sent", "failed", timeout=10), state)
        if state == "failed":
            wait_until(lambda: metric(self.metrics(), "otpd_cost_refunds_total", result="refunded") is not None,
                       2, what="metrics")

    def check(self, statuses, state, sends, reserved, unknown, accepted, unbilled=0):
        self.fake.control(statuses=statuses)
        mid = self.issue_ok("+919800000001")
        self.settle(mid, state)
        got = [(s["outcome"], s["http_status"], s["cost_minor"]) for s in self.sends(mid)]
        self.assertEqual(got, sends)
        wait_until(lambda: self.reserved() == reserved, 5, what="reserved %d (is %d)" % (reserved, self.reserved()))
        # Every written request was counted when it left; the verdicts split them.
        self.assertEqual((self.settled("unknown"), self.settled("accepted"), self.settled("unbilled")),
                         (unknown, accepted, unbilled))
        self.assertEqual((self.spend("unknown"), self.spend("accepted")), (len(sends) * PRICE, 0))
        return mid

    def test_500_is_billed_and_the_retry_reserves_again(self):
        self.check([500], "sent", [("transient", 500, PRICE), ("sent", 200, PRICE)], 2 * PRICE, PRICE, PRICE)

    def test_408_is_billed(self):
        self.check([408], "sent", [("transient", 408, PRICE), ("sent", 200, PRICE)], 2 * PRICE, PRICE, PRICE)

    def test_400_is_not_billed_and_refunded(self):
        self.check([400], "failed", [("permanent", 400, 0)], 0, 0, 0, PRICE)

    def test_401_is_not_billed_refunded_and_alerts(self):
        self.check([401], "failed", [("permanent", 401, 0)], 0, 0, 0, PRICE)
        self.assertEqual(metric(self.metrics(), "otpd_provider_attempts_total", cause="route"), 1)

    def test_429_is_not_billed_and_keeps_its_reservation(self):
        self.check([429], "sent", [("transient", 429, 0), ("sent", 200, PRICE)], PRICE, 0, PRICE, PRICE)

class HangTest(MoneyTest):
    # The retry waits 1 to 2 s, so the provider stops hanging before it
    # whatever the load (with 100 ms the test raced its own control call).
    pacer = dict(MoneyTest.pacer, timeout="300ms", retry={"max": 1, "base": "1s"})
    settle = AttemptClassTest.settle

    def test_hang_past_the_timeout_is_billed(self):
        self.fake.control(hang=True)
        mid = self.issue_ok("+919800000001")
        wait_until(lambda: self.sends(mid), 5, what="the timed-out call")
        self.fake.control(hang=False)
        self.settle(mid, "sent")
        self.assertEqual([(s["outcome"], s["http_status"], s["cost_minor"]) for s in self.sends(mid)],
                         [("transient", None, PRICE), ("sent", 200, PRICE)])
        self.assertEqual(self.reserved(), 2 * PRICE)
        self.assertEqual((self.settled("unknown"), self.settled("accepted")), (PRICE, PRICE))
        self.assertEqual(self.spend("unknown"), 2 * PRICE)
        self.assertEqual(metric(self.metrics(), "otpd_provider_attempts_total", cause="timeout"), 1)


class ResetTest(MoneyTest):
    """A connection reset after the request left: the provider may bill it."""
    pacer = dict(MoneyTest.pacer, retry={"max": 1, "base": "100ms"})
    server = None
    provider_url = staticmethod(lambda: "http://127.0.0.1:%d/sms" % ResetTest.server.port)

    def setUp(self):
        ResetTest.server = ResetServer()
        super().setUp()

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            ResetTest.server.close()

    def test_reset_is_billed_and_never_refunded(self):
        mid = self.issue_ok("+919800000001")
        self.assertEqual(self.wait_state(mid, "failed"), "failed")
        self.assertEqual(self.server.count, 2)
        self.assertEqual([(s["outcome"], s["http_status"], s["cost_minor"]) for s in self.sends(mid)],
                         [("transient", None, PRICE)] * 2)
        self.assertEqual(self.reserved(), 2 * PRICE)
        self.assertEqual(self.spend("unknown"), 2 * PRICE)
        self.assertEqual(metric(self.metrics(), "otpd_provider_attempts_total", cause="broken"), 2)


class ReusedConnectionResetTest(MoneyTest):
    """A reused connection reset after the request left: curl would send the request again on a fresh connection by
    itself, a second copy the provider may bill that no reservation or spend counted. otpd never lets curl resend:
    the attempt ends as written (billed), and its retry is a new attempt on a reservation of its own."""
    pacer = dict(MoneyTest.pacer, max_inflight=1, retry={"max": 2, "base": "100ms"})
    server = None
    provider_url = staticmethod(lambda: "http://127.0.0.1:%d/sms" % ReusedConnectionResetTest.server.port)

    def setUp(self):
        ReusedConnectionResetTest.server = ReuseResetServer()
        super().setUp()

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            ReusedConnectionResetTest.server.close()

    def test_every_copy_on_the_wire_is_counted(self):
        # Messages one after the other, so a call finds the last one's connection idle in curl's cache; until three
        # reused connections were reset (curl may open a fresh one instead when a slot is missed on a busy machine,
        # and sends again by itself only when the reset finds it waiting for the answer: about two times in three).
        mids = []
        for i in range(12):
            mids.append(self.issue_ok("+9198000000%02d" % (i + 1)))
            self.wait_state(mids[-1], "sent", "failed")
            if sum(n == 1 for _, n, _ in self.server.log) >= 3:
                break
        self.assertTrue(any(n == 1 for _, n, _ in self.server.log),
                        "no call reused a connection: the test proved nothing (%r)" % (self.server.log,))
        sends = [s for m in mids for s in self.sends(m)]
        self.assertEqual(sum(s["cost_minor"] for s in sends), self.server.count * PRICE,
                         "every request the provider saw is billed in the ledger: %r, sends %r" % (
                             self.server.log, [(s["outcome"], s["cost_minor"]) for s in sends]))
        self.assertEqual(self.spend("unknown") + self.spend("accepted"), self.server.count * PRICE)
        self.assertEqual(self.reserved(), self.server.count * PRICE)


class UnsentTest(MoneyTest):
    """Connection refused: never reached, retried on the same reservation, given back once."""
    closed_port = free_port()
    provider_url = staticmethod(lambda: "http://127.0.0.1:%d/sms" % UnsentTest.closed_port)
    pacer = dict(MoneyTest.pacer, retry={"max": 2, "base": "100ms"})

    def test_refused_is_not_billed(self):
        mid = self.issue_ok("+919800000001")
        self.assertEqual(self.wait_state(mid, "failed"), "failed")
        self.assertEqual([(s["outcome"], s["cost_minor"]) for s in self.sends(mid)], [("transient", 0)] * 3)
        wait_until(lambda: self.reserved() == 0, 5, what="the refund")
        self.assertEqual(self.money(mid).get("f"), "1")
        self.assertEqual(self.spend("unknown"), 0)
        self.assertEqual(metric(self.metrics(), "otpd_provider_attempts_total", cause="unsent"), 3)


class CapReloadBase(MoneyTest):
    """A refund gives back to the cap windows its reservation was counted in,
    not to the caps in force when it is refunded: a SIGHUP between an issue
    and its refund neither feeds a new cap money it never counted nor keeps
    money in a removed cap's window."""
    caps = [{"window": "1h", "max": 100000}]

    def field(self, window_ms):
        v = self.redis.cmd("HGET", "otp:cost", "c%d" % window_ms)
        return int(v.split(":")[1]) if v else None

    def reload(self, caps):
        cfg = self.otpd.config
        cfg["cost"]["caps"] = caps
        self.otpd.write_config(cfg)
        n = self.otpd.log().count("reloaded")
        self.otpd.kill(signal.SIGHUP)
        wait_until(lambda: self.otpd.log().count("reloaded") > n, 5, what="the reload")

    def first_call_refused_slowly(self):
        # The first call answers 400 (never billed: refunded) after 1.5 s.
        self.fake.control(latency_ms=1500, statuses=[400])
        m1 = self.issue_ok("+919800000001")
        wait_until(lambda: self.fake.requests(), 5, what="m1's call on the wire")
        return m1

    def refunds(self, result):
        return metric(self.metrics(), "otpd_cost_refunds_total", result=result)



class CapAddedTest(CapReloadBase):
    def test_a_cap_added_while_in_flight_is_not_refunded(self):
        m1 = self.first_call_refused_slowly()
        self.reload([{"window": "1h", "max": 100000}, {"window": "2h", "max": PRICE}])
        self.issue_ok("+919800000002")  # the new cap counts m2 and is full
        self.assertEqual((self.field(3600000), self.field(7200000)), (2 * PRICE, PRICE))
        self.assertEqual(self.wait_state(m1, "failed"), "failed")
        wait_until(lambda: self.refunds("refunded") == 1, 5, what="m1's refund")
        # m1 was counted in the 1h cap only: the 2h cap keeps m2's money.
        self.assertEqual((self.field(3600000), self.field(7200000)), (PRICE, PRICE))
        self.assertEqual(self.refunds("anomaly"), 0)
        st, _, body = self.otpd.issue("+919800000003")
        self.assertEqual((st, body["error"]), (503, "cost_cap"))



class CapRemovedTest(CapReloadBase):
    caps = [{"window": "1h", "max": 100000}, {"window": "2h", "max": 100000}]

    def test_a_cap_removed_while_in_flight_is_still_refunded(self):
        m1 = self.first_call_refused_slowly()
        self.assertEqual((self.field(3600000), self.field(7200000)), (PRICE, PRICE))
        self.reload([{"window": "1h", "max": 100000}])
        self.assertEqual(self.wait_state(m1, "failed"), "failed")
        wait_until(lambda: self.refunds("refunded") == 1, 5, what="m1's refund")
        # Both windows counted it, so both give it back.
        self.assertEqual((self.field(3600000), self.field(7200000)), (0, 0))


class SpendInFlightTest(MoneyTest):
    """otpd_spend_minor_total counts an attempt when its request is written,
    so it never reads less than what the provider could bill, even while the
    call is on the wire; the settled metric splits it once the verdict is in."""

    def test_spend_counts_the_call_on_the_wire(self):
        self.fake.control(latency_ms=1500)
        mid = self.issue_ok("+919800000001")
        wait_until(lambda: self.fake.requests(), 5, what="the call at the provider")
        self.assertEqual(self.spend("unknown"), PRICE)
        self.assertEqual(self.settled("accepted"), 0)
        self.assertEqual(self.sends(mid), [], "the call ended too early to be in flight")
        self.wait_state(mid, "sent")
        wait_until(lambda: self.settled("accepted") == PRICE, 5, what="the verdict")
        self.assertEqual((self.spend("unknown"), self.spend("accepted")), (PRICE, 0))  # never twice
        self.assertEqual((self.settled("unknown"), self.settled("unbilled")), (0, 0))


class WireKillTest(MoneyTest):
    """SIGKILL while a call is on the wire and its 'sending' row has not
    committed: the ledger says the message was never tried, but Redis's use
    mark says reservation 1 went out, so the resend after the restart holds
    a reservation of its own."""
    pacer = dict(MoneyTest.pacer, rate=1)
    caps = [{"window": "1h", "max": 3 * PRICE}]

    def test_resend_after_a_kill_on_the_wire_reserves_again(self):
        w = self.issue_ok("+919800000001")
        self.wait_state(w, "sent")
        # At 1/s the next call waits about a second for its slot: time to
        # hold the ledger before its 'sending' row is written.
        self.fake.control(latency_ms=5000)
        a = self.issue_ok("+919800000002")
        lock = sqlite3.connect(self.otpd.config["ledger"]["path"], timeout=5, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            self.assertEqual((self.msg(a)["state"], self.msg(a)["attempts"]), ("queued", 0))
            wait_until(lambda: len(self.fake.requests()) == 2, 5, what="a's call on the wire")
            self.otpd.kill(signal.SIGKILL)
            self.otpd.proc.wait()
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        self.assertEqual((self.msg(a)["state"], self.msg(a)["attempts"]), ("queued", 0), "the ledger caught up")
        self.assertEqual(self.money(a).get("u"), "1")  # marked used before it went out
        self.assertEqual(self.reserved(), 2 * PRICE)
        self.fake.control(latency_ms=0)
        self.restart()
        self.assertEqual(self.wait_state(a, "sent"), "sent")
        self.assertEqual(len(self.fake.requests()), 3)
        # The resend took reservation 2: w's, a's first and a's second fill the cap.
        self.assertEqual((self.money(a)["r"], self.money(a)["u"]), ("2", "2"))
        self.assertEqual(self.reserved(), 3 * PRICE)
        st, _, body = self.otpd.issue("+919800000003")
        self.assertEqual((st, body["error"]), (503, "cost_cap"))


class WireKillDeadTest(MoneyTest):
    """The same kill, but the code dies while otpd is down: the ledger says
    never tried, Redis says its reservation went out, so nothing is given
    back (the provider may bill that call)."""
    pacer = dict(MoneyTest.pacer, rate=1)
    ttl = "10s"

    def test_a_dead_code_used_on_the_wire_keeps_its_cost(self):
        w = self.issue_ok("+919800000001")
        self.wait_state(w, "sent")
        self.fake.control(latency_ms=5000)
        a = self.issue_ok("+919800000002")
        lock = sqlite3.connect(self.otpd.config["ledger"]["path"], timeout=5, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")
        try:
            wait_until(lambda: len(self.fake.requests()) == 2, 5, what="a's call on the wire")
            self.otpd.kill(signal.SIGKILL)
            self.otpd.proc.wait()
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        self.assertEqual((self.msg(a)["state"], self.msg(a)["attempts"]), ("queued", 0), "the ledger caught up")
        last_ms = self.msg(a)["expires_ms"]
        wait_until(lambda: int(self.redis.cmd("TIME")[0]) * 1000 > last_ms - 2000, 15, step=0.2,
                   what="a's code to (nearly) die while otpd is down")
        self.restart()
        self.assertEqual(self.wait_state(a, "expired"), "expired")
        wait_until(lambda: metric(self.metrics(), "otpd_cost_refunds_total", result="kept") == 1, 5,
                   what="the refund kept")
        self.assertEqual(metric(self.metrics(), "otpd_cost_refunds_total", result="refunded"), 0)
        self.assertNotIn("f", self.money(a))
        self.assertEqual(self.reserved(), 2 * PRICE)
        self.assertEqual(len(self.fake.requests()), 2)
