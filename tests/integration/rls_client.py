"""A real gRPC client (Debian's python3-grpcio) for Envoy's rate limit
service and gRPC health, with message classes made by python3-protobuf from
the repository's own proto/grpc files (compiled by protoc-c into a
descriptor set, so the test needs no generated Python code)."""

import os
import subprocess
import sys
import tempfile

# grpcio's core registers pthread_atfork handlers that stop its threads
# before every fork() and start them again after; the harness forks for each
# daemon and redis-server it spawns (preexec_fn forces fork over vfork), and
# under load one such restart aborted the test process in grpc's own code
# (thd.h: "assertion failed: state_ == FAILED", a test-loop run with a busy
# core). Our children exec at once and never use gRPC: no fork support is
# needed. Read by grpc when it initializes, so set before the import.
os.environ["GRPC_ENABLE_FORK_SUPPORT"] = "false"

try:
    import grpc
except ImportError:  # Debian's python3-grpcio, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import grpc
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
            creds = grpc.ssl_channel_credentials(read(ca), read(key), read(cert))
            self.channel = grpc.secure_channel("%s:%d" % (host, port), creds)
        else:
            self.channel = grpc.insecure_channel("%s:%d" % (host, port))
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
