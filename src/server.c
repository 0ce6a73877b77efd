/* server.c - listeners (TCP and unix), accepting clients, the live config, draining. */
#include "server.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cmd.h"
#include "config.h"
#include "conn.h"
#include "denycache.h"
#include "keys.h"
#include "stats.h"
#include "store.h"
#include "log.h"

#define MAX_LISTENERS 16
/* Denials remembered locally; each costs ~100 bytes plus its key. */
#define DENY_CACHE_ENTRIES 65536

struct listener {
	struct server *srv;
	struct evconnlistener *lev;
	struct event *resume;
	char *unix_path;
	char *name;
	int admin;
	unsigned long long paused; /* accept pauses for lack of descriptors */
};

struct server {
	struct event_base *base;
	struct config *cfg;
	struct cmd_env env;
	struct listener listeners[MAX_LISTENERS];
	int nlisteners;
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

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
		      int salen, void *arg)
{
	(void)lev;
	(void)salen;
	struct listener *l = arg;
	struct server *srv = l->srv;
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
	conn_new(srv, fd, l->admin);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct listener *l = arg;
	if (l->lev && !l->srv->draining)
		evconnlistener_enable(l->lev);
}

void server_accept_failed(struct evconnlistener *lev, struct event *resume, const char *name,
			  int err, unsigned long long *paused)
{
	if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM) {
		log_warn("accept on %s: %s", name, strerror(err));
		return;
	}
	/* once, then every 1000th time: the pause repeats 10 times a second */
	if ((*paused)++ % 1000 == 0)
		log_warn("accept on %s: %s; pausing accepts for %d ms (%llu %s so far)", name,
			 strerror(err), SERVER_ACCEPT_PAUSE_MS, *paused,
			 log_plural(*paused, "time", "times"));
	evconnlistener_disable(lev);
	struct timeval tv = {0, SERVER_ACCEPT_PAUSE_MS * 1000};
	evtimer_add(resume, &tv);
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct listener *l = arg;
	server_accept_failed(lev, l->resume, l->name, EVUTIL_SOCKET_ERROR(), &l->paused);
}

static int listen_one(struct server *srv, struct listener *l, const struct config_listen *cl,
		      char *err, size_t errlen)
{
	unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE;
	const char *addr = cl->address;
	l->srv = srv;
	l->admin = cl->admin;
	l->name = strdup(addr);
	l->resume = evtimer_new(srv->base, resume_cb, l);
	if (strncmp(addr, "unix:", 5) == 0) {
		const char *path = addr + 5;
		struct sockaddr_un sun;
		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		if (strlen(path) >= sizeof(sun.sun_path)) {
			snprintf(err, errlen, "listen %s: path too long", addr);
			return -1;
		}
		strcpy(sun.sun_path, path);
		/* A socket file left by a previous run would make bind fail. */
		struct stat st;
		if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
			unlink(path);
		l->lev = evconnlistener_new_bind(srv->base, accept_cb, l, flags, 1024,
						 (struct sockaddr *)&sun, sizeof(sun));
		if (!l->lev) {
			snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
			return -1;
		}
		l->unix_path = strdup(path);
		if (chmod(path, (mode_t)cl->mode) < 0)
			log_warn("chmod %s: %s", path, strerror(errno));
	} else {
		struct sockaddr_storage ss;
		int sslen = sizeof(ss);
		memset(&ss, 0, sizeof(ss));
		if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) < 0) {
			snprintf(err, errlen, "listen %s: not an address", addr);
			return -1;
		}
		l->lev = evconnlistener_new_bind(srv->base, accept_cb, l, flags, 1024,
						 (struct sockaddr *)&ss, sslen);
		if (!l->lev) {
			snprintf(err, errlen, "listen %s: %s", addr, strerror(errno));
			return -1;
		}
	}
	evconnlistener_set_error_cb(l->lev, accept_error_cb);
	return 0;
}

static void close_listeners(struct server *srv)
{
	for (int i = 0; i < srv->nlisteners; i++) {
		struct listener *l = &srv->listeners[i];
		if (l->lev) {
			evconnlistener_free(l->lev);
			l->lev = NULL;
			if (l->unix_path)
				unlink(l->unix_path);
		}
	}
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
	for (size_t i = 0; i < cfg->nlisten && i < MAX_LISTENERS; i++) {
		srv->nlisteners++;
		if (listen_one(srv, &srv->listeners[i], &cfg->listen[i], err, errlen) < 0) {
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
	for (int i = 0; i < srv->nlisteners; i++) {
		struct listener *l = &srv->listeners[i];
		if (l->resume)
			event_free(l->resume);
		free(l->unix_path);
		free(l->name);
	}
	free(srv->reap);
	free(srv->dirty);
	event_free(srv->turn_ev);
	event_free(srv->drained_ev);
	config_unref(srv->cfg);
	denycache_free(srv->env.deny);
	free(srv);
}
