"""test_vectors.py - the Lua script in a real Redis against tests/vectors.txt,
the same vectors the C limiter passes (tests/unit/test_limiter.c). Time is
injected through ARGV[1], which the daemon always sends as 0 (Redis TIME)."""

import datetime
import os
import random
import tempfile
import unittest
import zoneinfo

from harness import LAYOUT, SCRIPT, SRCDIR, RedisServer


# The script's letter of each algorithm (src/store/script_layout.txt), and
# whether its policy line gives a capacity before the rate.
ALGOS = {word: (letter, letter == LAYOUT.ALGO_FUNNEL) for word, letter in LAYOUT.ALGO_WORDS.items()}
# a calendar window's letter, by its algorithm's
CALENDAR = {LAYOUT.ALGO_FIXED: LAYOUT.ALGO_CAL_FIXED, LAYOUT.ALGO_COUNTER: LAYOUT.ALGO_CAL_COUNTER}
# The vectors' ops (tests/vectors*.txt, which the C replay also reads) as
# the script's letters.
VECTOR_OPS = {"a": LAYOUT.OP_ALLOW, "p": LAYOUT.OP_PEEK, "r": LAYOUT.OP_RESET,
              "d": LAYOUT.OP_DELAY, "g": LAYOUT.OP_CHARGE, "h": LAYOUT.OP_HOLD,
              "s": LAYOUT.OP_SETTLE, "x": LAYOUT.OP_CANCEL, "A": LAYOUT.OP_ALL_ALLOW,
              "P": LAYOUT.OP_ALL_PEEK, "t": LAYOUT.OP_STATE}


WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
UNIT_MS = {"day": 25 * 3600000, "week": (7 * 24 + 1) * 3600000,
           "month": (31 * 24 + 1) * 3600000, "year": 366 * 24 * 3600000}


class Calendar:
    """A calendar window of a limit ("3/month@15", a zone): the bounds the
    daemon sends the script, computed here with Python's zoneinfo (an
    implementation of tzdata apart from libc's, which the C side uses)."""

    def __init__(self, unit, anchor, tz):
        self.unit, self.tz = unit, zoneinfo.ZoneInfo(tz or "UTC")
        if unit == "week":
            self.anchor = WEEKDAYS.index(anchor) + 1 if anchor else 1
        elif unit == "year":
            self.anchor = tuple(int(x) for x in anchor.split("-")) if anchor else (1, 1)
        else:
            self.anchor = int(anchor) if anchor else 1

    @staticmethod
    def dim(y, m):
        return (datetime.date(y + (m == 12), m % 12 + 1, 1) - datetime.date(y, m, 1)).days

    def midnight(self, date):
        """The first instant of a local date, ms (fold 0: a midnight that
        comes twice, its first; one that does not come, the instant the
        clocks jumped to)."""
        return int(datetime.datetime(date.year, date.month, date.day,
                                     tzinfo=self.tz).timestamp() * 1000)

    def start(self, date, k):
        if self.unit == "day":
            return self.midnight(date + datetime.timedelta(days=k))
        if self.unit == "week":
            back = (date.isoweekday() - self.anchor) % 7
            return self.midnight(date - datetime.timedelta(days=back - 7 * k))
        if self.unit == "month":
            a = self.anchor
            base = 0 if date.day >= min(a, self.dim(date.year, date.month)) else -1
            mi = date.year * 12 + date.month - 1 + base + k
            y, m = mi // 12, mi % 12 + 1
            return self.midnight(datetime.date(y, m, min(a, self.dim(y, m))))
        am, ad = self.anchor
        base = 0 if (date.month, date.day) >= (am, min(ad, self.dim(date.year, am))) else -1
        y = date.year + base + k
        return self.midnight(datetime.date(y, am, min(ad, self.dim(y, am))))

    def bounds(self, now_us):
        date = datetime.datetime.fromtimestamp(now_us / 1e6, self.tz).date()
        return ":".join(str(self.start(date, k)) for k in range(-2, 3))


def parse_policy(tok):
    """The script's limits of a policy written "ALGORITHM [CAPACITY]
    COUNT/PERIOD_MS ... [ban=AFTER/WITHIN_MS/FOR_MS]": (algo, capacity,
    count, period_ms), the ban's last."""
    letter, has_capacity = ALGOS[tok[0]]
    limits = []
    ban = [t for t in tok if t.startswith("ban=")]
    tz = [t[3:] for t in tok if t.startswith("tz=")]
    tok = [t for t in tok if not t.startswith("ban=") and not t.startswith("tz=")]
    if has_capacity:
        cap = int(tok[1])
        count, period = tok[2].split("/")
        limits.append((letter, cap, int(count), int(period)))
    else:
        for t in tok[1:]:
            count, period = t.split("/")
            if not period.isdigit():  # a calendar window: "W", "C" and its bounds
                unit, _, anchor = period.partition("@")
                limits.append((CALENDAR[letter], Calendar(unit, anchor, tz[0] if tz else ""),
                               int(count), UNIT_MS[unit]))
                continue
            limits.append((letter, int(count), int(count), int(period)))
    if ban:  # one more "limit" on its own key, last
        limits.append(tuple([LAYOUT.ALGO_BAN] + [int(x) for x in ban[0][4:].split("/")]))
    return limits


def read_vectors(path):
    """Scenarios (multi, groups, steps), groups a list of (shadow, limits): a
    "policy" scenario has one group and decides with a/p/r; a "multi" one
    (the script's decide_all) has a group per "group" line and decides with
    A/P."""
    scenarios = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            tok = line.split()
            if tok[0] == "policy":
                scenarios.append((False, [(False, parse_policy(tok[1:]))], []))
                continue
            if tok[0] == "multi":
                scenarios.append((True, [], []))
                continue
            if tok[0] == "group":
                assert scenarios and scenarios[-1][0], "line %d: group outside multi" % lineno
                shadow = tok[1] == "shadow"
                scenarios[-1][1].append((shadow, parse_policy(tok[2 if shadow else 1:])))
                continue
            left, right = line.split("->")
            tok = left.split()
            now, op, cost = tok[:3]
            if op == "d":  # an ALLOW that may wait: the wait (ms) follows
                op = (op, int(tok[3]))
            elif op == "h":  # HOLD ESTIMATE NONCE HOLD_MS
                op = (op, (tok[3], tok[4]))
            elif op in ("s", "x"):  # SETTLE NONCE ACTUAL, CANCEL NONCE
                op, cost = (op, (tok[2],)), tok[3] if op == "s" else "0"
            want = [int(x) for x in right.split()]
            scenarios[-1][2].append((lineno, int(now), op, int(cost), want))
    return scenarios


def script_call(tag, multi, groups, now, op, cost):
    """(KEYS, ARGV) of the decision script for one decision of a scenario:
    every group on keys of its own, in one hash tag, time injected."""
    keys = ["t:{%s}:%d:%d" % (tag, g, i)
            for g, (_, limits) in enumerate(groups) for i in range(len(limits))]
    wait_ms = None
    if isinstance(op, tuple):
        op, wait_ms = op
    if LAYOUT.OP_KEYS.get(VECTOR_OPS[op]):  # one more key: the pair's holds
        keys.append("t:{%s}:h" % tag)
    args = [str(now), "1", VECTOR_OPS[op], str(cost)]
    if multi:  # decide_all: per group shadow, nlimits, limits
        args.append(str(len(groups)))
        for shadow, limits in groups:
            args += ["1" if shadow else "0", str(len(limits))]
            for limit in limits:
                args += [x.bounds(int(now)) if isinstance(x, Calendar) else str(x)
                         for x in limit]
    else:
        limits = groups[0][1]
        args.append(str(len(limits)))
        for limit in limits:
            args += [x.bounds(int(now)) if isinstance(x, Calendar) else str(x) for x in limit]
    if op == "r":
        args += ["t:reset", "%s:u" % tag]  # the notice's channel, tag
    if op == "d":
        args.append(str(wait_ms * 1000))  # the wait, us
    if op in ("h", "s", "x"):
        args += list(wait_ms)  # the nonce (and a HOLD's time, ms)
    if op in ("s", "x"):
        args += ["t:reset", "%s:u" % tag]  # the notice of units given back
    return keys, args


# Redis expires keys on its real clock, not on the injected one: a key the
# script sets for 1 ms would go in the middle of a scenario. So the script
# runs here with its expiries taken off (its keys stay until the test ends),
# while the memory store drops its keys on the injected clock: that expiry
# never changes a decision is checked on the way.
NO_EXPIRY = """
local real_redis = redis
local redis = setmetatable({call = function(cmd, ...)
  if cmd == 'PEXPIRE' then return 1 end
  if cmd == 'SET' then local a = {...}; return real_redis.call('SET', a[1], a[2]) end
  return real_redis.call(cmd, ...)
end}, {__index = real_redis})
"""


class LuaVectors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="rl-vectors-")
        self.redis = RedisServer(self.tmp).start()
        # the script with its expiries off: a key a vector's window ends 1 ms
        # after would go on Redis's real clock between two steps (a fresh run
        # saw vectors_calendar.txt:17 read an expired window)
        with open(SCRIPT) as f:
            self.script = NO_EXPIRY + f.read()

    def tearDown(self):
        self.redis.stop()

    def test_vectors(self):
        scenarios = read_vectors(os.path.join(SRCDIR, "tests", "vectors.txt"))
        self.assertGreater(len(scenarios), 5)
        checked = 0
        with self.redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", self.script)
            for n, (multi, groups, steps) in enumerate(scenarios):
                for lineno, now, op, cost, want in steps:
                    ops = ("A", "P") if multi else ("a", "p", "r")
                    self.assertIn(op, ops, "vectors.txt:%d" % lineno)
                    keys, args = script_call("v%d" % n, multi, groups, now, op, cost)
                    got = r.call("EVALSHA", sha, str(len(keys)), *keys, *args)
                    if multi:
                        # then three per group (its own figures): the
                        # differential test in test_memory.py checks them
                        self.assertEqual(len(got), len(want) + 3 * len(groups))
                        got = got[:len(want)]
                    self.assertEqual(got, want, "vectors.txt:%d" % lineno)
                    checked += 1
        self.assertGreater(checked, 50)

    def check_file(self, name, tag, at_least):
        """Every decision of tests/NAME in Redis, as the C limiter gives it."""
        scenarios = read_vectors(os.path.join(SRCDIR, "tests", name))
        checked = 0
        with self.redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", self.script)
            for n, (multi, groups, steps) in enumerate(scenarios):
                for lineno, now, op, cost, want in steps:
                    keys, args = script_call("%s%d" % (tag, n), multi, groups, now, op, cost)
                    got = r.call("EVALSHA", sha, str(len(keys)), *keys, *args)
                    self.assertEqual(got, want, "%s:%d" % (name, lineno))
                    checked += 1
        self.assertGreater(checked, at_least)

    def test_delay_vectors(self):
        """The script's "d" (an ALLOW that may wait)."""
        self.check_file("vectors_delay.txt", "d", 20)

    def test_charge_vectors(self):
        """CHARGE ("g") counts past the limit in every algorithm."""
        self.check_file("vectors_charge.txt", "g", 20)

    def test_hold_vectors(self):
        """HOLD, SETTLE and CANCEL ("h", "s", "x")."""
        self.check_file("vectors_hold.txt", "hold", 25)

    def test_state_vectors(self):
        """STATE ("t"): a PEEK's five, then every key's own figures."""
        self.check_file("vectors_state.txt", "state", 15)

    def test_calendar_vectors(self):
        """Calendar windows in time zones, the bounds computed here with
        zoneinfo, against the C limiter's libc."""
        self.check_file("vectors_calendar.txt", "cal", 30)

    def test_block_window_and_give_back(self):
        """A block ("k") answers the window its units are counted in (a
        fixed window's, a counter's current bucket; 0 for a funnel or
        several limits), and a give-back ("b") takes units off that
        window's count only while Redis is in it, at most what it holds."""
        period = 1000000  # 1 s, us
        t0 = 1800000000000000 // period * period + period  # a window's start
        win = t0 // period

        with self.redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", self.script)

            def call(key, now, *args):
                keys = [key] if isinstance(key, str) else key
                return r.call("EVALSHA", sha, str(len(keys)), *keys, str(now), "1", *args)

            def value(key):
                return r.call("GET", key).decode()

            def block(key, now, limits, want):
                args = [LAYOUT.OP_BLOCK, "1", str(len(limits))]
                for l in limits:
                    args += [str(x) for x in l]
                return call(key, now, *(args + [str(want), "100"]))

            def give(key, now, limit, units, window):
                return call(key, now, LAYOUT.OP_GIVE, str(units), "1",
                            *[str(x) for x in limit], str(window))

            for algo in (LAYOUT.ALGO_FIXED, LAYOUT.ALGO_COUNTER):
                key, limit = "g:{%s}:k" % algo, (algo, 100, 100, 1000)
                got = block(key, t0 + 1000, [limit], 20)
                self.assertEqual(len(got), LAYOUT.OP_REPLY[LAYOUT.OP_BLOCK])
                self.assertEqual(got[0], 1)
                self.assertEqual(got[5:], [20, 999, win], algo)
                self.assertTrue(value(key).startswith("%d:21" % win), algo)
                # same window: taken off the count, at most what it holds
                self.assertEqual(give(key, t0 + 2000, limit, 15, win), [15], algo)
                self.assertTrue(value(key).startswith("%d:6" % win), algo)
                self.assertEqual(give(key, t0 + 3000, limit, 100, win), [6], algo)
                self.assertTrue(value(key).startswith("%d:0" % win), algo)
                # another window's id: nothing (an earlier, and a later one)
                call(key, t0 + 4000, LAYOUT.OP_ALLOW, "5", "1", *[str(x) for x in limit])
                before = r.call("GET", key)
                self.assertEqual(give(key, t0 + 5000, limit, 3, win - 1), [0], algo)
                self.assertEqual(give(key, t0 + 5000, limit, 3, win + 1), [0], algo)
                # Redis's clock in the next window, the key still the old
                # window's value: nothing either (the units lapsed there)
                self.assertEqual(give(key, t0 + period + 1000, limit, 3, win), [0], algo)
                self.assertEqual(r.call("GET", key), before, algo)
                # and the next window's count is never lowered by them
                call(key, t0 + period + 2000, LAYOUT.OP_ALLOW, "4", "1",
                     *[str(x) for x in limit])
                after = r.call("GET", key)
                self.assertEqual(give(key, t0 + period + 3000, limit, 3, win), [0], algo)
                self.assertEqual(r.call("GET", key), after, algo)
            # a funnel's block, and one of several limits: window 0, and a
            # give-back of window 0 takes nothing
            funnel = (LAYOUT.ALGO_FUNNEL, 100, 100, 1000)
            got = block("g:{f}:k", t0, [funnel], 10)
            self.assertEqual(got[5], 10)
            self.assertEqual(got[7], 0)
            tat = r.call("GET", "g:{f}:k")
            self.assertEqual(give("g:{f}:k", t0 + 1, funnel, 10, 0), [0])
            self.assertEqual(r.call("GET", "g:{f}:k"), tat)
            two = [(LAYOUT.ALGO_FIXED, 100, 100, 1000), (LAYOUT.ALGO_FIXED, 500, 500, 60000)]
            got = block(["g:{m}:1", "g:{m}:2"], t0, two, 10)
            self.assertEqual(got[5], 10)
            self.assertEqual(got[7], 0)
            # no block (no room): no window
            got = block("g:{x}:k", t0, [(LAYOUT.ALGO_FIXED, 2, 2, 1000)], 10)
            self.assertEqual(got, [1, 2, 1, 0, 1000, 0, 0, 0])

    def test_counter_bounds_in_redis(self):
        """sliding_window_counter in a real Redis, time injected: a client
        steadily at 90% of the rate is never denied, and random traffic at
        twice the rate never gets more than the limit in a window aligned to
        the counter's buckets. (60 s windows: a key's real TTL outlives any
        pause of the test.)"""
        import random
        limit, period_us = 20, 60000000
        t0 = 1800000000000000 // period_us * period_us + period_us
        with self.redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", self.script)

            def allow(key, now):
                return r.call("EVALSHA", sha, "1", key, str(now), "1", "a", "1", "1",
                              "c", str(limit), str(limit), "60000")
            gap = period_us * 10 // (9 * limit)  # 90% of the rate
            denied = [t for t in range(t0, t0 + 40 * period_us, gap)
                      if allow("p:{steady}:c60000", t)[0] != 1]
            self.assertEqual(denied, [], "a client at 90% of the rate was denied")
            rnd = random.Random(7)
            per_window, now = {}, t0
            for _ in range(2000):
                now += rnd.randrange(0, period_us // limit)  # about twice the rate
                if allow("p:{random}:c60000", now)[0] == 1:
                    w = now // period_us
                    per_window[w] = per_window.get(w, 0) + 1
            self.assertGreater(len(per_window), 30)
            self.assertLessEqual(max(per_window.values()), limit, per_window)
            self.assertGreaterEqual(sum(per_window.values()), 0.8 * limit * len(per_window))

    def test_batch_matches_single(self):
        """Several decisions in one call decide as they would one by one."""
        with self.redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", self.script)
            args = ["1000000000000", "3"]
            keys = []
            for i in range(3):
                keys.append("b:{u%d}:s1000" % i)
                args += ["a", str(i + 1), "1", "s", "2", "2", "1000"]
            got = r.call("EVALSHA", sha, str(len(keys)), *keys, *args)
            self.assertEqual(got, [1, 2, 1, 0, 1000, 1, 2, 0, 0, 1000, 0, 2, 2, -1, 0])

    def test_time_str_reads_back_the_same_double(self):
        """The funnel's times, written by the script's time_str (%d and a
        quarter instead of %.17g), read back as the same double: near now,
        at the edges of its fast range and outside it."""
        src = self.script
        body = src[src.index("local quarter_fmts"):src.index("local function ceil_ms")]
        probe = ("local floor = math.floor\n" + body +
                 "local bad = {}\n"
                 "for i = 1, #ARGV do\n"
                 "  local x = tonumber(ARGV[i]) / 4\n"
                 "  if tonumber(time_str(x)) ~= x then bad[#bad + 1] = ARGV[i] end\n"
                 "end\n"
                 "return bad\n")
        rnd = random.Random(7)
        quarters = [str(rnd.randrange(4 * 2 ** 50, 4 * 2 ** 53)) for _ in range(3000)]
        quarters += [str(4 * 2 ** 50 + d) for d in range(-8, 9)]
        quarters += [str(4 * 2 ** 53 + d) for d in range(-8, 9, 4)]
        quarters += [str(4 * 1800000000000000 + rnd.randrange(4 * 10 ** 9)) for _ in range(2000)]
        quarters += [str(rnd.randrange(0, 4 * 2 ** 40)) for _ in range(500)]
        with self.redis.resp() as r:
            self.assertEqual(r.call("EVAL", probe, "0", *quarters), [])

    def test_short_form_batches_match_singles(self):
        """Random batches in the daemon's form (an ALLOW of the one limit of
        the ALLOW before it sent as "=<cost>", a decision over pairs of the
        groups of the last one in full as "~<cost>", keys before or after
        the arguments), with wrong-type keys failing decisions in the middle
        of runs, answer and write what the same decisions one call each,
        every argument given, do."""
        rnd = random.Random(32)
        policies = [  # one limit (runs, "=") and others
            [("w", 3, 3, 1000)], [("w", 5, 5, 60000)], [("f", 3, 2, 1000)],
            [("c", 4, 4, 1000)], [("s", 3, 3, 1000)], [("f", 1000000000, 1000000000, 1000)],
            [("w", 3, 3, 1000), ("b", 2, 60000, 600000)], [("c", 2, 2, 1000), ("w", 5, 5, 60000)],
            [("f", 5, 3, 1000)],  # a third of a second a unit: times in quarters
        ]
        users = ["u%d" % i for i in range(6)] + ["bad"]

        def decision(rnd):
            pi = rnd.randrange(len(policies))
            if rnd.random() < 0.6:
                pi = rnd.choice([0, 0, 2, 3, 5, 8])  # long runs of one policy
            op = rnd.choice(["a"] * 8 + ["p", "A", "A", "A", "P"])
            cost = rnd.choice([1, 1, 1, 2])
            if op in ("A", "P"):
                # Envoy's shape (fixed windows: decide_all_fixed) half the
                # time, often the same groups again ("~")
                shape = rnd.choice([[0, 1], [0, 3], [1, 5], [0, 1, 5], [1, 1], [0, 0, 1]])
                if rnd.random() < 0.5:
                    shape = rnd.choice([[0, 1], [1, 5], [0, 1, 5]])
                pairs = [(rnd.choice(users), pi) for pi in shape]
                return (op, cost, pairs)
            return (op, cost, [(rnd.choice(users), pi)])

        def keys_of(d):
            out = []
            for user, pi in d[2]:
                out += ["v:{%s:%d}:%d" % (user, pi, i) for i in range(len(policies[pi]))]
            return out

        def full_args(d):
            op, cost, pairs = d
            if op in ("A", "P"):
                args = [op, str(cost), str(len(pairs))]
                for _, pi in pairs:
                    args += ["0", str(len(policies[pi]))] + [str(x) for l in policies[pi] for x in l]
                return args
            pi = pairs[0][1]
            return [op, str(cost), str(len(policies[pi]))] + [str(x) for l in policies[pi] for x in l]

        def short_args(batch):  # redis_script_args's rule
            out, before, before_all = [], None, None
            for d in batch:
                args = full_args(d)
                if d[0] in ("A", "P"):
                    before = None
                    if before_all is not None and [args[0]] + args[2:] == before_all:
                        out.append("~%d" % d[1])
                        continue
                    before_all = [args[0]] + args[2:]
                    out += args
                    continue
                one = d[0] == "a" and args[2] == "1"
                if one and before is not None and args[3:] == before:
                    out.append("=%d" % d[1])
                    continue
                before = args[3:] if one else None
                out += args
            return out

        def state(r):
            got = {}
            for key in sorted(r.call("KEYS", "v:*")):
                kind = r.call("TYPE", key)
                if kind == "string":
                    got[key] = r.call("GET", key)
                elif kind == "zset":
                    got[key] = r.call("ZRANGE", key, "0", "-1", "WITHSCORES")
                else:
                    got[key] = kind
            return got

        def fresh(r):
            r.call("FLUSHALL")
            for pi in range(len(policies)):  # "bad": keys of the wrong type
                for i in range(len(policies[pi])):
                    r.call("HSET", "v:{bad:%d}:%d" % (pi, i), "x", "1")

        shorter = runs = alls = 0
        with self.redis.resp() as r:
            sha = r.call("SCRIPT", "LOAD", self.script)
            for trial in range(60):
                batch = [decision(rnd) for _ in range(rnd.randrange(1, 40))]
                # a time of today's size: the funnel's time written by
                # time_str's fast path (from 2^50 us)
                now = 1795000000000000 + trial * 7777777
                fresh(r)
                want, failures = [], 0
                for d in batch:
                    keys = keys_of(d)
                    got = r.call("EVALSHA", sha, str(len(keys)), *keys, str(now), "1",
                                 *full_args(d))
                    if got[0] == -1:
                        failures += 1
                        got = got[:-1]  # Redis's text
                    want += got
                want_state = state(r)
                keys = [k for d in batch for k in keys_of(d)]
                args = short_args(batch)
                shorter += len(args) < sum(len(full_args(d)) for d in batch)
                runs += any(a.startswith("=") for a in args)
                alls += any(a.startswith("~") for a in args)
                for after in (False, True):
                    fresh(r)
                    if after:
                        got = r.call("EVALSHA", sha, "0", str(now), str(len(batch)), *args, *keys)
                    else:
                        got = r.call("EVALSHA", sha, str(len(keys)), *keys, str(now),
                                     str(len(batch)), *args)
                    if failures:
                        self.assertIn(b"WRONGTYPE", got[-1])
                        got = got[:-1]
                    self.assertEqual(got, want, (trial, after, batch))
                    self.assertEqual(state(r), want_state, (trial, after, batch))
        self.assertGreater(shorter, 30)
        self.assertGreater(runs, 30)
        self.assertGreater(alls, 20)


if __name__ == "__main__":
    unittest.main()
