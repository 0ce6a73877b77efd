"""Traces (issue 33): with `tracing`, decisions that come with a sampled W3C
traceparent (HTTP's header, gRPC's metadata, ALLOW's TRACE) arrive at an
OTLP/HTTP receiver, decoded here from the protobuf wire format, as a
"ratelimitd.decision" span that is the caller's span's child and a span of
who decided under it; an unsampled or absent context is not traced unless
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
        out[d[1].decode()] = val[1].decode() if 1 in val else bool(val.get(2, 0))
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

    def pair(self, spans, trace_id=TRACE_ID):
        """The decision span of trace_id and its one child."""
        mine = [s for s in spans if s["trace_id"] == trace_id]
        self.assertEqual(len(mine), 2, spans)
        d = next(s for s in mine if s["name"] == "ratelimitd.decision")
        c = next(s for s in mine if s is not d)
        return d, c

    def test_parents_from_every_front_end(self):
        self.start("")  # sample 0: only sampled traceparents
        # HTTP's header
        self.assertEqual(self.http_allow("alice", traceparent()), 200)
        d, c = self.pair(self.receiver.take(2, 10 * SLOW))
        self.assertEqual(d["parent_id"], PARENT_ID)  # the caller's span
        self.assertEqual(d["kind"], 2)  # SERVER
        self.assertEqual(c["parent_id"], d["span_id"])
        self.assertEqual(c["name"], "ratelimitd.redis")
        self.assertEqual(d["attrs"], {"ratelimit.action": "login", "ratelimit.allowed": True})
        self.assertTrue(d["start"] <= c["start"] <= c["end"] <= d["end"], (d, c))
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
        spans = self.receiver.take(8, 10 * SLOW)
        decisions = [s for s in spans if s["name"] == "ratelimitd.decision"]
        self.assertEqual(sorted(s["parent_id"] for s in decisions),
                         ["%016x" % (i + 1) for i in range(4)])
        self.assertEqual([s["attrs"]["ratelimit.allowed"] for s in
                          sorted(decisions, key=lambda s: s["parent_id"])],
                         [True, True, False, False])
        children = {s["parent_id"]: s["name"] for s in spans if s not in decisions}
        self.assertEqual(sorted(children.values())[-1], "ratelimitd.redis")
        self.assertIn("ratelimitd.cache", children.values())  # a repeat of Redis's denial
        for s in decisions:
            self.assertIn(s["span_id"], children)
        # unsampled, absent or malformed contexts: nothing
        self.assertEqual(self.http_allow("carol", traceparent(flags="00")), 200)
        self.assertEqual(self.http_allow("carol"), 200)
        self.assertEqual(self.http_allow("carol", "garbage"), 429)
        # a traced one after them: once its spans are in, nothing came before
        self.assertEqual(self.http_allow("dave", traceparent(trace="%032x" % 9)), 200)
        spans = self.receiver.take(2, 10 * SLOW)
        self.assertEqual({s["trace_id"] for s in spans}, {"%032x" % 9}, spans)
        # (the daemon counts a POST's spans exported once it reads the answer)
        wait_until(lambda: scrape_metrics(self.mport).get(
            'ratelimitd_trace_spans_total{result="exported"}') == 12, 5 * SLOW,
            what="12 spans exported")
        m = scrape_metrics(self.mport)
        self.assertEqual(m['ratelimitd_trace_spans_total{result="made"}'], 12)
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
        d, c = self.pair(self.receiver.take(2, 10 * SLOW))
        self.assertEqual(d["parent_id"], PARENT_ID)
        self.assertEqual(c["parent_id"], d["span_id"])

    def test_sampled_without_a_parent_and_a_receiver_down(self):
        dead = free_port()  # nothing listens there
        self.start(", sample: 1, max_queue: 16", receiver_port=dead)
        for i in range(20):
            self.http_allow("u%d" % i)
        # 20 decisions, 40 spans, faster than a half-second export tick
        # empties a queue of 16: some dropped; the receiver down fails every
        # span sent; decisions go on
        def counts():
            m = scrape_metrics(self.mport)
            return {k: m['ratelimitd_trace_spans_total{result="%s"}' % k]
                    for k in ("made", "dropped", "exported", "failed")}
        wait_until(lambda: counts()["failed"] == counts()["made"], 15 * SLOW,
                   what="every span made failed")
        c = counts()
        self.assertEqual(c["made"] + c["dropped"], 40, c)
        self.assertGreater(c["dropped"], 0, c)
        self.assertEqual(c["exported"], 0, c)
        self.daemon.wait_log(r"tracing: 127\.0\.0\.1:%d/v1/traces: no answer" % dead, 5 * SLOW)
        with Client(port=self.daemon.port) as cl:
            self.assertTrue(cl.request("ALLOW z login").startswith("ALLOWED"))


if __name__ == "__main__":
    unittest.main()
