/* test_limiter.c - the C limiter against tests/vectors.txt and a few properties. */
#include <check.h>

#include "runner.h"
#include <stdlib.h>
#include <string.h>

#include "limiter.h"
#include "policy.h"
#include "vectors.h"

struct run {
	struct policy p;
	struct limiter_state st[POLICY_MAX_LIMITS];
	int failures;
	int dump; /* print actual results in vector syntax (RL_VECTORS_DUMP=1) */
};

static void run_policy(const struct policy *p, void *arg)
{
	struct run *r = arg;
	for (int i = 0; i < POLICY_MAX_LIMITS; i++)
		limiter_state_free(&r->st[i]);
	r->p = *p;
}

static void run_step(const struct vector_step *s, void *arg)
{
	struct run *r = arg;
	struct limiter_result got;
	ck_assert_int_eq(limiter_decide(&r->p, r->st, s->op, s->cost, s->now_us, &got), 0);
	if (r->dump)
		printf("%lld %c %lld -> %d %lld %lld %lld %lld\n", (long long)s->now_us,
		       "apr"[s->op], (long long)s -> cost, got.allowed, (long long)got.limit,
		       (long long)got.remaining, (long long)got.retry_after_ms,
		       (long long)got.reset_ms);
	if (got.allowed != s->want.allowed || got.limit != s->want.limit ||
	    got.remaining != s->want.remaining || got.retry_after_ms != s->want.retry_after_ms ||
	    got.reset_ms != s->want.reset_ms) {
		r->failures++;
		fprintf(stderr, "vectors.txt:%d: got %d %lld %lld %lld %lld\n", s->line,
			got.allowed, (long long)got.limit, (long long)got.remaining,
			(long long)got.retry_after_ms, (long long)got.reset_ms);
	}
}

START_TEST(test_vectors)
{
	struct run r;
	memset(&r, 0, sizeof(r));
	r.dump = getenv("RL_VECTORS_DUMP") != NULL;
	int n = vectors_read(TEST_SRCDIR "/tests/vectors.txt", run_policy, run_step, &r);
	for (int i = 0; i < POLICY_MAX_LIMITS; i++)
		limiter_state_free(&r.st[i]);
	ck_assert_int_gt(n, 50);
	ck_assert_int_eq(r.failures, 0);
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
	p.limits[0] = (struct policy_limit){cap, count, period};
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
	tcase_add_test(tc, test_vectors);
	tcase_add_test(tc, test_sliding_never_exceeds);
	tcase_add_test(tc, test_funnel_rate);
	tcase_add_test(tc, test_peek_consumes_nothing);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
