"""Blocks for hot keys (issue 32, item 1): a policy's `blocks: {max, ttl}`
lets a daemon take units in the same script call as a decision and answer
the pair's next requests from them. Three daemons and pipelining clients
on one Redis, on Redis Cluster and through Sentinel, with more load than
the limit: allowed answers, summed over the daemons, equal the limit in
every window, and what Redis counted; most answers come from blocks. A
funnel never allows more than capacity + rate x time. RESET, overrides
and reloads revoke blocks; config errors for what blocks cannot mean."""

import os
import re
import signal
import sys
import threading
import time
import unittest

from harness import (SLOW, Client, DaemonTest, free_port, make_config, run_cli, scrape_metrics,
                     wait_until)
from relay import Relay
from topology import add_cluster, add_sentinels, cluster_config, sentinel_redis_opts
from wan import Wan

LIMIT = 1500
PERIOD_S = 3
POLICIES = {"hot": "{algorithm: fixed_window, limits: %d/%ds, blocks: {max: 200}}"
                   % (LIMIT, PERIOD_S),
            "warm": "{algorithm: sliding_window_counter, limits: %d/%ds, blocks: {max: 200}}"
                    % (LIMIT, PERIOD_S),
            "burst": "{algorithm: funnel, capacity: 300, rate: 600/1s, "
                     "blocks: {max: 100, ttl: 50ms}}",
            "long": "{algorithm: fixed_window, limits: 100000/60s, blocks: {max: 50}}"}


class Load:
    """Clients pipelining ALLOW <user> <action>, 16 at a time, on the
    daemons given, until `until` (monotonic); each answer kept with the
    time it was read."""

    def __init__(self, ports, action, user, nclients, until):
        self.ports, self.action, self.user = ports, action, user
        self.until = until
        self.lock = threading.Lock()
        self.answers = []  # (monotonic time read, daemon index, reply)
        self.errors = []
        self.first_send = None
        ts = [threading.Thread(target=self.client, args=(i,)) for i in range(nclients)]
        for t in ts:
            t.start()
        self.threads = ts

    def client(self, i):
        d = i % len(self.ports)
        mine = []
        try:
            with Client(port=self.ports[d], timeout=10 * SLOW) as c:
                line = "ALLOW %s %s" % (self.user, self.action)
                while time.monotonic() < self.until:
                    with self.lock:
                        if self.first_send is None:
                            self.first_send = time.monotonic()
                    c.send(*([line] * 16))
                    for _ in range(16):
                        mine.append((time.monotonic(), d, c.readline()))
        except Exception as e:  # noqa: BLE001 - reported by join()
            with self.lock:
                self.errors.append(repr(e))
        with self.lock:
            self.answers.extend(mine)

    def join(self, test):
        for t in self.threads:
            t.join(60 * SLOW)
        test.assertEqual(self.errors, [])
        bad = [a for a in self.answers if not a[2].startswith(("ALLOWED ", "DENIED "))]
        test.assertEqual(bad, [])
        return self

    def allowed(self):
        return sum(1 for a in self.answers if a[2].startswith("ALLOWED "))


def redis_now(server):
    with server.resp() as r:
        s, us = r.call("TIME")
    return int(s) + int(us) / 1e6


def to_window_start(server, period, margin=0.15):
    """Sleeps until just after a window of `period` s starts on Redis's
    clock; returns the monotonic time that window ends at."""
    now = redis_now(server)
    start = (int(now // period) + 1) * period
    time.sleep(start - now + margin)
    return time.monotonic() + period - 2 * margin


class BlocksMixin:
    def three(self, policies=POLICIES, redis=None):
        mports = [free_port() for _ in range(3)]
        ds = [self.start_daemon(policies, name="rl%d" % i, redis=redis,
                                metrics='{listen: "127.0.0.1:%d"}' % mports[i])
              for i in range(3)]
        return ds, mports

    def exact_windows(self, action, redis_of, ports, mports, windows=2):
        """More load than the limit for `windows` whole windows: allowed
        answers, summed over the daemons, are the limit in each, and what
        Redis counted."""
        server = redis_of()
        before = [scrape_metrics(p) for p in mports]
        end = to_window_start(server, PERIOD_S)
        end += (windows - 1) * PERIOD_S
        load = Load(ports, action, "ann", 12, end).join(self)
        allowed = load.allowed()
        denied = len(load.answers) - allowed
        after = [scrape_metrics(p) for p in mports]

        def delta(name):
            return int(sum(a[name] - b[name] for a, b in zip(after, before)))
        from_blocks = delta('ratelimitd_decisions_total{result="allowed",source="block"}')
        from_redis = delta('ratelimitd_decisions_total{result="allowed",source="redis"}')
        lapsed = delta('ratelimitd_block_units_total{event="lapsed"}')
        granted = delta('ratelimitd_block_units_total{event="granted"}')
        sys.stderr.write("[figures] %s, 3 daemons, %d windows of %d/%ds: %d answers, %d "
                         "allowed (%d from blocks, %d by Redis), %d denied; block units "
                         "granted %d, lapsed %d\n"
                         % (action, windows, LIMIT, PERIOD_S, len(load.answers), allowed,
                            from_blocks, from_redis, denied, granted, lapsed))
        # the load was more than the limit in each window
        self.assertGreater(denied, LIMIT)
        self.assertEqual(allowed, windows * LIMIT)
        self.assertEqual(from_blocks + from_redis, allowed)
        self.assertEqual(granted - lapsed, from_blocks)
        self.assertGreater(from_blocks, allowed // 2)
        return load


class BlocksTest(BlocksMixin, DaemonTest):

    def test_fixed_window_three_daemons_allow_exactly_the_limit(self):
        self.redis = self.start_redis()
        ds, mports = self.three()
        self.exact_windows("hot", lambda: self.redis, [d.port for d in ds], mports)

    def test_counter_three_daemons_never_over(self):
        """The counter's estimate weighs the previous window: exact to it,
        checked against what the script counts."""
        self.redis = self.start_redis()
        ds, mports = self.three()
        server = self.redis
        end = to_window_start(server, PERIOD_S)
        load = Load([d.port for d in ds], "warm", "bob", 12, end).join(self)
        # one window, the first: the limit exactly, as Redis counted
        with self.redis.resp() as r:
            v = r.call("GET", "rl:{warm:bob}:c%d" % (PERIOD_S * 1000))
        self.assertEqual(load.allowed(), LIMIT)
        self.assertEqual(int(v.split(b":")[1]), LIMIT)

    def test_funnel_never_more_than_capacity_and_rate(self):
        self.redis = self.start_redis()
        ds, mports = self.three()
        seconds = 2.5
        load = Load([d.port for d in ds], "burst", "cy", 9,
                    time.monotonic() + seconds).join(self)
        times = sorted(a[0] for a in load.answers if a[2].startswith("ALLOWED "))
        span = times[-1] - load.first_send
        bound = 300 + 600 * span
        m = [scrape_metrics(p) for p in mports]
        from_blocks = sum(x['ratelimitd_decisions_total{result="allowed",source="block"}']
                          for x in m)
        sys.stderr.write("[figures] funnel 300 + 600/s, 3 daemons, %.2f s: %d allowed (%d "
                         "from blocks), bound %.0f\n" % (span, len(times), from_blocks, bound))
        self.assertLessEqual(len(times), bound)
        self.assertGreater(len(times), 0.8 * bound)
        self.assertGreater(from_blocks, 0)

    @staticmethod
    def hold_some(c, user, mport):
        """ALLOWs of user on c, 8 at a time, until its daemon holds some
        units of a block: a block may be used up exactly by the requests
        that happened to come, more so under the sanitizers."""
        for _ in range(50):
            c.send(*(["ALLOW %s long" % user] * 8))
            got = [c.readline() for _ in range(8)]
            assert all(x.startswith("ALLOWED 100000 ") for x in got), got
            m = scrape_metrics(mport)
            if m["ratelimitd_block_units_held"] > 0:
                return m
        raise AssertionError("no block units held after 400 requests of " + user)

    def test_reset_override_and_reload_revoke_blocks(self):
        self.redis = self.start_redis()
        ds, mports = self.three()
        a, b = ds[0], ds[1]
        with Client(a.port) as c, Client(b.port) as admin:
            m = self.hold_some(c, "dan", mports[0])
            self.assertGreater(m['ratelimitd_decisions_total{result="allowed",source="block"}'],
                               0)
            held = m["ratelimitd_block_units_held"]
            # RESET through another daemon: a's blocks for dan go (the
            # notice), and its next answer is Redis's, from a fresh count
            self.assertEqual(admin.request("RESET dan long"), "OK")
            wait_until(lambda: scrape_metrics(mports[0])[
                'ratelimitd_block_units_total{event="revoked"}'] == held, 5 * SLOW,
                what="the block revoked by the RESET")
            r = c.request("ALLOW dan long")
            self.assertRegex(r, r"^ALLOWED 100000 99999 0 ")
            # an override through another daemon: a's block for dan goes,
            # and the override's limits answer at once
            c.send(*(["ALLOW dan long"] * 32))
            [c.readline() for _ in range(32)]
            self.assertEqual(admin.request("OVERRIDE dan long 5/60s"), "OK")
            wait_until(lambda: c.request("ALLOW dan long").split()[1] == "5", 5 * SLOW,
                       interval=0.02, what="the override answering on a")
            self.assertEqual(admin.request("UNOVERRIDE dan long"), "OK")
            # a reload revokes the daemon's own blocks
            before = self.hold_some(c, "eve", mports[0])
            a.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: scrape_metrics(mports[0])["ratelimitd_block_units_held"] == 0,
                       5 * SLOW, what="blocks dropped by the reload")
            after = scrape_metrics(mports[0])
            self.assertGreater(after['ratelimitd_block_units_total{event="revoked"}'],
                               before['ratelimitd_block_units_total{event="revoked"}'])

    def test_a_silent_subscription_is_replaced_and_its_blocks_dropped(self):
        """The subscription to RESET notices dies without FIN or RST: its
        PING goes unanswered, the daemon replaces it within a PING interval
        and twice redis.timeout, and drops its blocks; a RESET it never
        heard of is no longer answered past from a block."""
        self.redis = self.start_redis()
        relay = Relay(self.redis.port)
        self.addCleanup(relay.close)
        mport = free_port()
        a = self.start_daemon(POLICIES, name="rla", redis="127.0.0.1:%d" % relay.port,
                              metrics='{listen: "127.0.0.1:%d"}' % mport)
        b = self.start_daemon(POLICIES, name="rlb")
        with Client(a.port) as c, Client(b.port) as admin:
            wait_until(lambda: relay.subscribers() == 1, 5 * SLOW, what="a's subscription")
            self.hold_some(c, "fay", mport)
            relay.freeze_subscribers()
            t0 = time.monotonic()
            # the notice of this RESET never reaches a
            self.assertEqual(admin.request("RESET fay long"), "OK")
            wait_until(lambda: relay.subscribers() == 1, 10 * SLOW, interval=0.05,
                       what="a's subscription replaced")
            sys.stderr.write("[figures] a silent subscription replaced after %.2f s "
                             "(redis.timeout 1s)\n" % (time.monotonic() - t0))
            self.assertIn("redis subscription: no answer to PING", a.log())
            # a's next answer is Redis's, from the count the RESET emptied
            self.assertRegex(c.request("ALLOW fay long"), r"^ALLOWED 100000 99999 0 ")

    def test_config_errors(self):
        cases = [
            ("{limits: 5/60s, blocks: {max: 10}}", "a sliding_window keeps one entry per unit"),
            ("{algorithm: fixed_window, limits: 5/60s, blocks: {max: 10}, "
             "ban: {after: 3, within: 1m, for: 1h}}", "a ban must see every request"),
            ("{algorithm: fixed_window, limits: 5/60s, blocks: {max: 10, ttl: 50ms}}",
             "ttl is a funnel's"),
            ("{algorithm: funnel, capacity: 5, rate: 5/1s, blocks: {ttl: 50ms}}",
             "blocks need max"),
            ("{algorithm: concurrency, limit: 5, lease: 30s, blocks: {max: 10}}",
             "a concurrency policy has no blocks"),
        ]
        for policy, why in cases:
            path = os.path.join(self.tmpdir, "bad.yaml")
            with open(path, "w") as f:
                f.write(make_config(["127.0.0.1:%d" % free_port()], {"address": "127.0.0.1:1"},
                                    {"p": policy}))
            r = run_cli(["-t", "-c", path])
            self.assertNotEqual(r.returncode, 0, policy)
            self.assertIn(why, r.stderr, policy)
            self.assertRegex(r.stderr, r"bad\.yaml:\d+:\d+: ", policy)


def window_value(server, action, user):
    """The (key, value) of a window policy's one key for (action, user)."""
    with server.resp() as r:
        keys = r.call("KEYS", "*{%s:%s}*" % (action, user))
        assert len(keys) == 1, keys
        v = r.call("GET", keys[0])
    return keys[0], v.decode() if v is not None else None


def window_count(server, action, user):
    """A window's count (a fixed window's, a counter's current bucket)."""
    return int(window_value(server, action, user)[1].split(":")[1])


GIVE_LIMIT = 300
GIVE_POLICIES = {"gf": "{algorithm: fixed_window, limits: %d/1h, blocks: {max: 50}}" % GIVE_LIMIT,
                 "gc": "{algorithm: sliding_window_counter, limits: %d/1h, blocks: {max: 50}}"
                       % GIVE_LIMIT}
NO_BLOCKS = {"gf": "{algorithm: fixed_window, limits: %d/1h}" % GIVE_LIMIT,
             "gc": "{algorithm: sliding_window_counter, limits: %d/1h}" % GIVE_LIMIT}
GAVE_BACK = r"gave back (\d+) units of (\d+) blocks?(.*)$"


class GiveBackTest(DaemonTest):
    """A graceful stop gives the units a daemon holds back to the window
    they were counted in (issue 46, item 4), and never to a later one."""

    def hold(self, c, action, user, allowed):
        """ALLOWs of user on action, 8 at a time, until Redis counts more
        than were answered (the daemon holds the rest); returns the count
        of ALLOWED answers."""
        for _ in range(30):
            c.send(*(["ALLOW %s %s" % (user, action)] * 8))
            got = [c.readline() for _ in range(8)]
            self.assertTrue(all(x.startswith("ALLOWED ") for x in got), got)
            allowed += 8
            if window_count(self.redis, action, user) > allowed:
                return allowed
        raise AssertionError("no units held for %s after %d requests" % (action, allowed))

    def test_sigterm_gives_held_units_back(self):
        self.redis = self.start_redis()
        # an hour's windows, away from an hour's end (a give-back across
        # it would rightly take nothing back)
        now = redis_now(self.redis)
        if 3600 - now % 3600 < 30:
            time.sleep(3600 - now % 3600 + 0.5)
        mport = free_port()
        a = self.start_daemon(GIVE_POLICIES, name="rla",
                              metrics='{listen: "127.0.0.1:%d"}' % mport)
        allowed, held = {}, {}
        with Client(a.port) as c:
            for action in ("gf", "gc"):
                allowed[action] = self.hold(c, action, "ann", 0)
                held[action] = window_count(self.redis, action, "ann") - allowed[action]
        m = scrape_metrics(mport)
        self.assertEqual(m["ratelimitd_block_units_held"], sum(held.values()))
        self.assertEqual(m['ratelimitd_block_units_total{event="returned"}'], 0)
        a.signal(signal.SIGTERM)
        self.assertEqual(a.wait_exit(10 * SLOW), 0)
        # Redis counts what was answered, no more
        for action in ("gf", "gc"):
            self.assertEqual(window_count(self.redis, action, "ann"), allowed[action], action)
        line = a.wait_log(GAVE_BACK)
        sys.stderr.write("[figures] held %s; %s\n" % (held, line.strip()))
        got = re.search(GAVE_BACK, line)
        self.assertEqual(int(got.group(1)), sum(held.values()), line)
        self.assertGreaterEqual(int(got.group(2)), 2, line)
        self.assertEqual(got.group(3), "", line)
        # and another daemon allows the rest of the limit, those units too
        b = self.start_daemon(NO_BLOCKS, name="rlb")
        with Client(b.port) as c:
            for action in ("gf", "gc"):
                n = GIVE_LIMIT - allowed[action]
                c.send(*(["ALLOW ann %s" % action] * (n + 1)))
                got = [c.readline() for _ in range(n + 1)]
                self.assertTrue(all(x.startswith("ALLOWED ") for x in got[:n]), action)
                self.assertTrue(got[n].startswith("DENIED "), (action, got[n]))

    def test_units_are_not_given_to_the_next_window(self):
        """Units held in a window, given back on a path slower than
        what is left of it: Redis is in the next window when they come,
        and takes none (that window's count is another's)."""
        self.redis = self.start_redis()
        wan = Wan(self.redis.port, 0)
        self.addCleanup(wan.close)
        policies = {"sf": "{algorithm: fixed_window, limits: 1000/2s, blocks: {max: 50}}",
                    "sc": "{algorithm: sliding_window_counter, limits: 1000/2s, "
                          "blocks: {max: 50}}"}
        a = self.start_daemon(policies, name="rla", redis=wan.address,
                              redis_opts={"timeout": "3s"})
        b = self.start_daemon({k: "{algorithm: %s, limits: 1000/2s}" % w
                               for k, w in (("sf", "fixed_window"),
                                            ("sc", "sliding_window_counter"))}, name="rlb")
        for attempt in range(3):
            end = to_window_start(self.redis, 2, margin=0.1)  # monotonic, 0.2 s early
            with Client(a.port) as c:
                allowed = {k: self.hold(c, k, "u%d" % attempt, 0) for k in ("sf", "sc")}
            # the way to Redis slows to 0.5 s, and the stop comes 0.2 s
            # before the window's end: the give-back reaches Redis 0.3 s
            # after it
            wan.delay_s = 0.5
            time.sleep(max(0, end - time.monotonic()))
            if time.monotonic() > end + 0.05:
                wan.delay_s = 0
                continue  # too late (a slow run): the blocks may have lapsed here
            a.signal(signal.SIGTERM)
            break
        else:
            self.fail("no stop within a window's last 0.2 s")
        user = "u%d" % attempt
        # in the next window, before the give-back reaches it, another
        # daemon's units
        time.sleep(0.25)
        with Client(b.port) as c:
            for k in ("sf", "sc"):
                c.send(*(["ALLOW %s %s" % (user, k)] * 5))
                got = [c.readline() for _ in range(5)]
                self.assertTrue(all(x.startswith("ALLOWED ") for x in got), got)
        before = {k: window_value(self.redis, k, user)[1] for k in ("sf", "sc")}
        for k in ("sf", "sc"):
            self.assertEqual(int(before[k].split(":")[1]), 5, (k, before[k], allowed))
        self.assertEqual(a.wait_exit(10 * SLOW), 0)
        line = a.wait_log(GAVE_BACK)
        sys.stderr.write("[figures] across a window's end: %s\n" % line.strip())
        got = re.search(GAVE_BACK, line)
        # the blocks were given back, Redis answered, and took none of
        # their units
        self.assertEqual(int(got.group(1)), 0, line)
        self.assertGreaterEqual(int(got.group(2)), 2, line)
        self.assertRegex(got.group(3), r"; \d+ lapsed \(0 calls failed\)$")
        after = {k: window_value(self.redis, k, user)[1] for k in ("sf", "sc")}
        self.assertEqual(after, before)

    def test_a_store_that_does_not_answer_holds_the_exit_no_longer(self):
        """The give-back waits for Redis within the drain's bound
        (redis.timeout + 2 s): with no answer, the units lapse, said so,
        and the daemon exits in time."""
        self.redis = self.start_redis()
        wan = Wan(self.redis.port, 0)
        self.addCleanup(wan.close)
        a = self.start_daemon(GIVE_POLICIES, name="rla", redis=wan.address)
        with Client(a.port) as c:
            self.hold(c, "gf", "ann", 0)
        wan.delay_s = 30
        t0 = time.monotonic()
        a.signal(signal.SIGTERM)
        self.assertEqual(a.wait_exit(10 * SLOW), 0)
        took = time.monotonic() - t0
        line = a.wait_log(GAVE_BACK)
        sys.stderr.write("[figures] a silent store: exit after %.2f s; %s\n"
                         % (took, line.strip()))
        self.assertLess(took, (1 + 2) * SLOW + 1)
        self.assertRegex(line, r"gave back 0 units of \d+ blocks?; \d+ lapsed "
                               r"\(\d+ calls? failed: .+\)$")


class BlocksClusterTest(BlocksMixin, DaemonTest):
    def test_cluster_three_daemons_allow_exactly_the_limit(self):
        cl = add_cluster(self)
        ports, mports, ds = [], [], []
        for i in range(3):
            port, mport = free_port(), free_port()
            ports.append(port)
            mports.append(mport)
            ds.append(self.start_daemon(
                config=cluster_config(port, cl, POLICIES,
                                      metrics='{listen: "127.0.0.1:%d"}' % mport),
                port=port, name="rl%d" % i))
        self.exact_windows("hot", lambda: cl.masters()[0], ports, mports, windows=1)


class BlocksSentinelTest(BlocksMixin, DaemonTest):
    def test_sentinel_three_daemons_allow_exactly_the_limit(self):
        ss = add_sentinels(self)
        ports, mports = [], []
        for i in range(3):
            port, mport = free_port(), free_port()
            ports.append(port)
            mports.append(mport)
            self.start_daemon(
                config=make_config(["127.0.0.1:%d" % port], sentinel_redis_opts(ss.addresses()),
                                   POLICIES, metrics='{listen: "127.0.0.1:%d"}' % mport),
                port=port, name="rl%d" % i)
        for p in ports:
            with Client(p) as c:
                wait_until(lambda: c.request("ALLOW ready hot").startswith("ALLOWED "),
                           10 * SLOW, interval=0.05, what="decisions from the master")
        self.exact_windows("hot", lambda: ss.master0, ports, mports, windows=1)


if __name__ == "__main__":
    unittest.main()
