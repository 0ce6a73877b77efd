"""What-if replay (issue 33): a daemon on a real Redis writes a decision
log of live traffic under a loose configuration; `ratelimitctl replay`
decides it again under a stricter one, and reports per user exactly the
denials a live daemon running the stricter configuration makes on the same
traffic. Deterministic; sampled by user (every decision of a sampled user,
none of the others); hashed users hide the names and replay alike; the
file rotates within max_size and keep; a file that cannot be opened is
counted, not fatal."""

import json
import os
import re
import subprocess
import threading
import unittest

from harness import DAEMON, SLOW, Client, DaemonTest, free_port, scrape_metrics, wait_until

CTL = os.environ.get("RATELIMITCTL") or os.path.join(os.path.dirname(DAEMON), "ctl",
                                                     "ratelimitctl")

LOOSE = "  login: 100/60s\n  search: {algorithm: funnel, capacity: 50, rate: 50/1m}\n"
STRICT = ("  login: 5/60s\n  search: {algorithm: funnel, capacity: 50, rate: 50/1m}\n"
          "  upload: 1/1s\n")


def read(path):
    with open(path) as f:
        return f.read()


def traffic():
    """(user, action) requests: 20 users trying login 8 times, one 40
    times, 10 users searching 3 times; interleaved the same way on every
    run."""
    reqs = []
    for round_ in range(8):
        reqs += [("user-%d" % u, "login") for u in range(20)]
        reqs += [("mallory", "login")] * 5
        if round_ < 3:
            reqs += [("searcher-%d" % u, "search") for u in range(10)]
    return reqs


class ReplayTest(DaemonTest):
    def daemon_with(self, policies, log=None, redis=None):
        port, mport = free_port(), free_port()
        conf = ["listen: [127.0.0.1:%d]" % port,
                "redis: {address: %s}" % (redis or self.start_redis()).address,
                "metrics: {listen: 127.0.0.1:%d}" % mport]
        if log:
            conf.append("decision_log: {%s}" % ", ".join("%s: %s" % kv for kv in log.items()))
        conf += ["policies:", policies]
        d = self.start_daemon(config="\n".join(conf), port=port, name="rl%d" % port)
        d.mport = mport
        return d

    def send(self, d, reqs):
        """The requests in order on one connection: {user: denials}."""
        denied = {}
        with Client(port=d.port, timeout=10 * SLOW) as c:
            for user, action in reqs:
                r = c.request("ALLOW %s %s" % (user, action))
                self.assertRegex(r, r"^(ALLOWED|DENIED) ")
                if r.startswith("DENIED"):
                    denied[user] = denied.get(user, 0) + 1
        return denied

    def replay(self, *args):
        p = subprocess.run([CTL, "--json", "replay"] + list(args), capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def stop(self, d):
        d.signal(15)
        d.proc.wait(10 * SLOW)

    def test_replay_matches_a_live_run(self):
        log = os.path.join(self.tmpdir, "decisions.log")
        loose = self.daemon_with(LOOSE, {"path": log})
        self.assertEqual(self.send(loose, traffic()), {})  # nothing denied live
        self.stop(loose)  # the log is written out at exit
        lines = read(log).splitlines()
        self.assertEqual(lines[0], "# ratelimitd decision log 1 sample=1 users=clear")
        self.assertEqual(len(lines) - 1, len(traffic()))
        self.assertRegex(lines[1], r"^\d{13} A login 1 user-0$")
        strict = os.path.join(self.tmpdir, "strict.yaml")
        with open(strict, "w") as f:
            f.write("listen: [127.0.0.1:1]\nstore: memory\npolicies:\n" + STRICT)
        got = self.replay(log, strict)
        # the same traffic, live, under the strict policies
        live = self.send(self.daemon_with(STRICT), traffic())
        self.assertEqual(live, dict([("mallory", 35)] + [("user-%d" % u, 3)
                                                          for u in range(20)]))
        login = next(a for a in got["actions"] if a["action"] == "login")
        self.assertEqual((login["decisions"], login["log_allowed"], login["log_denied"]),
                         (200, 200, 0))
        self.assertEqual(login["newly_denied"], sum(live.values()))
        self.assertEqual(login["denied"], sum(live.values()))
        self.assertEqual(login["top_newly_denied"][0], {"user": "mallory", "count": 35})
        self.assertEqual([u["count"] for u in login["top_newly_denied"][1:]], [3] * 4)
        search = next(a for a in got["actions"] if a["action"] == "search")
        self.assertEqual((search["decisions"], search["newly_denied"]), (30, 0))
        self.assertEqual(got["decisions"], 230)
        self.assertEqual(got["skipped"], {"no_policy": 0, "concurrency": 0, "malformed": 0})
        self.assertEqual(got["time_backwards"], 0)
        # deterministic: the same report again; the text form says as much
        self.assertEqual(self.replay(log, strict), got)
        text = subprocess.run([CTL, "replay", log, strict], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("  newly denied: mallory 35, user-0 3, user-1 3, user-10 3, user-11 3",
                      text.stdout)
        # a candidate without login: its decisions are skipped, and said so
        other = os.path.join(self.tmpdir, "other.yaml")
        with open(other, "w") as f:
            f.write("listen: [127.0.0.1:1]\nstore: memory\npolicies:\n  search: 1/1m\n")
        o = self.replay(log, other)
        self.assertEqual(o["skipped"]["no_policy"], 200)
        self.assertEqual(o["actions"][0]["newly_denied"], 20)  # 10 searchers, 2 more each

    def test_sampled_hashed_and_rotated(self):
        redis = self.start_redis()
        key = os.path.join(self.tmpdir, "hash.key")
        with open(key, "w") as f:
            f.write("a secret of the operator, 32 bytes or so\n")
        log = os.path.join(self.tmpdir, "d.log")
        d = self.daemon_with(LOOSE, {"path": log, "sample": "0.5", "hash_key_file": key,
                                     "max_size": "4096", "keep": "2"}, redis=redis)
        reqs = traffic() * 6
        self.send(d, reqs)
        self.stop(d)
        files = sorted(f for f in os.listdir(self.tmpdir) if f.startswith("d.log"))
        self.assertEqual(files, ["d.log", "d.log.1", "d.log.2"])  # rotated, two kept
        for name in files:
            self.assertLessEqual(os.path.getsize(os.path.join(self.tmpdir, name)), 4096)
        text = "".join(read(os.path.join(self.tmpdir, n)) for n in files)
        self.assertNotIn("mallory", text)  # names hashed
        self.assertIn("users=hashed", text)
        users = re.findall(r"^\d+ [AD] \w+ 1 (#[0-9a-f]{16})$", text, re.M)
        self.assertTrue(users)
        # sampled by user: about half of the 31 users, every decision of each
        # (in the files kept, so the newest: each user's share is alike)
        self.assertTrue(5 <= len(set(users)) <= 26, len(set(users)))
        # the hashes are the key's: the same users hash alike in a second run
        d2 = self.daemon_with(LOOSE, {"path": log + "2", "sample": "0.5",
                                      "hash_key_file": key}, redis=redis)
        self.send(d2, traffic())
        self.stop(d2)
        again = set(re.findall(r"(#[0-9a-f]{16})$", read(log + "2"), re.M))
        self.assertEqual(again, set(users))
        # and a replay of hashed names decides them as well
        strict = os.path.join(self.tmpdir, "strict.yaml")
        with open(strict, "w") as f:
            f.write("listen: [127.0.0.1:1]\nstore: memory\npolicies:\n" + STRICT)
        got = self.replay(log + "2", strict)
        self.assertEqual(got["users"], "hashed")
        self.assertEqual(got["decisions"], len(read(log + "2").splitlines()) - 1)

    def test_a_log_that_cannot_rotate(self):
        """path.1 a directory that is not empty: the file cannot be moved
        away. It stays within max_size, the lines past it are counted
        dropped, the log says why, and decisions go on."""
        log = os.path.join(self.tmpdir, "d.log")
        os.makedirs(log + ".1")
        with open(os.path.join(log + ".1", "keep"), "w") as f:
            f.write("x")
        d = self.daemon_with(LOOSE, {"path": log, "max_size": "4096", "keep": "1"})
        self.send(d, traffic() * 3)
        d.wait_log(r"decision_log .*d\.log: cannot rotate", 5 * SLOW)
        wait_until(lambda: scrape_metrics(d.mport).get(
            "ratelimitd_decision_log_dropped_total", 0) > 0, 5 * SLOW, what="lines dropped")
        self.assertLessEqual(os.path.getsize(log), 4096)
        with Client(port=d.port) as c:
            self.assertTrue(c.request("ALLOW x login").startswith("ALLOWED"))

    def test_a_log_that_cannot_be_opened(self):
        log = os.path.join(self.tmpdir, "no", "such", "dir", "d.log")
        d = self.daemon_with(LOOSE, {"path": log})
        d.wait_log(r"decision_log .*d\.log: cannot open", 5 * SLOW)
        self.send(d, traffic()[:10])
        wait_until(lambda: scrape_metrics(d.mport).get(
            "ratelimitd_decision_log_dropped_total") == 10, 5 * SLOW,
            what="10 decisions dropped")
        with Client(port=d.port) as c:  # and decisions go on
            self.assertTrue(c.request("ALLOW x login").startswith("ALLOWED"))


if __name__ == "__main__":
    unittest.main()
