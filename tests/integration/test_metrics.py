"""The HTTP metrics endpoint (metrics.listen): /metrics counts exactly what
the daemon answered, /health follows Redis, reloads are counted, and the
endpoint stays calm with bad HTTP."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import unittest
import urllib.parse
import urllib.request

import yaml

from harness import (DAEMON, SLOW, SRCDIR, Client, DaemonTest, free_port, http_get,
                     make_config, parse_decision, run_cli, start_prometheus, wait_until)
from harness import scrape_metrics as scrape
from rls_client import RlsClient, overall
from test_haproxy import notify as spop_notify
from test_haproxy import spop_connect
import resp

def buckets(m, name):
    """[(le, cumulative count)] of histogram `name` ('family{label="x"}' or
    'family'), in the scrape's order, +Inf last."""
    fam, _, label = name.partition("{")
    label = label.rstrip("}")
    out = []
    for k, v in m.items():
        mo = re.match(r'^%s_bucket\{(.*?),?le="([^"]+)"\}$' % re.escape(fam), k)
        if mo and mo.group(1) == label:
            out.append((float(mo.group(2)), v))
    return out


def series(m, name, suffix):
    fam, brace, label = name.partition("{")
    return m[fam + suffix + brace + label]


def check_histogram(test, m, name):
    """Buckets cumulative, ascending, +Inf equal to _count."""
    b = buckets(m, name)
    test.assertGreaterEqual(len(b), 8, name)
    test.assertEqual([le for le, _ in b], sorted(le for le, _ in b), name)
    test.assertEqual(b[-1][0], float("inf"), name)
    test.assertTrue(all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1)), (name, b))
    test.assertEqual(b[-1][1], series(m, name, "_count"), name)


def decisions(m, result, source):
    return m['ratelimitd_decisions_total{result="%s",source="%s"}' % (result, source)]


class MetricsTest(DaemonTest):
    def start(self, policies, redis_opts=None, **top):
        self.redis = getattr(self, "redis", None) or self.start_redis()
        self.port, self.admin_port, self.mport = free_port(), free_port(), free_port()
        self.policies = policies
        self.redis_opts = {"address": self.redis.address, "timeout": "200ms"}
        self.redis_opts.update(redis_opts or {})
        self.top = top
        self.daemon = self.start_daemon(config=self.config(policies), port=self.port)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)
        return self.daemon

    def health_up(self):
        """/health is 200 once the daemon's Redis connections are up: it
        listens before they are (a loaded machine may ask in between)."""
        wait_until(lambda: http_get(self.mport, "/health")[0] == 200, 5 * SLOW,
                   what="/health 200")

    def config(self, policies):
        listen = ['"127.0.0.1:%d"' % self.port,
                  '{address: "127.0.0.1:%d", admin: true}' % self.admin_port]
        return make_config(listen, self.redis_opts, policies, admin=False,
                           metrics='{listen: "127.0.0.1:%d"}' % self.mport,
                           **getattr(self, "top", {}))

    def test_counters_follow_traffic(self):
        self.start({"reply": "2/60s", "open": "100/1s"})
        # denials are cached only while the RESET subscription is up
        wait_until(lambda: self.redis.call("PUBSUB", "NUMSUB", "rl:reset")[1] >= 1, 5,
                   what="the daemon's RESET subscription")
        # the daemon listens before its Redis connections are all up (a
        # loaded machine may ask in between)
        wait_until(lambda: scrape(self.mport)["ratelimitd_redis_connections_up"] == 2, 5,
                   what="both Redis connections up")
        m0 = scrape(self.mport)
        info = [k for k in m0 if k.startswith("ratelimitd_build_info{")]
        self.assertEqual(len(info), 1, info)
        self.assertTrue(info[0].startswith('ratelimitd_build_info{version="%s",libevent="2.'
                                           % run_cli(["-V"]).stdout.split()[1]), info)
        self.assertIn(',hiredis="0.14.', info[0])
        self.assertEqual(m0[info[0]], 1)
        self.assertEqual(m0["ratelimitd_redis_up"], 1)
        self.assertEqual(m0["ratelimitd_redis_connections"], 2)
        self.assertEqual(m0["ratelimitd_redis_connections_up"], 2)
        self.assertEqual(m0["ratelimitd_policies"], 2)
        # the start-up PING probe's connection may still be closing
        wait_until(lambda: scrape(self.mport)["ratelimitd_clients"] == 1, 5,
                   what="one client connected")
        now = time.time()
        self.assertTrue(now - 60 < m0["ratelimitd_start_time_seconds"] <= now + 1, m0)

        verdicts = [parse_decision(r)[0] for r in self.c.pipeline(["ALLOW u reply"] * 3)]
        self.assertEqual(verdicts, ["ALLOWED", "ALLOWED", "DENIED"])
        # Redis just denied u: the same question is answered by the deny cache
        for _ in range(4):
            self.assertEqual(parse_decision(self.c.request("ALLOW u reply"))[0], "DENIED")
        self.assertEqual(parse_decision(self.c.request("PEEK v open"))[0], "ALLOWED")
        self.assertEqual(self.c.request("PING"), "PONG")
        self.assertTrue(self.c.request("FROB u reply").startswith("ERR unknown-command "))
        self.assertTrue(self.c.request("ALLOW u nosuch").startswith("ERR unknown-action "))
        self.assertTrue(self.c.request("ALLOW u reply 0").startswith("ERR bad-cost "))
        self.assertTrue(self.c.request("RESET u reply").startswith("ERR forbidden "))
        with self.daemon.client(port=self.admin_port) as admin:
            self.assertEqual(admin.request("RESET u reply"), "OK")

        m = scrape(self.mport)

        def delta(name):
            return m[name] - m0[name]
        self.assertEqual(delta('ratelimitd_requests_total{command="allow"}'), 8)
        self.assertEqual(delta('ratelimitd_requests_total{command="peek"}'), 1)
        self.assertEqual(delta('ratelimitd_requests_total{command="reset"}'), 2)
        self.assertEqual(delta('ratelimitd_requests_total{command="ping"}'), 1)
        self.assertEqual(delta('ratelimitd_decisions_total{result="allowed",source="redis"}'), 3)
        self.assertEqual(delta('ratelimitd_decisions_total{result="denied",source="redis"}'), 1)
        self.assertEqual(delta('ratelimitd_decisions_total{result="denied",source="cache"}'), 4)
        # per action, whoever decided
        self.assertEqual(delta('ratelimitd_action_decisions_total{action="reply",result="allowed"}'),
                         2)
        self.assertEqual(delta('ratelimitd_action_decisions_total{action="reply",result="denied"}'),
                         5)
        self.assertEqual(delta('ratelimitd_action_decisions_total{action="open",result="allowed"}'),
                         1)
        self.assertEqual(delta('ratelimitd_action_decisions_total{action="open",result="denied"}'),
                         0)
        self.assertEqual(decisions(m, "allowed", "fallback"), 0)
        self.assertEqual(decisions(m, "denied", "fallback"), 0)
        for code in ("unknown-command", "unknown-action", "bad-cost", "forbidden"):
            self.assertEqual(delta('ratelimitd_errors_total{code="%s"}' % code), 1, code)
        self.assertEqual(m['ratelimitd_errors_total{code="syntax"}'], 0)
        self.assertEqual(delta("ratelimitd_clients_accepted_total"), 1)  # the admin client
        self.assertEqual(m["ratelimitd_store_pending"], 0)
        for reason in ("timeout", "unavailable", "overload", "failed"):
            self.assertEqual(m['ratelimitd_store_errors_total{reason="%s"}' % reason], 0)
        # every decision answered over the line protocol is timed, errors are not
        self.assertEqual(delta('ratelimitd_decision_duration_seconds_count{protocol="line"}'), 8)
        for other in ("resp", "http", "grpc"):
            self.assertEqual(
                m['ratelimitd_decision_duration_seconds_count{protocol="%s"}' % other], 0)
        # Redis got 3 ALLOWs, the PEEK and the RESET; the cached denials never went
        self.assertEqual(delta("ratelimitd_store_batch_size_sum"), 5)
        self.assertGreaterEqual(delta("ratelimitd_store_batch_size_count"), 3)
        self.assertEqual(delta("ratelimitd_store_round_trip_seconds_count"),
                         delta("ratelimitd_store_batch_size_count"))
        for name in ('ratelimitd_decision_duration_seconds{protocol="line"}',
                     "ratelimitd_store_round_trip_seconds", "ratelimitd_store_batch_size"):
            check_histogram(self, m, name)

    def test_names_policies_never_users_or_secrets(self):
        # docs/security.md: action names of the configuration are labels;
        # users, other actions clients send, and the Redis password are not.
        self.redis = self.start_redis(password="pw-4f1c9e")
        self.start({"reply.v2": "5/60s"}, redis_opts={"password": "pw-4f1c9e"})
        self.assertEqual(parse_decision(self.c.request("ALLOW user-8d2a reply.v2"))[0],
                         "ALLOWED")
        self.assertTrue(self.c.request("ALLOW user-8d2a act-77b0").startswith(
            "ERR unknown-action "))
        status, _, body = http_get(self.mport)
        self.assertEqual(status, 200)
        self.assertIn('ratelimitd_action_decisions_total{action="reply.v2",result="allowed"} 1',
                      body)
        for secret in ("user-8d2a", "act-77b0", "pw-4f1c9e"):
            self.assertNotIn(secret, body)

    def test_max_clients_refusals_counted(self):
        self.start({"a": "1/1s"}, max_clients=2)
        wait_until(lambda: scrape(self.mport)["ratelimitd_clients"] == 1, 5,
                   what="one client connected")
        second = self.daemon.client()
        self.addCleanup(second.close)
        self.assertEqual(second.request("PING"), "PONG")
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                self.assertTrue(s.recv(100).startswith(b"ERR too-many-clients"))
        m = scrape(self.mport)
        self.assertEqual(m['ratelimitd_errors_total{code="too-many-clients"}'], 3)
        self.assertEqual(m["ratelimitd_clients"], 2)
        self.daemon.wait_log(r"^warn: max_clients \(2\) reached; 1 connection refused so far")
        self.daemon.wait_log(r"^warn: max_clients \(2\) reached; 2 connections refused so far")

    def test_health_follows_redis(self):
        self.start({"open": "{limits: [100/1s], on_store_error: allow}",
                    "shut": "{limits: [100/1s], on_store_error: deny}"})
        # the daemon answers PING before its first Redis connection has
        # answered (a loaded machine widens that): 200 once one has
        wait_until(lambda: http_get(self.mport, "/health")[::2] == (200, "ok\n"), 5 * SLOW,
                   what="/health 200 with Redis up")
        lost0 = scrape(self.mport)["ratelimitd_redis_connections_lost_total"]
        # ready once the run-time overrides are read too (just after)
        wait_until(lambda: http_get(self.mport, "/readyz")[::2] == (200, "ok\n"), 5 * SLOW,
                   what="/readyz 200 with Redis up")
        self.assertEqual(http_get(self.mport, "/livez")[::2], (200, "ok\n"))
        self.redis.stop()
        wait_until(lambda: http_get(self.mport, "/health")[0] == 503, 5,
                   what="/health to say 503 with Redis gone")
        # not ready (taken out of a Service's endpoints), but alive: a Redis
        # outage must not restart the pod
        self.assertEqual(http_get(self.mport, "/readyz")[0], 503)
        self.assertRegex(http_get(self.mport, "/readyz")[2], r"^redis unavailable: ")
        self.assertEqual(http_get(self.mport, "/livez")[::2], (200, "ok\n"))
        # the body names why: the last connection's failure (a Redis that
        # stops may close a connection or reset it, whatever the machine's load)
        self.assertRegex(http_get(self.mport, "/health")[2],
                         r"^redis unavailable: (Connection refused|Server closed the connection|"
                         r"connection closed|Connection reset by peer)( before any reply "
                         r"\(does Redis want TLS\? redis\.tls in the configuration\))?\n$")
        self.assertEqual(parse_decision(self.c.request("ALLOW a open"))[0], "ALLOWED")
        self.assertEqual(parse_decision(self.c.request("ALLOW a shut"))[0], "DENIED")
        m = scrape(self.mport)
        self.assertEqual(m["ratelimitd_redis_up"], 0)
        self.assertEqual(m["ratelimitd_redis_connections_up"], 0)
        self.assertGreaterEqual(m["ratelimitd_redis_connections_lost_total"], lost0 + 2)
        self.assertEqual(decisions(m, "allowed", "fallback"), 1)
        self.assertEqual(decisions(m, "denied", "fallback"), 1)
        self.assertEqual(m['ratelimitd_store_errors_total{reason="unavailable"}']
                         + m['ratelimitd_store_errors_total{reason="timeout"}'], 2)

        self.redis = self.start_redis(port=self.redis.port)
        wait_until(lambda: http_get(self.mport, "/health")[0] == 200, 5,
                   what="/health back to 200 after Redis returned")
        wait_until(lambda: http_get(self.mport, "/readyz")[::2] == (200, "ok\n"), 5 * SLOW,
                   what="/readyz back to 200 after Redis returned")
        wait_until(lambda: scrape(self.mport)["ratelimitd_redis_connections_up"] == 2, 5,
                   what="both connections back")
        self.assertEqual(parse_decision(self.c.request("ALLOW a shut"))[2], 99)

    def test_not_ready_until_the_run_time_overrides_are_read(self):
        """/readyz waits for the run-time overrides: a daemon that decides
        but has not read them would allow a user an admin blocked before it
        started. /health (deciding for real) does not wait."""
        self.redis = self.start_redis()
        self.redis.call("SET", "rl:overrides", "not a hash")  # HGETALL fails: WRONGTYPE
        self.start({"a": "100/1s"})
        wait_until(lambda: http_get(self.mport, "/health")[0] == 200, 5 * SLOW,
                   what="/health 200 with Redis up")
        wait_until(lambda: "WRONGTYPE" in http_get(self.mport, "/readyz")[2], 5 * SLOW,
                   what="/readyz to name the read that fails")
        status, _, body = http_get(self.mport, "/readyz")
        self.assertEqual(status, 503)
        self.assertRegex(body, r"^run-time overrides not read yet: .*WRONGTYPE")
        self.assertEqual(parse_decision(self.c.request("ALLOW u a"))[0], "ALLOWED")

        # and it asks again calmly: a few reads a second, not one every
        # 10 ms (the pace of a first read) for as long as it fails
        def reads():
            info = self.redis.call("INFO", "commandstats").decode()
            m = re.search(r"cmdstat_hgetall:calls=(\d+)", info)
            return int(m.group(1)) if m else 0
        r0, t0 = reads(), time.monotonic()
        time.sleep(1.0)
        per_s = (reads() - r0) / (time.monotonic() - t0)
        self.assertLessEqual(per_s, 8, "reads of the overrides' hash per second")
        self.redis.call("DEL", "rl:overrides")
        wait_until(lambda: http_get(self.mport, "/readyz")[::2] == (200, "ok\n"), 5 * SLOW,
                   what="/readyz 200 once they are read")

    def test_health_says_stopping_while_draining(self):
        """After SIGTERM the daemon still answers what it owes; meanwhile
        /health and /readyz are 503 so a load balancer stops sending
        clients, and /livez stays 200 (the pod is not restarted)."""
        self.start({"a": "100/1s"}, redis_opts={"timeout": "3s"})
        # 200 once its Redis connections are up (it listens before)
        wait_until(lambda: http_get(self.mport, "/health")[0] == 200, 5, what="/health 200")
        self.redis.call("CLIENT", "PAUSE", "1500")
        self.c.send("ALLOW x a")
        time.sleep(0.1)
        self.daemon.signal(signal.SIGTERM)
        wait_until(lambda: http_get(self.mport, "/health")[::2] == (503, "stopping\n"), 1.0,
                   what="/health to say stopping during the drain")
        # Kubernetes' probes: not ready from SIGTERM on, still alive
        self.assertEqual(http_get(self.mport, "/readyz")[::2], (503, "stopping\n"))
        self.assertEqual(http_get(self.mport, "/livez")[::2], (200, "ok (stopping)\n"))
        # decided by Redis once the pause ends (1.5 s, inside the 3 s timeout)
        self.assertDecision(self.c.readline(timeout=10), "ALLOWED", 100, 99)
        self.assertEqual(self.daemon.wait_exit(10), 0)

    def test_reloads_counted(self):
        """Reloads are counted; per-action counts survive reloads by name,
        including a policy removed and brought back, and a request that was
        waiting on Redis across the reload."""
        self.start({"a": "1/1s"}, redis_opts={"timeout": "1s"})
        m0 = scrape(self.mport)
        self.assertEqual(parse_decision(self.c.request("ALLOW x a"))[0], "ALLOWED")
        time.sleep(0.01)

        def reloaded(n):
            wait_until(lambda: scrape(self.mport)['ratelimitd_reloads_total{result="ok"}'] == n,
                       5, what="reload %d to be counted" % n)
            return scrape(self.mport)

        def action(m, name, result="allowed"):
            return m.get('ratelimitd_action_decisions_total{action="%s",result="%s"}'
                         % (name, result))
        self.daemon.reload(self.config({"a": "1/1s", "b": "2/1s"}))
        m1 = reloaded(1)
        self.assertEqual(m1["ratelimitd_policies"], 2)
        self.assertGreater(m1["ratelimitd_config_last_reload_success_timestamp_seconds"],
                           m0["ratelimitd_config_last_reload_success_timestamp_seconds"])
        self.assertEqual((action(m1, "a"), action(m1, "b")), (1, 0))
        self.daemon.reload(self.config({"b": "2/1s"}))
        self.assertIsNone(action(reloaded(2), "a"), "a removed policy is not reported")
        # a request waits on a paused Redis while a reload brings "a" back:
        # it times out (1 s) and its fallback answer is counted under "a"
        self.redis.call("CLIENT", "PAUSE", "3000")
        self.daemon.reload(self.config({"a": "1/1s", "b": "2/1s"}))
        reloaded(3)
        self.c.send("ALLOW y b")
        time.sleep(0.1)
        self.daemon.reload(self.config({"a": "1/1s", "b": "2/1s", "c": "3/1s"}))
        reloaded(4)
        self.assertEqual(self.c.readline(timeout=10), "ALLOWED 2 -1 0 -1")
        m4 = scrape(self.mport)
        self.assertEqual((action(m4, "a"), action(m4, "b"), action(m4, "c")), (1, 1, 0))
        self.assertEqual(m4['ratelimitd_decisions_total{result="allowed",source="fallback"}'], 1)

        self.daemon.reload("policies: {a: nonsense}\n")
        wait_until(lambda: scrape(self.mport)['ratelimitd_reloads_total{result="failed"}'] == 1,
                   5, what="the failed reload to be counted")
        m5 = scrape(self.mport)
        self.assertEqual(m5["ratelimitd_policies"], 3)
        self.assertEqual(m5["ratelimitd_config_last_reload_success_timestamp_seconds"],
                         m4["ratelimitd_config_last_reload_success_timestamp_seconds"])

    def test_bad_http_is_refused_and_serving_goes_on(self):
        self.start({"a": "100/1s"})
        self.assertEqual(http_get(self.mport, "/nope")[0], 404)
        # POST and DELETE are the console's alone (405 elsewhere); other
        # methods than those and GET and HEAD: libevent answers 501
        self.assertEqual(http_get(self.mport, "/metrics", method="POST")[0], 405)
        self.assertEqual(http_get(self.mport, "/metrics", method="PUT")[0], 501)
        # an oversized header, garbage, and a client that says nothing
        for junk in (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n",
                     b"\x00\xff garbage\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", self.mport), timeout=5) as s:
                try:
                    s.sendall(junk)
                    got = s.recv(4096)
                except ConnectionResetError:
                    got = b""
                self.assertFalse(got.startswith(b"HTTP/1.1 200"), got[:80])
        idle = socket.create_connection(("127.0.0.1", self.mport), timeout=5)
        self.addCleanup(idle.close)
        self.assertEqual(parse_decision(self.c.request("ALLOW x a"))[0], "ALLOWED")
        self.assertEqual(scrape(self.mport)['ratelimitd_requests_total{command="allow"}'], 1)
        self.assertTrue(self.daemon.running())

    def read_all(self, s, timeout):
        """What s receives until the server closes it (b"" if reset)."""
        s.settimeout(timeout)
        got = b""
        try:
            while True:
                b = s.recv(4096)
                if not b:
                    return got
                got += b
        except ConnectionResetError:
            return got
        except socket.timeout:
            return got + b"(still open)"

    def test_slow_sender_gets_408_at_request_timeout(self):
        """A request trickled a byte at a time (slowloris) is answered 408
        at request_timeout from its first byte and closed; evhttp's own
        timeout starts again at every byte and never ended it."""
        self.start({"a": "100/1s"}, request_timeout="1s")
        self.health_up()
        s = socket.create_connection(("127.0.0.1", self.mport), timeout=5)
        self.addCleanup(s.close)
        t0 = time.monotonic()
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        got = b""
        s.settimeout(0.3)
        while time.monotonic() - t0 < 8 * SLOW:
            try:
                s.sendall(b"X")  # one byte every 0.3 s: evhttp's 10 s never ends
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                b = s.recv(4096)
            except socket.timeout:
                continue
            except ConnectionResetError:
                break
            got += b
            if not b or b"\r\n\r\n" in got:
                break
        took = time.monotonic() - t0
        got += self.read_all(s, 2)
        self.assertTrue(got.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), got[:200])
        self.assertIn(b"Connection: close\r\n", got)
        self.assertTrue(got.endswith(b"request-timeout: a request must be whole within "
                                     b"request_timeout of its first byte\n"), got)
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 5 * SLOW)
        # a whole request on a kept-alive connection, then one begun and
        # stalled: the clock starts at the second one's first byte
        with socket.create_connection(("127.0.0.1", self.mport), timeout=5) as k:
            k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            k.settimeout(5)
            first = k.recv(4096)
            self.assertTrue(first.startswith(b"HTTP/1.1 200 OK\r\n"), first)
            time.sleep(1.3)  # idle longer than request_timeout: not a request
            k.sendall(b"GET /health HTTP/1.1\r\n")
            t1 = time.monotonic()
            got = self.read_all(k, 5 * SLOW)
            self.assertTrue(got.startswith(b"HTTP/1.1 408 "), got[:80])
            self.assertGreaterEqual(time.monotonic() - t1, 0.9)
        # serving goes on
        self.assertEqual(http_get(self.mport, "/health")[0], 200)
        self.assertTrue(self.daemon.running())

    def test_idle_keep_alive_connections_close(self):
        """A kept-alive connection that sends nothing more is closed (10 s),
        as an idle API connection is at idle_timeout."""
        self.start({"a": "100/1s"})
        self.health_up()
        with socket.create_connection(("127.0.0.1", self.mport), timeout=5) as k:
            k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            k.settimeout(5)
            self.assertTrue(k.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n"))
            t0 = time.monotonic()
            self.assertEqual(self.read_all(k, 20 * SLOW), b"")
            self.assertGreaterEqual(time.monotonic() - t0, 9)

    def test_max_clients_answers_503_beyond_it(self):
        """metrics.max_clients: connections beyond it get 503 and a close
        (not a reset), those within are served, and a freed place is
        taken again; a reload applies a new bound to new connections."""
        self.start({"a": "100/1s"})
        self.health_up()
        self.top = {}
        cfg = self.config(self.policies).replace(
            "metrics: {listen:", "metrics: {max_clients: 3, listen:")
        self.assertIn("max_clients: 3", cfg)
        self.daemon.reload(cfg)
        self.daemon.wait_log(r"reload: metrics\.max_clients 64 -> 3", timeout=5 * SLOW)
        held = []
        for _ in range(3):
            h = socket.create_connection(("127.0.0.1", self.mport), timeout=5)
            self.addCleanup(h.close)
            held.append(h)
        # each held one is counted once the daemon has accepted it
        time.sleep(0.3)
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", self.mport), timeout=5) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                got = self.read_all(s, 5 * SLOW)
            self.assertTrue(got.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), got[:80])
            self.assertTrue(got.endswith(b"too-many-clients: metrics.max_clients reached; "
                                         b"try again later\n"), got)
        self.daemon.wait_log(r"^warn: metrics: metrics\.max_clients \(3\) reached; 2 "
                             r"connections refused so far", timeout=5 * SLOW)
        # the held ones are served
        held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        held[0].settimeout(5)
        self.assertTrue(held[0].recv(4096).startswith(b"HTTP/1.1 200 OK\r\n"))
        # one closes: its place is free again
        held.pop().close()
        wait_until(lambda: http_get(self.mport, "/health")[0] == 200, 5 * SLOW,
                   what="a place under max_clients again")
        self.assertTrue(self.daemon.running())

    def test_port_in_use_is_a_clear_start_error(self):
        self.redis = self.start_redis()
        busy = socket.socket()
        self.addCleanup(busy.close)
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        self.port, self.admin_port, self.mport = free_port(), free_port(), busy.getsockname()[1]
        self.redis_opts = {"address": self.redis.address}
        path = self.tmpdir + "/busy.yaml"
        with open(path, "w") as f:
            f.write(self.config({"a": "1/1s"}))
        p = subprocess.run([DAEMON, "-c", path], capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
        self.assertNotEqual(p.returncode, 0)
        # which address, and why (the errno text)
        self.assertIn("metrics.listen: cannot listen on 127.0.0.1:%d: Address already in use"
                      % self.mport, p.stderr)


RULES = """\
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
"""
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
FRONT_ENDS = ("line", "resp", "http", "grpc", "spoe")


def sample_names(m):
    """Every metric name of a scrape (histograms: _bucket, _sum and _count)."""
    return {k.partition("{")[0] for k in m}


def quantile(q, b):
    """histogram_quantile(q) over cumulative buckets [(le, count)], as
    Prometheus computes it (linear within the bucket the rank falls in)."""
    total = b[-1][1]
    rank = q * total
    for i, (le, c) in enumerate(b):
        if c >= rank:
            break
    if le == float("inf"):
        return b[-2][0]
    lo, below = (b[i - 1][0], b[i - 1][1]) if i > 0 else (0.0, 0)
    return lo + (le - lo) * (rank - below) / (c - below)


class FrontEndsTest(DaemonTest):
    """A daemon serving every front end (line, RESP, HTTP, gRPC, SPOE), scraped by
    promtool and by a real Prometheus."""

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port, self.hport, self.gport, self.mport = (free_port(), free_port(), free_port(),
                                                         free_port())
        self.sport = free_port()
        rules = os.path.join(self.tmpdir, "rules.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        conf = "\n".join([
            "listen:",
            "  - 127.0.0.1:%d" % self.port,
            "  - {address: 127.0.0.1:%d, protocol: http}" % self.hport,
            "  - {address: 127.0.0.1:%d, protocol: grpc}" % self.gport,
            "  - {address: 127.0.0.1:%d, protocol: spoe}" % self.sport,
            "redis: {address: %s}" % self.redis.address,
            "metrics: {listen: 127.0.0.1:%d}" % self.mport,
            "envoy: {config: %s}" % rules,
            "policies: {a: 100/1m}", ""])
        self.started = time.time()
        self.daemon = self.start_daemon(config=conf, port=self.port)
        wait_until(lambda: http_get(self.mport, "/health")[0] == 200, 5 * SLOW,
                   what="/health 200 with Redis up")
        self.rls = RlsClient(self.gport)
        self.addCleanup(self.rls.close)

    def serve(self, n):
        """n decisions through each front end, each checked."""
        with self.daemon.client() as c:
            for _ in range(n):
                self.assertEqual(parse_decision(c.request("ALLOW u1 a"))[0], "ALLOWED")
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(resp.encode("ALLOW", "u2", "a") * n)
            buf, got, i = b"", [], 0
            while len(got) < n:
                chunk = s.recv(4096)
                self.assertTrue(chunk, "RESP connection closed")
                buf += chunk
                while (r := resp.parse(buf, i)) is not None:
                    got.append(r[0])
                    i = r[1]
            self.assertTrue(all(isinstance(v, list) and v[0] == 1 for v in got), got)
        for _ in range(n):
            self.assertEqual(http_get(self.hport, "/v1/allow?user=u3&action=a")[0], 200)
        for _ in range(n):
            r = self.rls.call("web", [[("remote_address", "10.0.0.1")]])
            self.assertEqual(overall(r), "OK")
        s = spop_connect(self.sport)
        with s:
            for i in range(n):
                _, kv = spop_notify(s, 1, i + 1, [("action", "a"), ("user", "u4")])
                self.assertEqual(kv.get("allowed"), 1, kv)

    def test_promtool_accepts_the_exposition(self):
        self.serve(5)
        status, ctype, body = http_get(self.mport)
        self.assertEqual(status, 200)
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "", ""))
        m = scrape(self.mport)
        for fe in FRONT_ENDS:
            name = 'ratelimitd_decision_duration_seconds{protocol="%s"}' % fe
            self.assertEqual(series(m, name, "_count"), 5, fe)
            check_histogram(self, m, name)
            # each took more than nothing and, on loopback, far less than redis.timeout
            self.assertTrue(0 < series(m, name, "_sum") < 5 * 1.0, (fe, m))
        self.assertGreaterEqual(m["ratelimitd_store_round_trip_seconds_count"], 1)
        self.assertEqual(m["ratelimitd_store_batch_size_sum"], 5 * len(FRONT_ENDS))  # no denial to cache

        # the process_* families say what the kernel says
        pid = self.daemon.pid
        with open("/proc/%d/status" % pid) as f:
            status = dict(ln.split(":", 1) for ln in f)
        rss = int(status["VmRSS"].split()[0]) * 1024
        self.assertTrue(0.5 * rss < m["process_resident_memory_bytes"] < 2 * rss,
                        (rss, m["process_resident_memory_bytes"]))
        self.assertGreater(m["process_virtual_memory_bytes"], m["process_resident_memory_bytes"])
        with open("/proc/%d/limits" % pid) as f:
            soft = [ln.split()[3] for ln in f if ln.startswith("Max open files")][0]
        self.assertEqual(m["process_max_fds"], int(soft))
        # the scrape's own connection is open while the daemon counts
        self.assertTrue(0 <= m["process_open_fds"] - self.daemon.fd_count() <= 2,
                        (m["process_open_fds"], self.daemon.fd_count()))
        with open("/proc/%d/stat" % pid) as f:
            ticks = f.read().rsplit(")", 1)[1].split()[11:13]
        cpu = (int(ticks[0]) + int(ticks[1])) / os.sysconf("SC_CLK_TCK")
        self.assertTrue(0 <= cpu - m["process_cpu_seconds_total"] <= 1, cpu)
        self.assertTrue(self.started - 1 <= m["process_start_time_seconds"] <= time.time(),
                        (self.started, m["process_start_time_seconds"]))
        self.assertEqual(m["process_start_time_seconds"], m["ratelimitd_start_time_seconds"])

    def test_a_real_prometheus_scrapes_it(self):
        pport, prom = start_prometheus(
            self, "  - job_name: ratelimitd\n"
                  "    static_configs: [{targets: ['127.0.0.1:%d']}]\n" % self.mport)

        def query(expr):
            url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (pport,
                                                                 urllib.parse.quote(expr))
            with urllib.request.urlopen(url, timeout=5) as r:
                doc = json.load(r)
            self.assertEqual(doc["status"], "success", doc)
            return [(x["metric"], float(x["value"][1])) for x in doc["data"]["result"]]

        def ready():
            self.assertIsNone(prom.poll(), "prometheus exited")
            return http_get(pport, "/-/ready")[0] == 200
        wait_until(ready, 60 * SLOW, interval=0.2, what="prometheus ready")
        self.serve(7)
        m = scrape(self.mport)  # nothing more happens: this is what Prometheus will see
        count = 'ratelimitd_decision_duration_seconds_count{job="ratelimitd"}'

        def scraped():
            got = {r[0]["protocol"]: r[1] for r in query(count)}
            return got if got == {fe: 7.0 for fe in FRONT_ENDS} else None
        wait_until(scraped, 30 * SLOW, interval=0.5, what="Prometheus to scrape the traffic")
        self.assertEqual(query('up{job="ratelimitd"}')[0][1], 1)
        self.assertEqual(query("ratelimitd_redis_up")[0][1], 1)
        for fe in FRONT_ENDS:
            name = 'ratelimitd_decision_duration_seconds{protocol="%s"}' % fe
            for q in (0.5, 0.99):
                got = query('histogram_quantile(%s, sum by (le) (ratelimitd_decision_duration_'
                            'seconds_bucket{protocol="%s"}))' % (q, fe))
                self.assertEqual(len(got), 1, got)
                self.assertAlmostEqual(got[0][1], quantile(q, buckets(m, name)), places=9)
                self.assertTrue(0 < got[0][1] <= 1, got)
        got = query("sum(ratelimitd_store_batch_size_sum)")
        self.assertEqual(got[0][1], 7 * len(FRONT_ENDS))
        self.assertGreater(query("process_resident_memory_bytes")[0][1], 0)

    def test_dashboard_and_alerts_use_metrics_that_exist(self):
        self.serve(1)
        names = sample_names(scrape(self.mport))
        alerts = os.path.join(SRCDIR, "docs", "alerts.yml")
        p = subprocess.run([PROMTOOL, "check", "rules", alerts], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("SUCCESS", p.stdout)
        p = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], capture_output=True,
                           text=True, timeout=60, cwd=os.path.dirname(os.path.abspath(__file__)))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

        with open(alerts) as f:
            exprs = [r["expr"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
        self.assertGreaterEqual(len(exprs), 4)
        with open(os.path.join(SRCDIR, "docs", "grafana-dashboard.json")) as f:
            dash = json.load(f)
        self.assertTrue(dash["title"] and dash["uid"] and dash["schemaVersion"] >= 30, dash)
        titles = []
        for panel in dash["panels"]:
            titles.append(panel["title"])
            self.assertIn("gridPos", panel)
            for t in panel.get("targets", []):
                exprs.append(t["expr"])
        for v in dash["templating"]["list"]:
            if v["type"] == "query":
                q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
                # Grafana's label_values(selector, label): the selector is PromQL
                mo = re.match(r"^label_values\((.*), *\w+\)$", q)
                exprs.append(mo.group(1) if mo else q)
        self.assertGreaterEqual(len(titles), 10, titles)
        # the dashboard's queries are PromQL promtool accepts (as recording rules,
        # Grafana's variables given values)
        rules = os.path.join(self.tmpdir, "dashboard-rules.yml")
        with open(rules, "w") as f:
            f.write("groups:\n  - name: dashboard\n    rules:\n")
            for i, e in enumerate(exprs):
                e = e.replace("$__rate_interval", "1m").replace("$job", ".*")
                f.write("      - record: dashboard_%d\n        expr: %s\n"
                        % (i, json.dumps(e.replace("$instance", ".*"))))
        p = subprocess.run([PROMTOOL, "check", "rules", rules], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        used = set()
        for e in exprs:
            used |= set(re.findall(r"\b((?:ratelimitd|process)_[a-z0-9_]+)", e))
        self.assertGreaterEqual(len(used), 12, used)
        self.assertEqual(sorted(used - names), [], "used but not exposed")
        for must in ("ratelimitd_decisions_total", "ratelimitd_redis_up",
                     "ratelimitd_store_pending", "ratelimitd_decision_duration_seconds_bucket",
                     "ratelimitd_store_round_trip_seconds_bucket",
                     "ratelimitd_store_batch_size_bucket", "process_cpu_seconds_total",
                     "process_resident_memory_bytes"):
            self.assertIn(must, used)



# Labels whose values are not a fixed list: policy names, versions, buckets.
FREE_LABELS = {"action", "le", "version", "libevent", "hiredis", "nghttp2", "identity", "user"}


def doc_metric_rows():
    """{family: (type, [label names], description)} of docs/operations.md's
    tables whose first cell names metrics (`name{labels}`, several in one
    cell allowed)."""
    with open(os.path.join(SRCDIR, "docs", "operations.md")) as f:
        text = f.read()
    out = {}
    for ln in text.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cells) < 3 or not ln.startswith("| `"):
            continue
        for name, labels in re.findall(r"`([a-z_]+)(?:\{([a-z0-9_,]+)\})?`", cells[0]):
            if name.startswith(("ratelimitd_", "process_")):
                out[name] = (cells[1], labels.split(",") if labels else [], cells[2])
    return out


def scrape_families(port):
    """{family: (type, {label: {values}})} of a real scrape."""
    status, _, body = http_get(port)
    assert status == 200
    fams = {}
    for ln in body.splitlines():
        m = re.match(r"^# TYPE (\S+) (\S+)$", ln)
        if m:
            fams[m.group(1)] = (m.group(2), {})
            continue
        if ln.startswith("#"):
            continue
        name, _, labels = ln.split(" ")[0].partition("{")
        fam = next(f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name)) if f in fams)
        for k, v in re.findall(r'([a-z0-9_]+)="([^"]*)"', labels):
            fams[fam][1].setdefault(k, set()).add(v)
    return fams


class MetricsDocTest(DaemonTest):
    """docs/operations.md's table of metrics against real scrapes, of a
    daemon on Redis and of one on the memory store (whose families only it
    has): every family with its type and labels, and every value a label
    with a fixed list can take. The table once lacked source="memory" and
    source="local", and a family."""

    def test_table_matches_scrape(self):
        self.redis = self.start_redis()
        scraped = {}
        os.environ["RL_METRICS_TOKEN"] = "metrics-test-token-0123456789"
        for store in ("redis: {address: %s}" % self.redis.address, "store: memory"):
            port, mport, aport = free_port(), free_port(), free_port()
            # a listener with auth: an identity's requests are counted by its name
            self.start_daemon(config="listen: [127.0.0.1:%d, {address: 127.0.0.1:%d, auth: "
                              "required}]\n%s\nmetrics: {listen: 127.0.0.1:%d}\nidentities: "
                              "{app: {token_env: RL_METRICS_TOKEN, rights: [decide]}}\n"
                              "policies: {reply: 5/60s, export: {algorithm: concurrency, "
                              "limit: 2, lease: 30s}}\n"
                              % (port, aport, store, mport), port=port, name="rl%d" % port)
            with Client(aport) as c:
                self.assertEqual(c.request("AUTH metrics-test-token-0123456789"), "OK")
                self.assertTrue(c.request("ALLOW u reply").startswith("ALLOWED"))
                for _ in range(5):  # a denial: a heavy hitter's series
                    c.request("ALLOW u reply")
            for fam, (typ, labels) in scrape_families(mport).items():
                scraped.setdefault(fam, (typ, {}))
                for k, vs in labels.items():
                    scraped[fam][1].setdefault(k, set()).update(vs)
        doc = doc_metric_rows()
        self.assertEqual(sorted(doc), sorted(scraped), "families: operations.md against /metrics")
        for fam, (typ, labels) in scraped.items():
            dtyp, dlabels, desc = doc[fam]
            self.assertEqual(dtyp, typ, fam)
            self.assertEqual(sorted(dlabels), sorted(set(labels) - {"le"}), fam)
            for label, values in labels.items():
                if label in FREE_LABELS:
                    continue
                for v in sorted(values):
                    self.assertIn("`%s`" % v, desc,
                                  "operations.md: %s{%s=%r} is not in its row" % (fam, label, v))

if __name__ == "__main__":
    unittest.main()
