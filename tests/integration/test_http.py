"""HTTP listeners (protocol: http): the JSON API and forward-auth, through
real sockets, http.client and curl: every status code, the RateLimit
headers, keep-alive and pipelining, who the user is behind a proxy, and
malformed or hostile requests (an error, and a close where the framing is
lost; bounded memory)."""

import http.client
import json
import select
import shutil
import socket
import subprocess
import time
import unittest

from harness import SLOW, DaemonTest, RawSocket, free_port

POLICIES = {"reply": "3/60s", "big": "100000/60s",
            "up": "{algorithm: funnel, capacity: 15, rate: 30/60s}",
            "down": "{limits: [2/60s], on_store_error: error}",
            "open": "{limits: [2/60s], on_store_error: allow}"}
CURL = shutil.which("curl") or "/usr/bin/curl"


def listen(port, **opts):
    items = ["address: \"127.0.0.1:%d\"" % port, "protocol: http"]
    for k, v in opts.items():
        items.append("%s: %s" % (k, v))
    return "{%s}" % ", ".join(items)


class Raw(RawSocket):
    """A socket speaking HTTP bytes, reading whole responses."""

    def response(self):
        """(status, {lower-case header: value}, body) of the next response."""
        while b"\r\n\r\n" not in self.buf:
            self.recv_more()
        head, rest = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for ln in lines[1:]:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        self.buf = rest
        while len(self.buf) < n:
            self.recv_more()
        body, self.buf = self.buf[:n], self.buf[n:]
        return status, headers, body


class HttpTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.line = free_port()
        self.api, self.admin, self.nginx_port, self.strict = (free_port(), free_port(),
                                                               free_port(), free_port())
        self.daemon = self.start_daemon(
            POLICIES, port=self.line, admin=False, max_line=1024,
            listen=["127.0.0.1:%d" % self.line,
                    listen(self.api),
                    listen(self.admin, admin="true", legacy_headers="true",
                           user_header="X-RateLimit-User"),
                    listen(self.nginx_port, deny_status=403),
                    listen(self.strict, trusted_proxies="[127.0.0.1/32]")])

    def raw(self, port, source="127.0.0.1"):
        c = Raw(port, source)
        self.addCleanup(c.close)
        return c

    def get(self, port, path, method="GET", body=None, headers=None, source="127.0.0.1"):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5,
                                       source_address=(source, 0))
        self.addCleanup(c.close)
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data

    # -- the JSON API

    def test_allow_to_the_limit_and_past_it(self):
        got = [self.get(self.api, "/v1/allow?user=alice&action=reply") for _ in range(4)]
        self.assertEqual([g[0] for g in got], [200, 200, 200, 429])
        st, h, body = got[0]
        self.assertEqual(json.loads(body), {"allowed": True, "limit": 3, "remaining": 2,
                                            "retry_after_ms": 0, "reset_ms": 60000})
        self.assertEqual(h["content-type"], "application/json")
        self.assertEqual(h["ratelimit-policy"], '"reply";q=3;w=60')
        self.assertEqual(h["ratelimit"], '"reply";r=2;t=60')
        self.assertNotIn("retry-after", h)
        st, h, body = got[3]
        d = json.loads(body)
        self.assertFalse(d["allowed"])
        self.assertGreater(d["retry_after_ms"], 59000)
        self.assertEqual(h["retry-after"], str((d["retry_after_ms"] + 999) // 1000))
        self.assertEqual(h["ratelimit"], '"reply";r=0;t=%d' % ((d["reset_ms"] + 999) // 1000))
        # the other protocols see the same state
        c = self.daemon.client()
        self.addCleanup(c.close)
        self.assertTrue(c.request("PEEK alice reply").startswith("DENIED 3 0 "))

    def test_post_json_peek_cost_and_funnel(self):
        st, h, body = self.get(self.api, "/v1/allow", "POST",
                               json.dumps({"user": "b\u00e9b \"x\"", "action": "up", "cost": 5}),
                               {"Content-Type": "application/json"})
        self.assertEqual(st, 200, body)
        self.assertEqual(json.loads(body)["remaining"], 10)
        self.assertEqual(h["ratelimit-policy"], '"up";q=15;w=30')
        # the same user by query string (UTF-8, percent-encoded)
        st, _, body = self.get(self.api, "/v1/peek?user=b%C3%A9b+%22x%22&action=up&cost=11")
        self.assertEqual((st, json.loads(body)["allowed"]), (429, False))
        st, _, body = self.get(self.api, "/v1/peek?user=b%C3%A9b+%22x%22&action=up&cost=10")
        self.assertEqual((st, json.loads(body)["remaining"]), (200, 10), "PEEK takes nothing")

    def test_post_json_ignores_unknown_keys(self):
        """A body's other keys are ignored whatever their values, nested
        ones too (a client's metadata); past 32 levels, a clear 400."""
        body = {"user": "dora", "action": "reply", "cost": 2,
                "meta": {"trace": "t1", "tags": ["a", {"b": [[], {}, None, -1.5e3]}]},
                "flags": [True, False]}
        st, _, data = self.get(self.api, "/v1/allow", "POST", json.dumps(body),
                               {"Content-Type": "application/json"})
        self.assertEqual((st, json.loads(data)["remaining"]), (200, 1), data)
        deep = '{"user": "dora", "action": "reply", "x": %s}' % ("[" * 33 + "]" * 33)
        st, _, data = self.get(self.api, "/v1/allow", "POST", deep)
        self.assertEqual((st, json.loads(data)),
                         (400, {"error": "syntax", "message":
                                "JSON nested deeper than 32 levels in an ignored value"}))
        # nothing was taken by the refused request
        st, _, data = self.get(self.api, "/v1/peek?user=dora&action=reply")
        self.assertEqual((st, json.loads(data)["remaining"]), (200, 1), data)

    def test_reset_only_on_admin_listeners(self):
        for _ in range(3):
            self.get(self.api, "/v1/allow?user=carol&action=reply")
        st, _, body = self.get(self.api, "/v1/reset?user=carol&action=reply", "POST")
        self.assertEqual((st, json.loads(body)["error"]), (403, "forbidden"))
        st, _, body = self.get(self.admin, "/v1/reset?user=carol&action=reply", "POST")
        self.assertEqual((st, json.loads(body)), (200, {"ok": True}))
        self.assertEqual(self.get(self.api, "/v1/allow?user=carol&action=reply")[0], 200)
        self.assertEqual(self.get(self.admin, "/v1/reset?user=carol&action=reply")[0], 405)

    def test_errors(self):
        cases = [
            ("/v1/allow?user=u&action=nosuch", "GET", None, 404, "unknown-action"),
            ("/v1/allow?user=u&action=reply&cost=0", "GET", None, 400, "bad-cost"),
            ("/v1/allow?action=reply", "GET", None, 400, "bad-user"),
            ("/v1/allow?user=u", "GET", None, 400, "syntax"),
            ("/v1/allow?user=%zz&action=reply", "GET", None, 400, "syntax"),
            ("/v1/allow?user=" + "u" * 513 + "&action=reply", "GET", None, 400, "bad-user"),
            ("/v1/allow", "POST", b'{"user": "u", "action": ', 400, "syntax"),
            ("/v1/allow", "POST", b'{"user": "u", "action": "reply", "cost": "2"}', 400,
             "bad-cost"),
            ("/v1/allow", "POST", b'[1]', 400, "syntax"),
            ("/v1/allow", "DELETE", None, 405, "method-not-allowed"),
            ("/nope", "GET", None, 404, "not-found"),
            ("/v1/allow?user=u&action=down", "GET", None, 200, None),
        ]
        for path, method, body, status, code in cases:
            with self.subTest(path=path[:60], method=method):
                st, h, data = self.get(self.api, path, method, body)
                self.assertEqual(st, status, data)
                if code:
                    self.assertEqual(json.loads(data)["error"], code, data)
                    self.assertTrue(json.loads(data)["message"])

    def test_repeated_parameter_is_refused(self):
        """cost=1&cost=2 is a 400 naming the parameter, not the last value
        taken; nothing is counted."""
        for path, name in (("/v1/allow?user=eve&action=reply&cost=1&cost=2", "cost"),
                           ("/v1/allow?user=eve&user=bob&action=reply", "user"),
                           ("/v1/mallow?user=eve&action=reply&cost=1&cost=2", "cost")):
            with self.subTest(path=path):
                st, _, data = self.get(self.api, path)
                self.assertEqual((st, json.loads(data)),
                                 (400, {"error": "syntax",
                                        "message": "%s is in the query more than once" % name}))
        st, _, data = self.get(self.api, "/v1/peek?user=eve&action=reply")
        self.assertEqual((st, json.loads(data)["remaining"]), (200, 3), data)
        # a parameter that is not ours may repeat
        st, _, data = self.get(self.api, "/v1/allow?user=eve&action=reply&tag=a&tag=b")
        self.assertEqual((st, json.loads(data)["remaining"]), (200, 2), data)

    def test_store_errors(self):
        self.redis.stop()
        st, h, body = self.get(self.api, "/v1/allow?user=u&action=down")
        self.assertEqual((st, json.loads(body)["error"]), (503, "store-unavailable"), body)
        st, h, body = self.get(self.api, "/v1/allow?user=u&action=open")
        self.assertEqual(st, 200, body)
        self.assertEqual(json.loads(body)["remaining"], -1)
        self.assertEqual(h["ratelimit-policy"], '"open";q=2;w=60')
        self.assertNotIn("ratelimit", h, "no remaining to tell when Redis did not decide")

    def test_legacy_headers(self):
        st, h, _ = self.get(self.admin, "/v1/allow?user=dan&action=reply")
        self.assertEqual((h["x-ratelimit-limit"], h["x-ratelimit-remaining"],
                          h["x-ratelimit-reset"]), ("3", "2", "60"))
        self.assertNotIn("x-ratelimit-limit", self.get(self.api, "/v1/allow?user=d&action=reply")[1])

    def test_curl(self):
        out = subprocess.run([CURL, "-s", "-i", "http://127.0.0.1:%d/v1/allow?user=eve&action=reply"
                              % self.api], capture_output=True, timeout=10)
        text = out.stdout.decode()
        self.assertTrue(text.startswith("HTTP/1.1 200 OK\r\n"), text)
        self.assertIn('\r\nRateLimit: "reply";r=2;t=60\r\n', text)

    # -- keep-alive, pipelining, closing

    def test_keep_alive_and_pipelining(self):
        c = self.raw(self.api)
        req = b"GET /v1/allow?user=fay&action=big HTTP/1.1\r\nHost: x\r\n\r\n"
        c.send(req * 50)
        got = [c.response() for _ in range(50)]
        self.assertEqual([json.loads(b)["remaining"] for _, _, b in got],
                         list(range(99999, 99949, -1)))
        self.assertFalse(c.closed(0.3), "keep-alive: the connection stays open")
        # Connection: close is honoured, and nothing after it is read
        c.send(b"GET /v1/peek?user=fay&action=big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
               + req)
        st, h, _ = c.response()
        self.assertEqual((st, h.get("connection")), (200, "close"))
        self.assertTrue(c.closed())
        self.assertEqual(c.buf, b"")

    def test_http10_closes_unless_keep_alive(self):
        c = self.raw(self.api)
        c.send(b"GET /v1/peek?user=g&action=big HTTP/1.0\r\n\r\n")
        self.assertEqual(c.response()[0], 200)
        self.assertTrue(c.closed())
        c = self.raw(self.api)
        c.send(b"GET /v1/peek?user=g&action=big HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        self.assertEqual(c.response()[0], 200)
        self.assertFalse(c.closed(0.3))

    # -- hostile or malformed

    def assertClosedWith(self, data, status, port=None):
        c = self.raw(port or self.api)
        c.send(data)
        st, h, body = c.response()
        self.assertEqual(st, status, (data[:60], body))
        self.assertEqual(h.get("connection"), "close", data[:60])
        self.assertTrue(c.closed(), "closed after %r" % data[:60])

    def test_malformed(self):
        self.assertClosedWith(b"GARBAGE\r\n\r\n", 400)
        self.assertClosedWith(b"GET /v1/allow HTTP/2.0\r\n\r\n", 505)
        self.assertClosedWith(b"GET /v1/allow HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400)
        self.assertClosedWith(b"GET /v1/allow HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n", 400)
        self.assertClosedWith(b"POST /v1/allow HTTP/1.1\r\nHost: x\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501)
        self.assertClosedWith(b"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n",
                              413)
        self.assertClosedWith(b"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                              b"Content-Length: 2\r\n\r\nab", 400)
        # no Host: an error, but the framing holds and the connection stays
        c = self.raw(self.api)
        c.send(b"GET /v1/peek?user=h&action=big HTTP/1.1\r\n\r\n"
               b"GET /v1/peek?user=h&action=big HTTP/1.1\r\nHost: x\r\n\r\n")
        st, _, body = c.response()
        self.assertEqual((st, json.loads(body)["error"]), (400, "syntax"))
        self.assertEqual(c.response()[0], 200)

    def test_huge_headers_and_slow_drip(self):
        """Headers past 16 KiB: 431 and a close, whether sent at once or
        dripped; the daemon holds no more than that per connection."""
        self.assertClosedWith(b"GET /v1/allow HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000,
                              431)
        c = self.raw(self.api)
        c.send(b"GET /v1/allow HTTP/1.1\r\nHost: x\r\n")
        sent = 0
        try:
            for _ in range(40):
                c.send(b"X-Pad: " + b"p" * 500 + b"\r\n")
                sent += 507
                # stop once the daemon has answered (it closes after that)
                if select.select([c.sock], [], [], 0.005)[0]:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass  # it answered at 16 KiB and closed: read what it said
        self.assertGreaterEqual(sent, 16384 - 100, "answered before the window was full")
        st, h, _ = c.response()
        self.assertEqual(st, 431)
        self.assertTrue(c.closed())

    def test_many_connections_each_answered(self):
        conns = [self.raw(self.api) for _ in range(50)]
        for i, c in enumerate(conns):
            c.send(b"GET /v1/allow?user=m%d&action=reply HTTP/1.1\r\nHost: x\r\n\r\n" % i)
        for c in conns:
            self.assertEqual(c.response()[0], 200)

    # -- forward-auth

    def test_forward_auth_by_client_address(self):
        """From a trusted proxy (loopback): the client of X-Forwarded-For
        (rightmost untrusted) or X-Real-IP; two clients, two limits."""
        xff = {"X-Forwarded-For": "198.51.100.7, 10.9.9.9, 127.0.0.1"}
        got = [self.get(self.api, "/auth/reply", headers=xff) for _ in range(4)]
        self.assertEqual([g[0] for g in got], [200, 200, 200, 429])
        self.assertEqual(got[0][2], b"", "an allowing forward-auth answer carries no body")
        self.assertEqual(got[3][1]["ratelimit"].split(";")[1], "r=0")
        self.assertTrue(int(got[3][1]["retry-after"]) > 0)
        # a denial carries problem details (RFC 9457) for proxies that pass it on
        self.assertEqual(got[3][1]["content-type"], "application/problem+json")
        problem = json.loads(got[3][2])
        self.assertEqual({k: problem[k] for k in ("type", "title", "status")},
                         {"type": "about:blank", "title": "Too Many Requests", "status": 429})
        self.assertEqual(problem["detail"],
                         "rate limited; retry after %s s" % got[3][1]["retry-after"])
        self.assertTrue(0 < problem["retry_after_ms"] <= 60000, problem)
        # the client was 10.9.9.9 (the rightmost address that is not a trusted proxy)
        c = self.daemon.client()
        self.addCleanup(c.close)
        self.assertTrue(c.request("PEEK 10.9.9.9 reply").startswith("DENIED"))
        self.assertTrue(c.request("PEEK 198.51.100.7 reply").startswith("ALLOWED 3 3"))
        # another client, another limit; X-Real-IP too
        self.assertEqual(self.get(self.api, "/auth/reply",
                                  headers={"X-Real-IP": "10.9.9.10"})[0], 200)
        # no header: the peer itself
        self.assertEqual(self.get(self.api, "/auth/reply?cost=3")[0], 200)
        self.assertTrue(c.request("PEEK 127.0.0.1 reply").startswith("DENIED 3 0 "))
        # the nginx listener denies with 403, Retry-After and all
        for _ in range(3):
            self.get(self.nginx_port, "/auth/reply", headers={"X-Real-IP": "10.1.1.1"})
        st, h, _ = self.get(self.nginx_port, "/auth/reply", headers={"X-Real-IP": "10.1.1.1"})
        self.assertEqual(st, 403)
        self.assertIn("retry-after", h)

    def test_head_replies_carry_no_body(self):
        """HEAD gets the head of what GET would (status, Content-Length),
        no body: on a keep-alive connection the next reply is read whole
        (a denial's problem body once came after a HEAD and was taken for
        the next reply's start)."""
        raw = socket.create_connection(("127.0.0.1", self.api), timeout=5)
        self.addCleanup(raw.close)
        h = "Host: x\r\nX-Real-IP: 10.6.6.6\r\n\r\n"
        reqs = "".join("HEAD /auth/reply HTTP/1.1\r\n" + h for _ in range(4))
        reqs += "HEAD /nowhere HTTP/1.1\r\n" + h + "GET /auth/reply HTTP/1.1\r\n" + h
        raw.sendall(reqs.encode())
        data = b""
        deadline = time.monotonic() + 5
        while data.count(b"HTTP/1.1 ") < 6 or not data.endswith(b"}\n"):
            self.assertLess(time.monotonic(), deadline, data)
            data += raw.recv(65536)
        heads = data.split(b"HTTP/1.1 ")[1:]
        self.assertEqual([x[:3] for x in heads], [b"200", b"200", b"200", b"429", b"404", b"429"])
        for x in heads[:5]:  # nothing after a HEAD's blank line
            self.assertTrue(x.endswith(b"\r\n\r\n"), x)
        self.assertIn(b"content-length: 0", heads[0].lower())
        self.assertNotIn(b"content-length: 0", heads[3].lower())  # a GET's length
        body = heads[5].split(b"\r\n\r\n", 1)[1]
        self.assertEqual(json.loads(body)["status"], 429)

    def test_forward_auth_takes_no_user_or_action_from_the_query(self):
        """The query of /auth/ may be the client's own (Caddy keeps it):
        its action and user are the application's parameters, never the
        policy or the user decided (a client once picked a generous
        policy with ?action=big)."""
        h = {"X-Real-IP": "10.7.7.7"}
        got = [self.get(self.api, "/auth/reply?action=big&user=intruder", headers=h)[0]
               for _ in range(4)]
        self.assertEqual(got, [200, 200, 200, 429])
        c = self.daemon.client()
        self.addCleanup(c.close)
        self.assertTrue(c.request("PEEK 10.7.7.7 reply").startswith("DENIED 3 0 "))
        self.assertTrue(c.request("PEEK 10.7.7.7 big").startswith("ALLOWED 100000 100000 "))
        self.assertTrue(c.request("PEEK intruder reply").startswith("ALLOWED 3 3 "))
        # even values the API would refuse are not read
        self.assertEqual(self.get(self.api, "/auth/reply?user=" + "u" * 600,
                                  headers={"X-Real-IP": "10.7.7.8"})[0], 200)

    def test_forward_auth_untrusted_peer_is_itself(self):
        """A client reaching the port directly (127.0.0.2, not in
        trusted_proxies: [127.0.0.1/32]) is counted as itself, whatever
        X-Forwarded-For says."""
        for i in range(3):
            st, _, _ = self.get(self.strict, "/auth/reply", source="127.0.0.2",
                                headers={"X-Forwarded-For": "203.0.113.%d" % i})
            self.assertEqual(st, 200)
        st, _, _ = self.get(self.strict, "/auth/reply", source="127.0.0.2",
                            headers={"X-Forwarded-For": "203.0.113.99"})
        self.assertEqual(st, 429)
        # from the trusted proxy, the header is believed
        self.assertEqual(self.get(self.strict, "/auth/reply",
                                  headers={"X-Forwarded-For": "203.0.113.99"})[0], 200)

    def test_forward_auth_user_header(self):
        h = {"X-RateLimit-User": "api-key-1"}
        self.assertEqual([self.get(self.admin, "/auth/reply", headers=h)[0] for _ in range(4)],
                         [200, 200, 200, 429])
        self.assertEqual(self.get(self.admin, "/auth/reply",
                                  headers={"X-RateLimit-User": "api-key-2"})[0], 200)
        st, _, body = self.get(self.admin, "/auth/reply")
        self.assertEqual(st, 400, body)
        self.assertEqual(self.get(self.api, "/auth/nosuch")[0], 404)
        self.assertEqual(self.get(self.api, "/auth/")[0], 404)


class RequestTimeoutTest(DaemonTest):
    """request_timeout: a request begun must be whole in time (slowloris);
    dripping bytes does not extend it, finishing requests does."""

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.line, self.api = free_port(), free_port()
        self.daemon = self.start_daemon(
            POLICIES, port=self.line, admin=False, request_timeout="1s",
            listen=["127.0.0.1:%d" % self.line, listen(self.api)])

    def raw(self, port):
        c = Raw(port)
        self.addCleanup(c.close)
        return c

    def drip_until_answered(self, c, data):
        """Sends data a byte every 50 ms until the daemon answers; the
        seconds from the first byte to the answer."""
        t0 = time.monotonic()
        for b in data:
            try:
                c.send(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if select.select([c.sock], [], [], 0.05)[0]:
                break
        else:
            select.select([c.sock], [], [], 10 * SLOW)
        return time.monotonic() - t0

    def test_http_drip_gets_408_and_close(self):
        c = self.raw(self.api)
        took = self.drip_until_answered(
            c, b"GET /v1/allow?user=slow&action=reply HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 40)
        st, h, body = c.response()
        self.assertEqual((st, json.loads(body)["error"]), (408, "request-timeout"))
        self.assertEqual(h.get("connection"), "close")
        self.assertTrue(c.closed())
        self.assertGreaterEqual(took, 0.95)
        # nothing of the dripped request was decided
        with self.daemon.client() as lc:
            self.assertTrue(lc.request("PEEK slow reply").startswith("ALLOWED 3 3 "))

    def test_line_drip_gets_error_and_close(self):
        c = self.raw(self.line)
        took = self.drip_until_answered(c, b"ALLOW slow reply" + b" " * 100)
        self.assertTrue(c.closed())
        self.assertTrue(c.buf.startswith(b"ERR request-timeout "), c.buf)
        self.assertGreaterEqual(took, 0.95)

    def test_finished_requests_restart_the_clock(self):
        """Eight requests, each sent in two halves 200 ms apart: 1.6 s on
        one connection, longer than request_timeout (1 s), never a request
        older than it; all answered. An idle keep-alive connection is not
        timed out either."""
        c = self.raw(self.api)
        req = b"GET /v1/allow?user=steady&action=big HTTP/1.1\r\nHost: x\r\n\r\n"
        for _ in range(8):
            c.send(req[:20])
            time.sleep(0.2)
            c.send(req[20:])
            self.assertEqual(c.response()[0], 200)
        time.sleep(1.3)
        c.send(req)
        self.assertEqual(c.response()[0], 200)


if __name__ == "__main__":
    unittest.main()
