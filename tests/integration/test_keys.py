"""Redis keys: layout, one hash tag, escaping, isolation, prefix, database,
RESET and PEEK scope."""

import re
import time
import unittest

from harness import DaemonTest, commandstats, parse_decision, wait_until

POLICIES = {
    "reply": "5/60s",
    "big": "100/60s",
    "up": "{algorithm: funnel, capacity: 15, rate: 30/60s}",
    "login": "[3/1s, 20/60s]",
}

WEIRD_USERS = [b"a}b", b"a%7Db", b"a%b", b"a%25b", b"a{b", b"{x}", b"}{", b"a:b", b"x}:s60000",
               b"%", b"%%", b"%7D", b"}", b"{", b"a%257Db", b"\x80\xff\xfe", b"\xc3\xa9",
               b"rl:{big:a}", b"big:a"]


def esc(user):
    return user.replace(b"%", b"%25").replace(b"}", b"%7D")


def tag_of(key):
    """Redis Cluster's rule: the bytes between the first '{' and the first '}' after it."""
    i = key.find(b"{")
    j = key.find(b"}", i + 1)
    return key[i + 1:j] if i >= 0 and j > i + 1 else key


class KeysTest(DaemonTest):
    def start(self, **kw):
        self.fresh(POLICIES, **kw)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def raw(self, data):
        self.c.sendraw(data + b"\n")
        return self.c.readline()

    def test_layout(self):
        self.start()
        self.c.request("ALLOW alice reply")
        self.c.request("ALLOW alice up")
        self.c.request("ALLOW alice login")
        self.assertEqual(self.redis.keys(), sorted([
            b"rl:{reply:alice}:s60000", b"rl:{up:alice}:f",
            b"rl:{login:alice}:s1000", b"rl:{login:alice}:s60000"]))

    def test_weird_users_never_share_state(self):
        self.start()
        for i, u in enumerate(WEIRD_USERS):
            r = self.raw(b"ALLOW " + u + b" big %d" % (i + 1))
            self.assertDecision(r, "ALLOWED", 100, 100 - (i + 1), 0)
        for i, u in enumerate(WEIRD_USERS):
            r = self.raw(b"PEEK " + u + b" big")
            self.assertDecision(r, "ALLOWED", 100, 100 - (i + 1), 0)
        keys = self.redis.keys()
        self.assertEqual(len(keys), len(WEIRD_USERS))
        want = sorted(b"rl:{big:" + esc(u) + b"}:s60000" for u in WEIRD_USERS)
        self.assertEqual(keys, want)
        tags = set()
        for k in keys:
            self.assertRegex(k, re.compile(rb"^rl:\{[^}]*\}:s60000$", re.S))
            tags.add(tag_of(k))
        self.assertEqual(len(tags), len(WEIRD_USERS), "two users share a hash tag")

    def test_brace_vs_escaped_brace(self):
        self.start()
        for _ in range(5):
            self.c.request("ALLOW a}b reply")
        self.assertDecision(self.c.request("ALLOW a}b reply"), "DENIED", 5, 0)
        self.assertEqual(self.c.request("PEEK a%7Db reply"), "ALLOWED 5 5 0 0")
        self.assertDecision(self.c.request("ALLOW a%7Db reply"), "ALLOWED", 5, 4)
        self.assertDecision(self.c.request("PEEK a}b reply"), "DENIED", 5, 0)

    def test_all_keys_of_a_decision_share_one_tag(self):
        self.start()
        for u in [b"x{y}z", b"}}", b"{{", b"p%q"]:
            self.raw(b"ALLOW " + u + b" login")
        by_tag = {}
        for k in self.redis.keys():
            by_tag.setdefault(tag_of(k), []).append(k)
        self.assertEqual(len(by_tag), 4)
        for tag, ks in by_tag.items():
            self.assertEqual(len(ks), 2, ks)
            self.assertTrue(tag.startswith(b"login:"), tag)

    def test_same_user_different_actions_independent(self):
        self.start()
        for _ in range(5):
            self.c.request("ALLOW bob reply")
        self.assertEqual(self.c.request("PEEK bob big"), "ALLOWED 100 100 0 0")
        self.assertEqual(self.c.request("PEEK bob up"), "ALLOWED 15 15 0 0")

    def test_reset_clears_only_that_user_and_action(self):
        self.start()
        self.c.pipeline(["ALLOW u1 reply"] * 5 + ["ALLOW u1 big 7", "ALLOW u2 reply",
                                                   "ALLOW u1 up 3", "ALLOW u1 login 2"])
        self.assertEqual(self.c.request("RESET u1 reply"), "OK")
        self.assertEqual(self.c.request("PEEK u1 reply"), "ALLOWED 5 5 0 0")
        self.assertDecision(self.c.request("PEEK u1 big"), "ALLOWED", 100, 93)
        self.assertDecision(self.c.request("PEEK u2 reply"), "ALLOWED", 5, 4)
        self.assertDecision(self.c.request("PEEK u1 up"), "ALLOWED", 15, 12)
        self.assertEqual(self.c.request("RESET u1 login"), "OK")
        self.assertEqual(self.c.request("RESET u1 up"), "OK")
        self.assertEqual(sorted(self.redis.keys()),
                         [b"rl:{big:u1}:s60000", b"rl:{reply:u2}:s60000"])

    def test_reset_weird_user(self):
        self.start()
        self.raw(b"ALLOW a}b reply")
        self.raw(b"ALLOW a%7Db reply")
        self.assertEqual(self.raw(b"RESET a}b reply"), "OK")
        self.assertEqual(self.redis.keys(), [b"rl:{reply:a%257Db}:s60000"])

    def test_peek_consumes_nothing(self):
        self.start()
        for a in ("reply", "up", "login"):
            self.assertIn(self.c.request("PEEK fresh %s" % a),
                          ("ALLOWED 5 5 0 0", "ALLOWED 15 15 0 0", "ALLOWED 3 3 0 0"))
        self.assertEqual(self.redis.keys(), [], "PEEK wrote state")
        self.c.pipeline(["ALLOW used reply 2", "ALLOW used up 2", "ALLOW used login 2"])
        snap = self.dump()
        for _ in range(20):
            for a in ("reply", "up", "login"):
                parse_decision(self.c.request("PEEK used %s" % a))
                parse_decision(self.c.request("PEEK used %s 100" % a))
        self.assertEqual(self.dump(), snap)

    def dump(self):
        out = {}
        with self.redis.resp() as r:
            for k in r.call("KEYS", "*"):
                t = r.call("TYPE", k)
                if t == "zset":
                    out[k] = r.call("ZRANGE", k, 0, -1, "WITHSCORES")
                else:
                    out[k] = r.call("GET", k)
        return out

    def test_custom_prefix_and_nothing_outside(self):
        self.redis = self.start_redis()
        self.redis.call("SET", "rl:{reply:alice}:s60000", "not mine")
        self.redis.call("SET", "other", "x")
        self.daemon = self.start_daemon(POLICIES, prefix='"app1:rl:"')
        with self.daemon.client() as c:
            for u in ("alice", "bob"):
                for a in ("reply", "up", "login", "big"):
                    c.request("ALLOW %s %s" % (u, a))
                    c.request("PEEK %s %s" % (u, a))
            c.request("RESET bob big")
        keys = self.redis.keys()
        self.assertEqual(self.redis.call("GET", "rl:{reply:alice}:s60000"), b"not mine")
        self.assertEqual(self.redis.call("GET", "other"), b"x")
        mine = [k for k in keys if k not in (b"rl:{reply:alice}:s60000", b"other")]
        self.assertEqual(len(mine), 9, keys)
        for k in mine:
            self.assertTrue(k.startswith(b"app1:rl:{"), k)
        self.assertIn(b"app1:rl:{reply:alice}:s60000", mine)

    def test_empty_prefix(self):
        self.start(prefix='""')
        self.c.request("ALLOW z reply")
        self.assertEqual(self.redis.keys(), [b"{reply:z}:s60000"])

    def test_two_prefixes_independent(self):
        self.redis = self.start_redis()
        d1 = self.start_daemon(POLICIES, name="a", prefix='"one:"')
        d2 = self.start_daemon(POLICIES, name="b", prefix='"two:"')
        with d1.client() as c1, d2.client() as c2:
            for _ in range(5):
                c1.request("ALLOW p reply")
            self.assertDecision(c1.request("ALLOW p reply"), "DENIED", 5, 0)
            self.assertDecision(c2.request("ALLOW p reply"), "ALLOWED", 5, 4)

    def script_calls(self):
        st = commandstats(self.redis)
        return st.get("evalsha", 0) + st.get("eval", 0)

    def test_script_calls_and_deny_cache(self):
        """Every decision Redis must make is one script call; a request Redis
        has just denied is denied locally until its retry time (the deny
        cache), so repeats of it cost Redis nothing. One request at a time,
        so no two decisions share a call."""
        self.start()
        # the cache is used only once the daemon hears other daemons' RESETs
        wait_until(lambda: self.redis.call("PUBSUB", "NUMSUB", "rl:reset")[1] >= 1, 5,
                   what="the daemon's RESET subscription")
        self.c.request("PING")
        self.redis.call("CONFIG", "RESETSTAT")
        # reply 5/60s: 5 allowed + the first denial go to Redis, 2 repeats don't
        for _ in range(8):
            parse_decision(self.c.request("ALLOW s reply"))
        self.assertEqual(self.script_calls(), 6)
        # PEEK with the same cost is the same question: answered locally
        for _ in range(4):
            self.assertEqual(parse_decision(self.c.request("PEEK s reply"))[0], "DENIED")
        self.assertEqual(self.script_calls(), 6)
        # a cost above capacity (never passes): asked once
        for _ in range(3):
            self.assertEqual(parse_decision(self.c.request("ALLOW s up 20"))[3], -1)
        self.assertEqual(self.script_calls(), 7)
        # login [3/1s, 20/60s]: 3 allowed + first denial; then another cost is another question
        for _ in range(5):
            parse_decision(self.c.request("ALLOW s login"))
        self.assertEqual(self.script_calls(), 11)
        for _ in range(2):
            parse_decision(self.c.request("PEEK s login 2"))
        self.assertEqual(self.script_calls(), 12)

    def test_deny_cache_expires_at_retry_time(self):
        """The cached denial ends when Redis would allow again."""
        self.start()
        for _ in range(3):
            self.assertEqual(parse_decision(self.c.request("ALLOW e login"))[0], "ALLOWED")
        d = parse_decision(self.c.request("ALLOW e login"))
        self.assertEqual(d[0], "DENIED")
        time.sleep(d[3] / 1000.0 + 0.05)
        self.assertEqual(parse_decision(self.c.request("ALLOW e login"))[0], "ALLOWED")

    def test_database(self):
        self.start(redis_opts={"database": 5})
        self.c.request("ALLOW dbuser reply")
        self.assertEqual(self.redis.keys(), [], "wrote into database 0")
        self.assertEqual(self.redis.keys(db=5), [b"rl:{reply:dbuser}:s60000"])


if __name__ == "__main__":
    unittest.main()
