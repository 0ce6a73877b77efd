/* test_top.c - heavy hitters (src/ops/top.c): the heavy user found among
 * many, counts over by no more than the bound, two windows weighted as the
 * sliding window counter does, long names cut, reads ranked and bounded. */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "top.h"

#define SEC 1000000ULL

static void count(struct top *t, const char *user, int denied, uint64_t now)
{
	top_count(t, user, strlen(user), 1, denied, now);
}

static const struct top_row *row_of(const struct top_row *rows, size_t n, const char *user)
{
	for (size_t i = 0; i < n; i++)
		if (rows[i].len == strlen(user) && memcmp(rows[i].name, user, rows[i].len) == 0)
			return &rows[i];
	return NULL;
}

/* One user with a fifth of the denials among 20,000 others: first, its
 * count within the bound (total / TOP_ENTRIES) of the truth. */
START_TEST(test_heavy_user_first_among_many)
{
	struct top *t = calloc(1, sizeof(*t));
	uint64_t now = 100 * SEC, rng = 7;
	char user[32];
	unsigned heavy = 0, total = 0;
	for (int i = 0; i < 50000; i++) {
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		if (i % 5 == 0) {
			count(t, "mallory", 1, now);
			heavy++;
		} else {
			snprintf(user, sizeof(user), "u%llu",
				 (unsigned long long)(rng >> 33) % 20000);
			count(t, user, (rng >> 20) % 3 == 0, now + 1);
		}
		total++;
	}
	struct top_row rows[TOP_ROWS_MAX];
	size_t n = top_read(t, TOP_BY_DENIED, now + 2, rows, 10);
	ck_assert_uint_eq(n, 10);
	ck_assert_uint_eq(rows[0].len, 7);
	ck_assert_mem_eq(rows[0].name, "mallory", 7);
	ck_assert_uint_ge(rows[0].denied, heavy);
	ck_assert_uint_le(rows[0].denied, heavy + total / TOP_ENTRIES);
	ck_assert_uint_le(rows[0].denied - heavy, rows[0].over);
	ck_assert_uint_ge(rows[0].requests, rows[0].denied);
	for (size_t i = 1; i < n; i++)
		ck_assert_uint_le(rows[i].denied, rows[i - 1].denied);
	/* by requests: mallory's are all of its own, a fifth of the total */
	n = top_read(t, TOP_BY_REQUESTS, now + 2, rows, 3);
	ck_assert_uint_eq(n, 3);
	ck_assert_mem_eq(rows[0].name, "mallory", 7);
	uint64_t req, den;
	top_totals(t, now + 2, &req, &den);
	ck_assert_uint_eq(req, total);
	ck_assert_uint_ge(den, heavy);
	free(t);
}
END_TEST

/* The previous window counts for the part of it still inside the last
 * minute; two windows on, nothing is left. */
START_TEST(test_windows_weighted_then_gone)
{
	struct top *t = calloc(1, sizeof(*t));
	uint64_t t0 = 10 * SEC;
	for (int i = 0; i < 100; i++)
		count(t, "alice", 1, t0);
	count(t, "bob", 1, t0 + 59 * SEC);
	struct top_row rows[TOP_ROWS_MAX];
	size_t n = top_read(t, TOP_BY_DENIED, t0 + 30 * SEC, rows, TOP_ROWS_MAX);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(rows[0].denied, 100);
	/* 15 s into the next window: three quarters of the first still count */
	count(t, "bob", 1, t0 + 75 * SEC);
	n = top_read(t, TOP_BY_DENIED, t0 + 75 * SEC, rows, TOP_ROWS_MAX);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(row_of(rows, n, "alice")->denied, 75);
	ck_assert_uint_eq(row_of(rows, n, "bob")->denied, 2); /* 1 + 0.75, rounded */
	/* 45 s in: a quarter */
	n = top_read(t, TOP_BY_DENIED, t0 + 105 * SEC, rows, TOP_ROWS_MAX);
	ck_assert_uint_eq(row_of(rows, n, "alice")->denied, 25);
	/* the next window: only bob's second denial, weighted */
	n = top_read(t, TOP_BY_DENIED, t0 + 130 * SEC, rows, TOP_ROWS_MAX);
	ck_assert_uint_eq(n, 1);
	ck_assert_mem_eq(rows[0].name, "bob", 3);
	/* idle for minutes: nothing */
	n = top_read(t, TOP_BY_DENIED, t0 + 600 * SEC, rows, TOP_ROWS_MAX);
	ck_assert_uint_eq(n, 0);
	free(t);
}
END_TEST

/* A user longer than TOP_NAME_MAX is kept cut; two that differ past the
 * cut stay two when their lengths differ. */
START_TEST(test_long_names_cut_kept_apart)
{
	struct top *t = calloc(1, sizeof(*t));
	char a[200], b[200];
	memset(a, 'x', sizeof(a) - 1);
	a[sizeof(a) - 1] = 0;
	memcpy(b, a, sizeof(a));
	b[150] = 0; /* shorter, the same first 64 bytes */
	for (int i = 0; i < 3; i++)
		count(t, a, 1, SEC);
	count(t, b, 1, SEC);
	struct top_row rows[TOP_ROWS_MAX];
	size_t n = top_read(t, TOP_BY_DENIED, SEC, rows, TOP_ROWS_MAX);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(rows[0].len, TOP_NAME_MAX);
	ck_assert_uint_eq(rows[0].cut, 199);
	ck_assert_uint_eq(rows[0].denied, 3);
	ck_assert_uint_eq(rows[1].denied, 1);
	free(t);
}
END_TEST

/* Peeks are not requests, allowed requests are no denials, ties go by
 * name, and a read returns no more than asked. */
START_TEST(test_requests_denials_and_order)
{
	struct top *t = calloc(1, sizeof(*t));
	const char *users[] = {"carol", "bob", "alice"};
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 4; k++)
			count(t, users[i], 0, SEC);
	top_count(t, "dave", 4, 0, 0, SEC); /* a PEEK allowed */
	struct top_row rows[TOP_ROWS_MAX];
	ck_assert_uint_eq(top_read(t, TOP_BY_DENIED, SEC, rows, TOP_ROWS_MAX), 0);
	size_t n = top_read(t, TOP_BY_REQUESTS, SEC, rows, 2);
	ck_assert_uint_eq(n, 2);
	ck_assert_mem_eq(rows[0].name, "alice", 5);
	ck_assert_mem_eq(rows[1].name, "bob", 3);
	ck_assert_uint_eq(rows[0].requests, 4);
	ck_assert_uint_eq(rows[0].denied, 0);
	struct top empty = {0};
	ck_assert_uint_eq(top_read(&empty, TOP_BY_REQUESTS, SEC, rows, 2), 0);
	free(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("top");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_heavy_user_first_among_many);
	tcase_add_test(tc, test_windows_weighted_then_gone);
	tcase_add_test(tc, test_long_names_cut_kept_apart);
	tcase_add_test(tc, test_requests_denials_and_order);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
