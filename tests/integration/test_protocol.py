"""The line protocol: verbs, framing, pipelining, every ERR code, unix sockets."""

import os
import socket
import threading
import time
import unittest

from harness import Client, DaemonTest, free_port

POLICIES = {"reply": "5/60s", "big": "100000/60s",
            "up": "{algorithm: funnel, capacity: 15, rate: 30/60s}"}


def err_code(reply):
    parts = reply.split(" ", 2)
    assert parts[0] == "ERR" and len(parts) == 3 and parts[2].strip(), \
        "not 'ERR <code> <message>': %r" % reply
    return parts[1]


class ProtocolTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.sock_path = os.path.join(self.tmpdir, "rl.sock")
        self.redis = self.start_redis()
        port = None
        from harness import free_port
        port = free_port()
        self.daemon = self.start_daemon(
            POLICIES, port=port,
            listen=["127.0.0.1:%d" % port, "unix:" + self.sock_path], max_line=1024)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def assertErr(self, line, code, c=None):
        c = c or self.c
        reply = c.request(line) if isinstance(line, str) else self._raw(c, line)
        self.assertEqual(err_code(reply), code, "request %r -> %r" % (line, reply))
        # the connection stays usable after any ERR but line-too-long
        self.assertEqual(c.request("PING"), "PONG", "after %r" % (line,))

    def _raw(self, c, data):
        c.sendraw(data + b"\n")
        return c.readline()

    # ---- verbs

    def test_ping(self):
        self.assertEqual(self.c.request("PING"), "PONG")

    def test_allow_fields(self):
        self.assertDecision(self.c.request("ALLOW alice reply"), "ALLOWED", 5, 4, 0,
                            (59000, 60000))

    def test_allow_with_cost(self):
        self.assertDecision(self.c.request("ALLOW alice reply 3"), "ALLOWED", 5, 2, 0,
                            (59000, 60000))

    def test_peek_untouched(self):
        self.assertEqual(self.c.request("PEEK nobody reply"), "ALLOWED 5 5 0 0")

    def test_peek_consumes_nothing(self):
        self.c.request("ALLOW bob reply")
        for _ in range(3):
            self.assertDecision(self.c.request("PEEK bob reply"), "ALLOWED", 5, 4, 0,
                                (59000, 60000))
        self.assertDecision(self.c.request("ALLOW bob reply"), "ALLOWED", 5, 3, 0)

    def test_reset(self):
        for _ in range(5):
            self.c.request("ALLOW carol reply")
        self.assertDecision(self.c.request("ALLOW carol reply"), "DENIED", 5, 0)
        self.assertEqual(self.c.request("RESET carol reply"), "OK")
        self.assertEqual(self.c.request("PEEK carol reply"), "ALLOWED 5 5 0 0")
        self.assertDecision(self.c.request("ALLOW carol reply"), "ALLOWED", 5, 4, 0)

    def test_reset_untouched_is_ok(self):
        self.assertEqual(self.c.request("RESET ghost reply"), "OK")

    def test_quit(self):
        self.assertEqual(self.c.request("QUIT"), "BYE")
        self.assertTrue(self.c.closed_by_peer(2), "connection not closed after BYE")

    def test_quit_discards_pipelined_rest(self):
        self.c.send("PING", "QUIT", "PING", "ALLOW q reply")
        self.assertEqual(self.c.readlines(2), ["PONG", "BYE"])
        self.assertTrue(self.c.closed_by_peer(2))
        # nothing after QUIT was executed
        with self.daemon.client() as c2:
            self.assertEqual(c2.request("PEEK q reply"), "ALLOWED 5 5 0 0")

    # ---- tokenizing

    def test_verbs_case_insensitive(self):
        self.assertEqual(self.c.request("ping"), "PONG")
        self.assertEqual(self.c.request("PiNg"), "PONG")
        self.assertDecision(self.c.request("allow dave reply"), "ALLOWED", 5, 4)
        self.assertDecision(self.c.request("aLLoW dave reply"), "ALLOWED", 5, 3)
        self.assertDecision(self.c.request("peek dave reply"), "ALLOWED", 5, 3)
        self.assertEqual(self.c.request("reset dave reply"), "OK")
        self.assertEqual(self.c.request("Quit"), "BYE")

    def test_crlf(self):
        self.c.sendraw(b"PING\r\nALLOW erin reply\r\nPEEK erin reply 2\r\n")
        lines = [self.c.readline_bytes() for _ in range(3)]
        self.assertEqual(lines[0], b"PONG")
        self.assertDecision(lines[1].decode(), "ALLOWED", 5, 4)
        self.assertDecision(lines[2].decode(), "ALLOWED", 5, 4)

    def test_reply_line_ends(self):
        """Each reply is one line; no stray bytes between replies."""
        self.c.sendraw(b"PING\nPING\r\n")
        time.sleep(0.2)
        data = self.c.sock.recv(100)
        self.assertIn(data, (b"PONG\nPONG\n", b"PONG\r\nPONG\r\n"))

    def test_blanks(self):
        self.assertDecision(self.c.request("  ALLOW   frank\treply \t 2  "), "ALLOWED", 5, 3)
        self.assertDecision(self.c.request("\tPEEK\tfrank\treply\t"), "ALLOWED", 5, 3)
        self.assertEqual(self.c.request("   PING   "), "PONG")
        self.c.sendraw(b"  PING \r\n")
        self.assertEqual(self.c.readline(), "PONG")

    def test_cost_leading_zeros(self):
        self.assertDecision(self.c.request("ALLOW gina reply 03"), "ALLOWED", 5, 2)

    def test_cost_max(self):
        self.assertEqual(self.c.request("ALLOW hank reply 2147483647"), "DENIED 5 5 -1 0")

    def test_user_512_bytes_ok(self):
        u = "u" * 512
        self.assertDecision(self.c.request("ALLOW %s big" % u), "ALLOWED", 100000, 99999)

    def test_user_high_bytes_ok(self):
        self.c.sendraw(b"ALLOW \xc3\xa9\xff\x80 reply\n")
        self.assertDecision(self.c.readline(), "ALLOWED", 5, 4)

    # ---- errors

    def test_err_syntax(self):
        for line in ["", "   ", "\t", "ALLOW", "ALLOW alice", "ALLOW alice reply 1 2",
                     "PEEK", "PEEK alice", "PEEK alice reply 1 2", "RESET alice",
                     "RESET alice reply 1", "RESET", "PING extra", "QUIT now"]:
            self.assertErr(line, "syntax")

    def test_err_syntax_bytes(self):
        for raw in [b"PI\x00NG", b"ALLOW al\x00ice reply", b"ALLOW alice reply\x00",
                    b"PI\rNG", b"ALLOW a\rb reply", b"\x00", b"\r\r"]:
            self.assertErr(raw, "syntax")

    def test_control_bytes_are_user_bytes(self):
        """A user is any bytes but blanks, CR, LF and NUL: other control bytes
        (and 0x7f) belong to it, and distinct bytes are distinct users."""
        self.assertDecision(self._raw(self.c, b"ALLOW a\x01b reply 5"), "ALLOWED", 5, 0)
        self.assertDecision(self._raw(self.c, b"PEEK a\x02b reply"), "ALLOWED", 5, 5)
        self.assertDecision(self._raw(self.c, b"PEEK a\x01b reply"), "DENIED", 5, 0)
        self.assertDecision(self._raw(self.c, b"ALLOW \x1b[0m\x7f reply"), "ALLOWED", 5, 4)
        # elsewhere they are just wrong words
        self.assertErr(b"PING\x1b", "unknown-command")
        self.assertErr(b"\x07", "unknown-command")
        self.assertErr(b"ALLOW a reply \x02", "bad-cost")

    def test_err_unknown_command(self):
        for line in ["FOO", "ALLOWX a reply", "GET a", "PONG", "allow_ a reply"]:
            self.assertErr(line, "unknown-command")

    def test_err_unknown_action(self):
        for line in ["ALLOW alice nosuch", "PEEK alice nosuch", "RESET alice nosuch",
                     "ALLOW alice nosuch 3"]:
            self.assertErr(line, "unknown-action")

    def test_err_bad_cost(self):
        for cost in ["0", "-1", "abc", "2147483648", "99999999999999999999999", "+5", "1.5",
                     "5x", "0x10", "-0", "1e3", "00"]:
            self.assertErr("ALLOW alice reply %s" % cost, "bad-cost")
            self.assertErr("PEEK alice reply %s" % cost, "bad-cost")
        # nothing was consumed by the bad requests
        self.assertEqual(self.c.request("PEEK alice reply"), "ALLOWED 5 5 0 0")

    def test_err_bad_user(self):
        u = "u" * 513
        self.assertErr("ALLOW %s reply" % u, "bad-user")
        self.assertErr("PEEK %s reply" % u, "bad-user")
        self.assertErr("RESET %s reply" % u, "bad-user")

    def test_errors_do_not_break_pipeline(self):
        lines = ["PING", "FOO", "ALLOW ivy reply", "ALLOW ivy nosuch", "ALLOW ivy reply 0",
                 "", "PEEK ivy reply", "PING"]
        r = self.c.pipeline(lines)
        self.assertEqual(r[0], "PONG")
        self.assertEqual(err_code(r[1]), "unknown-command")
        self.assertDecision(r[2], "ALLOWED", 5, 4)
        self.assertEqual(err_code(r[3]), "unknown-action")
        self.assertEqual(err_code(r[4]), "bad-cost")
        self.assertEqual(err_code(r[5]), "syntax")
        self.assertDecision(r[6], "ALLOWED", 5, 4)
        self.assertEqual(r[7], "PONG")

    # ---- line length (max_line: 1024 in this config)

    def test_line_at_max_ok(self):
        line = "ALLOW u big %s" % ("0" * (1024 - len("ALLOW u big 1")) + "1")
        self.assertEqual(len(line), 1024)
        self.assertDecision(self.c.request(line), "ALLOWED", 100000, 99999)

    def test_line_too_long_then_close(self):
        line = "ALLOW u big %s" % ("0" * (1025 - len("ALLOW u big 1")) + "1")
        self.assertEqual(len(line), 1025)
        r = self.c.request(line)
        self.assertEqual(err_code(r), "line-too-long")
        self.assertTrue(self.c.closed_by_peer(2), "not closed after line-too-long")

    def test_line_too_long_without_newline(self):
        self.c.sendraw(b"PING\n" + b"A" * 5000)
        self.assertEqual(self.c.readline(), "PONG")
        self.assertEqual(err_code(self.c.readline()), "line-too-long")
        self.assertTrue(self.c.closed_by_peer(2))

    def test_line_too_long_answers_earlier_requests_first(self):
        self.c.send("ALLOW jay reply", "PING", "B" * 1100, "PING")
        self.assertDecision(self.c.readline(), "ALLOWED", 5, 4)
        self.assertEqual(self.c.readline(), "PONG")
        self.assertEqual(err_code(self.c.readline()), "line-too-long")
        self.assertTrue(self.c.closed_by_peer(2))

    def test_daemon_survives_line_too_long(self):
        self.c.sendraw(b"Z" * 100000)
        with self.daemon.client() as c2:
            self.assertEqual(c2.request("PING"), "PONG")

    # ---- pipelining and framing

    def test_pipeline_many_in_order(self):
        n = 1000
        lines = []
        for i in range(n):
            lines.append("ALLOW kim big" if i % 3 else ("PING" if i % 2 else "FOO %d" % i))
        self.c.sendraw("".join(ln + "\n" for ln in lines).encode())
        replies = self.c.readlines(n, timeout=30)
        remaining = 100000
        for i, (ln, r) in enumerate(zip(lines, replies)):
            if ln.startswith("ALLOW"):
                remaining -= 1
                self.assertDecision(r, "ALLOWED", 100000, remaining, 0)
            elif ln == "PING":
                self.assertEqual(r, "PONG", "reply %d" % i)
            else:
                self.assertEqual(err_code(r), "unknown-command", "reply %d" % i)

    def test_pipeline_mixed_users_in_order(self):
        lines = []
        for i in range(300):
            lines.append("ALLOW u%d big %d" % (i % 7, i % 5 + 1))
        replies = self.c.pipeline(lines, timeout=30)
        used = {}
        for ln, r in zip(lines, replies):
            _, u, _, cost = ln.split()
            used[u] = used.get(u, 0) + int(cost)
            self.assertDecision(r, "ALLOWED", 100000, 100000 - used[u], 0)

    def test_byte_at_a_time(self):
        script = b"PING\r\nALLOW lee reply 2\nPEEK lee reply\nFOO\n\nALLOW lee reply 0\nQUIT\n"
        for b in script:
            self.c.sendraw(bytes([b]))
            time.sleep(0.002)
        got = [self.c.readline() for _ in range(7)]
        self.assertEqual(got[0], "PONG")
        self.assertDecision(got[1], "ALLOWED", 5, 3, 0)
        self.assertDecision(got[2], "ALLOWED", 5, 3, 0)
        self.assertEqual(err_code(got[3]), "unknown-command")
        self.assertEqual(err_code(got[4]), "syntax")
        self.assertEqual(err_code(got[5]), "bad-cost")
        self.assertEqual(got[6], "BYE")
        self.assertTrue(self.c.closed_by_peer(2))

    def test_split_writes_same_as_whole(self):
        script = b"ALLOW mo up 3\nPEEK mo up\nALLOW mo reply\nRESET mo up\nPEEK mo up\n"
        self.c.sendraw(script)
        whole = self.c.readlines(5)
        with self.daemon.client() as c2:
            c2.request("RESET mo reply")
        c3 = self.daemon.client()
        self.addCleanup(c3.close)
        for i in range(0, len(script), 3):
            c3.sendraw(script[i:i + 3])
            time.sleep(0.001)
        split = c3.readlines(5)
        strip = [r.rsplit(" ", 1)[0] for r in whole]  # reset_ms may differ by a few ms
        self.assertEqual([r.rsplit(" ", 1)[0] for r in split], strip)

    def test_client_half_close_still_answered(self):
        self.c.send("ALLOW nia reply", "PING")
        self.c.sock.shutdown(socket.SHUT_WR)
        self.assertDecision(self.c.readline(), "ALLOWED", 5, 4)
        self.assertEqual(self.c.readline(), "PONG")

    def test_abrupt_disconnect_with_pending_requests(self):
        c = self.daemon.client()
        c.send(*["ALLOW olga big"] * 200)
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        c.close()  # RST
        time.sleep(0.3)
        self.assertEqual(self.c.request("PING"), "PONG")
        self.assertTrue(self.daemon.running())

    # ---- unix socket listener

    def test_unix_socket(self):
        u = Client(unix=self.sock_path)
        self.addCleanup(u.close)
        self.assertEqual(u.request("PING"), "PONG")
        self.assertDecision(u.request("ALLOW pat reply"), "ALLOWED", 5, 4)
        # same state as over TCP
        self.assertDecision(self.c.request("ALLOW pat reply"), "ALLOWED", 5, 3)
        self.assertEqual(err_code(u.request("BAD")), "unknown-command")
        self.assertEqual(u.request("QUIT"), "BYE")
        self.assertTrue(u.closed_by_peer(2))

    def test_many_connections_each_usable(self):
        clients = [self.daemon.client() for _ in range(40)]
        try:
            for i, c in enumerate(clients):
                c.send("ALLOW many%d reply" % i)
            for c in clients:
                self.assertDecision(c.readline(), "ALLOWED", 5, 4)
        finally:
            for c in clients:
                c.close()


class ListenerTest(DaemonTest):
    def test_ipv6_listener(self):
        self.redis = self.start_redis()
        port = free_port()
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
            port6 = s.getsockname()[1]
        self.daemon = self.start_daemon({"reply": "5/60s"}, port=port,
                                        listen=["127.0.0.1:%d" % port, "\"[::1]:%d\"" % port6])
        s6 = socket.create_connection(("::1", port6), timeout=5)
        try:
            s6.sendall(b"PING\nALLOW v6 reply\n")
            data = b""
            while data.count(b"\n") < 2:
                d = s6.recv(1000)
                if not d:
                    break
                data += d
        finally:
            s6.close()
        lines = data.decode().splitlines()
        self.assertEqual(lines[0], "PONG")
        self.assertDecision(lines[1], "ALLOWED", 5, 4)

    def test_slow_reader_does_not_block_others(self):
        """A client that pipelines a lot and does not read must not stall
        other clients; its replies all arrive, in order, once it reads."""
        self.fresh({"reply": "5/60s"})
        slow = self.daemon.client(timeout=30)
        self.addCleanup(slow.close)
        n = 100000
        sender = threading.Thread(target=lambda: slow.sendraw(b"PING\n" * n), daemon=True)
        sender.start()
        time.sleep(0.5)
        with self.daemon.client() as c:
            t = time.monotonic()
            self.assertEqual(c.request("PING"), "PONG")
            self.assertDecision(c.request("ALLOW other reply"), "ALLOWED", 5, 4)
            self.assertLess(time.monotonic() - t, 1.0)
        got = 0
        deadline = time.monotonic() + 30
        while got < n and time.monotonic() < deadline:
            self.assertEqual(slow.readline(), "PONG")
            got += 1
        sender.join(10)
        self.assertEqual(got, n)


class DefaultMaxLineTest(DaemonTest):
    def test_default_max_line_4096(self):
        self.fresh({"big": "100000/60s"})
        with self.daemon.client() as c:
            ok = "ALLOW %s big" % ("x" * 512)
            self.assertDecision(c.request(ok), "ALLOWED")
            # a line of 4096 bytes is framed (then rejected for its user length)
            line = "ALLOW %s big" % ("y" * (4096 - len("ALLOW  big")))
            self.assertEqual(err_code(c.request(line)), "bad-user")
            self.assertEqual(c.request("PING"), "PONG")
            line = "ALLOW %s big" % ("y" * (4097 - len("ALLOW  big")))
            self.assertEqual(err_code(c.request(line)), "line-too-long")
            self.assertTrue(c.closed_by_peer(2))


class AccessTest(DaemonTest):
    """Admin listeners, max_clients and idle_timeout."""

    def test_reset_only_on_admin_listener(self):
        self.redis = self.start_redis()
        port, admin_port = free_port(), free_port()
        listen = ["127.0.0.1:%d" % port,
                  '{address: "127.0.0.1:%d", admin: true}' % admin_port]
        self.daemon = self.start_daemon(POLICIES, port=port, listen=listen, admin=False)
        plain = self.daemon.client()
        admin = self.daemon.client(port=admin_port)
        self.addCleanup(plain.close)
        self.addCleanup(admin.close)
        self.assertDecision(plain.request("ALLOW a reply 5"), "ALLOWED", 5, 0)
        reply = plain.request("RESET a reply")
        self.assertEqual(err_code(reply), "forbidden", reply)
        self.assertEqual(plain.request("PING"), "PONG")
        # nothing was reset
        self.assertDecision(plain.request("PEEK a reply"), "DENIED", 5, 0)
        self.assertEqual(admin.request("RESET a reply"), "OK")
        self.assertDecision(plain.request("PEEK a reply"), "ALLOWED", 5, 5, 0, 0)
        # every other command works on both
        self.assertDecision(admin.request("ALLOW a reply"), "ALLOWED", 5, 4)

    def test_max_clients(self):
        self.redis = self.start_redis()
        self.daemon = self.start_daemon(POLICIES, max_clients=3)
        # the readiness probe's connection may not be closed on the daemon's
        # side yet: a refused client is retried until the 3 slots are ours
        held = []
        deadline = time.monotonic() + 5
        while len(held) < 3:
            c = self.daemon.client()
            self.addCleanup(c.close)
            reply = c.request("PING")
            if reply == "PONG":
                held.append(c)
                continue
            self.assertEqual(err_code(reply), "too-many-clients")
            self.assertLess(time.monotonic(), deadline, "slots never freed")
            time.sleep(0.05)
        extra = self.daemon.client()
        self.addCleanup(extra.close)
        self.assertEqual(err_code(extra.readline()), "too-many-clients")
        # the others are still served; once one leaves, a new client gets in
        self.assertEqual(held[0].request("PING"), "PONG")
        held[1].close()
        deadline = time.monotonic() + 5
        while True:
            c = self.daemon.client()
            self.addCleanup(c.close)
            try:
                if c.request("PING") == "PONG":
                    break
            except Exception:
                pass
            self.assertLess(time.monotonic(), deadline, "no slot freed")
            time.sleep(0.05)

    def test_idle_timeout(self):
        self.redis = self.start_redis()
        self.daemon = self.start_daemon(POLICIES, idle_timeout="1s")
        idle = self.daemon.client()
        busy = self.daemon.client()
        self.addCleanup(idle.close)
        self.addCleanup(busy.close)
        self.assertEqual(idle.request("PING"), "PONG")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.6:
            self.assertEqual(busy.request("PING"), "PONG")
            time.sleep(0.2)
        # the idle one was closed after ~1 s; the busy one is still served
        with self.assertRaises(Exception):
            idle.request("PING")
        self.assertEqual(busy.request("PING"), "PONG")


if __name__ == "__main__":
    unittest.main()
