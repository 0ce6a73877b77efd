"""fakeredis.py - a scripted fake Redis for replies a real one will not send
on demand (LOADING, BUSY, READONLY, MASTERDOWN, NOSCRIPT forever, wrong-type
and garbage replies, a reply that never comes, a connection closed in the
middle of a reply).

It speaks enough RESP2 for ratelimitd: AUTH, SELECT, SCRIPT LOAD/FLUSH,
SUBSCRIBE, PING, QUIT, and EVALSHA/EVAL of the decision script, which it
answers per `mode` (the script's "check" call is always answered "all
works" and counted in `checks`, not `calls`). In mode "ok" it answers like the real script would in
shape: five integers per decision of the batch (ARGV[2] decisions), each
decision `1 <capacity> <remaining> 0 <period_ms>`, where <remaining> is the
number at the end of the request's user name when it has one (so a test can
tell which request a reply belongs to), else capacity - 1. It keeps a script
cache like Redis: EVALSHA of a sha never loaded (SCRIPT LOAD or EVAL) gets
NOSCRIPT.

Modes for EVALSHA/EVAL (set `fake.mode`, effective for the next call):
  "ok"                     as above
  ("error", "LOADING ...") one error reply per call
  "noscript-forever"       EVALSHA and EVAL both answer NOSCRIPT
  ("raw", bytes or fn(n))  these bytes as the reply (fn gets the batch size)
  ("delay", seconds)       the "ok" reply, after a pause (the connection
                           answers nothing else meanwhile, like Redis)
  "hang"                   this connection never answers anything again
                           (it keeps reading), like a black-holed peer
  "close"                  close the connection, no reply
  ("partial", bytes)       send these bytes (part of a reply), then close

accept_mode: "serve" (default), "close" (accept and close at once), "hold"
(accept and never answer anything). setup_error: an error line answered to
SCRIPT LOAD (e.g. "LOADING ..."), None for the sha.

Only 127.0.0.1; every thread is a daemon thread; stop() closes everything.
"""

import hashlib
import socket
import threading
import time

import resp
from harness import LAYOUT


class _Conn:
    def __init__(self, fake, sock, n):
        self.fake = fake
        self.sock = sock
        self.n = n
        self.buf = b""
        self.hung = False
        self.closed = False
        self.subscribed = False

    def send(self, data):
        if self.hung or self.closed:
            return
        try:
            self.sock.sendall(data)
        except OSError:
            self.close()

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass

    def run(self):
        f = self.fake
        try:
            if f.accept_mode == "close":
                self.close()
                return
            if f.accept_mode == "hold":
                self.hung = True
            while not self.closed and not f.stopped:
                try:
                    d = self.sock.recv(262144)
                except OSError:
                    break
                if not d:
                    break
                self.buf += d
                while not self.closed:
                    r = resp.parse_command(self.buf)
                    if r is None:
                        break
                    cmd, end = r
                    self.buf = self.buf[end:]
                    self.handle(cmd)
        finally:
            self.close()
            with f.lock:
                f.live.discard(self)

    # -- commands

    def handle(self, cmd):
        f = self.fake
        name = cmd[0].upper().decode(errors="replace") if cmd else ""
        if name == "SCRIPT" and len(cmd) > 1:
            name = "SCRIPT " + cmd[1].upper().decode(errors="replace")
        with f.lock:
            f.commands[name] = f.commands.get(name, 0) + 1
        if self.hung:
            return
        if name == "AUTH":
            ok = (f.password is None or cmd[-1].decode(errors="replace") == f.password) and \
                (len(cmd) < 3 or f.username is None or cmd[1].decode() == f.username)
            self.send(b"+OK\r\n" if ok else
                      b"-WRONGPASS invalid username-password pair or user is disabled.\r\n")
        elif name == "SELECT" or name == "QUIT":
            self.send(b"+OK\r\n")
        elif name == "PING":
            self.send(b"+PONG\r\n")
        elif name == "SCRIPT LOAD":
            if f.setup_error:
                self.send(b"-" + f.setup_error.encode() + b"\r\n")
                return
            sha = hashlib.sha1(cmd[2]).hexdigest()
            with f.lock:
                f.scripts.add(sha)
            self.send(b"$40\r\n" + sha.encode() + b"\r\n")
        elif name == "SCRIPT FLUSH":
            with f.lock:
                f.scripts.clear()
            self.send(b"+OK\r\n")
        elif name == "SUBSCRIBE":
            self.subscribed = True
            for i, ch in enumerate(cmd[1:]):
                self.send(b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:%d\r\n" % (len(ch), ch, i + 1))
        elif name in ("EVALSHA", "EVAL"):
            self.script(name, cmd)
        else:
            self.send(b"-ERR unknown command '%s'\r\n" % cmd[0])

    def script(self, name, cmd):
        f = self.fake
        if len(cmd) > 4 and cmd[4] == b"check":
            # the daemon's check after connecting: "all works", whatever the
            # mode (modes are about decisions); counted apart from them
            with f.lock:
                f.checks += 1
            self.send(b"*0\r\n")
            return
        decisions = _decisions(cmd)
        with f.lock:
            f.calls += 1
            f.decisions += len(decisions)
            f.batch_sizes.append(len(decisions))
            mode = f.mode
            if name == "EVAL":
                f.scripts.add(hashlib.sha1(cmd[1]).hexdigest())
            known = name == "EVAL" or cmd[1].decode(errors="replace") in f.scripts
        kind = mode[0] if isinstance(mode, tuple) else mode
        if kind == "ok" or kind == "delay":
            if not known:
                self.send(b"-NOSCRIPT No matching script. Please use EVAL.\r\n")
                return
            if kind == "delay":
                time.sleep(mode[1])
            self.send(_ok_reply(decisions))
            with f.lock:
                f.replied += 1
        elif kind == "error":
            self.send(b"-" + mode[1].encode() + b"\r\n")
        elif kind == "noscript-forever":
            self.send(b"-NOSCRIPT No matching script. Please use EVAL.\r\n")
        elif kind == "raw":
            data = mode[1](len(decisions)) if callable(mode[1]) else mode[1]
            self.send(data)
        elif kind == "hang":
            self.hung = True
        elif kind == "close":
            self.close()
        elif kind == "partial":
            self.send(mode[1])
            time.sleep(0.02)
            self.close()
        else:
            raise ValueError("unknown fake mode %r" % (mode,))


def _decisions(cmd):
    """[(op, user, [(algo, capacity, count, period_ms)])] of an EVALSHA/EVAL."""
    try:
        nkeys = int(cmd[2])
        keys = cmd[3:3 + nkeys]
        argv = cmd[3 + nkeys:]
        n = int(argv[1])
        out = []
        pos, k = 2, 0
        limits = None
        for _ in range(n):
            if argv[pos].startswith(LAYOUT.SHORT_REPEAT.encode()):
                # "=<cost>": the ALLOW before it again (one limit), next key
                int(argv[pos][1:])
                op, nl = LAYOUT.OP_ALLOW, 1
                pos += 1
            else:
                op, nl = argv[pos].decode(), int(argv[pos + 2])
                pos += LAYOUT.HEAD_ARGC
                limits = []
                for _ in range(nl):
                    limits.append((argv[pos].decode(), int(argv[pos + 1]), int(argv[pos + 2]),
                                   int(argv[pos + 3])))
                    pos += LAYOUT.LIMIT_ARGC
            key = keys[k] if k < len(keys) else b""
            k += nl
            user = b""
            if b"{" in key and b"}" in key:
                tag = key[key.index(b"{") + 1:key.index(b"}")]
                user = tag.split(b":", 1)[1] if b":" in tag else tag
            out.append((op, user, limits))
        return out
    except (IndexError, ValueError):
        return []


def user_number(user):
    digits = b""
    for ch in reversed(user):
        if 48 <= ch <= 57:
            digits = bytes([ch]) + digits
        else:
            break
    return int(digits) if digits else None


def _ok_reply(decisions):
    out = [b"*%d\r\n" % (LAYOUT.REPLY_WIDTH * len(decisions))]
    for op, user, limits in decisions:
        cap = limits[0][1] if limits else 1
        period = limits[0][3] if limits else 1000
        num = user_number(user)
        rem = num if num is not None else max(cap - 1, 0)
        for v in (1, cap, rem, 0, period):
            out.append(b":%d\r\n" % v)
    return b"".join(out)


class FakeRedis:
    def __init__(self, port=None, password=None, username=None):
        self.password = password
        self.username = username
        self.mode = "ok"
        self.accept_mode = "serve"
        self.setup_error = None
        self.lock = threading.Lock()
        self.live = set()
        self.commands = {}
        self.scripts = set()
        self.calls = 0      # EVALSHA/EVAL received
        self.checks = 0     # the daemon's checks (not counted in calls)
        self.replied = 0    # "ok"/"delay" replies sent
        self.decisions = 0
        self.batch_sizes = []
        self.accepts = []  # monotonic time of every accepted connection
        self.stopped = False
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", port or 0))
        self.port = self.lsock.getsockname()[1]
        self.lsock.listen(128)
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def _accept_loop(self):
        n = 0
        while not self.stopped:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            if self.stopped:
                s.close()
                return
            n += 1
            c = _Conn(self, s, n)
            with self.lock:
                self.accepts.append(time.monotonic())
                self.live.add(c)
            threading.Thread(target=c.run, daemon=True).start()

    def count(self, name):
        with self.lock:
            return self.commands.get(name, 0)

    def connections(self):
        with self.lock:
            return len(self.live)

    def drop_connections(self):
        """Closes every client connection (like a Redis restart), keeps listening."""
        with self.lock:
            conns = list(self.live)
        for c in conns:
            c.close()

    def stop(self):
        self.stopped = True
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        try:
            self.lsock.close()
        except OSError:
            pass
        self.drop_connections()
