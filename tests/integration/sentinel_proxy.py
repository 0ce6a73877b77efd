"""sentinel_proxy.py - a TCP proxy in front of a sentinel that can hide
pub/sub messages (e.g. +switch-master) from the daemon, so that only errors
such as READONLY can tell it that its master was demoted."""

import select
import socket
import threading
import time

import resp


def _is_pubsub_on(value, channels):
    """True if a raw RESP value is a (p)message published on one of channels."""
    if not value.startswith(b"*"):
        return False
    parts = value.split(b"\r\n")
    words = [parts[k] for k in range(2, len(parts), 2)]
    if len(words) >= 3 and words[0] == b"message":
        return words[1] in channels
    if len(words) >= 4 and words[0] == b"pmessage":
        return words[2] in channels
    return False


class SentinelProxy:
    """Forwards 127.0.0.1:port to a sentinel, dropping pub/sub messages on
    the channels in `drop` (e.g. {b"+switch-master"}) while `hiding` is
    true. Counts what it dropped. stop() closes everything."""

    def __init__(self, target_port, drop=(b"+switch-master",)):
        self.target_port = target_port
        self.drop = set(drop)
        self.hiding = True
        self.dropped = []
        self.subscribed = 0
        self.commands = []  # (time.monotonic(), bytes the client sent)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.stopping = False
        self.conns = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def _accept(self):
        while not self.stopping:
            try:
                r, _, _ = select.select([self.lsock], [], [], 0.1)
                if not r:
                    continue
                c, _ = self.lsock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()

    def _pump(self, c, u):
        scan = resp.Splitter()
        try:
            while not self.stopping:
                r, _, _ = select.select([c, u], [], [], 0.1)
                for s in r:
                    d = s.recv(65536)
                    if not d:
                        return
                    if s is c:
                        self.commands.append((time.monotonic(), d))
                        if b"SUBSCRIBE" in d.upper():
                            self.subscribed += 1
                        u.sendall(d)
                    else:
                        out = []
                        for v in scan.feed(d):
                            if self.hiding and _is_pubsub_on(v, self.drop):
                                self.dropped.append((time.monotonic(), v))
                            else:
                                out.append(v)
                        if out:
                            c.sendall(b"".join(out))
        except (OSError, ValueError):
            pass
        finally:
            for s in (c, u):
                try:
                    s.close()
                except OSError:
                    pass

    def asks_since(self, t):
        """Times of SENTINEL get-master-addr-by-name sent through us after t."""
        return [ts for ts, d in list(self.commands)
                if ts >= t and b"get-master-addr-by-name" in d.lower()]

    def stop(self):
        self.stopping = True
        try:
            self.lsock.close()
        except OSError:
            pass
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
        self.thread.join(2)
