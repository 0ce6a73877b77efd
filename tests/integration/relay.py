"""relay.py - a TCP relay to a real Redis for faults a real network gives
without a word: connections frozen (nothing moves either way, both sockets
left open: a peer powered off, a middlebox that dropped it; no FIN, no
RST), or cut right after a request went through (Redis runs it, its
reply never comes back)."""

import select
import socket
import threading
import time


class Relay:
    """Relays 127.0.0.1:port to a Redis on port_to. subscribers() counts
    the connections that sent SUBSCRIBE; freeze_subscribers() freezes
    them; cut_after(pattern) closes, once, the connection whose request
    bytes hold pattern, right after passing them on."""

    def __init__(self, port_to):
        self.port_to = port_to
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []  # [client socket, upstream socket, subscriber, frozen]
        self.cut_pattern = None
        self.cuts = 0
        self.stopped = False
        threading.Thread(target=self.accept, daemon=True).start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def accept(self):
        while not self.stopped:
            try:
                cs, _ = self.lsock.accept()
                up = socket.create_connection(("127.0.0.1", self.port_to))
            except OSError:
                return
            conn = [cs, up, False, False]
            with self.lock:
                self.conns.append(conn)
            threading.Thread(target=self.pump, args=(conn,), daemon=True).start()

    def pump(self, conn):
        cs, up = conn[0], conn[1]
        while not self.stopped:
            if conn[3]:
                time.sleep(0.02)
                continue
            try:
                ready, _, _ = select.select([cs, up], [], [], 0.05)
                for src in ready:
                    if conn[3]:
                        break
                    data = src.recv(65536)
                    if not data:
                        raise OSError("closed")
                    if src is cs and b"SUBSCRIBE" in data.upper():
                        conn[2] = True
                    (up if src is cs else cs).sendall(data)
                    with self.lock:
                        cut = src is cs and self.cut_pattern and self.cut_pattern in data
                        if cut:
                            self.cut_pattern = None
                            self.cuts += 1
                    if cut:
                        time.sleep(0.1)  # Redis has it; its reply is not passed on
                        raise OSError("cut")
            except OSError:
                for x in (cs, up):
                    x.close()
                with self.lock:
                    if conn in self.conns:
                        self.conns.remove(conn)
                return

    def subscribers(self, frozen=False):
        with self.lock:
            return sum(1 for c in self.conns if c[2] and c[3] == frozen)

    def freeze_subscribers(self):
        with self.lock:
            for c in self.conns:
                if c[2]:
                    c[3] = True

    def cut_after(self, pattern):
        with self.lock:
            self.cut_pattern = pattern

    def close(self):
        self.stopped = True
        self.lsock.close()
        with self.lock:
            for c in self.conns:
                c[0].close()
                c[1].close()
