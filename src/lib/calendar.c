/*
 * calendar.c - calendar windows in a time zone (see calendar.h). libc's
 * mktime and localtime_r do the zone's arithmetic: the zone is set for the
 * computation (TZ, tzset) and put back, so this file is the only one that
 * touches TZ, and the daemon is one thread. Results are cached per (zone,
 * unit, anchor) while the instant stays in the same window: a decision
 * pays a lookup, a window's first decision the computation.
 */
#include "calendar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ZONEINFO "/usr/share/zoneinfo/"

static const char *const unit_names[CALENDAR_UNIT_N] = {
	[CALENDAR_NONE] = "",	    [CALENDAR_DAY] = "day",   [CALENDAR_WEEK] = "week",
	[CALENDAR_MONTH] = "month", [CALENDAR_YEAR] = "year",
};

enum calendar_unit calendar_unit_parse(const char *s, size_t len)
{
	for (int u = CALENDAR_DAY; u < CALENDAR_UNIT_N; u++)
		if (strlen(unit_names[u]) == len && memcmp(unit_names[u], s, len) == 0)
			return (enum calendar_unit)u;
	return CALENDAR_NONE;
}

const char *calendar_unit_name(enum calendar_unit u)
{
	return (unsigned)u < CALENDAR_UNIT_N ? unit_names[u] : "";
}

int calendar_default_anchor(enum calendar_unit u)
{
	switch (u) {
	case CALENDAR_WEEK:
	case CALENDAR_MONTH:
		return 1;
	case CALENDAR_YEAR:
		return 101;
	case CALENDAR_NONE:
	case CALENDAR_DAY:
		break;
	}
	return 0;
}

static int days_in_month(int year, int month) /* month 1..12 */
{
	static const int d[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	if (month == 2 && ((year % 4 == 0 && year % 100 != 0) || year % 400 == 0))
		return 29;
	return d[month - 1];
}

int calendar_anchor_valid(enum calendar_unit u, int anchor)
{
	switch (u) {
	case CALENDAR_NONE:
	case CALENDAR_DAY:
		return anchor == 0;
	case CALENDAR_WEEK:
		return anchor >= 1 && anchor <= 7;
	case CALENDAR_MONTH:
		return anchor >= 1 && anchor <= 31;
	case CALENDAR_YEAR: {
		int m = anchor / 100, d = anchor % 100;
		return m >= 1 && m <= 12 && d >= 1 && d <= days_in_month(2000, m);
	}
	}
	return 0;
}

int64_t calendar_max_ms(enum calendar_unit u)
{
	int64_t day = 24LL * 3600 * 1000, hour = 3600LL * 1000;
	switch (u) {
	case CALENDAR_DAY:
		return day + hour;
	case CALENDAR_WEEK:
		return 7 * day + hour;
	case CALENDAR_MONTH:
		return 31 * day + hour;
	case CALENDAR_YEAR: /* a year holds both daylight-saving switches */
		return 366 * day;
	case CALENDAR_NONE:
		break;
	}
	return 0;
}

int calendar_tz_name_valid(const char *tz, size_t len)
{
	int ok = len >= 1 && len <= CALENDAR_TZ_MAX && tz[0] != '/';
	for (size_t i = 0; ok && i < len; i++) {
		char c = tz[i];
		ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		     c == '/' || c == '_' || c == '-' || c == '+';
	}
	return ok;
}

int calendar_tz_check(const char *tz, char *err, size_t errlen)
{
	if (!tz[0] || strcmp(tz, "UTC") == 0)
		return 0;
	size_t len = strlen(tz);
	int ok = calendar_tz_name_valid(tz, len);
	char magic[4] = {0};
	if (ok) {
		char path[sizeof(ZONEINFO) + CALENDAR_TZ_MAX + 1];
		snprintf(path, sizeof(path), ZONEINFO "%s", tz);
		FILE *f = fopen(path, "rb");
		ok = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "TZif", 4) == 0;
		if (f)
			fclose(f);
	}
	if (!ok) {
		snprintf(err, errlen,
			 "unknown time zone \"%.*s\": an IANA name of tzdata (" ZONEINFO
			 "), e.g. Europe/Berlin or UTC",
			 (int)(len > CALENDAR_TZ_MAX ? CALENDAR_TZ_MAX : len), tz);
		return -1;
	}
	return 0;
}

/* ---- in the zone (TZ set) */

/* Local midnight of y-m-d (m 1..12, d may run past the month: normalized),
 * seconds since the epoch: the first instant of that day. */
static time_t local_midnight(int y, int m, int d)
{
	struct tm tm = {.tm_year = y - 1900, .tm_mon = m - 1, .tm_mday = d, .tm_isdst = -1};
	time_t t = mktime(&tm);
	/* a midnight that comes twice (clocks back at 00:00): its first */
	struct tm e;
	time_t early = t - 3600;
	if (localtime_r(&early, &e) && e.tm_year == tm.tm_year && e.tm_mon == tm.tm_mon &&
	    e.tm_mday == tm.tm_mday && e.tm_hour == 0 && e.tm_min == 0)
		t = early;
	return t;
}

/* The start of window k (0: the one holding the local date y-m-d, negative
 * before, positive after) of unit u with anchor a. */
static time_t window_start(enum calendar_unit u, int a, int y, int m, int d, int wday, int k)
{
	switch (u) {
	case CALENDAR_DAY:
		return local_midnight(y, m, d + k);
	case CALENDAR_WEEK: {
		/* days back to the anchor weekday (tm_wday: 0 Sunday; a: 1 Monday .. 7 Sunday) */
		int back = ((wday + 7 - a % 7) % 7);
		return local_midnight(y, m, d - back + 7 * k);
	}
	case CALENDAR_MONTH: {
		/* this month's start, or the last month's when before it */
		int dd = a < days_in_month(y, m) ? a : days_in_month(y, m);
		int base = d >= dd ? 0 : -1;
		int mi = (y * 12 + (m - 1)) + base + k;
		int yy = mi / 12, mm = mi % 12 + 1;
		int dim = days_in_month(yy, mm);
		return local_midnight(yy, mm, a < dim ? a : dim);
	}
	case CALENDAR_YEAR: {
		int am = a / 100, ad = a % 100;
		int dd = ad < days_in_month(y, am) ? ad : days_in_month(y, am);
		int base = (m > am || (m == am && d >= dd)) ? 0 : -1;
		int yy = y + base + k;
		int dim = days_in_month(yy, am);
		return local_midnight(yy, am, ad < dim ? ad : dim);
	}
	case CALENDAR_NONE:
		break;
	}
	return (time_t)-1;
}

static int compute(enum calendar_unit u, int anchor, int64_t now_ms, int64_t b[5])
{
	time_t now = (time_t)(now_ms >= 0 ? now_ms / 1000 : (now_ms - 999) / 1000);
	struct tm tm;
	if (!localtime_r(&now, &tm))
		return -1;
	int y = tm.tm_year + 1900, m = tm.tm_mon + 1, d = tm.tm_mday;
	for (int k = -2; k <= 2; k++) {
		time_t t = window_start(u, anchor, y, m, d, tm.tm_wday, k);
		if (t == (time_t)-1)
			return -1;
		b[k + 2] = (int64_t)t * 1000;
	}
	/* local midnight may lie after now (a day that begins at 01:00 when
	 * the clocks went forward at midnight): one window back */
	if (b[2] > now_ms) {
		for (int k = -3; k <= 1; k++)
			b[k + 3] = (int64_t)window_start(u, anchor, y, m, d, tm.tm_wday, k) * 1000;
	}
	return b[2] <= now_ms && now_ms < b[3] ? 0 : -1;
}

/* Runs compute with TZ set to tz, then puts the process's TZ back. */
static int in_zone(const char *tz, enum calendar_unit u, int anchor, int64_t now_ms, int64_t b[5])
{
	const char *old = getenv("TZ");
	char saved[CALENDAR_TZ_MAX + 2];
	int had = old != NULL && strlen(old) < sizeof(saved);
	if (had)
		strcpy(saved, old);
	setenv("TZ", tz[0] ? tz : "UTC", 1);
	tzset();
	int rc = compute(u, anchor, now_ms, b);
	if (had)
		setenv("TZ", saved, 1);
	else
		unsetenv("TZ");
	tzset();
	return rc;
}

/* ---- the cache */

#define CACHE_N 64

struct cached {
	char tz[CALENDAR_TZ_MAX + 1];
	enum calendar_unit u;
	int anchor;
	int64_t b[5];
	int used;
};

static struct cached cache[CACHE_N];
static unsigned cache_next;

int calendar_bounds(const char *tz, enum calendar_unit u, int anchor, int64_t now_ms, int64_t b[5])
{
	if (u == CALENDAR_NONE || !calendar_anchor_valid(u, anchor) || strlen(tz) > CALENDAR_TZ_MAX)
		return -1;
	for (int i = 0; i < CACHE_N; i++) {
		struct cached *c = &cache[i];
		if (c->used && c->u == u && c->anchor == anchor && strcmp(c->tz, tz) == 0 &&
		    c->b[2] <= now_ms && now_ms < c->b[3]) {
			memcpy(b, c->b, sizeof(c->b));
			return 0;
		}
	}
	if (in_zone(tz, u, anchor, now_ms, b) < 0)
		return -1;
	struct cached *c = &cache[cache_next++ % CACHE_N];
	snprintf(c->tz, sizeof(c->tz), "%s", tz);
	c->u = u;
	c->anchor = anchor;
	memcpy(c->b, b, sizeof(c->b));
	c->used = 1;
	return 0;
}
