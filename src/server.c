/* server.c - client listeners, accepting clients, the live config, draining. */
#include "server.h"

#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cmd.h"
#include "config.h"
#include "conn.h"
#include "denycache.h"
#include "keys.h"
#include "listener.h"
#include "stats.h"
#include "store.h"
#include "log.h"

/* Denials remembered locally; each costs ~100 bytes plus its key. */
#define DENY_CACHE_ENTRIES 65536

/* A client listener and what its clients may do. */
struct port {
	struct server *srv;
	struct listener *l;
	int admin;
};

struct server {
	struct event_base *base;
	struct config *cfg;
	struct cmd_env env;
	struct port *ports; /* one per listen address */
	size_t nports;
	struct conn *clients; /* list through conn_link */
	size_t nclients;
	struct conn **reap; /* closed, to free */
	size_t nreap, capreap;
	struct conn **dirty; /* replies ready, to write */
	size_t ndirty, capdirty;
	struct event *turn_ev; /* end of loop turn: write, then free */
	int draining;
	void (*drained)(void *);
	void *drained_arg;
	struct event *drained_ev;
};

struct config *server_config(const struct server *srv)
{
	return srv->cfg;
}

struct store *server_store(const struct server *srv)
{
	return srv->env.store;
}

const struct cmd_env *server_cmd_env(const struct server *srv)
{
	return &srv->env;
}

struct event_base *server_base(const struct server *srv)
{
	return srv->base;
}

size_t server_nclients(const struct server *srv)
{
	return srv->nclients;
}

/* A RESET made through any daemon: our cached denials for that pair are wrong now. */
static void reset_notice(void *arg, const char *tag, size_t len)
{
	struct server *srv = arg;
	const char *action;
	size_t alen, ulen;
	char user[KEYS_USER_MAX];
	if (srv->env.deny && keys_parse_tag(tag, len, &action, &alen, user, &ulen) == 0)
		denycache_reset_pair(srv->env.deny, action, alen, user, ulen);
}

void server_set_config(struct server *srv, struct config *cfg)
{
	config_ref(cfg);
	config_unref(srv->cfg);
	srv->cfg = cfg;
	stats_bind(cfg);
	/* Denials were decided under the old policies. */
	if (srv->env.deny)
		denycache_clear(srv->env.deny);
	store_watch_resets(srv->env.store, cfg->prefix, reset_notice, srv);
}

void server_conn_added(struct server *srv, struct conn *c)
{
	struct conn_link *l = conn_link(c);
	l->prev = NULL;
	l->next = srv->clients;
	if (srv->clients)
		conn_link(srv->clients)->prev = c;
	srv->clients = c;
	srv->nclients++;
	stats.clients_accepted++;
}

void server_conn_removed(struct server *srv, struct conn *c)
{
	struct conn_link *l = conn_link(c);
	if (l->prev)
		conn_link(l->prev)->next = l->next;
	else
		srv->clients = l->next;
	if (l->next)
		conn_link(l->next)->prev = l->prev;
	l->prev = l->next = NULL;
	srv->nclients--;
	if (srv->draining && srv->nclients == 0)
		event_active(srv->drained_ev, EV_TIMEOUT, 0);
}

/* Appends c to a list that only grows between two end-of-turn events. */
static int list_push(struct conn ***list, size_t *n, size_t *cap, struct conn *c)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 64;
		struct conn **l = realloc(*list, ncap * sizeof(**list));
		if (!l)
			return -1;
		*list = l;
		*cap = ncap;
	}
	(*list)[(*n)++] = c;
	return 0;
}

void server_defer_free(struct server *srv, struct conn *c)
{
	/* On failure leak one connection rather than free it under its own callback. */
	if (list_push(&srv->reap, &srv->nreap, &srv->capreap, c) < 0)
		log_error("out of memory while closing a client");
	event_active(srv->turn_ev, EV_TIMEOUT, 0);
}

void server_defer_flush(struct server *srv, struct conn *c)
{
	if (list_push(&srv->dirty, &srv->ndirty, &srv->capdirty, c) < 0) {
		conn_flush(c); /* out of memory: write now instead */
		return;
	}
	event_active(srv->turn_ev, EV_TIMEOUT, 0);
}

/* Writes first (a connection closed meanwhile is skipped by conn_flush),
 * then frees: nothing on the dirty list is freed before it is looked at. */
static void turn_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct server *srv = arg;
	for (size_t i = 0; i < srv->ndirty; i++)
		conn_flush(srv->dirty[i]); /* may close: adds to reap */
	srv->ndirty = 0;
	for (size_t i = 0; i < srv->nreap; i++)
		conn_reap(srv->reap[i]);
	srv->nreap = 0;
}

static void drained_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct server *srv = arg;
	if (srv->drained)
		srv->drained(srv->drained_arg);
}

static void accept_cb(evutil_socket_t fd, const struct sockaddr *sa, void *arg)
{
	struct port *p = arg;
	struct server *srv = p->srv;
	if (srv->nclients >= (size_t)srv->cfg->max_clients) {
		/* Best effort: the socket is fresh, so a short line fits its buffer. */
		static const char msg[] = "ERR too-many-clients max_clients reached\n";
		ssize_t w = send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
		(void)w;
		evutil_closesocket(fd);
		unsigned long long refused = ++stats.errors[STATS_ERR_TOO_MANY_CLIENTS];
		if ((refused & (refused - 1)) == 0) /* 1, 2, 4, ...: not a log flood */
			log_warn("max_clients (%d) reached; %llu %s refused so far",
				 srv->cfg->max_clients, refused,
				 log_plural(refused, "connection", "connections"));
		return;
	}
	if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	conn_new(srv, fd, p->admin);
}

static void close_listeners(struct server *srv)
{
	for (size_t i = 0; i < srv->nports; i++)
		if (srv->ports[i].l)
			listener_close(srv->ports[i].l);
}

struct server *server_new(struct event_base *base, struct config *cfg, struct store *store,
			  char *err, size_t errlen)
{
	struct server *srv = calloc(1, sizeof(*srv));
	if (!srv) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	srv->base = base;
	srv->env.store = store;
	srv->env.deny = denycache_new(DENY_CACHE_ENTRIES);
	store_watch_resets(store, cfg->prefix, reset_notice, srv);
	config_ref(cfg);
	srv->cfg = cfg;
	stats_bind(cfg);
	srv->turn_ev = event_new(base, -1, 0, turn_cb, srv);
	srv->drained_ev = event_new(base, -1, 0, drained_cb, srv);
	srv->ports = calloc(cfg->nlisten, sizeof(*srv->ports));
	if (cfg->nlisten && !srv->ports) {
		snprintf(err, errlen, "out of memory");
		server_free(srv);
		return NULL;
	}
	for (size_t i = 0; i < cfg->nlisten; i++) {
		const struct config_listen *cl = &cfg->listen[i];
		struct port *p = &srv->ports[srv->nports++];
		p->srv = srv;
		p->admin = cl->admin;
		p->l = listener_new(base, cl->address, cl->mode, accept_cb, p, err, errlen);
		if (!p->l) {
			server_free(srv);
			return NULL;
		}
	}
	return srv;
}

void server_drain(struct server *srv, void (*done)(void *arg), void *arg)
{
	srv->draining = 1;
	srv->drained = done;
	srv->drained_arg = arg;
	close_listeners(srv);
	struct conn *c = srv->clients;
	while (c) {
		struct conn *next = conn_link(c)->next;
		conn_drain(c);
		c = next;
	}
	if (srv->nclients == 0)
		event_active(srv->drained_ev, EV_TIMEOUT, 0);
}

void server_free(struct server *srv)
{
	if (!srv)
		return;
	close_listeners(srv);
	while (srv->clients)
		conn_close(srv->clients);
	turn_cb(-1, 0, srv);
	for (size_t i = 0; i < srv->nports; i++)
		listener_free(srv->ports[i].l);
	free(srv->ports);
	free(srv->reap);
	free(srv->dirty);
	event_free(srv->turn_ev);
	event_free(srv->drained_ev);
	config_unref(srv->cfg);
	denycache_free(srv->env.deny);
	free(srv);
}
