/*
 * leases.c - concurrency leases (see leases.h). An ACQUIRE makes the
 * lease's id first (action, user, a nonce, the cost: lease.h), so the
 * answer needs nothing back from the store but whether it fit; a RELEASE or
 * RENEW finds the key from the id alone, on any daemon.
 */
#include "leases.h"

#include "cmd_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cmd_slot.h"
#include "config.h"
#include "decide.h"
#include "keys.h"
#include "lease.h"
#include "lease_book.h"
#include "policy.h"
#include "hashkey.h"
#include "siphash.h"
#include "stats.h"
#include "store.h"
#include "store_lease.h"

/* a sweep of the book at most this often (us) */
#define SWEEP_US 1000000
/* the most leases a daemon books for its metrics (lease_book.h) */
#define BOOK_MAX (1 << 20)

struct leases {
	uint8_t seed[16]; /* nonces and the book's pair hashes: unguessable */
	uint64_t counter;
	struct lease_book *book; /* the leases granted here, for the metrics */
	int64_t book_swept_us;
};

struct leases *leases_new(void)
{
	struct leases *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	hashkey_new(l->seed);
	l->book = lease_book_new(BOOK_MAX);
	if (!l->book) {
		free(l);
		return NULL;
	}
	return l;
}

void leases_sweep(struct leases *l)
{
	int64_t now = (int64_t)clock_mono_us();
	l->book_swept_us = now;
	lease_book_sweep(l->book, now);
}

void leases_free(struct leases *l)
{
	if (!l)
		return;
	lease_book_free(l->book);
	free(l);
}

/* A nonce no other ACQUIRE of any daemon has, but by chance (2^-64). */
static uint64_t nonce(struct leases *l)
{
	uint64_t c = ++l->counter;
	return siphash24(l->seed, &c, sizeof(c));
}

uint64_t leases_nonce(struct leases *l)
{
	return nonce(l);
}

/* ---- answers */

/* What a request left for its answer. */
struct call {
	struct cmd_slot *slot;	/* NULL: detached (a closed connection's release) */
	leases_peek_fn *peeked; /* LEASE_PEEK: who answers the slot */
	struct leases *l;
	const struct policy *p;
	enum lease_op op;
	uint64_t nonce; /* the lease's (not for RESET) */
	uint64_t pair;	/* its key's hash: RESET finds the pair's leases by it */
	size_t id_len;
	char id[LEASE_ID_MAX];
};

/* What an answer changes in the book of leases granted here. */
static void book(struct call *c, const struct config *cfg, const struct lease_result *r)
{
	struct lease_book *b = c->l->book;
	int64_t expiry = (int64_t)clock_mono_us() + r->ms * 1000;
	switch (c->op) {
	case LEASE_ACQUIRE:
		if (r->ok && lease_book_granted(b, c->nonce, c->pair, expiry,
						stats_action_counters(cfg, c->p)) < 0)
			stats.leases[STATS_LEASE_UNBOOKED]++;
		return;
	case LEASE_RENEW:
		if (r->ok)
			lease_book_renewed(b, c->nonce, expiry);
		else
			lease_book_gone(b, c->nonce);
		return;
	case LEASE_RELEASE:
		if (r->ok)
			lease_book_released(b, c->nonce);
		else
			lease_book_gone(b, c->nonce);
		return;
	case LEASE_RESET:
		lease_book_reset(b, c->pair);
		return;
	case LEASE_PEEK:
		return;
	}
}

static void answer(struct call *c, const struct lease_result *r, enum stats_from from)
{
	struct cmd_slot *slot = c->slot;
	stats.leases[STATS_LEASE_EXPIRED] += (unsigned long long)r->expired;
	/* a detached call (a release) has no configuration and needs none */
	const struct config *cfg = slot ? slot->cfg : NULL;
	book(c, cfg, r);
	if (!slot) {
		if (r->ok)
			stats.leases[STATS_LEASE_RELEASED_ON_CLOSE]++;
		return;
	}
	switch (c->op) {
	case LEASE_ACQUIRE:
	case LEASE_RENEW:
		if (r->ok) {
			if (c->op == LEASE_ACQUIRE)
				stats.leases[STATS_LEASE_ACQUIRED]++;
			struct cmd_item *item = malloc(sizeof(*item) + c->id_len);
			if (!item) {
				decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
				return;
			}
			memset(item, 0, sizeof(*item));
			item->ulen = c->id_len;
			memcpy(item->text, c->id, c->id_len);
			slot->res.item = item;
			decide_answer(slot, cfg, c->p, from, 1, r->limit, r->remaining, 0, r->ms);
			return;
		}
		if (c->op == LEASE_RENEW) {
			decide_error(slot, CMD_ERR_NO_LEASE,
				     "lease not held: released, expired or never taken");
			return;
		}
		decide_answer(slot, cfg, c->p, from, 0, r->limit, r->remaining, r->ms, r->ms);
		return;
	case LEASE_RELEASE:
		if (!r->ok) {
			decide_error(slot, CMD_ERR_NO_LEASE,
				     "lease not held: released, expired or never taken");
			return;
		}
		stats.leases[STATS_LEASE_RELEASED]++;
		slot->res.kind = CMD_REPLY_OK;
		decide_complete(slot);
		return;
	case LEASE_RESET:
		slot->res.kind = CMD_REPLY_OK;
		decide_complete(slot);
		return;
	case LEASE_PEEK: /* the caller of leases_peek answers */
		c->peeked(slot, c->p, r->limit, r->remaining, r->ms);
		return;
	}
	decide_error(slot, CMD_ERR_SYNTAX, "no such lease operation");
}

/* Redis did not answer: as the policy's on_store_error says, without a
 * lease (an ALLOWED then has no id: nothing to release). */
static void failed(struct call *c, const char *why)
{
	struct cmd_slot *slot = c->slot;
	stats.leases[STATS_LEASE_FAILED]++;
	if (!slot)
		return;
	char msg[CMD_MSG_MAX];
	snprintf(msg, sizeof(msg), "redis: %s", why);
	enum policy_on_error mode = c->p ? config_on_error(slot->cfg, c->p) : POLICY_ON_ERROR_ERROR;
	if (c->op != LEASE_ACQUIRE || mode == POLICY_ON_ERROR_ERROR ||
	    mode == POLICY_ON_ERROR_LOCAL) {
		decide_error(slot, CMD_ERR_STORE_UNAVAILABLE, msg);
		return;
	}
	int64_t limit = c->p->limits[0].count;
	if (mode == POLICY_ON_ERROR_ALLOW)
		decide_answer(slot, slot->cfg, c->p, STATS_FROM_FALLBACK, 1, limit, -1, 0, -1);
	else
		decide_answer(slot, slot->cfg, c->p, STATS_FROM_FALLBACK, 0, limit, -1, 1000, -1);
}

/* The store's answer; out of this daemon's memory is no store failure:
 * the client is told so, whatever on_store_error says. */
static void lease_done(void *arg, const struct store_lease_result *res)
{
	struct call *c = arg;
	if (!res->why)
		answer(c, &res->lease, res->memory ? STATS_FROM_MEMORY : STATS_FROM_STORE);
	else if (!res->out_of_memory)
		failed(c, res->why);
	else if (c->slot)
		decide_error(c->slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
	free(c);
}

/* Runs op on the key of (p's action, user), answering c (freed). */
static void run(struct config *cfg, const struct cmd_env *env, struct call *c,
		const struct policy *p, const char *user, size_t ulen, const char *member,
		int64_t cost)
{
	char key[KEYS_MAX];
	size_t klen = keys_build(key, cfg->prefix, strlen(cfg->prefix), p, 0, user, ulen);
	int64_t limit = p->limits[0].count, lease_ms = p->limits[0].period_ms;
	struct leases *l = env->leases;
	c->l = l;
	c->pair = siphash24(l->seed, key, klen);
	int64_t now = (int64_t)clock_mono_us();
	if (now - l->book_swept_us >= SWEEP_US) {
		l->book_swept_us = now;
		lease_book_sweep(l->book, now);
	}
	struct store_lease_request req = {
		.op = c->op,
		.key = key,
		.key_len = klen,
		.member = member,
		.cost = cost,
		.limit = limit,
		.lease_ms = lease_ms,
		.timeout_ms = config_redis_of(cfg, p) ? config_redis_of(cfg, p)->timeout_ms
						      : cfg->redis.timeout_ms,
	};
	struct store *st = cmd_env_store(env, p);
	if (!st) {
		/* a last guard: a reload naming a store not running is refused */
		struct store_lease_result none = {.why = "the policy's store is not running"};
		lease_done(c, &none);
		return;
	}
	store_lease(st, &req, lease_done, c);
}

/* A call for slot on p, the slot set up for it; NULL (the slot answered)
 * when out of memory. */
static struct call *call_new(struct config *cfg, const struct cmd_env *env, const struct policy *p,
			     struct cmd_slot *slot)
{
	struct call *c = calloc(1, sizeof(*c));
	if (!c || !env->leases) {
		free(c);
		decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
		return NULL;
	}
	config_ref(cfg);
	slot->cfg = cfg;
	slot->policy = p;
	/* what decide_answer reads of a slot: no shadow mode, no cache, no
	 * local fallback for leases */
	slot->shadow = 0;
	slot->own_policy = 0;
	slot->deny = NULL;
	slot->local = NULL;
	c->slot = slot;
	c->p = p;
	return c;
}

void leases_peek(struct config *cfg, const struct cmd_env *env, const struct policy *p,
		 const char *user, size_t ulen, struct cmd_slot *slot, leases_peek_fn *peeked)
{
	struct call *c = call_new(cfg, env, p, slot);
	if (!c)
		return;
	c->op = LEASE_PEEK; /* a PEEK of cost 0: the leases held, nothing taken */
	c->peeked = peeked;
	run(cfg, env, c, p, user, ulen, "", 0);
}

void leases_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		    const struct policy *p, struct cmd_slot *slot)
{
	struct call *c = call_new(cfg, env, p, slot);
	if (!c)
		return;
	switch (pc->verb) {
	case CMD_ACQUIRE: {
		c->op = LEASE_ACQUIRE;
		int64_t cost = pc->cost > 0 ? pc->cost : 1;
		c->nonce = nonce(env->leases);
		c->id_len = lease_id_format(c->id, p->name, p->name_len, pc->user, pc->user_len,
					    c->nonce, cost);
		struct lease_id id;
		if (lease_id_parse(c->id, c->id_len, &id) < 0) { /* cannot be */
			free(c);
			decide_error(slot, CMD_ERR_SYNTAX, "cannot make a lease id");
			return;
		}
		run(cfg, env, c, p, pc->user, pc->user_len, id.member, cost);
		return;
	}
	case CMD_RESET:
		c->op = LEASE_RESET;
		run(cfg, env, c, p, pc->user, pc->user_len, "", 1);
		return;
	case CMD_RELEASE:
	case CMD_RENEW: {
		c->op = pc->verb == CMD_RELEASE ? LEASE_RELEASE : LEASE_RENEW;
		struct lease_id id;
		if (pc->lease_id_len >= sizeof(c->id) ||
		    lease_id_parse(pc->lease_id, pc->lease_id_len, &id) < 0) {
			free(c);
			decide_error(slot, CMD_ERR_NO_LEASE, "not a lease id");
			return;
		}
		memcpy(c->id, pc->lease_id, pc->lease_id_len);
		c->id_len = pc->lease_id_len;
		c->nonce = id.nonce;
		run(cfg, env, c, p, id.user, id.user_len, id.member, id.cost);
		return;
	}
	default:
		break;
	}
	free(c);
	decide_error(slot, CMD_ERR_UNKNOWN_COMMAND, "not a lease command");
}

void leases_release_detached(struct config *cfg, const struct cmd_env *env, const char *id,
			     size_t len)
{
	struct lease_id lid;
	if (!env->leases || len >= LEASE_ID_MAX || lease_id_parse(id, len, &lid) < 0)
		return;
	const struct policy *p = config_find_policy(cfg, lid.action, lid.action_len);
	if (!p || p->algo != POLICY_CONCURRENCY)
		return; /* the policy went with a reload: its keys expire alone */
	struct call *c = calloc(1, sizeof(*c));
	if (!c)
		return;
	c->op = LEASE_RELEASE;
	c->p = p;
	c->nonce = lid.nonce;
	run(cfg, env, c, p, lid.user, lid.user_len, lid.member, lid.cost);
}

/* ACQUIRE on a concurrency policy's action; RELEASE and RENEW on the
 * lease whose id names the action (pc->action, set by the parse). */
void cmd_run_lease(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		   struct cmd_slot *slot)
{
	const struct policy *p = config_find_policy(cfg, pc->action, pc->action_len);
	if (!p) {
		if (pc->verb == CMD_ACQUIRE)
			decide_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
		else
			decide_error(slot, CMD_ERR_NO_LEASE,
				     "not a lease id of a policy configured now");
		return;
	}
	if (p->algo != POLICY_CONCURRENCY) {
		decide_error(slot, CMD_ERR_POLICY_KIND,
			     "a rate policy: ALLOW it (ACQUIRE takes concurrency policies)");
		return;
	}
	leases_execute(cfg, env, pc, p, slot);
}
