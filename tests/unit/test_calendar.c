/* test_calendar.c - calendar windows in time zones (calendar.c): month
 * ends, 29 February, anchors, both daylight-saving switches in a northern
 * and a southern zone, and a midnight that comes twice. */
#define _DEFAULT_SOURCE
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "calendar.h"

/* ms of a UTC date and time */
static int64_t utc(int y, int mo, int d, int h, int mi)
{
	struct tm tm = {
		.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
	return (int64_t)timegm(&tm) * 1000;
}

static void expect(const char *tz, enum calendar_unit u, int anchor, int64_t now,
		   const int64_t want[5])
{
	int64_t b[5];
	ck_assert_int_eq(calendar_bounds(tz, u, anchor, now, b), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_msg(b[i] == want[i], "%s %s@%d: b[%d] = %lld, want %lld", tz,
			      calendar_unit_name(u), anchor, i, (long long)b[i],
			      (long long)want[i]);
	/* the cache answers alike, anywhere in the window */
	ck_assert_int_eq(calendar_bounds(tz, u, anchor, want[3] - 1, b), 0);
	ck_assert_int_eq(b[2], want[2]);
}

START_TEST(test_utc_months_and_leap_day)
{
	const int64_t feb[5] = {utc(2023, 12, 1, 0, 0), utc(2024, 1, 1, 0, 0),
				utc(2024, 2, 1, 0, 0), utc(2024, 3, 1, 0, 0),
				utc(2024, 4, 1, 0, 0)};
	expect("", CALENDAR_MONTH, 1, utc(2024, 2, 29, 23, 59), feb);
	expect("UTC", CALENDAR_MONTH, 1, utc(2024, 2, 1, 0, 0), feb);
	/* anchor 31: the last day of shorter months (29 February 2024) */
	const int64_t a31[5] = {utc(2023, 12, 31, 0, 0), utc(2024, 1, 31, 0, 0),
				utc(2024, 2, 29, 0, 0), utc(2024, 3, 31, 0, 0),
				utc(2024, 4, 30, 0, 0)};
	expect("UTC", CALENDAR_MONTH, 31, utc(2024, 3, 10, 12, 0), a31);
	/* a year from 29 February: 28 February in the years without one */
	const int64_t y229[5] = {utc(2023, 2, 28, 0, 0), utc(2024, 2, 29, 0, 0),
				 utc(2025, 2, 28, 0, 0), utc(2026, 2, 28, 0, 0),
				 utc(2027, 2, 28, 0, 0)};
	expect("UTC", CALENDAR_YEAR, 229, utc(2025, 6, 1, 0, 0), y229);
	/* the week from Monday; a week from Sunday */
	const int64_t mon[5] = {utc(2024, 2, 12, 0, 0), utc(2024, 2, 19, 0, 0),
				utc(2024, 2, 26, 0, 0), utc(2024, 3, 4, 0, 0),
				utc(2024, 3, 11, 0, 0)};
	expect("UTC", CALENDAR_WEEK, 1, utc(2024, 2, 29, 9, 0), mon);
	const int64_t sun[5] = {utc(2024, 2, 11, 0, 0), utc(2024, 2, 18, 0, 0),
				utc(2024, 2, 25, 0, 0), utc(2024, 3, 3, 0, 0),
				utc(2024, 3, 10, 0, 0)};
	expect("UTC", CALENDAR_WEEK, 7, utc(2024, 2, 29, 9, 0), sun);
}
END_TEST

START_TEST(test_berlin_daylight_saving)
{
	/* 31 March 2024 has 23 hours (02:00 CET -> 03:00 CEST) */
	const int64_t spring[5] = {utc(2024, 3, 28, 23, 0), utc(2024, 3, 29, 23, 0),
				   utc(2024, 3, 30, 23, 0), utc(2024, 3, 31, 22, 0),
				   utc(2024, 4, 1, 22, 0)};
	expect("Europe/Berlin", CALENDAR_DAY, 0, utc(2024, 3, 31, 10, 0), spring);
	/* 27 October 2024 has 25 hours */
	const int64_t autumn[5] = {utc(2024, 10, 24, 22, 0), utc(2024, 10, 25, 22, 0),
				   utc(2024, 10, 26, 22, 0), utc(2024, 10, 27, 23, 0),
				   utc(2024, 10, 28, 23, 0)};
	expect("Europe/Berlin", CALENDAR_DAY, 0, utc(2024, 10, 27, 12, 0), autumn);
	/* a billing month from the 15th across the spring switch: an hour short */
	const int64_t m15[5] = {utc(2024, 1, 14, 23, 0), utc(2024, 2, 14, 23, 0),
				utc(2024, 3, 14, 23, 0), utc(2024, 4, 14, 22, 0),
				utc(2024, 5, 14, 22, 0)};
	expect("Europe/Berlin", CALENDAR_MONTH, 15, utc(2024, 4, 1, 0, 0), m15);
	/* the last instant before a Berlin month begins is in the old one */
	int64_t b[5];
	ck_assert_int_eq(
		calendar_bounds("Europe/Berlin", CALENDAR_MONTH, 1, utc(2024, 3, 31, 22, 0) - 1, b),
		0);
	ck_assert_int_eq(b[3], utc(2024, 3, 31, 22, 0));
}
END_TEST

START_TEST(test_sydney_southern_switches)
{
	/* 7 April 2024: 03:00 AEDT -> 02:00 AEST, 25 hours */
	const int64_t end[5] = {utc(2024, 4, 4, 13, 0), utc(2024, 4, 5, 13, 0),
				utc(2024, 4, 6, 13, 0), utc(2024, 4, 7, 14, 0),
				utc(2024, 4, 8, 14, 0)};
	expect("Australia/Sydney", CALENDAR_DAY, 0, utc(2024, 4, 7, 3, 0), end);
	/* 6 October 2024: 02:00 AEST -> 03:00 AEDT, 23 hours */
	const int64_t start[5] = {utc(2024, 10, 3, 14, 0), utc(2024, 10, 4, 14, 0),
				  utc(2024, 10, 5, 14, 0), utc(2024, 10, 6, 13, 0),
				  utc(2024, 10, 7, 13, 0)};
	expect("Australia/Sydney", CALENDAR_DAY, 0, utc(2024, 10, 6, 1, 0), start);
	/* the year in Sydney begins in summer time (UTC+11) */
	const int64_t year[5] = {utc(2022, 12, 31, 13, 0), utc(2023, 12, 31, 13, 0),
				 utc(2024, 12, 31, 13, 0), utc(2025, 12, 31, 13, 0),
				 utc(2026, 12, 31, 13, 0)};
	expect("Australia/Sydney", CALENDAR_YEAR, 101, utc(2025, 7, 1, 0, 0), year);
}
END_TEST

START_TEST(test_midnight_twice_and_missing)
{
	/* America/Santiago, 7 April 2024: clocks back from 00:00 to 23:00 of
	 * the 6th (UTC-3 -> UTC-4), so the 6th has 25 hours */
	int64_t b[5];
	ck_assert_int_eq(
		calendar_bounds("America/Santiago", CALENDAR_DAY, 0, utc(2024, 4, 7, 12, 0), b), 0);
	ck_assert_int_eq(b[2], utc(2024, 4, 7, 4, 0));
	ck_assert_int_eq(b[3] - b[2], 24LL * 3600 * 1000);
	ck_assert_int_eq(b[2] - b[1], 25LL * 3600 * 1000);
	/* America/Havana, 3 November 2024: 01:00 CDT -> 00:00 CST, so midnight
	 * comes twice (04:00 and 05:00 UTC): the day begins at the first, and
	 * has 25 hours */
	ck_assert_int_eq(
		calendar_bounds("America/Havana", CALENDAR_DAY, 0, utc(2024, 11, 3, 4, 30), b), 0);
	ck_assert_int_eq(b[2], utc(2024, 11, 3, 4, 0));
	ck_assert_int_eq(b[3], utc(2024, 11, 4, 5, 0));
	/* Santiago, 8 September 2024: 00:00 -> 01:00, the day begins at 01:00 (23 hours) */
	ck_assert_int_eq(
		calendar_bounds("America/Santiago", CALENDAR_DAY, 0, utc(2024, 9, 8, 12, 0), b), 0);
	ck_assert_int_eq(b[2], utc(2024, 9, 8, 4, 0));
	ck_assert_int_eq(b[3] - b[2], 23LL * 3600 * 1000);
}
END_TEST

START_TEST(test_names_and_anchors)
{
	char err[160];
	ck_assert_int_eq(calendar_tz_check("Europe/Berlin", err, sizeof(err)), 0);
	ck_assert_int_eq(calendar_tz_check("UTC", err, sizeof(err)), 0);
	ck_assert_int_eq(calendar_tz_check("", err, sizeof(err)), 0);
	ck_assert_int_eq(calendar_tz_check("Mars/Olympus", err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "unknown time zone \"Mars/Olympus\""));
	ck_assert_int_eq(calendar_tz_check("../../etc/passwd", err, sizeof(err)), -1);
	ck_assert_int_eq(calendar_tz_check("/etc/localtime", err, sizeof(err)), -1);
	ck_assert_int_eq(calendar_tz_check("Europe", err, sizeof(err)), -1); /* a directory */
	ck_assert_int_eq(calendar_unit_parse("month", 5), CALENDAR_MONTH);
	ck_assert_int_eq(calendar_unit_parse("months", 6), CALENDAR_NONE);
	ck_assert(calendar_anchor_valid(CALENDAR_MONTH, 31));
	ck_assert(!calendar_anchor_valid(CALENDAR_MONTH, 32));
	ck_assert(calendar_anchor_valid(CALENDAR_YEAR, 229));
	ck_assert(!calendar_anchor_valid(CALENDAR_YEAR, 230));
	ck_assert(!calendar_anchor_valid(CALENDAR_WEEK, 0));
	ck_assert(!calendar_anchor_valid(CALENDAR_DAY, 1));
	int64_t b[5];
	ck_assert_int_eq(calendar_bounds("UTC", CALENDAR_MONTH, 0, 0, b), -1);
	/* the process's own TZ is left as it was */
	setenv("TZ", "Asia/Tokyo", 1);
	ck_assert_int_eq(
		calendar_bounds("Europe/Berlin", CALENDAR_DAY, 0, utc(2030, 1, 1, 0, 0), b), 0);
	ck_assert_str_eq(getenv("TZ"), "Asia/Tokyo");
	unsetenv("TZ");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("calendar");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_utc_months_and_leap_day);
	tcase_add_test(tc, test_berlin_daylight_saving);
	tcase_add_test(tc, test_sydney_southern_switches);
	tcase_add_test(tc, test_midnight_twice_and_missing);
	tcase_add_test(tc, test_names_and_anchors);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
