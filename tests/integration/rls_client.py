"""A real gRPC client (Debian's python3-grpcio) for Envoy's rate limit
service and gRPC health, with message classes made by python3-protobuf from
the repository's own proto/grpc files (compiled by protoc-c into a
descriptor set, so the test needs no generated Python code).

grpcio itself runs in a child process (grpc_child.py): a process that has
loaded it must not fork (see there), and the harness forks for every server
it starts. Here are stand-ins for the little of grpcio's API the tests use
(a channel's unary_unary, a call's future, RpcError with its code, details
and debug string, StatusCode, Compression), carrying bytes to the child and
its answers back."""

import enum
import itertools
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import threading
import types

try:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError:  # Debian's python3-protobuf, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SRCDIR = os.environ.get("RL_SRCDIR") or os.path.join(os.path.dirname(__file__), "..", "..")
PROTO_ROOT = os.path.join(SRCDIR, "proto", "grpc")
RLS_METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH_METHOD = "/grpc.health.v1.Health/Check"

_classes = None


def classes():
    """{short name: message class} for the messages of proto/grpc."""
    global _classes
    if _classes is None:
        out = os.path.join(tempfile.mkdtemp(prefix="rlpb-"), "rls.pb")
        subprocess.run(["protoc-c", "-I" + PROTO_ROOT, "--descriptor_set_out=" + out,
                        "--include_imports", "envoy/service/ratelimit/v3/rls.proto",
                        "grpc/health/v1/health.proto"], check=True)
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
        pool = descriptor_pool.DescriptorPool()
        for fd in fds.file:
            pool.Add(fd)
        factory = message_factory.MessageFactory(pool)

        def cls(name):
            return factory.GetPrototype(pool.FindMessageTypeByName(name))
        _classes = {
            "Request": cls("envoy.service.ratelimit.v3.RateLimitRequest"),
            "Response": cls("envoy.service.ratelimit.v3.RateLimitResponse"),
            "HealthRequest": cls("grpc.health.v1.HealthCheckRequest"),
            "HealthResponse": cls("grpc.health.v1.HealthCheckResponse"),
        }
    return _classes


def request(domain, descriptors, hits_addend=0):
    """descriptors: lists of (key, value) entries, or dicts {"entries": [...],
    "limit": (requests_per_unit, unit number), "hits_addend": n}."""
    req = classes()["Request"](domain=domain, hits_addend=hits_addend)
    for d in descriptors:
        if not isinstance(d, dict):
            d = {"entries": d}
        pd = req.descriptors.add()
        for k, v in d["entries"]:
            e = pd.entries.add()
            e.key, e.value = k, v
        if "limit" in d:
            pd.limit.requests_per_unit, pd.limit.unit = d["limit"]
        if "hits_addend" in d:
            pd.hits_addend.value = d["hits_addend"]
    return req


# ---- grpcio's API, its calls made by grpc_child.py ----

StatusCode = enum.Enum("StatusCode", [
    ("OK", 0), ("CANCELLED", 1), ("UNKNOWN", 2), ("INVALID_ARGUMENT", 3),
    ("DEADLINE_EXCEEDED", 4), ("NOT_FOUND", 5), ("ALREADY_EXISTS", 6),
    ("PERMISSION_DENIED", 7), ("RESOURCE_EXHAUSTED", 8), ("FAILED_PRECONDITION", 9),
    ("ABORTED", 10), ("OUT_OF_RANGE", 11), ("UNIMPLEMENTED", 12), ("INTERNAL", 13),
    ("UNAVAILABLE", 14), ("DATA_LOSS", 15), ("UNAUTHENTICATED", 16)])
Compression = enum.Enum("Compression", [("NoCompression", 0), ("Deflate", 1), ("Gzip", 2)])


class RpcError(Exception):
    """A call grpcio ended with a status other than OK; str() is grpcio's."""

    def __init__(self, code, details, debug, text):
        super().__init__(text)
        self._code = StatusCode[code] if code else None
        self._details, self._debug = details, debug

    def code(self):
        return self._code

    def details(self):
        return self._details

    def debug_error_string(self):
        return self._debug


# what the tests name grpc.X
grpc = types.SimpleNamespace(RpcError=RpcError, StatusCode=StatusCode, Compression=Compression)


class _Answer:
    """A request to the child, answered once."""

    def __init__(self, wait_limit):
        self.event = threading.Event()
        self.wait_limit = wait_limit
        self.ok, self.value = None, None

    def set(self, ok, value):
        self.ok, self.value = ok, value
        self.event.set()

    def get(self, timeout=None):
        if not self.event.wait(self.wait_limit if timeout is None else timeout):
            raise TimeoutError("grpc_child did not answer")
        if not self.ok:
            raise RpcError(*self.value)
        return self.value


class _Child:
    """The one grpc_child.py process of this test process, and a thread
    reading its answers."""

    _lock = threading.Lock()
    _the = None

    @classmethod
    def get(cls):
        with cls._lock:
            if cls._the is None:
                cls._the = cls()
            return cls._the

    def __init__(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grpc_child.py")
        # no preexec_fn: when the test process dies, the child reads the end
        # of its stdin and exits
        self.proc = subprocess.Popen([sys.executable, path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.lock = threading.Lock()
        self.answers, self.next_id, self.gone = {}, 0, False
        threading.Thread(target=self._read, daemon=True).start()

    def request(self, op, *args, wait_limit=60.0):
        with self.lock:
            rid, self.next_id = self.next_id, self.next_id + 1
            answer = self.answers[rid] = _Answer(wait_limit)
            if self.gone:
                answer.set(False, (None, "grpc_child exited", "", "grpc_child exited"))
                return answer
            data = pickle.dumps((rid, op) + args)
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        return answer

    def _read(self):
        out = self.proc.stdout
        while True:
            head = out.read(4)
            body = out.read(struct.unpack(">I", head)[0]) if len(head) == 4 else b""
            if not body:
                break
            rid, ok, value = pickle.loads(body)
            with self.lock:
                answer = self.answers.pop(rid)
            answer.set(ok, value)
        with self.lock:
            self.gone = True
            for answer in self.answers.values():
                answer.set(False, (None, "grpc_child exited", "", "grpc_child exited"))
            self.answers.clear()


class _Future:
    def __init__(self, answer, response_deserializer):
        self.answer, self.deserializer = answer, response_deserializer

    def result(self, timeout=None):
        value = self.answer.get(timeout)
        return self.deserializer(value) if self.deserializer else value


class _UnaryUnary:
    def __init__(self, channel, method, request_serializer, response_deserializer):
        self.channel, self.method = channel, method
        self.serializer, self.deserializer = request_serializer, response_deserializer

    def future(self, request, timeout=None, metadata=None, compression=None):
        data = self.serializer(request) if self.serializer else request
        answer = _Child.get().request(
            "call", self.channel.id, self.method, data, timeout,
            tuple(metadata) if metadata else None, compression.name if compression else None,
            wait_limit=None if timeout is None else timeout + 60.0)
        return _Future(answer, self.deserializer)

    def __call__(self, request, timeout=None, metadata=None, compression=None):
        return self.future(request, timeout, metadata, compression).result()


class Channel:
    """grpc.insecure_channel, or grpc.secure_channel when tls is (ca, key,
    cert) as bytes (key and cert None when no client certificate is sent)."""

    _ids = itertools.count()

    def __init__(self, target, tls=None):
        self.id, self.closed = next(Channel._ids), False
        _Child.get().request("open", self.id, target, tls).get()

    def unary_unary(self, method, request_serializer=None, response_deserializer=None):
        return _UnaryUnary(self, method, request_serializer, response_deserializer)

    def close(self):
        if not self.closed:
            self.closed = True
            _Child.get().request("close", self.id).get()


class RlsClient:
    def __init__(self, port, host="127.0.0.1", tls=None):
        """tls: None for h2c, or (ca_file, cert_file, key_file) with cert and
        key None when no client certificate is sent."""
        if tls:
            ca, cert, key = tls

            def read(path):
                if not path:
                    return None
                with open(path, "rb") as f:
                    return f.read()
            self.channel = Channel("%s:%d" % (host, port), (read(ca), read(key), read(cert)))
        else:
            self.channel = Channel("%s:%d" % (host, port))
        c = classes()
        self.rls = self.channel.unary_unary(
            RLS_METHOD, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=c["Response"].FromString)
        self.raw = self.channel.unary_unary(RLS_METHOD)  # bytes in, bytes out
        self.health = self.channel.unary_unary(
            HEALTH_METHOD, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=c["HealthResponse"].FromString)

    def close(self):
        self.channel.close()

    def call(self, domain, descriptors, hits_addend=0, timeout=5.0, metadata=None):
        return self.rls(request(domain, descriptors, hits_addend), timeout=timeout,
                        metadata=metadata)

    def check(self, service="", timeout=5.0):
        return self.health(classes()["HealthRequest"](service=service), timeout=timeout)


def statuses(resp):
    """[(code name, requests_per_unit or None, remaining, reset s or None)]."""
    c = classes()["Response"]
    out = []
    for s in resp.statuses:
        code = c.Code.Name(s.code)
        rpu = s.current_limit.requests_per_unit if s.HasField("current_limit") else None
        reset = s.duration_until_reset.seconds if s.HasField("duration_until_reset") else None
        out.append((code, rpu, s.limit_remaining, reset))
    return out


def overall(resp):
    return classes()["Response"].Code.Name(resp.overall_code)


def headers(resp):
    return [(h.key, h.value) for h in resp.response_headers_to_add]


# ---- a minimal HTTP/2 client on a plain socket, for what grpcio will not
# send (a grpc-timeout of our choosing, calls never finished) ----

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + stream.to_bytes(4, "big") + \
        payload


def literal_headers(fields):
    """HPACK literal fields without indexing or Huffman (names and values
    shorter than 127 bytes)."""
    return b"".join(b"\x00" + bytes([len(k)]) + k + bytes([len(v)]) + v for k, v in fields)


def call_headers(path=RLS_METHOD, extra=()):
    return literal_headers([(b":method", b"POST"), (b":scheme", b"http"),
                            (b":authority", b"ratelimitd"), (b":path", path.encode()),
                            (b"content-type", b"application/grpc")] + list(extra))


_pending = {}


def read_frames(sock, until_end_of=None, stop=None):
    """Frames (type, flags, stream, payload) until the stream until_end_of
    ends (END_STREAM), stop(frame) is true, or the connection closes.
    Bytes read past the last frame returned wait for the next call."""
    buf, frames = _pending.pop(sock.fileno(), b""), []
    while True:
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            f = (buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n])
            frames.append(f)
            buf = buf[9 + n:]
            if (until_end_of is not None and f[2] == until_end_of and f[0] in (0, 1)
                    and f[1] & 1) or (stop is not None and stop(f)):
                _pending[sock.fileno()] = buf
                return frames
        chunk = sock.recv(65536)
        if not chunk:
            return frames
        buf += chunk


def raw_call(sock, message, extra=(), stream=1):
    """One unary call on a connected socket (preface sent by the caller
    for stream 1): returns its frames and the response message (or None)."""
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    sock.sendall(frame(1, 4, stream, call_headers(extra=extra)) + frame(0, 1, stream, body))
    frames = read_frames(sock, until_end_of=stream)
    data = b"".join(f[3] for f in frames if f[0] == 0 and f[2] == stream)
    return frames, (data[5:] if len(data) >= 5 else None)
