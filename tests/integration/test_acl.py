"""A Redis ACL user and errors Redis answers to decisions: the ACL given in
docs/security.md works as it is (real decisions, ALLOWED then DENIED), and a
user that lacks what the script needs, or a Redis out of memory, makes the
daemon loud: an error log naming the missing rules, /health 503,
ratelimitd_redis_refusing 1, the failures counted by kind; fixed at run
time, service comes back without a restart."""

import os
import re
import shlex
import time
import unittest

from harness import (SLOW, DaemonTest, free_port, http_get, scrape_metrics, wait_until)

SRCDIR = os.environ.get("RL_SRCDIR", os.path.join(os.path.dirname(__file__), "..", ".."))
POLICIES = {"reply": "3/60s",
            "win": "{algorithm: fixed_window, limits: 2/1d}",
            "swc": "{algorithm: sliding_window_counter, limits: 2/1d}",
            "up": "{algorithm: funnel, capacity: 2, rate: 1/1m}",
            "pen": "{limits: [1/1m], ban: {after: 1, within: 1m, for: 1h}}",
            "slow": "{limits: [2/1s], delay: {max: 2s}}",
            "llm": "{algorithm: fixed_window, limits: 100/1h, hold: 1m}",
            "jobs": "{algorithm: concurrency, limit: 2, lease: 30s}"}
ADMIN_PW = "adm1n-acl-pw"
USER_PW = "us3r-acl-pw"
# what the daemon's docs said before the script's own commands were listed
OLD_ACL = ("+evalsha +eval +script|load +select +auth +subscribe +publish +ping "
           "~rl:* &rl:reset").split()


def documented_acl():
    """The rules of the `ACL SETUSER ratelimitd ...` line in docs/security.md."""
    with open(os.path.join(SRCDIR, "docs", "security.md")) as f:
        text = f.read()
    m = re.search(r"^\s*ACL SETUSER ratelimitd (.*)$", text, re.M)
    assert m, "no ACL SETUSER line in docs/security.md"
    return shlex.split(m.group(1))


class AclTest(DaemonTest):
    def start(self, rules, on_store_error="allow"):
        self.redis = self.start_redis(password=ADMIN_PW)
        self.redis.call("ACL", "SETUSER", "ratelimitd", *[
            ">" + USER_PW if r == ">PASSWORD" else r for r in rules])
        self.mport = free_port()
        self.daemon = self.start_daemon(
            POLICIES, on_store_error=on_store_error,
            metrics='{listen: "127.0.0.1:%d"}' % self.mport,
            redis_opts={"username": "ratelimitd", "password": '"%s"' % USER_PW})
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def health(self):
        status, _, body = http_get(self.mport, "/health")
        return status, body

    def metric(self, name):
        return scrape_metrics(self.mport).get(name)

    def test_documented_acl_decides(self):
        rules = documented_acl()
        self.assertIn(">PASSWORD", rules)
        self.start(rules)
        for left in (2, 1, 0):
            self.assertDecision(self.c.request("ALLOW alice reply"), "ALLOWED", 3, left)
        self.assertDecision(self.c.request("ALLOW alice reply"), "DENIED", 3, 0,
                            retry=(1, 60000))
        # every algorithm and a ban decide with the documented rules
        for action in ("win", "swc", "up"):
            got = [self.c.request("ALLOW alice %s" % action).split()[0] for _ in range(3)]
            self.assertEqual(got, ["ALLOWED", "ALLOWED", "DENIED"], action)
        self.assertDecision(self.c.request("ALLOW alice pen"), "ALLOWED", 1, 0)
        self.assertDecision(self.c.request("ALLOW alice pen"), "DENIED", 1, 0,
                            retry=(3590000, 3600000))
        self.assertEqual(self.c.request("RESET alice pen"), "OK")
        # a sliding log's delay (its entries placed ahead), holds, leases
        got = [self.c.request("ALLOW alice slow").split()[0] for _ in range(4)]
        self.assertEqual(got, ["ALLOWED"] * 4, got)
        hold = self.c.request("HOLD alice llm 10")
        self.assertTrue(hold.startswith("ALLOWED 100 90 "), hold)
        self.assertDecision(self.c.request("SETTLE %s 4" % hold.split()[-1]), "ALLOWED", 100, 96)
        lease = self.c.request("ACQUIRE alice jobs")
        self.assertTrue(lease.startswith("ALLOWED 2 1 "), lease)
        self.assertEqual(self.c.request("RELEASE %s" % lease.split()[-1]), "OK")
        # run-time overrides: set, read back at start by the daemon, cleared
        self.assertEqual(self.c.request("OVERRIDE bob reply unlimited"), "OK")
        self.assertEqual(self.c.request("ALLOW bob reply"), "ALLOWED -1 -1 0 -1")
        self.assertEqual(self.c.request("OVERRIDES 0").split()[:4],
                         ["OVERRIDE", "0", "bob", "reply"])
        self.assertEqual(self.c.request("UNOVERRIDE bob reply"), "OK")
        self.assertEqual(self.health(), (200, "ok\n"))
        self.assertEqual(self.metric("ratelimitd_redis_refusing"), 0)
        log = self.daemon.log()
        self.assertNotRegex(log, r"(?m)^(warn|error): ", log)

    def test_documented_acl_keeps_the_reset_subscription(self):
        """The RESET subscriber PINGs after a second of silence; with the
        documented rules Redis answers it, so the subscription is kept (a
        user without +ping got NOPERM, the PING counted as unanswered and
        the subscriber was replaced every 3 s, with a warning each time)."""
        self.start(documented_acl())
        self.assertDecision(self.c.request("ALLOW alice reply"), "ALLOWED", 3, 2)
        time.sleep(3.5)  # past a PING and the 2 s an unanswered one is given
        self.assertEqual(self.redis.call("ACL", "LOG"), [])
        log = self.daemon.log()
        self.assertNotRegex(log, r"(?m)^(warn|error): ", log)

    def test_acl_without_the_script_commands_is_loud_and_recovers(self):
        self.start(["on", ">PASSWORD", "resetkeys", "resetchannels", "-@all"] + OLD_ACL)
        # named at once, before any request: the check after connecting
        self.daemon.wait_log(r"^error: redis \S+ cannot decide: the redis user lacks "
                             r"\+time \+zadd .*\+pexpire .*\+del", timeout=3 * SLOW)
        status, body = self.health()
        self.assertEqual(status, 503)
        self.assertRegex(body, r"^redis refuses decisions: the redis user lacks \+time")
        self.assertEqual(self.metric("ratelimitd_redis_refusing"), 1)
        # decisions are answered per on_store_error (allow), and counted
        for _ in range(3):
            self.assertEqual(self.c.request("ALLOW bob reply"), "ALLOWED 3 -1 0 -1")
        self.assertEqual(self.metric('ratelimitd_store_failures_total{error="noperm"}'), 3)
        self.daemon.wait_log(r"^warn: redis \S+ answered decisions with an error: ", timeout=2)
        # the error is logged once per 10 s, not per request
        self.assertEqual(len(re.findall(r"(?m)^warn: .*answered decisions with an error",
                                        self.daemon.log())), 1, self.daemon.log())
        # fixed at run time, with no traffic: the check reruns every second
        self.redis.call("ACL", "SETUSER", "ratelimitd", *documented_acl()[4:])
        wait_until(lambda: self.health()[0] == 200, 3 * SLOW, interval=0.05,
                   what="/health 200 after the ACL was fixed")
        self.daemon.wait_log(r"^info: redis \S+ decides again", timeout=2)
        self.assertEqual(self.metric("ratelimitd_redis_refusing"), 0)
        self.assertDecision(self.c.request("ALLOW bob reply"), "ALLOWED", 3, 2)

    def test_acl_without_the_key_pattern_names_it(self):
        rules = [r for r in documented_acl() if not r.startswith("~")] + ["~other:*"]
        self.start(rules, on_store_error="deny")
        self.daemon.wait_log(r"^error: redis \S+ cannot decide: the redis user lacks ~rl:\*;",
                             timeout=3 * SLOW)
        self.assertEqual(self.c.request("ALLOW carol reply"), "DENIED 3 -1 1000 -1")
        self.assertEqual(self.health()[0], 503)

    def test_redis_out_of_memory_is_loud(self):
        self.start(documented_acl(), on_store_error="error")
        self.assertDecision(self.c.request("ALLOW dave reply"), "ALLOWED", 3, 2)
        self.redis.call("CONFIG", "SET", "maxmemory", "1")
        reply = self.c.request("ALLOW dave reply")
        self.assertRegex(reply, r"^ERR store-unavailable store failed: .*")
        self.assertEqual(self.metric('ratelimitd_store_failures_total{error="oom"}'), 1)
        self.daemon.wait_log(r"^warn: redis \S+ could not decide: OOM ", timeout=2)
        self.assertRegex(self.health()[1], r"^redis refuses decisions: OOM ")
        self.redis.call("CONFIG", "SET", "maxmemory", "0")
        wait_until(lambda: self.health()[0] == 200, 3 * SLOW, interval=0.05,
                   what="/health 200 once Redis has memory again")
        self.assertDecision(self.c.request("ALLOW dave reply"), "ALLOWED", 3, 1)


if __name__ == "__main__":
    unittest.main()
