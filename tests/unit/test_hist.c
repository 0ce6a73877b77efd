/* test_hist.c - histogram buckets (bounds are inclusive, +Inf past the last) and their decimal text. */
#include <check.h>

#include "runner.h"
#include <string.h>

#include "hist.h"

static const struct hist_bounds lat = {14,
				       6,
				       {50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000,
					100000, 250000, 500000, 1000000}};

START_TEST(test_bucket_edges)
{
	ck_assert_uint_eq(hist_bucket(&lat, 0), 0);
	ck_assert_uint_eq(hist_bucket(&lat, 50), 0); /* le: inclusive */
	ck_assert_uint_eq(hist_bucket(&lat, 51), 1);
	ck_assert_uint_eq(hist_bucket(&lat, 999), 4);
	ck_assert_uint_eq(hist_bucket(&lat, 1000), 4);
	ck_assert_uint_eq(hist_bucket(&lat, 1000000), 13);
	ck_assert_uint_eq(hist_bucket(&lat, 1000001), 14); /* +Inf */
	ck_assert_uint_eq(hist_bucket(&lat, UINT64_MAX), 14);
	static const struct hist_bounds none = {0, 0, {0}};
	ck_assert_uint_eq(hist_bucket(&none, 7), 0);
}
END_TEST

START_TEST(test_every_value_lands_below_its_bound)
{
	/* against the definition, over a range crossing every bound */
	for (uint64_t v = 0; v <= 1100000; v += 7) {
		size_t i = hist_bucket(&lat, v);
		if (i < lat.n)
			ck_assert(v <= lat.le[i]);
		if (i > 0)
			ck_assert(v > lat.le[i - 1]);
	}
}
END_TEST

START_TEST(test_observe_counts_and_sums)
{
	struct hist h;
	memset(&h, 0, sizeof(h));
	hist_observe(&h, &lat, 10);
	hist_observe(&h, &lat, 60);
	hist_observe(&h, &lat, 60);
	hist_observe(&h, &lat, 2000000);
	ck_assert_uint_eq(h.count, 4);
	ck_assert_uint_eq(h.sum, 2000130);
	ck_assert_uint_eq(h.bucket[0], 1);
	ck_assert_uint_eq(h.bucket[1], 2);
	ck_assert_uint_eq(h.bucket[14], 1);
	uint64_t total = 0;
	for (size_t i = 0; i <= lat.n; i++)
		total += h.bucket[i];
	ck_assert_uint_eq(total, h.count);
}
END_TEST

START_TEST(test_format)
{
	static const struct {
		uint64_t v;
		unsigned scale;
		const char *text;
	} cases[] = {
		{50, 6, "0.00005"},
		{2500, 6, "0.0025"},
		{1000000, 6, "1"},
		{2500000, 6, "2.5"},
		{0, 6, "0"},
		{0, 0, "0"},
		{64, 0, "64"},
		{1234567, 6, "1.234567"},
		{10, 1, "1"},
		{UINT64_MAX, 0, "18446744073709551615"},
		{UINT64_MAX, 20, "0.18446744073709551615"},
		{1, 20, "0.00000000000000000001"},
	};
	char buf[HIST_TEXT_MAX];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = hist_format(buf, cases[i].v, cases[i].scale);
		ck_assert_str_eq(buf, cases[i].text);
		ck_assert_uint_eq(n, strlen(cases[i].text));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hist");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_bucket_edges);
	tcase_add_test(tc, test_every_value_lands_below_its_bound);
	tcase_add_test(tc, test_observe_counts_and_sums);
	tcase_add_test(tc, test_format);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
