/*
 * test_envoy_rules.c - envoyproxy/ratelimit's lookup, case by case (the
 * table is what its config_impl.go does: exact value, then wildcards in
 * file order, then the key alone; the limit where the last entry lands),
 * its file errors, and the names that keep a rule's counters.
 */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <string.h>

#include "envoy_rules.h"

static const char CONF[] =
	"domain: d\n"
	"descriptors:\n"
	"  - {key: k1, rate_limit: {unit: minute, requests_per_unit: 10}}\n"		 /* A */
	"  - {key: k1, value: v1, rate_limit: {unit: minute, requests_per_unit: 20}}\n"	 /* B */
	"  - {key: k1, value: v2}\n"							 /* C */
	"  - {key: k1, value: ab*, rate_limit: {unit: minute, requests_per_unit: 30}}\n" /* D */
	"  - {key: k1, value: a*, rate_limit: {unit: minute, requests_per_unit: 40}}\n"	 /* E */
	"  - key: p\n"
	"    value: x\n" /* F: no limit */
	"    descriptors:\n"
	"      - {key: c, rate_limit: {unit: second, requests_per_unit: 5}}\n"		 /* G */
	"      - {key: c, value: y, rate_limit: {unit: second, requests_per_unit: 6}}\n" /* H */
	"  - key: q\n" /* I: a limit and children */
	"    rate_limit: {unit: hour, requests_per_unit: 100}\n"
	"    descriptors:\n"
	"      - {key: r, value: s}\n"					  /* J: no limit */
	"  - {key: u, rate_limit: {unlimited: true}}\n"			  /* K */
	"  - {key: m*x, rate_limit: {unit: day, requests_per_unit: 7}}\n" /* L: * mid-way */
	"  - {key: w, value: 'x*y', rate_limit: {unit: week, requests_per_unit: 8}}\n"; /* M */

static struct envoy_rules *load(const char *text, char *err, size_t errlen)
{
	return envoy_rules_parse("r.yaml", text, strlen(text), POLICY_FIXED_WINDOW, err, errlen);
}

/* requests_per_unit of the limit entries e[] land on, 0 for none, -1 unlimited */
static int64_t lookup(const struct envoy_rules *r, const char *domain, const char *const *kv,
		      size_t n)
{
	struct envoy_entry e[8];
	for (size_t i = 0; i < n; i++)
		e[i] = (struct envoy_entry){kv[2 * i], strlen(kv[2 * i]), kv[2 * i + 1],
					    strlen(kv[2 * i + 1])};
	const struct envoy_domain *d = envoy_domain_find(r, domain, strlen(domain));
	if (!d)
		return -2;
	const struct envoy_limit *l = envoy_lookup(d, e, n);
	if (!l)
		return 0;
	return l->unlimited ? -1 : (int64_t)l->requests_per_unit;
}

START_TEST(test_lookup_table)
{
	char err[1024] = "";
	struct envoy_rules *r = load(CONF, err, sizeof(err));
	ck_assert_msg(r != NULL, "%s", err);
	static const struct {
		size_t n;
		const char *kv[6];
		int64_t want;
	} cases[] = {
		{1, {"k1", "v1"}, 20},		    /* exact wins over wildcard and key alone */
		{1, {"k1", "zzz"}, 10},		    /* the key alone */
		{1, {"k1", "v2"}, 0},		    /* exact without a limit: no fallback */
		{1, {"k1", "abc"}, 30},		    /* the first wildcard in file order */
		{1, {"k1", "axe"}, 40},		    /* the second one */
		{1, {"k1", "a"}, 40},		    /* '*' matches nothing too */
		{1, {"k1", ""}, 10},		    /* "k1_": no name, the key alone */
		{2, {"k1", "v1", "extra", "z"}, 0}, /* B is not the last, and has no children */
		{1, {"p", "x"}, 0},		    /* F has no limit */
		{2, {"p", "x", "c", "y"}, 6},	    /* H */
		{2, {"p", "x", "c", "other"}, 5},   /* G: the key alone, a level down */
		{2, {"p", "other", "c", "y"}, 0},   /* no p_other, no p alone */
		{2, {"c", "y", "p", "x"}, 0},	    /* order matters */
		{1, {"q", "anything"}, 100},	    /* I, the last entry */
		{2, {"q", "v", "r", "s"}, 0}, /* J is last, without a limit: I not inherited */
		{2, {"q", "v", "r", "t"}, 0}, /* no r_t, no r alone */
		{1, {"u", "1"}, -1},	      /* unlimited */
		{1, {"nokey", "1"}, 0},	      /* nothing */
		{1, {"mix", ""}, 0},	      /* "mix_" does not end in x */
		{1, {"m", "x"}, 7},	      /* "m_x": the key's '*' spans "_" */
		{1, {"w", "x--y"}, 8},	      /* a value's '*' mid-way */
		{1, {"w", "xy"}, 8},
		{1, {"w", "xyz"}, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(lookup(r, "d", cases[i].kv, cases[i].n) == cases[i].want,
			      "case %zu: got %lld, want %lld", i,
			      (long long)lookup(r, "d", cases[i].kv, cases[i].n),
			      (long long)cases[i].want);
	const char *kv[] = {"k1", "v1"};
	ck_assert_int_eq(lookup(r, "other", kv, 1), -2); /* unknown domain */
	/* a value of 60 kB (a long path) still meets the wildcards: a limit
	 * cannot be escaped by sending a long value */
	static char longv[60001];
	memset(longv, 'z', sizeof(longv) - 1);
	longv[0] = 'a';
	longv[1] = 'b';
	const char *lkv[] = {"k1", longv};
	ck_assert_int_eq(lookup(r, "d", lkv, 1), 30);
	envoy_rules_free(r);
}
END_TEST

START_TEST(test_glob)
{
	ck_assert(envoy_glob("a*", 2, "a", 1));
	ck_assert(envoy_glob("*", 1, "", 0));
	ck_assert(envoy_glob("a*b*c", 5, "aXXbYYc", 7));
	ck_assert(!envoy_glob("a*b*c", 5, "aXXbYY", 6));
	ck_assert(envoy_glob("**", 2, "anything", 8));
	ck_assert(!envoy_glob("abc", 3, "abcd", 4));
	/* a long pattern of stars against a long miss ends (no backtracking blow-up) */
	char pat[200], s[4000];
	for (int i = 0; i < 100; i++)
		pat[2 * i] = '*', pat[2 * i + 1] = 'a';
	memset(s, 'a', sizeof(s));
	s[sizeof(s) - 1] = 'b';
	ck_assert(!envoy_glob(pat, sizeof(pat), s, sizeof(s)));
}
END_TEST

START_TEST(test_windows_and_names)
{
	char err[1024] = "";
	struct envoy_rules *r = load(CONF, err, sizeof(err));
	ck_assert_msg(r != NULL, "%s", err);
	const struct envoy_domain *d = envoy_domain_find(r, "d", 1);
	struct envoy_entry e = {"k1", 2, "v1", 2};
	const struct envoy_limit *l = envoy_lookup(d, &e, 1);
	ck_assert_int_eq(l->policy.algo, POLICY_FIXED_WINDOW);
	ck_assert_int_eq(l->policy.limits[0].count, 20);
	ck_assert_int_eq(l->policy.limits[0].period_ms, 60000);
	/* readable, then a hash of the exact path: the same on every load */
	ck_assert_msg(strncmp(l->policy.name, "d.k1_v1-", 8) == 0, "%s", l->policy.name);
	ck_assert(policy_name_valid(l->policy.name, l->policy.name_len));
	struct envoy_rules *r2 = load(CONF, err, sizeof(err));
	ck_assert_str_eq(envoy_lookup(envoy_domain_find(r2, "d", 1), &e, 1)->policy.name,
			 l->policy.name);
	/* the line protocol finds a rule's policy by its name; not an unlimited one */
	ck_assert_ptr_eq(envoy_find_policy(r, l->policy.name, l->policy.name_len), &l->policy);
	ck_assert_ptr_null(envoy_find_policy(r, "d.k1_v1", 7));
	struct envoy_entry eu = {"u", 1, "1", 1};
	const struct envoy_limit *lu = envoy_lookup(d, &eu, 1);
	ck_assert_ptr_null(envoy_find_policy(r, lu->policy.name, lu->policy.name_len));
	/* another value gets another name */
	struct envoy_entry e2 = {"k1", 2, "abc", 3};
	ck_assert_str_ne(envoy_lookup(d, &e2, 1)->policy.name, l->policy.name);
	ck_assert_int_eq(envoy_unit_seconds(ENVOY_UNIT_MONTH), 30 * 86400);
	ck_assert_int_eq(envoy_unit_seconds(ENVOY_UNIT_YEAR), 365 * 86400);
	ck_assert_int_eq(envoy_unit_seconds(ENVOY_UNIT_WEEK), 7 * 86400);
	envoy_rules_free(r);
	envoy_rules_free(r2);
	/* a file's algorithm, a rule's own */
	r = load("domain: x\nalgorithm: sliding_window_counter\ndescriptors:\n"
		 "  - {key: a, rate_limit: {unit: second, requests_per_unit: 5}}\n"
		 "  - {key: b, rate_limit: {unit: second, requests_per_unit: 5, "
		 "algorithm: funnel, delay: 250ms}}\n",
		 err, sizeof(err));
	ck_assert_msg(r != NULL, "%s", err);
	d = envoy_domain_find(r, "x", 1);
	struct envoy_entry a = {"a", 1, "1", 1}, b = {"b", 1, "1", 1};
	ck_assert_int_eq(envoy_lookup(d, &a, 1)->policy.algo, POLICY_SLIDING_COUNTER);
	ck_assert_int_eq(envoy_lookup(d, &a, 1)->policy.delay.max_ms, 0);
	ck_assert_int_eq(envoy_lookup(d, &b, 1)->policy.algo, POLICY_FUNNEL);
	/* a rule's delay (ours): the policy's delay.max */
	ck_assert_int_eq(envoy_lookup(d, &b, 1)->policy.delay.max_ms, 250);
	envoy_rules_free(r);
}
END_TEST

START_TEST(test_errors)
{
	static const struct {
		const char *text, *err;
	} bad[] = {
		{"descriptors: []\n", "r.yaml:1:1: config file cannot have empty domain"},
		{"domain: d\ndescriptors:\n  - value: v\n",
		 "r.yaml:3:5: descriptors: descriptor has empty key"},
		{"domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n",
		 "r.yaml:4:5: duplicate descriptor composite key 'd.k_v'"},
		{"domain: d\ndescriptors:\n  - key: p\n    descriptors:\n      - {key: k}\n"
		 "      - {key: k}\n",
		 "r.yaml:6:9: duplicate descriptor composite key 'd.p.k'"},
		{"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: fortnight}}\n",
		 "r.yaml:3:27: rate_limit: invalid rate limit unit 'fortnight'"},
		{"domain: d\ndescriptors:\n  - {key: k, rate_limit: {requests_per_unit: 1}}\n",
		 "invalid rate limit unit ''"},
		{"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unlimited: true, unit: day}}\n",
		 "should not specify rate limit unit when unlimited"},
		{"domain: d\ndescriptors:\n  - {key: k, rate_limit: {name: a, unlimited: true, "
		 "replaces: [{name: a}]}}\n",
		 "rate_limit.replaces: should not contain name of same descriptor"},
		{"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unlimited: true, replaces: "
		 "[{name: ''}]}}\n",
		 "should not have an empty replaces entry"},
		{"domain: d\ndescriptors:\n  - {key: k, share_threshold: 10}\n",
		 "share_threshold: is not supported"},
		{"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, "
		 "requests_per_unit: 2000000000}}\n",
		 "requests_per_unit: must be an integer from 0 to 1000000000"},
		{"domain: d\ndescriptors:\n  - {key: k}\nalgorithm: funnel\n",
		 "algorithm: must come before descriptors"},
		{"domain: d\ndescriptors:\n  - [a]\n", "expected a descriptor"},
		{"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, "
		 "requests_per_unit: 1, delay: 61s}}\n",
		 "delay: must be from 1ms to 60s"},
		{"domain: d\nbogus: 1\n", "unknown key"},
		/* a control byte quoted from the file is shown as '?' (found by
		 * fuzz_envoy: the message was two lines) */
		{"domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: \"sec\\tond\"}}\n",
		 "invalid rate limit unit 'sec?ond'"},
		{"domain: \"a\\nb\"\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n",
		 "duplicate descriptor composite key 'a?b.k_v'"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[2048] = "";
		struct envoy_rules *r = load(bad[i].text, err, sizeof(err));
		ck_assert_msg(r == NULL, "case %zu loaded", i);
		ck_assert_msg(strstr(err, bad[i].err) != NULL, "case %zu: %s", i, err);
	}
	/* accepted and ignored: metric options, metadata */
	char err[512] = "";
	struct envoy_rules *r =
		load("domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n"
		     "    value_to_metric: true\n    metadata: {a: [1, 2]}\n"
		     "    rate_limit: {unit: second, requests_per_unit: 1}\n",
		     err, sizeof(err));
	ck_assert_msg(r != NULL, "%s", err);
	envoy_rules_free(r);
}
END_TEST

/* Deep nesting is refused where it is, before the parse's recursion runs
 * the stack out (8,000 levels once crashed the daemon at a reload). */
START_TEST(test_deep_nesting)
{
	static char text[300000]; /* 8,000 x 25 bytes and more */
	size_t n = (size_t)snprintf(text, sizeof(text), "domain: d\ndescriptors: ");
	for (int i = 0; i < 8000; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "[{key: k, descriptors: ");
	n += (size_t)snprintf(text + n, sizeof(text) - n, "[]");
	for (int i = 0; i < 8000; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "}]");
	char err[256];
	ck_assert_ptr_null(load(text, err, sizeof(err)));
	/* at the 17th level's descriptor, its "{": 13 + 16 x 23 + 2 */
	ck_assert_str_eq(err, "r.yaml:2:383: descriptors nested deeper than 16 levels");
	/* 16 levels are fine */
	n = (size_t)snprintf(text, sizeof(text), "domain: d\ndescriptors: ");
	for (int i = 0; i < 16; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "[{key: k%d, descriptors: ", i);
	n += (size_t)snprintf(text + n, sizeof(text) - n, "[]");
	for (int i = 0; i < 16; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "}]");
	struct envoy_rules *r = load(text, err, sizeof(err));
	ck_assert_msg(r != NULL, "%s", err);
	envoy_rules_free(r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("envoy_rules");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_lookup_table);
	tcase_add_test(tc, test_glob);
	tcase_add_test(tc, test_windows_and_names);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_deep_nesting);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
