/* test_blocks.c - hot keys' blocks: when a pair asks, what is answered from a block and until when, followers, revocation, sizing. */
#include <check.h>

#include "runner.h"
#include <string.h>

#include "blocks.h"
#include "policy.h"

static struct policy P;
static int me1, me2; /* askers' tokens */

static void setup(void)
{
	memset(&P, 0, sizeof(P));
	memcpy(P.name, "api", 4);
	P.name_len = 3;
	P.algo = POLICY_FIXED_WINDOW;
	P.nlimits = 1;
	P.limits[0] = (struct policy_limit){1000, 1000, 60000, CALENDAR_NONE, 0};
	P.blocks.max = 100;
}

#define U "ann", 3

static enum blocks_route take(struct blocks *b, uint64_t now, void *me, int64_t *want,
			      unsigned long *epoch, void **asker, struct blocks_hit *hit)
{
	return blocks_take(b, &P, U, 1, now, 1, me, hit, want, epoch, asker);
}

START_TEST(test_hot_pair_asks_then_answers_until_the_end)
{
	setup();
	struct blocks *b = blocks_new(64);
	struct blocks_hit hit;
	int64_t want;
	unsigned long ep;
	void *asker;
	/* first seen: not hot, Redis alone; seen again within a second: asks */
	ck_assert_int_eq(take(b, 1000, &me1, &want, &ep, &asker, &hit), BLOCKS_REDIS);
	ck_assert_int_eq(take(b, 2000, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	ck_assert_int_eq(want, 2);
	/* while the ask is out, with nothing held, others follow it */
	ck_assert_int_eq(take(b, 2100, &me2, &want, &ep, &asker, &hit), BLOCKS_FOLLOW);
	ck_assert_ptr_eq(asker, &me1);
	/* granted 2 units valid 50 ms from the ask's send (2000 us) */
	blocks_put(b, &P, U, &me1, 2000, 2, 50, 7, 1000, 997, 58000);
	ck_assert_int_eq(blocks_units(b), 2);
	ck_assert_int_eq(take(b, 3000, &me2, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
	ck_assert_int_eq(hit.limit, 1000);
	ck_assert_int_eq(hit.remaining, 996);
	ck_assert_int_eq(hit.reset_ms, 57999); /* 1 ms after the grant */
	/* one left of two: low, so the next request asks (doubling) */
	ck_assert_int_eq(take(b, 4000, &me2, &want, &ep, &asker, &hit), BLOCKS_ASK);
	ck_assert_int_eq(want, 4);
	/* the held unit still answers while the ask is out */
	ck_assert_int_eq(take(b, 5000, &me1, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
	blocks_put(b, &P, U, &me2, 4000, 4, 45, 7, 1000, 990, 57000);
	/* valid until 4000 us + 45 ms less 1/1024 of it (43 us: a daemon
	 * clock up to 1000 ppm slow still ends first), never at or after it */
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(take(b, 48956, &me1, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
	ck_assert_int_eq(take(b, 48956, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	ck_assert_int_eq(want, 8);
	blocks_unask(b, &P, U, &me1, 0, 0); /* the ask failed: what is held goes on */
	ck_assert_int_eq(take(b, 48956, &me1, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
	ck_assert_int_eq(blocks_units(b), 1);
	ck_assert_int_eq(take(b, 48957, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	ck_assert_uint_eq(blocks_counts(b)->lapsed, 1);
	ck_assert_uint_eq(blocks_counts(b)->granted, 6);
	ck_assert_uint_eq(blocks_counts(b)->blocks, 2);
	blocks_free(b);
}
END_TEST

START_TEST(test_reset_and_reload_revoke)
{
	setup();
	struct blocks *b = blocks_new(64);
	struct blocks_hit hit;
	int64_t want;
	unsigned long ep;
	void *asker;
	take(b, 1000, &me1, &want, &ep, &asker, &hit);
	ck_assert_int_eq(take(b, 2000, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	blocks_put(b, &P, U, &me1, 2000, 2, 1000, 7, 1000, 997, 58000);
	blocks_reset_pair(b, "api", 3, U);
	ck_assert_int_eq(blocks_units(b), 0);
	ck_assert_uint_eq(blocks_counts(b)->revoked, 2);
	/* an ask out across its pair's RESET: its block is dropped on arrival */
	take(b, 3000, &me1, &want, &ep, &asker, &hit);
	ck_assert_int_eq(take(b, 3100, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	blocks_reset_pair(b, "api", 3, U);
	blocks_put(b, &P, U, &me1, 3100, 2, 1000, 7, 1000, 997, 58000);
	ck_assert_int_eq(blocks_units(b), 0);
	ck_assert_uint_eq(blocks_counts(b)->revoked, 4);
	/* across another pair's RESET it is kept (that RESET still moves the
	 * epoch, so the pair's followers go to Redis) */
	take(b, 3110, &me1, &want, &ep, &asker, &hit);
	ck_assert_int_eq(take(b, 3120, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	blocks_reset_pair(b, "other", 5, U);
	ck_assert_uint_ne(blocks_epoch(b), ep);
	blocks_put(b, &P, U, &me1, 3120, 2, 1000, 7, 1000, 997, 58000);
	ck_assert_int_eq(blocks_units(b), 2);
	blocks_reset_pair(b, "api", 3, U);
	ck_assert_int_eq(blocks_units(b), 0);
	/* a reload drops everything */
	take(b, 3150, &me1, &want, &ep, &asker, &hit);
	ck_assert_int_eq(take(b, 3200, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	blocks_put(b, &P, U, &me1, 3200, 2, 1000, 7, 1000, 997, 58000);
	ck_assert_int_eq(blocks_units(b), 2);
	blocks_clear(b);
	ck_assert_int_eq(blocks_units(b), 0);
	blocks_free(b);
}
END_TEST

START_TEST(test_denied_ask_spends_what_is_left)
{
	setup();
	struct blocks *b = blocks_new(64);
	struct blocks_hit hit;
	int64_t want;
	unsigned long ep;
	void *asker;
	take(b, 1000, &me1, &want, &ep, &asker, &hit);
	take(b, 2000, &me1, &want, &ep, &asker, &hit);
	blocks_put(b, &P, U, &me1, 2000, 4, 10000, 7, 1000, 10, 58000);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(take(b, 3000, &me2, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
	/* half left: the next asks; Redis denies it (others took the rest) */
	ck_assert_int_eq(take(b, 3000, &me2, &want, &ep, &asker, &hit), BLOCKS_ASK);
	blocks_unask(b, &P, U, &me2, 3000, 2000);
	ck_assert(blocks_spend(b, &P, U, 1, 3100, &hit));
	/* no more asks while the denial stands: the last unit, then Redis */
	ck_assert_int_eq(take(b, 3200, &me1, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
	ck_assert_int_eq(blocks_units(b), 0);
	ck_assert_int_eq(take(b, 3300, &me1, &want, &ep, &asker, &hit), BLOCKS_REDIS);
	ck_assert(!blocks_spend(b, &P, U, 1, 3300, &hit));
	/* past the denial's retry (hot again), asking again */
	ck_assert_int_eq(take(b, 2004000, &me1, &want, &ep, &asker, &hit), BLOCKS_REDIS);
	ck_assert_int_eq(take(b, 2004100, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	ck_assert_uint_eq(blocks_counts(b)->lapsed, 0);
	blocks_free(b);
}
END_TEST

START_TEST(test_sizes_double_up_to_max)
{
	setup();
	P.blocks.max = 8;
	struct blocks *b = blocks_new(64);
	struct blocks_hit hit;
	int64_t want = 0;
	unsigned long ep;
	void *asker;
	take(b, 1000, &me1, &want, &ep, &asker, &hit);
	int64_t last = 0;
	for (uint64_t t = 2000; t < 30000; t += 1000) {
		enum blocks_route r = take(b, t, &me1, &want, &ep, &asker, &hit);
		if (r == BLOCKS_ASK) {
			ck_assert_int_le(want, 8);
			ck_assert_int_ge(want, last);
			last = want;
			blocks_put(b, &P, U, &me1, t, want, 1000, 7, 1000, 500, 58000);
		}
	}
	ck_assert_int_eq(last, 8);
	ck_assert_uint_eq(blocks_counts(b)->lapsed, 0);
	blocks_free(b);
}
END_TEST

START_TEST(test_bounded_table)
{
	setup();
	struct blocks *b = blocks_new(4); /* one bucket of four ways */
	struct blocks_hit hit;
	int64_t want;
	unsigned long ep;
	void *asker;
	char u[8];
	/* four pairs hold blocks; a fifth finds no way and goes to Redis */
	for (int i = 0; i < 4; i++) {
		u[0] = (char)('a' + i);
		blocks_take(b, &P, u, 1, 1, 1000, 1, &me1, &hit, &want, &ep, &asker);
		ck_assert_int_eq(
			blocks_take(b, &P, u, 1, 1, 2000, 1, &me1, &hit, &want, &ep, &asker),
			BLOCKS_ASK);
		blocks_put(b, &P, u, 1, &me1, 2000, 2, 1000, 7, 1000, 997, 58000);
	}
	u[0] = 'z';
	ck_assert_int_eq(blocks_take(b, &P, u, 1, 1, 3000, 1, &me1, &hit, &want, &ep, &asker),
			 BLOCKS_REDIS);
	ck_assert_int_eq(blocks_take(b, &P, u, 1, 1, 3100, 1, &me1, &hit, &want, &ep, &asker),
			 BLOCKS_REDIS);
	ck_assert_int_eq(blocks_units(b), 8);
	blocks_free(b);
}
END_TEST

START_TEST(test_no_room_and_may_not_ask)
{
	setup();
	struct blocks *b = blocks_new(64);
	struct blocks_hit hit;
	int64_t want;
	unsigned long ep;
	void *asker;
	take(b, 1000, &me1, &want, &ep, &asker, &hit);
	ck_assert_int_eq(take(b, 2000, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	/* allowed, but the limits had no room for a block: no ask for 100
	 * ms, the pair's requests go to Redis one by one, none follows */
	blocks_put(b, &P, U, &me1, 2000, 0, 0, 7, 1000, 2, 58000);
	ck_assert_int_eq(take(b, 3000, &me1, &want, &ep, &asker, &hit), BLOCKS_REDIS);
	ck_assert_int_eq(take(b, 101999, &me2, &want, &ep, &asker, &hit), BLOCKS_REDIS);
	ck_assert_int_eq(take(b, 102000, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	blocks_put(b, &P, U, &me1, 102000, 4, 1000, 7, 1000, 900, 58000);
	/* one that may not ask (a deadline of its own, a wait) is answered
	 * from a block, and otherwise goes to Redis: it neither asks nor
	 * follows */
	ck_assert_int_eq(blocks_take(b, &P, U, 1, 103000, 0, &me2, &hit, &want, &ep, &asker),
			 BLOCKS_ANSWERED);
	ck_assert_int_eq(blocks_take(b, &P, U, 3, 103000, 0, &me2, &hit, &want, &ep, &asker),
			 BLOCKS_ANSWERED);
	ck_assert_int_eq(blocks_units(b), 0);
	ck_assert_int_eq(blocks_take(b, &P, U, 1, 103000, 0, &me2, &hit, &want, &ep, &asker),
			 BLOCKS_REDIS);
	ck_assert_int_eq(take(b, 103000, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	ck_assert_int_eq(blocks_take(b, &P, U, 1, 103000, 0, &me2, &hit, &want, &ep, &asker),
			 BLOCKS_REDIS);
	/* an ask answered across its pair's RESET: its units were revoked,
	 * counted */
	unsigned long before = blocks_epoch(b);
	blocks_reset_pair(b, "api", 3, U);
	ck_assert_uint_ne(blocks_epoch(b), before);
	unsigned long long revoked = blocks_counts(b)->revoked;
	blocks_put(b, &P, U, &me1, 103000, 8, 1000, 7, 1000, 900, 58000);
	ck_assert_int_eq(blocks_units(b), 0);
	ck_assert_uint_eq(blocks_counts(b)->revoked, revoked + 8);
	blocks_free(b);
}
END_TEST

/* What blocks_close hands on, and the table it sees meanwhile. */
struct handed {
	struct blocks *b;
	int n;
	int64_t units[4], window[4];
	char user[4][8];
	int spent_then; /* its block answered while handed on */
};

static void hand(void *arg, const char *action, size_t alen, const char *user, size_t ulen,
		 int64_t units, int64_t window)
{
	struct handed *h = arg;
	ck_assert_int_eq(alen, 3);
	ck_assert(memcmp(action, "api", 3) == 0);
	ck_assert_int_lt(h->n, 4);
	ck_assert_uint_lt(ulen, sizeof(h->user[0]));
	memcpy(h->user[h->n], user, ulen);
	h->user[h->n][ulen] = '\0';
	h->units[h->n] = units;
	h->window[h->n] = window;
	struct blocks_hit hit;
	h->spent_then = blocks_spend(h->b, &P, user, ulen, 1, 900200, &hit);
	h->n++;
}

START_TEST(test_close_hands_on_what_is_held)
{
	setup();
	struct blocks *b = blocks_new(64);
	struct blocks_hit hit;
	int64_t want;
	unsigned long ep;
	void *asker;
	/* ann holds 4 of window 7, spends one; bob holds 2 of window 0 (a
	 * funnel's: not returnable); cy held 2 that lapsed at 50 ms */
	take(b, 1000, &me1, &want, &ep, &asker, &hit);
	ck_assert_int_eq(take(b, 2000, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	blocks_put(b, &P, U, &me1, 2000, 4, 1000, 7, 1000, 990, 58000);
	ck_assert_int_eq(take(b, 3000, &me1, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
	blocks_take(b, &P, "bob", 3, 1, 1000, 1, &me2, &hit, &want, &ep, &asker);
	ck_assert_int_eq(blocks_take(b, &P, "bob", 3, 1, 2000, 1, &me2, &hit, &want, &ep, &asker),
			 BLOCKS_ASK);
	blocks_put(b, &P, "bob", 3, &me2, 2000, 2, 1000, 0, 1000, 990, 58000);
	blocks_take(b, &P, "cy", 2, 1, 1000, 1, &me2, &hit, &want, &ep, &asker);
	ck_assert_int_eq(blocks_take(b, &P, "cy", 2, 1, 2000, 1, &me2, &hit, &want, &ep, &asker),
			 BLOCKS_ASK);
	blocks_put(b, &P, "cy", 2, &me2, 2000, 2, 50, 7, 1000, 990, 58000);
	ck_assert_int_eq(blocks_units(b), 7);
	/* an ask out at the close: answered after it, counted revoked */
	ck_assert_int_eq(take(b, 900000, &me1, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
	ck_assert_int_eq(take(b, 900100, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	struct handed h = {.b = b};
	unsigned long before = blocks_epoch(b);
	ck_assert_uint_eq(blocks_close(b, 900200, hand, &h), 1);
	ck_assert_uint_ne(blocks_epoch(b), before);
	ck_assert_int_eq(h.n, 1);
	ck_assert_str_eq(h.user[0], "ann");
	ck_assert_int_eq(h.units[0], 2);
	ck_assert_int_eq(h.window[0], 7);
	/* out of the table before it was handed on */
	ck_assert_int_eq(h.spent_then, 0);
	ck_assert_int_eq(blocks_units(b), 0);
	/* cy's 2 lapsed in time, bob's 2 at the close */
	ck_assert_uint_eq(blocks_counts(b)->lapsed, 4);
	/* closed: nothing answered from a block, none asked */
	ck_assert_int_eq(take(b, 900300, &me2, &want, &ep, &asker, &hit), BLOCKS_REDIS);
	ck_assert_int_eq(take(b, 900400, &me2, &want, &ep, &asker, &hit), BLOCKS_REDIS);
	blocks_put(b, &P, U, &me1, 900100, 8, 1000, 7, 1000, 900, 58000);
	ck_assert_int_eq(blocks_units(b), 0);
	ck_assert_uint_eq(blocks_counts(b)->revoked, 8);
	/* Redis took one of the two back: one returned, one lapsed */
	blocks_returned(b, h.units[0], 1);
	ck_assert_uint_eq(blocks_counts(b)->returned, 1);
	ck_assert_uint_eq(blocks_counts(b)->lapsed, 5);
	blocks_free(b);
}
END_TEST

/* max: auto: a block sized by the pair's rate and the round trip, the next
 * asked beside an answer (not by the request: it would wait for it) once
 * what is left would not outlast two round trips. */
START_TEST(test_auto_asks_beside_the_answer_in_time)
{
	setup();
	P.blocks.max = POLICY_BLOCKS_MAX;
	P.blocks.autosize = 1;
	struct blocks *b = blocks_new(64);
	struct blocks_hit hit;
	int64_t want;
	unsigned long ep;
	void *asker;
	/* 100 requests a second, 10 ms apart; a 100 ms round trip */
	uint64_t t = 1000000;
	ck_assert_int_eq(take(b, t, &me1, &want, &ep, &asker, &hit), BLOCKS_REDIS);
	t += 10000;
	ck_assert_int_eq(take(b, t, &me1, &want, &ep, &asker, &hit), BLOCKS_ASK);
	uint64_t sent = t;
	for (int i = 0; i < 10; i++) { /* the ask's round trip: followers */
		t += 10000;
		ck_assert_int_eq(take(b, t, &me2, &want, &ep, &asker, &hit), BLOCKS_FOLLOW);
	}
	blocks_rtt_sample(b, sent, sent + 100000);
	ck_assert_uint_eq(blocks_rtt_us(b), 100000);
	blocks_put(b, &P, U, &me1, sent, 200, 50000, 7, 1000, 799, 50000);
	/* answered from it; the rate is known by now (about 100/s) */
	int asked_at = -1;
	for (int i = 0; i < 200 && asked_at < 0; i++) {
		t += 10000;
		ck_assert_int_eq(take(b, t, &me2, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
		if (want > 0)
			asked_at = i;
	}
	/* asked while what is left lasts the lead (2 x 100 ms + 5 ms: about
	 * 21 units at 100/s), not at the last unit */
	ck_assert_int_ge(asked_at, 170);
	ck_assert_int_le(asked_at, 185);
	long long left = blocks_units(b);
	ck_assert_int_ge(left, 14);
	/* about a second and the lead of the pair's traffic: 120 units */
	ck_assert_int_ge(want, 100);
	ck_assert_int_le(want, 140);
	ck_assert_int_eq(blocks_ask_begin(b, &P, U, &me1, t), 0);
	/* one ask at a time */
	ck_assert_int_eq(blocks_ask_begin(b, &P, U, &me2, t), -1);
	/* the rest are answered while it is out, and none asks again */
	for (int i = 0; i < 5; i++) {
		t += 10000;
		ck_assert_int_eq(take(b, t, &me2, &want, &ep, &asker, &hit), BLOCKS_ANSWERED);
		ck_assert_int_eq(want, 0);
	}
	blocks_free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("blocks");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_hot_pair_asks_then_answers_until_the_end);
	tcase_add_test(tc, test_reset_and_reload_revoke);
	tcase_add_test(tc, test_denied_ask_spends_what_is_left);
	tcase_add_test(tc, test_sizes_double_up_to_max);
	tcase_add_test(tc, test_bounded_table);
	tcase_add_test(tc, test_no_room_and_may_not_ask);
	tcase_add_test(tc, test_close_hands_on_what_is_held);
	tcase_add_test(tc, test_auto_asks_beside_the_answer_in_time);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
