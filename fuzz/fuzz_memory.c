/*
 * fuzz_memory.c - the memory store (src/store/store_memory.c) against limiter.c on
 * plain state arrays, which never expire or evict: bytes in, a sequence of
 * decisions (op, user, policy, cost, time step) out, both must answer alike
 * on every one. A key the store drops when Redis would have must never
 * change a decision, and the table, heap and LRU list must never lose or
 * corrupt a state (ASan/UBSan watch the memory). Few users, so max_keys is
 * never reached here; a second store with a tiny max_keys takes the same
 * sequence over many users, for eviction's paths (no comparison there).
 *
 * Each decision is 8 bytes: op, user, policy, cost, then a little-endian
 * time step in microseconds (scaled up by its top bits: from 1 us to hours).
 * Op 7 decides 2 to 4 pairs at once (MALLOW), some in shadow mode.
 */
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "limiter.h"
#include "policy.h"
#include "store.h"
#include "store_memory.h"

#define USERS 6
#define NPOL 6
#define CROWD 400 /* the evicting store's users */

static struct policy pol[NPOL];

static void limit(struct policy *p, int i, int64_t cap, int64_t count, int64_t period_ms)
{
	p->limits[i] =
		(struct policy_limit){.capacity = cap, .count = count, .period_ms = period_ms};
	if (p->nlimits <= i)
		p->nlimits = i + 1;
}

static void make_policies(void)
{
	for (int i = 0; i < NPOL; i++) {
		memset(&pol[i], 0, sizeof(pol[i]));
		snprintf(pol[i].name, sizeof(pol[i].name), "p%d", i);
		pol[i].name_len = strlen(pol[i].name);
	}
	pol[0].algo = POLICY_SLIDING_WINDOW;
	limit(&pol[0], 0, 3, 3, 1000);
	limit(&pol[0], 1, 10, 10, 60000);
	pol[1].algo = POLICY_FUNNEL;
	limit(&pol[1], 0, 4, 2, 1000);
	pol[2].algo = POLICY_FIXED_WINDOW;
	limit(&pol[2], 0, 5, 5, 100);
	limit(&pol[2], 1, 7, 7, 3600000);
	/* calendar windows: a month from the 31st in Sydney, a week from Sunday in Berlin */
	limit(&pol[2], 2, 9, 9, calendar_max_ms(CALENDAR_MONTH));
	pol[2].limits[2].calendar = CALENDAR_MONTH;
	pol[2].limits[2].anchor = 31;
	strcpy(pol[2].timezone, "Australia/Sydney");
	pol[3].algo = POLICY_SLIDING_COUNTER;
	limit(&pol[3], 0, 4, 4, 250);
	limit(&pol[3], 1, 6, 6, calendar_max_ms(CALENDAR_WEEK));
	pol[3].limits[1].calendar = CALENDAR_WEEK;
	pol[3].limits[1].anchor = 7;
	strcpy(pol[3].timezone, "Europe/Berlin");
	pol[4].algo = POLICY_SLIDING_WINDOW;
	limit(&pol[4], 0, 2, 2, 500);
	pol[4].ban = (struct policy_ban){2, 1000, 3000};
	pol[5].algo = POLICY_FUNNEL;
	limit(&pol[5], 0, 1, 1, 7);
	pol[5].ban = (struct policy_ban){1, 50, 20};
}

struct clock {
	int64_t now;
};

static int64_t clock_now(void *arg)
{
	return ((struct clock *)arg)->now;
}

static void copy_result(void *arg, const struct store_result *res)
{
	*(struct store_result *)arg = *res;
}

static struct event_base *base;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!base) {
		base = event_base_new();
		make_policies();
	}
	char err[64];
	struct config_memory big = {100000}, tiny = {1000};
	struct store *s = store_memory_new(base, &big, err, sizeof(err));
	struct store *crowd = store_memory_new(base, &tiny, err, sizeof(err));
	if (!s || !crowd)
		abort();
	struct clock clk = {1700000000000000LL};
	store_memory_set_clock(s, clock_now, &clk);
	store_memory_set_clock(crowd, clock_now, &clk);
	static struct limiter_state st[USERS][NPOL][POLICY_MAX_LIMITS + 1];
	static struct limiter_state hst[USERS][NPOL]; /* each pair's holds */
	memset(st, 0, sizeof(st));
	memset(hst, 0, sizeof(hst));

	for (size_t at = 0; at + 8 <= size; at += 8) {
		const uint8_t *d = data + at;
		uint32_t step = (uint32_t)d[4] | (uint32_t)d[5] << 8 | (uint32_t)d[6] << 16 |
				(uint32_t)d[7] << 24;
		clk.now += (int64_t)(step & 0x3fffffff) << (2 * (step >> 30)) >> 6;
		int u = d[1] % USERS, pi = d[2] % NPOL;
		int64_t cost = 1 + d[3] % 12;
		/* op 6: a CHARGE, counted past the limit */
		enum store_op op = d[0] % 8 == 0   ? STORE_RESET
				   : d[0] % 8 < 3  ? STORE_PEEK
				   : d[0] % 8 == 6 ? STORE_CHARGE
						   : STORE_ALLOW;
		char user[8];
		snprintf(user, sizeof(user), "u%d", u);
		struct store_request req = {
			.op = op,
			.policy = &pol[pi],
			.prefix = "rl:",
			.prefix_len = 3,
			.user = user,
			.user_len = strlen(user),
			.cost = cost,
			.timeout_ms = 50,
		};
		/* op 2 with its next bit: a STATE, as the script's "t" (one unit) */
		int state = d[0] % 8 == 2 && (d[0] >> 3) & 1;
		if (state) {
			req.op = op = STORE_STATE;
			req.cost = cost = 1;
		}
		/* op 3: an ALLOW that may wait (0 to 3 s), as the script's "d" */
		if (d[0] % 8 == 3)
			req.wait_ms = (int64_t)(d[0] >> 3) * 97;
		/* op 5: HOLD, SETTLE or CANCEL, on a few nonces so that they meet */
		int hold_op = d[0] % 8 == 5 ? 1 + d[3] % 3 : 0;
		if (hold_op) {
			req.op = op = hold_op == 1   ? STORE_HOLD
				      : hold_op == 2 ? STORE_SETTLE
						     : STORE_CANCEL;
			req.hold_nonce = 1 + (d[0] >> 3) % 4;
			req.hold_ms = 1 + (int64_t)d[2] * 37;
			req.actual = d[1] >> 2;
		}
		/* op 7: several pairs at once (policies pi, pi+1, ...), as MALLOW */
		int npairs = d[0] % 8 == 7 ? 2 + d[3] % 3 : 0;
		struct store_pair pairs[4];
		const struct policy *gp[4];
		struct limiter_state *gs[4];
		int shadow[4] = {0, 0, 0, 0}, group = 0, shadow_group = 0;
		struct limiter_group want_groups[4];
		for (int i = 0; i < npairs; i++) {
			int q = (pi + i) % NPOL;
			shadow[i] = i > 0 && (d[1] >> (4 + i)) & 1;
			pairs[i] = (struct store_pair){&pol[q], user, strlen(user), shadow[i]};
			gp[i] = &pol[q];
			gs[i] = st[u][q];
		}
		if (npairs) {
			req.op = op = STORE_ALLOW;
			req.npairs = npairs;
			req.pairs = pairs;
		}
		struct store_result got = {.status = STORE_FAILED};
		s->ops->submit(s, &req, copy_result, &got);
		if (got.status != STORE_OK)
			abort();
		struct limiter_result want;
		static const enum limiter_op lop[] = {[STORE_ALLOW] = LIMITER_ALLOW,
						      [STORE_PEEK] = LIMITER_PEEK,
						      [STORE_RESET] = LIMITER_RESET,
						      [STORE_CHARGE] = LIMITER_CHARGE};
		int rc = 0;
		struct limiter_key keys[POLICY_MAX_LIMITS + 1];
		if (state) {
			/* every key's own figures, as the limiter tells them */
			rc = limiter_look(&pol[pi], st[u][pi], clk.now, &want, keys);
			int nk = policy_nkeys(&pol[pi]);
			if (rc == 0 && got.nkeys != nk)
				abort();
			for (int k = 0; rc == 0 && k < nk; k++)
				if (got.keys[k].used != keys[k].used ||
				    got.keys[k].remaining != keys[k].remaining ||
				    got.keys[k].reset_ms != keys[k].reset_ms ||
				    got.keys[k].start_ms != keys[k].start_ms ||
				    got.keys[k].end_ms != keys[k].end_ms || keys[k].used < 0 ||
				    keys[k].remaining < 0 || keys[k].reset_ms < 0 ||
				    keys[k].end_ms < keys[k].start_ms)
					abort();
		} else if (hold_op == 1) {
			rc = limiter_hold(&pol[pi], st[u][pi], &hst[u][pi], cost, req.hold_nonce,
					  req.hold_ms * 1000, clk.now, &want);
		} else if (hold_op) {
			rc = limiter_settle(&pol[pi], st[u][pi], &hst[u][pi], req.hold_nonce,
					    hold_op == 2 ? req.actual : -1, clk.now, &want);
			/* not open: the store says so, with no figures */
			if ((rc == 1) != (got.no_hold == 1))
				abort();
			if (rc == 1)
				want = (struct limiter_result){0};
			rc = 0;
		} else
			rc = npairs ? limiter_decide_all(gp, shadow, gs, npairs, LIMITER_ALLOW,
							 cost, clk.now, &want, &group,
							 &shadow_group, want_groups)
			     : req.wait_ms > 0
				     ? limiter_decide_wait(&pol[pi], st[u][pi], cost, clk.now,
							   req.wait_ms * 1000, &want)
				     : limiter_decide(&pol[pi], st[u][pi], lop[op], cost, clk.now,
						      &want);
		if (rc < 0 || (npairs && (got.pair != group || got.shadow_pair != shadow_group)))
			abort();
		/* a delayed answer waits at most what it may */
		if (want.allowed && want.retry_after_ms > 0 && !npairs &&
		    want.retry_after_ms > req.wait_ms + 1)
			abort();
		/* a log stays in score order, whatever a delay placed ahead */
		for (int k = 0; k < POLICY_MAX_LIMITS; k++)
			for (size_t i = 1; i < st[u][pi][k].nlog; i++)
				if (st[u][pi][k].log[i - 1] > st[u][pi][k].log[i])
					abort();
		/* each pair's own figures, as the script returns them */
		if (npairs && got.ngroups != npairs)
			abort();
		for (int g = 0; npairs && g < npairs; g++)
			if (got.groups[g].allowed != want_groups[g].ok ||
			    got.groups[g].remaining != want_groups[g].remaining ||
			    got.groups[g].reset_ms != want_groups[g].reset_ms)
				abort();
		if (got.allowed != want.allowed || got.limit != want.limit ||
		    got.remaining != want.remaining || got.retry_after_ms != want.retry_after_ms ||
		    got.reset_ms != want.reset_ms) {
			fprintf(stderr,
				"decision %zu (policy %d, user %d, op %d, cost %lld): store %d %lld "
				"%lld %lld %lld, limiter %d %lld %lld %lld %lld\n",
				at / 8, pi, u, (int)op, (long long)cost, got.allowed,
				(long long)got.limit, (long long)got.remaining,
				(long long)got.retry_after_ms, (long long)got.reset_ms,
				want.allowed, (long long)want.limit, (long long)want.remaining,
				(long long)want.retry_after_ms, (long long)want.reset_ms);
			abort();
		}
		/* the crowd: many users, max_keys reached over and over */
		char many[16];
		snprintf(many, sizeof(many), "c%u", (unsigned)(d[1] | d[3] << 8) % CROWD);
		req.user = many;
		req.user_len = strlen(many);
		for (int i = 0; i < npairs; i++) {
			pairs[i].user = many;
			pairs[i].user_len = req.user_len;
		}
		crowd->ops->submit(crowd, &req, copy_result, &got);
		struct store_memory_stats cs;
		if (got.status != STORE_OK || store_memory_stats(crowd, &cs) < 0 || cs.keys > 1000)
			abort();
	}
	/* the sweep, once, over whatever has expired by now */
	event_base_loop(base, EVLOOP_NONBLOCK);
	s->ops->free(s);
	crowd->ops->free(crowd);
	for (int u = 0; u < USERS; u++)
		for (int p = 0; p < NPOL; p++)
			for (int i = 0; i < POLICY_MAX_LIMITS + 1; i++)
				limiter_state_free(&st[u][p][i]);
	for (int u = 0; u < USERS; u++)
		for (int p = 0; p < NPOL; p++)
			limiter_state_free(&hst[u][p]);
	return 0;
}
