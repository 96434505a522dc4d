"""Redis behind Sentinel: otpd asks the sentinels where the master is, and
after a failover (the master SIGKILLed, its replica promoted) it finds the
new master by itself; a verification started before the failover verifies
after it."""
# It measures time or rates: tests/integration/run.py runs it alone, after the parallel workers.
SERIAL = True
import os
import signal
import socket
import subprocess
import time

from harness import OtpdTest, Redis, wait_until


class Sentinel(Redis):
    """redis-server --sentinel, monitoring master_port; proven ours like Redis."""

    def __init__(self, workdir, master_port):
        super().__init__(workdir, name="sentinel")
        self.master_port = master_port

    def argv(self):
        # Sentinel rewrites its config file: one per start, on the chosen port.
        conf = os.path.join(self.dir, "sentinel.%d.conf" % self.port)
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"
                    "sentinel monitor otpd 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds otpd 500\n"
                    "sentinel failover-timeout otpd 3000\n" % (self.port, self.dir,
                                                               os.path.join(self.dir, "sentinel.log"),
                                                               self.master_port))
        return ["redis-server", conf, "--sentinel"]


class SentinelTest(OtpdTest):
    def configure(self, cfg):
        # configure() runs again if otpd's port clashes: start the servers once.
        if not getattr(self, "procs", None):
            self.procs = []
            self.replica = Redis(self.tmp, ["--replicaof", "127.0.0.1", str(self.redis.port)], name="replica")
            self.procs.append(self.replica.start())
            self.sentinel = Sentinel(self.tmp, self.redis.port)
            self.procs.append(self.sentinel.start())
            self.replica_port, self.sentinel_port = self.replica.port, self.sentinel.port
            # A dead sentinel address: bound but not listening, so nothing can answer there.
            self.dead = socket.socket()
            self.dead.bind(("127.0.0.1", 0))
            wait_until(lambda: self.master_port() == self.redis.port, 10, what="the sentinel")
        cfg["redis"] = {"sentinel": {"addrs": ["127.0.0.1:%d" % self.dead.getsockname()[1],
                                               "127.0.0.1:%d" % self.sentinel_port],
                                     "master": "otpd"},
                        "timeout_ms": 100, "breaker_failures": 3, "breaker_open": "500ms"}
        return cfg

    def _stop_all(self):
        for p in getattr(self, "procs", []):
            p.stop()
        if getattr(self, "dead", None):
            self.dead.close()
        super()._stop_all()

    def master_port(self):
        out = subprocess.run(["redis-cli", "-p", str(self.sentinel_port), "SENTINEL", "get-master-addr-by-name",
                              "otpd"], capture_output=True, text=True).stdout.split()
        return int(out[1]) if len(out) == 2 else None

    def sentinel_knows_replica(self):
        out = subprocess.run(["redis-cli", "-p", str(self.sentinel_port), "SENTINEL", "replicas", "otpd"],
                             capture_output=True, text=True).stdout
        return str(self.replica_port) in out

    def replica_synced(self):
        out = subprocess.run(["redis-cli", "-p", str(self.replica_port), "INFO", "replication"],
                             capture_output=True, text=True).stdout
        return "master_link_status:up" in out

    def test_failover(self):
        phone = "+919812345678"
        _, code = self.issue_and_code(phone)  # the first sentinel address is dead: the second answers
        wait_until(self.replica_synced, 10, what="the replica")
        # Sentinel learns of replicas from the master's INFO, every 10 s at most.
        wait_until(self.sentinel_knows_replica, 15, step=0.2, what="the sentinel to see the replica")
        # Replication is asynchronous: WAIT returns once the replica has
        # acknowledged every write so far (the verification included).
        self.assertEqual(self.redis.cmd("WAIT", 1, 5000, timeout=6), 1)
        self.redis.proc.send_signal(signal.SIGKILL)
        self.redis.proc.wait()
        wait_until(lambda: self.master_port() == self.replica_port, 20, step=0.2, what="the failover")
        t0 = time.monotonic()
        wait_until(lambda: self.otpd.issue("+14155550100")[0] == 202 or None, 10, step=0.1,
                   what="otpd on the new master")
        took = time.monotonic() - t0
        self.assertLess(took, 3.0, "otpd took %.1fs to follow the failover" % took)
        self.assertEqual(self.otpd.verify(phone, code)[0], 200)
        self.assertEqual(self.otpd.call("GET", "/readyz", auth=None)[0], 200)

    def test_failover_mid_drain(self):
        """The master SIGKILLed while the queue drains (rate 10, 40 messages,
        so about 35 are still queued): after the replica takes over, every
        message accepted before the failover (and replicated: WAIT) reaches
        the provider, and new issues are accepted and sent. The queue lives
        in Redis now, so this is the replica's copy of it being drained.
        Assumption: claims and acks after the WAIT may be lost with the old
        master, so a message may go out twice (at-least-once); the test
        only bounds the repeats by max_inflight."""
        cfg = self.otpd.config
        cfg["pacer"] = {"rate": 10, "capacity": 200, "max_inflight": 4, "retry": {"max": 2, "base": "100ms"},
                        "timeout": "2s"}
        self.restart(cfg)
        wait_until(self.replica_synced, 10, what="the replica")
        wait_until(self.sentinel_knows_replica, 15, step=0.2, what="the sentinel to see the replica")
        res = [self.otpd.issue("+9197%08d" % i) for i in range(40)]
        self.assertEqual([r[0] for r in res], [202] * 40, [r[2] for r in res if r[0] != 202][:3])
        ids = {r[2]["id"] for r in res}
        self.assertEqual(self.redis.cmd("WAIT", 1, 5000, timeout=6), 1)
        self.wait_messages(5, timeout=10)
        self.redis.proc.send_signal(signal.SIGKILL)
        self.redis.proc.wait()
        self.assertLess(len({m["id"] for m in self.fake.messages()}), 40, "the drain ended before the failover")
        wait_until(lambda: self.master_port() == self.replica_port, 20, step=0.2, what="the failover")
        st = wait_until(lambda: (lambda r: r if r[0] == 202 else None)(self.otpd.issue("+14155550100")), 10,
                        step=0.1, what="an issue accepted on the new master")
        ids.add(st[2]["id"])
        try:
            wait_until(lambda: ids <= {m["id"] for m in self.fake.messages()}, 25, step=0.1,
                       what="every message at the provider")
        except AssertionError:
            missing = ids - {m["id"] for m in self.fake.messages()}
            self.fail("%d of %d accepted messages never reached the provider after the failover" % (
                len(missing), len(ids)))
        got = [m["id"] for m in self.fake.messages()]
        self.assertLessEqual(set(got), ids)
        self.assertLessEqual(len(got) - len(set(got)), cfg["pacer"]["max_inflight"], got)
