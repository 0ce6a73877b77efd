"""The memory store (store: memory): the real daemon with no Redis at all
decides as Redis would (every protocol, RESET, MALLOW, bans, shadow mode,
run-time overrides), exactly under racing clients, keeps counters across a
reload, bounds its keys, and reports itself healthy. And a differential
test: random scenarios decided by the memory store (tests/unit/memory_replay.c,
time injected) and by the Lua script in a real Redis (time injected through
ARGV) must get identical replies."""

import http.client
import json
import os
import random
import subprocess
import sys
import unittest

try:
    import redis as redis_py
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis as redis_py

from harness import (SCRIPT, SLOW, SRCDIR, Client, DaemonTest, free_port, http_get, race,
                     scrape_metrics, wait_until)
from test_vectors import NO_EXPIRY, Calendar, parse_policy, script_call

REPLAY = os.environ.get("RL_MEMORY_REPLAY") or os.path.join(
    SRCDIR, "build", "tests", "unit", "memory_replay")

POLICIES = """\
  reply: 5/60s
  login:
    limits: [3/1s, 20/1m]
    ban: {after: 2, within: 1m, for: 10m}
  quiet:
    limits: [1/1m]
    shadow: true
  burst:
    algorithm: funnel
    capacity: 4
    rate: 1/1s
  hourly:
    algorithm: fixed_window
    limits: [2/1h]
"""


def memory_config(port, hport, mport, policies=POLICIES, extra=""):
    return ("listen:\n"
            "  - {address: \"127.0.0.1:%d\", admin: true}\n"
            "  - {address: \"127.0.0.1:%d\", protocol: http}\n"
            "store: memory\n"
            "%s"
            "metrics: {listen: \"127.0.0.1:%d\"}\n"
            "policies:\n%s" % (port, hport, extra, mport, policies))


class MemoryDaemonTest(DaemonTest):
    def start(self, policies=POLICIES, extra=""):
        self.port, self.hport, self.mport = free_port(), free_port(), free_port()
        self.daemon = self.start_daemon(
            config=memory_config(self.port, self.hport, self.mport, policies, extra),
            port=self.port)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def metric(self, name):
        return scrape_metrics(self.mport).get(name)

    def test_decides_without_redis(self):
        self.start()
        got = [self.c.request("ALLOW alice reply") for _ in range(6)]
        self.assertEqual(got[:5], ["ALLOWED 5 %d 0 60000" % n for n in (4, 3, 2, 1, 0)])
        self.assertDecision(got[5], "DENIED", 5, 0, (59000, 60000), (59000, 60000))
        self.assertDecision(self.c.request("PEEK alice reply"), "DENIED", 5, 0)
        self.assertEqual(self.c.request("RESET alice reply"), "OK")
        self.assertEqual(self.c.request("ALLOW alice reply"), "ALLOWED 5 4 0 60000")
        # a funnel: capacity 4 at once, then 1 a second
        got = [self.c.request("ALLOW bob burst") for _ in range(5)]
        self.assertEqual([g.split()[0] for g in got], ["ALLOWED"] * 4 + ["DENIED"])
        self.assertDecision(got[4], "DENIED", 4, 0, (1, 1000))
        # a fixed window: its key lasts to the end of the hour
        self.assertDecision(self.c.request("ALLOW bob hourly 2"), "ALLOWED", 2, 0)
        self.assertDecision(self.c.request("ALLOW bob hourly"), "DENIED", 2, 0)
        # shadow: never denies, counted when it would have
        got = [self.c.request("ALLOW carol quiet") for _ in range(3)]
        self.assertTrue(all(g.startswith("ALLOWED") for g in got), got)
        wait_until(lambda: self.metric(
            'ratelimitd_action_shadow_denied_total{action="quiet"}') == 2, 5 * SLOW,
            what="two shadow denials counted")
        # a ban: the second denial within a minute bans for 10 minutes
        got = [self.c.request("ALLOW dave login") for _ in range(5)]
        self.assertEqual([g.split()[0] for g in got], ["ALLOWED"] * 3 + ["DENIED"] * 2)
        self.assertDecision(got[4], "DENIED", 3, 0, (599000, 600000))
        self.assertDecision(self.c.request("PEEK dave login"), "DENIED", 3, 0,
                            (590000, 600000))
        # several pairs at once: all or nothing
        self.assertEqual(self.c.request("MALLOW erin reply erin login"),
                         "ALLOWED 3 2 0 1000 2")
        # both have 3 left: the first of equals decides
        self.assertEqual(self.c.request("MALLOW erin reply alice reply"),
                         "ALLOWED 5 3 0 60000 1")
        self.c.request("RESET alice reply")
        for _ in range(5):
            self.c.request("ALLOW alice reply")
        self.assertDecision(self.c.request("MALLOW erin reply alice reply")[:-2], "DENIED", 5, 0)
        self.assertDecision(self.c.request("PEEK erin reply"), "ALLOWED", 5, 3, 0,
                            (59000, 60000))

    def test_other_protocols_and_run_time_overrides(self):
        self.start()
        r = redis_py.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        self.addCleanup(r.close)
        self.assertEqual(r.execute_command("ALLOW", "frank", "reply"), [1, 5, 4, 0, 60000])
        conn = http.client.HTTPConnection("127.0.0.1", self.hport, timeout=5)
        self.addCleanup(conn.close)
        conn.request("POST", "/v1/allow?user=frank&action=reply")
        resp = conn.getresponse()
        body = json.loads(resp.read())
        self.assertEqual((resp.status, body["allowed"], body["remaining"]), (200, True, 3))
        # run-time overrides live in this daemon (no Redis to share them)
        self.assertEqual(self.c.request("OVERRIDE frank reply blocked 60s"), "OK")
        self.assertEqual(self.c.request("ALLOW frank reply"), "DENIED 5 0 -1 -1")
        got = self.c.request("OVERRIDES 0").split()
        self.assertEqual(got[:5], ["OVERRIDE", "0", "frank", "reply", "blocked"])
        self.assertTrue(59000 <= int(got[5]) <= 60000, got)
        self.assertEqual(self.c.request("OVERRIDES 1"), "END 1")
        # limits of their own window: a key of their own, as in Redis
        self.assertEqual(self.c.request("OVERRIDE frank reply 10/1h"), "OK")
        self.assertEqual(self.c.request("ALLOW frank reply"), "ALLOWED 10 9 0 3600000")
        self.assertEqual(self.c.request("UNOVERRIDE frank reply"), "OK")
        self.assertEqual(self.c.request("ALLOW frank reply"), "ALLOWED 5 2 0 60000")
        self.assertEqual(self.c.request("OVERRIDES 0"), "END 0")
        self.assertEqual(self.metric("ratelimitd_overrides_live"), 0)

    def test_exact_under_racing_clients(self):
        self.start()
        shares = [["ALLOW shared hourly"] * 5 for _ in range(12)]
        results, errors = race([self.port], shares, 10 * SLOW)
        self.assertEqual(errors, [])
        allowed = sum(1 for _, rep in results if rep.startswith("ALLOWED"))
        self.assertEqual((len(results), allowed), (60, 2))

    def test_reload_keeps_counters(self):
        self.start()
        for _ in range(3):
            self.c.request("ALLOW gina reply")
        self.c.request("ALLOW gina hourly")
        # another policy changes, reply's count changes (same window):
        # the counters of both stay
        self.daemon.reload(memory_config(self.port, self.hport, self.mport,
                                         POLICIES.replace("reply: 5/60s", "reply: 6/60s")
                                         + "  new: 1/1s\n"))
        self.daemon.wait_log(r"configuration .* loaded", start=1)
        self.assertEqual(self.c.request("ALLOW gina reply"), "ALLOWED 6 2 0 60000")
        self.assertDecision(self.c.request("ALLOW gina hourly"), "ALLOWED", 2, 0)
        self.assertEqual(self.c.request("ALLOW gina new"), "ALLOWED 1 0 0 1000")

    def test_keys_bounded_health_and_metrics(self):
        self.start(extra="memory: {max_keys: 1000}\n")
        self.assertEqual(http_get(self.mport, "/health")[0], 200)
        lines = ["ALLOW u%d hourly" % i for i in range(1100)]
        got = self.c.pipeline(lines, timeout=20 * SLOW)
        self.assertTrue(all(g.startswith("ALLOWED 2 1 ") for g in got), got[:3])
        m = scrape_metrics(self.mport)
        self.assertEqual(m["ratelimitd_memory_keys"], 1000)
        self.assertEqual(m["ratelimitd_memory_evicted_total"], 100)
        self.assertGreater(m["ratelimitd_memory_bytes"], 1000 * 50)
        self.daemon.wait_log(r"warn: memory store: max_keys \(1000\) reached")
        # the least recently used went first: u0 starts afresh, u1099 not
        self.assertEqual(self.c.request("PEEK u0 hourly").split()[2], "2")
        self.assertEqual(self.c.request("PEEK u1099 hourly").split()[2], "1")
        self.assertEqual(http_get(self.mport, "/health")[0], 200)

    def test_scripts_run_memory(self):
        """scripts/run --memory runs a Redis configuration with no Redis: its
        redis: block (pointing at nothing here) is left out."""
        port = free_port()
        conf = os.path.join(self.tmpdir, "run.yaml")
        with open(conf, "w") as f:
            f.write("listen: [\"127.0.0.1:%d\"]\nredis:\n  address: 127.0.0.1:%d\n"
                    "  timeout: 50ms\npolicies:\n  reply: 2/60s\n" % (port, free_port()))
        log = open(os.path.join(self.tmpdir, "run.out"), "wb")
        self.addCleanup(log.close)
        p = subprocess.Popen([os.path.join(SRCDIR, "scripts", "run"), "--memory", conf],
                             cwd=SRCDIR, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)

        def stop():
            if p.poll() is None:
                os.killpg(p.pid, 15)
                p.wait(10)
        self.addCleanup(stop)

        def answers():
            if p.poll() is not None:
                raise AssertionError("scripts/run exited: %s" % open(log.name).read())
            try:
                with Client(port=port, timeout=1) as c:
                    return c.request("PING") == "PONG"
            except OSError:
                return False
        wait_until(answers, 60 * SLOW, interval=0.1, what="scripts/run --memory serving")
        with Client(port=port) as c:
            self.assertEqual(c.pipeline(["ALLOW a reply"] * 3)[2].split()[0], "DENIED")
        stop()
        out = open(log.name).read()
        self.assertIn("store: memory, no Redis", out)
        self.assertIn("memory (at most 1000000 keys)", out)

    def test_config_errors(self):
        cases = [
            ("store: memory\nredis: {address: 127.0.0.1:6379}\npolicies: {a: 1/1s}\n",
             "bad.yaml:2:1: redis: not used with store: memory"),
            ("memory: {max_keys: 5000}\npolicies: {a: 1/1s}\n",
             "bad.yaml:1:1: memory: only used with store: memory"),
            ("store: disk\npolicies: {a: 1/1s}\n", "bad.yaml:1:8: store: must be redis or memory"),
            ("store: memory\nmemory: {max_keys: 10}\npolicies: {a: 1/1s}\n",
             "bad.yaml:2:20: memory.max_keys: must be an integer from 1000"),
        ]
        self.assertConfigChecks(cases, name="bad.yaml")


# Days clocks changed (seconds, midday UTC): Berlin, Sydney, Santiago
# (a day from 01:00), Havana (a midnight twice), 2024.
DST_DAYS = [1711886400, 1730030400, 1712491200, 1728216000, 1712491200, 1725796800,
            1710072000, 1730635200]


def random_scenarios(rnd, n):
    """Scenarios in tests/vectors.txt's syntax (replies left as zeros):
    random algorithms, limits, bans, shadow groups, times (some equal,
    some far apart), costs and operations, ALLOWs that may wait (d) among
    them."""
    algos = ["sliding_window", "funnel", "fixed_window", "sliding_window_counter"]
    periods = [1, 7, 100, 1000, 2500, 60000, 3600000]
    zones = ["UTC", "Europe/Berlin", "Australia/Sydney", "America/Santiago",
             "America/Havana", "Asia/Kolkata"]
    anchors = {"day": [""], "week": ["", "@sunday", "@wednesday"],
               "month": ["", "@15", "@29", "@31"], "year": ["", "@04-01", "@02-29"]}
    calendar = []  # the scenario's calendar window, if any: (unit, anchor, zone)

    def policy(plain=False):
        if plain:  # the script's shortcut for this shape (decide_all_fixed)
            return "fixed_window %d/%d" % (rnd.randint(1, 8), rnd.choice(periods))
        algo = rnd.choice(algos)
        if algo == "funnel":
            words = [algo, str(rnd.randint(1, 6)),
                     "%d/%d" % (rnd.randint(1, 10), rnd.choice(periods))]
        else:
            # one window per limit, as the configuration requires
            words = [algo] + ["%d/%d" % (rnd.randint(1, 8), period)
                              for period in rnd.sample(periods, rnd.randint(1, 3))]
            # calendar windows (vectors_calendar.txt), in a zone, from an anchor
            if algo != "sliding_window" and rnd.random() < 0.35 and not calendar:
                unit = rnd.choice(sorted(anchors))
                anchor = rnd.choice(anchors[unit])
                zone = rnd.choice(zones)
                calendar.append((unit, anchor[1:], zone))
                words.insert(1, "%d/%s%s" % (rnd.randint(1, 8), unit, anchor))
                words.append("tz=" + zone)
        if rnd.random() < 0.3:
            words.append("ban=%d/%d/%d" % (rnd.randint(1, 3), rnd.choice(periods),
                                           rnd.choice(periods)))
        return " ".join(words)

    out = []
    for _ in range(n):
        multi = rnd.random() < 0.3
        if multi:
            out.append("multi")
            # a quarter of them: every group one fixed window, none in shadow
            plain = rnd.random() < 0.25
            for g in range(rnd.randint(1, 4)):
                shadow = not plain and g > 0 and rnd.random() < 0.3
                out.append("group %s%s" % ("shadow " if shadow else "", policy(plain)))
        else:
            out.append("policy " + policy())
        now = rnd.randrange(10 ** 15, 2 * 10 ** 15)
        if calendar:
            # start a few seconds before the window ends: the next one opens
            # in the scenario, often on a daylight-saving day
            unit, anchor, zone = calendar.pop()
            if rnd.random() < 0.5:
                now = rnd.choice(DST_DAYS) * 1000000 + rnd.randrange(-86400, 86400) * 1000000
            ends = int(Calendar(unit, anchor, zone).bounds(now).split(":")[3])
            now = ends * 1000 - rnd.randrange(0, 3000000)
        for _ in range(rnd.randint(5, 40)):
            now += rnd.choice([0, 0, 1, rnd.randrange(1000), rnd.randrange(1000000),
                               rnd.randrange(100000000)])
            if multi:
                op = rnd.choice("AAAP")
            else:
                op = rnd.choice("aaaaaaprddghhsx")
            cost = rnd.choice([1, 1, 1, 2, 3, rnd.randint(1, 12)])
            if op == "d":  # an ALLOW that may wait (vectors_delay.txt)
                cost = "%d %d" % (cost, rnd.choice([1, 7, 100, 1000, 2500, 60000]))
            # holds (vectors_hold.txt), on a few nonces so that settles meet them
            nonce = "%016x" % rnd.randint(1, 4)
            if op == "h":
                cost = "%d %s %d" % (cost, nonce, rnd.choice([1, 50, 2000, 600000]))
            elif op == "s":
                cost = "%s %d" % (nonce, rnd.choice([0, 1, 2, 5, 13]))
            elif op == "x":
                cost = nonce
            out.append("%d %s %s -> 0 0 0 0 0%s" % (now, op, cost, " 0 0" if multi else ""))
    return out


class DifferentialTest(DaemonTest):
    def test_memory_store_decides_as_the_script(self):
        """Random scenarios through the memory store and through the Lua
        script in a real Redis, time injected in both: identical replies."""
        seed = int(os.environ.get("RL_DIFF_SEED", random.randrange(1 << 30)))
        rnd = random.Random(seed)
        lines = random_scenarios(rnd, int(os.environ.get("RL_DIFF_SCENARIOS", 400)))
        path = os.path.join(self.tmpdir, "scenarios.txt")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        p = subprocess.run([REPLAY, path], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        got_c = p.stdout.splitlines()

        redis = self.start_redis()
        with open(SCRIPT) as f:
            script = NO_EXPIRY + f.read()
        got_lua, where = [], []
        with redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", script)
            n, groups, multi = 0, [], False
            for lineno, line in enumerate(lines, 1):
                tok = line.split()
                if tok[0] in ("policy", "multi"):
                    n += 1
                    multi = tok[0] == "multi"
                    groups = [] if multi else [(False, parse_policy(tok[1:]))]
                    continue
                if tok[0] == "group":
                    shadow = tok[1] == "shadow"
                    groups.append((shadow, parse_policy(tok[2 if shadow else 1:])))
                    continue
                op, cost = (tok[1], int(tok[3])) if tok[1] == "d" else tok[1], tok[2]
                if tok[1] == "h":
                    op = ("h", (tok[3], tok[4]))
                elif tok[1] in ("s", "x"):
                    op, cost = (tok[1], (tok[2],)), tok[3] if tok[1] == "s" else "0"
                keys, args = script_call("d%d" % n, multi, groups, tok[0], op, cost)
                got_lua.append(" ".join(str(x) for x in
                                        r.call("EVALSHA", sha, str(len(keys)), *keys, *args)))
                where.append(lineno)
        self.assertEqual(len(got_c), len(got_lua))
        diffs = [(where[i], lines[where[i] - 1], got_c[i], got_lua[i])
                 for i in range(len(got_c)) if got_c[i] != got_lua[i]]
        self.assertEqual(diffs[:5], [], "seed %d (RL_DIFF_SEED): line, decision, memory "
                         "store, script; %d differ of %d" % (seed, len(diffs), len(got_c)))
        print("\n[figures] differential: %d decisions in %d scenarios, seed %d: identical"
              % (len(got_c), sum(1 for ln in lines if ln.split()[0] in ("policy", "multi")),
                 seed))


if __name__ == "__main__":
    unittest.main()
