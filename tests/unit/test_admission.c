/*
 * test_admission.c - a Redis connection's admission bound (admission.c) on
 * a clock the test gives: scenarios of measured replies, late requests and
 * admission questions, each with the answer wanted.
 */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <string.h>

#include "admission.h"

enum step_kind {
	END,
	MEASURE, /* a reply: sent, prev_rx, rx (us), n decisions */
	LATE,	 /* a request timed out at t */
	ADMIT,	 /* queued, timeout_ms at t: want */
	RATE,	 /* the measured rate is want (decisions a second) */
	RESET,	 /* a fresh connection */
};

struct step {
	enum step_kind kind;
	uint64_t t, a, b; /* MEASURE: sent, prev_rx, rx; ADMIT: t, queued, timeout_ms */
	long long want;	  /* ADMIT: 1 admits; MEASURE: n; RATE: the rate */
};

#define S 1000000ull /* a second, in us */
#define T0 (1000 * S)

struct scenario {
	const char *name;
	struct step steps[16];
};

/* a window's worth of replies at 1000 decisions a second: 10 in 10 ms */
#define AT_1000                                        \
	{                                              \
		MEASURE, T0, T0 + 1000, T0 + 11000, 10 \
	}

static const struct scenario scenarios[] = {
	{"fresh: anything below the hard bound",
	 {{ADMIT, T0, 0, 50, 1},
	  {ADMIT, T0, 8191, 50, 1},
	  {ADMIT, T0, 8192, 50, 0},
	  {ADMIT, T0, 100000, 50, 0},
	  {LATE, T0, 0, 0, 0},
	  {ADMIT, T0, 8191, 50, 1}, /* late, but nothing measured: no bound */
	  {END, 0, 0, 0, 0}}},
	{"measured, never late: no bound",
	 {AT_1000, {RATE, 0, 0, 0, 1000}, {ADMIT, T0 + 20000, 5000, 50, 1}, {END, 0, 0, 0, 0}}},
	{"late: the queue Redis decides in half the timeout",
	 {AT_1000,
	  {LATE, T0 + 20000, 0, 0, 0},
	  /* 1000/s, 100 ms: 50 */
	  {ADMIT, T0 + 30000, 49, 100, 1},
	  {ADMIT, T0 + 30000, 50, 100, 0},
	  /* a longer timeout admits more */
	  {ADMIT, T0 + 30000, 249, 500, 1},
	  {ADMIT, T0 + 30000, 250, 500, 0},
	  {END, 0, 0, 0, 0}}},
	{"never below ADMISSION_MIN",
	 {{MEASURE, T0, T0 + 1000, T0 + 101000, 1}, /* 10 a second */
	  {RATE, 0, 0, 0, 10},
	  {LATE, T0 + 200000, 0, 0, 0},
	  {ADMIT, T0 + 200000, ADMISSION_MIN - 1, 50, 1},
	  {ADMIT, T0 + 200000, ADMISSION_MIN, 50, 0},
	  {END, 0, 0, 0, 0}}},
	{"the bound ends a second after the last late request or refusal",
	 {AT_1000,
	  {LATE, T0 + 20000, 0, 0, 0},
	  /* refused, and so in force a second more, from each refusal */
	  {ADMIT, T0 + 20000 + S - 1, 60, 100, 0},
	  {ADMIT, T0 + 20000 + 2 * S - 2, 60, 100, 0},
	  {ADMIT, T0 + 20000 + 3 * S - 2, 60, 100, 1},
	  /* and once over, a larger queue too */
	  {ADMIT, T0 + 20000 + 3 * S - 2, 5000, 100, 1},
	  {END, 0, 0, 0, 0}}},
	{"admitted while behind: the bound stays as it was",
	 {AT_1000,
	  {LATE, T0 + 20000, 0, 0, 0},
	  {ADMIT, T0 + 20000 + S / 2, 10, 100, 1},
	  {ADMIT, T0 + 20000 + S, 60, 100, 1}, /* the second is over */
	  {END, 0, 0, 0, 0}}},
	{"a fresh connection forgets the rate and the bound",
	 {AT_1000,
	  {LATE, T0 + 20000, 0, 0, 0},
	  {ADMIT, T0 + 30000, 60, 100, 0},
	  {RESET, 0, 0, 0, 0},
	  {RATE, 0, 0, 0, 0},
	  {ADMIT, T0 + 30000, 60, 100, 1},
	  {END, 0, 0, 0, 0}}},
	{"measuring: only gaps a call waited through, in whole windows",
	 {/* sent after the previous reply: Redis was idle part of the gap */
	  {MEASURE, T0 + 2000, T0 + 1000, T0 + 20000, 100},
	  /* the previous reply after this one: no gap */
	  {MEASURE, T0, T0 + 30000, T0 + 20000, 100},
	  {RATE, 0, 0, 0, 0},
	  /* 5 ms is half a window: no rate yet */
	  {MEASURE, T0, T0 + 1000, T0 + 6000, 10},
	  {RATE, 0, 0, 0, 0},
	  /* the window fills: 50 in 10 ms */
	  {MEASURE, T0, T0 + 6000, T0 + 11000, 40},
	  {RATE, 0, 0, 0, 5000},
	  /* then each window's sample is averaged in: (5000 + 1000) / 2 */
	  {MEASURE, T0, T0 + 11000, T0 + 21000, 10},
	  {RATE, 0, 0, 0, 3000},
	  {MEASURE, T0, T0 + 21000, T0 + 21000, 0}, /* sent before, answered at once */
	  {RATE, 0, 0, 0, 3000},
	  {END, 0, 0, 0, 0}}},
};

START_TEST(test_scenarios)
{
	const struct scenario *sc = &scenarios[_i];
	struct admission a;
	memset(&a, 0, sizeof(a));
	for (int k = 0; sc->steps[k].kind != END; k++) {
		const struct step *st = &sc->steps[k];
		switch (st->kind) {
		case MEASURE:
			admission_measure(&a, st->t, st->a, st->b, (unsigned)st->want);
			break;
		case LATE:
			admission_late(&a, st->t);
			break;
		case ADMIT: {
			int got = admission_admits(&a, (unsigned)st->a, (int64_t)st->b, st->t);
			ck_assert_msg(got == st->want, "%s, step %d: admits %d queued: %d",
				      sc->name, k, (int)st->a, got);
			break;
		}
		case RATE:
			ck_assert_msg((long long)(a.rate + 0.5) == st->want, "%s, step %d: rate %g",
				      sc->name, k, a.rate);
			break;
		case RESET:
			admission_reset(&a);
			break;
		case END:
			break;
		}
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("admission");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_scenarios, 0, (int)(sizeof(scenarios) / sizeof(scenarios[0])));
	suite_add_tcase(s, tc);
	return run_suite(s);
}
