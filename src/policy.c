/* policy.c - durations, rates and policy validation; pure, no I/O. */
#include "policy.h"

#include <stdio.h>
#include <string.h>

static int parse_uint(const char *s, size_t len, int64_t max, int64_t *out)
{
	int64_t v = 0;
	if (len == 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		int d = s[i] - '0';
		if (v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int policy_parse_duration(const char *s, size_t len, int64_t *ms, const char **err)
{
	size_t digits = 0;
	while (digits < len && s[digits] >= '0' && s[digits] <= '9')
		digits++;
	if (digits == 0) {
		*err = "a duration is an integer and a unit (ms, s, m, h, d), e.g. 60s";
		return -1;
	}
	const char *unit = s + digits;
	size_t ulen = len - digits;
	int64_t mult;
	if (ulen == 2 && memcmp(unit, "ms", 2) == 0)
		mult = 1;
	else if (ulen == 1 && unit[0] == 's')
		mult = 1000;
	else if (ulen == 1 && unit[0] == 'm')
		mult = 60 * 1000;
	else if (ulen == 1 && unit[0] == 'h')
		mult = 3600 * 1000;
	else if (ulen == 1 && unit[0] == 'd')
		mult = 24 * 3600 * 1000;
	else {
		*err = "unknown duration unit (use ms, s, m, h or d)";
		return -1;
	}
	int64_t n;
	if (parse_uint(s, digits, POLICY_MAX_PERIOD_MS, &n) < 0 || n > POLICY_MAX_PERIOD_MS / mult) {
		*err = "duration too long (at most 366d)";
		return -1;
	}
	if (n == 0) {
		*err = "duration must be greater than zero";
		return -1;
	}
	*ms = n * mult;
	return 0;
}

int policy_parse_rate(const char *s, size_t len, int64_t *count, int64_t *period_ms,
		      const char **err)
{
	const char *slash = memchr(s, '/', len);
	if (!slash) {
		*err = "a rate is COUNT/DURATION, e.g. 5/60s";
		return -1;
	}
	size_t clen = (size_t)(slash - s);
	if (parse_uint(s, clen, POLICY_MAX_COUNT, count) < 0) {
		*err = "rate count must be an integer from 1 to 1000000000";
		return -1;
	}
	if (*count == 0) {
		*err = "rate count must be greater than zero";
		return -1;
	}
	return policy_parse_duration(slash + 1, len - clen - 1, period_ms, err);
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
	if (p->algo == POLICY_FUNNEL && p->nlimits != 1) {
		*err = "a funnel has exactly one capacity and one rate";
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
		if (p->algo == POLICY_SLIDING_WINDOW) {
			if (l->count > POLICY_SLIDING_MAX_COUNT) {
				*err = "a sliding_window limit allows at most 100000 per window "
				       "(its log keeps one entry per unit); use a funnel";
				return -1;
			}
			for (int j = 0; j < i; j++)
				if (p->limits[j].period_ms == l->period_ms) {
					*err = "two limits of one policy have the same window";
					return -1;
				}
		}
	}
	return 0;
}

int policy_parse_on_error(const char *s, size_t len, enum policy_on_error *out)
{
	if (len == 5 && memcmp(s, "allow", 5) == 0)
		*out = POLICY_ON_ERROR_ALLOW;
	else if (len == 4 && memcmp(s, "deny", 4) == 0)
		*out = POLICY_ON_ERROR_DENY;
	else if (len == 5 && memcmp(s, "error", 5) == 0)
		*out = POLICY_ON_ERROR_ERROR;
	else
		return -1;
	return 0;
}

const char *policy_on_error_name(enum policy_on_error e)
{
	switch (e) {
	case POLICY_ON_ERROR_ALLOW:
		return "allow";
	case POLICY_ON_ERROR_DENY:
		return "deny";
	case POLICY_ON_ERROR_ERROR:
		return "error";
	default:
		return "inherit";
	}
}

const char *policy_algo_name(enum policy_algo a)
{
	return a == POLICY_FUNNEL ? "funnel" : "sliding_window";
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
		char d[32];
		format_duration(l->period_ms, d, sizeof(d));
		if (p->algo == POLICY_FUNNEL)
			n += (size_t)snprintf(buf + n, cap - n, " capacity %lld rate %lld/%s",
					      (long long)l->capacity, (long long)l->count, d);
		else
			n += (size_t)snprintf(buf + n, cap - n, " %lld/%s", (long long)l->count, d);
	}
	if (n < cap && p->on_store_error != POLICY_ON_ERROR_INHERIT)
		n += (size_t)snprintf(buf + n, cap - n, " on_store_error %s",
				      policy_on_error_name(p->on_store_error));
	return n < cap ? n : cap - 1;
}

int policy_equal(const struct policy *a, const struct policy *b)
{
	if (a->algo != b->algo || a->nlimits != b->nlimits ||
	    a->on_store_error != b->on_store_error)
		return 0;
	for (int i = 0; i < a->nlimits; i++)
		if (a->limits[i].capacity != b->limits[i].capacity ||
		    a->limits[i].count != b->limits[i].count ||
		    a->limits[i].period_ms != b->limits[i].period_ms)
			return 0;
	return 1;
}
