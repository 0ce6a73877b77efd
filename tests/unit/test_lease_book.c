/* test_lease_book.c - the book of leases a daemon granted (lease_book.c):
 * per-action held and expired counts, through growth, sweeps, resets and
 * its bound. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "lease_book.h"
#include "stats.h"

START_TEST(test_held_released_expired)
{
	struct lease_book *b = lease_book_new(100000);
	struct stats_action a, c;
	memset(&a, 0, sizeof(a));
	memset(&c, 0, sizeof(c));
	/* enough to grow the table several times */
	for (uint64_t i = 1; i <= 5000; i++)
		ck_assert_int_eq(lease_book_granted(b, i * 0x9e3779b97f4a7c15ULL, i % 7,
						    (int64_t)(1000 + i % 2 * 1000),
						    i % 2 ? &a : &c),
				 0);
	ck_assert_uint_eq(lease_book_size(b), 5000);
	ck_assert_int_eq(a.leases_held, 2500);
	ck_assert_int_eq(c.leases_held, 2500);
	/* released: no longer held, not expired; twice is harmless */
	lease_book_released(b, 1 * 0x9e3779b97f4a7c15ULL);
	lease_book_released(b, 1 * 0x9e3779b97f4a7c15ULL);
	ck_assert_int_eq(a.leases_held, 2499);
	/* renewed past the sweep: stays */
	lease_book_renewed(b, 2 * 0x9e3779b97f4a7c15ULL, 5000);
	/* c's expire at 1000, a's at 2000 */
	lease_book_sweep(b, 1000);
	ck_assert_int_eq(c.leases_held, 1);
	ck_assert_uint_eq(c.leases_expired, 2499);
	ck_assert_int_eq(a.leases_held, 2499);
	/* found gone by a RELEASE: expired */
	lease_book_gone(b, 3 * 0x9e3779b97f4a7c15ULL);
	ck_assert_int_eq(a.leases_held, 2498);
	ck_assert_uint_eq(a.leases_expired, 1);
	/* a reset of pair 5: its leases go, released */
	size_t before = lease_book_size(b);
	lease_book_reset(b, 5);
	ck_assert_uint_lt(lease_book_size(b), before);
	ck_assert_uint_eq(a.leases_expired, 1);
	lease_book_sweep(b, 10000);
	ck_assert_uint_eq(lease_book_size(b), 0);
	ck_assert_int_eq(a.leases_held + c.leases_held, 0);
	lease_book_free(b);
}
END_TEST

START_TEST(test_bounded)
{
	struct lease_book *b = lease_book_new(3);
	struct stats_action a;
	memset(&a, 0, sizeof(a));
	for (uint64_t i = 1; i <= 3; i++)
		ck_assert_int_eq(lease_book_granted(b, i, 0, 100, &a), 0);
	ck_assert_int_eq(lease_book_granted(b, 4, 0, 100, &a), -1);
	ck_assert_int_eq(a.leases_held, 3);
	/* unknown nonces change nothing; NULL counters are allowed */
	lease_book_released(b, 99);
	lease_book_renewed(b, 99, 5);
	lease_book_gone(b, 99);
	ck_assert_int_eq(a.leases_held, 3);
	lease_book_released(b, 1);
	ck_assert_int_eq(lease_book_granted(b, 5, 0, 100, NULL), 0);
	ck_assert_int_eq(a.leases_held, 2);
	lease_book_free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lease_book");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_held_released_expired);
	tcase_add_test(tc, test_bounded);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
