/* policy.h - the policy model: algorithms, limits, durations and rates. */
#ifndef RL_POLICY_H
#define RL_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "calendar.h"
#include "yenum.h"

struct override_set;

#define POLICY_NAME_MAX 64
/* a store's name (stores: NAME), [a-z0-9_-] */
#define POLICY_STORE_NAME_MAX 32
#define POLICY_MAX_LIMITS 8
/* A sliding-window log keeps one zset member per unit allowed in the window,
 * so its memory grows with the count; larger counts belong in a funnel. */
#define POLICY_SLIDING_MAX_COUNT 100000
#define POLICY_MAX_COUNT 1000000000LL
#define POLICY_MAX_PERIOD_MS (366LL * 24 * 3600 * 1000)
/* Room for a duration or rate error; longer ones (a wall of digits) are cut. */
#define POLICY_ERR_MAX 160

/*
 * The algorithms. Adding one: an entry here, its name in policy_algo_names
 * (policy.c: every message and parser reads it there), its cases in the
 * switches the compiler then points at (policy.c, keys.c, redis_script.c,
 * the C model), and its function in src/lua/ratelimit.lua.
 */
enum policy_algo {
	POLICY_SLIDING_WINDOW,	/* exact sliding log */
	POLICY_FUNNEL,		/* GCRA */
	POLICY_FIXED_WINDOW,	/* a counter per window aligned to the clock */
	POLICY_SLIDING_COUNTER, /* two fixed windows, the older one weighted */
	POLICY_CONCURRENCY,	/* leases held at once (lease.h): ACQUIRE, not ALLOW */
};
#define POLICY_ALGO_N (POLICY_CONCURRENCY + 1)

/* How an algorithm's limits are written in a policy. */
enum policy_shape {
	POLICY_SHAPE_WINDOWS, /* limits: [COUNT/PERIOD, ...], distinct periods */
	POLICY_SHAPE_RATE,    /* capacity: N, rate: COUNT/PERIOD; one limit */
	POLICY_SHAPE_LEASE,   /* limit: N, lease: DURATION; one limit */
};
/* The most units a concurrency policy may hold at once: every ACQUIRE
 * reads the key's leases (one entry per lease). */
#define POLICY_CONCURRENCY_MAX 100000

/* What to answer when the store cannot decide in time. */
enum policy_on_error {
	POLICY_ON_ERROR_INHERIT = -1,
	POLICY_ON_ERROR_ALLOW = 0,
	POLICY_ON_ERROR_DENY = 1,
	POLICY_ON_ERROR_ERROR = 2,
	POLICY_ON_ERROR_LOCAL = 3, /* decide in this daemon's memory (local.h) */
};

/*
 * One limit. Sliding window: at most `count` units in any `period_ms`
 * (capacity == count). Funnel (GCRA): `capacity` units may pass at once,
 * then one unit drains every period_ms/count. Concurrency: at most `count`
 * (== capacity) units held at once, each lease for period_ms.
 */
struct policy_limit {
	int64_t capacity;
	int64_t count;
	int64_t period_ms;
	/* a calendar window ("10000/month@15": fixed_window and
	 * sliding_window_counter): its unit and anchor, in the policy's
	 * timezone; period_ms is then the unit's longest (calendar_max_ms) */
	enum calendar_unit calendar;
	int anchor;
};

/* A funnel's delay: a request that would pass within max_ms is answered
 * ALLOWED when its slot comes instead of DENIED now (delay.h). */
struct policy_delay {
	int64_t max_ms; /* 0: none */
};
#define POLICY_DELAY_MAX_MS 60000

/* Blocks for hot keys (src/decide/blocks.h): a daemon takes up to max
 * units beyond a request in the same script call, and answers later
 * requests of the pair from them, for at most ttl_ms (and never past the
 * window they were counted in). max 0: none. */
struct policy_blocks {
	int64_t max;
	int64_t ttl_ms;
	/* max: auto (a remote store's default): each block is sized by the
	 * pair's observed rate and the store's round trip (blocks.h), max is
	 * POLICY_BLOCKS_MAX */
	int autosize;
};
#define POLICY_BLOCKS_MAX 1000000
#define POLICY_BLOCKS_TTL_DEFAULT_MS 100
#define POLICY_BLOCKS_TTL_MAX_MS 10000
/* A HOLD's time: default and longest. */
#define POLICY_HOLD_DEFAULT_MS (3600LL * 1000)
#define POLICY_HOLD_MAX_MS (7LL * 24 * 3600 * 1000)

/* A ban: `after` denials within `within_ms` deny everything for `for_ms`. */
struct policy_ban {
	int64_t after; /* 0: no ban */
	int64_t within_ms;
	int64_t for_ms;
};
#define POLICY_BAN_MAX_AFTER 1000
#define POLICY_BAN_MAX_WITHIN_MS (24LL * 3600 * 1000)

struct policy {
	char name[POLICY_NAME_MAX + 1];
	size_t name_len;
	enum policy_algo algo;
	int nlimits;
	struct policy_limit limits[POLICY_MAX_LIMITS];
	enum policy_on_error on_store_error;
	/* shadow mode: decided and counted, always answered ALLOWED;
	 * -1: as the configuration's `shadow` says */
	int shadow;
	struct policy_ban ban;
	struct policy_delay delay;
	struct policy_blocks blocks;
	/* calendar windows' time zone (tzdata's name); empty: UTC */
	char timezone[CALENDAR_TZ_MAX + 1];
	/* how long a HOLD stays open before it is settled at its estimate (ms) */
	int64_t hold_ms;
	/* per-user exceptions (override.h), owned by the configuration; NULL:
	 * none, and the hot path pays nothing for them */
	struct override_set *overrides;
	/* the store it decides in (stores: NAME); empty: the default store */
	char store[POLICY_STORE_NAME_MAX + 1];
};

/* Keys (and script "limits") of one decision: the limits, and the ban's. */
static inline int policy_nkeys(const struct policy *p)
{
	return p->nlimits + (p->ban.after > 0);
}

/*
 * "250ms", "5s", "2m", "1h", "1d" -> milliseconds. 0, or -1 with a message in
 * err (one line, printable, naming the fix: "missing unit: write 60s or
 * 60ms ..."). err may be NULL.
 */
int policy_parse_duration(const char *s, size_t len, int64_t *ms, char *err, size_t errlen);
/* "5/60s" -> count 5, period 60000 ms. 0, or -1 with a message in err. */
int policy_parse_rate(const char *s, size_t len, int64_t *count, int64_t *period_ms, char *err,
		      size_t errlen);
/* A window's limit: a rate ("5/60s"), or a count per calendar window,
 * "10000/month", with an anchor: "/month@15" (the day of the month),
 * "/week@sunday" (the first day), "/year@04-01" (the first day). Sets
 * count, period_ms, calendar and anchor (capacity is the caller's). 0, or
 * -1 with a message in err. */
int policy_parse_limit(const char *s, size_t len, struct policy_limit *l, char *err, size_t errlen);
/* The limit as policy_parse_limit reads it ("10000/month@15", "5/1m"). */
size_t policy_format_limit(const struct policy_limit *l, char *buf, size_t cap);
/* [A-Za-z0-9_.-]{1,64} */
int policy_name_valid(const char *s, size_t len);
/* Checks a filled policy for consistency (counts, duplicate windows). */
int policy_validate(const struct policy *p, const char **err);
/* The names of on_store_error ("allow", "deny", "error", "local"; not INHERIT). */
extern const struct yenum policy_on_error_names[];
int policy_parse_on_error(const char *s, size_t len, enum policy_on_error *out);
/* "inherit" for POLICY_ON_ERROR_INHERIT. */
const char *policy_on_error_name(enum policy_on_error e);
/* Every algorithm's name ("sliding_window", "funnel", ...), in the order
 * messages list them (yenum_list). */
extern const struct yenum policy_algo_names[];
const char *policy_algo_name(enum policy_algo a);
/* The algorithm named s[0..len); 0, or -1 when there is none. */
int policy_algo_parse(const char *s, size_t len, enum policy_algo *out);
enum policy_shape policy_algo_shape(enum policy_algo a);
/* The largest count one limit may have (a log keeps one entry per unit). */
int64_t policy_algo_max_count(enum policy_algo a);
/* The window announced for the limit of p whose capacity is `limit` (the
 * deciding one) at now_ms (ms since the epoch): its period, a calendar
 * window's length holding now_ms (in p's timezone), or the time a full
 * funnel takes to drain. */
int64_t policy_window_ms(const struct policy *p, int64_t limit, int64_t now_ms);
/* Human-readable one-line description, e.g. "sliding_window 3/1s 20/60s". */
size_t policy_describe(const struct policy *p, char *buf, size_t cap);
/* 1 if two policies' own limits and options are the same (used to log what
 * a reload changed; their overrides are compared by override_set_equal). */
int policy_equal(const struct policy *a, const struct policy *b);

#endif
