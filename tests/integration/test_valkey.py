"""test_valkey.py - the decision tests against Valkey 8 (issue 45, item 6):
valkey-server, valkey-sentinel and valkey-cli from Debian 12's
bookworm-backports (scripts/lib.sh, RL_VALKEY_PACKAGES) in place of Redis 7,
with the other tests' own classes, not copies: every algorithm's vectors in
the script, the golden transcripts, leases, holds, blocks, ACL refusals, TLS,
Sentinel (with failovers) and Cluster.

The short form: the tests of those classes that speak to a store, one of
each kind where several only vary the traffic. scripts/valkey-check runs the
whole modules (and more) against Valkey. Every server and sentinel started
must say it is Valkey 8 (harness.check_server_name, RL_REDIS_NAME), and the
run must have started standalone servers, sentinels and cluster nodes.
"""

import os
import shutil
import subprocess
import sys
import unittest


def _valkey(name):
    path = shutil.which(name)
    if not path:
        sys.exit("test_valkey: %s not found: install %s from bookworm-backports "
                 "(scripts/test does)" % (name, "valkey-server valkey-sentinel valkey-tools"))
    return path


# Before the harness is imported: it reads these once.
os.environ["RL_REDIS_SERVER"] = _valkey("valkey-server")
os.environ["RL_REDIS_SENTINEL"] = _valkey("valkey-sentinel")
os.environ["RL_REDIS_CLI"] = _valkey("valkey-cli")
os.environ["RL_REDIS_NAME"] = "valkey"

import harness  # noqa: E402
import test_acl  # noqa: E402
import test_blocks  # noqa: E402
import test_calendar  # noqa: E402
import test_charge  # noqa: E402
import test_cluster  # noqa: E402
import test_golden  # noqa: E402
import test_leases  # noqa: E402
import test_sentinel  # noqa: E402
import test_tls_redis  # noqa: E402
import test_vectors  # noqa: E402
from harness import DaemonTest  # noqa: E402
from topology import parse_info  # noqa: E402

# (class, [test names]; None: all of them)
SHORT_FORM = [
    # every algorithm, op and short form of the script, time injected
    (test_vectors.LuaVectors, None),
    (test_golden.GoldenTest, None),
    (test_calendar.CalendarTest, ["test_reset_is_the_boundary", "test_runtime_override_zone"]),
    # leases: ACQUIRE, RELEASE, RENEW, expiry, three daemons
    (test_leases.LeasesTest, ["test_three_daemons_never_hold_more_than_the_limit",
                              "test_a_killed_client_releases_its_leases",
                              "test_release_renew_and_expiry"]),
    # holds: HOLD, SETTLE, CANCEL; charges
    (test_charge.ChargeTest, ["test_three_daemons_sum_exactly",
                              "test_holds_settle_to_the_actual_cost_across_three_daemons",
                              "test_hold_expiry_and_front_ends"]),
    # blocks for hot keys
    (test_blocks.BlocksTest, ["test_fixed_window_three_daemons_allow_exactly_the_limit",
                              "test_reset_override_and_reload_revoke_blocks"]),
    # the ACL check and refusals (Valkey words them its own way)
    (test_acl.AclTest, None),
    (test_tls_redis.TlsRedisTest, ["test_every_algorithm_decides_over_tls",
                                   "test_client_certificate_when_redis_asks_for_one",
                                   "test_a_wrong_ca_fails_loudly"]),
    # Sentinel: SENTINEL FAILOVER followed, and a master killed under TLS
    (test_sentinel.SentinelFailoverTest, ["test_follows_sentinel_failover_command"]),
    (test_leases.LeasesSentinelTest, None),
    (test_charge.ChargeSentinelTest, None),
    (test_tls_redis.TlsTopologyTest, ["test_sentinel_follows_a_failover_over_tls",
                                      "test_cluster_three_daemons_exact_and_a_failover"]),
    # Cluster: every node, leases, holds and blocks across masters
    (test_cluster.ClusterBasicsTest, ["test_allow_peek_reset_on_every_node"]),
    (test_leases.LeasesClusterTest, None),
    (test_charge.ChargeClusterTest, None),
    (test_blocks.BlocksClusterTest, None),
]


class ValkeyServersTest(DaemonTest):
    """The servers started are Valkey 8, and the Redis the other tests use
    is still Redis 7 (installing Valkey replaced nothing)."""

    def test_valkey_8_and_redis_7_side_by_side(self):
        info = parse_info(self.start_redis().call("INFO", "server"))
        self.assertEqual(info.get("server_name"), "valkey", info)
        self.assertRegex(info.get("valkey_version", ""), r"^8\.", info)
        redis = shutil.which("redis-server")
        self.assertIsNotNone(redis, "redis-server is gone")
        self.assertNotEqual(os.path.realpath(redis),
                            os.path.realpath(harness.REDIS_SERVER))
        out = subprocess.run([redis, "--version"], capture_output=True, timeout=10)
        self.assertRegex(out.stdout.decode(), r"^Redis server v=7\.")


class ValkeyEveryModeTest(unittest.TestCase):
    """Run last: the short form started Valkey in every mode it tests
    (each one checked as it started, by harness.check_server_name)."""

    def test_standalone_sentinel_and_cluster_were_valkey(self):
        for mode in ("standalone", "sentinel", "cluster"):
            self.assertGreater(harness.SERVERS_SEEN.get(mode, 0), 0,
                               "no Valkey server in %s mode was started: %r"
                               % (mode, harness.SERVERS_SEEN))


def load_tests(loader, tests, pattern):
    suite = unittest.TestSuite()
    suite.addTest(ValkeyServersTest("test_valkey_8_and_redis_7_side_by_side"))
    for cls, names in SHORT_FORM:
        if names is None:
            suite.addTests(loader.loadTestsFromTestCase(cls))
        else:
            suite.addTests(cls(n) for n in names)
    suite.addTest(ValkeyEveryModeTest("test_standalone_sentinel_and_cluster_were_valkey"))
    return suite


if __name__ == "__main__":
    unittest.main()
