/* test_proto_grpc.c - gRPC's framing, pure: grpc-timeout written by
 * grpc_timeout_format and read back by grpc_timeout_parse (the daemon's
 * reader, 8 digits at most), and the message prefix. */
#include <check.h>

#include "runner.h"
#include <stdint.h>
#include <string.h>

#include "proto_grpc.h"

/* Formats ms, checks the text is what the daemon takes, and returns what it
 * reads back. */
static int64_t round_trip(int64_t ms, char *text)
{
	size_t len = grpc_timeout_format(text, ms);
	ck_assert_uint_eq(len, strlen(text));
	ck_assert_uint_le(len, GRPC_TIMEOUT_MAX - 1);
	int64_t back = -1;
	ck_assert_msg(grpc_timeout_parse(text, len, &back) == 0, "%lld ms: \"%s\" refused",
		      (long long)ms, text);
	return back;
}

static const struct {
	int64_t ms;
	const char *text;
} formats[] = {
	{1, "1m"},
	{5000, "5000m"},
	{99999999, "99999999m"},
	/* 100000000 ms, 9 digits: seconds */
	{100000000, "100000S"},
	{100000001, "100001S"},		     /* rounded up, never short */
	{2LL * 24 * 3600 * 1000, "172800S"}, /* -T 2d */
	{366LL * 24 * 3600 * 1000, "31622400S"},
	{99999999000LL, "99999999S"},
	{99999999001LL, "1666667M"},
	{99999999LL * 60000, "99999999M"},
	{99999999LL * 60000 + 1, "1666667H"},
	{99999999LL * 3600000, "99999999H"},
	/* nothing is longer than 8 digits: the longest there is */
	{99999999LL * 3600000 + 1, "99999999H"},
	{INT64_MAX, "99999999H"},
	/* a deadline already passed is not sent as 0 (no time at all) */
	{0, "1m"},
	{-5, "1m"},
};

START_TEST(test_timeout_format_table)
{
	char text[GRPC_TIMEOUT_MAX];
	grpc_timeout_format(text, formats[_i].ms);
	ck_assert_str_eq(text, formats[_i].text);
}
END_TEST

/* Every duration comes back no shorter, and longer by less than its unit. */
START_TEST(test_timeout_round_trip)
{
	static const int64_t units[] = {1, 1000, 60000, 3600000};
	int64_t samples[200];
	size_t n = 0;
	for (int64_t p = 1; p <= INT64_MAX / 10 && n < 60; p *= 10) {
		samples[n++] = p - 1;
		samples[n++] = p;
		samples[n++] = p + 1;
	}
	int64_t edges[] = {99999999,	       100000000,	   99999999000LL,
			   99999999001LL,      99999999LL * 60000, 99999999LL * 60000 + 1,
			   2LL * 86400 * 1000, 4294967296LL + 1000};
	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
		samples[n++] = edges[i] - 1;
		samples[n++] = edges[i];
		samples[n++] = edges[i] + 1;
	}
	for (size_t i = 0; i < n; i++) {
		char text[GRPC_TIMEOUT_MAX];
		int64_t ms = samples[i];
		int64_t back = round_trip(ms, text);
		if (ms < 1) {
			ck_assert_int_eq(back, 1);
			continue;
		}
		if (ms > 99999999LL * 3600000) {
			ck_assert_int_eq(back, 99999999LL * 3600000);
			continue;
		}
		int64_t unit = 0;
		for (size_t u = 0; u < 4 && !unit; u++)
			if (text[strlen(text) - 1] == "mSMH"[u])
				unit = units[u];
		ck_assert_msg(back >= ms && back - ms < unit, "%lld ms -> %s -> %lld ms",
			      (long long)ms, text, (long long)back);
		/* the finest unit that fits: one finer would need 9 digits */
		if (unit > 1) {
			int64_t finer = unit == 1000 ? 1 : unit == 60000 ? 1000 : 60000;
			ck_assert_int_gt(ms / finer + (ms % finer != 0), 99999999);
		}
	}
	char text[GRPC_TIMEOUT_MAX];
	ck_assert_int_eq(round_trip(0, text), 1);
}
END_TEST

START_TEST(test_timeout_parse)
{
	int64_t ms = -1;
	ck_assert_int_eq(grpc_timeout_parse("100000000m", 10, &ms), -1); /* 9 digits */
	ck_assert_int_eq(grpc_timeout_parse("99999999m", 9, &ms), 0);
	ck_assert_int_eq(ms, 99999999);
	ck_assert_int_eq(grpc_timeout_parse("1u", 2, &ms), 0);
	ck_assert_int_eq(ms, 1); /* rounded up */
	ck_assert_int_eq(grpc_timeout_parse("2H", 2, &ms), 0);
	ck_assert_int_eq(ms, 7200000);
	ck_assert_int_eq(grpc_timeout_parse("5", 1, &ms), -1);
	ck_assert_int_eq(grpc_timeout_parse("5x", 2, &ms), -1);
	ck_assert_int_eq(grpc_timeout_parse("-5S", 3, &ms), -1);
}
END_TEST

START_TEST(test_prefix)
{
	uint8_t b[8];
	grpc_prefix_put(b, 0x01020304);
	ck_assert_mem_eq(b, "\x00\x01\x02\x03\x04", 5);
	size_t off = 0, len = 0;
	uint8_t msg[7] = {0, 0, 0, 0, 2, 'h', 'i'};
	ck_assert_int_eq(grpc_body_parse(msg, 7, 100, &off, &len), GRPC_BODY_OK);
	ck_assert_uint_eq(off, 5);
	ck_assert_uint_eq(len, 2);
	ck_assert_int_eq(grpc_body_parse(msg, 6, 100, &off, &len), GRPC_BODY_TRUNCATED);
	ck_assert_int_eq(grpc_body_parse(msg, 7, 1, &off, &len), GRPC_BODY_TOO_BIG);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto_grpc");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_timeout_format_table, 0,
			    (int)(sizeof(formats) / sizeof(formats[0])));
	tcase_add_test(tc, test_timeout_round_trip);
	tcase_add_test(tc, test_timeout_parse);
	tcase_add_test(tc, test_prefix);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
