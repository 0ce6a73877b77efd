/*
 * multi.c - MALLOW and MPEEK: one decision over several (user, action)
 * pairs. Each pair is looked up as ALLOW would (policy, overrides, shadow,
 * deny cache); what is left goes to the store as one atomic call, or, on a
 * store that cannot (a Cluster), as a check of every pair and then, when all
 * pass, a charge of every pair.
 */
#include "multi.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cmd_slot.h"
#include "config.h"
#include "decide.h"
#include "denycache.h"
#include "local.h"
#include "override.h"
#include "poison.h"
#include "policy.h"
#include "stats.h"
#include "store.h"

_Static_assert(CMD_MULTI_MAX <= STORE_PAIRS_MAX, "the store takes every pair of a request");

struct multi;

/* What a Cluster's answer for one pair alone told: a store_result without
 * its groups (1.6 KB, store.h) or its detail (valid only in the callback). */
struct multi_answer {
	enum store_status status;
	enum store_error error;
	int allowed, sent;
	int64_t limit, remaining, retry_after_ms, reset_ms;
};

struct multi_pair {
	struct multi *m;
	const struct policy *policy; /* what decides: the action's, or own */
	struct policy own;	     /* an override's limits, copied (a run-time one may change) */
	const struct policy *named;  /* the action's: stats, shadow, the deny cache */
	int index;		     /* 1-based position in the request */
	int shadow;		     /* never denies (shadow mode, some pairs only) */
	/* a Cluster's answers for this pair alone */
	struct multi_answer check, res;
	int checked, charged; /* check and res hold answers */
	size_t user_len;
	char user[KEYS_USER_MAX];
};

struct multi {
	struct cmd_slot *slot;
	struct store *store;
	struct local *local;	/* on_store_error: local (local.h) */
	struct denycache *deny; /* NULL: not consulted */
	enum store_op op;
	int64_t cost;
	int64_t timeout_ms;
	int eager;	      /* its store is remote (decide_eager) */
	uint64_t deadline_us; /* the whole decision's (monotonic): a Cluster's steps share it */
	int all_shadow;	      /* every pair is in shadow mode: a denial is answered ALLOWED */
	int outstanding;      /* a Cluster's checks not answered yet */
	/* a Cluster's charges: pairs[order[0..norder)], next the one under way */
	int order[CMD_MULTI_MAX];
	int norder, next;
	int n;
	int room; /* pairs allocated: MULTI_ROOM_MIN, or the request's npairs */
	struct multi_pair pairs[];
};

/* The pairs a multi has room for at least: a text protocol's MALLOW at
 * most (CMD_PAIRS_MAX); only a request with more (gRPC's, up to
 * CMD_MULTI_MAX) gets a larger one. */
#define MULTI_ROOM_MIN CMD_PAIRS_MAX

static int same_bytes(const char *a, size_t al, const char *b, size_t bl)
{
	return al == bl && memcmp(a, b, al) == 0;
}

/* Makes pair the one the reply speaks of: its policy, user and position. */
static void multi_speak_of(struct cmd_slot *slot, const struct multi_pair *mp)
{
	/* the slot outlives the multi: an override's copy moves into it */
	if (mp->policy == &mp->own) {
		slot->policy_copy = mp->own;
		slot->policy = &slot->policy_copy;
	} else {
		slot->policy = mp->policy;
	}
	slot->res.pair = mp->index;
	slot->user_len = mp->user_len;
	memcpy(slot->user, mp->user, mp->user_len);
}

/* A shadow pair that would have denied: counted and logged under its action. */
static void multi_shadow_denied(struct cmd_slot *slot, const struct multi_pair *mp)
{
	slot->user_len = mp->user_len;
	memcpy(slot->user, mp->user, mp->user_len);
	decide_shadow_denied(slot, mp->named);
}

/* Each pair's own figures into the reply (gRPC answers each descriptor):
 * from the atomic decision's groups (res), or, res NULL, from a Cluster's
 * answers for each pair. */
static void multi_pair_figures(struct multi *m, const struct store_result *res)
{
	if (!m->slot->res.pairs)
		return; /* not wanted */
	for (int i = 0; i < m->n; i++) {
		const struct multi_pair *mp = &m->pairs[i];
		struct cmd_pair_result *pr = &m->slot->res.pairs[mp->index - 1];
		if (res && res->ngroups == m->n) {
			*pr = (struct cmd_pair_result){1, res->groups[i].allowed,
						       res->groups[i].remaining,
						       res->groups[i].reset_ms};
		} else if (!res && (mp->charged || mp->checked)) {
			const struct multi_answer *r = mp->charged ? &mp->res : &mp->check;
			*pr = (struct cmd_pair_result){1, r->allowed, r->remaining, r->reset_ms};
		}
	}
}

static size_t multi_size(int room)
{
	return offsetof(struct multi, pairs) + (size_t)room * sizeof(struct multi_pair);
}

/* Freed multis of MULTI_ROOM_MIN pairs kept for the next: one is 9 KB, past
 * malloc's per-thread caches, and a malloc and a free of one a request
 * showed in profiles of a gRPC load (its descriptors are one MALLOW). A
 * larger one (up to 64 pairs, 70 KB) is freed: they are rare, and 64 kept
 * would hold megabytes. The daemon is one thread. A kept one is poisoned
 * (poison.h) until it is handed out again. */
#define MULTI_SPARE_MAX 64
static struct multi *multi_spare[MULTI_SPARE_MAX];
static int multi_nspare;

/* A multi with room for npairs pairs, its head cleared. */
static struct multi *multi_alloc(int npairs)
{
	int room = npairs > MULTI_ROOM_MIN ? npairs : MULTI_ROOM_MIN;
	struct multi *m = NULL;
	if (room == MULTI_ROOM_MIN && multi_nspare > 0) {
		m = multi_spare[--multi_nspare];
		RL_UNPOISON(m, multi_size(room));
	} else {
		m = malloc(multi_size(room));
	}
	/* only the head is cleared: each pair taken is set in full (the
	 * pairs are most of it, and clearing them showed in profiles) */
	if (m) {
		memset(m, 0, offsetof(struct multi, pairs));
		m->room = room;
	}
	return m;
}

static void multi_free(struct cmd_slot *slot)
{
	struct multi *m = slot->multi;
	if (m && m->room == MULTI_ROOM_MIN && multi_nspare < MULTI_SPARE_MAX) {
		RL_POISON(m, multi_size(m->room));
		multi_spare[multi_nspare++] = m;
	} else
		free(m);
	slot->multi = NULL;
}

static void multi_decided(struct multi *m, const struct multi_pair *by, enum stats_from from,
			  int allowed, int64_t limit, int64_t remaining, int64_t retry_after_ms,
			  int64_t reset_ms)
{
	struct cmd_slot *slot = m->slot;
	const struct policy *named = by->named;
	if (from == STATS_FROM_STORE)
		local_redis_back(m->local); /* Redis decides again */
	if (allowed)
		for (int i = 0; i < m->n; i++)
			decide_cache_allowed(m->deny, m->op, m->pairs[i].named, m->pairs[i].user,
					     m->pairs[i].user_len);
	multi_speak_of(slot, by);
	slot->shadow = m->all_shadow;
	multi_free(slot); /* by is gone: the slot has what the reply needs */
	decide_answer(slot, slot->cfg, named, from, allowed, limit, remaining, retry_after_ms,
		      reset_ms);
}

/* How strict an on_store_error answer is, for the pairs' strictest. */
static int strictness(enum policy_on_error e)
{
	switch (e) {
	case POLICY_ON_ERROR_ERROR:
		return 3;
	case POLICY_ON_ERROR_DENY:
		return 2;
	case POLICY_ON_ERROR_LOCAL:
		return 1;
	default:
		return 0;
	}
}

static void multi_decided(struct multi *m, const struct multi_pair *by, enum stats_from from,
			  int allowed, int64_t limit, int64_t remaining, int64_t retry_after_ms,
			  int64_t reset_ms);

/* on_store_error: local: every pair decided at once in this daemon's memory. */
static int multi_local(struct multi *m, const char *why)
{
	struct cmd_slot *slot = m->slot;
	struct store_pair pairs[CMD_MULTI_MAX];
	for (int i = 0; i < m->n; i++)
		pairs[i] = (struct store_pair){m->pairs[i].policy, m->pairs[i].user,
					       m->pairs[i].user_len, m->pairs[i].shadow};
	struct store_request req = {
		.op = m->op,
		.cost = m->cost,
		.npairs = m->n,
		.pairs = pairs,
	};
	struct store_result res;
	if (decide_local(slot, m->local, &req, why, &res) < 0 || res.pair < 1 || res.pair > m->n)
		return -1;
	if (res.shadow_pair > 0 && res.shadow_pair <= m->n)
		multi_shadow_denied(slot, &m->pairs[res.shadow_pair - 1]);
	multi_pair_figures(m, &res);
	multi_decided(m, &m->pairs[res.pair - 1], STATS_FROM_LOCAL, res.allowed, res.limit,
		      res.remaining, res.retry_after_ms, res.reset_ms);
	return 0;
}

/* The store could not decide: the strictest on_store_error of the pairs
 * answers (error, then deny, then local, then allow); but local, for
 * no pair in particular. */
static void multi_failed(struct multi *m, const struct store_result *res)
{
	struct cmd_slot *slot = m->slot;
	enum policy_on_error mode = POLICY_ON_ERROR_ALLOW;
	for (int i = 0; i < m->n; i++) {
		enum policy_on_error e = config_on_error(slot->cfg, m->pairs[i].named);
		if (strictness(e) > strictness(mode))
			mode = e;
	}
	if (mode == POLICY_ON_ERROR_LOCAL && m->local) {
		char why[128];
		decide_why(res, why, sizeof(why));
		if (multi_local(m, why) == 0)
			return;
		mode = POLICY_ON_ERROR_ERROR; /* out of memory: say so */
	}
	slot->policy = m->pairs[0].named;
	slot->res.pair = 0;
	slot->shadow = m->all_shadow;
	multi_free(slot);
	decide_store_failed(slot, res, mode);
}

/* ---- one atomic call ---- */

static void multi_done(void *arg, const struct store_result *res)
{
	struct multi *m = arg;
	if (m->slot->trace.on) { /* the call it rode in (trace.h) */
		m->slot->batch_sent_us = res->batch_sent_us;
		m->slot->batch_read_us = res->batch_read_us;
		m->slot->batch_size = res->batch_size;
	}
	if (res->status != STORE_OK) {
		multi_failed(m, res);
		return;
	}
	if (res->pair < 1 || res->pair > m->n || res->shadow_pair < 0 || res->shadow_pair > m->n) {
		struct store_result bad = {.status = STORE_FAILED,
					   .error = STORE_ERROR_REPLY,
					   .detail = "implausible decision from redis"};
		multi_failed(m, &bad);
		return;
	}
	if (res->shadow_pair > 0)
		multi_shadow_denied(m->slot, &m->pairs[res->shadow_pair - 1]);
	multi_pair_figures(m, res);
	multi_decided(m, &m->pairs[res->pair - 1], decide_store_source(res), res->allowed,
		      res->limit, res->remaining, res->retry_after_ms, res->reset_ms);
}

static void multi_submit_atomic(struct multi *m, struct config *cfg)
{
	struct store_pair pairs[CMD_MULTI_MAX];
	for (int i = 0; i < m->n; i++)
		pairs[i] = (struct store_pair){
			.policy = m->pairs[i].policy,
			.user = m->pairs[i].user,
			.user_len = m->pairs[i].user_len,
			.shadow = m->pairs[i].shadow,
		};
	struct store_request req = {
		.op = m->op,
		.prefix = cfg->prefix,
		.prefix_len = strlen(cfg->prefix),
		.cost = m->cost,
		.timeout_ms = m->timeout_ms,
		.eager = m->eager,
		.npairs = m->n,
		.pairs = pairs,
	};
	store_submit(m->store, &req, multi_done, m);
}

/* ---- a Cluster: check every pair, then charge them one by one ----
 *
 * Each pair's keys live in its own slot, maybe on another master, so no one
 * call can decide them together. First every pair is checked at once
 * (PEEK): a pair that would deny answers the request, and nothing is
 * charged. When all pass, the pairs are charged (ALLOW) one after another,
 * the one with the least room first, stopping at the first denial. Each
 * pair's limit holds exactly: every charge is its own atomic decision. A
 * request that another took the last units from between its check and its
 * charge is denied, usually by the first pair charged, with nothing else
 * charged; only when a later pair denies do the pairs charged before it
 * stay charged (counted in stats.multi_partial). */

/* The pair a decision binds to among results r[] of the enforced pairs, as
 * the script chooses it: allowed, the least remaining; denied, the longest
 * retry (-1, never, longest of all); the first one wins a tie. */
static struct multi_pair *multi_bind(struct multi *m, int allowed, int charged)
{
	struct multi_pair *bind = NULL;
	for (int i = 0; i < m->n; i++) {
		struct multi_pair *mp = &m->pairs[i];
		const struct multi_answer *r = charged ? &mp->res : &mp->check;
		const struct multi_answer *b = bind ? (charged ? &bind->res : &bind->check) : NULL;
		if (mp->shadow)
			continue;
		if (allowed) {
			if (!b || r->remaining < b->remaining)
				bind = mp;
		} else if (!r->allowed) {
			if (!b ||
			    (b->retry_after_ms != -1 &&
			     (r->retry_after_ms == -1 || r->retry_after_ms > b->retry_after_ms)))
				bind = mp;
		}
	}
	return bind;
}

static void multi_charge_next(struct multi *m);

/* One pair alone, as ALLOW or PEEK would ask for it; done gets mp. Reads
 * m only before submitting (the answer may come back inside). Each step
 * has what is left of the decision's deadline, not a whole one: checks
 * and then charges, one after another, answer within redis.timeout. */
static void multi_submit_pair(struct multi *m, struct multi_pair *mp, enum store_op op,
			      store_done_fn *done)
{
	const struct config *cfg = m->slot->cfg;
	uint64_t now = clock_mono_us();
	int64_t left_ms = now < m->deadline_us ? (int64_t)((m->deadline_us - now) / 1000u) : 0;
	struct store_request req = {
		.op = op,
		.policy = mp->policy,
		.prefix = cfg->prefix,
		.prefix_len = strlen(cfg->prefix),
		.user = mp->user,
		.user_len = mp->user_len,
		.cost = m->cost,
		.timeout_ms = left_ms > 1 ? left_ms : 1,
		.eager = m->eager,
	};
	store_submit(m->store, &req, done, mp);
}

/* What a pair's answer tells of it alone. */
static struct multi_answer multi_answer_of(const struct store_result *res)
{
	return (struct multi_answer){.status = res->status,
				     .error = res->error,
				     .allowed = res->allowed,
				     .sent = res->sent,
				     .limit = res->limit,
				     .remaining = res->remaining,
				     .retry_after_ms = res->retry_after_ms,
				     .reset_ms = res->reset_ms};
}

static void multi_charge_done(void *arg, const struct store_result *res)
{
	struct multi_pair *mp = arg;
	struct multi *m = mp->m;
	mp->res = multi_answer_of(res);
	mp->charged = res->status == STORE_OK;
	if (res->status != STORE_OK) {
		if (m->next > 0)
			stats.multi_partial++;
		multi_failed(m, res);
		return;
	}
	if (!res->allowed && !mp->shadow) {
		if (m->next > 0)
			stats.multi_partial++;
		multi_pair_figures(m, NULL);
		multi_decided(m, mp, STATS_FROM_STORE, 0, res->limit, res->remaining,
			      res->retry_after_ms, res->reset_ms);
		return;
	}
	m->next++;
	multi_charge_next(m);
}

/* Charges the next pair, or answers once every pair is charged. An answer
 * may come back inside store_submit: nothing touches m after it. */
static void multi_charge_next(struct multi *m)
{
	if (m->next == m->norder) {
		struct multi_pair *bind = multi_bind(m, 1, 1);
		multi_pair_figures(m, NULL);
		multi_decided(m, bind, STATS_FROM_STORE, 1, bind->res.limit, bind->res.remaining,
			      bind->res.retry_after_ms, bind->res.reset_ms);
		return;
	}
	multi_submit_pair(m, &m->pairs[m->order[m->next]], STORE_ALLOW, multi_charge_done);
}

/* Whether a has more room left than b, as a share of its limit. */
static int multi_roomier(const struct multi_answer *a, const struct multi_answer *b)
{
	/* remaining <= limit <= 1e9 (a funnel's capacity too): no overflow */
	return (double)a->remaining * (double)b->limit > (double)b->remaining * (double)a->limit;
}

/* Every pair checked. */
static void multi_checked(struct multi *m)
{
	const struct multi_pair *failed = NULL;
	int all_ok = 1, shadow_reported = 0;
	for (int i = 0; i < m->n; i++) {
		const struct multi_pair *mp = &m->pairs[i];
		if (mp->check.status != STORE_OK) {
			if (!failed)
				failed = mp;
		} else if (mp->shadow) {
			if (!mp->check.allowed && !shadow_reported) {
				multi_shadow_denied(m->slot, mp);
				shadow_reported = 1;
			}
		} else if (!mp->check.allowed) {
			all_ok = 0;
		}
	}
	if (failed) {
		const struct multi_answer *a = &failed->check;
		struct store_result res = {
			.status = a->status,
			.error = a->error,
			.sent = a->sent,
			.detail = a->status == STORE_TIMEOUT ? "redis did not answer in time"
							     : "a pair could not be decided",
		};
		multi_failed(m, &res);
		return;
	}
	if (!all_ok || m->op == STORE_PEEK) {
		struct multi_pair *bind = multi_bind(m, all_ok, 0);
		const struct multi_answer *r = &bind->check;
		multi_pair_figures(m, NULL);
		multi_decided(m, bind, STATS_FROM_STORE, all_ok, r->limit, r->remaining,
			      r->retry_after_ms, r->reset_ms);
		return;
	}
	/* the least room first, as a share of the limit: where a race is most
	 * likely lost (a key shared by many, near its end) */
	m->norder = 0;
	for (int i = 0; i < m->n; i++) {
		if (m->pairs[i].shadow)
			continue;
		int k = m->norder++;
		while (k > 0 &&
		       multi_roomier(&m->pairs[m->order[k - 1]].check, &m->pairs[i].check)) {
			m->order[k] = m->order[k - 1];
			k--;
		}
		m->order[k] = i;
	}
	for (int i = 0; i < m->n; i++) /* a shadow pair is charged when it passed */
		if (m->pairs[i].shadow && m->pairs[i].check.allowed)
			m->order[m->norder++] = i;
	m->next = 0;
	multi_charge_next(m);
}

static void multi_check_done(void *arg, const struct store_result *res)
{
	struct multi_pair *mp = arg;
	struct multi *m = mp->m;
	mp->check = multi_answer_of(res);
	mp->checked = res->status == STORE_OK;
	if (--m->outstanding == 0)
		multi_checked(m);
}

static void multi_check(struct multi *m)
{
	int n = m->n;
	struct multi_pair *pairs[CMD_MULTI_MAX];
	for (int i = 0; i < n; i++)
		pairs[i] = &m->pairs[i];
	/* answers may come back inside store_submit: count them all first, and
	 * touch m no more once the last is submitted */
	m->outstanding = n;
	for (int i = 0; i < n; i++)
		multi_submit_pair(m, pairs[i], STORE_PEEK, multi_check_done);
}

/* ---- the request ---- */

/* The pairs' policies, and the first request error, or NULL. */
static const char *multi_lookup(struct config *cfg, const struct cmd_request *req,
				const struct policy **named, enum cmd_error *code, char *msg,
				size_t msglen)
{
	const struct cmd_pair *pairs = cmd_pairs(req);
	for (int i = 0; i < req->npairs; i++) {
		const struct cmd_pair *a = &pairs[i];
		named[i] =
			a->policy ? a->policy : config_find_policy(cfg, a->action, a->action_len);
		if (!named[i]) {
			*code = CMD_ERR_UNKNOWN_ACTION;
			snprintf(msg, msglen, "no policy for the action of pair %d", i + 1);
			return msg;
		}
		if (named[i]->algo == POLICY_CONCURRENCY) {
			*code = CMD_ERR_POLICY_KIND;
			snprintf(msg, msglen,
				 "pair %d: a concurrency policy (ACQUIRE a lease of it alone)",
				 i + 1);
			return msg;
		}
		for (int j = 0; j < i; j++) {
			const struct cmd_pair *b = &pairs[j];
			/* the same keys twice (a given policy may share its name
			 * with another of a different window: gRPC's overrides) */
			if (same_bytes(a->user, a->user_len, b->user, b->user_len) &&
			    named[i] == named[j]) {
				*code = CMD_ERR_SYNTAX;
				snprintf(msg, msglen, "pair %d repeats pair %d", i + 1, j + 1);
				return msg;
			}
		}
	}
	return NULL;
}

/* One store call decides them all: their policies' store must be one,
 * and running. 1, or 0 with slot answered. */
static int multi_one_store(struct cmd_slot *slot, const struct cmd_env *env,
			   const struct policy *const *named, int n)
{
	char msg[CMD_MSG_MAX];
	for (int i = 1; i < n; i++)
		if (strcmp(named[i]->store, named[0]->store) != 0) {
			snprintf(msg, sizeof(msg),
				 "%.32s and %.32s are on different stores (%s, %s): ask each alone",
				 named[0]->name, named[i]->name,
				 named[0]->store[0] ? named[0]->store : "default",
				 named[i]->store[0] ? named[i]->store : "default");
			decide_error(slot, CMD_ERR_POLICY_KIND, msg);
			return 0;
		}
	if (!cmd_env_store(env, named[0])) {
		decide_no_store(slot, named[0]);
		return 0;
	}
	return 1;
}

void multi_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *req,
		   struct cmd_slot *slot)
{
	const struct policy *named[CMD_MULTI_MAX];
	const struct cmd_pair *pairs = cmd_pairs(req);
	enum cmd_error code = CMD_ERR_SYNTAX;
	char msg[CMD_MSG_MAX];
	slot->own_policy = 0;
	slot->deny = NULL;
	slot->shadow = 0;
	slot->op = req->verb == CMD_MALLOW ? STORE_ALLOW : STORE_PEEK;
	slot->res.multi = 1;
	/* (the parsers keep to these: a bug caught, not a client's error) */
	if (req->npairs < 1 || req->npairs > (req->many ? CMD_MULTI_MAX : CMD_PAIRS_MAX)) {
		decide_error(slot, CMD_ERR_SYNTAX, req->many ? "1 to 64 pairs" : "1 to 8 pairs");
		return;
	}
	if (multi_lookup(cfg, req, named, &code, msg, sizeof(msg))) {
		decide_error(slot, code, msg);
		return;
	}
	if (!multi_one_store(slot, env, named, req->npairs))
		return;
	struct multi *m = multi_alloc(req->npairs);
	if (!m) {
		decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
		return;
	}
	m->slot = slot;
	m->store = cmd_env_store(env, named[0]);
	m->local = env->local;
	m->op = (enum store_op)slot->op;
	m->cost = req->cost > 0 ? req->cost : 1;
	m->timeout_ms = decide_timeout_ms(cfg, named[0], req);
	m->eager = decide_eager(cfg, named[0]);
	m->deadline_us = clock_mono_us() + (uint64_t)m->timeout_ms * 1000u;
	for (int i = 0; slot->res.pairs && i < req->npairs; i++)
		slot->res.pairs[i].known = 0;
	slot->multi = m;
	int nshadow = 0;
	for (int i = 0; i < req->npairs; i++) {
		const struct cmd_pair *a = &pairs[i];
		struct multi_pair *mp = &m->pairs[m->n];
		mp->m = m;
		mp->checked = mp->charged = 0;
		mp->named = mp->policy = named[i];
		mp->index = i + 1;
		mp->shadow = config_shadow(cfg, named[i]);
		mp->user_len = a->user_len;
		memcpy(mp->user, a->user, a->user_len);
		const struct override *o =
			decide_find_override(env, named[i], a->user, a->user_len);
		if (o && o->kind == OVERRIDE_UNLIMITED)
			continue; /* nothing to decide or store */
		if (o && o->kind == OVERRIDE_BLOCKED) {
			if (mp->shadow) {
				multi_shadow_denied(slot, mp);
				continue;
			}
			/* denied whatever the others say: nothing is charged */
			multi_speak_of(slot, mp);
			multi_free(slot);
			decide_override(slot, cfg, named[i], 0);
			return;
		}
		if (o) {
			mp->own = *o->policy;
			mp->policy = &mp->own;
		}
		nshadow += mp->shadow;
		m->n++;
	}
	if (m->n == 0) { /* every pair unlimited (or a blocked shadow pair) */
		slot->policy = named[0];
		slot->res.pair = 0;
		slot->user_len = pairs[0].user_len;
		memcpy(slot->user, pairs[0].user, pairs[0].user_len);
		multi_free(slot);
		decide_override(slot, cfg, named[0], 1);
		return;
	}
	if (nshadow == m->n) { /* all in shadow mode: decided as enforced, answered ALLOWED */
		m->all_shadow = 1;
		for (int i = 0; i < m->n; i++)
			m->pairs[i].shadow = 0;
	}
	/* A pair with a cached denial denies the request, as it would in Redis
	 * (the cache holds only denials certain until their retry time). Not
	 * when every pair's own figures are wanted and there are others: the
	 * cache knows only the denied pair's, so Redis decides (denying the
	 * same way) and tells each pair's remaining, as proto/grpc.md says. */
	struct denycache *deny = decide_cache(env, m->pairs[0].named);
	if (deny) {
		struct denycache_hit hit;
		uint64_t now = clock_mono_us();
		/* Kept even when the lookup is skipped: an allowed request must
		 * still forget its pairs' cached denials (multi_decided). */
		m->deny = deny;
		int lookup = !(slot->res.pairs && m->n > 1);
		for (int i = 0; lookup && i < m->n; i++) {
			const struct multi_pair *mp = &m->pairs[i];
			if (mp->shadow || !decide_cacheable(mp->policy, mp->policy != mp->named))
				continue;
			if (denycache_lookup(deny, mp->named->name, mp->named->name_len, mp->user,
					     mp->user_len, m->cost, now, &hit)) {
				multi_decided(m, mp, STATS_FROM_CACHE, 0, hit.limit, hit.remaining,
					      hit.retry_after_ms, hit.reset_ms);
				return;
			}
		}
	}
	config_ref(cfg);
	slot->cfg = cfg;
	if (store_multi(m->store))
		multi_submit_atomic(m, cfg);
	else
		multi_check(m);
}
