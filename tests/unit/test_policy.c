/* test_policy.c - durations, rates, names, validation and descriptions of policies. */
#define _DEFAULT_SOURCE /* timegm */
#include <check.h>

#include "runner.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy.h"

static char why[POLICY_ERR_MAX];

/* Parses a NUL-terminated duration; returns the ms or -1, and the error in *err. */
static int64_t dur(const char *s, const char **err)
{
	int64_t ms = -12345;
	*err = NULL;
	why[0] = '\0';
	if (policy_parse_duration(s, strlen(s), &ms, why, sizeof(why)) < 0) {
		*err = why;
		ck_assert_str_ne(why, "");
		ck_assert_int_eq(ms, -12345); /* untouched on error */
		return -1;
	}
	return ms;
}

START_TEST(duration_units)
{
	const char *err;
	ck_assert_int_eq(dur("250ms", &err), 250);
	ck_assert_int_eq(dur("5s", &err), 5000);
	ck_assert_int_eq(dur("2m", &err), 120000);
	ck_assert_int_eq(dur("1h", &err), 3600000);
	ck_assert_int_eq(dur("1d", &err), 86400000);
	ck_assert_int_eq(dur("1ms", &err), 1);
	ck_assert_int_eq(dur("366d", &err), POLICY_MAX_PERIOD_MS);
	ck_assert_int_eq(dur("8784h", &err), POLICY_MAX_PERIOD_MS);
}
END_TEST

START_TEST(duration_zero)
{
	const char *err;
	ck_assert_int_eq(dur("0s", &err), -1);
	ck_assert_str_eq(err, "duration must be greater than zero");
	ck_assert_int_eq(dur("0ms", &err), -1);
}
END_TEST

START_TEST(duration_overflow)
{
	const char *err;
	ck_assert_int_eq(dur("367d", &err), -1);
	ck_assert_str_eq(err, "duration too long (at most 366d)");
	ck_assert_int_eq(dur("31622400001ms", &err), -1);
	ck_assert_int_eq(dur("99999999999999999999999s", &err), -1);
	ck_assert_str_eq(err, "duration too long (at most 366d)");
	ck_assert_int_eq(dur("9223372036854775807ms", &err), -1);
}
END_TEST

START_TEST(duration_junk)
{
	const char *err;
	const char *bad[] = {"",    "s",    "ms", "-5s", "+5s",	  "5.5s", "5 s", " 5s",
			     "5s ", "5sec", "5S", "5x",	 "0x10s", "5ss",  "5msx"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(dur(bad[i], &err) == -1, "accepted \"%s\"", bad[i]);
}
END_TEST

START_TEST(duration_missing_unit)
{
	const char *err;
	ck_assert_int_eq(dur("5", &err), -1);
	ck_assert_str_eq(err, "missing unit: write 5s or 5ms (units: ms, s, m, h, d)");
	ck_assert_int_eq(dur("60", &err), -1);
	ck_assert_str_eq(err, "missing unit: write 60s or 60ms (units: ms, s, m, h, d)");
}
END_TEST

/* Each malformed duration and the message that names its fix. */
START_TEST(duration_messages)
{
	static const struct {
		const char *in, *err;
	} cases[] = {
		{"1.5s", "a duration is a whole number of a unit: write 1500ms"},
		{"2.5m", "a duration is a whole number of a unit: write 150s"},
		{"0.5h", "a duration is a whole number of a unit: write 30m"},
		{"1.5d", "a duration is a whole number of a unit: write 36h"},
		{".5s", "a duration is a whole number of a unit: write 500ms"},
		{"1.5ms",
		 "a duration is a whole number of a unit (ms, s, m, h, d), without a fraction"},
		{"1.5",
		 "a duration is a whole number of a unit (ms, s, m, h, d), without a fraction"},
		{"1.0000000001s",
		 "a duration is a whole number of a unit (ms, s, m, h, d), without a fraction"},
		{"400.5d",
		 "a duration is a whole number of a unit (ms, s, m, h, d), without a fraction"},
		{"5 s", "no space between a number and its unit: write 5s"},
		{"5S", "units are lowercase: write 5s"},
		{"5MS", "units are lowercase: write 5ms"},
		{"5sec", "unknown duration unit \"sec\" (use ms, s, m, h or d)"},
		{"5s ", "unexpected \" \" after 5s"},
		{"5s\x01", "unexpected \"?\" after 5s"},
		{"5secondsandthensomemoreletters",
		 "unknown duration unit \"secondsandthensomemorele...\" (use ms, s, m, h or d)"},
		{"", "a duration is an integer and a unit (ms, s, m, h, d), e.g. 60s"},
		{"s", "a duration is an integer and a unit (ms, s, m, h, d), e.g. 60s"},
		{"-5s", "a duration is an integer and a unit (ms, s, m, h, d), e.g. 60s"},
	};
	const char *err;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_msg(dur(cases[i].in, &err) == -1, "accepted \"%s\"", cases[i].in);
		ck_assert_str_eq(err, cases[i].err);
	}
	/* A short buffer gets a NUL-terminated prefix; no buffer is fine too. */
	char small[8];
	int64_t ms;
	ck_assert_int_eq(policy_parse_duration("1.5s", 4, &ms, small, sizeof(small)), -1);
	ck_assert_str_eq(small, "a durat");
	ck_assert_int_eq(policy_parse_duration("1.5s", 4, &ms, NULL, 0), -1);
}
END_TEST

START_TEST(duration_uses_len)
{
	/* Only len bytes count: "5s" out of "5sXYZ". */
	int64_t ms = 0;
	ck_assert_int_eq(policy_parse_duration("5sXYZ", 2, &ms, NULL, 0), 0);
	ck_assert_int_eq(ms, 5000);
	ck_assert_int_eq(policy_parse_duration("5s", 1, &ms, NULL, 0), -1);
}
END_TEST

static int rate(const char *s, int64_t *count, int64_t *period, const char **err)
{
	*err = NULL;
	why[0] = '\0';
	int rc = policy_parse_rate(s, strlen(s), count, period, why, sizeof(why));
	if (rc < 0) {
		*err = why;
		ck_assert_str_ne(why, "");
	}
	return rc;
}

START_TEST(rate_valid)
{
	int64_t count, period;
	const char *err;
	ck_assert_int_eq(rate("5/60s", &count, &period, &err), 0);
	ck_assert_int_eq(count, 5);
	ck_assert_int_eq(period, 60000);
	ck_assert_int_eq(rate("1000000000/1ms", &count, &period, &err), 0);
	ck_assert_int_eq(count, 1000000000);
	ck_assert_int_eq(period, 1);
	ck_assert_int_eq(rate("3/366d", &count, &period, &err), 0);
	ck_assert_int_eq(period, POLICY_MAX_PERIOD_MS);
}
END_TEST

START_TEST(rate_invalid)
{
	int64_t count, period;
	const char *err;
	ck_assert_int_eq(rate("0/1s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "rate count must be greater than zero");
	ck_assert_int_eq(rate("1000000001/1s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "rate count must be an integer from 1 to 1000000000");
	ck_assert_int_eq(rate("5", &count, &period, &err), -1);
	ck_assert_str_eq(err, "a rate is COUNT/DURATION, e.g. 5/60s");
	ck_assert_int_eq(rate("5/60", &count, &period, &err), -1);
	ck_assert_str_eq(err, "missing unit: write 5/60s or 5/60ms (units: ms, s, m, h, d)");
	ck_assert_int_eq(rate("5/1.5s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "a duration is a whole number of a unit: write 5/1500ms");
	ck_assert_int_eq(rate("5 / 60s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "no spaces in a rate: write 5/60s");
	ck_assert_int_eq(rate("5/\t60s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "no spaces in a rate: write 5/60s");
	ck_assert_int_eq(rate("05/60 s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "no space between a number and its unit: write 5/60s");
	ck_assert_int_eq(rate("5 x/60s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "rate count must be an integer from 1 to 1000000000");
	ck_assert_int_eq(rate(" /60s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "rate count must be an integer from 1 to 1000000000");
	ck_assert_int_eq(rate("5/1s/2s", &count, &period, &err), -1);
	ck_assert_str_eq(err, "unexpected \"/2s\" after 1s");
	const char *bad[] = {"",
			     "/",
			     "/1s",
			     "5/",
			     "a/1s",
			     "-5/1s",
			     "5/0s",
			     "5/1s/2s",
			     "5 /1s",
			     "5/367d",
			     "99999999999999999999/1s"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(rate(bad[i], &count, &period, &err) == -1, "accepted \"%s\"", bad[i]);
}
END_TEST

START_TEST(names)
{
	char name[POLICY_NAME_MAX + 2];
	ck_assert(policy_name_valid("login", 5));
	ck_assert(policy_name_valid("a.B-c_9", 7));
	ck_assert(policy_name_valid("x", 1));
	ck_assert(!policy_name_valid("", 0));
	ck_assert(!policy_name_valid("a b", 3));
	ck_assert(!policy_name_valid("a:b", 3));
	ck_assert(!policy_name_valid("a{b}", 4));
	ck_assert(!policy_name_valid("a/b", 3));
	ck_assert(!policy_name_valid("\xc3\xa9t\xc3\xa9", 6));
	ck_assert(!policy_name_valid("a\0b", 3));
	/* only len bytes are looked at */
	ck_assert(policy_name_valid("ab cd", 2));
	memset(name, 'n', sizeof(name));
	ck_assert(policy_name_valid(name, POLICY_NAME_MAX));
	ck_assert(!policy_name_valid(name, POLICY_NAME_MAX + 1));
}
END_TEST

static struct policy sliding(int n, const int64_t *counts, const int64_t *periods)
{
	struct policy p;
	memset(&p, 0, sizeof(p));
	memcpy(p.name, "t", 2);
	p.name_len = 1;
	p.algo = POLICY_SLIDING_WINDOW;
	p.on_store_error = POLICY_ON_ERROR_INHERIT;
	p.shadow = -1;
	p.nlimits = n;
	for (int i = 0; i < n; i++)
		p.limits[i] = (struct policy_limit){
			.capacity = counts[i], .count = counts[i], .period_ms = periods[i]};
	return p;
}

START_TEST(validate_ok)
{
	int64_t c[] = {3, 20, 100000};
	int64_t w[] = {1000, 60000, 3600000};
	struct policy p = sliding(3, c, w);
	const char *err = NULL;
	ck_assert_int_eq(policy_validate(&p, &err), 0);
}
END_TEST

START_TEST(validate_duplicate_windows)
{
	int64_t c[] = {3, 20};
	int64_t w[] = {60000, 60000};
	struct policy p = sliding(2, c, w);
	const char *err = NULL;
	ck_assert_int_eq(policy_validate(&p, &err), -1);
	ck_assert_str_eq(err, "two limits of one policy have the same window");
	/* distinct windows pass */
	p.limits[1].period_ms = 1000;
	ck_assert_int_eq(policy_validate(&p, &err), 0);
}
END_TEST

START_TEST(validate_funnel_two_limits)
{
	int64_t c[] = {30, 60};
	int64_t w[] = {60000, 3600000};
	struct policy p = sliding(2, c, w);
	p.algo = POLICY_FUNNEL;
	const char *err = NULL;
	ck_assert_int_eq(policy_validate(&p, &err), -1);
	ck_assert_str_eq(err, "a funnel has exactly one capacity and one rate");
	p.nlimits = 1;
	p.limits[0].capacity = 15;
	ck_assert_int_eq(policy_validate(&p, &err), 0);
}
END_TEST

START_TEST(validate_sliding_count)
{
	int64_t c[] = {100001};
	int64_t w[] = {60000};
	struct policy p = sliding(1, c, w);
	const char *err = NULL;
	ck_assert_int_eq(policy_validate(&p, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "at most 100000"));
	/* The same numbers are fine for a funnel: its state is two integers. */
	p.algo = POLICY_FUNNEL;
	ck_assert_int_eq(policy_validate(&p, &err), 0);
}
END_TEST

START_TEST(validate_limit_counts)
{
	int64_t c[POLICY_MAX_LIMITS + 1];
	int64_t w[POLICY_MAX_LIMITS + 1];
	for (int i = 0; i <= POLICY_MAX_LIMITS; i++) {
		c[i] = 1;
		w[i] = 1000 * (i + 1);
	}
	struct policy p = sliding(POLICY_MAX_LIMITS, c, w);
	const char *err = NULL;
	ck_assert_int_eq(policy_validate(&p, &err), 0);
	p.nlimits = 0;
	ck_assert_int_eq(policy_validate(&p, &err), -1);
	ck_assert_str_eq(err, "a policy needs at least one limit");
	p.nlimits = POLICY_MAX_LIMITS + 1;
	ck_assert_int_eq(policy_validate(&p, &err), -1);
	ck_assert_str_eq(err, "too many limits (at most 8)");
}
END_TEST

START_TEST(validate_capacity)
{
	int64_t c[] = {30};
	int64_t w[] = {60000};
	struct policy p = sliding(1, c, w);
	p.algo = POLICY_FUNNEL;
	const char *err = NULL;
	p.limits[0].capacity = 0;
	ck_assert_int_eq(policy_validate(&p, &err), -1);
	ck_assert_str_eq(err, "capacity must be an integer from 1 to 1000000000");
	p.limits[0].capacity = POLICY_MAX_COUNT + 1;
	ck_assert_int_eq(policy_validate(&p, &err), -1);
	p.limits[0].capacity = POLICY_MAX_COUNT;
	ck_assert_int_eq(policy_validate(&p, &err), 0);
	p.limits[0].period_ms = 0;
	ck_assert_int_eq(policy_validate(&p, &err), -1);
	ck_assert_str_eq(err, "limit out of range");
}
END_TEST

/* A full funnel's drain time: exact for ordinary numbers, no overflow at the extremes. */
START_TEST(window_of_a_funnel)
{
	struct policy p;
	memset(&p, 0, sizeof(p));
	p.algo = POLICY_FUNNEL;
	p.nlimits = 1;
	p.limits[0] = (struct policy_limit){.capacity = 15, .count = 30, .period_ms = 60000};
	ck_assert_int_eq(policy_window_ms(&p, 15, 0), 30000);
	p.limits[0] = (struct policy_limit){
		.capacity = POLICY_MAX_COUNT, .count = 1, .period_ms = POLICY_MAX_PERIOD_MS};
	ck_assert_int_eq(policy_window_ms(&p, POLICY_MAX_COUNT, 0), 4000000000000000000LL);
	p.algo = POLICY_FIXED_WINDOW;
	p.limits[0] = (struct policy_limit){.capacity = 5, .count = 5, .period_ms = 3600000};
	ck_assert_int_eq(policy_window_ms(&p, 5, 0), 3600000);
}
END_TEST

/* ms of a UTC date and time */
static int64_t utc(int y, int mo, int d, int h, int mi)
{
	struct tm tm = {
		.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
	return (int64_t)timegm(&tm) * 1000;
}

/* A calendar policy of one limit ("600/day") in zone tz. */
static struct policy calendar_policy(enum policy_algo algo, const char *limit, const char *tz)
{
	struct policy p;
	memset(&p, 0, sizeof(p));
	p.algo = algo;
	p.nlimits = 1;
	ck_assert_int_eq(policy_parse_limit(limit, strlen(limit), &p.limits[0], why, sizeof(why)),
			 0);
	p.limits[0].capacity = p.limits[0].count;
	strcpy(p.timezone, tz);
	return p;
}

/* A calendar window announces the window holding now, not the unit's
 * longest: 24 hours on an ordinary day, 23 and 25 on Berlin's switches,
 * a month of its own days from its anchor. */
START_TEST(window_of_a_calendar)
{
	struct policy p = calendar_policy(POLICY_FIXED_WINDOW, "600/day", "Europe/Berlin");
	const int64_t h = 3600000;
	ck_assert_int_eq(policy_window_ms(&p, 600, utc(2024, 6, 10, 12, 0)), 24 * h);
	/* 31 March 2024: the clocks go forward (CET to CEST) */
	ck_assert_int_eq(policy_window_ms(&p, 600, utc(2024, 3, 31, 9, 0)), 23 * h);
	/* 27 October 2024: the clocks go back */
	ck_assert_int_eq(policy_window_ms(&p, 600, utc(2024, 10, 27, 9, 0)), 25 * h);
	/* the days either side are whole ones again */
	ck_assert_int_eq(policy_window_ms(&p, 600, utc(2024, 3, 30, 22, 59)), 24 * h);
	ck_assert_int_eq(policy_window_ms(&p, 600, utc(2024, 10, 27, 23, 0)), 24 * h);
	/* a month from the 28th in Tokyo: 28 April to 28 May has 30 days */
	p = calendar_policy(POLICY_SLIDING_COUNTER, "20000/month@28", "Asia/Tokyo");
	ck_assert_int_eq(policy_window_ms(&p, 20000, utc(2024, 5, 10, 0, 0)), 30 * 24 * h);
	/* 28 January to 28 February 2024 (Tokyo's midnight, UTC 27 February 15:00) */
	ck_assert_int_eq(policy_window_ms(&p, 20000, utc(2024, 2, 27, 14, 59)), 31 * 24 * h);
	ck_assert_int_eq(policy_window_ms(&p, 20000, utc(2024, 2, 27, 15, 0)), 29 * 24 * h);
}
END_TEST

START_TEST(describe)
{
	char buf[128];
	int64_t c[] = {3, 20};
	int64_t w[] = {1000, 60000};
	struct policy p = sliding(2, c, w);
	size_t n = policy_describe(&p, buf, sizeof(buf));
	ck_assert_str_eq(buf, "sliding_window 3/1s 20/1m");
	ck_assert_uint_eq(n, strlen(buf));
	struct policy s = p;
	s.shadow = 1;
	policy_describe(&s, buf, sizeof(buf));
	ck_assert_str_eq(buf, "sliding_window 3/1s 20/1m shadow true");
	ck_assert(!policy_equal(&p, &s));

	int64_t fc[] = {30};
	int64_t fw[] = {60000};
	p = sliding(1, fc, fw);
	p.algo = POLICY_FUNNEL;
	p.limits[0].capacity = 15;
	p.on_store_error = POLICY_ON_ERROR_DENY;
	policy_describe(&p, buf, sizeof(buf));
	ck_assert_str_eq(buf, "funnel capacity 15 rate 30/1m on_store_error deny");

	int64_t oc[] = {7, 1};
	int64_t ow[] = {1500, 2 * 86400000LL};
	p = sliding(2, oc, ow);
	policy_describe(&p, buf, sizeof(buf));
	ck_assert_str_eq(buf, "sliding_window 7/1500ms 1/2d");
}
END_TEST

START_TEST(describe_truncates)
{
	char buf[10];
	int64_t c[] = {3, 20};
	int64_t w[] = {1000, 60000};
	struct policy p = sliding(2, c, w);
	size_t n = policy_describe(&p, buf, sizeof(buf));
	ck_assert_str_eq(buf, "sliding_w");
	ck_assert_uint_eq(n, sizeof(buf) - 1);
}
END_TEST

START_TEST(on_error_names)
{
	enum policy_on_error e = POLICY_ON_ERROR_INHERIT;
	ck_assert_int_eq(policy_parse_on_error("deny", 4, &e), 0);
	ck_assert_int_eq(e, POLICY_ON_ERROR_DENY);
	ck_assert_int_eq(policy_parse_on_error("error", 5, &e), 0);
	ck_assert_int_eq(e, POLICY_ON_ERROR_ERROR);
	ck_assert_int_eq(policy_parse_on_error("allow", 5, &e), 0);
	ck_assert_int_eq(e, POLICY_ON_ERROR_ALLOW);
	ck_assert_int_eq(policy_parse_on_error("Allow", 5, &e), -1);
	ck_assert_int_eq(policy_parse_on_error("inherit", 7, &e), -1);
	ck_assert_int_eq(policy_parse_on_error("den", 3, &e), -1);
	ck_assert_str_eq(policy_on_error_name(POLICY_ON_ERROR_ERROR), "error");
	ck_assert_str_eq(policy_algo_name(POLICY_FUNNEL), "funnel");
	ck_assert_str_eq(policy_algo_name(POLICY_SLIDING_WINDOW), "sliding_window");
	ck_assert_str_eq(policy_on_error_name(POLICY_ON_ERROR_INHERIT), "inherit");
	/* one name per algorithm, read back by the parser; messages list them all */
	for (int a = 0; a < POLICY_ALGO_N; a++) {
		const char *name = policy_algo_name((enum policy_algo)a);
		enum policy_algo back = POLICY_ALGO_N;
		ck_assert_str_ne(name, "?");
		ck_assert_int_eq(policy_algo_parse(name, strlen(name), &back), 0);
		ck_assert_int_eq(back, a);
	}
	char list[128];
	ck_assert_str_eq(
		yenum_list(policy_algo_names, 0, list, sizeof(list)),
		"sliding_window, sliding_window_counter, fixed_window, funnel or concurrency");
	ck_assert_str_eq(yenum_list(policy_on_error_names, 0, list, 12), "allow, deny");
}
END_TEST

START_TEST(equal)
{
	int64_t c[] = {3, 20};
	int64_t w[] = {1000, 60000};
	struct policy a = sliding(2, c, w), b = sliding(2, c, w);
	ck_assert(policy_equal(&a, &b));
	b.limits[1].count = 21;
	ck_assert(!policy_equal(&a, &b));
	b = a;
	b.on_store_error = POLICY_ON_ERROR_DENY;
	ck_assert(!policy_equal(&a, &b));
	b = a;
	b.nlimits = 1;
	ck_assert(!policy_equal(&a, &b));
}
END_TEST

static Suite *policy_suite(void)
{
	Suite *s = suite_create("policy");
	TCase *tc = tcase_create("duration");
	tcase_add_test(tc, duration_units);
	tcase_add_test(tc, duration_zero);
	tcase_add_test(tc, duration_overflow);
	tcase_add_test(tc, duration_junk);
	tcase_add_test(tc, duration_missing_unit);
	tcase_add_test(tc, duration_messages);
	tcase_add_test(tc, duration_uses_len);
	suite_add_tcase(s, tc);

	tc = tcase_create("rate");
	tcase_add_test(tc, rate_valid);
	tcase_add_test(tc, rate_invalid);
	tcase_add_test(tc, names);
	suite_add_tcase(s, tc);

	tc = tcase_create("validate");
	tcase_add_test(tc, validate_ok);
	tcase_add_test(tc, validate_duplicate_windows);
	tcase_add_test(tc, validate_funnel_two_limits);
	tcase_add_test(tc, validate_sliding_count);
	tcase_add_test(tc, validate_limit_counts);
	tcase_add_test(tc, validate_capacity);
	suite_add_tcase(s, tc);

	tc = tcase_create("describe");
	tcase_add_test(tc, describe);
	tcase_add_test(tc, window_of_a_funnel);
	tcase_add_test(tc, window_of_a_calendar);
	tcase_add_test(tc, describe_truncates);
	tcase_add_test(tc, on_error_names);
	tcase_add_test(tc, equal);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(policy_suite());
}
