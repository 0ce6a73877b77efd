"""Replies a real Redis will not send on demand, from a scripted fake Redis
(fakeredis.py): LOADING, BUSY, READONLY, MASTERDOWN, NOSCRIPT forever,
wrong-type and garbage replies, a reply that never comes, a connection
closed in the middle of a reply, a late reply; and reconnecting to a Redis
that accepts and drops connections.

Pass criterion everywhere: every request gets exactly one reply, within
redis.timeout + margin, per on_store_error; the daemon stays up; once the
fake answers properly again, decisions come from it (full service) and each
reply belongs to its own request (the fake echoes the number at the end of
the user name as <remaining>)."""

import re
import time
import unittest

from harness import STORE_MARGIN, SLOW, DaemonTest, wait_until

TIMEOUT_MS = 100
BOUND = TIMEOUT_MS / 1000.0 + STORE_MARGIN
POLICIES = {
    "pa": "{limits: [5/60s], on_store_error: allow}",
    "pd": "{limits: [7/60s], on_store_error: deny}",
    "pe": "{limits: [9/60s], on_store_error: error}",
    "ml": "{limits: [3/1s, 20/60s], on_store_error: deny}",
    "fu": "{algorithm: funnel, capacity: 15, rate: 30/60s, on_store_error: allow}",
}
CAP = {"pa": 5, "pd": 7, "pe": 9, "ml": 3, "fu": 15}
PERIOD = {"pa": 60000, "pd": 60000, "pe": 60000, "ml": 1000, "fu": 60000}
ACTIONS = sorted(POLICIES)

ERROR_REPLIES = [
    "LOADING Redis is loading the dataset in memory",
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
    "READONLY You can't write against a read only replica.",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "OOM command not allowed when used memory > 'maxmemory'.",
    "ERR Error running script (call to f_0123): @user_script:1: oops",
]


def ints(vals):
    return b"*%d\r\n" % len(vals) + b"".join(b":%d\r\n" % v for v in vals)


# Replies of the wrong shape: each must give every request of the batch its
# on_store_error answer, and leave the connection in sync.
WRONG_REPLIES = {
    "integer": b":1\r\n",
    "nil bulk": b"$-1\r\n",
    "nil array": b"*-1\r\n",
    "empty array": b"*0\r\n",
    "status": b"+OK\r\n",
    "bulk string": b"$5\r\nhello\r\n",
    "bulk strings array": lambda n: b"*%d\r\n" % (5 * n) + b"$1\r\n1\r\n" * (5 * n),
    "nested arrays": lambda n: b"*%d\r\n" % (5 * n) + b"*2\r\n:1\r\n:1\r\n" * (5 * n),
    "nil elements": lambda n: b"*%d\r\n" % (5 * n) + b"$-1\r\n" * (5 * n),
    "allowed=2": lambda n: ints([2, 5, 4, 0, 100] * n),
    "allowed=-1 (script could not decide)": lambda n: ints([-1, 0, 0, 0, 0] * n),
    "negative limit": lambda n: ints([1, -5, 4, 0, 100] * n),
    "retry=-7": lambda n: ints([0, 5, 0, -7, 100] * n),
    "negative reset": lambda n: ints([1, 5, 4, 0, -100] * n),
    "all impossible": lambda n: ints([7, -3, 1, -5, -9] * n),
    # past what a front end may round up to seconds (int64 overflow)
    "reset past 35 years": lambda n: ints([1, 5, 4, 0, 2**63 - 1] * n),
    "retry past 35 years": lambda n: ints([0, 5, 0, 2**63 - 1, 100] * n),
    "limit past 2^53": lambda n: ints([1, 2**53 + 1, 4, 0, 100] * n),
}


def real(action, num):
    """The reply the fake's "ok" mode gives for user u<num>."""
    return "ALLOWED %d %d 0 %d" % (CAP[action], num, PERIOD[action])


def fallback_ok(action, reply):
    mode = {"pa": "allow", "pd": "deny", "pe": "error", "ml": "deny", "fu": "allow"}[action]
    if mode == "allow":
        return reply == "ALLOWED %d -1 0 -1" % CAP[action]
    if mode == "deny":
        return reply == "DENIED %d -1 1000 -1" % CAP[action]
    return re.match(r"^ERR store-unavailable \S", reply) is not None


class FakeBase(DaemonTest):
    num = 1000  # user numbers, unique per test

    def start(self, timeout_ms=TIMEOUT_MS, connections=2, fake_kw=None, **kw):
        self.fake = self.start_fake(**(fake_kw or {}))
        self.daemon = self.start_daemon(POLICIES, redis=self.fake, on_store_error="allow",
                                        redis_opts={"timeout": "%dms" % timeout_ms,
                                                    "connections": connections}, **kw)
        self.c = self.daemon.client(timeout=10)
        self.addCleanup(self.c.close)
        self.bound = timeout_ms / 1000.0 + STORE_MARGIN
        return self.daemon

    def lines(self, n, verb="ALLOW"):
        out = []
        for i in range(n):
            self.num += 1
            out.append(("%s u%d %s" % (verb, self.num, ACTIONS[i % len(ACTIONS)]),
                        ACTIONS[i % len(ACTIONS)], self.num))
        return out

    def send_round(self, n=25, c=None, verb="ALLOW"):
        """Pipelines n requests over every policy; returns [(line, action, num,
        reply)] and the seconds until the last reply."""
        c = c or self.c
        reqs = self.lines(n, verb)
        t = time.monotonic()
        got = c.pipeline([r[0] for r in reqs], timeout=10 * SLOW)
        dt = time.monotonic() - t
        return [r + (g,) for r, g in zip(reqs, got)], dt

    def check_fallback_round(self, what, n=25, c=None, bound=None):
        res, dt = self.send_round(n, c)
        for line, action, _, reply in res:
            self.assertTrue(fallback_ok(action, reply), "%s: %s -> %r" % (what, line, reply))
        self.assertLess(dt, bound or self.bound, "%s: replies took %.3fs" % (what, dt))
        return dt

    def check_in_sync(self, c=None, n=30):
        """Every request gets the fake's real answer for its own user."""
        res, _ = self.send_round(n, c, verb="PEEK")
        for line, action, num, reply in res:
            self.assertEqual(reply, real(action, num), line)

    def wait_service(self, timeout=1.0):
        """Seconds until a probe gets a real answer again (AssertionError after timeout)."""
        t = time.monotonic()

        def ok():
            self.num += 1
            return self.c.request("PEEK u%d pa" % self.num, timeout=5) == real("pa", self.num)
        wait_until(ok, timeout, interval=0.01, what="full service from the fake Redis")
        return time.monotonic() - t

    def assertNoExtra(self, c=None, wait=0.3):
        c = c or self.c
        self.assertEqual(c.extra(wait), b"", "a reply line too many (a late reply sent twice?)")

    def assertAlive(self):
        self.assertTrue(self.daemon.running(), self.daemon.log())
        with self.daemon.client() as c:
            self.assertEqual(c.request("PING"), "PONG")


class ErrorRepliesTest(FakeBase):
    def test_real_answers_from_fake(self):
        """Sanity: the fake answers batches like the script (5 integers per decision).
        The deadline is not what this checks: 1,000 decisions through a fake
        written in Python took over 100 ms on a loaded box (a fallback
        answer, not the fake's), so it gets 2 s."""
        self.start(timeout_ms=2000)
        self.check_in_sync(n=200)
        self.assertGreater(max(self.fake.batch_sizes), 1, "no batch of several decisions")

    def test_error_replies_answer_per_policy(self):
        self.start()
        for err in ERROR_REPLIES:
            if err.startswith("READONLY"):
                continue  # (test_readonly_reconnects)
            self.fake.mode = ("error", err)
            self.check_fallback_round(err.split()[0])
            self.fake.mode = "ok"
            self.check_in_sync()
        self.assertNoExtra()
        self.assertAlive()
        # an error reply is not a reason to reconnect
        self.assertEqual(len(self.fake.accepts), 3, "reconnected on error replies")

    def test_readonly_reconnects(self):
        """READONLY answers per policy too; and, redis.address alone (no
        Sentinel or Cluster following failovers), the connection that got
        it is made again: a managed service's endpoint may lead elsewhere
        now (it-redis_faults' DnsFailoverTest with real servers)."""
        self.start()
        accepts = len(self.fake.accepts)
        self.fake.mode = ("error", ERROR_REPLIES[2])
        self.check_fallback_round("READONLY")
        self.fake.mode = "ok"
        self.wait_service(timeout=5.0)
        self.check_in_sync()
        self.assertGreater(len(self.fake.accepts), accepts, "no reconnect on READONLY")
        self.assertNoExtra()
        self.assertAlive()

    def test_an_error_text_is_joined_without_doubled_punctuation(self):
        # Redis ends many texts with '.': the log once read "'maxmemory'.; answered"
        # (and "NOAUTH Authentication required.; answering" for a missing password)
        self.start()
        self.fake.mode = ("error", ERROR_REPLIES[4])
        self.check_fallback_round("OOM")
        self.daemon.wait_log(r"^warn: redis \S+ .*: OOM command not allowed when used memory "
                             r"> 'maxmemory'; answered per on_store_error$")
        self.assertNotIn(".;", self.daemon.log())

    def test_error_reply_fallback_for_reset(self):
        self.start()
        self.fake.mode = ("error", ERROR_REPLIES[0])
        for action in ACTIONS:
            r = self.c.request("RESET u1 %s" % action)
            self.assertRegex(r, r"^ERR store-unavailable \S", action)

    def test_noscript_recovered_with_eval(self):
        """Redis lost its script cache: EVALSHA gets NOSCRIPT, the daemon
        re-sends with EVAL; no request sees the failure."""
        self.start()
        self.check_in_sync()
        for _ in range(3):
            self.fake.scripts.clear()
            self.check_in_sync(n=100)
        self.assertGreaterEqual(self.fake.count("EVAL"), 1)
        self.assertLessEqual(self.fake.count("EVAL"), 3 * 2 * 4, "EVAL on every request?")
        self.assertNoExtra()

    def test_noscript_forever(self):
        """EVALSHA and EVAL both answer NOSCRIPT: fallback answers, one EVAL
        retry at most per EVALSHA (no loop), then service when it is fixed."""
        self.start()
        self.fake.mode = "noscript-forever"
        for _ in range(5):
            self.check_fallback_round("NOSCRIPT forever")
        evalsha, evals = self.fake.count("EVALSHA"), self.fake.count("EVAL")
        self.assertGreaterEqual(evals, 1, "NOSCRIPT never retried with EVAL")
        self.assertLessEqual(evals, evalsha, "more EVAL retries than EVALSHA calls")
        self.fake.mode = "ok"
        self.wait_service(1.0)
        self.check_in_sync()
        self.assertNoExtra()
        self.assertAlive()

    def test_loading_at_connect_then_ready(self):
        """A Redis still loading its dataset answers LOADING to SCRIPT LOAD
        and every call; once loaded (script cache empty) service returns."""
        self.start()
        # both connections set up before the drop (the daemon is ready
        # once it listens, not once Redis has answered)
        wait_until(lambda: self.fake.count("SCRIPT LOAD") >= 2, 3 * SLOW, what="first setup")
        loads = self.fake.count("SCRIPT LOAD")
        self.fake.setup_error = "LOADING Redis is loading the dataset in memory"
        self.fake.mode = ("error", "LOADING Redis is loading the dataset in memory")
        self.fake.scripts.clear()
        self.fake.drop_connections()  # reconnect: SCRIPT LOAD gets LOADING now
        wait_until(lambda: self.fake.count("SCRIPT LOAD") >= loads + 2, 3 * SLOW,
                   what="reconnect")
        for _ in range(3):
            self.check_fallback_round("LOADING")
        self.assertTrue(self.daemon.running())
        self.fake.setup_error = None
        self.fake.mode = "ok"
        took = self.wait_service(1.0)
        self.check_in_sync()
        self.assertNoExtra()
        self.assertLess(took, 1.0)


class WrongRepliesTest(FakeBase):
    def test_wrong_type_replies(self):
        self.start()
        for name, raw in WRONG_REPLIES.items():
            self.fake.mode = ("raw", raw)
            self.check_fallback_round(name)
            self.fake.mode = "ok"
            self.check_in_sync()
            self.assertTrue(self.daemon.running(), "%s: daemon died\n%s" % (name, self.daemon.log()))
        self.assertNoExtra()
        self.assertAlive()

    def test_array_too_short(self):
        """One integer missing: the decisions it covers get fallbacks, the
        others their answers; exactly one reply each; in sync after."""
        self.start()

        def short(n):
            vals = []
            for i in range(n):
                vals += [1, 5, 4, 0, 60000]
            return ints(vals[:-1])
        self.fake.mode = ("raw", short)
        for _ in range(5):
            res, dt = self.send_round(40)
            self.assertLess(dt, self.bound)
            for line, action, _, reply in res:
                self.assertTrue(reply == "ALLOWED 5 4 0 60000" or fallback_ok(action, reply),
                                "%s -> %r" % (line, reply))
            self.assertTrue([r for r in res if fallback_ok(r[1], r[3])], "no fallback at all")
        self.fake.mode = "ok"
        self.check_in_sync()
        self.assertNoExtra()

    def test_array_too_long(self):
        self.start()
        self.fake.mode = ("raw", lambda n: ints([1, 5, 3, 0, 60000] * (n + 2)))
        res, dt = self.send_round(40)
        for line, action, _, reply in res:
            self.assertTrue(reply == "ALLOWED 5 3 0 60000" or fallback_ok(action, reply),
                            "%s -> %r" % (line, reply))
        self.fake.mode = "ok"
        self.check_in_sync()
        self.assertNoExtra()

    def test_protocol_garbage_reconnects(self):
        """A reply hiredis cannot parse: the connection is dropped, every
        request on it answered at once, and service is back within 1 s."""
        self.start(timeout_ms=2000)
        self.check_in_sync()
        for garbage in (b"hello\r\n", b"*2\r\n:1\r\n?x\r\n", b"$abc\r\n", b"*-5\r\n"):
            n = len(self.fake.accepts)
            self.fake.mode = ("raw", garbage)
            # answered when the connection drops, long before the 2 s deadline
            self.check_fallback_round(repr(garbage), bound=1.0 * SLOW)
            self.fake.mode = "ok"
            took = self.wait_service(1.0)
            self.assertLess(took, 1.0)
            self.check_in_sync()
            self.assertGreater(len(self.fake.accepts), n, "no reconnect after %r" % garbage)
        self.assertNoExtra()
        self.assertAlive()

    def test_huge_multibulk_header(self):
        """`*2147483647` (a corrupt or hostile reply header), then the
        connection drops: requests are still answered within the deadline.
        (hiredis 0.14 allocates the element array for the announced count and
        walks all of it when the reply is freed.)"""
        self.start()
        self.check_in_sync()
        self.fake.mode = ("raw", b"*2147483647\r\n")
        self.check_fallback_round("huge multibulk")
        self.fake.mode = "ok"
        self.fake.drop_connections()
        time.sleep(0.05)
        t = time.monotonic()
        with self.daemon.client() as c2:
            try:
                r = c2.request("PING", timeout=2 * SLOW)
            except OSError:
                r = None
        dt = time.monotonic() - t
        self.assertEqual(r, "PONG", "event loop blocked over %.1fs after a huge multibulk "
                         "header" % dt)
        self.assertLess(dt, self.bound, "event loop blocked %.2fs after a huge multibulk header" % dt)
        # the announcement was refused and the connection replaced: full service
        took = self.wait_service(1.0)
        self.assertLess(took, 1.0)
        self.assertAlive()


class LostRepliesTest(FakeBase):
    def test_reply_never_comes(self):
        """Redis stops answering on its connections: every request still gets
        its on_store_error answer at the deadline; nothing more afterwards."""
        self.start()
        self.check_in_sync()
        self.fake.mode = "hang"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:
            self.check_fallback_round("no reply", n=20)
        with self.daemon.client() as c2:
            self.check_fallback_round("no reply, other client", n=20, c=c2)
            self.assertNoExtra(c2)
        self.assertNoExtra()
        self.assertAlive()

    def test_hung_connection_is_replaced(self):
        """Black-holed connections (no reply, no FIN or RST, e.g. a lost NAT
        entry or a failed-over host) while Redis serves new connections:
        full service must come back, as after a restart, not only after 8192
        requests have timed out on each connection."""
        self.start()
        self.check_in_sync()
        self.fake.mode = "hang"
        for _ in range(3):
            self.check_fallback_round("black hole", n=10)
        self.fake.mode = "ok"  # new connections are served
        t = time.monotonic()
        try:
            self.wait_service(2.0)
            self.check_in_sync()
        except AssertionError as e:
            raise AssertionError("no full service %.1fs after the Redis connections went "
                                 "silent (Redis accepts and serves new connections): %s; "
                                 "connections accepted: %d"
                                 % (time.monotonic() - t, e, len(self.fake.accepts)))

    def test_closed_mid_reply(self):
        """Half a reply, then the connection closes: every request waiting on
        it is answered at once (not at its deadline), service back in 1 s."""
        self.start(timeout_ms=2000)
        self.check_in_sync()
        for partial in (b"*5\r\n:1\r\n:5\r\n:4", b"*10\r\n:1\r\n:5\r\n:4\r\n:0\r\n:100\r\n",
                        b"$40\r\nabc", b"*5\r\n"):
            self.fake.mode = ("partial", partial)
            self.check_fallback_round("closed mid-reply %r" % partial, bound=1.0 * SLOW)
            self.fake.mode = "ok"
            self.assertLess(self.wait_service(1.0), 1.0)
            self.check_in_sync()
        self.assertNoExtra()
        self.assertAlive()

    def test_closed_without_reply(self):
        self.start(timeout_ms=2000)
        self.fake.mode = "close"
        for _ in range(3):
            self.check_fallback_round("closed", bound=1.0 * SLOW)
        self.fake.mode = "ok"
        self.assertLess(self.wait_service(1.0), 1.0)
        self.check_in_sync()
        self.assertNoExtra()

    def test_late_replies_dropped_exactly_once(self):
        """Replies arriving after the deadline are dropped: each request has
        exactly one reply line, on several clients, and the late replies
        never reach anyone (counted after the fake has sent them all)."""
        self.start()
        self.fake.mode = ("delay", 0.3)
        clients = [self.daemon.client(timeout=10) for _ in range(4)]
        for c in clients:
            self.addCleanup(c.close)
        sent = 0
        for _ in range(3):
            rounds = []
            t = time.monotonic()
            for c in clients:
                reqs = self.lines(15)
                c.send(*[r[0] for r in reqs])
                rounds.append((c, reqs))
            for c, reqs in rounds:
                got = c.readlines(len(reqs), timeout=10 * SLOW)
                self.assertLess(time.monotonic() - t, self.bound)
                for (line, action, _), reply in zip(reqs, got):
                    self.assertTrue(fallback_ok(action, reply), "%s -> %r" % (line, reply))
            sent += 60
        # the fake sends every late reply (0.3 s per call, per connection);
        # requests that timed out while held in the daemon behind an
        # unanswered call were never sent at all
        wait_until(lambda: self.fake.replied == self.fake.calls, 10 * SLOW,
                   what="the fake to send its late replies")
        self.assertGreater(self.fake.decisions, 0)
        self.assertLessEqual(self.fake.decisions, sent)
        time.sleep(0.2)
        for c in clients + [self.c]:
            self.assertNoExtra(c, wait=0.2)
        self.fake.mode = "ok"
        self.wait_service(1.0)
        for c in clients:
            self.check_in_sync(c)
            self.assertNoExtra(c, wait=0.1)
        self.assertAlive()


class ReconnectTest(FakeBase):
    def test_backoff_when_redis_accepts_and_closes(self):
        """Redis accepts every connection and closes it at once: the
        reconnects follow the capped backoff (50 ms doubling to 500 ms,
        jitter in [b/2, b]) for each of the 3 connections (2 + subscriber),
        never a storm; service returns within 1 s once it serves again."""
        self.fake = self.start_fake()
        self.fake.accept_mode = "close"
        self.daemon = self.start_daemon(POLICIES, redis=self.fake,
                                        redis_opts={"timeout": "100ms", "connections": 2})
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            self.check_fallback_round("accept+close", n=10, bound=BOUND)
            time.sleep(0.05)
        acc = [a - self.fake.accepts[0] for a in self.fake.accepts]
        first_2s = [a for a in acc if a < 2.0]
        # worst case per connection in 2 s: 25+50+100+200 ms then every 250 ms
        self.assertLessEqual(len(first_2s), 3 * 11, "reconnect storm: %r" % acc)
        last_s = [a for a in acc if 2.0 <= a < 3.0]
        self.assertLessEqual(len(last_s), 3 * 4 + 1, "faster than the 500 ms cap: %r" % acc)
        self.assertGreaterEqual(len(last_s), 3, "stopped retrying: %r" % acc)
        self.fake.accept_mode = "serve"
        self.assertLess(self.wait_service(1.0), 1.0)
        self.check_in_sync()

    def test_backoff_when_every_request_drops_the_connection(self):
        """Redis answers the set-up (SCRIPT LOAD) and drops the connection on
        every script call (a crashing proxy, a kill on each request): the
        daemon must not reconnect faster than its backoff allows just
        because SCRIPT LOAD succeeded. Requests all get their fallback."""
        self.start(timeout_ms=100)
        self.check_in_sync()
        self.fake.mode = "close"
        n0 = len(self.fake.accepts)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            self.check_fallback_round("drop on request", n=5, bound=BOUND)
            time.sleep(0.005)
        n = len(self.fake.accepts) - n0
        # 2 request connections, backoff capped at 500 ms: about 2 x 12 at most
        self.assertLessEqual(n, 2 * 14, "reconnect storm: %d connections in 3 s" % n)
        print("\n[figures] %d connections in 3 s while every request drops its connection" % n)

    def test_log_not_flooded_while_redis_flaps(self):
        """A Redis that accepts and closes every connection for 3 s: the
        log says it is unavailable once, not two lines per reconnect."""
        self.fake = self.start_fake()
        self.daemon = self.start_daemon(POLICIES, redis=self.fake,
                                        redis_opts={"timeout": "100ms", "connections": 2})
        with self.daemon.client() as c:
            self.assertEqual(c.request("PEEK u3 pa"), real("pa", 3))
        n = len(self.daemon.log_lines())
        self.fake.accept_mode = "close"
        self.fake.drop_connections()
        time.sleep(3.0)
        lines = self.daemon.log_lines()[n:]
        self.assertLessEqual(len(lines), 4, "%d log lines in 3 s, %d connection attempts:\n%s"
                             % (len(lines), len(self.fake.accepts), "\n".join(lines[:12])))


if __name__ == "__main__":
    unittest.main()
