"""Redis down, killed, restarted, frozen, flushed, erroring: every request is
answered within redis.timeout (+ margin) per on_store_error, and service
resumes by itself. Also: AUTH, ACL user, unix socket address."""

import re
import socket
import threading
import time
import unittest

from harness import (FALLBACK_ALLOW, FALLBACK_DENY, STORE_MARGIN, DaemonTest, commandstats,
                     free_port,
                     is_real, parse_decision, wait_until)
from sentinel_proxy import SentinelProxy

TIMEOUT_MS = 100
POLICIES = {
    "reply": "5/60s",
    "login": "[3/1s, 20/60s]",
    "up": "{algorithm: funnel, capacity: 15, rate: 30/60s}",
    "pdeny": "{limits: [7/60s], on_store_error: deny}",
    "perr": "{limits: [9/60s], on_store_error: error}",
    "pallow": "{limits: [4/60s], on_store_error: allow}",
    "big": "100000/60s",
}
LIMITS = {"reply": 5, "login": 3, "up": 15, "pdeny": 7, "perr": 9, "pallow": 4, "big": 100000}
BOUND = TIMEOUT_MS / 1000.0 + STORE_MARGIN


class FaultBase(DaemonTest):
    def start(self, mode="allow", redis_up=True, redis_port=None, timeout_ms=TIMEOUT_MS,
              redis_opts=None, **kw):
        if redis_up:
            self.redis = self.start_redis(port=redis_port)
            addr = self.redis.address
        else:
            self.redis = None
            addr = "127.0.0.1:%d" % (redis_port or free_port())
        self.redis_addr = addr
        ropts = {"timeout": "%dms" % timeout_ms}
        ropts.update(redis_opts or {})
        self.daemon = self.start_daemon(POLICIES, redis=addr, on_store_error=mode,
                                        redis_opts=ropts, **kw)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)
        return self.daemon

    def timed(self, line, c=None):
        c = c or self.c
        t = time.monotonic()
        r = c.request(line, timeout=10)
        return r, time.monotonic() - t

    def check_fallback(self, action, mode, reply, verb="ALLOW"):
        lim = LIMITS[action]
        if verb == "RESET" or mode == "error":
            self.assertRegex(reply, r"^ERR store-unavailable \S", "%s %s" % (verb, action))
        elif mode == "allow":
            self.assertEqual(reply, "ALLOWED %d -1 0 -1" % lim, action)
        else:
            self.assertEqual(reply, "DENIED %d -1 1000 -1" % lim, action)

    def effective(self, action, mode):
        return {"pdeny": "deny", "perr": "error", "pallow": "allow"}.get(action, mode)

    def check_all_fallbacks(self, mode):
        for action in LIMITS:
            for verb in ("ALLOW", "PEEK"):
                r, dt = self.timed("%s u %s" % (verb, action))
                self.assertLess(dt, BOUND, "%s %s took %.3fs" % (verb, action, dt))
                self.check_fallback(action, self.effective(action, mode), r, verb)
        r, dt = self.timed("RESET u reply")
        self.assertLess(dt, BOUND)
        self.check_fallback("reply", mode, r, "RESET")
        self.assertEqual(self.c.request("PING"), "PONG")

    def wait_real(self, timeout=3.0, user="probe", action="big"):
        """Waits until decisions come from Redis again; returns the seconds it took."""
        t = time.monotonic()
        wait_until(lambda: is_real(self.c.request("PEEK %s %s" % (user, action), timeout=5)),
                   timeout, interval=0.05, what="service to resume")
        return time.monotonic() - t

    def check_replies_consistent(self, c=None, rounds=20):
        """Interleaved PEEKs on different policies each get their own reply
        (a late reply from a timed-out request must never be delivered to
        another request)."""
        c = c or self.c
        actions = ["reply", "up", "login", "big", "pdeny"]
        lines = ["PEEK fresh%d %s" % (i, actions[i % len(actions)]) for i in range(rounds * 5)]
        got = c.pipeline(lines, timeout=10)
        for ln, r in zip(lines, got):
            a = ln.split()[2]
            lim = LIMITS[a]
            self.assertEqual(r, "ALLOWED %d %d 0 0" % (lim, lim), "%s -> %s" % (ln, r))


class RedisDownAtStartTest(FaultBase):
    def test_allow(self):
        d = self.start("allow", redis_up=False)
        self.check_all_fallbacks("allow")
        self.assertRegex(d.log(), re.compile(r"^(warn|error): .*(redis|%s)" % re.escape(
            self.redis_addr), re.I | re.M), "Redis failure not logged")

    def test_deny(self):
        self.start("deny", redis_up=False)
        self.check_all_fallbacks("deny")

    def test_error(self):
        self.start("error", redis_up=False)
        self.check_all_fallbacks("error")

    def test_default_is_allow(self):
        self.redis = None
        self.daemon = self.start_daemon(POLICIES, redis="127.0.0.1:%d" % free_port(),
                                        redis_opts={"timeout": "100ms"})
        with self.daemon.client() as c:
            self.assertEqual(c.request("ALLOW x reply"), "ALLOWED 5 -1 0 -1")

    def test_pipeline_while_down(self):
        self.start("error", redis_up=False)
        lines = []
        for i in range(60):
            lines.append(["PING", "ALLOW p%d reply" % i, "ALLOW p pdeny", "FOO"][i % 4])
        t = time.monotonic()
        got = self.c.pipeline(lines, timeout=10)
        self.assertLess(time.monotonic() - t, BOUND * 3)
        for ln, r in zip(lines, got):
            if ln == "PING":
                self.assertEqual(r, "PONG")
            elif ln == "FOO":
                self.assertTrue(r.startswith("ERR unknown-command "), r)
            elif "pdeny" in ln:
                self.assertRegex(r, FALLBACK_DENY)
            else:
                self.assertTrue(r.startswith("ERR store-unavailable "), r)

    def test_redis_comes_up_later(self):
        port = free_port()
        self.start("deny", redis_up=False, redis_port=port)
        self.assertRegex(self.c.request("ALLOW a reply"), FALLBACK_DENY)
        time.sleep(1.0)
        self.redis = self.start_redis(port=port)
        took = self.wait_real(3.0)
        self.assertDecision(self.c.request("ALLOW a reply"), "ALLOWED", 5, 4, 0)
        self.assertLess(took, 3.0)


class RedisFailsMidRunTest(FaultBase):
    def traffic(self, stop, out, mode_lines):
        """Sends requests one at a time until stop is set; records latencies."""
        c = self.daemon.client(timeout=10)
        try:
            i = 0
            while not stop.is_set():
                ln = mode_lines[i % len(mode_lines)]
                t = time.monotonic()
                r = c.request(ln, timeout=10)
                out.append((t, time.monotonic() - t, ln, r))
                i += 1
                time.sleep(0.005)
        except Exception as e:  # noqa: BLE001 - reported by the test
            out.append((time.monotonic(), None, "EXC", repr(e)))
        finally:
            c.close()

    def run_traffic(self):
        stop = threading.Event()
        out = []
        lines = ["ALLOW t%d big" % i for i in range(3)] + ["ALLOW t pdeny", "PING"]
        th = threading.Thread(target=self.traffic, args=(stop, out, lines), daemon=True)
        th.start()
        return stop, out, th

    def check_traffic(self, out, t_from=None):
        self.assertTrue(out, "no traffic")
        errs = [o for o in out if o[1] is None]
        self.assertEqual(errs, [], "traffic client failed")
        slow = [o for o in out if o[1] > BOUND]
        self.assertEqual(slow, [], "answers slower than timeout+margin")
        for _, _, ln, r in out:
            if ln == "PING":
                self.assertEqual(r, "PONG")
            elif "pdeny" in ln:
                self.assertTrue(is_real(r) or FALLBACK_DENY.match(r), r)
            else:
                self.assertTrue(is_real(r) or FALLBACK_ALLOW.match(r), r)

    def test_killed_and_restarted(self):
        self.start("allow")
        port = self.redis.port
        stop, out, th = self.run_traffic()
        time.sleep(0.3)
        self.redis.stop()
        t_kill = time.monotonic()
        time.sleep(1.0)
        during = [o for o in list(out) if o[0] > t_kill + 0.2]
        self.redis = self.start_redis(port=port)
        took = self.wait_real(3.0)
        time.sleep(0.3)
        stop.set()
        th.join(15)
        self.check_traffic(out)
        self.assertTrue(during, "no requests answered while Redis was down")
        self.assertTrue([r for _, _, ln, r in during if "big" in ln and FALLBACK_ALLOW.match(r)],
                        "no fallback answers while Redis was down: %r" % during[:10])
        self.assertTrue(is_real(out[-1][3]) or out[-1][3] == "PONG", out[-1])
        self.assertLess(took, 3.0)
        # fresh Redis, fresh state; the script is loaded again (NOSCRIPT)
        self.assertEqual(self.c.request("PEEK nobody reply"), "ALLOWED 5 5 0 0")
        self.assertDecision(self.c.request("ALLOW nobody reply"), "ALLOWED", 5, 4, 0)
        self.check_replies_consistent()

    def test_decisions_after_restart_come_from_new_state(self):
        """A user denied before Redis restarted (its state lost) is decided
        by the new Redis: allowed."""
        self.start("error")
        port = self.redis.port
        self.c.pipeline(["ALLOW rs reply"] * 5)
        self.assertDecision(self.c.request("ALLOW rs reply"), "DENIED", 5, 0)
        self.redis.stop()
        self.redis = self.start_redis(port=port)
        self.wait_real(3.0)
        self.assertDecision(self.c.request("PEEK rs reply"), "ALLOWED", 5, 5, 0, 0)
        self.assertDecision(self.c.request("ALLOW rs reply"), "ALLOWED", 5, 4, 0)

    def test_down_for_a_while_reconnects(self):
        self.start("error")
        port = self.redis.port
        self.redis.stop()
        for _ in range(10):
            r, dt = self.timed("ALLOW a reply")
            self.assertLess(dt, BOUND)
            self.assertTrue(r.startswith("ERR store-unavailable "), r)
            time.sleep(0.25)
        self.redis = self.start_redis(port=port)
        took = self.wait_real(3.0)
        self.assertLess(took, 3.0)
        self.assertDecision(self.c.request("ALLOW a reply"), "ALLOWED", 5, 4, 0)
        self.assertRegex(self.daemon.log(), re.compile(r"^(warn|error): ", re.M))

    def test_sigstop_then_sigcont(self):
        self.start("error")
        self.c.request("ALLOW s reply")
        self.redis.sigstop()
        self.addCleanup(self.redis.sigcont)
        try:
            for action in ("reply", "pdeny", "pallow", "perr", "up"):
                r, dt = self.timed("ALLOW s %s" % action)
                self.assertLess(dt, BOUND, "%s took %.3fs with Redis frozen" % (action, dt))
                self.check_fallback(action, self.effective(action, "error"), r)
            # a pipeline of decisions: each has its own deadline
            t = time.monotonic()
            got = self.c.pipeline(["ALLOW s%d pallow" % i for i in range(30)], timeout=10)
            self.assertLess(time.monotonic() - t, BOUND + 0.2)
            for r in got:
                self.assertEqual(r, "ALLOWED 4 -1 0 -1")
            # other connections too
            with self.daemon.client() as c2:
                r, dt = self.timed("ALLOW z pdeny", c2)
                self.assertEqual(r, "DENIED 7 -1 1000 -1")
                self.assertLess(dt, BOUND)
                self.assertEqual(c2.request("PING"), "PONG")
        finally:
            self.redis.sigcont()
        took = self.wait_real(3.0)
        self.assertLess(took, 3.0)
        self.check_replies_consistent()
        v = parse_decision(self.c.request("PEEK s reply"))
        self.assertEqual(v[:2], ("ALLOWED", 5))
        self.assertTrue(v[2] < 5, "state written before the freeze was lost: %r" % (v,))

    def test_request_timed_out_in_the_daemon_never_runs(self):
        """While a call is unanswered on a Redis connection, later requests
        for it wait in the daemon to form a bigger batch. Those answered by
        timeout while waiting are dropped, never sent: when Redis wakes, only
        the call it had already received counts."""
        self.start("allow", redis_opts={"connections": 1})
        self.assertTrue(is_real(self.c.request("PEEK w big")))
        self.redis.sigstop()
        self.addCleanup(self.redis.sigcont)
        try:
            r, dt = self.timed("ALLOW sent big")
            self.assertEqual(r, "ALLOWED 100000 -1 0 -1")
            self.assertLess(dt, BOUND)
            t = time.monotonic()
            got = self.c.pipeline(["ALLOW held big"] * 5, timeout=10)
            self.assertEqual(got, ["ALLOWED 100000 -1 0 -1"] * 5)
            self.assertLess(time.monotonic() - t, BOUND)
        finally:
            self.redis.sigcont()
        self.wait_real(3.0)
        # the one call Redis had read before it froze still ran (documented)
        self.assertDecision(self.c.request("PEEK sent big"), "ALLOWED", 100000, 99999, 0)
        self.assertDecision(self.c.request("PEEK held big"), "ALLOWED", 100000, 100000, 0)
        self.assertTrue(self.daemon.running())

    def test_requests_held_behind_a_call_go_as_one_batch(self):
        """Clients that each send one request while a call is unanswered on
        the connection are decided together by one script call once it
        returns, and each gets its own real answer."""
        self.start("error", timeout_ms=3000, redis_opts={"connections": 1})
        self.assertTrue(is_real(self.c.request("PEEK w big")))
        calls0 = commandstats(self.redis).get("evalsha", 0)
        clients = [self.daemon.client(timeout=10) for _ in range(20)]
        for c in clients:
            self.addCleanup(c.close)
        self.redis.sigstop()
        self.addCleanup(self.redis.sigcont)
        try:
            self.c.send("ALLOW first big")
            time.sleep(0.1)
            for i, c in enumerate(clients):
                c.send("ALLOW h%d big" % i)
                time.sleep(0.005)  # apart, so that they arrive in different loop turns
            time.sleep(0.2)  # all 20 reach the daemon while Redis is frozen
        finally:
            self.redis.sigcont()
        self.assertDecision(self.c.readlines(1, timeout=10)[0], "ALLOWED", 100000, 99999, 0)
        for c in clients:
            self.assertDecision(c.readlines(1, timeout=10)[0], "ALLOWED", 100000, 99999, 0)
        self.assertEqual(commandstats(self.redis).get("evalsha", 0) - calls0, 2)
        for i in range(20):
            self.assertDecision(self.c.request("PEEK h%d big" % i), "ALLOWED", 100000, 99999, 0)

    def test_debug_sleep(self):
        self.start("deny")
        th = self.redis.debug_sleep(1)
        for i in range(5):
            r, dt = self.timed("ALLOW ds%d reply" % i)
            self.assertLess(dt, BOUND, "answer took %.3fs while Redis slept" % dt)
            self.assertEqual(r, "DENIED 5 -1 1000 -1")
        th.join(5)
        self.assertEqual(th.reply, "OK")
        took = self.wait_real(3.0)
        self.assertLess(took, 3.0)
        self.check_replies_consistent()

    def test_clients_gone_while_requests_pending(self):
        """Clients that disconnect while their requests wait on Redis: the
        late replies are dropped safely, the daemon lives on."""
        self.start("deny", timeout_ms=2000)
        th = self.redis.debug_sleep(0.5)
        for i in range(30):
            c = self.daemon.client()
            c.send(*["ALLOW gone%d reply" % i] * 5)
            if i % 2:
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            c.close()
        th.join(5)
        time.sleep(0.2)
        self.assertTrue(self.daemon.running(), self.daemon.log())
        self.assertDecision(self.c.request("ALLOW after reply"), "ALLOWED", 5, 4, 0)
        self.check_replies_consistent()
        self.assertLogClean(self.daemon)

    def test_script_flush(self):
        self.start("error", redis_opts={"connections": 2})
        self.c.pipeline(["ALLOW sf reply"] * 2)
        for i in range(3):
            self.assertEqual(self.redis.call("SCRIPT", "FLUSH"), "OK")
            got = self.c.pipeline(["PEEK sf reply"] * 6)
            for r in got:
                self.assertDecision(r, "ALLOWED", 5, 3, 0)
        self.assertDecision(self.c.request("ALLOW sf reply"), "ALLOWED", 5, 2, 0)
        self.redis.call("SCRIPT", "FLUSH")
        with self.daemon.client() as c2:
            self.assertDecision(c2.request("ALLOW sf reply"), "ALLOWED", 5, 1, 0)

    def test_redis_error_reply_answers_per_policy(self):
        self.start("allow")
        # a key of the wrong type makes the script fail inside Redis
        self.redis.call("SET", "rl:{reply:wt}:s60000", "junk")
        self.redis.call("SET", "rl:{pdeny:wt}:s60000", "junk")
        self.redis.call("SET", "rl:{perr:wt}:s60000", "junk")
        r, dt = self.timed("ALLOW wt reply")
        self.assertEqual(r, "ALLOWED 5 -1 0 -1")
        self.assertEqual(self.c.request("ALLOW wt pdeny"), "DENIED 7 -1 1000 -1")
        self.assertTrue(self.c.request("ALLOW wt perr").startswith("ERR store-unavailable "))
        # other users are unaffected, the connection to Redis still works
        self.assertDecision(self.c.request("ALLOW ok reply"), "ALLOWED", 5, 4, 0)
        self.check_replies_consistent()


class DnsFailoverTest(FaultBase):
    def test_readonly_reconnects_to_where_the_address_leads_now(self):
        """A managed service's failover (ElastiCache, Memorystore, Azure):
        its endpoint's name moves to the new primary, and the old one, a
        replica now, keeps the connections it had and answers them
        READONLY. redis.address alone has no Sentinel or Cluster to follow
        it: each connection answered READONLY is dropped and made again, so
        it reaches what the address leads to now (here a proxy that sends
        new connections to the new primary, as the DNS would); without
        that, decisions stayed fallbacks for as long as the old
        connections lived."""
        old, new = self.start_redis(), self.start_redis()
        proxy = SentinelProxy(old.port, drop=())
        self.addCleanup(proxy.stop)
        self.redis = old
        self.daemon = self.start_daemon(POLICIES, redis=proxy.address, on_store_error="allow",
                                        redis_opts={"timeout": "%dms" % TIMEOUT_MS})
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)
        self.wait_real()
        self.assertDecision(self.c.request("ALLOW dns reply"), "ALLOWED", 5, 4)
        # the failover: the old primary follows the new one, the name moves
        new.call("SET", "marker", "new")
        old.call("REPLICAOF", "127.0.0.1", str(new.port))
        wait_until(lambda: old.call("GET", "marker") == b"new", 5, what="the old primary to "
                   "replicate the new one")
        proxy.target_port = new.port
        n = len(self.daemon.log_lines())
        # decided by the new primary (its own count: the replica's copy of
        # the old one's state is gone with the swap) within a few reconnects
        wait_until(lambda: is_real(self.c.request("ALLOW dns2 reply")), 5,
                   interval=0.05, what="decisions from the new primary")
        self.daemon.wait_log(r"answers READONLY \(a replica now\): reconnecting", start=n)
        self.assertTrue(new.keys(b"*dns2*"), "the decision was not made on the new primary")


class StoreConfigTest(FaultBase):
    def test_password(self):
        self.redis = self.start_redis(password="s3cr3t-pw-XYZ")
        self.daemon = self.start_daemon(
            POLICIES, redis_opts={"password": "s3cr3t-pw-XYZ"}, log_level="debug",
            on_store_error="error")
        with self.daemon.client() as c:
            self.assertDecision(c.request("ALLOW pw reply"), "ALLOWED", 5, 4, 0)
        self.daemon.reload()
        time.sleep(0.3)
        self.assertNotIn("s3cr3t-pw-XYZ", self.daemon.log())

    def test_wrong_password(self):
        self.redis = self.start_redis(password="right-pw-1234")
        self.daemon = self.start_daemon(
            POLICIES, redis_opts={"password": "wrong-pw-5678", "timeout": "100ms"},
            on_store_error="deny", log_level="debug")
        with self.daemon.client() as c:
            r, dt = self.timed("ALLOW pw reply", c)
            self.assertEqual(r, "DENIED 5 -1 1000 -1")
            self.assertLess(dt, BOUND)
        time.sleep(0.3)
        log = self.daemon.log()
        self.assertNotIn("wrong-pw-5678", log)
        self.assertNotIn("right-pw-1234", log)
        self.assertRegex(log, re.compile(r"^(warn|error): ", re.M), "AUTH failure not logged")

    def test_password_for_redis_without_one_no_reconnect_storm(self):
        """A password in the config and a Redis with none (a fresh one, its
        default user open): AUTH fails, and the SCRIPT LOAD and SUBSCRIBE
        behind it, which such a Redis answers, do not make the connection
        count as working: reconnects follow the backoff, the failure is
        logged once, "connected" never."""
        self.redis = self.start_redis()
        self.daemon = self.start_daemon(
            POLICIES, redis_opts={"password": "no-such-pw-1234", "timeout": "100ms"},
            on_store_error="deny")
        with self.daemon.client() as c:
            self.assertEqual(c.request("ALLOW pw reply"), "DENIED 5 -1 1000 -1")
        time.sleep(2.0)
        info = self.redis.call("INFO", "stats").decode()
        conns = int(re.search(r"^total_connections_received:(\d+)", info, re.M).group(1))
        # 3 connections (2 + subscriber), backoff 50 ms doubling to a 500 ms cap
        self.assertLessEqual(conns, 3 * 12, "reconnect storm: %d connections in 2 s" % conns)
        log = self.daemon.log_lines()
        self.assertEqual(len([l for l in log if "AUTH failed" in l]), 1, log[:20])
        self.assertFalse([l for l in log if l.endswith(" connected")], log[:20])

    def test_acl_user(self):
        self.redis = self.start_redis(password="admin-pw")
        self.redis.call("ACL", "SETUSER", "rl", "on", ">rl-pw-42", "~rl:*", "+@all")
        self.daemon = self.start_daemon(
            POLICIES, redis_opts={"username": "rl", "password": "rl-pw-42"},
            on_store_error="error")
        with self.daemon.client() as c:
            self.assertDecision(c.request("ALLOW acl reply"), "ALLOWED", 5, 4, 0)
        self.assertEqual(self.redis.keys(), [b"rl:{reply:acl}:s60000"])
        self.assertNotIn("rl-pw-42", self.daemon.log())

    def test_unix_socket_address(self):
        self.redis = self.start_redis(unixsocket=True)
        self.daemon = self.start_daemon(POLICIES, redis="unix:" + self.redis.unix,
                                        on_store_error="error")
        with self.daemon.client() as c:
            self.assertDecision(c.request("ALLOW ux reply"), "ALLOWED", 5, 4, 0)
        self.assertEqual(self.redis.keys(), [b"rl:{reply:ux}:s60000"])


if __name__ == "__main__":
    unittest.main()
