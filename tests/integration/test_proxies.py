"""forward-auth through the real reverse proxies of Debian 12, configured
with the blocks of docs/proxies.md as written (addresses and paths swapped
for the test's): nginx (auth_request) and Caddy (forward_auth) in front of
a small application (http.server in the test). A client sees 200 until
the limit, then 429 with
Retry-After and the RateLimit fields; two client addresses are limited
separately. With ratelimitd stopped, nginx answers 500 and Caddy 502 (they
fail closed), and nginx with the doc's fail-open lines passes requests to
the application."""

import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import unittest

from harness import SRCDIR, DaemonTest, free_port, spawn, wait_until
from test_docs import code_blocks

PROXIES_MD = os.path.join(SRCDIR, "docs", "proxies.md")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CADDY = shutil.which("caddy") or "/usr/bin/caddy"
POLICIES = {"login": "3/60s"}


def doc_block(info, name=None):
    """The ```info block of docs/proxies.md, the main one or the one marked
    <!-- example: proxy=name -->."""
    blocks = [b for b in code_blocks(PROXIES_MD)
              if b.info == info and b.opts.get("proxy") == name]
    assert len(blocks) == 1, "docs/proxies.md: one ```%s block %s, found %d" % (
        info, name or "unnamed", len(blocks))
    return "\n".join(blocks[0].body)


def with_fail_open(main, addition):
    """The main nginx block with the fail-open block added as it says: its
    directives before the first `location` go into `location /` next to
    error_page 403, its locations beside it."""
    lines = addition.splitlines()
    first_loc = next(i for i, ln in enumerate(lines) if ln.startswith("location"))
    directives = [ln for ln in lines[:first_loc] if ln.strip() and not ln.startswith("#")]
    assert directives, addition
    anchor = "    error_page 403 = @ratelimited;\n"
    assert main.count(anchor) == 1, main
    main = main.replace(anchor, anchor + "".join("    %s\n" % d for d in directives))
    return main + "\n" + "\n".join(lines[first_loc:])


class ProxiesTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        line, self.rl_nginx, self.rl_caddy = free_port(), free_port(), free_port()
        self.daemon = self.start_daemon(
            POLICIES, port=line, admin=False,
            listen=["127.0.0.1:%d" % line,
                    "{address: \"127.0.0.1:%d\", protocol: http, deny_status: 403}"
                    % self.rl_nginx,
                    "{address: \"127.0.0.1:%d\", protocol: http}" % self.rl_caddy])
        self.app = self.start_app()

    def start_app(self):
        """The application behind the proxy: "hello" to any GET."""
        class Hello(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", "6")
                self.end_headers()
                self.wfile.write(b"hello\n")

            def log_message(self, *args):
                pass
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return srv.server_address[1]

    def swap(self, text, rl_port):
        text = text.replace("127.0.0.1:8080", "127.0.0.1:%d" % rl_port)
        return text.replace("127.0.0.1:3000", "127.0.0.1:%d" % self.app)

    def run_proxy(self, argv, port, env=None, log=None):
        logf = open(log, "w")
        self.addCleanup(logf.close)
        p = spawn(argv, stdout=logf, stderr=subprocess.STDOUT, env=env)

        def stop():
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.addCleanup(stop)

        def up():
            if p.poll() is not None:
                with open(log) as f:
                    self.fail("%s exited: %s" % (argv[0], f.read()[-2000:]))
            try:  # a connection only: a request would count against a limit
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_until(up, 15, interval=0.05, what="%s on port %d" % (argv[0], port))

    def request(self, port, source, path="/"):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
        self.addCleanup(c.close)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()

    def check_limits(self, port):
        got = [self.request(port, "127.0.0.1") for _ in range(4)]
        self.assertEqual([g[0] for g in got], [200, 200, 200, 429], [g[2][:80] for g in got])
        self.assertEqual(got[0][2], b"hello\n")
        st, h, _ = got[3]
        self.assertGreater(int(h["retry-after"]), 0, h)
        self.assertEqual(h["ratelimit-policy"], '"login";q=3;w=60')
        self.assertTrue(h["ratelimit"].startswith('"login";r=0;t='), h)
        # another client address: its own limit
        self.assertEqual(self.request(port, "127.0.0.2")[0], 200)
        c = self.daemon.client()
        self.addCleanup(c.close)
        self.assertTrue(c.request("PEEK 127.0.0.1 login").startswith("DENIED 3 0 "))
        self.assertTrue(c.request("PEEK 127.0.0.2 login").startswith("ALLOWED 3 2 "))
        return got

    def start_nginx(self, locations):
        """nginx, in the test's directory, serving locations; its port."""
        port = free_port()
        tmp = os.path.join(self.tmpdir, "nginx-%d" % port)
        os.makedirs(tmp)
        conf = """
%s
worker_processes 1;
daemon off;
pid %s/nginx.pid;
error_log %s/error.log info;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %s/body;
    proxy_temp_path %s/proxy;
    fastcgi_temp_path %s/fastcgi;
    uwsgi_temp_path %s/uwsgi;
    scgi_temp_path %s/scgi;
    server {
        listen 127.0.0.1:%d;
%s
    }
}
""" % ("user root;" if os.geteuid() == 0 else "", tmp, tmp, tmp, tmp, tmp, tmp, tmp, port,
       locations)
        path = os.path.join(tmp, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        self.run_proxy([NGINX, "-p", tmp, "-c", path, "-e", os.path.join(tmp, "error.log")],
                       port, log=os.path.join(tmp, "stderr.log"))
        return port

    def test_nginx_auth_request(self):
        port = self.start_nginx(self.swap(doc_block("nginx"), self.rl_nginx))
        got = self.check_limits(port)
        # allowed answers carry the fields too
        self.assertEqual(got[0][1]["ratelimit"], '"login";r=2;t=60')

    def test_nginx_without_ratelimitd(self):
        """As proxies.md says: the main configuration fails closed (500 to
        every request, the application never asked), the fail-open lines
        pass requests to the application, and the limit still holds while
        ratelimitd answers."""
        main = doc_block("nginx")
        closed = self.start_nginx(self.swap(main, self.rl_nginx))
        fail_open = self.start_nginx(self.swap(
            with_fail_open(main, doc_block("nginx", "nginx-fail-open")), self.rl_nginx))
        # ratelimitd up: the fail-open configuration limits as the main one
        self.check_limits(fail_open)
        self.assertEqual(self.request(closed, "127.0.0.3")[0], 200)
        self.daemon.stop()
        for source in ("127.0.0.1", "127.0.0.4"):  # denied before, and new
            st, _, body = self.request(closed, source)
            self.assertEqual(st, 500, body[:200])
            self.assertNotEqual(body, b"hello\n")
            st, _, body = self.request(fail_open, source)
            self.assertEqual((st, body), (200, b"hello\n"))

    def test_caddy_forward_auth(self):
        port = free_port()
        block = self.swap(doc_block("caddy"), self.rl_caddy)
        tmp = os.path.join(self.tmpdir, "caddy")
        os.makedirs(tmp)
        caddyfile = """{
    admin off
    auto_https off
}
http://127.0.0.1:%d {
    bind 127.0.0.1
%s
}
""" % (port, block)
        path = os.path.join(tmp, "Caddyfile")
        with open(path, "w") as f:
            f.write(caddyfile)
        env = dict(os.environ, HOME=tmp, XDG_DATA_HOME=tmp, XDG_CONFIG_HOME=tmp)
        self.run_proxy([CADDY, "run", "--config", path, "--adapter", "caddyfile"], port, env=env,
                       log=os.path.join(tmp, "caddy.log"))
        got = self.check_limits(port)
        # Caddy passes the denial on as it is: status, headers and body
        self.assertEqual(got[3][1]["content-type"], "application/problem+json")
        self.assertEqual(json.loads(got[3][2])["status"], 429)
        # the client's own query does not reach ratelimitd (uri ends in "?"):
        # not its cost, nor an action (which ratelimitd would not take anyway)
        got = [self.request(port, "127.0.0.3", "/?cost=3&action=other&user=x")[0]
               for _ in range(4)]
        self.assertEqual(got, [200, 200, 200, 429])
        c = self.daemon.client()
        self.addCleanup(c.close)
        self.assertTrue(c.request("PEEK 127.0.0.3 login").startswith("DENIED 3 0 "))
        # ratelimitd unreachable: 502 to every request (proxies.md), the
        # application not asked
        self.daemon.stop()
        for source in ("127.0.0.1", "127.0.0.4"):
            st, _, body = self.request(port, source)
            self.assertEqual(st, 502, body[:200])


class ProxiesTlsTest(ProxiesTest):
    """docs/proxies.md, "Over TLS, with a token": nginx's and Caddy's
    blocks as written, to an HTTPS listener with auth: required."""

    TOKEN = "proxy-token-0123456789abcdef"

    def setUp(self):
        DaemonTest.setUp(self)
        from pki import Pki
        self.pki = Pki(self.tmpdir)
        self.redis = self.start_redis()
        token = os.path.join(self.tmpdir, "proxy.token")
        with open(token, "w") as f:
            f.write(self.TOKEN + "\n")
        line, self.rl_nginx, self.rl_caddy = free_port(), free_port(), free_port()
        tls = "tls: {cert_file: %s, key_file: %s}" % (self.pki.server_cert, self.pki.server_key)
        self.daemon = self.start_daemon(
            POLICIES, port=line, admin=False,
            identities="{proxy: {token_file: %s, rights: [decide]}}" % token,
            listen=["127.0.0.1:%d" % line,
                    "{address: \"127.0.0.1:%d\", protocol: http, deny_status: 403, "
                    "auth: required, %s}" % (self.rl_nginx, tls),
                    "{address: \"127.0.0.1:%d\", protocol: http, auth: required, %s}"
                    % (self.rl_caddy, tls)])
        self.app = self.start_app()

    def swap_tls(self, text, rl_port):
        text = text.replace("127.0.0.1:8443", "127.0.0.1:%d" % rl_port)
        text = text.replace("/etc/nginx/ratelimitd-ca.pem", self.pki.ca)
        text = text.replace("/etc/caddy/ratelimitd-ca.pem", self.pki.ca)
        return self.swap(text, rl_port)

    def test_nginx_auth_request(self):
        main = self.swap(doc_block("nginx"), self.rl_nginx)
        tls = self.swap_tls(doc_block("nginx", "nginx-tls"), self.rl_nginx)
        start = main.index("location = /_ratelimit {")
        end = main.index("}\n", start) + 2
        port = self.start_nginx(main[:start] + tls + "\n" + main[end:])
        got = self.check_limits(port)
        self.assertEqual(got[0][1]["ratelimit"], '"login";r=2;t=60')

    # not run again here: the plaintext class's failure modes are the same
    test_nginx_without_ratelimitd = None

    def test_caddy_forward_auth(self):
        port = free_port()
        block = self.swap_tls(doc_block("caddy", "caddy-tls"), self.rl_caddy)
        tmp = os.path.join(self.tmpdir, "caddy")
        os.makedirs(tmp)
        path = os.path.join(tmp, "Caddyfile")
        with open(path, "w") as f:
            f.write("{\n    admin off\n    auto_https off\n}\nhttp://127.0.0.1:%d {\n"
                    "    bind 127.0.0.1\n%s\n}\n" % (port, block))
        env = dict(os.environ, HOME=tmp, XDG_DATA_HOME=tmp, XDG_CONFIG_HOME=tmp)
        self.run_proxy([CADDY, "run", "--config", path, "--adapter", "caddyfile"], port, env=env,
                       log=os.path.join(tmp, "caddy.log"))
        got = self.check_limits(port)
        self.assertEqual(got[3][1]["content-type"], "application/problem+json")


if __name__ == "__main__":
    unittest.main()
