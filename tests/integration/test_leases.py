"""Concurrency leases (issue 29, item 1): algorithm: concurrency with
ACQUIRE, RELEASE and RENEW. Three daemons and racing clients on one Redis
and on a Redis Cluster, the leases held sampled in Redis all along: never
more than the limit. A client process killed with -9 holding leases: its
daemon releases them when the connection drops. Expiry, RENEW, redis-py
over RESP, the memory store, Redis down per on_store_error, and
proto/protocol.md's exchange replayed with the id it gets."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

from harness import (SCRIPT, SLOW, SRCDIR, Client, DaemonTest, free_port, make_config,
                     scrape_metrics, wait_until)
from topology import add_cluster, add_sentinels, cluster_config, sentinel_redis_opts

try:
    import redis
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis

LIMIT = 4
POLICIES = {"export": "{algorithm: concurrency, limit: %d, lease: 30s}" % LIMIT,
            "short": "{algorithm: concurrency, limit: 2, lease: 1s}",
            "reply": "5/60s"}
ID = re.compile(r"^[A-Za-z0-9_.-]+:[A-Za-z0-9_-]+:[0-9a-f]{16}:[0-9]+$")


def held(members):
    """Units held by a lease key's members ("<nonce>:<cost>")."""
    return sum(int(m.rsplit(b":" if isinstance(m, bytes) else ":", 1)[1]) for m in members)


class LeaseRace:
    """Clients that ACQUIRE, hold a moment, RELEASE, in a loop, on the
    daemons given, while a sampler reads the lease keys in Redis. Each
    client counts itself holding from the ALLOWED it reads to just before
    it sends RELEASE: inside the time Redis has its lease, so the count of
    clients holding is never above what Redis holds."""

    def __init__(self, test, ports, users, seconds, sample):
        self.t, self.ports, self.users, self.seconds, self.sample = (test, ports, users,
                                                                     seconds, sample)
        self.lock = threading.Lock()
        self.holding = {u: 0 for u in users}
        self.most = {u: 0 for u in users}
        self.granted = self.denied = self.samples = 0
        self.redis_most = 0
        self.errors = []

    def client(self, i):
        user = self.users[i % len(self.users)]
        try:
            with Client(port=self.ports[i % len(self.ports)], timeout=10 * SLOW) as c:
                end = time.monotonic() + self.seconds
                while time.monotonic() < end:
                    r = c.request("ACQUIRE %s export" % user)
                    if r.startswith("DENIED"):
                        with self.lock:
                            self.denied += 1
                        time.sleep(0.001)
                        continue
                    if not r.startswith("ALLOWED"):
                        raise AssertionError("ACQUIRE: %r" % r)
                    lease = r.split()[-1]
                    with self.lock:
                        self.granted += 1
                        self.holding[user] += 1
                        self.most[user] = max(self.most[user], self.holding[user])
                    time.sleep(0.002)
                    with self.lock:
                        self.holding[user] -= 1
                    r = c.request("RELEASE " + lease)
                    if r != "OK":
                        raise AssertionError("RELEASE: %r" % r)
        except Exception as e:  # noqa: BLE001 - reported by run()
            with self.lock:
                self.errors.append(repr(e))

    def sampler(self, stop):
        while not stop.is_set():
            n = max(self.sample())
            with self.lock:
                self.samples += 1
                self.redis_most = max(self.redis_most, n)

    def run(self, nclients):
        stop = threading.Event()
        s = threading.Thread(target=self.sampler, args=(stop,))
        s.start()
        ts = [threading.Thread(target=self.client, args=(i,)) for i in range(nclients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(self.seconds + 60 * SLOW)
        stop.set()
        s.join(30)
        t = self.t
        t.assertEqual(self.errors, [])
        t.assertLessEqual(max(self.most.values()), LIMIT, self.most)
        t.assertLessEqual(self.redis_most, LIMIT)
        # the race was a race: every user full at some moment, and refusals
        t.assertEqual(set(self.most.values()), {LIMIT}, self.most)
        t.assertGreater(self.denied, 0)
        t.assertGreater(self.samples, 20)
        sys.stderr.write("[figures] %d clients, %d daemons: %d leases granted, %d denied, "
                         "%d samples of Redis, at most %d held\n"
                         % (nclients, len(self.ports), self.granted, self.denied, self.samples,
                            self.redis_most))
        return self


class LeasesTest(DaemonTest):
    def three(self, policies=POLICIES, **kw):
        self.redis = self.start_redis()
        return [self.start_daemon(policies, name="rl%d" % i, **kw) for i in range(3)]

    def test_three_daemons_never_hold_more_than_the_limit(self):
        ds = self.three()
        users = ["ann", "bob", "cy"]

        def sample():
            with self.redis.resp() as r:
                return [held(r.call("ZRANGE", "rl:{export:%s}:l" % u, 0, -1)) for u in users]
        LeaseRace(self, [d.port for d in ds], users, 3, sample).run(18)
        # every lease went back: nothing held, nothing left to expire
        self.assertEqual(self.redis.keys("rl:*"), [])

    def test_a_killed_client_releases_its_leases(self):
        """A client process holding leases on two daemons is killed with -9:
        both daemons see the connection drop and release what it held."""
        mport = free_port()
        self.redis = self.start_redis()
        ds = [self.start_daemon(POLICIES, name="rl0",
                                metrics='{listen: "127.0.0.1:%d"}' % mport),
              self.start_daemon(POLICIES, name="rl1")]
        holder = os.path.join(self.tmpdir, "holder.py")
        with open(holder, "w") as f:
            f.write("import socket, sys, time\n"
                    "socks = []\n"
                    "for port in sys.argv[1:]:\n"
                    "    s = socket.create_connection(('127.0.0.1', int(port)))\n"
                    "    s.sendall(b'ACQUIRE dan export 2\\n')\n"
                    "    assert s.recv(200).startswith(b'ALLOWED')\n"
                    "    socks.append(s)\n"
                    "print('held', flush=True)\n"
                    "time.sleep(600)\n")
        p = subprocess.Popen([sys.executable, holder] + [str(d.port) for d in ds],
                             stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        self.assertEqual(p.stdout.readline().strip(), "held")
        with Client(ds[0].port) as c:
            self.assertRegex(c.request("ACQUIRE dan export"), r"^DENIED 4 0 ")
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            got = wait_until(lambda: (lambda r: r.startswith("ALLOWED 4 0 0 30000") and r)(
                c.request("ACQUIRE dan export 4")), 5 * SLOW, interval=0.02,
                what="the killed client's leases released")
            self.assertRegex(got.split()[-1], ID)
            # rl0's count: the killed client's connection to it held one lease
            wait_until(lambda: scrape_metrics(mport)[
                'ratelimitd_leases_total{event="released_on_close"}'] == 1, 5 * SLOW,
                what="the release counted")
        # and this connection's, once closed
        wait_until(lambda: scrape_metrics(mport)[
            'ratelimitd_leases_total{event="released_on_close"}'] == 2, 5 * SLOW,
            what="the checker's lease released on close")

    def test_leases_held_per_action_across_three_daemons(self):
        """ratelimitd_leases_held{action}: what each daemon granted and
        holds; summed over the daemons, what Redis holds (each released
        through the daemon that granted it). Released, released on close,
        reset, expired (counted in ratelimitd_leases_expired_total)."""
        self.redis = self.start_redis()
        mports = [free_port() for _ in range(3)]
        ds = [self.start_daemon(POLICIES, name="rl%d" % i,
                                metrics='{listen: "127.0.0.1:%d"}' % mports[i])
              for i in range(3)]

        def gauges(name):
            return [scrape_metrics(m).get('%s{action="%s"}' % name, -1) for m in mports]

        def in_redis(user, action):
            with self.redis.resp() as r:
                return len(r.call("ZRANGE", "rl:{%s:%s}:l" % (action, user), 0, -1))
        cs = [Client(d.port) for d in ds]
        for c in cs:
            self.addCleanup(c.close)
        ids = [cs[0].request("ACQUIRE ann export").split()[-1],
               cs[0].request("ACQUIRE bob export 2").split()[-1],
               cs[1].request("ACQUIRE ann export").split()[-1],
               cs[2].request("ACQUIRE cy short").split()[-1]]
        for i in ids:
            self.assertRegex(i, ID)
        self.assertEqual(gauges(("ratelimitd_leases_held", "export")), [2, 1, 0])
        self.assertEqual(gauges(("ratelimitd_leases_held", "short")), [0, 0, 1])
        self.assertEqual(sum(gauges(("ratelimitd_leases_held", "export"))),
                         in_redis("ann", "export") + in_redis("bob", "export"))
        # the reply policy is no concurrency policy: not listed
        self.assertEqual(scrape_metrics(mports[0]).get(
            'ratelimitd_leases_held{action="reply"}'), None)
        self.assertEqual(cs[0].request("RELEASE " + ids[0]), "OK")
        self.assertEqual(gauges(("ratelimitd_leases_held", "export")), [1, 1, 0])
        # a RESET through rl1 forgets ann's leases it granted
        self.assertEqual(cs[1].request("RESET ann export"), "OK")
        self.assertEqual(gauges(("ratelimitd_leases_held", "export")), [1, 0, 0])
        # rl0's connection closes: bob's lease is released on close
        cs[0].close()
        wait_until(lambda: gauges(("ratelimitd_leases_held", "export"))[0] == 0, 5 * SLOW,
                   what="the closed connection's lease off the gauge")
        self.assertEqual(in_redis("bob", "export"), 0)
        # cy's short lease (1 s), never released: expired at its time
        wait_until(lambda: gauges(("ratelimitd_leases_held", "short"))[2] == 0, 5 * SLOW,
                   what="the short lease expired")
        self.assertEqual(gauges(("ratelimitd_leases_expired_total", "short")), [0, 0, 1])
        self.assertEqual(gauges(("ratelimitd_leases_expired_total", "export")), [0, 0, 0])
        # a RELEASE through another daemon finds it gone: harmless, and the
        # granting daemon has already counted it expired
        self.assertRegex(cs[1].request("RELEASE " + ids[3]), r"^ERR no-lease ")
        self.assertEqual(gauges(("ratelimitd_leases_expired_total", "short")), [0, 0, 1])

    def test_release_renew_and_expiry(self):
        self.redis = self.start_redis()
        mport = free_port()
        d = self.start_daemon(POLICIES, metrics='{listen: "127.0.0.1:%d"}' % mport)
        with Client(d.port) as c:
            a = c.request("ACQUIRE eve short")
            self.assertRegex(a, r"^ALLOWED 2 1 0 1000 ")
            lease = a.split()[-1]
            self.assertRegex(lease, ID)
            self.assertTrue(lease.startswith("short:ZXZl:"), lease)  # base64url("eve")
            b = c.request("ACQUIRE eve short").split()[-1]
            self.assertRegex(c.request("ACQUIRE eve short"), r"^DENIED 2 0 ([1-9]\d*) \1$")
            # renewed at 0.6 s: a lives to 1.6 s, b expires at 1 s
            time.sleep(0.6)
            self.assertEqual(c.request("RENEW " + lease), "ALLOWED 2 0 0 1000 " + lease)
            time.sleep(0.6)
            self.assertEqual(c.request("RENEW " + b),
                             "ERR no-lease lease not held: released, expired or never taken")
            self.assertRegex(c.request("ACQUIRE eve short"), r"^ALLOWED 2 0 0 1000 ")
            self.assertEqual(c.request("RELEASE " + lease), "OK")
            self.assertEqual(c.request("RELEASE " + lease),
                             "ERR no-lease lease not held: released, expired or never taken")
        m = scrape_metrics(mport)
        self.assertEqual(m['ratelimitd_leases_total{event="expired"}'], 1)
        self.assertEqual(m['ratelimitd_leases_total{event="released"}'], 1)
        self.assertEqual(m['ratelimitd_leases_total{event="acquired"}'], 3)
        self.assertEqual(m['ratelimitd_requests_total{command="renew"}'], 2)
        # the key goes with its last lease, as the decisions' keys do
        wait_until(lambda: self.redis.keys("rl:*") == [], 3 * SLOW, what="the key expired")

    def test_resp_with_redis_py(self):
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES)
        r = redis.Redis(host="127.0.0.1", port=d.port, socket_timeout=10 * SLOW)
        try:
            t0 = time.monotonic()
            got = r.execute_command("ACQUIRE", "fay\r\n x", "export", 3)
            self.assertEqual(got[:5], [1, 4, 1, 0, 30000])
            lease = got[5].decode()
            self.assertRegex(lease, ID)
            denied = r.execute_command("ACQUIRE", "fay\r\n x", "export", 2)
            # the lease's 30 s, less the whole ms between the two (a loaded
            # machine may take more than one): rounded up, as every wait
            gone = int((time.monotonic() - t0) * 1000)
            self.assertEqual(denied[:3], [0, 4, 1])
            self.assertEqual(denied[3], denied[4])
            self.assertTrue(30000 - gone - 1 <= denied[3] <= 30000, (denied, gone))
            self.assertEqual(r.execute_command("RENEW", lease)[5].decode(), lease)
            self.assertEqual(r.execute_command("RELEASE", lease), b"OK")
            with self.assertRaises(redis.ResponseError) as e:
                r.execute_command("RELEASE", lease)
            self.assertTrue(str(e.exception).startswith("no-lease "), e.exception)
            with self.assertRaises(redis.ResponseError) as e:
                r.execute_command("ALLOW", "fay", "export")
            self.assertTrue(str(e.exception).startswith("policy-kind "), e.exception)
        finally:
            r.close()

    def test_http_with_curl(self):
        """POST /v1/acquire, POST /v1/leases/<id>/renew, DELETE /v1/leases/<id>;
        a lease over HTTP outlives its connection (curl closes each)."""
        self.redis = self.start_redis()
        port, hport = free_port(), free_port()
        d = self.start_daemon(POLICIES, port=port, admin=False,
                              listen=['"127.0.0.1:%d"' % port,
                                      '{address: "127.0.0.1:%d", protocol: http}' % hport])
        base = "http://127.0.0.1:%d" % hport

        def curl(*args):
            r = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}"] + list(args),
                               capture_output=True, text=True, timeout=10 * SLOW)
            body, _, code = r.stdout.rpartition("\n")
            return int(code), json.loads(body) if body else None
        code, j = curl("-X", "POST", base + "/v1/acquire?user=ida&action=export&cost=3")
        self.assertEqual(code, 200)
        self.assertEqual({k: j[k] for k in ("allowed", "limit", "remaining", "retry_after_ms",
                                            "reset_ms")},
                         {"allowed": True, "limit": 4, "remaining": 1, "retry_after_ms": 0,
                          "reset_ms": 30000})
        lease = j["lease"]
        self.assertRegex(lease, ID)
        code, j = curl("-X", "POST", "-d", '{"user":"ida","action":"export","cost":2}',
                       base + "/v1/acquire")
        self.assertEqual((code, j["allowed"], j["remaining"]), (429, False, 1))
        code, j = curl("-X", "POST", base + "/v1/leases/%s/renew" % lease)
        self.assertEqual((code, j["lease"], j["reset_ms"]), (200, lease, 30000))
        self.assertEqual(curl("-X", "DELETE", base + "/v1/leases/" + lease), (200, {"ok": True}))
        code, j = curl("-X", "DELETE", base + "/v1/leases/" + lease)
        self.assertEqual((code, j["error"]), (404, "no-lease"))
        code, j = curl(base + "/v1/acquire?user=ida&action=export")
        self.assertEqual((code, j["error"]), (405, "method-not-allowed"))
        code, j = curl("-X", "POST", base + "/v1/acquire?user=ida&action=reply")
        self.assertEqual((code, j["error"]), (400, "policy-kind"))

    def test_ratelimitctl(self):
        """acquire (its lease goes back as ratelimitctl exits), renew and
        release of a lease another client holds."""
        from test_ctl import ctl
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES)
        addr = "127.0.0.1:%d" % d.port
        r = ctl("-s", addr, "--json", "acquire", "jo", "export", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual((j["result"], j["remaining"], j["reset_ms"]), ("allowed", 1, 30000))
        self.assertRegex(j["lease"], ID)
        with Client(d.port) as c:
            # ratelimitctl's connection closed: its 3 units went back
            lease = wait_until(lambda: (lambda a: a.startswith("ALLOWED 4 0 ") and a)(
                c.request("ACQUIRE jo export 4")), 3 * SLOW, what="released on exit").split()[-1]
            r = ctl("-s", addr, "acquire", "jo", "export")
            self.assertEqual(r.returncode, 1)
            self.assertRegex(r.stdout, r"^denied \(0 of 4 remaining; retry in ")
            r = ctl("-s", addr, "renew", lease)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout, "allowed (0 of 4 remaining; full again in 30s) lease %s\n"
                             % lease)
            r = ctl("-s", addr, "release", lease)
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "ok\n", ""))
            r = ctl("-s", addr, "release", lease)
            self.assertEqual(r.returncode, 2)
            self.assertIn("no-lease", r.stderr)

    def test_memory_sets_decide_as_the_script(self):
        """The differential test: 3000 random operations on one key, at
        times of our choosing, through the script's lease mode in Redis
        and through lease.c (the memory store's), answer alike."""
        import random
        self.redis = self.start_redis()
        with open(SCRIPT) as f:
            script = f.read()
        rnd = random.Random(29)
        now, limit, lease, issued, ops = 1_700_000_000_000_000, 5, 1000, [], []
        for i in range(3000):
            now += rnd.choice([0, 1, 999, 1000, 1001, rnd.randrange(400_000)])
            op = rnd.choice("aaaarrnnpx" if i % 500 == 499 else "aaaarrnnp")
            cost = rnd.choice([1, 1, 2, 3, 6])
            if op == "a":
                member = "%016x:%d" % (i, cost)
                issued.append(member)
            elif issued and rnd.random() < 0.9:
                member = rnd.choice(issued)
                cost = int(member.rsplit(":", 1)[1])
            else:
                member = "%016x:%d" % (10 ** 6 + i, cost)  # never taken
            ops.append((op, member, cost, limit, lease, now))
        path = os.path.join(self.tmpdir, "ops.txt")
        with open(path, "w") as f:
            f.write("".join("%s %s %d %d %d %d\n" % o for o in ops))
        replay = os.environ.get("RL_LEASE_REPLAY") or os.path.join(
            SRCDIR, "build", "tests", "unit", "lease_replay")
        c = subprocess.run([replay, path], capture_output=True, text=True, timeout=60)
        self.assertEqual(c.returncode, 0, c.stderr)
        mine = c.stdout.splitlines()
        r = redis.Redis(port=self.redis.port, socket_timeout=30)
        try:
            sha = r.script_load(script)
            pipe = r.pipeline(transaction=False)
            for op, member, cost, lim, ls, t in ops:
                pipe.evalsha(sha, 1, "k", t, "lease", op, member, cost, lim, ls)
            theirs = [" ".join(str(x) for x in v) for v in pipe.execute()]
        finally:
            r.close()
        self.assertEqual(len(mine), len(ops))
        diff = [(i, ops[i], m, t) for i, (m, t) in enumerate(zip(mine, theirs)) if m != t]
        self.assertEqual(diff[:5], [])
        # the random walk went everywhere: grants, refusals, expiries, releases
        oks = {(o[0], m.split()[0]) for o, m in zip(ops, mine)}
        self.assertTrue({("a", "1"), ("a", "0"), ("r", "1"), ("r", "0"), ("n", "1"), ("n", "0"),
                         ("p", "1"), ("p", "0")} <= oks, oks)
        self.assertGreater(sum(int(m.split()[4]) for m in mine), 100)  # expired

    def test_protocol_md_exchange_as_written(self):
        """proto/protocol.md's ACQUIRE/RELEASE exchange, its id replaced by
        the one the daemon gives (ids are random)."""
        with open(os.path.join(SRCDIR, "proto", "protocol.md")) as f:
            doc = f.read()
        at = doc.index("### ACQUIRE, RELEASE and RENEW")
        section = doc[at:].split("\nReply fields")[0].split("\n### ")[0]  # to the next one
        lines = [ln.strip() for ln in section.splitlines()
                 if ln.strip().startswith(("C: ", "S: "))]
        self.assertEqual(len(lines), 6, lines)
        doc_id = lines[1].split()[-1]
        self.redis = self.start_redis()
        d = self.start_daemon({"export": "{algorithm: concurrency, limit: 3, lease: 30s}"})
        mine = None
        with Client(d.port) as c:
            for i in range(0, len(lines), 2):
                req, want = lines[i][3:], lines[i + 1][3:]
                got = c.request(req.replace(doc_id, mine) if mine else req)
                if mine is None:
                    mine = got.split()[-1]
                    self.assertRegex(mine, ID)
                self.assertEqual(got, want.replace(doc_id, mine))

    def test_memory_store(self):
        """store: memory: the same answers, one daemon's own."""
        port, mport = free_port(), free_port()
        d = self.start_daemon(config='listen: ["127.0.0.1:%d"]\nstore: memory\n'
                              'metrics: {listen: "127.0.0.1:%d"}\npolicies:\n%s'
                              % (port, mport,
                                 "".join("  %s: %s\n" % kv for kv in POLICIES.items())),
                              port=port)
        with Client(d.port) as c, Client(d.port) as c2:
            a = c.request("ACQUIRE gil export 3")
            self.assertRegex(a, r"^ALLOWED 4 1 0 30000 ")
            self.assertRegex(c2.request("ACQUIRE gil export 2"),
                             r"^DENIED 4 1 (29\d\d\d|30000) \1$")
            self.assertEqual(c.request("RELEASE " + a.split()[-1]), "OK")
            self.assertRegex(c2.request("ACQUIRE gil export 4"), r"^ALLOWED 4 0 0 30000 ")
            self.assertRegex(c.request("ACQUIRE gil export"), r"^DENIED 4 0 ")
        # decided in this daemon's memory, and counted so (they were counted
        # as source="redis", with no Redis at all)
        m = scrape_metrics(mport)
        self.assertEqual(m['ratelimitd_decisions_total{result="allowed",source="memory"}'], 2)
        self.assertEqual(m['ratelimitd_decisions_total{result="denied",source="memory"}'], 2)
        self.assertEqual(m.get('ratelimitd_decisions_total{result="allowed",source="redis"}',
                               0), 0)
        # c2 closed: its lease went back
        with Client(d.port) as c:
            wait_until(lambda: c.request("ACQUIRE gil export 4").startswith("ALLOWED"),
                       3 * SLOW, what="released on close")

    def test_a_connection_holds_at_most_4096_leases(self):
        """What a line or RESP connection keeps of its leases is bounded: the
        4097th ACQUIRE is refused (and charged nothing); one RELEASE makes
        room again."""
        port = free_port()
        d = self.start_daemon(config='listen: ["127.0.0.1:%d"]\nstore: memory\npolicies:\n'
                              '  many: {algorithm: concurrency, limit: 100000, lease: 1m}\n'
                              % port, port=port)
        with Client(d.port, timeout=30 * SLOW) as c:
            got = c.pipeline(["ACQUIRE u%d many" % i for i in range(4097)], timeout=30 * SLOW)
            self.assertTrue(all(r.startswith("ALLOWED ") for r in got[:4096]))
            self.assertEqual(got[4096], "ERR forbidden this connection holds 4096 leases: "
                                        "release some first")
            self.assertEqual(c.request("RELEASE " + got[0].split()[-1]), "OK")
            self.assertRegex(c.request("ACQUIRE u4096 many"), r"^ALLOWED 100000 99999 ")

    def test_a_failed_release_still_releases_on_close(self):
        """A RELEASE that fails (Redis refuses the script to the daemon's
        user for a moment) leaves the lease the connection's: its close
        gives it back, as for one never released (the id was once
        forgotten when the RELEASE was read)."""
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES)
        c = Client(d.port)
        got = c.request("ACQUIRE ivy export %d" % LIMIT)
        self.assertTrue(got.startswith("ALLOWED %d 0 " % LIMIT), got)
        self.redis.call("ACL", "SETUSER", "default", "-evalsha", "-eval")
        try:
            self.assertRegex(c.request("RELEASE " + got.split()[-1]), r"^ERR store-")
        finally:
            self.redis.call("ACL", "SETUSER", "default", "+@all")
        c.close()
        with Client(d.port) as other:
            # (the lease would last 30 s)
            wait_until(lambda: other.request("ACQUIRE ivy export %d" % LIMIT).startswith(
                "ALLOWED %d 0 " % LIMIT), 5 * SLOW, interval=0.05,
                what="the lease released on close")

    def test_redis_down_answers_per_on_store_error(self):
        port, gone = free_port(), free_port()
        pol = {"a": "{algorithm: concurrency, limit: 2, lease: 30s, on_store_error: allow}",
               "d": "{algorithm: concurrency, limit: 2, lease: 30s, on_store_error: deny}",
               "e": "{algorithm: concurrency, limit: 2, lease: 30s, on_store_error: error}",
               "l": "{algorithm: concurrency, limit: 2, lease: 30s, on_store_error: local}"}
        d = self.start_daemon(config=make_config(['"127.0.0.1:%d"' % port],
                                                 {"address": "127.0.0.1:%d" % gone,
                                                  "timeout": "100ms"}, pol), port=port)
        with Client(d.port) as c:
            self.assertEqual(c.request("ACQUIRE hal a"), "ALLOWED 2 -1 0 -1")
            self.assertEqual(c.request("ACQUIRE hal d"), "DENIED 2 -1 1000 -1")
            self.assertRegex(c.request("ACQUIRE hal e"), r"^ERR store-unavailable ")
            # local keeps no leases: each daemon would hand out the limit
            self.assertRegex(c.request("ACQUIRE hal l"), r"^ERR store-unavailable ")
            self.assertRegex(c.request("RELEASE a:aGFs:0123456789abcdef:1"),
                             r"^ERR store-unavailable ")


class LeasesClusterTest(DaemonTest):
    def test_three_daemons_on_a_cluster_never_hold_more_than_the_limit(self):
        cl = add_cluster(self)
        ds = []
        for i in range(3):
            port = free_port()
            ds.append(self.start_daemon(config=cluster_config(port, cl, POLICIES), port=port,
                                        name="rl%d" % i))
        users = ["u%d" % i for i in range(4)]  # over several slots and masters

        def sample():
            out = []
            for u in users:
                key = "rl:{export:%s}:l" % u
                for n in cl.masters():
                    try:
                        out.append(held(n.call("ZRANGE", key, 0, -1)))
                    except Exception:  # noqa: BLE001 - MOVED: not this master's
                        pass
            return out or [0]
        LeaseRace(self, [d.port for d in ds], users, 3, sample).run(24)
        self.assertEqual({a: k for a, k in cl.keys_by_node("rl:*").items() if k}, {})


class LeasesSentinelTest(DaemonTest):
    def test_three_daemons_through_sentinels_never_hold_more_than_the_limit(self):
        ss = add_sentinels(self)
        ds = []
        for i in range(3):
            port = free_port()
            ds.append(self.start_daemon(
                config=make_config(["127.0.0.1:%d" % port],
                                   sentinel_redis_opts(ss.addresses()), POLICIES),
                port=port, name="rl%d" % i))
        for d in ds:  # the sentinels name the master after the daemon listens
            with Client(d.port) as c:
                wait_until(lambda: c.request("ACQUIRE ready export").startswith("ALLOWED 4 "),
                           10 * SLOW, interval=0.05, what="leases from the master")
        users = ["ann", "bob", "cy"]
        master = ss.master0

        def sample():
            with master.resp() as r:
                return [held(r.call("ZRANGE", "rl:{export:%s}:l" % u, 0, -1)) for u in users]
        LeaseRace(self, [d.port for d in ds], users, 2, sample).run(18)
        self.assertEqual(master.keys("rl:{export:[abc]*"), [])


if __name__ == "__main__":
    unittest.main()
