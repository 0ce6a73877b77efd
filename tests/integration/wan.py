"""wan.py - a TCP relay that holds every chunk for a one-way delay, each
way, as a link between regions would (this kernel has no netem qdisc):
127.0.0.1:port reaches a Redis on port_to one round trip of 2 x delay_s
later. Order is kept per direction; the delay may be changed while it
runs (a new one applies to chunks read after it)."""

import collections
import socket
import threading
import time


class Wan:
    def __init__(self, port_to, delay_s):
        self.port_to = port_to
        self.delay_s = delay_s
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.stopped = False
        self.socks = []
        self.lock = threading.Lock()
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
            for s in (cs, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.socks += [cs, up]
            self.pipe(cs, up)
            self.pipe(up, cs)

    def pipe(self, src, dst):
        """src's bytes reach dst delay_s after they were read."""
        q = collections.deque()
        cv = threading.Condition()

        def read():
            while True:
                try:
                    b = src.recv(65536)
                except OSError:
                    b = b""
                with cv:
                    q.append((time.monotonic() + self.delay_s, b))
                    cv.notify()
                if not b:
                    return

        def write():
            while True:
                with cv:
                    while not q:
                        cv.wait()
                    at, b = q.popleft()
                wait = at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not b:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(b)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def close(self):
        self.stopped = True
        self.lsock.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.close()
                except OSError:
                    pass
