"""Delay instead of deny (issue 29, item 2), for a funnel: `delay: {max}`
makes a request that would pass within max wait for its slot (reserved in
Redis when it came, so every daemon sees it) and answers it ALLOWED then.
A client at twice a 10/s funnel's rate through three daemons: every request
allowed, the answers 100 ms apart; past the bound, DENIED at once;
max_delayed; SIGTERM answers the waiting at once; a client gone while
waiting changes nothing else."""

import os
import signal
import socket
import sys
import threading
import time
import unittest

from harness import DAEMON, SLOW, Client, DaemonTest, free_port, scrape_metrics, wait_until

POLICIES = {"smooth": "{algorithm: funnel, capacity: 1, rate: 10/1s, delay: {max: 2s}}",
            "plain": "{algorithm: funnel, capacity: 1, rate: 10/1s}"}
JITTER = 0.05 * SLOW  # how far an answer may be from its slot (measured: docs/algorithms.md)
# An answer is timed from a common start against its slot, never by its own
# duration nor by the one before it (a busy machine reads an answer late,
# and the next then looks early): it may be EARLY before its slot at most
# (the clocks of the test and of Redis), and LATE after it
EARLY = 0.005
LATE = 0.5 * SLOW


def report(msg):
    sys.stderr.write("[figures] %s\n" % msg)
    sys.stderr.flush()


def timed_requests(ports, starts, line):
    """Sends line on a connection of its own to ports[i % n] at each start
    (monotonic); returns [(start, answered, reply)] in start order."""
    out = [None] * len(starts)
    socks = [socket.create_connection(("127.0.0.1", ports[i % len(ports)]), timeout=30)
             for i in range(len(starts))]

    def one(i):
        s = socks[i]
        delay = starts[i] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = time.monotonic()
        s.sendall(line.encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            d = s.recv(200)
            if not d:
                break
            buf += d
        out[i] = (t, time.monotonic(), buf.decode().strip())
        s.close()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(starts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


def burst(port, line, n):
    """n requests at once, a connection each: every connection opened
    first, then line sent on each from one loop (all within a
    millisecond or so, whatever the load), the replies read as they come.
    Returns [(sent, answered, reply)] in sending order."""
    import selectors
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(n)]
    sent = []
    for s in socks:
        s.sendall(line.encode() + b"\n")
        sent.append(time.monotonic())
    sel = selectors.DefaultSelector()
    bufs = {}
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        bufs[i] = b""
    out = [None] * n
    end = time.monotonic() + 60
    while any(o is None for o in out) and time.monotonic() < end:
        for key, _ in sel.select(timeout=1):
            i = key.data
            d = key.fileobj.recv(200)
            bufs[i] += d
            if bufs[i].endswith(b"\n") or not d:
                out[i] = (sent[i], time.monotonic(), bufs[i].decode().strip())
                sel.unregister(key.fileobj)
    for s in socks:
        s.close()
    return out


class DelayTest(DaemonTest):
    def test_twice_the_rate_is_smoothed_across_three_daemons(self):
        self.redis = self.start_redis()
        ds = [self.start_daemon(POLICIES, name="rl%d" % i) for i in range(3)]
        t0 = time.monotonic() + 0.3
        n = 40  # 20/s for 2 s: the last waits 1.95 s, within max 2 s
        got = timed_requests([d.port for d in ds], [t0 + 0.05 * i for i in range(n)],
                             "ALLOW ann smooth")
        self.assertEqual([r[2].split()[0] for r in got], ["ALLOWED"] * n, got)
        answered = [r[1] for r in got]
        # request i has the slot at i * 100 ms from the first's
        late = [a - (answered[0] + 0.1 * i) for i, a in enumerate(answered)]
        report("20/s at a 10/s funnel, 3 daemons: %d of %d allowed, answers %.1f to %.1f ms "
               "from their slots" % (n, n, 1000 * min(late), 1000 * max(late)))
        # the k-th answer has the k-th slot, k * 100 ms after the first was
        # decided: after the first was sent, before its answer was read
        first = min(r[0] for r in got)
        for k, a in enumerate(sorted(answered)):
            self.assertGreaterEqual(a - first, 0.1 * k - EARLY, (k, late))
            self.assertLess(a - min(answered), 0.1 * k + LATE, (k, late))
        # the funnel's own figures, once the slot came: empty after the last
        last = max(got, key=lambda r: r[1])[2].split()
        self.assertEqual(last[:4], ["ALLOWED", "1", "0", "0"])
        self.assertLessEqual(int(last[4]), 150)

    def test_past_the_bound_denied_at_once(self):
        self.redis = self.start_redis()
        mport = free_port()
        d = self.start_daemon(POLICIES, metrics='{listen: "127.0.0.1:%d"}' % mport)
        got = burst(d.port, "ALLOW bob smooth", 30)
        allowed = sorted(r for r in got if r[2].startswith("ALLOWED"))
        denied = [r for r in got if r[2].startswith("DENIED")]
        # one at once, then 20 more within 2 s (one per 100 ms drains in it)
        self.assertEqual((len(allowed), len(denied)), (21, 9), got)
        start = min(r[0] for r in got)
        for r in denied:
            self.assertLess(r[1] - start, LATE, r)
            self.assertRegex(r[2], r"^DENIED 1 0 \d+ \d+$")
        self.assertGreater(max(r[1] - r[0] for r in allowed), 1.9)
        m = scrape_metrics(mport)
        self.assertEqual(m["ratelimitd_delayed_total"], 20)
        self.assertEqual(m["ratelimitd_delayed_waiting"], 0)
        # without delay the same burst is one allowed
        got = burst(d.port, "ALLOW bob plain", 5)
        self.assertEqual(sorted(r[2].split()[0] for r in got), ["ALLOWED"] + ["DENIED"] * 4)

    def test_a_request_says_how_long_it_waits(self):
        """WAIT <ms> on ALLOW (line, RESP; wait= over HTTP): a bound of its
        own on a funnel without a delay, within the policy's on one with
        it; WAIT 0: never delayed."""
        self.redis = self.start_redis()
        port, hport = free_port(), free_port()
        d = self.start_daemon(POLICIES, port=port, admin=False,
                              listen=['"127.0.0.1:%d"' % port,
                                      '{address: "127.0.0.1:%d", protocol: http}' % hport])
        with Client(d.port, timeout=10 * SLOW) as c:
            t = time.monotonic()
            got = c.pipeline(["ALLOW fay plain WAIT 250"] * 4)
            took = time.monotonic() - t
            # one now, two within 250 ms, the fourth's slot 300 ms away
            self.assertEqual([r.split()[0] for r in got], ["ALLOWED"] * 3 + ["DENIED"], got)
            self.assertGreater(took, 0.19)
            self.assertRegex(c.request("ALLOW gus smooth WAIT 0"), r"^ALLOWED ")
            self.assertRegex(c.request("ALLOW gus smooth WAIT 0"), r"^DENIED 1 0 ")
            self.assertEqual(c.request("ALLOW gus smooth WAIT 60001"),
                             "ERR syntax WAIT takes milliseconds, 0 to 60000")
            self.assertEqual(c.request("ALLOW gus smooth 1 WAIT"),
                             "ERR syntax usage: ALLOW <user> <action> [<cost>] [WAIT <ms>] "
                             "[TRACE <traceparent>]")
        # RESP (redis-py), and HTTP's wait=
        try:
            import redis
        except ImportError:
            sys.path.append("/usr/lib/python3/dist-packages")
            import redis
        r = redis.Redis(port=d.port, socket_timeout=10 * SLOW)
        try:
            t = time.monotonic()
            a = r.execute_command("ALLOW", "hal", "plain", "WAIT", 500)
            b = r.execute_command("ALLOW", "hal", "plain", 1, "WAIT", 500)
            # b's slot: 100 ms after a was decided, after t
            self.assertEqual((a[0], b[0]), (1, 1))
            self.assertGreaterEqual(time.monotonic() - t, 0.1 - EARLY)
        finally:
            r.close()
        import http.client
        h = http.client.HTTPConnection("127.0.0.1", hport, timeout=10 * SLOW)
        self.addCleanup(h.close)
        codes, t = [], time.monotonic()
        for w in (250, 250, 250, 0):
            h.request("GET", "/v1/allow?user=ida&action=plain&wait=%d" % w)
            resp = h.getresponse()
            resp.read()
            codes.append(resp.status)
        # one after the other, each waits for its slot; wait=0 does not
        self.assertEqual(codes, [200, 200, 200, 429])
        self.assertGreater(time.monotonic() - t, 0.19)
        h.request("GET", "/v1/allow?user=ida&action=plain&wait=x")
        resp = h.getresponse()
        self.assertEqual((resp.status, b"WAIT takes" in resp.read()), (400, True))

    def test_memory_store_delays_alike(self):
        """store: memory: the same delayed answers, one daemon's own."""
        port = free_port()
        d = self.start_daemon(config='listen: ["127.0.0.1:%d"]\nstore: memory\npolicies:\n%s'
                              % (port, "".join("  %s: %s\n" % kv for kv in POLICIES.items())),
                              port=port)
        with Client(d.port, timeout=10 * SLOW) as c:
            t = time.monotonic()
            got = c.pipeline(["ALLOW ivy plain WAIT 250"] * 4 + ["ALLOW ivy smooth"] * 3)
            took = time.monotonic() - t
        self.assertEqual([r.split()[0] for r in got], ["ALLOWED"] * 3 + ["DENIED"] + ["ALLOWED"] * 3,
                         got)
        self.assertGreater(took, 0.19)

    def test_max_delayed_bounds_the_waiting(self):
        """max_delayed: 3 counts requests from when they go to the store:
        eight pipelined at once, three may be delayed (the first of them
        is allowed without a wait); the rest are decided at the funnel's
        own capacity."""
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES, max_delayed=3)
        with Client(d.port, timeout=10 * SLOW) as c:
            got = c.pipeline(["ALLOW cy smooth"] * 8)
        self.assertEqual([r.split()[0] for r in got], ["ALLOWED"] * 3 + ["DENIED"] * 5, got)

    def test_sigterm_answers_the_waiting_at_once(self):
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES)
        res = {}

        def run():
            res["got"] = burst(d.port, "ALLOW dan smooth", 12)
        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.4 * SLOW)
        t_term = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        t.join(30)
        got = res["got"]
        self.assertEqual([r[2].split()[0] for r in got], ["ALLOWED"] * 12, got)
        # the last slot was 1.1 s away: answered when SIGTERM came instead
        self.assertLess(max(r[1] for r in got) - t_term, 0.5 * SLOW)
        d.proc.wait(10)
        self.assertIn("answering", d.log())

    def test_sigterm_answers_at_once_what_redis_delays_after_it(self):
        """Requests whose answer comes from Redis after SIGTERM (frozen
        meanwhile) with a wait: answered at once, their slots reserved,
        not held past the drain (which ends before a 2 s wait could)."""
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES, redis_opts={"timeout": "3s"})
        with Client(d.port) as c:
            self.assertTrue(c.request("ALLOW fay smooth").startswith("ALLOWED"))
            self.redis.proc.send_signal(signal.SIGSTOP)
            try:
                c.send(*(["ALLOW fay smooth"] * 10))  # waits of up to 1 s
                time.sleep(0.3 * SLOW)
                d.proc.send_signal(signal.SIGTERM)
                time.sleep(0.3 * SLOW)
            finally:
                self.redis.proc.send_signal(signal.SIGCONT)
            t_cont = time.monotonic()
            got = [c.readline() for _ in range(10)]
        self.assertEqual([g.split()[0] for g in got], ["ALLOWED"] * 10, got)
        self.assertLess(time.monotonic() - t_cont, 0.5 * SLOW)
        d.proc.wait(10)

    def test_a_second_sigterm_with_delays_on_redis_exits_cleanly(self):
        """A second SIGTERM exits at once while delayed ALLOWs wait on a
        frozen Redis: the store answers them as it goes, after the server
        (a use after free of the delays once, caught by ASan here)."""
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES, redis_opts={"timeout": "5s"})
        with Client(d.port) as c:
            self.assertTrue(c.request("ALLOW gus smooth").startswith("ALLOWED"))
            self.redis.proc.send_signal(signal.SIGSTOP)
            try:
                c.send(*(["ALLOW gus smooth"] * 5))
                time.sleep(0.3 * SLOW)
                d.proc.send_signal(signal.SIGTERM)
                time.sleep(0.2 * SLOW)
                d.proc.send_signal(signal.SIGTERM)
                self.assertEqual(d.proc.wait(10 * SLOW), 0, d.log())
            finally:
                self.redis.proc.send_signal(signal.SIGCONT)
        self.assertIn("exiting now", d.log())

    def test_a_client_gone_while_waiting(self):
        """Ten clients leave while their 20 requests wait: the waits run
        out with no one to answer (ASan in the sanitizer build), their
        slots stay taken (a funnel cannot give one back), and the daemon
        serves on."""
        self.redis = self.start_redis()
        mport = free_port()
        d = self.start_daemon(POLICIES, metrics='{listen: "127.0.0.1:%d"}' % mport)
        t0 = time.monotonic()
        socks = []
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
            s.sendall(b"ALLOW eve smooth\nALLOW eve smooth\n")
            socks.append(s)
        wait_until(lambda: scrape_metrics(mport)["ratelimitd_delayed_waiting"] == 19,
                   5 * SLOW, what="19 waiting")
        for s in socks:
            s.close()
        with Client(d.port) as c:
            self.assertRegex(c.request("PEEK eve smooth"), r"^DENIED 1 0 \d+ \d+$")
            wait_until(lambda: scrape_metrics(mport)["ratelimitd_delayed_waiting"] == 0,
                       5 * SLOW, what="the waits run out")
            time.sleep(max(0, t0 + 2.2 - time.monotonic()))
            self.assertEqual(c.request("PEEK eve smooth").split()[:3], ["ALLOWED", "1", "1"])
        self.assertTrue(d.running())

class WindowDelayTest(DaemonTest):
    """A window's delay: a request denied now runs when its window has room
    (counted in the window it runs in), within its bound, through three
    daemons on one Redis."""

    WINDOWS = {"w": "{algorithm: fixed_window, limits: 10/1s, delay: {max: 1500ms}}",
               "s": "{algorithm: sliding_window, limits: 5/1s, delay: {max: 1s}}",
               "c": "{algorithm: sliding_window_counter, limits: 10/1s, delay: {max: 2s}}"}

    def after_a_second_starts(self, skew=0.1):
        """Sleeps until skew s after a whole second of Redis's clock (the
        windows' boundaries); returns (earliest, latest) monotonic time that
        second may have started at (Redis read its clock between the two)."""
        with self.redis.resp() as r:
            asked = time.monotonic()
            sec, us = (int(x) for x in r.call("TIME"))
            heard = time.monotonic()
        left = (1_000_000 - us) / 1e6
        time.sleep(left + skew)
        return asked + left, heard + left

    def test_fixed_window_runs_in_the_next_window(self):
        self.redis = self.start_redis()
        ds = [self.start_daemon(self.WINDOWS, name="rl%d" % i) for i in range(3)]
        lo, hi = self.after_a_second_starts()
        lo, hi = lo + 1, hi + 1  # the next window's start: the delayed ones' slot
        got = []
        threads = [threading.Thread(target=lambda p=d.port: got.extend(
            burst(p, "ALLOW joe w", 9))) for d in ds]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        # answered before the next window or in it (a busy machine reads
        # an answer late, not 900 ms late)
        now = [r for r in got if r[2].startswith("ALLOWED") and r[1] < lo - EARLY]
        later = [r for r in got if r[2].startswith("ALLOWED") and r[1] >= lo - EARLY]
        denied = [r for r in got if r[2].startswith("DENIED")]
        # 10 in this window, 10 at the start of the next, the rest at once:
        # a fixed window reaches no further than the next
        self.assertEqual((len(now), len(later), len(denied)), (10, 10, 7), got)
        starts = [r[1] for r in later]
        report("fixed_window 10/1s, 27 at once through 3 daemons: 10 now, 10 answered "
               "within %.1f ms of each other at the next window, 7 denied"
               % (1000 * (max(starts) - min(starts))))
        start = min(r[0] for r in got)
        for r in later:
            self.assertLess(r[1] - hi, LATE, (r, hi))
            self.assertRegex(r[2], r"^ALLOWED 10 \d 0 (9\d\d|1000)$")
        for r in denied:
            self.assertLess(r[1] - start, LATE, r)
            self.assertRegex(r[2], r"^DENIED 10 0 \d+ \d+$")

    def test_sliding_log_never_more_than_its_limit_in_any_window(self):
        self.redis = self.start_redis()
        ds = [self.start_daemon(self.WINDOWS, name="rl%d" % i) for i in range(3)]
        t0 = time.monotonic() + 0.3
        n = 24  # 12/s for 2 s at a 5/s log
        got = timed_requests([d.port for d in ds], [t0 + i / 12 for i in range(n)],
                             "ALLOW kim s")
        allowed = sorted(r[1] for r in got if r[2].startswith("ALLOWED"))
        denied = [r for r in got if r[2].startswith("DENIED")]
        # within 1 s of waiting: those up to a second's backlog are let in
        self.assertGreaterEqual(len(allowed), 10, got)
        most = max(sum(1 for a in allowed if x <= a < x + 1.0 - 2 * JITTER) for x in allowed)
        report("sliding_window 5/1s, 12/s for 2 s through 3 daemons: %d allowed, %d denied "
               "at once; at most %d answered in any second" % (len(allowed), len(denied), most))
        self.assertLessEqual(most, 5, allowed)
        for r in denied:  # each at once (sent 83 ms apart: from its own start)
            self.assertLess(r[1] - r[0], LATE, r)

    def test_counter_spaces_the_next_window(self):
        """The counter counts a delayed request in the next window as if
        this one ends at its limit: 10 now, then the next 10 spaced
        100 ms apart."""
        self.redis = self.start_redis()
        d = self.start_daemon(self.WINDOWS)
        lo, hi = self.after_a_second_starts()
        got = burst(d.port, "ALLOW lou c", 20)
        self.assertEqual([r[2].split()[0] for r in got], ["ALLOWED"] * 20, got)
        # answered before the next window or in it (a busy machine reads
        # an answer late, not 900 ms late)
        later = sorted(r[1] for r in got if r[1] >= lo + 1 - EARLY)
        self.assertEqual(len(later), 10, got)
        gaps = [b - a for a, b in zip(later, later[1:])]
        report("sliding_window_counter 10/1s, 20 at once: the 10 delayed answered %.0f to "
               "%.0f ms apart" % (1000 * min(gaps), 1000 * max(gaps)))
        # the k-th at k * 100 ms into the next window, however late the one
        # before it was read
        for k, a in enumerate(later):
            self.assertGreaterEqual(a - (lo + 1), 0.1 * k - EARLY, (k, gaps))
            self.assertLess(a - (hi + 1), 0.1 * k + LATE, (k, gaps))

    def test_ratelimitctl_waits(self):
        """ratelimitctl --wait: ALLOW ... WAIT, its answer when it comes."""
        import subprocess
        self.redis = self.start_redis()
        d = self.start_daemon({"one": "{algorithm: fixed_window, limits: 1/1s}"})
        ctl = (os.environ.get("RATELIMITCTL") or
               os.path.join(os.path.dirname(DAEMON), "ctl", "ratelimitctl"))

        def run(*args):
            t = time.monotonic()
            p = subprocess.run([ctl, "-s", "127.0.0.1:%d" % d.port] + list(args),
                               capture_output=True, text=True, timeout=20 * SLOW)
            return p.returncode, p.stdout.strip(), time.monotonic() - t
        self.after_a_second_starts()
        self.assertEqual(run("allow", "rex", "one")[0], 0)
        rc, out, took = run("-w", "10ms", "allow", "rex", "one")
        self.assertEqual(rc, 1, out)  # the next window is further than 10 ms
        rc, out, took = run("-w", "2s", "allow", "rex", "one")
        self.assertEqual(rc, 0, out)  # answered at the next window
        self.assertRegex(out, r"^allowed \(0 of 1 remaining")
        self.assertGreater(took, 0.5)
        rc, out, _ = run("-w", "2s", "peek", "rex", "one")
        self.assertEqual(rc, 2)

    def test_memory_store_and_a_client_gone(self):
        """store: memory delays a window alike; clients gone while waiting
        leave their units counted (they were charged when they came)."""
        port = free_port()
        d = self.start_daemon(config='listen: ["127.0.0.1:%d"]\nstore: memory\npolicies:\n%s'
                              % (port, "".join("  %s: %s\n" % kv for kv in self.WINDOWS.items())),
                              port=port)
        socks = []
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=5)
            s.sendall(b"ALLOW mo s\n")
            socks.append(s)
        time.sleep(0.3)
        for s in socks:
            s.close()
        with Client(d.port) as c:
            # 5 taken now, 3 counted ahead (in the log until they run)
            self.assertRegex(c.request("PEEK mo s"), r"^DENIED 5 0 \d+ \d+$")
            got = c.pipeline(["ALLOW mo s WAIT 2000"] * 2)
            self.assertEqual([r.split()[0] for r in got], ["ALLOWED"] * 2, got)
        self.assertTrue(d.running())


class SmoothingProxiesTest(DaemonTest):
    """nginx auth_request and Caddy forward_auth, as docs/proxies.md has
    them, in front of an application that notes when each request reaches
    it: a client at 20/s against login's 10/s funnel with a delay is never
    refused, and the application sees 10/s, evenly."""

    def setUp(self):
        super().setUp()
        import test_proxies
        self.p = test_proxies.ProxiesTest("run")
        self.p.tmpdir, self.p._procs = self.tmpdir, self._procs
        self.p.addCleanup = self.addCleanup
        self.p.fail = self.fail
        self.redis = self.start_redis()
        line, self.rl_nginx, self.rl_caddy = free_port(), free_port(), free_port()
        self.daemon = self.start_daemon(
            {"login": "{algorithm: funnel, capacity: 1, rate: 10/1s, delay: {max: 3s}}"},
            port=line, admin=False,
            listen=["127.0.0.1:%d" % line,
                    "{address: \"127.0.0.1:%d\", protocol: http, deny_status: 403}"
                    % self.rl_nginx,
                    "{address: \"127.0.0.1:%d\", protocol: http}" % self.rl_caddy])
        self.arrivals = []
        import http.server

        outer = self

        class App(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.arrivals.append(time.monotonic())
                self.send_response(200)
                self.send_header("Content-Length", "6")
                self.end_headers()
                self.wfile.write(b"hello\n")

            def log_message(self, *args):
                pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), App)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        self.p.app = srv.server_address[1]

    def smooth_through(self, port, what):
        import http.client
        n, t0, out = 40, time.monotonic() + 0.3, {}

        def one(i):
            time.sleep(max(0, t0 + 0.05 * i - time.monotonic()))
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", "/")
            out[i] = c.getresponse().status
            c.close()
        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        self.assertEqual([out.get(i) for i in range(n)], [200] * n)
        a = sorted(self.arrivals)
        gaps = [y - x for x, y in zip(a, a[1:])]
        report("%s: 20/s sent, the application saw %d in %.2f s, gaps %.0f to %.0f ms"
               % (what, len(a), a[-1] - a[0], 1000 * min(gaps), 1000 * max(gaps)))
        self.assertEqual(len(a), n)
        # the k-th reaches it at its slot, k * 100 ms after the first was
        # decided (after t0, before the first reached it): the last 3.9 s on
        for k, x in enumerate(a):
            self.assertGreaterEqual(x - t0, 0.1 * k - EARLY, (k, gaps))
            self.assertLess(x - a[0], 0.1 * k + LATE, (k, gaps))
        return a

    def test_nginx_smooths(self):
        from test_proxies import doc_block
        port = self.p.start_nginx(self.p.swap(doc_block("nginx"), self.rl_nginx))
        self.smooth_through(port, "nginx auth_request")

    def test_caddy_smooths(self):
        from test_proxies import CADDY, doc_block
        import os
        port = free_port()
        block = self.p.swap(doc_block("caddy"), self.rl_caddy)
        tmp = os.path.join(self.tmpdir, "caddy")
        os.makedirs(tmp)
        path = os.path.join(tmp, "Caddyfile")
        with open(path, "w") as f:
            f.write("{\n    admin off\n    auto_https off\n}\nhttp://127.0.0.1:%d {\n"
                    "    bind 127.0.0.1\n%s\n}\n" % (port, block))
        env = dict(os.environ, HOME=tmp, XDG_DATA_HOME=tmp, XDG_CONFIG_HOME=tmp)
        self.p.run_proxy([CADDY, "run", "--config", path, "--adapter", "caddyfile"], port,
                         env=env, log=os.path.join(tmp, "caddy.log"))
        self.smooth_through(port, "Caddy forward_auth")


if __name__ == "__main__":
    unittest.main()
