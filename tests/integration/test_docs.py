"""Runs the examples of README.md and proto/protocol.md against a real
redis-server and the real daemon, and checks the configs of
docs/configuration.md, so the docs cannot drift from the code.

The examples are found by parsing the markdown, not copied here. A code block
(fenced, or indented four spaces after a blank line) is an example when it is

  - a transcript: lines `C: REQUEST` (sent with an LF) and `S: REPLY` (the
    next reply line), and `(the server closes the connection)`. A request
    written `C: ALLOW xxxx... (5000 bytes)` is that prefix padded with its
    last character to that many bytes;
  - a shell session: `$ printf 'FORMAT' | nc -q1 HOST PORT` and then the
    reply lines; FORMAT is sent as printf would (\\n \\r \\t \\\\ \\NNN
    octal), the write side is shut as nc does, and the replies must be
    exactly the lines shown, up to the daemon's close;
  - a config: a fenced ```yaml block, checked with `ratelimitd -t`;
  - a redis-cli session: `$ redis-cli -p PORT ARGS...` lines, each followed
    by its output lines, run with the real redis-cli;
  - a ratelimitctl session: `$ ratelimitctl ARGS...` lines, each followed
    by its standard output lines and optionally `(exit status N)` (else 0),
    run with the built ratelimitctl and `-c` the daemon's config (so the
    addresses it finds there are the test's); an output line ending in
    `...` matches any line that begins with the rest (a reset's seconds);
  - a program: a fenced ```python block, run as written; it must print the
    lines its `# -> ...` comments show. (```js blocks are run by
    test_node.py, ```nginx and ```caddy blocks by test_proxies.py,
    ```haproxy blocks by test_haproxy.py.)

Requests run against conf/ratelimitd.yaml (its listen and Redis addresses
swapped for free ports), on a daemon started for the block with an empty
Redis. Replies are compared exactly, as in proto/transcripts (test_golden.py):
a final `...` stands for the rest of the line. An HTML comment on the line
before a block (blank lines between allowed) changes this:

  <!-- example: OPTION ... -->
    listener=admin   send to the admin listener (127.0.0.1:7380), not the first one
    redis=down       no redis-server: the Redis address is a closed port
    continue         same daemon and Redis state as the previous example
    ms=N             positive retry_after_ms / reset_ms figures of
                     ALLOWED/DENIED replies may be off by N ms: time passes
                     between requests (0 and -1 are still exact)
    yaml             an indented block is a config (fenced ones say ```yaml)
    under=KEY        the config is the body of KEY (indented under it)
    wrap             the config is a fragment: completed with the listen,
                     redis and policies of a minimal config where missing
    envoy-rules      the config is an envoyproxy/ratelimit rules file (docs/envoy.md):
                     checked through a daemon config whose envoy.config it is
    envoy-daemon     a daemon config naming /etc/ratelimit/config: checked with a
                     rules file there instead
    envoy            the daemon also has a `protocol: grpc` listener, and as its
                     envoy.config the first envoy-rules example of docs/envoy.md
                     (response_headers: ratelimit): for `ratelimitctl rls`
    proxy=NAME       a proxy's block that test_proxies.py finds by NAME (the
                     unnamed ```nginx, ```caddy and ```haproxy blocks are the
                     main ones)
    skip=REASON      not run (the count of examples run is checked)

A shell session's HOST:PORT picks the listener by address.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest

from harness import (DAEMON, REDIS_CLI, SLOW, SRCDIR, DaemonTest, free_port, run_cli,
                     scrape_metrics)
from test_golden import match_reply

DOCS = ["README.md", os.path.join("proto", "protocol.md"),
        os.path.join("docs", "configuration.md"), os.path.join("docs", "clients.md"),
        os.path.join("docs", "proxies.md"), os.path.join("docs", "envoy.md")]
CONF = os.path.join(SRCDIR, "conf", "ratelimitd.yaml")

# The addresses of conf/ratelimitd.yaml, swapped for the test's own.
CONF_CLIENT = "127.0.0.1:7379"
CONF_ADMIN = "127.0.0.1:7380"
CONF_REDIS = "127.0.0.1:6379"

# Fewer than this many examples of a kind means the parser lost some.
MINIMUM = {
    "README.md": {"shell": 2, "yaml": 1, "cli": 1, "python": 1, "ctl": 1},
    "protocol.md": {"transcript": 8, "shell": 3, "yaml": 1, "cli": 1},
    "configuration.md": {"yaml": 7},
    "clients.md": {"cli": 1, "python": 3, "shell": 1, "js": 3},
    "proxies.md": {"yaml": 2, "nginx": 1, "caddy": 1, "haproxy": 2},
    "envoy.md": {"yaml": 3, "ctl": 1},
}

MINIMAL_CONFIG = {
    "listen": "listen:\n  - 127.0.0.1:7379\n",
    "redis": "redis:\n  address: 127.0.0.1:6379\n",
    "policies": "policies:\n  reply: 5/60s\n",
}

MARKER = re.compile(r"^<!--\s*example:(.*?)-->$")
SHELL = re.compile(r"^\$ printf '([^']*)' \| nc -q1 (\S+) (\d+)$")
REDIS_CLI_SHELL = re.compile(r"^\$ redis-cli -p (\d+) (.+)$")
CTL_SHELL = re.compile(r"^\$ ratelimitctl (.+)$")
CTL_EXIT = re.compile(r"^\(exit status (\d+)\)$")
CTL = os.environ.get("RATELIMITCTL") or os.path.join(os.path.dirname(DAEMON), "ctl",
                                                     "ratelimitctl")
# Debian's python3-redis, when the tests run under another python3
DIST_PACKAGES = "/usr/lib/python3/dist-packages"
LONG = re.compile(r"^(.*?)(.)\2*\.\.\. \((\d+) bytes\)$")
# a decision, and MALLOW's deciding pair after it
DECISION = re.compile(r"^(ALLOWED|DENIED) (\S+) (\S+) (-?\d+) (-?\d+)( \d+)?$")
CLOSES = "(the server closes the connection)"


class Block:
    def __init__(self, path, line, info, body, opts):
        self.path, self.line, self.info, self.body, self.opts = path, line, info, body, opts
        self.kind = classify(self)

    @property
    def where(self):
        return "%s:%d" % (os.path.relpath(self.path, SRCDIR), self.line)


def parse_opts(text):
    opts = {}
    for word in text.split():
        k, _, v = word.partition("=")
        opts[k] = v or True
    unknown = set(opts) - {"listener", "redis", "continue", "ms", "yaml", "under", "wrap",
                           "skip", "envoy-rules", "envoy-daemon", "envoy", "proxy", "tls-files"}
    if unknown:
        raise ValueError("unknown example option(s) %s" % sorted(unknown))
    return opts


def code_blocks(path):
    """Every code block of a markdown file, with the options of its marker."""
    with open(path) as f:
        lines = f.read().split("\n")
    blocks = []
    pending = None
    prev_blank = True
    i = 0
    while i < len(lines):
        ln = lines[i]
        m = MARKER.match(ln.strip())
        if m:
            if pending:
                raise ValueError("%s:%d: two markers in a row" % (path, i + 1))
            pending = (i + 1, parse_opts(m.group(1)))
            i += 1
            continue
        fence = re.match(r"^( *)```(.*)$", ln)
        if fence:
            # a fence may be indented (inside a list item): so is its body
            pad = fence.group(1)
            start, body = i + 2, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i][len(pad):] if lines[i].startswith(pad) else lines[i])
                i += 1
            if i == len(lines):
                raise ValueError("%s:%d: unclosed fence" % (path, start - 1))
            i += 1
            blocks.append(Block(path, start, fence.group(2).strip(), body,
                                pending[1] if pending else {}))
            pending, prev_blank = None, False
            continue
        if prev_blank and ln.startswith("    ") and ln.strip():
            start, body = i + 1, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:])
                i += 1
            while body and not body[-1].strip():
                body.pop()
            blocks.append(Block(path, start, "", body, pending[1] if pending else {}))
            pending, prev_blank = None, True
            continue
        if ln.strip() and pending:
            raise ValueError("%s:%d: example marker not followed by a code block"
                             % (path, pending[0]))
        prev_blank = not ln.strip()
        i += 1
    return blocks


def classify(b):
    if b.opts.get("skip"):
        return "skipped"
    if b.info == "yaml" or b.opts.get("yaml"):
        return "yaml"
    if b.info in ("python", "js", "nginx", "caddy", "haproxy"):
        return b.info
    if b.body and REDIS_CLI_SHELL.match(b.body[0]):
        return "cli"
    if b.body and CTL_SHELL.match(b.body[0]):
        return "ctl"
    if any(re.match(r"^[CS]:( |$)", ln) for ln in b.body):
        return "transcript"
    if any(SHELL.match(ln) or "| nc " in ln for ln in b.body):
        return "shell"
    return "other"


def printf_bytes(fmt):
    """The bytes printf(1) writes for a format without conversions."""
    out = bytearray()
    i = 0
    simple = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\"}
    while i < len(fmt):
        c = fmt[i]
        if c == "%":
            if fmt[i + 1:i + 2] != "%":
                raise ValueError("printf conversion in %r" % fmt)
            out += b"%"
            i += 2
        elif c == "\\" and fmt[i + 1:i + 2] in simple:
            out += simple[fmt[i + 1]]
            i += 2
        elif c == "\\" and re.match(r"[0-7]", fmt[i + 1:i + 2]):
            digits = re.match(r"[0-7]{1,3}", fmt[i + 1:]).group(0)
            out.append(int(digits, 8))
            i += 1 + len(digits)
        elif c == "\\":
            raise ValueError("printf escape not handled here in %r" % fmt)
        else:
            out += c.encode()
            i += 1
    return bytes(out)


def reply_pattern(doc_reply, ms):
    """The test_golden pattern for a documented reply: with ms, positive
    times of a decision become a range of +-ms around the documented one."""
    m = DECISION.match(doc_reply)
    if not ms or not m:
        return doc_reply
    parts = [m.group(i) for i in range(1, 6)]
    for k in (3, 4):
        v = int(parts[k])
        if v > 0:
            parts[k] = "{%d..%d}" % (max(1, v - ms), v + ms)
    return " ".join(parts) + (m.group(6) or "")


def transcript_steps(b):
    steps = []
    for k, ln in enumerate(b.body):
        where = "%s:%d" % (os.path.relpath(b.path, SRCDIR), b.line + k)
        if ln.startswith("C: "):
            req = ln[3:]
            m = LONG.match(req)
            if m:
                n = int(m.group(3))
                req = m.group(1) + m.group(2) * (n - len(m.group(1)))
            steps.append((where, "send", req.encode() + b"\n"))
        elif ln.startswith("S: "):
            steps.append((where, "expect", ln[3:]))
        elif ln.strip() == CLOSES:
            steps.append((where, "closed", None))
        elif ln.strip():
            raise ValueError("%s: not a transcript line: %r" % (where, ln))
    if not any(op == "expect" for _, op, _ in steps):
        raise ValueError("%s: transcript without a reply" % b.where)
    return steps


def shell_session(b):
    m = SHELL.match(b.body[0])
    if not m:
        raise ValueError("%s: not `$ printf '...' | nc -q1 HOST PORT`: %r"
                         % (b.where, b.body[0]))
    replies = b.body[1:]
    if not replies or any(not r.strip() or r.startswith("$") for r in replies):
        raise ValueError("%s: one command, then its reply lines" % b.where)
    return printf_bytes(m.group(1)), "%s:%s" % (m.group(2), m.group(3)), replies


def cli_session(b):
    """[(port, args, output lines)] of a redis-cli session."""
    out = []
    for ln in b.body:
        m = REDIS_CLI_SHELL.match(ln)
        if m:
            out.append((int(m.group(1)), m.group(2).split(), []))
        elif ln.startswith("$") or not out:
            raise ValueError("%s: not `$ redis-cli -p PORT ARGS...`: %r" % (b.where, ln))
        else:
            out[-1][2].append(ln)
    return out


def ctl_session(b):
    """[(args, output lines, exit status)] of a ratelimitctl session."""
    out = []
    for ln in b.body:
        m = CTL_SHELL.match(ln)
        if m:
            out.append([m.group(1).split(), [], 0])
        elif ln.startswith("$") or not out:
            raise ValueError("%s: not `$ ratelimitctl ARGS...`: %r" % (b.where, ln))
        elif CTL_EXIT.match(ln):
            out[-1][2] = int(CTL_EXIT.match(ln).group(1))
        else:
            out[-1][1].append(ln)
    return out


def all_examples():
    """{doc basename: [Block]} for every doc."""
    return {os.path.basename(d): code_blocks(os.path.join(SRCDIR, d)) for d in DOCS}


def read_conf():
    with open(CONF) as f:
        # Comment lines dropped: they quote addresses too.
        text = "".join(ln for ln in f if not ln.lstrip().startswith("#"))
    for addr in (CONF_CLIENT, CONF_ADMIN, CONF_REDIS):
        # The examples name these addresses; the swap below must find them.
        assert len(re.findall(re.escape(addr) + r"\b", text)) == 1, \
            "%s no longer appears once in conf/ratelimitd.yaml" % addr
    return text


def read_to_eof(sock, timeout):
    sock.settimeout(timeout)
    data = b""
    while True:
        d = sock.recv(65536)
        if not d:
            return data
        data += d


class DocsTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.conf = read_conf()
        self.redis = None
        self.daemon = None
        self.listeners = {}

    def envoy_rules(self):
        """The path of docs/envoy.md's first rules file, written out."""
        b = next(b for b in all_examples()["envoy.md"] if b.opts.get("envoy-rules"))
        path = os.path.join(self.tmpdir, "envoy-rules.yaml")
        with open(path, "w") as f:
            f.write("\n".join(b.body) + "\n")
        return path

    def fresh_daemon(self, redis_down, envoy=False):
        """A daemon on conf/ratelimitd.yaml with empty state (with envoy, a
        gRPC listener and docs/envoy.md's rules too)."""
        if self.daemon:
            self.daemon.stop()
        if redis_down:
            if self.redis:
                self.redis.stop()
                self.redis = None
            redis_addr = "127.0.0.1:%d" % free_port()
        else:
            if not self.redis:
                self.redis = self.start_redis()
            self.redis.call("FLUSHALL")
            redis_addr = self.redis.address
        client, admin = free_port(), free_port()
        text = self.conf.replace(CONF_CLIENT, "127.0.0.1:%d" % client)
        text = text.replace(CONF_ADMIN, "127.0.0.1:%d" % admin)
        text = text.replace(CONF_REDIS, redis_addr)
        if envoy:
            self.assertEqual(text.count("\nlisten:\n"), 1)
            text = text.replace("\nlisten:\n", "\nlisten:\n  - {address: 127.0.0.1:%d, "
                                "protocol: grpc}\n" % free_port())
            text += "envoy: {config: %s, response_headers: ratelimit}\n" % self.envoy_rules()
        self.daemon = self.start_daemon(config=text, port=client,
                                        name="rl%d" % len(self._procs))
        self.listeners = {CONF_CLIENT: client, CONF_ADMIN: admin}
        self.redis_down = redis_down
        self.envoy = envoy

    def prepare(self, b):
        down = b.opts.get("redis") == "down"
        if b.opts.get("redis") not in (None, "down"):
            self.fail("%s: redis=%s" % (b.where, b.opts["redis"]))
        if b.opts.get("continue"):
            self.assertIsNotNone(self.daemon, "%s: continue, but nothing before" % b.where)
            self.assertEqual(down, self.redis_down, "%s: continue changes redis" % b.where)
            self.assertEqual(bool(b.opts.get("envoy")), self.envoy,
                             "%s: continue changes envoy" % b.where)
        else:
            self.fresh_daemon(down, bool(b.opts.get("envoy")))

    def ms(self, b):
        return int(int(b.opts["ms"]) * SLOW) if b.opts.get("ms") else 0

    def run_transcript(self, b):
        self.prepare(b)
        listener = b.opts.get("listener", "client")
        self.assertIn(listener, ("client", "admin"), b.where)
        port = self.listeners[CONF_ADMIN if listener == "admin" else CONF_CLIENT]
        c = self.daemon.client(port=port)
        closed = False
        try:
            for where, op, arg in transcript_steps(b):
                if op == "send":
                    self.assertFalse(closed, "%s: request after the close" % where)
                    c.sendraw(arg)
                elif op == "closed":
                    self.assertTrue(c.closed_by_peer(3), "%s: connection not closed" % where)
                    closed = True
                else:
                    try:
                        got = c.readline()
                    except Exception as e:  # noqa: BLE001 - reported with position
                        self.fail("%s: expected %r, got %r" % (where, arg, e))
                    self.assertTrue(match_reply(reply_pattern(arg, self.ms(b)), got),
                                    "%s: the doc says %r, the daemon %r" % (where, arg, got))
            if not closed:
                # Nothing more than the replies shown.
                c.sock.shutdown(socket.SHUT_WR)
                rest = read_to_eof(c.sock, 5 * SLOW)
                self.assertEqual(c.buf + rest, b"", "%s: replies the doc does not show"
                                 % b.where)
        finally:
            c.close()

    def run_shell(self, b):
        data, addr, replies = shell_session(b)
        self.assertIn(addr, self.listeners or {CONF_CLIENT: 0, CONF_ADMIN: 0},
                      "%s: %s is not a listener of conf/ratelimitd.yaml" % (b.where, addr))
        self.prepare(b)
        with socket.create_connection(("127.0.0.1", self.listeners[addr]), timeout=5) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            out = read_to_eof(s, 5 * SLOW)
        got = out.decode(errors="replace").split("\n")
        self.assertEqual(got[-1], "", "%s: last reply without LF: %r" % (b.where, out))
        got = got[:-1]
        self.assertEqual(len(got), len(replies), "%s: the doc shows %r, the daemon sent %r"
                         % (b.where, replies, got))
        for k, (want, have) in enumerate(zip(replies, got)):
            self.assertTrue(match_reply(reply_pattern(want, self.ms(b)), have),
                            "%s:%d: the doc says %r, the daemon %r"
                            % (os.path.relpath(b.path, SRCDIR), b.line + 1 + k, want, have))

    def run_cli(self, b):
        self.prepare(b)
        ports = {7379: self.listeners[CONF_CLIENT], 7380: self.listeners[CONF_ADMIN]}
        ms = self.ms(b)
        for port, args, want in cli_session(b):
            self.assertIn(port, ports, "%s: port %d is not in conf/ratelimitd.yaml"
                          % (b.where, port))
            r = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(ports[port])] + args,
                               capture_output=True, timeout=10)
            have = r.stdout.decode(errors="replace").splitlines()
            self.assertEqual(len(have), len(want), "%s: %s: the doc shows %r, redis-cli %r"
                             % (b.where, " ".join(args), want, have))
            for w, h in zip(want, have):
                close = (ms and re.match(r"^-?\d+$", w) and re.match(r"^-?\d+$", h)
                         and int(w) > ms and abs(int(w) - int(h)) <= ms)
                self.assertTrue(close or w == h, "%s: %s: the doc says %r, redis-cli %r"
                                % (b.where, " ".join(args), want, have))

    def run_ctl(self, b):
        self.prepare(b)
        if b.opts.get("envoy"):
            # Envoy's units are calendar windows (a minute from :00): a session
            # that straddles one sees its counts start again halfway through.
            left = 60 - time.time() % 60
            if left < 5:
                time.sleep(left + 0.05)
        for args, want, status in ctl_session(b):
            r = subprocess.run([CTL, "-c", self.daemon.config_path] + args, capture_output=True,
                               timeout=30, stdin=subprocess.DEVNULL)
            have = r.stdout.decode(errors="replace").splitlines()
            # `...` at the end of the doc's line: the rest varies (seconds to a reset)
            have = [w if w.endswith("...") and h.startswith(w[:-3]) else h
                    for w, h in zip(want, have)] + have[len(want):]
            self.assertEqual((have, r.returncode), (want, status),
                             "%s: ratelimitctl %s (stderr %r)"
                             % (b.where, " ".join(args), r.stderr.decode(errors="replace")))

    def run_python(self, b):
        self.prepare(b)
        code = "\n".join(b.body).replace("7379", str(self.listeners[CONF_CLIENT]))
        want = re.findall(r"# -> (.*)$", code, re.M)
        self.assertTrue(want, "%s: no `# -> ...` output to check" % b.where)
        path = os.path.join(self.tmpdir, "example-%d.py" % b.line)
        with open(path, "w") as f:
            f.write(code + "\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), DIST_PACKAGES)
                                            if p)
        r = subprocess.run([sys.executable, path], capture_output=True, timeout=30, env=env)
        self.assertEqual(r.returncode, 0, "%s: %s" % (b.where, r.stderr.decode()))
        self.assertEqual(r.stdout.decode().splitlines(), want, b.where)

    def run_yaml(self, b):
        text = "\n".join(b.body) + "\n"
        if b.opts.get("envoy-rules"):
            with open(os.path.join(self.tmpdir, "rules-%d.yaml" % b.line), "w") as f:
                f.write(text)
            text = ("listen: [{address: 127.0.0.1:1, protocol: grpc}]\nstore: memory\n"
                    "envoy: {config: rules-%d.yaml}\n" % b.line)
        elif b.opts.get("envoy-daemon"):
            self.assertIn("/etc/ratelimit/config", text, b.where)
            rules = os.path.join(self.tmpdir, "rules.yaml")
            with open(rules, "w") as f:
                f.write("domain: d\ndescriptors:\n  - {key: k}\n")
            text = text.replace("/etc/ratelimit/config", rules)
        if b.opts.get("tls-files"):
            # the example's files under /etc/ratelimitd/, made real: -t reads them
            from pki import Pki
            pki = Pki(self.tmpdir)
            made = {"ca_file": pki.ca, "cert_file": pki.client_cert,
                    "key_file": pki.client_key, "server cert_file": pki.server_cert,
                    "server key_file": pki.server_key}
            names = re.findall(r"\b(ca_file|cert_file|key_file|token_file): "
                               r"/etc/ratelimitd/([^\s,}]+)", text)
            self.assertTrue(names, b.where)
            for key, name in names:
                path = os.path.join(self.tmpdir, name)
                if key == "token_file":  # a token of its own for each
                    with open(path, "w") as f:
                        f.write("token-%s-0123456789abcdef\n" % name)
                    continue
                # a file named server... is a listener's, the rest a client's
                mine = made.get(("server " if name.startswith("server") else "") + key)
                shutil.copy(mine, path)
            text = text.replace("/etc/ratelimitd/", self.tmpdir + "/")
        under = b.opts.get("under")
        if under:
            text = "%s:\n%s" % (under, "".join("  " + ln + "\n" for ln in b.body))
        if b.opts.get("wrap"):
            present = set(re.findall(r"^([A-Za-z_]+):", text, re.M))
            if re.search(r"^store:\s*memory", text, re.M):
                present.add("redis")  # no redis: with the memory store
            text += "".join(v for k, v in MINIMAL_CONFIG.items() if k not in present)
        path = os.path.join(self.tmpdir, "example-%d.yaml" % b.line)
        with open(path, "w") as f:
            f.write(text)
        r = run_cli(["-t", "-c", path])
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "configuration OK"),
                         "%s: ratelimitd -t says %s\n%s" % (b.where, r.stderr.strip(), text))

    def run_doc(self, name):
        blocks = all_examples()[name]
        for b in blocks:
            with self.subTest(example=b.where):
                if b.kind == "transcript":
                    self.run_transcript(b)
                elif b.kind == "shell":
                    self.run_shell(b)
                elif b.kind == "yaml":
                    self.run_yaml(b)
                elif b.kind == "cli":
                    self.run_cli(b)
                elif b.kind == "ctl":
                    self.run_ctl(b)
                elif b.kind == "python":
                    self.run_python(b)

    def test_readme(self):
        self.run_doc("README.md")

    def test_protocol(self):
        self.run_doc("protocol.md")

    def test_configuration(self):
        self.run_doc("configuration.md")

    def test_clients(self):
        self.run_doc("clients.md")

    def test_proxies(self):
        self.run_doc("proxies.md")

    def test_envoy(self):
        self.run_doc("envoy.md")


def doc_text(*path):
    with open(os.path.join(SRCDIR, *path)) as f:
        return f.read()


def section(text, heading):
    """The text under a markdown heading (`## X`, or X underlined with
    dashes), up to the next heading of that level."""
    m = re.search(r"^%s\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)" % re.escape(heading), text,
                  re.M | re.S)
    if not m:
        m = re.search(r"^(#+) %s\n(.*?)(?=^\1 |\Z)" % re.escape(heading), text, re.M | re.S)
        return m.group(2) if m else None
    return m.group(1)


def table_rows(text):
    """The cells of every markdown table row of text but header and rule."""
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")]
            for ln in text.splitlines() if ln.lstrip().startswith("|")]
    return [r for r in rows if not all(re.match(r"^:?-+:?$", c) for c in r)]


class DocListsTest(DaemonTest):
    """Lists in the docs that must name what the code has: the commands
    against the daemon's own (its unknown-command error names them, and each
    is answered as known), the usage lines against `ratelimitd --help`. Each
    list was once short of the code."""

    def known_commands(self, reply):
        m = re.match(r"^-?ERR unknown-command known commands: ([A-Z ]+)$", reply)
        self.assertTrue(m, reply)
        return m.group(1).split()

    def test_protocol_commands(self):
        port, admin = free_port(), free_port()
        d = self.start_daemon(config="listen:\n  - 127.0.0.1:%d\n  - {address: 127.0.0.1:%d, "
                              "admin: true}\nstore: memory\npolicies:\n  reply: 5/60s\n"
                              % (port, admin), port=port)
        with d.client(port=admin) as c:
            c.send("FETCH david reply")
            line_reply = c.readline()
            daemon = self.known_commands(line_reply)
            # each is a command the daemon parses, not only a word it prints
            # (QUIT last: it closes the connection)
            for verb in sorted(daemon, key=lambda v: v == "QUIT"):
                c.send(verb)
                r = c.readline()
                self.assertFalse(r.startswith("ERR unknown-command"), (verb, r))
        self.assertEqual(len(daemon), 20, daemon)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"*1\r\n$5\r\nFETCH\r\n")
            resp_reply = s.recv(4096).decode().rstrip("\r\n")

        doc = doc_text("proto", "protocol.md")
        commands = section(doc, "Commands")
        self.assertIsNotNone(commands, "protocol.md: no Commands section")
        listed = [re.match(r"^`([A-Z]+)", r[0]).group(1) for r in table_rows(commands)
                  if re.match(r"^`[A-Z]+", r[0])]
        self.assertEqual(sorted(listed), sorted(daemon),
                         "protocol.md's table of commands against the daemon's")
        # a section of its own for each
        for verb in daemon:
            self.assertRegex(commands, r"(?m)^### .*\b%s\b" % verb)
        # the error table's unknown-command row names them all
        row = next(r for r in table_rows(section(doc, "Errors"))
                   if r[0] == "`unknown-command`")
        self.assertEqual(sorted(set(re.findall(r"\b[A-Z]{3,}\b", row[1]))), sorted(daemon), row)
        # RESP: its sentence quotes the daemon's reply; its table has every command
        self.assertIn(resp_reply[1:], " ".join(doc.split()).replace("`", ""),
                      "protocol.md's RESP unknown-command reply")
        resp = section(doc, "RESP: the protocol of Redis clients")
        resp_cmds = {w for r in table_rows(resp) for w in re.findall(r"`([A-Z]+)\b", r[0])}
        self.assertLessEqual(set(daemon), resp_cmds, "protocol.md's RESP table")

    def test_ratelimitctl_commands(self):
        """ratelimitctl has a command for each verb of the daemon's table
        (cmd_table.c) a person types, and marks "(admin)" exactly those the
        daemon refuses on a listener without admin: true."""
        port, admin = free_port(), free_port()
        d = self.start_daemon(config="listen:\n  - 127.0.0.1:%d\n  - {address: 127.0.0.1:%d, "
                              "admin: true}\nstore: memory\npolicies:\n  reply: 5/60s\n"
                              % (port, admin), port=port)
        with d.client(port=port) as c:
            c.send("FETCH david reply")
            daemon = self.known_commands(c.readline())
        helptext = subprocess.run([CTL, "--help"], capture_output=True, timeout=10).stdout.decode()
        ctl, last = {}, None
        for line in helptext.split("options:")[0].splitlines()[2:]:
            m = re.match(r"^  ([a-z-]+)\b", line)
            if m:
                last = m.group(1)
                ctl[last] = "(admin)" in line
            elif last:  # its description goes on
                ctl[last] = ctl[last] or "(admin)" in line
        # MALLOW and MPEEK are allow and peek with several pairs; AUTH is
        # -k/--token-file; QUIT is ratelimitctl leaving
        by_other = {"MALLOW": "allow", "MPEEK": "peek", "AUTH": None, "QUIT": None}
        for verb in daemon:
            word = by_other.get(verb, verb.lower())
            if word:
                self.assertIn(word, ctl, "ratelimitctl has no command for %s" % verb)
        # the daemon's admin verbs, asked on the listener without admin
        args = {"RESET": "u reply", "OVERRIDE": "u reply unlimited", "UNOVERRIDE": "u reply",
                "OVERRIDES": "0", "TOP": "reply 0", "ALLOW": "u reply", "PEEK": "u reply",
                "CHARGE": "u reply 1", "HOLD": "u reply 1", "MALLOW": "u reply",
                "MPEEK": "u reply", "PING": ""}
        with d.client(port=port) as c:
            for verb, a in sorted(args.items()):
                c.send(("%s %s" % (verb, a)).strip())
                refused = "a listener with admin: true" in c.readline()
                if verb not in by_other:
                    self.assertEqual(ctl[verb.lower()], refused,
                                     "%s: ratelimitctl's (admin) against the daemon" % verb)
            self.assertEqual(sorted(w for w, adm in ctl.items() if adm),
                             ["override", "overrides", "reset", "top", "unoverride"])

    def test_error_codes(self):
        """protocol.md's table of error codes and operations.md's
        ratelimitd_errors_total row name every code the daemon has (its
        counter has a sample for each), and no other."""
        port, mport = free_port(), free_port()
        self.start_daemon(config="listen:\n  - 127.0.0.1:%d\nmetrics: {listen: 127.0.0.1:%d}\n"
                          "store: memory\npolicies:\n  reply: 5/60s\n" % (port, mport),
                          port=port)
        daemon = sorted(re.match(r'^ratelimitd_errors_total\{code="([a-z-]+)"\}$', k).group(1)
                        for k in scrape_metrics(mport)
                        if k.startswith("ratelimitd_errors_total{"))
        self.assertIn("out-of-memory", daemon)
        doc = doc_text("proto", "protocol.md")
        listed = sorted(re.match(r"^`([a-z-]+)`$", r[0]).group(1)
                        for r in table_rows(section(doc, "Errors"))
                        if re.match(r"^`[a-z-]+`$", r[0]))
        self.assertEqual(listed, daemon, "protocol.md's table of error codes")
        row = next(r for r in table_rows(doc_text("docs", "operations.md"))
                   if r[0] == "`ratelimitd_errors_total{code}`")
        self.assertEqual(sorted(set(re.findall(r"`([a-z]+(?:-[a-z]+)*)`", row[2]))), daemon,
                         "operations.md's ratelimitd_errors_total codes")

    def test_usage_lines(self):
        r = run_cli(["--help"])
        self.assertEqual(r.returncode, 0)
        first = r.stdout.splitlines()[0]
        self.assertTrue(first.startswith("usage: ratelimitd "), first)
        options = set(re.findall(r"(?<![\w-])--?[A-Za-z][a-z-]*", r.stdout))
        self.assertIn("--config-keys", options)
        self.assertIn("-p", options)
        for path, heading in ((("README.md",), "Usage"),
                              (("docs", "operations.md"), "Running")):
            text = section(doc_text(*path), heading)
            self.assertIsNotNone(text, "%s: no %s section" % (path[-1], heading))
            block = re.search(r"```\n(ratelimitd .*)\n```", text)
            self.assertTrue(block, "%s: no usage block" % path[-1])
            self.assertEqual(block.group(1), first[len("usage: "):],
                             "%s's usage line against ratelimitd --help" % path[-1])
            # and every option --help lists is explained below it
            for opt in sorted(options):
                self.assertIn("`%s" % opt, text, "%s: %s" % (path[-1], opt))


LOG_LINE = re.compile(r"^(debug|info|warn|error): ")


def log_examples(*path):
    """The code blocks of a manual made only of log lines (`LEVEL: ...`)."""
    blocks, cur = [], None
    for line in doc_text(*path).splitlines():
        if line.startswith("```"):
            if cur is None:
                cur = []
            else:
                if cur and all(LOG_LINE.match(ln) for ln in cur):
                    blocks.append(cur)
                cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def log_pattern(line):
    """A documented log line as a pattern: every number (ports, counts, a
    file's line and column, the version) and the config file's path stand
    for any; the words must be the daemon's own."""
    pat = re.escape(line)
    pat = pat.replace(re.escape("/etc/ratelimitd/ratelimitd.yaml"), r"\S+\.yaml")
    return re.compile("^" + re.sub(r"\d+", r"\\d+", pat) + "$")


class LogExamplesTest(DaemonTest):
    """docs/operations.md's log lines, as written, are lines the daemon logs:
    a start with Redis down and then up, a reload changing a log level, a
    policy and a listen address, a reload that fails, and a SIGTERM."""

    def test_operations_log_lines(self):
        blocks = log_examples("docs", "operations.md")
        self.assertGreaterEqual(len(blocks), 3, blocks)
        redis_port = free_port()
        port = free_port()
        policies = ("  reply: 5/60s\n  login: [3/1s, 20/1m]\n"
                    "  upload: {algorithm: funnel, capacity: 15, rate: 30/60s}\n"
                    "  api: {algorithm: sliding_window_counter, limits: 1000/1h}\n")

        def config(listen_port=port, login="[3/1s, 20/1m]", level="info"):
            return ("listen:\n  - 127.0.0.1:%d\nredis:\n  address: 127.0.0.1:%d\n"
                    "log_level: %s\npolicies:\n%s"
                    % (listen_port, redis_port, level,
                       policies.replace("[3/1s, 20/1m]", login)))

        d = self.start_daemon(config=config(), port=port)
        d.wait_log(r"unavailable: Connection refused", timeout=10 * SLOW)
        self.redis = self.start_redis(port=redis_port)
        d.wait_log(r"redis 127\.0\.0\.1:\d+ connected", timeout=10 * SLOW)
        n = len(d.log_lines())
        d.reload(config(listen_port=free_port(), login="[5/1s, 20/1m]", level="debug"))
        d.wait_log(r"reload: configuration .* loaded", start=n, timeout=10 * SLOW)
        n = len(d.log_lines())
        d.reload(config(login="[3/1s, 20/60]"))
        d.wait_log(r"reload failed", start=n, timeout=10 * SLOW)
        with d.client() as c:  # a request in flight or not: the count is any
            self.assertEqual(c.request("PING"), "PONG")
        d.signal(signal.SIGTERM)
        d.wait_exit(10 * SLOW)
        logged = d.log_lines()
        for block in blocks:
            for line in block:
                pat = log_pattern(line)
                self.assertTrue(any(pat.match(ln) for ln in logged),
                                "docs/operations.md's log line is not one the daemon "
                                "logs:\n  %s\nthe daemon logged:\n  %s"
                                % (line, "\n  ".join(logged)))


class ParserTest(unittest.TestCase):
    """The examples must be found, or the run above proves nothing."""

    def test_counts(self):
        for name, blocks in all_examples().items():
            counts = {}
            for b in blocks:
                counts[b.kind] = counts.get(b.kind, 0) + 1
                if b.kind == "transcript":
                    transcript_steps(b)
                elif b.kind == "shell":
                    shell_session(b)
                elif b.kind == "cli":
                    cli_session(b)
                elif b.kind == "ctl":
                    ctl_session(b)
            for kind, n in MINIMUM[name].items():
                self.assertGreaterEqual(counts.get(kind, 0), n,
                                        "%s: %s examples found: %r" % (name, kind, counts))

    def test_readme_layout(self):
        """README's Layout names every manual, and only paths that exist."""
        with open(os.path.join(SRCDIR, "README.md")) as f:
            layout = f.read().split("## Layout", 1)[1]
        named = re.findall(r"^(\S+)\s", layout, re.M)
        for path in named:
            if path != "```":
                self.assertTrue(os.path.exists(os.path.join(SRCDIR, path)), path)
        docs = sorted("docs/" + d for d in os.listdir(os.path.join(SRCDIR, "docs"))
                      if d.endswith(".md"))
        self.assertGreaterEqual(len(docs), 7)
        for d in docs:
            self.assertIn(d, named, "README.md's Layout does not list " + d)

    def test_architecture_layers(self):
        """docs/architecture.md's Layers table is src/'s folders, each row
        naming every module of its folder (X for X.c, X.h for a header
        alone) and no other."""
        with open(os.path.join(SRCDIR, "docs", "architecture.md")) as f:
            text = f.read().split("## Layers", 1)[1].split("\n## ", 1)[0]
        rows = {}
        for line in text.splitlines():
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 4 and re.fullmatch(r"`src/(?:[a-z_]+/)?`", cells[2]):
                names = set(re.findall(r"`([a-z_]+(?:\.h)?)`", cells[3]))
                rows[cells[2].strip("`")] = names
        want = {}
        top = os.path.join(SRCDIR, "src")
        for d, _dirs, names in os.walk(top):
            rel = os.path.relpath(d, top)
            folder = "src/" if rel == "." else "src/" + rel.replace(os.sep, "/") + "/"
            for n in names:
                stem, ext = os.path.splitext(n)
                if ext == ".c" or (ext == ".h" and stem + ".c" not in names):
                    want.setdefault(folder, set()).add(stem if ext == ".c" else n)
        self.assertEqual(sorted(rows), sorted(want),
                         "docs/architecture.md's Layers rows are not src/'s folders")
        for folder in sorted(want):
            self.assertEqual(sorted(rows[folder]), sorted(want[folder]),
                             "docs/architecture.md's Layers row of " + folder)

    def test_architecture_change_table(self):
        """docs/architecture.md's before/after table of the files each kind
        of change touches: each cell's count is the paths it names (those
        from the top of the tree: src/..., meson.build, man/, docs/, tests/,
        bench/); the after column's paths exist today, the before column's
        at f4af880 (when git can tell), new files (X) aside; a shorter name
        (net/conn.c, proto.h) is the end of some path of its tree."""
        with open(os.path.join(SRCDIR, "docs", "architecture.md")) as f:
            text = f.read().split("## Where the next capabilities go", 1)[1].split("\n## ", 1)[0]
        today = [os.path.relpath(os.path.join(d, n), SRCDIR).replace(os.sep, "/")
                 for top in ("src", "man", "docs", "tests", "bench")
                 for d, _dirs, names in os.walk(os.path.join(SRCDIR, top)) for n in names]
        today.append("meson.build")
        r = subprocess.run(["git", "-C", SRCDIR, "ls-tree", "-r", "--name-only", "f4af880"],
                           capture_output=True, text=True)
        before = r.stdout.split() if r.returncode == 0 else None
        path = re.compile(r"^[A-Za-z0-9_./-]+\.(?:c|h|lua|build|scd|md|py|txt)$")
        top = re.compile(r"^(?:src/|man/|docs/|tests/|bench/|meson\.build$)")
        rows = 0
        after = {}
        for line in text.splitlines():
            cells = [c.strip() for c in line.split("|")]
            if len(cells) != 5 or not re.match(r"^\d+ files: ", cells[2]):
                continue
            rows += 1
            for cell, tree in ((cells[2], before), (cells[3], today)):
                names = [n for n in re.findall(r"`([^`]+)`", cell) if path.match(n)]
                if cell is cells[3]:
                    after[cells[1]] = names
                counted = {n for n in names if top.match(n)}
                self.assertEqual(int(cell.split()[0]), len(counted),
                                 "%s: the count is not the paths named %s"
                                 % (cells[1], sorted(counted)))
                if tree is None:
                    continue
                for n in names:
                    if "_X." in n:
                        continue
                    found = n in tree if top.match(n) else any(
                        t.endswith("/" + n) for t in tree)
                    self.assertTrue(found, "%s: %s is not in its tree" % (cells[1], n))
        self.assertEqual(rows, 5,
                         "the table's rows: front end, algorithm, store, verb, config key")
        self.check_change_table_complete(after)

    def check_change_table_complete(self, after):
        """The after column names every file of src/ a change must touch,
        as far as the code can tell: each file naming every value of the
        enum the change adds one to (a switch the compiler names, a table, a
        list written out); for a store backend each file naming any value of
        enum config_store (a test of the kind of store picks between them
        all). And no file of decide/ reads a Redis reply or asks what kind
        of store it has. (Each once missed one: server.c's listen_alpn;
        console.c's backend_name, leases.c and override_live.c.)"""
        src = os.path.join(SRCDIR, "src")
        files = {}
        for d, _dirs, names in os.walk(src):
            for n in names:
                if n.endswith((".c", ".h")):
                    rel = os.path.relpath(os.path.join(d, n), SRCDIR).replace(os.sep, "/")
                    with open(os.path.join(d, n)) as f:
                        files[rel] = f.read()

        def enumerators(header, enum):
            m = re.search(r"enum %s \{(.*?)\};" % enum, files[header], re.S)
            self.assertTrue(m, "%s: no enum %s" % (header, enum))
            body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
            return re.findall(r"\b([A-Z][A-Z0-9_]+)\b(?:\s*=[^,]*)?\s*,?", body)

        def naming(values, each=all):
            return {f for f, text in files.items()
                    if each(re.search(r"\b%s\b" % v, text) for v in values)}

        rows = {
            "a new front end": naming(enumerators("src/config/config.h", "config_protocol")),
            "a new algorithm": naming(enumerators("src/model/policy.h", "policy_algo")),
            "a new verb": naming(enumerators("src/model/cmd_types.h", "cmd_verb")),
            # (any: `cfg->store == CONFIG_STORE_MEMORY` picks between all of them)
            "a new store backend": naming(enumerators("src/config/config.h", "config_store"), any),
        }
        # decide/ asks a store what it did (its results, its ops' flags),
        # never what it is, and reads no Redis reply: a new backend touches
        # no file there (leases.c and override_live.c once branched on the
        # kind of store and parsed hiredis's replies)
        for f, text in sorted(files.items()):
            if f.startswith("src/decide/"):
                self.assertNotRegex(text, r"hiredis|redisReply|store_local|CONFIG_STORE_", f)
        for key, need in rows.items():
            row = next((r for r in after if r.startswith(key)), None)
            self.assertIsNotNone(row, "the table has no row '%s'" % key)
            # (fewer: the check lost files; a verb is named in 2 alone, its
            # enum and its row, which the parsers and HTTP's routes read)
            self.assertGreaterEqual(len(need), 2 if key == "a new verb" else 3, (key, need))
            for f in sorted(need):
                self.assertTrue(any(n == f or f.endswith("/" + n) for n in after[row]),
                                "%s: %s must change too, and the row does not name it"
                                % (key, f))

    def test_helpers(self):
        self.assertEqual(printf_bytes(r"A\001b\tc\n\\%%"), b"A\x01b\tc\n\\%")
        self.assertEqual(printf_bytes(r"\0"), b"\0")
        self.assertEqual(reply_pattern("DENIED 5 0 59987 59992", 100),
                         "DENIED 5 0 {59887..60087} {59892..60092}")
        self.assertEqual(reply_pattern("DENIED 15 0 -1 30000", 100),
                         "DENIED 15 0 -1 {29900..30100}")
        self.assertEqual(reply_pattern("ALLOWED 5 5 0 0", 100), "ALLOWED 5 5 0 0")
        self.assertFalse(match_reply(reply_pattern("DENIED 5 0 59987 59992", 100),
                                     "DENIED 5 0 58000 59992"))
        b = Block("x.md", 1, "", ["C: ALLOW xxx... (10 bytes)", "S: ERR line-too-long ...",
                                  "   " + CLOSES], {})
        self.assertEqual(transcript_steps(b)[0][2], b"ALLOW xxxx\n")
        self.assertEqual(transcript_steps(b)[2][1], "closed")


def markdown_files():
    """Every markdown file of the repository that git knows (or, outside a
    checkout, under the usual directories)."""
    r = subprocess.run(["git", "-C", SRCDIR, "ls-files", "*.md"], capture_output=True,
                       text=True)
    names = r.stdout.split() if r.returncode == 0 else []
    if not names:
        for d in ("", "docs", "proto", "bench", "man"):
            if os.path.isdir(os.path.join(SRCDIR, d)):
                names += [os.path.join(d, f) for f in os.listdir(os.path.join(SRCDIR, d))
                          if f.endswith(".md")]
    return sorted(n for n in names if not n.startswith(("build", "tests/node/node_modules")))


def images(text):
    """(alt, target) of every image of a markdown text: ![alt](target) and
    <img src="target" alt="alt">."""
    out = [(alt, target.split()[0]) for alt, target in
           re.findall(r"!\[([^\]]*)\]\(([^)]+)\)", text)]
    for tag in re.findall(r"<img\b[^>]*>", text):
        src = re.search(r'src="([^"]*)"', tag)
        alt = re.search(r'alt="([^"]*)"', tag)
        out.append((alt.group(1) if alt else "", src.group(1) if src else ""))
    return out


def c_modules():
    """{stem: folder under src/ ("" for src/ itself)} of every src/**/*.c."""
    out = {}
    top = os.path.join(SRCDIR, "src")
    for d, _dirs, names in os.walk(top):
        for name in names:
            if name.endswith(".c"):
                out[name[:-2]] = os.path.relpath(d, top).replace(os.sep, "/").strip(".")
    return out


def _dot_clusters():
    """[(folder label or None, text)] for each line of architecture.dot
    (comments left out), with the innermost enclosing cluster whose label
    starts with src/ (its folder: "src/" or "src/X/")."""
    with open(os.path.join(SRCDIR, "docs", "architecture.dot")) as f:
        dot = re.sub(r"(?m)^\s*//.*$", "", f.read())
    stack = []  # [(depth at its opening, folder or None)]
    depth = 0
    out = []
    for line in dot.splitlines():
        m = re.match(r"\s*subgraph\s+(cluster_\w+)\s*\{", line)
        if m:
            stack.append([depth, None])
        elif stack and stack[-1][1] is None:
            lab = re.match(r'\s*label="(src/(?:[a-z_]+/)?)[:"]', line)
            if lab:
                stack[-1][1] = lab.group(1)
            elif re.match(r'\s*label="', line):
                stack[-1][1] = ""
        depth += line.count("{") - line.count("}")
        while stack and depth <= stack[-1][0]:
            stack.pop()
        inner = next((f for _d, f in reversed(stack) if f), None)
        out.append((inner, line.replace("\\n", " ")))
    return out


def diagram_cluster_labels():
    """The folders ("src/", "src/X/") architecture.dot has a cluster of."""
    with open(os.path.join(SRCDIR, "docs", "architecture.dot")) as f:
        dot = re.sub(r"(?m)^\s*//.*$", "", f.read())
    return re.findall(r'(?m)^\s*label="(src/(?:[a-z_]+/)?)[:"]', dot)


def diagram_clusters():
    """{module: the src/ folder cluster architecture.dot shows its x.c in}."""
    out = {}
    for folder, line in _dot_clusters():
        if re.match(r'\s*label="src/', line):
            continue  # a cluster's own label
        for n in re.findall(r"\b([a-z_]+)\.c\b", line):
            out.setdefault(n, folder)
    return out


def diagram_modules():
    """The src/*.c files docs/architecture.dot names (its labels' "x.c"
    words; comments left out)."""
    with open(os.path.join(SRCDIR, "docs", "architecture.dot")) as f:
        dot = re.sub(r"(?m)^\s*//.*$", "", f.read()).replace("\\n", " ")
    return sorted(set(re.findall(r"\b([a-z_]+)\.c\b", dot)))


class FiguresTest(unittest.TestCase):
    """The figures of docs/ (scripts/plots draws them): every image a doc
    shows exists and says in words what it shows, and the architecture
    diagram names only modules that exist, as its committed SVG does."""

    def test_images_exist(self):
        seen = 0
        for name in markdown_files():
            with open(os.path.join(SRCDIR, name)) as f:
                text = f.read()
            for alt, target in images(text):
                seen += 1
                self.assertNotRegex(target, r"^[a-z]+://", "%s: %s is not in the repository"
                                    % (name, target))
                path = os.path.normpath(os.path.join(SRCDIR, os.path.dirname(name),
                                                     target.split("#")[0]))
                self.assertTrue(os.path.isfile(path), "%s shows %s: no such file" % (name, target))
                self.assertGreaterEqual(len(alt.split()), 3,
                                        "%s: %s needs alt text that says what it shows"
                                        % (name, target))
        # README, architecture.md, performance.md (2) and algorithms.md
        self.assertGreaterEqual(seen, 5, "the images of the docs were not found")

    def test_diagram_modules_exist(self):
        names = diagram_modules()
        self.assertGreaterEqual(len(names), 20, names)
        with open(os.path.join(SRCDIR, "docs", "architecture.svg")) as f:
            svg = f.read()
        have = set(c_modules())
        for n in names:
            self.assertIn(n, have, "docs/architecture.dot names %s.c, which src/ does not have" % n)
            self.assertRegex(svg, r"(?<![a-z_])%s\.c\b" % n,
                             "docs/architecture.svg does not show %s.c: scripts/plots "
                             "architecture redraws it from docs/architecture.dot" % n)

    def test_diagram_clusters_are_folders(self):
        """architecture.dot's "src/..." clusters are src/ and its folders,
        all of them, and each names every .c of its folder and no other."""
        where = diagram_clusters()
        modules = c_modules()
        folders = {"src/" + (f + "/" if f else "") for f in modules.values()}
        labels = diagram_cluster_labels()
        self.assertEqual(sorted(set(labels)), sorted(folders),
                         "docs/architecture.dot's src/ clusters are not src/'s folders")
        self.assertEqual(len(labels), len(set(labels)), "a folder with two clusters: %s" % labels)
        for n, folder in sorted(where.items()):
            self.assertIn(n, modules, "docs/architecture.dot names %s.c, which src/ does not have"
                          % n)
            want = "src/" + (modules[n] + "/" if modules[n] else "")
            self.assertEqual(folder, want, "docs/architecture.dot shows %s.c in %s, but it is in %s"
                             % (n, folder, want))
        for n in sorted(modules):
            self.assertIn(n, where, "docs/architecture.dot shows no %s.c (in its folder's cluster)"
                          % n)

    def test_load_figures_data(self):
        """The load figures' data is kept beside them, a sweep of 2 or more
        offered rates with both targets."""
        with open(os.path.join(SRCDIR, "docs", "figures", "load.csv")) as f:
            rows = [ln.rstrip("\n").split(",") for ln in f]
        head = rows[0]
        sweep = [dict(zip(head, r)) for r in rows[1:]
                 if dict(zip(head, r)).get("targets") == "both" and float(r[head.index("rate")]) > 0]
        self.assertGreaterEqual(len(sweep), 2, rows)
        for r in sweep:
            self.assertGreater(float(r["daemon_dps"]), 0, r)
            self.assertGreater(float(r["direct_dps"]), 0, r)

    def test_helpers(self):
        self.assertEqual(images('![a b c](x.svg) <img src="y.png" alt="d e f">'),
                         [("a b c", "x.svg"), ("d e f", "y.png")])
        self.assertEqual(images('![](z.svg "title")'), [("", "z.svg")])


if __name__ == "__main__":
    unittest.main()
