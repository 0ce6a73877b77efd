/*
 * store_cluster.c - decisions in a Redis Cluster: the client side of the
 * cluster protocol, which hiredis 0.14 lacks, on top of one store_redis
 * pool per master.
 *
 *   request -> slot = CRC16(tag) mod 16384 -> slot map -> master's store
 *                 ^                                            |
 *                 +-- MOVED (map updated), ASK (once, ASKING), |
 *                     TRYAGAIN/CLUSTERDOWN/node down (backoff) +
 *
 * Every retry happens inside the request's own deadline; what cannot be
 * decided in time gets the store's failure and so on_store_error. The slot
 * map is read with CLUSTER SLOTS at start and again, in the background and at
 * most every REFRESH_MIN_MS, after a redirect or a failing node.
 */
#include "store_cluster.h"

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "addr.h"
#include "clock.h"
#include "config.h"
#include "keys.h"
#include "log.h"
#include "policy.h"
#include "redis_conn.h"
#include "rlink.h"
#include "store.h"
#include "store_redis.h"
#include "store_reply.h"
#include "store_retry.h"
#include "tls.h"

#define NSLOTS 16384
#define MAX_NODES 256
_Static_assert(MAX_NODES >= CONFIG_CLUSTER_SEEDS_MAX, "every seed is a node");
#define REFRESH_MIN_MS 100
#define MAX_ATTEMPTS 16
#define RETRY_MIN_MS 5
#define RETRY_MAX_MS 200

struct cnode {
	char *addr; /* "host:port" */
	struct store *st;
};

struct store_cluster {
	struct store base;
	struct event_base *evbase;
	struct config_redis cfg; /* credentials and pool size for new nodes */
	struct tls_client *tls;	 /* to every node, NULL for plain TCP */
	char **seeds;
	size_t nseeds;
	struct cnode nodes[MAX_NODES];
	int nnodes;
	int16_t slots[NSLOTS]; /* node index, or -1 before the map says */
	/* A slot whose request waits to be retried holds back later requests
	 * for it, so decisions on one key keep their order across retries:
	 * held[slot] is that FIFO (its head owns the timer). */
	struct creq *held[NSLOTS], *held_tail[NSLOTS];
	int have_map;
	/* CLUSTER SLOTS in the background */
	struct rlink *ctl;
	int ctl_next; /* which address to ask next (nodes, then seeds) */
	int refresh_wanted;
	uint64_t last_refresh_us;
	struct event *refresh_timer;
	size_t pending;
	int closing;
	/* RESET notices: one master's subscriber serves the whole cluster */
	int watch_node;
	unsigned long rehomed; /* the subscription moved: notices may have been missed */
	char *watch_prefix;
	store_reset_fn *watch_fn;
	void *watch_arg;
};

struct creq {
	struct store_cluster *c;
	store_done_fn *done;
	void *arg;
	uint64_t deadline_us;
	int attempts;
	int node;   /* where it went last */
	int asking; /* next attempt: ASKING on `node` */
	int alone;  /* next attempt: not batched, keys declared */
	unsigned slot;
	struct store_retry retry;
	struct creq *held_next; /* waiting behind an earlier request of its slot */
	struct store_saved_request sv;
};

static void cluster_refresh(struct store_cluster *c);
static void creq_send(struct creq *q);


/* ---- nodes ---- */

/* The node at addr (length len), created on first sight. -1 when full or out of memory. */
static int node_for(struct store_cluster *c, const char *addr, size_t len)
{
	for (int i = 0; i < c->nnodes; i++)
		if (strlen(c->nodes[i].addr) == len && memcmp(c->nodes[i].addr, addr, len) == 0)
			return i;
	if (c->nnodes == MAX_NODES)
		return -1;
	struct cnode *n = &c->nodes[c->nnodes];
	n->addr = strndup(addr, len);
	if (!n->addr)
		return -1;
	char err[256] = "";
	n->st = store_redis_new_node(c->evbase, &c->cfg, n->addr, c->tls, err, sizeof(err));
	if (!n->st) {
		log_error("redis cluster node %s: %s", n->addr, err);
		free(n->addr);
		return -1;
	}
	log_info("redis cluster: using node %s", n->addr);
	if (c->watch_prefix && c->watch_node < 0) {
		c->watch_node = c->nnodes;
		store_watch_resets(n->st, c->watch_prefix, c->watch_fn, c->watch_arg);
	}
	return c->nnodes++;
}

/* ---- requests ---- */

static void creq_free(struct creq *q)
{
	store_retry_free(&q->retry);
	store_request_release(&q->sv);
	q->c->pending--;
	free(q);
}

static void creq_finish(struct creq *q, const struct store_result *res)
{
	q->done(q->arg, res);
	creq_free(q);
}

static void creq_fail(struct creq *q, enum store_status st, const char *detail)
{
	struct store_result res = {.status = st, .detail = detail};
	creq_finish(q, &res);
}

/* The head of a slot's held FIFO is due: send it and everything behind it, in order. */
static void retry_cb(void *arg)
{
	struct creq *q = arg;
	struct store_cluster *c = q->c;
	unsigned slot = q->slot;
	struct creq *chain = c->held[slot];
	c->held[slot] = c->held_tail[slot] = NULL;
	while (chain) {
		struct creq *next = chain->held_next;
		chain->held_next = NULL;
		creq_send(chain);
		chain = next;
	}
}

static void hold(struct creq *q)
{
	struct store_cluster *c = q->c;
	q->held_next = NULL;
	if (c->held_tail[q->slot])
		c->held_tail[q->slot]->held_next = q;
	else
		c->held[q->slot] = q;
	c->held_tail[q->slot] = q;
}

/* Tries again after a backoff that still fits the deadline; else fails with res. */
static void creq_retry_later(struct creq *q, const struct store_result *res)
{
	int ms = store_retry_delay_ms(q->attempts, RETRY_MIN_MS, RETRY_MAX_MS, q->deadline_us);
	struct store_cluster *c = q->c;
	if (c->closing || q->attempts >= MAX_ATTEMPTS || ms < 0) {
		creq_finish(q, res);
		return;
	}
	if (c->held[q->slot]) { /* an earlier request waits already: go behind it */
		hold(q);
		return;
	}
	if (store_retry_after(&q->retry, c->evbase, ms) < 0) {
		creq_finish(q, res);
		return;
	}
	hold(q);
}

static void creq_done(void *arg, const struct store_result *res,
		      const struct store_node_redirect *where)
{
	struct creq *q = arg;
	struct store_cluster *c = q->c;
	/* lost after it was sent: it may have been applied, never twice */
	if (res->status == STORE_OK || c->closing || res->sent) {
		creq_finish(q, res);
		return;
	}
	q->attempts++;
	if (res->status != STORE_FAILED) {
		/* the node timed out or is unreachable: perhaps it is gone */
		cluster_refresh(c);
		creq_retry_later(q, res);
		return;
	}
	int node;
	switch (res->error) {
	case STORE_ERROR_MOVED:
		node = where ? node_for(c, where->to, strlen(where->to)) : -1;
		if (node < 0 || q->attempts >= MAX_ATTEMPTS) {
			creq_finish(q, res);
			return;
		}
		c->slots[where->slot] = (int16_t)node;
		cluster_refresh(c);
		creq_send(q);
		return;
	case STORE_ERROR_ASK:
		node = where ? node_for(c, where->to, strlen(where->to)) : -1;
		if (node < 0 || q->attempts >= MAX_ATTEMPTS) {
			creq_finish(q, res);
			return;
		}
		q->node = node;
		q->asking = 1;
		creq_send(q);
		return;
	case STORE_ERROR_WRONG_NODE:
		/* Batched with keys undeclared on a node that no longer has them:
		 * alone, Redis itself says where they are. */
		q->alone = 1;
		cluster_refresh(c);
		creq_send(q);
		return;
	case STORE_ERROR_TRYAGAIN:
	case STORE_ERROR_CLUSTERDOWN:
		creq_retry_later(q, res);
		return;
	default:
		creq_finish(q, res);
		return;
	}
}

static void creq_send(struct creq *q)
{
	struct store_cluster *c = q->c;
	uint64_t now = clock_mono_us();
	if (now >= q->deadline_us) {
		creq_fail(q, STORE_TIMEOUT, "redis cluster did not answer in time");
		return;
	}
	int node;
	if (q->asking) {
		node = q->node;
	} else {
		node = c->slots[q->slot];
		if (node < 0) /* no map yet: any node redirects us */
			node = c->nnodes ? (int)(q->slot % (unsigned)c->nnodes) : -1;
	}
	if (node < 0) {
		creq_fail(q, STORE_UNAVAILABLE, "no redis cluster node known");
		return;
	}
	q->node = node;
	struct store_request req =
		store_request_load(&q->sv, (int64_t)((q->deadline_us - now + 999) / 1000));
	enum store_node_send how = q->asking  ? STORE_NODE_ASKING
				   : q->alone ? STORE_NODE_ALONE
					      : STORE_NODE_BATCHED;
	q->asking = 0;
	store_redis_submit_node(c->nodes[node].st, &req, how, creq_done, q);
}

static void cluster_submit(struct store *base, const struct store_request *req, store_done_fn *done,
			   void *arg)
{
	struct store_cluster *c = (struct store_cluster *)base;
	if (c->closing) { /* asked by an answer cluster_free gives: its nodes go */
		struct store_result res = {.status = STORE_UNAVAILABLE, .detail = "shutting down"};
		done(arg, &res);
		return;
	}
	struct creq *q = calloc(1, sizeof(*q));
	if (!q) {
		struct store_result res = {.status = STORE_OVERLOAD, .detail = "out of memory"};
		done(arg, &res);
		return;
	}
	c->pending++;
	q->c = c;
	q->done = done;
	q->arg = arg;
	q->retry.fn = retry_cb;
	q->retry.arg = q;
	q->deadline_us = clock_mono_us() + (uint64_t)req->timeout_ms * 1000u;
	if (req->npairs > 0) { /* cluster_ops.multi is 0: callers ask pair by pair */
		struct store_result res = {.status = STORE_FAILED,
					   .error = STORE_ERROR_OTHER,
					   .detail = "a cluster decides one pair at a time"};
		c->pending--;
		free(q);
		done(arg, &res);
		return;
	}
	if (store_request_save(&q->sv, req) < 0) {
		struct store_result res = {.status = STORE_OVERLOAD, .detail = "out of memory"};
		creq_finish(q, &res);
		return;
	}
	char key[KEYS_MAX];
	size_t kl = keys_build(key, req->prefix, req->prefix_len, req->policy, 0, req->user,
			       req->user_len);
	q->slot = keys_slot(key, kl);
	if (c->closing) {
		creq_fail(q, STORE_UNAVAILABLE, "shutting down");
		return;
	}
	if (c->held[q->slot]) { /* keep its place behind an earlier request of the slot */
		hold(q);
		return;
	}
	creq_send(q);
}

/* ---- the slot map ---- */

static int ctl_next_addr(struct store_cluster *c, char *host, size_t hostcap, int *port)
{
	int total = c->nnodes + (int)c->nseeds;
	int i = c->ctl_next++ % total;
	return addr_split(i < c->nnodes ? c->nodes[i].addr : c->seeds[i - c->nnodes], host, hostcap,
			  port);
}

/* The RESET subscription lives on a master that serves slots: after a
 * failover, the dead master's store keeps trying to reconnect, so move it. */
static void rehome_watch(struct store_cluster *c)
{
	if (!c->watch_prefix || c->watch_node < 0)
		return;
	int owns = 0;
	for (int s = 0; s < NSLOTS && !owns; s++)
		owns = c->slots[s] == c->watch_node;
	if (owns)
		return;
	int to = c->slots[0] >= 0 ? c->slots[0] : -1;
	for (int s = 0; s < NSLOTS && to < 0; s++)
		to = c->slots[s];
	if (to < 0)
		return;
	log_info("redis cluster: RESET notices now from %s (was %s)", c->nodes[to].addr,
		 c->nodes[c->watch_node].addr);
	store_watch_resets(c->nodes[c->watch_node].st, NULL, NULL, NULL);
	c->watch_node = to;
	c->rehomed++;
	store_watch_resets(c->nodes[to].st, c->watch_prefix, c->watch_fn, c->watch_arg);
}

static void slots_reply_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	(void)privdata;
	struct store_cluster *c = l->data;
	if (!c || !rep)
		return; /* the connection failed or went away: its callbacks say so */
	int ok = 0;
	if (rep && rep->type == REDIS_REPLY_ARRAY) {
		int covered = 0;
		for (size_t i = 0; i < rep->elements; i++) {
			redisReply *r = rep->element[i];
			if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
			    r->element[0]->type != REDIS_REPLY_INTEGER ||
			    r->element[1]->type != REDIS_REPLY_INTEGER ||
			    r->element[2]->type != REDIS_REPLY_ARRAY || r->element[2]->elements < 2)
				continue;
			long long lo = r->element[0]->integer, hi = r->element[1]->integer;
			redisReply *m = r->element[2];
			if (lo < 0 || hi >= NSLOTS || lo > hi ||
			    m->element[0]->type != REDIS_REPLY_STRING ||
			    m->element[1]->type != REDIS_REPLY_INTEGER)
				continue;
			/* An empty or "?" endpoint means the node we asked. */
			char addr[300];
			const char *ip = m->element[0]->str;
			if (!ip[0] || strcmp(ip, "?") == 0)
				ip = l->host;
			int n = snprintf(addr, sizeof(addr),
					 strchr(ip, ':') ? "[%s]:%lld" : "%s:%lld", ip,
					 m->element[1]->integer);
			if (n <= 0 || (size_t)n >= sizeof(addr))
				continue;
			int node = node_for(c, addr, (size_t)n);
			if (node < 0)
				continue;
			for (long long s = lo; s <= hi; s++)
				c->slots[s] = (int16_t)node;
			covered += (int)(hi - lo + 1);
		}
		ok = covered > 0;
		if (ok && !c->have_map) {
			log_info("redis cluster: slot map read, %d of 16384 slots served", covered);
			c->have_map = 1;
		}
	} else if (rep && rep->type == REDIS_REPLY_ERROR) {
		log_warn("redis cluster: CLUSTER SLOTS: %.200s", rep->str);
	}
	if (!ok)
		c->refresh_wanted = 1; /* ask another node soon */
	else
		rehome_watch(c);
	c->ctl = NULL;
	l->data = NULL;
	rlink_disconnect(l); /* allowed inside a callback: freed after it */
	if (c->refresh_wanted)
		cluster_refresh(c);
}

static void ctl_connect_cb(const struct rlink *l, int ok)
{
	struct store_cluster *c = l->data;
	if (!ok && c) {
		log_debug("redis cluster: CLUSTER SLOTS from %s:%d: %s", l->host, l->port,
			  l->errstr);
		((struct rlink *)l)->data = NULL; /* its reply callback runs with NULL next */
		c->ctl = NULL;
		c->refresh_wanted = 1;
		cluster_refresh(c);
	}
}

static void ctl_disconnect_cb(const struct rlink *l, int ok)
{
	(void)ok;
	struct store_cluster *c = l->data;
	if (c && c->ctl == l) {
		c->ctl = NULL;
		c->refresh_wanted = 1;
		cluster_refresh(c);
	}
}

static void refresh_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	cluster_refresh(arg);
}

/* Reads the slot map again soon: at once if the last read is old enough,
 * else when REFRESH_MIN_MS has passed. One read at a time. */
static void cluster_refresh(struct store_cluster *c)
{
	if (c->closing)
		return;
	c->refresh_wanted = 1;
	if (c->ctl || evtimer_pending(c->refresh_timer, NULL))
		return;
	uint64_t now = clock_mono_us();
	uint64_t next = c->last_refresh_us + REFRESH_MIN_MS * 1000u;
	if (now < next) {
		uint64_t d = next - now;
		struct timeval tv = {.tv_sec = (time_t)(d / 1000000),
				     .tv_usec = (suseconds_t)(d % 1000000)};
		evtimer_add(c->refresh_timer, &tv);
		return;
	}
	c->refresh_wanted = 0;
	c->last_refresh_us = now;
	char host[256];
	int port;
	struct rlink *l = ctl_next_addr(c, host, sizeof(host), &port) == 0
				  ? rlink_connect(c->evbase, host, port, NULL, c->tls)
				  : NULL;
	if (!l || l->err) {
		if (l)
			rlink_free(l);
		c->refresh_wanted = 1;
		struct timeval tv = {0, REFRESH_MIN_MS * 1000};
		evtimer_add(c->refresh_timer, &tv);
		return;
	}
	l->data = c;
	rlink_set_callbacks(l, ctl_connect_cb, ctl_disconnect_cb);
	if (c->cfg.password) {
		if (c->cfg.username)
			rlink_command(l, NULL, NULL, "AUTH %s %s", c->cfg.username,
				      c->cfg.password);
		else
			rlink_command(l, NULL, NULL, "AUTH %s", c->cfg.password);
	}
	rlink_command(l, slots_reply_cb, NULL, "CLUSTER SLOTS");
	c->ctl = l;
}

/* ---- store interface ---- */

static size_t cluster_pending(const struct store *base)
{
	return ((const struct store_cluster *)base)->pending;
}

static unsigned long cluster_generation(const struct store *base)
{
	const struct store_cluster *c = (const struct store_cluster *)base;
	unsigned long g = 0;
	for (int i = 0; i < c->nnodes; i++)
		g += store_generation(c->nodes[i].st);
	return g + c->rehomed;
}

static void cluster_health(const struct store *base, struct store_health *h)
{
	const struct store_cluster *c = (const struct store_cluster *)base;
	for (int i = 0; i < c->nnodes; i++)
		if (c->nodes[i].st)
			store_health_add(c->nodes[i].st, h);
}

static int cluster_resets_followed(const struct store *base)
{
	const struct store_cluster *c = (const struct store_cluster *)base;
	return c->watch_node >= 0 && store_resets_followed(c->nodes[c->watch_node].st);
}

static void cluster_watch_resets(struct store *base, const char *prefix, store_reset_fn *fn,
				 void *arg)
{
	struct store_cluster *c = (struct store_cluster *)base;
	free(c->watch_prefix);
	c->watch_prefix = prefix ? strdup(prefix) : NULL;
	c->watch_fn = fn;
	c->watch_arg = arg;
	/* PUBLISH reaches every node of a cluster: one subscriber is enough. */
	if (c->watch_node < 0 && c->nnodes)
		c->watch_node = 0;
	if (c->watch_node >= 0)
		store_watch_resets(c->nodes[c->watch_node].st, c->watch_prefix, fn, arg);
}

static void cluster_free(struct store *base)
{
	struct store_cluster *c = (struct store_cluster *)base;
	c->closing = 1;
	if (c->ctl) {
		c->ctl->data = NULL;
		rlink_free(c->ctl);
	}
	for (unsigned s = 0; s < NSLOTS; s++) {
		struct creq *q = c->held[s];
		c->held[s] = c->held_tail[s] = NULL;
		while (q) {
			struct creq *next = q->held_next;
			creq_fail(q, STORE_UNAVAILABLE, "shutting down");
			q = next;
		}
	}
	for (int i = 0; i < c->nnodes; i++) {
		store_free(c->nodes[i].st); /* answers what it holds: creq_done finishes them */
		free(c->nodes[i].addr);
	}
	event_free(c->refresh_timer);
	for (size_t i = 0; i < c->nseeds; i++)
		free(c->seeds[i]);
	free(c->seeds);
	free(c->cfg.username);
	free(c->cfg.password);
	tls_client_unref(c->tls);
	free(c->watch_prefix);
	free(c);
}

/* A command that is no decision goes to the master of its key's slot; a
 * redirect comes back as Redis's error, for the caller to try again. */
static void cluster_call(struct store *base, const struct store_call *sc, store_call_fn *done,
			 void *arg)
{
	struct store_cluster *c = (struct store_cluster *)base;
	int node = c->slots[keys_slot(sc->key, sc->key_len)];
	if (c->closing || node < 0 || !c->nodes[node].st) {
		done(arg, NULL, "the cluster's slot map does not name the key's master yet");
		return;
	}
	store_call(c->nodes[node].st, sc, done, arg);
}

static const struct store_ops cluster_ops = {
	.submit = cluster_submit,
	.free = cluster_free,
	.pending = cluster_pending,
	.generation = cluster_generation,
	.watch_resets = cluster_watch_resets,
	.resets_followed = cluster_resets_followed,
	.health = cluster_health,
	.call = cluster_call,
	.multi = 0, /* the pairs' keys hash to slots on different masters */
};

struct store *store_cluster_new(struct event_base *base, const struct config_redis *cfg,
				struct tls_client *tls, char *err, size_t errlen)
{
	struct store_cluster *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->base.ops = &cluster_ops;
	c->evbase = base;
	c->watch_node = -1;
	memset(c->slots, 0xff, sizeof(c->slots));
	c->cfg.timeout_ms = cfg->timeout_ms;
	c->cfg.connections = cfg->connections;
	c->cfg.wait_replicas = cfg->wait_replicas;
	c->cfg.wait_timeout_ms = cfg->wait_timeout_ms;
	c->cfg.username = cfg->username ? strdup(cfg->username) : NULL;
	c->cfg.password = cfg->password ? strdup(cfg->password) : NULL;
	c->tls = tls_client_ref(tls);
	c->seeds = calloc(cfg->cluster.n, sizeof(char *));
	c->refresh_timer = evtimer_new(base, refresh_timer_cb, c);
	if (!c->seeds || !c->refresh_timer) {
		snprintf(err, errlen, "out of memory");
		cluster_free(&c->base);
		return NULL;
	}
	for (size_t i = 0; i < cfg->cluster.n; i++)
		if ((c->seeds[c->nseeds] = strdup(cfg->cluster.addr[i])))
			c->nseeds++;
	/* Seeds are nodes too: requests can go before the map is read (and be
	 * redirected), and a seed that is a master is used as one. */
	for (size_t i = 0; i < c->nseeds; i++)
		node_for(c, c->seeds[i], strlen(c->seeds[i]));
	cluster_refresh(c);
	return &c->base;
}
