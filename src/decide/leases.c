/*
 * leases.c - concurrency leases (see leases.h). An ACQUIRE makes the
 * lease's id first (action, user, a nonce, the cost: lease.h), so the
 * answer needs nothing back from the store but whether it fit; a RELEASE or
 * RENEW finds the key from the id alone, on any daemon.
 */
#include "leases.h"

#include "cmd_run.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "clock.h"
#include "cmd_slot.h"
#include "config.h"
#include "decide.h"
#include "keys.h"
#include "lease.h"
#include "lease_book.h"
#include "policy.h"
#include "siphash.h"
#include "stats.h"
#include "store.h"

#define BUCKETS 1024 /* the memory table's, doubled as it fills */
/* a sweep of expired sets (and of the book) at most this often (us) */
#define SWEEP_US 1000000
/* the most leases a daemon books for its metrics (lease_book.h) */
#define BOOK_MAX (1 << 20)

/* One key's leases, in the memory table. */
struct lset {
	struct lset *next;
	uint64_t hash;
	struct lease_set set;
	size_t key_len;
	char key[];
};

struct leases {
	uint8_t seed[16]; /* nonces and the table's hash: unguessable */
	uint64_t counter;
	struct lset **buckets;
	size_t nbuckets, n;
	int64_t swept_us;
	struct lease_book *book; /* the leases granted here, for the metrics */
	int64_t book_swept_us;
};

struct leases *leases_new(void)
{
	struct leases *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	if (getrandom(l->seed, sizeof(l->seed), 0) != (ssize_t)sizeof(l->seed)) {
		/* no entropy yet: the clock and the pid */
		uint64_t t = clock_mono_us() ^ (uint64_t)getpid() << 40;
		memcpy(l->seed, &t, sizeof(t));
	}
	l->nbuckets = BUCKETS;
	l->buckets = calloc(l->nbuckets, sizeof(*l->buckets));
	l->book = lease_book_new(BOOK_MAX);
	if (!l->buckets || !l->book) {
		free(l->buckets);
		lease_book_free(l->book);
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
	for (size_t i = 0; i < l->nbuckets; i++)
		for (struct lset *e = l->buckets[i], *next; e; e = next) {
			next = e->next;
			lease_set_free(&e->set);
			free(e);
		}
	free(l->buckets);
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

/* ---- the memory store's table */

static struct lset *find(struct leases *l, const char *key, size_t len, int make)
{
	uint64_t h = siphash24(l->seed, key, len);
	struct lset **b = &l->buckets[h & (l->nbuckets - 1)];
	for (struct lset *e = *b; e; e = e->next)
		if (e->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0)
			return e;
	if (!make)
		return NULL;
	struct lset *e = calloc(1, sizeof(*e) + len);
	if (!e)
		return NULL;
	e->hash = h;
	e->key_len = len;
	memcpy(e->key, key, len);
	e->next = *b;
	*b = e;
	l->n++;
	return e;
}

/* Drops the sets whose every lease has expired, as Redis drops the key at
 * its last lease's expiry: at most once a second, all of them. */
static void sweep(struct leases *l, int64_t now_us)
{
	if (now_us - l->swept_us < SWEEP_US)
		return;
	l->swept_us = now_us;
	for (size_t i = 0; i < l->nbuckets; i++)
		for (struct lset **pp = &l->buckets[i]; *pp;) {
			struct lset *e = *pp;
			if (lease_set_last_us(&e->set) <= now_us) {
				*pp = e->next;
				stats.leases[STATS_LEASE_EXPIRED] += e->set.n;
				lease_set_free(&e->set);
				free(e);
				l->n--;
			} else {
				pp = &e->next;
			}
		}
}

static int memory_apply(struct leases *l, const char *key, size_t klen, enum lease_op op,
			const char *member, int64_t cost, int64_t limit, int64_t lease_ms,
			struct lease_result *out)
{
	int64_t now = (int64_t)clock_mono_us();
	sweep(l, now);
	struct lset *e = find(l, key, klen, op == LEASE_ACQUIRE);
	if (!e) {
		if (op == LEASE_ACQUIRE)
			return -1;
		struct lease_set none = {0};
		return lease_apply(&none, op, member, cost, limit, lease_ms, now, out);
	}
	return lease_apply(&e->set, op, member, cost, limit, lease_ms, now, out);
}

/* ---- answers */

static const char *op_arg(enum lease_op op)
{
	switch (op) {
	case LEASE_ACQUIRE:
		return "a";
	case LEASE_RELEASE:
		return "r";
	case LEASE_RENEW:
		return "n";
	case LEASE_PEEK:
		return "p";
	case LEASE_RESET:
		return "x";
	}
	return "?";
}

/* What a request left for its answer. */
struct call {
	struct cmd_slot *slot; /* NULL: detached (a closed connection's release) */
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

static void answer(struct call *c, const struct lease_result *r)
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
			decide_answer(slot, cfg, c->p, STATS_FROM_STORE, 1, r->limit, r->remaining,
				      0, r->ms);
			return;
		}
		if (c->op == LEASE_RENEW) {
			decide_error(slot, CMD_ERR_NO_LEASE,
				     "lease not held: released, expired or never taken");
			return;
		}
		decide_answer(slot, cfg, c->p, STATS_FROM_STORE, 0, r->limit, r->remaining, r->ms,
			      r->ms);
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
	case LEASE_PEEK:
		break;
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

static void call_done(void *arg, const redisReply *reply, const char *why)
{
	struct call *c = arg;
	struct lease_result r = {0};
	if (!reply) {
		failed(c, why ? why : "no answer");
	} else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 5) {
		failed(c, reply->type == REDIS_REPLY_ERROR ? reply->str : "not a lease answer");
	} else {
		long long v[5];
		for (size_t i = 0; i < 5; i++)
			v[i] = reply->element[i]->type == REDIS_REPLY_INTEGER
				       ? reply->element[i]->integer
				       : 0;
		r.ok = v[0] == 1;
		r.limit = v[1];
		r.remaining = v[2];
		r.ms = v[3];
		r.expired = v[4];
		/* granted, but the replicas did not take it (redis.wait_replicas):
		 * a failover could lose the lease; a refusal stands */
		if (why && r.ok) {
			stats.store_failures[STORE_ERROR_REPLICAS]++;
			failed(c, why);
		} else {
			answer(c, &r);
		}
	}
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
	if (store_local(env->store)) {
		struct lease_result r;
		if (!env->leases || memory_apply(env->leases, key, klen, c->op, member, cost, limit,
						 lease_ms, &r) < 0) {
			if (c->slot)
				decide_error(c->slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
		} else {
			answer(c, &r);
		}
		free(c);
		return;
	}
	char scost[24], slimit[24], slease[24];
	snprintf(scost, sizeof(scost), "%lld", (long long)cost);
	snprintf(slimit, sizeof(slimit), "%lld", (long long)limit);
	snprintf(slease, sizeof(slease), "%lld", (long long)lease_ms);
	const char *op = op_arg(c->op);
	const char *argv[8] = {key, "0", "lease", op, member, scost, slimit, slease};
	size_t argl[8] = {klen,		 1, 5, 1, strlen(member), strlen(scost), strlen(slimit),
			  strlen(slease)};
	struct store_call sc = {
		.key = key,
		.key_len = klen,
		.script = 1,
		.argc = 8,
		.argv = argv,
		.argvlen = argl,
		.timeout_ms = cfg->redis.timeout_ms,
		/* a lease taken or extended is what a failover must not lose
		 * (redis.wait_replicas); a release lost only holds one longer */
		.durable = c->op == LEASE_ACQUIRE || c->op == LEASE_RENEW,
	};
	store_call(env->store, &sc, call_done, c);
}

void leases_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		    const struct policy *p, struct cmd_slot *slot)
{
	struct call *c = calloc(1, sizeof(*c));
	if (!c || !env->leases) {
		free(c);
		decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
		return;
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
