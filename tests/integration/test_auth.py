"""Client identities and rights (issue 28, item 3), with real clients: the
line protocol's AUTH, redis-cli -a/--user and redis-py password= (RESP),
curl -H 'Authorization: Bearer' (HTTP), grpcio's authorization metadata,
and a TLS client certificate's name. Rights per command and per policy,
nothing charged for a refused request, three bad tokens close, a token
changed by a reload, metrics per identity; proto/protocol.md's Identities
exchange replayed as written."""

import os
import re
import signal
import subprocess
import sys
import unittest

from harness import (SLOW, SRCDIR, Client, Closed, DaemonTest, free_port, make_config,
                     run_cli, scrape_metrics)
from pki import Pki

try:
    import redis
except ImportError:  # Debian's python3-redis, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import redis

APP = "app-token-0123456789abcdef"
OPS = "ops-token-0123456789abcdef"
RULES = """\
domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
"""


class AuthTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.pki = Pki(self.tmpdir)
        self.token_file = os.path.join(self.tmpdir, "app.token")
        with open(self.token_file, "w") as f:
            f.write(APP + "\n")
        os.environ["RL_TEST_OPS_TOKEN"] = OPS
        with open(os.path.join(self.tmpdir, "rules.yaml"), "w") as f:
            f.write(RULES)

    def config(self, app_token_file=None):
        p = self.pki
        tls = ("tls: {cert_file: %s, key_file: %s, client_certs: optional, ca_file: %s}"
               % (p.server_cert, p.server_key, p.ca))
        listen = ['{address: "127.0.0.1:%d", admin: true}' % self.port,
                  '{address: "127.0.0.1:%d", admin: true, auth: required}' % self.aport,
                  '{address: "127.0.0.1:%d", protocol: http, auth: required}' % self.hport,
                  '{address: "127.0.0.1:%d", protocol: grpc, auth: required}' % self.gport,
                  '{address: "127.0.0.1:%d", auth: required, %s}' % (self.tport, tls)]
        ids = ("{app: {token_file: %s, rights: [decide], policies: [reply]}, "
               "ops: {token_env: RL_TEST_OPS_TOKEN, rights: [decide, admin]}, "
               "billing: {cert_name: client, rights: [decide]}}"
               % (app_token_file or self.token_file))
        return make_config(listen, {"address": self.redis.address, "timeout": "1s"},
                           {"reply": "5/60s", "login": "3/60s"}, admin=False,
                           identities=ids, envoy="{config: rules.yaml}",
                           metrics='{listen: "127.0.0.1:%d"}' % self.mport)

    def start(self):
        self.port, self.aport, self.hport = free_port(), free_port(), free_port()
        self.gport, self.tport, self.mport = free_port(), free_port(), free_port()
        self.daemon = self.start_daemon(config=self.config(), port=self.port)
        return self.daemon

    def failures(self):
        m = scrape_metrics(self.mport)
        return {r: m['ratelimitd_auth_failures_total{reason="%s"}' % r]
                for r in ("noauth", "bad_token", "forbidden")}

    # ---- the line protocol

    def test_line_auth_rights_and_policies(self):
        self.start()
        with Client(self.aport) as c:
            self.assertEqual(c.request("PING"), "PONG")  # allowed before AUTH
            self.assertRegex(c.request("ALLOW ann reply"), r"^ERR noauth ")
            self.assertEqual(c.request("AUTH not-a-token-at-all-xx"),
                             "ERR auth-failed invalid token")
            self.assertEqual(c.request("AUTH " + APP), "OK")
            self.assertEqual(c.request("ALLOW ann reply"), "ALLOWED 5 4 0 60000")
            # app may decide on reply only, and administer nothing
            # which policy, and why: the identity's list lacks it
            self.assertEqual(c.request("ALLOW ann login"),
                             "ERR forbidden identity app may not decide on login (its "
                             "policies: list lacks it)")
            self.assertEqual(c.request("MALLOW ann reply ann login"),
                             "ERR forbidden identity app may not decide on login (its "
                             "policies: list lacks it)")
            # a right it lacks is named as one
            self.assertEqual(c.request("RESET ann reply"),
                             "ERR forbidden identity app may not administer (its rights: "
                             "lack admin)")
            self.assertRegex(c.request("OVERRIDES 0"), r"^ERR forbidden ")
            # ops: another AUTH on the same connection switches identity
            self.assertEqual(c.request("AUTH " + OPS), "OK")
            self.assertEqual(c.request("ALLOW ann login"), "ALLOWED 3 2 0 60000")
            self.assertEqual(c.request("RESET ann reply"), "OK")
        # nothing refused was charged: reply was taken once, then reset
        with Client(self.port) as c:
            self.assertEqual(c.request("PEEK ann reply"), "ALLOWED 5 5 0 0")
            # (a PEEK's reset_ms runs down from the ALLOW's 60000: not compared)
            self.assertEqual(c.request("PEEK ann login").split()[:3], ["ALLOWED", "3", "2"])
        f = self.failures()
        self.assertEqual((f["noauth"], f["bad_token"], f["forbidden"]), (1, 1, 4))
        m = scrape_metrics(self.mport)
        self.assertEqual(m['ratelimitd_identity_requests_total{identity="app"}'], 1)
        self.assertEqual(m['ratelimitd_identity_requests_total{identity="ops"}'], 2)
        # the plain listener is as before: no AUTH needed, tokens ignored
        with Client(self.port) as c:
            self.assertEqual(c.request("ALLOW bob login"), "ALLOWED 3 2 0 60000")

    def test_three_bad_tokens_close_the_connection(self):
        self.start()
        with Client(self.aport) as c:
            for i in range(2):
                self.assertEqual(c.request("AUTH wrong-token-%02d-0123456789" % i),
                                 "ERR auth-failed invalid token")
            self.assertEqual(c.request("AUTH wrong-token-02-0123456789"),
                             "ERR auth-failed invalid token")
            with self.assertRaises((Closed, ConnectionError)):
                c.request("PING")
        with Client(self.aport) as c:  # a good one resets the count
            c.request("AUTH wrong-token-00-0123456789")
            c.request("AUTH wrong-token-01-0123456789")
            self.assertEqual(c.request("AUTH " + APP), "OK")
            c.request("AUTH wrong-token-02-0123456789")
            self.assertEqual(c.request("PING"), "PONG")

    def test_protocol_md_identities_exchange_as_written(self):
        """proto/protocol.md's "Identities" exchange, replayed with its token."""
        with open(os.path.join(SRCDIR, "proto", "protocol.md")) as f:
            doc = f.read()
        part = doc.split("\nIdentities\n", 1)[1].split("\nHTTP: an API", 1)[0]
        lines = [ln.strip() for ln in part.splitlines() if re.match(r"^    [CS]: ", ln)]
        self.assertGreaterEqual(len(lines), 6)
        token = next(ln.split()[2] for ln in lines if ln.startswith("C: AUTH "))
        with open(self.token_file, "w") as f:
            f.write(token + "\n")
        self.start()
        with Client(self.aport) as c:
            for i in range(0, len(lines), 2):
                self.assertEqual(c.request(lines[i][3:]), lines[i + 1][3:], lines[i])

    # ---- RESP, HTTP, gRPC with their real clients

    def test_resp_with_redis_cli_and_redis_py(self):
        self.start()
        cli = ["redis-cli", "-p", str(self.aport), "--no-auth-warning"]
        no = subprocess.run(cli + ["ALLOW", "cy", "reply"], capture_output=True, timeout=10)
        self.assertIn(b"NOAUTH", no.stdout + no.stderr)
        ok = subprocess.run(cli + ["--user", "app", "-a", APP, "ALLOW", "cy", "reply"],
                            capture_output=True, timeout=10)
        self.assertEqual(ok.stdout.split(), [b"1", b"5", b"4", b"0", b"60000"], ok.stderr)
        r = redis.Redis(host="127.0.0.1", port=self.aport, password=OPS,
                        socket_timeout=10 * SLOW)
        try:
            self.assertEqual(r.execute_command("ALLOW", "cy", "login"), [1, 3, 2, 0, 60000])
        finally:
            r.close()
        bad = redis.Redis(host="127.0.0.1", port=self.aport, password="not-the-token-xxxxxxx",
                          socket_timeout=10 * SLOW)
        # Debian's redis-py 4.3 raises WRONGPASS as a ResponseError, later ones
        # as an AuthenticationError
        with self.assertRaises((redis.exceptions.AuthenticationError,
                                redis.exceptions.ResponseError)) as e:
            bad.execute_command("ALLOW", "cy", "reply")
        self.assertIn("WRONGPASS", str(e.exception))
        bad.close()
        anon = redis.Redis(host="127.0.0.1", port=self.aport, socket_timeout=10 * SLOW)
        with self.assertRaises(redis.exceptions.AuthenticationError):
            anon.execute_command("ALLOW", "cy", "reply")
        anon.close()

    def test_resp_hello_2_auth(self):
        """HELLO 2 AUTH <identity> <token> (what RESP2 clients with a user send,
        node-redis 5 among them): the server's map once the token is good,
        WRONGPASS when not; HELLO 4 AUTH is NOPROTO, its token unread."""
        from test_resp import RawResp
        import resp
        self.start()
        c = RawResp(self.aport)
        self.addCleanup(c.close)
        c.send(resp.encode("HELLO", "4", "AUTH", "ops", OPS) + resp.encode("ALLOW", "ida", "reply")
               + resp.encode("HELLO", "2", "AUTH", "ops", "not-the-token-xxxxxxx")
               + resp.encode("HELLO", "2", "AUTH", "ops", OPS, "SETNAME", "worker-1")
               + resp.encode("ALLOW", "ida", "reply") + resp.encode("RESET", "ida", "reply"))
        hello4, noauth, wrong, hello2, allowed, reset = c.read(6)
        self.assertTrue(str(hello4).startswith("NOPROTO "), hello4)
        self.assertTrue(str(noauth).startswith("NOAUTH "), noauth)
        self.assertEqual(str(wrong), "WRONGPASS invalid token")
        m = dict(zip(hello2[0::2], hello2[1::2]))
        self.assertEqual((m[b"server"], m[b"proto"], m[b"mode"]), (b"ratelimitd", 2, b"standalone"))
        self.assertEqual(allowed, [1, 5, 4, 0, 60000])
        self.assertEqual(reset, "OK")  # ops has admin
        self.assertEqual(self.failures(), {"noauth": 1, "bad_token": 1, "forbidden": 0})

    def test_resp_hello_3_auth(self):
        """HELLO 3 AUTH (node-redis 6 with a password): a wrong token is
        WRONGPASS and the connection stays RESP2; a good one answers the
        map in RESP3 and proves the identity."""
        from test_resp import RawResp
        import resp
        self.start()
        c = RawResp(self.aport)
        self.addCleanup(c.close)
        c.send(resp.encode("HELLO", "3", "AUTH", "ops", "not-the-token-xxxxxxx")
               + resp.encode("CONFIG", "GET", "x")
               + resp.encode("HELLO", "3", "AUTH", "ops", OPS, "SETNAME", "worker-1")
               + resp.encode("ALLOW", "ida3", "reply") + resp.encode("CONFIG", "GET", "x"))
        wrong, config2, hello3, allowed, config3 = c.read(5)
        self.assertEqual(str(wrong), "WRONGPASS invalid token")
        self.assertNotIsInstance(config2, resp.Map)
        self.assertIsInstance(hello3, resp.Map)
        self.assertEqual((hello3[b"server"], hello3[b"proto"]), (b"ratelimitd", 3))
        self.assertEqual(allowed, [1, 5, 4, 0, 60000])
        self.assertIsInstance(config3, resp.Map)

    def test_http_bearer_tokens_with_curl(self):
        self.start()
        url = "http://127.0.0.1:%d/v1/allow?user=dee&action=reply" % self.hport

        def curl(*extra):
            r = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-D", "-"] +
                               list(extra) + [url], capture_output=True, timeout=10 * SLOW)
            return r.stdout.decode()
        out = curl()
        self.assertTrue(out.endswith("\n401"), out)
        self.assertIn("WWW-Authenticate: Bearer", out)
        self.assertIn('"error":"noauth"', out)
        # in HTTP's words, not the line protocol's AUTH
        self.assertIn("an Authorization: Bearer <token> header on each request", out)
        self.assertNotIn("AUTH <token>", out)
        out = curl("-H", "Authorization: Bearer wrong-token-0123456789")
        self.assertTrue(out.endswith("\n401"), out)
        self.assertIn('"error":"auth-failed"', out)
        out = curl("-H", "Authorization: Bearer " + APP)
        self.assertTrue(out.endswith("\n200"), out)
        self.assertIn('"remaining":4', out)
        # forward-auth: the token of the proxy, per request
        fwd = "http://127.0.0.1:%d/auth/login" % self.hport
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                            "Authorization: Bearer " + APP, fwd], capture_output=True,
                           timeout=10 * SLOW)
        self.assertEqual(r.stdout, b"403")  # app may not use login

    def test_bearer_tokens_three_wrong_in_a_row_close_a_keep_alive_connection(self):
        """On one keep-alive HTTP connection, a good Bearer token ends a
        row of wrong ones: the connection is closed at the third wrong
        token in a row, not the third on the connection."""
        import http.client
        self.start()
        c = http.client.HTTPConnection("127.0.0.1", self.hport, timeout=10 * SLOW)
        self.addCleanup(c.close)
        path = "/v1/allow?user=fay&action=reply"

        def get(token):
            c.request("GET", path, headers={"Authorization": "Bearer " + token})
            r = c.getresponse()
            r.read()
            return r.status, r.getheader("Connection")
        bad = "wrong-token-0123456789"
        for token in (bad, bad, APP, bad, bad, APP):
            st, conn = get(token)
            self.assertEqual(st, 200 if token == APP else 401)
            self.assertNotEqual(conn, "close")
        self.assertEqual(get(bad)[0], 401)
        self.assertEqual(get(bad)[0], 401)
        st, conn = get(bad)  # the third in a row
        self.assertEqual((st, conn), (401, "close"))

    def test_grpc_authorization_metadata_with_grpcio(self):
        # never grpcio itself: it runs in rls_client's child process (a
        # process that loaded it aborted in a later test's fork)
        from rls_client import RlsClient, grpc, overall
        self.start()
        c = RlsClient(self.gport)
        try:
            with self.assertRaises(grpc.RpcError) as e:
                c.call("web", [[("user", "eve")]], timeout=10 * SLOW)
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            # in gRPC's terms: the metadata a call carries, not the line protocol's AUTH
            self.assertEqual(e.exception.details(),
                             'authentication required: send the authorization metadata '
                             '"Bearer <token>" with an identity\'s token on each call (or, '
                             'over TLS, a client certificate of an identity)')
            with self.assertRaises(grpc.RpcError) as e:
                c.call("web", [[("user", "eve")]], timeout=10 * SLOW,
                       metadata=[("authorization", "Bearer " + APP)])
            self.assertEqual(e.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
            r = c.call("web", [[("user", "eve")]], timeout=10 * SLOW,
                       metadata=[("authorization", "Bearer " + OPS)])
            self.assertEqual(overall(r), "OK")
            self.assertEqual(c.check(timeout=10 * SLOW).status, 1)  # health needs no token
        finally:
            c.close()

    def test_a_client_certificate_proves_an_identity(self):
        import ssl
        self.start()
        ctx = ssl.create_default_context(cafile=self.pki.ca)
        ctx.load_cert_chain(self.pki.client_cert, self.pki.client_key)  # CN=client
        with Client(self.tport, tls=ctx) as c:
            self.assertEqual(c.request("ALLOW fay login"), "ALLOWED 3 2 0 60000")
            self.assertRegex(c.request("RESET fay login"), r"^ERR forbidden ")
        plain = ssl.create_default_context(cafile=self.pki.ca)
        with Client(self.tport, tls=plain) as c:
            self.assertRegex(c.request("ALLOW fay login"), r"^ERR noauth ")
        m = scrape_metrics(self.mport)
        self.assertEqual(m['ratelimitd_identity_requests_total{identity="billing"}'], 1)

    def test_ratelimitctl_sends_a_token(self):
        from test_ctl import ctl
        self.start()
        addr = "127.0.0.1:%d" % self.aport
        r = ctl("-s", addr, "allow", "hal", "reply")
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("noauth", r.stderr)
        r = ctl("-s", addr, "-k", self.token_file, "allow", "hal", "reply")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        r = ctl("-s", addr, "allow", "hal", "reply", env={"RATELIMITCTL_TOKEN": OPS})
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        r = ctl("-s", addr, "--json", "allow", "hal", "reply",
                env={"RATELIMITCTL_TOKEN": "wrong-token-0123456789"})
        self.assertEqual(r.returncode, 2)
        self.assertIn('"error":"auth-failed"', r.stdout.replace(" ", ""))
        with Client(self.port) as c:  # two were charged, nothing for the refused ones
            self.assertEqual(c.request("PEEK hal reply").split()[:3], ["ALLOWED", "5", "3"])
        # over TLS, proved by the client certificate (billing's cert_name)
        r = ctl("-s", "127.0.0.1:%d" % self.tport, "--cacert", self.pki.ca, "allow", "hal",
                "login")
        self.assertEqual(r.returncode, 2)
        self.assertIn("noauth", r.stderr)
        r = ctl("-s", "127.0.0.1:%d" % self.tport, "--cacert", self.pki.ca, "--cert",
                self.pki.client_cert, "--key", self.pki.client_key, "allow", "hal", "login")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        # rls and health: the token as the authorization metadata
        gaddr = "127.0.0.1:%d" % self.gport
        r = ctl("--json", "rls", "--addr", gaddr, "web", "user=hal")
        self.assertEqual(r.returncode, 2)
        self.assertIn("UNAUTHENTICATED", r.stdout)
        r = ctl("--json", "rls", "--addr", gaddr, "web", "user=hal",
                env={"RATELIMITCTL_TOKEN": OPS})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"overall_code":"OK"', r.stdout.replace(" ", ""))
        r = ctl("-k", self.token_file, "health", "--addr", gaddr)
        self.assertEqual((r.returncode, r.stderr), (0, ""))

    # ---- reload and the command line

    def test_a_token_changed_by_a_reload(self):
        self.start()
        with Client(self.aport) as c:
            self.assertEqual(c.request("AUTH " + APP), "OK")
        new = "app-token-rotated-0123456789"
        with open(self.token_file, "w") as f:
            f.write(new + "\n")
        n = len(self.daemon.log_lines())
        self.daemon.signal(signal.SIGHUP)
        self.daemon.wait_log(r"^info: reload: configuration .* loaded", start=n)
        log = "\n".join(self.daemon.log_lines()[n:])
        self.assertNotIn(new, log)
        self.assertNotIn(APP, log)
        with Client(self.aport) as c:
            self.assertEqual(c.request("AUTH " + APP), "ERR auth-failed invalid token")
            self.assertEqual(c.request("AUTH " + new), "OK")
            self.assertEqual(c.request("ALLOW gus reply"), "ALLOWED 5 4 0 60000")

    def test_config_errors(self):
        self.port, self.aport, self.hport = free_port(), free_port(), free_port()
        self.gport, self.tport, self.mport = free_port(), free_port(), free_port()
        path = os.path.join(self.tmpdir, "t.yaml")

        def check(text, want):
            with open(path, "w") as f:
                f.write(text)
            r = run_cli(["-t", "-c", path])
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertRegex(r.stderr, want)
        short = os.path.join(self.tmpdir, "short.token")
        with open(short, "w") as f:
            f.write("short\n")
        check(self.config(app_token_file=short),
              r"identities\.app: the token in .*short\.token must be 16 to 4096 bytes")
        check(self.config(app_token_file=os.path.join(self.tmpdir, "none")),
              r"identities\.app\.token_file .*none: No such file or directory")
        check("listen: [127.0.0.1:2, {address: 127.0.0.1:1, auth: required}]\n"
              "policies: {a: 1/1s}\n",
              r"t\.yaml:1:24: listen 127\.0\.0\.1:1: auth: required needs identities")
        check("identities: {x: {rights: [decide]}}\npolicies: {a: 1/1s}\n",
              r"identities\.x: needs token_file, token_env or cert_name")
        check("identities: {x: {cert_name: c, rights: [drive]}}\npolicies: {a: 1/1s}\n",
              r"identities\.x\.rights: must be decide or admin")
        check("identities: {x: {cert_name: c, rights: [decide], policies: [nope]}}\n"
              "policies: {a: 1/1s}\n", r"identities\.x\.policies: no policy \"nope\"")
        # an empty list once allowed every policy
        check("identities: {x: {cert_name: c, rights: [decide], policies: []}}\n"
              "policies: {a: 1/1s}\n",
              r"t\.yaml:1:60: identities\.x\.policies: an empty list would allow no policy")


if __name__ == "__main__":
    unittest.main()
