"""watch: true - a changed file reloads without a signal: the kubelet's
update of a mounted ConfigMap or Secret (a new timestamped directory, a
`..data_tmp` symlink renamed over `..data`, the old directory removed, the
exact sequence of its atomic writer), an editor's write-and-rename, a write
in place; a token file of a Secret; a bad file keeps the running
configuration and says so as SIGHUP does; a file gone and back is
followed; a burst of changes is one reload; watch: false (the default)
reloads only on SIGHUP."""

import os
import shutil
import ssl
import time
import unittest

from harness import Client, DaemonTest, free_port, make_config, wait_until
from pki import Pki


class KubeletVolume:
    """A directory updated the way the kubelet's AtomicWriter does it."""

    def __init__(self, root, files):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.n = 0
        self.current = None
        self.update(files, first=True)
        for name in files:  # the user-visible names: symlinks through ..data
            os.symlink(os.path.join("..data", name), os.path.join(root, name))

    def update(self, files, first=False):
        self.n += 1
        ts = "..2026_12_06_09_00_%02d.%09d" % (self.n, 1000 + self.n)
        tsdir = os.path.join(self.root, ts)
        os.mkdir(tsdir)
        for name, text in files.items():
            with open(os.path.join(tsdir, name), "w") as f:
                f.write(text)
        tmp = os.path.join(self.root, "..data_tmp")
        os.symlink(ts, tmp)
        os.replace(tmp, os.path.join(self.root, "..data"))  # rename(2): atomic
        if self.current:
            shutil.rmtree(os.path.join(self.root, self.current))
        self.current = ts


class WatchTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port = free_port()

    def cfg(self, policies, **top):
        return make_config(["127.0.0.1:%d" % self.port],
                           {"address": self.redis.address, "timeout": "2s"}, policies, **top)

    def start(self, path=None, text=None):
        """The daemon on `path` (-c), or on its own file holding text."""
        args = ("-c", path) if path else ()
        self.daemon = self.start_daemon(config=text or self.cfg({"boot": "1/60s"}),
                                        port=self.port, args=args)
        self.c = self.daemon.client()
        self.addCleanup(self.c.close)

    def wait_reply(self, line, want, timeout=5.0):
        last = []

        def check():
            last[:] = [self.c.request(line)]
            return last[0] == want
        try:
            wait_until(check, timeout, interval=0.02, what="%r to answer %r" % (line, want))
        except AssertionError as e:
            raise AssertionError("%s; last %r; log:\n%s"
                                 % (e, last, "\n".join(self.daemon.log_lines()[-10:])))

    def reloads(self):
        return sum(1 for l in self.daemon.log_lines() if "reload: " in l and " changed" in l
                   and "policy" not in l)

    def test_configmap_updated_by_the_kubelet(self):
        vol = KubeletVolume(os.path.join(self.tmpdir, "cm"),
                            {"ratelimitd.yaml": self.cfg({"a": "2/60s"}, watch="true")})
        self.start(os.path.join(vol.root, "ratelimitd.yaml"))
        self.daemon.wait_log(r"watch: following 1 file \(a change reloads\)")
        self.assertEqual(self.c.request("PEEK u a"), "ALLOWED 2 2 0 0")
        n = len(self.daemon.log_lines())
        vol.update({"ratelimitd.yaml": self.cfg({"a": "7/60s"}, watch="true")})
        self.wait_reply("PEEK u a", "ALLOWED 7 7 0 0")
        self.daemon.wait_log(r"reload: .*/cm/ratelimitd\.yaml changed", start=n)
        self.daemon.wait_log(r"reload: policy a changed", start=n)
        # and again: the old directory is gone, the new one is followed
        vol.update({"ratelimitd.yaml": self.cfg({"a": "9/60s"}, watch="true")})
        self.wait_reply("PEEK u a", "ALLOWED 9 9 0 0")
        # a bad file keeps the running configuration, said as SIGHUP says it
        n = len(self.daemon.log_lines())
        vol.update({"ratelimitd.yaml": self.cfg({"a": "9/60s"}, watch="true") + "oops: [\n"})
        self.daemon.wait_log(r"reload failed, keeping the running configuration: ", start=n)
        self.assertEqual(self.c.request("PEEK u a"), "ALLOWED 9 9 0 0")
        # fixed: applied
        vol.update({"ratelimitd.yaml": self.cfg({"a": "4/60s"}, watch="true")})
        self.wait_reply("PEEK u a", "ALLOWED 4 4 0 0")
        self.assertTrue(self.daemon.running())

    def test_envoy_rules_directory_updated_by_the_kubelet(self):
        one = "domain: web\ndescriptors:\n  - key: user\n" \
              "    rate_limit: {unit: minute, requests_per_unit: 3}\n"
        two = one + "  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
        vol = KubeletVolume(os.path.join(self.tmpdir, "rules"), {"web.yaml": one})
        self.start(text=self.cfg({"a": "2/60s"}, watch="true",
                                 envoy="{config: %s}" % vol.root))
        self.daemon.wait_log(r"watch: following 2 files")
        n = len(self.daemon.log_lines())
        vol.update({"web.yaml": two})
        self.daemon.wait_log(r"reload: .*/rules changed", start=n)
        self.daemon.wait_log(r"reload: configuration \S+ loaded \(1 policy, 2 envoy rules\)",
                             start=n)

    def test_certificate_renewed_in_a_tls_secret(self):
        """cert-manager renews a listener's certificate in its Secret (the
        kubelet's swap of tls.crt and tls.key together): new connections get
        the new one, no signal sent."""
        pki = Pki(self.tmpdir)
        with open(pki.server_cert) as f, open(pki.server_key) as g:
            sec = KubeletVolume(os.path.join(self.tmpdir, "tls"),
                                {"tls.crt": f.read(), "tls.key": g.read()})
        tls = ("{cert_file: %s, key_file: %s}"
               % (os.path.join(sec.root, "tls.crt"), os.path.join(sec.root, "tls.key")))
        tport = free_port()
        text = make_config(["127.0.0.1:%d" % self.port,
                            '{address: "127.0.0.1:%d", tls: %s}' % (tport, tls)],
                           {"address": self.redis.address}, {"a": "5/60s"}, admin=False,
                           watch="true")
        self.start(text=text)
        self.daemon.wait_log(r"watch: following 3 files")
        ctx = ssl.create_default_context(cafile=pki.ca)

        def served():
            with Client(tport, tls=ctx) as c:
                c.request("PING")
                return c.sock.getpeercert(binary_form=True)
        first = served()
        newc, newk = pki.cert("renewed", ips=["127.0.0.1"], dns=["localhost"])
        with open(newc) as f, open(newk) as g:
            sec.update({"tls.crt": f.read(), "tls.key": g.read()})
        with open(newc) as f:
            want = ssl.PEM_cert_to_DER_cert(f.read())
        wait_until(lambda: served() == want, 5, what="new connections to get the renewed "
                   "certificate")
        self.assertNotEqual(first, want)

    def test_token_secret_rotated(self):
        sec = KubeletVolume(os.path.join(self.tmpdir, "secret"),
                            {"token": "first-token-0123456789\n"})
        text = make_config(
            ['{address: "127.0.0.1:%d", auth: required}' % self.port],
            {"address": self.redis.address}, {"a": "5/60s"}, admin=False, watch="true",
            identities="{app: {token_file: %s, rights: [decide]}}"
            % os.path.join(sec.root, "token"))
        self.start(text=text)
        self.daemon.wait_log(r"watch: following 2 files")
        with self.daemon.client() as c:
            self.assertEqual(c.request("AUTH first-token-0123456789"), "OK")
        sec.update({"token": "second-token-0123456789\n"})

        def second_works():
            with self.daemon.client() as c:
                return c.request("AUTH second-token-0123456789") == "OK"
        wait_until(second_works, 5, what="the rotated token to be taken")
        with self.daemon.client() as c:
            self.assertTrue(c.request("AUTH first-token-0123456789").startswith("ERR "))

    def test_editor_rename_write_in_place_and_a_file_gone_and_back(self):
        self.start(text=self.cfg({"a": "2/60s"}, watch="true"))
        path = self.daemon.config_path
        # an editor: a new file renamed over the old
        tmp = path + ".swp"
        with open(tmp, "w") as f:
            f.write(self.cfg({"a": "3/60s"}, watch="true"))
        os.replace(tmp, path)
        self.wait_reply("PEEK u a", "ALLOWED 3 3 0 0")
        # written in place
        with open(path, "w") as f:
            f.write(self.cfg({"a": "4/60s"}, watch="true"))
        self.wait_reply("PEEK u a", "ALLOWED 4 4 0 0")
        # gone: the running configuration stays (the reload says it cannot
        # read it); back: followed
        n = len(self.daemon.log_lines())
        os.unlink(path)
        self.daemon.wait_log(r"reload failed, keeping the running configuration: .*cannot read",
                             start=n)
        self.assertEqual(self.c.request("PEEK u a"), "ALLOWED 4 4 0 0")
        with open(path, "w") as f:
            f.write(self.cfg({"a": "6/60s"}, watch="true"))
        self.wait_reply("PEEK u a", "ALLOWED 6 6 0 0")

    def test_a_burst_of_writes_is_one_reload(self):
        self.start(text=self.cfg({"a": "2/60s"}, watch="true"))
        path = self.daemon.config_path
        before = self.reloads()
        for i in range(20):  # well within the quiet period, one after another
            with open(path, "w") as f:
                f.write(self.cfg({"a": "%d/60s" % (10 + i)}, watch="true"))
        self.wait_reply("PEEK u a", "ALLOWED 29 29 0 0")
        time.sleep(0.6)  # three quiet periods: nothing more comes
        self.assertEqual(self.reloads() - before, 1, "\n".join(self.daemon.log_lines()[-25:]))
        # a change that is no change (the same bytes written again) reloads nothing
        with open(path, "w") as f:
            f.write(self.cfg({"a": "29/60s"}, watch="true"))
        time.sleep(0.6)
        self.assertEqual(self.reloads() - before, 1)

    def test_off_by_default_and_turned_on_and_off_by_reload(self):
        self.start(text=self.cfg({"a": "2/60s"}))
        path = self.daemon.config_path
        with open(path, "w") as f:
            f.write(self.cfg({"a": "3/60s"}))
        time.sleep(0.6)
        self.assertEqual(self.c.request("PEEK u a"), "ALLOWED 2 2 0 0")  # no signal: no reload
        n = len(self.daemon.log_lines())
        self.daemon.reload(self.cfg({"a": "3/60s"}, watch="true"))  # SIGHUP turns it on
        self.daemon.wait_log(r"watch: following 1 file", start=n)
        with open(path, "w") as f:
            f.write(self.cfg({"a": "5/60s"}, watch="true"))
        self.wait_reply("PEEK u a", "ALLOWED 5 5 0 0")
        n = len(self.daemon.log_lines())
        with open(path, "w") as f:
            f.write(self.cfg({"a": "5/60s"}, watch="false"))  # applied, then off
        self.daemon.wait_log(r"watch: off; files are applied on SIGHUP only", start=n)
        with open(path, "w") as f:
            f.write(self.cfg({"a": "8/60s"}, watch="false"))
        time.sleep(0.6)
        self.assertEqual(self.c.request("PEEK u a"), "ALLOWED 5 5 0 0")


if __name__ == "__main__":
    unittest.main()
