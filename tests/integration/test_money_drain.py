"""Stopping under load: SIGTERM while a pool of 32 HTTP workers is busy
accepting and answering connections exits 0, every time.

libmicrohttpd 0.9.75's MHD_quiesce_daemon took the listening socket out of
each pool worker's epoll set from the signalled thread while the worker
could be doing the same in MHD_epoll; the loser's EPOLL_CTL_DEL failed with
ENOENT and MHD aborted ("Failed to remove listen FD from epoll set"). The
race needs a worker inside MHD_epoll at the moment of the stop, which a
churn of fresh connections (each wakes every worker polling the listening
socket) gives, and a preemption between a check and its delete, which the
epoll_slow shim stands in for; the stop is repeated. otpd now owns its
listening sockets (src/http/listener.h), so MHD has none to take out."""
import os
import signal
import socket
import threading

from harness import BIN, Otpd, OtpdTest, wait_until

# Runs of start, load, SIGTERM: each is well under a second of otpd's time.
RUNS = 30
# Client threads opening a connection per request: enough to keep several
# workers in their event loop at once on a 2-core machine.
CLIENTS = 6
PANIC = "Failed to remove listen FD"
# Delays each EPOLL_CTL_DEL by a millisecond (tests/shims/epoll_slow.c),
# which turns that race from rare (0 in 230 stops at load 2) to likely.
SHIM = os.path.join(BIN, "epoll_slow.so")


def churn(port, stop, done, counts, i):
    """GET /healthz on a fresh connection each time until stop; counts the
    answers. Refusals and resets are expected once otpd stops."""
    req = b"GET /healthz HTTP/1.1\r\nHost: otpd\r\nConnection: close\r\n\r\n"
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(req)
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    counts[i] += 1
        except OSError:
            if done.is_set():
                return
    return


class SigtermUnderLoadTest(OtpdTest):
    def configure(self, cfg):
        cfg["http_threads"] = 32
        return cfg

    def test_sigterm_under_load_exits_cleanly(self):
        failures = []
        for run in range(RUNS):
            # Each run its own otpd under the shim (its header says why).
            if run == 0:  # setUp's, unloaded; later runs' are gone already
                self.assertEqual(self.otpd.stop(), 0)
            self.otpd = Otpd(self.tmp, self.otpd.config, self.env)
            self.otpd.env["LD_PRELOAD"] = SHIM
            # An ASan build wants its runtime first; the shim only wraps a call.
            self.otpd.env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
            self.otpd.start()
            stop, done = threading.Event(), threading.Event()
            counts = [0] * CLIENTS
            threads = [threading.Thread(target=churn, args=(self.otpd.port, stop, done, counts, i), daemon=True)
                       for i in range(CLIENTS)]
            for t in threads:
                t.start()
            try:
                # Barrier: every client is being answered, so workers are
                # busy in their loops when the signal lands.
                wait_until(lambda: min(counts) >= 3, 10, what="every client answered")
                self.otpd.kill(signal.SIGTERM)
                done.set()
                try:
                    rc = self.otpd.proc.wait(10)
                except Exception:
                    self.otpd.proc.kill()
                    rc = self.otpd.proc.wait()
                    failures.append("run %d: no exit within 10s" % run)
            finally:
                stop.set()
                for t in threads:
                    t.join(5)
            mine = self.otpd.log()[self.otpd._log_from:]
            if rc != 0 or PANIC in mine:
                failures.append("run %d: exit %s%s" % (run, rc, " (MHD panic)" if PANIC in mine else ""))
        self.assertEqual(failures, [], "%d of %d stops failed; log tail:\n%s" % (
            len(failures), RUNS, self.otpd.log()[-2000:]))
