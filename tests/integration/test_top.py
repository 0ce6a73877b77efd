"""Heavy hitters (issue 33): during a hammering, TOP on the line and RESP
admin listeners, /top on the metrics listener, `ratelimitctl top` and the
ratelimitd_top_denied series all name the hammering user first; users with
blanks, '%' or bytes past ASCII are shown escaped, one word, and promtool
accepts the scrape; the series stay within metrics.top_series, which a
reload changes; TOP is refused on a listener without admin."""

import json
import os
import subprocess
import sys
import threading
import unittest

try:
    import redis as redis_py
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis as redis_py

from harness import DAEMON, SLOW, Client, DaemonTest, free_port, http_get, scrape_metrics
from test_metrics import PROMTOOL

CTL = os.environ.get("RATELIMITCTL") or os.path.join(os.path.dirname(DAEMON), "ctl",
                                                     "ratelimitctl")
HAMMERER = "mallory"


class TopTest(DaemonTest):
    def config(self, top_series=None):
        return "\n".join([
            "listen:",
            "  - 127.0.0.1:%d" % self.port,
            "  - {address: 127.0.0.1:%d, admin: true}" % self.aport,
            "redis: {address: %s}" % self.redis.address,
            "metrics: {listen: 127.0.0.1:%d%s}" % (
                self.mport, "" if top_series is None else ", top_series: %d" % top_series),
            "policies:",
            "  login: 5/60s",
            "  reply: {algorithm: funnel, capacity: 3, rate: 3/1m}",
            ""])

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port, self.aport, self.mport = free_port(), free_port(), free_port()
        self.daemon = self.start_daemon(config=self.config(), port=self.port)

    def hammer(self):
        """One user hammering login from 4 connections while 300 others
        each try a few times (most allowed), and a few odd users on RESP."""
        def hammerer():
            with Client(port=self.port, timeout=10 * SLOW) as c:
                for _ in range(150):
                    c.request("ALLOW %s login" % HAMMERER)
        # first in both lists while they have room: its counts are exact
        with Client(port=self.port) as c:
            for _ in range(6):
                c.request("ALLOW %s login" % HAMMERER)
        ts = [threading.Thread(target=hammerer) for _ in range(4)]
        for t in ts:
            t.start()
        with Client(port=self.port, timeout=10 * SLOW) as c:
            for i in range(300):
                for _ in range(1 + i % 7):  # the sixth and seventh denied
                    c.request("ALLOW user-%d login" % i)
                c.request("ALLOW user-%d reply" % i)
        r = redis_py.Redis(port=self.port, socket_timeout=10 * SLOW)
        for _ in range(40):
            r.execute_command("ALLOW", b"odd user%\xff", "login")
        for t in ts:
            t.join(60 * SLOW)
        return 606  # mallory's requests

    def test_everyone_names_the_hammerer_first(self):
        sent = self.hammer()
        # TOP on the admin line listener: the hammerer, its figures exact
        # while the window holds every request (no user was evicted ahead
        # of it: its count is never under)
        with Client(port=self.aport) as c:
            first = c.request("TOP login 0").split()
            self.assertEqual(first[:3], ["TOP", "0", HAMMERER], first)
            denied, requests, over = (int(x) for x in first[3:])
            self.assertEqual(requests, sent)
            self.assertEqual(denied, sent - 5)
            self.assertEqual(over, 0)
            second = c.request("TOP login 1").split()
            self.assertEqual(second[2], "odd%20user%25%FF", second)  # one word, escaped
            # it came in late, with the list full: over by at most what it says
            d, over2 = int(second[3]), int(second[5])
            self.assertTrue(d - over2 <= 35 <= d, second)
            rows = [c.request("TOP login %d" % i) for i in range(2, 40)]
            end = [r for r in rows if r.startswith("END ")]
            self.assertTrue(end, rows[-3:])
            count, total_req, total_den = (int(x) for x in end[0].split()[1:])
            self.assertEqual(count, 2 + rows.index(end[0]))
            self.assertEqual(total_req, sent + 40 + sum(1 + i % 7 for i in range(300)))
            self.assertEqual(total_den, sent - 5 + 35 + sum(max(0, i % 7 - 4)
                                                             for i in range(300)))
            by_req = c.request("TOP login 0 REQUESTS").split()
            self.assertEqual(by_req[2], HAMMERER)
            self.assertEqual(c.request("TOP nope 0"),
                             "ERR unknown-action no policy for this action")
        # not on a listener without admin
        with Client(port=self.port) as c:
            self.assertEqual(c.request("TOP login 0"),
                             "ERR forbidden TOP needs a listener with admin: true")
        # RESP: the same, its user's bytes as they came
        r = redis_py.Redis(port=self.aport, socket_timeout=5)
        got = r.execute_command("TOP", "login", "0")
        self.assertEqual(got[:2], [0, HAMMERER.encode()])
        self.assertEqual(r.execute_command("TOP", "login", "1")[1], b"odd user%\xff")
        self.assertEqual(len(r.execute_command("TOP", "login", "1000")), 3)  # the end
        # /top on the metrics listener
        status, ctype, body = http_get(self.mport, "/top?action=login&n=3")
        self.assertEqual((status, ctype), (200, "application/json"), body)
        top = json.loads(body)
        self.assertEqual(top["by"], "denied")
        self.assertEqual(top["top"]["action"], "login")
        self.assertEqual([u["user"] for u in top["top"]["users"]],
                         [HAMMERER, "odd%20user%25%FF", top["top"]["users"][2]["user"]])
        self.assertEqual(top["top"]["users"][0]["denied"], sent - 5)
        status, _, body = http_get(self.mport, "/top")
        every = json.loads(body)
        self.assertEqual([a["action"] for a in every["actions"]], ["login", "reply"])
        self.assertEqual(every["actions"][0]["users"][0]["user"], HAMMERER)
        self.assertEqual(http_get(self.mport, "/top?action=nope")[0], 404)
        self.assertEqual(http_get(self.mport, "/top?by=sideways")[0], 400)
        # ratelimitctl top, over the admin listener
        out = subprocess.run([CTL, "-s", "127.0.0.1:%d" % self.aport, "top", "login", "3"],
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[1].split()[:4], ["1", HAMMERER, str(sent - 5), str(sent)])
        self.assertTrue(lines[-1].startswith("login: %d requests" % total_req), lines[-1])
        js = subprocess.run([CTL, "--json", "-s", "127.0.0.1:%d" % self.aport, "top", "login",
                             "1", "requests"], capture_output=True, text=True, timeout=10)
        self.assertEqual(js.returncode, 0, js.stderr)
        doc = json.loads(js.stdout)
        self.assertEqual((doc["by"], doc["users"][0]["user"], doc["users"][0]["requests"]),
                         ("requests", HAMMERER, sent))
        # /metrics: the default budget of 10 series, the hammerer first,
        # and a scrape promtool accepts with the odd user in it
        m = scrape_metrics(self.mport)
        series = {k: v for k, v in m.items() if k.startswith("ratelimitd_top_denied{")}
        self.assertEqual(len(series), 10, series)
        self.assertEqual(series['ratelimitd_top_denied{action="login",user="%s"}' % HAMMERER],
                         sent - 5)
        self.assertEqual(max(series.values()), sent - 5)
        self.assertIn('ratelimitd_top_denied{action="login",user="odd%20user%25%FF"}', series)
        body = http_get(self.mport)[2]
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_series_budget_follows_a_reload(self):
        self.hammer()
        with open(self.daemon.config_path, "w") as f:
            f.write(self.config(top_series=2))
        start = len(self.daemon.log_lines())
        self.daemon.signal(1)  # SIGHUP
        self.daemon.wait_log(r"metrics\.top_series 10 -> 2", 5 * SLOW, start=start)
        m = scrape_metrics(self.mport)
        self.assertEqual(sorted(k for k in m if k.startswith("ratelimitd_top_denied{")),
                         ['ratelimitd_top_denied{action="login",user="%s"}' % HAMMERER,
                          'ratelimitd_top_denied{action="login",user="odd%20user%25%FF"}'])
        with open(self.daemon.config_path, "w") as f:
            f.write(self.config(top_series=0))
        start = len(self.daemon.log_lines())
        self.daemon.signal(1)
        self.daemon.wait_log(r"metrics\.top_series 2 -> 0", 5 * SLOW, start=start)
        body = http_get(self.mport)[2]
        self.assertNotIn("ratelimitd_top_denied", body)
        self.assertEqual(http_get(self.mport, "/top")[0], 404)  # no user named here
        # the sketch itself goes on: TOP still answers
        with Client(port=self.aport) as c:
            self.assertEqual(c.request("TOP login 0").split()[2], HAMMERER)


if __name__ == "__main__":
    unittest.main()
