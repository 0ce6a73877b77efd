"""Envoy's rate limit service over gRPC (protocol: grpc) with a real gRPC
client (python3-grpcio) and envoyproxy/ratelimit's configuration files:
decisions, all-or-nothing descriptors, unknown domains, shadow mode,
unlimited, replaces, limits carried by the request, hits_addend, a
directory of domains and its reload, Redis down per on_store_error within
grpc-timeout, health, errors, the wire format checked byte by byte, and
exactness across three daemons; and `ratelimitctl rls` / `health`, the
client shipped to try the service without Envoy, answering as grpcio does."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

from harness import DAEMON, SLOW, DaemonTest, free_port, scrape_metrics, wait_until
from rls_client import (PREFACE, RlsClient, call_headers, classes, frame, grpc, headers,
                        overall, raw_call, read_frames, request, statuses)

RULES = """\
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 2, name: login}
  - key: path
    value: /admin*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /health
  - key: plan
    value: free
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 4}
  - key: watch
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: vip
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10, name: tenant}
  - key: premium
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: tenant}]}
"""

# how early an answer may be timed before its slot (the clocks of the test
# and of Redis), and how late on a busy machine (the calls pass through
# rls_client's child process)
EARLY = 0.005
LATE = 0.5 * SLOW

CTL = os.environ.get("RATELIMITCTL") or os.path.join(os.path.dirname(DAEMON), "ctl",
                                                     "ratelimitctl")


class GrpcTest(DaemonTest):
    def start(self, rules=RULES, on_store_error="allow", headers="ratelimit", redis=True,
              name="rl", envoy_path=None, **top):
        if redis and not hasattr(self, "redis"):
            self.redis = self.start_redis()
        if envoy_path is None:
            envoy_path = os.path.join(self.tmpdir, "rules.yaml")
            with open(envoy_path, "w") as f:
                f.write(rules)
        port, gport, mport = free_port(), free_port(), free_port()
        listen = ["{address: 127.0.0.1:%d, admin: true}" % port,
                  "{address: 127.0.0.1:%d, protocol: grpc}" % gport]
        lines = ["listen:"] + ["  - %s" % a for a in listen]
        if redis:
            lines += ["redis: {address: %s, timeout: %s}" % (self.redis.address,
                                                             top.pop("redis_timeout", "1s"))]
        else:
            lines += ["store: memory"]
        lines += ["on_store_error: %s" % on_store_error,
                  "metrics: {listen: 127.0.0.1:%d}" % mport,
                  "envoy: {config: %s, response_headers: %s}" % (envoy_path, headers)]
        lines += ["%s: %s" % kv for kv in top.items()]
        d = self.start_daemon(config="\n".join(lines) + "\n", port=port, name=name)
        if redis:
            # ready (PING answered) can come before Redis is connected (beside
            # a busy core, test_health saw NOT_SERVING): wait for it
            d.wait_log(r"^info: redis \S+ connected", timeout=5 * SLOW)
        d.gport, d.mport = gport, mport
        c = RlsClient(gport)
        self.addCleanup(c.close)
        return d, c

    def assertGoaway(self, frames, last_stream):
        """One GOAWAY among frames: NO_ERROR, naming last_stream."""
        goaway = [f for f in frames if f[0] == 7]
        self.assertEqual(len(goaway), 1, [f[:3] for f in frames])
        self.assertEqual(int.from_bytes(goaway[0][3][0:4], "big") & 0x7FFFFFFF, last_stream)
        self.assertEqual(int.from_bytes(goaway[0][3][4:8], "big"), 0)  # NO_ERROR

    def test_ok_until_the_limit_then_over_limit(self):
        d, c = self.start()
        got = [c.call("web", [[("remote_address", "10.0.0.1")]]) for _ in range(4)]
        self.assertEqual([overall(r) for r in got], ["OK", "OK", "OK", "OVER_LIMIT"])
        st = [statuses(r)[0] for r in got]
        self.assertEqual([s[:3] for s in st], [("OK", 3, 2), ("OK", 3, 1), ("OK", 3, 0),
                                              ("OVER_LIMIT", 3, 0)])
        # a fixed window aligned to the minute: its end, in seconds
        for s in st:
            self.assertTrue(1 <= s[3] <= 60, s)
        self.assertEqual(got[0].statuses[0].current_limit.unit, 2)  # MINUTE
        h = dict(headers(got[3]))
        self.assertEqual((h["RateLimit-Limit"], h["RateLimit-Remaining"]), ("3", "0"))
        self.assertTrue(1 <= int(h["Retry-After"]) <= 60, h)
        self.assertEqual(h["RateLimit-Reset"], str(st[3][3]))
        # another address has its own counter; the denial charged nothing
        self.assertEqual(statuses(c.call("web", [[("remote_address", "10.0.0.2")]]))[0][:3],
                         ("OK", 3, 2))
        keys = self.redis.keys("rl:*")
        self.assertEqual(len(keys), 2, keys)
        self.assertTrue(all(b"remote_address=10.0.0." in k for k in keys), keys)

    def test_descriptors_are_all_or_nothing(self):
        d, c = self.start()
        both = [[("remote_address", "10.1.1.1")], [("path", "/login")]]
        got = [c.call("web", both) for _ in range(3)]
        self.assertEqual([overall(r) for r in got], ["OK", "OK", "OVER_LIMIT"])
        # each descriptor's own figures; the address was not charged by the denial
        self.assertEqual([[s[:3] for s in statuses(r)] for r in got],
                         [[("OK", 3, 2), ("OK", 2, 1)], [("OK", 3, 1), ("OK", 2, 0)],
                          [("OK", 3, 1), ("OVER_LIMIT", 2, 0)]])
        self.assertEqual(got[0].statuses[1].current_limit.name, "login")
        # the headers speak of the status that is over
        self.assertEqual(dict(headers(got[2]))["RateLimit-Limit"], "2")
        self.assertEqual(statuses(c.call("web", [[("remote_address", "10.1.1.1")]]))[0][:3],
                         ("OK", 3, 0))

    def assertManyDescriptorsAllOrNothing(self, c):
        """9, 20 and 64 limited descriptors in one call (a route's actions
        decide how many; the text protocols' MALLOW stops at 8): each is
        decided, all or nothing, and a 65th is refused."""
        for n in (9, 20):
            users = [[("user", "n%d-%d" % (n, i))] for i in range(n)]
            for left in (4, 3):
                r = c.call("web", users)
                self.assertEqual(overall(r), "OK")
                self.assertEqual([s[:3] for s in statuses(r)], [("OK", 5, left)] * n)
        # 63 users and one path whose 1/minute the first call takes
        many = [[("user", "m%d" % i)] for i in range(63)] + [[("path", "/admin")]]
        r = c.call("web", many)
        self.assertEqual(overall(r), "OK")
        self.assertEqual([s[:3] for s in statuses(r)], [("OK", 5, 4)] * 63 + [("OK", 1, 0)])
        r = c.call("web", many)
        self.assertEqual(overall(r), "OVER_LIMIT")
        # the others as they stand: the denial charged none of them
        self.assertEqual([s[:3] for s in statuses(r)],
                         [("OK", 5, 4)] * 63 + [("OVER_LIMIT", 1, 0)])
        self.assertEqual(dict(headers(r))["RateLimit-Limit"], "1")
        r = c.call("web", many[:63])
        self.assertEqual(overall(r), "OK")
        self.assertEqual([s[:3] for s in statuses(r)], [("OK", 5, 3)] * 63)
        # 65: refused, saying the bound; nothing charged
        with self.assertRaises(grpc.RpcError) as e:
            c.call("web", many[:63] + [[("user", "x%d" % i)] for i in range(2)])
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(e.exception.details(), "too many descriptors (at most 64)")
        r = c.call("web", [[("user", "m0")]])
        self.assertEqual(statuses(r)[0][:3], ("OK", 5, 2))

    def test_up_to_64_descriptors_are_decided_together(self):
        d, c = self.start()
        self.assertManyDescriptorsAllOrNothing(c)
        # one counter per user, charged three times: one script call each
        # decided all 64 pairs
        keys = [k for k in self.redis.keys("rl:*") if b"user=m" in k]
        self.assertEqual(len(keys), 63, keys)

    def test_up_to_64_descriptors_in_memory(self):
        d, c = self.start(redis=False)
        self.assertManyDescriptorsAllOrNothing(c)

    def test_up_to_64_descriptors_decided_locally_while_redis_is_down(self):
        d, c = self.start(on_store_error="local")
        self.redis.stop()
        self.assertManyDescriptorsAllOrNothing(c)
        d.wait_log(r"warn: redis cannot decide .*deciding locally")

    def test_a_cached_denial_reports_the_other_descriptors_own_remaining(self):
        # The deny cache once answered a denied descriptor's call alone, and the
        # other descriptors reported limit_remaining 0 (a fresh address: OK, 3, 0).
        d, c = self.start()
        login = [("path", "/login")]
        for _ in range(2):
            self.assertEqual(overall(c.call("web", [[("remote_address", "10.3.3.1")], login])),
                             "OK")
        # Redis denies (and the denial is cached): the address, not charged, has 1
        self.assertEqual([s[:3] for s in statuses(
            c.call("web", [[("remote_address", "10.3.3.1")], login]))],
                         [("OK", 3, 1), ("OVER_LIMIT", 2, 0)])
        # the denied descriptor alone: Redis denies, and the denial is cached
        # (once the daemon follows RESET notices, which it starts in the
        # background: until then it caches nothing; a denial charges nothing)
        self.assert_denial_cached(d, lambda: self.assertEqual(
            [s[:3] for s in statuses(c.call("web", [login]))], [("OVER_LIMIT", 2, 0)]))
        for _ in range(2):
            got = c.call("web", [[("remote_address", "10.3.3.2")], login])
            self.assertEqual(overall(got), "OVER_LIMIT")
            self.assertEqual([s[:3] for s in statuses(got)],
                             [("OK", 3, 3), ("OVER_LIMIT", 2, 0)])
            got = c.call("web", [[("remote_address", "10.3.3.1")], login])
            self.assertEqual([s[:3] for s in statuses(got)],
                             [("OK", 3, 1), ("OVER_LIMIT", 2, 0)])
        # alone, the denied descriptor is still answered by the cache
        self.assertEqual([s[:3] for s in statuses(c.call("web", [login]))],
                         [("OVER_LIMIT", 2, 0)])
        m = scrape_metrics(d.mport)
        self.assertEqual(m['ratelimitd_decisions_total{result="denied",source="cache"}'], 1, m)

    def assert_denial_cached(self, d, deny):
        """Runs deny() (a denied call, which charges nothing) until the
        daemon's deny cache holds its one entry: the daemon caches denials
        only once it follows RESET notices, which it starts in the
        background after it listens (on a loaded machine, after the first
        calls)."""
        def cached():
            deny()
            return scrape_metrics(d.mport)["ratelimitd_deny_cache_entries"] == 1
        wait_until(cached, 10 * SLOW, interval=0.05, what="the denial cached")

    def test_an_allowed_call_of_several_descriptors_forgets_their_cached_denials(self):
        # Calls of several descriptors skip the deny cache's lookup (each
        # descriptor's own remaining is wanted), but one that is allowed
        # must still forget the cached denials of what it charged: a denial
        # cached at cost 3 does not stop a call at cost 1.
        d, c = self.start()
        addr = [("remote_address", "10.9.9.9")]
        user = [("plan", "free"), ("user", "u9")]
        self.assertEqual(statuses(c.call("web", [addr]))[0][:3], ("OK", 3, 2))
        # cost 3 with 2 left: Redis denies, and the denial is cached
        self.assert_denial_cached(d, lambda: self.assertEqual(
            statuses(c.call("web", [addr], hits_addend=3))[0][:3], ("OVER_LIMIT", 3, 2)))
        # allowed, and charges the address: 1 left
        self.assertEqual([s[:3] for s in statuses(c.call("web", [addr, user]))],
                         [("OK", 3, 1), ("OK", 4, 3)])
        # the stale denial (2 left) is gone: Redis answers with the truth
        self.assertEqual(statuses(c.call("web", [addr], hits_addend=3))[0][:3],
                         ("OVER_LIMIT", 3, 1))

    def test_lookup_rules(self):
        """envoyproxy/ratelimit's: exact value, then wildcard, then the key
        alone; the limit where the last entry lands; no limit is OK."""
        d, c = self.start(redis=False)
        cases = [
            ([("path", "/login")], ("OK", 2, 1)),       # exact
            ([("path", "/admin/users")], ("OK", 1, 0)),  # wildcard
            ([("path", "/health")], ("OK", None, 0)),    # exact, no limit: whitelisted
            ([("path", "/other")], ("OK", None, 0)),     # no key-only rule for path
            ([("plan", "free"), ("user", "u1")], ("OK", 4, 3)),
            ([("plan", "free")], ("OK", None, 0)),       # lands on a node with no limit
            ([("plan", "paid"), ("user", "u1")], ("OK", None, 0)),
            ([("user", "u1"), ("plan", "free")], ("OK", None, 0)),  # order matters
            ([("user", "u1")], ("OK", 5, 4)),            # key alone
        ]
        for entries, want in cases:
            self.assertEqual(statuses(c.call("web", [entries]))[0][:3], want, entries)
        self.assertEqual(c.call("web", [[("plan", "free"), ("user", "u1")]]).statuses[0]
                         .current_limit.unit, 4)  # DAY

    def test_a_delay_answers_within_the_call_deadline(self):
        """A rule's delay (ours, as `algorithm`): Envoy's RLS call returns
        later, OK, when its slot comes within the rule's delay and within
        the call's deadline (grpc-timeout); past either, OVER_LIMIT at once."""
        rules = ("domain: slow\ndescriptors:\n"
                 "  - key: user\n"
                 "    rate_limit: {unit: second, requests_per_unit: 10, algorithm: funnel,"
                 " delay: 2s}\n"
                 "  - key: page\n"
                 "    rate_limit: {unit: second, requests_per_unit: 2, delay: 1500ms}\n")
        d, c = self.start(rules=rules)
        # a funnel of 10/s: 10 at once, then one each 100 ms within the
        # deadline. Each answer is timed from the first call's start, not
        # from its own: call k's slot is (k - 9) * 100 ms after the first
        # was decided (between that call's start and its answer), however
        # late a busy machine brought the calls before it
        got, sent, answered = [], [], []
        for _ in range(14):
            sent.append(time.monotonic())
            got.append(overall(c.call("slow", [[("user", "ann")]], timeout=3)))
            answered.append(time.monotonic())
        # OK, not DEADLINE_EXCEEDED: each within its deadline of 3 s
        self.assertEqual(got, ["OK"] * 14)
        times = [(round(s - sent[0], 3), round(a - sent[0], 3)) for s, a in zip(sent, answered)]
        for k in range(14):
            slot = max(0, k - 9) * 0.1
            # never before its slot
            self.assertGreaterEqual(answered[k] - sent[0], slot - EARLY, (k, times))
            # when its slot comes, or at once when it came already
            self.assertLess(answered[k] - max(sent[k], answered[0] + slot), LATE, (k, times))
        # a fixed window of 2/s: the third runs at the next second (of
        # Redis's clock, where the windows start), counted there; a
        # deadline of 50 ms, shorter than the wait for it, is OVER_LIMIT
        with self.redis.resp() as r:
            asked = time.monotonic()
            us = int(r.call("TIME")[1])
            heard = time.monotonic()
        left = (1_000_000 - us) / 1e6  # the next second, between asked and heard + left
        time.sleep(left + 0.05)
        got = [overall(c.call("slow", [[("page", "p")]], timeout=3)) for _ in range(2)]
        self.assertEqual(overall(c.call("slow", [[("page", "p")]], timeout=0.05)),
                         "OVER_LIMIT")
        third = c.call("slow", [[("page", "p")]], timeout=3)
        done = time.monotonic()
        self.assertEqual(got + [overall(third)], ["OK"] * 3)
        self.assertGreaterEqual(done - asked, 1 + left - EARLY)
        self.assertLess(done - heard, 1 + left + LATE)
        self.assertEqual(statuses(third)[0][:3], ("OK", 2, 1))
        m = scrape_metrics(d.mport)
        self.assertGreaterEqual(m["ratelimitd_delayed_total"], 4)

    def test_unknown_domain_is_ok_and_counted(self):
        d, c = self.start(redis=False)
        r = c.call("nosuch", [[("remote_address", "1.1.1.1")],
                              {"entries": [("x", "y")], "limit": (1, 1)}])
        self.assertEqual((overall(r), statuses(r)), ("OK", [("OK", None, 0, None)] * 2))
        m = scrape_metrics(d.mport)
        self.assertEqual(m["ratelimitd_envoy_unknown_domain_total"], 1)

    def test_shadow_unlimited_zero_and_replaces(self):
        d, c = self.start()
        # shadow_mode: decided and counted, never over
        got = [c.call("web", [[("watch", "w")]]) for _ in range(3)]
        self.assertEqual([overall(r) for r in got], ["OK"] * 3)
        self.assertEqual([statuses(r)[0][:3] for r in got], [("OK", 1, 0)] * 3)
        m = scrape_metrics(d.mport)
        self.assertEqual(m["ratelimitd_shadow_denied_total"], 2)
        # unlimited: OK with 2^32 - 1 remaining, nothing stored
        r = c.call("web", [[("vip", "v")]])
        self.assertEqual(statuses(r), [("OK", None, 4294967295, None)])
        # requests_per_unit 0 denies, and charges no other descriptor
        r = c.call("web", [[("banned", "b")], [("remote_address", "10.9.9.9")]])
        self.assertEqual((overall(r), [s[:3] for s in statuses(r)]),
                         ("OVER_LIMIT", [("OVER_LIMIT", 0, 0), ("OK", 3, 3)]))
        self.assertEqual(self.redis.keys("rl:*remote_address=10.9.9.9*"), [])
        # replaces: premium's limit replaces tenant's when both match
        r = c.call("web", [[("tenant", "t1")], [("premium", "t1")]])
        self.assertEqual([s[:3] for s in statuses(r)], [("OK", None, 0), ("OK", 100, 99)])
        r = c.call("web", [[("tenant", "t1")]])
        self.assertEqual(statuses(r)[0][:3], ("OK", 10, 9))

    def test_other_front_ends_share_the_counters(self):
        """A rule's policy name (in the metrics) works on the line protocol:
        PEEK sees what gRPC charged, RESET on the admin port empties it."""
        d, c = self.start()
        c.call("web", [[("user", "bob")]])
        c.call("web", [[("user", "bob")]])
        names = [k for k in scrape_metrics(d.mport)
                 if k.startswith("ratelimitd_action_decisions_total{action=\"web.user-")
                 and k.endswith("result=\"allowed\"}")]
        self.assertEqual(len(names), 1, names)
        name = names[0].split('"')[1]
        with d.client() as line:
            self.assertEqual(line.request("PEEK user=bob %s" % name).split()[:3],
                             ["ALLOWED", "5", "3"])
            self.assertEqual(line.request("RESET user=bob %s" % name), "OK")
        self.assertEqual(statuses(c.call("web", [[("user", "bob")]]))[0][:3], ("OK", 5, 4))

    def test_long_descriptors_are_hashed_apart_from_short_ones(self):
        """A user of 511 bytes or more (key=value, escaped) is its first
        494 bytes, '#' and a hash of all of it, 511 bytes; one written in
        full is shorter. A short descriptor spelled as a long one's hashed
        form once shared its counter."""
        d, c = self.start()

        def users():
            return sorted(re.search(rb"user=a*(#[0-9a-f]{16})?", k).group(0)
                          for k in self.redis.keys("rl:*"))

        # 505 bytes of value: "user=" + 505 = 510 bytes, kept in full
        self.assertEqual(statuses(c.call("web", [[("user", "a" * 505)]]))[0][:3], ("OK", 5, 4))
        self.assertEqual(users(), [b"user=" + b"a" * 505])
        # 511 bytes: hashed, its first 494 bytes kept
        self.assertEqual(statuses(c.call("web", [[("user", "a" * 506)]]))[0][:3], ("OK", 5, 4))
        hashed = [u for u in users() if b"#" in u]
        self.assertEqual([len(u) for u in hashed], [511], hashed)
        self.assertEqual(hashed[0][:494], b"user=" + b"a" * 489)
        # a long value takes its counter down to 0 ...
        for want in range(4, -1, -1):
            self.assertEqual(statuses(c.call("web", [[("user", "a" * 600)]]))[0][:3],
                             ("OK", 5, want))
        long_form = [u for u in users() if b"#" in u and u != hashed[0]]
        self.assertEqual(len(long_form), 1, users())
        # ... and a short value spelled as its hashed form has a counter of its own
        crafted = long_form[0][len(b"user="):].decode()
        self.assertEqual(len(crafted), 506)
        self.assertEqual(statuses(c.call("web", [[("user", crafted)]]))[0][:3], ("OK", 5, 4))
        self.assertEqual(overall(c.call("web", [[("user", "a" * 600)]])), "OVER_LIMIT")

    def test_a_charge_on_stream_done_is_counted_not_denied(self):
        """Envoy's apply_on_stream_done rate limit sends the response's cost
        as hits_addend; a descriptor led by a ratelimitd_charge entry is
        charged (CHARGE): counted past the limit, answered OK, on the same
        counter as the request's own call."""
        d, c = self.start()
        user = [("user", "zoe")]
        self.assertEqual(statuses(c.call("web", [user]))[0][:3], ("OK", 5, 4))
        charge = [("ratelimitd_charge", "1")] + user
        got = c.call("web", [{"entries": charge, "hits_addend": 7}])
        self.assertEqual(overall(got), "OK")
        self.assertEqual(statuses(got)[0][:3], ("OK", 5, 0))
        # the hour's 5 are spent (8 counted): the request's own call is denied
        self.assertEqual(overall(c.call("web", [user])), "OVER_LIMIT")
        names = [k.split('"')[1] for k in scrape_metrics(d.mport)
                 if k.startswith("ratelimitd_action_decisions_total{action=\"web.user-")]
        with d.client() as line:
            self.assertEqual(line.request("PEEK user=zoe %s" % names[0]).split()[:3],
                             ["DENIED", "5", "0"])
        # mixed, or alone: refused
        for descs, why in (([{"entries": charge, "hits_addend": 1}, [("user", "amy")]],
                            "all charged"),
                           ([[("ratelimitd_charge", "1")]], "needs entries after")):
            try:
                c.call("web", descs)
                self.fail("accepted %r" % (descs,))
            except Exception as e:  # noqa: BLE001 - grpc's RpcError
                self.assertIn(why, str(e))

    def test_envoy_rules_are_listed_and_counted(self):
        # An envoy-only file once listed no policies and started with "0
        # policies": a rule's policy name (for PEEK and RESET) was nowhere.
        d, c = self.start()
        d.wait_log(r"^info: ratelimitd \S+ ready, listening on .* \(0 policies, 8 envoy rules, ")

        def ctl(*args):
            r = subprocess.run([CTL, "-c", d.config_path] + list(args), capture_output=True,
                               text=True, timeout=20 * SLOW, stdin=subprocess.DEVNULL)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout
        lines = ctl("policies").splitlines()
        self.assertEqual(len(lines), 8, lines)
        rx = re.compile(r"^(web\.path__login-[0-9a-f]{8}) \(envoy domain web, "
                        r"descriptor path_/login: 2 per minute\)$")
        login = [rx.match(ln).group(1) for ln in lines if rx.match(ln)]
        self.assertEqual(len(login), 1, lines)
        self.assertIn("(envoy domain web, descriptor plan_free.user: 4 per day)",
                      "\n".join(lines))
        self.assertRegex("\n".join(lines), r"descriptor watch: 1 per minute, shadow_mode\)")
        j = json.loads(ctl("--json", "policies"))
        self.assertEqual(len(j["policies"]), 8)
        self.assertIn({"policy": login[0], "domain": "web", "descriptor": "path_/login",
                       "requests_per_unit": 2, "unit": "minute", "shadow": False},
                      j["envoy_rules"])
        # the listed name is the rule's: PEEK sees what gRPC counted
        c.call("web", [[("path", "/login")]])
        j = json.loads(ctl("--json", "-s", "127.0.0.1:%d" % d.port, "peek", "path=/login",
                           login[0]))
        self.assertEqual((j["limit"], j["remaining"]), (2, 1))
        n = len(d.log_lines())
        d.signal(signal.SIGHUP)
        d.wait_log(r"^info: reload: configuration \S+ loaded \(0 policies, 8 envoy rules\)$",
                   start=n)

    def test_limits_carried_by_the_request_and_hits_addend(self):
        d, c = self.start(redis=False)
        lim = {"entries": [("api_key", "k1")], "limit": (5, 2)}  # 5 per MINUTE
        r = c.call("web", [lim], hits_addend=2)
        self.assertEqual(statuses(r)[0][:3], ("OK", 5, 3))
        r = c.call("web", [lim], hits_addend=4)
        self.assertEqual((overall(r), statuses(r)[0][:3]), ("OVER_LIMIT", ("OVER_LIMIT", 5, 3)))
        # hits_addend 0 in a descriptor: looks, takes nothing
        r = c.call("web", [dict(lim, hits_addend=0)])
        self.assertEqual(statuses(r)[0][:3], ("OK", 5, 3))
        r = c.call("web", [dict(lim, hits_addend=3)])
        self.assertEqual(statuses(r)[0][:3], ("OK", 5, 0))
        # a limit per WEEK (rls.proto's 7, after YEAR's 6): a window of 7
        # days, and the answer carries the unit
        week = {"entries": [("api_key", "k2")], "limit": (3, 7)}
        got = [c.call("web", [week]) for _ in range(4)]
        self.assertEqual([statuses(r)[0][:3] for r in got],
                         [("OK", 3, 2), ("OK", 3, 1), ("OK", 3, 0), ("OVER_LIMIT", 3, 0)])
        self.assertEqual(got[0].statuses[0].current_limit.unit, 7)  # WEEK
        self.assertLessEqual(got[3].statuses[0].duration_until_reset.seconds, 7 * 86400)
        self.assertGreater(got[3].statuses[0].duration_until_reset.seconds, 0)
        # a limit without a unit, or with a number that is none, is refused
        for unit in (0, 8):
            with self.assertRaises(grpc.RpcError) as e:
                c.call("web", [{"entries": [("a", "b")], "limit": (5, unit)}])
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual(e.exception.details(),
                             "a descriptor's limit needs a unit (SECOND, MINUTE, HOUR, DAY, "
                             "WEEK, MONTH or YEAR)")

    def test_directory_of_domains_and_reload(self):
        rules = os.path.join(self.tmpdir, "rules.d")
        os.mkdir(rules)
        for dom, n in (("a", 1), ("b", 2)):
            with open(os.path.join(rules, dom + ".yaml"), "w") as f:
                f.write("domain: %s\ndescriptors:\n  - key: k\n"
                        "    rate_limit: {unit: minute, requests_per_unit: %d}\n" % (dom, n))
        with open(os.path.join(rules, "README"), "w") as f:
            f.write("not yaml: ignored\n")
        d, c = self.start(envoy_path=rules, redis=False)
        self.assertEqual(statuses(c.call("a", [[("k", "x")]]))[0][:3], ("OK", 1, 0))
        self.assertEqual(statuses(c.call("b", [[("k", "x")]]))[0][:3], ("OK", 2, 1))
        # a file in error: the reload keeps the old rules, and says where
        with open(os.path.join(rules, "b.yaml"), "w") as f:
            f.write("domain: b\ndescriptors:\n  - key: k\n"
                    "    rate_limit: {unit: fortnight, requests_per_unit: 2}\n")
        n = len(d.log_lines())
        d.signal(signal.SIGHUP)
        line = d.wait_log(r"b\.yaml:4:\d+: .*invalid rate limit unit 'fortnight'", start=n)
        self.assertIn("rules.d/b.yaml:4:", line)
        self.assertEqual(statuses(c.call("b", [[("k", "x")]]))[0][:3], ("OK", 2, 0))
        # a good one: the counters of unchanged rules stay
        with open(os.path.join(rules, "b.yaml"), "w") as f:
            f.write("domain: b\ndescriptors:\n  - key: k\n"
                    "    rate_limit: {unit: minute, requests_per_unit: 2}\n"
                    "  - key: j\n    rate_limit: {unit: minute, requests_per_unit: 7}\n")
        n = len(d.log_lines())
        d.signal(signal.SIGHUP)
        d.wait_log(r"configuration .* loaded", start=n)
        self.assertEqual(overall(c.call("b", [[("k", "x")]])), "OVER_LIMIT")
        self.assertEqual(statuses(c.call("b", [[("j", "x")]]))[0][:3], ("OK", 7, 6))
        self.assertEqual(statuses(c.call("a", [[("k", "y")]]))[0][:3], ("OK", 1, 0))

    def test_config_errors(self):
        rules = os.path.join(self.tmpdir, "r.yaml")
        cases = [
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n", None),
            ("descriptors:\n  - key: k\n", "config file cannot have empty domain"),
            ("domain: d\ndescriptors:\n  - value: v\n", "descriptor has empty key"),
            ("domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
             "r.yaml:4:5: duplicate descriptor composite key 'd.k'"),
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, "
             "unit: second}\n", "should not specify rate limit unit when unlimited"),
            ("domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: second}\n",
             "unknown key"),
            ("domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n",
             "quota_mode: is not supported"),
            ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
             "requests_per_unit: 200000, algorithm: sliding_window}\n",
             "at most 100000 per window"),
            ("domain: d\nalgorithm: funnel\ndescriptors:\n  - key: k\n    rate_limit: "
             "{unit: second, requests_per_unit: 5}\n", None),
        ]
        for text, want in cases:
            with open(rules, "w") as f:
                f.write(text)
            conf = ("listen: [{address: 127.0.0.1:1, protocol: grpc}]\nstore: memory\n"
                    "envoy: {config: r.yaml}\n")
            self.assertConfigChecks([(conf, want)])
        os.mkfifo(os.path.join(self.tmpdir, "fifo.yaml"))
        self.assertConfigChecks([
            ("listen: [{address: 127.0.0.1:1, protocol: grpc}]\nstore: memory\n"
             "envoy: {config: nosuch.yaml}\n", "nosuch.yaml: cannot read"),
            # a gRPC listener without rules would allow every call: an error
            # (at the entry's line:col, not the file's start)
            ("store: memory\nlisten:\n  - 127.0.0.1:2\n  - {address: 127.0.0.1:1, "
             "protocol: grpc}\npolicies: {a: 1/1s}\n",
             "t.yaml:4:6: listen 127.0.0.1:1: protocol: grpc needs envoy: "
             "{config: FILE_OR_DIR}"),
            # a FIFO would block the loading (and the daemon's loop on SIGHUP)
            ("listen: [{address: 127.0.0.1:1, protocol: grpc}]\nstore: memory\n"
             "envoy: {config: fifo.yaml}\n", "fifo.yaml: cannot read: not a regular file"),
            ("listen: [{address: 127.0.0.1:1, protocol: grpc}]\nstore: memory\n"
             "envoy: {config: r.yaml, response_headers: maybe}\n",
             "envoy.response_headers: must be none"),
        ])

    def test_redis_down_answers_within_grpc_timeout(self):
        """Redis hung (SIGSTOP): each call is answered per on_store_error
        within its grpc-timeout (200 ms here), not redis.timeout (5 s)."""
        for mode, want in (("allow", "OK"), ("deny", "OVER_LIMIT"), ("error", None)):
            with self.subTest(mode=mode):
                if hasattr(self, "redis"):
                    del self.redis
                d, c = self.start(on_store_error=mode, name="rl-" + mode,
                                  redis_timeout="5s")
                self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")
                s = socket.create_connection(("127.0.0.1", d.gport), timeout=10)
                s.sendall(PREFACE + frame(4, 0, 0))
                msg = request("web", [[("user", "u")]]).SerializeToString()
                self.redis.sigstop()
                try:
                    t0 = time.monotonic()
                    frames, body = raw_call(s, msg, extra=[(b"grpc-timeout", b"200m")])
                    took = time.monotonic() - t0
                finally:
                    self.redis.sigcont()
                    s.close()
                ours = [f for f in frames if f[2] == 1]
                if want is None:
                    # an error: one HEADERS frame that ends the stream (trailers only)
                    self.assertEqual([(f[0], f[1] & 1) for f in ours], [(1, 1)])
                else:
                    self.assertEqual(overall(classes()["Response"].FromString(body)), want)
                self.assertLess(took, 0.2 + 0.5 * SLOW, took)
                d.stop()

    def test_health(self):
        d, c = self.start()
        H = type(c.check())
        self.assertEqual(c.check().status, H.SERVING)
        self.assertEqual(c.check("ratelimit").status, H.SERVING)
        with self.assertRaises(grpc.RpcError) as e:
            c.check("other")
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.redis.stop()
        wait_until(lambda: c.check().status == H.NOT_SERVING, 5 * SLOW, what="NOT_SERVING")

    def test_bad_calls_get_grpc_errors(self):
        d, c = self.start(redis=False)
        for desc, want in ((lambda: c.call("", [[("a", "b")]]), "INVALID_ARGUMENT"),
                           (lambda: c.call("web", []), "INVALID_ARGUMENT"),
                           (lambda: c.raw(b"\xff\xff\xff", timeout=5), "INVALID_ARGUMENT"),
                           (lambda: c.channel.unary_unary("/x.Y/Z")(b"", timeout=5),
                            "UNIMPLEMENTED")):
            with self.assertRaises(grpc.RpcError) as e:
                desc()
            self.assertEqual(e.exception.code().name, want)
        # too large: RESOURCE_EXHAUSTED; compressed: UNIMPLEMENTED
        with self.assertRaises(grpc.RpcError) as e:
            c.raw(b"\x0a" + b"\xff" * 70000, timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        with self.assertRaises(grpc.RpcError) as e:
            c.rls(request("web", [[("user", "u")]]), timeout=5,
                  compression=grpc.Compression.Gzip)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        # health's Watch is not served
        with self.assertRaises(grpc.RpcError) as e:
            c.channel.unary_unary("/grpc.health.v1.Health/Watch")(b"", timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        # and the daemon goes on
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")

    def test_wire_format(self):
        """A request written byte by byte with Envoy's field numbers, and
        the answer read byte by byte: no .proto of ours in between."""
        d, c = self.start(redis=False)

        def ld(field, payload):  # length-delimited field
            return bytes([field << 3 | 2, len(payload)]) + payload

        entry = ld(1, b"user") + ld(2, b"wire")
        desc = ld(1, entry)
        req = ld(1, b"web") + ld(2, desc) + bytes([3 << 3, 2])  # hits_addend 2
        resp = c.raw(req, timeout=5)
        # overall_code (1) OK (1), then statuses (2): code OK, current_limit
        # {requests_per_unit 5, unit HOUR (3)}, limit_remaining 3, duration
        self.assertEqual(resp[:2], bytes([1 << 3, 1]))
        self.assertEqual(resp[2], 2 << 3 | 2)
        status = resp[4:4 + resp[3]]
        self.assertEqual(status[:2], bytes([1 << 3, 1]))
        self.assertEqual(status[2:8], ld(2, bytes([1 << 3, 5, 2 << 3, 3])))
        self.assertEqual(status[8:10], bytes([3 << 3, 3]))
        self.assertEqual(status[10], 4 << 3 | 2)

    def test_grpcio_stays_out_of_the_test_process(self):
        """grpcio 1.51 stops and restarts its event engine's threads at each
        fork() of a process that made a channel, GRPC_ENABLE_FORK_SUPPORT=false
        or not, and aborts if it destroys an engine meanwhile (a test process
        beside a CPU hog: "thread_pool.cc:225 assertion failed"); the harness
        forks for every server. The calls run in rls_client's child process:
        after calls and a close, this process has neither the module nor
        its library, and the servers started next are forks of no gRPC."""
        d, c = self.start(redis=False)
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")
        self.assertEqual(c.check().status, type(c.check()).SERVING)
        c.close()
        self.assertEqual([m for m in sys.modules if m == "grpc" or m.startswith("grpc.")], [])
        with open("/proc/self/maps") as f:
            self.assertNotIn("cygrpc", f.read())
        d2, c2 = self.start(name="rl2")  # redis-server and a daemon: two forks
        self.assertEqual(overall(c2.call("web", [[("user", "u")]])), "OK")

    def test_exact_across_three_daemons(self):
        self.redis = self.start_redis()
        clients = [self.start(name="rl%d" % i)[1] for i in range(3)]
        allowed = []
        lock = threading.Lock()

        def worker(c):
            for _ in range(20):
                r = c.call("web", [[("user", "shared")], [("remote_address", "10.5.5.5")]])
                with lock:
                    allowed.append(overall(r) == "OK")

        threads = [threading.Thread(target=worker, args=(c,)) for c in clients for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # the address's 3 per minute bind: exactly 3 of 120, and the user's
        # counter was charged only for those
        self.assertEqual(sum(allowed), 3)
        r = clients[0].call("web", [[("user", "shared")]])
        self.assertEqual(statuses(r)[0][:3], ("OK", 5, 1))

    def test_frames_that_are_not_http2_close_the_connection(self):
        d, c = self.start(redis=False)
        s = socket.create_connection(("127.0.0.1", d.gport), timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        # our SETTINGS, then a GOAWAY (frame type 7), then the close
        types, at = [], 0
        while at + 9 <= len(data):
            n = int.from_bytes(data[at:at + 3], "big")
            types.append(data[at + 3])
            at += 9 + n
        self.assertEqual(types, [4, 7], data)
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")

    def test_rapid_reset_flood_ends_the_connection(self):
        """Streams opened and reset at once (CVE-2023-44487): within the
        burst of 10000 the connection lives on; past it, a GOAWAY
        (INTERNAL_ERROR, nghttp2's choice) and a close. The daemon serves
        others meanwhile."""
        d, c = self.start(redis=False)

        def resets(first, n):
            return b"".join(frame(1, 4, sid, call_headers()) +
                            frame(3, 0, sid, (8).to_bytes(4, "big"))  # RST_STREAM CANCEL
                            for sid in range(first, first + 2 * n, 2))

        msg = request("web", [[("user", "u")]]).SerializeToString()
        s = socket.create_connection(("127.0.0.1", d.gport), timeout=10 * SLOW)
        s.sendall(PREFACE + frame(4, 0, 0) + resets(1, 500))
        frames, body = raw_call(s, msg, stream=1001)
        self.assertEqual(overall(classes()["Response"].FromString(body)), "OK")
        self.assertNotIn(7, [f[0] for f in frames])
        s.close()

        s = socket.create_connection(("127.0.0.1", d.gport), timeout=10 * SLOW)
        try:
            s.sendall(PREFACE + frame(4, 0, 0) + resets(1, 15000))
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while sending: what this test wants
        frames = []
        try:
            frames = read_frames(s)
        except (ConnectionResetError, socket.timeout):
            pass
        s.close()
        goaway = [f for f in frames if f[0] == 7]
        self.assertEqual(len(goaway), 1, [f[:3] for f in frames][-5:])
        self.assertEqual(int.from_bytes(goaway[0][3][4:8], "big"), 2)
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")

    def test_unfinished_bodies_per_connection_are_bounded(self):
        """Bodies still arriving are held: past 256 KiB on one connection,
        the streams that go over are answered RESOURCE_EXHAUSTED (trailers
        only) when they end; the others are answered."""
        d, c = self.start(redis=False)
        msg = request("web", [[("user", "v" * 59900)]]).SerializeToString()
        body = b"\x00" + len(msg).to_bytes(4, "big") + msg
        s = socket.create_connection(("127.0.0.1", d.gport), timeout=10 * SLOW)
        s.sendall(PREFACE + frame(4, 0, 0))
        sids = [1, 3, 5, 7, 9]
        window = [65535]  # the connection's send window (HTTP/2 flow control)

        def send_body(sid):
            at = 0
            while at < len(body):
                while window[0] == 0:
                    f = read_frames(s, stop=lambda f: f[0] == 8)[-1]  # WINDOW_UPDATE
                    if f[2] == 0:
                        window[0] += int.from_bytes(f[3], "big") & 0x7FFFFFFF
                n = min(16384, window[0], len(body) - at)
                s.sendall(frame(0, 0, sid, body[at:at + n]))
                window[0] -= n
                at += n

        for sid in sids:
            s.sendall(frame(1, 4, sid, call_headers()))
            send_body(sid)
        s.sendall(b"".join(frame(0, 1, sid) for sid in sids))  # END_STREAM, all
        frames = read_frames(s, until_end_of=None,
                             stop=lambda f, seen=set(): (f[0] in (0, 1) and f[1] & 1 and
                                                         not seen.add(f[2]) and
                                                         len(seen) == len(sids)))
        s.close()
        answered = {sid: any(f[0] == 0 and f[2] == sid for f in frames) for sid in sids}
        n = sum(answered.values())
        self.assertIn(n, (3, 4), answered)
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")

    def test_sigterm_answers_calls_in_flight(self):
        d, c = self.start(redis_timeout="2s")
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")
        self.redis.sigstop()
        try:
            fut = c.rls.future(request("web", [[("user", "u")]]), timeout=10)
            time.sleep(0.2)  # the call reaches the daemon and waits on Redis
            d.signal(signal.SIGTERM)
            # answered per on_store_error (allow) at redis.timeout, not dropped
            self.assertEqual(overall(fut.result()), "OK")
        finally:
            self.redis.sigcont()
        d.wait_exit(10 * SLOW)

    def test_a_call_never_finished_is_closed_after_request_timeout(self):
        """A call whose request stops arriving is answered at request_timeout
        (trailers only: HEADERS ending the stream, no DATA), a call already
        whole on the same connection is answered too, and a GOAWAY naming
        the last stream taken comes before the close."""
        d, c = self.start(redis=False, request_timeout="500ms")
        s = socket.create_connection(("127.0.0.1", d.gport), timeout=10 * SLOW)
        # HEADERS of a call (literal fields, no Huffman), no DATA, no END_STREAM
        s.sendall(PREFACE + frame(4, 0, 0) + frame(1, 4, 1, call_headers()))
        msg = request("web", [[("user", "u")]]).SerializeToString()
        frames3, body = raw_call(s, msg, stream=3)
        self.assertEqual(overall(classes()["Response"].FromString(body)), "OK")
        t0 = time.monotonic()
        frames = read_frames(s)  # until the daemon closes
        took = time.monotonic() - t0
        s.close()
        self.assertTrue(0.3 < took < 0.5 + 2 * SLOW, took)
        on1 = [f for f in frames3 + frames if f[2] == 1]
        self.assertEqual([(f[0], f[1] & 1) for f in on1], [(1, 1)],
                         "stream 1: one HEADERS with END_STREAM, no DATA")
        self.assertGoaway(frames, last_stream=3)
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")

    def test_idle_timeout_says_goaway_before_the_close(self):
        """An idle gRPC connection gets a GOAWAY (NO_ERROR, naming the
        last call taken) and then the close, so a call the client sent
        meanwhile is one it knows was not processed and retries, not one
        lost to a bare close; grpcio's channel carries on."""
        d, c = self.start(redis=False, idle_timeout="1s")
        msg = request("web", [[("user", "u")]]).SerializeToString()
        s = socket.create_connection(("127.0.0.1", d.gport), timeout=10 * SLOW)
        s.sendall(PREFACE + frame(4, 0, 0))
        frames, body = raw_call(s, msg, stream=1)
        self.assertEqual(overall(classes()["Response"].FromString(body)), "OK")
        t0 = time.monotonic()
        frames = read_frames(s)  # until the daemon closes
        took = time.monotonic() - t0
        s.close()
        self.assertGoaway(frames, last_stream=1)
        self.assertEqual(frames[-1][0], 7, "the GOAWAY is the last frame")
        self.assertTrue(0.5 < took < 1 + 2 * SLOW, took)
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")
        time.sleep(1.5)  # its connection is closed idle too
        self.assertEqual(overall(c.call("web", [[("user", "u")]])), "OK")


def ctl(*args):
    return subprocess.run([CTL] + list(args), capture_output=True, text=True,
                          timeout=20 * SLOW, stdin=subprocess.DEVNULL)


class CtlRlsTest(DaemonTest):
    """ratelimitctl rls/health (ctl/ctl_grpc.c: nghttp2 and protoc-c) against
    the same daemon as grpcio: a client of its own would prove little if it
    only agreed with itself."""

    start = GrpcTest.start  # GrpcTest's daemon, not its tests

    def rls(self, d, *args):
        """(exit status, the --json answer) of ratelimitctl rls, the gRPC
        listener found in the daemon's config."""
        r = ctl("-c", d.config_path, "--json", "rls", *args)
        self.assertTrue(r.stdout, r.stderr)
        return r.returncode, json.loads(r.stdout)

    def test_same_answers_as_grpcio(self):
        d, c = self.start()
        # user: 5 an hour (an hour's window: no boundary crossed mid-test,
        # unlike a minute's); path=/login names its limit; vip is unlimited
        def by_ctl(user):
            rc, j = self.rls(d, "web", "user=" + user, "path=/login", "vip=1")
            self.assertEqual(rc, {"OK": 0, "OVER_LIMIT": 1}[j["overall_code"]], j)
            return (j["overall_code"],
                    [(s["code"], s["limit"] and (s["limit"]["requests_per_unit"],
                                                 s["limit"]["unit"], s["limit"]["name"]),
                      s["remaining"], s["reset_s"]) for s in j["statuses"]],
                    j["headers"])

        def by_grpcio(user):
            r = c.call("web", [[("user", user)], [("path", "/login")], [("vip", "1")]])
            U = type(r.statuses[0].current_limit).Unit
            return (overall(r),
                    [(s[0], s[1] is not None and (s[1], U.Name(st.current_limit.unit),
                                                  st.current_limit.name) or None,
                      s[2], s[3] or 0) for s, st in zip(statuses(r), r.statuses)],
                    dict(headers(r)))

        # the same calls from each client on an empty Redis; /login's minute
        # must not end during a run (its counts would start again)
        if time.time() % 60 > 50:
            time.sleep(61 - time.time() % 60)
        mine = [by_ctl("u") for _ in range(3)]
        self.redis.call("FLUSHALL")
        theirs = [by_grpcio("u") for _ in range(3)]
        for m, t in zip(mine, theirs):
            # resets are whole seconds to a window's end: equal, or a tick apart
            self.assertEqual((m[0], [s[:3] for s in m[1]]), (t[0], [s[:3] for s in t[1]]))
            for ms, ts in zip(m[1], t[1]):
                self.assertLessEqual(abs(ms[3] - ts[3]), 1, (m, t))
            self.assertEqual(set(m[2]), set(t[2]))
        self.assertEqual([m[0] for m in mine], ["OK", "OK", "OVER_LIMIT"])
        self.assertEqual(mine[0][1][:2], [("OK", (5, "HOUR", ""), 4, mine[0][1][0][3]),
                                          ("OK", (2, "MINUTE", "login"), 1,
                                           mine[0][1][1][3])])
        self.assertEqual(mine[0][1][2], ("OK", None, 4294967295, 0))  # unlimited
        self.assertEqual(mine[2][2]["RateLimit-Remaining"], "0")
        # one counter whichever client asks: they alternate on one user
        rc, j = self.rls(d, "web", "user=both")
        self.assertEqual(j["statuses"][0]["remaining"], 4)
        self.assertEqual(statuses(c.call("web", [[("user", "both")]]))[0][2], 3)
        rc, j = self.rls(d, "web", "user=both", "--hits", "3")
        self.assertEqual((rc, j["statuses"][0]["remaining"]), (0, 0))
        self.assertEqual(overall(c.call("web", [[("user", "both")]])), "OVER_LIMIT")

    def test_text_exit_codes_and_errors(self):
        d, c = self.start()
        r = ctl("-c", d.config_path, "rls", "web", "remote_address=10.7.0.1,x=y",
                "banned=b")
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "OVER_LIMIT")
        # remote_address's rule with an extra entry x=y below it: no limit
        self.assertEqual(lines[1], "  remote_address=10.7.0.1,x=y: OK limit=none remaining=0 "
                         "reset=0s")
        self.assertRegex(lines[2], r"^  banned=b: OVER_LIMIT limit=0/SECOND remaining=0 "
                         r"reset=1s$")
        self.assertIn("  header RateLimit-Limit: 0", lines)
        # --addr instead of the config; an unknown domain limits nothing
        r = ctl("rls", "--addr", "127.0.0.1:%d" % d.gport, "nosuchdomain", "a=b")
        self.assertEqual((r.returncode, r.stdout), (0, "OK\n  a=b: OK limit=none "
                                                       "remaining=0 reset=0s\n"), r.stderr)
        # the daemon's gRPC error, with its status
        rc, j = self.rls(d, "", "a=b")
        self.assertEqual((rc, j["result"], j["error"], j["grpc_status"]),
                         (2, "error", "grpc", 3), j)
        self.assertIn("INVALID_ARGUMENT", j["message"])
        # refused before any call: no descriptor, an entry without '=', -s
        for args in (["rls", "web"], ["rls", "web", "novalue"],
                     ["-s", "127.0.0.1:%d" % d.port, "rls", "web", "a=b"]):
            r = ctl("-c", d.config_path, *args)
            self.assertEqual((r.returncode, r.stdout), (2, ""), args)
            self.assertTrue(r.stderr.startswith("ratelimitctl: "), r.stderr)
        # nothing listening: exit 2, promptly. A port bound here and never
        # listened on refuses every connection, and no other test can take
        # it while it is held; -T far beyond the bound, so a wait for the
        # timeout cannot pass for the refusal.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.addCleanup(s.close)
        t0 = time.monotonic()
        r = ctl("-T", "60s", "rls", "--addr", "127.0.0.1:%d" % s.getsockname()[1], "web",
                "a=b")
        took = time.monotonic() - t0
        self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
        self.assertIn("cannot connect", r.stderr)
        self.assertIn("refused", r.stderr)
        self.assertLess(took, 5 * SLOW)

    def test_long_timeouts(self):
        d, c = self.start()
        # -T beyond 8 digits of milliseconds: grpc-timeout in a larger unit
        # (the daemon refuses more than 8 digits with INVALID_ARGUMENT)
        for t in ("2d", "366d", "99999999ms", "100000001ms"):
            r = ctl("-T", t, "-c", d.config_path, "rls", "web", "user=long")
            self.assertEqual((r.returncode, r.stdout.splitlines()[:1]), (0, ["OK"]),
                             (t, r.stderr))
            r = ctl("-T", t, "-c", d.config_path, "health")
            self.assertEqual((r.returncode, r.stdout), (0, "SERVING\n"), (t, r.stderr))
        # a wait longer than poll()'s int of milliseconds: 2^32 ms + 1 s
        # wrapped to a 1 s timeout (and 25 days to a negative one: forever);
        # waited for in pieces, the call still waits on a silent listener
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        self.addCleanup(s.close)
        for cmd in (["rls", "web", "a=b"], ["health"]):
            p = subprocess.Popen([CTL, "-T", "%dms" % (2**32 + 1000), cmd[0], "--addr",
                                  "127.0.0.1:%d" % s.getsockname()[1]] + cmd[1:],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 stdin=subprocess.DEVNULL)
            try:
                out, err = p.communicate(timeout=3 * SLOW)
                self.fail("%s returned %d within %ss: %s" % (cmd[0], p.returncode, 3 * SLOW,
                                                             err))
            except subprocess.TimeoutExpired:
                pass
            finally:
                p.kill()
                p.communicate()

    def test_the_address_and_why(self):
        d, c = self.start()
        # an invalid config: its errors, not a connection to a guessed
        # default; --addr needs no config
        bad = os.path.join(self.tmpdir, "bad.yaml")
        with open(bad, "w") as f:
            f.write(d.config_text + "bogus: 1\n")
        for cmd in (["rls", "web", "a=b"], ["health"]):
            r = ctl("-c", bad, *cmd)
            self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
            self.assertRegex(r.stderr, r"(?m)^%s:\d+:\d+: .*bogus" % re.escape(bad))
            self.assertNotIn("connect", r.stderr)
            r = ctl("-c", bad, "--json", *cmd)
            j = json.loads(r.stdout)
            self.assertEqual((r.returncode, j["command"], j["result"], j["file"]),
                             (2, cmd[0], "invalid", bad), r.stderr)
            self.assertIn("bogus", j["errors"][0])
            r = ctl("-c", bad, cmd[0], "--addr", "127.0.0.1:%d" % d.gport, *cmd[1:])
            self.assertEqual(r.returncode, 0, r.stderr)
        # no file to read (as one of mode 0640 to a user outside its group),
        # or no grpc listener in it: the default address, and an error that
        # says why it was chosen (unless something answers there)
        noline = os.path.join(self.tmpdir, "nogrpc.yaml")
        with open(noline, "w") as f:
            f.write("".join(line for line in d.config_text.splitlines(True)
                            if "protocol: grpc" not in line))
        for conf, why in ((os.path.join(self.tmpdir, "missing.yaml"),
                           "missing.yaml: cannot read: No such file or directory"),
                          (noline, "nogrpc.yaml has no protocol: grpc listener")):
            for cmd in (["rls", "web", "a=b"], ["health"]):
                r = ctl("-T", "2s", "-c", conf, *cmd)
                if r.returncode == 2:
                    self.assertIn("127.0.0.1:8081", r.stderr)
                    self.assertIn(why, r.stderr)
                    self.assertIn("--addr", r.stderr)

    def test_health(self):
        d, c = self.start()
        r = ctl("-c", d.config_path, "health")
        self.assertEqual((r.returncode, r.stdout), (0, "SERVING\n"), r.stderr)
        r = ctl("-c", d.config_path, "--json", "health", "ratelimit")
        self.assertEqual((r.returncode, json.loads(r.stdout)),
                         (0, {"command": "health", "result": "ok", "status": "SERVING"}))
        r = ctl("-c", d.config_path, "--json", "health", "other")
        self.assertEqual((r.returncode, json.loads(r.stdout)["grpc_status"]), (2, 5))
        self.redis.stop()
        H = type(c.check())
        wait_until(lambda: c.check().status == H.NOT_SERVING, 5 * SLOW, what="NOT_SERVING")
        r = ctl("-c", d.config_path, "health")
        self.assertEqual((r.returncode, r.stdout), (1, "NOT_SERVING\n"), r.stderr)


if __name__ == "__main__":
    unittest.main()
