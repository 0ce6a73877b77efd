/* test_stats.c - per-action counters: by index for the running configuration, by name across reloads, bounded. */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "proto.h"
#include "stats.h"

static char err[CONFIG_ERR_MAX];

/* A configuration with policies p0..p(n-1) (names sorted as strings). */
static struct config *config_n(int n, int first)
{
	static char buf[1 << 16];
	size_t len = (size_t)snprintf(buf, sizeof(buf), "policies:\n");
	for (int i = first; i < first + n; i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "  p%d: 1/1s\n", i);
	struct config *c = config_parse("t.yaml", buf, len, err, sizeof(err));
	ck_assert_msg(c != NULL, "%s", err);
	return c;
}

static const struct policy *find(const struct config *c, const char *name)
{
	const struct policy *p = config_find_policy(c, name, strlen(name));
	ck_assert_ptr_nonnull(p);
	return p;
}

START_TEST(test_counts_by_action_and_source)
{
	memset(&stats, 0, sizeof(stats));
	struct config *c = config_n(3, 0);
	stats_bind(c);
	stats_count_decision(c, find(c, "p1"), STATS_FROM_STORE, 1, "u", 1, 0, 1);
	stats_count_decision(c, find(c, "p1"), STATS_FROM_STORE, 0, "u", 1, 0, 1);
	stats_count_decision(c, find(c, "p1"), STATS_FROM_CACHE, 0, "u", 1, 0, 1);
	/* any non-zero: allowed */
	stats_count_decision(c, find(c, "p2"), STATS_FROM_FALLBACK, 7, "u", 1, 0, 1);
	const struct stats_action *a = stats_action_of(c, find(c, "p1"));
	ck_assert_str_eq(a->name, "p1");
	ck_assert_uint_eq(a->decisions[STATS_FROM_STORE][1], 1);
	ck_assert_uint_eq(a->decisions[STATS_FROM_STORE][0], 1);
	ck_assert_uint_eq(a->decisions[STATS_FROM_CACHE][0], 1);
	ck_assert_uint_eq(stats_action_of(c, find(c, "p2"))->decisions[STATS_FROM_FALLBACK][1], 1);
	ck_assert_uint_eq(stats_action_of(c, find(c, "p0"))->decisions[STATS_FROM_STORE][1], 0);
	ck_assert_uint_eq(stats.decisions[STATS_FROM_STORE][1], 1);
	ck_assert_uint_eq(stats.decisions[STATS_FROM_FALLBACK][1], 1);
	config_unref(c);
	stats_free();
}
END_TEST

START_TEST(test_kept_by_name_across_reloads)
{
	struct config *old = config_n(200, 0); /* grows the table past its first size */
	stats_bind(old);
	for (int i = 0; i < 200; i++) {
		char name[16];
		snprintf(name, sizeof(name), "p%d", i);
		for (int k = 0; k <= i; k++)
			stats_count_decision(old, find(old, name), STATS_FROM_STORE, 1, "u", 1, 0,
					     1);
	}
	/* reload: p100..p299; old requests still finish under `old` */
	struct config *cur = config_n(200, 100);
	stats_bind(cur);
	stats_count_decision(old, find(old, "p150"), STATS_FROM_STORE, 0, "u", 1, 0, 1);
	stats_count_decision(old, find(old, "p5"), STATS_FROM_STORE, 0, "u", 1, 0, 1);
	ck_assert_uint_eq(stats_action_of(cur, find(cur, "p150"))->decisions[STATS_FROM_STORE][1],
			  151);
	ck_assert_uint_eq(stats_action_of(cur, find(cur, "p150"))->decisions[STATS_FROM_STORE][0],
			  1);
	ck_assert_uint_eq(stats_action_of(cur, find(cur, "p250"))->decisions[STATS_FROM_STORE][1],
			  0);
	/* p5 was removed, counted late, and comes back with its counts */
	struct config *back = config_n(10, 0);
	stats_bind(back);
	ck_assert_uint_eq(stats_action_of(back, find(back, "p5"))->decisions[STATS_FROM_STORE][1],
			  6);
	ck_assert_uint_eq(stats_action_of(back, find(back, "p5"))->decisions[STATS_FROM_STORE][0],
			  1);
	config_unref(old);
	config_unref(cur);
	config_unref(back);
	stats_free();
}
END_TEST

START_TEST(test_errors_by_code)
{
	memset(&stats, 0, sizeof(stats));
	stats_count_error(CMD_ERR_BAD_COST);
	stats_count_error(CMD_ERR_BAD_COST);
	stats_count_error((enum cmd_error)CMD_ERR_N); /* out of range: not counted */
	ck_assert_uint_eq(stats.errors[CMD_ERR_BAD_COST], 2);
	unsigned long long all = 0;
	for (int e = 0; e < CMD_ERR_N; e++)
		all += stats.errors[e];
	ck_assert_uint_eq(all, 2);
	ck_assert_str_eq(proto_error_code(CMD_ERR_STORE_UNAVAILABLE), "store-unavailable");
	ck_assert_str_eq(proto_verb_name(CMD_PEEK), "peek");
	ck_assert_str_eq(stats_from_name(STATS_FROM_CACHE), "cache");
}
END_TEST

/* A front end's label (ratelimitd_decision_duration_seconds's protocol=)
 * is its listener protocol's word, from config_listen.c's one table;
 * RESP's, which has no word, its own. */
START_TEST(test_front_labels_are_the_protocol_words)
{
	ck_assert_str_eq(stats_front_name(STATS_FRONT_LINE), "line");
	ck_assert_str_eq(stats_front_name(STATS_FRONT_HTTP), "http");
	ck_assert_str_eq(stats_front_name(STATS_FRONT_GRPC), "grpc");
	ck_assert_str_eq(stats_front_name(STATS_FRONT_RESP), "resp");
	ck_assert_str_eq(stats_front_name(STATS_FRONT_N), "other");
	for (int p = 0; p < CONFIG_PROTOCOL_N; p++)
		ck_assert_str_eq(stats_front_name((enum stats_front)p),
				 config_protocol_name((enum config_protocol)p));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stats");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_counts_by_action_and_source);
	tcase_add_test(tc, test_kept_by_name_across_reloads);
	tcase_add_test(tc, test_errors_by_code);
	tcase_add_test(tc, test_front_labels_are_the_protocol_words);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
