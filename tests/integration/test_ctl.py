"""ratelimitctl against a real daemon and Redis: decisions and exit codes,
--json, admin commands on the admin listener only, addresses from the
config file, check-config, reload through the pid file (and refusing a bad
file or a stale pid), timeouts, bash completion, and the man pages naming
every option the programs' --help prints."""

import json
import os
import re
import signal
import socket
import subprocess
import time
import unittest

from harness import (DAEMON, SLOW, SRCDIR, DaemonTest, free_port, make_config, spawn,
                     wait_until)

CTL = os.environ.get("RATELIMITCTL") or os.path.join(os.path.dirname(DAEMON), "ctl",
                                                     "ratelimitctl")
BENCH = os.environ.get("RATELIMIT_BENCH") or os.path.join(os.path.dirname(DAEMON), "bench",
                                                          "ratelimit-bench")

POLICIES = {"reply": "3/60s", "login": "[3/1s, 20/60s]"}


def ctl(*args, env=None, timeout=None):
    full_env = dict(os.environ)
    full_env.pop("RATELIMITCTL_ADDRESS", None)
    full_env.update(env or {})
    return subprocess.run([CTL] + list(args), capture_output=True, text=True,
                          timeout=timeout or 20 * SLOW, stdin=subprocess.DEVNULL, env=full_env)


class CtlTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port, self.admin = free_port(), free_port()
        self.unix = os.path.join(self.tmpdir, "rl.sock")
        self.pid_file = os.path.join(self.tmpdir, "rl.pid")
        self.config_text = self.config_for(POLICIES)
        self.daemon = self.start_daemon(config=self.config_text, port=self.port,
                                        args=["-p", self.pid_file])
        self.cfg = self.daemon.config_path

    def config_for(self, policies):
        return make_config(["127.0.0.1:%d" % self.port, "unix:" + self.unix],
                           {"address": self.redis.address, "timeout": "1s"}, policies,
                           admin=False) \
            .replace("listen:\n", "listen:\n  - {address: \"127.0.0.1:%d\", admin: true}\n"
                     % self.admin, 1)

    def run_ok(self, *args, rc=0):
        r = ctl(*args)
        self.assertEqual(r.returncode, rc, "ratelimitctl %s\nstdout: %s\nstderr: %s"
                         % (" ".join(args), r.stdout, r.stderr))
        return r

    def json_of(self, *args, rc=0):
        r = self.run_ok("--json", *args, rc=rc)
        return json.loads(r.stdout)

    def test_allow_until_denied_exit_codes(self):
        for left in (2, 1, 0):
            r = self.run_ok("-c", self.cfg, "allow", "dave", "reply")
            self.assertEqual(r.stdout, "allowed (%d of 3 remaining; full again in 60s)\n" % left)
        r = self.run_ok("-c", self.cfg, "allow", "dave", "reply", rc=1)
        self.assertRegex(r.stdout, r"^denied \(0 of 3 remaining; retry in [\d.]+s; "
                         r"full again in [\d.]+s\)\n$")
        j = self.json_of("-c", self.cfg, "allow", "dave", "reply", rc=1)
        self.assertEqual((j["result"], j["allowed"], j["limit"], j["remaining"], j["fallback"]),
                         ("denied", False, 3, 0, False))
        self.assertTrue(0 < j["retry_after_ms"] <= 60000, j)
        self.assertNotIn("pair", j)
        # a denied request was not counted, and peek counts nothing either
        j = self.json_of("-c", self.cfg, "peek", "erin", "reply")
        self.assertEqual((j["result"], j["remaining"]), ("allowed", 3))
        j = self.json_of("-c", self.cfg, "allow", "erin", "reply", "3")
        self.assertEqual((j["result"], j["remaining"]), ("allowed", 0))

    def test_several_pairs_are_one_decision(self):
        self.run_ok("-c", self.cfg, "allow", "u1", "reply", "2")
        # u1 has 1 left: a cost of 2 over both pairs is denied, charging none
        j = self.json_of("-c", self.cfg, "allow", "u2", "reply", "u1", "reply", "2", rc=1)
        self.assertEqual((j["result"], j["pair"]), ("denied", 2))
        j = self.json_of("-c", self.cfg, "peek", "u2", "reply", "u1", "reply")
        self.assertEqual((j["result"], j["pair"], j["remaining"]), ("allowed", 2, 1))
        j = self.json_of("-c", self.cfg, "peek", "u2", "reply")
        self.assertEqual(j["remaining"], 3)

    def test_admin_commands_find_the_admin_listener(self):
        self.run_ok("-c", self.cfg, "allow", "dave", "reply", "3")
        # no -s: the config's admin listener
        r = self.run_ok("-c", self.cfg, "reset", "dave", "reply")
        self.assertEqual(r.stdout, "ok\n")
        self.assertEqual(self.json_of("-c", self.cfg, "peek", "dave", "reply")["remaining"], 3)
        # on the client listener: the daemon's own refusal, exit 2
        r = self.run_ok("-s", "127.0.0.1:%d" % self.port, "reset", "dave", "reply", rc=2)
        self.assertIn("forbidden", r.stderr)
        j = self.json_of("-s", "127.0.0.1:%d" % self.port, "reset", "dave", "reply", rc=2)
        self.assertEqual((j["result"], j["error"]), ("error", "forbidden"))
        j = self.json_of("-s", "127.0.0.1:%d" % self.port, "overrides", rc=2)
        self.assertEqual(j["error"], "forbidden")

    def test_overrides(self):
        self.run_ok("-c", self.cfg, "override", "scraper-9", "reply", "blocked", "1h")
        self.run_ok("-c", self.cfg, "override", "customer-42", "reply", "50/60s")
        j = self.json_of("-c", self.cfg, "allow", "scraper-9", "reply", rc=1)
        self.assertEqual((j["result"], j["retry_after_ms"]), ("denied", -1))
        j = self.json_of("-c", self.cfg, "allow", "customer-42", "reply")
        self.assertEqual((j["limit"], j["remaining"]), (50, 49))
        j = self.json_of("-c", self.cfg, "overrides")
        self.assertEqual(j["count"], 2)
        items = {(o["user"], o["action"], o["spec"]): o["ttl_ms"] for o in j["overrides"]}
        self.assertEqual(items[("customer-42", "reply", "50/60s")], -1)
        self.assertTrue(3500000 < items[("scraper-9", "reply", "blocked")] <= 3600000, items)
        r = self.run_ok("-c", self.cfg, "overrides")
        self.assertIn("customer-42 reply 50/60s\n", r.stdout)
        self.assertRegex(r.stdout, r"scraper-9 reply blocked ttl=3\d{3}\.\d{3}s\n")
        self.run_ok("-c", self.cfg, "unoverride", "scraper-9", "reply")
        self.run_ok("-c", self.cfg, "unoverride", "customer-42", "reply")
        self.assertEqual(self.json_of("-c", self.cfg, "overrides"),
                         {"command": "overrides", "result": "ok", "overrides": [], "count": 0})
        self.assertEqual(self.json_of("-c", self.cfg, "allow", "scraper-9", "reply")["result"],
                         "allowed")

    def test_unlimited_and_blocked_users(self):
        # An unlimited override's ALLOWED -1 -1 0 -1 once made allow/peek exit 2
        # ("not a ratelimitd reply"), so `ratelimitctl allow "$ip" login || exit 1`
        # refused exactly the allow-listed users.
        self.run_ok("-c", self.cfg, "override", "internal-7", "reply", "unlimited")
        self.run_ok("-c", self.cfg, "override", "scraper-9", "reply", "blocked")
        self.run_ok("-c", self.cfg, "override", "internal-7", "login", "unlimited")
        for verb in ("allow", "peek"):
            r = self.run_ok("-c", self.cfg, verb, "internal-7", "reply")
            self.assertEqual(r.stdout, "allowed (unlimited)\n")
            j = self.json_of("-c", self.cfg, verb, "internal-7", "reply")
            self.assertEqual((j["result"], j["limit"], j["remaining"], j["retry_after_ms"],
                              j["reset_ms"], j["fallback"]), ("allowed", -1, -1, 0, -1, False))
            r = self.run_ok("-c", self.cfg, verb, "scraper-9", "reply", rc=1)
            self.assertEqual(r.stdout, "denied (blocked; limit 3)\n")
            j = self.json_of("-c", self.cfg, verb, "scraper-9", "reply", rc=1)
            self.assertEqual((j["result"], j["limit"], j["remaining"], j["retry_after_ms"],
                              j["reset_ms"], j["fallback"]), ("denied", 3, 0, -1, -1, False))
        # several pairs: every one unlimited is pair 0; a blocked one decides
        j = self.json_of("-c", self.cfg, "allow", "internal-7", "reply", "internal-7", "login")
        self.assertEqual((j["result"], j["limit"], j["pair"]), ("allowed", -1, 0))
        r = self.run_ok("-c", self.cfg, "allow", "internal-7", "reply", "scraper-9", "reply",
                        rc=1)
        self.assertEqual(r.stdout, "denied (blocked; limit 3) decided by pair 2\n")
        # the man page's idiom lets the unlimited user through
        sh = subprocess.run(["sh", "-c", '"$0" -c "$1" allow internal-7 reply || exit 1',
                             CTL, self.cfg], capture_output=True, text=True, timeout=20 * SLOW)
        self.assertEqual(sh.returncode, 0, sh.stderr)

    def test_addresses(self):
        # -s over -c; unix sockets; the environment; 0.0.0.0 reached on loopback
        self.assertEqual(self.run_ok("-s", "unix:" + self.unix, "ping").stdout, "pong\n")
        r = ctl("ping", env={"RATELIMITCTL_ADDRESS": "127.0.0.1:%d" % self.port})
        self.assertEqual((r.returncode, r.stdout), (0, "pong\n"), r.stderr)
        # the first line listener of the file, for non-admin commands
        self.assertEqual(self.run_ok("-c", self.cfg, "ping").stdout, "pong\n")
        wild = os.path.join(self.tmpdir, "wild.yaml")
        with open(wild, "w") as f:
            f.write(self.config_text.replace("127.0.0.1:%d" % self.port,
                                             "0.0.0.0:%d" % self.port))
        self.assertEqual(self.run_ok("-c", wild, "-s", "0.0.0.0:%d" % self.port,
                                     "ping").stdout, "pong\n")

    def test_errors_exit_2(self):
        r = self.run_ok("-c", self.cfg, "allow", "dave", "nope", rc=2)
        self.assertEqual(r.stderr, "ratelimitctl: unknown-action: no policy for this action\n")
        # a blank in a user cannot be sent: refused before connecting
        j = self.json_of("-s", "127.0.0.1:1", "allow", "a b", "reply", rc=2)
        self.assertEqual(j["error"], "usage")
        dead = free_port()
        j = self.json_of("-s", "127.0.0.1:%d" % dead, "ping", rc=2)
        self.assertEqual(j["error"], "connect")
        self.assertIn("refused", j["message"])
        for bad in (["allow", "dave"], ["reset", "dave"], ["frobnicate"], ["--nope", "ping"],
                    ["-T", "0s", "ping"], ["-T", "5", "ping"]):
            r = ctl("-s", "127.0.0.1:%d" % dead, *bad)
            self.assertEqual(r.returncode, 2, (bad, r.stdout, r.stderr))
            self.assertTrue(r.stderr, bad)
        # a typo: one line naming the command meant, not the whole usage
        for typo, meant in (("alow", "allow"), ("peeek", "peek"), ("overide", "override"),
                            ("check-confg", "check-config")):
            r = ctl("-s", "127.0.0.1:%d" % dead, typo, "dave", "reply")
            self.assertEqual((r.returncode, r.stderr),
                             (2, "ratelimitctl: unknown command %s: did you mean %s? (--help "
                                 "lists them)\n" % (typo, meant)))
        r = ctl("-s", "127.0.0.1:%d" % dead, "frobnicate")
        self.assertEqual(r.stderr, "ratelimitctl: unknown command frobnicate (--help lists them)\n")

    def test_the_address_and_why(self):
        # an invalid config: its errors, not a connection to a default;
        # -s needs no config
        bad = os.path.join(self.tmpdir, "bad.yaml")
        with open(bad, "w") as f:
            f.write(self.config_text + "bogus: 1\n")
        for cmd in (["ping"], ["reset", "dave", "reply"]):
            r = ctl("-c", bad, *cmd)
            self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
            self.assertRegex(r.stderr, r"(?m)^%s:\d+:\d+: .*bogus" % re.escape(bad))
            self.assertNotIn("connect", r.stderr)
            j = self.json_of("-c", bad, *cmd, rc=2)
            self.assertEqual((j["command"], j["result"], j["file"]), (cmd[0], "invalid", bad))
        self.assertEqual(self.run_ok("-c", bad, "-s", "127.0.0.1:%d" % self.port,
                                     "ping").stdout, "pong\n")
        r = ctl("-c", bad, "ping", env={"RATELIMITCTL_ADDRESS": "127.0.0.1:%d" % self.port})
        self.assertEqual((r.returncode, r.stdout), (0, "pong\n"), r.stderr)
        # no file to read (as one of mode 0640 to a user outside its group):
        # the defaults, and an error that says why they were chosen (unless
        # something answers there)
        missing = os.path.join(self.tmpdir, "missing.yaml")
        for cmd, default in ((["ping"], "127.0.0.1:7379"),
                             (["reset", "dave", "reply"], "127.0.0.1:7380")):
            r = ctl("-T", "2s", "-c", missing, *cmd)
            if r.returncode == 2:
                self.assertIn(default, r.stderr)
                self.assertIn("missing.yaml: cannot read: No such file or directory", r.stderr)
                self.assertIn("-s", r.stderr)

    def test_timeout_on_a_silent_listener(self):
        # accepts (the kernel does) and never answers
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        self.addCleanup(s.close)
        t0 = time.monotonic()
        j = self.json_of("-T", "300ms", "-s", "127.0.0.1:%d" % s.getsockname()[1], "ping", rc=2)
        took = time.monotonic() - t0
        self.assertEqual(j["error"], "timeout")
        self.assertGreaterEqual(took, 0.29)
        self.assertLess(took, 0.3 + 5 * SLOW)

    def test_fallback_is_flagged(self):
        self.redis.stop()
        j = self.json_of("-c", self.cfg, "allow", "dave", "reply")
        self.assertEqual((j["result"], j["remaining"], j["fallback"]), ("allowed", -1, True))
        r = self.run_ok("-c", self.cfg, "allow", "dave", "reply")
        self.assertIn("the store did not decide", r.stdout)

    def test_check_config_and_policies(self):
        r = self.run_ok("check-config", self.cfg)
        self.assertEqual(r.stdout, "configuration OK\n")
        self.assertEqual(self.run_ok("-c", self.cfg, "policies").stdout, "login\nreply\n")
        self.assertEqual(self.json_of("-c", self.cfg, "policies")["policies"], ["login", "reply"])
        bad = os.path.join(self.tmpdir, "bad.yaml")
        with open(bad, "w") as f:
            f.write(self.config_text.replace("3/60s", "3/60") + "bogus: 1\n")
        r = self.run_ok("check-config", bad, rc=1)
        # every error, as ratelimitd -t prints them
        d = subprocess.run([DAEMON, "-t", "-c", bad], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.stderr, d.stderr)
        self.assertGreaterEqual(r.stderr.count(bad + ":"), 2, r.stderr)
        j = self.json_of("check-config", bad, rc=1)
        self.assertEqual(j["result"], "invalid")
        self.assertEqual(len(j["errors"]), r.stderr.count(bad + ":"))
        for e in j["errors"]:
            self.assertRegex(e, re.escape(bad) + r":\d+:\d+: \S")

    def test_reload_through_the_pid_file(self):
        with open(self.pid_file) as f:
            self.assertEqual(int(f.read()), self.daemon.pid)
        self.daemon.write_config(self.config_for({"reply": "7/60s", "login": "3/1s"}))
        start = len(self.daemon.log_lines())
        r = self.run_ok("-c", self.cfg, "-p", self.pid_file, "reload")
        self.assertIn("pid %d" % self.daemon.pid, r.stdout)
        self.daemon.wait_log(r"reload: configuration .* loaded", start=start)
        wait_until(lambda: self.json_of("-c", self.cfg, "peek", "x", "reply")["limit"] == 7,
                   5 * SLOW, what="the new limit")
        # a bad file: refused here, and the daemon is not signalled
        self.daemon.write_config(self.config_for({"reply": "7/60"}))
        start = len(self.daemon.log_lines())
        j = self.json_of("-c", self.cfg, "-p", self.pid_file, "reload", rc=1)
        self.assertEqual(j["result"], "invalid")
        time.sleep(0.3 * SLOW)
        self.assertFalse([ln for ln in self.daemon.log_lines()[start:] if "reload" in ln])

    def test_reload_refuses_a_stale_pid(self):
        # the pid of a process that is not ratelimitd is never signalled
        other = spawn(["sleep", "30"])
        self.addCleanup(other.kill)
        stale = os.path.join(self.tmpdir, "stale.pid")
        with open(stale, "w") as f:
            f.write("%d\n" % other.pid)
        j = self.json_of("-c", self.cfg, "-p", stale, "reload", rc=2)
        self.assertIn("not ratelimitd", j["message"])
        self.assertIsNone(other.poll())
        with open(stale, "w") as f:
            f.write("junk\n")
        self.assertEqual(self.json_of("-c", self.cfg, "-p", stale, "reload", rc=2)["error"],
                         "reload")

    def test_reload_without_a_pid_file_asks_systemctl(self):
        """No -p and no file at the default place: `systemctl reload
        ratelimitd`, waited for, its output on stderr (stdout stays ours:
        one JSON object), its failure an error. systemctl here is a script
        on PATH: a real one needs systemd as PID 1 and the unit installed."""
        default = "/run/ratelimitd/ratelimitd.pid"
        self.assertFalse(os.path.exists(default), "a ratelimitd runs on this machine: "
                         "%s is there, so this test cannot take the systemctl path" % default)
        fakebin = os.path.join(self.tmpdir, "bin")
        os.mkdir(fakebin)
        calls = os.path.join(self.tmpdir, "systemctl.calls")
        with open(os.path.join(fakebin, "systemctl"), "w") as f:
            f.write('#!/bin/sh\necho "$@" >> %s\necho "systemctl says hello"\n'
                    'exit "${FAKE_SYSTEMCTL_RC:-0}"\n' % calls)
        os.chmod(os.path.join(fakebin, "systemctl"), 0o755)
        env = {"PATH": fakebin + ":" + os.environ["PATH"]}
        r = ctl("--json", "-c", self.cfg, "reload", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout),
                         {"command": "reload", "result": "ok", "via": "systemctl"})
        self.assertIn("systemctl says hello", r.stderr)
        with open(calls) as f:
            self.assertEqual(f.read(), "reload ratelimitd\n")
        r = ctl("-c", self.cfg, "reload", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("reload done by systemctl", r.stdout)
        env["FAKE_SYSTEMCTL_RC"] = "1"
        r = ctl("--json", "-c", self.cfg, "reload", env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        j = json.loads(r.stdout)
        self.assertEqual((j["result"], j["error"]), ("error", "reload"))
        self.assertIn("exit status 1", j["message"])
        # an invalid file: systemctl is not asked
        self.daemon.write_config(self.config_for({"reply": "7/60"}))
        self.assertEqual(ctl("-c", self.cfg, "reload", env=env).returncode, 1)
        with open(calls) as f:
            self.assertEqual(len(f.readlines()), 3)

    def test_pid_file_removed_at_exit(self):
        self.assertTrue(os.path.exists(self.pid_file))
        self.daemon.signal(signal.SIGTERM)
        self.daemon.wait_exit()
        self.assertFalse(os.path.exists(self.pid_file))


class CtlAddrTest(DaemonTest):
    """--addr, rls's and health's gRPC listener, before the command as well as
    after it (getopt took it for an abbreviated --address once)."""

    def test_addr_before_the_command(self):
        redis = self.start_redis()
        rules = os.path.join(self.tmpdir, "rules.yaml")
        with open(rules, "w") as f:
            f.write("domain: web\ndescriptors:\n  - key: user\n"
                    "    rate_limit: {unit: hour, requests_per_unit: 2}\n")
        port, gport = free_port(), free_port()
        self.start_daemon(config="listen:\n  - 127.0.0.1:%d\n"
                          "  - {address: 127.0.0.1:%d, protocol: grpc}\n"
                          "redis: {address: %s}\nenvoy: {config: %s}\n"
                          % (port, gport, redis.address, rules), port=port)
        addr = "127.0.0.1:%d" % gport
        # no -c: the listener is --addr's alone (the default config is not this one)
        for args in (["--addr", addr, "rls", "web", "user=a"],
                     ["rls", "--addr", addr, "web", "user=a"]):
            r = ctl(*args)
            self.assertEqual(r.returncode, 0, (args, r.stdout, r.stderr))
            self.assertTrue(r.stdout.startswith("OK\n  user=a: OK limit=2/HOUR"), r.stdout)
        r = ctl("--addr", addr, "rls", "web", "user=a")
        self.assertEqual((r.returncode, r.stdout.split("\n")[0]), (1, "OVER_LIMIT"), r.stderr)
        r = ctl("--addr", addr, "health")
        self.assertEqual((r.returncode, r.stdout), (0, "SERVING\n"), r.stderr)
        # after the command, its own --addr wins
        r = ctl("--addr", "127.0.0.1:%d" % port, "health", "--addr", addr)
        self.assertEqual((r.returncode, r.stdout), (0, "SERVING\n"), r.stderr)
        # a line command is told which option is its
        r = ctl("--addr", "127.0.0.1:%d" % port, "allow", "a", "b")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--addr names a gRPC listener (rls, health); allow takes -s",
                      r.stderr)


class CompletionTest(DaemonTest):
    def complete(self, words, config):
        """What bash completion offers for the last of words."""
        script = os.path.join(SRCDIR, "ctl", "ratelimitctl.bash")
        line = ("source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _ratelimitctl; "
                "printf '%%s\\n' \"${COMPREPLY[@]}\"" %
                (script, " ".join("'%s'" % w for w in words), len(words) - 1))
        env = dict(os.environ, PATH=os.path.dirname(CTL) + ":" + os.environ["PATH"])
        r = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env,
                           timeout=30, cwd=self.tmpdir)
        self.assertEqual(r.returncode, 0, r.stderr)
        return sorted(w for w in r.stdout.split("\n") if w)

    def test_completion(self):
        cfg = os.path.join(self.tmpdir, "c.yaml")
        rules = os.path.join(self.tmpdir, "rules.yaml")
        with open(rules, "w") as f:
            f.write("domain: web\ndescriptors:\n  - key: path\n    value: /login\n"
                    "    rate_limit: {unit: minute, requests_per_unit: 2}\n")
        with open(cfg, "w") as f:
            f.write(make_config(["127.0.0.1:7379"], {"address": "127.0.0.1:6379"},
                                {"reply": "5/60s", "login": "3/1s", "upload": "9/1h"},
                                envoy="{config: %s}" % rules))
        self.assertEqual(self.complete(["ratelimitctl", "re"], cfg),
                         ["release", "reload", "renew", "replay", "reset"])
        self.assertIn("--json", self.complete(["ratelimitctl", "--j"], cfg))
        self.assertEqual(self.complete(["ratelimitctl", "h"], cfg), ["health"])
        # rls's own options after it (not the global ones)
        self.assertEqual(self.complete(["ratelimitctl", "rls", "--"], cfg),
                         ["--addr", "--hits"])
        self.assertEqual(self.complete(["ratelimitctl", "health", "--"], cfg), ["--addr"])
        # --addr before the command takes a value, as -s does
        self.assertEqual(self.complete(["ratelimitctl", "--addr", "h:1", "h"], cfg), ["health"])
        # actions from the config file's policies
        got = self.complete(["ratelimitctl", "-c", cfg, "allow", "dave", ""], cfg)
        self.assertEqual(got[:3], ["login", "reply", "upload"])
        self.assertRegex(" ".join(got[3:]), r"^web\.path__login-[0-9a-f]{8}$")
        self.assertEqual(self.complete(["ratelimitctl", "-c", cfg, "peek", "a", "re", "b", "l"],
                                       cfg), ["login"])
        self.assertEqual(self.complete(["ratelimitctl", "-c", cfg, "allow", "d"], cfg), [])
        # an envoy rule's policy name, not the words after it
        got = self.complete(["ratelimitctl", "-c", cfg, "peek", "path=/login", "w"], cfg)
        self.assertEqual(len(got), 1, got)
        self.assertRegex(got[0], r"^web\.path__login-[0-9a-f]{8}$")
        self.assertEqual(self.complete(["ratelimitctl", "override", "u", "reply", "b"], cfg),
                         ["blocked"])


def help_options(prog):
    r = subprocess.run([prog, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout, set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", r.stdout))


class ManPageTest(unittest.TestCase):
    """Every option and command --help prints is in the man page."""

    def check(self, prog, page, commands=()):
        with open(os.path.join(SRCDIR, "man", page)) as f:
            man = f.read()
        text, opts = help_options(prog)
        self.assertTrue(opts, text)
        for o in sorted(opts):
            self.assertIn("*%s*" % o, man.replace("\\", ""),
                          "%s: %s is in --help, not in the man page" % (page, o))
        for c in commands:
            self.assertIn("*%s*" % c, man, "%s: command %s" % (page, c))
            self.assertIn(c, text, "--help: command %s" % c)

    def test_ratelimitctl(self):
        self.check(CTL, "ratelimitctl.1.scd",
                   ["allow", "peek", "state", "reset", "override", "unoverride", "overrides", "ping",
                    "acquire", "release", "renew", "check-config", "policies", "reload", "rls",
                    "health"])

    def test_ratelimitd(self):
        self.check(DAEMON, "ratelimitd.8.scd")

    def test_ratelimit_bench(self):
        self.check(BENCH, "ratelimit-bench.1.scd")


if __name__ == "__main__":
    unittest.main()
