"""quickstart_check.py SRCDIR [--script FILE] - README.md's quick start as a
new user meets it: `scripts/run` in a copy of the tree as a clone has it
(the files git tracks, as they are in SRCDIR's work tree, without build/),
so the first run builds it as the user's would, inside a private network
namespace, where 6379 and 7379 are free whatever this host runs.

Real parts throughout: scripts/run, meson and ninja, redis-server, the
daemon, nc, redis-cli, curl and the built ratelimitctl. Ctrl-C is SIGINT to
scripts/run's process group, as a terminal sends it; `kill PID` and a
closing terminal are SIGTERM and SIGHUP to scripts/run's pid alone. After
every case no process is left in the namespace (but the Redis a case
started itself) and scripts/run's TMPDIR is empty; whatever is left is
killed.

--script FILE puts FILE in the copy as scripts/run: to show that the test
fails on an old one (git show f4af880:scripts/run > /tmp/run.old).

--meson-timeout S is meson's timeout for this test (tests/meson.build
passes it; 600 by hand). Every bound inside is strictly below it: the first
build gets half of it, and the whole run is cut off 60 s before it (SIGALRM:
the case it was in and its scripts/run log are printed, everything killed),
so a slow box fails with this test's own report rather than meson's bare
timeout, and a build that takes most of the time is reported as such.

Needs root (or unprivileged user namespaces) for the network namespace, and
git. Every wait is bounded; a case takes a few seconds, the first one the
build as well."""

import argparse
import ctypes
import errno
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None
SRC = None        # the copy of the tree
WORK = None       # everything of this test: the copy, configs, TMPDIR
README = None
CURRENT = None    # the case running, for the report of an overall timeout
MESON_TIMEOUT = 600  # --meson-timeout: set from tests/meson.build's
BUILD_TIMEOUT = 300  # the first scripts/run builds the copy; MESON_TIMEOUT / 2
TOTAL_MARGIN = 60    # the whole run ends this long before meson's timeout
START_TIMEOUT = 30
STOP_TIMEOUT = 20


def enter_private_network():
    """Moves this process (and so every child) into a new network namespace
    with only lo, up. Root: CLONE_NEWNET; otherwise a user namespace too."""
    libc = ctypes.CDLL(None, use_errno=True)
    CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
    if libc.unshare(CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        uid, gid = os.getuid(), os.getgid()
        if err != errno.EPERM or libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            sys.exit("quickstart_check: cannot enter a network namespace (%s): run as root"
                     % os.strerror(ctypes.get_errno() or err))
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write("%d %d 1" % (uid, uid))
        with open("/proc/self/gid_map", "w") as f:
            f.write("%d %d 1" % (gid, gid))
    # lo up: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP (no ip(8) needed)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0))
        flags = struct.unpack("16sH14x", ifr)[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))


def copy_tree(src, dst):
    """The files git tracks in src (their work-tree contents), into dst: what
    a clone has, plus uncommitted edits, and nothing untracked or built."""
    r = subprocess.run(["git", "-C", src, "ls-files", "-z", "--cached"],
                       capture_output=True, timeout=60)
    if r.returncode != 0:
        sys.exit("quickstart_check: %s is not a git checkout: %s" % (src, r.stderr.decode()))
    for rel in r.stdout.decode().split("\0"):
        if not rel:
            continue
        s, d = os.path.join(src, rel), os.path.join(dst, rel)
        if not os.path.lexists(s):
            continue  # deleted in the work tree, not committed yet
        os.makedirs(os.path.dirname(d), exist_ok=True)
        if os.path.islink(s):
            os.symlink(os.readlink(s), d)
        else:
            shutil.copy2(s, d)


def netns_processes():
    """{pid: command line} of every process in this network namespace but
    this one."""
    mine = os.readlink("/proc/self/ns/net")
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            if os.readlink("/proc/%s/ns/net" % d) != mine:
                continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # gone meanwhile, or a zombie
        found[int(d)] = cmd
    return found


def answers(port, host="127.0.0.1"):
    try:
        socket.create_connection((host, port), 1).close()
        return True
    except OSError:
        return False


def sh(cmd, cwd=None, timeout=15, env=None):
    """A line a user pastes into a shell, run as bash runs it."""
    return subprocess.run(["bash", "-c", cmd], cwd=cwd or SRC, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env)


def readme_section(title):
    return README.split("\n## " + title, 1)[1].split("\n## ", 1)[0]


class Run:
    """scripts/run ARGS in cwd, in its own session and process group (as a
    shell runs a foreground job), stdout and stderr in one log."""

    def __init__(self, test, args, cwd=None, env=None, script=None):
        self.log_path = os.path.join(WORK, "run-%s.log" % test.id().rsplit(".", 1)[1])
        self.log = open(self.log_path, "wb")
        self.env = dict(os.environ, TMPDIR=test.tmpdir)
        self.env.update(env or {})
        script = script or os.path.join(SRC, "scripts", "run")
        self.p = subprocess.Popen([script] + args, cwd=cwd or SRC, stdout=self.log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=self.env, start_new_session=True)
        test.addCleanup(self.kill)

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout):
        """Until the daemon logs ready; fails if scripts/run exits first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if " ready, listening on " in self.text():
                return
            if self.p.poll() is not None:
                raise AssertionError("scripts/run exited %s before the daemon was ready:\n%s"
                                     % (self.p.returncode, self.text()))
            time.sleep(0.1)
        raise AssertionError("no 'ready' from the daemon in %d s:\n%s" % (timeout, self.text()))

    def ctrl_c(self):
        """SIGINT to the foreground process group, as Ctrl-C; true when
        scripts/run then exits 130, as its header says an interrupted run
        does, and the daemon stopped gracefully, once (the terminal's SIGINT
        and the script's SIGTERM both reaching it would be a "second"
        signal: exiting at once, replies owed dropped)."""
        os.killpg(self.p.pid, signal.SIGINT)
        rc = self.wait_exit(STOP_TIMEOUT)
        return rc == 130 and "exiting now" not in self.text()

    def signal_script(self, sig):
        """sig to scripts/run's own pid only, as `kill PID` or a closing
        terminal's SIGHUP to the shell's job; its exit status."""
        os.kill(self.p.pid, sig)
        return self.wait_exit(STOP_TIMEOUT)

    def wait_exit(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("scripts/run still running %d s later:\n%s"
                                 % (timeout, self.text()))

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()

    def try_lines(self):
        """The lines scripts/run says to try, without their indentation."""
        return [ln.strip() for ln in self.text().splitlines()
                if ln.startswith("    ") and ("| nc " in ln or ln.strip().startswith("curl "))]


class QuickStart(unittest.TestCase):
    maxDiff = None
    built = False

    def setUp(self):
        global CURRENT
        CURRENT = self
        self.script_run = None
        self.tmpdir = tempfile.mkdtemp(prefix="tmp-", dir=WORK)
        self.keep = set()  # pids of processes a case started on purpose
        self.addCleanup(self.sweep)
        # what the README's examples use must be free in the namespace
        for port in (6379, 7379, 7380, 8080):
            self.assertFalse(answers(port), "port %d answers before the case" % port)

    def sweep(self):
        kill_all()
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def run_script(self, args, **kw):
        self.script_run = Run(self, args, **kw)
        return self.script_run

    def start_redis(self, *extra):
        """A Redis already answering on 6379, as a user may have one."""
        p = subprocess.Popen(["redis-server", "--port", "6379", "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", WORK] + list(extra),
                             stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                             start_new_session=True)

        def stop():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self.addCleanup(stop)
        self.keep.add(p.pid)
        end = time.monotonic() + 10
        while not answers(6379):
            self.assertLess(time.monotonic(), end, "redis-server did not start")
            self.assertIsNone(p.poll(), "redis-server exited")
            time.sleep(0.05)
        return p

    def wait_ready(self, run):
        # the first scripts/run of the test builds the copy
        run.wait_ready(START_TIMEOUT if QuickStart.built else BUILD_TIMEOUT)
        QuickStart.built = True

    def assertClean(self, run):
        """Nothing of scripts/run's left: no process in the namespace but the
        case's own, an empty TMPDIR, and the daemon's port closed."""
        left = {pid: cmd for pid, cmd in netns_processes().items() if pid not in self.keep}
        self.assertEqual(left, {}, "left running after scripts/run exited:\n%s" % run.text())
        self.assertEqual(os.listdir(self.tmpdir), [],
                         "left in scripts/run's TMPDIR:\n%s" % run.text())
        self.assertFalse(answers(7379), "7379 still answers")

    def assertNcLine(self, run, reply="ALLOWED 5 4 0 60000"):
        """The `printf ... | nc` line scripts/run prints, run as printed."""
        lines = [ln for ln in run.try_lines() if "| nc " in ln]
        self.assertEqual(len(lines), 1, "no nc line to try:\n%s" % run.text())
        r = sh(lines[0])
        self.assertEqual(r.stdout, reply + "\n", "%s: %r" % (lines[0], r))
        return lines[0]

    def readme_try(self):
        """README quick start's `$ printf ... | nc ...` line and its reply."""
        m = re.search(r"^\$ (printf .*\| nc .*)\n(.+)$", readme_section("Quick start"), re.M)
        self.assertIsNotNone(m, "README's quick start shows no nc line")
        return m.group(1), m.group(2)

    def test_1_no_redis(self):
        """scripts/run as README's quick start says, nothing on 6379: a
        throwaway Redis on 6379, the line it prints answers as the README
        shows, so do redis-cli and ratelimitctl; Ctrl-C leaves nothing."""
        run = self.run_script([])
        self.wait_ready(run)
        out = run.text()
        self.assertIn("starting a throwaway redis-server", out)
        r = sh("redis-cli -p 6379 ping")
        self.assertEqual(r.stdout.strip(), "PONG", "no Redis on 6379 (where the config says)")

        cmd, reply = self.readme_try()
        self.assertIn(cmd, run.try_lines(), "scripts/run does not print README's line")
        self.assertNcLine(run, reply)

        # README's redis-cli example (its numbers are for a fresh Redis:
        # david has used one more here)
        m = re.search(r"^\$ (redis-cli -p 7379 ALLOW david reply)\n((?:-?\d+\n)+)", README, re.M)
        self.assertIsNotNone(m, "README has no redis-cli example")
        r = sh(m.group(1))
        self.assertEqual(r.stdout.split(), ["1", "5", "3", "0", "60000"], r)

        # where ratelimitctl and the man pages are: said by scripts/run, and
        # by README's quick start
        m = re.search(r"ratelimitctl is (\S+) \(try: ([^)]+)\)", out)
        self.assertIsNotNone(m, "scripts/run does not say where ratelimitctl is:\n" + out)
        self.assertTrue(os.access(os.path.join(SRC, m.group(1)), os.X_OK), m.group(1))
        self.assertIn("`%s`" % m.group(1), readme_section("Quick start"))
        r = subprocess.run(shlex.split(m.group(2)), cwd=SRC, capture_output=True, text=True,
                           timeout=15, stdin=subprocess.DEVNULL)
        self.assertEqual((r.returncode, r.stdout),
                         (0, "allowed (2 of 5 remaining; full again in 60s)\n"), r)
        m = re.search(r"man pages: man (\S+)", out)
        self.assertIsNotNone(m, "scripts/run does not say where the man pages are:\n" + out)
        self.assertIn("`man %s`" % m.group(1), readme_section("Quick start"))
        with open(os.path.join(SRC, m.group(1))) as f:
            self.assertIn('\n.TH "ratelimitd" "8"', f.read(), "not a man page: " + m.group(1))

        self.assertTrue(run.ctrl_c(), run.text())
        self.assertIn("stopping the throwaway redis-server", run.text())
        self.assertFalse(answers(6379), "the throwaway Redis still answers")
        self.assertClean(run)

    def test_2_http(self):
        """scripts/run FILE, FILE relative to another directory, with README's
        HTTP listener: the curl line it prints answers."""
        m = re.search(r"```yaml\n(listen:\n(?:  - .*\n)+)```", README)
        self.assertIsNotNone(m, "README has no listen: example")
        self.assertIn("protocol: http", m.group(1))
        conf_dir = os.path.join(WORK, "http")
        cwd = os.path.join(WORK, "elsewhere")
        os.makedirs(conf_dir, exist_ok=True)
        os.makedirs(cwd, exist_ok=True)
        with open(os.path.join(conf_dir, "http.yaml"), "w") as f:
            # as test_docs.py's `wrap` completes README's fragment
            f.write(m.group(1) + "policies:\n  reply: 5/60s\n")
        run = self.run_script(["../http/http.yaml"], cwd=cwd)
        self.wait_ready(run)
        curls = [ln for ln in run.try_lines() if ln.startswith("curl ")]
        self.assertEqual(len(curls), 1, "no curl line to try:\n" + run.text())
        self.assertIn("http://127.0.0.1:8080/v1/allow?", curls[0])
        r = sh(curls[0], cwd=cwd)
        self.assertEqual(r.returncode, 0, r)
        body = json.loads(r.stdout)
        self.assertEqual((body["allowed"], body["limit"], body["remaining"]), (True, 5, 4), body)
        r = sh("curl -s -o /dev/null -w '%{http_code}' '" + shlex.split(curls[0])[1] + "'")
        self.assertEqual(r.stdout, "200", r)
        self.assertNcLine(run, "ALLOWED 5 2 0 60000")
        self.assertTrue(run.ctrl_c(), run.text())
        self.assertFalse(answers(8080))
        self.assertClean(run)

    def test_3_redis_answering(self):
        """A Redis already on 6379: used, and left running."""
        redis = self.start_redis()
        run = self.run_script([])
        self.wait_ready(run)
        self.assertIn("using the Redis at 127.0.0.1:6379", run.text())
        self.assertNotIn("throwaway", run.text())
        # README's redis-cli example, exactly, on a fresh Redis
        m = re.search(r"^\$ (redis-cli -p 7379 ALLOW david reply)\n((?:-?\d+\n)+)", README, re.M)
        r = sh(m.group(1))
        self.assertEqual(r.stdout, m.group(2), r)
        self.assertTrue(run.ctrl_c(), run.text())
        self.assertIsNone(redis.poll(), "the user's Redis was stopped")
        r = sh("redis-cli -p 6379 dbsize")
        self.assertNotEqual(r.stdout.strip(), "0", "the daemon wrote nothing to that Redis")
        self.assertClean(run)

    def test_4_redis_password(self):
        """A Redis on 6379 that wants a password, and conf/ratelimitd.yaml
        with redis.password (a copy, run by a relative name): real decisions,
        not the fallback, and that Redis left running."""
        redis = self.start_redis("--requirepass", "s3cret")
        with open(os.path.join(SRC, "conf", "ratelimitd.yaml")) as f:
            conf = f.read()
        self.assertIn("  # password: secret\n", conf)
        d = os.path.join(WORK, "pw")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "ratelimitd.yaml"), "w") as f:
            f.write(conf.replace("  # password: secret\n", "  password: s3cret\n"))
        run = self.run_script(["ratelimitd.yaml"], cwd=d)
        self.wait_ready(run)
        self.assertIn("using the Redis at 127.0.0.1:6379", run.text())
        self.assertNcLine(run)  # ALLOWED 5 4 ..., where the fallback says 5 -1 0 -1
        self.assertTrue(run.ctrl_c(), run.text())
        self.assertIsNone(redis.poll(), "the user's Redis was stopped")
        r = sh("redis-cli -p 6379 -a s3cret --no-auth-warning dbsize")
        self.assertNotEqual(r.stdout.strip(), "0", r)
        self.assertClean(run)

    def test_5_memory(self):
        """scripts/run --memory: no Redis at all."""
        run = self.run_script(["--memory"])
        self.wait_ready(run)
        self.assertIn("store: memory", run.text())
        self.assertNcLine(run)
        self.assertFalse(answers(6379), "a Redis answers on 6379 with --memory")
        self.assertEqual([c for c in netns_processes().values() if "redis-server" in c], [])
        self.assertTrue(run.ctrl_c(), run.text())
        self.assertClean(run)

    def test_6_unix_redis(self):
        """scripts/run FILE with `redis: {address: unix:/path}`, FILE relative
        to another directory: a throwaway Redis on that socket, none on 6379."""
        d = os.path.join(WORK, "unix")
        cwd = os.path.join(d, "sub")
        os.makedirs(cwd, exist_ok=True)
        sock = os.path.join(d, "redis.sock")
        with open(os.path.join(d, "unix.yaml"), "w") as f:
            f.write("listen: [127.0.0.1:7379]\nredis: {address: unix:%s}\n"
                    "policies: {reply: 5/60s}\n" % sock)
        run = self.run_script(["../unix.yaml"], cwd=cwd)
        self.wait_ready(run)
        self.assertIn("starting a throwaway redis-server", run.text())
        r = sh("redis-cli -s %s ping" % shlex.quote(sock))
        self.assertEqual(r.stdout.strip(), "PONG", r)
        self.assertFalse(answers(6379), "a Redis on 6379, not on the socket")
        self.assertNcLine(run)
        self.assertTrue(run.ctrl_c(), run.text())
        self.assertClean(run)

    def test_7_port_taken(self):
        """7379 held by another program: a message naming it, exit non-zero,
        and no Redis started (or left)."""
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 7379))
            s.listen()
            run = self.run_script([])
            rc = run.wait_exit(BUILD_TIMEOUT if not QuickStart.built else START_TIMEOUT)
            QuickStart.built = True
            out = run.text()
            self.assertNotEqual(rc, 0, out)
            self.assertRegex(out, r"run: .*127\.0\.0\.1:7379.* in use", out)
            self.assertNotIn("starting a throwaway", out, "a Redis started for nothing")
            left = netns_processes()
            self.assertEqual(left, {}, out)
            self.assertEqual(os.listdir(self.tmpdir), [], out)

    def test_8_no_redis_server(self):
        """redis-server not on PATH (nothing on 6379): a message saying what
        to do, exit non-zero, nothing left."""
        bindir = os.path.join(WORK, "bin-without-redis-server")
        if not os.path.isdir(bindir):
            os.makedirs(bindir)
            for d in os.environ["PATH"].split(":"):
                if not os.path.isdir(d):
                    continue
                for name in os.listdir(d):
                    link = os.path.join(bindir, name)
                    if name != "redis-server" and not os.path.lexists(link):
                        os.symlink(os.path.join(d, name), link)
        r = sh("command -v redis-server", env=dict(os.environ, PATH=bindir))
        self.assertNotEqual(r.returncode, 0, "redis-server still on PATH")
        run = self.run_script([], env={"PATH": bindir})
        rc = run.wait_exit(BUILD_TIMEOUT if not QuickStart.built else START_TIMEOUT)
        QuickStart.built = True
        out = run.text()
        self.assertNotEqual(rc, 0, out)
        self.assertRegex(out, r"run: .*redis-server.*", out)
        self.assertIn("install", out)
        self.assertIn("--memory", out)
        self.assertClean(run)


    def test_9_bad_config(self):
        """A config that does not load: the daemon's FILE:LINE:COL message,
        exit non-zero, no Redis started."""
        d = os.path.join(WORK, "bad")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "bad.yaml"), "w") as f:
            f.write("listen: [127.0.0.1:7379]\npolicies:\n  reply: 5/60 s\n")
        run = self.run_script(["bad.yaml"], cwd=d)
        rc = run.wait_exit(BUILD_TIMEOUT if not QuickStart.built else START_TIMEOUT)
        QuickStart.built = True
        out = run.text()
        self.assertNotEqual(rc, 0, out)
        self.assertRegex(out, r"bad\.yaml:3:\d+: ", out)
        self.assertNotIn("starting a throwaway", out)
        self.assertClean(run)

    def stop_one_process(self, sig, status):
        """scripts/run with a throwaway Redis, then sig to the script's pid
        only (not its process group): it stops the daemon and that Redis,
        removes its files, and exits with status."""
        run = self.run_script([])
        self.wait_ready(run)
        self.assertIn("starting a throwaway redis-server", run.text())
        self.assertNcLine(run)
        self.assertEqual(run.signal_script(sig), status, run.text())
        self.assertIn("stopping the throwaway redis-server", run.text())
        self.assertFalse(answers(6379), "the throwaway Redis still answers")
        self.assertClean(run)
        return run

    def test_10_sigterm_to_script(self):
        """`kill PID` of scripts/run alone (SIGTERM): nothing left, 143."""
        self.stop_one_process(signal.SIGTERM, 143)

    def test_11_sighup_to_script(self):
        """The terminal closing (SIGHUP to scripts/run; SIGHUP is the
        daemon's reload signal): nothing left, 129."""
        run = self.stop_one_process(signal.SIGHUP, 129)
        self.assertNotIn("reload", run.text())

    def test_12_daemon_stops_itself(self):
        """The daemon stopped on its own (SIGTERM to its pid, as an operator
        may): scripts/run exits with its status (0) and stops the Redis."""
        run = self.run_script([])
        self.wait_ready(run)
        daemons = [pid for pid, cmd in netns_processes().items()
                   if cmd.startswith(os.path.join(SRC, "build", "ratelimitd") + " ")]
        self.assertEqual(len(daemons), 1, netns_processes())
        os.kill(daemons[0], signal.SIGTERM)
        self.assertEqual(run.wait_exit(STOP_TIMEOUT), 0, run.text())
        self.assertIn("stopping the throwaway redis-server", run.text())
        self.assertClean(run)

    def test_13_memory_envoy_relative(self):
        """--memory with `envoy: {config: rules}` (relative to the config's
        directory) and a redis: section, run from another directory: the
        copy finds the rules, a gRPC decision (ratelimitctl rls) and a line
        PEEK of the rule's policy name answer."""
        d = os.path.join(WORK, "envoy")
        cwd = os.path.join(WORK, "elsewhere")
        os.makedirs(os.path.join(d, "rules"), exist_ok=True)
        os.makedirs(cwd, exist_ok=True)
        with open(os.path.join(d, "rules", "web.yaml"), "w") as f:
            f.write("domain: web\ndescriptors:\n  - key: user\n"
                    "    rate_limit: {unit: minute, requests_per_unit: 5}\n")
        with open(os.path.join(d, "envoy.yaml"), "w") as f:
            f.write("listen:\n  - 127.0.0.1:7379\n"
                    "  - {address: 127.0.0.1:7380, protocol: grpc}\n"
                    "redis:\n  address: 127.0.0.1:6379\n"
                    "envoy: {config: rules}\n")
        run = self.run_script(["--memory", "../envoy/envoy.yaml"], cwd=cwd)
        self.wait_ready(run)
        self.assertIn("store: memory", run.text())
        ctl = os.path.join(SRC, "build", "ctl", "ratelimitctl")
        r = subprocess.run([ctl, "rls", "--addr", "127.0.0.1:7380", "web", "user=alice"],
                           capture_output=True, text=True, timeout=15,
                           stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r)
        self.assertEqual(r.stdout.splitlines()[0], "OK", r)
        self.assertIn("limit=5/MINUTE remaining=4", r.stdout, r)
        # the rule's policy name, from the (original) config file
        r = subprocess.run([ctl, "-c", os.path.join(d, "envoy.yaml"), "policies"],
                           capture_output=True, text=True, timeout=15,
                           stdin=subprocess.DEVNULL)
        names = re.findall(r"^(web\.user-\S+) ", r.stdout, re.M)
        self.assertEqual(len(names), 1, r)
        r = sh("printf 'PEEK user=alice %s\\n' | nc -q1 127.0.0.1 7379" % names[0])
        self.assertEqual(r.stdout.split()[:3], ["ALLOWED", "5", "4"], r)
        self.assertFalse(answers(6379), "a Redis answers on 6379 with --memory")
        self.assertTrue(run.ctrl_c(), run.text())
        self.assertClean(run)


def kill_all(wait=True):
    """SIGKILL to every other process in the namespace: all of them are this
    test's, whatever a failed case left. Then waits (5 s at most) until they
    are gone, ports closed: else the next case finds a killed Redis still
    on 6379 and fails too, hiding whether it would have passed. Not after
    meson's SIGTERM (wait=False): its SIGKILL follows 0.5 s later."""
    for pid in netns_processes():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end = time.monotonic() + 5
    while wait and netns_processes() and time.monotonic() < end:
        time.sleep(0.05)


def on_alarm(signum, frame):
    """The whole run's bound (MESON_TIMEOUT - TOTAL_MARGIN) passed: say where
    it was, then end as on meson's SIGTERM, before meson's own timeout."""
    where = CURRENT.id() if CURRENT else "before the first case"
    log = CURRENT.script_run.text() if CURRENT and CURRENT.script_run else ""
    sys.stderr.write("\nquickstart_check: over its total of %d s (meson's timeout %d s less %d)"
                     " in %s; built: %s\n%s\n" % (MESON_TIMEOUT - TOTAL_MARGIN, MESON_TIMEOUT,
                                                   TOTAL_MARGIN, where, QuickStart.built, log))
    sys.stderr.flush()
    on_sigterm(signum, frame)


def on_sigterm(signum, frame):
    # meson's timeout: SIGTERM to this process group, SIGKILL 0.5 s later.
    # scripts/run, its daemon and its Redis are in sessions of their own:
    # kill them first.
    kill_all(wait=False)
    if WORK:
        shutil.rmtree(WORK, ignore_errors=True)
    os._exit(1)


def main():
    global ARGS, SRC, WORK, README, MESON_TIMEOUT, BUILD_TIMEOUT
    ap = argparse.ArgumentParser()
    ap.add_argument("srcdir")
    ap.add_argument("--script", help="use this file as scripts/run in the copy")
    ap.add_argument("--keep", action="store_true", help="keep the copy and the logs")
    ap.add_argument("--meson-timeout", type=int, default=MESON_TIMEOUT,
                    help="meson's timeout for this test, in seconds")
    ARGS, rest = ap.parse_known_args()
    MESON_TIMEOUT = ARGS.meson_timeout
    BUILD_TIMEOUT = MESON_TIMEOUT // 2
    if BUILD_TIMEOUT + START_TIMEOUT + STOP_TIMEOUT >= MESON_TIMEOUT - TOTAL_MARGIN:
        sys.exit("quickstart_check: --meson-timeout %d leaves no time for a case after the"
                 " build (%d s)" % (MESON_TIMEOUT, BUILD_TIMEOUT))
    for tool in ("git", "redis-server", "redis-cli", "nc", "curl"):
        if not shutil.which(tool):
            sys.exit("quickstart_check: %s not found (scripts/lib.sh lists the packages)" % tool)
    enter_private_network()
    # scripts/run gets what a terminal's shell gives it: SIGHUP not ignored.
    # Under nohup (or anything that ignores it) every child inherits the
    # ignore, and bash cannot trap a signal ignored when it started, so the
    # closing terminal of test_11 would never reach the script.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(MESON_TIMEOUT - TOTAL_MARGIN)  # from here: copy, build, every case
    WORK = tempfile.mkdtemp(prefix="rl-quickstart-")
    try:
        SRC = os.path.join(WORK, "ratelimitd")
        copy_tree(os.path.abspath(ARGS.srcdir), SRC)
        if ARGS.script:
            shutil.copy(ARGS.script, os.path.join(SRC, "scripts", "run"))
            os.chmod(os.path.join(SRC, "scripts", "run"), 0o755)
        with open(os.path.join(SRC, "README.md")) as f:
            README = f.read()
        prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        ok = prog.result.wasSuccessful() and not prog.result.skipped
    finally:
        kill_all()
        if ARGS.keep:
            print("quickstart_check: kept %s" % WORK)
        else:
            shutil.rmtree(WORK, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
