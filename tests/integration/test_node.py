"""RESP with the real Node.js Redis clients from npm (ioredis; node-redis
as npm gives it today, RESP3 by default, and with RESP 2 and 3 asked;
node-redis 4; versions pinned in tests/node/package-lock.json): decisions
to the limit and past it, errors, RESET, pipelines, HELLO's version, the
maps RESP3 has, MULTI refused with nothing charged (tests/node/clients.js);
and the ```js examples of docs/clients.md, run as written.

npm installs the clients once per build directory (`npm ci`, from the
registry; nothing else is downloaded)."""

import json
import os
import re
import shutil
import subprocess
import unittest

from harness import DAEMON, SRCDIR, DaemonTest, free_port
from test_docs import code_blocks

NODE_SRC = os.path.join(SRCDIR, "tests", "node")
CLIENTS_MD = os.path.join(SRCDIR, "docs", "clients.md")
POLICIES = {"reply": "3/60s", "big": "100000/60s"}
DOCS_POLICIES = {"reply": "5/60s", "login": "[3/1s, 20/60s]"}  # as in conf/ratelimitd.yaml


def node_modules():
    """A directory with the pinned clients installed, next to the daemon."""
    cache = os.path.join(os.path.dirname(os.path.abspath(DAEMON)), "node-clients")
    lock = os.path.join(NODE_SRC, "package-lock.json")
    with open(lock, "rb") as f:
        want = f.read()
    stamp = os.path.join(cache, "installed-lock.json")
    if os.path.exists(stamp):
        with open(stamp, "rb") as f:
            if f.read() == want:
                return os.path.join(cache, "node_modules")
    os.makedirs(cache, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(os.path.join(NODE_SRC, name), cache)
    npm = shutil.which("npm")
    if not npm:
        raise RuntimeError("npm not found: install Debian's nodejs and npm")
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=cache,
                       capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("npm ci failed: %s" % r.stderr.decode(errors="replace")[-2000:])
    with open(stamp, "wb") as f:
        f.write(want)
    return os.path.join(cache, "node_modules")


def run_node(script, modules, *args, timeout=60):
    env = dict(os.environ, NODE_PATH=modules)
    return subprocess.run(["node", script] + [str(a) for a in args], capture_output=True,
                          timeout=timeout, env=env)


class NodeClientsTest(DaemonTest):
    @classmethod
    def setUpClass(cls):
        cls.modules = node_modules()

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()

    def start(self, policies):
        self.port, self.admin_port = free_port(), free_port()
        self.daemon = self.start_daemon(
            policies, port=self.port, admin=False,
            listen=["127.0.0.1:%d" % self.port,
                    "{address: \"127.0.0.1:%d\", admin: true}" % self.admin_port])

    def test_ioredis_and_node_redis(self):
        self.start(POLICIES)
        r = run_node(os.path.join(NODE_SRC, "clients.js"), self.modules, self.port,
                     self.admin_port)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        got = json.loads(r.stdout)
        node_redis = ("nodeRedis", "nodeRedis3", "nodeRedis2", "nodeRedis4")
        for name in ("ioredis",) + node_redis:
            g = got[name]
            self.assertEqual(g["decisions"][0], [1, 3, 2, 0, 60000], name)
            self.assertEqual([d[0] for d in g["decisions"]], [1, 1, 1, 0], name)
            self.assertGreater(g["decisions"][3][3], 0, "%s: retry_after_ms" % name)
            self.assertEqual(g["piped"], list(range(99999, 99499, -1)), name)
        self.assertTrue(got["ioredis"]["error"].startswith("ERR unknown-action "), got["ioredis"]["error"])
        # node-redis 6 speaks RESP3 unless told otherwise (a RESP3 map is an
        # object to it), 4 speaks RESP2
        want = {"nodeRedis": (3, "object"), "nodeRedis3": (3, "object"), "nodeRedis2": (2, "array"),
                "nodeRedis4": (2, "array")}
        for name in node_redis:
            g = got[name]
            with self.subTest(client=name):
                self.assertTrue(g["error"].startswith("ERR forbidden "), g["error"])
                self.assertEqual((g["proto"], g["configKind"]), want[name])
                self.assertTrue(g["infoLoading"])
                # connecting logged nothing but what node-redis ignores
                self.assertEqual(g["errors"], [])
                # MULTI refused, its ALLOW not run: the next ALLOW is the first
                self.assertIn("MULTI is not supported", g["multi"] or "")
                self.assertEqual(g["afterMulti"][:3], [1, 3, 2])
        self.assertEqual(got["ioredis"]["reset"], "OK")
        self.assertEqual(got["ioredis"]["after"][:3], [1, 3, 2])

    def test_docs_examples(self):
        """Each ```js block of docs/clients.md, as written (its port swapped
        for the test's), prints what its `// -> ...` comments say."""
        self.start(DOCS_POLICIES)
        blocks = [b for b in code_blocks(CLIENTS_MD) if b.info == "js"]
        self.assertGreaterEqual(len(blocks), 3, "the js examples of docs/clients.md")
        for b in blocks:
            with self.subTest(example=b.where):
                self.redis.call("FLUSHALL")
                code = "\n".join(b.body).replace("7379", str(self.port))
                path = os.path.join(self.tmpdir, "example-%d.js" % b.line)
                with open(path, "w") as f:
                    f.write("(async () => {\n%s\n})().catch((e) => { console.error(e); "
                            "process.exit(1); });\n" % code)
                want = re.findall(r"// -> (.*)$", code, re.M)
                self.assertTrue(want, "%s: no `// -> ...` output to check" % b.where)
                r = run_node(path, self.modules)
                self.assertEqual(r.returncode, 0, "%s: %s" % (b.where, r.stderr.decode()))
                self.assertEqual(r.stdout.decode().splitlines(), want, b.where)


if __name__ == "__main__":
    unittest.main()
