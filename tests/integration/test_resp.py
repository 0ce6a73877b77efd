"""RESP on the daemon's ports, driven by real Redis clients (redis-cli from
Debian's redis-tools, also with -3, redis-py from Debian's python3-redis)
and by raw bytes: decisions to the limit and past it, the connect-time
commands clients send, HELLO 3's switch to RESP3, MULTI refused with
nothing charged, pipelining, and hostile framing (an error and a close,
never an allocation or a hang)."""

import os
import subprocess
import sys
import time
import unittest

from harness import REDIS_CLI, SRCDIR, DaemonTest, RawSocket, free_port, run_cli
import resp
from resp import RespError

try:
    import redis
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis

POLICIES = {"reply": "3/60s", "big": "100000/60s",
            "up": "{algorithm: funnel, capacity: 15, rate: 30/60s}"}


class RawResp(RawSocket):
    """A socket speaking RESP2 bytes, for what clients would never send."""

    def read(self, n=1, timeout=5.0):
        """n replies, parsed."""
        out = []
        end = time.monotonic() + timeout
        while len(out) < n:
            r = resp.parse(self.buf)
            if r is not None:
                out.append(r[0])
                self.buf = self.buf[r[1]:]
                continue
            self.recv_more(end - time.monotonic())
        return out


class RespTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port, self.admin_port = free_port(), free_port()
        self.daemon = self.start_daemon(
            POLICIES, port=self.port, admin=False, max_line=1024,
            listen=["127.0.0.1:%d" % self.port,
                    "{address: \"127.0.0.1:%d\", admin: true}" % self.admin_port])

    def raw(self, port=None):
        c = RawResp(port or self.port)
        self.addCleanup(c.close)
        return c

    def cli(self, *args, port=None):
        out = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(port or self.port)]
                             + list(args), capture_output=True, timeout=10)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.decode()

    # -- real clients

    def test_redis_cli_decides_to_the_limit(self):
        for i in range(3):
            lines = self.cli("ALLOW", "alice", "reply").split()
            self.assertEqual(lines[:4], ["1", "3", str(2 - i), "0"], lines)
        lines = self.cli("ALLOW", "alice", "reply").split()
        self.assertEqual(lines[:3], ["0", "3", "0"], lines)
        self.assertGreater(int(lines[3]), 0, "a denial says when to retry: %r" % lines)
        # the line protocol sees the same state
        c = self.daemon.client()
        self.addCleanup(c.close)
        self.assertTrue(c.request("PEEK alice reply").startswith("DENIED 3 0 "))
        self.assertEqual(self.cli("PING").strip(), "PONG")
        self.assertIn("forbidden", self.cli("RESET", "alice", "reply"))
        self.assertEqual(self.cli("RESET", "alice", "reply", port=self.admin_port).strip(), "OK")
        self.assertEqual(self.cli("ALLOW", "alice", "reply").split()[:3], ["1", "3", "2"])
        self.assertIn("unknown-action", self.cli("ALLOW", "alice", "nosuch"))
        self.assertIn("bad-cost", self.cli("ALLOW", "alice", "reply", "0"))

    def test_redis_cli_interactive_start(self):
        """redis-cli in a terminal-less session reading commands from stdin,
        as a person would type them (it sends COMMAND DOCS first)."""
        out = subprocess.run([REDIS_CLI, "-p", str(self.port)], input=b"PING\nALLOW bob up\n",
                             capture_output=True, timeout=10)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.decode().split(), ["PONG", "1", "15", "14", "0", "2000"])

    def test_redis_py(self):
        r = redis.Redis(host="127.0.0.1", port=self.port, client_name="app-1",
                        socket_timeout=5)
        self.addCleanup(r.close)
        self.assertTrue(r.ping())
        got = [r.execute_command("ALLOW", "carol", "reply") for _ in range(4)]
        self.assertEqual(got[0], [1, 3, 2, 0, 60000])
        self.assertEqual([g[0] for g in got], [1, 1, 1, 0])
        self.assertGreater(got[3][3], 0)
        self.assertEqual(r.execute_command("PEEK", "carol", "reply", 2)[:3], [0, 3, 0])
        with self.assertRaises(redis.ResponseError) as e:
            r.execute_command("ALLOW", "carol", "nosuch")
        self.assertTrue(str(e.exception).startswith("unknown-action "), str(e.exception))
        with self.assertRaises(redis.ResponseError) as e:
            r.execute_command("RESET", "carol", "reply")
        self.assertTrue(str(e.exception).startswith("forbidden "), str(e.exception))
        admin = redis.Redis(host="127.0.0.1", port=self.admin_port, socket_timeout=5)
        self.addCleanup(admin.close)
        self.assertTrue(admin.execute_command("RESET", "carol", "reply"))
        self.assertEqual(r.execute_command("ALLOW", "carol", "reply")[:3], [1, 3, 2])
        # a pipeline of 1,000: in order, each decided once
        p = r.pipeline(transaction=False)
        for i in range(1000):
            p.execute_command("ALLOW", "dave", "big")
        got = p.execute()
        self.assertEqual([g[2] for g in got], list(range(99999, 98999, -1)))
        # what redis-py does for db != 0: refused, clearly
        with self.assertRaises(redis.ResponseError) as e:
            redis.Redis(port=self.port, db=1, socket_timeout=5).ping()
        self.assertIn("DB index is out of range", str(e.exception))

    # -- what clients send on connect

    def test_connect_time_commands(self):
        c = self.raw()
        c.send(resp.encode("HELLO", "4") + resp.encode("CLIENT", "SETNAME", "x")
               + resp.encode("CLIENT", "SETINFO", "LIB-NAME", "y") + resp.encode("SELECT", "0")
               + resp.encode("AUTH", "secret") + resp.encode("INFO")
               + resp.encode("COMMAND", "DOCS") + resp.encode("CONFIG", "GET", "save")
               + resp.encode("PING", "hello") + resp.encode("HELLO", "2", "SETNAME", "x")
               + resp.encode("HELLO", "2", "AUTH", "default", "secret"))
        (hello, setname, setinfo, select, auth, info, docs, config, ping, hello2,
         hello2auth) = c.read(11)
        self.assertEqual(dict(zip(hello2[0::2], hello2[1::2]))[b"server"], b"ratelimitd")
        self.assertIn("without any password configured", str(hello2auth))
        self.assertEqual(config, [])
        self.assertIsInstance(hello, RespError)
        self.assertTrue(str(hello).startswith("NOPROTO "), hello)
        self.assertEqual((setname, setinfo, select), ("OK", "OK", "OK"))
        self.assertIsInstance(auth, RespError)
        self.assertIn("without any password configured", str(auth))
        self.assertIn(b"loading:0\r\n", info)
        self.assertEqual(docs, [])
        self.assertEqual(ping, "PONG")

    def test_resp3_after_hello_3(self):
        """HELLO 3 answers a RESP3 map and switches what follows: the maps
        and INFO's text change type, decisions and errors do not; a HELLO
        3 whose AUTH fails switches nothing; HELLO 2 switches back."""
        c = self.raw()
        c.send(resp.encode("HELLO", "3", "AUTH", "default", "wrong")
               + resp.encode("CONFIG", "GET", "save") + resp.encode("HELLO", "3", "SETNAME", "n")
               + resp.encode("ALLOW", "r3", "reply") + resp.encode("CONFIG", "GET", "save")
               + resp.encode("COMMAND", "DOCS") + resp.encode("COMMAND") + resp.encode("NOPE")
               + resp.encode("INFO") + resp.encode("MALLOW", "r3", "reply", "r3b", "reply")
               + resp.encode("HELLO") + resp.encode("HELLO", "2") + resp.encode("CONFIG", "GET", "x"))
        (failed, config2, hello3, allow, config3, docs, command, nope, info, mallow, hello,
         hello2, config) = c.read(13)
        self.assertIn("without any password configured", str(failed))
        self.assertEqual(config2, [])  # still RESP2: the AUTH failed
        self.assertIsInstance(hello3, resp.Map)
        self.assertEqual((hello3[b"server"], hello3[b"proto"], hello3[b"mode"], hello3[b"modules"]),
                         (b"ratelimitd", 3, b"standalone", []))
        self.assertEqual(len(hello3), 7)
        self.assertEqual(allow, [1, 3, 2, 0, 60000])
        self.assertEqual((config3, docs, command), (resp.Map(), resp.Map(), []))
        self.assertIsInstance(config3, resp.Map)
        self.assertIsInstance(docs, resp.Map)
        self.assertTrue(str(nope).startswith("ERR unknown-command "), nope)
        self.assertIsInstance(info, resp.Verbatim)
        self.assertEqual(info.fmt, "txt")
        self.assertTrue(info.startswith(b"# Server\r\n") and b"loading:0\r\n" in info, info)
        self.assertEqual(mallow, [1, 3, 1, 0, 60000, 1])
        self.assertIsInstance(hello, resp.Map)  # HELLO alone: the version spoken
        self.assertEqual(hello[b"proto"], 3)
        self.assertEqual(dict(zip(hello2[0::2], hello2[1::2]))[b"proto"], 2)
        self.assertEqual(hello2[:2], [b"server", b"ratelimitd"])
        self.assertEqual(config, [])
        self.assertNotIsInstance(config, resp.Map)

    def test_redis_cli_resp3(self):
        """redis-cli -3 (HELLO 3 first) decides, and reads RESP3's maps."""
        def cli3(*args):
            out = subprocess.run([REDIS_CLI, "-3", "--no-raw", "-h", "127.0.0.1", "-p",
                                  str(self.port)] + list(args), capture_output=True, timeout=10)
            self.assertEqual(out.returncode, 0, out.stderr)
            return out.stdout.decode()
        self.assertEqual(cli3("ALLOW", "cli3", "reply").split(),
                         ["1)", "(integer)", "1", "2)", "(integer)", "3", "3)", "(integer)", "2",
                          "4)", "(integer)", "0", "5)", "(integer)", "60000"])
        hello = cli3("HELLO", "3")
        self.assertIn('1# "server" => "ratelimitd"', hello)
        self.assertIn('3# "proto" => (integer) 3', hello)

    def test_multi_charges_nothing(self):
        """redis-py's default pipeline (MULTI ... EXEC) gets an error that
        names pipeline(transaction=False), and no ALLOW in it is charged;
        a pipeline without MULTI decides."""
        r = redis.Redis(host="127.0.0.1", port=self.port)
        self.addCleanup(r.close)
        p = r.pipeline()
        for _ in range(2):
            p.execute_command("ALLOW", "tx", "reply")
        with self.assertRaises(redis.ResponseError) as e:
            p.execute()
        self.assertIn("pipeline(transaction=False)", str(e.exception))
        self.assertEqual(r.execute_command("PEEK", "tx", "reply")[2], 3)
        p = r.pipeline(transaction=False)
        for _ in range(2):
            p.execute_command("ALLOW", "tx", "reply")
        self.assertEqual([x[2] for x in p.execute()], [2, 1])
        # raw: refused until EXEC or DISCARD, then decided again
        c = self.raw()
        c.send(resp.encode("MULTI") + resp.encode("ALLOW", "tx2", "reply") + resp.encode("EXEC")
               + resp.encode("EXEC") + resp.encode("MULTI") + resp.encode("DISCARD")
               + resp.encode("ALLOW", "tx2", "reply"))
        multi, queued, execd, exec2, multi2, discard, allow = c.read(7)
        self.assertTrue(str(multi).startswith("ERR unknown-command MULTI is not supported"), multi)
        self.assertTrue(str(queued).startswith("ERR unknown-command not run"), queued)
        self.assertTrue(str(execd).startswith("EXECABORT Transaction discarded"), execd)
        self.assertEqual(str(exec2), "ERR syntax EXEC without MULTI")
        self.assertEqual(discard, "OK")
        self.assertEqual(allow, [1, 3, 2, 0, 60000])

    def test_errors_keep_the_connection(self):
        c = self.raw()
        c.send(resp.encode("NOPE") + resp.encode("ALLOW", "u") + resp.encode("ALLOW", "", "reply")
               + resp.encode("ALLOW", "u" * 513, "reply") + resp.encode("CLIENT", "KILL")
               + resp.encode("ALLOW", "u", "reply", "-1") + resp.encode("PING"))
        got = c.read(7)
        codes = [str(g).split()[:2] for g in got[:6]]
        self.assertEqual(codes, [["ERR", "unknown-command"], ["ERR", "syntax"],
                                 ["ERR", "bad-user"], ["ERR", "bad-user"],
                                 ["ERR", "unknown-command"], ["ERR", "bad-cost"]])
        self.assertEqual(got[6], "PONG")

    def test_binary_user(self):
        """A user is any bytes in RESP, blanks and CRLF included; a distinct
        user is a distinct limit."""
        c = self.raw()
        for u in (b"a b", b"a\r\nb", b"a}b", b"a"):
            c.send(resp.encode("ALLOW", u, "reply"))
            self.assertEqual(c.read()[0][:3], [1, 3, 2], u)

    def test_quit_and_empty_arrays(self):
        c = self.raw()
        c.send(b"*0\r\n*-1\r\n" + resp.encode("PING") + resp.encode("QUIT")
               + resp.encode("PING"))
        self.assertEqual(c.read(2), ["PONG", "OK"])
        self.assertTrue(c.closed(), "QUIT closes the connection")
        self.assertEqual(c.buf, b"", "nothing after QUIT's +OK")

    def test_byte_by_byte(self):
        c = self.raw()
        data = resp.encode("ALLOW", "erin", "reply") + resp.encode("PING")
        for b in data:
            c.send(bytes([b]))
        self.assertEqual(c.read(2), [[1, 3, 2, 0, 60000], "PONG"])

    def test_deep_pipeline_backpressure(self):
        """20,000 requests sent before reading any reply: every one answered
        in order (reading pauses while replies are owed)."""
        c = self.raw()
        n = 20000
        c.send(b"".join(resp.encode("PEEK", "p%d" % (i % 7), "big") for i in range(n)))
        got = c.read(n, timeout=60)
        self.assertTrue(all(g == [1, 100000, 100000, 0, 0] for g in got), got[:3])

    # -- hostile framing: an error, then a close

    def assertFatal(self, data, code):
        c = self.raw()
        c.send(data)
        err = c.read()[0]
        self.assertIsInstance(err, RespError, data[:40])
        self.assertEqual(str(err).split()[:2], ["ERR", code], err)
        self.assertTrue(c.closed(), "closed after %r" % data[:40])

    def test_hostile_framing(self):
        self.assertFatal(b"*2147483647\r\n", "syntax")
        self.assertFatal(b"*99999999999\r\n", "syntax")
        self.assertFatal(b"*1\r\n$-5\r\n", "syntax")
        self.assertFatal(b"*1\r\n$2147483647\r\n", "line-too-long")
        self.assertFatal(b"*1\r\n$1025\r\n", "line-too-long")
        self.assertFatal(b"*2\r\n$4\r\nPING\r\n+OK\r\n", "syntax")
        self.assertFatal(b"*1\r\n$4\r\nPINGxx", "syntax")
        # more arguments than the longest command (MALLOW, 8 pairs, a cost)
        self.assertFatal(b"*19\r\n" + b"$1\r\na\r\n" * 19, "syntax")
        self.assertFatal(b"*1x\r\n", "syntax")
        # a request that never ends within max_line (1024)
        self.assertFatal(b"*3\r\n$5\r\nALLOW\r\n$1000\r\n" + b"u" * 1000 + b"\r\n$900\r\n"
                         + b"r" * 600, "line-too-long")
        # the daemon still serves others
        self.assertEqual(self.cli("PING").strip(), "PONG")

    def test_throttle_off_by_default(self):
        out = self.cli("CL.THROTTLE", "k", "5", "30", "60")
        self.assertIn("unknown-command", out)
        self.assertIn("throttle", out)

    def test_a_line_client_is_not_taken_for_resp(self):
        c = self.daemon.client()
        self.addCleanup(c.close)
        self.assertEqual(c.request("PING"), "PONG")
        self.assertTrue(c.request("*3").startswith("ERR unknown-command"))


class ThrottleTest(DaemonTest):
    """CL.THROTTLE with throttle: {enabled: true}: redis-cell's command and
    reply shape, decided by the funnel in Redis."""

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port = free_port()
        self.daemon = self.start_daemon(
            POLICIES, port=self.port,
            throttle="{enabled: true, max_burst: 1000, max_period: 1h}")

    def cli(self, *args):
        out = subprocess.run([REDIS_CLI, "-p", str(self.port)] + [str(a) for a in args],
                             capture_output=True, timeout=10)
        return out.stdout.decode().split()

    def test_like_redis_cell(self):
        """max_burst 5, 30 per 60 s (a unit back every 2 s): 6 at once,
        remaining 5 down to 0, reset_after growing by 2 s a unit; the 7th
        is limited, retry_after 1 (just under 2 s, cut to whole seconds)."""
        got = [[int(x) for x in self.cli("CL.THROTTLE", "user123", 5, 30, 60)]
               for _ in range(7)]
        self.assertEqual([g[:4] for g in got[:6]], [[0, 6, r, -1] for r in range(5, -1, -1)])
        self.assertEqual(got[0][4], 2)
        for k in range(1, 6):  # 2 s more a unit, minus the time gone by
            self.assertIn(got[k][4], (2 * k + 1, 2 * k + 2), got)
        self.assertEqual(got[6][:3], [1, 6, 0])
        self.assertIn(got[6][3], (0, 1), got[6])
        # quantity 0 looks and never limits; more than the burst never passes
        self.assertEqual([int(x) for x in self.cli("CL.THROTTLE", "user123", 5, 30, 60, 0)][:4],
                         [0, 6, 0, -1])
        self.assertEqual([int(x) for x in self.cli("CL.THROTTLE", "fresh", 5, 30, 60, 7)][:4],
                         [1, 6, 6, -1])
        self.assertEqual([int(x) for x in self.cli("CL.THROTTLE", "fresh", 5, 30, 60, 6)][:3],
                         [0, 6, 0])
        # its keys live under the namespace, never a policy's
        self.assertEqual(sorted(self.redis.call("KEYS", "*cl.throttle*")),
                         [b"rl:{cl.throttle:fresh}:f", b"rl:{cl.throttle:user123}:f"])

    def test_redis_py_and_bounds(self):
        r = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        self.addCleanup(r.close)
        self.assertEqual(r.execute_command("CL.THROTTLE", "k", 0, 1, 10), [0, 1, 0, -1, 10])
        got = r.execute_command("CL.THROTTLE", "k", 0, 1, 10)
        self.assertEqual(got[:3], [1, 1, 0])
        self.assertIn(got[3], (9, 10))
        for args, word in [(("k", 1001, 1, 10), "max_burst"), (("k", 1, 0, 10), "count"),
                           (("k", 1, 1, 3601), "period"), (("k", 1, 1, 0), "period"),
                           (("k", -1, 1, 10), "integers"), (("k", 1, 1), "usage")]:
            with self.subTest(args=args):
                with self.assertRaises(redis.ResponseError) as e:
                    r.execute_command("CL.THROTTLE", *args)
                self.assertIn(word, str(e.exception))

    def test_docs_example(self):
        """The CL.THROTTLE example of proto/protocol.md, as written."""
        from test_docs import cli_session, code_blocks
        blocks = [b for b in code_blocks(os.path.join(SRCDIR, "proto", "protocol.md"))
                  if b.body and "CL.THROTTLE" in b.body[0]]
        self.assertEqual(len(blocks), 1)
        for port, args, want in cli_session(blocks[0]):
            self.assertEqual(port, 7379)
            self.assertEqual(self.cli(*args), want)

    def test_namespace_may_not_be_a_policy(self):
        path = os.path.join(self.tmpdir, "clash.yaml")
        with open(path, "w") as f:
            f.write("throttle: {enabled: true, namespace: reply}\npolicies:\n  reply: 5/60s\n")
        r = run_cli(["-t", "-c", path])
        self.assertEqual(r.returncode, 1)
        self.assertIn("is a policy's name too", r.stderr)


if __name__ == "__main__":
    unittest.main()
