"""A client refused at max_clients hears it in its own protocol, from real
clients: grpcio gets UNAVAILABLE "too-many-clients max_clients reached"
(not an HTTP/2 parse failure, and no reconnect storm), redis-py a
ResponseError on a line port, a line client its ERR line (also when it says
nothing), curl the 503 with its JSON body even while its request body is
still being sent (the lingering close: no RST). The refusals under way are
bounded (64: past that, the line answer at once and the close), every one
is closed within about two seconds, a reload does not disturb them and
SIGTERM closes them."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

from harness import SLOW, DaemonTest, RawSocket, free_port, scrape_metrics, wait_until
from rls_client import PREFACE, RlsClient, frame, grpc, read_frames

try:
    import redis
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis

TEXT = b"too-many-clients max_clients reached"
LINE = b"ERR " + TEXT + b"\n"
RULES = "domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
CURL = "/usr/bin/curl"


class RefuseTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        rules = os.path.join(self.tmpdir, "rules.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        self.port, self.gport, self.hport, self.mport = (free_port(), free_port(), free_port(),
                                                         free_port())
        self.config = "\n".join([
            "listen:",
            "  - 127.0.0.1:%d" % self.port,
            "  - {address: 127.0.0.1:%d, protocol: grpc}" % self.gport,
            "  - {address: 127.0.0.1:%d, protocol: http}" % self.hport,
            "redis: {address: %s, timeout: 1s}" % self.redis.address,
            "metrics: {listen: 127.0.0.1:%d}" % self.mport,
            "envoy: {config: %s}" % rules,
            "max_clients: 1",
            "policies: {a: 5/1s}",
        ]) + "\n"
        self.daemon = self.start_daemon(config=self.config, port=self.port)
        self.held = self.hold_the_slot()

    def hold_the_slot(self):
        """A line client in the one slot (the readiness probe's connection
        may not be closed on the daemon's side yet: retried until it is)."""
        deadline = time.monotonic() + 5 * SLOW
        while True:
            c = self.daemon.client()
            self.addCleanup(c.close)
            if c.request("PING") == "PONG":
                break
            self.assertLess(time.monotonic(), deadline, "the slot never freed")
            c.close()
            time.sleep(0.05)
        # nothing refused from here on is the probe's
        self.refused0 = self.refused()
        return c

    def refused(self):
        return scrape_metrics(self.mport).get('ratelimitd_errors_total{code="too-many-clients"}', 0)

    def raw(self, port):
        r = RawSocket(port)
        self.addCleanup(r.close)
        return r

    def read_to_eof(self, r, timeout=5.0):
        """Everything r receives until the daemon's close, which must be a
        FIN (a reset loses what was sent)."""
        r.sock.settimeout(timeout)
        while True:
            d = r.sock.recv(65536)  # ConnectionResetError fails the test
            if not d:
                return r.buf
            r.buf += d

    @staticmethod
    def answered_already(r):
        """r has bytes waiting now (kept in r.buf)."""
        r.sock.setblocking(False)
        try:
            r.buf += r.sock.recv(65536)
            return True
        except BlockingIOError:
            return False
        finally:
            r.sock.setblocking(True)

    def test_grpcio_gets_unavailable_too_many_clients(self):
        c = RlsClient(self.gport)
        self.addCleanup(c.close)
        t = time.monotonic()
        with self.assertRaises(grpc.RpcError) as cm:
            c.call("web", [[("user", "u1")]], timeout=5 * SLOW)
        e = cm.exception
        self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.debug_error_string())
        self.assertEqual(e.details(), TEXT.decode(), e.debug_error_string())
        self.assertLess(time.monotonic() - t, 2 * SLOW, "answered after the wait, not at once")
        # one refused connection (a GOAWAY alone makes grpcio reconnect at once,
        # again and again: thousands in a second)
        time.sleep(0.3)
        self.assertLessEqual(self.refused() - self.refused0, 2)
        # the slot holder is served meanwhile
        self.assertEqual(self.held.request("PING"), "PONG")

    def test_http2_client_that_opens_no_stream(self):
        """A client that sends the preface and no call: after about a
        second, a GOAWAY naming no stream (ENHANCE_YOUR_CALM, the text as
        debug data) after the SETTINGS and its acknowledgement, then a close."""
        r = self.raw(self.gport)
        r.send(PREFACE + frame(4, 0, 0))
        t = time.monotonic()
        frames = read_frames(r.sock)
        self.assertGreater(time.monotonic() - t, 0.5)
        self.assertEqual([(f[0], f[1]) for f in frames], [(4, 0), (4, 1), (7, 0)], frames)
        goaway = frames[2][3]
        self.assertEqual(int.from_bytes(goaway[0:4], "big"), 0)
        self.assertEqual(int.from_bytes(goaway[4:8], "big"), 11)  # ENHANCE_YOUR_CALM
        self.assertEqual(goaway[8:], TEXT)

    def test_redis_py_gets_response_error(self):
        r = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5 * SLOW)
        self.addCleanup(r.close)
        with self.assertRaises(redis.exceptions.ResponseError) as cm:
            r.execute_command("PING")
        # redis-py drops the "ERR " of an error reply
        self.assertEqual(str(cm.exception), TEXT.decode())
        # and on the wire: one RESP error, then a FIN
        raw = self.raw(self.port)
        raw.send(b"*1\r\n$4\r\nPING\r\n")
        self.assertEqual(self.read_to_eof(raw), b"-ERR " + TEXT + b"\r\n")

    def test_line_client(self):
        # one that speaks first: answered at once
        r = self.raw(self.port)
        t = time.monotonic()
        r.send(b"ALLOW u a\n")
        self.assertEqual(self.read_to_eof(r), LINE)
        self.assertLess(time.monotonic() - t, 0.9 * SLOW)
        # one that waits to be spoken to: the line answer after the wait
        r = self.raw(self.port)
        self.assertEqual(self.read_to_eof(r), LINE)
        self.assertEqual(self.refused() - self.refused0, 2)

    def test_http_503_while_a_body_is_sent(self):
        """The request (and 1 MiB of body) is unread when the daemon
        answers: closed at once, the socket sends an RST. curl reads the
        503 while it sends and gets it anyway on loopback; a client that
        sends its whole request before reading (http.client) got the RST
        instead of the 503."""
        conn = http.client.HTTPConnection("127.0.0.1", self.hport, timeout=5 * SLOW)
        self.addCleanup(conn.close)
        conn.request("POST", "/v1/allow?user=u&action=a", body=b"x" * (1 << 20))
        r = conn.getresponse()
        self.assertEqual(r.status, 503)
        self.assertEqual(json.loads(r.read()), {"error": "too-many-clients",
                                                "message": "max_clients reached"})
        body = os.path.join(self.tmpdir, "body")
        with open(body, "wb") as f:
            f.write(b"x" * (1 << 20))
        for _ in range(5):
            out = subprocess.run(
                [CURL, "-sS", "-o", "-", "-w", "\n%{http_code}", "-H", "Expect:",
                 "--data-binary", "@" + body,
                 "http://127.0.0.1:%d/v1/allow?user=u&action=a" % self.hport],
                capture_output=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            text, code = out.stdout.rsplit(b"\n", 1)
            self.assertEqual(code, b"503")
            self.assertEqual(text, b'{"error":"too-many-clients","message":"max_clients reached"}\n')

    def test_bounded_and_closed_in_time(self):
        """100 clients that say nothing: 64 wait (each holds a descriptor),
        the others get the line answer at once; all are answered, and
        every descriptor is closed again within about two seconds."""
        fds0 = self.daemon.fd_count()
        t = time.monotonic()
        socks = [self.raw(self.port) for _ in range(100)]
        wait_until(lambda: self.refused() - self.refused0 == 100, 5 * SLOW, what="100 refused")
        # (+1: the last scrape's connection, perhaps not closed by the daemon yet)
        self.assertLessEqual(self.daemon.fd_count() - fds0, 64 + 1)
        now = [s for s in socks if self.answered_already(s)]
        if time.monotonic() - t < 0.9:  # else the first waits may be over (a slow box)
            self.assertEqual(len(now), 36)
        self.assertGreaterEqual(len(now), 36)
        self.assertTrue(all(s.buf == LINE for s in now), [s.buf for s in now])
        for s in socks:
            self.assertEqual(self.read_to_eof(s), LINE)
        wait_until(lambda: self.daemon.fd_count() <= fds0, 3 * SLOW, what="descriptors closed")
        self.assertEqual(self.held.request("PING"), "PONG")

    def test_reload_and_sigterm(self):
        r = self.raw(self.port)
        g = self.raw(self.gport)
        g.send(PREFACE + frame(4, 0, 0))
        wait_until(lambda: self.refused() - self.refused0 == 2, 5 * SLOW, what="2 refused")
        self.daemon.reload(self.config.replace("policies: {a: 5/1s}", "policies: {a: 6/1s}"))
        self.daemon.wait_log(r"reload: configuration .* loaded")
        r.send(b"PING\n")
        self.assertEqual(self.read_to_eof(r), LINE)
        # SIGTERM: the refusals under way are closed, the daemon exits
        s = self.raw(self.port)
        wait_until(lambda: self.refused() - self.refused0 == 3, 5 * SLOW, what="3 refused")
        t = time.monotonic()
        self.daemon.signal(signal.SIGTERM)
        self.assertTrue(s.closed(5))
        # unanswered, or answered when the metrics scrape above took its
        # whole second of waiting (a loaded box): closed by SIGTERM either way
        self.assertIn(s.buf, (b"", LINE))
        self.assertTrue(g.closed(5))
        # left to their timers they would close 2 s after their accept
        # (1 s of waiting, 1 s of draining)
        self.assertLess(time.monotonic() - t, 1.5 * SLOW)
        self.daemon.wait_exit(10)
        self.assertEqual(self.daemon.proc.returncode, 0)


if __name__ == "__main__":
    unittest.main()
