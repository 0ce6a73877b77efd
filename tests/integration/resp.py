"""resp.py - the RESP2 wire format for the integration tests: one parser and
one encoder, shared by the blocking client (harness.Resp), the fake Redis
(fakeredis.py) and the sentinel proxy (sentinel_proxy.py).

Values as parsed: simple string -> str, error -> a RespError instance
(returned, not raised: it may sit inside an array), integer -> int, bulk
string -> bytes, array -> list, nil bulk or nil array -> None.
"""


class RespError(Exception):
    """An error reply (-ERR ...), with its text."""


def encode(*args):
    """A command as a RESP2 array of bulk strings; str and int are encoded."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Map(dict):
    """A RESP3 map (`%`), told apart from an array's flat pairs."""


class Verbatim(bytes):
    """A RESP3 verbatim string (`=`): its text, without the format."""

    def __new__(cls, fmt, text):
        v = super().__new__(cls, text)
        v.fmt = fmt
        return v


def parse(buf, i=0):
    """The complete RESP2 or RESP3 value that starts at buf[i]: (value,
    end), end being the offset just past it; None if buf holds only part
    of it. RESP3's map is a Map, its verbatim string a Verbatim; nulls,
    doubles and booleans raise, as ratelimitd sends none. Raises ValueError
    on bytes that are not RESP."""
    j = buf.find(b"\r\n", i)
    if j < 0:
        return None
    t, rest = buf[i:i + 1], buf[i + 1:j]
    if t == b"+":
        return rest.decode(errors="replace"), j + 2
    if t == b"-":
        return RespError(rest.decode(errors="replace")), j + 2
    if t == b":":
        return int(rest), j + 2
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None, j + 2
        end = j + 2 + n + 2
        if len(buf) < end:
            return None
        return buf[j + 2:j + 2 + n], end
    if t == b"=":
        n = int(rest)
        end = j + 2 + n + 2
        if len(buf) < end:
            return None
        body = buf[j + 2:j + 2 + n]
        if n < 4 or body[3:4] != b":" or buf[end - 2:end] != b"\r\n":
            raise ValueError("bad verbatim string: %r" % buf[i:end])
        return Verbatim(body[:3].decode(), body[4:]), end
    if t == b"%":
        r = parse(b"*%d\r\n" % (2 * int(rest)) + buf[j + 2:])
        if r is None:
            return None
        items, k = r
        return Map(zip(items[0::2], items[1::2])), j + 2 + k - len(b"*%d\r\n" % (2 * int(rest)))
    if t == b"*":
        n = int(rest)
        if n < 0:
            return None, j + 2
        items, k = [], j + 2
        for _ in range(n):
            r = parse(buf, k)
            if r is None:
                return None
            items.append(r[0])
            k = r[1]
        return items, k
    raise ValueError("bad RESP: %r" % buf[i:i + 40])


def parse_command(buf):
    """One client command from the start of buf: (list of bytes, end), or
    None if incomplete. Takes an array of bulk strings (what hiredis sends)
    or an inline command line (what a person types)."""
    if not buf:
        return None
    if buf[:1] != b"*":
        j = buf.find(b"\r\n")
        return None if j < 0 else (buf[:j].split(), j + 2)
    r = parse(buf)
    if r is not None and not all(isinstance(a, bytes) for a in r[0] or []):
        raise ValueError("command is not an array of bulk strings: %r" % buf[:40])
    return r


class Splitter:
    """Cuts a byte stream into complete RESP2 values, each as its raw bytes
    (for a proxy that forwards or drops whole values)."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        """The values completed by data (a list of bytes, maybe empty)."""
        self.buf += data
        out = []
        while True:
            r = parse(self.buf)
            if r is None:
                return out
            out.append(self.buf[:r[1]])
            self.buf = self.buf[r[1]:]
