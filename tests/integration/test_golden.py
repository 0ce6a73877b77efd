"""Replays the golden request -> reply transcripts in proto/transcripts/*.txt
against a real redis-server and the real daemon. The format is described in
proto/transcripts/README.md; in short:

    # comment                 ignored (so are blank lines)
    @config ... @end          the daemon's YAML config (placeholders @LISTEN@,
                              @REDIS@, @TMP@); without it a default config is used
    @redis down               no redis-server: @REDIS@ points at a closed port
    > LINE                    send LINE + LF (escapes: \\r \\t \\n \\0 \\xHH \\\\ \\s)
    >> BYTES                  send BYTES without an LF (same escapes)
    < REPLY                   the next reply line must match REPLY, token by
                              token: {lo..hi} any integer in [lo, hi], * any one
                              token, a final ... any rest of line (>= 1 token)
    < (closed)                the daemon closes the connection and sends nothing more
    @connect                  close the connection and open a new one
    @sleep MS                 pause
Requests are sent as they are read and replies read when expected, so
consecutive > lines followed by < lines are a pipeline.
"""

import glob
import os
import re
import time
import unittest

from harness import SRCDIR, DaemonTest, free_port

TRANSCRIPTS = os.path.join(SRCDIR, "proto", "transcripts")

DEFAULT_CONFIG = """listen:
  - {address: "@LISTEN@", admin: true}
redis:
  address: @REDIS@
  timeout: 1s
policies:
  reply: 5/60s
  login: [3/1s, 20/60s]
  upload: {algorithm: funnel, capacity: 15, rate: 30/60s}
  comment:
    limits: [5/60s]
    on_store_error: deny
"""

RANGE = re.compile(r"^\{(-?\d+)\.\.(-?\d+)\}$")


def unescape(s):
    out = bytearray()
    i = 0
    b = s.encode()
    while i < len(b):
        c = b[i:i + 1]
        if c == b"\\" and i + 1 < len(b):
            n = b[i + 1:i + 2]
            simple = {b"r": b"\r", b"n": b"\n", b"t": b"\t", b"0": b"\0", b"\\": b"\\",
                      b"s": b" "}
            if n in simple:
                out += simple[n]
                i += 2
                continue
            if n == b"x":
                out.append(int(b[i + 2:i + 4], 16))
                i += 4
                continue
        out += c
        i += 1
    return bytes(out)


def match_reply(pattern, reply):
    """True if reply (str) matches the transcript pattern."""
    pt = pattern.split()
    rt = reply.split(" ")
    if reply != reply.strip() or "  " in reply:
        return False
    if pt and pt[-1] == "...":
        head = pt[:-1]
        if len(rt) <= len(head):
            return False
        rt = rt[:len(head)]
        pt = head
    if len(pt) != len(rt):
        return False
    for p, r in zip(pt, rt):
        if p == "*":
            continue
        m = RANGE.match(p)
        if m:
            if not re.fullmatch(r"-?\d+", r):
                return False
            if not int(m.group(1)) <= int(r) <= int(m.group(2)):
                return False
            continue
        if p != r:
            return False
    return True


def parse(path):
    """-> (config text or None, redis_down, [(lineno, op, arg)])"""
    config = None
    redis_down = False
    steps = []
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        ln = lines[i]
        no = i + 1
        i += 1
        if ln.startswith("@config"):
            body = []
            while i < len(lines) and lines[i] != "@end":
                body.append(lines[i])
                i += 1
            if i >= len(lines):
                raise ValueError("%s:%d: @config without @end" % (path, no))
            i += 1
            config = "\n".join(body) + "\n"
        elif ln == "@redis down":
            redis_down = True
        elif ln.startswith(">> "):
            steps.append((no, "raw", unescape(ln[3:])))
        elif ln.startswith("> ") or ln == ">":
            steps.append((no, "send", unescape(ln[2:]) + b"\n"))
        elif ln.startswith("< "):
            steps.append((no, "expect", ln[2:]))
        elif ln == "@connect":
            steps.append((no, "connect", None))
        elif ln.startswith("@sleep "):
            steps.append((no, "sleep", int(ln.split()[1])))
        elif ln.strip() == "" or ln.startswith("#"):
            continue
        else:
            raise ValueError("%s:%d: cannot parse %r" % (path, no, ln))
    return config, redis_down, steps


class GoldenTest(DaemonTest):
    def replay(self, path):
        config, redis_down, steps = parse(path)
        if redis_down:
            redis_addr = "127.0.0.1:%d" % free_port()
        else:
            self.redis = self.start_redis()
            redis_addr = self.redis.address
        port = free_port()
        text = (config or DEFAULT_CONFIG).replace("@LISTEN@", "127.0.0.1:%d" % port)
        text = text.replace("@REDIS@", redis_addr).replace("@TMP@", self.tmpdir)
        d = self.start_daemon(config=text, port=port)
        c = d.client()
        name = os.path.basename(path)
        try:
            for no, op, arg in steps:
                where = "%s:%d" % (name, no)
                if op == "send":
                    c.sendraw(arg)
                elif op == "raw":
                    c.sendraw(arg)
                elif op == "connect":
                    c.close()
                    c = d.client()
                elif op == "sleep":
                    time.sleep(arg / 1000.0)
                elif arg == "(closed)":
                    self.assertTrue(c.closed_by_peer(3), "%s: connection not closed" % where)
                else:
                    try:
                        got = c.readline()
                    except Exception as e:  # noqa: BLE001 - reported with position
                        self.fail("%s: expected %r, got %r" % (where, arg, e))
                    self.assertTrue(match_reply(arg, got),
                                    "%s: expected %r, got %r" % (where, arg, got))
        finally:
            c.close()


def _add_tests():
    for path in sorted(glob.glob(os.path.join(TRANSCRIPTS, "*.txt"))):
        name = "test_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
        setattr(GoldenTest, name, lambda self, p=path: self.replay(p))


_add_tests()


class MatcherTest(unittest.TestCase):
    """The matcher must be able to fail, or the transcripts prove nothing."""

    def test_matcher(self):
        self.assertTrue(match_reply("ALLOWED 5 4 0 {59000..60000}", "ALLOWED 5 4 0 60000"))
        self.assertFalse(match_reply("ALLOWED 5 4 0 {59000..60000}", "ALLOWED 5 4 0 60001"))
        self.assertFalse(match_reply("ALLOWED 5 4 0 {59000..60000}", "DENIED 5 4 0 60000"))
        self.assertFalse(match_reply("ALLOWED 5 4 0 *", "ALLOWED 5 4 0"))
        self.assertFalse(match_reply("ALLOWED 5 4 0 *", "ALLOWED 5 4 0 1 2"))
        self.assertTrue(match_reply("ERR syntax ...", "ERR syntax empty line"))
        self.assertFalse(match_reply("ERR syntax ...", "ERR syntax"))
        self.assertFalse(match_reply("ERR syntax ...", "ERR bad-cost syntax x"))
        self.assertFalse(match_reply("PONG", "PONG "))
        self.assertFalse(match_reply("{0..5}", "x"))
        self.assertEqual(unescape("a\\tb\\x00\\r\\\\"), b"a\tb\x00\r\\")

    def test_transcripts_exist(self):
        files = glob.glob(os.path.join(TRANSCRIPTS, "*.txt"))
        self.assertGreaterEqual(len(files), 5, "transcripts missing in " + TRANSCRIPTS)
        for f in files:
            _, _, steps = parse(f)
            self.assertTrue(any(op == "expect" for _, op, _ in steps), f)


if __name__ == "__main__":
    unittest.main()
