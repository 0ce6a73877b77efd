/* test_lease.c - concurrency leases in C (lease.c): ids and one key's set. */
#include <check.h>

#include "runner.h"
#include <stdlib.h>
#include <string.h>

#include "lease.h"

/* Every byte a user may hold comes back from the id; the longest fits. */
START_TEST(test_id_roundtrip)
{
	char user[KEYS_USER_MAX];
	for (size_t i = 0; i < sizeof(user); i++)
		user[i] = (char)(i * 7 + 3);
	for (size_t len = 1; len <= sizeof(user); len += len < 8 ? 1 : 61) {
		char id[LEASE_ID_MAX];
		size_t n = lease_id_format(id, "export", 6, user, len, 0x0123456789abcdefULL, 42);
		ck_assert_uint_lt(n, LEASE_ID_MAX);
		ck_assert_uint_eq(strlen(id), n);
		ck_assert_ptr_null(memchr(id, ' ', n));
		struct lease_id got;
		ck_assert_int_eq(lease_id_parse(id, n, &got), 0);
		ck_assert_uint_eq(got.action_len, 6);
		ck_assert_mem_eq(got.action, "export", 6);
		ck_assert_uint_eq(got.user_len, len);
		ck_assert_mem_eq(got.user, user, len);
		ck_assert_int_eq(got.cost, 42);
		ck_assert_str_eq(got.member, "0123456789abcdef:42");
		ck_assert_uint_eq(lease_id_action(id, n), 6);
	}
	char id[LEASE_ID_MAX];
	size_t n = lease_id_format(id, "a", 1, "ann", 3, 1, 1);
	ck_assert_str_eq(id, "a:YW5u:0000000000000001:1");
	ck_assert_uint_eq(n, strlen(id));
}
END_TEST

/* Anything lease_id_format would not write is no id. */
START_TEST(test_id_rejects)
{
	static const char *const bad[] = {
		"",
		"export",
		":YW5u:0123456789abcdef:1",
		"export:YW5u:0123456789abcdef",
		"export:YW5u:0123456789abcdef:",
		"export:YW5u:0123456789abcdef:0",
		"export:YW5u:0123456789abcdef:01",
		"export:YW5u:0123456789abcdef:2147483648",
		"export:YW5u:0123456789ABCDEF:1",
		"export:YW5u:0123456789abcde:1",
		"export:YW5u:0123456789abcdef0:1",
		"export::0123456789abcdef:1",
		"export:Y:0123456789abcdef:1",	   /* 1 char is no byte */
		"export:YW5:0123456789abcdef:1",   /* bits past the last byte */
		"export:YW 5u:0123456789abcdef:1", /* not base64url */
		"export:YW5u:0123456789abcdef:1x",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct lease_id got;
		ck_assert_msg(lease_id_parse(bad[i], strlen(bad[i]), &got) < 0, "%s", bad[i]);
	}
}
END_TEST

#define S 1000000 /* a second, in us */

START_TEST(test_acquire_to_the_limit)
{
	struct lease_set s = {0};
	struct lease_result r;
	ck_assert_int_eq(lease_apply(&s, LEASE_ACQUIRE, "a:1", 1, 3, 30000, 10 * S, &r), 0);
	ck_assert_int_eq(r.ok, 1);
	ck_assert_int_eq(r.remaining, 2);
	ck_assert_int_eq(r.ms, 30000);
	ck_assert_int_eq(lease_apply(&s, LEASE_ACQUIRE, "b:2", 2, 3, 30000, 11 * S, &r), 0);
	ck_assert_int_eq(r.ok, 1);
	ck_assert_int_eq(r.remaining, 0);
	/* full: the hint is the soonest expiry, a's at 40 s */
	ck_assert_int_eq(lease_apply(&s, LEASE_ACQUIRE, "c:1", 1, 3, 30000, 12 * S, &r), 0);
	ck_assert_int_eq(r.ok, 0);
	ck_assert_int_eq(r.remaining, 0);
	ck_assert_int_eq(r.ms, 28000);
	/* more than the limit can never be held */
	ck_assert_int_eq(lease_apply(&s, LEASE_ACQUIRE, "d:4", 4, 3, 30000, 12 * S, &r), 0);
	ck_assert_int_eq(r.ok, 0);
	ck_assert_int_eq(r.ms, -1);
	/* a peek takes nothing */
	ck_assert_int_eq(lease_apply(&s, LEASE_PEEK, "", 1, 3, 30000, 12 * S, &r), 0);
	ck_assert_int_eq(r.ok, 0);
	ck_assert_uint_eq(s.n, 2);
	/* a's lease runs out at 40 s: counted as expired, its unit free */
	ck_assert_int_eq(lease_apply(&s, LEASE_ACQUIRE, "c:1", 1, 3, 30000, 40 * S, &r), 0);
	ck_assert_int_eq(r.ok, 1);
	ck_assert_int_eq(r.expired, 1);
	ck_assert_int_eq(r.remaining, 0);
	lease_set_free(&s);
}
END_TEST

START_TEST(test_release_and_renew)
{
	struct lease_set s = {0};
	struct lease_result r;
	lease_apply(&s, LEASE_ACQUIRE, "a:1", 1, 2, 10000, 0, &r);
	lease_apply(&s, LEASE_ACQUIRE, "b:1", 1, 2, 10000, 1 * S, &r);
	ck_assert_int_eq(r.remaining, 0);
	/* renewed at 9 s: a lives to 19 s, b goes at 11 s */
	ck_assert_int_eq(lease_apply(&s, LEASE_RENEW, "a:1", 1, 2, 10000, 9 * S, &r), 0);
	ck_assert_int_eq(r.ok, 1);
	ck_assert_int_eq(r.ms, 10000);
	ck_assert_int_eq(lease_apply(&s, LEASE_RENEW, "b:1", 1, 2, 10000, 12 * S, &r), 0);
	ck_assert_int_eq(r.ok, 0); /* too late: it expired */
	ck_assert_int_eq(r.expired, 1);
	ck_assert_int_eq(r.remaining, 1);
	ck_assert_int_eq(lease_apply(&s, LEASE_RELEASE, "a:1", 1, 2, 10000, 13 * S, &r), 0);
	ck_assert_int_eq(r.ok, 1);
	ck_assert_int_eq(r.remaining, 2);
	/* twice: harmless, and says so */
	ck_assert_int_eq(lease_apply(&s, LEASE_RELEASE, "a:1", 1, 2, 10000, 13 * S, &r), 0);
	ck_assert_int_eq(r.ok, 0);
	ck_assert_int_eq(r.remaining, 2);
	ck_assert_uint_eq(s.n, 0);
	ck_assert_int_eq(lease_set_last_us(&s), 0);
	lease_apply(&s, LEASE_ACQUIRE, "c:2", 2, 2, 10000, 14 * S, &r);
	ck_assert_int_eq(lease_set_last_us(&s), 24 * S);
	ck_assert_int_eq(lease_apply(&s, LEASE_RESET, "", 1, 2, 10000, 14 * S, &r), 0);
	ck_assert_uint_eq(s.n, 0);
	lease_set_free(&s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lease");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_id_roundtrip);
	tcase_add_test(tc, test_id_rejects);
	tcase_add_test(tc, test_acquire_to_the_limit);
	tcase_add_test(tc, test_release_and_renew);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
