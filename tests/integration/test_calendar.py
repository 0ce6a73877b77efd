"""Calendar quotas (issue 30, item 1): limits per day, week, month or year
in a policy's time zone, with an anchor (a billing day), for fixed_window
and sliding_window_counter. reset_ms, HTTP's RateLimit and Retry-After and
Envoy's duration_until_reset are exact to the boundary, computed here with
Python's zoneinfo; two tenants with their own billing days (config and
run-time overrides, a tenant's own time zone); the memory store too; and
through a month end, 29 February and a day of 23 hours with the daemon's
clock set by libfaketime. The windows' instants themselves, through every
switch, are tests/vectors_calendar.txt (in Redis and in C)."""

import http.client
import os
import time
import unittest

from harness import SLOW, Client, DaemonTest, free_port
from rls_client import RlsClient, statuses
from test_vectors import Calendar

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SLACK_MS = 250 * SLOW  # the request's own time, between reading the clock and the answer

POLICIES = {
    "berlin": "{algorithm: fixed_window, limits: 3/month, timezone: Europe/Berlin}",
    "bill": ("{algorithm: fixed_window, limits: 100/month, overrides: {"
             "acme: {limits: 100/month@15}, "
             "beta: {limits: 100/month@28, timezone: Asia/Tokyo}}}"),
    "weekly": "{algorithm: sliding_window_counter, limits: 50/week@sunday, "
              "timezone: America/New_York}",
    "fiscal": "{algorithm: fixed_window, limits: [2/day, 1000/year@04-01], "
              "timezone: Australia/Sydney}",
}


def length_s(unit, anchor, tz, now=None):
    """The length in seconds of the calendar window holding now."""
    now = time.time() if now is None else now
    b = [int(x) for x in Calendar(unit, anchor, tz).bounds(int(now * 1e6)).split(":")]
    return (b[3] - b[2]) // 1000


def policy_w(hdrs):
    """The w= of a RateLimit-Policy header field, in seconds."""
    return int(hdrs["RateLimit-Policy"].rsplit("w=", 1)[1])


def until(unit, anchor, tz, now=None):
    """ms from now to the end of the calendar window holding now."""
    now = time.time() if now is None else now
    b = [int(x) for x in Calendar(unit, anchor, tz).bounds(int(now * 1e6)).split(":")]
    return b[3] - now * 1000


class CalendarTest(DaemonTest):
    def assertResetNear(self, reply, want_ms, what):
        reset = int(reply.split()[4])
        self.assertLess(abs(reset - want_ms), SLACK_MS,
                        "%s: reset %d ms, the boundary is %d ms away (%s)"
                        % (what, reset, want_ms, reply))

    def test_reset_is_the_boundary(self):
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES)
        with Client(d.port) as c:
            for line, unit, anchor, tz in (("ALLOW ann berlin", "month", "", "Europe/Berlin"),
                                           ("ALLOW ann weekly", "week", "sunday",
                                            "America/New_York"),
                                           ("ALLOW ann bill", "month", "", "UTC")):
                self.assertResetNear(c.request(line), until(unit, anchor, tz), line)
            # 2/day binds first, then the year from 1 April in Sydney
            r = c.request("ALLOW ann fiscal")
            self.assertResetNear(r, until("day", "", "Australia/Sydney"), r)
            c.request("ALLOW ann fiscal")
            r = c.request("ALLOW ann fiscal")
            self.assertRegex(r, r"^DENIED 2 0 ")
            self.assertLess(abs(int(r.split()[3]) - until("day", "", "Australia/Sydney")),
                            SLACK_MS, r)
            # the month's count, then a denial that says when it ends
            c.request("ALLOW ann berlin")
            c.request("ALLOW ann berlin")
            r = c.request("ALLOW ann berlin")
            self.assertRegex(r, r"^DENIED 3 0 ")
            self.assertLess(abs(int(r.split()[3]) - until("month", "", "Europe/Berlin")),
                            SLACK_MS, r)
        # the key is the month's, its value the window's start (ms)
        with self.redis.resp() as r:
            v = r.call("GET", "rl:{berlin:ann}:wmonth").decode()
        start = Calendar("month", "", "Europe/Berlin").bounds(int(time.time() * 1e6)).split(":")[2]
        self.assertEqual(v, "%s:3" % start)

    def test_two_tenants_two_billing_days(self):
        """Overrides with their own anchors (and one its own time zone), and
        a run-time OVERRIDE with one: each tenant's month ends on its day."""
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES)
        with Client(d.port) as c:
            for user, anchor, tz in (("acme", "15", "UTC"), ("beta", "28", "Asia/Tokyo"),
                                     ("gus", "", "UTC")):
                r = c.request("ALLOW %s bill" % user)
                self.assertResetNear(r, until("month", anchor, tz), user)
            self.assertEqual(c.request("OVERRIDE carl bill 5/month@3"), "OK")
            r = c.request("ALLOW carl bill")
            self.assertRegex(r, r"^ALLOWED 5 4 ")
            self.assertResetNear(r, until("month", "3", "UTC"), "carl")
            self.assertRegex(c.request("OVERRIDE carl bill 5/month@32"),
                             r"^ERR .*a month's anchor is a day of the month, 1 to 31")

    def test_runtime_override_zone(self):
        """A run-time OVERRIDE's calendar limits count in the policy's
        time zone (UTC for a policy without one), or in the one the spec
        names (timezone=), which OVERRIDES shows and a restarted daemon
        reads back from Redis."""
        self.redis = self.start_redis()
        d = self.start_daemon(POLICIES)
        with Client(d.port) as c:
            for user, action, spec, tz in (("dan", "berlin", "600/day", "Europe/Berlin"),
                                           ("dan", "bill", "600/day", "UTC"),
                                           ("eve", "bill", "600/day,timezone=Asia/Tokyo",
                                            "Asia/Tokyo"),
                                           ("eve", "berlin", "600/day,timezone=UTC", "UTC")):
                self.assertEqual(c.request("OVERRIDE %s %s %s" % (user, action, spec)), "OK")
                r = c.request("ALLOW %s %s" % (user, action))
                self.assertRegex(r, r"^ALLOWED 600 599 ")
                self.assertResetNear(r, until("day", "", tz), "%s %s" % (user, spec))
            self.assertEqual(c.request("OVERRIDES 3"),
                             "OVERRIDE 3 eve bill 600/day,timezone=Asia/Tokyo -1")
            for spec, why in (("600/day,timezone=Mars/Olympus", "unknown time zone"),
                              ("600/day,timezone=../x", "timezone= takes a name of tzdata"),
                              ("600/1h,timezone=Asia/Tokyo", "timezone= is for calendar limits")):
                self.assertRegex(c.request("OVERRIDE eve bill " + spec),
                                 r"^ERR syntax .*%s" % why, spec)
        d.stop()
        d = self.start_daemon(POLICIES, name="rl2")
        with Client(d.port) as c:
            # a started daemon reads the stored overrides in the background:
            # until then a pair counts by its policy (PEEK charges nothing)
            end = time.monotonic() + 10 * SLOW
            while not c.request("PEEK eve bill").startswith("ALLOWED 600 ") and \
                    time.monotonic() < end:
                time.sleep(0.02)
            r = c.request("ALLOW eve bill")
            self.assertRegex(r, r"^ALLOWED 600 598 ")
            self.assertResetNear(r, until("day", "", "Asia/Tokyo"), "eve after a restart")

    def test_http_and_grpc_say_the_boundary(self):
        self.redis = self.start_redis()
        port, hport, gport = free_port(), free_port(), free_port()
        rules = os.path.join(self.tmpdir, "rules.yaml")
        with open(rules, "w") as f:
            f.write("domain: api\ndescriptors:\n  - key: tenant\n"
                    "    rate_limit: {unit: month, requests_per_unit: 2, calendar: true, "
                    "timezone: Europe/Berlin, anchor: 15}\n")
        listen = ['"127.0.0.1:%d"' % port, '{address: "127.0.0.1:%d", protocol: http}' % hport,
                  '{address: "127.0.0.1:%d", protocol: grpc}' % gport]
        self.start_daemon(POLICIES, port=port, listen=listen, admin=False,
                          envoy="{config: %s}" % rules)
        h = http.client.HTTPConnection("127.0.0.1", hport, timeout=10 * SLOW)
        self.addCleanup(h.close)
        for i in range(4):
            h.request("GET", "/v1/allow?user=hal&action=berlin")
            resp = h.getresponse()
            body = resp.read()
            hdrs = dict(resp.getheaders())
        self.assertEqual(resp.status, 429, body)
        # w= is the window in force: this month's own length, not 31 days and an hour
        self.assertEqual(policy_w(hdrs), length_s("month", "", "Europe/Berlin"), hdrs)
        want = until("month", "", "Europe/Berlin") / 1000
        self.assertLess(abs(int(hdrs["Retry-After"]) - want), 1 + SLACK_MS / 1000, hdrs)
        t = int(hdrs["RateLimit"].rsplit("t=", 1)[1])
        self.assertLess(abs(t - want), 1 + SLACK_MS / 1000, hdrs)
        # an override's own anchor and zone: Tokyo's month from the 28th
        h.request("GET", "/v1/allow?user=beta&action=bill")
        resp = h.getresponse()
        resp.read()
        hdrs = dict(resp.getheaders())
        self.assertEqual(resp.status, 200, hdrs)
        self.assertEqual(policy_w(hdrs), length_s("month", "28", "Asia/Tokyo"), hdrs)
        c = RlsClient(gport)
        self.addCleanup(c.close)
        got = c.call("api", [[("tenant", "t1")]])
        st = statuses(got)[0]
        self.assertEqual(st[:3], ("OK", 2, 1))
        self.assertEqual(got.statuses[0].current_limit.unit, 5)  # MONTH
        want = until("month", "15", "Europe/Berlin") / 1000
        self.assertLess(abs(got.statuses[0].duration_until_reset.seconds - want),
                        1 + SLACK_MS / 1000, got)

    def test_memory_store_alike(self):
        port = free_port()
        d = self.start_daemon(config='listen: ["127.0.0.1:%d"]\nstore: memory\npolicies:\n%s'
                              % (port, "".join("  %s: %s\n" % kv for kv in POLICIES.items())),
                              port=port)
        with Client(d.port) as c:
            self.assertResetNear(c.request("ALLOW ivy berlin"),
                                 until("month", "", "Europe/Berlin"), "memory")
            self.assertResetNear(c.request("ALLOW beta bill"),
                                 until("month", "28", "Asia/Tokyo"), "memory beta")

    def test_config_errors(self):
        self.assertConfigChecks([
            ("policies:\n  p: {limits: 5/month}\n",
             "a calendar window (day, week, month, year) is for fixed_window and "
             "sliding_window_counter only"),
            ("policies:\n  p: {algorithm: fixed_window, limits: 5/month@0}\n",
             "a month's anchor is a day of the month, 1 to 31"),
            ("policies:\n  p: {algorithm: fixed_window, limits: 5/week@funday}\n",
             "a week's anchor is its first day, monday to sunday"),
            ("policies:\n  p: {algorithm: fixed_window, limits: 5/year@02-30}\n",
             "a year's anchor is its first day, MM-DD"),
            ("policies:\n  p: {algorithm: fixed_window, limits: [5/month, 9/month]}\n",
             "two limits of one policy have the same window"),
            ("policies:\n  p: {algorithm: fixed_window, limits: 5/month, timezone: Mars/Base}\n",
             'unknown time zone "Mars/Base"'),
            ("policies:\n  p: {algorithm: fixed_window, limits: 5/day@3}\n",
             "a day has no anchor"),
        ])


@unittest.skipUnless(os.path.exists(FAKETIME), "libfaketime (Debian's faketime) is missing")
class FakedClockTest(DaemonTest):
    """The daemon's clock set by libfaketime (store: memory; Redis itself
    will not start under libfaketime, so the script's side is the vectors'
    injected time): a month end on 29 February and Berlin's day of 23
    hours, live."""

    def start_at(self, when, hport=None):
        """A daemon on the memory store with its clock at `when` (UTC);
        hport: an HTTP listener too."""
        port = free_port()
        env = {"LD_PRELOAD": FAKETIME, "FAKETIME": "@" + when, "TZ": "UTC",
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
        listen = '"127.0.0.1:%d"' % port
        if hport:
            listen += ', {address: "127.0.0.1:%d", protocol: http}' % hport
        return self.start_daemon(
            config='listen: [%s]\nstore: memory\npolicies:\n'
                   '  m: {algorithm: fixed_window, limits: 3/month}\n'
                   '  d: {algorithm: fixed_window, limits: 1/day, timezone: Europe/Berlin}\n'
                   '  q: {algorithm: fixed_window, limits: 600/day, timezone: Europe/Berlin}\n'
                   % listen, port=port, env=env)

    def test_through_29_february(self):
        d = self.start_at("2024-02-29 23:59:55")
        with Client(d.port) as c:
            got = [c.request("ALLOW zed m") for _ in range(4)]
            self.assertEqual([r.split()[0] for r in got], ["ALLOWED"] * 3 + ["DENIED"], got)
            # denied until March: the retry is the time left of February
            retry = int(got[3].split()[3])
            self.assertLessEqual(retry, 5000)
            self.assertEqual(int(got[3].split()[4]), retry)
            time.sleep(retry / 1000 + 0.2)
            r = c.request("ALLOW zed m")
            # March: 31 days from its first instant, less what has passed of it
            self.assertRegex(r, r"^ALLOWED 3 2 0 ")
            self.assertGreater(int(r.split()[4]), 31 * 86400000 - 60000)
            self.assertLessEqual(int(r.split()[4]), 31 * 86400000)

    def skewed(self, offset):
        """A daemon on a real Redis with its clock `offset` off Redis's."""
        self.redis = self.start_redis()
        port = free_port()
        env = {"LD_PRELOAD": FAKETIME, "FAKETIME": offset, "TZ": "UTC",
               "FAKETIME_DONT_FAKE_MONOTONIC": "1",
               "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}
        return self.start_daemon(
            config='listen: ["127.0.0.1:%d"]\nredis: {address: "%s", timeout: 1s}\n'
                   'policies:\n'
                   '  cal: {algorithm: fixed_window, limits: 3/day, on_store_error: deny}\n'
                   '  win: {algorithm: fixed_window, limits: 3/1h, on_store_error: deny}\n'
                   % (port, self.redis.address), port=port, env=env)

    def test_daemon_clock_off_by_minutes_decides(self):
        """Redis's clock picks the calendar window among the five the
        daemon names around its own: minutes apart, nothing changes."""
        d = self.skewed("+10m")
        with Client(d.port) as c:
            self.assertRegex(c.request("ALLOW u cal"), r"^ALLOWED 3 2 0 [1-9]")
            self.assertRegex(c.request("ALLOW u win"), r"^ALLOWED 3 2 0 [1-9]")

    def test_daemon_clock_off_by_days_says_so(self):
        """Days apart, the daemon's windows do not hold Redis's clock: the
        calendar policy cannot be decided, gets its on_store_error answer
        and the log says why; windows of a fixed period are Redis's alone
        and go on."""
        d = self.skewed("+3d")
        with Client(d.port) as c:
            self.assertRegex(c.request("ALLOW u cal"), r"^DENIED 3 -1 ")
            self.assertRegex(c.request("ALLOW u win"), r"^ALLOWED 3 2 0 [1-9]")
        self.assertIn("do not hold Redis's clock", d.log())

    def test_berlin_day_of_23_hours(self):
        # 30 March 2024 in Berlin (CET), seconds before midnight: the 31st
        # has 23 hours
        d = self.start_at("2024-03-30 22:59:55")
        with Client(d.port) as c:
            r = c.request("ALLOW zoe d")
            self.assertRegex(r, r"^ALLOWED 1 0 0 ")
            left = int(r.split()[4])
            self.assertLessEqual(left, 5000)
            self.assertRegex(c.request("ALLOW zoe d"), r"^DENIED 1 0 ")
            time.sleep(left / 1000 + 0.2)
            r = c.request("ALLOW zoe d")
            self.assertRegex(r, r"^ALLOWED 1 0 0 ")
            self.assertGreater(int(r.split()[4]), 23 * 3600000 - 60000)
            self.assertLessEqual(int(r.split()[4]), 23 * 3600000)

    def test_http_window_of_a_day_of_23_hours(self):
        """RateLimit-Policy's w= on 31 March 2024 in Berlin (the clocks go
        forward): the day in force has 23 hours, not the 25 a day may have."""
        hport = free_port()
        self.start_at("2024-03-31 09:00:00", hport=hport)
        h = http.client.HTTPConnection("127.0.0.1", hport, timeout=10 * SLOW)
        self.addCleanup(h.close)
        h.request("GET", "/v1/allow?user=ada&action=q")
        resp = h.getresponse()
        resp.read()
        hdrs = dict(resp.getheaders())
        self.assertEqual(resp.status, 200, hdrs)
        self.assertEqual(hdrs["RateLimit-Policy"], '"q";q=600;w=82800', hdrs)


if __name__ == "__main__":
    unittest.main()
