#!/usr/bin/env python3
"""gen_seeds.py - (re)writes the seed corpora under fuzz/corpus/.

Run from anywhere: python3 fuzz/gen_seeds.py. Existing seeds with the same
names are overwritten; others are left alone. Sources besides the cases
below: the golden transcripts in proto/transcripts/ (requests only), the
example configurations (conf/, tests/unit/configs/) and the config test
table in tests/unit/test_config.c.
"""
import ast
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(kind, name, data):
    d = os.path.join(CORPUS, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- proto: 4-byte header (max_line - 1 as u16 LE, a u16 LE: both seed chunk sizes), stream ----

def proto(name, stream, max_line=4096, split=0):
    write("proto", name, struct.pack("<HH", (max_line - 1) % 8192, split) + stream)


def transcript_requests(path):
    """The bytes a transcript sends: '> LINE' (plus LF) and '>> BYTES'."""
    out = b""
    esc = {"r": b"\r", "n": b"\n", "t": b"\t", "0": b"\0", "\\": b"\\", "s": b" "}
    for line in open(path, encoding="utf-8", errors="surrogateescape"):
        line = line.rstrip("\n")
        if line.startswith(">> ") or line == ">>":
            text, lf = line[3:], b""
        elif line.startswith("> ") or line == ">":
            text, lf = line[2:], b"\n"
        else:
            continue
        raw = text.encode("utf-8", "surrogateescape")
        buf, i = b"", 0
        while i < len(raw):
            c = raw[i:i + 1]
            if c == b"\\" and i + 1 < len(raw):
                n = chr(raw[i + 1])
                if n == "x" and i + 3 < len(raw):
                    buf += bytes([int(raw[i + 2:i + 4], 16)])
                    i += 4
                    continue
                if n in esc:
                    buf += esc[n]
                    i += 2
                    continue
            buf += c
            i += 1
        out += buf + lf
    return out


def proto_seeds():
    proto("allow", b"ALLOW david reply\n")
    proto("allow-cost", b"ALLOW david reply 3\n", split=9)
    proto("all-verbs", b"ALLOW david reply 3\r\nPEEK david reply\nRESET david reply\n"
          b"PING\nQUIT\nPING\n", split=25)
    proto("mixed-case", b"allow u a\nPeEk u a 2147483647\nreset u a\npInG\n", split=3)
    proto("blanks", b"  \tALLOW \t frank\t\treply  \r\n\t PING\t\n", split=7)
    proto("empty-lines", b"\n\r\n   \n\t\n", split=1)
    proto("bare-cr", b"PI\rNG\n\r\nPING\r\r\n", split=2)
    proto("nul", b"ALLOW da\0vid reply\nPI\0NG\n\0\n")
    proto("control", b"ALLOW a\x01 reply\nALLOW a\x7f reply\nALLOW a\x1b[0m reply\n")
    proto("non-utf8", b"ALLOW \xff\xfe\xc3( reply\nALLOW caf\xc3\xa9 r\xe9ply 2\n")
    proto("arity", b"ALLOW\nALLOW a\nALLOW a b c d\nALLOW a b c d e f\nRESET a b 1\n"
          b"PING x\nQUIT now\nPEEK a\n")
    proto("unknown", b"GET x\nALLOWED a b\nHELLO\nALLO a b\nPINGS\n")
    proto("overrides", b"OVERRIDE bob reply unlimited\nOVERRIDE eve reply blocked 1h\n"
          b"OVERRIDE c up 15,30/1m 90s\nOVERRIDE x y 5/1m 0s\nOVERRIDE x y\nUNOVERRIDE bob reply\n"
          b"OVERRIDES 0\nOVERRIDES 2147483648\nOVERRIDES x\nunoverride a\n", split=17)
    proto("pairs", b"MALLOW alice login 1.2.3.4 login_ip - login_all\nMPEEK a b c d 3\n"
          b"mallow a b\nMALLOW a\nMALLOW a b a b\nMALLOW a b c d 0\n"
          + b"MALLOW " + b" ".join(b"u%d a" % i for i in range(8)) + b" 9\n"
          + b"MALLOW " + b" ".join(b"u%d a" % i for i in range(9)) + b"\n", split=11)
    proto("bad-cost", b"ALLOW d r 0\nALLOW d r -1\nALLOW d r +5\nALLOW d r 1x\n"
          b"ALLOW d r 2147483648\nALLOW d r 99999999999999999999999999\nPEEK d r 1.5\n"
          b"ALLOW d r 0005\nALLOW d r 2147483647\nALLOW d r 00000000002147483647\n")
    proto("user-512", b"ALLOW " + b"u" * 512 + b" reply\n")
    proto("user-513", b"ALLOW " + b"u" * 513 + b" reply\nRESET " + b"v" * 513 + b" r\n",
          split=300)
    proto("user-escapes", b"ALLOW {a}%:%25%7D} reply\nALLOW } }\n")
    proto("pipeline", b"ALLOW a r\n" * 40 + b"PING\n", split=123)
    proto("partial-tail", b"PING\nALLOW david re", split=5)
    proto("too-long-16", b"PING\n" + b"A" * 17 + b"\nPING\n", max_line=16, split=6)
    proto("exact-16-crlf", b"ALLOW 1234567 abc\r\nPING\n", max_line=16)
    proto("exact-16-cr-only", b"ALLOW 12345678 ab\r\r\n", max_line=16)
    proto("too-long-no-lf", b"x" * 40, max_line=16, split=17)
    proto("max-line-1", b"P\n\r\n\n12\nQ\n", max_line=1, split=2)
    proto("max-line-64", b"ALLOW " + b"z" * 60 + b" r\nPING\n", max_line=64, split=64)
    tdir = os.path.join(ROOT, "proto", "transcripts")
    if os.path.isdir(tdir):
        for f in sorted(os.listdir(tdir)):
            if f.endswith(".txt"):
                data = transcript_requests(os.path.join(tdir, f))
                if data:
                    proto("transcript-" + f[:-4], data, max_line=64 if f == "framing.txt" else 4096,
                          split=len(data) // 2)


# ---- config ----

CONFIGS = {
    "minimal.yaml": "policies:\n  a: 1/1s\n",
    "flow.yaml": "{listen: ['[::1]:7000', unix:/run/r.sock], policies: {a: [1/1s, 2/2s]}}\n",
    "funnel.yaml": "policies:\n  up:\n    algorithm: funnel\n    capacity: 15\n    rate: 30/60s\n"
                   "    on_store_error: error\n",
    "all-units.yaml": "redis: {timeout: 60s}\npolicies:\n  a: [1/1ms, 2/1s, 3/1m, 4/1h, 5/1d, 6/366d]\n",
    "limits-string.yaml": "policies:\n  c: {limits: 5/60s}\n",
    "windows.yaml": "request_timeout: 250ms\npolicies:\n"
                    "  api: {algorithm: sliding_window_counter, limits: [1000000000/1h, 10/1ms]}\n"
                    "  s: {algorithm: fixed_window, limits: [100/1s, 20000/1d], on_store_error: deny}\n"
                    "  b: {limits: [3/1s], ban: {after: 10, within: 1m, for: 15m}, shadow: true}\n"
                    "  o: {limits: [3/1s], overrides: {a: 5/1s, 'p*': unlimited, '*': blocked,\n"
                    "      q: {limits: [1/1s, 9/1m]}}}\n"
                    "  f: {algorithm: funnel, capacity: 2, rate: 1/1s, overrides: {v: {capacity: 9,"
                    " rate: 3/1s}}}\n",
    "windows-bad.yaml": "policies:\n  a: {algorithm: fixed_window, capacity: 3, rate: 1/1s}\n"
                        "  b: {algorithm: sliding_window_counter, limits: [1/1s, 2/1000ms]}\n",
    "eight-limits.yaml": "policies:\n  p: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, 1/7s, 1/8s]\n",
    "nine-limits.yaml": "policies:\n  p: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, 1/7s, 1/8s, 1/9s]\n",
    "same-window.yaml": "policies:\n  p: [3/1s, 20/1000ms]\n",
    "many-policies.yaml": "policies:\n" + "".join("  p%d: %d/%ds\n" % (i, i + 1, i + 1)
                                                  for i in range(40)),
    "dup-policy.yaml": "policies:\n  b: 1/1s\n  a: 2/1s\n  b: 3/1s\n",
    "dup-key.yaml": "policies: {a: 1/1s}\nprefix: x\nprefix: y\n",
    "unknown-key.yaml": "policies: {a: 1/1s}\nlisen: [127.0.0.1:1]\n",
    "anchor.yaml": "policies:\n  a: &r 1/1s\n  b: *r\n",
    "alias-bomb.yaml": "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\npolicies: {a: 1/1s}\n",
    "two-docs.yaml": "policies: {a: 1/1s}\n---\npolicies: {b: 1/1s}\n",
    "doc-markers.yaml": "%YAML 1.1\n---\npolicies: {a: 1/1s}\n...\n",
    "empty.yaml": "",
    "comment-only.yaml": "# nothing\n",
    "top-list.yaml": "- policies\n",
    "top-scalar.yaml": "policies\n",
    "no-policies.yaml": "prefix: x\n",
    "null-values.yaml": "prefix: ~\npolicies:\n  a: null\n",
    "tabs.yaml": "policies:\n\ta: 1/1s\n",
    "bad-utf8.yaml": b"policies:\n  a: 1/1s # \xff\xfe\n",
    "bom.yaml": b"\xef\xbb\xbfpolicies:\n  a: 1/1s\n",
    "crlf.yaml": "policies:\r\n  a: 1/1s\r\nprefix: 'p:'\r\n",
    "cr-only.yaml": "policies:\r  a: 1/1s\r",
    "nul-prefix.yaml": "prefix: \"a\\0b\"\npolicies: {a: 1/1s}\n",
    "quoted-ints.yaml": "redis: {database: '15', connections: \"64\"}\nmax_line: 64\npolicies: {a: 1/1s}\n",
    "octal.yaml": "max_line: 0100\npolicies: {a: 1/1s}\n",
    "user-no-pass.yaml": "redis: {username: u}\npolicies: {a: 1/1s}\n",
    "unix-long.yaml": "listen: [unix:/" + "d" * 120 + "]\npolicies: {a: 1/1s}\n",
    "ipv6-bad.yaml": "listen: ['::1:7000', '[::1]:0', '[x]:1', 'h:65536']\npolicies: {a: 1/1s}\n",
    "prefix-brace.yaml": "prefix: \"rl:{x}\"\npolicies: {a: 1/1s}\n",
    "funnel-limits.yaml": "policies:\n  up: {algorithm: funnel, limits: [1/1s], capacity: 5, rate: 1/1s}\n",
    "nested-key.yaml": "policies:\n  ? [a]\n  : 1/1s\n",
    "block-scalars.yaml": "prefix: |\n  x\npolicies:\n  a: >\n    1/1s\n",
    "tags.yaml": "max_line: !!int 64\npolicies: {a: !!str 1/1s}\n",
    "deep.yaml": "policies: " + "[" * 60 + "]" * 60 + "\n",
    "long-name.yaml": "policies:\n  " + "a" * 65 + ": 1/1s\n",
    "listen-options.yaml": "listen:\n  - 0.0.0.0:7379\n  - {address: 127.0.0.1:7380, admin: true}\n"
                           "  - {admin: false, address: 127.0.0.1:7381}\n"
                           "  - {address: \"unix:/run/ratelimitd/admin.sock\", admin: true, mode: \"0600\"}\n"
                           "max_clients: 1000000\nidle_timeout: 5m\npolicies: {a: 1/1s}\n",
    "listen-options-bad.yaml": "listen:\n  - {address: 127.0.0.1:1, mode: '0600'}\n"
                               "  - {admin: yes, mode: 0777, address: 'unix:/x'}\n  - {mode: '1777'}\n"
                               "max_clients: 0\nidle_timeout: 999ms\npolicies: {a: 1/1s}\n",
    "overflow.yaml": "redis: {database: 99999999999999999999999}\npolicies:\n  a: 99999999999999999999/1s\n",
    # every error is reported: more than 20 of them, and a line indented too far
    "errors-many.yaml": "redis: {timeout: 50, connections: 0}\npolicies:\n"
                        + "".join("  p%d: %d/60\n" % (i, i) for i in range(1, 31)),
    "misindent.yaml": "policies:\n  reply:\n    limits: 5/60s\n     on_store_error: deny\n"
                      "  login: 5/60s\n   burst: 3\n",
    "rate-spellings.yaml": "policies:\n  a: 5 / 60s\n  b: 5/1.5s\n  c: 5/60 S\n  d: 5/60S\n"
                           "  e: 5/.5m\n  f: 5/60s/2\n  g: {a: 5/60s\n    b: 1/1s}\n",
}


def joined_literals(pattern, src, group):
    """The text of each match's adjacent C string literals (in `group`), joined as C
    joins them; matches whose escapes Python cannot read are left out."""
    out = []
    for m in re.finditer(pattern, src):
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(group))
        try:
            text = "".join(ast.literal_eval('"%s"' % p) for p in parts)
        except (ValueError, SyntaxError):
            continue
        out.append(text.encode("latin-1", "replace"))
    return out


def c_string_literals(path):
    """Config texts from the test table: the first string of each {"...", "t.yaml..."} row."""
    src = open(path, encoding="utf-8").read()
    return joined_literals(r'\{((?:\s*"(?:[^"\\]|\\.)*")+)\s*,\s*"t\.yaml', src, 1)


# ---- resp: 2-byte header (max_line - 1 as u16 LE), stream ----

def resp_enc(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def resp_seed(name, stream, max_line=4096):
    write("resp", name, struct.pack("<H", (max_line - 1) % 8192) + stream)


def resp_seeds():
    resp_seed("allow", resp_enc("ALLOW", "david", "reply"))
    resp_seed("all-verbs", resp_enc("ALLOW", "david", "reply", 3) + resp_enc("PEEK", "d", "r")
         + resp_enc("RESET", "u", "a") + resp_enc("PING") + resp_enc("PING", "hi")
         + resp_enc("QUIT"))
    resp_seed("connect", resp_enc("HELLO", 3) + resp_enc("CLIENT", "SETNAME", "x")
         + resp_enc("CLIENT", "SETINFO", "LIB-NAME", "redis-py") + resp_enc("SELECT", 0)
         + resp_enc("SELECT", 5) + resp_enc("AUTH", "pw") + resp_enc("INFO")
         + resp_enc("COMMAND", "DOCS"))
    resp_seed("errors", resp_enc("NOPE") + resp_enc("ALLOW", "u") + resp_enc("ALLOW", "", "r")
         + resp_enc("ALLOW", "u", "r", "0") + resp_enc("CLIENT", "KILL"))
    resp_seed("throttle", resp_enc("CL.THROTTLE", "user123", 15, 30, 60)
              + resp_enc("CL.THROTTLE", "k", 0, 1, 1, 0) + resp_enc("cl.throttle", "k", "-1", 1, 1)
              + resp_enc("CL.THROTTLE", "k", 1))
    resp_seed("overrides", resp_enc("OVERRIDE", "bob", "reply", "unlimited", "1h")
              + resp_enc("UNOVERRIDE", "bob", "reply") + resp_enc("OVERRIDES", 0)
              + resp_enc("OVERRIDE", "", "r", "blocked") + resp_enc("OVERRIDES", "-1"))
    resp_seed("pairs", resp_enc("MALLOW", "alice", "login", "1.2.3.4", "login_ip", "-", "all")
              + resp_enc("MPEEK", "a", "b", "", "d", 2) + resp_enc("MALLOW", "a")
              + resp_enc("MALLOW", *(["u", "a"] * 8 + [5])))
    resp_seed("binary-user", resp_enc("ALLOW", b"a b\r\n\x00}", "reply"))
    resp_seed("empty-arrays", b"*0\r\n*-1\r\n" + resp_enc("PING"))
    resp_seed("huge-array", b"*2147483647\r\n")
    resp_seed("negative-bulk", b"*1\r\n$-5\r\n")
    resp_seed("long-bulk", b"*1\r\n$5000\r\n" + b"x" * 100, max_line=64)
    resp_seed("no-crlf", b"*1\r\n$4\r\nPINGxx")
    resp_seed("pipeline", b"".join(resp_enc("ALLOW", "u%d" % i, "reply") for i in range(20)),
         max_line=40)


# ---- http: 4-byte header (max_line - 1 as u16 LE, listener flags, peer), stream ----

def http_seed(name, stream, max_line=4096, flags=2, peer=1):
    write("http", name, struct.pack("<HBB", (max_line - 1) % 32768, flags, peer) + stream)


def http_seeds():
    get = b"GET /v1/allow?user=alice&action=reply HTTP/1.1\r\nHost: x\r\n\r\n"
    http_seed("get", get)
    http_seed("pipeline", get * 3 + b"GET /v1/peek?user=b%20c&action=reply&cost=2 HTTP/1.1\r\n"
              b"Host: x\r\nConnection: close\r\n\r\n")
    body = b'{"user": "b\\u00e9\\ud83d\\ude00", "action": "up", "cost": 5}'
    http_seed("post-json", b"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    http_seed("reset", b"POST /v1/reset?user=u&action=a HTTP/1.1\r\nHost: x\r\n\r\n")
    # our parameters once each: a repeat is refused
    http_seed("repeated", b"GET /v1/allow?user=u&action=a&cost=1&COST=2 HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /auth/login?user=a&user=b&wait=1&wait=2 HTTP/1.1\r\nHost: x\r\n\r\n")
    # unknown keys' values of any type, nested (ignored, 32 levels at most)
    body = (b'{"meta": {"trace": "t", "tags": ["a", {"b": [[], {}, null, -1.5e3]}], "on": true},'
            b' "user": "u", "action": "up", "x": ' + b"[" * 33 + b"]" * 33 + b"}")
    http_seed("json-nested", b"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    http_seed("auth-xff", b"GET /auth/login HTTP/1.1\r\nHost: x\r\n"
              b"X-Forwarded-For: 203.0.113.9, 10.0.0.1, 127.0.0.1\r\n\r\n", flags=6)
    http_seed("auth-header", b"GET /auth/login?cost=2 HTTP/1.1\r\nHost: x\r\nX-User: k1\r\n\r\n",
              flags=11)
    http_seed("auth-untrusted", b"GET /auth/login HTTP/1.1\r\nHost: x\r\nX-Real-IP: ::1\r\n\r\n",
              flags=0, peer=2)
    http_seed("pairs", b"GET /v1/mallow?user=alice&action=login&user=1.2.3.4&action=login_ip"
              b"&cost=2 HTTP/1.1\r\nHost: x\r\n\r\nPOST /v1/mpeek?user=%41&action=a HTTP/1.1\r\n"
              b"Host: x\r\nContent-Length: 0\r\n\r\nGET /v1/mallow?user=a HTTP/1.1\r\n"
              b"Host: x\r\n\r\nGET /v1/mallow?" + b"&".join(b"user=u%d&action=a" % i
                                                          for i in range(9))
              + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    http_seed("http10", b"GET /v1/allow?user=u&action=a HTTP/1.0\r\n\r\n", peer=0)
    http_seed("errors", b"DELETE /v1/allow HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\n"
              b"Host: x\r\n\r\nGET /v1/allow?user=%zz HTTP/1.1\r\nHost: x\r\n\r\n")
    http_seed("chunked", b"POST /v1/allow HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    http_seed("folded", b"GET /v1/allow HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n")
    http_seed("huge", b"GET /v1/allow HTTP/1.1\r\nX: " + b"a" * 300, max_line=64)


def config_seeds():
    for name, text in CONFIGS.items():
        write("config", name, text if isinstance(text, bytes) else text.encode())
    for src, name in [("conf/ratelimitd.yaml", "conf-ratelimitd.yaml"),
                      ("tests/unit/configs/example.yaml", "contract-example.yaml"),
                      ("tests/unit/configs/unknown-redis-key.yaml", "unknown-redis-key.yaml"),
                      ("tests/unit/configs/three-errors.yaml", "three-errors.yaml")]:
        p = os.path.join(ROOT, src)
        if os.path.exists(p):
            write("config", name, open(p, "rb").read())
    t = os.path.join(ROOT, "tests", "unit", "test_config.c")
    if os.path.exists(t):
        for i, text in enumerate(c_string_literals(t)):
            write("config", "unit-case-%02d.yaml" % i, text)


# ---- envoy: a rules file, then NUL and a descriptor "k=v" per line ----

def c_literal_runs(path):
    """Every run of adjacent C string literals in a file, joined (comments between them
    left out)."""
    src = re.sub(r"/\*.*?\*/", "", open(path, encoding="utf-8").read(), flags=re.S)
    return joined_literals(r'(?:"(?:[^"\\\n]|\\.)*"\s*)+', src, 0)


def envoy_seeds():
    lookups = [b"k1=v1", b"k1=abc", b"p=x\nc=y", b"q=\nr=s", b"u=", b"mzx=", b"w=x-y",
               b"remote_address=127.0.0.1", b"plan=free\nuser=alice", b"path=/a/b"]
    texts = []
    for src in ("tests/unit/test_envoy_rules.c", "fuzz/fuzz_rls.c"):
        p = os.path.join(ROOT, src)
        if os.path.exists(p):
            texts += [t for t in c_literal_runs(p) if b"domain" in t or b"descriptors" in t]
    doc = os.path.join(ROOT, "docs", "envoy.md")
    if os.path.exists(doc):
        texts += [m.encode() for m in re.findall(r"```yaml\n(.*?)```", open(doc).read(), re.S)
                  if "domain:" in m]
    for i, text in enumerate(texts):
        write("envoy", "rules-%02d" % i, text + b"\0" + lookups[i % len(lookups)])


# ---- reply: 1 byte of chunk size (0 = whole), then RESP ----

def resp(*items):
    out = b""
    for it in items:
        if isinstance(it, bool):
            raise TypeError
        if isinstance(it, int):
            out += b":%d\r\n" % it
        elif isinstance(it, list):
            out += b"*%d\r\n" % len(it) + resp(*it)
        elif it is None:
            out += b"$-1\r\n"
        elif isinstance(it, bytes):
            out += b"$%d\r\n%s\r\n" % (len(it), it)
        elif isinstance(it, tuple):  # ("+", "OK") / ("-", "ERR x")
            out += it[0].encode() + it[1].encode() + b"\r\n"
    return out


def reply(name, data, chunk=0):
    write("reply", name, bytes([chunk]) + data)


def reply_seeds():
    reply("allowed", resp([1, 5, 4, 0, 60000]))
    reply("denied", resp([0, 5, 0, 41200, 59800]), chunk=1)
    reply("never", resp([0, 3, 3, -1, 0]), chunk=7)
    reply("funnel-16th", resp([0, 15, 0, 2000, 30000]))
    reply("batch-10", resp([1, 5, 4, 0, 60000, 0, 20, 0, 1000, 59000]), chunk=13)
    reply("batch-10-second-bad", resp([1, 5, 4, 0, 60000, 2, 20, 0, 1000, 59000]))
    reply("implausible", resp([2, 5, 4, 0, 1], [1, -1, 4, 0, 1], [1, 5, 4, -2, 1], [1, 5, 4, 0, -1]))
    reply("wrong-type-sentinel", resp([-1, 0, 0, 0, 0]))
    reply("pubsub-message", resp([b"message", b"rl:reset", b"reply:david"], [b"subscribe", b"rl:reset", 1]))
    reply("extremes", resp([1, 9223372036854775807, -9223372036854775808, -1, 0]))
    reply("bounds", resp([1, 2**53, 4, 2**40, 2**40], [1, 2**53 + 1, 4, 0, 1],
                         [0, 5, 0, 2**40 + 1, 1], [1, 5, 4, 0, 2**40 + 1]))
    reply("pairs-bounds", resp([1, 3, 2, 0, 1000, 1, 0, 1, 2**53, 2**40],
                               [1, 3, 2, 0, 1000, 1, 0, 1, 2, 2**40 + 1]))
    reply("int-overflow", b"*5\r\n:1\r\n:99999999999999999999\r\n:1\r\n:0\r\n:0\r\n")
    reply("short-array", resp([1, 5, 4, 0]))
    reply("long-array", resp([1, 5, 4, 0, 60000, 7]))
    reply("pairs-allowed", resp([1, 3, 2, 0, 1000, 1, 0]))
    reply("pairs-denied-shadow", resp([0, 10, 9, -1, 1000, 2, 3]))
    reply("pairs-bad-pair", resp([1, 3, 2, 0, 1000, 0, 0], [1, 3, 2, 0, 1000, 4, 9]))
    reply("pairs-failed-text", resp([-1, 0, 0, 0, 0, 0, 0, b"WRONGTYPE Operation"]))
    reply("empty-array", resp([]))
    reply("nil-element", resp([1, None, 4, 0, 1]))
    reply("string-element", resp([1, b"5", 4, 0, 1]))
    reply("status-element", b"*5\r\n:1\r\n+5\r\n:4\r\n:0\r\n:1\r\n")
    reply("error-element", b"*5\r\n:1\r\n-ERR x\r\n:4\r\n:0\r\n:1\r\n")
    reply("nested", resp([[1, 5, 4, 0, 60000], [0, 5, 0, 1, 2], 3, 4, 5]))
    reply("deep", b"*1\r\n" * 9 + b":1\r\n")
    for err in ["NOSCRIPT No matching script. Please use EVAL.",
                "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
                "LOADING Redis is loading the dataset in memory",
                "READONLY You can't write against a read only replica.",
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                "ERR Error running script (call to f_0123): @user_script:1: oops",
                "NOAUTH Authentication required."]:
        reply("error-" + err.split()[0].lower(), resp(("-", err)))
    reply("nil-bulk", resp(None))
    reply("nil-array", b"*-1\r\n")
    reply("status-ok", resp(("+", "OK")), chunk=2)
    reply("bulk", resp(b"hello", b"", b"a\r\nb"))
    reply("integer", resp(1))
    reply("pipeline", resp([1, 5, 4, 0, 60000], ("-", "BUSY busy"), [0, 5, 0, 10, 20], None,
                           ("+", "PONG")), chunk=3)
    reply("huge-array", b"*2000000000\r\n:1\r\n")
    reply("huge-array-2", b"*2147483647\r\n")
    reply("huge-array-over", b"*4294967297\r\n:1\r\n:2\r\n")
    reply("huge-bulk", b"$9999999999\r\nabc\r\n")
    reply("negative-lengths", b"*-2\r\n$-7\r\n")
    reply("garbage", b"hello world\r\n")
    reply("bad-type", b"!5\r\n:1\r\n")
    reply("no-crlf", b"*5\n:1\n:5\n:4\n:0\n:1\n")
    reply("partial", b"*5\r\n:1\r\n:5\r\n:4")


# ---- refuse: 1 byte of chunk seed, then a client's HTTP/2 opening ----

def h2_frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def refuse_seeds():
    pre = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    settings = h2_frame(4, 0, 0, b"\x00\x03\x00\x00\x00\x64" * 3)
    grpcio = pre + settings + h2_frame(8, 0, 0, b"\x00\x3f\x00\x01") + \
        h2_frame(1, 4, 1, b"\x83\x86" + b"x" * 38) + h2_frame(0, 1, 1, b"\x00" * 5)
    write("refuse", "grpcio", b"\x07" + grpcio)
    write("refuse", "preface-only", b"\x01" + pre)
    write("refuse", "settings-ack-then-headers", b"\x02" + pre + h2_frame(4, 1, 0) +
          h2_frame(1, 5, 5, b"\x82"))
    write("refuse", "even-stream", b"\x03" + pre + settings + h2_frame(1, 4, 2, b"\x82"))
    write("refuse", "huge-frame", b"\x04" + pre + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01")
    write("refuse", "http1", b"\x05POST / HTTP/1.1\r\nHost: x\r\n\r\n")
    write("refuse", "line", b"\x06ALLOW u a\n")


if __name__ == "__main__":
    proto_seeds()
    resp_seeds()
    http_seeds()
    config_seeds()
    reply_seeds()
    envoy_seeds()
    refuse_seeds()
    for kind in ("proto", "config", "reply", "envoy"):
        print(kind, len(os.listdir(os.path.join(CORPUS, kind))), "seeds")
