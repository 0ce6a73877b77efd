"""grpc_child.py - grpcio's channels and calls for rls_client, in a process of
their own, so that no test process ever loads gRPC.

Why: grpcio 1.51 (Debian's python3-grpcio) registers a pthread_atfork handler
for its event engine whenever a channel is made, whatever
GRPC_ENABLE_FORK_SUPPORT says; at every fork() it stops the engine's threads
and restarts them. The harness forks for each redis-server and daemon
(preexec_fn rules out vfork), and when grpc destroys a closed channel's engine
on one of its own threads during such a fork, it asserts ("thread_pool.cc:225
assertion failed: state_ == State::kRunning") and aborts the test process.
This process never forks, so grpc's fork handlers never run.

Protocol (stdin to stdout, each message a 4-byte big-endian length and a
pickle): requests (id, "open", channel, target, tls), (id, "call", channel,
method, request bytes, timeout, metadata, compression name), (id, "close",
channel); answers (id, True, value) or (id, False, (status code name,
details, debug error string, str of the error)). Calls run concurrently and
are answered as they finish. Ends when stdin ends.
"""

import os
import pickle
import struct
import sys
import threading

try:
    import grpc
except ImportError:  # Debian's python3-grpcio, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    import grpc

_out = sys.stdout.buffer
_out_lock = threading.Lock()


def child_read_exact(f, n):
    buf = b""
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def child_send(rid, ok, value):
    data = pickle.dumps((rid, ok, value))
    with _out_lock:
        _out.write(struct.pack(">I", len(data)) + data)
        _out.flush()


def child_error(e):
    if isinstance(e, grpc.RpcError) and hasattr(e, "code"):
        return (e.code().name, e.details(), e.debug_error_string(), str(e))
    return (None, repr(e), "", repr(e))


def child_answer(rid, fut):
    try:
        child_send(rid, True, fut.result())
    except Exception as e:  # noqa: BLE001 - every outcome is answered
        child_send(rid, False, child_error(e))


def child_open(target, tls):
    """tls: None for h2c, or (ca, key, cert) as bytes (key and cert None
    when no client certificate is sent)."""
    if tls is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, grpc.ssl_channel_credentials(*tls))


def main():
    inp = sys.stdin.buffer
    channels = {}
    while True:
        head = child_read_exact(inp, 4)
        if head is None:
            break
        body = child_read_exact(inp, struct.unpack(">I", head)[0])
        if body is None:
            break
        rid, op, *args = pickle.loads(body)
        try:
            if op == "open":
                chan, target, tls = args
                channels[chan] = child_open(target, tls)
                child_send(rid, True, None)
            elif op == "call":
                chan, method, request, timeout, metadata, compression = args
                fut = channels[chan].unary_unary(method).future(
                    request, timeout=timeout, metadata=metadata,
                    compression=getattr(grpc.Compression, compression) if compression else None)
                fut.add_done_callback(lambda f, rid=rid: child_answer(rid, f))
            elif op == "close":
                channels.pop(args[0]).close()
                child_send(rid, True, None)
            else:
                child_send(rid, False, (None, "unknown op %r" % op, "", "unknown op %r" % op))
        except Exception as e:  # noqa: BLE001 - answered, not fatal
            child_send(rid, False, child_error(e))
    # the test process is gone or done: no orderly grpc shutdown is needed
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
