/*
 * store_replay.h - tests/vectors.txt's scenarios through a store (the memory
 * store, on a clock the caller moves): each scenario on a user of its own,
 * each multi group an action of its own, as the daemon's pairs are. Used by
 * test_store_memory.c (checks the replies) and memory_replay.c (prints them).
 */
#ifndef RL_TEST_STORE_REPLAY_H
#define RL_TEST_STORE_REPLAY_H

#include <stdio.h>
#include <string.h>

#include "store.h"
#include "vectors.h"

struct store_replay {
	struct store *s;
	int64_t now; /* the store's clock (store_memory_set_clock) */
	struct policy p[STORE_PAIRS_MAX];
	int shadow[STORE_PAIRS_MAX];
	int ngroups, scenario, bad;
	char user[32];
	/* each step's reply */
	void (*reply)(struct store_replay *r, const struct vector_step *s,
		      const struct store_result *res);
	void *arg;
	const struct vector_step *step; /* during a step */
};

static inline int64_t store_replay_clock(void *arg)
{
	return ((struct store_replay *)arg)->now;
}

static inline void store_replay_policy(const struct policy *p, void *arg)
{
	struct store_replay *r = arg;
	r->p[0] = *p;
	r->shadow[0] = 0;
	r->ngroups = 1;
	snprintf(r->user, sizeof(r->user), "u%d", ++r->scenario);
}

static inline void store_replay_multi(void *arg)
{
	struct store_replay *r = arg;
	r->ngroups = 0;
	snprintf(r->user, sizeof(r->user), "u%d", ++r->scenario);
}

static inline void store_replay_group(const struct policy *p, int shadow, void *arg)
{
	struct store_replay *r = arg;
	if (r->ngroups == STORE_PAIRS_MAX) {
		r->bad = 1;
		return;
	}
	struct policy *g = &r->p[r->ngroups];
	*g = *p;
	snprintf(g->name, sizeof(g->name), "g%d", r->ngroups);
	g->name_len = strlen(g->name);
	r->shadow[r->ngroups++] = shadow;
}

static inline void store_replay_done(void *arg, const struct store_result *res)
{
	struct store_replay *r = arg;
	struct store_result got = *res;
	if (got.no_hold) /* as the script answers it: -3 0 0 0 0 */
		got.allowed = -3;
	r->reply(r, r->step, &got);
}

static inline void store_replay_step(const struct vector_step *s, void *arg)
{
	struct store_replay *r = arg;
	static const enum store_op ops[] = {[LIMITER_ALLOW] = STORE_ALLOW,
					    [LIMITER_PEEK] = STORE_PEEK,
					    [LIMITER_RESET] = STORE_RESET,
					    [LIMITER_CHARGE] = STORE_CHARGE};
	struct store_pair pairs[STORE_PAIRS_MAX];
	struct store_request req = {
		.op = s->state	       ? STORE_STATE
		      : s->hold == 'h' ? STORE_HOLD
		      : s->hold == 's' ? STORE_SETTLE
		      : s->hold == 'x' ? STORE_CANCEL
				       : ops[s->op],
		.hold_nonce = s->nonce,
		.hold_ms = s->hold_ms,
		.actual = s->actual,
		.wait_ms = s->wait_ms,
		.policy = &r->p[0],
		.prefix = "rl:",
		.prefix_len = 3,
		.user = r->user,
		.user_len = strlen(r->user),
		.cost = s->cost,
		.timeout_ms = 50,
	};
	if (s->multi) {
		for (int g = 0; g < r->ngroups; g++)
			pairs[g] = (struct store_pair){&r->p[g], r->user, strlen(r->user),
						       r->shadow[g]};
		req.npairs = r->ngroups;
		req.pairs = pairs;
	}
	r->now = s->now_us;
	r->step = s;
	/* the memory store answers inside submit (store.c left out: it
	 * would bring every backend) */
	r->s->ops->submit(r->s, &req, store_replay_done, r);
	r->step = NULL;
}

/* Replays path; the number of decisions, or -1 (a malformed file). */
static inline int store_replay_file(struct store_replay *r, const char *path)
{
	const struct vector_calls calls = {store_replay_policy, store_replay_multi,
					   store_replay_group, store_replay_step};
	int n = vectors_read(path, &calls, r);
	return r->bad ? -1 : n;
}

#endif
