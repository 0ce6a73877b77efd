"""systemd beyond Type=notify, with systemd's own systemd-socket-activate:
sockets passed to the daemon and matched to listen entries by name or
address; a socket no entry takes refused; clients that keep connecting
while the daemon restarts on the same sockets (none refused, every request
answered); WATCHDOG=1 from the event loop only while it turns; STATUS=
lines for `systemctl status`."""

import os
import signal
import socket
import subprocess
import threading
import time
import unittest

from harness import (DAEMON, SANITIZER_REPORT, SLOW, DaemonTest, free_port, scrape_metrics, spawn,
                     wait_until)

ACTIVATE = "/usr/bin/systemd-socket-activate"


class ActivationTest(DaemonTest):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.port, self.admin = free_port(), free_port()
        self.cfg = os.path.join(self.tmpdir, "rl.yaml")
        self.log = os.path.join(self.tmpdir, "rl.stderr")
        self.pid_file = os.path.join(self.tmpdir, "rl.pid")
        # registered first, so it runs last: after the daemons have exited
        self.addCleanup(self.no_sanitizer_report)

    def no_sanitizer_report(self):
        """These daemons are not the harness's Daemon, whose log it checks:
        an ASan, LSan (at exit) or UBSan report in theirs fails the test too."""
        if not os.path.exists(self.log):
            return
        log = self.read_log()
        m = SANITIZER_REPORT.search(log)
        if m:
            self.fail("sanitizer report in the daemon's log:\n" +
                      log[max(0, m.start() - 200):m.start() + 3000])

    def write_config(self, extra_listen="", metrics=None):
        with open(self.cfg, "w") as f:
            f.write("listen:\n"
                    "  - 127.0.0.1:%d\n"
                    "  - {address: 127.0.0.1:%d, admin: true, name: admin}\n%s"
                    "redis:\n  address: %s\n  timeout: 1s\n"
                    "policies:\n  reply: 100000/60s\n"
                    % (self.port, self.admin, extra_listen, self.redis.address))
            if metrics:
                f.write("metrics: {listen: %s}\n" % metrics)

    def activate(self, argv, sockets, names):
        """systemd-socket-activate listening on sockets (host:port), named
        names, running argv once the first connection comes (or at once:
        it execs at the first connection, so the test connects to start it)."""
        cmd = [ACTIVATE]
        for s in sockets:
            cmd += ["-l", s]
        cmd += ["--fdname=" + ":".join(names)] + argv
        errf = open(self.log, "ab")
        self.addCleanup(errf.close)
        p = spawn(cmd, stdout=errf, stderr=errf, stdin=subprocess.DEVNULL, cwd=self.tmpdir,
                  start_new_session=True)
        self.addCleanup(self.kill_group, p)
        wait_until(lambda: self.listening(self.port), 10 * SLOW, what="the sockets")
        return p

    def kill_group(self, p):
        """SIGTERM first, so a sanitized daemon exits through LeakSanitizer's
        check; SIGKILL only if it does not."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=10 * SLOW)
                return
            except subprocess.TimeoutExpired:
                pass

    def listening(self, port):
        with open("/proc/net/tcp") as f:
            return any(":%04X 00000000:0000 0A" % port in ln for ln in f)

    def read_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def request(self, port, line, timeout=None):
        """One request on a new connection: the reply line, or an exception."""
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout or 5 * SLOW)
        try:
            s.sendall(line.encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                d = s.recv(4096)
                if not d:
                    raise ConnectionError("closed without a reply")
                data += d
            return data.decode().strip()
        finally:
            s.close()

    def test_sockets_matched_by_name_and_address(self):
        self.write_config()
        # the admin socket first: its name, not its position, finds its entry
        self.activate([DAEMON, "-c", self.cfg],
                      ["127.0.0.1:%d" % self.admin, "127.0.0.1:%d" % self.port],
                      ["admin", "other"])
        self.assertRegex(self.request(self.port, "ALLOW a reply"), r"^ALLOWED ")
        # RESET works on the admin entry's socket only: the entries got the right ones
        self.assertEqual(self.request(self.admin, "RESET a reply"), "OK")
        self.assertRegex(self.request(self.port, "RESET a reply"), r"^ERR forbidden")
        log = self.read_log()
        self.assertIn("socket activation: 2 sockets passed by systemd", log)
        self.assertIn("listen 127.0.0.1:%d: the socket systemd passed" % self.port, log)
        self.assertIn("listen 127.0.0.1:%d: the socket systemd passed" % self.admin, log)

    def test_metrics_socket_by_name_and_by_address(self):
        """metrics.listen takes a passed socket too: the one named
        "metrics", else the one at its address (one socket unit names all
        its sockets alike, so the address is what it has)."""
        for name in ("metrics", "ratelimitd"):
            mport = free_port()
            self.write_config(metrics="127.0.0.1:%d" % mport)
            p = self.activate([DAEMON, "-c", self.cfg],
                              ["127.0.0.1:%d" % mport, "127.0.0.1:%d" % self.port,
                               "127.0.0.1:%d" % self.admin],
                              [name, name, "admin"])
            self.assertRegex(self.request(self.port, "ALLOW m reply"), r"^ALLOWED ")
            wait_until(lambda: "metrics 127.0.0.1:%d: the socket systemd passed" % mport
                       in self.read_log(), 10 * SLOW, what="the metrics socket taken")
            m = scrape_metrics(mport)
            self.assertEqual(m['ratelimitd_requests_total{command="allow"}'], 1)
            self.kill_group(p)

    def test_a_socket_no_entry_takes_is_refused(self):
        self.write_config()
        stray = free_port()
        p = self.activate([DAEMON, "-c", self.cfg],
                          ["127.0.0.1:%d" % self.port, "127.0.0.1:%d" % self.admin,
                           "127.0.0.1:%d" % stray], ["a", "admin", "stray"])
        # the first connection makes systemd-socket-activate exec the daemon
        try:
            self.request(self.port, "PING", timeout=2 * SLOW)
        except OSError:
            pass
        self.assertEqual(p.wait(timeout=10 * SLOW), 1)
        self.assertIn("the socket named stray (127.0.0.1:%d) matches no listen entry" % stray,
                      self.read_log())

    def test_restart_loses_no_connection(self):
        """The sockets stay with the parent (as with systemd) while the
        daemon is stopped and started again 5 times; a client connecting
        all along is never refused and every request is answered."""
        self.write_config()
        stop = os.path.join(self.tmpdir, "stop")
        # the parent keeps the sockets and restarts the daemon when it exits,
        # as systemd does with Restart=; LISTEN_PID must be the daemon's own
        loop = ('while [ ! -e %s ]; do sh -c \'LISTEN_PID=$$ exec "$0" -c "$1" -p "$2"\' '
                '%s %s %s; done' % (stop, DAEMON, self.cfg, self.pid_file))
        self.activate(["/bin/bash", "-c", loop],
                      ["127.0.0.1:%d" % self.port, "127.0.0.1:%d" % self.admin],
                      ["client", "admin"])
        self.assertRegex(self.request(self.port, "ALLOW warmup reply"), r"^ALLOWED ")
        wait_until(lambda: os.path.exists(self.pid_file), 10 * SLOW, what="the pid file")

        done = threading.Event()
        results = {"answered": 0, "refused": [], "closed": 0, "other": []}

        def client():
            while not done.is_set():
                try:
                    reply = self.request(self.port, "ALLOW u reply")
                    if reply.startswith("ALLOWED "):
                        results["answered"] += 1
                    else:
                        results["other"].append(reply)
                except ConnectionRefusedError as e:
                    results["refused"].append(repr(e))
                except ConnectionError:
                    # accepted by a daemon that then stopped without
                    # answering: conn_drain must take the request
                    results["closed"] += 1
                except OSError as e:
                    results["other"].append(repr(e))

        t = threading.Thread(target=client)
        t.start()
        pids = []
        try:
            for _ in range(5):
                time.sleep(0.2 * SLOW)
                with open(self.pid_file) as f:
                    pid = int(f.read())
                pids.append(pid)
                before = results["answered"]
                os.kill(pid, signal.SIGTERM)

                def restarted():
                    try:
                        with open(self.pid_file) as f:
                            return int(f.read()) != pid
                    except (OSError, ValueError):
                        return False
                wait_until(restarted, 10 * SLOW, what="the next daemon")
                wait_until(lambda: results["answered"] > before, 10 * SLOW,
                           what="answers from the next daemon")
        finally:
            done.set()
            t.join(30)
            open(stop, "w").close()
        self.assertEqual(len(set(pids)), 5, pids)
        self.assertEqual(results["refused"], [])
        self.assertEqual(results["closed"], 0, results)
        self.assertEqual(results["other"], [])
        self.assertGreater(results["answered"], 50, results)
        log = self.read_log()
        self.assertEqual(log.count("socket activation: 2 sockets passed by systemd"), 6, log)


class WatchdogTest(DaemonTest):
    def notify_socket(self):
        path = os.path.join(self.tmpdir, "notify.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(path)
        self.addCleanup(s.close)
        return path, s

    def messages(self, s, seconds):
        """[(monotonic time, {key: value})] received within seconds."""
        out = []
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return out
            s.settimeout(left)
            try:
                msg = s.recv(4096).decode()
            except socket.timeout:
                return out
            out.append((time.monotonic(),
                        dict(ln.split("=", 1) for ln in msg.split("\n") if "=" in ln)))

    def test_watchdog_pings_only_while_the_loop_turns(self):
        path, s = self.notify_socket()
        self.redis = self.start_redis()
        self.daemon = self.start_daemon({"reply": "5/60s"}, wait=False,
                                        env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "300000"})
        msgs = self.messages(s, 1.5)
        ready = [m for _, m in msgs if m.get("READY") == "1"]
        self.assertTrue(ready, msgs)
        self.assertRegex(ready[0]["STATUS"],
                         r"^serving: 1 policy, 0 clients, redis (up|DOWN: .*), 0\.0 decisions/s$")
        pings = [t for t, m in msgs if m.get("WATCHDOG") == "1"]
        # every 100 ms: at least 5 in the second after READY, even on a slow box
        self.assertGreaterEqual(len(pings), 5, msgs)
        self.daemon.wait_log(r"watchdog: WATCHDOG=1 every 100 ms \(WatchdogSec=300 ms\)")
        # a loop that does not turn sends none
        self.daemon.signal(signal.SIGSTOP)
        self.messages(s, 0.1)  # what was already sent
        stopped = self.messages(s, 0.6)
        self.daemon.signal(signal.SIGCONT)
        self.assertEqual([m for _, m in stopped if m.get("WATCHDOG")], [])
        again = self.messages(s, 1.0)
        self.assertTrue([m for _, m in again if m.get("WATCHDOG") == "1"], again)

    def test_no_watchdog_without_systemd_asking(self):
        path, s = self.notify_socket()
        self.redis = self.start_redis()
        self.daemon = self.start_daemon({"reply": "5/60s"}, wait=False,
                                        env={"NOTIFY_SOCKET": path})
        msgs = self.messages(s, 1.0)
        self.assertTrue([m for _, m in msgs if m.get("READY") == "1"], msgs)
        self.assertEqual([m for _, m in msgs if "WATCHDOG" in m], [])

    def test_status_counts_clients_and_decisions(self):
        path, s = self.notify_socket()
        self.redis = self.start_redis()
        self.daemon = self.start_daemon({"reply": "1000/60s", "login": "3/1s"}, wait=False,
                                        env={"NOTIFY_SOCKET": path})
        self.messages(s, 0.5)
        self.daemon.wait_ready()
        with self.daemon.client() as c, self.daemon.client() as c2:
            for _ in range(50):
                c.request("ALLOW u reply")
            c2.request("PING")
            msgs = self.messages(s, 5.0 + 2 * SLOW)
            status = [m["STATUS"] for _, m in msgs if "STATUS" in m]
            self.assertTrue(status, msgs)
            for st in status:
                self.assertRegex(st, r"^serving: 2 policies, 2 clients, redis up, "
                                 r"(\d+\.\d) decisions/s$")
            # 50 decisions, counted over intervals of 5 s
            rates = [float(st.rsplit(", ", 1)[1].split()[0]) for st in status]
            self.assertGreater(max(rates), 0, status)
            self.assertLessEqual(sum(rates), 50 / 4.0, status)
        # Redis gone: said in the status too
        self.redis.stop()
        with self.daemon.client() as c:
            c.request("ALLOW u reply")
        msgs = self.messages(s, 5.0 + 2 * SLOW)
        status = [m["STATUS"] for _, m in msgs if "STATUS" in m]
        self.assertTrue(status, msgs)
        self.assertRegex(status[-1], r"redis DOWN: ")


if __name__ == "__main__":
    unittest.main()
