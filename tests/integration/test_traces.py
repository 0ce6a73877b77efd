"""Traces (issue 33): with `tracing`, decisions that come with a sampled W3C
traceparent (HTTP's header, gRPC's metadata, ALLOW's TRACE) arrive at an
OTLP/HTTP receiver, decoded here from the protobuf wire format, as a
"ratelimitd.decision" span that is the caller's span's child, and under it
a "ratelimitd.parse" span (the bytes read to the request parsed) and a span
of who decided, with a Redis decision's "ratelimitd.batch" (the script call
it rode in, and its size) under that; an unsampled or absent context is not traced unless
tracing.sample says so; a receiver that is down costs failed spans, never
decisions; a full queue drops and counts."""

import http.server
import os
import struct
import threading
import time
import unittest
import urllib.request

from harness import SLOW, Client, DaemonTest, free_port, scrape_metrics, wait_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def traceparent(flags="01", trace=TRACE_ID, parent=PARENT_ID):
    return "00-%s-%s-%s" % (trace, parent, flags)


def fields(buf):
    """[(field, wire, value)] of one protobuf message (varint, fixed64,
    length-delimited: the wire types OTLP's spans use)."""
    out, i = [], 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(buf, i)
        elif w == 1:
            v = struct.unpack_from("<Q", buf, i)[0]
            i += 8
        elif w == 2:
            n, i = varint(buf, i)
            v = bytes(buf[i:i + n])
            i += n
        else:
            raise ValueError("wire type %d" % w)
        out.append((f, w, v))
    return out


def varint(buf, i):
    shift = v = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7f) << shift
        if b < 0x80:
            return v, i
        shift += 7


def decode_request(body):
    """ExportTraceServiceRequest -> (resource attributes, [span dicts])."""
    spans, resource = [], {}
    for f, _, rs in fields(body):
        assert f == 1
        for f2, _, v in fields(rs):
            if f2 == 1:  # Resource
                resource.update(attrs(v, 1))
            elif f2 == 2:  # ScopeSpans
                for f3, _, s in fields(v):
                    if f3 == 2:
                        spans.append(span(s))
    return resource, spans


def attrs(msg, field):
    out = {}
    for f, _, kv in fields(msg):
        if f != field:
            continue
        d = {g: v for g, _, v in fields(kv)}
        val = {g: v for g, _, v in fields(d[2])}
        # AnyValue: 1 string_value, 2 bool_value, 3 int_value
        out[d[1].decode()] = (val[1].decode() if 1 in val else val[3] if 3 in val
                              else bool(val.get(2, 0)))
    return out


def span(msg):
    d = {"attrs": attrs(msg, 9)}
    for f, _, v in fields(msg):
        if f == 1:
            d["trace_id"] = v.hex()
        elif f == 2:
            d["span_id"] = v.hex()
        elif f == 4:
            d["parent_id"] = v.hex()
        elif f == 5:
            d["name"] = v.decode()
        elif f == 6:
            d["kind"] = v
        elif f == 7:
            d["start"] = v
        elif f == 8:
            d["end"] = v
    return d


class Receiver:
    """An OTLP/HTTP receiver on loopback: every POST's spans, decoded."""

    def __init__(self):
        self.spans, self.posts, self.resource = [], [], {}
        self.lock = threading.Lock()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                res, spans = decode_request(body)
                with outer.lock:
                    outer.posts.append((self.path, self.headers["Content-Type"]))
                    outer.resource.update(res)
                    outer.spans.extend(spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def take(self, n, timeout):
        wait_until(lambda: len(self.spans) >= n, timeout, what="%d spans" % n)
        with self.lock:
            got, self.spans = self.spans, []
        return got


class TracesTest(DaemonTest):
    def start(self, tracing, receiver_port=None):
        self.receiver = Receiver() if receiver_port is None else None
        if self.receiver:
            self.addCleanup(self.receiver.stop)
        port, hport, self.mport = free_port(), free_port(), free_port()
        rport = receiver_port or self.receiver.port
        conf = "\n".join([
            "listen: [127.0.0.1:%d, {address: 127.0.0.1:%d, protocol: http}]" % (port, hport),
            "redis: {address: %s}" % self.start_redis().address,
            "metrics: {listen: 127.0.0.1:%d}" % self.mport,
            "tracing: {endpoint: \"http://127.0.0.1:%d/v1/traces\"%s}" % (rport, tracing),
            "policies:", "  login: 2/60s", ""])
        self.daemon = self.start_daemon(config=conf, port=port)
        self.hport = hport

    def http_allow(self, user, tp=None):
        req = urllib.request.Request("http://127.0.0.1:%d/v1/allow?user=%s&action=login"
                                     % (self.hport, user), method="POST")
        if tp:
            req.add_header("traceparent", tp)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def tree(self, spans, trace_id=TRACE_ID, parent_id=None):
        """The spans of one decision of trace_id (of the caller's span
        parent_id, when given), checked as a tree: {"decision": ...,
        "parse": ..., "decider": its child named after who decided, and for
        Redis's, "batch" under it}; each inside its parent's time."""
        mine = [s for s in spans if s["trace_id"] == trace_id]
        d = [s for s in mine if s["name"] == "ratelimitd.decision" and
             (parent_id is None or s.get("parent_id") == parent_id)]
        self.assertEqual(len(d), 1, spans)
        d = d[0]
        kids = {s["name"]: s for s in mine if s.get("parent_id") == d["span_id"]}
        self.assertEqual(len(kids), 2, (d, mine))
        t = {"decision": d, "parse": kids.pop("ratelimitd.parse")}
        t["decider"] = c = next(iter(kids.values()))
        for s in (t["parse"], c):
            self.assertTrue(d["start"] <= s["start"] <= s["end"] <= d["end"], (d, s))
        self.assertEqual(t["parse"]["start"], d["start"])  # the bytes read begin it
        self.assertLessEqual(t["parse"]["end"], c["start"])  # parsed, then asked
        under = [s for s in mine if s.get("parent_id") == c["span_id"]]
        if c["name"] == "ratelimitd.redis":
            self.assertEqual([s["name"] for s in under], ["ratelimitd.batch"], mine)
            t["batch"] = b = under[0]
            self.assertGreaterEqual(b["attrs"]["ratelimit.batch_size"], 1)
            self.assertTrue(c["start"] <= b["start"] < b["end"] <= c["end"], (c, b))  # a real round trip
        else:
            self.assertEqual(under, [], mine)
        for s in t.values():
            if s is not d:
                self.assertEqual(s["kind"], 1)  # INTERNAL
        return t

    def test_parents_from_every_front_end(self):
        self.start("")  # sample 0: only sampled traceparents
        # HTTP's header
        self.assertEqual(self.http_allow("alice", traceparent()), 200)
        t = self.tree(self.receiver.take(4, 10 * SLOW))
        d, c = t["decision"], t["decider"]
        self.assertEqual(d["parent_id"], PARENT_ID)  # the caller's span
        self.assertEqual(d["kind"], 2)  # SERVER
        self.assertEqual(c["name"], "ratelimitd.redis")
        self.assertEqual(d["attrs"], {"ratelimit.action": "login", "ratelimit.allowed": True})
        self.assertEqual(t["batch"]["attrs"]["ratelimit.batch_size"], 1)  # alone
        self.assertLess(abs(d["start"] / 1e9 - time.time()), 60)  # unix nanoseconds
        self.assertEqual(self.receiver.resource, {"service.name": "ratelimitd"})
        self.assertEqual(self.receiver.posts[0], ("/v1/traces", "application/x-protobuf"))
        # the line protocol's TRACE, a denial from the deny cache after Redis's
        other = "%032x" % 7
        with Client(port=self.daemon.port) as cl:
            for i in range(4):
                cl.request("ALLOW bob login TRACE %s" % traceparent(trace=other,
                                                                    parent="%016x" % (i + 1)))
            self.assertEqual(cl.request("ALLOW bob login TRACE 00-xyz-01"),
                             "ERR syntax TRACE takes a W3C traceparent: "
                             "00-<32 hex>-<16 hex>-<2 hex>")
        # two allowed and one denied by Redis (4 spans each), a repeat of
        # that denial from the deny cache (3: no batch)
        spans = self.receiver.take(15, 10 * SLOW)
        trees = [self.tree(spans, other, "%016x" % (i + 1)) for i in range(4)]
        self.assertEqual([t["decision"]["attrs"]["ratelimit.allowed"] for t in trees],
                         [True, True, False, False])
        self.assertEqual([t["decider"]["name"] for t in trees],
                         ["ratelimitd.redis"] * 3 + ["ratelimitd.cache"])
        # unsampled, absent or malformed contexts: nothing
        self.assertEqual(self.http_allow("carol", traceparent(flags="00")), 200)
        self.assertEqual(self.http_allow("carol"), 200)
        self.assertEqual(self.http_allow("carol", "garbage"), 429)
        # a traced one after them: once its spans are in, nothing came before
        self.assertEqual(self.http_allow("dave", traceparent(trace="%032x" % 9)), 200)
        spans = self.receiver.take(4, 10 * SLOW)
        self.assertEqual({s["trace_id"] for s in spans}, {"%032x" % 9}, spans)
        # (the daemon counts a POST's spans exported once it reads the answer)
        wait_until(lambda: scrape_metrics(self.mport).get(
            'ratelimitd_trace_spans_total{result="exported"}') == 23, 5 * SLOW,
            what="23 spans exported")
        m = scrape_metrics(self.mport)
        self.assertEqual(m['ratelimitd_trace_spans_total{result="made"}'], 23)
        self.assertEqual(m['ratelimitd_trace_spans_total{result="failed"}'], 0)

    def test_grpc_metadata(self):
        from rls_client import RlsClient
        self.receiver = Receiver()
        self.addCleanup(self.receiver.stop)
        port, gport = free_port(), free_port()
        rules = os.path.join(self.tmpdir, "rules.yaml")
        with open(rules, "w") as f:
            f.write("domain: web\ndescriptors:\n  - key: user\n"
                    "    rate_limit: {unit: minute, requests_per_unit: 5}\n")
        conf = "\n".join([
            "listen: [127.0.0.1:%d, {address: 127.0.0.1:%d, protocol: grpc}]" % (port, gport),
            "redis: {address: %s}" % self.start_redis().address,
            "envoy: {config: %s}" % rules,
            "tracing: {endpoint: \"http://127.0.0.1:%d/v1/traces\"}" % self.receiver.port, ""])
        self.start_daemon(config=conf, port=port)
        rls = RlsClient(gport)
        self.addCleanup(rls.close)
        rls.call("web", [[("user", "alice")]], metadata=[("traceparent", traceparent())])
        t = self.tree(self.receiver.take(4, 10 * SLOW))
        self.assertEqual(t["decision"]["parent_id"], PARENT_ID)
        self.assertEqual(t["decider"]["name"], "ratelimitd.redis")
        # two descriptors: a MALLOW, one decision of the call's pairs
        other = "%032x" % 5
        rls.call("web", [[("user", "alice")], [("user", "bob")]],
                 metadata=[("traceparent", traceparent(trace=other))])
        t = self.tree(self.receiver.take(4, 10 * SLOW), other)
        self.assertEqual(t["decider"]["name"], "ratelimitd.redis")

    def test_sampled_without_a_parent_and_a_receiver_down(self):
        dead = free_port()  # nothing listens there
        self.start(", sample: 1, max_queue: 16", receiver_port=dead)
        for i in range(20):
            self.http_allow("u%d" % i)
        # 20 decisions, 80 spans, faster than a half-second export tick
        # empties a queue of 16: some dropped; the receiver down fails every
        # span sent; decisions go on
        def counts():
            m = scrape_metrics(self.mport)
            return {k: m['ratelimitd_trace_spans_total{result="%s"}' % k]
                    for k in ("made", "dropped", "exported", "failed")}
        wait_until(lambda: counts()["failed"] == counts()["made"], 15 * SLOW,
                   what="every span made failed")
        c = counts()
        self.assertEqual(c["made"] + c["dropped"], 80, c)  # 4 each: a decision's together
        self.assertEqual(c["made"] % 4, 0, c)
        self.assertGreater(c["dropped"], 0, c)
        self.assertEqual(c["exported"], 0, c)
        self.daemon.wait_log(r"tracing: 127\.0\.0\.1:%d/v1/traces: no answer" % dead, 5 * SLOW)
        with Client(port=self.daemon.port) as cl:
            self.assertTrue(cl.request("ALLOW z login").startswith("ALLOWED"))


if __name__ == "__main__":
    unittest.main()
