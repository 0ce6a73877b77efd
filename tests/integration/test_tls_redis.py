"""TLS to Redis (issue 28, item 1) with Debian's redis-server run TLS-only
(`--port 0 --tls-port P`), certificates made by openssl in the test
(pki.py): every algorithm decides over TLS; a Redis that asks for client
certificates, with and without ours; a wrong CA, a wrong name and an
expired certificate each fail loudly (the log, /health's 503 naming the
cause, the TLS failure counter) and are answered per on_store_error;
server_name; certificates re-read on SIGHUP (a bad file keeps the ones
loaded before); `ratelimitd -t` on files that do not load."""

import os
import random
import re
import shutil
import signal
import threading
import time
import unittest

from harness import (FALLBACK_ALLOW, FALLBACK_DENY, SLOW, Client, DaemonTest, RedisTls,
                     free_port, http_get, is_real, make_config, parse_decision, run_cli,
                     scrape_metrics, wait_until)
from pki import Pki
from slots import key_slot, users_in_slots
from topology import (add_cluster, add_sentinels, cluster_redis_opts,
                      sentinel_redis_opts)

POLICIES = {
    "sw": "{algorithm: sliding_window, limits: 3/60s}",
    "swc": "{algorithm: sliding_window_counter, limits: 3/60s}",
    "fw": "{algorithm: fixed_window, limits: 3/60s}",
    "fun": "{algorithm: funnel, capacity: 3, rate: 1/60s}",
    "open": "{limits: 100/60s, on_store_error: allow}",
    "shut": "{limits: 100/60s, on_store_error: deny}",
}


class TlsRedisTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.pki = Pki(self.tmpdir)

    def tls_redis(self, **kw):
        return self.start_redis(tls=RedisTls(self.pki, **kw))

    def daemon(self, redis, tls, port=None, wait=True):
        """A daemon on redis with redis.tls = tls (raw YAML); a metrics port."""
        self.port = port or free_port()
        self.mport = free_port()
        ropts = {"address": redis.address, "timeout": "500ms", "tls": tls}
        text = make_config(["127.0.0.1:%d" % self.port], ropts, POLICIES,
                           metrics='{listen: "127.0.0.1:%d"}' % self.mport)
        self.config_text = text
        d = self.start_daemon(config=text, port=self.port, wait=wait)
        return d

    def wait_up(self, d):
        wait_until(lambda: http_get(self.mport, "/health")[::2] == (200, "ok\n"), 10 * SLOW,
                   what="/health 200 over TLS")

    def assert_down(self, d, cause):
        """The daemon cannot reach Redis for `cause`: logged, /health 503
        naming it, counted, and answered per on_store_error."""
        d.wait_log(r"^warn: redis 127\.0\.0\.1:\d+ \(TLS\) unavailable: TLS( handshake)?: "
                   r".*%s.*; answering per on_store_error" % cause, timeout=10 * SLOW)
        wait_until(lambda: http_get(self.mport, "/health")[0] == 503, 5 * SLOW,
                   what="/health 503")
        status, _, body = http_get(self.mport, "/health")
        self.assertRegex(body, r"^redis unavailable: TLS( handshake)?: .*%s" % cause)
        self.assertGreater(scrape_metrics(self.mport)["ratelimitd_redis_tls_failures_total"], 0)
        with d.client() as c:
            self.assertRegex(c.request("ALLOW u open"), FALLBACK_ALLOW)
            self.assertRegex(c.request("ALLOW u shut"), FALLBACK_DENY)

    # ---- deciding over TLS

    def test_every_algorithm_decides_over_tls(self):
        redis = self.tls_redis()
        d = self.daemon(redis, "{ca_file: %s}" % self.pki.ca)
        self.wait_up(d)
        with d.client() as c:
            for p in ("sw", "swc", "fw", "fun"):
                got = [parse_decision(c.request("ALLOW alice %s" % p))[:3] for _ in range(4)]
                self.assertEqual(got, [("ALLOWED", 3, 2), ("ALLOWED", 3, 1), ("ALLOWED", 3, 0),
                                       ("DENIED", 3, 0)], p)
                self.assertEqual(parse_decision(c.request("PEEK alice %s" % p))[0], "DENIED")
            self.assertEqual(c.request("RESET alice sw"), "OK")
            self.assertEqual(parse_decision(c.request("ALLOW alice sw"))[:3],
                             ("ALLOWED", 3, 2))
        # the state is in the TLS-only Redis
        keys = [k.decode() for k in redis.keys("*alice*")]
        self.assertTrue(any("{sw:alice}" in k for k in keys), keys)
        self.assertTrue(any("{fun:alice}" in k for k in keys), keys)
        self.assertEqual(scrape_metrics(self.mport)["ratelimitd_redis_tls_failures_total"], 0)

    def test_client_certificate_when_redis_asks_for_one(self):
        redis = self.tls_redis(auth_clients=True)
        d = self.daemon(redis, "{ca_file: %s}" % self.pki.ca)
        # Redis refuses a client without a certificate (TLS 1.3: just after the handshake)
        # (or a reset overtaking the alert: said as such)
        self.assert_down(d, "(certificate required|our client certificate refused\\?)")
        d.stop()
        d = self.daemon(redis, "{ca_file: %s, cert_file: %s, key_file: %s}"
                        % (self.pki.ca, self.pki.client_cert, self.pki.client_key))
        self.wait_up(d)
        with d.client() as c:
            self.assertEqual(parse_decision(c.request("ALLOW bob fw"))[:3], ("ALLOWED", 3, 2))

    def test_a_wrong_ca_fails_loudly(self):
        redis = self.tls_redis()
        d = self.daemon(redis, "{ca_file: %s}" % self.pki.other_ca)
        self.assert_down(d, "certificate verify failed: (unable to get local issuer "
                            "certificate|self-signed certificate in certificate chain)")

    def test_a_wrong_name_fails_loudly(self):
        cert, key = self.pki.cert("wrong-name", dns=["elsewhere.example"])
        redis = self.tls_redis(cert=cert, key=key)
        d = self.daemon(redis, "{ca_file: %s}" % self.pki.ca)
        self.assert_down(d, "certificate verify failed: (IP address mismatch|hostname mismatch)")

    def test_an_expired_certificate_fails_loudly(self):
        cert, key = self.pki.cert("expired", ips=["127.0.0.1"], expired=True)
        redis = self.tls_redis(cert=cert, key=key)
        d = self.daemon(redis, "{ca_file: %s}" % self.pki.ca)
        self.assert_down(d, "certificate verify failed: certificate has expired")

    def test_server_name_verifies_every_server_as_that_name(self):
        cert, key = self.pki.cert("named", dns=["redis.internal"])
        redis = self.tls_redis(cert=cert, key=key)
        d = self.daemon(redis, "{ca_file: %s, server_name: redis.internal}" % self.pki.ca)
        self.wait_up(d)
        with d.client() as c:
            self.assertEqual(parse_decision(c.request("ALLOW carol sw"))[:3], ("ALLOWED", 3, 2))

    def test_a_plaintext_redis_is_not_spoken_to_in_clear(self):
        """tls on, but the Redis speaks plain RESP: it waits for the end of
        an inline command that never comes, the handshake times out, and
        nothing is sent in clear."""
        redis = self.start_redis()
        d = self.daemon(redis, "{ca_file: %s}" % self.pki.ca)
        self.assert_down(d, "timed out")
        self.assertEqual(redis.keys("*"), [])

    def test_plaintext_to_a_tls_only_redis_says_redis_may_want_tls(self):
        """No redis.tls, and the Redis takes TLS only: it resets each
        connection at its first command. The log and /health say that
        Redis may want TLS, not only "Connection reset by peer"."""
        redis = self.tls_redis()
        d = self.daemon(redis, "{enabled: false}")  # plain text
        hint = (r"before any reply \(does Redis want TLS\? redis\.tls in the "
                r"configuration\)")
        d.wait_log(r"^warn: redis 127\.0\.0\.1:\d+ unavailable: (Connection reset by peer|"
                   r"Server closed the connection) %s; answering per on_store_error" % hint,
                   timeout=10 * SLOW)
        wait_until(lambda: http_get(self.mport, "/health")[0] == 503, 5 * SLOW,
                   what="/health 503")
        self.assertRegex(http_get(self.mport, "/health")[2],
                         r"^redis unavailable: .* %s\n$" % hint)
        with d.client() as c:
            self.assertRegex(c.request("ALLOW u open"), FALLBACK_ALLOW)

    # ---- reloads

    def test_reload_reads_the_certificates_again(self):
        redis = self.tls_redis(auth_clients=True)
        cert = os.path.join(self.tmpdir, "rl.pem")
        key = os.path.join(self.tmpdir, "rl.key")
        shutil.copy(self.pki.client_cert, cert)
        shutil.copy(self.pki.client_key, key)
        d = self.daemon(redis, "{ca_file: %s, cert_file: %s, key_file: %s}"
                        % (self.pki.ca, cert, key))
        self.wait_up(d)

        def kill_clients():
            """Redis drops every client: the daemon reconnects with what it holds."""
            redis.call("CLIENT", "KILL", "TYPE", "normal")
            redis.call("CLIENT", "KILL", "TYPE", "pubsub")

        # 1. a file that does not load: logged, the loaded ones stay
        with open(key, "w") as f:
            f.write("not a key\n")
        n = len(d.log_lines())
        d.signal(signal.SIGHUP)
        d.wait_log(r"^error: reload: redis\.tls: key_file %s: .*; new Redis connections keep "
                   r"the certificates loaded before" % key, start=n, timeout=5 * SLOW)
        kill_clients()
        self.wait_up(d)
        with d.client() as c:
            wait_until(lambda: parse_decision(c.request("ALLOW dave fw"))[0] == "ALLOWED"
                       and scrape_metrics(self.mport)["ratelimitd_redis_connections_up"] >= 1,
                       10 * SLOW, what="decisions over the certificates loaded before")
        self.assertEqual(d.running(), True)

        # 2. a certificate Redis does not trust: read again, and used by the next connections
        other, okey = self.pki.cert("untrusted-client", client=True, ca="other-ca")
        shutil.copy(other, cert)
        shutil.copy(okey, key)
        n = len(d.log_lines())
        d.signal(signal.SIGHUP)
        d.wait_log(r"^info: reload: redis\.tls certificates read again", start=n,
                   timeout=5 * SLOW)
        kill_clients()
        wait_until(lambda: http_get(self.mport, "/health")[0] == 503, 10 * SLOW,
                   what="reconnects refused with the untrusted certificate")
        wait_until(lambda: re.match(r"redis unavailable: TLS: (tlsv1 alert unknown ca|.* right "
                                    r"after the handshake \(our client certificate "
                                    r"refused\?\))\n$", http_get(self.mport, "/health")[2]),
                   10 * SLOW, what="/health to name the refused certificate")

        # 3. the good one back: reconnects without a restart
        shutil.copy(self.pki.client_cert, cert)
        shutil.copy(self.pki.client_key, key)
        n = len(d.log_lines())
        d.signal(signal.SIGHUP)
        d.wait_log(r"^info: reload: redis\.tls certificates read again", start=n,
                   timeout=5 * SLOW)
        self.wait_up(d)
        with d.client() as c:
            self.assertEqual(parse_decision(c.request("ALLOW frank fw"))[0], "ALLOWED")

    # ---- the command line

    def test_dash_t_names_a_file_that_does_not_load(self):
        port = free_port()
        text = make_config(["127.0.0.1:%d" % port],
                           {"address": "127.0.0.1:6390",
                            "tls": "{ca_file: %s/missing.pem}" % self.tmpdir}, POLICIES)
        path = os.path.join(self.tmpdir, "t.yaml")
        with open(path, "w") as f:
            f.write(text)
        r = run_cli(["-t", "-c", path])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertEqual(r.stderr, "%s: redis.tls: ca_file %s/missing.pem: No such file or "
                         "directory\n" % (path, self.tmpdir))
        # a key that is not one
        with open(os.path.join(self.tmpdir, "bad.key"), "w") as f:
            f.write("garbage\n")
        text = make_config(["127.0.0.1:%d" % port],
                           {"address": "127.0.0.1:6390",
                            "tls": "{cert_file: %s, key_file: %s/bad.key}"
                                   % (self.pki.client_cert, self.tmpdir)}, POLICIES)
        with open(path, "w") as f:
            f.write(text)
        r = run_cli(["-t", "-c", path])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertRegex(r.stderr, r"^%s: redis\.tls: key_file %s/bad\.key: \S.*\n$"
                         % (path, self.tmpdir))
        # relative paths are the configuration file's directory's
        shutil.copy(self.pki.ca, os.path.join(self.tmpdir, "ca.pem"))
        with open(path, "w") as f:
            f.write(make_config(["127.0.0.1:%d" % port],
                                {"address": "127.0.0.1:6390", "tls": "{ca_file: ca.pem}"},
                                POLICIES))
        r = run_cli(["-t", "-c", path])
        self.assertEqual((r.returncode, r.stdout), (0, "configuration OK\n"), r.stderr)


class TlsTopologyTest(DaemonTest):
    """A Cluster with tls-cluster yes and a Sentinel set, TLS only: every
    node, every sentinel and the masters they name are reached over TLS."""

    def setUp(self):
        super().setUp()
        self.pki = Pki(self.tmpdir)
        self.tls_yaml = "{ca_file: %s, cert_file: %s, key_file: %s}" % (
            self.pki.ca, self.pki.client_cert, self.pki.client_key)

    def test_cluster_three_daemons_exact_and_a_failover(self):
        """Three daemons, 24 connections pipelining ALLOWs for 300 users over
        every master: for each (user, action) exactly the limit is allowed,
        each with its own remaining. Then a master is killed: its users are
        answered per on_store_error, then by the promoted replica, over TLS."""
        cl = add_cluster(self, replicas=1, full_coverage=False,
                         tls=RedisTls(self.pki, auth_clients=True, cluster=True))
        pol = {"ex": "4/60s", "exf": "{algorithm: funnel, capacity: 3, rate: 1/60s}",
               "big": "100000/60s"}
        limits = {"ex": (4, 6), "exf": (3, 5)}
        ds = []
        for i in range(3):
            port = free_port()
            ropts = cluster_redis_opts(cl, timeout="%dms" % int(300 * SLOW),
                                       tls=self.tls_yaml, connections=1 + i)
            ds.append(self.start_daemon(config=make_config(["127.0.0.1:%d" % port], ropts, pol),
                                        port=port, name="rl%d" % i))
        for d in ds:
            with d.client(timeout=10 * SLOW) as c:
                wait_until(lambda: is_real(c.request("PEEK ready big")), 10 * SLOW,
                           interval=0.05, what="decisions over TLS from the cluster")
        users = ["x%d" % i for i in range(300)]
        reqs = [("ALLOW %s %s" % (u, a)) for u in users for a, (_, n) in limits.items()
                for _ in range(n)]
        random.Random(7).shuffle(reqs)
        nconn = 24
        results, errors, lock = [], [], threading.Lock()

        def run(i):
            try:
                with Client(port=ds[i % 3].port, timeout=30 * SLOW) as c:
                    mine = reqs[i::nconn]
                    out = []
                    for k in range(0, len(mine), 50):
                        chunk = mine[k:k + 50]
                        out += list(zip(chunk, c.pipeline(chunk, timeout=30 * SLOW)))
                with lock:
                    results.extend(out)
            except BaseException as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))
        ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(nconn)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120 * SLOW)
        self.assertEqual(errors, [])
        self.assertEqual(len(results), len(reqs))
        self.assertEqual([r for r in results if not is_real(r[1])][:5], [])
        per = {}
        for ln, r in results:
            per.setdefault(ln, []).append(parse_decision(r))
        for ln, vs in per.items():
            lim = limits[ln.split()[2]][0]
            allowed = sorted(v[2] for v in vs if v[0] == "ALLOWED")
            self.assertEqual(allowed, list(range(lim)), "%s: remaining seen %s" % (ln, allowed))
        # every master holds keys: TLS reached all of them
        holders = {n.address for n in cl.masters() if n.keys("rl:*")}
        self.assertEqual(len(holders), 3, holders)

        # a master dies: its replica is promoted; the daemons follow over TLS
        victim = cl.masters()[0]
        vslots = set(cl.slots_of(victim))
        vus = users_in_slots("big", vslots, 10, name="v")
        cl.wait_replicated(victim)
        cl.kill(victim)
        new, _ = cl.wait_failover(victim)
        with ds[0].client(timeout=10 * SLOW) as c:
            wait_until(lambda: all(is_real(r) for r in
                                   c.pipeline(["ALLOW %s big" % u for u in vus])),
                       30 * SLOW, interval=0.1, what="the promoted replica deciding over TLS")
        self.assertTrue(any(key_slot(k) in vslots for k in new.keys("rl:*")))

    def test_sentinel_follows_a_failover_over_tls(self):
        ss = add_sentinels(self, replicas=1, tls=RedisTls(self.pki, auth_clients=True))
        port, mport = free_port(), free_port()
        ropts = sentinel_redis_opts(ss.addresses(), timeout="%dms" % int(300 * SLOW),
                                    tls=self.tls_yaml)
        d = self.start_daemon(config=make_config(["127.0.0.1:%d" % port], ropts,
                                                 {"reply": "5/60s", "big": "100000/60s"},
                                                 metrics='{listen: "127.0.0.1:%d"}' % mport),
                              port=port)
        with d.client(timeout=10 * SLOW) as c:
            wait_until(lambda: is_real(c.request("PEEK ready big")), 10 * SLOW, interval=0.05,
                       what="decisions over TLS from the master the sentinels name")
            self.assertEqual([r.split()[0] for r in c.pipeline(["ALLOW cap reply"] * 6)],
                             ["ALLOWED"] * 5 + ["DENIED"])
            old = ss.current_master()
            self.assertIn(b"rl:{reply:cap}:s60000", old.keys())
            ss.wait_replicated()
            ss.kill_master()
            new, _ = ss.wait_failover(old)
            wait_until(lambda: is_real(c.request("ALLOW after big")), 30 * SLOW,
                       interval=0.1, what="decisions from the new master over TLS")
            self.assertEqual(c.request("PEEK cap reply").split()[:3], ["DENIED", "5", "0"])
            self.assertIn(b"rl:{big:after}:s60000", new.keys())
        self.assertEqual(scrape_metrics(mport)["ratelimitd_redis_tls_failures_total"], 0)


if __name__ == "__main__":
    unittest.main()
