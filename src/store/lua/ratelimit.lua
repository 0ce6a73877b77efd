-- ratelimit.lua - every ratelimitd decision, atomic inside Redis, in Redis's own clock.
--
-- The same formulas live in src/limiter.c (the memory store); tests/vectors.txt
-- checks both, and tests/integration/test_memory.py compares them at random.
--
-- ARGV[1]  now in microseconds; "0" means read Redis TIME (the daemon always
--          sends 0; tests send fixed times to replay vectors)
-- ARGV[2]  number of decisions in this call (a batch; each is atomic on its own keys)
-- then per decision (decision_argc says how many):
--          op ("a" allow, "p" peek, "r" reset, "d" allow or delay, "g"
--          charge: counted in every limit, never denied; "h" hold, "s"
--          settle with cost the actual, "x" cancel: see decide; "t" state:
--          a peek that tells every limit's figures, see state_out), cost,
--          nlimits, per limit: algo (a key of `algos` below), capacity (a
--          calendar window's: its bounds, see frame), count, period_ms,
--          and for a reset two more: the channel and the
--          message that tell every daemon of it ("<prefix>reset", the hash
--          tag "<action>:<user>"); for "d" one more: the longest wait (us);
--          for "k" (allow and take a block) two more: the units wanted
--          and the longest time (ms) the daemon answers from them (see
--          block_take); for "b" (give a block's units back: cost is
--          them) one more, the window id "k" answered (see give_back);
--          for "h" two more, the hold's nonce and time (ms), for "s" and
--          "x" three, the nonce and, as for a reset, the channel and the
--          message that tell every daemon units came back (their cached
--          denials of the pair are wrong then), and one more key: the
--          pair's holds (see delay_at);
--          or, for one decision over several (user, action) pairs, op "A"
--          (allow) or "P" (peek), cost, ngroups, then per group: shadow
--          (0/1), nlimits, its limits as above (see decide_all);
--          or "=<cost>" alone: the decision before it again, an "a" of one
--          limit (no ban), on the next key, with this cost (see
--          repeat_cost; the daemon's short form, a seventh of the
--          arguments Redis parses for a batch of one policy);
--          or "~<cost>" alone: the last "A" or "P" given in full in this
--          call again, on the next keys, with this cost (all_repeat_cost)
-- KEYS     one key per limit, decision after decision; or, when no KEYS
--          are given, the same keys as ARGV after the last decision's
--          arguments (Redis Cluster batches: one call may then decide keys of
--          several slots of the node, which Redis only allows for undeclared
--          keys, with the allow-cross-slot-keys flag of the cluster variant)
--
-- Or, with ARGV[2] "check" and ARGV[3] the key prefix: the daemon's check
-- after each (re)connect (see check below); no decision is made.
--
-- Returns five integers per decision:
--          allowed (1/0), limit, remaining, retry_after_ms (-1: never), reset_ms
--          ("k": eight, then the block's units, valid ms and the window
--          they are counted in, 0 0 0 for none; "b": one, the units taken
--          back)
--          (allowed by "d" with a wait: retry_after_ms is the wait, ms, and
--          remaining and reset_ms are as they will be when it runs)
--          (for "A" and "P": then the deciding group and the first shadow
--          group that would have denied, both 1-based, 0 for none, then
--          three per group: passed (1/0), remaining, reset_ms; see decide_all)
--          ("t", STATE: the five of a "p", then five per key, its
--          limits' and its ban's: see state_out; a width of 5 + 5 * nlimits)
--          (allowed is -1 when that decision failed inside Redis, e.g. WRONGTYPE,
--          -2 when its keys are not on this cluster node: ask again alone,
--          and -3 when a SETTLE's or CANCEL's hold is not open);
--          when a decision failed (-1), one more element follows the last
--          decision: Redis's error text of the first such failure
--
-- The letters and widths above (ops, algorithms, short forms, how many
-- arguments, keys and integers each takes) are written once, in
-- src/store/script_layout.txt; here they have names (OP_HOLD, ALGO_FIXED,
-- SHORT_REPEAT, HEAD_ARGC, REPLY_WIDTH...), which the build replaces by
-- their values, literals as they were (scripts/script_layout.py; the
-- script Redis gets is build/ratelimit.lua), and the next line by the
-- tables by op letter: OP_ARGS (arguments after its limits), OP_KEYS (keys
-- after its limits') and OP_REPLY (integers of its reply). One line, so the
-- built script's lines are numbered as these.
--@script_layout@

-- Whether the error a command raised inside the script is an ACL refusal:
-- "NOPERM ..." (later Redis), "ERR The user executing the script can't ..."
-- (Redis 7.0) or "ERR ACL failure in script: ..." (Valkey 8), each naming
-- the command, "a key" or "the channel" it refused.
local function acl_refusal(e)
  return string.find(e, 'NOPERM', 1, true) or string.find(e, 'executing the script can', 1, true)
    or string.find(e, 'ACL failure in script', 1, true)
end

-- The daemon's check after each (re)connect, so a Redis user whose ACL lacks
-- something the decisions need is found at once, not by every decision
-- failing: runs every command the decisions use, on keys of the daemon's
-- prefix that no decision uses (decisions' hash tags hold "<action>:<user>",
-- never the bare "{check}"; one tag keeps both keys on one Cluster node), and
-- returns what failed as the ACL rule that would allow it ("+zadd",
-- "~rl:*", "&rl:reset"), or as Redis's own text. An empty array: all works.
local function check(prefix)
  local zkey, skey = prefix .. '{check}:z', prefix .. '{check}:s'
  local missing, seen = {}, {}
  local function try(...)
    local ok, err = pcall(redis.call, ...)
    if ok then return end
    local e = type(err) == 'table' and tostring(err.err) or tostring(err)
    -- a Cluster node that does not hold these keys: not ours to judge
    if string.find(e, 'non local key', 1, true) then return end
    local rule = e
    if acl_refusal(e) then
      if string.find(e, 'channel', 1, true) then
        rule = '&' .. prefix .. 'reset'
      elseif string.find(e, 'key', 1, true) then
        rule = '~' .. prefix .. '*'
      else
        rule = '+' .. string.lower((...))
      end
    end
    if not seen[rule] then
      seen[rule] = true
      missing[#missing + 1] = rule
    end
  end
  try('TIME')
  try('ZADD', zkey, 1, 'check')
  try('ZCOUNT', zkey, '-inf', '+inf')
  try('ZRANGE', zkey, -1, -1, 'WITHSCORES')
  try('ZRANGEBYSCORE', zkey, '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  try('ZREMRANGEBYSCORE', zkey, '-inf', '+inf')
  -- bans: the recent denials and the ban's end live in a sorted set too
  try('ZSCORE', zkey, 'ban')
  try('ZREM', zkey, 'ban')
  try('ZCARD', zkey)
  -- a sliding log's entries placed ahead (a delay), and a HOLD's holds
  try('ZREVRANGEBYSCORE', zkey, '+inf', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  try('PTTL', zkey)
  try('PEXPIRE', zkey, 1000)
  try('SET', skey, '1', 'PX', 1000)
  -- the window algorithms' rewrite (write_fixed): an older Redis cannot
  local ok, err = pcall(redis.call, 'SET', skey, '1', 'KEEPTTL')
  if not ok and string.find(tostring(type(err) == 'table' and err.err or err), 'syntax', 1, true) then
    redis.call('DEL', skey)
    return redis.error_reply('ERR ratelimitd needs Redis 6.0 or newer (SET ... KEEPTTL)')
  end
  try('SET', skey, '1', 'KEEPTTL')
  try('GET', skey)
  try('DEL', zkey, skey)
  -- an empty message: no daemon takes it for a RESET
  try('PUBLISH', prefix .. 'reset', '')
  return missing
end

if ARGV[2] == 'check' then
  return check(ARGV[3])
end

-- Run-time overrides (src/override_live.c), with ARGV[2] one of the modes
-- below: the hash KEYS[1], field "<action>\n<user>", value
-- "<until_ms> <spec>" (until in Redis's clock, 0 for never). Each answers
-- Redis's now (ms) first, so the daemon learns the clock expiries use.
if ARGV[2] == 'oload' or ARGV[2] == 'oget' or ARGV[2] == 'oput' then
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local snow = string.format('%.0f', now)
  if ARGV[2] == 'oload' then
    -- everything in force; expired fields are dropped on the way
    local all = redis.call('HGETALL', KEYS[1])
    local out = {snow}
    for i = 1, #all, 2 do
      local untl = tonumber(string.match(all[i + 1], '^(%d+) '))
      if untl and untl ~= 0 and untl <= now then
        redis.call('HDEL', KEYS[1], all[i])
      else
        out[#out + 1] = all[i]
        out[#out + 1] = all[i + 1]
      end
    end
    return out
  end
  -- oget ARGV[3] = field; oput ARGV[3] = field, ARGV[4] = spec ('' clears),
  -- ARGV[5] = ttl ms (0: none), ARGV[6] = the channel, ARGV[7] = the
  -- notice's prefix. Both answer {now, field, value or nil}.
  local v = false
  if ARGV[2] == 'oget' then
    v = redis.call('HGET', KEYS[1], ARGV[3])
  else
    if ARGV[4] == '' then
      redis.call('HDEL', KEYS[1], ARGV[3])
    else
      local untl = 0
      if tonumber(ARGV[5]) > 0 then untl = now + tonumber(ARGV[5]) end
      v = string.format('%.0f', untl) .. ' ' .. ARGV[4]
      redis.call('HSET', KEYS[1], ARGV[3], v)
    end
    redis.call('PUBLISH', ARGV[6], ARGV[7] .. ARGV[3])
  end
  return {snow, ARGV[3], v}
end

-- Concurrency leases (src/model/lease.c does the same in C): KEYS[1] a
-- sorted set of the leases one (user, action) holds, member "<nonce>:<cost>",
-- score its expiry (us, Redis's clock); ARGV[3] the op ("a" acquire, "r"
-- release, "n" renew, "p" peek, "x" reset), ARGV[4] the member, ARGV[5] its
-- cost, ARGV[6] the limit, ARGV[7] the lease (ms). Leases past their expiry
-- go first. Answers {ok (1/0), limit, remaining, ms, expired}: ms the
-- lease's time left when ok (acquire, renew), else the time until the
-- soonest expiry (-1: cost > limit, never); a peek of cost 0 (STATE):
-- ok, and the time until the last lease expires.
if ARGV[2] == 'lease' then
  local now = tonumber(ARGV[1])
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  -- scores as integers: a number passed as is would be cut to 14 digits
  local function f0(x) return string.format('%.0f', x) end
  local key, op, member = KEYS[1], ARGV[3], ARGV[4]
  local cost, limit, lease = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  if op == 'x' then
    redis.call('DEL', key)
    return {1, limit, limit, 0, 0}
  end
  local expired = redis.call('ZREMRANGEBYSCORE', key, '-inf', f0(now))
  local held = 0
  local all = redis.call('ZRANGE', key, 0, -1)
  for i = 1, #all do
    held = held + tonumber(string.match(all[i], ':(%d+)$'))
  end
  local function soonest()
    local e = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #e == 0 then return 0 end
    return math.floor((tonumber(e[2]) - now + 999) / 1000)
  end
  -- the key lives as long as its last lease
  local function keep()
    local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if #e > 0 then
      redis.call('PEXPIRE', key, math.floor((tonumber(e[2]) - now + 999) / 1000))
    end
  end
  if op == 'p' and cost == 0 then
    -- STATE: the units held, and ms until the last lease expires
    local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local last = 0
    if #e > 0 then last = math.max(0, math.floor((tonumber(e[2]) - now + 999) / 1000)) end
    return {1, limit, limit - held, last, expired}
  end
  if op == 'a' or op == 'p' then
    if cost > limit then return {0, limit, limit - held, -1, expired} end
    if held + cost > limit then return {0, limit, limit - held, soonest(), expired} end
    if op == 'p' then return {1, limit, limit - held, 0, expired} end
    redis.call('ZADD', key, f0(now + lease * 1000), member)
    keep()
    return {1, limit, limit - held - cost, lease, expired}
  end
  local score = redis.call('ZSCORE', key, member)
  if op == 'r' then
    if not score then return {0, limit, limit - held, 0, expired} end
    redis.call('ZREM', key, member)
    return {1, limit, limit - held + tonumber(string.match(member, ':(%d+)$')), 0, expired}
  end
  -- 'n': renew
  if not score then return {0, limit, limit - held, 0, expired} end
  redis.call('ZADD', key, 'XX', f0(now + lease * 1000), member)
  keep()
  return {1, limit, limit - held, lease, expired}
end

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Locals: a global lookup per call is measurable at 256 decisions per call.
local floor, ceil, min, max = math.floor, math.ceil, math.min, math.max
local rcall = redis.call

-- Scores and times must be written as plain integers: tostring() would give
-- "1.7e+15" and lose digits.
local function fmt(x)
  return string.format('%.0f', x)
end

-- A number's string as fmt writes it, made once per call per value: the
-- times every decision of a batch repeats (now, a window's cutoff, an
-- expiry) would be formatted again for each.
local strs, excls = {}, {}
local function str(x)
  local v = strs[x]
  if not v then v = fmt(x); strs[x] = v end
  return v
end

-- A time (us) as a string that reads back as the same double: %.17g
-- would do for any, but from 2^50 us (2005) to 2^53 a time's double is a
-- whole number or quarters of one, and %d of it (and the quarter) is a
-- fifth of what printf's exact %g costs.
-- (%d is Lua's C long: on a Redis built with a 32-bit long, %.17g always)
local quarter_fmts = {[0] = '%d', [0.25] = '%d.25', [0.5] = '%d.5', [0.75] = '%d.75'}
local long_ok = string.format('%d', 9007199254740991) == '9007199254740991'
local function time_str(x)
  if long_ok and x >= 1125899906842624 and x < 9007199254740992 then
    local i = floor(x)
    local qf = quarter_fmts[x - i]
    if qf then return string.format(qf, i) end
  end
  return string.format('%.17g', x)
end

local function ceil_ms(us)
  if us <= 0 then return 0 end
  return ceil(us / 1000)
end

-- The verdict the counting algorithms share: never (cost over the limit),
-- now (it fits), or later: then it returns true and the caller sets r.retry.
local function verdict(r, cost, limit, used)
  r.retry = 0
  if cost > limit then
    r.ok = false
    r.retry = -1
    return false
  end
  r.ok = used + cost <= limit
  return not r.ok
end

-- Sliding-window log: one zset member per unit allowed, scored by its time in
-- microseconds. Scores strictly increase per key (a request in the same
-- microsecond as the last one, or while Redis's clock steps back, is placed
-- 1 us later), so members "<score>:<i>" never collide. Denied requests write
-- nothing, so a client that keeps retrying is let in once its window passes.
local function sliding_check(key, _, count, period_ms, cost, _, _, r)
  local window = period_ms * 1000
  local cutoff = now - window
  -- every entry after the cutoff, those a delay placed ahead too: an entry
  -- counts from when it is written, never less than from when it runs
  local excl = excls[cutoff]
  if not excl then excl = '(' .. fmt(cutoff); excls[cutoff] = excl end
  local used = redis.call('ZCOUNT', key, excl, '+inf')
  if r then -- decide_one's: the same table every decision, no allocation
    r.key, r.count, r.window, r.cost, r.used, r.limit, r.fit =
      key, count, window, cost, used, count, now
  else
    r = {key = key, count = count, window = window, cost = cost, used = used, limit = count,
         fit = now}
  end
  local newest = nil
  if used > 0 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    newest = tonumber(last[2])
  end
  r.newest = newest
  if verdict(r, cost, count, used) then
    -- the oldest live entries must leave the window until cost fits
    local need = used + cost - count
    local e = redis.call('ZRANGEBYSCORE', key, excl, '+inf',
                         'WITHSCORES', 'LIMIT', need - 1, 1)
    r.fit = tonumber(e[2]) + window
    r.retry = min(period_ms, ceil_ms(r.fit - now))
  end
  -- never below 0: a reload may lower the count under what a key holds
  r.remaining = max(0, count - used)
  -- entries placed a few us ahead (see above) must not report more than a window
  if newest then r.reset = min(period_ms, ceil_ms(newest + window - now)) else r.reset = 0 end
  r.period_ms = period_ms
  return r
end

-- A score for entries that run at `at`, no other entry's: members are
-- "<score>:<i>", so one score is one request's. Past the newest entry (the
-- seeds' collision, same microsecond, never repeats); else, when a delay
-- placed entries further ahead than 1 ms, the first free score from the
-- newest near `at`.
local function sliding_score(r, at)
  local newest = r.newest
  if not newest or newest < at then return at end
  if newest <= at + 1000 then return newest + 1 end
  local s = at
  local near = redis.call('ZREVRANGEBYSCORE', r.key, fmt(at + 1000), '-inf',
                          'WITHSCORES', 'LIMIT', 0, 1)
  if near[2] and tonumber(near[2]) >= s then s = tonumber(near[2]) + 1 end
  while redis.call('ZCOUNT', r.key, fmt(s), fmt(s)) > 0 do s = s + 1 end
  return s
end

-- Writes the request's entries as running at `at` (now, or a delay's later
-- instant: see delay_at).
local function sliding_commit_at(r, at)
  local score = sliding_score(r, at)
  local s = str(score)
  local i = 1
  if r.cost == 1 then
    redis.call('ZADD', r.key, s, s .. ':1')
    i = 2
  end
  while i <= r.cost do
    local args = {}
    local last = min(r.cost, i + 499)
    for j = i, last do
      args[#args + 1] = s
      args[#args + 1] = s .. ':' .. j
    end
    redis.call('ZADD', r.key, unpack(args))
    i = last + 1
  end
  redis.call('ZREMRANGEBYSCORE', r.key, '-inf', str(now - r.window))
  local last = score
  if r.newest and r.newest > last then last = r.newest end
  local ttl = ceil_ms(last + r.window - now)
  redis.call('PEXPIRE', r.key, str(ttl))
  if at > now then
    -- what its window has left when it runs, and its reset from then
    r.remaining = max(0, r.count - redis.call('ZCOUNT', r.key, '(' .. fmt(at - r.window), '+inf'))
    r.reset = min(r.period_ms, ceil_ms(last + r.window - at))
  else
    r.remaining = r.count - r.used - r.cost
    r.reset = min(r.period_ms, ttl)
  end
end

local function sliding_commit(r)
  sliding_commit_at(r, now)
end

-- The first instant from t at which the log has room for the request: once
-- the entries that must leave have (the entries counted are all those
-- written, so a later instant only ever has fewer).
local function sliding_at(r, t)
  if r.cost > r.count then return nil end
  return max(t, r.fit)
end

-- Funnel (GCRA, redis-cell's semantics): the key holds the theoretical arrival
-- time (TAT) in microseconds. `capacity` units pass at once, then one unit per
-- interval = period/count. The key expires when the funnel is empty again.
local function funnel_check(key, capacity, count, period_ms, cost)
  local interval = period_ms * 1000 / count
  local tau = capacity * interval
  local tat = tonumber(redis.call('GET', key))
  if not tat or tat < now then tat = now end
  local new_tat = tat + cost * interval
  local r = {key = key, limit = capacity, new_tat = new_tat, tat = tat, interval = interval,
             tau = tau}
  -- Times near the epoch are doubles with a 0.25 us step: 1 us of slack (and
  -- 1e-6 of a unit in `remaining`) keeps rounding from flipping a decision.
  if cost > capacity then
    r.ok = false
    r.retry = -1
  elseif new_tat - now <= tau + 1 then
    r.ok = true
    r.retry = 0
  else
    r.ok = false
    r.retry = ceil_ms(new_tat - now - tau)
  end
  r.remaining = max(0, floor((tau - (tat - now)) / interval + 1e-6))
  r.reset = ceil_ms(tat - now)
  r.after_remaining = floor((tau - (new_tat - now)) / interval + 1e-6)
  return r
end

local function funnel_commit(r)
  -- time_str round-trips the double exactly, so no drift accumulates
  redis.call('SET', r.key, time_str(r.new_tat), 'PX',
             str(max(1, ceil_ms(r.new_tat - now))))
  r.remaining = r.after_remaining
  r.reset = ceil_ms(r.new_tat - now)
end

-- The number of the fixed window of `period` us holding now: windows start at
-- multiples of the period in Redis's clock. (Products of integers below 2^53
-- are exact, so the floor is corrected rather than trusted.)
local function window_of(period)
  local idx = floor(now / period)
  if idx * period > now then
    idx = idx - 1
  elseif (idx + 1) * period <= now then
    idx = idx + 1
  end
  return idx
end

-- The window holding now, as the window algorithms see it: its id (what
-- the key's value carries), those of the two before it, its start (us),
-- its length (us, and ms: p) and the next one's (nil: unknown). A fixed
-- period's windows are numbered; a calendar window ("W", "C": the daemon
-- sends "b0:b1:b2:b3:b4", five consecutive starts in ms around its own
-- clock, src/lib/calendar.c) is named by its start in ms, and the one
-- holding Redis's clock is picked here. nil when none does (a clock
-- further from the daemon's than a window).
local function frame(calendar, bounds, period_ms)
  if not calendar then
    local period = period_ms * 1000
    local idx = window_of(period)
    return {id = idx, prev = idx - 1, prev2 = idx - 2, start = idx * period, len = period,
            p = period_ms, next_len = period, p_next = period_ms}
  end
  local b = {}
  for x in string.gmatch(bounds, '%d+') do b[#b + 1] = tonumber(x) end
  if #b ~= 5 then return nil end
  local ms = now / 1000
  for j = 1, 4 do
    if b[j] <= ms and ms < b[j + 1] then
      local f = {id = b[j], prev = b[j - 1] or -1, prev2 = b[j - 2] or -1, start = b[j] * 1000,
                 len = (b[j + 1] - b[j]) * 1000, p = b[j + 1] - b[j], cal = true}
      -- the next window's length: known unless Redis's clock is a window
      -- ahead of the daemon's (then this one's, for the key's expiry only)
      f.p_next = b[j + 2] and b[j + 2] - b[j + 1] or f.p
      f.next_len = f.p_next * 1000
      return f
    end
  end
  return nil
end

-- One call's frames, by period or bounds: the clock is the call's, so a
-- batch computes each window once.
local frames = {}
local function frame_of(algo, capacity, period_ms)
  local cal = algo == ALGO_CAL_FIXED or algo == ALGO_CAL_COUNTER
  local f = frames[cal and capacity or period_ms]
  if f then return f end
  f = frame(cal, capacity, period_ms)
  if not f then
    error({err = 'calendar window: the daemon\'s bounds ' .. tostring(capacity) ..
                 ' do not hold Redis\'s clock'})
  end
  frames[cal and capacity or period_ms] = f
  return f
end

-- The numbers of a window key's value "<window>:<n>[:<n>[:<n>]]", or nil
-- (no key, or not a value this script writes).
-- (string.find and tonumber: half what a pattern with four captures costs,
-- and this runs once per decision)
local find, sub = string.find, string.sub
local function window_value(key)
  local v = redis.call('GET', key)
  if not v then return nil end
  local p1 = find(v, ':', 1, true)
  if not p1 then return nil end
  local i = tonumber(sub(v, 1, p1 - 1))
  local p2 = find(v, ':', p1 + 1, true)
  if not p2 then
    local a = tonumber(sub(v, p1 + 1))
    if not i or not a then return nil end
    return i, a, 0, 0
  end
  local a = tonumber(sub(v, p1 + 1, p2 - 1))
  local p3 = find(v, ':', p2 + 1, true)
  local b, c
  if p3 then
    b, c = tonumber(sub(v, p2 + 1, p3 - 1)) or 0, tonumber(sub(v, p3 + 1)) or 0
  else
    b, c = tonumber(sub(v, p2 + 1)) or 0, 0
  end
  if not i or not a then return nil end
  return i, a, b, c
end

-- The strings a frame's writes repeat, made once per call: its id, and
-- the expiry (ms, from now) of a value written now that counts until the
-- frame's end (fixed window) or the next one's (counter). Redis would
-- format a number argument on every call.
local function frame_id_str(f)
  local s = f.id_str
  if not s then s = fmt(f.id); f.id_str = s end
  return s
end

-- What an earlier window's value (window i, count c, next nx) leaves to
-- this one: what a delay counted ahead in the next window, and a count past
-- the limit (a CHARGE's debt), less the limit of each window since (a fixed
-- period's; a calendar's two windows back at most).
local function carried(i, c, nx, limit, f)
  local debt = nx + max(0, c - limit)
  local gap
  if f.cal then
    if i == f.prev then gap = 1 elseif i == f.prev2 then gap = 2 else return 0 end
  else
    gap = f.id - i
  end
  if gap < 1 or gap - 1 > floor(debt / limit) then return 0 end
  return max(0, debt - (gap - 1) * limit)
end

-- ms until the window's count is spent: this window's end, or the end of
-- the last later window what it carries reaches (the next one's units, a
-- debt: carried), at most 400 days. Also how long the value must live.
local function keep_ms(f, nx, limit, to_end, used)
  local k = ceil((nx + max(0, used - limit)) / limit)
  if k < 1 then return to_end end
  if f.cal and k > 2 then k = 2 end
  return min(34560000000, ceil_ms(f.start + f.len + k * f.next_len - now))
end

local function fixed_keep(r, used)
  return keep_ms(r.f, r.nx, r.limit, r.to_end, used)
end

-- What a fixed window's key holds for window f: its count (a debt an
-- earlier window carries in), what a delay counted ahead, whether it is
-- f's own value, and ms to f's end.
local function fixed_read(key, f, count)
  local used, nx = 0, 0
  local i, c, b = window_value(key)
  if i == f.id then
    used, nx = c, b
  elseif i and i < f.id then
    used = carried(i, c, b, count, f)
  end
  local to_end = f.to_end
  if not to_end then to_end = ceil_ms(f.start + f.len - now); f.to_end = to_end end
  return used, nx, i == f.id, to_end
end

-- Fixed window: the units allowed in the current window, aligned to the
-- period in Redis's clock (the seeds' INCR + EXPIRE), or to a calendar
-- window. The value carries its window's id, so a count is never read in
-- a later window, whenever Redis happens to drop the key (its expiry is
-- only for memory). A delay may count units in the next window ahead of
-- it: "<window>:<n>:<next>".
local function fixed_check(key, capacity, count, period_ms, cost, algo)
  local f = frame_of(algo, capacity, period_ms)
  local used, nx, same, to_end = fixed_read(key, f, count)
  local r = {key = key, limit = count, used = used, nx = nx, cost = cost, f = f,
             to_end = to_end, same = same}
  if verdict(r, cost, count, used) then r.retry = to_end end
  -- never below 0: a reload may lower the count under what a key holds
  r.remaining = max(0, count - used)
  if nx > 0 or used > 0 then r.reset = fixed_keep(r, used) else r.reset = 0 end
  return r
end

-- Writes the window's count and what the next one holds ahead.
-- Writes a window's value. One that lives to the window's end (no debt,
-- nothing ahead) over this window's own (same) keeps its expiry: every
-- write in a window sets one at least that long, and a longer one only
-- keeps the key a little longer (its window id, not its expiry, says
-- which window it counts). KEEPTTL costs Redis less than PX.
local function write_fixed(key, f, nx, to_end, reset, used, same)
  if nx > 0 then
    redis.call('SET', key, frame_id_str(f) .. ':' .. str(used) .. ':' .. str(nx), 'PX', reset)
  elseif reset == to_end and same then
    redis.call('SET', key, frame_id_str(f) .. ':' .. str(used), 'KEEPTTL')
  elseif reset == to_end then
    local px = f.px_end
    if not px then px = tostring(to_end); f.px_end = px end
    redis.call('SET', key, frame_id_str(f) .. ':' .. str(used), 'PX', px)
  else
    redis.call('SET', key, frame_id_str(f) .. ':' .. str(used), 'PX', reset)
  end
end

local function fixed_write(r, used)
  r.reset = fixed_keep(r, used)
  write_fixed(r.key, r.f, r.nx, r.to_end, r.reset, used, r.same)
end

local function fixed_commit(r)
  local used = r.used + r.cost
  fixed_write(r, used)
  r.remaining = r.limit - used
end

-- The first instant from t at which a window has room: this one, else the
-- next (whose units a delay counts ahead; not a calendar's), else none
-- within reach.
local function fixed_at(r, t)
  if r.cost > r.limit then return nil end
  local f = r.f
  local next_start = f.start + f.len
  if t < next_start and r.used + r.cost <= r.limit then return t end
  if not f.cal and r.nx + r.cost <= r.limit and t < next_start + f.next_len then
    return max(t, next_start)
  end
  return nil
end

local function fixed_commit_at(r, t)
  local f = r.f
  if t < f.start + f.len then
    fixed_commit(r)
  else
    r.nx = r.nx + r.cost
    fixed_write(r, r.used)
    r.remaining = r.limit - r.nx
  end
  -- from when it runs: the end of the last window holding units
  if r.nx > 0 then
    r.reset = ceil_ms(f.start + f.len + f.next_len - t)
  else
    r.reset = ceil_ms(f.start + f.len - t)
  end
end

-- Sliding window counter: the units of the current fixed window (cur) and of
-- the one before (prev), which counts for the part of it still inside the
-- sliding window that ends now: estimate = cur + weighted(prev, e), e the
-- whole ms elapsed in the current window (of a calendar window's own
-- length). O(1) state for any count.
local function weighted(n, p, e)
  return floor(n * (p - e) / p)
end

-- The first ms e in [lo, p) of a window at which weighted(n, p, e) <= k, or
-- p when there is none (weighted only falls as e grows: a binary search).
-- (weighted(n, p, e) <= k once n * (p - e) < (k + 1) * p: the first such e
-- from its closed form, moved to the exact one by weighted itself, which
-- is what a binary search over it would find; it runs for every
-- decision's reset)
local function first_ms(n, p, k, lo)
  if weighted(n, p, lo) <= k then return lo end
  if weighted(n, p, p - 1) > k then return p end
  local e = floor(p - (k + 1) * p / n) + 1
  if e <= lo then e = lo + 1 end
  if e > p - 1 then e = p - 1 end
  while e - 1 > lo and weighted(n, p, e - 1) <= k do e = e - 1 end
  while weighted(n, p, e) > k do e = e + 1 end
  return e
end

-- ms from base (default now) until the estimate, with cur units in the
-- current window, is at most k: later in this window as prev fades, else
-- in the next (where cur is the previous window), else in the one after,
-- when both are gone.
local function counter_wait(r, cur, k, base)
  local f = r.f
  local at -- us from the current window's start
  if cur <= k then
    local e = first_ms(r.prev, f.p, k - cur, r.e)
    if e < f.p then at = e * 1000 end
  end
  if not at then
    local e = first_ms(cur, f.p_next, k, 0)
    if e < f.p_next then at = f.len + e * 1000 else at = f.len + f.p_next * 1000 end
  end
  return ceil_ms(f.start + at - (base or now))
end

-- ms from base (now, or when a delayed request runs) until the estimate is
-- 0; units a delay counted in the next window (nx) weigh until the end of
-- the one after it.
local function counter_reset(r, cur, base)
  local f = r.f
  if r.nx > 0 then
    return ceil_ms(f.start + f.len + f.next_len + first_ms(r.nx, f.p_next, 0, 0) * 1000 - base)
  end
  return counter_wait(r, cur, 0, base)
end

-- The value "<window>:<cur>:<prev>[:<next>]": next is what a delay counted
-- ahead in the next window (it becomes that window's cur).
local function counter_check(key, capacity, count, period_ms, cost, algo, commits, r)
  local f = frame_of(algo, capacity, period_ms)
  local cur, prev, nx = 0, 0, 0
  local i, c, p, n = window_value(key)
  if i == f.id then
    cur, prev, nx = c, p, n
  elseif i == f.prev then
    cur, prev = n, c
  elseif i == f.prev2 then
    prev = n
  end
  local e = floor((now - f.start) / 1000)
  local est = cur + weighted(prev, f.p, e)
  if r then -- decide_one's: the same table every decision, no allocation
    r.key, r.limit, r.cur, r.prev, r.nx, r.cost, r.f, r.e, r.est, r.same =
      key, count, cur, prev, nx, cost, f, e, est, i == f.id
  else
    r = {key = key, limit = count, cur = cur, prev = prev, nx = nx, cost = cost, f = f,
         e = e, est = est, same = i == f.id}
  end
  if verdict(r, cost, count, est) then r.retry = counter_wait(r, cur, count - cost) end
  r.remaining = max(0, count - est)
  -- (a decision that commits when it passes has its reset from the write)
  if not (commits and r.ok) then r.reset = counter_reset(r, cur, now) end
  return r
end

local function counter_write(r, cur, reset)
  local f = r.f
  -- the value counts until the window after the next one ends (as prev)
  if r.nx > 0 then
    redis.call('SET', r.key, frame_id_str(f) .. ':' .. str(cur) .. ':' .. str(r.prev) .. ':' ..
               str(r.nx), 'PX', ceil_ms(f.start + f.len + 2 * f.next_len - now))
  elseif r.same and not f.cal then
    -- this window's own value: its expiry already reaches the next
    -- window's end (as write_fixed's; not a calendar window's, whose next
    -- length an earlier write may not have known)
    redis.call('SET', r.key, frame_id_str(f) .. ':' .. str(cur) .. ':' .. str(r.prev), 'KEEPTTL')
  else
    local px = f.px_counter
    if not px then
      px = tostring(ceil_ms(f.start + f.len + f.p_next * 1000 - now))
      f.px_counter = px
    end
    redis.call('SET', r.key, frame_id_str(f) .. ':' .. str(cur) .. ':' .. str(r.prev), 'PX', px)
  end
  r.reset = reset or counter_reset(r, cur, now)
end

local function counter_commit(r)
  counter_write(r, r.cur + r.cost)
  r.remaining = max(0, r.limit - r.est - r.cost)
end

-- The first instant from t at which the estimate has room: later in this
-- window as prev fades; else in the next (not a calendar's), counted ahead
-- as if this window ends at its limit (or above it, where it is: a reload
-- may lower the limit), so no request this window still allows can take
-- it over.
local function counter_at(r, t)
  local limit, cost, f = r.limit, r.cost, r.f
  if cost > limit then return nil end
  local next_start = f.start + f.len
  if t < next_start and r.cur + cost <= limit then
    local e = first_ms(r.prev, f.p, limit - cost - r.cur, floor((t - f.start) / 1000))
    if e < f.p then return max(t, f.start + e * 1000) end
  end
  if not f.cal and r.nx + cost <= limit and t < next_start + f.next_len then
    local lo = 0
    if t > next_start then lo = floor((t - next_start) / 1000) end
    local e = first_ms(max(r.cur, limit), f.p_next, limit - cost - r.nx, lo)
    if e < f.p_next then return max(t, next_start + e * 1000) end
  end
  return nil
end

local function counter_commit_at(r, t)
  local f = r.f
  local next_start = f.start + f.len
  if t < next_start then
    counter_write(r, r.cur + r.cost)
    r.remaining = max(0, r.limit - r.cur - r.cost -
                         weighted(r.prev, f.p, floor((t - f.start) / 1000)))
    r.reset = counter_reset(r, r.cur + r.cost, t)
    return
  end
  r.nx = r.nx + r.cost
  counter_write(r, r.cur)
  r.remaining = max(0, r.limit - r.nx -
                       weighted(max(r.cur, r.limit), f.p_next, floor((t - next_start) / 1000)))
  r.reset = counter_reset(r, r.cur, t)
end

-- A policy's ban (`ban: {after, within, for}`), sent as one more "limit" on
-- its own key, after the real ones: a sorted set of the times of the pair's
-- recent denials and, once `after` of them fall within `within`, only the
-- member "ban" scored with the ban's end. While banned, every request is
-- denied at once and nothing is written.
local function ban_check(key, after, within_ms, for_ms, _)
  local r = {key = key, ban = true, after = after, within = within_ms * 1000,
             for_us = for_ms * 1000, remaining = 0}
  local untl = redis.call('ZSCORE', key, 'ban')
  if untl and tonumber(untl) > now then
    r.ok = false
    r.banned = true
    r.retry = ceil_ms(tonumber(untl) - now)
  else
    r.ok = true
    r.retry = 0
  end
  r.reset = r.retry
  return r
end

local function ban_commit(_)
end

-- The decision was denied (not by the ban): note it, and ban once `after`
-- denials fall within `within`. Times are unique members as in the log.
local function ban_denied(r)
  redis.call('ZREM', r.key, 'ban')
  redis.call('ZREMRANGEBYSCORE', r.key, '-inf', fmt(now - r.within))
  local n = redis.call('ZCARD', r.key) + 1
  if n >= r.after then
    redis.call('DEL', r.key)
    redis.call('ZADD', r.key, fmt(now + r.for_us), 'ban')
    redis.call('PEXPIRE', r.key, ceil_ms(r.for_us))
    r.retry = ceil_ms(r.for_us)
    r.reset = r.retry
    return true
  end
  local score = now
  local last = redis.call('ZRANGE', r.key, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= score then score = tonumber(last[2]) + 1 end
  redis.call('ZADD', r.key, fmt(score), fmt(score))
  redis.call('PEXPIRE', r.key, ceil_ms(score + r.within - now))
  return false
end

-- The algorithms, by the name the daemon sends (src/redis_script.c). check
-- reads a limit's state and returns r: r.ok, r.limit, r.remaining, r.retry,
-- r.reset; commit(r) charges the units, only when every limit passed, and
-- sets r.remaining and r.reset to what they are after it. A window's at(r,
-- t) is the first instant from t at which it would pass (nil: none it can
-- hold), and commit_at(r, t) charges the units as running then (a delay).
-- Holds: a refund (SETTLE below the estimate, CANCEL) gives units back
-- where they still count: a window's only if the hold (charged at th)
-- was in it, the log's entries from th on that are still in its window,
-- and a funnel's TAT (it carries the backlog). src/model/limiter.c alike.
local function fixed_refund(r, amount, th)
  if th < r.f.start then return end -- an earlier window's: it is over
  local used = max(0, r.used - amount)
  fixed_write(r, used)
  r.remaining = max(0, r.limit - used)
end

local function counter_refund(r, amount, th)
  local f = r.f
  local cur = r.cur
  local prev_start
  if f.cal then
    if f.prev >= 0 then prev_start = f.prev * 1000 else prev_start = math.huge end
  else
    prev_start = f.start - f.len
  end
  if th >= f.start then
    cur = max(0, cur - amount)
  elseif th >= prev_start then
    r.prev = max(0, r.prev - amount)
  else
    return
  end
  counter_write(r, cur)
  r.remaining = max(0, r.limit - cur - weighted(r.prev, f.p, r.e))
end

local function sliding_refund(r, amount, th)
  local lo = max(th, now - r.window + 1)
  local e = redis.call('ZRANGEBYSCORE', r.key, fmt(lo), '+inf', 'LIMIT', 0, amount)
  for i = 1, #e, 500 do
    redis.call('ZREM', r.key, unpack(e, i, min(#e, i + 499)))
  end
  r.remaining = max(0, r.count - (r.used - #e))
  if r.used - #e <= 0 then r.reset = 0 end
end

local function funnel_refund(r, amount, _)
  local tat = max(now, r.tat - amount * r.interval)
  if r.tat > now then -- the key holds a TAT ahead of now
    if tat > now then
      redis.call('SET', r.key, time_str(tat), 'PX', str(max(1, ceil_ms(tat - now))))
    else
      redis.call('DEL', r.key)
    end
  end
  r.remaining = max(0, floor((r.tau - (tat - now)) / r.interval + 1e-6))
  r.reset = ceil_ms(tat - now)
end

local algos = {
  [ALGO_SLIDING] = {check = sliding_check, commit = sliding_commit, at = sliding_at,
                    commit_at = sliding_commit_at, refund = sliding_refund},
  [ALGO_FUNNEL] = {check = funnel_check, commit = funnel_commit, refund = funnel_refund},
  [ALGO_FIXED] = {check = fixed_check, commit = fixed_commit, at = fixed_at,
                  commit_at = fixed_commit_at, refund = fixed_refund},
  [ALGO_COUNTER] = {check = counter_check, commit = counter_commit, at = counter_at,
                    commit_at = counter_commit_at, refund = counter_refund},
  -- calendar windows: their capacity argument is the daemon's bounds (frame)
  [ALGO_CAL_FIXED] = {check = fixed_check, commit = fixed_commit, at = fixed_at,
                      commit_at = fixed_commit_at, refund = fixed_refund},
  [ALGO_CAL_COUNTER] = {check = counter_check, commit = counter_commit, at = counter_at,
                        commit_at = counter_commit_at, refund = counter_refund},
  [ALGO_BAN] = {check = ban_check, commit = ban_commit},
}

-- A short form's cost: an op of the marker byte and a cost gives the
-- cost, any other op false; parsed once per call per string, into the
-- cache the hot loops also read directly.
local function short_form(marker)
  local cache = {}
  return function(op)
    local c = cache[op]
    if c == nil then
      c = string.byte(op) == marker and tonumber(string.sub(op, 2)) or false
      cache[op] = c
    end
    return c
  end, cache
end

-- "=<cost>", the daemon's short form of a decision: the decision before
-- it again (a one-limit ALLOW, "a", given in full or as "=" itself), on
-- the next key, with this cost.
local repeat_cost, repeats = short_form(string.byte(SHORT_REPEAT))
-- "~<cost>", the daemon's short form of a decision over several pairs:
-- the last one given in full in this call ("A" or "P", its groups and
-- their limits) again, on the next keys, with this cost.
local all_repeat_cost = short_form(string.byte(SHORT_ALL_REPEAT))
-- the last decision over several pairs given in full: where its op is,
-- and how many keys it takes (decision_argc keeps them, in call order)
local all_at, all_keys

-- How many ARGV a decision starting at ARGV[a] takes, and how many keys.
-- A decision over several pairs ("A", "P") has, after op and cost, the
-- number of groups, then per group: shadow (0/1), nlimits, its limits.
local function decision_argc(a)
  local op = ARGV[a]
  if repeat_cost(op) then return 1, 1 end
  if op == OP_ALL_ALLOW or op == OP_ALL_PEEK then
    local n, nkeys = HEAD_ARGC, 0
    for _ = 1, tonumber(ARGV[a + 2]) do
      local nl = tonumber(ARGV[a + n + 1])
      n = n + GROUP_ARGC + LIMIT_ARGC * nl
      nkeys = nkeys + nl
    end
    all_at, all_keys = a, nkeys
    return n, nkeys
  end
  if all_repeat_cost(op) then
    if not all_at then error('ERR "~" with no decision over several pairs before it') end
    return 1, all_keys
  end
  -- then the op's own arguments (a reset's notice, a wait, a block, a
  -- hold's nonce...) and keys (the pair's holds)
  local nl = tonumber(ARGV[a + 2])
  return HEAD_ARGC + LIMIT_ARGC * nl + (OP_ARGS[op] or 0), nl + (OP_KEYS[op] or 0)
end

-- The decisions of a batch repeat the same few policy numbers; converting
-- each once (tonumber is strtod, visible in Redis's profile) is enough.
local numcache = {}
local function num(x)
  local v = numcache[x]
  if not v then v = tonumber(x); numcache[x] = v end
  return v
end

local K -- the keys: KEYS, or taken from ARGV (below)

-- A delay ("d"): the first instant within `wait` us at which every limit
-- of the decision passes, each counting what it holds ahead, or nil. Each
-- at() only moves forward, so a few rounds settle it.
local function delay_at(checks, nlimits, wait)
  local t = now
  for _ = 1, 8 do
    local t2 = t
    for i = 1, nlimits do
      local r = checks[i]
      if not r.ban then
        local at = r.algo.at and r.algo.at(r, t)
        if not at then return nil end
        if at > t2 then t2 = at end
      end
    end
    if t2 > now + wait then return nil end
    if t2 == t then return t end
    t = t2
  end
  return nil
end

-- Applies f to every limit of a decision but its ban; returns the one with
-- the least remaining after it, which the answer gives.
local function each_limit(checks, nlimits, f)
  local bind = nil
  for i = 1, nlimits do
    local r = checks[i]
    if not r.ban then
      f(r)
      if not bind or r.remaining < bind.remaining then bind = r end
    end
  end
  return bind
end

-- A block ("k", src/decide/blocks.c): an allowed request also takes up
-- to `want` more units, at most a quarter of what every limit has left
-- after it (so blocks shrink to nothing near a limit, where every answer
-- is Redis's again), which the daemon answers from for valid ms. A
-- window's units are answered only in the window they are counted in
-- (valid ends with it, the shortest window's of the limits). A funnel's are counted as if running ttl from now,
-- the latest the daemon answers from them (the TAT never below now + ttl
-- before they are added): an answer earlier than its count is never one
-- the funnel would refuse. Returns the units, valid (ms) and the window
-- they are counted in, for a give-back ("b"): one window limit's frame
-- id (a fixed window's, a counter's current bucket's), 0 for a funnel's
-- or several limits' (not given back).
local function block_take(checks, nlimits, want, ttl_ms)
  local extra, valid = want, ttl_ms
  for i = 1, nlimits do
    local r = checks[i]
    local room
    if r.new_tat then
      room = floor((r.tau - (max(r.new_tat, now + ttl_ms * 1000) - now)) / r.interval)
    else
      room = r.limit - (r.est or r.used) - r.cost
      -- a window's: until it ends (ttl is a funnel's)
      if i == 1 then valid = 34560000000 end
      valid = min(valid, floor((r.f.start + r.f.len - now) / 1000))
    end
    extra = min(extra, floor(room / 4))
  end
  if extra <= 0 or valid <= 0 then return 0, 0, 0 end
  for i = 1, nlimits do
    local r = checks[i]
    if r.new_tat then
      r.new_tat = max(r.new_tat, now + ttl_ms * 1000) + extra * r.interval
      r.after_remaining = max(0, floor((r.tau - (r.new_tat - now)) / r.interval + 1e-6))
    else
      r.cost = r.cost + extra
    end
  end
  local window = 0
  if nlimits == 1 and checks[1].f then window = checks[1].f.id end
  return extra, valid, window
end

-- A give-back ("b", src/decide/giveback.c): units of a block the daemon
-- took and will not answer (it is stopping), taken off the count of the
-- window they were counted in: only while Redis's clock is still in that
-- window and the key holds that window's value (window: the id "k"
-- answered). Given to a later window they would be admitted on top of
-- its own limit; a window that ended has no use for them (they lapsed).
-- One window limit, a fixed window's count or a counter's current bucket
-- (a window of 0, a funnel's or several limits', takes nothing back),
-- and at most what the count holds. Answers the units taken back.
local function give_back(out, units, nlimits, a, k)
  local algo, given = ARGV[a], 0
  local window = num(ARGV[a + LIMIT_ARGC * nlimits])
  local impl = algos[algo]
  local fixed = impl and impl.check == fixed_check
  local counter = impl and impl.check == counter_check
  if nlimits == 1 and window ~= 0 and units > 0 and (fixed or counter) then
    local capacity = ARGV[a + 1]
    if algo ~= ALGO_CAL_FIXED and algo ~= ALGO_CAL_COUNTER then capacity = num(capacity) end
    local r = impl.check(K[k], capacity, num(ARGV[a + 2]), num(ARGV[a + 3]), 0, algo)
    if r.f.id == window and r.same then
      if fixed then
        given = min(units, r.used)
        fixed_write(r, r.used - given)
      else
        given = min(units, r.cur)
        counter_write(r, r.cur - given)
      end
    end
  end
  out[#out + 1] = given
end

-- A STATE ("t"): after the PEEK's five, STATE_KEY_WIDTH integers per key
-- of the decision, its limits' then its ban's, from their checks: the
-- units counted (a sliding log's entries, a fixed window's count, a
-- counter's estimate, what fills a funnel: its capacity less what it
-- has room for), remaining, reset (ms) and the window holding now (ms,
-- Redis's clock; 0 0 for a log or a funnel, which have none); a ban's:
-- 1 while it is in force, 0, the ms it has left, 0, 0.
local function state_out(out, checks, nlimits)
  local n = #out
  for i = 1, nlimits do
    local r = checks[i]
    local used, start, stop = 0, 0, 0
    if r.ban then
      if r.banned then used = 1 end
      out[n + 1], out[n + 2], out[n + 3] = used, 0, r.banned and r.retry or 0
    else
      if r.new_tat then
        used = r.limit - r.remaining
      elseif r.f then
        used = r.est or r.used
        start, stop = floor(r.f.start / 1000), floor((r.f.start + r.f.len) / 1000)
      else
        used = r.used
      end
      out[n + 1], out[n + 2], out[n + 3] = used, r.remaining, r.reset
    end
    out[n + 4], out[n + 5] = start, stop
    n = n + STATE_KEY_WIDTH
  end
end

-- The five integers of an allowed answer.
local function allowed_out(out, bind, remaining, retry)
  local n = #out
  out[n + 1] = 1
  out[n + 2] = bind.limit
  out[n + 3] = remaining
  out[n + 4] = retry
  out[n + 5] = bind.reset
end

-- One decision: keys from K[k], its arguments from ARGV index a.
local function decide(out, op, cost, nlimits, a, k)
  -- a STATE decides as a PEEK, then tells every key's figures (state_out)
  local state = op == OP_STATE
  if state then op = OP_PEEK end
  if op == OP_GIVE then return give_back(out, cost, nlimits, a, k) end
  if op == OP_RESET then
    for i = 0, nlimits - 1 do redis.call('DEL', K[k + i]) end
    -- every daemon drops its cached denials for this pair
    redis.call('PUBLISH', ARGV[a + 4 * nlimits], ARGV[a + 4 * nlimits + 1])
    out[#out + 1] = 1; out[#out + 1] = 0; out[#out + 1] = 0
    out[#out + 1] = 0; out[#out + 1] = 0
    return
  end
  -- holds ("h" HOLD, "s" SETTLE, "x" CANCEL): the pair's hash of open
  -- holds, after its limits' keys; a field per hold, its nonce, valued
  -- "<estimate>:<charged at, us>:<open until, us>"
  local hkey = K[k + nlimits]
  local th, diff, notice, hold_pttl
  -- a HOLD reads its holds' key before anything is charged: on a Cluster
  -- a key that moved fails here, with nothing written (the daemon asks
  -- again, alone, and must not charge twice)
  if op == OP_HOLD then hold_pttl = redis.call('PTTL', hkey) end
  if op == OP_SETTLE or op == OP_CANCEL then
    local nonce = ARGV[a + 4 * nlimits]
    notice = a + 4 * nlimits + 1
    local v = redis.call('HGET', hkey, nonce)
    local est, t, untl
    if v then
      est, t, untl = string.match(v, '^(%d+):(%d+):(%d+)$')
      -- closed after the checks below: on a Cluster a limit key that
      -- moved fails there, and this must then not have closed the hold
      -- (the daemon asks again, alone)
    end
    if v and (not est or tonumber(untl) <= now) then redis.call('HDEL', hkey, nonce) end
    if not est or tonumber(untl) <= now then
      -- not open: settled, cancelled, expired (at its estimate), never taken
      out[#out + 1] = -3
      for _ = 2, REPLY_WIDTH do out[#out + 1] = 0 end
      return
    end
    if op == OP_CANCEL then diff = -tonumber(est) else diff = cost - tonumber(est) end
    th = tonumber(t)
    cost = math.abs(diff)
  end
  local checks = {}
  local all_ok = true
  for i = 1, nlimits do
    local algo = ARGV[a]
    local capacity = ARGV[a + 1]
    if algo ~= ALGO_CAL_FIXED and algo ~= ALGO_CAL_COUNTER then capacity = num(capacity) end
    local count = num(ARGV[a + 2])
    local period = num(ARGV[a + 3])
    a = a + 4
    local r = algos[algo].check(K[k], capacity, count, period, cost, algo)
    r.algo = algos[algo]
    k = k + 1
    checks[i] = r
    if not r.ok then all_ok = false end
  end
  local bind = nil
  if th then
    redis.call('HDEL', hkey, ARGV[notice - 1])
    -- a settle: the difference charged (whatever the limits hold) or given back
    bind = each_limit(checks, nlimits, function(r)
      if diff > 0 then r.algo.commit(r) elseif diff < 0 then r.algo.refund(r, cost, th) end
    end)
    -- units came back: every daemon drops its cached denials of the pair
    if diff < 0 then redis.call('PUBLISH', ARGV[notice], ARGV[notice + 1]) end
    allowed_out(out, bind, max(0, bind.remaining), 0)
    return
  end
  -- all or nothing: a limit is charged only when every limit passes
  local ban = checks[nlimits].ban and checks[nlimits] or nil
  local at = nil
  if op == OP_DELAY and not all_ok and not (ban and ban.banned) then
    at = delay_at(checks, nlimits, num(ARGV[a]))
  end
  if ban and ban.banned then
    bind = ban
  elseif at then
    -- delayed: charged as running at `at`, answered as allowed then
    bind = each_limit(checks, nlimits, function(r) r.algo.commit_at(r, at) end)
    allowed_out(out, bind, bind.remaining, max(1, ceil_ms(at - now)))
    return
  elseif op == OP_CHARGE then
    -- a CHARGE: counted whatever the limits hold, the cost was spent
    bind = each_limit(checks, nlimits, function(r) r.algo.commit(r) end)
    allowed_out(out, bind, max(0, bind.remaining), 0)
    return
  elseif all_ok then
    local extra, valid, window = 0, 0, 0
    if op == OP_BLOCK then
      extra, valid, window = block_take(checks, nlimits, num(ARGV[a]), num(ARGV[a + 1]))
    end
    for i = 1, nlimits do
      local r = checks[i]
      if op ~= OP_PEEK then r.algo.commit(r) end
      if not r.ban and (not bind or r.remaining < bind.remaining) then bind = r end
    end
    if op == OP_BLOCK then
      -- the request's own answer, as if no block were taken, then the block
      allowed_out(out, bind, bind.remaining + extra, 0)
      out[#out + 1] = extra
      out[#out + 1] = valid
      out[#out + 1] = window
      return
    end
    if op == OP_HOLD then
      -- a HOLD: open until its time, its estimate charged now
      local hold_ms = num(ARGV[a + 1])
      redis.call('HSET', hkey, ARGV[a], fmt(cost) .. ':' .. fmt(now) .. ':' ..
                 fmt(now + hold_ms * 1000))
      -- (its ttl as read before the HSET, which leaves a ttl as it was)
      if hold_pttl < hold_ms then redis.call('PEXPIRE', hkey, hold_ms) end
    end
  else
    if ban and op ~= OP_PEEK and ban_denied(ban) then ban.ok = false end
    for i = 1, nlimits do
      local r = checks[i]
      if not r.ok then
        if not bind or (bind.retry ~= -1 and (r.retry == -1 or r.retry > bind.retry)) then
          bind = r
        end
      end
    end
  end
  -- a ban answers with the policy's first limit
  if bind.ban then bind.limit = checks[1].limit end
  local n = #out
  if all_ok then out[n + 1] = 1 else out[n + 1] = 0 end
  out[n + 2] = bind.limit
  out[n + 3] = bind.remaining
  out[n + 4] = bind.retry
  out[n + 5] = bind.reset
  if op == OP_BLOCK then out[n + 6] = 0; out[n + 7] = 0; out[n + 8] = 0 end
  if state then state_out(out, checks, nlimits) end
end

-- The table decide_one's checks (and counter_run's helpers) fill in place
-- of one of their own: one decision at a time uses it.
local one_r = {}

-- The common decision, "a" on one limit (no ban): decide's, without the
-- tables and loops several limits need.
local function decide_one(out, cost, a, k)
  local algo = ARGV[a]
  local impl = algos[algo]
  local capacity = ARGV[a + 1]
  if algo ~= ALGO_CAL_FIXED and algo ~= ALGO_CAL_COUNTER then capacity = num(capacity) end
  local r = impl.check(K[k], capacity, num(ARGV[a + 2]), num(ARGV[a + 3]), cost, algo, true,
                       one_r)
  local n = #out
  if r.ok then
    impl.commit(r)
    out[n + 1] = 1
  else
    out[n + 1] = 0
  end
  out[n + 2] = r.limit
  out[n + 3] = r.remaining
  out[n + 4] = r.retry
  out[n + 5] = r.reset
end

-- decide_all for its commonest shape (Envoy's descriptors, several pairs
-- each with one fixed window, none in shadow mode, no ban), without a table
-- per limit: the same reads, writes and answer. False, having read nothing,
-- when the decision is of another shape.
-- (Its arrays are made once per call of the script: each decision writes
-- the first ngroups entries before it reads them.)
-- The groups' shape, counts and frames are read once per block of
-- arguments (shape_at): "~" repeats the same block decision after decision.
local fs, used, nx, same, to_end, count, remaining, reset, retry, ok =
  {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
local shape_at, shape_ok
local function decide_all_fixed(out, op, cost, ngroups, a, k)
  if a ~= shape_at then
    shape_at, shape_ok = a, true
    for g = 1, ngroups do
      if ARGV[a] ~= '0' or ARGV[a + 1] ~= '1' or ARGV[a + 2] ~= ALGO_FIXED then
        shape_ok = false
        break
      end
      local period_ms = num(ARGV[a + 5])
      fs[g], count[g] = frames[period_ms] or frame_of(ALGO_FIXED, nil, period_ms), num(ARGV[a + 4])
      a = a + (GROUP_ARGC + LIMIT_ARGC)
    end
  end
  if not shape_ok then return false end
  local all_ok = true
  for g = 1, ngroups do
    local c = count[g]
    used[g], nx[g], same[g], to_end[g] = fixed_read(K[k + g - 1], fs[g], c)
    if cost > c or used[g] + cost > c then all_ok = false end
  end
  local bind = 0
  if all_ok then
    for g = 1, ngroups do
      local u = used[g]
      if op == OP_ALL_ALLOW then
        u = u + cost
        reset[g] = keep_ms(fs[g], nx[g], count[g], to_end[g], u)
        write_fixed(K[k + g - 1], fs[g], nx[g], to_end[g], reset[g], u, same[g])
        remaining[g] = count[g] - u
      else
        remaining[g] = max(0, count[g] - u)
        if nx[g] > 0 or u > 0 then reset[g] = keep_ms(fs[g], nx[g], count[g], to_end[g], u)
        else reset[g] = 0 end
      end
      if bind == 0 or remaining[g] < remaining[bind] then bind = g end
    end
    local n = #out
    out[n + 1] = 1; out[n + 2] = count[bind]; out[n + 3] = remaining[bind]; out[n + 4] = 0
    out[n + 5] = reset[bind]; out[n + 6] = bind; out[n + 7] = 0
    n = n + 7
    for g = 1, ngroups do
      out[n + 1] = 1; out[n + 2] = remaining[g]; out[n + 3] = reset[g]
      n = n + 3
    end
    return true
  end
  for g = 1, ngroups do
    local u, c = used[g], count[g]
    remaining[g] = max(0, c - u)
    if nx[g] > 0 or u > 0 then reset[g] = keep_ms(fs[g], nx[g], c, to_end[g], u)
    else reset[g] = 0 end
    ok[g] = cost <= c and u + cost <= c
    if cost > c then retry[g] = -1 elseif not ok[g] then retry[g] = to_end[g] else retry[g] = 0 end
    if not ok[g] and (bind == 0 or (retry[bind] ~= -1 and
                                    (retry[g] == -1 or retry[g] > retry[bind]))) then
      bind = g
    end
  end
  local n = #out
  out[n + 1] = 0; out[n + 2] = count[bind]; out[n + 3] = remaining[bind]
  out[n + 4] = retry[bind]; out[n + 5] = reset[bind]; out[n + 6] = bind; out[n + 7] = 0
  n = n + 7
  for g = 1, ngroups do
    if ok[g] then out[n + 1] = 1 else out[n + 1] = 0 end
    out[n + 2] = remaining[g]; out[n + 3] = reset[g]
    n = n + 3
  end
  return true
end

-- One decision over several (user, action) pairs, each a group of limits
-- (its ban last, if it has one): allowed only if every group allows, and
-- then every group is charged; denied, nothing is charged. A shadow group
-- (shadow mode on its policy) is decided and charged when it passes, but
-- never denies the request; the first one that would have is reported.
-- Seven integers: the five of a decision, then the deciding group and the
-- first shadow group that would have denied (1-based; 0 for none); then
-- three per group (see the end).
local function decide_all(out, op, cost, ngroups, a, k)
  if decide_all_fixed(out, op, cost, ngroups, a, k) then return end
  local groups = {}
  local real = 0
  for g = 1, ngroups do
    local grp = {shadow = ARGV[a] == '1', ok = true}
    local nl = num(ARGV[a + 1])
    a = a + 2
    for i = 1, nl do
      local name = ARGV[a]
      local algo = algos[name]
      local capacity = ARGV[a + 1]
      if name ~= ALGO_CAL_FIXED and name ~= ALGO_CAL_COUNTER then capacity = num(capacity) end
      local r = algo.check(K[k], capacity, num(ARGV[a + 2]), num(ARGV[a + 3]), cost, name)
      r.algo = algo
      r.group = g
      a = a + 4
      k = k + 1
      grp[i] = r
      if not r.ok then grp.ok = false end
      if r.ban then grp.ban = r end
    end
    grp.n = nl
    if not grp.shadow then real = real + 1 end
    groups[g] = grp
  end
  -- (the daemon never sends only shadow groups; if it did, none is one)
  if real == 0 then for g = 1, ngroups do groups[g].shadow = false end end
  local all_ok, banned = true, nil
  for g = 1, ngroups do
    local grp = groups[g]
    if not grp.shadow then
      if not grp.ok then all_ok = false end
      if not banned and grp.ban and grp.ban.banned then banned = grp end
    end
  end
  local bind = nil
  if banned then
    bind = banned.ban
    bind.limit = banned[1].limit
  elseif all_ok then
    for g = 1, ngroups do
      local grp = groups[g]
      if grp.ok and op == OP_ALL_ALLOW then
        for i = 1, grp.n do grp[i].algo.commit(grp[i]) end
      end
      if not grp.shadow then
        for i = 1, grp.n do
          local r = grp[i]
          if not r.ban and (not bind or r.remaining < bind.remaining) then bind = r end
        end
      end
    end
  else
    for g = 1, ngroups do
      local grp = groups[g]
      if not grp.shadow and not grp.ok then
        if grp.ban and op == OP_ALL_ALLOW and ban_denied(grp.ban) then
          grp.ban.ok = false
          grp.ban.triggered = true
          grp.ban.limit = grp[1].limit
        end
        for i = 1, grp.n do
          local r = grp[i]
          if not r.ok and (not bind or (bind.retry ~= -1 and (r.retry == -1 or r.retry > bind.retry))) then
            bind = r
          end
        end
      end
    end
  end
  -- shadow groups: a denial is counted by their ban as if enforced
  local shadow_denied = 0
  for g = 1, ngroups do
    local grp = groups[g]
    if grp.shadow and not grp.ok then
      if shadow_denied == 0 then shadow_denied = g end
      if grp.ban and not grp.ban.banned and op == OP_ALL_ALLOW and ban_denied(grp.ban) then
        grp.ban.triggered = true
      end
    end
  end
  if all_ok and not banned then out[#out + 1] = 1 else out[#out + 1] = 0 end
  out[#out + 1] = bind.limit
  out[#out + 1] = bind.remaining
  out[#out + 1] = bind.retry
  out[#out + 1] = bind.reset
  out[#out + 1] = bind.group
  out[#out + 1] = shadow_denied
  -- then three per group, its own figures (gRPC answers each descriptor):
  -- whether it passed, and the remaining and reset of its tightest limit
  -- (after the charge, if charged); a ban in force: 0, 0 and its end
  for g = 1, ngroups do
    local grp = groups[g]
    if grp.ban and (grp.ban.banned or grp.ban.triggered) then
      out[#out + 1] = 0
      out[#out + 1] = 0
      out[#out + 1] = grp.ban.reset
    else
      local b = nil
      for i = 1, grp.n do
        local r = grp[i]
        if not r.ban and (not b or r.remaining < b.remaining) then b = r end
      end
      if grp.ok then out[#out + 1] = 1 else out[#out + 1] = 0 end
      out[#out + 1] = b.remaining
      out[#out + 1] = b.reset
    end
  end
end

local n = tonumber(ARGV[2])
K = KEYS
if #KEYS == 0 then
  -- keys follow the decisions' arguments
  local e = 3
  for _ = 1, n do e = e + decision_argc(e) end
  K = {}
  for i = e, #ARGV do K[#K + 1] = ARGV[i] end
  all_at = nil -- the decisions below find it again, in order
end

-- Runs: consecutive one-limit ALLOWs ("a" or "="; what the daemon's
-- batches mostly hold), decided by one call of a run's function under one
-- pcall instead of a dispatch and a pcall each. A run starts at ARGV[a]
-- (keys from K[k], `left` decisions at most; p: where the limit of the
-- last ALLOW given in full starts, which "=" repeats) and returns where it
-- stopped, at the first decision of another shape. The policy's numbers
-- are converted again only when their strings change. A run that fails
-- leaves its earlier decisions answered (five integers each, written after
-- the decision's last Redis call) and the failed one unwritten.
-- The three runs below repeat their step (the op, the cost, where the
-- next decision starts) and their test for the run going on, written out
-- rather than called: a Lua call per decision for each cost Redis 1,200 to
-- 2,100 instructions a decision (3-6%; bench/script_cost.py --instructions).

-- One fixed window ("w"): fixed_check, fixed_commit and decide_one's
-- answer without the table.
local function fixed_run(out, a, k, left, p)
  local cost_s, count_s, period_s, cost, count, f
  local n = #out
  repeat
    local op = ARGV[a]
    if op == OP_ALLOW then
      p = a + HEAD_ARGC
      if ARGV[a + 1] ~= cost_s then cost_s = ARGV[a + 1]; cost = num(cost_s) end
      a = a + (HEAD_ARGC + LIMIT_ARGC)
    else
      cost, cost_s = repeats[op] or repeat_cost(op), nil
      a = a + 1
    end
    if ARGV[p + 2] ~= count_s or ARGV[p + 3] ~= period_s then
      count_s, period_s = ARGV[p + 2], ARGV[p + 3]
      count = num(count_s)
      local period_ms = num(period_s)
      f = frames[period_ms] or frame_of(ALGO_FIXED, nil, period_ms)
    end
    local key = K[k]
    local used, nx, same, to_end = fixed_read(key, f, count)
    if cost > count or used + cost > count then
      local reset = 0
      if nx > 0 or used > 0 then reset = keep_ms(f, nx, count, to_end, used) end
      out[n + 1] = 0; out[n + 2] = count; out[n + 3] = max(0, count - used)
      if cost > count then out[n + 4] = -1 else out[n + 4] = to_end end
      out[n + 5] = reset
    else
      used = used + cost
      local reset = keep_ms(f, nx, count, to_end, used)
      write_fixed(key, f, nx, to_end, reset, used, same)
      out[n + 1] = 1; out[n + 2] = count; out[n + 3] = count - used; out[n + 4] = 0
      out[n + 5] = reset
    end
    n, k, left = n + 5, k + 1, left - 1
    op = ARGV[a]
  until left == 0 or not (repeats[op] or op == OP_ALLOW and ARGV[a + 2] == '1' and
                          ARGV[a + 3] == ALGO_FIXED)
  return a, k, p
end

-- One funnel ("f"): funnel_check, funnel_commit and decide_one's answer
-- without the table.
local function funnel_run(out, a, k, left, p)
  local cost_s, cap_s, count_s, period_s, cost, capacity, interval, tau
  local n = #out
  repeat
    local op = ARGV[a]
    if op == OP_ALLOW then
      p = a + HEAD_ARGC
      if ARGV[a + 1] ~= cost_s then cost_s = ARGV[a + 1]; cost = num(cost_s) end
      a = a + (HEAD_ARGC + LIMIT_ARGC)
    else
      cost, cost_s = repeats[op] or repeat_cost(op), nil
      a = a + 1
    end
    if ARGV[p + 1] ~= cap_s or ARGV[p + 2] ~= count_s or ARGV[p + 3] ~= period_s then
      cap_s, count_s, period_s = ARGV[p + 1], ARGV[p + 2], ARGV[p + 3]
      capacity = num(cap_s)
      interval = num(period_s) * 1000 / num(count_s)
      tau = capacity * interval
    end
    local key = K[k]
    local tat = tonumber(rcall('GET', key))
    if not tat or tat < now then tat = now end
    local new_tat = tat + cost * interval
    if cost <= capacity and new_tat - now <= tau + 1 then
      local reset = ceil_ms(new_tat - now)
      rcall('SET', key, time_str(new_tat), 'PX', str(max(1, reset)))
      out[n + 1] = 1; out[n + 2] = capacity
      out[n + 3] = floor((tau - (new_tat - now)) / interval + 1e-6)
      out[n + 4] = 0; out[n + 5] = reset
    else
      out[n + 1] = 0; out[n + 2] = capacity
      out[n + 3] = max(0, floor((tau - (tat - now)) / interval + 1e-6))
      if cost > capacity then out[n + 4] = -1 else out[n + 4] = ceil_ms(new_tat - now - tau) end
      out[n + 5] = ceil_ms(tat - now)
    end
    n, k, left = n + 5, k + 1, left - 1
    op = ARGV[a]
  until left == 0 or not (repeats[op] or op == OP_ALLOW and ARGV[a + 2] == '1' and
                          ARGV[a + 3] == ALGO_FUNNEL)
  return a, k, p
end

-- One sliding window counter ("c"): counter_check, counter_commit and
-- decide_one's answer with one table for the helpers they share. An
-- allowed decision's reset depends on its frame and its count only (when
-- nothing is counted ahead): made once per call per count.
local function counter_run(out, a, k, left, p)
  local cost_s, count_s, period_s, cost, count, f, e, resets
  local r = one_r
  local n = #out
  repeat
    local op = ARGV[a]
    if op == OP_ALLOW then
      p = a + HEAD_ARGC
      if ARGV[a + 1] ~= cost_s then cost_s = ARGV[a + 1]; cost = num(cost_s) end
      a = a + (HEAD_ARGC + LIMIT_ARGC)
    else
      cost, cost_s = repeats[op] or repeat_cost(op), nil
      a = a + 1
    end
    if ARGV[p + 2] ~= count_s or ARGV[p + 3] ~= period_s then
      count_s, period_s = ARGV[p + 2], ARGV[p + 3]
      count = num(count_s)
      local period_ms = num(period_s)
      f = frames[period_ms] or frame_of(ALGO_COUNTER, nil, period_ms)
      e = floor((now - f.start) / 1000)
      resets = f.resets
      if not resets then resets = {}; f.resets = resets end
    end
    local key = K[k]
    local cur, prev, nx = 0, 0, 0
    local i, c, pv, nn = window_value(key)
    if i == f.id then
      cur, prev, nx = c, pv, nn
    elseif i == f.prev then
      cur, prev = nn, c
    elseif i == f.prev2 then
      prev = nn
    end
    local est = cur
    if prev ~= 0 then est = cur + weighted(prev, f.p, e) end
    r.key, r.limit, r.cur, r.prev, r.nx, r.cost, r.f, r.e, r.est, r.same =
      key, count, cur, prev, nx, cost, f, e, est, i == f.id
    if cost <= count and est + cost <= count then
      local used = cur + cost
      local cached = nx == 0 and prev == 0
      counter_write(r, used, cached and resets[used])
      out[n + 1] = 1; out[n + 2] = count; out[n + 3] = max(0, count - est - cost); out[n + 4] = 0
      out[n + 5] = r.reset
      if cached then resets[used] = r.reset end
    else
      out[n + 1] = 0; out[n + 2] = count; out[n + 3] = max(0, count - est)
      if cost > count then out[n + 4] = -1 else out[n + 4] = counter_wait(r, cur, count - cost) end
      out[n + 5] = counter_reset(r, cur, now)
    end
    n, k, left = n + 5, k + 1, left - 1
    op = ARGV[a]
  until left == 0 or not (repeats[op] or op == OP_ALLOW and ARGV[a + 2] == '1' and
                          ARGV[a + 3] == ALGO_COUNTER)
  return a, k, p
end

local runs = {[ALGO_FIXED] = fixed_run, [ALGO_FUNNEL] = funnel_run, [ALGO_COUNTER] = counter_run}

-- Any other one limit (no ban): decide_one for each.
local function one_run(out, a, k, left, p)
  repeat
    local op = ARGV[a]
    local cost
    if op == OP_ALLOW then
      p, cost, a = a + HEAD_ARGC, num(ARGV[a + 1]), a + (HEAD_ARGC + LIMIT_ARGC)
    else
      cost, a = repeats[op] or repeat_cost(op), a + 1
    end
    decide_one(out, cost, p, k)
    k, left = k + 1, left - 1
    op = ARGV[a]
  until left == 0 or not (repeats[op] or op == OP_ALLOW and ARGV[a + 2] == '1' and
                          not runs[ARGV[a + 3]] and ARGV[a + 3] ~= ALGO_BAN)
  return a, k, p
end

-- A run of "~": consecutive repeats of the decision over pairs whose op
-- is op and whose groups start at ARGV[at + 3], nkeys keys each, under one
-- pcall; stops at the first decision of another shape.
local function all_run(out, a, k, left, op, at, nkeys)
  local ngroups = num(ARGV[at + 2])
  repeat
    decide_all(out, op, all_repeat_cost(ARGV[a]), ngroups, at + 3, k)
    a, k, left = a + 1, k + nkeys, left - 1
  until left == 0 or not all_repeat_cost(ARGV[a])
end

local out = {}
local failure -- Redis's text of the first decision that failed (-1)

-- A decision that failed inside Redis (err: what pcall caught), its
-- `width` integers already removed: its answer, -1 (or -2: keys not on
-- this node) and zeros. Returns an error reply when the whole call must
-- fail instead.
local function failed(err, width)
  local e = type(err) == 'table' and tostring(err.err) or tostring(err)
  -- This node cannot write at all (a demoted master): fail the whole call
  -- with Redis's own error so the daemon looks for the master. Nothing was
  -- written by any decision of the call.
  if string.find(e, 'READONLY', 1, true) or string.find(e, 'MASTERDOWN', 1, true) then
    return redis.error_reply(string.match(e, '%u[%u_]+.*') or e)
  end
  -- The Redis user may not run a command (or touch a key) the decisions
  -- need: every decision would fail the same way, so fail the call with a
  -- NOPERM error the daemon reports, rather than one silent -1 each.
  if acl_refusal(e) then
    return redis.error_reply('NOPERM ' .. (string.match(e, '^%u+ (.*)') or e))
  end
  -- A cluster that is down (a batch's undeclared keys are only checked
  -- here): the whole call fails as CLUSTERDOWN, which the daemon retries.
  if string.find(e, 'cluster is down', 1, true) then
    return redis.error_reply('CLUSTERDOWN ' .. e)
  end
  local code = -1
  if string.find(e, 'non local key', 1, true) then code = -2 end
  if code == -1 and not failure then failure = e end
  out[#out + 1] = code
  for _ = 2, width do out[#out + 1] = 0 end
  return nil
end

local a, k, d = 3, 1, 1
local p -- where the limit of the last one-limit ALLOW given in full starts
while d <= n do
  local op = ARGV[a]
  local run
  if repeat_cost(op) then
    run = runs[ARGV[p]] or one_run
  elseif op == OP_ALLOW and ARGV[a + 2] == '1' and ARGV[a + 3] ~= ALGO_BAN then
    run = runs[ARGV[a + 3]] or one_run
  end
  if run then
    local before = #out
    local ok, ra, rk, rp = pcall(run, out, a, k, n - d + 1, p)
    local done = floor((#out - before) / REPLY_WIDTH)
    for i = #out, before + REPLY_WIDTH * done + 1, -1 do out[i] = nil end
    d = d + done
    if ok then
      a, k, p = ra, rk, rp
    else
      -- past the decisions answered, and the one that failed (ra: why)
      for _ = 0, done do
        if ARGV[a] == OP_ALLOW then
          p, a = a + HEAD_ARGC, a + (HEAD_ARGC + LIMIT_ARGC)
        else
          a = a + 1
        end
        k = k + 1
      end
      d = d + 1
      local reply = failed(ra, REPLY_WIDTH)
      if reply then return reply end
    end
  else
    local argc, nkeys = decision_argc(a)
    -- at: where the decision's op, cost and limits are (for "~", the
    -- decision over pairs it repeats, with its own cost)
    local at, cost = a, all_repeat_cost(op)
    if cost then at, op = all_at, ARGV[all_at] else cost = num(ARGV[a + 1]) end
    local before = #out
    local width
    if op == OP_ALL_ALLOW or op == OP_ALL_PEEK then
      width = PAIRS_REPLY_WIDTH + GROUP_REPLY_WIDTH * num(ARGV[at + 2])
    else
      width = OP_REPLY[op] or REPLY_WIDTH
      -- a STATE's: per key too (the limits' and the ban's)
      if op == OP_STATE then width = width + STATE_KEY_WIDTH * num(ARGV[a + 2]) end
    end
    -- A key of the wrong type (written by something else) fails only its own
    -- decision, not the whole batch. Checks run before any write, so a failed
    -- decision has changed nothing.
    local ok, err
    if at ~= a then
      -- "~": this one and the "~" after it in one run (all_run), its
      -- decisions answered up to one that failed, which fails alone
      ok, err = pcall(all_run, out, a, k, n - d + 1, op, at, nkeys)
      local done = floor((#out - before) / width)
      for i = #out, before + width * done + 1, -1 do out[i] = nil end
      if not ok then
        local reply = failed(err, width)
        if reply then return reply end
        done = done + 1
      end
      argc, nkeys, d = done, nkeys * done, d + done - 1
      ok = true
    elseif op == OP_ALL_ALLOW or op == OP_ALL_PEEK then
      ok, err = pcall(decide_all, out, op, cost, num(ARGV[at + 2]), at + 3, k)
    else
      ok, err = pcall(decide, out, op, cost, num(ARGV[a + 2]), a + 3, k)
    end
    if not ok then
      for i = #out, before + 1, -1 do out[i] = nil end
      local reply = failed(err, width)
      if reply then return reply end
    end
    a, k, d = a + argc, k + nkeys, d + 1
  end
end
if failure then out[#out + 1] = failure end
return out
