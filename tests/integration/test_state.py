"""STATE <user> <action> (issue 44, item 6): every limit of a pair as it
stands, each with its own count, remaining, reset and (windows) the window
holding now, on the line protocol, RESP (redis-py; RESP3 after HELLO 3),
HTTP (GET /v1/state) and ratelimitctl, for every algorithm (sliding_window,
fixed_window, sliding_window_counter, funnel, concurrency, calendar
windows in a time zone), overrides and bans, on Redis, a Cluster and the
memory store; and that it consumes nothing: the keys in Redis are byte for byte
what they were, no key is made for a pair never seen, and PEEK and ALLOW
answer after any number of STATEs as without them. Errors are PEEK's;
a store that cannot read is an error, never on_store_error's answer."""

import datetime
import json
import os
import re
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request
import zoneinfo

from harness import DAEMON, SLOW, Client, DaemonTest, free_port, make_config
import resp
from test_resp import RawResp
from topology import add_cluster, cluster_config

try:
    import redis
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis

CTL = os.environ.get("RATELIMITCTL") or os.path.join(os.path.dirname(DAEMON), "ctl",
                                                     "ratelimitctl")
POLICIES = {
    "reply": "{limits: [5/60s, 100/1h]}",
    "smooth": "{algorithm: funnel, capacity: 10, rate: 2/1s}",
    "fixed": "{algorithm: fixed_window, limits: [10/1h]}",
    "counter": "{algorithm: sliding_window_counter, limits: [10/1h]}",
    "monthly": "{algorithm: fixed_window, limits: [1000/month], timezone: Europe/Berlin}",
    "daily": "{algorithm: sliding_window_counter, limits: [50/day]}",
    "pool": "{algorithm: concurrency, limit: 3, lease: 30s}",
    "guard": "{limits: [1/60s], ban: {after: 2, within: 60s, for: 10m}}",
    "vip": "{limits: [2/1m], overrides: {alice: unlimited, mallory: blocked, bob: 4/1m}}",
    "open": "{limits: [5/60s], on_store_error: allow}",
}

LINE = re.compile(r"^STATE ([a-z_]+) (none|limits|unlimited|blocked) (\d+)((?: \d+(?::\d+){6})+)$")


def parse_line(reply):
    """(algorithm, override, ban_ms, [[window_ms, limit, used, remaining,
    reset_ms, start_ms, end_ms]...]) of a STATE line."""
    m = LINE.match(reply)
    if not m:
        raise AssertionError("not a STATE reply: %r" % reply)
    limits = [[int(x) for x in w.split(":")] for w in m.group(4).split()]
    return m.group(1), m.group(2), int(m.group(3)), limits


def month_bounds(tz, now_ms):
    """The calendar month holding now_ms in zone tz: its first and the
    next month's first instant, Unix ms."""
    z = zoneinfo.ZoneInfo(tz)
    d = datetime.datetime.fromtimestamp(now_ms / 1000, z)
    start = datetime.datetime(d.year, d.month, 1, tzinfo=z)
    end = datetime.datetime(d.year + (d.month == 12), d.month % 12 + 1, 1, tzinfo=z)
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000)


class StateTest(DaemonTest):
    def daemons(self):
        """[(name, daemon, HTTP port)]: one on Redis, one on the memory store,
        each with a line (and RESP) listener and an HTTP one."""
        self.redis = self.start_redis()
        out = []
        for name, store in (("redis", {"address": self.redis.address, "timeout": "1s"}),
                            ("memory", None)):
            port, hport = free_port(), free_port()
            listen = ['"127.0.0.1:%d"' % port, '{address: "127.0.0.1:%d", protocol: http}' % hport]
            if store is None:
                config = ("listen: [%s]\nstore: memory\npolicies:\n%s"
                          % (", ".join(listen),
                             "".join("  %s: %s\n" % kv for kv in POLICIES.items())))
            else:
                config = make_config(listen, store, POLICIES, admin=False)
            out.append((name, self.start_daemon(config=config, port=port, name=name), hport))
        return out

    def http(self, port, path):
        """(status, JSON) of a GET."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                        timeout=10 * SLOW) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def assert_window(self, limit, length):
        """A window of length ms holding now, aligned to its length."""
        now = int(time.time() * 1000)
        start, end = limit[5], limit[6]
        self.assertEqual(end - start, length, limit)
        self.assertEqual(start % length, 0, limit)
        self.assertLessEqual(start, now, limit)
        self.assertGreater(end, now - 1000, limit)  # (a boundary crossed since)

    def test_every_algorithm_line_resp_http(self):
        for name, d, hport in self.daemons():
            with self.subTest(store=name), Client(d.port, timeout=10 * SLOW) as c:
                self.every_algorithm(c)
                self.resp_and_http(d, hport)

    def every_algorithm(self, c):
        # two limits of a log, each with its own count and reset
        self.assertRegex(c.request("ALLOW u reply 2"), r"^ALLOWED 5 3 ")
        algo, override, ban, limits = parse_line(c.request("STATE u reply"))
        self.assertEqual((algo, override, ban, len(limits)), ("sliding_window", "none", 0, 2))
        self.assertEqual(limits[0][:4] + limits[0][5:], [60000, 5, 2, 3, 0, 0])
        self.assertEqual(limits[1][:4] + limits[1][5:], [3600000, 100, 2, 98, 0, 0])
        self.assertTrue(55000 < limits[0][4] <= 60000, limits)
        self.assertTrue(3595000 < limits[1][4] <= 3600000, limits)
        # a pair never seen: whole
        self.assertEqual(parse_line(c.request("STATE nobody reply"))[3],
                         [[60000, 5, 0, 5, 0, 0, 0], [3600000, 100, 0, 100, 0, 0, 0]])
        # a funnel: its time to drain when full, what fills it
        self.assertRegex(c.request("ALLOW u smooth 4"), r"^ALLOWED 10 6 ")
        algo, _, _, [lim] = parse_line(c.request("STATE u smooth"))
        self.assertEqual((algo, lim[0], lim[1], lim[5], lim[6]), ("funnel", 5000, 10, 0, 0))
        self.assertIn(lim[2], (3, 4))  # draining 2 a second
        self.assertEqual(lim[2] + lim[3], 10)
        self.assertTrue(1000 < lim[4] <= 2000, lim)
        # a fixed window and a counter: their count, the hour holding now
        for policy, algorithm in (("fixed", "fixed_window"),
                                  ("counter", "sliding_window_counter")):
            self.assertRegex(c.request("ALLOW u %s 3" % policy), r"^ALLOWED 10 7 ")
            algo, _, _, [lim] = parse_line(c.request("STATE u " + policy))
            self.assertEqual((algo, lim[:4]), (algorithm, [3600000, 10, 3, 7]))
            self.assert_window(lim, 3600000)
        # a calendar month in Berlin: its own bounds, its length the window
        self.assertRegex(c.request("ALLOW u monthly 5"), r"^ALLOWED 1000 995 ")
        _, _, _, [lim] = parse_line(c.request("STATE u monthly"))
        start, end = month_bounds("Europe/Berlin", time.time() * 1000)
        self.assertEqual(lim[:4], [end - start, 1000, 5, 995])
        self.assertEqual(lim[5:], [start, end])
        # a calendar day of a counter (UTC)
        self.assertRegex(c.request("ALLOW u daily 7"), r"^ALLOWED 50 43 ")
        _, _, _, [lim] = parse_line(c.request("STATE u daily"))
        self.assertEqual(lim[:4], [86400000, 50, 7, 43])
        self.assert_window(lim, 86400000)
        # a concurrency policy: the units its leases hold, until the last ends
        self.assertRegex(c.request("ACQUIRE u pool 2"), r"^ALLOWED 3 1 0 30000 pool:")
        algo, _, _, [lim] = parse_line(c.request("STATE u pool"))
        self.assertEqual((algo, lim[:4], lim[5:]), ("concurrency", [30000, 3, 2, 1], [0, 0]))
        self.assertTrue(25000 < lim[4] <= 30000, lim)
        # a ban in force: its time left
        self.assertEqual(parse_line(c.request("STATE u guard"))[2], 0)
        self.assertRegex(c.request("ALLOW u guard"), r"^ALLOWED ")
        self.assertRegex(c.request("ALLOW u guard"), r"^DENIED ")
        self.assertEqual(parse_line(c.request("STATE u guard"))[2], 0)  # one denial of two
        self.assertRegex(c.request("ALLOW u guard"), r"^DENIED ")
        _, _, ban, [lim] = parse_line(c.request("STATE u guard"))
        self.assertTrue(590000 < ban <= 600000, ban)
        self.assertEqual(lim[:4], [60000, 1, 1, 0])
        # overrides: which applies, and an override's own limits
        self.assertEqual(parse_line(c.request("STATE alice vip"))[1:],
                         ("unlimited", 0, [[60000, 2, 0, 2, 0, 0, 0]]))
        self.assertEqual(parse_line(c.request("STATE mallory vip"))[1], "blocked")
        self.assertRegex(c.request("ALLOW bob vip"), r"^ALLOWED 4 3 ")
        _, override, _, [lim] = parse_line(c.request("STATE bob vip"))
        self.assertEqual((override, lim[:4]), ("limits", [60000, 4, 1, 3]))
        # what PEEK refuses, STATE refuses alike
        for args in ("u nope", "u", "%s reply" % ("x" * 513)):
            peek = c.request("PEEK " + args)
            self.assertTrue(peek.startswith("ERR "), peek)
            got = c.request("STATE " + args)
            self.assertEqual(got.split()[:2], peek.split()[:2], args)
        self.assertEqual(c.request("STATE u nope"), "ERR unknown-action no policy for this action")
        self.assertEqual(c.request("STATE u"), "ERR syntax usage: STATE <user> <action>")
        self.assertEqual(c.request("STATE u reply 2"), "ERR syntax usage: STATE <user> <action>")

    def resp_and_http(self, d, hport):
        rr = redis.Redis(port=d.port, socket_timeout=10 * SLOW)
        self.addCleanup(rr.close)
        got = rr.execute_command("STATE", "u", "reply")
        self.assertEqual(got[:3], [b"sliding_window", b"none", 0])
        self.assertEqual([lim[:4] for lim in got[3]], [[60000, 5, 2, 3], [3600000, 100, 2, 98]])
        with self.assertRaises(redis.ResponseError) as e:
            rr.execute_command("STATE", "u", "nope")
        self.assertTrue(str(e.exception).startswith("unknown-action "), str(e.exception))
        # RESP3: maps, a calendar window's unit too
        raw = RawResp(d.port)
        self.addCleanup(raw.close)
        raw.send(resp.encode("HELLO", "3") + resp.encode("STATE", "u", "monthly"))
        hello, state = raw.read(2)
        self.assertIsInstance(state, resp.Map)
        self.assertEqual((state[b"algorithm"], state[b"override"], state[b"ban_ms"]),
                         (b"fixed_window", b"none", 0))
        lim = state[b"limits"][0]
        self.assertIsInstance(lim, resp.Map)
        self.assertEqual((lim[b"limit"], lim[b"used"], lim[b"remaining"], lim[b"calendar"]),
                         (1000, 5, 995, b"month"))
        self.assertEqual(lim[b"window_ms"], lim[b"end_ms"] - lim[b"start_ms"])
        # HTTP: GET /v1/state; its errors are /v1/peek's
        code, j = self.http(hport, "/v1/state?user=u&action=daily")
        self.assertEqual((code, j["algorithm"], j["override"], j["ban_ms"]),
                         (200, "sliding_window_counter", "none", 0))
        [lim] = j["limits"]
        self.assertEqual((lim["window_ms"], lim["limit"], lim["used"], lim["remaining"],
                          lim["calendar"]), (86400000, 50, 7, 43, "day"))
        self.assertEqual(lim["end_ms"] - lim["start_ms"], 86400000)
        code, j = self.http(hport, "/v1/state?user=u&action=reply")
        self.assertEqual([(x["used"], x["remaining"]) for x in j["limits"]], [(2, 3), (2, 98)])
        self.assertNotIn("calendar", j["limits"][0])
        for q in ("user=u&action=nope", "action=reply", "user=%s&action=reply" % ("x" * 513)):
            want = self.http(hport, "/v1/peek?" + q)
            self.assertGreaterEqual(want[0], 400, q)
            self.assertEqual(self.http(hport, "/v1/state?" + q), want, q)
        self.assertEqual(self.http(hport, "/v1/state?user=u&action=reply&cost=2"),
                         (400, {"error": "syntax", "message": "STATE takes no cost"}))

    def test_consumes_nothing(self):
        """Any number of STATEs, on every algorithm: the keys in Redis are
        byte for byte what they were, no key is made for a pair never
        seen, and PEEK and ALLOW answer as without them."""
        for name, d, _ in self.daemons():
            with self.subTest(store=name), Client(d.port, timeout=10 * SLOW) as c:
                for p in POLICIES:
                    c.request(("ACQUIRE" if p == "pool" else "ALLOW") + " u %s" % p)
                c.request("ALLOW u guard")  # a denial the ban counts
                before = self.dump() if name == "redis" else None
                peeks = [c.request("PEEK u %s" % p) for p in POLICIES if p != "pool"]
                for _ in range(5):
                    for p in POLICIES:
                        self.assertTrue(c.request("STATE u %s" % p).startswith("STATE "), p)
                        self.assertTrue(c.request("STATE new %s" % p).startswith("STATE "), p)
                if name == "redis":
                    self.assertEqual(self.dump(), before)
                # (remaining and retry; a reset moves with the clock)
                self.assertEqual([r.split()[:3] for r in
                                  (c.request("PEEK u %s" % p) for p in POLICIES if p != "pool")],
                                 [r.split()[:3] for r in peeks])
                self.assertRegex(c.request("ALLOW u reply 4"), r"^ALLOWED 5 0 ")
                self.assertRegex(c.request("ALLOW u reply"), r"^DENIED 5 0 ")
                self.assertRegex(c.request("ACQUIRE u pool 2"), r"^ALLOWED 3 0 ")
                self.assertRegex(c.request("ALLOW u guard"), r"^DENIED 1 0 600000 ")  # banned

    def dump(self):
        """Every key in Redis and its bytes (DUMP: the value, not its ttl)."""
        with self.redis.resp() as r:
            keys = sorted(r.call("KEYS", "*"))
            return {k: r.call("DUMP", k) for k in keys}

    def test_ratelimitctl(self):
        """ratelimitctl state: a line per limit, or the same in JSON."""
        port = free_port()
        d = self.start_daemon(config="listen: [\"127.0.0.1:%d\"]\nstore: memory\npolicies:\n%s"
                              % (port, "".join("  %s: %s\n" % kv for kv in POLICIES.items())),
                              port=port)
        with Client(d.port) as c:
            self.assertRegex(c.request("ALLOW u reply 2"), r"^ALLOWED 5 3 ")
            self.assertRegex(c.request("ALLOW u monthly 5"), r"^ALLOWED 1000 995 ")

        def ctl(*args):
            return subprocess.run([CTL, "-s", "127.0.0.1:%d" % port] + list(args),
                                  capture_output=True, text=True, timeout=10 * SLOW)
        p = ctl("state", "u", "reply")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"^sliding_window\n  5 per 60s: 2 used, 3 remaining; full "
                         r"again in [\d.]+s\n  100 per 3600s: 2 used, 98 remaining; full again "
                         r"in [\d.]+s\n$")
        p = ctl("state", "u", "monthly")
        start, end = month_bounds("Europe/Berlin", time.time() * 1000)
        fmt = "%Y-%m-%dT%H:%M:%SZ"
        self.assertIn("; window %s to %s\n" % (
            datetime.datetime.fromtimestamp(start / 1000, datetime.timezone.utc).strftime(fmt),
            datetime.datetime.fromtimestamp(end / 1000, datetime.timezone.utc).strftime(fmt)),
            p.stdout)
        p = ctl("-j", "state", "u", "monthly")
        j = json.loads(p.stdout)
        self.assertEqual((j["command"], j["result"], j["algorithm"], j["override"]),
                         ("state", "ok", "fixed_window", "none"))
        self.assertEqual([(x["used"], x["start_ms"], x["end_ms"]) for x in j["limits"]],
                         [(5, start, end)])
        p = ctl("state", "u", "nope")
        self.assertEqual((p.returncode, p.stderr),
                         (2, "ratelimitctl: unknown-action: no policy for this action\n"))
        p = ctl("state", "u")
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage: state USER ACTION", p.stderr)

    def test_cluster(self):
        """On a 3-master Cluster, users over several slots, STATEs batched
        with ALLOWs in one write (a node's batch of several slots sends its
        keys after the arguments): each STATE reads its own pair's keys."""
        cl = add_cluster(self)
        port = free_port()
        d = self.start_daemon(config=cluster_config(port, cl, POLICIES), port=port)
        # (leases go by the slot map, read after the daemon listens)
        d.wait_log("slot map read", timeout=10 * SLOW)
        users = ["c%d" % i for i in range(12)]
        with Client(d.port, timeout=10 * SLOW) as c:
            lines = []
            for i, u in enumerate(users):
                lines += ["ALLOW %s reply %d" % (u, i % 4 + 1), "STATE %s reply" % u,
                          "ALLOW %s monthly %d" % (u, i + 1), "STATE %s monthly" % u,
                          "ACQUIRE %s pool" % u, "STATE %s pool" % u]
            c.send(*lines)
            got = c.readlines(len(lines))
        start, end = month_bounds("Europe/Berlin", time.time() * 1000)
        for i, u in enumerate(users):
            r = got[6 * i:6 * i + 6]
            self.assertRegex(r[0], r"^ALLOWED 5 %d " % (4 - i % 4), u)
            self.assertEqual([lim[2:4] for lim in parse_line(r[1])[3]],
                             [[i % 4 + 1, 4 - i % 4], [i % 4 + 1, 99 - i % 4]], u)
            self.assertEqual(parse_line(r[3])[3][0][2:4] + parse_line(r[3])[3][0][5:],
                             [i + 1, 999 - i, start, end], u)
            self.assertRegex(r[4], r"^ALLOWED 3 2 0 30000 pool:", u)
            self.assertEqual(parse_line(r[5])[3][0][1:4], [3, 1, 2], u)

    def test_store_down_is_an_error(self):
        """STATE reads the store: when it cannot, an error, whatever
        on_store_error says (ALLOW's fallback answers)."""
        port, gone = free_port(), free_port()
        d = self.start_daemon(config=make_config(["127.0.0.1:%d" % port],
                                                 {"address": "127.0.0.1:%d" % gone,
                                                  "timeout": "100ms"}, POLICIES), port=port)
        with Client(d.port) as c:
            self.assertRegex(c.request("STATE eve open"), r"^ERR store-unavailable ")
            self.assertRegex(c.request("STATE eve pool"), r"^ERR store-unavailable ")
            self.assertEqual(c.request("ALLOW eve open"), "ALLOWED 5 -1 0 -1")


if __name__ == "__main__":
    unittest.main()
