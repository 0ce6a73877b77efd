/* test_store_memory.c - the memory store through its store_ops (store.c,
 * which would bring every backend, is left out), on a clock the test
 * moves: tests/vectors.txt, expiry, eviction, RESET; and SipHash's
 * published test vector. */
#include <check.h>

#include "runner.h"
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "policy.h"
#include "siphash.h"
#include "store.h"
#include "store_memory.h"
#include "store_replay.h"

struct fixture {
	struct event_base *base;
	struct store *s;
	int64_t now;
	struct store_result got;
	int answers;
};

static int64_t fixture_clock(void *arg)
{
	return ((struct fixture *)arg)->now;
}

static void fixture_done(void *arg, const struct store_result *res)
{
	struct fixture *f = arg;
	f->got = *res;
	f->answers++;
}

static void fixture_open(struct fixture *f, int max_keys)
{
	memset(f, 0, sizeof(*f));
	f->base = event_base_new();
	ck_assert_ptr_nonnull(f->base);
	struct config_memory cfg = {max_keys};
	char err[128];
	f->s = store_memory_new(f->base, &cfg, err, sizeof(err));
	ck_assert_ptr_nonnull(f->s);
	store_memory_set_clock(f->s, fixture_clock, f);
	f->now = 1800000000000000LL;
}

static void fixture_close(struct fixture *f)
{
	f->s->ops->free(f->s);
	event_base_free(f->base);
}

/* One decision, answered inside store_submit. */
static struct store_result ask(struct fixture *f, enum store_op op, const struct policy *p,
			       const char *user, int64_t cost)
{
	struct store_request req = {
		.op = op,
		.policy = p,
		.prefix = "rl:",
		.prefix_len = 3,
		.user = user,
		.user_len = strlen(user),
		.cost = cost,
		.timeout_ms = 50,
	};
	int before = f->answers;
	f->s->ops->submit(f->s, &req, fixture_done, f);
	ck_assert_int_eq(f->answers, before + 1);
	ck_assert_int_eq(f->got.status, STORE_OK);
	return f->got;
}

static struct store_memory_stats stats_of(struct fixture *f)
{
	struct store_memory_stats st;
	ck_assert_int_eq(store_memory_stats(f->s, &st), 0);
	return st;
}

static struct policy make(enum policy_algo algo, int64_t count, int64_t period_ms)
{
	struct policy p;
	memset(&p, 0, sizeof(p));
	strcpy(p.name, "t");
	p.name_len = 1;
	p.algo = algo;
	p.nlimits = 1;
	p.limits[0] =
		(struct policy_limit){.capacity = count, .count = count, .period_ms = period_ms};
	return p;
}

/* ---- tests/vectors.txt through the store ---- */

static int vector_failures;

static void check_reply(struct store_replay *r, const struct vector_step *s,
			const struct store_result *got)
{
	(void)r;
	int group = s->multi ? got->pair : 0, shadow_group = s->multi ? got->shadow_pair : 0;
	if (got->status != STORE_OK || got->allowed != s->want.allowed ||
	    got->limit != s->want.limit || got->remaining != s->want.remaining ||
	    got->retry_after_ms != s->want.retry_after_ms || got->reset_ms != s->want.reset_ms ||
	    group != s->want_group || shadow_group != s->want_shadow_group) {
		vector_failures++;
		fprintf(stderr, "vectors.txt:%d: store got %d %lld %lld %lld %lld %d %d\n", s->line,
			got->allowed, (long long)got->limit, (long long)got->remaining,
			(long long)got->retry_after_ms, (long long)got->reset_ms, group,
			shadow_group);
	}
	/* a STATE's keys, as the script's "t" tells them */
	for (int k = 0; s->state && k < s->nkeys; k++) {
		const struct store_key *g = &got->keys[k];
		const struct limiter_key *w = &s->want_keys[k];
		if (got->nkeys != s->nkeys || g->used != w->used || g->remaining != w->remaining ||
		    g->reset_ms != w->reset_ms || g->start_ms != w->start_ms ||
		    g->end_ms != w->end_ms) {
			vector_failures++;
			fprintf(stderr,
				"vectors:%d: store key %d of %d got %lld %lld %lld %lld %lld\n",
				s->line, k, got->nkeys, (long long)g->used, (long long)g->remaining,
				(long long)g->reset_ms, (long long)g->start_ms,
				(long long)g->end_ms);
		}
	}
}

/* Every decision of a vectors file through the store; at least min. */
static void replay_file(const char *path, int min)
{
	struct fixture f;
	fixture_open(&f, 1000);
	struct store_replay r;
	memset(&r, 0, sizeof(r));
	r.s = f.s;
	r.reply = check_reply;
	store_memory_set_clock(f.s, store_replay_clock, &r);
	vector_failures = 0;
	int n = store_replay_file(&r, path);
	ck_assert_int_gt(n, min);
	ck_assert_int_eq(vector_failures, 0);
	fixture_close(&f);
}


START_TEST(test_vectors)
{
	replay_file(vector_files[_i].file, vector_files[_i].at_least);
}
END_TEST

/* ---- memory ---- */

/* A key goes when Redis's expiry would drop it: on access, and by the sweep. */
START_TEST(test_expiry)
{
	struct fixture f;
	fixture_open(&f, 1000);
	struct policy p = make(POLICY_SLIDING_WINDOW, 2, 1000);
	f.now = 1800000000000000LL; /* a whole second */
	ck_assert_int_eq(ask(&f, STORE_ALLOW, &p, "a", 1).allowed, 1);
	ck_assert_int_eq(stats_of(&f).keys, 1);
	/* a PEEK of an unknown key keeps nothing */
	ask(&f, STORE_PEEK, &p, "nobody", 1);
	ck_assert_int_eq(stats_of(&f).keys, 1);
	/* the log's newest entry + its window: the script's PEXPIRE */
	f.now += 999999;
	ck_assert_int_eq(ask(&f, STORE_PEEK, &p, "a", 1).remaining, 1);
	ck_assert_int_eq(stats_of(&f).keys, 1);
	f.now += 1;
	ck_assert_int_eq(ask(&f, STORE_PEEK, &p, "a", 1).remaining, 2);
	ck_assert_int_eq(stats_of(&f).keys, 0);
	ck_assert_int_eq(stats_of(&f).expired, 1);

	/* the sweep, with nobody asking: a fixed window's key at its end */
	struct policy fw = make(POLICY_FIXED_WINDOW, 5, 1000);
	for (int i = 0; i < 10; i++) {
		char u[8];
		snprintf(u, sizeof(u), "w%d", i);
		ask(&f, STORE_ALLOW, &fw, u, 1);
	}
	ck_assert_int_eq(stats_of(&f).keys, 10);
	f.now += 1000000;
	for (int i = 0; i < 50 && stats_of(&f).keys; i++)
		event_base_loop(f.base, EVLOOP_ONCE);
	ck_assert_int_eq(stats_of(&f).keys, 0);
	ck_assert_int_eq(stats_of(&f).expired, 11);
	ck_assert_int_eq(stats_of(&f).bytes, 0);
	fixture_close(&f);
}
END_TEST

/* At max_keys the least recently used key goes; used keys stay. */
START_TEST(test_eviction)
{
	struct fixture f;
	fixture_open(&f, 1000);
	struct policy p = make(POLICY_FIXED_WINDOW, 3, 3600000);
	char u[16];
	for (int i = 0; i < 1000; i++) {
		snprintf(u, sizeof(u), "u%d", i);
		ask(&f, STORE_ALLOW, &p, u, 1);
	}
	ck_assert_int_eq(stats_of(&f).keys, 1000);
	ck_assert_int_eq(stats_of(&f).evicted, 0);
	/* u0 used again: u1 is now the least recently used */
	ck_assert_int_eq(ask(&f, STORE_ALLOW, &p, "u0", 1).remaining, 1);
	ask(&f, STORE_ALLOW, &p, "new", 1);
	ck_assert_int_eq(stats_of(&f).keys, 1000);
	ck_assert_int_eq(stats_of(&f).evicted, 1);
	ck_assert_int_eq(ask(&f, STORE_PEEK, &p, "u0", 1).remaining, 1); /* kept */
	ck_assert_int_eq(ask(&f, STORE_PEEK, &p, "u1", 1).remaining, 3); /* gone */
	ck_assert_int_eq(ask(&f, STORE_PEEK, &p, "u2", 1).remaining, 2); /* kept */
	/* many more: never above the cap, and the bytes follow */
	for (int i = 0; i < 5000; i++) {
		snprintf(u, sizeof(u), "v%d", i);
		ask(&f, STORE_ALLOW, &p, u, 1);
	}
	struct store_memory_stats st = stats_of(&f);
	ck_assert_int_eq(st.keys, 1000);
	ck_assert_int_eq(st.evicted, 5001);
	ck_assert_int_gt(st.bytes, 1000 * 50);
	ck_assert_int_lt(st.bytes, 1000 * 400);
	fixture_close(&f);
}
END_TEST

/* RESET drops every key of the pair (limits and ban), none of another's. */
START_TEST(test_reset)
{
	struct fixture f;
	fixture_open(&f, 1000);
	struct policy p = make(POLICY_SLIDING_WINDOW, 1, 60000);
	p.nlimits = 2;
	p.limits[1] = (struct policy_limit){.capacity = 5, .count = 5, .period_ms = 3600000};
	p.ban = (struct policy_ban){2, 60000, 600000};
	ask(&f, STORE_ALLOW, &p, "a", 1);
	ask(&f, STORE_ALLOW, &p, "b", 1);
	ck_assert_int_eq(ask(&f, STORE_ALLOW, &p, "a", 1).allowed, 0); /* noted by the ban */
	ck_assert_int_eq(stats_of(&f).keys, 5);
	ask(&f, STORE_RESET, &p, "a", 0);
	ck_assert_int_eq(stats_of(&f).keys, 2);
	ck_assert_int_eq(ask(&f, STORE_ALLOW, &p, "a", 1).allowed, 1);
	ck_assert_int_eq(ask(&f, STORE_ALLOW, &p, "b", 1).allowed, 0);
	fixture_close(&f);
}
END_TEST

/* Users are hashed with a key the store draws: colliding users cannot be
 * chosen; the table still finds each of many similar ones. */
START_TEST(test_many_keys)
{
	struct fixture f;
	fixture_open(&f, 200000);
	struct policy p = make(POLICY_FUNNEL, 10, 1000);
	char u[16];
	for (int i = 0; i < 100000; i++) {
		snprintf(u, sizeof(u), "%d", i);
		ask(&f, STORE_ALLOW, &p, u, 3);
	}
	ck_assert_int_eq(stats_of(&f).keys, 100000);
	for (int i = 0; i < 100000; i += 997) {
		snprintf(u, sizeof(u), "%d", i);
		ck_assert_int_eq(ask(&f, STORE_PEEK, &p, u, 1).remaining, 7);
	}
	fixture_close(&f);
}
END_TEST

/* SipHash-2-4's test vector from its paper: key 00..0f, message 00..0e. */
START_TEST(test_siphash)
{
	uint8_t key[16], msg[64];
	for (int i = 0; i < 16; i++)
		key[i] = (uint8_t)i;
	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	ck_assert_uint_eq(siphash24(key, msg, 15), 0xa129ca6149be45e5ULL);
	ck_assert_uint_eq(siphash24(key, msg, 0), 0x726fdb47dd0e0e31ULL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("store_memory");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_vectors, 0,
			    (int)(sizeof(vector_files) / sizeof(vector_files[0])));
	tcase_add_test(tc, test_expiry);
	tcase_add_test(tc, test_eviction);
	tcase_add_test(tc, test_reset);
	tcase_add_test(tc, test_many_keys);
	tcase_add_test(tc, test_siphash);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
