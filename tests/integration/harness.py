"""harness.py - start a real redis-server and the real ratelimitd on free
loopback ports in a temporary directory, and talk to both.

Everything here is bounded in time and every process started is killed in
tearDown (and, as a last resort, when the test process dies: the children
get PR_SET_PDEATHSIG). Only 127.0.0.1 and unix sockets are used.

Environment:
  RATELIMITD   path of the daemon binary (default: $RL_SRCDIR/build/ratelimitd)
  RL_SRCDIR    repository root (default: two levels above this file)
  RL_SLOW      multiplier for time margins (e.g. 3 under AddressSanitizer)
  RL_REDIS_SERVER, RL_REDIS_CLI, RL_REDIS_SENTINEL
               the store's programs (default: redis-server, redis-cli, and
               redis-server --sentinel); e.g. Valkey's
  RL_REDIS_NAME  the server_name every server started must report (valkey)
"""

import atexit
import ctypes
import importlib.util
import http.client
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest

import resp
from resp import RespError

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("RL_SRCDIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
DAEMON = os.environ.get("RATELIMITD") or os.path.join(SRCDIR, "build", "ratelimitd")
# The build's own files: the decision script as Redis gets it (SCRIPT, its
# argument layout's names replaced by their values) and that layout's
# constants (LAYOUT: OP_HOLD, ALGO_FIXED, HEAD_ARGC...), both generated from
# src/store/script_layout.txt by scripts/script_layout.py.
BUILDDIR = os.environ.get("RL_BUILDDIR") or os.path.dirname(DAEMON)
SCRIPT = os.path.join(BUILDDIR, "ratelimit.lua")
_spec = importlib.util.spec_from_file_location("script_layout",
                                               os.path.join(BUILDDIR, "script_layout.py"))
LAYOUT = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(LAYOUT)
# The store's programs: Debian's Redis 7 unless RL_REDIS_SERVER, RL_REDIS_CLI
# and RL_REDIS_SENTINEL name others (it-valkey and scripts/valkey-check name
# valkey-server, valkey-cli and valkey-sentinel). A sentinel is started as
# `REDIS_SENTINEL CONF --sentinel`, which redis-server and valkey-sentinel
# both take.
REDIS_SERVER = (os.environ.get("RL_REDIS_SERVER") or shutil.which("redis-server")
                or "/usr/bin/redis-server")
REDIS_CLI = os.environ.get("RL_REDIS_CLI") or shutil.which("redis-cli") or "/usr/bin/redis-cli"
REDIS_SENTINEL = os.environ.get("RL_REDIS_SENTINEL") or REDIS_SERVER
# With RL_REDIS_NAME set (valkey), every server and sentinel started here must
# say it is that server (INFO server's server_name; Redis 7 has none: "redis"),
# so a run meant for another server cannot pass on Redis by mistake.
# SERVERS_SEEN counts the ones checked by server_mode (standalone, sentinel,
# cluster).
REDIS_NAME = os.environ.get("RL_REDIS_NAME")
SERVERS_SEEN = {}
SLOW = float(os.environ.get("RL_SLOW", "1"))

# Margin allowed on top of redis.timeout for an answer while the store fails.
STORE_MARGIN = 0.5 * SLOW
STARTUP_TIMEOUT = 10.0
READ_TIMEOUT = 5.0 * SLOW

FALLBACK_ALLOW = re.compile(r"^ALLOWED (\d+) -1 0 -1$")
FALLBACK_DENY = re.compile(r"^DENIED (\d+) -1 1000 -1$")
DECISION = re.compile(r"^(ALLOWED|DENIED) (-?\d+) (-?\d+) (-?\d+) (-?\d+)$")
LOG_LINE = re.compile(r"^(debug|info|warn|error): \S")
SANITIZER_REPORT = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: |"
                              r"WARNING: ThreadSanitizer")

_live = []  # every Popen started, for the atexit sweep


def _pdeathsig():
    """preexec_fn: the child gets SIGKILL if the test process dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _kill(proc):
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGCONT)  # a stopped process cannot die of SIGTERM
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


@atexit.register
def _sweep():
    for p in _live:
        _kill(p)


def spawn(argv, **kw):
    kw.setdefault("preexec_fn", _pdeathsig)
    p = subprocess.Popen(argv, **kw)
    _live.append(p)
    return p


_used_ports = set()
_ports_lock = threading.Lock()


def free_port():
    """A TCP port on 127.0.0.1 nobody listens on right now, and not handed
    out before by this process (two servers started in a row must not get
    the same one before the first has bound it)."""
    with _ports_lock:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                p = s.getsockname()[1]
            if p not in _used_ports:
                _used_ports.add(p)
                return p


class Fatal(AssertionError):
    """Raised inside a polled predicate to stop waiting at once."""


def wait_until(pred, timeout, interval=0.01, what="condition"):
    """Polls pred() until it returns a true value (returned) or timeout (raises).
    Exceptions from pred count as "not yet", except Fatal."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Fatal:
            raise
        except Exception as e:  # noqa: BLE001 - polled, reported on timeout
            last_exc = e
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s (last error: %r)"
                                 % (timeout, what, last_exc))
        time.sleep(interval)


# ---------------------------------------------------------------- /proc figures

def proc_fd_count(pid):
    """Open file descriptors of a process."""
    return len(os.listdir("/proc/%d/fd" % pid))


def proc_fd_list(pid):
    """What each open file descriptor of a process points at, for messages."""
    out = []
    for fd in sorted(os.listdir("/proc/%d/fd" % pid), key=int):
        try:
            out.append("%s->%s" % (fd, os.readlink("/proc/%d/fd/%s" % (pid, fd))))
        except OSError:
            pass
    return " ".join(out)


def proc_rss_kb(pid):
    """Resident set size (VmRSS) of a process, in KiB."""
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def proc_cpu_seconds(pid):
    """User + system CPU time a process has used, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_asan = None


def under_asan():
    """True when the daemon binary is built with AddressSanitizer."""
    global _asan
    if _asan is None:
        try:
            with open(DAEMON, "rb") as f:
                _asan = b"__asan_init" in f.read()
        except OSError:
            _asan = False
    return _asan


def rss_env():
    """Environment for a daemon whose RSS a test measures: under ASan, no
    quarantine of freed memory (it would grow RSS by design, up to 256 MB)."""
    if not under_asan():
        return None
    return {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") +
            ":quarantine_size_mb=0:allocator_release_to_os_interval_ms=0"}


def rss_slack_kb():
    """RSS noise allowed on top of a test's bound: ASan's allocator keeps
    per-size-class caches and shadow pages (its leaks are LSan's business)."""
    return 2048 if under_asan() else 0


# ---------------------------------------------------------------- RESP client

class Resp:
    """A minimal blocking RESP2 client for inspecting Redis state."""

    def __init__(self, host="127.0.0.1", port=6379, timeout=5.0, unix=None, tls=None):
        if unix:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix)
        else:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        if tls is not None:  # an ssl.SSLContext
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def read_reply(self):
        """The next reply; an error reply is returned as a RespError."""
        while True:
            r = resp.parse(self.buf)
            if r is not None:
                self.buf = self.buf[r[1]:]
                return r[0]
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("redis closed the connection")
            self.buf += d

    def call(self, *args):
        self.sock.sendall(resp.encode(*args))
        r = self.read_reply()
        if isinstance(r, RespError):
            raise r
        return r


# ---------------------------------------------------------------- processes

def info_counts(server, section, prefix, field):
    """{name: int} from the lines "<prefix><name>:<field>=<n>,..." of INFO
    <section> of a RedisServer (or anything with call())."""
    info = server.call("INFO", section).decode()
    out = {}
    for ln in info.splitlines():
        m = re.match(r"^%s([^:]+):%s=(\d+)" % (re.escape(prefix), re.escape(field)), ln)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


METRIC_SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (\S+)$')


def http_get(port, path="/metrics", method="GET", timeout=5.0):
    """(status, Content-Type, body text) of one HTTP request to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), r.read().decode()
    finally:
        conn.close()


def scrape_metrics(port):
    """{'name{labels}': value} of the daemon's /metrics; fails unless every
    line is a HELP/TYPE comment or a sample."""
    status, ctype, body = http_get(port)
    assert status == 200, (status, body)
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    out = {}
    for ln in body.splitlines():
        if ln.startswith("# HELP ") or ln.startswith("# TYPE "):
            continue
        m = METRIC_SAMPLE.match(ln)
        assert m, "not a Prometheus sample line: %r" % ln
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def check_server_name(server):
    """Fails (Fatal) when RL_REDIS_NAME is set and `server`, just started
    (a RedisServer or a topology.Sentinel), is another server; counts it in
    SERVERS_SEEN."""
    if not REDIS_NAME:
        return
    text = server.call("INFO", "server")
    info = dict(ln.split(":", 1) for ln in text.decode(errors="replace").splitlines()
                if ":" in ln and not ln.startswith("#"))
    name = info.get("server_name", "redis")
    version = info.get("%s_version" % name, info.get("redis_version", "?"))
    if name != REDIS_NAME:
        raise Fatal("the server on port %d is %s %s, not %s (RL_REDIS_NAME)"
                    % (server.port, name, version, REDIS_NAME))
    mode = info.get("server_mode") or info.get("redis_mode", "?")
    SERVERS_SEEN[mode] = SERVERS_SEEN.get(mode, 0) + 1


def commandstats(server):
    """{"evalsha": calls, ...} from INFO commandstats."""
    return info_counts(server, "commandstats", "cmdstat_", "calls")


class RedisTls:
    """How a redis-server speaks TLS only (port 0, tls-port): its certificate
    (the Pki's server one unless given), the CA it trusts for clients, and
    whether it asks clients for a certificate (tls-auth-clients)."""

    def __init__(self, pki, auth_clients=False, cert=None, key=None, cluster=False):
        self.pki = pki
        self.auth_clients = auth_clients
        self.cert = cert or pki.server_cert
        self.key = key or pki.server_key
        self.cluster = cluster

    def server_args(self, port):
        a = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", self.cert,
             "--tls-key-file", self.key, "--tls-ca-cert-file", self.pki.ca,
             "--tls-auth-clients", "yes" if self.auth_clients else "no",
             "--tls-replication", "yes"]
        if self.cluster:
            a += ["--tls-cluster", "yes"]
        return a

    def context(self):
        """The tests' own client context, with the client certificate. It
        does not verify the server: a test may give it a certificate made
        to be refused (expired, another name)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(self.pki.client_cert, self.pki.client_key)
        return ctx

    def cli_args(self):
        return ["--tls", "--cacert", self.pki.ca, "--cert", self.pki.client_cert,
                "--key", self.pki.client_key]


class RedisServer:
    def __init__(self, tmpdir, port=None, password=None, unixsocket=False, extra=(), tls=None):
        self.tmpdir = tmpdir
        self.tls = tls
        self.port = port or free_port()
        self.password = password
        self.unix = os.path.join(tmpdir, "redis-%d.sock" % self.port) if unixsocket else None
        self.extra = list(extra)
        self.proc = None
        self.log_path = os.path.join(tmpdir, "redis-%d.log" % self.port)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self, timeout=STARTUP_TIMEOUT):
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", self.tmpdir, "--enable-debug-command", "yes",
                "--logfile", ""]
        if self.password:
            argv += ["--requirepass", self.password]
        if self.unix:
            argv += ["--unixsocket", self.unix, "--unixsocketperm", "700"]
        if self.tls:
            argv += self.tls.server_args(self.port)
        argv += self.extra
        self.logf = open(self.log_path, "ab")
        self.proc = spawn(argv, stdout=self.logf, stderr=subprocess.STDOUT,
                          stdin=subprocess.DEVNULL, cwd=self.tmpdir)

        def ready():
            if self.proc.poll() is not None:
                raise Fatal("redis-server exited: %s" % self.read_log())
            with self.resp(timeout=1) as r:
                return r.call("PING") == "PONG"
        wait_until(ready, timeout, what="redis-server PING on port %d" % self.port)
        check_server_name(self)
        return self

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def resp(self, timeout=5.0):
        r = Resp(port=self.port, timeout=timeout,
                 tls=self.tls.context() if self.tls else None)
        if self.password:
            r.call("AUTH", self.password)
        return r

    def call(self, *args):
        """One command on a fresh connection; returns the decoded RESP reply."""
        with self.resp() as r:
            return r.call(*args)

    def links(self):
        """Connections Redis lists, less the one asking (the daemon's,
        when a test has none of its own open)."""
        listing = self.call("CLIENT", "LIST")
        if isinstance(listing, bytes):
            listing = listing.decode()
        return sum(1 for ln in listing.splitlines() if ln and "cmd=client" not in ln)

    def keys(self, pattern="*", db=0):
        with self.resp() as r:
            if db:
                r.call("SELECT", db)
            return sorted(r.call("KEYS", pattern))

    def cli(self, *args, timeout=10):
        """Runs redis-cli against this server; returns stdout (str)."""
        argv = [REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port)]
        if self.tls:
            argv += self.tls.cli_args()
        if self.password:
            argv += ["--no-auth-warning", "-a", self.password]
        out = subprocess.run(argv + list(args), capture_output=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
        return out.stdout.decode(errors="replace")

    def stop(self):
        """Kills redis-server (SIGKILL: no shutdown courtesy, like a crash)."""
        _kill(self.proc)
        if getattr(self, "logf", None):
            self.logf.close()
            self.logf = None

    def sigstop(self):
        self.proc.send_signal(signal.SIGSTOP)

    def debug_sleep(self, seconds, settle=0.1):
        """DEBUG SLEEP on a connection of its own, in a thread, so Redis is
        frozen for `seconds` from about `settle` s after this returns (Redis
        still accepts connections meanwhile). Join the returned thread; its
        .reply is then Redis's answer, "OK"."""
        def run():
            with self.resp(timeout=seconds + 10) as r:
                th.reply = r.call("DEBUG", "SLEEP", str(seconds))
        th = threading.Thread(target=run, daemon=True)
        th.reply = None
        th.start()
        if settle:
            time.sleep(settle)
        return th

    def sigcont(self):
        self.proc.send_signal(signal.SIGCONT)


def yaml_value(v, indent):
    """Emits v as YAML. Strings are emitted raw (callers quote when needed),
    dicts as block mappings, lists as block sequences."""
    pad = "  " * indent
    if isinstance(v, dict):
        lines = []
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                lines.append("%s%s:" % (pad, k))
                lines.append(yaml_value(x, indent + 1))
            else:
                lines.append("%s%s: %s" % (pad, k, _scalar(x)))
        return "\n".join(lines)
    if isinstance(v, list):
        return "\n".join("%s- %s" % (pad, _scalar(x)) for x in v)
    return pad + _scalar(v)


def _scalar(x):
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (dict, list)):
        return "{}" if isinstance(x, dict) else "[]"
    return str(x)


def make_config(listen, redis, policies, admin=True, **top):
    """YAML text for the daemon. listen: list of "host:port" / "unix:/p";
    redis: dict of redis.* keys; policies: name -> raw YAML value text;
    admin: listeners get admin: true (RESET allowed), as most tests use RESET;
    top: other top-level keys (raw YAML values)."""
    if admin:
        listen = ['{address: %s, admin: true}' % (a if a.startswith('"') else '"%s"' % a)
                  for a in listen]
    doc = {"listen": listen, "redis": redis}
    doc.update(top)
    doc["policies"] = policies
    return yaml_value(doc, 0) + "\n"


class Daemon:
    def __init__(self, tmpdir, config_text, name="rl", port=None, listen_extra=()):
        self.tmpdir = tmpdir
        self.name = name
        self.port = port
        self.config_path = os.path.join(tmpdir, name + ".yaml")
        self.log_path = os.path.join(tmpdir, name + ".stderr")
        self.out_path = os.path.join(tmpdir, name + ".stdout")
        self.proc = None
        self.write_config(config_text)

    def write_config(self, text):
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_path)
        self.config_text = text

    def start(self, timeout=STARTUP_TIMEOUT, wait=True, env=None, nofile=None, args=()):
        """nofile: (soft, hard) RLIMIT_NOFILE for the daemon (it raises its
        soft limit to the hard one by itself); args: more command-line
        arguments."""
        self.errf = open(self.log_path, "ab")
        self.outf = open(self.out_path, "ab")
        full_env = dict(os.environ)
        full_env.pop("NOTIFY_SOCKET", None)
        full_env.update(env or {})
        kw = {}
        if nofile is not None:
            def preexec(lim=tuple(nofile)):
                import resource
                resource.setrlimit(resource.RLIMIT_NOFILE, lim)
                _pdeathsig()
            kw["preexec_fn"] = preexec
        self.proc = spawn([DAEMON, "-c", self.config_path] + list(args), stdout=self.outf,
                          stderr=self.errf, stdin=subprocess.DEVNULL, cwd=self.tmpdir,
                          env=full_env, **kw)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=STARTUP_TIMEOUT):
        def ready():
            if self.proc.poll() is not None:
                raise Fatal("ratelimitd exited with %s:\n%s"
                                     % (self.proc.returncode, self.log()))
            with self.client(timeout=1) as c:
                return c.request("PING") == "PONG"
        try:
            wait_until(ready, timeout, interval=0.02, what="ratelimitd PING on port %s" % self.port)
        except AssertionError as e:
            raise AssertionError("%s\n--- daemon log ---\n%s" % (e, self.log()))

    def client(self, timeout=READ_TIMEOUT, port=None):
        return Client(port=port or self.port, timeout=timeout)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_lines(self):
        return self.log().splitlines()

    def wait_log(self, pattern, timeout=5.0, start=0):
        """Waits until a log line (from line index `start`) matches pattern; returns it."""
        rx = re.compile(pattern)

        def found():
            for ln in self.log_lines()[start:]:
                if rx.search(ln):
                    return ln
            return None
        try:
            return wait_until(found, timeout, interval=0.02, what="log line /%s/" % pattern)
        except AssertionError as e:
            raise AssertionError("%s\n--- daemon log ---\n%s" % (e, self.log()))

    def signal(self, sig):
        self.proc.send_signal(sig)

    # -- resource figures from /proc (Linux)

    @property
    def pid(self):
        return self.proc.pid

    def fd_count(self):
        return proc_fd_count(self.proc.pid)

    def fd_list(self):
        return proc_fd_list(self.proc.pid)

    def rss_kb(self):
        return proc_rss_kb(self.proc.pid)

    def cpu_seconds(self):
        return proc_cpu_seconds(self.proc.pid)

    def wait_idle(self, timeout=10.0, quiet=0.2):
        """Waits until the daemon uses no CPU for `quiet` seconds (it has
        processed everything it could read)."""
        last = [None]

        def idle():
            t = self.cpu_seconds()
            same, last[0] = t == last[0], t
            return same
        wait_until(idle, timeout, interval=quiet, what="the daemon to be idle")

    def reload(self, text=None):
        if text is not None:
            self.write_config(text)
        self.signal(signal.SIGHUP)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout=10.0):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(5)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        _kill(self.proc)
        for f in ("errf", "outf"):
            if getattr(self, f, None):
                getattr(self, f).close()
                setattr(self, f, None)


def run_cli(args, timeout=10):
    """Runs the daemon binary with args to completion; returns CompletedProcess (text)."""
    return subprocess.run([DAEMON] + list(args), capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, text=True, errors="replace",
                          preexec_fn=_pdeathsig)


# ---------------------------------------------------------------- line client

class Closed(Exception):
    pass


class RawSocket:
    """A TCP connection for protocols the tests speak byte by byte (RESP,
    HTTP): send bytes, keep what arrives in buf, tell a close."""

    def __init__(self, port, source="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0))
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def recv_more(self, timeout=5.0):
        """Appends what arrives next to buf; EOFError when closed."""
        self.sock.settimeout(max(0.01, timeout))
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("closed; have %r" % self.buf[-200:])
        self.buf += d

    def closed(self, timeout=3.0):
        """True when the peer closes (what it sent first is kept in buf)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    return True
                self.buf += d
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True


class Client:
    """A line-protocol client. Replies are returned without the line end."""

    def __init__(self, port=None, timeout=READ_TIMEOUT, unix=None, tls=None):
        self.timeout = timeout
        if unix:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(unix)
        else:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if not unix:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:  # an ssl.SSLContext: a TLS listener
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.buf = b""
        self.eof = False

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def sendraw(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def send(self, *lines):
        """Sends each line with an LF appended, all in one write."""
        self.sendraw(b"".join((ln.encode() if isinstance(ln, str) else ln) + b"\n"
                              for ln in lines))

    def _recv(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("no reply within %.1fs" % self.timeout)
        self.sock.settimeout(left)
        try:
            d = self.sock.recv(65536)
        except ConnectionResetError:
            d = b""
        if not d:
            self.eof = True
            raise Closed("connection closed by the daemon")
        self.buf += d

    def readline_bytes(self, timeout=None):
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while b"\n" not in self.buf:
            if self.eof:
                raise Closed("connection closed by the daemon (pending %r)" % self.buf[:80])
            self._recv(deadline)
        line, self.buf = self.buf.split(b"\n", 1)
        if line.endswith(b"\r"):
            line = line[:-1]
        return line

    def readline(self, timeout=None):
        return self.readline_bytes(timeout).decode(errors="replace")

    def readlines(self, n, timeout=None):
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        return [self.readline(max(0.001, deadline - time.monotonic())) for _ in range(n)]

    def request(self, line, timeout=None):
        self.send(line)
        return self.readline(timeout)

    def pipeline(self, lines, timeout=None):
        self.send(*lines)
        return self.readlines(len(lines), timeout)

    def extra(self, wait=0.3):
        """Whatever arrives within `wait` seconds beyond the lines read so
        far (b"" when the daemon sends nothing more): for exact reply counts."""
        deadline = time.monotonic() + wait
        try:
            while not self.eof:
                self._recv(deadline)
        except (Closed, socket.timeout, OSError):
            pass
        return self.buf

    def closed_by_peer(self, timeout=None):
        """True when the daemon closes the connection (EOF) within timeout
        and sent nothing more; raises if a line arrives instead."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            while not self.eof:
                self._recv(deadline)
                if self.buf.strip():
                    raise AssertionError("expected close, got %r" % self.buf[:200])
        except Closed:
            pass
        except socket.timeout:
            return False
        return self.eof and not self.buf.strip()


def race(ports, shares, timeout):
    """shares[i] (request lines) sent one at a time over connection i, to
    ports[i % len(ports)], every connection starting at once: the others
    interleave. Returns ([(line, reply)...], [errors])."""
    import threading
    results, errors, lock = [], [], threading.Lock()
    barrier = threading.Barrier(len(shares))

    def run(i):
        try:
            with Client(port=ports[i % len(ports)], timeout=timeout) as c:
                c.request("PING")
                barrier.wait(timeout)
                out = [(ln, c.request(ln)) for ln in shares[i]]
            with lock:
                results.extend(out)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            with lock:
                errors.append(repr(e))
    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(shares))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(3 * timeout)
    return results, errors


def parse_decision(reply):
    """'ALLOWED 5 4 0 60000' -> ('ALLOWED', 5, 4, 0, 60000); AssertionError otherwise."""
    m = DECISION.match(reply)
    if not m:
        raise AssertionError("not a decision reply: %r" % reply)
    return (m.group(1),) + tuple(int(m.group(i)) for i in range(2, 6))


def is_real(reply):
    """A decision computed by Redis (not a fallback answer: those carry -1
    for remaining and reset_ms)."""
    m = DECISION.match(reply)
    return bool(m) and m.group(3) != "-1" and m.group(5) != "-1"


# ---------------------------------------------------------------- test base

class DaemonTest(unittest.TestCase):
    """Per test: a temp dir, helpers to start redis-servers and daemons; all
    of them are stopped in tearDown whatever happens."""

    maxDiff = None

    def setUp(self):
        self.tmpdir = tempfile.mkdtemp(prefix="rlit-")
        self._procs = []
        self.addCleanup(self._cleanup)

    def _cleanup(self):
        res = getattr(self._outcome, "result", None)
        failed = bool(res) and any(t is self for t, _ in res.failures + res.errors)
        if failed:
            import sys
            for p in self._procs:
                if isinstance(p, Daemon):
                    tail = "\n".join(p.log_lines()[-15:])
                    # alive or not at the failure: a client that saw a close
                    # with nothing logged needs to know which it was
                    rc = p.proc.poll() if p.proc is not None else None
                    state = "running" if rc is None else "exited with %d" % rc
                    sys.stderr.write("\n--- %s: %s (%s) stderr (tail) ---\n%s\n"
                                     % (self.id(), p.name, state, tail))
        for p in reversed(self._procs):
            try:
                p.stop()
            except Exception:  # noqa: BLE001 - cleanup must go on
                pass
        # A sanitizer report (ASan, LSan at exit, UBSan) fails the test even
        # when every reply was right.
        reports = []
        for p in self._procs:
            if isinstance(p, Daemon):
                log = p.log()
                m = SANITIZER_REPORT.search(log)
                if m:
                    reports.append("%s: %s" % (p.name, log[max(0, m.start() - 200):m.start() + 3000]))
        if reports and not failed:
            raise AssertionError("sanitizer report in the daemon's stderr (tmpdir %s kept):\n%s"
                                 % (self.tmpdir, "\n".join(reports)))
        if failed or os.environ.get("RL_KEEP_TMP"):
            return
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    # -- redis

    def start_redis(self, **kw):
        r = RedisServer(self.tmpdir, **kw)
        self._procs.append(r)
        return r.start()

    def start_fake(self, **kw):
        """A scripted fake Redis (fakeredis.FakeRedis), stopped in tearDown."""
        from fakeredis import FakeRedis
        f = FakeRedis(**kw)
        self._procs.append(f)
        return f

    # -- daemon

    def daemon_config(self, policies, redis=None, listen=None, port=None, redis_opts=None,
                      **top):
        port = port or free_port()
        if listen is None:
            listen = ["127.0.0.1:%d" % port]
        if redis is None:
            redis = self.redis
        ropts = {"address": redis.address if hasattr(redis, "address") else redis,
                 "timeout": "1s"}
        if redis_opts:
            ropts.update(redis_opts)
        return port, make_config(listen, ropts, policies, **top)

    def start_daemon(self, policies=None, config=None, port=None, name="rl", wait=True,
                     redis=None, env=None, nofile=None, args=(), **kw):
        """Starts ratelimitd. Either `config` (full YAML text; `port` must be
        its first TCP listen port) or policies + daemon_config keywords.
        nofile: (soft, hard) RLIMIT_NOFILE for the daemon; args: more
        command-line arguments."""
        if config is None:
            port, config = self.daemon_config(policies, redis=redis, port=port, **kw)
        d = Daemon(self.tmpdir, config, name=name, port=port)
        self._procs.append(d)
        d.start(wait=wait, env=env, nofile=nofile, args=args)
        return d

    def fresh(self, policies, **kw):
        """A new redis-server and daemon; sets self.redis and self.daemon."""
        self.redis = self.start_redis()
        self.daemon = self.start_daemon(policies, **kw)
        return self.daemon

    # -- assertions

    def assertDecision(self, reply, verdict, limit=None, remaining=None, retry=None,
                       reset=None):
        """retry/reset/remaining: an int (exact), a (lo, hi) tuple (inclusive), or None."""
        v = parse_decision(reply)
        self.assertEqual(v[0], verdict, "reply %r" % reply)
        for name, want, got in (("limit", limit, v[1]), ("remaining", remaining, v[2]),
                                ("retry_after_ms", retry, v[3]), ("reset_ms", reset, v[4])):
            if want is None:
                continue
            if isinstance(want, tuple):
                self.assertTrue(want[0] <= got <= want[1],
                                "%s %d not in [%d, %d] in reply %r"
                                % (name, got, want[0], want[1], reply))
            else:
                self.assertEqual(got, want, "%s in reply %r" % (name, reply))
        return v

    def assertConfigChecks(self, cases, name="t.yaml"):
        """cases: (YAML text, None or an expected part of the error): each
        through `ratelimitd -t` in a file called name: OK, or exit 1 with
        that error."""
        path = os.path.join(self.tmpdir, name)
        for text, want in cases:
            with open(path, "w") as f:
                f.write(text)
            p = run_cli(["-t", "-c", path])
            if want is None:
                self.assertEqual((p.returncode, p.stdout.strip()), (0, "configuration OK"),
                                 "%s\n%s" % (p.stderr, text))
            else:
                self.assertEqual(p.returncode, 1, text)
                self.assertIn(want, p.stderr, text)

    def assertLogClean(self, daemon):
        """Every stderr line is `LEVEL: message`."""
        bad = [ln for ln in daemon.log_lines() if not LOG_LINE.match(ln)]
        self.assertEqual(bad, [], "log lines not in 'LEVEL: message' form:\n" + daemon.log())


class Timer:
    def __enter__(self):
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *a):
        self.elapsed = time.monotonic() - self.t0


def in_thread(fn, *args):
    """Runs fn in a daemon thread; returns (thread, result-dict)."""
    res = {}

    def run():
        try:
            res["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            res["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, res


def start_prometheus(test, scrape_config):
    """A real Prometheus in test.tmpdir scraping every second with the
    scrape_configs entry given (YAML text, indented as a list item), on a
    free port, stopped at cleanup. Returns (port, Popen); wait for its
    /-/ready yourself."""
    port = free_port()
    conf = os.path.join(test.tmpdir, "prometheus.yml")
    with open(conf, "w") as f:
        f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n" + scrape_config)
    log = open(os.path.join(test.tmpdir, "prometheus.log"), "wb")
    test.addCleanup(log.close)
    prom = subprocess.Popen([shutil.which("prometheus") or "/usr/bin/prometheus",
                             "--config.file=" + conf,
                             "--storage.tsdb.path=" + os.path.join(test.tmpdir, "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)

    def stop():
        prom.terminate()
        try:
            prom.wait(10)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait()
    test.addCleanup(stop)
    return port, prom
