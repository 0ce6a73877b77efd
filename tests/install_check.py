"""install_check.py - `meson install --destdir TMP` of the build, checked:
every expected file and nothing else, the unit's ExecStart= and ExecReload=
naming the installed binary and config, the installed config passing
`ratelimitd -t -c`, `systemd-analyze verify` of the installed unit (when
systemd-analyze is there), and a second install keeping an edited config.

The paths expected come from meson.build (--sbindir, --config, ...), so the
check holds for any prefix. Only TMP is written to."""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def under(root, path):
    """path (absolute) as installed under the destdir root."""
    return os.path.join(root, path.lstrip("/"))


class InstallTest(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="rl-install-")
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)

    def install(self):
        r = subprocess.run([ARGS.meson, "install", "-C", ARGS.builddir, "--no-rebuild",
                            "--destdir", self.root],
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, "meson install failed:\n%s%s" % (r.stdout, r.stderr))

    def expected(self):
        docs = ["README.md", "NEWS.md", "proto/protocol.md", "proto/grpc.md"] + [
            os.path.relpath(p, ARGS.srcdir)
            for p in glob.glob(os.path.join(ARGS.srcdir, "docs", "*.md")) +
            glob.glob(os.path.join(ARGS.srcdir, "docs", "*.svg")) +
            glob.glob(os.path.join(ARGS.srcdir, "docs", "*.png")) +
            glob.glob(os.path.join(ARGS.srcdir, "docs", "*.yml")) +
            glob.glob(os.path.join(ARGS.srcdir, "docs", "*.json")) +
            glob.glob(os.path.join(ARGS.srcdir, "proto", "grpc", "**", "*.proto"),
                      recursive=True)]
        out = {os.path.join(ARGS.sbindir, "ratelimitd"), ARGS.config,
               os.path.join(ARGS.bindir, "ratelimitctl"),
               os.path.join(ARGS.bindir, "ratelimit-bench"),
               os.path.join(ARGS.completionsdir, "ratelimitctl")}
        out.update(os.path.join(ARGS.docdir, d) for d in docs)
        if ARGS.unitdir != "no":
            out.add(os.path.join(ARGS.unitdir, "ratelimitd.service"))
            out.add(os.path.join(ARGS.unitdir, "ratelimitd.socket"))
        if ARGS.mandir != "no":
            out.update(os.path.join(ARGS.mandir, "man" + page[-1], page)
                       for page in ("ratelimitd.8", "ratelimitd.yaml.5", "ratelimitctl.1",
                                    "ratelimit-bench.1"))
        return out

    def installed(self):
        out = set()
        for d, _, files in os.walk(self.root):
            for f in files:
                out.add("/" + os.path.relpath(os.path.join(d, f), self.root))
        return out

    def unit_lines(self, key):
        with open(under(self.root, os.path.join(ARGS.unitdir, "ratelimitd.service"))) as f:
            return [ln.split("=", 1)[1].strip() for ln in f if ln.startswith(key + "=")]

    def test_install(self):
        self.install()
        self.assertEqual(sorted(self.installed()), sorted(self.expected()))

        binary = os.path.join(ARGS.sbindir, "ratelimitd")
        programs = {binary, os.path.join(ARGS.bindir, "ratelimitctl"),
                    os.path.join(ARGS.bindir, "ratelimit-bench")}
        for prog in programs:
            self.assertTrue(os.path.isabs(prog), prog)
            self.assertTrue(os.access(under(self.root, prog), os.X_OK), prog)
        for d in self.expected() - programs:
            self.assertFalse(os.stat(under(self.root, d)).st_mode & 0o111,
                             "%s must not be executable" % d)
        # the installed files are the sources, not stale copies
        with open(under(self.root, ARGS.config)) as f, \
                open(os.path.join(ARGS.srcdir, "conf", "ratelimitd.yaml")) as g:
            self.assertEqual(f.read(), g.read())
        with open(under(self.root, os.path.join(ARGS.docdir, "docs", "operations.md"))) as f, \
                open(os.path.join(ARGS.srcdir, "docs", "operations.md")) as g:
            self.assertEqual(f.read(), g.read())

        # the installed binary checks the installed config, whose path it
        # also takes as its default
        r = subprocess.run([under(self.root, binary), "-t", "-c", under(self.root, ARGS.config)],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((r.returncode, r.stdout), (0, "configuration OK\n"), r.stderr)
        r = subprocess.run([under(self.root, binary), "--help"], capture_output=True, text=True,
                           timeout=30)
        self.assertIn("(default %s)" % ARGS.config, r.stdout)
        # ratelimitctl checks it the same way, and defaults to it
        ctl = under(self.root, os.path.join(ARGS.bindir, "ratelimitctl"))
        r = subprocess.run([ctl, "check-config", under(self.root, ARGS.config)],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual((r.returncode, r.stdout), (0, "configuration OK\n"), r.stderr)
        r = subprocess.run([ctl, "--help"], capture_output=True, text=True, timeout=30)
        self.assertIn("(default %s)" % ARGS.config, r.stdout)

        if ARGS.unitdir == "no":
            return
        self.assertEqual(self.unit_lines("ExecStart"),
                         ["%s -c %s -p /run/ratelimitd/ratelimitd.pid" % (binary, ARGS.config)])
        self.assertEqual(self.unit_lines("ExecReload")[0], "%s -t -c %s" % (binary, ARGS.config))
        if shutil.which("systemd-analyze"):
            unit = under(self.root, os.path.join(ARGS.unitdir, "ratelimitd.service"))
            socket_unit = under(self.root, os.path.join(ARGS.unitdir, "ratelimitd.socket"))
            r = subprocess.run(["bash", ARGS.verify, unit, under(self.root, binary), socket_unit],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, "systemd-analyze verify:\n%s%s"
                             % (r.stdout, r.stderr))

    def test_second_install_keeps_the_config(self):
        self.install()
        conf = under(self.root, ARGS.config)
        with open(conf, "a") as f:
            f.write("# edited by the operator\n")
        with open(conf) as f:
            edited = f.read()
        os.chmod(conf, 0o640)
        doc = under(self.root, os.path.join(ARGS.docdir, "README.md"))
        os.unlink(doc)
        self.install()
        with open(conf) as f:
            self.assertEqual(f.read(), edited)
        self.assertEqual(os.stat(conf).st_mode & 0o777, 0o640)
        # everything else is installed again
        self.assertTrue(os.path.exists(doc))
        self.assertEqual(sorted(self.installed()), sorted(self.expected()))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    for a in ("meson", "builddir", "srcdir", "sbindir", "bindir", "completionsdir", "config",
              "unitdir", "docdir", "mandir", "verify"):
        p.add_argument("--" + a, required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
