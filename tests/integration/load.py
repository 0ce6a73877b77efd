"""load.py - client traffic through the daemon while a test changes what is
behind it (slots moving, a failover), with every reply recorded."""

import threading
import time

import harness
from harness import SLOW


class Traffic:
    """Client load for the duration of an operation: `threads` connections
    (thread i to ports[i % len(ports)]), each cycling through lines_for(i)
    with `depth` requests in flight, until stop(). Every reply is recorded as
    (thread, t_sent, t_replied, line, reply) in self.records (times from
    time.monotonic()); client-side exceptions in self.errors."""

    def __init__(self, ports, lines_for, threads=4, depth=8, timeout=None, pause=0.0):
        self.ports = list(ports)
        self.lines_for = lines_for
        self.nthreads = threads
        self.depth = depth
        self.timeout = timeout or 10 * SLOW
        self.pause = pause
        self.records = []
        self.errors = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.started = threading.Barrier(threads + 1)
        self.threads = []

    def start(self):
        for i in range(self.nthreads):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)
        self.started.wait(30)
        return self

    def _run(self, i):
        lines = list(self.lines_for(i))
        idx = 0
        try:
            with harness.Client(port=self.ports[i % len(self.ports)],
                                timeout=self.timeout) as c:
                c.request("PING")
                self.started.wait(30)
                while not self.stopping.is_set():
                    batch = [lines[(idx + j) % len(lines)] for j in range(self.depth)]
                    idx += self.depth
                    t0 = time.monotonic()
                    c.send(*batch)
                    for ln in batch:
                        r = c.readline()
                        # list.append is atomic: readers may look while it runs
                        self.records.append((i, t0, time.monotonic(), ln, r))
                    if self.pause:
                        time.sleep(self.pause)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            with self.lock:
                self.errors.append("thread %d: %r" % (i, e))

    def count(self, lines):
        """{line: replies so far} for the given lines."""
        want = set(lines)
        out = dict.fromkeys(want, 0)
        for rec in list(self.records):
            if rec[3] in want:
                out[rec[3]] += 1
        return out

    def stop(self, timeout=None):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout or 30 * SLOW)
        alive = [t for t in self.threads if t.is_alive()]
        if alive:
            self.errors.append("%d traffic threads still running" % len(alive))
        self.records = sorted(self.records, key=lambda r: r[2])
        return self.records

    def by_line(self):
        out = {}
        for rec in self.records:
            out.setdefault(rec[3], []).append(rec)
        return out
