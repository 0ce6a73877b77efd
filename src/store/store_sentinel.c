/*
 * store_sentinel.c - decisions in the master that Redis Sentinel names.
 *
 * The master's address comes from SENTINEL get-master-addr-by-name, asked of
 * the sentinels in turn; a subscription to +switch-master on one of them and
 * a check every RECHECK_MS follow failovers. Decisions go to a store_redis
 * pool for the current master; one that fails because the node is gone or
 * has become a replica (READONLY) makes us ask the sentinels again and is
 * retried on the new master inside its own deadline. A replaced pool is kept
 * until it has answered everything it was given.
 */
#include "store_sentinel.h"

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
#include "list.h"
#include "log.h"
#include "policy.h"
#include "redis_conn.h"
#include "rlink.h"
#include "store.h"
#include "store_redis.h"
#include "store_reply.h"
#include "store_retry.h"
#include "tls.h"

#define RECHECK_MS 5000
#define ASK_MIN_MS 100
#define RETRY_MIN_MS 10
#define RETRY_MAX_MS 200
#define MAX_RETIRED 8
#define ASK_STALE_MS 3000

struct store_sentinel {
	struct store base;
	struct event_base *evbase;
	struct config_redis cfg; /* for the master's pool; address set per master */
	struct tls_client *tls;	 /* to the sentinels and the master, NULL for plain TCP */
	char *master_name;
	char **sentinels;
	size_t nsentinels;
	size_t next_sentinel;
	struct store *cur; /* pool for the current master, or NULL */
	char *cur_addr;
	struct store *retired[MAX_RETIRED];
	int nretired;
	unsigned long gen_base; /* generations of pools let go */
	struct rlink *ask;	/* get-master-addr-by-name in flight */
	struct rlink *probe;	/* ROLE to the master a sentinel named, in flight */
	uint64_t probe_us;	/* ... since (monotonic) */
	char probe_ip[64], probe_port[8];
	struct rlink *subs; /* +switch-master subscription */
	uint64_t last_ask_us;
	struct event *timer; /* re-ask, re-subscribe, free retired pools */
	size_t pending;
	struct list reqs; /* of struct sentinel_req: every request not answered yet */
	int closing;
	char *watch_prefix;
	store_reset_fn *watch_fn;
	void *watch_arg;
};

struct sentinel_req {
	struct list_link link; /* s->reqs */
	struct store_sentinel *s;
	store_done_fn *done;
	void *arg;
	uint64_t deadline_us;
	int attempts;
	struct store_retry retry;
	struct store_saved_request sv;
};

static void sentinel_ask(struct store_sentinel *s);
static void sentinel_req_send(struct sentinel_req *q);


/* ---- the master ---- */

static void use_master(struct store_sentinel *s, const char *ip, const char *port)
{
	char addr[300];
	snprintf(addr, sizeof(addr), strchr(ip, ':') ? "[%s]:%s" : "%s:%s", ip, port);
	if (s->cur_addr && strcmp(s->cur_addr, addr) == 0)
		return;
	char *copy = strdup(addr);
	if (!copy)
		return;
	s->cfg.address = copy;
	char err[256] = "";
	struct store *st = store_redis_new(s->evbase, &s->cfg, s->tls, err, sizeof(err));
	if (!st) {
		log_error("sentinel: master %s: %s", addr, err);
		free(copy);
		s->cfg.address = NULL;
		return;
	}
	log_info("sentinel: master %s is %s%s%s", s->master_name, addr, s->cur_addr ? ", was " : "",
		 s->cur_addr ? s->cur_addr : "");
	if (s->cur) {
		if (s->nretired == MAX_RETIRED) { /* oldest goes now: it answers what it holds */
			s->gen_base += store_generation(s->retired[0]) + 1;
			store_free(s->retired[0]);
			memmove(s->retired, s->retired + 1,
				(MAX_RETIRED - 1) * sizeof(*s->retired));
			s->nretired--;
		}
		s->retired[s->nretired++] = s->cur;
		store_watch_resets(s->cur, NULL, NULL, NULL);
	}
	free(s->cur_addr);
	s->cur = st;
	s->cur_addr = copy;
	s->cfg.address = NULL;
	if (s->watch_prefix)
		store_watch_resets(st, s->watch_prefix, s->watch_fn, s->watch_arg);
}

/* ROLE's answer from the master a sentinel named: followed only when it
 * says it is one. A sentinel cut off with the old master in a minority
 * (or one that has not yet seen the failover) still names the old one,
 * now a replica or soon one: switching to it would fail every decision
 * (READONLY) or write where it is lost, and flap with each sentinel. */
static void role_reply_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	(void)privdata;
	struct store_sentinel *s = l->data;
	if (!s || !rep)
		return;
	const char *role = rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
					   rep->element[0]->type == REDIS_REPLY_STRING
				   ? rep->element[0]->str
				   : NULL;
	if (role && strcmp(role, "master") == 0) {
		use_master(s, s->probe_ip, s->probe_port);
	} else if (rep->type == REDIS_REPLY_ERROR &&
		   store_reply_error(rep->str, rep->len) == STORE_ERROR_NOPERM) {
		/* an ACL without +role (docs/security.md): followed unasked */
		log_warn("sentinel: cannot ask %s:%s its ROLE (%.100s): followed as the sentinel "
			 "says",
			 s->probe_ip, s->probe_port, rep->str);
		use_master(s, s->probe_ip, s->probe_port);
	} else
		log_warn("sentinel: %s:%s, named master of %s, says it is %s: not followed",
			 s->probe_ip, s->probe_port, s->master_name,
			 role				  ? role
			 : rep->type == REDIS_REPLY_ERROR ? rep->str
							  : "not a master");
	s->probe = NULL;
	l->data = NULL;
	rlink_disconnect(l);
}

static void probe_connect_cb(const struct rlink *l, int ok)
{
	struct store_sentinel *s = l->data;
	if (!ok && s) {
		log_warn("sentinel: master %s:%s of %s: %s: not followed", s->probe_ip,
			 s->probe_port, s->master_name, l->errstr);
		((struct rlink *)l)->data = NULL;
		s->probe = NULL;
	}
}

static void probe_disconnect_cb(const struct rlink *l, int ok)
{
	(void)ok;
	struct store_sentinel *s = l->data;
	if (s && s->probe == l)
		s->probe = NULL;
}

/* A sentinel named ip:port: asked its ROLE first (one at a time). */
static void probe_master(struct store_sentinel *s, const char *ip, const char *port)
{
	char addr[300];
	snprintf(addr, sizeof(addr), strchr(ip, ':') ? "[%s]:%s" : "%s:%s", ip, port);
	if ((s->cur_addr && strcmp(s->cur_addr, addr) == 0) || s->probe || strlen(ip) >= 64 ||
	    strlen(port) >= 8)
		return;
	int p = atoi(port);
	struct rlink *l = rlink_connect(s->evbase, ip, p, NULL, s->tls);
	if (!l || l->err) {
		if (l)
			rlink_free(l);
		return;
	}
	snprintf(s->probe_ip, sizeof(s->probe_ip), "%s", ip);
	snprintf(s->probe_port, sizeof(s->probe_port), "%s", port);
	l->data = s;
	rlink_set_callbacks(l, probe_connect_cb, probe_disconnect_cb);
	if (s->cfg.password) {
		if (s->cfg.username)
			rlink_command(l, NULL, NULL, "AUTH %s %s", s->cfg.username,
				      s->cfg.password);
		else
			rlink_command(l, NULL, NULL, "AUTH %s", s->cfg.password);
	}
	rlink_command(l, role_reply_cb, NULL, "ROLE");
	s->probe = l;
	s->probe_us = clock_mono_us();
}

static void master_reply_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	(void)privdata;
	struct store_sentinel *s = l->data;
	if (!s || !rep)
		return;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_STRING)
		probe_master(s, rep->element[0]->str, rep->element[1]->str);
	else
		log_warn("sentinel %s:%d does not know master %s", l->host, l->port,
			 s->master_name);
	s->ask = NULL;
	l->data = NULL;
	rlink_disconnect(l);
}

static void ask_connect_cb(const struct rlink *l, int ok)
{
	struct store_sentinel *s = l->data;
	if (!ok && s) {
		log_debug("sentinel %s:%d: %s", l->host, l->port, l->errstr);
		((struct rlink *)l)->data = NULL;
		s->ask = NULL;
		sentinel_ask(s); /* the next sentinel */
	}
}

static void ask_disconnect_cb(const struct rlink *l, int ok)
{
	(void)ok;
	struct store_sentinel *s = l->data;
	if (s && s->ask == l)
		s->ask = NULL;
}

static struct rlink *sentinel_connect(struct store_sentinel *s, rlink_connect_fn *on_conn,
				      rlink_disconnect_fn *on_disc)
{
	char host[256];
	int port;
	if (addr_split(s->sentinels[s->next_sentinel++ % s->nsentinels], host, sizeof(host),
		       &port) < 0)
		return NULL;
	struct rlink *l = rlink_connect(s->evbase, host, port, NULL, s->tls);
	if (!l || l->err) {
		if (l)
			rlink_free(l);
		return NULL;
	}
	l->data = s;
	rlink_set_callbacks(l, on_conn, on_disc);
	return l;
}

/* Asks one sentinel (the next in turn) for the master; at most every ASK_MIN_MS. */
static void sentinel_ask(struct store_sentinel *s)
{
	uint64_t now = clock_mono_us();
	if (s->closing || s->ask || now < s->last_ask_us + ASK_MIN_MS * 1000u)
		return;
	s->last_ask_us = now;
	struct rlink *l = sentinel_connect(s, ask_connect_cb, ask_disconnect_cb);
	if (!l)
		return;
	rlink_command(l, master_reply_cb, NULL, "SENTINEL get-master-addr-by-name %s",
		      s->master_name);
	s->ask = l;
}

/* "+switch-master <name> <old-ip> <old-port> <new-ip> <new-port>" */
static void switch_cb(struct rlink *l, redisReply *rep, void *privdata)
{
	(void)privdata;
	struct store_sentinel *s = l->data;
	if (!s || !rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
	    rep->element[2]->type != REDIS_REPLY_STRING)
		return;
	char name[256], oip[64], oport[8], nip[64], nport[8];
	if (sscanf(rep->element[2]->str, "%255s %63s %7s %63s %7s", name, oip, oport, nip, nport) ==
		    5 &&
	    strcmp(name, s->master_name) == 0)
		use_master(s, nip, nport);
}

static void subs_connect_cb(const struct rlink *l, int ok)
{
	struct store_sentinel *s = l->data;
	if (!ok && s) {
		((struct rlink *)l)->data = NULL;
		s->subs = NULL; /* the timer subscribes again */
	}
}

static void subs_disconnect_cb(const struct rlink *l, int ok)
{
	(void)ok;
	struct store_sentinel *s = l->data;
	if (s && s->subs == l) {
		s->subs = NULL;
		sentinel_ask(s); /* a switch may have been missed */
	}
}

/* An ask or a probe that never hears back (a sentinel or a server that
 * accepts and says nothing) would stop every later one: dropped after
 * ASK_STALE_MS. */
static void drop_stale(struct rlink **l, uint64_t since, uint64_t now, const char *what)
{
	if (!*l || now - since < ASK_STALE_MS * 1000u)
		return;
	log_warn("sentinel: %s %s:%d: no answer in %d ms; given up", what,
		 (*l)->host ? (*l)->host : "?", (*l)->port, ASK_STALE_MS);
	(*l)->data = NULL;
	rlink_free(*l);
	*l = NULL;
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct store_sentinel *s = arg;
	uint64_t now = clock_mono_us();
	drop_stale(&s->ask, s->last_ask_us, now, "asking");
	drop_stale(&s->probe, s->probe_us, now, "ROLE of");
	sentinel_ask(s);
	if (!s->subs) {
		s->subs = sentinel_connect(s, subs_connect_cb, subs_disconnect_cb);
		if (s->subs)
			rlink_subscribe(s->subs, switch_cb, NULL, "+switch-master");
	}
	/* retired pools go once they have answered everything */
	for (int i = 0; i < s->nretired;) {
		if (store_pending(s->retired[i]) == 0) {
			s->gen_base += store_generation(s->retired[i]) + 1;
			store_free(s->retired[i]);
			s->retired[i] = s->retired[--s->nretired];
		} else {
			i++;
		}
	}
	struct timeval tv = {.tv_sec = s->cur ? RECHECK_MS / 1000 : 0,
			     .tv_usec = s->cur ? 0 : ASK_MIN_MS * 1000};
	evtimer_add(s->timer, &tv);
}

/* ---- requests ---- */

static void sentinel_req_finish(struct sentinel_req *q, const struct store_result *res)
{
	struct store_sentinel *s = q->s;
	list_unlink(&q->link);
	q->done(q->arg, res);
	store_retry_free(&q->retry);
	s->pending--;
	store_request_release(&q->sv);
	free(q);
}

static void retry_cb(void *arg)
{
	sentinel_req_send(arg);
}

static void sentinel_req_done(void *arg, const struct store_result *res)
{
	struct sentinel_req *q = arg;
	struct store_sentinel *s = q->s;
	int moved_on = res->status == STORE_UNAVAILABLE ||
		       (res->status == STORE_FAILED && (res->error == STORE_ERROR_READONLY ||
							res->error == STORE_ERROR_MASTERDOWN));
	/* lost after it was sent: it may have been applied, never twice */
	if (res->status == STORE_OK || !moved_on || s->closing || res->sent) {
		sentinel_req_finish(q, res);
		return;
	}
	sentinel_ask(s);
	int ms = store_retry_delay_ms(q->attempts, RETRY_MIN_MS, RETRY_MAX_MS, q->deadline_us);
	q->attempts++;
	if (ms < 0 || store_retry_after(&q->retry, s->evbase, ms) < 0)
		sentinel_req_finish(q, res);
}

static void sentinel_req_send(struct sentinel_req *q)
{
	struct store_sentinel *s = q->s;
	uint64_t now = clock_mono_us();
	if (!s->cur || now >= q->deadline_us) {
		struct store_result res = {
			.status = s->cur ? STORE_TIMEOUT : STORE_UNAVAILABLE,
			.detail = s->cur ? "redis did not answer in time"
					 : "sentinels have not named a master yet",
		};
		sentinel_req_finish(q, &res);
		return;
	}
	struct store_request req =
		store_request_load(&q->sv, (int64_t)((q->deadline_us - now + 999) / 1000));
	store_submit(s->cur, &req, sentinel_req_done, q);
}

static void sentinel_submit(struct store *base, const struct store_request *req,
			    store_done_fn *done, void *arg)
{
	struct store_sentinel *s = (struct store_sentinel *)base;
	if (s->closing) { /* asked by an answer sentinel_free gives */
		struct store_result res = {.status = STORE_UNAVAILABLE, .detail = "shutting down"};
		done(arg, &res);
		return;
	}
	struct sentinel_req *q = calloc(1, sizeof(*q));
	if (!q) {
		struct store_result res = {.status = STORE_OVERLOAD, .detail = "out of memory"};
		done(arg, &res);
		return;
	}
	s->pending++;
	list_push(&s->reqs, &q->link);
	q->s = s;
	q->done = done;
	q->arg = arg;
	q->retry.fn = retry_cb;
	q->retry.arg = q;
	q->deadline_us = clock_mono_us() + (uint64_t)req->timeout_ms * 1000u;
	if (store_request_save(&q->sv, req) < 0) {
		struct store_result res = {.status = STORE_OVERLOAD, .detail = "out of memory"};
		sentinel_req_finish(q, &res);
		return;
	}
	sentinel_req_send(q);
}

/* ---- store interface ---- */

static size_t sentinel_pending(const struct store *base)
{
	return ((const struct store_sentinel *)base)->pending;
}

static unsigned long sentinel_generation(const struct store *base)
{
	const struct store_sentinel *s = (const struct store_sentinel *)base;
	unsigned long g = s->gen_base;
	for (int i = 0; i < s->nretired; i++)
		g += store_generation(s->retired[i]) + 1;
	/* a new master is another Redis: its state may differ */
	return g + (s->cur ? store_generation(s->cur) : 0);
}

/* The current master's pool; pools of earlier masters count as lost. */
static void sentinel_health(const struct store *base, struct store_health *h)
{
	const struct store_sentinel *s = (const struct store_sentinel *)base;
	if (s->cur)
		store_health_add(s->cur, h);
	h->conns_lost += s->gen_base;
	for (int i = 0; i < s->nretired; i++)
		h->conns_lost += store_generation(s->retired[i]);
}

static int sentinel_resets_followed(const struct store *base)
{
	const struct store_sentinel *s = (const struct store_sentinel *)base;
	return s->cur && store_resets_followed(s->cur);
}

static void sentinel_watch_resets(struct store *base, const char *prefix, store_reset_fn *fn,
				  void *arg)
{
	struct store_sentinel *s = (struct store_sentinel *)base;
	free(s->watch_prefix);
	s->watch_prefix = prefix ? strdup(prefix) : NULL;
	s->watch_fn = fn;
	s->watch_arg = arg;
	if (s->cur)
		store_watch_resets(s->cur, s->watch_prefix, fn, arg);
}

static void sentinel_free(struct store *base)
{
	struct store_sentinel *s = (struct store_sentinel *)base;
	s->closing = 1;
	if (s->ask) {
		s->ask->data = NULL;
		rlink_free(s->ask);
	}
	if (s->subs) {
		s->subs->data = NULL;
		rlink_free(s->subs);
	}
	if (s->probe) {
		s->probe->data = NULL;
		rlink_free(s->probe);
	}
	if (s->cur)
		store_free(s->cur);
	s->cur = NULL;
	for (int i = 0; i < s->nretired; i++)
		store_free(s->retired[i]);
	s->nretired = 0;
	/* what waits on a retry timer: answered, as the pools answered theirs */
	while (!list_empty(&s->reqs)) {
		struct store_result res = {.status = STORE_UNAVAILABLE, .detail = "shutting down"};
		sentinel_req_finish(list_entry(s->reqs.first, struct sentinel_req, link), &res);
	}
	if (s->timer)
		event_free(s->timer);
	for (size_t i = 0; i < s->nsentinels; i++)
		free(s->sentinels[i]);
	free(s->sentinels);
	free(s->master_name);
	free(s->cur_addr);
	free(s->cfg.username);
	free(s->cfg.password);
	tls_client_unref(s->tls);
	free(s->watch_prefix);
	free(s);
}

static void sentinel_call(struct store *base, const struct store_call *sc, store_call_fn *done,
			  void *arg)
{
	struct store_sentinel *s = (struct store_sentinel *)base;
	if (!s->cur) {
		done(arg, NULL, "sentinels have not named a master yet");
		return;
	}
	store_call(s->cur, sc, done, arg);
}

static const struct store_ops sentinel_ops = {
	.submit = sentinel_submit,
	.free = sentinel_free,
	.pending = sentinel_pending,
	.generation = sentinel_generation,
	.watch_resets = sentinel_watch_resets,
	.resets_followed = sentinel_resets_followed,
	.health = sentinel_health,
	.call = sentinel_call,
	.multi = 1, /* one master decides it all */
};

struct store *store_sentinel_new(struct event_base *base, const struct config_redis *cfg,
				 struct tls_client *tls, char *err, size_t errlen)
{
	struct store_sentinel *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->base.ops = &sentinel_ops;
	s->evbase = base;
	s->cfg.database = cfg->database;
	s->cfg.timeout_ms = cfg->timeout_ms;
	s->cfg.connections = cfg->connections;
	s->cfg.wait_replicas = cfg->wait_replicas;
	s->cfg.wait_timeout_ms = cfg->wait_timeout_ms;
	s->cfg.username = cfg->username ? strdup(cfg->username) : NULL;
	s->cfg.password = cfg->password ? strdup(cfg->password) : NULL;
	s->tls = tls_client_ref(tls);
	s->master_name = strdup(cfg->sentinel_master);
	s->sentinels = calloc(cfg->sentinels.n, sizeof(char *));
	s->timer = evtimer_new(base, timer_cb, s);
	if (!s->master_name || !s->sentinels || !s->timer) {
		snprintf(err, errlen, "out of memory");
		sentinel_free(&s->base);
		return NULL;
	}
	for (size_t i = 0; i < cfg->sentinels.n; i++)
		if ((s->sentinels[s->nsentinels] = strdup(cfg->sentinels.addr[i])))
			s->nsentinels++;
	timer_cb(-1, 0, s); /* ask now, subscribe, and keep checking */
	return &s->base;
}
