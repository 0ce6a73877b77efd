"""The Redis password (and an ACL user's password) never appears in the
daemon's output, at log_level debug, in normal operation and in every error
case: wrong password, unknown user, a user without the needed permissions,
Redis down at start, Redis restarted (AUTH again), a reload that changes the
password, broken configs around the password, `ratelimitd -t`."""

import os
import time
import unittest

from harness import DaemonTest, free_port, make_config, run_cli, wait_until

POLICIES = {"reply": "5/60s", "pd": "{limits: [7/60s], on_store_error: deny}"}
ADMIN_PW = "Adm1n-pw-QvTz8Lx2"
USER_PW = "Us3r-pw-9KdPw0Rr"
OTHER_PW = "Oth3r-pw-Jm4Wq7Ne"
WRONG_PW = "Wr0ng-pw-Xc5Vb1Yt"
SECRETS = (ADMIN_PW, USER_PW, OTHER_PW, WRONG_PW)


class SecretsTest(DaemonTest):
    def assertNoSecret(self, text, where="daemon log"):
        for s in SECRETS:
            # the whole secret, or a recognisable half of it
            for part in (s, s[:9], s[-9:]):
                self.assertNotIn(part, text, "secret %r (%r) in the %s:\n%s"
                                 % (s, part, where, text[-3000:]))

    def daemon_outputs(self):
        out = self.daemon.log()
        with open(self.daemon.out_path, errors="replace") as f:
            out += f.read()
        return out

    def acl_redis(self, **kw):
        r = self.start_redis(password=ADMIN_PW, **kw)
        r.call("ACL", "SETUSER", "rl", "on", ">" + USER_PW, "~rl:*", "&rl:*", "+@all")
        r.call("ACL", "SETUSER", "weak", "on", ">" + OTHER_PW, "~rl:*", "&rl:*", "+@all",
               "-evalsha", "-eval")
        return r

    def start(self, username, password, redis=None, **kw):
        self.daemon = self.start_daemon(
            POLICIES, redis=redis or self.redis, log_level="debug", on_store_error="deny",
            redis_opts={"username": username, "password": '"%s"' % password,
                        "timeout": "200ms"}, **kw)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)
        return self.daemon

    def test_acl_user_ok_and_restart(self):
        self.redis = self.acl_redis()
        port = self.redis.port
        self.start("rl", USER_PW)
        self.assertDecision(self.c.request("ALLOW s reply"), "ALLOWED", 5, 4)
        # a restarted Redis: AUTH again on every connection, logged without the password
        self.redis.stop()
        self.assertEqual(self.c.request("ALLOW s pd"), "DENIED 7 -1 1000 -1")
        self.redis = self.acl_redis(port=port)
        wait_until(lambda: self.c.request("PEEK s2 reply") == "ALLOWED 5 5 0 0", 3,
                   interval=0.02, what="service after restart")
        self.daemon.stop()
        self.assertNoSecret(self.daemon_outputs())

    def test_wrong_password(self):
        self.redis = self.acl_redis()
        self.start("rl", WRONG_PW)
        self.assertEqual(self.c.request("ALLOW s pd"), "DENIED 7 -1 1000 -1")
        self.daemon.wait_log(r"^(warn|error): .*(WRONGPASS|AUTH)", timeout=3)
        time.sleep(0.3)  # a few reconnects with AUTH
        self.assertNoSecret(self.daemon_outputs())

    def test_unknown_user(self):
        self.redis = self.acl_redis()
        self.start("nobody", USER_PW)
        self.assertEqual(self.c.request("ALLOW s pd"), "DENIED 7 -1 1000 -1")
        self.daemon.wait_log(r"^(warn|error): ", timeout=3)
        self.assertNoSecret(self.daemon_outputs())

    def test_password_without_acl_user_on_redis_without_password(self):
        self.redis = self.start_redis()
        self.daemon = self.start_daemon(POLICIES, log_level="debug", on_store_error="deny",
                                        redis_opts={"password": '"%s"' % OTHER_PW,
                                                    "timeout": "200ms"})
        with self.daemon.client() as c:
            c.request("ALLOW s pd")
        time.sleep(0.3)
        self.assertNoSecret(self.daemon_outputs())

    def test_user_without_permissions(self):
        """NOPERM on every call: fallback answers; the error is logged (debug)
        without the password."""
        self.redis = self.acl_redis()
        self.start("weak", OTHER_PW)
        self.assertEqual(self.c.request("ALLOW s pd"), "DENIED 7 -1 1000 -1")
        self.daemon.wait_log(r"NOPERM|no permissions", timeout=3)
        self.assertNoSecret(self.daemon_outputs())

    def test_redis_down_at_start(self):
        self.redis = None
        self.start("rl", USER_PW, redis="127.0.0.1:%d" % free_port())
        self.assertEqual(self.c.request("ALLOW s pd"), "DENIED 7 -1 1000 -1")
        time.sleep(0.5)
        self.daemon.wait_log(r"^warn: redis .* unavailable")
        self.assertNoSecret(self.daemon_outputs())

    def test_reload_changing_password(self):
        self.redis = self.acl_redis()
        self.start("rl", USER_PW)
        self.assertDecision(self.c.request("ALLOW s reply"), "ALLOWED", 5, 4)
        text = self.daemon.config_text.replace(USER_PW, OTHER_PW)
        self.assertIn(OTHER_PW, text)
        n = len(self.daemon.log_lines())
        self.daemon.reload(text)
        self.daemon.wait_log(r"^info: reload: configuration", start=n)
        self.daemon.wait_log(r"^warn: reload: redis\.password differs from the running one "
                             r"\(not shown\)", start=n)
        self.assertNoSecret(self.daemon_outputs())

    def broken_configs(self):
        port = free_port()
        base = make_config(["127.0.0.1:%d" % port],
                           {"address": self.redis.address, "username": "rl",
                            "password": '"%s"' % USER_PW}, POLICIES)
        pw_line = '  password: "%s"\n' % USER_PW
        self.assertIn(pw_line, base)
        return {
            "not a string": base.replace(pw_line, "  password: [%s]\n" % USER_PW),
            "unterminated quote": base.replace(pw_line, '  password: "%s\n' % USER_PW),
            "duplicate": base.replace(pw_line, pw_line + pw_line),
            "stray line": base.replace(pw_line, pw_line + "  %s\n" % USER_PW),
            "empty": base.replace(pw_line, '  password: ""\n'),
        }

    def test_broken_configs_do_not_echo_the_password(self):
        self.redis = self.acl_redis()
        self.start("rl", USER_PW)
        for name, text in self.broken_configs().items():
            n = len(self.daemon.log_lines())
            self.daemon.reload(text)
            self.daemon.wait_log(r"^error: reload failed", start=n)
            path = os.path.join(self.tmpdir, "check.yaml")
            with open(path, "w") as f:
                f.write(text)
            r = run_cli(["-t", "-c", path])
            self.assertEqual(r.returncode, 1, name)
            self.assertNoSecret(r.stdout + r.stderr, "output of ratelimitd -t (%s)" % name)
        self.assertNoSecret(self.daemon_outputs())

    def test_password_typo_not_echoed(self):
        """`password:SECRET` (no space) in a flow mapping is a YAML key named
        "password:SECRET": the unknown-key error must not print it whole."""
        self.redis = self.acl_redis()
        port = free_port()
        text = ('listen: ["127.0.0.1:%d"]\nredis: {address: "%s", username: rl, password:%s}\n'
                'policies: {reply: 5/60s}\n' % (port, self.redis.address, USER_PW))
        path = os.path.join(self.tmpdir, "typo.yaml")
        with open(path, "w") as f:
            f.write(text)
        r = run_cli(["-t", "-c", path])
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"unknown key")
        self.assertNoSecret(r.stdout + r.stderr, "output of ratelimitd -t")


if __name__ == "__main__":
    unittest.main()
