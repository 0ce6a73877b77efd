"""Redis Cluster backend (issue 5) against a real cluster on loopback
(topology.py): routing by hash slot, exact limits with several daemons,
live resharding (ASK / TRYAGAIN / MOVED) under traffic, map refresh,
failover of a master, SCRIPT FLUSH on every node, configuration errors."""

import os
import re
import threading
import time
import unittest

from harness import (SLOW, STORE_MARGIN, Client, DaemonTest, commandstats, free_port, is_real,
                     parse_decision, race, run_cli, scrape_metrics, wait_until)
from load import Traffic
from slots import NSLOTS, key_slot, user_key, user_slot, users_in_slots
from topology import add_cluster, cluster_config, errorstats

POLICIES = {
    "reply": "5/60s",
    "login": "[3/10s, 20/60s]",
    "up": "{algorithm: funnel, capacity: 15, rate: 30/60s}",
    "big": "100000/60s",
}

WEIRD_USERS = [b"a}b", b"a%7Db", b"{x}", b"}{", b"a:b", b"%", b"\xc3\xa9", b"rl:{big:a}", b"{",
               b"}", b"x{}y"]


def report(msg):
    """Figures for the test log (meson keeps stderr)."""
    import sys
    sys.stderr.write("[figures] %s\n" % msg)
    sys.stderr.flush()


class ClusterBase(DaemonTest):
    def cluster(self, **kw):
        self.cl = add_cluster(self, **kw)
        return self.cl

    def cdaemon(self, policies=POLICIES, name="rl", timeout="1s", redis_extra=None,
                wait=True, **top):
        port = free_port()
        cfg = cluster_config(port, self.cl, policies, timeout=timeout,
                             redis_extra=redis_extra, **top)
        return self.start_daemon(config=cfg, port=port, name=name, wait=wait)

    def client(self, d, timeout=None):
        c = d.client(timeout=timeout or 10 * SLOW)
        self.addCleanup(c.close)
        return c

    def assertAllReal(self, lines, replies, what=""):
        """Every reply is a decision made by Redis (lines: the requests, for
        the message; [] to number them)."""
        lines = list(lines) or ["#%d" % i for i in range(len(replies))]
        self.assertEqual(len(lines), len(replies))
        bad = [(ln, r) for ln, r in zip(lines, replies) if not is_real(r)]
        self.assertEqual(bad[:10], [], "%s: %d replies not decided by Redis" % (what, len(bad)))

    def keys_everywhere(self):
        """{key: address of the master holding it} over all live masters;
        fails if one key is on two masters."""
        where = {}
        for n in self.cl.masters():
            for k in n.keys("rl:*"):
                self.assertNotIn(k, where, "key %r on %s and %s" % (k, where.get(k), n.address))
                where[k] = n.address
        return where

    def assertKeysOnOwners(self, where):
        """Each key is on the master that owns its slot, and our CRC16 agrees
        with CLUSTER KEYSLOT."""
        owners = self.cl.owner_map()
        node = self.cl.masters()[0]
        with node.resp() as r:
            for k, addr in where.items():
                slot = key_slot(k)
                self.assertEqual(r.call("CLUSTER", "KEYSLOT", k), slot, k)
                self.assertEqual(owners[slot], addr, "key %r (slot %d) on %s, owner %s"
                                 % (k, slot, addr, owners[slot]))


class ClusterBasicsTest(ClusterBase):
    def test_allow_peek_reset_on_every_node(self):
        """ALLOW / PEEK / RESET for 300 users over all three masters: the
        same replies as with one Redis, every key on the master owning its
        slot, RESET deletes the keys on that master."""
        self.cluster()
        mport = free_port()
        d = self.cdaemon(metrics='{listen: "127.0.0.1:%d"}' % mport)
        c = self.client(d)
        users = ["user%d" % i for i in range(300)]
        per_node = {}
        owners = self.cl.owner_map()
        for u in users:
            per_node.setdefault(owners[user_slot("reply", u)], []).append(u)
        self.assertEqual(len(per_node), 3, "users do not cover the three masters")
        self.assertTrue(all(len(v) > 50 for v in per_node.values()), per_node.keys())

        got = c.pipeline(["PEEK %s reply" % u for u in users])
        self.assertEqual(got, ["ALLOWED 5 5 0 0"] * len(users))
        for i in range(5):
            got = c.pipeline(["ALLOW %s reply" % u for u in users])
            for r in got:
                self.assertDecision(r, "ALLOWED", 5, 4 - i, 0, (50000, 60000) if i else 60000)
        got = c.pipeline(["ALLOW %s reply" % u for u in users])
        for r in got:
            self.assertDecision(r, "DENIED", 5, 0, (1, 60000), (1, 60000))
        got = c.pipeline(["ALLOW %s up 3" % u for u in users])
        for r in got:
            self.assertDecision(r, "ALLOWED", 15, 12, 0, (5900, 6000))
        got = c.pipeline(["ALLOW %s login" % u for u in users])
        for r in got:
            self.assertDecision(r, "ALLOWED", 3, 2, 0, (9000, 10000))

        where = self.keys_everywhere()
        want = set()
        for u in users:
            want |= {user_key("reply", u, "s60000"), user_key("up", u, "f"),
                     user_key("login", u, "s10000"), user_key("login", u, "s60000")}
        self.assertEqual(set(where), want)
        self.assertKeysOnOwners(where)
        for addr, us in per_node.items():
            self.assertEqual(where[user_key("reply", us[0], "s60000")], addr)

        # PEEK sees the state on every node
        got = c.pipeline(["PEEK %s up" % u for u in users])
        for r in got:
            self.assertDecision(r, "ALLOWED", 15, 12, 0)
        # RESET half of them: their keys go, the others stay
        half = users[::2]
        self.assertEqual(c.pipeline(["RESET %s reply" % u for u in half]), ["OK"] * len(half))
        self.assertEqual(c.pipeline(["RESET %s login" % u for u in half]), ["OK"] * len(half))
        got = c.pipeline(["PEEK %s reply" % u for u in users])
        for u, r in zip(users, got):
            if u in half:
                self.assertEqual(r, "ALLOWED 5 5 0 0", u)
            else:
                self.assertDecision(r, "DENIED", 5, 0)
        where = self.keys_everywhere()
        for u in users:
            present = user_key("reply", u, "s60000") in where
            self.assertEqual(present, u not in half, u)
            self.assertEqual(user_key("login", u, "s10000") in where, u not in half, u)
            self.assertIn(user_key("up", u, "f"), where)
        # metrics: a pool of redis.connections (default 2) per master, all up;
        # the 11 ALLOW/PEEK rounds above, answered by Redis or the deny cache
        m = scrape_metrics(mport)
        self.assertEqual(m["ratelimitd_redis_connections"], 3 * 2)
        self.assertEqual(m["ratelimitd_redis_connections_up"], 3 * 2)
        self.assertEqual(m["ratelimitd_redis_up"], 1)
        answered = {k: v for k, v in m.items() if k.startswith("ratelimitd_decisions_total")}
        self.assertEqual(sum(answered.values()), 11 * len(users), answered)
        self.assertEqual(answered['ratelimitd_decisions_total{result="denied",source="fallback"}']
                         + answered['ratelimitd_decisions_total{result="allowed",source="fallback"}'],
                         0, answered)
        self.assertLogClean(d)

    def test_weird_users_hash_to_their_escaped_tag(self):
        """Users with braces and escapes land in the slot of their escaped
        tag, on its owner, and never share state."""
        self.cluster()
        d = self.cdaemon()
        c = self.client(d)
        for i, u in enumerate(WEIRD_USERS):
            c.sendraw(b"ALLOW " + u + b" big %d\n" % (i + 1))
            self.assertDecision(c.readline(), "ALLOWED", 100000, 100000 - (i + 1), 0)
        for i, u in enumerate(WEIRD_USERS):
            c.sendraw(b"PEEK " + u + b" big\n")
            self.assertDecision(c.readline(), "ALLOWED", 100000, 100000 - (i + 1), 0)
        where = self.keys_everywhere()
        self.assertEqual(set(where), {user_key("big", u, "s60000") for u in WEIRD_USERS})
        self.assertKeysOnOwners(where)
        self.assertGreater(len(set(where.values())), 1, "all weird users on one node")

    def test_reset_reaches_every_daemon(self):
        """RESET through one daemon clears the other daemons' deny caches
        (the pub/sub notice crosses the cluster), for users on every node."""
        self.cluster()
        d1 = self.cdaemon(name="rl1")
        d2 = self.cdaemon(name="rl2")
        c1, c2 = self.client(d1), self.client(d2)
        owners = self.cl.owner_map()
        users = []
        for m in self.cl.masters():
            slots = {s for s in range(NSLOTS) if owners[s] == m.address}
            users += users_in_slots("reply", slots, 3, name="r%d-" % m.port)
        for u in users:
            c1.pipeline(["ALLOW %s reply" % u] * 5)
            # denied through d2 (Redis), then from d2's deny cache
            self.assertDecision(c2.request("ALLOW %s reply" % u), "DENIED", 5, 0)
            self.assertDecision(c2.request("ALLOW %s reply" % u), "DENIED", 5, 0)
        # repeats of a denial are answered from the deny cache on every node
        calls0 = sum(commandstats(m).get("evalsha", 0) for m in self.cl.masters())
        for _ in range(3):
            for u in users:
                self.assertDecision(c2.request("ALLOW %s reply" % u), "DENIED", 5, 0)
            time.sleep(0.2)
        self.assertEqual(sum(commandstats(m).get("evalsha", 0) for m in self.cl.masters()),
                         calls0, "cached denials went to Redis")
        for u in users:
            self.assertEqual(c1.request("RESET %s reply" % u), "OK")
        for u in users:
            wait_until(lambda: c2.request("PEEK %s reply" % u) == "ALLOWED 5 5 0 0",
                       2 * SLOW, interval=0.05, what="RESET of %s seen by the other daemon" % u)
            self.assertDecision(c2.request("ALLOW %s reply" % u), "ALLOWED", 5, 4)

    def test_batches_per_node(self):
        """Requests that arrive together are decided in batches per master
        (many decisions per script call), as with one Redis; every node
        gets its share."""
        self.cluster()
        d = self.cdaemon(redis_extra={"connections": 1})
        c = self.client(d)
        c.request("PING")
        users = ["b%d" % i for i in range(600)]
        ms = self.cl.masters()
        calls0 = {m.address: commandstats(m).get("evalsha", 0) for m in ms}
        got = c.pipeline(["ALLOW %s reply" % u for u in users])
        self.assertEqual(got, ["ALLOWED 5 4 0 60000"] * len(users))
        calls = {m.address: commandstats(m).get("evalsha", 0) + commandstats(m).get("eval", 0)
                 - calls0[m.address] for m in ms}
        report("batching: %d decisions in %s script calls per master"
               % (len(users), sorted(calls.values())))
        self.assertTrue(all(v > 0 for v in calls.values()), calls)
        self.assertLessEqual(sum(calls.values()), len(users) // 4,
                             "fewer than 4 decisions per script call: %s" % calls)

    def test_single_node_cluster(self):
        """A 1-master cluster: CLUSTER SLOTS names the node with an empty IP
        (it never met another node); the daemon uses the seed's address."""
        self.cluster(masters=1, announce_ip=False)
        view = self.cl.nodes[0].call("CLUSTER", "SLOTS")
        self.assertEqual(view[0][2][0], b"", "expected an empty IP in CLUSTER SLOTS")
        d = self.cdaemon()
        c = self.client(d)
        users = ["one%d" % i for i in range(50)]
        got = c.pipeline(["ALLOW %s reply" % u for u in users])
        self.assertEqual(got, ["ALLOWED 5 4 0 60000"] * len(users))
        self.assertEqual(len(self.cl.nodes[0].keys("rl:*")), 50)

    def test_password(self):
        """requirepass on every node: the daemon authenticates to each; with
        a wrong password every answer is the on_store_error one."""
        self.cluster(password="s3cret-pw")
        d = self.cdaemon(redis_extra={"password": "s3cret-pw"})
        c = self.client(d)
        users = ["pw%d" % i for i in range(60)]
        self.assertEqual(c.pipeline(["ALLOW %s reply" % u for u in users]),
                         ["ALLOWED 5 4 0 60000"] * len(users))
        self.assertEqual(len(self.keys_everywhere()), 60)
        self.assertNotIn("s3cret-pw", d.log())
        bad = self.cdaemon(name="bad", timeout="200ms", redis_extra={"password": "badpw-x9"})
        cb = self.client(bad)
        t = time.monotonic()
        got = cb.pipeline(["ALLOW %s reply" % u for u in users[:10]])
        self.assertLess(time.monotonic() - t, 0.2 + STORE_MARGIN * 2)
        self.assertEqual(got, ["ALLOWED 5 -1 0 -1"] * 10)
        self.assertNotIn("badpw-x9", bad.log())


class ClusterExactTest(ClusterBase):
    def test_three_daemons_many_connections_exact(self):
        """1200 users over all slots, three daemons, 36 connections pipelining
        concurrently: for every (user, action) exactly the limit is allowed,
        each allowed request saw its own remaining value."""
        self.cluster()
        pol = {"ex": "4/60s", "exf": "{algorithm: funnel, capacity: 3, rate: 1/60s}",
               "exm": "[2/10s, 5/60s]", "exw": "{algorithm: fixed_window, limits: 4/1d}",
               "exc": "{algorithm: sliding_window_counter, limits: 3/1d}"}
        # limit, requests per user
        limits = {"ex": (4, 7), "exf": (3, 5), "exm": (2, 4), "exw": (4, 6), "exc": (3, 5)}
        ds = [self.cdaemon(pol, name="rl%d" % i,
                           redis_extra={"connections": 1 + i}) for i in range(3)]
        users = ["x%d" % i for i in range(1200)]
        reqs = []
        for u in users:
            for a, (_, n) in limits.items():
                reqs += ["ALLOW %s %s" % (u, a)] * n
        # deterministic shuffle, then dealt to the connections
        import random
        random.Random(5).shuffle(reqs)
        nconn = 36
        shares = [reqs[i::nconn] for i in range(nconn)]
        barrier = threading.Barrier(nconn)
        results, errors, lock = [], [], threading.Lock()

        def run(i):
            try:
                with Client(port=ds[i % 3].port, timeout=30 * SLOW) as c:
                    c.request("PING")
                    barrier.wait(30)
                    mine = shares[i]
                    out = []
                    for k in range(0, len(mine), 100):
                        chunk = mine[k:k + 100]
                        out += list(zip(chunk, c.pipeline(chunk, timeout=30 * SLOW)))
                with lock:
                    results.extend(out)
            except BaseException as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))
        t0 = time.monotonic()
        ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(nconn)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120 * SLOW)
        took = time.monotonic() - t0
        self.assertEqual(errors, [])
        self.assertEqual(len(results), len(reqs))
        bad = [(ln, r) for ln, r in results if not is_real(r)]
        self.assertEqual(bad[:10], [], "%d replies not decided by Redis" % len(bad))
        per = {}
        for ln, r in results:
            per.setdefault(ln, []).append(parse_decision(r))
        for ln, vs in per.items():
            a = ln.split()[2]
            lim = limits[a][0]
            allowed = sorted(v[2] for v in vs if v[0] == "ALLOWED")
            self.assertEqual(allowed, list(range(lim)), "%s: remaining seen %s" % (ln, allowed))
        report("exactness: %d requests, 3 daemons, 36 connections, %.2fs (%.0f/s)"
               % (len(reqs), took, len(reqs) / took))
        where = self.keys_everywhere()
        self.assertEqual(len(where), len(users) * 6)
        self.assertKeysOnOwners(where)
        self.assertEqual(len(set(where.values())), 3)

    def test_bans_and_overrides_on_every_node(self):
        """A ban is decided on the master owning the pair's slot, with the
        pair's other keys; overrides need no node at all."""
        self.cluster()
        pol = {"b": "{limits: [1/60s], ban: {after: 2, within: 1m, for: 10m}, "
                    "overrides: {\"vip-*\": unlimited, bad: blocked, more: [3/60s]}}"}
        d = self.cdaemon(pol)
        c = self.client(d)
        users = ["u%d" % i for i in range(60)]
        got = [c.pipeline(["ALLOW %s b" % u for u in users]) for _ in range(4)]
        for u, a, d1, d2, banned in zip(users, *got):
            self.assertDecision(a, "ALLOWED", 1, 0)
            self.assertDecision(d1, "DENIED", 1, 0, (1, 60000))
            self.assertDecision(d2, "DENIED", 1, 0, (590000, 600000))  # the second denial bans
            self.assertDecision(banned, "DENIED", 1, 0, (590000, 600000))
        where = self.keys_everywhere()
        self.assertEqual(set(where), {user_key("b", u, s) for u in users for s in ("s60000", "b")})
        self.assertKeysOnOwners(where)
        self.assertEqual(len(set(where.values())), 3)
        got = c.pipeline(["ALLOW vip-1 b", "ALLOW bad b", "ALLOW more b"] * 2)
        self.assertEqual(got[:2] + got[3:5], ["ALLOWED -1 -1 0 -1", "DENIED 1 0 -1 -1"] * 2)
        self.assertDecision(got[2], "ALLOWED", 3, 2)
        self.assertDecision(got[5], "ALLOWED", 3, 1)


class ClusterPairsTest(ClusterBase):
    """MALLOW on a Cluster: the pairs' keys live on different masters, so
    the daemon checks every pair (PEEK), then charges every pair (ALLOW).
    Guaranteed: no key ever passes its limit; a request a check denies
    charges nothing; only a request that loses a race between its check
    and its charge leaves charges behind (ratelimitd_multi_partial_total)."""

    def zcard(self, action, user, suffix="s60000"):
        key = user_key(action, user, suffix)
        with self.cl.owner(key_slot(key)).resp() as r:
            return r.call("ZCARD", key)

    def test_check_then_charge_across_masters(self):
        self.cluster()
        mport = free_port()
        d = self.cdaemon({"acct": "3/60s", "addr": "5/60s", "all": "100/60s"},
                         metrics='{listen: "127.0.0.1:%d"}' % mport)
        c = self.client(d)
        # three pairs on three masters
        owners = self.cl.owner_map()
        used = {owners[user_slot("all", "-")]}
        alice = next(u for u in ("alice%d" % i for i in range(100))
                     if owners[user_slot("acct", u)] not in used)
        used.add(owners[user_slot("acct", alice)])
        ip = next(a for a in ("1.2.3.%d" % i for i in range(100))
                  if owners[user_slot("addr", a)] not in used)
        bob = next(u for u in ("bob%d" % i for i in range(100))
                   if owners[user_slot("acct", u)] != owners[user_slot("addr", ip)])
        got = [c.request("MALLOW %s acct %s addr - all" % (alice, ip)) for _ in range(4)]
        self.assertEqual([g.split()[0] + " " + g.split()[-1] for g in got],
                         ["ALLOWED 1"] * 3 + ["DENIED 1"])
        self.assertEqual((self.zcard("acct", alice), self.zcard("addr", ip),
                          self.zcard("all", "-")), (3, 3, 3))
        got = [c.request("MALLOW %s acct %s addr - all" % (bob, ip)) for _ in range(3)]
        self.assertEqual([g.split()[0] + " " + g.split()[-1] for g in got],
                         ["ALLOWED 2", "ALLOWED 2", "DENIED 2"])
        self.assertEqual((self.zcard("acct", bob), self.zcard("addr", ip),
                          self.zcard("all", "-")), (2, 5, 5))
        self.assertEqual(c.request("MPEEK carol acct - all"), "ALLOWED 3 3 0 0 1")
        self.assertEqual(scrape_metrics(mport)["ratelimitd_multi_partial_total"], 0)

    def test_live_overrides_on_a_cluster(self):
        """The overrides' hash lives on its slot's master; every daemon reads
        it, and applies a change made through another."""
        self.cluster()
        d1, d2 = self.cdaemon(name="rl1"), self.cdaemon(name="rl2")
        c1, c2 = self.client(d1), self.client(d2)
        self.assertEqual(c1.request("OVERRIDE vip reply unlimited 1h"), "OK")
        self.assertEqual(c1.request("OVERRIDE bad login blocked"), "OK")
        wait_until(lambda: c2.request("ALLOW vip reply") == "ALLOWED -1 -1 0 -1", 3 * SLOW,
                   what="daemon 2 to apply the override")
        wait_until(lambda: c2.request("ALLOW bad login") == "DENIED 3 0 -1 -1", 3 * SLOW,
                   what="daemon 2 to apply the second override")
        owner = self.cl.owner(key_slot(b"rl:overrides"))
        with owner.resp() as r:
            self.assertEqual(r.call("HLEN", "rl:overrides"), 2)
        self.assertEqual(c2.request("OVERRIDES 0").split()[:4], ["OVERRIDE", "0", "bad", "login"])
        self.assertEqual(c2.request("UNOVERRIDE vip reply"), "OK")
        wait_until(lambda: c1.request("PEEK vip reply").startswith("ALLOWED 5 "), 3 * SLOW,
                   what="daemon 1 to see it cleared")

    def test_three_daemons_never_over_any_limit(self):
        """16 accounts on 8 addresses, 6 logins each, through 3 daemons and
        12 connections at once (per account 3, per address 5, for everyone
        20): no key passes its limit, each key holds at least what was
        allowed with it, and whatever it holds beyond that is a partial
        charge the metric counts."""
        self.cluster()
        mports = [free_port() for _ in range(3)]
        pol = {"acct": "3/60s", "addr": "5/60s", "all": "20/60s"}
        ds = [self.cdaemon(pol, name="rl%d" % i,
                           metrics='{listen: "127.0.0.1:%d"}' % mports[i]) for i in range(3)]
        reqs = ["MALLOW a%d acct 10.0.0.%d addr - all" % (u, u // 2) for u in range(16)] * 6
        import random
        random.Random(11).shuffle(reqs)
        shares = [reqs[i::12] for i in range(12)]
        results, errors = race([d.port for d in ds], shares, 20 * SLOW)
        self.assertEqual(errors, [])
        self.assertEqual(len(results), len(reqs))
        # every reply decided by Redis: a pair named, no fallback's -1
        bad = [(ln, r) for ln, r in results
               if not re.match(r"^(ALLOWED|DENIED) \d+ \d+ -?\d+ \d+ [123]$", r)]
        self.assertEqual(bad[:5], [])
        allowed = [ln.split() for ln, r in results if r.startswith("ALLOWED ")]
        per = {}
        for w in allowed:
            for key in (("acct", w[1]), ("addr", w[3]), ("all", "-")):
                per[key] = per.get(key, 0) + 1
        partial = sum(scrape_metrics(p)["ratelimitd_multi_partial_total"] for p in mports)
        extra = 0
        for key, lim in [(("acct", "a%d" % u), 3) for u in range(16)] + \
                        [(("addr", "10.0.0.%d" % a), 5) for a in range(8)] + [(("all", "-"), 20)]:
            held = self.zcard(*key)
            self.assertLessEqual(held, lim, key)
            self.assertGreaterEqual(held, per.get(key, 0), key)
            extra += held - per.get(key, 0)
        # a partial charge leaves at most two of its three pairs charged
        self.assertLessEqual(extra, 2 * partial, (extra, partial))
        self.assertGreater(len(allowed), 0)
        report("MALLOW on a cluster: %d of %d allowed, %d partial charges"
               % (len(allowed), len(reqs), partial))


class ClusterGrpcTest(ClusterBase):
    """Envoy's ShouldRateLimit on a Cluster: three daemons, gRPC clients
    racing, rules of an envoyproxy/ratelimit file. One descriptor per call
    is one ALLOW: exactly the limit passes. Two per call are checked, then
    charged, pair by pair (the masters differ): no key ever passes its
    limit."""

    RULES = ("domain: web\ndescriptors:\n"
             "  - {key: user, rate_limit: {unit: minute, requests_per_unit: 7}}\n"
             "  - {key: remote_address, rate_limit: {unit: minute, requests_per_unit: 5,\n"
             "     algorithm: sliding_window}}\n"
             "  - {key: tight, rate_limit: {unit: minute, requests_per_unit: 1}}\n")

    def gdaemon(self, name):
        from harness import make_config
        from topology import cluster_redis_opts
        rules = os.path.join(self.tmpdir, "rules.yaml")
        with open(rules, "w") as f:
            f.write(self.RULES)
        port, gport = free_port(), free_port()
        cfg = make_config(['{address: "127.0.0.1:%d", admin: true}' % port,
                           '{address: "127.0.0.1:%d", protocol: grpc}' % gport],
                          cluster_redis_opts(self.cl, timeout="1s"), {"x": "1/1s"},
                          admin=False, envoy="{config: %s}" % rules)
        d = self.start_daemon(config=cfg, port=port, name=name)
        d.gport = gport
        return d

    def test_three_daemons_exact(self):
        from rls_client import RlsClient, overall
        self.cluster()
        ds = [self.gdaemon("rl%d" % i) for i in range(3)]
        results = []
        lock = threading.Lock()

        def worker(port, calls):
            c = RlsClient(port)
            try:
                for descs in calls:
                    r = c.call("web", descs, timeout=10 * SLOW)
                    with lock:
                        results.append((descs, overall(r)))
            finally:
                c.close()

        one = [[[("user", "u%d" % (i % 4))]] for i in range(48)]       # 12 calls per user
        two = [[[("user", "v%d" % (i % 3))], [("remote_address", "10.0.0.%d" % (i % 2))]]
               for i in range(48)]
        calls = one + two
        import random
        random.Random(5).shuffle(calls)
        threads = [threading.Thread(target=worker, args=(ds[i % 3].gport, calls[i::6]))
                   for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(results), len(calls))
        ok = [d for d, o in results if o == "OK"]
        per = {}
        for descs in ok:
            for d in descs:
                per[d[0]] = per.get(d[0], 0) + 1
        # one descriptor: exactly 7 per user
        for u in range(4):
            self.assertEqual(per.get(("user", "u%d" % u), 0), 7, per)
        # two: never over 7 per user, 5 per address; and the two-descriptor
        # calls allowed are at least what one address (of two) can take
        for v in range(3):
            self.assertLessEqual(per.get(("user", "v%d" % v), 0), 7, per)
        for a in range(2):
            self.assertLessEqual(per.get(("remote_address", "10.0.0.%d" % a), 0), 5, per)
        self.assertGreaterEqual(sum(1 for d in ok if len(d) == 2), 5)
        self.assertKeysOnOwners(self.keys_everywhere())


    def test_many_descriptors_across_masters_all_or_nothing(self):
        """20 limited descriptors (more than MALLOW's 8) over every master:
        checked, then charged; one over its limit denies the call and
        charges none of the others."""
        from rls_client import RlsClient, overall, statuses
        self.cluster()
        d = self.gdaemon("rl")
        c = RlsClient(d.gport)
        self.addCleanup(c.close)
        users = [[("user", "w%d" % i)] for i in range(20)]
        call = users + [[("tight", "t")]]
        r = c.call("web", call, timeout=10 * SLOW)
        self.assertEqual(overall(r), "OK")
        self.assertEqual([s[:3] for s in statuses(r)], [("OK", 7, 6)] * 20 + [("OK", 1, 0)])
        where = self.keys_everywhere()
        self.assertKeysOnOwners(where)
        # the 20 users' keys are on every master: no one call could decide them
        self.assertEqual(len({a for k, a in where.items() if b"user=w" in k}), 3, where)
        r = c.call("web", call, timeout=10 * SLOW)
        self.assertEqual(overall(r), "OVER_LIMIT")
        self.assertEqual([s[:3] for s in statuses(r)],
                         [("OK", 7, 6)] * 20 + [("OVER_LIMIT", 1, 0)])
        # nothing was charged by the denial: the users were charged once
        r = c.call("web", users, timeout=10 * SLOW)
        self.assertEqual(overall(r), "OK")
        self.assertEqual([s[:3] for s in statuses(r)], [("OK", 7, 5)] * 20)


class ClusterReshardTest(ClusterBase):
    def test_live_resharding_under_traffic(self):
        """300 slots (holding hot users) move from one master to another by
        hand (IMPORTING / MIGRATING / MIGRATE / SETSLOT NODE), then 200 slots
        with redis-cli --cluster reshard, while two daemons take traffic on
        those users: no fallback or ERR reply, every limit exact, state
        moves with its keys (a user at its limit stays at it)."""
        self.cluster()
        pol = {"hot": "20/60s", "hotf": "{algorithm: funnel, capacity: 10, rate: 1/60s}",
               "wide": "100000/60s"}
        d1 = self.cdaemon(pol, name="rl1")
        d2 = self.cdaemon(pol, name="rl2", redis_extra={"connections": 3})
        m = self.cl.masters()
        src, dst, third = m[0], m[1], m[2]
        moving = self.cl.slots_of(src)[:300]
        mset = set(moving)
        full = users_in_slots("hot", mset, 12, name="full")      # at the limit before
        hot = users_in_slots("hot", mset, 12, name="hot")        # reach it during the move
        wide = users_in_slots("wide", mset, 24, name="wide")     # every request hits Redis
        funnel = users_in_slots("hotf", mset, 8, name="fun")
        still = users_in_slots("wide", set(self.cl.slots_of(third)), 8, name="still")
        c = self.client(d1)
        for u in full:
            self.assertEqual(parse_decision(c.pipeline(["ALLOW %s hot" % u] * 20)[-1])[:3],
                             ("ALLOWED", 20, 0))
        src_keys = set(src.keys("rl:*"))
        for u in full:
            self.assertIn(user_key("hot", u, "s60000"), src_keys)
        pause_slots = {user_slot("hot", u) for u in full + hot} | \
            {user_slot("wide", u) for u in wide} | {user_slot("hotf", u) for u in funnel}

        lines = (["ALLOW %s hot" % u for u in full + hot] + ["ALLOW %s wide" % u for u in wide]
                 + ["ALLOW %s hotf" % u for u in funnel] + ["ALLOW %s wide" % u for u in still])

        def lines_for(i):
            k = (i * 7) % len(lines)
            return lines[k:] + lines[:k]
        err0 = {a: dict(e) for a, e in self.cl.errorstats().items()}
        tr = Traffic([d1.port, d2.port], lines_for, threads=6, depth=8).start()
        try:
            time.sleep(0.3)
            t0 = time.monotonic()
            moved = self.cl.move_slots(moving, src, dst, pause=0.01, pause_slots=pause_slots)
            t1 = time.monotonic()
            self.cl.reshard_cli(dst, third, 200)
            t2 = time.monotonic()
            # enough requests for every hot user to pass its limit
            wait_until(lambda: min(tr.count(["ALLOW %s hot" % u for u in hot]).values()) > 25,
                       30 * SLOW, interval=0.05, what="traffic on the hot users")
        finally:
            recs = tr.stop()
        self.assertEqual(tr.errors, [])
        report("resharding: %d keys in %d slots moved by hand in %.2fs, redis-cli 200 slots "
               "in %.2fs, %d requests during the moves"
               % (moved, len(moving), t1 - t0, t2 - t1,
                  sum(1 for r in recs if t0 <= r[1] <= t2)))
        bad = [(r[3], r[4]) for r in recs if not is_real(r[4])]
        self.assertEqual(bad[:10], [], "%d replies of %d not decided by Redis"
                         % (len(bad), len(recs)))
        during = [r for r in recs if t0 <= r[1] and r[2] <= t2]
        self.assertGreater(len(during), 200, "too little traffic during the moves")
        err1 = self.cl.errorstats()
        redirects = sum(err1[a].get(k, 0) - err0.get(a, {}).get(k, 0)
                        for a in err1 for k in ("ASK", "MOVED", "TRYAGAIN"))
        self.assertGreater(redirects, 0, "the daemons met no ASK/MOVED/TRYAGAIN: test moved "
                                         "nothing they used")

        per = {}
        for r in recs:
            per.setdefault(r[3], []).append(parse_decision(r[4]))
        for u in full:
            vs = per["ALLOW %s hot" % u]
            self.assertEqual([v for v in vs if v[0] == "ALLOWED"], [],
                             "%s was at its limit before the move" % u)
        for u in hot:
            vs = per["ALLOW %s hot" % u]
            self.assertGreater(len(vs), 20)
            self.assertEqual(sorted(v[2] for v in vs if v[0] == "ALLOWED"), list(range(20)), u)
        for u in funnel:
            vs = per["ALLOW %s hotf" % u]
            self.assertEqual(sorted(v[2] for v in vs if v[0] == "ALLOWED"), list(range(10)), u)
        # every request of a wide user counted exactly once
        fresh = self.cdaemon(pol, name="rl3")
        cf = self.client(fresh)
        for u in wide + still:
            vs = per["ALLOW %s wide" % u]
            rem = [v[2] for v in vs]
            self.assertTrue(all(v[0] == "ALLOWED" for v in vs))
            self.assertEqual(sorted(rem), list(range(100000 - len(vs), 100000)), u)
            self.assertDecision(cf.request("PEEK %s wide" % u), "ALLOWED", 100000,
                                100000 - len(vs))
        for u in full + hot:
            self.assertDecision(cf.request("PEEK %s hot" % u), "DENIED", 20, 0)
        # and the keys are where the map says
        where = self.keys_everywhere()
        self.assertKeysOnOwners(where)
        for u in full:
            self.assertNotEqual(where[user_key("hot", u, "s60000")], src.address)

    def half_migrated(self, lines):
        """One user's two login keys, one moved and one not, so that its
        decisions get TRYAGAIN: sends `lines` (about that user, "%s" is
        the user) meanwhile, completes the move 0.3 s after the first
        TRYAGAIN, returns (replies, user, destination node)."""
        self.cluster()
        d = self.cdaemon(timeout="%dms" % int(1500 * SLOW))
        c = self.client(d)
        src, dst = self.cl.masters()[0], self.cl.masters()[1]
        u = users_in_slots("login", set(self.cl.slots_of(src)), 1, name="ta")[0]
        slot = user_slot("login", u)
        self.assertDecision(c.request("ALLOW %s login" % u), "ALLOWED", 3, 2)
        tr0 = self.cl.total_error("TRYAGAIN")
        self.cl.begin_migration(slot, src, dst)
        self.cl.migrate_keys(src, dst, [user_key("login", u, "s10000")])
        c.send(*[ln % u for ln in lines])
        wait_until(lambda: self.cl.total_error("TRYAGAIN") > tr0, 2 * SLOW, interval=0.01,
                   what="a TRYAGAIN from the half-moved slot")
        time.sleep(0.3)
        self.cl.finish_migration(slot, src, dst)
        return c.readlines(len(lines), timeout=5 * SLOW), u, dst

    def test_tryagain_is_retried(self):
        """A slot held half-migrated answers TRYAGAIN for a user's
        decisions: the daemon retries inside the deadline, so once the move
        completes the clients get Redis's decisions, exact, never a
        fallback."""
        got, u, dst = self.half_migrated(["ALLOW %s login"] * 3 + ["ALLOW %s reply"])
        self.assertAllReal([], got, "half-migrated slot")
        self.assertEqual(sorted(parse_decision(r)[:3] for r in got[:3]),
                         [("ALLOWED", 3, 0), ("ALLOWED", 3, 1), ("DENIED", 3, 0)])
        self.assertDecision(got[3], "ALLOWED", 5, 4)
        self.assertEqual(dst.call("ZCARD", user_key("login", u, "s60000")), 3)
        self.assertEqual(dst.call("ZCARD", user_key("login", u, "s10000")), 3)

    def test_order_kept_across_retries(self):
        """One user's pipelined decisions are made in the order sent, also
        when they are retried (TRYAGAIN, then MOVED): ALLOW, ALLOW, PEEK
        answer remaining 1, 0 and then DENIED."""
        got, u, dst = self.half_migrated(["ALLOW %s login", "ALLOW %s login", "PEEK %s login"])
        self.assertAllReal([], got, "half-migrated slot")
        self.assertEqual([parse_decision(r)[:3] for r in got],
                         [("ALLOWED", 3, 1), ("ALLOWED", 3, 0), ("DENIED", 3, 0)],
                         "pipelined decisions of one user reordered: %s" % got)

    def test_transient_clusterdown_is_retried(self):
        """The cluster is down (one slot unassigned, full coverage) for
        about 0.3 s, much less than redis.timeout: the requests sent
        meanwhile are retried and decided by Redis, not answered by
        fallback."""
        self.cluster()
        d = self.cdaemon(timeout="%dms" % int(2000 * SLOW))
        c = self.client(d)
        owner = self.cl.masters()[0]
        probe = users_in_slots("reply", set(self.cl.slots_of(owner)), 1, name="cd")[0]
        slot = user_slot("reply", probe)
        users = [probe] + ["cdu%d" % i for i in range(40)]
        self.assertEqual(c.pipeline(["ALLOW %s reply" % u for u in users]),
                         ["ALLOWED 5 4 0 60000"] * len(users))
        self.cl.unassign_slot(slot, timeout=5 * SLOW)
        t0 = time.monotonic()
        c.send(*["ALLOW %s reply" % u for u in users])
        time.sleep(0.3)
        self.cl.assign_slot(slot, owner)
        got = c.readlines(len(users), timeout=10 * SLOW)
        took = time.monotonic() - t0
        self.assertAllReal(users, got, "during a 0.3 s CLUSTERDOWN")
        self.assertEqual(got, ["ALLOWED 5 3 0 %s" % r.split()[-1] for r in got])
        report("transient CLUSTERDOWN: %d requests answered by Redis %.2fs after sending"
               % (len(users), took))

    def test_moved_refreshes_the_map(self):
        """Slots move while the daemon is idle: the next requests meet MOVED,
        are answered from the new owner with the state that moved, the map
        is refreshed once per burst (few CLUSTER SLOTS/SHARDS calls), and
        afterwards no request is redirected any more."""
        self.cluster()
        d = self.cdaemon()
        c = self.client(d)
        m = self.cl.masters()
        a, b, third = m[0], m[1], m[2]
        moving = self.cl.slots_of(a)[:1000]
        users = users_in_slots("reply", set(moving), 150, name="mv")
        others = users_in_slots("reply", set(self.cl.slots_of(third)), 50, name="st")
        allu = users + others
        for _ in range(3):
            self.assertAllReal([], c.pipeline(["ALLOW %s reply" % u for u in allu]))
        self.cl.move_slots(moving, a, b)
        ms = self.cl.masters()

        def stats():
            return {n.address: (errorstats(n), commandstats(n)) for n in ms}

        def refreshes(st):
            return sum(v.get("cluster|slots", 0) + v.get("cluster|shards", 0)
                       + v.get("cluster|nodes", 0) for _, v in st.values())
        stats0 = stats()
        lines = ["PEEK %s reply" % u for u in allu]
        got = c.pipeline(lines)
        self.assertAllReal(lines, got)
        for r in got:
            self.assertDecision(r, "ALLOWED", 5, 2, 0)
        stats1 = stats()
        moved = sum(stats1[k][0].get("MOVED", 0) - stats0[k][0].get("MOVED", 0) for k in stats1)
        self.assertGreater(moved, 0, "no MOVED met: the daemon did not route by the old map")
        # the map is read again (in the background) after MOVED, and not once per MOVED
        wait_until(lambda: refreshes(stats()) > refreshes(stats0), 2 * SLOW, interval=0.05,
                   what="CLUSTER SLOTS (or SHARDS/NODES) after MOVED")
        nref = refreshes(stats()) - refreshes(stats0)
        report("MOVED burst: %d MOVED for %d requests, %d map reads" % (moved, len(lines), nref))
        self.assertLessEqual(nref, 6, "map read %d times for one burst of %d MOVED"
                             % (nref, moved))
        for r in c.pipeline(["ALLOW %s reply" % u for u in users[:20]]):
            self.assertDecision(r, "ALLOWED", 5, 1, 0)

        def quiet():
            before = self.cl.total_error("MOVED")
            self.assertAllReal([], c.pipeline(["PEEK %s reply" % u for u in allu]))
            return self.cl.total_error("MOVED") == before
        wait_until(quiet, 3 * SLOW, interval=0.2, what="requests without MOVED (map refreshed)")
        where = self.keys_everywhere()
        self.assertKeysOnOwners(where)
        for u in users:
            self.assertEqual(where[user_key("reply", u, "s60000")], b.address)
        # and once more with redis-cli: b -> third
        self.cl.reshard_cli(b, third, 2000)
        got = c.pipeline(["PEEK %s reply" % u for u in allu])
        self.assertAllReal([], got)
        for u, r in zip(allu, got):
            self.assertDecision(r, "ALLOWED", 5, 1 if u in users[:20] else 2)


class ClusterFailoverTest(ClusterBase):
    def test_master_killed_replica_promoted(self):
        """3 masters with a replica each; one master is SIGKILLed under
        traffic. Users on the other masters are always answered by Redis;
        users on the dead master get on_store_error answers within the
        timeout, then Redis answers again once its replica is promoted
        (NOSCRIPT on the new master recovered); state replicated before the
        kill survives."""
        self.cluster(replicas=1, full_coverage=False)
        tmo = 0.3 * SLOW
        d = self.cdaemon(timeout="%dms" % int(tmo * 1000))
        c = self.client(d)
        masters = self.cl.masters()
        victim = masters[0]
        vslots = set(self.cl.slots_of(victim))
        oslots = set(range(NSLOTS)) - vslots
        vus = users_in_slots("big", vslots, 20, name="v")
        ous = users_in_slots("big", oslots, 20, name="o")
        capped = users_in_slots("reply", vslots, 5, name="cap")
        for u in capped:
            c.pipeline(["ALLOW %s reply" % u] * 5)
            self.assertDecision(c.request("PEEK %s reply" % u), "DENIED", 5, 0)
        self.assertAllReal([], c.pipeline(["ALLOW %s big" % u for u in vus + ous]))
        self.cl.wait_replicated(victim)

        vlines = ["ALLOW %s big" % u for u in vus]
        olines = ["ALLOW %s big" % u for u in ous]
        tr = Traffic([d.port], lambda i: vlines if i % 2 else olines, threads=4, depth=4,
                     pause=0.005).start()
        try:
            time.sleep(0.5)
            t_kill = time.monotonic()
            self.cl.kill(victim)
            new, promo = self.cl.wait_failover(victim)

            vset = set(vlines)

            def recovered():
                vr = [r for r in list(tr.records) if r[3] in vset]
                last = vr[-20:]
                return len(last) == 20 and last[0][1] > t_kill and \
                    all(is_real(r[4]) for r in last)
            wait_until(recovered, 10 * SLOW, interval=0.05,
                       what="service for the failed slots")
            time.sleep(0.5)
        finally:
            recs = tr.stop()
        self.assertEqual(tr.errors, [])
        self.assertEqual(set(self.cl.slots_of(new)), vslots)
        obad = [(r[3], r[4]) for r in recs if r[3] in olines and not is_real(r[4])]
        self.assertEqual(obad[:10], [], "%d replies for other masters' slots were not from "
                         "Redis" % len(obad))
        vrecs = [r for r in recs if r[3] in vlines]
        fb = [r for r in vrecs if not is_real(r[4])]
        for r in vrecs:
            if not is_real(r[4]):
                self.assertEqual(r[4], "ALLOWED 100000 -1 0 -1", r[3])
        self.assertTrue(fb, "no fallback answer: the dead master's slots never failed?")
        slow = [(round(r[2] - r[1], 3), r[4]) for r in vrecs if r[2] - r[1] > tmo + STORE_MARGIN]
        self.assertEqual(slow[:5], [], "answers later than redis.timeout + margin")
        first_bad = min(r[1] for r in fb)
        last_bad = max(r[2] for r in fb)
        self.assertGreaterEqual(first_bad, t_kill - 0.05)
        after = [r for r in vrecs if r[1] > last_bad]
        self.assertTrue(after and all(is_real(r[4]) for r in after))
        report("cluster failover: replica promoted %.2fs after the kill; failed slots answered "
               "by fallback from +%.2fs to +%.2fs (%d answers), Redis again after %.2fs"
               % (promo, first_bad - t_kill, last_bad - t_kill, len(fb), last_bad - t_kill))
        self.assertLess(last_bad - t_kill, promo + 3 * SLOW,
                        "service for the failed slots came back %.2fs after promotion"
                        % (last_bad - t_kill - promo))
        # state replicated before the kill survived the failover
        for u in capped:
            self.assertDecision(c.request("PEEK %s reply" % u), "DENIED", 5, 0)
        self.assertGreater(commandstats(new).get("evalsha", 0), 0)
        # fresh users on the promoted master land there
        fresh = users_in_slots("reply", vslots, 10, name="nf")
        self.assertEqual(c.pipeline(["ALLOW %s reply" % u for u in fresh]),
                         ["ALLOWED 5 4 0 60000"] * 10)
        keys = set(new.keys("rl:*"))
        for u in fresh:
            self.assertIn(user_key("reply", u, "s60000"), keys)


    def timed_round(self, c, lines):
        """Sends lines pipelined (each has its own deadline); returns
        [(reply, seconds from the send to that reply)]."""
        t = time.monotonic()
        c.send(*lines)
        out = []
        for _ in lines:
            r = c.readline(10 * SLOW)
            out.append((r, time.monotonic() - t))
        return out

    def test_cluster_down_at_start(self):
        """No seed answers when the daemon starts: on_store_error answers
        within the timeout; once the cluster is up, service starts by itself."""
        from topology import RedisCluster
        cl = RedisCluster(self.tmpdir, masters=3)
        self._procs.append(cl)
        self.cl = cl
        tmo = 0.2 * SLOW
        d = self.cdaemon(timeout="%dms" % int(tmo * 1000))
        c = self.client(d)
        for r, dt in self.timed_round(c, ["ALLOW d%d reply" % i for i in range(10)]):
            self.assertEqual(r, "ALLOWED 5 -1 0 -1")
            self.assertLess(dt, tmo + STORE_MARGIN)
        t = time.monotonic()
        cl.start()
        up = time.monotonic()
        wait_until(lambda: all(is_real(r) for r in c.pipeline(["PEEK d%d reply" % i
                                                               for i in range(30)])),
                   5 * SLOW, interval=0.1, what="service once the cluster is up")
        report("cluster down at start: cluster up after %.2fs, decisions %.2fs later"
               % (up - t, time.monotonic() - up))
        self.assertEqual(c.pipeline(["ALLOW d%d reply" % i for i in range(30)]),
                         ["ALLOWED 5 4 0 60000"] * 30)

    def test_clusterdown_then_back(self):
        """A master without replica dies and the cluster (full coverage)
        goes down: every node answers CLUSTERDOWN; clients get on_store_error
        answers within the timeout; when the node is back, service resumes
        with the state it had."""
        self.cluster()
        tmo = 0.3 * SLOW
        d = self.cdaemon(timeout="%dms" % int(tmo * 1000))
        c = self.client(d)
        victim = self.cl.masters()[0]
        survivor = self.cl.masters()[1]
        vslots = set(self.cl.slots_of(victim))
        sus = users_in_slots("reply", set(self.cl.slots_of(survivor)), 5, name="sv")
        vus = users_in_slots("reply", vslots, 5, name="vv")
        for u in sus + vus:
            c.pipeline(["ALLOW %s reply" % u] * 5)
        victim.call("SAVE")  # the restarted node reloads its keys
        self.cl.kill(victim)
        wait_until(lambda: survivor.cluster_info()["cluster_state"] == "fail", 10 * SLOW,
                   interval=0.05, what="cluster_state:fail")
        for r, dt in self.timed_round(c, ["PEEK %s big" % u for u in sus + vus]):
            self.assertEqual(r, "ALLOWED 100000 -1 0 -1")
            self.assertLess(dt, tmo + STORE_MARGIN)
        t = time.monotonic()
        self.cl.restart(victim)
        self.cl.wait_ready()
        ready = time.monotonic() - t
        wait_until(lambda: all(is_real(r) for r in c.pipeline(["PEEK %s big" % u
                                                               for u in sus + vus])),
                   5 * SLOW, interval=0.1, what="service after the cluster is back")
        report("CLUSTERDOWN: cluster ok %.2fs after the restart, decisions %.2fs after it"
               % (ready, time.monotonic() - t))
        for u in sus + vus:
            self.assertDecision(c.request("PEEK %s reply" % u), "DENIED", 5, 0)

    def test_dead_replica_changes_nothing(self):
        """A replica (never asked for decisions) dies: every decision is
        still made by Redis and the deny cache keeps answering repeats of a
        denial (it must not be flushed by the dead node's reconnects)."""
        self.cluster(replicas=1, full_coverage=False)
        d = self.cdaemon(timeout="300ms")
        c = self.client(d)
        self.cl.kill(self.cl.replicas()[0])
        time.sleep(1.0)
        users = ["dr%d" % i for i in range(100)]
        got = c.pipeline(["ALLOW %s reply" % u for u in users])
        self.assertEqual(got, ["ALLOWED 5 4 0 60000"] * len(users))
        u = users[0]
        owner = self.cl.owner(user_slot("reply", u))
        c.pipeline(["ALLOW %s reply" % u] * 4)
        self.assertDecision(c.request("ALLOW %s reply" % u), "DENIED", 5, 0)
        calls0 = commandstats(owner).get("evalsha", 0)
        for _ in range(15):
            self.assertDecision(c.request("ALLOW %s reply" % u), "DENIED", 5, 0)
            time.sleep(0.1)
        calls = commandstats(owner).get("evalsha", 0) - calls0
        self.assertEqual(calls, 0, "%d script calls for 15 repeats of a cached denial "
                         "while a replica is down" % calls)

    def test_reset_notices_after_subscriber_node_dies(self):
        """The master a daemon listens on for RESET notices is killed and
        replaced by its replica: RESET through another daemon must still
        clear this daemon's deny cache (it subscribes again elsewhere)."""
        self.cluster(replicas=1, full_coverage=False)
        d2 = self.cdaemon(name="rl2", timeout="300ms")

        def subscribed_on():
            on = [m for m in self.cl.masters()
                  if m.call("PUBSUB", "NUMSUB", "rl:reset")[1] > 0]
            return on[0] if len(on) == 1 else None
        victim = wait_until(subscribed_on, 5 * SLOW, interval=0.05,
                            what="the daemon's RESET subscription")
        d1 = self.cdaemon(name="rl1", timeout="300ms")
        self.cl.kill(victim)
        new, promo = self.cl.wait_failover(victim)
        c1, c2 = self.client(d1), self.client(d2)
        owners = self.cl.owner_map()
        users = []
        for m in self.cl.masters():
            users += users_in_slots("reply", {s for s in range(NSLOTS) if owners[s] == m.address},
                                    2, name="rs%d-" % m.port)
        for u in users:
            wait_until(lambda: is_real(c1.request("PEEK %s reply" % u)), 5 * SLOW,
                       interval=0.05, what="service after failover")
            c1.pipeline(["ALLOW %s reply" % u] * 5)
            self.assertDecision(c2.request("ALLOW %s reply" % u), "DENIED", 5, 0)
            self.assertDecision(c2.request("ALLOW %s reply" % u), "DENIED", 5, 0)
        # the deny cache still works: repeats of a denial cost Redis nothing
        # (it would be flushed again and again if the daemon kept counting
        # the dead node's failed reconnects as lost connections)
        time.sleep(1.0)
        u = users[0]
        owner = self.cl.owner(user_slot("reply", u))
        self.assertDecision(c2.request("ALLOW %s reply" % u), "DENIED", 5, 0)
        calls0 = commandstats(owner).get("evalsha", 0)
        for _ in range(15):
            self.assertDecision(c2.request("ALLOW %s reply" % u), "DENIED", 5, 0)
            time.sleep(0.1)
        calls = commandstats(owner).get("evalsha", 0) - calls0
        self.assertEqual(calls, 0, "%d script calls for 15 repeats of a cached denial, "
                         "1.5 s after a failover" % calls)
        for u in users:
            self.assertEqual(c1.request("RESET %s reply" % u), "OK")
        for u in users:
            wait_until(lambda: c2.request("ALLOW %s reply" % u).startswith("ALLOWED 5 4 "),
                       3 * SLOW, interval=0.05,
                       what="RESET of %s seen by the daemon whose subscription node died" % u)


class ClusterScriptTest(ClusterBase):
    def test_script_flush_on_every_node(self):
        """SCRIPT FLUSH on all nodes: the next decisions on every master meet
        NOSCRIPT, the daemon reloads the script there, no answer is lost or
        wrong."""
        self.cluster()
        d = self.cdaemon()
        c = self.client(d)
        owners = self.cl.owner_map()
        users = []
        for m in self.cl.masters():
            users += users_in_slots("reply", {s for s in range(NSLOTS) if owners[s] == m.address},
                                    10, name="sf%d-" % m.port)
        self.assertEqual(c.pipeline(["ALLOW %s reply" % u for u in users]),
                         ["ALLOWED 5 4 0 60000"] * len(users))
        for m in self.cl.masters():
            self.assertGreaterEqual(int(m.info("memory")["number_of_cached_scripts"]), 1)
        ns0 = self.cl.total_error("NOSCRIPT")
        self.cl.flush_scripts()
        for m in self.cl.masters():
            self.assertEqual(int(m.info("memory")["number_of_cached_scripts"]), 0)
        for i in range(2):
            got = c.pipeline(["ALLOW %s reply" % u for u in users])
            for r in got:
                self.assertDecision(r, "ALLOWED", 5, 3 - i, 0)
        self.assertGreater(self.cl.total_error("NOSCRIPT"), ns0,
                           "no NOSCRIPT met: was the script flushed?")
        for m in self.cl.masters():
            self.assertGreaterEqual(int(m.info("memory")["number_of_cached_scripts"]), 1,
                                    m.address)


class ClusterConfigTest(DaemonTest):
    BASE = ("listen:\n  - 127.0.0.1:7379\nredis:\n%spolicies:\n  reply: 5/60s\n")

    def check(self, redis_block, ok, at=None):
        text = self.BASE % redis_block
        path = os.path.join(self.tmpdir, "c.yaml")
        with open(path, "w") as f:
            f.write(text)
        r = run_cli(["-t", "-c", path])
        if ok:
            self.assertEqual((r.returncode, r.stdout.strip()), (0, "configuration OK"),
                             "%s\n%s" % (text, r.stderr))
            return
        self.assertEqual(r.returncode, 1, "%s\nstdout %r stderr %r" % (text, r.stdout, r.stderr))
        m = re.search(re.escape(path) + r":(\d+):(\d+): (\S.*)", r.stderr)
        self.assertIsNotNone(m, "no FILE:LINE:COL: in %r" % r.stderr)
        if at is not None:
            idx = text.index(at)
            line = text.count("\n", 0, idx) + 1
            col = idx - (text.rfind("\n", 0, idx) + 1) + 1
            self.assertEqual((int(m.group(1)), int(m.group(2))), (line, col),
                             "position of %r in %r" % (at, r.stderr))
        return m.group(3)

    def test_valid(self):
        self.check("  cluster: [127.0.0.1:7001, 127.0.0.1:7002]\n  password: pw\n"
                   "  timeout: 50ms\n  connections: 2\n", True)
        self.check("  cluster:\n    - 127.0.0.1:7001\n  database: 0\n", True)
        self.check("  sentinel: {master: mymaster, addresses: [127.0.0.1:26379, "
                   "127.0.0.1:26380]}\n  timeout: 50ms\n", True)

    def test_cluster_and_address(self):
        msg = self.check("  address: 127.0.0.1:6379\n  cluster: [127.0.0.1:7001]\n", False,
                         at="cluster:")
        self.assertRegex(msg, r"address|cluster")
        self.check("  cluster: [127.0.0.1:7001]\n  address: 127.0.0.1:6379\n", False,
                   at="cluster:")

    def test_cluster_and_sentinel(self):
        self.check("  cluster: [127.0.0.1:7001]\n  sentinel: {master: m, addresses: "
                   "[127.0.0.1:26379]}\n", False, at="sentinel:")

    def test_database_with_cluster(self):
        msg = self.check("  cluster: [127.0.0.1:7001]\n  database: 3\n", False, at="database:")
        self.assertIn("database", msg)

    def test_bad_cluster_lists(self):
        self.check("  cluster: []\n", False)
        self.check("  cluster: 127.0.0.1:7001\n", False, at="127.0.0.1:7001")
        self.check("  cluster: [127.0.0.1:7001, 127.0.0.1]\n", False)
        self.check("  cluster: [\"unix:/tmp/x.sock\"]\n", False)

    def test_bad_sentinel(self):
        self.check("  sentinel: {addresses: [127.0.0.1:26379]}\n", False)
        self.check("  sentinel: {master: m}\n", False)
        self.check("  sentinel: {master: m, addresses: []}\n", False)
        self.check("  sentinel: {master: m, addresses: [127.0.0.1:26379], bogus: 1}\n", False,
                   at="bogus")


if __name__ == "__main__":
    unittest.main()
