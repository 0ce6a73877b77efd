/* test_denycache.c - the local deny cache: holds exactly until the retry time, RESET, reload, bounds. */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <string.h>

#include "denycache.h"

#define A "login", 5
#define U "david", 5

START_TEST(test_holds_until_retry)
{
	struct denycache *dc = denycache_new(16);
	struct denycache_hit h;
	ck_assert(!denycache_lookup(dc, A, U, 1, 1000000, &h));
	/* denied at t=1s (sent), retry after 2000 ms: holds until 1s + 1999 ms */
	denycache_put(dc, denycache_epoch(dc), A, U, 1, 1000000, 5, 0, 2000, 30000);
	ck_assert(denycache_lookup(dc, A, U, 1, 1000000, &h));
	ck_assert_int_eq(h.limit, 5);
	ck_assert_int_eq(h.remaining, 0);
	ck_assert_int_ge(h.retry_after_ms, 1999);
	ck_assert_int_le(h.retry_after_ms, 2001);
	ck_assert_int_eq(h.reset_ms, 30000);
	ck_assert(denycache_lookup(dc, A, U, 1, 2500000, &h));
	ck_assert_int_eq(h.reset_ms, 28500);
	ck_assert_int_le(h.retry_after_ms, 501);
	ck_assert(denycache_lookup(dc, A, U, 1, 2998999, &h));
	ck_assert(!denycache_lookup(dc, A, U, 1, 2999000, &h));
	ck_assert_uint_eq(denycache_size(dc), 0);
	denycache_free(dc);
}
END_TEST

START_TEST(test_exact_key)
{
	struct denycache *dc = denycache_new(16);
	struct denycache_hit h;
	denycache_put(dc, denycache_epoch(dc), A, U, 3, 0, 5, 2, 5000, 5000);
	ck_assert(denycache_lookup(dc, A, U, 3, 1000, &h));
	ck_assert(!denycache_lookup(dc, A, U, 1, 1000, &h));	     /* another cost */
	ck_assert(!denycache_lookup(dc, A, "davi", 4, 3, 1000, &h)); /* another user */
	ck_assert(!denycache_lookup(dc, "logi", 4, "ndavid", 6, 3, 1000, &h));
	ck_assert(!denycache_lookup(dc, "reply", 5, U, 3, 1000, &h));
	denycache_free(dc);
}
END_TEST

START_TEST(test_forget_and_clear)
{
	struct denycache *dc = denycache_new(16);
	struct denycache_hit h;
	denycache_put(dc, denycache_epoch(dc), A, U, 1, 0, 5, 0, 5000, 5000);
	denycache_put(dc, denycache_epoch(dc), A, U, 2, 0, 5, 0, 5000, 5000);
	denycache_put(dc, denycache_epoch(dc), "reply", 5, U, 1, 0, 5, 0, 5000, 5000);
	denycache_forget(dc, A, U);
	ck_assert(!denycache_lookup(dc, A, U, 1, 10, &h));
	ck_assert(!denycache_lookup(dc, A, U, 2, 10, &h));
	ck_assert(denycache_lookup(dc, "reply", 5, U, 1, 10, &h));
	denycache_clear(dc);
	ck_assert(!denycache_lookup(dc, "reply", 5, U, 1, 10, &h));
	ck_assert_uint_eq(denycache_size(dc), 0);
	denycache_free(dc);
}
END_TEST

START_TEST(test_never_and_short)
{
	struct denycache *dc = denycache_new(16);
	struct denycache_hit h;
	denycache_put(dc, denycache_epoch(dc), A, U, 99, 0, 5, 0, -1, 0);
	ck_assert(denycache_lookup(dc, A, U, 99, 999999, &h));
	ck_assert_int_eq(h.retry_after_ms, -1);
	ck_assert(!denycache_lookup(dc, A, U, 99, 1000000, &h));
	denycache_put(dc, denycache_epoch(dc), A, U, 1, 0, 5, 0, 1,
		      10); /* 1 ms: not worth keeping */
	ck_assert(!denycache_lookup(dc, A, U, 1, 0, &h));
	denycache_free(dc);
}
END_TEST

START_TEST(test_bounded)
{
	struct denycache *dc = denycache_new(64);
	char user[32];
	for (int i = 0; i < 100000; i++) {
		int n = snprintf(user, sizeof(user), "u%d", i);
		denycache_put(dc, denycache_epoch(dc), A, user, (size_t)n, 1, 0, 5, 0, 60000,
			      60000);
	}
	ck_assert_uint_le(denycache_size(dc), 64);
	ck_assert_uint_gt(denycache_size(dc), 16);
	denycache_free(dc);
}
END_TEST

START_TEST(test_epoch)
{
	struct denycache *dc = denycache_new(16);
	struct denycache_hit h;
	unsigned long e = denycache_epoch(dc);
	denycache_clear(dc); /* a reload while the request was at Redis */
	denycache_put(dc, e, A, U, 1, 0, 5, 0, 5000, 5000);
	ck_assert(!denycache_lookup(dc, A, U, 1, 10, &h));
	e = denycache_epoch(dc);
	denycache_reset_pair(dc, "x", 1, "y", 1); /* a RESET anywhere */
	denycache_put(dc, e, A, U, 1, 0, 5, 0, 5000, 5000);
	ck_assert(!denycache_lookup(dc, A, U, 1, 10, &h));
	e = denycache_epoch(dc);
	denycache_forget(dc, "x", 1, "y", 1); /* our own consumption: not an epoch change */
	denycache_put(dc, e, A, U, 1, 0, 5, 0, 5000, 5000);
	ck_assert(denycache_lookup(dc, A, U, 1, 10, &h));
	denycache_free(dc);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("denycache");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_holds_until_retry);
	tcase_add_test(tc, test_exact_key);
	tcase_add_test(tc, test_forget_and_clear);
	tcase_add_test(tc, test_never_and_short);
	tcase_add_test(tc, test_bounded);
	tcase_add_test(tc, test_epoch);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
