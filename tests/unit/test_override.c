/* test_override.c - which override applies to a user: exact over prefix, longest prefix first. */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "override.h"
#include "policy.h"

static struct override_set *set_of(const char *const *patterns, size_t n)
{
	struct override_set *s = calloc(1, sizeof(*s));
	ck_assert_ptr_nonnull(s);
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(patterns[i]);
		int prefix = len && patterns[i][len - 1] == '*';
		ck_assert_int_eq(override_add(s, patterns[i], len - (size_t)prefix, prefix,
					      OVERRIDE_UNLIMITED, NULL),
				 0);
	}
	const struct override *dup = NULL;
	ck_assert_int_eq(override_finish(s, &dup), 0);
	return s;
}

static const char *found(const struct override_set *s, const char *user)
{
	static char buf[600];
	const struct override *o = override_find(s, user, strlen(user));
	if (!o)
		return "(none)";
	snprintf(buf, sizeof(buf), "%s%s", o->pattern, o->prefix ? "*" : "");
	return buf;
}

START_TEST(most_specific_wins)
{
	static const char *const p[] = {"partner-*", "partner-big-*", "vip", "partner-big-1",
					"p*",	     "vipx"};
	struct override_set *s = set_of(p, sizeof(p) / sizeof(p[0]));
	ck_assert_str_eq(found(s, "vip"), "vip");
	ck_assert_str_eq(found(s, "vipx"), "vipx");
	ck_assert_str_eq(found(s, "vi"), "(none)");
	ck_assert_str_eq(found(s, "vipxy"), "(none)");
	ck_assert_str_eq(found(s, "partner-big-1"), "partner-big-1");
	ck_assert_str_eq(found(s, "partner-big-2"), "partner-big-*");
	ck_assert_str_eq(found(s, "partner-big-"), "partner-big-*");
	ck_assert_str_eq(found(s, "partner-bi"), "partner-*");
	ck_assert_str_eq(found(s, "partner-"), "partner-*");
	ck_assert_str_eq(found(s, "partner"), "p*");
	ck_assert_str_eq(found(s, "p"), "p*");
	ck_assert_str_eq(found(s, ""), "(none)");
	override_set_free(s);
}
END_TEST

START_TEST(catch_all_and_binary_users)
{
	static const char *const p[] = {"*", "a"};
	struct override_set *s = set_of(p, 2);
	ck_assert_str_eq(found(s, "a"), "a");
	ck_assert_str_eq(found(s, "b"), "*");
	/* users are bytes: a NUL or high byte inside is just part of the user */
	const struct override *o = override_find(s, "a\0b", 3);
	ck_assert_ptr_nonnull(o);
	ck_assert(o->prefix && o->len == 0);
	override_set_free(s);
}
END_TEST

START_TEST(duplicates_and_equality)
{
	struct override_set *s = calloc(1, sizeof(*s));
	override_add(s, "x", 1, 0, OVERRIDE_BLOCKED, NULL);
	override_add(s, "y", 1, 1, OVERRIDE_BLOCKED, NULL);
	override_add(s, "x", 1, 0, OVERRIDE_UNLIMITED, NULL);
	const struct override *dup = NULL;
	ck_assert_int_eq(override_finish(s, &dup), 1);
	ck_assert_str_eq(dup->pattern, "x");
	override_set_free(s);

	static const char *const p[] = {"a", "b*"};
	struct override_set *x = set_of(p, 2), *y = set_of(p, 2);
	ck_assert(override_set_equal(x, y));
	ck_assert(override_set_equal(NULL, NULL));
	ck_assert(!override_set_equal(x, NULL));
	y->v[0].kind = OVERRIDE_BLOCKED;
	ck_assert(!override_set_equal(x, y));
	override_set_free(x);
	override_set_free(y);
}
END_TEST

/* 10000 overrides: every one found, and a miss costs a handful of searches. */
START_TEST(many)
{
	struct override_set *s = calloc(1, sizeof(*s));
	char buf[32];
	for (int i = 0; i < 10000; i++) {
		int n = snprintf(buf, sizeof(buf), "%s%d", i % 2 ? "pre-" : "user-", i);
		ck_assert_int_eq(override_add(s, buf, (size_t)n, i % 2, OVERRIDE_BLOCKED, NULL), 0);
	}
	const struct override *dup = NULL;
	ck_assert_int_eq(override_finish(s, &dup), 0);
	for (int i = 0; i < 10000; i++) {
		int n = snprintf(buf, sizeof(buf), "%s%d%s", i % 2 ? "pre-" : "user-", i,
				 i % 2 ? "-suffix" : "");
		const struct override *o = override_find(s, buf, (size_t)n);
		ck_assert_ptr_nonnull(o);
		ck_assert_int_eq(o->prefix, i % 2);
	}
	ck_assert_ptr_null(override_find(s, "nobody", 6));
	override_set_free(s);
}
END_TEST

/* From the file: the policy an override makes keeps the policy's name and options. */
/* A run-time override's spec, for a window policy and a funnel. */
START_TEST(spec_parse)
{
	struct policy win = {
		.name = "api", .name_len = 3, .algo = POLICY_FIXED_WINDOW, .nlimits = 1};
	win.limits[0] = (struct policy_limit){.capacity = 10, .count = 10, .period_ms = 60000};
	struct policy fun = {.name = "up", .name_len = 2, .algo = POLICY_FUNNEL, .nlimits = 1};
	fun.limits[0] = (struct policy_limit){.capacity = 15, .count = 30, .period_ms = 60000};
	enum override_kind k;
	struct policy *p;
	char err[200];
#define SPEC(pol, s) override_spec_parse(pol, s, strlen(s), &k, &p, err, sizeof(err))
	ck_assert_int_eq(SPEC(&win, "unlimited"), 0);
	ck_assert(k == OVERRIDE_UNLIMITED && p == NULL);
	ck_assert_int_eq(SPEC(&fun, "blocked"), 0);
	ck_assert(k == OVERRIDE_BLOCKED && p == NULL);
	ck_assert_int_eq(SPEC(&win, "100/1m,5000/1d"), 0);
	ck_assert(k == OVERRIDE_LIMITS && p && p->algo == POLICY_FIXED_WINDOW && p->nlimits == 2);
	ck_assert(p->limits[1].count == 5000 && p->limits[1].capacity == 5000 &&
		  p->limits[1].period_ms == 86400000 && strcmp(p->name, "api") == 0);
	free(p);
	ck_assert_int_eq(SPEC(&fun, "30,60/1m"), 0);
	ck_assert(p && p->nlimits == 1 && p->limits[0].capacity == 30 && p->limits[0].count == 60 &&
		  p->limits[0].period_ms == 60000);
	free(p);
	static const char *const bad_win[] = {"",     "5",	   "5/1m,", ",5/1m",	"5/1m,5/1m",
					      "x/1m", "Unlimited", "0/1m",  "5/1m 6/1h"};
	for (size_t i = 0; i < sizeof(bad_win) / sizeof(bad_win[0]); i++) {
		ck_assert_msg(SPEC(&win, bad_win[i]) == -1, "'%s' parsed", bad_win[i]);
		ck_assert(p == NULL && err[0]);
	}
	static const char *const bad_fun[] = {
		"", "30", "30,", "60/1m", "0,60/1m", "30,60/1m,1/1s", "x,60/1m"};
	for (size_t i = 0; i < sizeof(bad_fun) / sizeof(bad_fun[0]); i++) {
		ck_assert_msg(SPEC(&fun, bad_fun[i]) == -1, "'%s' parsed", bad_fun[i]);
		ck_assert(p == NULL && err[0]);
	}
#undef SPEC
}
END_TEST

/* A run-time override's calendar limits count in the policy's zone (UTC
 * when it has none), or in one of their own (timezone=): a day that ends
 * at that zone's midnight. */
START_TEST(spec_timezone)
{
	struct policy win = {
		.name = "api", .name_len = 3, .algo = POLICY_FIXED_WINDOW, .nlimits = 1};
	win.limits[0] = (struct policy_limit){.capacity = 10, .count = 10, .period_ms = 60000};
	enum override_kind k;
	struct policy *p;
	char err[200];
	/* 2026-03-10 12:00 UTC: 13:00 in Berlin, 21:00 in Tokyo */
	const int64_t now = 1773144000000;
	int64_t b[5];
#define SPEC(pol, s) override_spec_parse(pol, s, strlen(s), &k, &p, err, sizeof(err))
	ck_assert_int_eq(SPEC(&win, "600/day"), 0);
	ck_assert_str_eq(p->timezone, ""); /* UTC */
	ck_assert_int_eq(
		calendar_bounds(p->timezone, p->limits[0].calendar, p->limits[0].anchor, now, b),
		0);
	ck_assert(b[2] == 1773100800000 && b[3] == 1773187200000); /* UTC midnights */
	free(p);
	snprintf(win.timezone, sizeof(win.timezone), "Europe/Berlin");
	ck_assert_int_eq(SPEC(&win, "600/day"), 0); /* the policy's zone */
	ck_assert_str_eq(p->timezone, "Europe/Berlin");
	calendar_bounds(p->timezone, p->limits[0].calendar, p->limits[0].anchor, now, b);
	ck_assert(b[2] == 1773097200000 && b[3] == 1773183600000); /* 23:00 UTC */
	free(p);
	ck_assert_int_eq(SPEC(&win, "100/1h,600/day,timezone=Asia/Tokyo"), 0);
	ck_assert_str_eq(p->timezone, "Asia/Tokyo");
	ck_assert(p->nlimits == 2 && p->limits[1].calendar == CALENDAR_DAY);
	calendar_bounds(p->timezone, p->limits[1].calendar, p->limits[1].anchor, now, b);
	ck_assert(b[2] == 1773154800000 - 86400000 && b[3] == 1773154800000); /* 15:00 UTC */
	free(p);
	ck_assert_int_eq(SPEC(&win, "timezone=UTC,5000/month@15"), 0);
	ck_assert(strcmp(p->timezone, "UTC") == 0 && p->limits[0].anchor == 15);
	free(p);
	static const struct {
		const char *spec, *err;
	} bad[] = {
		{"600/day,timezone=", "timezone= takes a name of tzdata"},
		{"600/day,timezone=../../etc/passwd", "timezone= takes a name of tzdata"},
		{"600/day,timezone=/etc/localtime", "timezone= takes a name of tzdata"},
		{"600/day,timezone=UTC,timezone=UTC", "at most one timezone="},
		{"100/1m,timezone=Asia/Tokyo", "timezone= is for calendar limits"},
		{"timezone=Asia/Tokyo", "an override needs a rate"},
		{"600/day,Timezone=UTC", "unlimited, blocked or RATE"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(SPEC(&win, bad[i].spec) == -1, "'%s' parsed", bad[i].spec);
		ck_assert_msg(p == NULL && strstr(err, bad[i].err), "'%s': %s", bad[i].spec, err);
	}
	struct policy fun = {.name = "up", .name_len = 2, .algo = POLICY_FUNNEL, .nlimits = 1};
	fun.limits[0] = (struct policy_limit){.capacity = 15, .count = 30, .period_ms = 60000};
	ck_assert_int_eq(SPEC(&fun, "30,60/1m,timezone=UTC"), -1); /* no calendar windows */
#undef SPEC
}
END_TEST

START_TEST(from_config)
{
	char err[512];
	const char *y = "policies:\n"
			"  api:\n"
			"    limits: [100/1m]\n"
			"    on_store_error: deny\n"
			"    overrides:\n"
			"      customer-42: [1000/1m, 20000/1h]\n"
			"      \"internal-*\": unlimited\n"
			"      abuser: blocked\n"
			"  up: {algorithm: funnel, capacity: 5, rate: 1/1s,\n"
			"       overrides: {vip: {capacity: 50, rate: 10/1s}}}\n";
	struct config *c = config_parse("t.yaml", y, strlen(y), err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	const struct policy *api = config_find_policy(c, "api", 3);
	const struct override *o = override_find(api->overrides, "customer-42", 11);
	ck_assert_int_eq(o->kind, OVERRIDE_LIMITS);
	ck_assert_str_eq(o->policy->name, "api");
	ck_assert_int_eq(o->policy->on_store_error, POLICY_ON_ERROR_DENY);
	ck_assert_int_eq(o->policy->nlimits, 2);
	ck_assert_int_eq(o->policy->limits[1].count, 20000);
	ck_assert_ptr_null(o->policy->overrides);
	ck_assert_int_eq(override_find(api->overrides, "internal-1", 10)->kind, OVERRIDE_UNLIMITED);
	ck_assert_int_eq(override_find(api->overrides, "abuser", 6)->kind, OVERRIDE_BLOCKED);
	const struct policy *up = config_find_policy(c, "up", 2);
	o = override_find(up->overrides, "vip", 3);
	ck_assert_int_eq(o->policy->limits[0].capacity, 50);
	ck_assert_int_eq(o->policy->limits[0].count, 10);
	config_unref(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("override");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, most_specific_wins);
	tcase_add_test(tc, catch_all_and_binary_users);
	tcase_add_test(tc, duplicates_and_equality);
	tcase_add_test(tc, many);
	tcase_add_test(tc, from_config);
	tcase_add_test(tc, spec_parse);
	tcase_add_test(tc, spec_timezone);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
