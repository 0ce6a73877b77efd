"""Command line: -t (OK / FILE:LINE:COL errors), -V, -h, their long forms
(--test, --config, --version, --help), bad options, missing files."""

import os
import re
import unittest

from harness import SRCDIR, DaemonTest, run_cli

BASE = """listen:
  - 127.0.0.1:7379
redis:
  address: 127.0.0.1:6379
policies:
  reply: 5/60s
"""

USAGE = re.compile(r"-c\b")


def project_version():
    """The version in meson.build's project(), which the binary reports."""
    with open(os.path.join(SRCDIR, "meson.build")) as f:
        m = re.search(r"project\([^)]*?\bversion\s*:\s*'([^']+)'", f.read(), re.S)
    assert m, "no version in meson.build's project()"
    return m.group(1)


class CliTest(DaemonTest):
    def write(self, text, name="c.yaml"):
        path = os.path.join(self.tmpdir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def check_ok(self, text):
        path = self.write(text)
        r = run_cli(["-t", "-c", path])
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "configuration OK"),
                         "config:\n%s\nstderr: %s" % (text, r.stderr))

    def check_error(self, text, marker=None, occurrence=1, after=None):
        """-t must exit 1 with `FILE:LINE:COL: message` on stderr. With marker,
        LINE:COL must be the 1-based position of the marker's `occurrence`-th
        appearance in text (the offending node)."""
        path = self.write(text)
        r = run_cli(["-t", "-c", path])
        self.assertEqual(r.returncode, 1, "config:\n%s\nstdout: %s\nstderr: %s"
                         % (text, r.stdout, r.stderr))
        self.assertNotIn("configuration OK", r.stdout)
        m = re.search(re.escape(path) + r":(\d+):(\d+): (\S.*)", r.stderr)
        self.assertIsNotNone(m, "no FILE:LINE:COL: message in stderr %r for config:\n%s"
                             % (r.stderr, text))
        if after is not None:
            idx = text.index(after) + len(after)
        elif marker is not None:
            idx = -1
            for _ in range(occurrence):
                idx = text.index(marker, idx + 1)
        if marker is not None or after is not None:
            line = text.count("\n", 0, idx) + 1
            col = idx - (text.rfind("\n", 0, idx) + 1) + 1
            self.assertEqual((int(m.group(1)), int(m.group(2))), (line, col),
                             "position of %r in stderr %r for config:\n%s"
                             % (marker, r.stderr, text))
        return r.stderr

    # ---- simple options

    def test_version(self):
        r = run_cli(["-V"])
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, "ratelimitd %s\n" % project_version())

    def test_man_page_documents_exactly_the_keys_the_parser_takes(self):
        """man/ratelimitd.yaml.5.scd has a heading line *PATH* for every key
        `ratelimitd --config-keys` lists from the parser's tables, and none
        other: the manual cannot drift from the code."""
        r = run_cli(["--config-keys"])
        self.assertEqual(r.returncode, 0, r.stderr)
        parser = r.stdout.split()
        self.assertEqual(len(parser), len(set(parser)))
        self.assertIn("redis.timeout", parser)
        self.assertIn("policies.NAME.ban.for", parser)
        with open(os.path.join(SRCDIR, "man", "ratelimitd.yaml.5.scd")) as f:
            text = f.read()
        # the key sections: from the first key heading to the example
        keys = text.split("# TOP-LEVEL KEYS", 1)[1].split("# EXAMPLE", 1)[0]
        documented = re.findall(r"^\*([A-Za-z_.\[\]]+)\*$", keys, re.M)
        self.assertEqual(len(documented), len(set(documented)), "a key documented twice")
        self.assertEqual(sorted(documented), sorted(parser))

    def test_long_version(self):
        r = run_cli(["--version"])
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(r.stdout, "ratelimitd %s\n" % project_version())

    def test_long_help(self):
        r = run_cli(["--help"])
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertEqual(r.stdout, run_cli(["-h"]).stdout)
        self.assertTrue(r.stdout.startswith("usage: ratelimitd "), r.stdout)

    def test_help_gives_a_long_form_for_every_option(self):
        """Every option of the usage line is listed as "-X, --long", and the
        long form behaves as the short one."""
        out = run_cli(["--help"]).stdout
        shorts = re.findall(r"\[-([a-zA-Z])\b", out.splitlines()[0])
        self.assertEqual(sorted(shorts), ["V", "c", "h", "p", "t"], out)
        longs = dict(re.findall(r"^  -([a-zA-Z]), --([a-z-]+)\b", out, re.M))
        self.assertEqual(sorted(longs), sorted(shorts), out)
        good = self.write(BASE)
        for short, long in longs.items():
            args = {"c": ["-t", "-%s", good], "t": ["-%s", "-c", good],
                    "p": ["-t", "-c", good, "-%s", os.path.join(self.tmpdir, "pid")]
                    }.get(short, ["-%s"])
            a = run_cli([x % short if x == "-%s" else x for x in args])
            b = run_cli([x % ("-" + long) if x == "-%s" else x for x in args])
            self.assertEqual((a.returncode, a.stdout, a.stderr),
                             (b.returncode, b.stdout, b.stderr), "-%s vs --%s" % (short, long))
            self.assertEqual(b.returncode, 0, "--%s: %s" % (long, b.stderr))

    def test_long_config_and_test(self):
        good = self.write(BASE)
        for args in (["--test", "--config", good], ["--config=%s" % good, "--test"]):
            r = run_cli(args)
            self.assertEqual((r.returncode, r.stdout), (0, "configuration OK\n"), (args, r.stderr))
        bad = self.write(BASE + "  bad: 5/0s\n", name="bad.yaml")
        r = run_cli(["--test", "--config=" + bad])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn(bad + ":7:8:", r.stderr)
        self.assertNotIn("configuration OK", r.stdout)

    def test_long_bad_option(self):
        for args in (["--bogus"], ["--config"], ["--version=1"]):
            r = run_cli(args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertRegex(r.stderr, USAGE, "usage expected on stderr for %r" % args)
            self.assertEqual(r.stdout, "", args)

    def test_help(self):
        r = run_cli(["-h"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout + r.stderr, USAGE)
        self.assertIn("usage", (r.stdout + r.stderr).lower())

    def test_bad_option(self):
        r = run_cli(["-Z"])
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, USAGE, "usage expected on stderr")
        self.assertEqual(r.stdout, "")

    def test_missing_option_argument(self):
        r = run_cli(["-c"])
        self.assertEqual(r.returncode, 2, r.stderr)

    def test_missing_config_file(self):
        path = os.path.join(self.tmpdir, "nope.yaml")
        r = run_cli(["-t", "-c", path])
        self.assertEqual(r.returncode, 1)
        self.assertIn(path, r.stderr)
        self.assertNotIn("configuration OK", r.stdout)

    def test_missing_config_file_without_t(self):
        path = os.path.join(self.tmpdir, "nope.yaml")
        r = run_cli(["-c", path])
        self.assertEqual(r.returncode, 1)
        self.assertIn(path, r.stderr)

    def test_broken_config_without_t_exits_1_with_position(self):
        text = BASE + "  bad: 5/0s\n"
        path = self.write(text)
        r = run_cli(["-c", path])
        self.assertEqual(r.returncode, 1)
        self.assertIn(path + ":7:8:", r.stderr)

    # ---- -t OK

    def test_t_ok_minimal(self):
        self.check_ok(BASE)

    def test_t_ok_policies_only(self):
        self.check_ok("policies:\n  reply: 5/60s\n")

    def test_t_ok_shipped_example(self):
        path = os.path.join(SRCDIR, "conf", "ratelimitd.yaml")
        self.assertTrue(os.path.exists(path), "conf/ratelimitd.yaml must exist")
        r = run_cli(["-t", "-c", path])
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "configuration OK"), r.stderr)

    def test_t_ok_every_key_and_bounds(self):
        self.check_ok("""listen:
  - 127.0.0.1:7379
  - "[::1]:7379"
  - unix:/tmp/ratelimitd-test.sock
redis:
  address: unix:/tmp/redis.sock
  username: app
  password: s3cret
  database: 2147483647
  timeout: 60s
  connections: 64
prefix: ""
on_store_error: deny
max_line: 64
log_level: debug
policies:
  reply: 5/60s
  login: [3/1s, 20/60s]
  upload: {algorithm: funnel, capacity: 15, rate: 30/60s}
  comment:
    algorithm: sliding_window
    limits: [5/60s]
    on_store_error: error
  single:
    limits: 7/1m
  units: [1/1ms, 2/2s, 3/3m, 4/4h, 5/5d]
  maxwin: 100000/366d
  eight: [1/1ms, 2/2ms, 3/3ms, 4/4ms, 5/5ms, 6/6ms, 7/7ms, 8/8ms]
  big.funnel_-1: {algorithm: funnel, capacity: 1000000000, rate: 1000000000/1ms, on_store_error: allow}
  A23456789012345678901234567890123456789012345678901234567890123x: 1/1s
""")

    def test_t_ok_other_bounds(self):
        self.check_ok("""redis:
  database: 0
  timeout: 1ms
  connections: 1
prefix: "%s"
max_line: 1048576
on_store_error: allow
log_level: error
policies:
  p: 1/1s
""" % ("p" * 128))

    # ---- -t errors with positions

    def test_unknown_top_key(self):
        self.check_error("bogus: 1\n" + BASE, "bogus")

    def test_unknown_redis_key(self):
        self.check_error(BASE.replace("redis:\n", "redis:\n  hots: x\n"), "hots")

    def test_duplicate_top_key(self):
        self.check_error(BASE + "prefix: a\nprefix: b\n", "prefix", occurrence=2)

    def test_listen_address_given_twice(self):
        # two sockets cannot bind one address: -t once passed it, the start failed
        self.check_error(BASE.replace("  - 127.0.0.1:7379\n",
                                      "  - 127.0.0.1:7379\n  - 0.0.0.0:7379\n"),
                         "0.0.0.0:7379")

    def test_metrics_on_a_listen_address(self):
        text = BASE + "metrics:\n  listen: 127.0.0.1:7379\n"
        self.check_error(text, "listen", occurrence=2)

    def test_duplicate_policy(self):
        self.check_error(BASE + "  reply: 6/60s\n", "reply", occurrence=2)

    def test_bad_duration_zero(self):
        self.check_error(BASE + "  z: 5/0s\n", "5/0s")

    def test_bad_duration_unit(self):
        self.check_error(BASE + "  z: 5/60x\n", "5/60x")

    def test_bad_duration_too_long(self):
        self.check_error(BASE + "  z: 5/367d\n", "5/367d")

    def test_bad_rate_count_zero(self):
        self.check_error(BASE + "  z: 0/1s\n", "0/1s")

    def test_bad_rate_junk(self):
        self.check_error(BASE + "  z: lots\n", "lots")

    def test_sliding_count_too_big(self):
        self.check_error(BASE + "  z: 100001/1s\n", "100001/1s")

    def test_bad_rate_in_list(self):
        self.check_error(BASE + "  z: [3/1s, 3/1q]\n", "3/1q")

    def test_unknown_algorithm(self):
        self.check_error(BASE + "  z: {algorithm: bucket, capacity: 1, rate: 1/1s}\n", "bucket")

    def test_unknown_policy_key(self):
        self.check_error(BASE + "  z:\n    limits: [1/1s]\n    burst: 3\n", "burst")

    def test_bad_policy_name(self):
        self.check_error(BASE + "  \"bad name!\": 5/1s\n", "\"bad name!\"")

    def test_policy_name_too_long(self):
        name = "a" * 65
        self.check_error(BASE + "  %s: 5/1s\n" % name, name)

    def test_bad_on_store_error(self):
        self.check_error(BASE + "on_store_error: maybe\n", "maybe")

    def test_bad_policy_on_store_error(self):
        self.check_error(BASE + "  z: {limits: [1/1s], on_store_error: sometimes}\n", "sometimes")

    def test_max_line_too_small(self):
        self.check_error(BASE + "max_line: 63\n", after="max_line: ")

    def test_max_line_too_big(self):
        self.check_error(BASE + "max_line: 1048577\n", "1048577")

    def test_prefix_with_brace(self):
        self.check_error(BASE + "prefix: \"a{b\"\n", "\"a{b\"")

    def test_prefix_with_space(self):
        self.check_error(BASE + "prefix: \"a b\"\n", "\"a b\"")

    def test_prefix_too_long(self):
        p = "p" * 129
        self.check_error(BASE + "prefix: %s\n" % p, p)

    def test_connections_zero(self):
        self.check_error(BASE.replace("redis:\n", "redis:\n  connections: 0\n"), "0\n")

    def test_connections_too_many(self):
        self.check_error(BASE.replace("redis:\n", "redis:\n  connections: 65\n"), "65")

    def test_timeout_zero(self):
        self.check_error(BASE.replace("redis:\n", "redis:\n  timeout: 0ms\n"), "0ms")

    def test_timeout_too_long(self):
        self.check_error(BASE.replace("redis:\n", "redis:\n  timeout: 61s\n"), "61s")

    def test_database_negative(self):
        self.check_error(BASE.replace("redis:\n", "redis:\n  database: -1\n"), "-1")

    def test_bad_log_level(self):
        self.check_error(BASE + "log_level: loud\n", "loud")

    def test_funnel_capacity_zero(self):
        self.check_error(BASE + "  z: {algorithm: funnel, capacity: 0, rate: 1/1s}\n", "0,")

    def test_funnel_capacity_junk(self):
        self.check_error(BASE + "  z: {algorithm: funnel, capacity: many, rate: 1/1s}\n", "many")

    def test_funnel_missing_rate(self):
        self.check_error(BASE + "  z: {algorithm: funnel, capacity: 3}\n")

    def test_funnel_with_limits(self):
        self.check_error(BASE + "  z: {algorithm: funnel, capacity: 3, rate: 1/1s, limits: [1/1s]}\n")

    def test_duplicate_windows(self):
        self.check_error(BASE + "  z: [3/1s, 5/1000ms]\n")

    def test_nine_limits(self):
        self.check_error(BASE + "  z: [1/1ms, 2/2ms, 3/3ms, 4/4ms, 5/5ms, 6/6ms, 7/7ms, 8/8ms, 9/9ms]\n")

    def test_no_policies(self):
        self.check_error(BASE.split("policies:")[0])

    def test_empty_policies(self):
        self.check_error(BASE.split("policies:")[0] + "policies: {}\n")

    def test_yaml_syntax_error(self):
        self.check_error(BASE + "  z: [1/1s, 2/2s\n")

    def test_not_a_mapping(self):
        self.check_error("- just\n- a list\n")


if __name__ == "__main__":
    unittest.main()
