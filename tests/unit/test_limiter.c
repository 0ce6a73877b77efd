/* test_limiter.c - the C limiter against tests/vectors.txt and a few properties. */
#include <check.h>

#include "runner.h"
#include <stdlib.h>
#include <string.h>

#include "limiter.h"
#include "policy.h"
#include "vectors.h"

/* The most groups a multi scenario may have (a MALLOW's most, CMD_PAIRS_MAX). */
#define GROUPS_MAX 8

struct run {
	/* a "policy" scenario is group 0 alone; a "multi" one has ngroups */
	struct policy p[GROUPS_MAX];
	int shadow[GROUPS_MAX];
	struct limiter_state st[GROUPS_MAX][POLICY_MAX_LIMITS + 1]; /* + a ban's */
	struct limiter_state holds; /* the pair's holds (ops h, s, x) */
	int ngroups;
	int failures;
	int dump; /* print actual results in vector syntax (RL_VECTORS_DUMP=1) */
};

static void run_clear(struct run *r)
{
	for (int g = 0; g < GROUPS_MAX; g++)
		for (int i = 0; i < POLICY_MAX_LIMITS + 1; i++)
			limiter_state_free(&r->st[g][i]);
	limiter_state_free(&r->holds);
	r->ngroups = 0;
}

static void run_policy(const struct policy *p, void *arg)
{
	struct run *r = arg;
	run_clear(r);
	r->p[0] = *p;
	r->shadow[0] = 0;
	r->ngroups = 1;
}

static void run_multi(void *arg)
{
	run_clear(arg);
}

static void run_group(const struct policy *p, int shadow, void *arg)
{
	struct run *r = arg;
	ck_assert_int_lt(r->ngroups, GROUPS_MAX);
	r->p[r->ngroups] = *p;
	r->shadow[r->ngroups++] = shadow;
}

static void run_step(const struct vector_step *s, void *arg)
{
	struct run *r = arg;
	struct limiter_result got;
	int group = 0, shadow_group = 0;
	if (s->multi) {
		const struct policy *ps[GROUPS_MAX];
		struct limiter_state *sts[GROUPS_MAX];
		for (int g = 0; g < r->ngroups; g++) {
			ps[g] = &r->p[g];
			sts[g] = r->st[g];
		}
		int rc = limiter_decide_all(ps, r->shadow, sts, r->ngroups, s->op, s->cost,
					    s->now_us, &got, &group, &shadow_group, NULL);
		ck_assert_int_eq(rc, 0);
	} else if (s->hold == 'h') {
		ck_assert_int_eq(limiter_hold(&r->p[0], r->st[0], &r->holds, s->cost, s->nonce,
					      s->hold_ms * 1000, s->now_us, &got),
				 0);
	} else if (s->hold) {
		int rc = limiter_settle(&r->p[0], r->st[0], &r->holds, s->nonce,
					s->hold == 's' ? s->actual : -1, s->now_us, &got);
		ck_assert_int_ge(rc, 0);
		if (rc == 1) /* not open: the script's -3 */
			got = (struct limiter_result){-3, 0, 0, 0, 0};
	} else if (s->state) {
		struct limiter_key keys[POLICY_MAX_LIMITS + 1];
		ck_assert_int_eq(limiter_look(&r->p[0], r->st[0], s->now_us, &got, keys), 0);
		ck_assert_int_eq(s->nkeys, policy_nkeys(&r->p[0]));
		for (int k = 0; k < s->nkeys; k++)
			if (memcmp(&keys[k], &s->want_keys[k], sizeof(keys[k])) != 0) {
				r->failures++;
				fprintf(stderr, "vectors:%d: key %d got %lld %lld %lld %lld %lld\n",
					s->line, k, (long long)keys[k].used,
					(long long)keys[k].remaining, (long long)keys[k].reset_ms,
					(long long)keys[k].start_ms, (long long)keys[k].end_ms);
			}
	} else {
		int rc = s->wait_ms > 0 ? limiter_decide_wait(&r->p[0], r->st[0], s->cost,
							      s->now_us, s->wait_ms * 1000, &got)
					: limiter_decide(&r->p[0], r->st[0], s->op, s->cost,
							 s->now_us, &got);
		ck_assert_int_eq(rc, 0);
	}
	char tail[32] = "";
	if (s->multi)
		snprintf(tail, sizeof(tail), " %d %d", group, shadow_group);
	if (r->dump && s->hold)
		printf("HOLD%c -> %d %lld %lld %lld %lld\n", s->hold, got.allowed,
		       (long long)got.limit, (long long)got.remaining,
		       (long long)got.retry_after_ms, (long long)got.reset_ms);
	else if (r->dump && s->wait_ms > 0)
		printf("%lld d %lld %lld -> %d %lld %lld %lld %lld\n", (long long)s->now_us,
		       (long long)s->cost, (long long)s->wait_ms, got.allowed, (long long)got.limit,
		       (long long)got.remaining, (long long)got.retry_after_ms,
		       (long long)got.reset_ms);
	else if (r->dump)
		printf("%lld %c %lld -> %d %lld %lld %lld %lld%s\n", (long long)s->now_us,
		       (s->multi ? "AP" : "aprg")[s->op], (long long)s->cost, got.allowed,
		       (long long)got.limit, (long long)got.remaining,
		       (long long)got.retry_after_ms, (long long)got.reset_ms, tail);
	if (got.allowed != s->want.allowed || got.limit != s->want.limit ||
	    got.remaining != s->want.remaining || got.retry_after_ms != s->want.retry_after_ms ||
	    got.reset_ms != s->want.reset_ms || group != s->want_group ||
	    shadow_group != s->want_shadow_group) {
		r->failures++;
		fprintf(stderr, "vectors.txt:%d: got %d %lld %lld %lld %lld%s\n", s->line,
			got.allowed, (long long)got.limit, (long long)got.remaining,
			(long long)got.retry_after_ms, (long long)got.reset_ms, tail);
	}
}

/* Every decision of a vectors file through the limiter; at least min. */
static void run_file(const char *path, int min)
{
	struct run r;
	memset(&r, 0, sizeof(r));
	r.dump = getenv("RL_VECTORS_DUMP") != NULL;
	const struct vector_calls calls = {run_policy, run_multi, run_group, run_step};
	int n = vectors_read(path, &calls, &r);
	run_clear(&r);
	ck_assert_int_gt(n, min);
	ck_assert_int_eq(r.failures, 0);
}


START_TEST(test_vectors)
{
	run_file(vector_files[_i].file, vector_files[_i].at_least);
}
END_TEST

static struct policy make(enum policy_algo algo, int64_t cap, int64_t count, int64_t period)
{
	struct policy p;
	memset(&p, 0, sizeof(p));
	strcpy(p.name, "t");
	p.name_len = 1;
	p.algo = algo;
	p.nlimits = 1;
	p.limits[0] = (struct policy_limit){.capacity = cap, .count = count, .period_ms = period};
	return p;
}

/* Over any window, a sliding log never allows more than its count. */
START_TEST(test_sliding_never_exceeds)
{
	struct policy p = make(POLICY_SLIDING_WINDOW, 7, 7, 100);
	struct limiter_state st[1];
	memset(st, 0, sizeof(st));
	int64_t allowed_at[10000];
	int n = 0;
	int64_t now = 1000000;
	srand(1);
	for (int i = 0; i < 5000; i++) {
		now += rand() % 5000;
		struct limiter_result res;
		ck_assert_int_eq(limiter_decide(&p, st, LIMITER_ALLOW, 1, now, &res), 0);
		if (res.allowed)
			allowed_at[n++] = now;
		else
			ck_assert_int_gt(res.retry_after_ms, 0);
	}
	for (int i = 7; i < n; i++)
		ck_assert_int_ge(allowed_at[i] - allowed_at[i - 7], 100000);
	ck_assert_int_gt(n, 100);
	limiter_state_free(&st[0]);
}
END_TEST

/* A funnel lets capacity through at once, then exactly its rate. */
START_TEST(test_funnel_rate)
{
	struct policy p = make(POLICY_FUNNEL, 10, 100, 1000); /* 10 burst, 100/s */
	struct limiter_state st[1];
	memset(st, 0, sizeof(st));
	int allowed = 0;
	for (int64_t now = 0; now < 10000000; now += 1000) { /* 1 request/ms for 10 s */
		struct limiter_result res;
		limiter_decide(&p, st, LIMITER_ALLOW, 1, 1000000000 + now, &res);
		allowed += res.allowed;
	}
	ck_assert_int_ge(allowed, 1000 + 10 - 1);
	ck_assert_int_le(allowed, 1000 + 10);
}
END_TEST

/*
 * Requests every `gap_us` (plus up to `jitter_us` more, seeded) against a
 * sliding_window_counter of `limit` per `period_ms`, for `windows` windows.
 * Checks that no window aligned to the counter's own buckets ever allows
 * more than `limit`, and measures the most allowed in any sliding window
 * (ending at an allowed request) and the share denied.
 */
struct counter_run {
	int64_t allowed, denied, max_aligned, max_sliding;
};

static struct counter_run counter_traffic(int64_t limit, int64_t period_ms, int64_t gap_us,
					  int64_t jitter_us, int64_t burst, int windows,
					  unsigned seed)
{
	struct policy p = make(POLICY_SLIDING_COUNTER, limit, limit, period_ms);
	struct limiter_state st[1];
	memset(st, 0, sizeof(st));
	struct counter_run r = {0};
	int64_t period = period_ms * 1000, start = 1800000000000LL;
	int64_t cap = limit * (windows + 2) * 4 + 16;
	int64_t *at = malloc((size_t)cap * sizeof(*at));
	ck_assert_ptr_nonnull(at);
	int64_t n = 0, first = 0, cur_window = -1, in_window = 0;
	srand(seed);
	for (int64_t now = start; now < start + windows * period;) {
		for (int64_t b = 0; b < burst; b++) {
			struct limiter_result res;
			ck_assert_int_eq(limiter_decide(&p, st, LIMITER_ALLOW, 1, now, &res), 0);
			if (!res.allowed) {
				r.denied++;
				ck_assert_int_gt(res.retry_after_ms, 0);
				continue;
			}
			r.allowed++;
			if (now / period != cur_window) {
				cur_window = now / period;
				in_window = 0;
			}
			if (++in_window > r.max_aligned)
				r.max_aligned = in_window;
			ck_assert_int_lt(n, cap);
			at[n++] = now;
			while (at[first] <= now - period)
				first++;
			if (n - first > r.max_sliding)
				r.max_sliding = n - first;
		}
		now += gap_us + (jitter_us ? rand() % jitter_us : 0);
	}
	free(at);
	return r;
}

/* sliding_window_counter: never more than the limit in a window aligned to
 * its buckets; a client at 90% of the rate is never denied; what any
 * sliding window can see (docs/algorithms.md quotes these figures). */
START_TEST(test_counter_bounds)
{
	/* 100 per second; steady at 90 a second, with and without jitter */
	struct counter_run r = counter_traffic(100, 1000, 11111, 0, 1, 200, 1);
	ck_assert_int_eq(r.denied, 0);
	ck_assert_int_le(r.max_aligned, 100);
	r = counter_traffic(100, 1000, 10000, 2222, 1, 200, 2);
	ck_assert_int_eq(r.denied, 0);
	/* exactly the rate, evenly spaced */
	r = counter_traffic(100, 1000, 10000, 0, 1, 200, 3);
	printf("counter 100/1s at exactly the rate: %lld allowed, %lld denied (%.1f%%), "
	       "most in a sliding second %lld\n",
	       (long long)r.allowed, (long long)r.denied,
	       100.0 * (double)r.denied / (double)(r.allowed + r.denied), (long long)r.max_sliding);
	ck_assert_int_le(r.max_aligned, 100);
	/* random traffic from half to 3x the rate, and bursts of 50 */
	int64_t worst = 0;
	for (unsigned seed = 10; seed < 40; seed++) {
		int64_t gap = 3333 + (int64_t)(seed % 6) * 3333;
		if (seed % 3 == 0) /* bursts of 50, about 1.4 times the rate */
			r = counter_traffic(100, 1000, 200000, 300000, 50, 100, seed);
		else /* single requests, from half to 3 times the rate */
			r = counter_traffic(100, 1000, gap / 2, gap, 1, 100, seed);
		ck_assert_int_le(r.max_aligned, 100);
		if (r.max_sliding > worst)
			worst = r.max_sliding;
	}
	printf("counter 100/1s, random and bursty traffic (30 runs): at most %lld in any "
	       "sliding second\n",
	       (long long)worst);
	ck_assert_int_le(worst, 200);
	/* the worst case: a full window's worth at the very end of one window,
	 * then a request every millisecond through the next one */
	struct policy p = make(POLICY_SLIDING_COUNTER, 100, 100, 1000);
	struct limiter_state st[1];
	memset(st, 0, sizeof(st));
	int64_t start = 1800000000000LL, in_next = 0;
	struct limiter_result res;
	for (int i = 0; i < 100; i++) {
		limiter_decide(&p, st, LIMITER_ALLOW, 1, start + 999000, &res);
		ck_assert_int_eq(res.allowed, 1);
	}
	for (int64_t ms = 0; ms < 999; ms++) {
		limiter_decide(&p, st, LIMITER_ALLOW, 1, start + 1000000 + ms * 1000, &res);
		in_next += res.allowed;
	}
	printf("counter 100/1s, 100 at the end of one window then one every ms: %lld more "
	       "pass in the next, so %lld in the sliding second ending at 1.998 s\n",
	       (long long)in_next, (long long)(100 + in_next));
	ck_assert_int_le(100 + in_next, 200); /* two aligned windows, each at most 100 */
}
END_TEST

START_TEST(test_peek_consumes_nothing)
{
	struct policy p = make(POLICY_SLIDING_WINDOW, 2, 2, 1000);
	struct limiter_state st[1];
	memset(st, 0, sizeof(st));
	struct limiter_result res;
	for (int i = 0; i < 10; i++) {
		limiter_decide(&p, st, LIMITER_PEEK, 1, 5000000, &res);
		ck_assert_int_eq(res.allowed, 1);
		ck_assert_int_eq(res.remaining, 2);
	}
	limiter_decide(&p, st, LIMITER_ALLOW, 2, 5000000, &res);
	ck_assert_int_eq(res.allowed, 1);
	ck_assert_int_eq(res.remaining, 0);
	limiter_state_free(&st[0]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("limiter");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_vectors, 0,
			    (int)(sizeof(vector_files) / sizeof(vector_files[0])));
	tcase_add_test(tc, test_sliding_never_exceeds);
	tcase_add_test(tc, test_funnel_rate);
	tcase_add_test(tc, test_peek_consumes_nothing);
	tcase_add_test(tc, test_counter_bounds);
	tcase_set_timeout(tc, 60); /* the counter's traffic runs, under ASan too */
	suite_add_tcase(s, tc);
	return run_suite(s);
}
