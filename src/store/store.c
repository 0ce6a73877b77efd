/* store.c - dispatches to a store backend (store_factory.c builds it); saved requests, health, names. */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poison.h"
#include "tls.h"

/* A saved request's pairs and their view, one block of n pairs; freed
 * blocks are kept for the next of the same n (three pairs are 3 KB, past
 * malloc's per-thread caches: Envoy's descriptors are one MALLOW each). The
 * daemon is one thread. A kept block is poisoned (poison.h) until reused.
 * Only blocks of up to PAIRS_SPARE_N pairs are kept: the rare larger ones
 * (up to 64 pairs, 66 KB) would hold megabytes idle. */
#define PAIRS_SPARE_MAX 64
#define PAIRS_SPARE_N 8
static struct store_saved_pair *pairs_spare[PAIRS_SPARE_N + 1][PAIRS_SPARE_MAX];
static int pairs_nspare[PAIRS_SPARE_N + 1];

_Static_assert(sizeof(struct store_saved_pair) % _Alignof(struct store_pair) == 0,
	       "the view follows the pairs, aligned");

static size_t pairs_size(int n)
{
	return (size_t)n * (sizeof(struct store_saved_pair) + sizeof(struct store_pair));
}

static struct store_saved_pair *pairs_alloc(int n)
{
	if (n <= PAIRS_SPARE_N && pairs_nspare[n] > 0) {
		struct store_saved_pair *p = pairs_spare[n][--pairs_nspare[n]];
		RL_UNPOISON(p, pairs_size(n));
		return p;
	}
	return malloc(pairs_size(n));
}

static void pairs_free(struct store_saved_pair *p, int n)
{
	if (p && n > 0 && n <= PAIRS_SPARE_N && pairs_nspare[n] < PAIRS_SPARE_MAX) {
		RL_POISON(p, pairs_size(n));
		pairs_spare[n][pairs_nspare[n]++] = p;
	} else {
		free(p);
	}
}

int store_request_save(struct store_saved_request *sv, const struct store_request *req)
{
	sv->op = req->op;
	sv->cost = req->cost;
	sv->wait_ms = req->op == STORE_ALLOW && req->npairs <= 0 ? req->wait_ms : 0;
	sv->block_want = req->op == STORE_ALLOW && req->npairs <= 0 && sv->wait_ms == 0
				 ? req->block_want
				 : 0;
	sv->block_ttl_ms = req->block_ttl_ms;
	sv->eager = req->eager;
	sv->hold_nonce = req->hold_nonce;
	sv->hold_ms = req->hold_ms;
	sv->actual = req->actual;
	sv->npairs = 0;
	sv->pairs = NULL;
	sv->view = NULL;
	sv->user_len =
		req->user ? (req->user_len < KEYS_USER_MAX ? req->user_len : KEYS_USER_MAX) : 0;
	sv->prefix_len = req->prefix_len < KEYS_PREFIX_MAX ? req->prefix_len : KEYS_PREFIX_MAX;
	sv->text = malloc(sv->user_len + sv->prefix_len + 1);
	if (!sv->text) {
		sv->user = sv->prefix = "";
		sv->user_len = sv->prefix_len = 0;
		return -1;
	}
	if (sv->user_len)
		memcpy(sv->text, req->user, sv->user_len);
	if (sv->prefix_len)
		memcpy(sv->text + sv->user_len, req->prefix, sv->prefix_len);
	sv->user = sv->text;
	sv->prefix = sv->text + sv->user_len;
	if (req->policy)
		sv->policy = *req->policy;
	if (req->npairs <= 0)
		return 0;
	int n = req->npairs < STORE_PAIRS_MAX ? req->npairs : STORE_PAIRS_MAX;
	sv->pairs = pairs_alloc(n);
	if (!sv->pairs) {
		store_request_release(sv);
		return -1;
	}
	sv->view = (struct store_pair *)(sv->pairs + n);
	for (int i = 0; i < n; i++) {
		struct store_saved_pair *sp = &sv->pairs[i];
		const struct store_pair *p = &req->pairs[i];
		sp->policy = *p->policy;
		sp->shadow = p->shadow;
		sp->user_len = p->user_len < sizeof(sp->user) ? p->user_len : sizeof(sp->user);
		memcpy(sp->user, p->user, sp->user_len);
		sv->view[i] = (struct store_pair){
			.policy = &sp->policy,
			.user = sp->user,
			.user_len = sp->user_len,
			.shadow = sp->shadow,
		};
	}
	sv->npairs = n;
	return 0;
}

void store_request_release(struct store_saved_request *sv)
{
	free(sv->text);
	sv->text = NULL;
	sv->user = sv->prefix = "";
	sv->user_len = sv->prefix_len = 0;
	pairs_free(sv->pairs, sv->npairs);
	sv->pairs = NULL;
	sv->view = NULL;
	sv->npairs = 0;
}

struct store_request store_request_load(const struct store_saved_request *sv, int64_t timeout_ms)
{
	struct store_request req = {
		.op = sv->op,
		.policy = &sv->policy,
		.prefix = sv->prefix,
		.prefix_len = sv->prefix_len,
		.user = sv->user,
		.user_len = sv->user_len,
		.cost = sv->cost,
		.timeout_ms = timeout_ms,
		.wait_ms = sv->wait_ms,
		.block_want = sv->block_want,
		.block_ttl_ms = sv->block_ttl_ms,
		.hold_nonce = sv->hold_nonce,
		.hold_ms = sv->hold_ms,
		.actual = sv->actual,
		.npairs = sv->npairs,
		.pairs = sv->view,
	};
	return req;
}

void store_submit(struct store *s, const struct store_request *req, store_done_fn *done, void *arg)
{
	s->ops->submit(s, req, done, arg);
}

void store_call(struct store *s, const struct store_call *c, store_call_fn *done, void *arg)
{
	s->ops->call(s, c, done, arg);
}

int store_multi(const struct store *s)
{
	return s->ops->multi;
}

size_t store_pending(const struct store *s)
{
	return s->ops->pending(s);
}

unsigned long store_generation(const struct store *s)
{
	return s->ops->generation(s);
}

void store_watch_resets(struct store *s, const char *prefix, store_reset_fn *fn, void *arg)
{
	s->ops->watch_resets(s, prefix, fn, arg);
}

void store_health(const struct store *s, struct store_health *h)
{
	memset(h, 0, sizeof(*h));
	store_health_add(s, h);
}

enum store_verdict store_verdict(const struct store *s, enum policy_on_error mode, int local_active,
				 const char **why, const char **refusal)
{
	struct store_health h;
	store_health(s, &h);
	*why = "";
	*refusal = h.refusing ? h.refusal : NULL;
	if (h.conns_up == 0 && h.down_reason && h.down_reason[0])
		*refusal = h.down_reason;
	if (h.memory)
		return STORE_VERDICT_OK;
	if (h.conns_up == 0)
		*why = "redis unavailable";
	else if (h.refusing)
		*why = "redis refuses decisions";
	else if (local_active)
		*why = "redis does not answer in time";
	else
		return STORE_VERDICT_OK;
	if (mode == POLICY_ON_ERROR_LOCAL)
		return STORE_VERDICT_DEGRADED;
	/* without local, an answer in time is up to each request's deadline */
	return local_active && h.conns_up && !h.refusing ? STORE_VERDICT_OK : STORE_VERDICT_DOWN;
}

void store_health_add(const struct store *s, struct store_health *h)
{
	s->ops->health(s, h);
}

int store_resets_followed(const struct store *s)
{
	return s->ops->resets_followed(s);
}

void store_free(struct store *s)
{
	if (!s)
		return;
	struct tls_client *tls = s->tls;
	s->ops->free(s);
	tls_client_unref(tls); /* after: the backend's connections held their own */
}

const char *store_status_name(enum store_status st)
{
	switch (st) {
	case STORE_OK:
		return "ok";
	case STORE_TIMEOUT:
		return "timeout";
	case STORE_UNAVAILABLE:
		return "unavailable";
	case STORE_OVERLOAD:
		return "overload";
	case STORE_FAILED:
		return "failed";
	}
	return "?";
}

const char *store_error_name(enum store_error e)
{
	switch (e) {
	case STORE_ERROR_NONE:
		return "none";
	case STORE_ERROR_NOSCRIPT:
		return "noscript";
	case STORE_ERROR_NOPERM:
		return "noperm";
	case STORE_ERROR_AUTH:
		return "auth";
	case STORE_ERROR_READONLY:
		return "readonly";
	case STORE_ERROR_MASTERDOWN:
		return "masterdown";
	case STORE_ERROR_MOVED:
		return "moved";
	case STORE_ERROR_ASK:
		return "ask";
	case STORE_ERROR_TRYAGAIN:
		return "tryagain";
	case STORE_ERROR_CLUSTERDOWN:
		return "clusterdown";
	case STORE_ERROR_WRONG_NODE:
		return "wrong_node";
	case STORE_ERROR_OOM:
		return "oom";
	case STORE_ERROR_BUSY:
		return "busy";
	case STORE_ERROR_LOADING:
		return "loading";
	case STORE_ERROR_KEY:
		return "key";
	case STORE_ERROR_SCRIPT:
		return "script";
	case STORE_ERROR_REPLY:
		return "reply";
	case STORE_ERROR_REPLICAS:
		return "replicas";
	case STORE_ERROR_OTHER:
	case STORE_ERROR_N:
		break;
	}
	return "other";
}
