/* redis_script.c - encodes decisions as calls of the decision script (see redis_script.h). */
#include "redis_script.h"

#include <string.h>

#include <stdio.h>

#include "calendar.h"
#include "clock.h"
#include "decimal.h"
#include "keys.h"
#include "policy.h"

size_t redis_script_argv_max(int max_batch)
{
	/* EVALSHA sha numkeys 0 n, then per decision its keys (its limits',
	 * its ban's, a hold's) and arguments */
	return 5 + (size_t)max_batch * (POLICY_MAX_LIMITS + 2 + REDIS_SCRIPT_DECISION_ARGC_MAX);
}

size_t redis_script_arena_size(int max_batch)
{
	/* keys and numbers (a calendar window's bounds: five); a reset's channel and tag */
	return (size_t)max_batch * ((POLICY_MAX_LIMITS + 2) * (KEYS_MAX + 24 + CALENDAR_ARG_MAX) +
				    4 * 24 + KEYS_MAX + KEYS_RESET_CHANNEL_MAX) +
	       64;
}

size_t redis_script_resp_max(int max_batch)
{
	/* RESP headers are at most 1 + 20 + 2 bytes per argument */
	return redis_script_arena_size(max_batch) + redis_script_argv_max(max_batch) * 48 + 64;
}

void redis_argv_add(struct redis_argv *a, const char *s, size_t len)
{
	a->argv[a->argc] = s;
	a->argl[a->argc] = len;
	a->argc++;
}

void redis_argv_num(struct redis_argv *a, int64_t v)
{
	char *p = a->arena + a->arena_used;
	size_t len = decimal_put(p, (uint64_t)v);
	a->arena_used += len;
	redis_argv_add(a, p, len);
}

static int is_hold_op(enum store_op op)
{
	return op == STORE_HOLD || op == STORE_SETTLE || op == STORE_CANCEL;
}

/* Appends the keys of one pair's limits (and, for a hold's op, its
 * holds'); returns how many. */
static int redis_script_pair_keys(struct redis_argv *a, const struct store_saved_request *sv,
				  const struct policy *p, const char *user, size_t user_len)
{
	int n = policy_nkeys(p), hold = sv->npairs == 0 && is_hold_op(sv->op);
	for (int i = 0; i < n + hold; i++) {
		char *k = a->arena + a->arena_used;
		size_t kl = keys_build(k, sv->prefix, sv->prefix_len, p,
				       i < n ? i : KEYS_HOLDS_INDEX, user, user_len);
		a->arena_used += kl;
		redis_argv_add(a, k, kl);
	}
	return n + hold;
}

/* Appends the keys of sv's decision, one per limit, pair after pair; returns how many. */
static int redis_script_keys(struct redis_argv *a, const struct store_saved_request *sv)
{
	if (sv->npairs == 0)
		return redis_script_pair_keys(a, sv, &sv->policy, sv->user, sv->user_len);
	int n = 0;
	for (int j = 0; j < sv->npairs; j++)
		n += redis_script_pair_keys(a, sv, &sv->pairs[j].policy, sv->pairs[j].user,
					    sv->pairs[j].user_len);
	return n;
}

static const char *op_arg(enum store_op op)
{
	switch (op) {
	case STORE_ALLOW:
		return SCRIPT_OP_ALLOW;
	case STORE_PEEK:
		return SCRIPT_OP_PEEK;
	case STORE_CHARGE:
		return SCRIPT_OP_CHARGE;
	case STORE_HOLD:
		return SCRIPT_OP_HOLD;
	case STORE_SETTLE:
		return SCRIPT_OP_SETTLE;
	case STORE_CANCEL:
		return SCRIPT_OP_CANCEL;
	case STORE_STATE:
		return SCRIPT_OP_STATE;
	case STORE_RESET:
		break;
	}
	return SCRIPT_OP_RESET;
}

/* The script's name of an algorithm (its `algos` table), by script_layout.txt's
 * rows; "?" for one with none (POLICY_CONCURRENCY: never a decision's,
 * leases go by the 'lease' mode). */
static const char *const algo_letters[POLICY_ALGO_N] = SCRIPT_ALGO_LETTERS;
_Static_assert(SCRIPT_ALGO_ENUMS == POLICY_ALGO_N - 1,
	       "an algorithm of enum policy_algo but POLICY_CONCURRENCY without a row of "
	       "script_layout.txt");

static const char *algo_arg(enum policy_algo a)
{
	return algo_letters[a] ? algo_letters[a] : "?";
}

/* A calendar window's bounds as the script's frame takes them,
 * "b0:b1:b2:b3:b4" (ms, around this daemon's clock); "0:0:0:0:0" when the
 * zone cannot be read, which fails the decision in the script, loudly. */
static void redis_argv_bounds(struct redis_argv *a, const struct policy *p,
			      const struct policy_limit *l)
{
	int64_t b[5] = {0};
	if (calendar_bounds(p->timezone, l->calendar, l->anchor, clock_wall_ms(), b) < 0)
		memset(b, 0, sizeof(b));
	char *s = a->arena + a->arena_used;
	int n = snprintf(s, CALENDAR_ARG_MAX, "%lld:%lld:%lld:%lld:%lld", (long long)b[0],
			 (long long)b[1], (long long)b[2], (long long)b[3], (long long)b[4]);
	a->arena_used += (size_t)n;
	redis_argv_add(a, s, (size_t)n);
}

/* A policy's limits (and its ban, the script's "b", one more limit on its own key). */
static void redis_script_limits(struct redis_argv *a, const struct policy *p)
{
	for (int i = 0; i < p->nlimits; i++) {
		const struct policy_limit *l = &p->limits[i];
		if (l->calendar != CALENDAR_NONE) {
			/* "W", "C": a calendar's fixed window or counter */
			redis_argv_add(a,
				       p->algo == POLICY_FIXED_WINDOW ? SCRIPT_ALGO_CAL_FIXED
								      : SCRIPT_ALGO_CAL_COUNTER,
				       1);
			redis_argv_bounds(a, p, l);
			redis_argv_num(a, l->count);
			redis_argv_num(a, l->period_ms);
			continue;
		}
		redis_argv_add(a, algo_arg(p->algo), 1);
		redis_argv_num(a, l->capacity);
		redis_argv_num(a, l->count);
		redis_argv_num(a, l->period_ms);
	}
	if (p->ban.after > 0) {
		redis_argv_add(a, SCRIPT_ALGO_BAN, 1);
		redis_argv_num(a, p->ban.after);
		redis_argv_num(a, p->ban.within_ms);
		redis_argv_num(a, p->ban.for_ms);
	}
}

void redis_script_give_args(struct redis_argv *a, const struct policy *p, int64_t units,
			    int64_t window)
{
	redis_argv_add(a, "0", 1);
	redis_argv_add(a, "1", 1);
	redis_argv_add(a, SCRIPT_OP_GIVE, 1);
	redis_argv_num(a, units);
	redis_argv_num(a, 1);
	struct policy one = *p;
	one.nlimits = 1;
	one.ban.after = 0; /* (a policy with a ban has no blocks) */
	redis_script_limits(a, &one);
	redis_argv_num(a, window);
}

/* A decision over several pairs: "A" or "P", cost, the number of groups,
 * then per pair its shadow flag, its number of keys and its limits. */
static void redis_script_decision_all(struct redis_argv *a, const struct store_saved_request *sv)
{
	redis_argv_add(a, sv->op == STORE_ALLOW ? SCRIPT_OP_ALL_ALLOW : SCRIPT_OP_ALL_PEEK, 1);
	redis_argv_num(a, sv->cost);
	redis_argv_num(a, sv->npairs);
	for (int j = 0; j < sv->npairs; j++) {
		const struct store_saved_pair *sp = &sv->pairs[j];
		redis_argv_add(a, sp->shadow ? "1" : "0", 1);
		redis_argv_num(a, policy_nkeys(&sp->policy));
		redis_script_limits(a, &sp->policy);
	}
}

/* The REDIS_SCRIPT_DECISION_ARGC(op, nlimits) arguments of one decision. */
static void redis_script_decision(struct redis_argv *a, const struct store_saved_request *sv)
{
	const struct policy *p = &sv->policy;
	if (sv->npairs > 0) {
		redis_script_decision_all(a, sv);
		return;
	}
	int wait = sv->op == STORE_ALLOW && sv->wait_ms > 0;
	int block = sv->op == STORE_ALLOW && sv->block_want > 0;
	redis_argv_add(a, wait ? SCRIPT_OP_DELAY : block ? SCRIPT_OP_BLOCK : op_arg(sv->op), 1);
	redis_argv_num(a, sv->op == STORE_SETTLE ? sv->actual : sv->cost);
	redis_argv_num(a, policy_nkeys(p));
	redis_script_limits(a, p);
	if (wait)
		redis_argv_num(a, sv->wait_ms * 1000);
	if (block) {
		redis_argv_num(a, sv->block_want);
		redis_argv_num(a, sv->block_ttl_ms);
	}
	if (is_hold_op(sv->op)) {
		/* the nonce as ids write it: 16 hex digits, the holds' field */
		char *s = a->arena + a->arena_used;
		int n = snprintf(s, 17, "%016llx", (unsigned long long)sv->hold_nonce);
		a->arena_used += (size_t)n;
		redis_argv_add(a, s, (size_t)n);
		if (sv->op == STORE_HOLD)
			redis_argv_num(a, sv->hold_ms);
	}
	if (sv->op == STORE_RESET || sv->op == STORE_SETTLE || sv->op == STORE_CANCEL) {
		/* the notice: a reset's, and a settle's that gives units back */
		char *s = a->arena + a->arena_used;
		size_t n = keys_reset_channel(s, sv->prefix, sv->prefix_len);
		a->arena_used += n;
		redis_argv_add(a, s, n);
		s = a->arena + a->arena_used;
		n = keys_tag(s, p, sv->user, sv->user_len);
		a->arena_used += n;
		redis_argv_add(a, s, n);
	}
}

/* A plain ALLOW of one limit (no ban, no wait, no block): what "=" may repeat. */
static int redis_script_repeatable(const struct store_saved_request *sv)
{
	return sv->npairs == 0 && sv->op == STORE_ALLOW && sv->wait_ms <= 0 &&
	       sv->block_want <= 0 && policy_nkeys(&sv->policy) == 1;
}

static int redis_argv_same(const struct redis_argv *a, int i, int j, int n)
{
	for (int q = 0; q < n; q++)
		if (a->argl[i + q] != a->argl[j + q] ||
		    memcmp(a->argv[i + q], a->argv[j + q], a->argl[i + q]) != 0)
			return 0;
	return 1;
}

/* Whether a's limits encode as b's do, known without encoding them: the
 * fields redis_script_limits reads are equal, and no limit is a calendar
 * window's (its bounds come from the clock; those are compared encoded). */
static int redis_script_limits_same(const struct policy *a, const struct policy *b)
{
	if (a->algo != b->algo || a->nlimits != b->nlimits || a->ban.after != b->ban.after)
		return 0;
	if (a->ban.after > 0 &&
	    (a->ban.within_ms != b->ban.within_ms || a->ban.for_ms != b->ban.for_ms))
		return 0;
	for (int i = 0; i < a->nlimits; i++) {
		const struct policy_limit *x = &a->limits[i], *y = &b->limits[i];
		if (x->calendar != CALENDAR_NONE || y->calendar != CALENDAR_NONE ||
		    x->capacity != y->capacity || x->count != y->count ||
		    x->period_ms != y->period_ms)
			return 0;
	}
	return 1;
}

/* Whether the decision over pairs b encodes as a does but for its cost. */
static int redis_script_pairs_same(const struct store_saved_request *a,
				   const struct store_saved_request *b)
{
	if (a->op != b->op || a->npairs != b->npairs)
		return 0;
	for (int j = 0; j < a->npairs; j++)
		if (a->pairs[j].shadow != b->pairs[j].shadow ||
		    !redis_script_limits_same(&a->pairs[j].policy, &b->pairs[j].policy))
			return 0;
	return 1;
}

/* Appends "<c><cost>" (c '=' or '~'): a short form of one decision. */
static void redis_argv_repeat(struct redis_argv *a, char c, int64_t cost)
{
	char *p = a->arena + a->arena_used;
	p[0] = c;
	size_t len = 1 + decimal_put(p + 1, (uint64_t)cost);
	a->arena_used += len;
	redis_argv_add(a, p, len);
}

void redis_script_args(struct redis_argv *a, const struct store_saved_request *const *reqs, int n)
{
	redis_argv_add(a, "0", 1);
	redis_argv_num(a, n);
	int limit_at = -1;	       /* the limit of the decision before, if "=" may repeat it */
	int all_at = -1, all_argc = 0; /* the last decision over pairs given in full */
	const struct store_saved_request *all = NULL; /* ... and its request */
	for (int j = 0; j < n; j++) {
		int at = a->argc;
		size_t arena_at = a->arena_used;
		if (reqs[j]->npairs > 0) {
			/* the same op, groups and limits as the last one in full:
			 * "~<cost>", one argument instead of 3 + 6 a pair of
			 * Envoy's descriptors; known from the requests when it
			 * can be, without encoding it first */
			limit_at = -1;
			if (all && redis_script_pairs_same(all, reqs[j])) {
				redis_argv_repeat(a, SCRIPT_SHORT_ALL_REPEAT, reqs[j]->cost);
				continue;
			}
			redis_script_decision(a, reqs[j]);
			int argc = a->argc - at;
			if (all_at >= 0 && argc == all_argc && redis_argv_same(a, all_at, at, 1) &&
			    redis_argv_same(a, all_at + 2, at + 2, argc - 2)) {
				a->argc = at;
				a->arena_used = arena_at;
				redis_argv_repeat(a, SCRIPT_SHORT_ALL_REPEAT, reqs[j]->cost);
			} else {
				all_at = at;
				all_argc = argc;
				all = reqs[j];
			}
			continue;
		}
		redis_script_decision(a, reqs[j]);
		if (!redis_script_repeatable(reqs[j])) {
			limit_at = -1;
			continue;
		}
		/* the same limit as the ALLOW before: "=<cost>", one argument
		 * instead of seven (Redis parses, copies and frees each) */
		if (limit_at >= 0 &&
		    redis_argv_same(a, limit_at, at + SCRIPT_HEAD_ARGC, SCRIPT_LIMIT_ARGC)) {
			a->argc = at;
			a->arena_used = arena_at;
			redis_argv_repeat(a, SCRIPT_SHORT_REPEAT, reqs[j]->cost);
			continue;
		}
		limit_at = at + SCRIPT_HEAD_ARGC;
	}
}

void redis_script_call(struct redis_argv *a, const char *cmd, const char *script, size_t script_len,
		       const struct store_saved_request *const *reqs, int n, int keys_after)
{
	a->argc = 0;
	a->arena_used = 0;
	redis_argv_add(a, cmd, strlen(cmd));
	redis_argv_add(a, script, script_len);
	int numkeys_at = a->argc++;
	int nkeys = 0;
	if (!keys_after)
		for (int j = 0; j < n; j++)
			nkeys += redis_script_keys(a, reqs[j]);
	int end = a->argc;
	a->argc = numkeys_at;
	redis_argv_num(a, nkeys);
	a->argc = end;
	redis_script_args(a, reqs, n);
	if (keys_after)
		for (int j = 0; j < n; j++)
			redis_script_keys(a, reqs[j]);
}

size_t redis_resp_bulk(char *out, const char *s, size_t len)
{
	char *p = out;
	*p++ = '$';
	p += decimal_put(p, len);
	*p++ = '\r';
	*p++ = '\n';
	memcpy(p, s, len);
	p += len;
	*p++ = '\r';
	*p++ = '\n';
	return (size_t)(p - out);
}

size_t redis_resp_format(char *out, const struct redis_argv *a)
{
	char *p = out;
	*p++ = '*';
	p += decimal_put(p, (uint64_t)a->argc);
	*p++ = '\r';
	*p++ = '\n';
	for (int i = 0; i < a->argc; i++)
		p += redis_resp_bulk(p, a->argv[i], a->argl[i]);
	return (size_t)(p - out);
}
