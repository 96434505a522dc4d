"""A TCP forwarder a test controls: it stands between one otpd and Redis (or any TCP server) to cut that one
client off while the rest of the fleet keeps talking to the server directly.

Modes, set at any time with set_mode():
  - "pass": every connection is forwarded both ways, byte for byte.
  - "refuse": new connections are reset at once, and every open one is reset (a peer that went away, or a firewall
    that answers with RST).
  - "blackhole": new connections are accepted and then hear nothing, and open ones stop moving in both directions:
    nothing is read from either side, so what a client writes waits in the kernel's buffers, as packets would on a
    partitioned link. Back to "pass", what waited is delivered late (a healed partition, TCP's retransmission);
    reset_all() first drops it instead (the partition lasted past TCP's patience).
A partition at an exact point: set trip to a function of each chunk a client writes; when it returns a mode, the
chunk is forwarded and then that mode is set (once), so the partition falls right after a given command and
before its reply.
Standard library only; one thread accepts, one thread per connection pair moves bytes.
"""
import select
import socket
import struct
import threading

MODES = ("pass", "refuse", "blackhole")


def _reset(sock):
    """Closes sock with an RST rather than a FIN, so the peer sees a dead connection at once."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class NetProxy:
    """Listens on 127.0.0.1:<port> (free, or the one given) and forwards to target_port on 127.0.0.1."""

    def __init__(self, target_port, port=0, host="127.0.0.1"):
        self.target = (host, target_port)
        self.mode = "pass"
        self._cv = threading.Condition()
        self._pairs = set()
        self._stopped = False
        self._lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._lsock.bind((host, port))
        self._lsock.listen(128)
        self.port = self._lsock.getsockname()[1]
        self.accepted = 0  # connections accepted, for tests that want to see a reconnect
        self.trip = None  # f(chunk written by a client) -> a mode to set once that chunk is forwarded, or None
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def set_mode(self, mode):
        if mode not in MODES:
            raise ValueError("mode must be one of %s" % (MODES,))
        with self._cv:
            self.mode = mode
            pairs = list(self._pairs) if mode == "refuse" else []
            self._cv.notify_all()
        for p in pairs:
            self._drop(p)

    def reset_all(self):
        """Resets every open connection (both sides), whatever the mode."""
        with self._cv:
            pairs = list(self._pairs)
        for p in pairs:
            self._drop(p)

    def open_connections(self):
        with self._cv:
            return len(self._pairs)

    def stop(self):
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        try:
            self._lsock.close()
        except OSError:
            pass
        self.reset_all()

    def _drop(self, pair):
        with self._cv:
            self._pairs.discard(pair)
        for s in pair:
            _reset(s)

    def _accept_loop(self):
        while True:
            try:
                client, _ = self._lsock.accept()
            except OSError:
                return  # closed by stop()
            with self._cv:
                mode, stopped = self.mode, self._stopped
                self.accepted += 1
            if stopped or mode == "refuse":
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            pair = (client, upstream)
            with self._cv:
                self._pairs.add(pair)
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair):
        client, upstream = pair
        peer = {client: upstream, upstream: client}
        while True:
            with self._cv:
                while self.mode == "blackhole" and pair in self._pairs and not self._stopped:
                    self._cv.wait(0.05)
                if pair not in self._pairs or self._stopped:
                    return
            try:
                ready, _, _ = select.select([client, upstream], [], [], 0.05)
                for s in ready:
                    with self._cv:
                        if self.mode != "pass" or pair not in self._pairs:
                            break  # checked again at the top: nothing moves outside "pass"
                    data = s.recv(65536)
                    if not data:
                        self._drop(pair)
                        return
                    peer[s].sendall(data)
                    trip = self.trip if s is client else None
                    mode = trip(data) if trip is not None else None
                    if mode:
                        self.trip = None
                        self.set_mode(mode)
            except (OSError, ValueError):
                self._drop(pair)
                return
