"""Several (user, action) pairs in one decision (MALLOW, MPEEK): allowed
only if every pair allows, charged to all of them or to none, the reply
naming the deciding pair; over the line protocol and RESP (redis-py); with
shadow mode, overrides and bans per pair; exact with three daemons sharing a
real Redis. The Cluster's check-then-charge is in test_cluster.py, Sentinel
in test_sentinel.py."""

import random
import re
import sys
import unittest

try:
    import redis as redis_py
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis as redis_py

import http.client
import json

from harness import SLOW, DaemonTest, free_port, make_config, race, scrape_metrics

LOGIN = {"login": "3/60s", "login_ip": "5/60s", "login_all": "100/60s"}
PAIR_REPLY = re.compile(r"^(ALLOWED|DENIED) (-?\d+) (-?\d+) (-?\d+) (-?\d+) (\d+)$")


def parse_pairs(reply):
    """'DENIED 3 0 60000 60000 1' -> ('DENIED', 3, 0, 60000, 60000, 1)."""
    m = PAIR_REPLY.match(reply)
    if not m:
        raise AssertionError("not a MALLOW reply: %r" % reply)
    return (m.group(1),) + tuple(int(m.group(i)) for i in range(2, 7))


class PairsTest(DaemonTest):
    def start(self, policies=LOGIN, **top):
        self.redis = self.start_redis()
        self.mport = free_port()
        self.daemon = self.start_daemon(policies, metrics='{listen: "127.0.0.1:%d"}' % self.mport,
                                        **top)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def card(self, action, user, suffix="s60000"):
        return self.redis.call("ZCARD", "rl:{%s:%s}:%s" % (action, user, suffix))

    def test_all_or_nothing_and_the_deciding_pair(self):
        self.start()
        req = "MALLOW alice login 1.2.3.4 login_ip - login_all"
        got = [parse_pairs(self.c.request(req)) for _ in range(4)]
        # the account's limit binds (smallest remaining), then denies
        self.assertEqual([g[:3] + g[5:] for g in got],
                         [("ALLOWED", 3, 2, 1), ("ALLOWED", 3, 1, 1), ("ALLOWED", 3, 0, 1),
                          ("DENIED", 3, 0, 1)])
        self.assertTrue(59000 <= got[3][3] <= 60000, got[3])
        # the denial charged nothing: the address and everyone hold 3
        self.assertEqual((self.card("login", "alice"), self.card("login_ip", "1.2.3.4"),
                          self.card("login_all", "-")), (3, 3, 3))
        # another account from the same address: the address's limit (5) decides
        got = [parse_pairs(self.c.request("MALLOW bob login 1.2.3.4 login_ip - login_all"))
               for _ in range(3)]
        self.assertEqual([g[:3] + g[5:] for g in got],
                         [("ALLOWED", 5, 1, 2), ("ALLOWED", 5, 0, 2), ("DENIED", 5, 0, 2)])
        self.assertEqual((self.card("login", "bob"), self.card("login_ip", "1.2.3.4"),
                          self.card("login_all", "-")), (2, 5, 5))
        # MPEEK answers the same way and charges nothing; a cost applies to every pair
        self.assertEqual(parse_pairs(self.c.request("MPEEK carol login - login_all"))[:3] +
                         parse_pairs(self.c.request("MPEEK carol login - login_all"))[5:],
                         ("ALLOWED", 3, 3, 1))
        self.assertEqual(self.card("login", "carol"), 0)
        g = parse_pairs(self.c.request("MALLOW carol login - login_all 3"))
        self.assertEqual(g[:3] + g[5:], ("ALLOWED", 3, 0, 1))
        self.assertEqual((self.card("login", "carol"), self.card("login_all", "-")), (3, 8))
        g = parse_pairs(self.c.request("MALLOW dave login - login_all 4"))
        self.assertEqual(g[:4] + g[5:], ("DENIED", 3, 3, -1, 1))  # never: cost over the limit
        # a single ALLOW sees the same keys
        self.assertEqual(self.c.request("PEEK - login_all").split()[:3], ["ALLOWED", "100", "92"])
        # counted once, under the deciding pair's action
        m = scrape_metrics(self.mport)
        self.assertEqual(m['ratelimitd_requests_total{command="mallow"}'], 9)
        self.assertEqual(m['ratelimitd_requests_total{command="mpeek"}'], 2)

    def test_request_errors(self):
        self.start()
        cases = {
            "MALLOW a": "ERR syntax usage: MALLOW <user> <action> [<user> <action>]... "
                              "[<cost>]",
            "MPEEK": "ERR syntax usage: MPEEK <user> <action> [<user> <action>]... [<cost>]",
            "MALLOW a login b nope": "ERR unknown-action no policy for the action of pair 2",
            "MALLOW a login b login_ip a login": "ERR syntax pair 3 repeats pair 1",
            "MALLOW a login b login_ip 0": "ERR bad-cost cost must be an integer from 1 to "
                                           "2147483647",
            "MALLOW a login b login_ip x": "ERR bad-cost cost must be an integer from 1 to "
                                           "2147483647",
            "MALLOW " + " ".join("u%d login" % i for i in range(9)): "ERR syntax too many "
                                                                     "arguments",
        }
        got = self.c.pipeline(list(cases))
        self.assertEqual(dict(zip(cases, got)), cases)
        # one pair and eight pairs are fine; nothing was written by the errors
        self.assertEqual(self.c.request("MPEEK a login"), "ALLOWED 3 3 0 0 1")
        self.assertEqual(self.redis.keys("rl:*"), [])
        g = parse_pairs(self.c.request("MALLOW " + " ".join("u%d login" % i for i in range(8))))
        self.assertEqual(g[:3], ("ALLOWED", 3, 2))
        self.assertEqual(len(self.redis.keys("rl:*")), 8)
        # old requests are unchanged
        self.assertEqual(self.c.request("ALLOW a login b"), "ERR bad-cost cost must be an "
                         "integer from 1 to 2147483647")
        self.assertEqual(self.c.request("ALLOW a login 1 2").split()[:2], ["ERR", "syntax"])

    def test_resp_with_redis_py(self):
        self.start()
        r = redis_py.Redis(host="127.0.0.1", port=self.daemon.port, socket_timeout=5 * SLOW)
        self.addCleanup(r.close)
        got = [r.execute_command("MALLOW", "éve", "login", "10.0.0.1", "login_ip")
               for _ in range(4)]
        self.assertEqual([g[:3] + g[5:] for g in got],
                         [[1, 3, 2, 1], [1, 3, 1, 1], [1, 3, 0, 1], [0, 3, 0, 1]])
        self.assertEqual(r.execute_command("MPEEK", "x", "login", "10.0.0.1", "login_ip", "2")[:3],
                         [1, 5, 2])
        with self.assertRaisesRegex(redis_py.ResponseError, "^syntax pair 2 repeats pair 1$"):
            r.execute_command("MALLOW", "x", "login", "x", "login")
        # what the pipeline of a Redis client makes of it
        p = r.pipeline(transaction=False)
        p.execute_command("MALLOW", "y", "login", "10.0.0.1", "login_ip")
        p.execute_command("ALLOW", "y", "login")
        self.assertEqual([v[0] for v in p.execute()], [1, 1])

    def test_shadow_overrides_and_bans_per_pair(self):
        self.start({
            "acct": "{limits: [2/60s], overrides: {vip: unlimited, bad: blocked}}",
            "trial": "{limits: [1/60s], shadow: true}",
            "ip": "{limits: [1/60s], ban: {after: 2, within: 1m, for: 10m}}",
        })
        # a shadow pair that would deny does not deny; it is counted
        got = [parse_pairs(self.c.request("MALLOW u1 acct u1 trial")) for _ in range(3)]
        self.assertEqual([g[0] for g in got], ["ALLOWED", "ALLOWED", "DENIED"])
        self.assertEqual(got[1][5], 1)
        self.assertEqual(self.card("trial", "u1"), 1)  # charged only when it passed
        # (the third is counted too: the account denied it, and trial would have)
        m = scrape_metrics(self.mport)
        self.assertEqual(m['ratelimitd_action_shadow_denied_total{action="trial"}'], 2)
        self.assertTrue(any("shadow: trial would be denied for u1" in ln
                            for ln in self.daemon.log_lines()))
        # an unlimited pair is left out; a blocked one denies without Redis
        self.assertEqual(parse_pairs(self.c.request("MALLOW vip acct 9.9.9.9 ip"))[:3] +
                         (self.card("acct", "vip"),), ("ALLOWED", 1, 0, 0))
        self.assertEqual(self.c.request("MALLOW 8.8.8.8 ip bad acct"), "DENIED 2 0 -1 -1 2")
        self.assertEqual(self.card("ip", "8.8.8.8"), 0)
        self.assertEqual(self.c.request("MALLOW vip acct"), "ALLOWED -1 -1 0 -1 0")
        # a ban counts the denials its pair caused: two, then banned 10 min
        got = [parse_pairs(self.c.request("MALLOW u%d acct 9.9.9.9 ip" % i)) for i in (2, 3, 4)]
        self.assertEqual([(g[0], g[5]) for g in got], [("DENIED", 2)] * 3)
        self.assertTrue(599000 <= got[1][3] <= 600000, got)
        self.assertTrue(599000 <= got[2][3] <= 600000, got)
        # the account pairs were never charged
        self.assertEqual([self.card("acct", "u%d" % i) for i in (2, 3, 4)], [0, 0, 0])

    def test_http(self):
        """GET or POST /v1/mallow and /v1/mpeek: the i-th user with the i-th
        action; 429 when denied, the JSON naming the deciding pair, the
        RateLimit headers of its policy."""
        self.redis = self.start_redis()
        port, hport = free_port(), free_port()
        self.daemon = self.start_daemon(config=make_config(
            ["127.0.0.1:%d" % port, '{address: "127.0.0.1:%d", protocol: http}' % hport],
            {"address": self.redis.address}, LOGIN, admin=False), port=port)

        def get(path, method="GET"):
            conn = http.client.HTTPConnection("127.0.0.1", hport, timeout=5 * SLOW)
            try:
                conn.request(method, path)
                r = conn.getresponse()
                return r.status, dict(r.getheaders()), r.read().decode()
            finally:
                conn.close()
        q = "/v1/mallow?user=al%69ce&action=login&user=1.2.3.4&action=login_ip"
        got = [get(q, "POST" if i % 2 else "GET") for i in range(4)]
        self.assertEqual([g[0] for g in got], [200, 200, 200, 429])
        body = json.loads(got[3][2])
        self.assertEqual((body["allowed"], body["limit"], body["remaining"], body["pair"]),
                         (False, 3, 0, 1))
        self.assertEqual(got[3][1]["RateLimit-Policy"], '"login";q=3;w=60')
        self.assertIn("Retry-After", got[3][1])
        self.assertEqual((self.card("login", "alice"), self.card("login_ip", "1.2.3.4")), (3, 3))
        # a cost; MPEEK; the same keys as the line protocol
        st, _, b = get("/v1/mpeek?user=bob&action=login&user=1.2.3.4&action=login_ip&cost=2")
        self.assertEqual((st, json.loads(b)["remaining"], json.loads(b)["pair"]), (200, 2, 2))
        errors = {
            "/v1/mallow?user=a": (400, "syntax"),
            "/v1/mallow?user=a&action=login&user=b": (400, "syntax"),
            "/v1/mallow?user=&action=login": (400, "bad-user"),
            "/v1/mallow?user=a&action=nope": (404, "unknown-action"),
            "/v1/mallow?user=a&action=login&cost=0": (400, "bad-cost"),
            "/v1/mallow?" + "&".join("user=u%d&action=login" % i for i in range(9)):
                (400, "syntax"),
        }
        for path, (status, code) in errors.items():
            st, _, b = get(path)
            self.assertEqual((st, json.loads(b)["error"]), (status, code), path)
        self.assertEqual(get("/v1/mallow?user=a&action=login", "DELETE")[0], 405)

    def test_batched_with_single_decisions_in_order(self):
        """MALLOW and MPEEK go into the same script calls as ALLOWs (one
        Redis connection, so the calls run in the order sent): 300 mixed
        requests, pipelined, are answered exactly as one at a time would
        be, each reply of its own kind, and the calls carried several
        decisions (MALLOWs once went alone, one call each)."""
        self.start(policies={"a": "5/60s", "b": "7/60s"}, redis_opts={"connections": 1})
        rnd = random.Random(11)
        reqs = []
        for _ in range(300):
            u, v = "u%d" % rnd.randrange(12), "u%d" % rnd.randrange(12)
            reqs.append(rnd.choice(["ALLOW %s a" % u, "MALLOW %s a %s b" % (u, v),
                                    "MPEEK %s a %s b" % (u, v), "MALLOW %s b %s a" % (u, v)]))
        before = scrape_metrics(self.mport)
        replies = self.c.pipeline(reqs, timeout=20 * SLOW)
        count = {}
        limit = {"a": 5, "b": 7}
        for req, reply in zip(reqs, replies):
            w = req.split()
            pairs = [(w[i], w[i + 1]) for i in range(1, len(w), 2)]
            ok = all(count.get(p, 0) < limit[p[1]] for p in pairs)
            if ok and w[0] != "MPEEK":
                for p in pairs:
                    count[p] = count.get(p, 0) + 1
            got = parse_pairs(reply)[0] if w[0] != "ALLOW" else reply.split()[0]
            if w[0] == "ALLOW":
                self.assertRegex(reply, r"^(ALLOWED|DENIED) \d+ -?\d+ -?\d+ \d+$", req)
            self.assertEqual(got, "ALLOWED" if ok else "DENIED", (req, reply))
        for (user, action), n in count.items():
            self.assertEqual(self.card(action, user), n, (user, action))
        after = scrape_metrics(self.mport)
        calls = (after["ratelimitd_store_batch_size_count"] -
                 before.get("ratelimitd_store_batch_size_count", 0))
        decided = (after["ratelimitd_store_batch_size_sum"] -
                   before.get("ratelimitd_store_batch_size_sum", 0))
        self.assertEqual(decided, 300)
        self.assertLess(calls, 150, "MALLOWs not batched: %d calls for 300 requests" % calls)
        # a key of the wrong type fails its own decision only: the figures
        # of those after it in the call are still read at the right place
        self.redis.call("SET", "rl:{b:wt}:s60000", "junk")
        got = self.c.pipeline(["ALLOW n1 a", "MALLOW n1 a wt b", "MALLOW n2 a n3 b",
                               "ALLOW n1 a", "MPEEK n3 b n2 a"], timeout=20 * SLOW)
        self.assertEqual(got, ["ALLOWED 5 4 0 60000",
                               "ALLOWED 5 -1 0 -1 0",  # on_store_error: allow, charged nothing
                               "ALLOWED 5 4 0 60000 1",
                               "ALLOWED 5 3 0 60000",
                               "ALLOWED 5 4 0 60000 2"])

    def test_runs_in_calls_of_up_to_256(self):
        """1,200 pipelined ALLOWs on one Redis connection, mostly in runs of
        one policy (sent as "=<cost>" after the first of a run) over 40
        users, a sliding log and a funnel: every answer is what one at a
        time would give, the keys hold exactly the allowed, and calls took
        more than 128 decisions but never more than 256."""
        self.start(policies={"s": "7/60s",
                             "f": "{algorithm: funnel, capacity: 9, rate: 1/1d}"},
                   redis_opts={"connections": 1})
        rnd = random.Random(256)
        reqs = []
        while len(reqs) < 1200:
            action = rnd.choice("sf")
            for _ in range(rnd.randrange(1, 60)):
                reqs.append("ALLOW u%d %s" % (rnd.randrange(40), action))
        reqs = reqs[:1200]
        before = scrape_metrics(self.mport)
        replies = self.c.pipeline(reqs, timeout=30 * SLOW)
        count, limit = {}, {"s": 7, "f": 9}
        for req, reply in zip(reqs, replies):
            _, user, action = req.split()
            ok = count.get((user, action), 0) < limit[action]
            if ok:
                count[(user, action)] = count.get((user, action), 0) + 1
            self.assertEqual(reply.split()[0], "ALLOWED" if ok else "DENIED", (req, reply))
        for (user, action), n in count.items():
            if action == "s":
                self.assertEqual(self.card(action, user), n, user)
        self.assertGreater(len([k for k in count if k[1] == "f" and count[k] == 9]), 5)
        after = scrape_metrics(self.mport)

        def delta(name):
            return after.get(name, 0) - before.get(name, 0)
        # every answer came from Redis but repeats of a denial (the deny cache)
        cached = delta('ratelimitd_decisions_total{result="denied",source="cache"}')
        self.assertEqual(delta("ratelimitd_store_batch_size_sum"), 1200 - cached)
        calls = delta("ratelimitd_store_batch_size_count")
        self.assertLess(delta('ratelimitd_store_batch_size_bucket{le="128"}'), calls,
                        "no call of more than 128 decisions")
        self.assertEqual(delta('ratelimitd_store_batch_size_bucket{le="256"}'), calls)

    def test_three_daemons_exact(self):
        """8 accounts on 4 addresses, 8 logins each, through 3 daemons and 12
        connections at once: per account 4, per address 6, for everyone 15.
        Exactly 15 pass (the users' and addresses' room adds to more), no
        account or address passes its limit, and every key holds exactly
        the requests allowed with it: a denial charged nothing anywhere."""
        self.redis = self.start_redis()
        pol = {"acct": "4/60s", "addr": "6/60s", "all": "15/60s"}
        ds = [self.start_daemon(pol, name="rl%d" % i) for i in range(3)]
        reqs = ["MALLOW a%d acct 10.0.0.%d addr - all" % (u, u // 2) for u in range(8)] * 8
        random.Random(7).shuffle(reqs)
        shares = [reqs[i::12] for i in range(12)]
        results, errors = race([d.port for d in ds], shares, 20 * SLOW)
        self.assertEqual(errors, [])
        self.assertEqual(len(results), 64)
        allowed = [ln for ln, r in results if parse_pairs(r)[0] == "ALLOWED"]
        self.assertEqual(len(allowed), 15)
        per_acct, per_addr = {}, {}
        for ln in allowed:
            w = ln.split()
            per_acct[w[1]] = per_acct.get(w[1], 0) + 1
            per_addr[w[3]] = per_addr.get(w[3], 0) + 1
        self.assertLessEqual(max(per_acct.values()), 4)
        self.assertLessEqual(max(per_addr.values()), 6)
        for u in range(8):
            self.assertEqual(self.card("acct", "a%d" % u), per_acct.get("a%d" % u, 0))
        for a in range(4):
            self.assertEqual(self.card("addr", "10.0.0.%d" % a), per_addr.get("10.0.0.%d" % a, 0))
        self.assertEqual(self.card("all", "-"), 15)


if __name__ == "__main__":
    unittest.main(verbosity=2)
