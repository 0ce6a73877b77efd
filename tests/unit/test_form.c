/* test_form.c - a URL-encoded form's fields (form.c) and shown users read back (shown.c). */
#include <check.h>

#include "runner.h"
#include <string.h>

#include "form.h"
#include "shown.h"

static long get(const char *form, const char *key, char *out, size_t cap)
{
	return form_value(form, strlen(form), key, out, cap);
}

START_TEST(test_fields)
{
	char v[64];
	ck_assert_int_eq(get("action=login&user=mallory&spec=5%2F60s", "user", v, sizeof(v)), 7);
	ck_assert(memcmp(v, "mallory", 7) == 0);
	ck_assert_int_eq(get("action=login&user=mallory&spec=5%2F60s", "spec", v, sizeof(v)), 5);
	ck_assert(memcmp(v, "5/60s", 5) == 0);
	/* '+' a blank, %XX any byte (NUL too), either case */
	ck_assert_int_eq(get("user=a+b%00%c3%A9", "user", v, sizeof(v)), 6);
	ck_assert(memcmp(v, "a b\0\xc3\xa9", 6) == 0);
	/* the first of two; a key is whole ("xuser" is not "user") */
	ck_assert_int_eq(get("xuser=1&user=2&user=3", "user", v, sizeof(v)), 1);
	ck_assert_int_eq(v[0], '2');
	/* empty, absent, a key without '=' */
	ck_assert_int_eq(get("user=&a=1", "user", v, sizeof(v)), 0);
	ck_assert_int_eq(get("a=1&&b=2", "user", v, sizeof(v)), -1);
	ck_assert_int_eq(get("user&a=1", "user", v, sizeof(v)), -1);
	ck_assert_int_eq(get("", "user", v, sizeof(v)), -1);
	/* a bad %XX, a cut one, too long for out */
	ck_assert_int_eq(get("user=%zz", "user", v, sizeof(v)), -2);
	ck_assert_int_eq(get("user=ab%4", "user", v, sizeof(v)), -2);
	ck_assert_int_eq(get("user=abcd", "user", v, 3), -2);
	ck_assert_int_eq(get("user=abc", "user", v, 3), 3);
}
END_TEST

START_TEST(test_shown_users_read_back)
{
	char shown[SHOWN_USER_MAX(8)], back[16];
	const char user[] = "a b%\xff\x7f~";
	size_t n = shown_user(shown, user, 7, 0);
	ck_assert_str_eq((shown[n] = '\0', shown), "a%20b%25%FF%7F~");
	ck_assert_int_eq(shown_parse(shown, n, back, sizeof(back)), 7);
	ck_assert(memcmp(back, user, 7) == 0);
	ck_assert_int_eq(shown_parse("caf%c3%a9", 9, back, sizeof(back)), 5);
	/* what shown_user never writes: a blank, a byte past ASCII, a bad %XX */
	ck_assert_int_eq(shown_parse("a b", 3, back, sizeof(back)), -1);
	ck_assert_int_eq(shown_parse("a\xc3", 2, back, sizeof(back)), -1);
	ck_assert_int_eq(shown_parse("a%4", 3, back, sizeof(back)), -1);
	ck_assert_int_eq(shown_parse("abc", 3, back, 2), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("form");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_fields);
	tcase_add_test(tc, test_shown_users_read_back);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
