"""Redis behind Sentinel: otpd asks the sentinels where the master is, and
after a failover (the master SIGKILLed, its replica promoted) it finds the
new master by itself; a verification started before the failover verifies
after it."""
import os
import signal
import subprocess
import time

from harness import OtpdTest, free_port, wait_until


class SentinelTest(OtpdTest):
    def configure(self, cfg):
        self.replica_port, self.sentinel_port = free_port(), free_port()
        self.procs = [subprocess.Popen(
            ["redis-server", "--port", str(self.replica_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.tmp, "--replicaof", "127.0.0.1", str(self.redis.port),
             "--logfile", os.path.join(self.tmp, "replica.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        conf = os.path.join(self.tmp, "sentinel.conf")
        with open(conf, "w") as f:
            f.write("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"
                    "sentinel monitor otpd 127.0.0.1 %d 1\n"
                    "sentinel down-after-milliseconds otpd 500\n"
                    "sentinel failover-timeout otpd 3000\n" % (self.sentinel_port, self.tmp,
                                                               os.path.join(self.tmp, "sentinel.log"),
                                                               self.redis.port))
        self.procs.append(subprocess.Popen(["redis-server", conf, "--sentinel"], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL))
        wait_until(lambda: self.master_port() == self.redis.port, 10, what="the sentinel")
        cfg["redis"] = {"sentinel": {"addrs": ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % self.sentinel_port],
                                     "master": "otpd"},
                        "timeout_ms": 100, "breaker_failures": 3, "breaker_open": "500ms"}
        return cfg

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

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            for p in self.procs:
                p.kill()
                p.wait()

    def test_failover(self):
        phone = "+919812345678"
        _, code = self.issue_and_code(phone)  # the first sentinel address is dead: the second answers
        wait_until(self.replica_synced, 10, what="the replica")
        # Sentinel learns of replicas from the master's INFO, every 10 s at most.
        wait_until(self.sentinel_knows_replica, 15, step=0.2, what="the sentinel to see the replica")
        time.sleep(0.3)  # replication is asynchronous: let the verification reach the replica
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
