"""Costs known only afterwards (issue 30, item 2): CHARGE <user> <action>
<cost> counts without deciding, past the limit if it must, and later
requests are denied until the debt is earned back. Three daemons charging
at once on one Redis: what Redis holds is the sum charged, exactly; over
the line protocol, RESP (redis-py), HTTP (curl) and ratelimitctl; the
memory store alike; a CHARGE Redis could not count is an error whatever
on_store_error says. (The debt's rules per algorithm are
tests/vectors_charge.txt, in Redis and in C.)"""

import json
import os
import random
import subprocess
import sys
import threading
import time
import unittest

from harness import DAEMON, SLOW, Client, DaemonTest, free_port, make_config

try:
    import redis
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis

CTL = os.environ.get("RATELIMITCTL") or os.path.join(os.path.dirname(DAEMON), "ctl",
                                                     "ratelimitctl")
POLICIES = {"tokens": "{algorithm: fixed_window, limits: 100000/1h}",
            "llm": "{algorithm: fixed_window, limits: 1000/1s}",
            "flow": "{algorithm: funnel, capacity: 10, rate: 100/1s}",
            "open": "{algorithm: fixed_window, limits: 10/1h, on_store_error: allow}"}


class ChargeTest(DaemonTest):
    def test_three_daemons_sum_exactly(self):
        self.redis = self.start_redis()
        ds = [self.start_daemon(POLICIES, name="rl%d" % i) for i in range(3)]
        charged = [0] * 6
        errors = []

        def client(i):
            rnd = random.Random(i)
            try:
                with Client(ds[i % 3].port, timeout=10 * SLOW) as c:
                    for _ in range(200):
                        cost = rnd.randint(1, 400)
                        r = c.request("CHARGE team-%d tokens %d" % (i % 2, cost))
                        if not r.startswith("ALLOWED 100000 "):
                            raise AssertionError(r)
                        charged[i] += cost
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        ts = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        self.assertEqual(errors, [])
        with self.redis.resp() as r:
            held = [int(r.call("GET", "rl:{tokens:team-%d}:w3600000" % u).split(b":")[1])
                    for u in (0, 1)]
        self.assertEqual(held, [sum(charged[0::2]), sum(charged[1::2])])
        sys.stderr.write("[figures] 6 clients, 3 daemons, 1200 CHARGEs: Redis holds %d and %d, "
                         "the sums charged\n" % tuple(held))
        # past the limit: the next ALLOW says when the hour's count is spent
        with Client(ds[0].port) as c:
            r = c.request("CHARGE team-0 tokens 100000")
            self.assertRegex(r, r"^ALLOWED 100000 0 0 \d+$")
            self.assertRegex(c.request("ALLOW team-0 tokens"), r"^DENIED 100000 0 \d+ \d+$")

    def test_debt_is_earned_back_in_the_next_window(self):
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES)
        with self.redis.resp() as r:
            us = int(r.call("TIME")[1])
        time.sleep((1_000_000 - us) / 1e6 + 0.05)  # just after a second starts
        with Client(d.port) as c:
            self.assertRegex(c.request("CHARGE ann llm 1600"), r"^ALLOWED 1000 0 0 ")
            self.assertRegex(c.request("ALLOW ann llm"), r"^DENIED 1000 0 ")
            with self.redis.resp() as r:
                us = int(r.call("TIME")[1])
            time.sleep((1_000_000 - us) / 1e6 + 0.05)
            # the next second starts 600 in debt
            self.assertRegex(c.request("PEEK ann llm 400"), r"^ALLOWED 1000 400 0 ")
            self.assertRegex(c.request("PEEK ann llm 401"), r"^DENIED 1000 400 ")
            # a funnel: the charge drains at its rate
            self.assertRegex(c.request("CHARGE bob flow 30"), r"^ALLOWED 10 0 0 300$")
            self.assertRegex(c.request("ALLOW bob flow"), r"^DENIED 10 0 2\d\d 300$")

    def test_front_ends(self):
        self.redis = self.start_redis()
        port, hport = free_port(), free_port()
        d = self.start_daemon(POLICIES, port=port, admin=False,
                              listen=['"127.0.0.1:%d"' % port,
                                      '{address: "127.0.0.1:%d", protocol: http}' % hport])
        r = redis.Redis(port=d.port, socket_timeout=10 * SLOW)
        self.addCleanup(r.close)
        self.assertEqual(r.execute_command("CHARGE", "cy", "tokens", 250)[:3], [1, 100000, 99750])
        p = subprocess.run(["curl", "-s", "-X", "POST",
                            "http://127.0.0.1:%d/v1/charge?user=cy&action=tokens&cost=50" % hport],
                           capture_output=True, text=True, timeout=10 * SLOW)
        j = json.loads(p.stdout)
        self.assertEqual((j["allowed"], j["remaining"]), (True, 99700))
        p = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                            "http://127.0.0.1:%d/v1/charge?user=cy&action=tokens" % hport],
                           capture_output=True, text=True, timeout=10 * SLOW)
        self.assertEqual(p.stdout, "400")
        conf = os.path.join(self.tmpdir, "ctl.yaml")
        with open(conf, "w") as f:
            f.write(make_config(["127.0.0.1:%d" % port], {"address": self.redis.address},
                                POLICIES, admin=False))
        p = subprocess.run([CTL, "-c", conf, "charge", "cy", "tokens", "700"],
                           capture_output=True, text=True, timeout=10 * SLOW)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"^allowed \(99000 of 100000 remaining")
        with Client(d.port) as c:
            self.assertEqual(c.request("CHARGE cy tokens"),
                             "ERR syntax usage: CHARGE <user> <action> <cost>")

    def test_memory_store_and_redis_down(self):
        port = free_port()
        d = self.start_daemon(config='listen: ["127.0.0.1:%d"]\nstore: memory\npolicies:\n%s'
                              % (port, "".join("  %s: %s\n" % kv for kv in POLICIES.items())),
                              port=port)
        with Client(d.port) as c:
            self.assertRegex(c.request("CHARGE dee tokens 100001"), r"^ALLOWED 100000 0 0 ")
            self.assertRegex(c.request("ALLOW dee tokens"), r"^DENIED 100000 0 ")
        # Redis gone: a CHARGE not counted is an error even with on_store_error: allow,
        # while an ALLOW of the same policy is answered by it
        port, gone = free_port(), free_port()
        d = self.start_daemon(config=make_config(["127.0.0.1:%d" % port],
                                                 {"address": "127.0.0.1:%d" % gone,
                                                  "timeout": "100ms"}, POLICIES), port=port,
                              name="down")
        with Client(d.port) as c:
            self.assertRegex(c.request("CHARGE eve open 3"), r"^ERR store-unavailable ")
            self.assertEqual(c.request("ALLOW eve open"), "ALLOWED 10 -1 0 -1")


if __name__ == "__main__":
    unittest.main()
