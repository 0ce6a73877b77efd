"""package_check.py - the Debian package, built and installed for real.

scripts/package builds ratelimitd_VERSION_ARCH.deb from a clean export of
HEAD (dpkg-buildpackage, then lintian). This test then checks:
- lintian reported no error and no warning;
- the control fields (version = meson.build's, the shared libraries in
  Depends) and DEBIAN/conffiles;
- the package holds exactly what `meson install` installs for the
  package's configuration (read from meson's install plan of the same
  commit, configured by debian/rules itself), give or take dh_compress's
  .gz, plus Debian's changelog and copyright: whatever meson.build comes
  to install (ratelimitctl, a bash completion...) must be in the package;
- `dpkg -i` in a container: a private mount namespace whose root is an
  overlay on this system's root (writes go to a temporary directory, the
  host is never changed), with its own /run (no systemd there: nothing is
  started), running the package's real maintainer scripts. Installed, the
  unit is enabled, its ExecStart= and ExecReload= name files that exist,
  `systemd-analyze verify` passes on it as installed, the binary runs and
  accepts the installed config, the man pages are there; an edited conffile
  survives a reinstall and a remove, and purge removes it.

RL_PACKAGE_BASE=DIR (a debootstrap --variant=minbase tree) uses DIR as the
container's root instead of this system's, and installs with apt-get,
which fetches the dependencies from the Debian mirror: a check of Depends
on a minimal system. DIR is never written to.

Needs root (mount namespaces, overlayfs, chroot) and git."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

SRCDIR = None
PACKAGE = None  # scripts/package
VERIFY = None  # tests/systemd_verify.sh
BASE = os.environ.get("RL_PACKAGE_BASE") or "/"

CONFIG = "/etc/ratelimitd/ratelimitd.yaml"
DOCDIR = "/usr/share/doc/ratelimitd"
# what Debian adds to what meson installs
DEBIAN_EXTRA = {DOCDIR + "/changelog.gz", DOCDIR + "/copyright"}
# shared libraries the daemon links (meson.build's dependencies), by the
# start of their Debian package names
LIBRARIES = ["libc6", "libevent-2.1", "libhiredis", "libyaml-0", "libnghttp2",
             "libprotobuf-c", "libsystemd0"]


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def meson_install_plan(src):
    """The absolute paths of the files `meson install` installs from the
    tree src, configured as debian/rules configures it (its
    override_dh_auto_configure, so the options are the package's own),
    without building anything."""
    r = run(["debian/rules", "override_dh_auto_configure"], cwd=src, timeout=300)
    if r.returncode != 0:
        raise AssertionError("debian/rules override_dh_auto_configure:\n" + r.stdout + r.stderr)
    builds = [d for d in os.listdir(src) if d.startswith("obj-")]
    if len(builds) != 1:
        raise AssertionError("no single obj-* build directory in %s: %s" % (src, builds))
    build = os.path.join(src, builds[0])
    opts = {o["name"]: o["value"] for o in json.loads(
        run(["meson", "introspect", build, "--buildoptions"], check=True).stdout)}
    prefix = opts["prefix"]

    def resolve(dest):
        def option(m):
            v = str(opts[m.group(1)])
            return v if os.path.isabs(v) or m.group(1) == "prefix" else os.path.join(prefix, v)
        return os.path.normpath(re.sub(r"\{(\w+)\}", option, dest))

    plan = json.loads(run(["meson", "introspect", build, "--install-plan"], check=True).stdout)
    out = set()
    for kind, entries in plan.items():
        for source, e in entries.items():
            dest = resolve(e["destination"])
            if kind in ("targets", "configure", "data", "man", "headers", "symlinks"):
                out.add(dest)
            elif kind == "install_subdirs":
                excluded_files = set(e.get("exclude_files", []))
                excluded_dirs = set(e.get("exclude_dirs", []))
                for d, dirs, files in os.walk(source):
                    rel = os.path.relpath(d, source)
                    dirs[:] = [x for x in dirs
                               if os.path.normpath(os.path.join(rel, x)) not in excluded_dirs]
                    for f in files:
                        relf = os.path.normpath(os.path.join(rel, f))
                        if relf not in excluded_files:
                            out.add(os.path.join(dest, relf))
            elif kind == "emptydir":
                pass
            else:
                raise AssertionError("meson's install plan has %r entries, which this "
                                     "test does not know: teach it" % kind)
    # meson.build's install script (scripts/install_config.sh) installs the
    # example configuration: the plan does not list what scripts install
    out.add(CONFIG)
    return out


class PackageTest(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise AssertionError("package_check.py needs root (mount namespaces, chroot)")
        cls.tmp = tempfile.mkdtemp(prefix="rl-package-check-")
        try:
            cls.build()
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def build(cls):
        cls.rev = run(["git", "-C", SRCDIR, "rev-parse", "HEAD"], check=True).stdout.strip()
        # the commit scripts/package builds, exported for its install plan
        cls.src = os.path.join(cls.tmp, "src")
        os.mkdir(cls.src)
        subprocess.run("git -C '%s' archive %s | tar -x -C '%s'" % (SRCDIR, cls.rev, cls.src),
                       shell=True, check=True)
        with open(os.path.join(cls.src, "meson.build")) as f:
            cls.version = re.search(r"^\s*version\s*:\s*'([^']+)'", f.read(), re.M).group(1)
        cls.arch = run(["dpkg", "--print-architecture"], check=True).stdout.strip()

        cls.out = os.path.join(cls.tmp, "out")
        start = time.monotonic()
        r = run(["bash", PACKAGE, "--rev", cls.rev, "--outdir", cls.out], timeout=1200)
        cls.build_seconds = time.monotonic() - start
        print("scripts/package: exit %d in %.0f s" % (r.returncode, cls.build_seconds))
        if r.returncode != 0:
            raise AssertionError("scripts/package failed:\n" + r.stderr[-20000:])
        cls.deb = r.stdout.strip().splitlines()[-1]
        cls.base = "ratelimitd_%s_%s" % (cls.version, cls.arch)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- the .deb as a file ----

    def test_deb_name_and_lintian(self):
        self.assertEqual(self.deb, os.path.join(self.out, self.base + ".deb"))
        self.assertTrue(os.path.isfile(self.deb))
        with open(os.path.join(self.out, self.base + ".lintian")) as f:
            report = f.read()
        bad = [ln for ln in report.splitlines() if re.match(r"[EW]: ", ln)]
        self.assertEqual(bad, [], "lintian:\n" + report)

    def test_control(self):
        def field(name):
            return run(["dpkg-deb", "-f", self.deb, name], check=True).stdout.strip()
        self.assertEqual(field("Package"), "ratelimitd")
        self.assertEqual(field("Version"), self.version)
        self.assertEqual(field("Architecture"), self.arch)
        depends = [d.strip().split()[0] for d in field("Depends").split(",")]
        for lib in LIBRARIES:
            self.assertTrue([d for d in depends if d.startswith(lib)],
                            "%s not in Depends: %s" % (lib, depends))
        # /bin/kill, for the unit's ExecReload=
        self.assertIn("procps", depends)
        self.assertIn("redis-server", field("Recommends"))

        ctl = os.path.join(self.tmp, "control")
        run(["dpkg-deb", "-e", self.deb, ctl], check=True)
        with open(os.path.join(ctl, "conffiles")) as f:
            self.assertEqual(f.read().split(), [CONFIG])
        # the unit is enabled on install and restarted on upgrade
        with open(os.path.join(ctl, "postinst")) as f:
            postinst = f.read()
        self.assertIn("deb-systemd-helper enable 'ratelimitd.service'", postinst)
        self.assertIn("_dh_action=restart", postinst)

    def test_contents_are_what_meson_installs(self):
        r = run(["sh", "-c", "dpkg-deb --fsys-tarfile '%s' | tar -t -v" % self.deb], check=True)
        files = set()
        for ln in r.stdout.splitlines():
            if ln.startswith("d"):
                continue
            name = ln.split()[5]
            files.add(name[1:] if name.startswith("./") else name)
        expected = meson_install_plan(self.src)
        # dh_compress gzips man pages and the larger docs
        got = {f[:-3] if f.endswith(".gz") and f[:-3] in expected else f
               for f in files - DEBIAN_EXTRA}
        self.assertEqual(sorted(got), sorted(expected))
        self.assertTrue(DEBIAN_EXTRA <= files, files)
        self.assertIn("/usr/sbin/ratelimitd", got)
        self.assertIn("/lib/systemd/system/ratelimitd.service", got)
        self.assertIn("/usr/share/man/man8/ratelimitd.8", got)

    # ---- installed in a container ----

    def container(self, *cmd, timeout=300):
        """Runs cmd chrooted in the container: a new mount and pid namespace,
        root an overlay of BASE whose changes persist in self.upper between
        calls; the package's directory is at /mnt."""
        script = r"""
set -e
m=$1/merged
mount -t overlay overlay -o "lowerdir=$2,upperdir=$1/upper,workdir=$1/work" "$m"
mount -t proc proc "$m/proc"
mount --rbind /dev "$m/dev"
mount -t sysfs -o ro sysfs "$m/sys"
mount -t tmpfs tmpfs "$m/run"
mount -t tmpfs tmpfs "$m/tmp"
mount --bind -o ro "$3" "$m/mnt"
[ "$2" = / ] || cp /etc/resolv.conf "$m/etc/resolv.conf"
shift 3
exec chroot "$m" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 "$@"
"""
        return run(["unshare", "--mount", "--pid", "--fork", "--propagation", "private",
                    "bash", "-c", script, "container", self.ct, BASE, self.out] + list(cmd),
                   timeout=timeout)

    def ok(self, *cmd, timeout=300):
        r = self.container(*cmd, timeout=timeout)
        self.assertEqual(r.returncode, 0, "%s:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
        return r.stdout

    def exists(self, path):
        return self.container("test", "-e", path).returncode == 0

    def install(self):
        deb = "/mnt/" + os.path.basename(self.deb)
        if BASE == "/":
            return self.ok("dpkg", "-i", deb)
        # (the dates as this system's apt.conf takes them: a clock may be off)
        apt = "apt-get -q -o Acquire::Check-Valid-Until=false -o Acquire::Check-Date=false"
        return self.ok("sh", "-c", "%s update && DEBIAN_FRONTEND=noninteractive %s install -y "
                       "--no-install-recommends %s" % (apt, apt, deb), timeout=600)

    def test_install_upgrade_remove_purge(self):
        self.ct = os.path.join(self.tmp, "container")
        for d in ("upper", "work", "merged"):
            os.makedirs(os.path.join(self.ct, d))
        self.assertFalse(self.exists("/usr/sbin/ratelimitd"),
                         "ratelimitd is installed on the container's base already")

        self.install()
        self.assertEqual(self.ok("dpkg-query", "-W", "-f", "${Status} ${Version}",
                                 "ratelimitd"), "install ok installed " + self.version)
        self.assertEqual(self.ok("dpkg-query", "-W", "-f", "${Conffiles}", "ratelimitd")
                         .split()[0], CONFIG)
        # enabled as a Debian daemon is (deb-systemd-helper's symlink)
        self.assertEqual(self.ok("readlink", "/etc/systemd/system/multi-user.target.wants/"
                                             "ratelimitd.service").strip(),
                         "/lib/systemd/system/ratelimitd.service")

        # the unit names files that are there
        unit = self.ok("cat", "/lib/systemd/system/ratelimitd.service")
        start = [ln.split("=", 1)[1].split() for ln in unit.splitlines()
                 if ln.startswith("ExecStart=")]
        self.assertEqual(start, [["/usr/sbin/ratelimitd", "-c", CONFIG,
                                  "-p", "/run/ratelimitd/ratelimitd.pid"]])
        reload = [ln.split("=", 1)[1].split() for ln in unit.splitlines()
                  if ln.startswith("ExecReload=")]
        self.assertEqual(reload[0], ["/usr/sbin/ratelimitd", "-t", "-c", CONFIG])
        for ln in start + reload:
            self.assertTrue(self.exists(ln[0]), ln[0])
            if "-c" in ln:
                self.assertTrue(self.exists(ln[ln.index("-c") + 1]), ln)
        if self.container("sh", "-c", "command -v systemd-analyze").returncode == 0:
            # in the container, the unit as installed: its ExecStart= binary
            # "replaced" by itself
            with open(VERIFY) as f:
                verify = f.read()
            r = self.container("bash", "-c", verify, "systemd_verify.sh",
                               "/lib/systemd/system/ratelimitd.service", "/usr/sbin/ratelimitd",
                               "/lib/systemd/system/ratelimitd.socket")
            self.assertEqual(r.returncode, 0, "systemd-analyze verify:\n" + r.stdout + r.stderr)
        else:
            # a base without systemd: on this host, the binary from the package
            unit_copy = os.path.join(self.tmp, "ratelimitd.service")
            with open(unit_copy, "w") as f:
                f.write(unit)
            binary = os.path.join(self.tmp, "unpacked")
            run(["dpkg-deb", "-x", self.deb, binary], check=True)
            r = run(["bash", VERIFY, unit_copy, binary + "/usr/sbin/ratelimitd"])
            self.assertEqual(r.returncode, 0, "systemd-analyze verify:\n" + r.stdout + r.stderr)

        # the binary runs, and takes the installed config
        self.assertIn(self.version, self.ok("/usr/sbin/ratelimitd", "--version"))
        self.assertEqual(self.ok("/usr/sbin/ratelimitd", "-t", "-c", CONFIG),
                         "configuration OK\n")
        self.assertIn("(default %s)" % CONFIG, self.ok("/usr/sbin/ratelimitd", "--help"))
        # the operator's client checks it the same way
        self.assertEqual(self.ok("/usr/bin/ratelimitctl", "check-config", CONFIG),
                         "configuration OK\n")
        self.assertTrue(self.exists("/lib/systemd/system/ratelimitd.socket"))
        self.assertTrue(self.exists("/usr/share/bash-completion/completions/ratelimitctl"))
        for page in ("/usr/share/man/man8/ratelimitd.8.gz",
                     "/usr/share/man/man5/ratelimitd.yaml.5.gz",
                     "/usr/share/man/man1/ratelimitctl.1.gz",
                     "/usr/share/man/man1/ratelimit-bench.1.gz"):
            self.assertTrue(self.exists(page), page)
            self.assertIn(".TH", self.ok("sh", "-c", "zcat " + page))
        # every file of the package is where dpkg says
        for path in self.ok("dpkg-query", "-L", "ratelimitd").split():
            self.assertTrue(self.exists(path), path)

        # an edited conffile survives a reinstall (an upgrade to the same
        # contents) and a remove; purge removes it and the enable symlink
        self.ok("sh", "-c", "echo '# edited by the operator' >> " + CONFIG)
        edited = self.ok("cat", CONFIG)
        self.install()
        self.assertEqual(self.ok("cat", CONFIG), edited)
        self.ok("dpkg", "--remove", "ratelimitd")
        self.assertFalse(self.exists("/usr/sbin/ratelimitd"))
        self.assertEqual(self.ok("cat", CONFIG), edited)
        self.ok("dpkg", "--purge", "ratelimitd")
        self.assertFalse(self.exists(CONFIG))
        self.assertFalse(self.exists("/etc/systemd/system/multi-user.target.wants/"
                                     "ratelimitd.service"))
        self.assertNotEqual(self.container("dpkg-query", "-W", "-f", "${Status}",
                                           "ratelimitd").stdout, "install ok installed")


def main():
    global SRCDIR, PACKAGE, VERIFY
    args = sys.argv[1:]
    SRCDIR, PACKAGE, VERIFY = args[:3]
    unittest.main(argv=[sys.argv[0]] + args[3:], verbosity=2)


if __name__ == "__main__":
    main()
