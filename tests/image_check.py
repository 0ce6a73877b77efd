"""image_check.py SRCDIR [--cache DIR] [--meson-timeout S] - the container
image of scripts/image, built from SRCDIR's HEAD, loaded and run by podman.

Real parts throughout: scripts/image (git archive, meson, the Debian
packages), podman with runc, a redis-server, the daemon in the container,
plain sockets for the line protocol and HTTP. Checks:
- two builds of the commit give the same archive, byte for byte (the second
  one always from nothing, in a workdir of its own; the first in --cache DIR
  when given, which the suite keeps in its build dir so that a second run
  builds nothing), and podman reports the digest scripts/image printed;
- the labels (version, revision = HEAD, source, licenses), the user
  65532:65532, and no shell (/bin/sh is not there);
- the image as it is, --read-only with nothing mounted: store: memory
  answers ALLOW over the line protocol and HTTP at once, /livez, as uid and
  gid 65532 (the image's own user: no --user given);
- with --user 65532 --read-only and a configuration directory mounted at
  /etc/ratelimitd, against the redis-server on the loopback (--network
  host): ALLOW over both protocols, counted in that Redis; `podman kill -s
  HUP` after the mounted file changed applies the new limit; requests
  waiting on Redis (DEBUG SLEEP) when `podman kill -s TERM` comes get their
  answers and the daemon exits 0 within podman's grace period (10 s).

podman cannot run containers everywhere (this test's host needs runc: crun
fails on its cgroups): when it cannot, the test FAILS and says why; it is
never skipped. Everything runs in a private network namespace (the ports
are free whatever the host runs) with podman's storage in a temporary
directory (vfs: no overlay mounts); containers, Redis and the directory are
removed at the end, on failure too. Every wait is bounded, and the whole
run ends 30 s before --meson-timeout with this test's own report (SIGTERM
and SIGINT clean up too). About a minute on 2 cores, most of it the two
builds; 30 s when --cache holds the first one already.
scripts/image-check runs the same with both builds fresh (no --cache)."""

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ARGS = None
TMP = None
IMAGE = None     # the loaded image's name
BUILDS = []      # (archive path, digest) of the two builds
REDIS = None
BUILDING = None  # scripts/image while it runs
CURRENT = None   # the step running, for the report of an overall timeout
GRACE = 10       # podman stop's default grace period, in seconds
PODMAN_TIMEOUT = 60
UID = 65532


def say(msg):
    print("image_check: %s" % msg, flush=True)


def podman_global():
    return ["podman", "--root", os.path.join(TMP, "root"), "--runroot",
            os.path.join(TMP, "runroot"), "--storage-driver", "vfs",
            "--events-backend", "file", "--cgroup-manager", "cgroupfs"]


def podman(*args, timeout=PODMAN_TIMEOUT, check=True):
    r = subprocess.run(podman_global() + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("podman %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                          (r.stderr or r.stdout).strip()))
    return r


def ulimits():
    """nofile and nproc within this host's hard limits (podman passes them
    on; runc fails on ones above them)."""
    out = []
    for name, res, want in (("nofile", resource.RLIMIT_NOFILE, 16384),
                            ("nproc", resource.RLIMIT_NPROC, 4096)):
        hard = resource.getrlimit(res)[1]
        n = want if hard == resource.RLIM_INFINITY else min(want, hard)
        out += ["--ulimit", "%s=%d:%d" % (name, n, n)]
    return out


def run_container(name, *extra):
    """Starts the image detached, read-only, on the host's (this namespace's)
    network; returns the container's name."""
    podman("run", "-d", "--name", name, "--runtime", "runc", "--read-only",
           "--network", "host", "--log-driver", "k8s-file", *ulimits(), *extra, IMAGE)
    return name


def logs(name):
    r = podman("logs", name, check=False)
    return r.stdout + r.stderr


def inspect(name, fmt):
    return podman("inspect", "--format", fmt, name).stdout.strip()


def wait_until(pred, timeout, what):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            r = pred()
            if r:
                return r
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise AssertionError("timed out after %.0f s waiting for %s (%s)" % (timeout, what, last))


def line_request(port, *lines, timeout=5, host="127.0.0.1"):
    """Sends LINES on one connection, returns one reply line per line."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall("".join(l + "\n" for l in lines).encode())
        f = s.makefile("rb")
        return [f.readline().decode().rstrip("\n") for _ in lines]


def http_get(port, path, timeout=5, host="127.0.0.1"):
    """(status, body) of GET PATH, over a plain socket (Connection: close)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def ids_of(name):
    """The Uid: and Gid: lines of the container's main process, as the host
    sees it."""
    pid = int(inspect(name, "{{.State.Pid}}"))
    with open("/proc/%d/status" % pid) as f:
        st = dict(l.split(":", 1) for l in f if ":" in l)
    return [int(x) for x in st["Uid"].split()], [int(x) for x in st["Gid"].split()]


def redis_cli(*args, timeout=10):
    return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", "6379", *args],
                          capture_output=True, text=True, timeout=timeout).stdout.strip()


def write_config(path, reply_limit):
    """A configuration for the Redis on the loopback, written as a new file
    renamed over the old (as a Kubernetes ConfigMap changes its files): the
    container sees it because its directory is mounted, not the file."""
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write("listen:\n  - 0.0.0.0:7379\n  - {address: 0.0.0.0:8080, protocol: http}\n"
                "metrics:\n  listen: 0.0.0.0:9464\n"
                "redis:\n  address: 127.0.0.1:6379\n  timeout: 3s\n"
                "prefix: \"img:\"\n"
                "policies:\n  reply: %d/60s\n"
                # a calendar quota: the daemon refuses a zone tzdata lacks
                "  monthly: {algorithm: fixed_window, limits: 1000/month,"
                " timezone: Europe/Berlin}\n" % reply_limit)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def build(workdir, outdir):
    """scripts/image; returns (archive, digest) from its last line."""
    global BUILDING
    t = time.monotonic()
    # in a session of its own: cleanup() kills the whole build if the test
    # is stopped during it
    BUILDING = subprocess.Popen(["bash", os.path.join(ARGS.srcdir, "scripts", "image"),
                                 "--workdir", workdir, "--outdir", outdir],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err = BUILDING.communicate(timeout=max(60, ARGS.meson_timeout // 3))
    rc, BUILDING = BUILDING.returncode, None
    if rc != 0:
        raise AssertionError("scripts/image failed (exit %d):\n%s" % (rc, err[-4000:]))
    archive = out.strip().splitlines()[-1]
    if not os.path.isfile(archive):
        raise AssertionError("scripts/image's last line is no file: %r" % archive)
    with open(re.sub(r"\.oci\.tar$", ".digest", archive)) as f:
        digest = f.read().strip()
    say("built %s in %.1f s (%d bytes, %s)" % (archive, time.monotonic() - t,
                                                os.path.getsize(archive), digest))
    return archive, digest


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


class Image(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global CURRENT, IMAGE, REDIS
        CURRENT = "building the image twice"
        first = ARGS.cache or os.path.join(TMP, "work1")
        BUILDS.append(build(first, os.path.join(TMP, "out1")))
        BUILDS.append(build(os.path.join(TMP, "work2"), os.path.join(TMP, "out2")))

        CURRENT = "podman load"
        if shutil.which("podman") is None:
            raise AssertionError("FAILED, NOT SKIPPED: podman is not installed "
                                 "(scripts/lib.sh's RL_TEST_PACKAGES has it)")
        out = podman("load", "-i", BUILDS[0][0]).stdout
        m = re.search(r"Loaded image(?:\(s\))?: (\S+)", out)
        if not m:
            raise AssertionError("podman load said: %s" % out)
        IMAGE = m.group(1)
        CURRENT = "podman run of a container: can podman run containers here?"
        r = podman("run", "--rm", "--runtime", "runc", "--read-only", "--network", "none",
                   *ulimits(), IMAGE, "-t", check=False)
        if r.returncode != 0 or "configuration OK" not in r.stdout + r.stderr:
            raise AssertionError("FAILED, NOT SKIPPED: podman cannot run the image here "
                                 "(runc, cgroups, ulimits?): exit %d: %s"
                                 % (r.returncode, (r.stderr + r.stdout).strip()))

        CURRENT = "starting redis-server"
        REDIS = subprocess.Popen(["redis-server", "--port", "6379", "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--daemonize", "no",
                                  "--dir", TMP, "--enable-debug-command", "yes",
                                  "--logfile", os.path.join(TMP, "redis.log")],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        wait_until(lambda: redis_cli("PING") == "PONG", 10, "redis-server")

    def setUp(self):
        global CURRENT
        CURRENT = self.id()

    def test_builds_are_identical(self):
        (a1, d1), (a2, d2) = BUILDS
        self.assertEqual(sha256(a1), sha256(a2), "two builds of one commit differ")
        self.assertEqual(d1, d2)
        self.assertTrue(re.fullmatch(r"sha256:[0-9a-f]{64}", d1), d1)
        self.assertEqual(inspect(IMAGE, "{{.Digest}}"), d1, "podman's digest is not the printed one")

    def test_labels_user_no_shell(self):
        labels = json.loads(inspect(IMAGE, "{{json .Config.Labels}}"))
        head = subprocess.run(["git", "-C", ARGS.srcdir, "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(ARGS.srcdir, "meson.build")) as f:
            version = re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)
        p = "org.opencontainers.image."
        self.assertEqual(labels[p + "revision"], head)
        self.assertEqual(labels[p + "version"], version)
        self.assertEqual(labels[p + "licenses"], "MIT")
        self.assertTrue(labels[p + "source"])
        self.assertEqual(inspect(IMAGE, "{{.Config.User}}"), "%d:%d" % (UID, UID))
        r = podman("run", "--rm", "--runtime", "runc", "--network", "none", *ulimits(),
                   "--entrypoint", "/bin/sh", IMAGE, "-c", "true", check=False)
        self.assertNotEqual(r.returncode, 0, "the image has a shell")
        self.assertIn("no such file", (r.stderr + r.stdout).lower())

    def test_contents(self):
        """Nothing but the programs, their libraries, the time zones, the
        certificates and the configuration: the only executables are the
        two programs, libc and the loader; no shell, dpkg or apt."""
        top = podman("image", "mount", IMAGE).stdout.strip()
        try:
            found = set()
            for d, _, files in os.walk(top):
                for f in files:
                    path = os.path.join(d, f)
                    if not os.path.islink(path) and os.access(path, os.X_OK):
                        found.add(os.path.relpath(path, top))
            lib = "usr/lib/x86_64-linux-gnu/"
            self.assertEqual(found, {"usr/sbin/ratelimitd", "usr/bin/ratelimitctl",
                                     lib + "libc.so.6", lib + "ld-linux-x86-64.so.2"})
            # /bin is a link to usr/bin (as in Debian 12)
            for gone in ("sh", "bash", "dash", "dpkg", "apt"):
                self.assertFalse(os.path.lexists(os.path.join(top, "usr/bin", gone)), gone)
            self.assertEqual(os.readlink(os.path.join(top, "bin")), "usr/bin")
            with open(os.path.join(top, "etc/ssl/certs/ca-certificates.crt")) as f:
                n = f.read().count("-----BEGIN CERTIFICATE-----")
            crts = [l for l in subprocess.run(["dpkg", "-L", "ca-certificates"], capture_output=True,
                                              text=True, check=True).stdout.split()
                    if l.startswith("/usr/share/ca-certificates/") and l.endswith(".crt")]
            self.assertEqual(n, len(crts))
            self.assertGreater(n, 50)
            self.assertEqual(os.readlink(os.path.join(top, "usr/lib/ssl/cert.pem")),
                             "/etc/ssl/certs/ca-certificates.crt")
            self.assertTrue(os.path.isfile(os.path.join(top, "usr/share/zoneinfo/Europe/Berlin")))
            with open(os.path.join(top, "etc/passwd")) as f:
                self.assertIn("ratelimitd:x:%d:%d:" % (UID, UID), f.read())
            shipped = subprocess.run(["git", "-C", ARGS.srcdir, "show", "HEAD:conf/image.yaml"],
                                     capture_output=True, text=True, check=True).stdout
            with open(os.path.join(top, "etc/ratelimitd/ratelimitd.yaml")) as f:
                self.assertEqual(f.read(), shipped)
        finally:
            podman("image", "unmount", IMAGE, check=False)

    def test_default_config_memory_answers_at_once(self):
        name = run_container("rl-default")
        t = time.monotonic()
        try:
            r = wait_until(lambda: line_request(7379, "ALLOW img reply")[0], 10,
                           "the image's line protocol")
            say("the image as it is answered %.2f s after podman run" % (time.monotonic() - t))
            self.assertEqual(r, "ALLOWED 5 4 0 60000")
            status, body = http_get(8080, "/v1/allow?user=img&action=reply")
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["remaining"], 3)
            self.assertEqual(http_get(9464, "/livez")[0], 200)
            # every address, not only 127.0.0.1 (in a pod, traffic comes to
            # the pod's address): 127.0.0.2 is this namespace's loopback
            # too, but a socket bound to 127.0.0.1 does not answer it
            r = line_request(7379, "ALLOW img reply", host="127.0.0.2")[0]
            self.assertTrue(r.startswith("ALLOWED 5 2 0 "), r)
            self.assertEqual(http_get(8080, "/v1/allow?user=img&action=reply", host="127.0.0.2")[0], 200)
            self.assertEqual(http_get(9464, "/readyz", host="127.0.0.2")[0], 200)
            uids, gids = ids_of(name)
            self.assertEqual(uids, [UID] * 4)
            self.assertEqual(gids, [UID] * 4)
            self.assertEqual(inspect(name, "{{.HostConfig.ReadonlyRootfs}}"), "true")
            self.assertIn("memory", logs(name))
        finally:
            podman("rm", "-f", "-t", "0", name, check=False)

    def test_redis_config_reload_and_drain(self):
        conf = os.path.join(TMP, "conf")
        os.makedirs(conf, exist_ok=True)
        os.chmod(conf, 0o755)
        path = os.path.join(conf, "ratelimitd.yaml")
        write_config(path, 5)
        redis_cli("FLUSHALL")
        name = run_container("rl-redis", "--user", "%d:%d" % (UID, UID),
                             "-v", "%s:/etc/ratelimitd:ro" % conf)
        try:
            r = wait_until(lambda: line_request(7379, "ALLOW alice reply")[0], 10,
                           "the line protocol with the mounted config")
            self.assertEqual(r, "ALLOWED 5 4 0 60000", logs(name))
            status, body = http_get(8080, "/v1/allow?user=alice&action=reply")
            self.assertEqual(status, 200, body)
            self.assertEqual(json.loads(body)["remaining"], 3)
            self.assertTrue(redis_cli("KEYS", "img:*"), "nothing counted in the host's Redis")
            self.assertTrue(line_request(7379, "ALLOW alice monthly")[0].startswith(
                "ALLOWED 1000 999 0 "))
            self.assertEqual(ids_of(name)[0], [UID] * 4)

            # SIGHUP after the mounted file changed: the new limit applies
            write_config(path, 7)
            podman("kill", "-s", "HUP", name)
            wait_until(lambda: line_request(7379, "ALLOW bob reply")[0].startswith("ALLOWED 7 "),
                       10, "the reloaded limit (7): %s" % logs(name))

            # SIGTERM while requests wait on Redis: each gets its answer
            sleeper = threading.Thread(target=redis_cli, args=("DEBUG", "SLEEP", "1"))
            socks = [socket.create_connection(("127.0.0.1", 7379), timeout=10) for _ in range(3)]
            try:
                sleeper.start()
                time.sleep(0.2)
                for i, s in enumerate(socks):
                    s.sendall(b"ALLOW drain%d reply\n" % i)
                time.sleep(0.2)
                t = time.monotonic()
                podman("kill", "-s", "TERM", name)
                for s in socks:
                    r = s.makefile("rb").readline().decode().strip()
                    self.assertTrue(r.startswith("ALLOWED 7 6 0 "), "%r: %s" % (r, logs(name)))
            finally:
                for s in socks:
                    s.close()
                sleeper.join(10)
            rc = podman("wait", name, timeout=GRACE).stdout.strip()
            took = time.monotonic() - t
            say("drained and exited %s %.2f s after SIGTERM" % (rc, took))
            self.assertEqual(rc, "0", logs(name))
            self.assertLess(took, GRACE)
            self.assertIn("SIGTERM", logs(name))
        finally:
            podman("rm", "-f", "-t", "0", name, check=False)


def cleanup():
    global REDIS
    if TMP is None:
        return
    if BUILDING is not None and BUILDING.poll() is None:
        os.killpg(BUILDING.pid, signal.SIGKILL)
        BUILDING.wait(10)
    try:
        podman("rm", "-a", "-f", "-t", "0", check=False, timeout=60)
        podman("rmi", "-a", "-f", check=False, timeout=60)
    except Exception as e:  # noqa: BLE001 - report, then remove what can be
        say("cleanup: podman: %s" % e)
    if REDIS is not None and REDIS.poll() is None:
        REDIS.kill()
        REDIS.wait(10)
    REDIS = None
    shutil.rmtree(TMP, ignore_errors=True)
    if os.path.exists(TMP):
        say("cleanup: could not remove %s" % TMP)


def on_alarm(signum, frame):
    if signum == signal.SIGALRM:
        say("FAILED: out of time (30 s before meson's %d s) in: %s" % (ARGS.meson_timeout, CURRENT))
    else:
        say("FAILED: stopped by signal %d in: %s" % (signum, CURRENT))
    cleanup()
    os._exit(1)


def main():
    global ARGS, TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("srcdir")
    ap.add_argument("--cache", help="the first build's workdir, kept (default: a temporary one)")
    ap.add_argument("--meson-timeout", type=int, default=600)
    ARGS, rest = ap.parse_known_args()
    ARGS.srcdir = os.path.abspath(ARGS.srcdir)
    if ARGS.cache:
        ARGS.cache = os.path.abspath(ARGS.cache)
    # a private network namespace: 6379, 7379, 8080 and 9464 are free in it,
    # and --network host gives the container its loopback, nothing else
    if os.environ.get("RL_IMAGE_NETNS") != "1":
        os.environ["RL_IMAGE_NETNS"] = "1"
        os.execvp("unshare", ["unshare", "--net", "--", sys.executable] + sys.argv)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)
    TMP = tempfile.mkdtemp(prefix="rl-image.")
    os.chmod(TMP, 0o755)
    # an overall bound, and cleaning up when meson (or Ctrl-C) stops the run
    for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_alarm)
    signal.alarm(max(60, ARGS.meson_timeout - 30))
    t = time.monotonic()
    try:
        prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        signal.alarm(0)
        cleanup()
    say("took %.0f s" % (time.monotonic() - t))
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
