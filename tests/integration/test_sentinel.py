"""Redis Sentinel backend (issue 5) against a real master, replicas and three
sentinels on loopback (topology.py): the daemon follows the master through a
failover after a crash and through SENTINEL FAILOVER, re-resolves when the
server it talks to has become a replica (READONLY) even when it never hears
+switch-master, and answers per on_store_error, within the timeout, while
there is no master."""

import socket
import threading
import time
import unittest

from harness import (SLOW, STORE_MARGIN, DaemonTest, commandstats, free_port, is_real,
                     make_config, scrape_metrics, wait_until)
from load import Traffic
from relay import Relay
from sentinel_proxy import SentinelProxy
from topology import add_sentinels, sentinel_redis_opts

POLICIES = {
    "reply": "5/60s",
    "big": "100000/60s",
    "strict": "{limits: [100000/60s], on_store_error: deny}",
    "win": "{algorithm: sliding_window_counter, limits: 3/1d}",
    "pen": "{limits: [1/1m], ban: {after: 1, within: 1h, for: 1h}}",
}
TIMEOUT = 0.3 * SLOW
BOUND = TIMEOUT + STORE_MARGIN


def report(msg):
    import sys
    sys.stderr.write("[figures] %s\n" % msg)
    sys.stderr.flush()


class NamingSentinel:
    """A scripted sentinel that names whichever master the test says, for
    what a real one says only in a partition: a stale master (one cut off
    with the old master names it after the failover). It answers
    SENTINEL get-master-addr-by-name and confirms SUBSCRIBE."""

    def __init__(self, port, silent=False):
        self.named = port
        self.silent = silent  # accepts, reads, never answers
        self.asked = 0
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self.accept, daemon=True).start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def accept(self):
        while not self.stopped:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        buf = b""
        try:
            while not self.stopped:
                data = c.recv(4096)
                if not data:
                    return
                if self.silent:
                    continue
                buf += data
                while b"\r\n" in buf and buf.startswith(b"*"):
                    n = int(buf[1:buf.index(b"\r\n")])
                    parts = buf.split(b"\r\n")
                    if len(parts) < 1 + 2 * n + 1:
                        break
                    words = [parts[2 + 2 * i] for i in range(n)]
                    buf = b"\r\n".join(parts[1 + 2 * n:])
                    if words[0].upper() == b"SENTINEL":
                        self.asked += 1
                        port = str(self.named).encode()
                        c.sendall(b"*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n" % (len(port), port))
                    elif words[0].upper() == b"SUBSCRIBE":
                        c.sendall(b"*3\r\n$9\r\nsubscribe\r\n$%d\r\n%s\r\n:1\r\n"
                                  % (len(words[1]), words[1]))
                    else:
                        c.sendall(b"+OK\r\n")
        except OSError:
            return
        finally:
            c.close()

    def stop(self):
        self.stopped = True
        self.lsock.close()


class SentinelBase(DaemonTest):
    def sentinels(self, **kw):
        self.ss = add_sentinels(self, **kw)
        return self.ss

    def sdaemon(self, addresses=None, name="rl", redis_extra=None, policies=POLICIES, **top):
        port = free_port()
        ropts = sentinel_redis_opts(addresses or self.ss.addresses(),
                                    timeout="%dms" % int(TIMEOUT * 1000),
                                    **(redis_extra or {}))
        cfg = make_config(["127.0.0.1:%d" % port], ropts, policies, **top)
        return self.start_daemon(config=cfg, port=port, name=name)

    def client(self, d):
        c = d.client(timeout=10 * SLOW)
        self.addCleanup(c.close)
        return c

    def wait_decisions(self, c):
        """Until Redis decides: the daemon is ready once it listens, before
        the sentinels have named the master and its pool is up."""
        wait_until(lambda: is_real(c.request("PEEK ready big")), 5 * SLOW, interval=0.02,
                   what="decisions from the master")

    def evalsha(self, server):
        return commandstats(server).get("evalsha", 0)

    def check_switch(self, recs, lines, t_event, what):
        """Every reply for `lines` is a real decision or the exact fallback,
        within the timeout; fallbacks only after t_event; the last ones are
        real. Returns (number of fallbacks, seconds from t_event to the last
        fallback, or 0)."""
        mine = [r for r in recs if r[3] in lines]
        self.assertTrue(mine)
        fb = []
        for r in mine:
            if not is_real(r[4]):
                want = "DENIED 100000 -1 1000 -1" if " strict" in r[3] else \
                    "ALLOWED 100000 -1 0 -1"
                self.assertEqual(r[4], want, r[3])
                fb.append(r)
        slow = [(round(r[2] - r[1], 3), r[3], r[4]) for r in mine if r[2] - r[1] > BOUND]
        self.assertEqual(slow[:5], [], "%s: answers later than redis.timeout + margin" % what)
        if fb:
            self.assertGreaterEqual(min(r[1] for r in fb), t_event - 0.05,
                                    "%s: fallback before the event" % what)
        last = max((r[2] for r in fb), default=t_event)
        after = [r for r in mine if r[1] > last]
        self.assertTrue(after and all(is_real(r[4]) for r in after), what)
        return len(fb), last - t_event

    def wait_real_on(self, tr, lines, since, timeout):
        """Waits until the last 20 replies for `lines` were all real and sent
        after `since`."""
        want = set(lines)

        def ok():
            mine = [r for r in list(tr.records) if r[3] in want]
            last = mine[-20:]
            return len(last) == 20 and last[0][1] > since and all(is_real(r[4]) for r in last)
        wait_until(ok, timeout, interval=0.05, what="decisions from Redis again")


class SentinelFailoverTest(SentinelBase):
    def test_follows_master_after_kill(self):
        """The master is SIGKILLed under traffic: the sentinels promote a
        replica, the daemon follows within a few seconds; meanwhile every
        answer is the policy's on_store_error one within the timeout; state
        replicated before the crash survives; new decisions are made by the
        new master."""
        ss = self.sentinels(replicas=2)
        mport = free_port()
        d = self.sdaemon(metrics='{listen: "127.0.0.1:%d"}' % mport)
        c = self.client(d)
        self.wait_decisions(c)
        old = ss.current_master()
        lost0 = scrape_metrics(mport)["ratelimitd_redis_connections_lost_total"]
        self.assertEqual(c.pipeline(["ALLOW cap reply"] * 5)[-1][:9], "ALLOWED 5")
        self.assertTrue(is_real(c.request("ALLOW k0 big")))
        self.assertIn(b"rl:{reply:cap}:s60000", old.keys())
        # a counter at its limit and a ban, to outlive the failover
        self.assertEqual([r.split()[0] for r in c.pipeline(["ALLOW cap win"] * 3)],
                         ["ALLOWED"] * 3)
        self.assertEqual(c.pipeline(["ALLOW cap pen"] * 2)[1].split()[:4],
                         ["DENIED", "1", "0", "3600000"])
        # several pairs in one call on the master: the counter binds, then denies
        got = [c.request("MALLOW multi reply multi win") for _ in range(4)]
        self.assertEqual([g.split()[0] + " " + g.split()[-1] for g in got],
                         ["ALLOWED 2"] * 3 + ["DENIED 2"])
        ss.wait_replicated()
        lines = ["ALLOW w%d big" % i for i in range(10)] + ["ALLOW s%d strict" % i
                                                             for i in range(5)]
        tr = Traffic([d.port], lambda i: lines[i::2], threads=2, depth=4, pause=0.005).start()
        try:
            time.sleep(0.3)
            t_kill = time.monotonic()
            ss.kill_master()
            new, secs = ss.wait_failover(old)
            t_switch = time.monotonic()
            self.wait_real_on(tr, lines, t_switch, 5 * SLOW)
            time.sleep(0.3)
        finally:
            recs = tr.stop()
        self.assertEqual(tr.errors, [])
        nfb, down = self.check_switch(recs, set(lines), t_kill, "kill")
        self.assertGreater(nfb, 0, "no fallback answer while there was no master?")
        report("sentinel kill: sentinels switched %.2fs after the kill; fallback answers until "
               "+%.2fs (%d), daemon back %.2fs after the switch"
               % (secs, down, nfb, down - secs))
        self.assertLess(down, secs + 2 * SLOW, "the daemon took %.2fs after the switch"
                        % (down - secs))
        self.assertDecision(c.request("PEEK cap reply"), "DENIED", 5, 0)
        self.assertDecision(c.request("PEEK cap win"), "DENIED", 3, 0)
        self.assertDecision(c.request("ALLOW cap pen"), "DENIED", 1, 0, (3000000, 3600000))
        # the pairs' state survived together, and a denial still charges nothing
        self.assertEqual(c.request("MALLOW multi reply multi win").split()[::5],
                         ["DENIED", "2"])
        self.assertDecision(c.request("PEEK multi reply"), "ALLOWED", 5, 2)
        self.assertGreater(self.evalsha(new), 0)
        self.assertEqual(c.pipeline(["ALLOW fresh%d reply" % i for i in range(10)]),
                         ["ALLOWED 5 4 0 60000"] * 10)
        keys = new.keys()
        for i in range(10):
            self.assertIn(b"rl:{reply:fresh%d}:s60000" % i, keys)
        # metrics: the new master's pool is up, the old one's connections count as lost
        m = scrape_metrics(mport)
        self.assertEqual(m["ratelimitd_redis_up"], 1)
        self.assertEqual(m["ratelimitd_redis_connections_up"], m["ratelimitd_redis_connections"])
        self.assertGreaterEqual(m["ratelimitd_redis_connections_lost_total"], lost0 + 1)
        self.assertGreaterEqual(m['ratelimitd_decisions_total{result="allowed",source="fallback"}']
                                + m['ratelimitd_decisions_total{result="denied",source="fallback"}'],
                                nfb)

    def test_follows_sentinel_failover_command(self):
        """SENTINEL FAILOVER (old master alive): the daemon moves to the new
        master when the sentinels announce it; the old master gets no more
        decisions once the daemon has switched; no answer exceeds the
        timeout."""
        ss = self.sentinels(replicas=1)
        d = self.sdaemon()
        c = self.client(d)
        self.wait_decisions(c)
        old = ss.current_master()
        self.assertTrue(is_real(c.request("ALLOW k0 big")))
        lines = ["ALLOW m%d big" % i for i in range(10)]
        tr = Traffic([d.port], lambda i: lines, threads=2, depth=4, pause=0.005).start()
        try:
            time.sleep(0.3)
            t0 = time.monotonic()
            self.assertEqual(ss.manual_failover(), "OK")
            new, secs = ss.wait_failover(old)
            t_switch = time.monotonic()
            self.wait_real_on(tr, lines, t_switch, 5 * SLOW)
            # the daemon now writes to the new master only
            wait_until(lambda: self.evalsha(new) > 0, 3 * SLOW, what="decisions on the new master")
            e_old = self.evalsha(old)
            e_new = self.evalsha(new)
            time.sleep(0.5)
            self.assertEqual(self.evalsha(old), e_old, "decisions still go to the old master")
            self.assertGreater(self.evalsha(new), e_new)
        finally:
            recs = tr.stop()
        self.assertEqual(tr.errors, [])
        nfb, down = self.check_switch(recs, set(lines), t0, "SENTINEL FAILOVER")
        report("SENTINEL FAILOVER: switched after %.2fs; %d fallback answers" % (secs, nfb))
        c.request("ALLOW after reply")
        self.assertIn(b"rl:{reply:after}:s60000", new.keys())


class SentinelReadonlyTest(SentinelBase):
    def test_demoted_master_readonly_without_switch_notice(self):
        """The daemon reaches the sentinels through proxies that hide
        +switch-master. After SENTINEL FAILOVER the old master is made a
        replica of the new one (what Sentinel itself does a few seconds
        later): the daemon's writes there get READONLY, it asks the
        sentinels again and goes on with the new master promptly; every
        answer meanwhile is within the timeout."""
        ss = self.sentinels(replicas=1)
        proxies = [SentinelProxy(s.port) for s in ss.sentinels]
        for p in proxies:
            self.addCleanup(p.stop)
        d = self.sdaemon(addresses=[p.address for p in proxies])
        c = self.client(d)
        old = ss.current_master()
        wait_until(lambda: sum(p.subscribed for p in proxies) >= 1, 10 * SLOW,
                   what="the daemon to subscribe through a proxy")
        self.wait_decisions(c)
        self.assertTrue(is_real(c.request("ALLOW k0 big")))
        lines = ["ALLOW r%d big" % i for i in range(10)]
        tr = Traffic([d.port], lambda i: lines, threads=2, depth=4, pause=0.005).start()
        try:
            time.sleep(0.3)
            self.assertEqual(ss.manual_failover(ss.sentinels[0]), "OK")
            new, secs = ss.wait_failover(old)
            # demote the old master now, as Sentinel would (+convert-to-slave)
            old.call("REPLICAOF", "127.0.0.1", new.port)
            t_demote = time.monotonic()
            ss.wait_demoted(old, new)
            self.wait_real_on(tr, lines, t_demote, 5 * SLOW)
            e_new = self.evalsha(new)
            time.sleep(0.3)
            self.assertGreater(self.evalsha(new), e_new, "decisions not on the new master")
        finally:
            recs = tr.stop()
        self.assertEqual(tr.errors, [])
        self.assertTrue(any(p.dropped for p in proxies),
                        "no +switch-master was hidden from the daemon: test is void")
        mine = [r for r in recs if r[3] in set(lines)]
        bad = [r for r in mine if not is_real(r[4])]
        for r in bad:
            self.assertEqual(r[4], "ALLOWED 100000 -1 0 -1")
        slow = [round(r[2] - r[1], 3) for r in mine if r[2] - r[1] > BOUND]
        self.assertEqual(slow[:5], [], "answers later than redis.timeout + margin")
        # real decisions again promptly after the demotion (READONLY)
        real_after = [r for r in mine if r[1] >= t_demote and is_real(r[4])]
        firsts = [r for r in real_after if all(is_real(x[4]) for x in mine if x[1] >= r[1])]
        self.assertTrue(firsts)
        back = firsts[0][2] - t_demote
        asks = [t - t_demote for p in proxies for t in p.asks_since(t_demote)]
        report("READONLY: daemon back on the new master %.2fs after the demotion; "
               "first sentinel query after it at +%.3fs; %d fallback answers"
               % (back, min(asks) if asks else -1, len(bad)))
        # ~0.1 s expected; well below Sentinel's own +convert-to-slave delay
        # and a periodic re-check (seconds)
        bound = 1.0 + 0.2 * SLOW
        self.assertLess(back, bound, "took %.2fs to leave a demoted master" % back)
        self.assertTrue(asks and min(asks) < bound,
                        "the daemon did not ask the sentinels after READONLY")
        c.request("ALLOW after reply")
        self.assertIn(b"rl:{reply:after}:s60000", new.keys())


class SentinelMiscTest(SentinelBase):
    def test_live_overrides_on_the_master_survive_failover(self):
        """A run-time override is written to the master the sentinels name,
        read by every daemon, and replicated: after a failover the new
        master still has it, and a daemon started then applies it."""
        ss = self.sentinels(replicas=1)
        d1, d2 = self.sdaemon(name="rl1"), self.sdaemon(name="rl2")
        c1, c2 = self.client(d1), self.client(d2)
        self.wait_decisions(c1)
        self.wait_decisions(c2)
        self.assertEqual(c1.request("OVERRIDE mallory reply blocked"), "OK")
        wait_until(lambda: c2.request("PEEK mallory reply") == "DENIED 5 0 -1 -1", 3 * SLOW,
                   what="daemon 2 to apply the override")
        old = ss.current_master()
        ss.wait_replicated()
        ss.kill_master()
        ss.wait_failover(old)
        d3 = self.sdaemon(name="rl3")
        c3 = self.client(d3)
        wait_until(lambda: c3.request("ALLOW mallory reply") == "DENIED 5 0 -1 -1", 10 * SLOW,
                   what="a daemon started after the failover to apply it")
        self.assertEqual(c3.request("UNOVERRIDE mallory reply"), "OK")
        wait_until(lambda: c1.request("PEEK mallory reply").startswith("ALLOWED 5 "), 5 * SLOW,
                   what="daemon 1 to see it cleared")

    def test_first_sentinel_unreachable(self):
        """A dead address first in the list: the daemon asks the others."""
        ss = self.sentinels(replicas=1)
        d = self.sdaemon(addresses=["127.0.0.1:%d" % free_port()] + ss.addresses())
        c = self.client(d)
        wait_until(lambda: is_real(c.request("PEEK probe big")), 3 * SLOW, interval=0.05,
                   what="decisions through the second sentinel")
        self.assertEqual(c.pipeline(["ALLOW u%d reply" % i for i in range(20)]),
                         ["ALLOWED 5 4 0 60000"] * 20)
        self.assertEqual(len(ss.current_master().keys(b"rl:{reply:*")), 20)

    def test_master_password(self):
        """The master and replicas need a password (sentinels do not): the
        daemon authenticates to whichever master the sentinels name."""
        ss = self.sentinels(replicas=1, password="m4ster-pw")
        d = self.sdaemon(redis_extra={"password": "m4ster-pw"})
        c = self.client(d)
        wait_until(lambda: is_real(c.request("PEEK probe big")), 3 * SLOW, interval=0.05,
                   what="decisions")
        self.assertEqual(c.pipeline(["ALLOW p%d reply" % i for i in range(10)]),
                         ["ALLOWED 5 4 0 60000"] * 10)
        self.assertEqual(len(ss.current_master().keys("rl:*")), 10)
        self.assertNotIn("m4ster-pw", d.log())


if __name__ == "__main__":
    unittest.main()


class ScriptedSentinelTest(SentinelBase):
    """A scripted sentinel naming what the test says (NamingSentinel)."""

    def test_a_sentinel_naming_a_replica_is_not_followed(self):
        """A sentinel that names a replica as the master (stale, or cut off
        with the old master) is not followed: the daemon asks that server
        its ROLE first, and stays with the master that says it is one."""
        master = self.start_redis()
        replica = self.start_redis(extra=["--replicaof", "127.0.0.1", str(master.port)])
        fake = NamingSentinel(master.port)
        self.addCleanup(fake.stop)
        d = self.sdaemon(addresses=[fake.address])
        c = self.client(d)
        self.wait_decisions(c)
        self.assertTrue(c.request("ALLOW sid big").startswith("ALLOWED 100000 99999 "))
        fake.named = replica.port
        asked = fake.asked
        # it asks again every 5 s: twice more
        wait_until(lambda: fake.asked >= asked + 2, 15 * SLOW, interval=0.1,
                   what="the sentinel asked again")
        self.assertIn("says it is slave: not followed", d.log())
        self.assertTrue(c.request("ALLOW sid big").startswith("ALLOWED 100000 99998 "))
        self.assertNotIn("is 127.0.0.1:%d" % replica.port, d.log())

    def test_a_decision_cut_after_it_was_sent_is_not_sent_again(self):
        """The connection goes right after a decision reached the master
        (Redis runs it; its reply is lost): answered per on_store_error,
        and not sent again, for it may have been applied: Redis counted
        it once (a retry once counted it twice)."""
        master = self.start_redis()
        relay = Relay(master.port)
        self.addCleanup(relay.close)
        fake = NamingSentinel(relay.port)
        self.addCleanup(fake.stop)
        d = self.sdaemon(addresses=[fake.address])
        c = self.client(d)
        self.wait_decisions(c)
        relay.cut_after(b"victim")
        got = c.request("ALLOW victim reply")
        self.assertEqual(relay.cuts, 1)
        self.assertFalse(is_real(got), got)
        wait_until(lambda: is_real(c.request("PEEK victim reply")), 5 * SLOW, interval=0.05,
                   what="decisions again")
        self.assertTrue(c.request("PEEK victim reply").startswith("ALLOWED 5 4 "))

    def test_a_sentinel_that_never_answers_does_not_stop_the_asking(self):
        """The first sentinel accepts and never answers: the daemon gives
        up on it and asks the next (a hung ask once stopped every later
        one, so the master was never found)."""
        master = self.start_redis()
        silent = NamingSentinel(master.port, silent=True)
        self.addCleanup(silent.stop)
        naming = NamingSentinel(master.port)
        self.addCleanup(naming.stop)
        d = self.sdaemon(addresses=[silent.address, naming.address])
        c = self.client(d)
        wait_until(lambda: is_real(c.request("PEEK ready big")), 10 * SLOW, interval=0.05,
                   what="decisions from the master the second sentinel names")
        self.assertIn("no answer in 3000 ms; given up", d.log())
