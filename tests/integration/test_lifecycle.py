"""Start-up, logging, SIGTERM/SIGINT: stop accepting, answer what is in
flight, exit 0."""

import os
import re
import signal
import socket
import time
import unittest

from harness import Client, DaemonTest, free_port


class LifecycleTest(DaemonTest):
    POLICIES = {"reply": "5/60s", "big": "100000/60s"}

    def test_ready_line_and_log_format(self):
        self.fresh(self.POLICIES)
        log = self.daemon.log()
        self.assertRegex(log, re.compile(r"^info: ratelimitd \S+ ready, listening on .*127\.0\.0\.1:%d"
                                         % self.daemon.port, re.M))
        with self.daemon.client() as c:
            c.pipeline(["ALLOW a reply", "FOO", "", "PING"])
        self.daemon.signal(signal.SIGTERM)
        self.assertEqual(self.daemon.wait_exit(10), 0)
        self.assertLogClean(self.daemon)
        with open(self.daemon.out_path, "rb") as f:
            self.assertEqual(f.read(), b"", "the daemon wrote to stdout")

    def test_policy_counts_in_the_log_agree_in_number(self):
        """The ready and reload lines say "1 policy" and "2 policies"."""
        self.fresh({"reply": "5/60s"})
        self.daemon.wait_log(r"^info: ratelimitd \S+ ready, listening on \S+ \(1 policy, redis ")
        for policies, words in (({"reply": "5/60s", "big": "9/1s"}, "2 policies"),
                                ({"big": "9/1s"}, "1 policy")):
            n = len(self.daemon.log_lines())
            self.daemon.reload(self.daemon_config(policies, port=self.daemon.port)[1])
            self.daemon.wait_log(r"^info: reload: configuration \S+ loaded \(%s\)$" % words,
                                 start=n)

    def test_ready_line_lists_every_listener(self):
        self.redis = self.start_redis()
        port = free_port()
        sock = os.path.join(self.tmpdir, "l.sock")
        self.daemon = self.start_daemon(self.POLICIES, port=port,
                                        listen=["127.0.0.1:%d" % port, "unix:" + sock])
        line = self.daemon.wait_log(r"^info: ratelimitd \S+ ready, listening on ")
        self.assertIn("127.0.0.1:%d" % port, line)
        self.assertIn(sock, line)

    def test_every_listener_serves_past_the_sixteenth(self):
        """No listen address is dropped, however many there are; each unix
        socket file is removed at exit."""
        self.redis = self.start_redis()
        port = free_port()
        socks = [os.path.join(self.tmpdir, "l%d.sock" % i) for i in range(19)]
        self.daemon = self.start_daemon(self.POLICIES, port=port,
                                        listen=["127.0.0.1:%d" % port] +
                                        ["unix:" + s for s in socks])
        for s in socks:
            with Client(unix=s) as c:
                self.assertEqual(c.request("PING"), "PONG", s)
        self.daemon.signal(signal.SIGTERM)
        self.assertEqual(self.daemon.wait_exit(10), 0)
        self.assertEqual([s for s in socks if os.path.exists(s)], [])

    def check_signal_idle(self, sig):
        self.fresh(self.POLICIES)
        idle = self.daemon.client()
        self.addCleanup(idle.close)
        self.assertEqual(idle.request("PING"), "PONG")
        t = time.monotonic()
        self.daemon.signal(sig)
        self.assertEqual(self.daemon.wait_exit(10), 0, self.daemon.log())
        self.assertLess(time.monotonic() - t, 5.0)
        self.assertTrue(idle.closed_by_peer(2), "idle client not closed at exit")
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", self.daemon.port), timeout=1).close()

    def test_sigterm_idle(self):
        self.check_signal_idle(signal.SIGTERM)

    def test_sigint_idle(self):
        self.check_signal_idle(signal.SIGINT)

    def check_signal_inflight(self, sig):
        """Requests waiting on Redis when the signal comes get their real
        answers; new connections are no longer served; exit status 0."""
        self.fresh(self.POLICIES, redis_opts={"timeout": "3s"})
        th = self.redis.debug_sleep(1)
        clients = [self.daemon.client(timeout=10) for _ in range(5)]
        try:
            for i, c in enumerate(clients):
                c.send("PING", "ALLOW inflight%d reply" % i, "PEEK inflight%d reply" % i)
            for c in clients:
                self.assertEqual(c.readline(), "PONG")
            time.sleep(0.1)
            self.daemon.signal(sig)
            time.sleep(0.3)
            # no longer accepting: a new client is refused or never served
            try:
                with Client(port=self.daemon.port, timeout=1.5) as late:
                    late.send("PING")
                    try:
                        r = late.readline(1.5)
                    except Exception:  # noqa: BLE001 - closed or silent is fine
                        r = None
                    self.assertNotEqual(r, "PONG", "new connection served after %s" % sig)
            except OSError:
                pass
            for c in clients:
                self.assertDecision(c.readline(), "ALLOWED", 5, 4, 0, (59000, 60000))
                self.assertDecision(c.readline(), "ALLOWED", 5, 4, 0)
        finally:
            for c in clients:
                c.close()
        self.assertEqual(self.daemon.wait_exit(10), 0, self.daemon.log())
        th.join(5)
        self.assertEqual(th.reply, "OK")
        self.assertEqual(len(self.redis.keys("rl:*")), 5)

    def test_sigterm_inflight(self):
        self.check_signal_inflight(signal.SIGTERM)

    def test_sigint_inflight(self):
        self.check_signal_inflight(signal.SIGINT)

    def test_sigterm_pipelined_burst(self):
        """A burst already sent when SIGTERM arrives: the replies received
        are well-formed and in order, the connection is closed, exit 0, and
        every request the daemon executed was answered (as many ALLOWED
        replies as entries in Redis)."""
        self.fresh(self.POLICIES)
        c = self.daemon.client(timeout=10)
        self.addCleanup(c.close)
        self.assertEqual(c.request("PING"), "PONG")
        c.send(*["ALLOW burst big"] * 2000)
        time.sleep(0.002)
        self.daemon.signal(signal.SIGTERM)
        got = []
        closed = False
        try:
            while len(got) < 2000:
                got.append(c.readline(10))
        except Exception:  # noqa: BLE001 - EOF after the in-flight work is expected
            closed = c.eof
        self.assertEqual(self.daemon.wait_exit(10), 0, self.daemon.log())
        self.assertTrue(closed or len(got) == 2000, "connection neither closed nor answered")
        for i, r in enumerate(got):
            self.assertDecision(r, "ALLOWED", 100000, 100000 - 1 - i, 0)
        executed = self.redis.call("ZCARD", "rl:{big:burst}:s60000")
        self.assertEqual(executed, len(got), "requests executed in Redis but never answered")

    def test_sigterm_with_redis_down(self):
        self.redis = self.start_redis()
        self.daemon = self.start_daemon(self.POLICIES, redis_opts={"timeout": "100ms"})
        self.redis.stop()
        with self.daemon.client() as c:
            self.assertEqual(c.request("ALLOW x reply"), "ALLOWED 5 -1 0 -1")
        t = time.monotonic()
        self.daemon.signal(signal.SIGTERM)
        self.assertEqual(self.daemon.wait_exit(10), 0, self.daemon.log())
        self.assertLess(time.monotonic() - t, 3.0)

    def test_sigterm_with_redis_frozen_inflight(self):
        """In-flight requests on a hung Redis still end at redis.timeout."""
        self.redis = self.start_redis()
        self.daemon = self.start_daemon(self.POLICIES, redis_opts={"timeout": "300ms"},
                                        on_store_error="deny")
        self.redis.sigstop()
        self.addCleanup(self.redis.sigcont)
        with self.daemon.client() as c:
            c.send("ALLOW fz reply")
            time.sleep(0.05)
            self.daemon.signal(signal.SIGTERM)
            self.assertEqual(c.readline(5), "DENIED 5 -1 1000 -1")
        self.assertEqual(self.daemon.wait_exit(10), 0, self.daemon.log())

    def notify_socket(self):
        path = os.path.join(self.tmpdir, "notify.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        s.settimeout(10)
        self.addCleanup(s.close)
        return path, s

    def notes(self, s):
        msg = s.recv(4096).decode()
        return dict(ln.split("=", 1) for ln in msg.split("\n") if "=" in ln)

    def test_systemd_notify(self):
        """READY=1 once listening; RELOADING=1 + MONOTONIC_USEC then READY=1
        around a reload (a failed one too); STOPPING=1 at SIGTERM."""
        path, s = self.notify_socket()
        self.redis = self.start_redis()
        self.daemon = self.start_daemon(self.POLICIES, wait=False, env={"NOTIFY_SOCKET": path})
        n = self.notes(s)
        self.assertEqual(n.get("READY"), "1", n)
        # READY comes after the listener is up
        with self.daemon.client() as c:
            self.assertEqual(c.request("PING"), "PONG")
        for text in (self.daemon.config_text.replace("5/60s", "6/60s"), "policies: [broken\n"):
            self.daemon.reload(text)
            n = self.notes(s)
            self.assertEqual(n.get("RELOADING"), "1", n)
            usec = int(n["MONOTONIC_USEC"])
            now = time.monotonic_ns() // 1000
            self.assertLess(abs(now - usec), 5000000, "MONOTONIC_USEC not CLOCK_MONOTONIC")
            n = self.notes(s)
            self.assertEqual(n.get("READY"), "1", "no READY=1 after reload: %r" % n)
        self.daemon.signal(signal.SIGTERM)
        n = self.notes(s)
        self.assertEqual(n.get("STOPPING"), "1", n)
        self.assertEqual(self.daemon.wait_exit(10), 0)

    def test_survives_client_floods_and_garbage(self):
        self.fresh(self.POLICIES)
        for payload in (b"\x00" * 5000 + b"\n", bytes(range(256)) * 20, b"\r\n" * 3000,
                        b"ALLOW " * 1000, b"\xff\xfe\n" * 100):
            with self.daemon.client() as c:
                try:
                    c.sendraw(payload)
                    time.sleep(0.05)
                except OSError:
                    pass
        with self.daemon.client() as c:
            self.assertEqual(c.request("PING"), "PONG")
            self.assertDecision(c.request("ALLOW ok reply"), "ALLOWED", 5, 4)
        self.assertTrue(self.daemon.running())
        self.assertLogClean(self.daemon)


if __name__ == "__main__":
    unittest.main()
