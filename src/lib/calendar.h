/*
 * calendar.h - calendar windows in a time zone: the day, week, month or
 * year around an instant, with an anchor (a billing day), from the
 * system's tzdata (/usr/share/zoneinfo, Debian's tzdata). Windows start at
 * local midnight, so they follow daylight saving: a day of 23 or 25 hours,
 * a month an hour shorter or longer.
 */
#ifndef RL_CALENDAR_H
#define RL_CALENDAR_H

#include <stddef.h>
#include <stdint.h>

enum calendar_unit {
	CALENDAR_NONE = 0, /* a fixed duration, not a calendar window */
	CALENDAR_DAY,
	CALENDAR_WEEK,	/* anchor: the first day, 1 Monday .. 7 Sunday (default 1) */
	CALENDAR_MONTH, /* anchor: the day of the month, 1..31 (default 1) */
	CALENDAR_YEAR,	/* anchor: MMDD, 101..1231 (default 101, 1 January) */
};
#define CALENDAR_UNIT_N (CALENDAR_YEAR + 1)

/* The longest "b0:b1:b2:b3:b4" of calendar_bounds, as the decision script
 * takes them (five times 20 digits and a sign, four colons). */
#define CALENDAR_ARG_MAX 112

/* The longest time-zone name (an IANA name, e.g. America/Argentina/Buenos_Aires). */
#define CALENDAR_TZ_MAX 63

/* "day", "week", "month", "year" -> the unit; CALENDAR_NONE when s is none. */
enum calendar_unit calendar_unit_parse(const char *s, size_t len);
const char *calendar_unit_name(enum calendar_unit u);
/* The default anchor of a unit (0 for a day). */
int calendar_default_anchor(enum calendar_unit u);
/* Whether anchor is one u takes (a month 1..31, a week 1..7, a year a
 * valid MMDD, 29 February included; a day none but 0). */
int calendar_anchor_valid(enum calendar_unit u, int anchor);
/* The longest window of a unit, ms (a leap year; a daylight-saving hour,
 * but in a year, which holds both switches). */
int64_t calendar_max_ms(enum calendar_unit u);

/* Whether tz[0..len) is written as a zone's name may be (pure; no '.',
 * no leading '/', at most CALENDAR_TZ_MAX bytes): calendar_tz_check's
 * first test, before it looks in tzdata. */
int calendar_tz_name_valid(const char *tz, size_t len);
/* 0 if tz names a zone of tzdata ("UTC", "Europe/Berlin"), else -1 with
 * a message in err. Names are IANA's: no "..", no leading '/'. */
int calendar_tz_check(const char *tz, char *err, size_t errlen);

/*
 * The starts of five consecutive windows b[0] < ... < b[4], ms since the
 * epoch, now_ms inside [b[2], b[3]): the window of now, two before it and
 * the next two starts (the decision script picks the one holding Redis's
 * clock). tz: an empty string or "UTC" for UTC. In a month shorter than
 * its anchor (31 in April, 29 to 31 in February), the window starts on the
 * month's last day; a year anchored on 29 February starts on 28 February
 * in other years. 0, or -1 when the zone cannot be read.
 */
int calendar_bounds(const char *tz, enum calendar_unit u, int anchor, int64_t now_ms, int64_t b[5]);

#endif
