"""Issue 46, item 1: several stores in one daemon. `stores:` names stores,
each with what `redis:` takes; a policy chooses one with `store: NAME`, the
others decide in the default store (`redis:`). Two real redis-servers: each
policy's keys are in its own store's Redis only, a reload may move a policy
to another running store (never to one not running), one store stopped
leaves the other's policies deciding while its own answer per
on_store_error, and /health and /readyz name the store that is down."""

import json
import os
import unittest

from harness import SLOW, DaemonTest, free_port, http_get, run_cli, wait_until


def stores_config(port, mport, a, b, policies):
    return ("listen:\n"
            "  - {address: \"127.0.0.1:%d\", admin: true}\n"
            "redis: {address: \"%s\", timeout: 1s}\n"
            "stores:\n"
            "  eu: {address: \"%s\", timeout: 200ms}\n"
            "metrics: {listen: \"127.0.0.1:%d\"}\n"
            "policies:\n%s" % (port, a.address, b.address, mport, policies))


def keys(redis):
    return [k.decode() if isinstance(k, bytes) else k for k in redis.keys()]


POLICIES = """\
  home: 5/60s
  away: {limits: [3/60s], store: eu, on_store_error: deny}
  open: {limits: [3/60s], store: eu}
  jobs: {algorithm: concurrency, limit: 2, lease: 30s, store: eu}
"""


class StoresTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.a = self.start_redis()
        self.b = self.start_redis()
        self.port, self.mport = free_port(), free_port()
        self.daemon = self.start_daemon(
            config=stores_config(self.port, self.mport, self.a, self.b, POLICIES),
            port=self.port)

    def decide(self, line):
        with self.daemon.client() as c:
            return c.request(line)

    def test_each_policy_decides_in_its_own_store(self):
        for _ in range(3):
            self.assertTrue(self.decide("ALLOW alice home").startswith("ALLOWED"))
            self.assertTrue(self.decide("ALLOW alice away").startswith("ALLOWED"))
        # the default store's policy: 5 a minute, 2 left
        self.assertDecision(self.decide("ALLOW alice home"), "ALLOWED", limit=5,
                            remaining=1)
        # the eu store's: 3 a minute, spent
        self.assertDecision(self.decide("ALLOW alice away"), "DENIED", limit=3)
        ka, kb = keys(self.a), keys(self.b)
        self.assertTrue(ka and all("home" in k for k in ka), ka)
        self.assertTrue(kb and all("away" in k for k in kb), kb)
        # RESET and STATE go to the policy's store
        self.assertTrue(self.decide("RESET alice away").startswith("OK"))
        self.assertEqual([k for k in keys(self.b) if "away" in k], [])
        self.assertDecision(self.decide("ALLOW alice away"), "ALLOWED", remaining=2)
        # one store call decides a MALLOW: policies on two stores are refused
        r = self.decide("MALLOW alice home alice away")
        self.assertTrue(r.startswith("ERR") and "different stores" in r, r)
        r = self.decide("MALLOW bob away bob open")
        self.assertFalse(r.startswith("ERR"), r)
        self.assertTrue(any("open" in k for k in keys(self.b)))
        self.assertFalse(any("open" in k for k in keys(self.a)))

    def test_leases_holds_and_state_on_the_policys_store(self):
        # one connection: a line connection's leases go when it closes
        with self.daemon.client() as c:
            r = c.request("ACQUIRE alice jobs")
            self.assertTrue(r.startswith("ALLOWED"), r)
            self.assertTrue(any("jobs" in k for k in keys(self.b)))
            self.assertFalse(any("jobs" in k for k in keys(self.a)))
            self.assertTrue(c.request("RELEASE %s" % r.split()[-1]).startswith("OK"))
        r = self.decide("HOLD bob away 2")
        self.assertTrue(r.startswith("ALLOWED"), r)
        self.assertTrue(self.decide("SETTLE %s 1" % r.split()[-1]).startswith("ALLOWED"))
        r = self.decide("STATE bob away")
        self.assertTrue(r.startswith("STATE"), r)
        # one unit used in eu's Redis, none in the default one
        self.assertDecision(self.decide("ALLOW bob away"), "ALLOWED", remaining=1)
        self.assertFalse(any("away" in k for k in keys(self.a)))

    def test_a_reload_moves_a_policy_to_a_running_store_only(self):
        moved = POLICIES.replace("home: 5/60s", "home: {limits: [5/60s], store: eu}")
        n = len(self.daemon.log_lines())
        self.daemon.reload(stores_config(self.port, self.mport, self.a, self.b, moved))
        self.daemon.wait_log(r"reload: configuration .* loaded", start=n)
        self.assertTrue(self.decide("ALLOW carol home").startswith("ALLOWED"))
        self.assertTrue(any("home" in k for k in keys(self.b)))
        self.assertFalse(any("home" in k for k in keys(self.a)))
        # a store added by a reload is not running: the reload is refused
        added = stores_config(self.port, self.mport, self.a, self.b, moved).replace(
            "stores:\n", "stores:\n  us: {address: \"%s\"}\n" % self.a.address).replace(
            "home: {limits: [5/60s], store: eu}", "home: {limits: [5/60s], store: us}")
        self.assertIn("store: us", added)
        n = len(self.daemon.log_lines())
        self.daemon.reload(added)
        self.daemon.wait_log(r"reload failed, keeping the running configuration: "
                             r"policies\.\w+\.store: store us is not running", start=n)
        self.decide("ALLOW dave away")
        self.assertTrue(any("away" in k for k in keys(self.b)))

    def test_one_store_down_the_other_decides_and_health_names_it(self):
        wait_until(lambda: http_get(self.mport, "/health")[0] == 200, 5 * SLOW,
                   what="healthy with both stores")
        self.assertIn('ratelimitd_store_up{store="eu"} 1\n', http_get(self.mport)[2])
        self.b.stop()
        self.assertDecision(self.decide("ALLOW erin home"), "ALLOWED", remaining=4)
        # away: on_store_error: deny; open: the top level's allow
        wait_until(lambda: self.decide("ALLOW erin away").startswith("DENIED"), 5 * SLOW,
                   what="away denied while eu is down")
        self.assertTrue(self.decide("ALLOW erin open").startswith("ALLOWED"))
        for path in ("/health", "/readyz"):
            wait_until(lambda p=path: http_get(self.mport, p)[0] == 503, 5 * SLOW,
                       what="%s 503" % path)
            status, _, body = http_get(self.mport, path)
            self.assertTrue(body.startswith("store eu: "), body)
        body = http_get(self.mport)[2]
        self.assertIn('ratelimitd_store_up{store="default"} 1\n', body)
        self.assertIn('ratelimitd_store_up{store="eu"} 0\n', body)
        state = json.loads(http_get(self.mport, "/console/state")[2])
        self.assertEqual(state["store"]["status"], "ok")
        self.assertEqual([(x["name"], x["status"]) for x in state["stores"]], [("eu", "down")])
        self.assertTrue(state["stores"][0]["why"], state["stores"])


class EnvoyStoreTest(DaemonTest):
    def test_envoy_rules_decide_in_envoy_store(self):
        a, b = self.start_redis(), self.start_redis()
        with open(os.path.join(self.tmpdir, "rules.yaml"), "w") as f:
            f.write("domain: edge\ndescriptors:\n  - key: remote_address\n"
                    "    rate_limit: {unit: minute, requests_per_unit: 3}\n")
        port, mport = free_port(), free_port()
        text = stores_config(port, mport, a, b, POLICIES).replace(
            "policies:\n", "envoy: {config: rules.yaml, store: eu}\npolicies:\n")
        daemon = self.start_daemon(config=text, port=port)
        state = json.loads(http_get(mport, "/console/state")[2])
        rule = next(x["name"] for x in state["actions"] if x["kind"] == "envoy")
        with daemon.client() as c:
            r = c.request("ALLOW 10.0.0.1 %s" % rule)
        self.assertTrue(r.startswith("ALLOWED"), r)
        self.assertTrue(any(rule in k for k in keys(b)), keys(b))
        self.assertFalse(any(rule in k for k in keys(a)), keys(a))
        # a reload back to the default store applies at once
        n = len(daemon.log_lines())
        daemon.reload(text.replace(", store: eu}", "}"))
        daemon.wait_log(r"reload: envoy\.store eu -> \(default\)", start=n)
        with daemon.client() as c:
            c.request("ALLOW 10.0.0.2 %s" % rule)
        self.assertTrue(any(rule in k for k in keys(a)), keys(a))


class StoresConfigTest(DaemonTest):
    def test_bad_stores_are_errors_at_their_line(self):
        base = ("redis: {address: \"127.0.0.1:6379\"}\n"
                "stores:\n"
                "  eu: {address: \"127.0.0.1:6380\"}\n"
                "policies:\n"
                "  a: {limits: [5/60s], store: %s}\n")
        self.assertConfigChecks([
            (base % "eu", None),
            (base % "us", "t.yaml:5:31: policies.a.store: no store us in stores:"),
            (base.replace("  eu:", "  default:") % "default", "t.yaml:3:3: stores: "),
            (base.replace("  eu:", "  EU:") % "eu", "t.yaml:3:3: stores: a store's name"),
            # blocks on a store of stores: its RESETs are followed too
            (base.replace("5/60s], store: %s", "5/60s], store: eu, algorithm: fixed_window, blocks: {max: 5}"),
             None),
            ("envoy: {config: r.yaml, store: us}\n" + base % "eu",
             "t.yaml:1:32: envoy.store: no store us in stores:"),
            ("on_store_error: local\n" + base % "eu",
             "t.yaml:6:31: policies.a.store: on_store_error: local is the default store's only"),
        ])

    def test_the_key_lists_name_the_stores_keys(self):
        r = run_cli(["--reload-keys"])
        kinds = dict(ln.split() for ln in r.stdout.splitlines())
        self.assertEqual(kinds["stores"], "restart")
        self.assertEqual(kinds["stores.NAME.address"], "restart")
        self.assertEqual(kinds["stores.NAME.timeout"], "applies")
        self.assertEqual(kinds["policies.NAME.store"], "per-policy")


if __name__ == "__main__":
    unittest.main()
