/*
 * local.c - the local fallback (see local.h): a memory store of its own,
 * and the state of the switch between Redis and it.
 */
#include "local.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "policy.h"
#include "store.h"
#include "store_memory.h"

struct local {
	struct event_base *base;
	struct config_memory bounds;
	struct store *mem;
	int active;
	unsigned long long decided; /* locally, since the switch */
};

struct local *local_new(struct event_base *base, const struct config *cfg, char *err, size_t errlen)
{
	struct local *l = calloc(1, sizeof(*l));
	if (!l) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	l->base = base;
	l->bounds = cfg->memory;
	l->mem = store_memory_new(base, &l->bounds, err, errlen);
	if (!l->mem) {
		free(l);
		return NULL;
	}
	return l;
}

void local_free(struct local *l)
{
	if (!l)
		return;
	store_free(l->mem);
	free(l);
}

/* A share of n, never below 1: a limit cut to nothing would deny everyone. */
static int64_t share_of(int64_t n, double share)
{
	double v = floor((double)n * share);
	return v < 1 ? 1 : (int64_t)v;
}

static void cut(struct policy *dst, const struct policy *src, double share)
{
	*dst = *src;
	for (int i = 0; i < dst->nlimits; i++) {
		dst->limits[i].count = share_of(src->limits[i].count, share);
		dst->limits[i].capacity = share_of(src->limits[i].capacity, share);
	}
}

static void copy_result(void *arg, const struct store_result *res)
{
	*(struct store_result *)arg = *res;
}

void local_decide(struct local *l, const struct store_request *req, double share, const char *why,
		  struct store_result *res)
{
	if (!l->active) {
		log_warn("redis cannot decide (%s): deciding locally (on_store_error: local, "
			 "local_share %g) until it does again",
			 why ? why : "?", share);
		l->active = 1;
		l->decided = 0;
	}
	l->decided++;
	struct store_request r = *req;
	struct policy one;
	struct policy many[STORE_PAIRS_MAX];
	struct store_pair pairs[STORE_PAIRS_MAX];
	if (share < 1 && r.npairs > 0) {
		int n = r.npairs < STORE_PAIRS_MAX ? r.npairs : STORE_PAIRS_MAX;
		for (int i = 0; i < n; i++) {
			cut(&many[i], req->pairs[i].policy, share);
			pairs[i] = req->pairs[i];
			pairs[i].policy = &many[i];
		}
		r.npairs = n;
		r.pairs = pairs;
	} else if (share < 1 && r.policy) {
		cut(&one, req->policy, share);
		r.policy = &one;
	}
	store_result_reset(res);
	res->status = STORE_FAILED;
	res->detail = "no answer";
	/* the memory store answers inside store_submit */
	store_submit(l->mem, &r, copy_result, res);
}

void local_redis_back(struct local *l)
{
	if (!l || !l->active)
		return;
	struct store_memory_stats st = {0};
	store_memory_stats(l->mem, &st);
	log_info("redis decides again: %llu local decisions made meanwhile; their %zu keys "
		 "dropped",
		 l->decided, st.keys);
	char err[128];
	struct store *fresh = store_memory_new(l->base, &l->bounds, err, sizeof(err));
	if (fresh) {
		store_free(l->mem);
		l->mem = fresh;
	}
	l->active = 0;
}

int local_active(const struct local *l)
{
	return l && l->active;
}
