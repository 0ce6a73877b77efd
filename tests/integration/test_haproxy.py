"""HAProxy's SPOE (listen protocol: spoe) with the real HAProxy 2.6 of
Debian 12, configured with docs/proxies.md's "HAProxy (SPOE)" blocks as
written (addresses and the SPOE file's path swapped for the test's), in
front of a small application: 200 until the limit, then 429 with
Retry-After and the RateLimit fields; two HAProxy processes admit exactly
the limit between them; ratelimitd stopped lets requests pass within
timeout processing and the limit holds again once it is back; Redis
stopped gives on_store_error's answer; option spop-check marks the agent
up. Then SPOP itself on a raw socket: the HELLO's answer, ACKs echoing
their ids in order, errors as variables, and AGENT-DISCONNECT's status
codes, idle_timeout's (2) included."""

import http.client
import os
import shutil
import socket
import struct
import threading
import time
import unittest

from harness import DaemonTest, free_port, wait_until
import test_proxies
from test_proxies import doc_block

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
SPOE_FILE = "/etc/haproxy/ratelimit-spoe.conf"


class HaproxyTest(DaemonTest):
    POLICIES = {"login": "3/60s"}
    # test_proxies.py's: the application, a proxy run and waited for, a
    # request from a client address, the limit checked from one
    start_app = test_proxies.ProxiesTest.start_app
    run_proxy = test_proxies.ProxiesTest.run_proxy
    request = test_proxies.ProxiesTest.request
    check_limits = test_proxies.ProxiesTest.check_limits

    def setUp(self):
        DaemonTest.setUp(self)
        self.redis = self.start_redis()
        self.rl_spoe = free_port()
        self.daemon = self.start_rl(self.POLICIES)
        self.app = self.start_app()

    def start_rl(self, policies):
        line = free_port()
        return self.start_daemon(
            policies, port=line, admin=False,
            listen=["127.0.0.1:%d" % line,
                    "{address: \"127.0.0.1:%d\", protocol: spoe}" % self.rl_spoe])

    def start_haproxy(self):
        """HAProxy with the doc's two blocks, in the test's directory: its
        port and its stats socket."""
        port = free_port()
        tmp = os.path.join(self.tmpdir, "haproxy-%d" % port)
        os.makedirs(tmp)
        spoe = os.path.join(tmp, "ratelimit-spoe.conf")
        with open(spoe, "w") as f:
            f.write(doc_block("haproxy", "haproxy-spoe") + "\n")
        main = doc_block("haproxy")
        for old, new in (("127.0.0.1:8000", "127.0.0.1:%d" % port),
                         ("127.0.0.1:3000", "127.0.0.1:%d" % self.app),
                         ("127.0.0.1:9000", "127.0.0.1:%d" % self.rl_spoe),
                         (SPOE_FILE, spoe)):
            self.assertIn(old, main)
            main = main.replace(old, new)
        sock = os.path.join(tmp, "admin.sock")
        path = os.path.join(tmp, "haproxy.cfg")
        with open(path, "w") as f:
            f.write("global\n    maxconn 256\n    stats socket %s level admin\n\n%s\n"
                    % (sock, main))
        self.run_proxy([HAPROXY, "-db", "-f", path], port, log=os.path.join(tmp, "haproxy.log"))
        return port, sock

    def haproxy_cmd(self, sock, cmd):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(sock)
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        return out.decode()

    def check_status(self, sock):
        """rl1's health check status in `show stat` (L7OK: SPOP HELLO answered)."""
        lines = self.haproxy_cmd(sock, "show stat").splitlines()
        head = lines[0].lstrip("# ").split(",")
        for ln in lines[1:]:
            row = dict(zip(head, ln.split(",")))
            if row.get("pxname") == "ratelimitd" and row.get("svname") == "rl1":
                return row["status"], row["check_status"]
        return None, None

    def test_limits_headers_and_health_check(self):
        port, sock = self.start_haproxy()
        got = self.check_limits(port)
        self.assertEqual(got[0][1]["ratelimit"], '"login";r=2;t=60')
        self.assertEqual(got[0][1]["ratelimit-policy"], '"login";q=3;w=60')
        self.assertEqual(got[3][1]["retry-after"], got[3][1]["ratelimit"].split("t=")[1])
        wait_until(lambda: self.check_status(sock) == ("UP", "L7OK"), 10, interval=0.1,
                   what="HAProxy's spop-check of ratelimitd: UP, L7OK")

    def test_two_haproxies_share_one_limit(self):
        self.daemon.stop()
        self.daemon = self.start_rl({"login": "25/60s"})
        ports = [self.start_haproxy()[0] for _ in range(2)]
        statuses = []
        lock = threading.Lock()

        def client(i):
            for _ in range(10):
                st = self.request(ports[i % 2], "127.0.0.1")[0]
                with lock:
                    statuses.append(st)
        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.assertEqual(len(statuses), 60)
        self.assertEqual(statuses.count(200), 25, statuses)
        self.assertEqual(statuses.count(429), 35, statuses)

    def test_ratelimitd_stopped_then_back(self):
        port, _ = self.start_haproxy()
        self.check_limits(port)
        self.daemon.stop()
        # refused connections: HAProxy's set-on-error, no decision: passes
        for source in ("127.0.0.1", "127.0.0.4"):
            t0 = time.monotonic()
            st, h, body = self.request(port, source)
            self.assertEqual((st, body), (200, b"hello\n"))
            self.assertNotIn("ratelimit", h)
            self.assertLess(time.monotonic() - t0, 1.5)
        # an agent that accepts and never answers: timeout processing
        # (500 ms in the doc), then the request passes
        mute = socket.socket()
        mute.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        mute.bind(("127.0.0.1", self.rl_spoe))
        mute.listen(64)
        t0 = time.monotonic()
        st, h, body = self.request(port, "127.0.0.1")
        took = time.monotonic() - t0
        mute.close()
        self.assertEqual((st, body), (200, b"hello\n"))
        self.assertGreaterEqual(took, 0.45)
        self.assertLess(took, 1.6)
        # back: the counts were in Redis, 127.0.0.1 is still denied
        self.daemon.start()
        wait_until(lambda: self.request(port, "127.0.0.1")[0] == 429, 10, interval=0.1,
                   what="HAProxy limiting again through the restarted ratelimitd")

    def test_redis_stopped_on_store_error(self):
        self.daemon.stop()
        self.daemon = self.start_rl({"login": "{limits: [3/60s], on_store_error: error}",
                                     "open": "{limits: [3/60s], on_store_error: allow}"})
        port, _ = self.start_haproxy()
        self.assertEqual(self.request(port, "127.0.0.1")[0], 200)
        self.redis.stop()
        for _ in range(2):
            st, h, _ = self.request(port, "127.0.0.1")
            self.assertEqual(st, 503)  # error=store-unavailable: the doc's deny 503
        # on_store_error: allow is a decision: allowed (raw SPOP, below)
        s = spop_connect(self.rl_spoe)
        self.addCleanup(s.close)
        self.assertEqual(notify(s, 1, 1, [("action", "open"), ("user", "u")])[1]["allowed"], 1)
        self.assertEqual(notify(s, 1, 2, [("action", "login"), ("user", "u")])[1]["error"],
                         "store-unavailable")


# ---- SPOP on a raw socket (HAProxy's encoding, SPOE.txt) ----

def varint(v):
    if v < 240:
        return bytes([v])
    out = [(v | 240) & 0xFF]
    v = (v - 240) >> 4
    while v >= 128:
        out.append((v | 128) & 0xFF)
        v = (v - 128) >> 7
    out.append(v)
    return bytes(out)


def read_varint(b, i):
    v = b[i]
    i += 1
    if v < 240:
        return v, i
    shift = 4
    while True:
        x = b[i]
        i += 1
        v += x << shift
        shift += 7
        if x < 128:
            return v, i


def sstr(s):
    s = s.encode() if isinstance(s, str) else s
    return varint(len(s)) + s


def typed(v):
    if isinstance(v, bool):
        return bytes([1 | (0x10 if v else 0)])
    if isinstance(v, int):
        return bytes([4]) + varint(v & 0xFFFFFFFFFFFFFFFF)
    if isinstance(v, tuple):  # ("ipv4", bytes)
        return bytes([6]) + v[1]
    return bytes([8]) + sstr(v)


def frame(ftype, payload, sid=0, fid=0, flags=1):
    body = bytes([ftype]) + struct.pack(">I", flags) + varint(sid) + varint(fid) + payload
    return struct.pack(">I", len(body)) + body


def kvlist(items):
    return b"".join(sstr(k) + typed(v) for k, v in items)


def hello(max_frame=16380, caps="pipelining,async", health=None):
    items = [("supported-versions", "2.0"), ("max-frame-size", max_frame), ("capabilities", caps)]
    if health is not None:
        items.append(("healthcheck", health))
    return frame(1, kvlist(items))


def notify_frame(sid, fid, args, message="ratelimit"):
    return frame(3, sstr(message) + bytes([len(args)]) + kvlist(args), sid, fid)


def read_value(b, i):
    t = b[i]
    i += 1
    if t & 15 == 4:
        v, i = read_varint(b, i)
        return (v - (1 << 64) if v >= 1 << 63 else v), i
    if t & 15 == 3:
        return read_varint(b, i)
    if t & 15 == 8:
        n, i = read_varint(b, i)
        return b[i:i + n].decode(), i + n
    raise AssertionError("type %d" % t)


def read_frame(s):
    """(type, sid, fid, payload dict): a KV-LIST, or an ACK's set-vars by name."""
    def recv(n):
        out = b""
        while len(out) < n:
            c = s.recv(n - len(out))
            if not c:
                raise EOFError
            out += c
        return out
    n = struct.unpack(">I", recv(4))[0]
    b = recv(n)
    ftype = b[0]
    sid, i = read_varint(b, 5)
    fid, i = read_varint(b, i)
    out = {}
    while i < len(b):
        if ftype == 103:  # set-var: action 1, 3 args, scope txn
            assert b[i:i + 3] == bytes([1, 3, 2]), b[i:i + 3]
            i += 3
        k, i = read_varint(b, i)
        name = b[i:i + k].decode()
        out[name], i = read_value(b, i + k)
    return ftype, sid, fid, out


def spop_connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(hello())
    ftype, _, _, kv = read_frame(s)
    assert ftype == 101, ftype
    return s


def notify(s, sid, fid, args):
    s.sendall(notify_frame(sid, fid, args))
    ftype, rsid, rfid, kv = read_frame(s)
    assert (ftype, rsid, rfid) == (103, sid, fid), (ftype, rsid, rfid)
    return (rsid, rfid), kv


class SpopTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port, line = free_port(), free_port()
        self.daemon = self.start_daemon(
            {"login": "3/60s", "api": "100/60s"}, port=line, admin=False,
            listen=["127.0.0.1:%d" % line,
                    "{address: \"127.0.0.1:%d\", protocol: spoe}" % self.port])

    def connect(self, port=None):
        """A socket to the SPOE listener, closed when the test ends."""
        s = socket.create_connection(("127.0.0.1", port or self.port), timeout=5)
        self.addCleanup(s.close)
        return s

    def spop(self, port=None):
        """connect(), the HELLO answered."""
        s = self.connect(port)
        s.sendall(hello())
        self.assertEqual(read_frame(s)[0], 101)
        return s

    def closed_after(self, s):
        s.settimeout(5)
        self.assertEqual(s.recv(1), b"")

    def test_hello(self):
        s = self.connect()
        s.sendall(hello(max_frame=1000))
        ftype, sid, fid, kv = read_frame(s)
        self.assertEqual((ftype, sid, fid), (101, 0, 0))
        self.assertEqual(kv, {"version": "2.0", "max-frame-size": 1000,
                              "capabilities": "pipelining"})
        s = self.connect()
        s.sendall(hello(max_frame=65532, health=True))
        self.assertEqual(read_frame(s)[3]["max-frame-size"], 16384)
        self.closed_after(s)  # a health check: answered, closed

    def test_pipelined_notifies_acked_in_order_with_their_ids(self):
        s = self.spop()
        s.sendall(b"".join(notify_frame(7 + i, 100 + i, [("action", "login"), ("user", "u")])
                           for i in range(5)))
        acks = [read_frame(s) for _ in range(5)]
        self.assertEqual([(a[1], a[2]) for a in acks], [(7 + i, 100 + i) for i in range(5)])
        self.assertEqual([a[3]["allowed"] for a in acks], [1, 1, 1, 0, 0])
        reset = acks[0][3].pop("reset_ms")
        self.assertTrue(59000 < reset <= 60000, reset)
        self.assertEqual(acks[0][3], {"allowed": 1, "limit": 3, "remaining": 2,
                                      "retry_after_ms": 0, "window_ms": 60000,
                                      "policy": "login"})
        self.assertGreater(acks[3][3]["retry_after_ms"], 0)

    def test_users_costs_pairs_and_errors(self):
        s = self.spop()
        # an address (HAProxy's src) is its text, a cost counts
        _, kv = notify(s, 1, 1, [("action", "api"), ("user", ("ipv4", bytes([10, 0, 0, 9]))),
                                 ("cost", 40)])
        self.assertEqual(kv["remaining"], 60)
        c = self.daemon.client()
        self.addCleanup(c.close)
        self.assertTrue(c.request("PEEK 10.0.0.9 api").startswith("ALLOWED 100 60 "))
        # several pairs: all or nothing, the deciding pair named
        _, kv = notify(s, 1, 2, [("action", "api"), ("user", "10.0.0.9"),
                                 ("action", "login"), ("user", "m"), ("cost", 4)])
        self.assertEqual((kv["allowed"], kv["pair"]), (0, 2))
        self.assertTrue(c.request("PEEK 10.0.0.9 api").startswith("ALLOWED 100 60 "))
        for args, code in (([("action", "nope"), ("user", "u")], "unknown-action"),
                           ([("action", "login")], "bad-user"),
                           ([("action", "login"), ("user", "")], "bad-user"),
                           ([("action", "login"), ("user", "u"), ("cost", 0)], "bad-cost"),
                           ([("action", "login"), ("user", "u"), ("x", 1)], "syntax")):
            _, kv = notify(s, 3, 4, args)
            self.assertEqual(kv["error"], code, args)
            self.assertNotIn("allowed", kv)
            self.assertTrue(kv["message"])
        # another message: an error too, the connection goes on
        s.sendall(notify_frame(5, 6, [("a", 1)], message="other"))
        self.assertEqual(read_frame(s)[1:3], (5, 6))
        self.assertEqual(notify(s, 8, 9, [("action", "login"), ("user", "z")])[1]["allowed"], 1)

    def disconnect_status(self, data, with_hello=True):
        s = self.spop() if with_hello else self.connect()
        s.sendall(data)
        ftype, _, _, kv = read_frame(s)
        self.assertEqual(ftype, 102)
        self.closed_after(s)
        return kv["status-code"]

    def test_disconnects(self):
        self.assertEqual(self.disconnect_status(frame(2, kvlist([("status-code", 0),
                                                                 ("message", "bye")]))), 0)
        self.assertEqual(self.disconnect_status(b"GET / HTTP/1.1\r\n\r\n", False), 3)
        self.assertEqual(self.disconnect_status(b"\0\0\0\2xx", False), 4)
        self.assertEqual(self.disconnect_status(
            notify_frame(1, 1, [("action", "login"), ("user", "u")]), False), 4)
        self.assertEqual(self.disconnect_status(hello()), 4)  # a second HELLO
        self.assertEqual(self.disconnect_status(frame(1, kvlist([
            ("supported-versions", "1.0"), ("max-frame-size", 16380),
            ("capabilities", "")])), False), 8)
        self.assertEqual(self.disconnect_status(frame(1, kvlist([
            ("supported-versions", "2.0"), ("capabilities", "")])), False), 6)
        self.assertEqual(self.disconnect_status(
            frame(3, sstr("ratelimit") + b"\0", 1, 1, flags=0)), 10)  # a fragment
        self.assertEqual(self.disconnect_status(frame(3, b"\0" * 20000, 1, 1)[:64]), 3)
        # the size agreed in the HELLO bounds every frame after it
        s = self.connect()
        s.sendall(hello(max_frame=300))
        self.assertEqual(read_frame(s)[3]["max-frame-size"], 300)
        s.sendall(notify_frame(1, 1, [("action", "login"), ("user", "u" * 300)]))
        ftype, _, _, kv = read_frame(s)
        self.assertEqual((ftype, kv["status-code"]), (102, 3))
        self.closed_after(s)

    def test_idle_timeout_says_disconnect(self):
        """A connection idle for idle_timeout gets an AGENT-DISCONNECT with
        status 2 (timeout) before the close, not a bare close that HAProxy
        would take for an I/O error."""
        port, line = free_port(), free_port()
        self.start_daemon(
            {"login": "3/60s"}, port=line, admin=False, name="idle", idle_timeout="1s",
            listen=["127.0.0.1:%d" % line,
                    "{address: \"127.0.0.1:%d\", protocol: spoe}" % port])
        s = self.spop(port)
        self.assertEqual(notify(s, 3, 4, [("action", "login"), ("user", "u")])[1]["allowed"], 1)
        t0 = time.monotonic()
        ftype, sid, fid, kv = read_frame(s)
        self.assertGreater(time.monotonic() - t0, 0.5)
        self.assertEqual((ftype, sid, fid, kv["status-code"]), (102, 0, 0, 2))
        self.closed_after(s)


if __name__ == "__main__":
    unittest.main()
