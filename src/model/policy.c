/* policy.c - durations, rates and policy validation; pure, no I/O. */
#include "policy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "decimal.h"

static int perr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Formats an error into err (if given); always returns -1. */
static int perr(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* Input text made safe to quote in a message: printable ASCII, at most 24 bytes. */
static const char *quote(const char *s, size_t len, char *buf, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n + 4 < cap && n < 24; i++)
		buf[n++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	if (n < len) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	return buf;
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static int is_letter(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Milliseconds per unit, or -1 if `unit` is none of ms, s, m, h, d. */
static int64_t unit_ms(const char *unit, size_t len)
{
	if (len == 2 && memcmp(unit, "ms", 2) == 0)
		return 1;
	if (len != 1)
		return -1;
	switch (unit[0]) {
	case 's':
		return 1000;
	case 'm':
		return 60 * 1000;
	case 'h':
		return 3600 * 1000;
	case 'd':
		return 24 * 3600 * 1000;
	default:
		return -1;
	}
}

static size_t format_duration(int64_t ms, char *buf, size_t cap);

#define DURATION_USAGE "a duration is an integer and a unit (ms, s, m, h, d), e.g. 60s"

/*
 * "1.5s": refused, with the whole-unit spelling when there is an exact one
 * ("write 1500ms"). `pre` is what precedes the duration in the input (the
 * "5/" of a rate) so the suggestion can be copied as written.
 */
static int fractional(const char *s, size_t len, const char *pre, char *err, size_t errlen)
{
	size_t i = 0, k = 0;
	int64_t whole = 0, frac = 0, scale = 1;
	while (i < len && is_digit(s[i]))
		i++;
	if (decimal_parse(s, i, POLICY_MAX_PERIOD_MS, &whole) < 0 && i > 0)
		goto plain;
	for (i++; i < len && is_digit(s[i]); i++, k++) {
		if (k == 9)
			goto plain;
		frac = frac * 10 + (s[i] - '0');
		scale *= 10;
	}
	int64_t mult = unit_ms(s + i, len - i);
	if (k == 0 || mult < 0 || whole > POLICY_MAX_PERIOD_MS / mult || (frac * mult) % scale)
		goto plain;
	int64_t ms = whole * mult + frac * mult / scale;
	if (ms == 0 || ms > POLICY_MAX_PERIOD_MS)
		goto plain;
	char d[32];
	format_duration(ms, d, sizeof(d));
	return perr(err, errlen, "a duration is a whole number of a unit: write %s%s", pre, d);
plain:
	return perr(err, errlen,
		    "a duration is a whole number of a unit (ms, s, m, h, d), "
		    "without a fraction");
}

/* policy_parse_duration, with `pre` (printable) in front of suggested spellings. */
static int parse_duration(const char *s, size_t len, const char *pre, int64_t *ms, char *err,
			  size_t errlen)
{
	char q[32];
	size_t digits = 0;
	while (digits < len && is_digit(s[digits]))
		digits++;
	if (digits < len && s[digits] == '.' && digits + 1 < len && is_digit(s[digits + 1]))
		return fractional(s, len, pre, err, errlen);
	if (digits == 0)
		return perr(err, errlen, DURATION_USAGE);
	int n = (int)digits;
	const char *unit = s + digits;
	size_t ulen = 0;
	while (digits + ulen < len && is_letter(unit[ulen]))
		ulen++;
	const char *rest = unit + ulen;
	size_t rlen = len - digits - ulen;
	if (ulen == 0) {
		if (rlen == 0)
			return perr(
				err, errlen,
				"missing unit: write %s%.*ss or %s%.*sms (units: ms, s, m, h, d)",
				pre, n, s, pre, n, s);
		/* "5 s": a unit after blanks, and nothing else. */
		size_t b = 0;
		while (b < rlen && is_blank(rest[b]))
			b++;
		size_t u = 0;
		while (b + u < rlen && is_letter(rest[b + u]))
			u++;
		if (b > 0 && b + u == rlen && unit_ms(rest + b, u) > 0)
			return perr(err, errlen,
				    "no space between a number and its unit: write %s%.*s%.*s", pre,
				    n, s, (int)u, rest + b);
		return perr(err, errlen, DURATION_USAGE);
	}
	int64_t mult = unit_ms(unit, ulen);
	if (mult < 0) {
		char lower[3];
		if (ulen <= 2) {
			for (size_t i = 0; i < ulen; i++)
				lower[i] = (char)(unit[i] | 0x20);
			if (rlen == 0 && unit_ms(lower, ulen) > 0)
				return perr(err, errlen, "units are lowercase: write %s%.*s%.*s",
					    pre, n, s, (int)ulen, lower);
		}
		return perr(err, errlen, "unknown duration unit \"%s\" (use ms, s, m, h or d)",
			    quote(unit, ulen, q, sizeof(q)));
	}
	if (rlen > 0)
		return perr(err, errlen, "unexpected \"%s\" after %.*s%.*s",
			    quote(rest, rlen, q, sizeof(q)), n, s, (int)ulen, unit);
	int64_t v;
	if (decimal_parse(s, digits, POLICY_MAX_PERIOD_MS, &v) < 0 ||
	    v > POLICY_MAX_PERIOD_MS / mult)
		return perr(err, errlen, "duration too long (at most 366d)");
	if (v == 0)
		return perr(err, errlen, "duration must be greater than zero");
	*ms = v * mult;
	return 0;
}

int policy_parse_duration(const char *s, size_t len, int64_t *ms, char *err, size_t errlen)
{
	return parse_duration(s, len, "", ms, err, errlen);
}

static void trim_blanks(const char **s, size_t *len)
{
	while (*len > 0 && is_blank(**s)) {
		(*s)++;
		(*len)--;
	}
	while (*len > 0 && is_blank((*s)[*len - 1]))
		(*len)--;
}

int policy_parse_rate(const char *s, size_t len, int64_t *count, int64_t *period_ms, char *err,
		      size_t errlen)
{
	const char *slash = memchr(s, '/', len);
	if (!slash)
		return perr(err, errlen, "a rate is COUNT/DURATION, e.g. 5/60s");
	const char *c = s, *d = slash + 1;
	size_t clen = (size_t)(slash - s), dlen = len - clen - 1;
	/* "5 / 60s": one spelling only, the one policy_describe prints. */
	const char *tc = c, *td = d;
	size_t tclen = clen, tdlen = dlen;
	trim_blanks(&tc, &tclen);
	trim_blanks(&td, &tdlen);
	if ((tclen != clen || tdlen != dlen) && tclen > 0 && tdlen > 0) {
		char qc[32], qd[32];
		return perr(err, errlen, "no spaces in a rate: write %s/%s",
			    quote(tc, tclen, qc, sizeof(qc)), quote(td, tdlen, qd, sizeof(qd)));
	}
	int64_t n;
	if (decimal_parse(c, clen, POLICY_MAX_COUNT, &n) < 0)
		return perr(err, errlen, "rate count must be an integer from 1 to 1000000000");
	if (n == 0)
		return perr(err, errlen, "rate count must be greater than zero");
	/* The count is digits only, so it can be quoted back as "5/". */
	char pre[16];
	snprintf(pre, sizeof(pre), "%lld/", (long long)n);
	if (parse_duration(d, dlen, pre, period_ms, err, errlen) < 0)
		return -1;
	*count = n;
	return 0;
}

static const char *const weekdays[8] = {"",	    "monday", "tuesday",  "wednesday",
					"thursday", "friday", "saturday", "sunday"};

/* "@15" of a month, "@sunday" of a week, "@04-01" of a year. */
static int parse_anchor(enum calendar_unit u, const char *s, size_t len, int *anchor, char *err,
			size_t errlen)
{
	char q[32];
	int64_t v, m;
	switch (u) {
	case CALENDAR_MONTH:
		if (decimal_parse(s, len, 31, &v) == 0 && v >= 1) {
			*anchor = (int)v;
			return 0;
		}
		return perr(err, errlen, "a month's anchor is a day of the month, 1 to 31: not %s",
			    quote(s, len, q, sizeof(q)));
	case CALENDAR_WEEK:
		for (int d = 1; d <= 7; d++)
			if (strlen(weekdays[d]) == len && memcmp(weekdays[d], s, len) == 0) {
				*anchor = d;
				return 0;
			}
		return perr(err, errlen,
			    "a week's anchor is its first day, monday to sunday: not %s",
			    quote(s, len, q, sizeof(q)));
	case CALENDAR_YEAR:
		if (len == 5 && s[2] == '-' && decimal_parse(s, 2, 12, &m) == 0 &&
		    decimal_parse(s + 3, 2, 31, &v) == 0 &&
		    calendar_anchor_valid(CALENDAR_YEAR, (int)(m * 100 + v))) {
			*anchor = (int)(m * 100 + v);
			return 0;
		}
		return perr(err, errlen, "a year's anchor is its first day, MM-DD (04-01): not %s",
			    quote(s, len, q, sizeof(q)));
	case CALENDAR_DAY:
	case CALENDAR_NONE:
		break;
	}
	return perr(err, errlen, "a day has no anchor: it starts at midnight");
}

int policy_parse_limit(const char *s, size_t len, struct policy_limit *l, char *err, size_t errlen)
{
	l->calendar = CALENDAR_NONE;
	l->anchor = 0;
	const char *slash = memchr(s, '/', len);
	if (slash) {
		const char *u = slash + 1, *end = s + len;
		const char *at = memchr(u, '@', (size_t)(end - u));
		enum calendar_unit cu = calendar_unit_parse(u, (size_t)((at ? at : end) - u));
		if (cu != CALENDAR_NONE) {
			int64_t n;
			if (decimal_parse(s, (size_t)(slash - s), POLICY_MAX_COUNT, &n) < 0 ||
			    n == 0)
				return perr(err, errlen,
					    "rate count must be an integer from 1 to 1000000000");
			int anchor = calendar_default_anchor(cu);
			if (at && parse_anchor(cu, at + 1, (size_t)(end - at - 1), &anchor, err,
					       errlen) < 0)
				return -1;
			l->count = n;
			l->period_ms = calendar_max_ms(cu);
			l->calendar = cu;
			l->anchor = anchor;
			return 0;
		}
	}
	return policy_parse_rate(s, len, &l->count, &l->period_ms, err, errlen);
}

size_t policy_format_limit(const struct policy_limit *l, char *buf, size_t cap)
{
	if (l->calendar == CALENDAR_NONE) {
		char d[32];
		format_duration(l->period_ms, d, sizeof(d));
		return (size_t)snprintf(buf, cap, "%lld/%s", (long long)l->count, d);
	}
	const char *u = calendar_unit_name(l->calendar);
	if (l->anchor == calendar_default_anchor(l->calendar))
		return (size_t)snprintf(buf, cap, "%lld/%s", (long long)l->count, u);
	if (l->calendar == CALENDAR_WEEK)
		return (size_t)snprintf(buf, cap, "%lld/%s@%s", (long long)l->count, u,
					weekdays[l->anchor >= 1 && l->anchor <= 7 ? l->anchor : 0]);
	if (l->calendar == CALENDAR_YEAR)
		return (size_t)snprintf(buf, cap, "%lld/%s@%02d-%02d", (long long)l->count, u,
					l->anchor / 100, l->anchor % 100);
	return (size_t)snprintf(buf, cap, "%lld/%s@%d", (long long)l->count, u, l->anchor);
}

int policy_name_valid(const char *s, size_t len)
{
	if (len == 0 || len > POLICY_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

int policy_validate(const struct policy *p, const char **err)
{
	if (p->nlimits < 1) {
		*err = "a policy needs at least one limit";
		return -1;
	}
	if (p->nlimits > POLICY_MAX_LIMITS) {
		*err = "too many limits (at most 8)";
		return -1;
	}
	if (policy_algo_shape(p->algo) == POLICY_SHAPE_RATE && p->nlimits != 1) {
		*err = "a funnel has exactly one capacity and one rate";
		return -1;
	}
	if (policy_algo_shape(p->algo) == POLICY_SHAPE_LEASE && p->nlimits != 1) {
		*err = "a concurrency policy has exactly one limit and one lease";
		return -1;
	}
	for (int i = 0; i < p->nlimits; i++) {
		const struct policy_limit *l = &p->limits[i];
		if (l->count < 1 || l->count > POLICY_MAX_COUNT || l->period_ms < 1 ||
		    l->period_ms > POLICY_MAX_PERIOD_MS) {
			*err = "limit out of range";
			return -1;
		}
		if (l->capacity < 1 || l->capacity > POLICY_MAX_COUNT) {
			*err = "capacity must be an integer from 1 to 1000000000";
			return -1;
		}
		if (l->count > policy_algo_max_count(p->algo)) {
			*err = p->algo == POLICY_CONCURRENCY
				       ? "a concurrency limit is at most 100000 (every ACQUIRE "
					 "reads the leases held)"
				       : "a sliding_window limit allows at most 100000 per window "
					 "(its log keeps one entry per unit); use "
					 "sliding_window_counter, fixed_window or a funnel";
			return -1;
		}
		if (l->calendar != CALENDAR_NONE &&
		    (p->algo != POLICY_FIXED_WINDOW && p->algo != POLICY_SLIDING_COUNTER)) {
			*err = "a calendar window (day, week, month, year) is for fixed_window and "
			       "sliding_window_counter only";
			return -1;
		}
		if (!calendar_anchor_valid(l->calendar, l->anchor)) {
			*err = "a calendar window's anchor is out of range";
			return -1;
		}
		if (policy_algo_shape(p->algo) == POLICY_SHAPE_WINDOWS) {
			for (int j = 0; j < i; j++)
				if (p->limits[j].calendar == l->calendar &&
				    (l->calendar != CALENDAR_NONE ||
				     p->limits[j].period_ms == l->period_ms)) {
					*err = "two limits of one policy have the same window";
					return -1;
				}
		}
	}
	return 0;
}

/* In the order messages list them; INHERIT is no name a file may write. */
const struct yenum policy_on_error_names[] = {
	{"allow", POLICY_ON_ERROR_ALLOW, NULL},
	{"deny", POLICY_ON_ERROR_DENY, NULL},
	{"error", POLICY_ON_ERROR_ERROR, NULL},
	{"local", POLICY_ON_ERROR_LOCAL, NULL},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(enum policy_on_error) == sizeof(int), "yp_set_enum stores an int");

int policy_parse_on_error(const char *s, size_t len, enum policy_on_error *out)
{
	int v;
	if (yenum_parse(policy_on_error_names, s, len, &v) < 0)
		return -1;
	*out = (enum policy_on_error)v;
	return 0;
}

const char *policy_on_error_name(enum policy_on_error e)
{
	const char *name = yenum_name(policy_on_error_names, e);
	return name ? name : "inherit";
}

/* Every algorithm's name, the only place it is written, in the order messages list them. */
const struct yenum policy_algo_names[] = {
	{"sliding_window", POLICY_SLIDING_WINDOW, NULL},
	{"sliding_window_counter", POLICY_SLIDING_COUNTER, NULL},
	{"fixed_window", POLICY_FIXED_WINDOW, NULL},
	{"funnel", POLICY_FUNNEL, NULL},
	{"concurrency", POLICY_CONCURRENCY, NULL},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(policy_algo_names) / sizeof(policy_algo_names[0]) == POLICY_ALGO_N + 1,
	       "every algorithm has a name");
_Static_assert(sizeof(enum policy_algo) == sizeof(int), "yp_set_enum stores an int");

const char *policy_algo_name(enum policy_algo a)
{
	const char *name = yenum_name(policy_algo_names, (int)a);
	return name ? name : "?";
}

int policy_algo_parse(const char *s, size_t len, enum policy_algo *out)
{
	int v;
	if (yenum_parse(policy_algo_names, s, len, &v) < 0)
		return -1;
	*out = (enum policy_algo)v;
	return 0;
}

enum policy_shape policy_algo_shape(enum policy_algo a)
{
	switch (a) {
	case POLICY_SLIDING_WINDOW:
	case POLICY_FIXED_WINDOW:
	case POLICY_SLIDING_COUNTER:
		break;
	case POLICY_FUNNEL:
		return POLICY_SHAPE_RATE;
	case POLICY_CONCURRENCY:
		return POLICY_SHAPE_LEASE;
	}
	return POLICY_SHAPE_WINDOWS;
}

int64_t policy_algo_max_count(enum policy_algo a)
{
	switch (a) {
	case POLICY_SLIDING_WINDOW:
		return POLICY_SLIDING_MAX_COUNT;
	case POLICY_CONCURRENCY:
		return POLICY_CONCURRENCY_MAX;
	case POLICY_FUNNEL:
	case POLICY_FIXED_WINDOW:
	case POLICY_SLIDING_COUNTER:
		break;
	}
	return POLICY_MAX_COUNT;
}

int64_t policy_window_ms(const struct policy *p, int64_t limit, int64_t now_ms)
{
	const struct policy_limit *l = &p->limits[0];
	for (int i = 0; i < p->nlimits; i++)
		if (p->limits[i].capacity == limit) {
			l = &p->limits[i];
			break;
		}
	switch (p->algo) {
	case POLICY_FUNNEL: {
		/* capacity * period can pass 2^63: in double, and held below it */
		double ms = (double)l->capacity * (double)l->period_ms / (double)l->count;
		return ms < 4e18 ? (int64_t)ms : (int64_t)4e18;
	}
	case POLICY_FIXED_WINDOW:
	case POLICY_SLIDING_COUNTER:
		/* a calendar's period_ms is the unit's longest: the window in
		 * force is the one holding now (a day of 23 or 25 hours, a
		 * month of its own days) */
		if (l->calendar != CALENDAR_NONE) {
			int64_t b[5];
			if (calendar_bounds(p->timezone, l->calendar, l->anchor, now_ms, b) == 0)
				return b[3] - b[2];
		}
		break;
	case POLICY_SLIDING_WINDOW:
	case POLICY_CONCURRENCY: /* a lease's time */
		break;
	}
	return l->period_ms;
}

static size_t format_duration(int64_t ms, char *buf, size_t cap)
{
	static const struct {
		int64_t ms;
		const char *unit;
	} units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (ms % units[i].ms == 0)
			return (size_t)snprintf(buf, cap, "%lld%s", (long long)(ms / units[i].ms),
						units[i].unit);
	return (size_t)snprintf(buf, cap, "%lldms", (long long)ms);
}

size_t policy_describe(const struct policy *p, char *buf, size_t cap)
{
	size_t n = (size_t)snprintf(buf, cap, "%s", policy_algo_name(p->algo));
	for (int i = 0; i < p->nlimits && n < cap; i++) {
		const struct policy_limit *l = &p->limits[i];
		char d[32], lim[64];
		format_duration(l->period_ms, d, sizeof(d));
		switch (policy_algo_shape(p->algo)) {
		case POLICY_SHAPE_RATE:
			n += (size_t)snprintf(buf + n, cap - n, " capacity %lld rate %lld/%s",
					      (long long)l->capacity, (long long)l->count, d);
			break;
		case POLICY_SHAPE_WINDOWS:
			policy_format_limit(l, lim, sizeof(lim));
			n += (size_t)snprintf(buf + n, cap - n, " %s", lim);
			break;
		case POLICY_SHAPE_LEASE:
			n += (size_t)snprintf(buf + n, cap - n, " limit %lld lease %s",
					      (long long)l->count, d);
			break;
		}
	}
	if (n < cap && p->on_store_error != POLICY_ON_ERROR_INHERIT)
		n += (size_t)snprintf(buf + n, cap - n, " on_store_error %s",
				      policy_on_error_name(p->on_store_error));
	if (n < cap && p->ban.after > 0) {
		char w[32], f[32];
		format_duration(p->ban.within_ms, w, sizeof(w));
		format_duration(p->ban.for_ms, f, sizeof(f));
		n += (size_t)snprintf(buf + n, cap - n, " ban after %lld within %s for %s",
				      (long long)p->ban.after, w, f);
	}
	if (n < cap && p->delay.max_ms > 0) {
		char w[32];
		format_duration(p->delay.max_ms, w, sizeof(w));
		n += (size_t)snprintf(buf + n, cap - n, " delay max %s", w);
	}
	if (n < cap && p->timezone[0])
		n += (size_t)snprintf(buf + n, cap - n, " timezone %s", p->timezone);
	if (n < cap && p->store[0])
		n += (size_t)snprintf(buf + n, cap - n, " store %s", p->store);
	if (n < cap && p->hold_ms && p->hold_ms != POLICY_HOLD_DEFAULT_MS) {
		char h[32];
		format_duration(p->hold_ms, h, sizeof(h));
		n += (size_t)snprintf(buf + n, cap - n, " hold %s", h);
	}
	if (n < cap && p->shadow >= 0)
		n += (size_t)snprintf(buf + n, cap - n, " shadow %s", p->shadow ? "true" : "false");
	return n < cap ? n : cap - 1;
}

int policy_equal(const struct policy *a, const struct policy *b)
{
	if (a->algo != b->algo || a->nlimits != b->nlimits ||
	    a->on_store_error != b->on_store_error || a->shadow != b->shadow ||
	    a->ban.after != b->ban.after || a->ban.within_ms != b->ban.within_ms ||
	    a->ban.for_ms != b->ban.for_ms || a->delay.max_ms != b->delay.max_ms ||
	    strcmp(a->timezone, b->timezone) != 0 || a->hold_ms != b->hold_ms ||
	    a->blocks.max != b->blocks.max || a->blocks.ttl_ms != b->blocks.ttl_ms ||
	    strcmp(a->store, b->store) != 0)
		return 0;
	for (int i = 0; i < a->nlimits; i++)
		if (a->limits[i].capacity != b->limits[i].capacity ||
		    a->limits[i].count != b->limits[i].count ||
		    a->limits[i].period_ms != b->limits[i].period_ms ||
		    a->limits[i].calendar != b->limits[i].calendar ||
		    a->limits[i].anchor != b->limits[i].anchor)
			return 0;
	return 1;
}
