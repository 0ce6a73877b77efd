"""The live console (issue 33), on the metrics listener: in a real headless
chromium (Debian's, driven by its chromedriver), with 1,000 policies on a
real Redis, the page loads nothing from elsewhere, shows every action, and
updates: a hammered action becomes the busiest with its denials, and the
hammering user tops the most denied; an identity with the admin right sets
an override from the page that the next decision follows, and removes it;
an identity without that right sees none; with Redis down the page says so
and goes on updating, and an override made then fails visibly. Its HTTP
side (what a script or curl gets: the JSON, the errors, the headers) is
tested without the browser."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.parse

from browser import Browser, png_size
from harness import SLOW, SRCDIR, Client, DaemonTest, free_port, make_config, wait_until

OPS = "ops-token-0123456789abcdef"
APP = "app-token-0123456789abcdef"
POLICIES = 1000
HAMMERER = "mallory"


def request(port, method, path, body=None, token=None, headers=None):
    """(status, headers dict, body bytes) of one request to the metrics port."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    if body is not None:
        h["Content-Type"] = "application/x-www-form-urlencoded"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10 * SLOW)
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def form(**kw):
    return urllib.parse.urlencode(kw)


def doc_sessions():
    """The `$ curl ...` commands of docs/operations.md's "The live console"
    (a line ending in a backslash goes on), each with the lines it prints."""
    with open(os.path.join(SRCDIR, "docs", "operations.md")) as f:
        text = f.read()
    sec = text[text.index("## The live console"):]
    sec = sec[:sec.index("\n## ", 5)]
    out = []
    for block in re.findall(r"```\n(.*?)```", sec, re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            cmd = lines[i][2:]
            while cmd.endswith("\\"):
                i += 1
                cmd = cmd[:-1] + lines[i]
            i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            out.append((cmd, shown))
    return out


class ConsoleTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        for name, tok in (("ops", OPS), ("app", APP)):
            path = os.path.join(self.tmpdir, name + ".token")
            with open(path, "w") as f:
                f.write(tok + "\n")
            os.chmod(path, 0o600)
        self.port, self.mport = free_port(), free_port()

    def config(self, npolicies=POLICIES, metrics_extra=""):
        policies = {"login": "5/60s", "reply": "{algorithm: funnel, capacity: 3, rate: 3/1m}"}
        for i in range(npolicies - len(policies)):
            policies["p%04d" % i] = "%d/%ds" % (10 + i % 7, 60 + i % 5)
        ids = ("{ops: {token_file: %s/ops.token, rights: [decide, admin]}, "
               "app: {token_file: %s/app.token, rights: [decide]}}" % (self.tmpdir, self.tmpdir))
        return make_config(["127.0.0.1:%d" % self.port],
                           {"address": self.redis.address, "timeout": "1s"}, policies,
                           admin=False, identities=ids,
                           metrics="{listen: 127.0.0.1:%d%s}" % (self.mport, metrics_extra))

    def start(self, **kw):
        self.daemon = self.start_daemon(config=self.config(**kw), port=self.port)
        return self.daemon

    def reload(self, text, logged):
        start = len(self.daemon.log_lines())
        self.daemon.reload(text)
        self.daemon.wait_log(logged, 5 * SLOW, start=start)

    def state(self, token=None):
        status, h, body = request(self.mport, "GET", "/console/state", token=token)
        self.assertEqual(status, 200, body)
        self.assertEqual(h["content-type"], "application/json")
        return json.loads(body)

    # -- the HTTP side

    def test_state_and_overrides_over_http(self):
        self.start(npolicies=3)
        with Client(port=self.port) as c:
            for _ in range(7):
                c.request("ALLOW %s login" % HAMMERER)
        s = self.state()
        self.assertEqual(s["store"]["status"], "ok")
        self.assertEqual(s["store"]["backend"], "redis")
        acts = {a["name"]: a for a in s["actions"]}
        self.assertEqual(sorted(acts), ["login", "p0000", "reply"])
        self.assertEqual((acts["login"]["allowed"], acts["login"]["denied"]), (5, 2))
        self.assertEqual(acts["login"]["limits"], "sliding_window 5/1m")
        self.assertEqual(s["totals"], {"allowed": 5, "denied": 2})
        self.assertEqual(s["top"]["users"][0],
                         {"action": "login", "user": HAMMERER, "denied": 2, "requests": 7,
                          "over": 0})
        # rates are taken over the daemon's monotonic clock
        self.assertGreater(self.state()["mono"], s["mono"])
        # no token: no overrides, and why
        self.assertIsNone(s["overrides"])
        self.assertIn("no token", s["admin_why"])
        self.assertIn("lacks the admin right", self.state(APP)["admin_why"])
        self.assertEqual(self.state("wrong-token-0123456789")["admin_why"], "invalid token")
        self.assertEqual(self.state(OPS)["overrides"], [])

        # an odd user, as /top shows users: "%20" a blank (refused: an
        # override's user has none), "%C3%A9" two bytes
        cases = [
            (None, form(action="login", user=HAMMERER, spec="unlimited"), 401, "noauth"),
            ("wrong-token-0123456789", form(action="login", user=HAMMERER, spec="unlimited"),
             401, "auth-failed"),
            (APP, form(action="login", user=HAMMERER, spec="unlimited"), 403, "forbidden"),
            (OPS, form(action="nope", user=HAMMERER, spec="unlimited"), 404, "unknown-action"),
            (OPS, form(action="login", user=HAMMERER, spec="5/zz"), 400, "syntax"),
            (OPS, form(action="login", user=HAMMERER, spec="unlimited", ttl="0s"), 400, "syntax"),
            (OPS, form(action="login", user="a%20b", spec="unlimited"), 400, "bad-user"),
            (OPS, form(action="login", user="a%2", spec="unlimited"), 400, "bad-user"),
            (OPS, form(action="login", spec="unlimited"), 400, "bad-user"),
            (OPS, form(user=HAMMERER, spec="unlimited"), 400, "syntax"),
            (OPS, "user=%zz&action=login&spec=unlimited", 400, "syntax"),
        ]
        for token, body, code, word in cases:
            status, h, reply = request(self.mport, "POST", "/console/overrides", body, token)
            self.assertEqual((status, json.loads(reply)["error"]), (code, word), (body, reply))
            if status == 401:  # RFC 6750's challenge
                self.assertEqual(h["www-authenticate"], 'Bearer realm="ratelimitd"')
            # a wrong token costs its connection, as on the listeners
            self.assertEqual(h.get("connection") == "close", word == "auth-failed", h)
        # no token: 401 before anything else is read, a malformed form too
        status, _, reply = request(self.mport, "POST", "/console/overrides", "user=%zz")
        self.assertEqual((status, json.loads(reply)["error"]), (401, "noauth"))
        with Client(port=self.port) as c:
            self.assertTrue(c.request("ALLOW %s login" % HAMMERER).startswith("DENIED"))

        status, _, reply = request(self.mport, "POST", "/console/overrides",
                                   form(action="login", user=HAMMERER, spec="unlimited",
                                        ttl="1h"), OPS)
        self.assertEqual((status, json.loads(reply)), (200, {"ok": True}))
        status, _, reply = request(self.mport, "POST", "/console/overrides",
                                   form(action="reply", user="caf%C3%A9", spec="blocked"), OPS)
        self.assertEqual(status, 200, reply)
        with Client(port=self.port) as c:
            self.assertEqual(c.request("ALLOW %s login" % HAMMERER), "ALLOWED -1 -1 0 -1")
            self.assertTrue(c.request("ALLOW café reply").startswith("DENIED"))
            self.assertEqual(c.request("OVERRIDES 0").split()[0], "ERR")  # no admin here
        ov = {(o["action"], o["user"]): o for o in self.state(OPS)["overrides"]}
        self.assertEqual(sorted(ov), [("login", HAMMERER), ("reply", "caf%C3%A9")])
        self.assertEqual(ov[("reply", "caf%C3%A9")]["spec"], "blocked")
        self.assertEqual(ov[("reply", "caf%C3%A9")]["ttl_ms"], -1)
        self.assertTrue(3500000 < ov[("login", HAMMERER)]["ttl_ms"] <= 3600000)

        for user, action in ((HAMMERER, "login"), ("caf%C3%A9", "reply")):
            status, _, reply = request(self.mport, "DELETE", "/console/overrides?" +
                                       form(action=action, user=user), token=OPS)
            self.assertEqual(status, 200, reply)
        self.assertEqual(self.state(OPS)["overrides"], [])
        with Client(port=self.port) as c:
            self.assertTrue(c.request("ALLOW %s login" % HAMMERER).startswith("DENIED"))
            self.assertTrue(c.request("ALLOW café reply").startswith("ALLOWED"))
        # counted as any identity's requests: those that reached the
        # command (3 refused by it, 2 set, 2 cleared), not those the
        # console's own parse refused
        m = request(self.mport, "GET", "/metrics")[2].decode()
        self.assertEqual(re.findall(r'ratelimitd_identity_requests_total\{identity="ops"\} (\d+)',
                                    m), ["7"])

    def post_raw(self, method, path, body=b""):
        """A request on a socket of its own, sent whole; the socket."""
        s = socket.create_connection(("127.0.0.1", self.mport), timeout=10 * SLOW)
        self.addCleanup(s.close)
        s.sendall(b"%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                  b"Content-Type: application/x-www-form-urlencoded\r\n"
                  b"Content-Length: %d\r\n\r\n%s"
                  % (method, path, OPS.encode(), len(body), body))
        return s

    def test_overrides_waiting_for_redis(self):
        """An override is answered once Redis has it. Its client hangs up
        meanwhile: the answer finds no one. The daemon is told to stop
        meanwhile: it answers it first (and refuses new ones)."""
        self.start(npolicies=3)
        self.redis.sigstop()
        try:
            s = self.post_raw(b"POST", b"/console/overrides",
                              form(action="login", user=HAMMERER, spec="blocked").encode())
            wait_until(lambda: self.state()["pending_overrides"] == 1, 5 * SLOW,
                       what="the override waiting for Redis")
            s.close()
            time.sleep(0.1)
        finally:
            self.redis.sigcont()
        wait_until(lambda: self.state()["pending_overrides"] == 0, 5 * SLOW,
                   what="Redis's answer")
        status, _, reply = request(self.mport, "POST", "/console/overrides",
                                   form(action="login", user="x", spec="blocked"), OPS)
        self.assertEqual(status, 200, reply)

        self.redis.sigstop()
        try:
            s = self.post_raw(b"DELETE", b"/console/overrides?action=login&user=x")
            wait_until(lambda: self.state()["pending_overrides"] == 1, 5 * SLOW,
                       what="the removal waiting for Redis")
            self.daemon.signal(signal.SIGTERM)
            self.daemon.wait_log(r"no longer accepting", 5 * SLOW)
            status, _, reply = request(self.mport, "POST", "/console/overrides",
                                       form(action="login", user="y", spec="blocked"), OPS)
            self.assertEqual((status, json.loads(reply)["message"]),
                             (503, "the daemon is stopping"))
            time.sleep(0.2)
            self.assertTrue(self.daemon.running(), "it waits for the removal's answer")
        finally:
            self.redis.sigcont()
        got = b""
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            more = s.recv(4096)
            if not more:
                break
            got += more
        self.assertTrue(got.startswith(b"HTTP/1.1 200"), got)
        self.assertTrue(got.rstrip().endswith(b'{"ok":true}'), got)
        self.assertEqual(self.daemon.wait_exit(10 * SLOW), 0, "a clean exit")

    def test_files_methods_and_switch(self):
        self.start(npolicies=3)
        status, h, page = request(self.mport, "GET", "/console")
        self.assertEqual(status, 200)
        self.assertEqual(h["content-type"], "text/html; charset=utf-8")
        csp = h["content-security-policy"]
        self.assertIn("default-src 'none'", csp)
        self.assertIn("frame-ancestors 'none'", csp)
        self.assertEqual(h["x-content-type-options"], "nosniff")
        # every file the page names is the console's own
        for ref in (b"/console/console.js", b"/console/console.css", b"/console/favicon.svg"):
            self.assertIn(ref, page)
            status, h2, _ = request(self.mport, "GET", ref.decode())
            self.assertEqual(status, 200, ref)
        self.assertNotIn(b"http://", page.replace(b"http://www.w3.org", b""))
        self.assertNotIn(b"https://", page)
        # revalidation: the same ETag costs a 304 without a body
        status, _, body = request(self.mport, "GET", "/console",
                                  headers={"If-None-Match": h["etag"]})
        self.assertEqual((status, body), (304, b""))
        self.assertEqual(request(self.mport, "HEAD", "/console/state")[0], 200)
        self.assertEqual(request(self.mport, "GET", "/console/nothing")[0], 404)
        self.assertEqual(request(self.mport, "GET", "/consolex")[0], 404)
        status, h, _ = request(self.mport, "POST", "/console/state", "x=1")
        self.assertEqual((status, h["allow"]), (405, "GET, HEAD"))
        status, h, _ = request(self.mport, "GET", "/console/overrides")
        self.assertEqual((status, h["allow"]), (405, "POST, DELETE"))
        self.assertEqual(request(self.mport, "POST", "/metrics", "x=1")[0], 405)
        self.assertEqual(request(self.mport, "PUT", "/console/state", "x=1")[0], 501)
        status, _, _ = request(self.mport, "POST", "/console/overrides", "a" * 9000, OPS)
        self.assertIn(status, (413,))
        self.assertEqual(request(self.mport, "GET", "/metrics")[0], 200)  # still serving

        # metrics.top_series: 0 keeps users off the endpoint, the console's too
        self.reload(self.config(npolicies=3, metrics_extra=", top_series: 0"),
                    r"metrics\.top_series 10 -> 0")
        self.assertIsNone(self.state()["top"])
        # metrics.console: false, on a reload: the console is gone
        self.reload(self.config(npolicies=3, metrics_extra=", console: false"),
                    r"metrics\.console true -> false")
        self.assertEqual(request(self.mport, "GET", "/console")[0], 404)
        self.assertEqual(request(self.mport, "POST", "/console/overrides",
                                 form(action="login", user="x", spec="blocked"), OPS)[0], 404)
        self.assertEqual(request(self.mport, "GET", "/console/state")[0], 404)
        self.assertEqual(request(self.mport, "GET", "/metrics")[0], 200)

    def test_operations_examples(self):
        """docs/operations.md's curl session, as written, on this daemon:
        its port and its ops identity's token file swapped in."""
        self.start(npolicies=3)
        sessions = doc_sessions()
        self.assertEqual(len(sessions), 3, sessions)
        user = "203.0.113.7"
        after = ["DENIED", "ALLOWED", "ALLOWED"]  # blocked, removed, refused
        for (cmd, shown), verdict in zip(sessions, after):
            cmd = cmd.replace("127.0.0.1:9464", "127.0.0.1:%d" % self.mport)
            cmd = cmd.replace("/etc/ratelimitd/ops.token", os.path.join(self.tmpdir, "ops.token"))
            got = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True,
                                 timeout=10 * SLOW)
            self.assertEqual(got.stdout.splitlines(), shown, cmd)
            with Client(port=self.port) as c:
                self.assertTrue(c.request("ALLOW %s login" % user).startswith(verdict), cmd)

    # -- the page, in a browser

    def hammer(self, stop):
        """mallory hammering login, and a few others asking now and then."""
        with Client(port=self.port, timeout=10 * SLOW) as c:
            i = 0
            while not stop.is_set():
                c.request("ALLOW %s login" % HAMMERER)
                if i % 10 == 0:
                    c.request("ALLOW user-%d login" % (i % 50))
                    c.request("ALLOW user-%d p%04d" % (i % 50, i % 900))
                i += 1
                time.sleep(0.002)

    def test_top_over_in_a_browser(self):
        """The most denied users' `max over` column: /top's `over`, how much
        a denied count may be above the truth, shown for every row (0:
        exact) and explained in the header's title. A known load: 32 users
        denied once each fill login's list of 32; a 33rd, denied 4 times,
        takes the place of one of them, so its count starts from that one's
        1: 5 denied shown, 1 over."""
        self.start(npolicies=3)
        with Client(port=self.port) as c:
            for i in range(32):
                for _ in range(6):  # login is 5/60s: the 6th is denied
                    c.request("ALLOW u%02d login" % i)
            for _ in range(9):
                c.request("ALLOW late login")
        rows = {u["user"]: u for u in self.state()["top"]["users"]}
        self.assertEqual((rows["late"]["denied"], rows["late"]["over"]), (5, 1))
        with Browser() as b:
            b.open("http://127.0.0.1:%d/console?every=300" % self.mport)
            b.wait('return +document.getElementById("updated").dataset.polls >= 1', 30 * SLOW,
                   "the first state read")
            head = b.run('return [...document.querySelectorAll("#top thead th")]'
                         '.map(th => [th.textContent, th.title])')
            self.assertEqual([h[0] for h in head], ["user", "action", "denied", "requests",
                                                   "max over"])
            self.assertIn("may be above the truth: 0 is exact", head[4][1])
            shown = b.run('return [...document.querySelectorAll("#top tbody tr")]'
                          '.map(r => [...r.cells].map(c => c.textContent))')
            self.assertEqual(len(shown), 10, shown)
            self.assertEqual(shown[0][:3] + shown[0][4:], ["late", "login", "5", "1"])
            for row in shown[1:]:  # those never dropped: exact
                self.assertRegex(row[0], r"^u\d\d$")
                self.assertEqual((row[2], row[4]), ("1", "0"), row)

    def test_overrides_tile_in_a_browser(self):
        """The overrides tile says the overrides are hidden, and what shows
        them, to a page without an admin identity's token (not "-", as if
        there were none); with the ops token it counts them."""
        self.start(npolicies=3)
        tile = ('const t = document.getElementById("override-stat");'
                'const why = document.getElementById("override-hidden");'
                'return [document.getElementById("override-count").textContent,'
                ' why && why.checkVisibility() ? why.textContent : null, t && t.title]')
        with Browser() as b:
            b.open("http://127.0.0.1:%d/console?every=300" % self.mport)
            b.wait('return +document.getElementById("updated").dataset.polls >= 1', 30 * SLOW,
                   "the first state read")
            count, why, title = b.run(tile)
            self.assertEqual((count, why), ("hidden", "need an admin token"))
            self.assertIn("no token", title)
            b.type("#token", APP)  # no admin right: hidden still
            b.click("#token-save")
            b.wait('return document.getElementById("override-stat").title'
                   '.includes("lacks the admin right")', 10 * SLOW, "the app token refused")
            self.assertEqual(b.run(tile)[:2], ["hidden", "need an admin token"])
            b.type("#token", OPS)
            b.click("#token-save")
            b.wait('return document.getElementById("override-count").textContent === "0"',
                   10 * SLOW, "the ops token's count")
            self.assertEqual(b.run(tile), ["0", None, ""])
            status, _, reply = request(self.mport, "POST", "/console/overrides",
                                       form(action="login", user=HAMMERER, spec="blocked"), OPS)
            self.assertEqual(status, 200, reply)
            b.wait('return document.getElementById("override-count").textContent === "1"',
                   10 * SLOW, "the override counted")

        # no identity configured: no token can show them; it says where they are
        self.daemon.stop()
        self.daemon = self.start_daemon(
            config=make_config(["127.0.0.1:%d" % self.port],
                               {"address": self.redis.address, "timeout": "1s"},
                               {"login": "5/60s"}, admin=False,
                               metrics="{listen: 127.0.0.1:%d}" % self.mport),
            port=self.port, name="rl2")
        with Browser() as b:
            b.open("http://127.0.0.1:%d/console?every=300" % self.mport)
            b.wait('return +document.getElementById("updated").dataset.polls >= 1', 30 * SLOW,
                   "the first state read")
            count, why, title = b.run(tile)
            self.assertEqual((count, why), ("hidden", "shown on admin listeners only"))
            self.assertIn("no identity is configured", title)

    def test_page_in_a_browser(self):
        self.start()
        url = "http://127.0.0.1:%d/console?every=300" % self.mport
        stop = threading.Event()
        t = threading.Thread(target=self.hammer, args=(stop,))
        self.addCleanup(lambda: (stop.set(), t.join(30)))
        with Browser() as b:
            b.open(url)
            polls = 'return +document.getElementById("updated").dataset.polls'
            b.wait(polls + " >= 1", 30 * SLOW, "the first state read")
            # every action, each in its own row, the store healthy
            self.assertEqual(b.text("#action-count"), str(POLICIES))
            self.assertEqual(b.run('return document.querySelectorAll("#actions tbody tr").length'),
                             POLICIES)
            self.assertEqual(b.run('return document.getElementById("store-status")'
                                   '.dataset.status'), "ok")
            # nothing came from elsewhere
            names = b.run('return performance.getEntriesByType("resource").map(e => e.name)')
            origin = "http://127.0.0.1:%d/" % self.mport
            self.assertTrue(names and all(n.startswith(origin) for n in names), names)

            t.start()
            # the hammered action goes to the top of the table with its
            # rate and denials; the hammerer heads the most denied
            b.wait('const r = document.querySelector("#actions tbody tr");'
                   'return r.dataset.action === "login" && parseFloat(r.cells[2].textContent) > 5'
                   ' && parseFloat(r.cells[3].textContent) > 50',
                   30 * SLOW, "login the busiest action, mostly denied")
            b.wait('const r = document.querySelector("#top tbody tr");'
                   'return r && r.dataset.user === "%s" && r.dataset.action === "login"' % HAMMERER,
                   30 * SLOW, "the hammerer first among the most denied")
            before = b.run(polls)
            b.wait(polls + " >= %d" % (before + 2), 30 * SLOW, "more updates")
            # the filter keeps what it names
            b.type("#filter", "p000")
            self.assertEqual(b.run('return document.querySelectorAll("#actions tbody tr")'
                                   '.length'), 10)
            b.type("#filter", "")

            # no token: read-only, and it says why
            self.assertFalse(b.run('return document.getElementById("override-form")'
                                   '.checkVisibility()'))
            self.assertIn("no token", b.text("#admin-why"))
            # a token without the admin right sees no overrides
            b.type("#token", APP)
            b.click("#token-save")
            b.wait('return document.getElementById("admin-why").textContent'
                   '.includes("lacks the admin right")', 10 * SLOW, "the app token refused")
            # the admin's: an override from the page, which decisions follow
            b.type("#token", OPS)
            b.click("#token-save")
            b.wait('return document.getElementById("admin-why").textContent === "as ops"',
                   10 * SLOW, "the ops token taken")
            b.type("#ov-user", HAMMERER)
            b.type("#ov-action", "login")
            b.type("#ov-spec", "unlimited")
            b.type("#ov-ttl", "10m")
            b.click("#ov-submit")
            b.wait('return document.getElementById("message").dataset.kind === "ok"',
                   10 * SLOW, "the override taken")
            b.wait('return document.querySelector("#overrides tbody tr[data-user=\'%s\']")'
                   % HAMMERER, 10 * SLOW, "the override listed")
            with Client(port=self.port) as c:
                self.assertEqual(c.request("ALLOW %s login" % HAMMERER), "ALLOWED -1 -1 0 -1")
            shot = b.screenshot()
            self.assertEqual(png_size(shot)[0], 1280)
            if os.environ.get("RL_CONSOLE_SCREENSHOT"):
                with open(os.environ["RL_CONSOLE_SCREENSHOT"], "wb") as f:
                    f.write(shot)
            b.click("#overrides tbody tr[data-user='%s'] button.remove" % HAMMERER)
            b.wait('return !document.querySelector("#overrides tbody tr")', 10 * SLOW,
                   "the override gone")
            stop.set()
            t.join(30)
            with Client(port=self.port) as c:
                self.assertTrue(c.request("ALLOW %s login" % HAMMERER).startswith("DENIED"))

            # Redis down: the page says so and goes on; an override fails visibly
            self.redis.stop()
            b.wait('return document.getElementById("store-status").dataset.status === "down"',
                   30 * SLOW, "the store shown down")
            before = b.run(polls)
            b.wait(polls + " >= %d" % (before + 2), 30 * SLOW, "updates with Redis down")
            b.type("#ov-spec", "blocked")
            b.click("#ov-submit")
            b.wait('return document.getElementById("message").dataset.kind === "error"',
                   30 * SLOW, "the failed override reported")
            self.assertIn("not set: redis:", b.text("#message"))


if __name__ == "__main__":
    unittest.main()
