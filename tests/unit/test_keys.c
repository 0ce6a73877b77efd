/* test_keys.c - key layout: prefix, one hash tag per (action, user), injective escaping. */
#include <check.h>

#include "runner.h"
#include <string.h>

#include "keys.h"
#include "policy.h"

static struct policy pol(const char *name, enum policy_algo algo)
{
	struct policy p;
	memset(&p, 0, sizeof(p));
	strcpy(p.name, name);
	p.name_len = strlen(name);
	p.algo = algo;
	p.nlimits = 2;
	p.limits[0] = (struct policy_limit){.capacity = 3, .count = 3, .period_ms = 1000};
	p.limits[1] = (struct policy_limit){.capacity = 20, .count = 20, .period_ms = 60000};
	return p;
}

static void build(char *out, const struct policy *p, int i, const char *user)
{
	size_t n = keys_build(out, "rl:", 3, p, i, user, strlen(user));
	out[n] = 0;
}

START_TEST(test_layout)
{
	char k[KEYS_MAX + 1];
	struct policy p = pol("login", POLICY_SLIDING_WINDOW);
	build(k, &p, 0, "david");
	ck_assert_str_eq(k, "rl:{login:david}:s1000");
	build(k, &p, 1, "david");
	ck_assert_str_eq(k, "rl:{login:david}:s60000");
	struct policy f = pol("upload", POLICY_FUNNEL);
	build(k, &f, 0, "10.0.0.1");
	ck_assert_str_eq(k, "rl:{upload:10.0.0.1}:f");
}
END_TEST

START_TEST(test_escaping)
{
	char a[KEYS_MAX + 1], b[KEYS_MAX + 1];
	struct policy p = pol("x", POLICY_FUNNEL);
	build(a, &p, 0, "a}b");
	build(b, &p, 0, "a%7Db");
	ck_assert_str_ne(a, b);
	ck_assert_str_eq(a, "rl:{x:a%7Db}:f");
	ck_assert_str_eq(b, "rl:{x:a%257Db}:f");
	/* the tag covers the whole user even with braces inside */
	build(a, &p, 0, "{}}{");
	size_t tl;
	const char *tag = keys_hash_tag(a, strlen(a), &tl);
	ck_assert_uint_eq(tl, strlen("x:{%7D%7D{"));
	ck_assert(memcmp(tag, "x:{%7D%7D{", tl) == 0);
	/* user "b:c" for action "a" vs user "c" for action "a:b" can't happen: actions have no ':' */
	ck_assert(!policy_name_valid("a:b", 3));
}
END_TEST

START_TEST(test_longest_fits)
{
	char user[KEYS_USER_MAX];
	memset(user, '}', sizeof(user));
	struct policy p = pol("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
			      POLICY_SLIDING_WINDOW);
	p.limits[0].period_ms = POLICY_MAX_PERIOD_MS;
	char prefix[KEYS_PREFIX_MAX];
	memset(prefix, 'p', sizeof(prefix));
	char k[KEYS_MAX];
	size_t n = keys_build(k, prefix, sizeof(prefix), &p, 0, user, sizeof(user));
	ck_assert_uint_le(n, KEYS_MAX);
	size_t tl;
	keys_hash_tag(k, n, &tl);
	ck_assert_uint_eq(tl, 64 + 1 + KEYS_USER_MAX * 3);
}
END_TEST

START_TEST(test_parse_tag_roundtrip)
{
	const char *users[] = {"david", "a}b", "a%7Db", "%%}}", "{x}", "10.0.0.1"};
	struct policy p = pol("login", POLICY_FUNNEL);
	for (size_t i = 0; i < sizeof(users) / sizeof(users[0]); i++) {
		char k[KEYS_MAX];
		size_t n = keys_build(k, "rl:", 3, &p, 0, users[i], strlen(users[i]));
		size_t tl, alen, ulen;
		const char *tag = keys_hash_tag(k, n, &tl);
		const char *action;
		char user[KEYS_USER_MAX];
		ck_assert_int_eq(keys_parse_tag(tag, tl, &action, &alen, user, &ulen), 0);
		ck_assert_uint_eq(alen, 5);
		ck_assert(memcmp(action, "login", 5) == 0);
		ck_assert_uint_eq(ulen, strlen(users[i]));
		ck_assert(memcmp(user, users[i], ulen) == 0);
	}
	const char *action;
	size_t alen, ulen;
	char user[KEYS_USER_MAX];
	ck_assert_int_eq(keys_parse_tag("nocolon", 7, &action, &alen, user, &ulen), -1);
	ck_assert_int_eq(keys_parse_tag("a:%zz", 5, &action, &alen, user, &ulen), -1);
	ck_assert_int_eq(keys_parse_tag("a:", 2, &action, &alen, user, &ulen), -1);
}
END_TEST

START_TEST(test_slot)
{
	/* Redis Cluster spec test vector, and values CLUSTER KEYSLOT gives */
	ck_assert_uint_eq(keys_slot("123456789", 9), 0x31C3 & 16383);
	ck_assert_uint_eq(keys_slot("a", 1), 15495);
	ck_assert_uint_eq(keys_slot("b", 1), 3300);
	ck_assert_uint_eq(keys_slot("c", 1), 7365);
	/* only the tag counts */
	ck_assert_uint_eq(keys_slot("rl:{a}:s1000", 12), 15495);
	ck_assert_uint_eq(keys_slot("x{a}y", 5), keys_slot("{a}", 3));
	/* an empty tag {} hashes the whole key (CLUSTER KEYSLOT "{}a" = 10875) */
	ck_assert_uint_eq(keys_slot("{}a", 3), 10875);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("keys");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_layout);
	tcase_add_test(tc, test_escaping);
	tcase_add_test(tc, test_longest_fits);
	tcase_add_test(tc, test_parse_tag_roundtrip);
	tcase_add_test(tc, test_slot);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
