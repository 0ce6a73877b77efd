/*
 * store_memory.c - the memory store (see store_memory.h).
 *
 * One table of keys named as in Redis (keys.c), each with its limit's state
 * (limiter.c), found through a keyed hash (clients choose the users, so
 * they must not be able to pick colliding ones). Beside the table: a list
 * from the least to the most recently used key, for eviction at max_keys,
 * and a heap by expiry, so a key goes when the script's PEXPIRE would have
 * dropped it in Redis. Expired keys are found both on access and by a
 * sweep; decisions never depend on it (an expired state and no state
 * decide alike), only memory does.
 *
 * A decision is made inside store_submit: no I/O, nothing to wait for.
 */
#include "store_memory.h"

#include <event2/event.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "config.h"
#include "keys.h"
#include "lease_table.h"
#include "limiter.h"
#include "log.h"
#include "policy.h"
#include "hashkey.h"
#include "siphash.h"
#include "store.h"
#include "store_lease.h"
#include "store_override.h"

#define BUCKETS_MIN 1024
/* The sweep: how often at most, and how many keys one turn drops. */
#define SWEEP_MAX_US 100000
#define SWEEP_BUDGET 10000
/* Eviction warnings: one per this many us, with the count since the last. */
#define EVICT_LOG_US 10000000
/* The most keys one decision touches: every pair's limits and ban. */
#define DECISION_KEYS (STORE_PAIRS_MAX * (POLICY_MAX_LIMITS + 1))

struct mentry {
	struct mentry *hnext;	      /* same bucket */
	struct mentry *older, *newer; /* use order */
	size_t heap_at;		      /* index in the expiry heap */
	uint64_t hash;
	struct limiter_state st;
	size_t key_len;
	char key[];
};

struct decision;

struct store_memory {
	struct store base;
	struct event_base *evb;
	struct event *sweep;
	struct mentry **buckets;
	size_t nbuckets; /* a power of 2 */
	struct mentry *oldest, *newest;
	struct mentry **heap; /* by st.expire_us, soonest first */
	size_t n, cap_heap, max_keys, bytes;
	uint8_t seed[16];
	store_memory_clock_fn *clock;
	void *clock_arg;
	int64_t wall_offset_us; /* the wall clock minus the monotonic one, at start */
	unsigned long long evicted, expired, failures, evicted_logged;
	int64_t evict_logged_us;
	/* one decision's keys and states (some 150 KB: every pair's limits,
	 * with room for the longest keys), made once, reused by each
	 * decision: decisions never nest (done is called after) */
	struct decision *d;
	struct lease_table *leases; /* concurrency leases (ACQUIRE...) */
};

static const struct store_ops memory_ops;

static struct store_memory *mem_of(struct store *s)
{
	return (struct store_memory *)s;
}

static int64_t mem_now(const struct store_memory *s)
{
	if (s->clock)
		return s->clock(s->clock_arg);
	return (int64_t)clock_mono_us() + s->wall_offset_us;
}

static size_t entry_bytes(const struct mentry *e)
{
	return sizeof(*e) + e->key_len + e->st.caplog * sizeof(int64_t) +
	       e->st.capholds * sizeof(struct limiter_hold);
}

/* ---- the expiry heap ---- */

static int heap_before(const struct store_memory *s, size_t a, size_t b)
{
	return s->heap[a]->st.expire_us < s->heap[b]->st.expire_us;
}

static void heap_swap(struct store_memory *s, size_t a, size_t b)
{
	struct mentry *t = s->heap[a];
	s->heap[a] = s->heap[b];
	s->heap[b] = t;
	s->heap[a]->heap_at = a;
	s->heap[b]->heap_at = b;
}

static void heap_fix(struct store_memory *s, size_t i)
{
	while (i > 0 && heap_before(s, i, (i - 1) / 2)) {
		heap_swap(s, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < s->n && heap_before(s, l, m))
			m = l;
		if (r < s->n && heap_before(s, r, m))
			m = r;
		if (m == i)
			return;
		heap_swap(s, i, m);
		i = m;
	}
}

static void heap_remove(struct store_memory *s, struct mentry *e)
{
	size_t i = e->heap_at;
	s->n--;
	if (i != s->n) {
		s->heap[i] = s->heap[s->n];
		s->heap[i]->heap_at = i;
		heap_fix(s, i);
	}
}

/* ---- the table ---- */

static uint64_t key_hash(const struct store_memory *s, const char *key, size_t len)
{
	return siphash24(s->seed, key, len);
}

static struct mentry **bucket_of(struct store_memory *s, uint64_t hash)
{
	return &s->buckets[hash & (s->nbuckets - 1)];
}

static void lru_unlink(struct store_memory *s, struct mentry *e)
{
	if (e->older)
		e->older->newer = e->newer;
	else
		s->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else
		s->newest = e->older;
	e->older = e->newer = NULL;
}

static void lru_push(struct store_memory *s, struct mentry *e)
{
	e->older = s->newest;
	e->newer = NULL;
	if (s->newest)
		s->newest->newer = e;
	else
		s->oldest = e;
	s->newest = e;
}

static void entry_remove(struct store_memory *s, struct mentry *e)
{
	struct mentry **pp = bucket_of(s, e->hash);
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(s, e);
	heap_remove(s, e); /* one key fewer */
	s->bytes -= entry_bytes(e);
	limiter_state_free(&e->st);
	free(e);
}

static struct mentry *entry_find(struct store_memory *s, const char *key, size_t len, uint64_t hash,
				 int64_t now)
{
	for (struct mentry *e = *bucket_of(s, hash); e; e = e->hnext) {
		if (e->hash != hash || e->key_len != len || memcmp(e->key, key, len) != 0)
			continue;
		if (e->st.expire_us <= now) { /* Redis would not have it any more */
			s->expired++;
			entry_remove(s, e);
			return NULL;
		}
		return e;
	}
	return NULL;
}

/* Doubles the buckets when keys outnumber them; failing that, chains grow. */
static void table_grow(struct store_memory *s)
{
	if (s->n < s->nbuckets)
		return;
	size_t nb = s->nbuckets * 2;
	struct mentry **b = calloc(nb, sizeof(*b));
	if (!b)
		return;
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct mentry *e = s->buckets[i];
		while (e) {
			struct mentry *next = e->hnext;
			e->hnext = b[e->hash & (nb - 1)];
			b[e->hash & (nb - 1)] = e;
			e = next;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->nbuckets = nb;
}

static void evict_oldest(struct store_memory *s, int64_t now)
{
	entry_remove(s, s->oldest);
	s->evicted++;
	/* a cap reached is an operator's business, but not once per key */
	if (!s->evict_logged_us || now - s->evict_logged_us >= EVICT_LOG_US) {
		log_warn("memory store: max_keys (%zu) reached: %llu least recently used keys "
			 "dropped (their limits start afresh)",
			 s->max_keys, s->evicted - s->evicted_logged);
		s->evict_logged_us = now;
		s->evicted_logged = s->evicted;
	}
}

/* Keeps st (moved in) under key; -1 when out of memory (st is freed). */
static int entry_insert(struct store_memory *s, const char *key, size_t len, uint64_t hash,
			struct limiter_state *st, int64_t now)
{
	while (s->n >= s->max_keys && s->oldest)
		evict_oldest(s, now);
	if (s->n == s->cap_heap) {
		size_t cap = s->cap_heap ? s->cap_heap * 2 : 1024;
		struct mentry **h = realloc(s->heap, cap * sizeof(*h));
		if (!h)
			goto fail;
		s->heap = h;
		s->cap_heap = cap;
	}
	struct mentry *e = malloc(sizeof(*e) + len);
	if (!e)
		goto fail;
	memset(e, 0, sizeof(*e));
	memcpy(e->key, key, len);
	e->key_len = len;
	e->hash = hash;
	e->st = *st;
	struct mentry **b = bucket_of(s, hash);
	e->hnext = *b;
	*b = e;
	lru_push(s, e);
	e->heap_at = s->n;
	s->heap[s->n++] = e;
	heap_fix(s, e->heap_at);
	s->bytes += entry_bytes(e);
	table_grow(s);
	return 0;
fail:
	limiter_state_free(st);
	return -1;
}

/* ---- decisions ---- */

/* One key of a decision: its entry (NULL: none yet) and a working copy of
 * its state, for limiter.c's arrays. */
struct dkey {
	struct mentry *e;
	uint64_t hash;
	size_t len;
	char name[KEYS_MAX];
};

struct decision {
	int ngroups; /* loaded so far */
	const struct policy *policies[STORE_PAIRS_MAX];
	int shadow[STORE_PAIRS_MAX];
	/* per group its limits', its ban's and (a hold's op) its holds' */
	struct limiter_state st[STORE_PAIRS_MAX][POLICY_MAX_LIMITS + 2];
	struct limiter_state *states[STORE_PAIRS_MAX];
	struct dkey keys[STORE_PAIRS_MAX][POLICY_MAX_LIMITS + 2];
	int nkeys[STORE_PAIRS_MAX]; /* loaded so far */
	struct limiter_group groups[STORE_PAIRS_MAX];
	struct limiter_key keys_state[POLICY_MAX_LIMITS + 1]; /* a STATE's */
};

/* Why decide() failed. */
#define DECIDE_NOMEM (-1)
#define DECIDE_REPEATED_KEY (-2)

/* 0, or DECIDE_REPEATED_KEY when a key repeats within the decision: limiter.c would then
 * hold two copies of one state (the configuration refuses two limits with
 * one window, and a pair given twice, so this is a bug caught, not a
 * decision). */
static int load_group(struct store_memory *s, struct decision *d, int g, const char *prefix,
		      size_t prefix_len, const struct policy *p, const char *user, size_t user_len,
		      int64_t now, int holds)
{
	d->policies[g] = p;
	d->states[g] = d->st[g];
	d->nkeys[g] = 0;
	int n = policy_nkeys(p);
	for (int i = 0; i < n + holds; i++) {
		struct dkey *k = &d->keys[g][i];
		k->len = keys_build(k->name, prefix, prefix_len, p, i < n ? i : KEYS_HOLDS_INDEX,
				    user, user_len);
		k->hash = key_hash(s, k->name, k->len);
		k->e = NULL;
		memset(&d->st[g][i], 0, sizeof(d->st[g][i]));
		for (int h = 0; h <= g; h++)
			for (int j = 0; j < (h < g ? d->nkeys[h] : i); j++)
				if (d->keys[h][j].hash == k->hash && d->keys[h][j].len == k->len &&
				    memcmp(d->keys[h][j].name, k->name, k->len) == 0)
					return DECIDE_REPEATED_KEY;
		k->e = entry_find(s, k->name, k->len, k->hash, now);
		if (k->e) {
			d->st[g][i] = k->e->st; /* the log moves with it, back after */
			/* the most recently used now: a key this decision inserts
			 * may evict the oldest, never one of the decision's own
			 * (max_keys is at least 1000, a decision has at most 72) */
			lru_unlink(s, k->e);
			lru_push(s, k->e);
		}
		d->nkeys[g] = i + 1;
	}
	return 0;
}

/* Writes the states back: to their entries, or new ones for keys written. */
static int store_group(struct store_memory *s, struct decision *d, int g, int64_t now)
{
	int rc = 0;
	for (int i = 0; i < d->nkeys[g]; i++) {
		struct dkey *k = &d->keys[g][i];
		struct limiter_state *st = &d->st[g][i];
		if (k->e) {
			int64_t was = k->e->st.expire_us;
			s->bytes -= entry_bytes(k->e);
			k->e->st = *st;
			s->bytes += entry_bytes(k->e);
			if (st->expire_us != was)
				heap_fix(s, k->e->heap_at);
		} else if (st->expire_us > now) {
			if (entry_insert(s, k->name, k->len, k->hash, st, now) < 0)
				rc = -1;
		} else {
			limiter_state_free(st);
		}
	}
	return rc;
}

static void fill_result(struct store_result *res, const struct limiter_result *r)
{
	res->status = STORE_OK;
	res->allowed = r->allowed;
	res->limit = r->limit;
	res->remaining = r->remaining;
	res->retry_after_ms = r->retry_after_ms;
	res->reset_ms = r->reset_ms;
}

static int decide_reset(struct store_memory *s, const struct store_request *req, int64_t now,
			struct store_result *res)
{
	char key[KEYS_MAX];
	for (int i = 0; i < policy_nkeys(req->policy); i++) {
		size_t len = keys_build(key, req->prefix, req->prefix_len, req->policy, i,
					req->user, req->user_len);
		struct mentry *e = entry_find(s, key, len, key_hash(s, key, len), now);
		if (e)
			entry_remove(s, e);
	}
	res->status = STORE_OK;
	res->allowed = 1;
	return 0;
}

static int decide(struct store_memory *s, const struct store_request *req, int64_t now,
		  struct store_result *res)
{
	if (req->op == STORE_RESET)
		return decide_reset(s, req, now, res);
	struct decision *d = s->d;
	d->ngroups = 0;
	enum limiter_op op = req->op == STORE_ALLOW    ? LIMITER_ALLOW
			     : req->op == STORE_CHARGE ? LIMITER_CHARGE
						       : LIMITER_PEEK;
	struct limiter_result r;
	int rc = 0;
	if (req->npairs > 0) {
		int n = req->npairs < STORE_PAIRS_MAX ? req->npairs : STORE_PAIRS_MAX;
		for (int g = 0; g < n && rc == 0; g++) {
			const struct store_pair *pp = &req->pairs[g];
			d->shadow[g] = pp->shadow;
			d->ngroups++;
			rc = load_group(s, d, g, req->prefix, req->prefix_len, pp->policy, pp->user,
					pp->user_len, now, 0);
		}
		if (rc == 0)
			rc = limiter_decide_all(d->policies, d->shadow, d->states, d->ngroups, op,
						req->cost, now, &r, &res->pair, &res->shadow_pair,
						d->groups);
	} else {
		int hold =
			req->op == STORE_HOLD || req->op == STORE_SETTLE || req->op == STORE_CANCEL;
		d->ngroups = 1;
		rc = load_group(s, d, 0, req->prefix, req->prefix_len, req->policy, req->user,
				req->user_len, now, hold);
		struct limiter_state *hs = &d->st[0][policy_nkeys(req->policy)];
		if (rc == 0 && req->op == STORE_HOLD)
			rc = limiter_hold(req->policy, d->st[0], hs, req->cost, req->hold_nonce,
					  req->hold_ms * 1000, now, &r);
		else if (rc == 0 && hold) {
			rc = limiter_settle(req->policy, d->st[0], hs, req->hold_nonce,
					    req->op == STORE_SETTLE ? req->actual : -1, now, &r);
			res->no_hold = rc == 1;
			if (rc == 1) { /* the script's -3 */
				rc = 0;
				r = (struct limiter_result){0};
			}
		} else if (rc == 0 && req->op == STORE_STATE) {
			rc = limiter_look(req->policy, d->st[0], now, &r, d->keys_state);
		} else if (rc == 0)
			rc = op == LIMITER_ALLOW && req->wait_ms > 0
				     ? limiter_decide_wait(req->policy, d->st[0], req->cost, now,
							   req->wait_ms * 1000, &r)
				     : limiter_decide(req->policy, d->st[0], op, req->cost, now,
						      &r);
	}
	/* what was loaded goes back, decided or not */
	for (int g = 0; g < d->ngroups; g++)
		if (store_group(s, d, g, now) < 0 && rc == 0)
			rc = DECIDE_NOMEM;
	if (rc == 0) {
		fill_result(res, &r);
		for (int g = 0; req->npairs > 0 && g < d->ngroups; g++)
			res->groups[g] = (struct store_group){
				d->groups[g].ok, d->groups[g].remaining, d->groups[g].reset_ms};
		res->ngroups = req->npairs > 0 ? d->ngroups : 0;
		if (req->npairs == 0 && req->op == STORE_STATE) {
			res->nkeys = policy_nkeys(req->policy);
			for (int i = 0; i < res->nkeys; i++) {
				const struct limiter_key *k = &d->keys_state[i];
				res->keys[i] = (struct store_key){
					k->used, k->remaining, k->reset_ms, k->start_ms, k->end_ms};
			}
		}
	}
	return rc;
}

static void mem_submit(struct store *base, const struct store_request *req, store_done_fn *done,
		       void *arg)
{
	struct store_memory *s = mem_of(base);
	/* (decide() fills the groups as it tells them) */
	struct store_result res;
	store_result_reset(&res);
	int rc = decide(s, req, mem_now(s), &res);
	if (rc == DECIDE_REPEATED_KEY) {
		res = (struct store_result){.status = STORE_FAILED,
					    .error = STORE_ERROR_KEY,
					    .detail = "one key twice in a decision"};
	} else if (rc < 0) {
		s->failures++;
		log_error("memory store: out of memory: a decision was not made");
		res = (struct store_result){.status = STORE_FAILED,
					    .error = STORE_ERROR_OTHER,
					    .detail = "out of memory"};
	}
	res.memory = 1;
	done(arg, &res);
}

/* ---- expiry sweep ---- */

static void sweep_arm(struct store_memory *s, int64_t now)
{
	int64_t us = SWEEP_MAX_US;
	if (s->n && s->heap[0]->st.expire_us - now < us)
		us = s->heap[0]->st.expire_us - now;
	if (us < 1000)
		us = 1000;
	struct timeval tv = {.tv_sec = (time_t)(us / 1000000),
			     .tv_usec = (suseconds_t)(us % 1000000)};
	evtimer_add(s->sweep, &tv);
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct store_memory *s = arg;
	int64_t now = mem_now(s);
	for (int i = 0; i < SWEEP_BUDGET && s->n && s->heap[0]->st.expire_us <= now; i++) {
		s->expired++;
		entry_remove(s, s->heap[0]);
	}
	sweep_arm(s, now);
}

/* ---- the rest of the store interface ---- */

static void mem_free(struct store *base)
{
	struct store_memory *s = mem_of(base);
	while (s->oldest)
		entry_remove(s, s->oldest);
	if (s->sweep)
		event_free(s->sweep);
	free(s->heap);
	free(s->buckets);
	free(s->d);
	lease_table_free(s->leases);
	free(s);
}

static size_t mem_pending(const struct store *s)
{
	(void)s;
	return 0; /* answered inside store_submit */
}

static unsigned long mem_generation(const struct store *s)
{
	(void)s;
	return 0; /* nothing can lose the state but the daemon's own end */
}

static void mem_watch_resets(struct store *s, const char *prefix, store_reset_fn *fn, void *arg)
{
	/* no other daemon shares this state: no notices to follow */
	(void)s;
	(void)prefix;
	(void)fn;
	(void)arg;
}

static int mem_resets_followed(const struct store *s)
{
	/* the deny cache would save nothing: a decision here costs a lookup */
	(void)s;
	return 0;
}

static void mem_health(const struct store *base, struct store_health *h)
{
	const struct store_memory *s = (const struct store_memory *)base;
	h->memory = 1;
	h->memory_keys = s->n;
	h->memory_bytes = s->bytes;
	h->memory_evicted = s->evicted;
	h->memory_expired = s->expired;
}

static void mem_call(struct store *s, const struct store_call *c, store_call_fn *done, void *arg)
{
	(void)s;
	(void)c;
	done(arg, NULL, "no redis: store: memory");
}

/* Leases on the monotonic clock (clock.h), not the decisions': their
 * expiries align with no window. */
static void mem_lease(struct store *base, const struct store_lease_request *req,
		      store_lease_fn *done, void *arg)
{
	struct store_memory *s = mem_of(base);
	struct store_lease_result r = {.memory = 1};
	if (lease_table_apply(s->leases, req->key, req->key_len, req->op, req->member, req->cost,
			      req->limit, req->lease_ms, (int64_t)clock_mono_us(), &r.lease) < 0) {
		r.why = "out of memory";
		r.out_of_memory = 1;
	}
	done(arg, &r);
}

/* Run-time overrides live in the caller's mirror alone (nobody shares
 * them, gone when the daemon stops): nothing to read, and a PUT answered
 * at once with the value Redis's script would keep, until in the wall
 * clock's ms (what the mirror's expiries compare with). */
static void mem_override(struct store *base, const struct store_override_request *req,
			 store_override_fn *done, void *arg)
{
	(void)base;
	struct store_override_result res = {.status = STORE_OVERRIDE_KEPT};
	if (req->op != STORE_OVERRIDE_PUT) {
		done(arg, &res);
		return;
	}
	struct store_override_field f = {.field = req->field, .field_len = req->field_len};
	char *value = NULL;
	if (req->spec) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
		size_t cap = 24 + 1 + req->spec_len + 1;
		if (!(value = malloc(cap))) {
			res = (struct store_override_result){.status = STORE_OVERRIDE_DOWN,
							     .why = "out of memory"};
			done(arg, &res);
			return;
		}
		int vl = snprintf(value, cap, "%lld %.*s",
				  (long long)(req->ttl_ms > 0 ? now_ms + req->ttl_ms : 0),
				  (int)req->spec_len, req->spec);
		f.value = value;
		f.value_len = (size_t)vl;
	}
	res = (struct store_override_result){.status = STORE_OVERRIDE_OK, .n = 1, .fields = &f};
	done(arg, &res);
	free(value);
}

static const struct store_ops memory_ops = {
	.submit = mem_submit,
	.free = mem_free,
	.pending = mem_pending,
	.generation = mem_generation,
	.watch_resets = mem_watch_resets,
	.resets_followed = mem_resets_followed,
	.health = mem_health,
	.call = mem_call,
	.lease = mem_lease,
	.override = mem_override,
	.multi = 1,
};

static int64_t wall_offset_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 - (int64_t)clock_mono_us();
}

struct store *store_memory_new(struct event_base *base, const struct config_memory *cfg, char *err,
			       size_t errlen)
{
	struct store_memory *s = calloc(1, sizeof(*s));
	if (!s)
		goto oom;
	s->base.ops = &memory_ops;
	s->evb = base;
	s->max_keys = (size_t)cfg->max_keys;
	if (s->max_keys < DECISION_KEYS) /* see load_group */
		s->max_keys = DECISION_KEYS;
	s->nbuckets = BUCKETS_MIN;
	s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
	s->sweep = evtimer_new(base, sweep_cb, s);
	s->d = malloc(sizeof(*s->d));
	s->leases = lease_table_new();
	if (!s->buckets || !s->sweep || !s->d || !s->leases)
		goto oom;
	hashkey_new(s->seed);
	s->wall_offset_us = wall_offset_us();
	sweep_arm(s, mem_now(s));
	return &s->base;
oom:
	snprintf(err, errlen, "out of memory");
	if (s)
		mem_free(&s->base);
	return NULL;
}

void store_memory_set_clock(struct store *base, store_memory_clock_fn *fn, void *arg)
{
	struct store_memory *s = mem_of(base);
	s->clock = fn;
	s->clock_arg = arg;
}

int store_memory_stats(const struct store *base, struct store_memory_stats *st)
{
	if (base->ops != &memory_ops)
		return -1;
	const struct store_memory *s = (const struct store_memory *)base;
	*st = (struct store_memory_stats){s->n, s->bytes, s->evicted, s->expired, s->failures};
	return 0;
}
