"""TLS on the daemon's listeners (issue 28, item 2), with real clients:
openssl s_client and the line protocol, redis-cli --tls and redis-py with
ssl=True (RESP), curl with --cacert/--cert (HTTPS), grpcio with
ssl_channel_credentials (gRPC, h2 by ALPN). Client certificates none,
optional and required; plain text on a TLS listener and TLS on a plaintext
one; a handshake that never finishes is bounded by request_timeout; broken
handshakes (garbage, a close mid-handshake, renegotiation) end cleanly;
certificates re-read on SIGHUP without dropping a connection."""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

from harness import (SLOW, Client, DaemonTest, free_port, http_get, make_config, parse_decision,
                     run_cli, scrape_metrics, start_prometheus, wait_until)
from pki import Pki

try:
    import redis
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis

RULES = """\
domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
"""


class TlsListenTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.pki = Pki(self.tmpdir)
        self.redis = self.start_redis()

    def start(self, client_certs="none", request_timeout=None, idle_timeout=None, **extra):
        """A daemon with a plaintext admin listener (the harness's), and TLS
        line, HTTP and gRPC listeners, plus a plaintext line one."""
        p = self.pki
        self.port, self.lport, self.hport = free_port(), free_port(), free_port()
        self.gport, self.pport, self.mport = free_port(), free_port(), free_port()
        ca = ", ca_file: %s" % p.ca if client_certs != "none" else ""
        self.tls = "tls: {cert_file: %s, key_file: %s, client_certs: %s%s}" % (
            p.server_cert, p.server_key, client_certs, ca)
        with open(os.path.join(self.tmpdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        listen = ['{address: "127.0.0.1:%d", admin: true}' % self.port,
                  '{address: "127.0.0.1:%d", %s}' % (self.lport, self.tls),
                  '{address: "127.0.0.1:%d", protocol: http, %s}' % (self.hport, self.tls),
                  '{address: "127.0.0.1:%d", protocol: grpc, %s}' % (self.gport, self.tls),
                  '"127.0.0.1:%d"' % self.pport]
        top = {"metrics": '{listen: "127.0.0.1:%d"}' % self.mport,
               "envoy": "{config: rules.yaml}"}
        if request_timeout:
            top["request_timeout"] = request_timeout
        if idle_timeout:
            top["idle_timeout"] = idle_timeout
        top.update(extra)
        text = make_config(listen, {"address": self.redis.address, "timeout": "1s"},
                           {"reply": "5/60s"}, admin=False, **top)
        self.config_path = os.path.join(self.tmpdir, "rl.yaml")
        self.daemon = self.start_daemon(config=text, port=self.port)
        return self.daemon

    def ctx(self, cert=True):
        c = ssl.create_default_context(cafile=self.pki.ca)
        if cert:
            c.load_cert_chain(self.pki.client_cert, self.pki.client_key)
        return c

    def failures(self):
        m = scrape_metrics(self.mport)
        return {r: m['ratelimitd_client_tls_failures_total{reason="%s"}' % r]
                for r in ("handshake", "timeout", "plaintext", "tls_on_plaintext")}

    # ---- every protocol over TLS, with real clients

    def test_line_over_tls_with_openssl_s_client(self):
        self.start()
        r = subprocess.run(["openssl", "s_client", "-quiet", "-verify_return_error",
                            "-connect", "127.0.0.1:%d" % self.lport, "-CAfile", self.pki.ca],
                           input=b"ALLOW ann reply\nALLOW ann reply\nQUIT\n",
                           capture_output=True, timeout=10 * SLOW)
        self.assertEqual(r.stdout.decode().splitlines(),
                         ["ALLOWED 5 4 0 60000", "ALLOWED 5 3 0 60000", "BYE"], r.stderr)
        with Client(self.lport, tls=self.ctx(cert=False)) as c:
            self.assertEqual({parse_decision(r)[:3] for r in c.pipeline(["PEEK ann reply"] * 50)},
                             {("ALLOWED", 5, 3)})
            self.assertEqual(c.sock.version(), "TLSv1.3")
        m = scrape_metrics(self.mport)
        self.assertGreaterEqual(m["ratelimitd_client_tls_handshakes_total"], 2)

    def test_resp_over_tls_with_redis_cli_and_redis_py(self):
        self.start()
        out = subprocess.run(["redis-cli", "--tls", "--cacert", self.pki.ca, "-p",
                              str(self.lport), "ALLOW", "bea", "reply"],
                             capture_output=True, timeout=10 * SLOW)
        self.assertEqual(out.stdout.decode().split(), ["1", "5", "4", "0", "60000"],
                         out.stderr)
        r = redis.Redis(host="127.0.0.1", port=self.lport, ssl=True,
                        ssl_ca_certs=self.pki.ca, socket_timeout=10 * SLOW)
        try:
            self.assertEqual(r.execute_command("ALLOW", "bea", "reply"), [1, 5, 3, 0, 60000])
            self.assertEqual(r.execute_command("PING"), True)
        finally:
            r.close()

    def test_https_with_curl_and_client_certificates_required(self):
        self.start(client_certs="required")
        url = "https://127.0.0.1:%d/v1/allow?user=cy&action=reply" % self.hport
        ok = subprocess.run(["curl", "-sS", "--cacert", self.pki.ca, "--cert",
                             self.pki.client_cert, "--key", self.pki.client_key, url],
                            capture_output=True, timeout=10 * SLOW)
        self.assertEqual(ok.stdout.decode(), '{"allowed":true,"limit":5,"remaining":4,'
                         '"retry_after_ms":0,"reset_ms":60000}\n', ok.stderr)
        # without a certificate: refused in the handshake, counted, logged
        no = subprocess.run(["curl", "-sS", "--cacert", self.pki.ca, url],
                            capture_output=True, timeout=10 * SLOW)
        self.assertNotEqual(no.returncode, 0)
        self.assertEqual(no.stdout, b"")
        wait_until(lambda: self.failures()["handshake"] >= 1, 5 * SLOW,
                   what="the refused handshake counted")
        self.daemon.wait_log(r"^warn: listen 127\.0\.0\.1:%d: 1 client TLS connection failed "
                             r"\(the last: handshake: .*certificate" % self.hport)
        # a certificate from another CA is refused too
        other, okey = self.pki.cert("stranger", client=True, ca="other-ca")
        bad = subprocess.run(["curl", "-sS", "--cacert", self.pki.ca, "--cert", other, "--key",
                              okey, url], capture_output=True, timeout=10 * SLOW)
        self.assertNotEqual(bad.returncode, 0)
        # the same over the line listener with python's ssl
        with Client(self.lport, tls=self.ctx()) as c:
            self.assertEqual(c.request("ALLOW cy reply"), "ALLOWED 5 3 0 60000")

    def test_client_certs_stay_as_started_across_a_reload(self):
        """client_certs takes a restart (docs/configuration.md): a reload
        that says `none` keeps certificates required (it once applied
        it to new connections, while the log said a restart was needed)."""
        self.start(client_certs="required")
        url = "https://127.0.0.1:%d/v1/allow?user=cy&action=reply" % self.hport

        def without_cert():
            return subprocess.run(["curl", "-sS", "--cacert", self.pki.ca, url],
                                  capture_output=True, timeout=10 * SLOW).returncode
        self.assertNotEqual(without_cert(), 0)
        n = len(self.daemon.log_lines())
        text = self.daemon.config_text.replace(
            "client_certs: required, ca_file: %s" % self.pki.ca, "client_certs: none")
        self.assertNotEqual(text, self.daemon.config_text)
        self.daemon.reload(text)
        # (its files read again with the mode it started with: without a CA
        # they do not load, and the loaded ones stay)
        self.daemon.wait_log(r"reload: listen 127\.0\.0\.1:%d: (certificate read again|tls: )"
                             % self.hport, 5 * SLOW, start=n)
        self.daemon.wait_log(r"client_certs.*restart", 5 * SLOW, start=n)
        self.assertNotEqual(without_cert(), 0)
        with Client(self.lport, tls=self.ctx()) as c:
            self.assertEqual(c.request("ALLOW cy reply"), "ALLOWED 5 4 0 60000")

    def test_optional_client_certificates(self):
        self.start(client_certs="optional")
        with Client(self.lport, tls=self.ctx(cert=False)) as c:
            self.assertEqual(c.request("ALLOW dee reply"), "ALLOWED 5 4 0 60000")
        with Client(self.lport, tls=self.ctx(cert=True)) as c:
            self.assertEqual(c.request("ALLOW dee reply"), "ALLOWED 5 3 0 60000")

    def test_grpc_over_tls_with_grpcio(self):
        from rls_client import RlsClient, overall, statuses
        self.start()
        c = RlsClient(self.gport, tls=(self.pki.ca, None, None))
        try:
            got = [overall(c.call("web", [[("user", "eve")]], hits_addend=1,
                                  timeout=10 * SLOW)) for _ in range(4)]
            self.assertEqual(got, ["OK", "OK", "OK", "OVER_LIMIT"])
            r = c.call("web", [[("user", "fay")]], timeout=10 * SLOW)
            self.assertEqual([x[:3] for x in statuses(r)], [("OK", 3, 2)])
            self.assertEqual(c.check(timeout=10 * SLOW).status, 1)  # SERVING
        finally:
            c.close()

    def test_ratelimitctl_over_tls(self):
        """ratelimitctl --tls/--cacert on the line listener and for rls and
        health on the gRPC one (h2 by ALPN); TLS chosen from the config's
        listener by itself; the wrong CA, name or kind of listener each an
        error naming it."""
        from test_ctl import ctl
        self.start()
        ca, lport = self.pki.ca, "127.0.0.1:%d" % self.lport
        r = ctl("-s", lport, "--cacert", ca, "allow", "ivy", "reply")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        self.assertIn("allowed", r.stdout)
        r = ctl("-s", lport, "--cacert", ca, "--cert", self.pki.client_cert, "--key",
                self.pki.client_key, "--json", "peek", "ivy", "reply")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"remaining":4', r.stdout.replace(" ", ""))
        # the wrong kind of listener, the wrong CA, the wrong name
        r = ctl("-s", lport, "ping")
        self.assertEqual(r.returncode, 2)
        self.assertIn("tls-required", r.stderr)
        r = ctl("-s", "127.0.0.1:%d" % self.pport, "--cacert", ca, "ping")
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"TLS handshake with 127\.0\.0\.1:%d: " % self.pport)
        r = ctl("-s", lport, "--cacert", self.pki.other_ca, "--json", "ping")
        self.assertEqual(r.returncode, 2)
        self.assertIn('"error":"tls"', r.stdout.replace(" ", ""))
        self.assertIn("certificate", r.stderr)
        r = ctl("-s", lport, "--cacert", ca, "--servername", "other.example", "ping")
        self.assertEqual(r.returncode, 2)
        self.assertIn("hostname mismatch", r.stderr)
        r = ctl("-s", lport, "--cacert", ca, "--cert", self.pki.client_cert, "ping")
        self.assertEqual((r.returncode, r.stderr.strip()),
                         (2, "ratelimitctl: --cert and --key go together"))
        # a config whose first line listener is TLS: TLS without --tls
        cfg = os.path.join(self.tmpdir, "ctl.yaml")
        with open(cfg, "w") as f:
            f.write(make_config(['{address: "%s", %s}' % (lport, self.tls)],
                                {"address": self.redis.address}, {"reply": "5/60s"},
                                admin=False))
        r = ctl("-c", cfg, "--cacert", ca, "ping")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        r = ctl("-c", cfg, "ping")  # the system's CAs do not know ours
        self.assertEqual(r.returncode, 2)
        self.assertIn(", TLS", r.stderr)  # why this address (and TLS)
        # gRPC over TLS: rls and health
        gaddr = "127.0.0.1:%d" % self.gport
        r = ctl("--cacert", ca, "--json", "rls", "--addr", gaddr, "web", "user=ivy")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"overall_code":"OK"', r.stdout.replace(" ", ""))
        r = ctl("--cacert", ca, "health", "--addr", gaddr)
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        r = ctl("health", "--addr", gaddr)  # h2c on a TLS listener
        self.assertEqual(r.returncode, 2)

    # ---- the wrong kind of client

    def test_plain_text_on_a_tls_listener_is_told_in_its_protocol(self):
        self.start()
        with socket.create_connection(("127.0.0.1", self.lport), timeout=5 * SLOW) as s:
            s.sendall(b"ALLOW x reply\n")
            self.assertEqual(s.recv(200),
                             b"ERR tls-required this listener speaks TLS: connect with TLS\n")
            self.assertEqual(s.recv(10), b"")
        with socket.create_connection(("127.0.0.1", self.lport), timeout=5 * SLOW) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            self.assertEqual(s.recv(200),
                             b"-ERR tls-required this listener speaks TLS: connect with TLS\r\n")
        out = subprocess.run(["curl", "-s", "-o", "-", "-w", "%{http_code}",
                              "http://127.0.0.1:%d/v1/allow?user=u&action=reply" % self.hport],
                             capture_output=True, timeout=10 * SLOW)
        self.assertEqual(out.stdout.decode(), '{"error":"tls-required","message":"this listener '
                         'speaks TLS: connect with TLS"}\n400')
        # h2c on the TLS gRPC listener: closed
        with socket.create_connection(("127.0.0.1", self.gport), timeout=5 * SLOW) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            self.assertEqual(s.recv(100), b"")
        self.assertEqual(self.failures()["plaintext"], 4)

    def test_tls_on_a_plaintext_listener_is_closed(self):
        self.start()
        with socket.create_connection(("127.0.0.1", self.pport), timeout=5 * SLOW) as s:
            with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
                self.ctx(cert=False).wrap_socket(s, server_hostname="127.0.0.1")
        wait_until(lambda: self.failures()["tls_on_plaintext"] == 1, 5 * SLOW,
                   what="counted")
        with Client(self.pport) as c:  # the listener still serves plain text
            self.assertEqual(c.request("ALLOW gus reply"), "ALLOWED 5 4 0 60000")

    def test_a_handshake_that_never_finishes_is_bounded(self):
        self.start(request_timeout="1s")
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", self.lport), timeout=10 * SLOW) as s:
            s.sendall(b"\x16\x03\x01\x02\x00\x01")  # a ClientHello's first bytes, no more
            self.assertEqual(s.recv(10), b"")
        self.assertLess(time.monotonic() - t0, 1 + 3 * SLOW)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        wait_until(lambda: self.failures()["timeout"] == 1, 5 * SLOW, what="counted")

    def test_idle_before_its_handshake_a_grpc_client_is_closed(self):
        """idle_timeout shorter than request_timeout, a gRPC client over TLS
        that sends nothing: closed at idle_timeout, without the daemon
        spinning (a goodbye into the unfinished TLS session once kept the
        socket writable-armed, and a later ClientHello left it with no
        event at all: its slot held for good)."""
        self.start(idle_timeout="1s")
        pid = self.daemon.proc.pid

        def cpu():
            with open("/proc/%d/stat" % pid) as f:
                v = f.read().rsplit(")", 1)[1].split()
            return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
        cpu0, t0 = cpu(), time.monotonic()
        with socket.create_connection(("127.0.0.1", self.gport), timeout=10 * SLOW) as s:
            self.assertEqual(s.recv(10), b"")  # closed, nothing said
            waited = time.monotonic() - t0
        self.assertGreaterEqual(waited, 0.9)
        self.assertLess(waited, 1 + 3 * SLOW)
        self.assertLess(cpu() - cpu0, 0.5 * waited)
        # and one that sends its ClientHello late, then leaves: its slot goes
        self.fds0 = self.daemon_fds()
        with socket.create_connection(("127.0.0.1", self.gport), timeout=10 * SLOW) as s:
            time.sleep(1.2)
            try:
                ssl.create_default_context(cafile=self.pki.ca).wrap_socket(
                    s, server_hostname="localhost").close()
            except (ssl.SSLError, OSError):
                pass
        wait_until(lambda: self.daemon_fds() <= self.fds0, 5 * SLOW, interval=0.1,
                   what="the late client's descriptor closed")

    def test_beyond_max_clients_a_tls_client_is_closed_not_sent_plain_text(self):
        """Past max_clients a TLS listener's client is closed before any
        handshake: it sees the connection end, not plain text it would
        take for a broken TLS record (WRONG_VERSION_NUMBER)."""
        self.start(max_clients=2)
        held = []
        deadline = time.monotonic() + 5 * SLOW
        while True:  # every slot ours (the readiness probe's may linger)
            c = Client(port=self.pport, timeout=5 * SLOW)
            self.addCleanup(c.close)
            if c.request("PING") != "PONG":
                break
            held.append(c)
            self.assertLess(time.monotonic(), deadline)
        with socket.create_connection(("127.0.0.1", self.lport), timeout=5 * SLOW) as s:
            with self.assertRaises((ssl.SSLError, OSError)) as e:
                self.ctx(cert=False).wrap_socket(s, server_hostname="localhost")
        self.assertNotIn("WRONG_VERSION_NUMBER", str(e.exception))
        self.assertEqual(held[0].request("PING"), "PONG")

    def daemon_fds(self):
        return len(os.listdir("/proc/%d/fd" % self.daemon.proc.pid))

    def test_broken_handshakes_end_cleanly(self):
        """Garbage after a TLS record header, a close in the middle of a
        handshake, and a TLS 1.2 client asking to renegotiate: each ends its
        connection and nothing else (the daemon, ASan in the sanitizer
        build, keeps serving)."""
        self.start()
        with socket.create_connection(("127.0.0.1", self.lport), timeout=5 * SLOW) as s:
            s.sendall(b"\x16\x03\x01\x00\x10" + os.urandom(16))
            self.assertEqual(s.recv(100)[:1] in (b"", b"\x15"), True)  # an alert or a close
        for cut in (1, 5, 11):  # a ClientHello cut short, then the close
            s = socket.create_connection(("127.0.0.1", self.lport), timeout=5 * SLOW)
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[:cut])
            s.close()
        # a real handshake abandoned after the ClientHello (the daemon's
        # flight written to a socket already closed)
        s = socket.create_connection(("127.0.0.1", self.lport), timeout=5 * SLOW)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = self.ctx(cert=False).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
        with self.assertRaises(ssl.SSLWantReadError):
            obj.do_handshake()
        s.sendall(outgoing.read())  # the ClientHello
        self.assertEqual(s.recv(1), b"\x16")  # the daemon's flight begins
        s.close()
        # renegotiation: refused by a TLS 1.2 session (the daemon allows none)
        r = subprocess.run(["openssl", "s_client", "-tls1_2", "-connect",
                            "127.0.0.1:%d" % self.lport, "-CAfile", self.pki.ca],
                           input=b"R\nALLOW hal reply\n", capture_output=True,
                           timeout=10 * SLOW)
        self.assertIn(b"RENEGOTIATING", r.stdout + r.stderr)
        with Client(self.lport, tls=self.ctx(cert=False)) as c:
            self.assertEqual(c.request("PING"), "PONG")
        self.assertTrue(self.daemon.running())

    # ---- the metrics endpoint over HTTPS

    def test_metrics_over_https_scraped_by_prometheus(self):
        """metrics.tls with client certificates required: curl and urllib with
        the CA and a client certificate, a real Prometheus with tls_config;
        no certificate and plain HTTP get nothing; a reload re-reads it."""
        p = self.pki
        port, mport = free_port(), free_port()
        mtls = ("{cert_file: %s, key_file: %s, client_certs: required, ca_file: %s}"
                % (p.server_cert, p.server_key, p.ca))
        text = make_config(['"127.0.0.1:%d"' % port], {"address": self.redis.address},
                           {"reply": "5/60s"}, admin=False,
                           metrics='{listen: "127.0.0.1:%d", tls: %s}' % (mport, mtls))
        self.daemon = self.start_daemon(config=text, port=port)
        url = "https://127.0.0.1:%d/metrics" % mport
        # the start-up line names the scheme the endpoint speaks
        self.daemon.wait_log(r"ready, listening on .*; metrics on https://127\.0\.0\.1:%d$"
                             % mport)
        r = subprocess.run(["curl", "-sS", "--cacert", p.ca, "--cert", p.client_cert, "--key",
                            p.client_key, url], capture_output=True, text=True, timeout=10 * SLOW)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ratelimitd_build_info", r.stdout)
        r = subprocess.run(["curl", "-sS", "--cacert", p.ca, url], capture_output=True,
                           text=True, timeout=10 * SLOW)
        self.assertNotEqual(r.returncode, 0)  # no client certificate: no answer
        self.assertNotIn("ratelimitd_", r.stdout)
        with self.assertRaises(Exception):  # plain HTTP on the HTTPS port
            status = http_get(mport, timeout=3 * SLOW)[0]
            self.assertNotEqual(status, 200)
            raise ConnectionError("answered %d" % status)
        ctx = self.ctx()
        # one connection each: a request that arrives with the handshake's
        # last bytes is answered too (OpenSSL's read-ahead once held it)
        for _ in range(50):
            with urllib.request.urlopen("https://127.0.0.1:%d/health" % mport, context=ctx,
                                        timeout=5 * SLOW) as h:
                self.assertEqual(h.status, 200)
        # a real Prometheus, scheme https with the CA and its client certificate
        pport, prom = start_prometheus(
            self, "  - job_name: ratelimitd\n"
                  "    scheme: https\n"
                  "    tls_config: {ca_file: %s, cert_file: %s, key_file: %s}\n"
                  "    static_configs: [{targets: ['127.0.0.1:%d']}]\n"
                  % (p.ca, p.client_cert, p.client_key, mport))

        def up():
            self.assertIsNone(prom.poll(), "prometheus exited")
            q = "http://127.0.0.1:%d/api/v1/query?query=%s" % (
                pport, urllib.parse.quote('up{job="ratelimitd"}'))
            with urllib.request.urlopen(q, timeout=5) as resp:
                res = json.load(resp)["data"]["result"]
            return res and res[0]["value"][1] == "1"
        wait_until(up, 60 * SLOW, interval=0.5, what="Prometheus to scrape over HTTPS")
        # a reload reads the certificate again
        self.daemon.reload()
        wait_until(lambda: "metrics certificate read again" in self.daemon.log(),
                   5 * SLOW, what="the reload's log line")
        with urllib.request.urlopen(url, context=ctx, timeout=10 * SLOW) as h:
            self.assertEqual(h.status, 200)

    # ---- reload

    def test_certificates_reloaded_on_sighup_without_dropping_connections(self):
        cert = os.path.join(self.tmpdir, "listen.pem")
        key = os.path.join(self.tmpdir, "listen.key")
        shutil.copy(self.pki.server_cert, cert)
        shutil.copy(self.pki.server_key, key)
        self.pki.server_cert, self.pki.server_key = cert, key
        self.start()
        old = Client(self.lport, tls=self.ctx(cert=False))
        self.addCleanup(old.close)
        self.assertEqual(old.request("ALLOW ivy reply"), "ALLOWED 5 4 0 60000")
        first = old.sock.getpeercert(binary_form=True)
        # a renewed certificate (same names, new key and serial)
        newc, newk = self.pki.cert("renewed", ips=["127.0.0.1"], dns=["localhost"])
        shutil.copy(newc, cert)
        shutil.copy(newk, key)
        n = len(self.daemon.log_lines())
        self.daemon.signal(signal.SIGHUP)
        self.daemon.wait_log(r"^info: reload: listen 127\.0\.0\.1:%d: certificate read again"
                             % self.lport, start=n)
        # the open connection goes on; a new one gets the new certificate
        self.assertEqual(parse_decision(old.request("ALLOW ivy reply"))[:3], ("ALLOWED", 5, 3))
        with Client(self.lport, tls=self.ctx(cert=False)) as c:
            self.assertEqual(parse_decision(c.request("ALLOW ivy reply"))[:3], ("ALLOWED", 5, 2))
            second = c.sock.getpeercert(binary_form=True)
        self.assertNotEqual(first, second)
        with open(newc, "rb") as f:
            self.assertEqual(ssl.PEM_cert_to_DER_cert(f.read().decode()), second)
        # a key that is not one: logged, the loaded certificate stays
        with open(key, "w") as f:
            f.write("garbage\n")
        n = len(self.daemon.log_lines())
        self.daemon.signal(signal.SIGHUP)
        self.daemon.wait_log(r"^error: reload: listen 127\.0\.0\.1:%d: tls: key_file %s: .*; "
                             r"new connections keep the certificate loaded before"
                             % (self.lport, key), start=n)
        with Client(self.lport, tls=self.ctx(cert=False)) as c:
            self.assertEqual(parse_decision(c.request("PEEK ivy reply"))[:3], ("ALLOWED", 5, 2))
            self.assertEqual(c.sock.getpeercert(binary_form=True), second)
        self.assertEqual(old.request("PING"), "PONG")

    def test_dash_t_loads_the_listeners_certificates(self):
        path = os.path.join(self.tmpdir, "t.yaml")
        with open(path, "w") as f:
            f.write(make_config(['{address: "127.0.0.1:1", tls: {cert_file: %s, key_file: %s}}'
                                 % (self.pki.server_cert, self.pki.client_key)],
                                {"address": "127.0.0.1:6390"}, {"a": "1/1s"}, admin=False))
        r = run_cli(["-t", "-c", path])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertRegex(r.stderr, r"^%s: listen 127\.0\.0\.1:1: tls: key_file %s"
                         r"(: key values mismatch| does not match cert_file)"
                         % (path, self.pki.client_key))
        # and metrics.tls's
        with open(path, "w") as f:
            f.write(make_config(['"127.0.0.1:1"'], {"address": "127.0.0.1:6390"}, {"a": "1/1s"},
                                admin=False,
                                metrics='{listen: "127.0.0.1:2", tls: {cert_file: %s, '
                                        'key_file: %s/nosuch.key}}' % (self.pki.server_cert,
                                                                      self.tmpdir)))
        r = run_cli(["-t", "-c", path])
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertRegex(r.stderr, r"^%s: metrics 127\.0\.0\.1:2: tls: key_file %s/nosuch.key"
                         % (path, self.tmpdir))


if __name__ == "__main__":
    unittest.main()
