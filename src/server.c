/*
 * server.c - the daemon's wiring: the live config snapshot, the store and
 * deny cache requests run against, RESET notices, and the client ports
 * that feed clients.c.
 */
#include "server.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "activation.h"
#include "clients.h"
#include "cmd.h"
#include "config.h"
#include "conn.h"
#include "blocks.h"
#include "declog.h"
#include "denycache.h"
#include "giveback.h"
#include "keys.h"
#include "delay.h"
#include "leases.h"
#include "local.h"
#include "listener.h"
#include "log.h"
#include "override_live.h"
#include "stats.h"
#include "store.h"
#include "store_factory.h"
#include "tls.h"
#include "trace_export.h"

/* Denials remembered locally; each costs ~100 bytes plus its key. */
#define DENY_CACHE_ENTRIES 65536
/* hot pairs with a block at once (about 700 bytes each) */
#define BLOCKS_ENTRIES 4096

/* A client listener and what its clients may do. */
struct port {
	struct clients *clients;
	struct listener *l;
	struct conn_port cp;
	char *name; /* cp.name's */
	/* tls.client_certs as started: a restart changes it, a reload not */
	enum tls_client_certs client_certs;
};

struct server {
	struct config *cfg;
	struct cmd_env env;
	struct clients *clients;
	struct port *ports; /* one per listen address */
	size_t nports;
	struct event *declog_tick;   /* writes the decision log's lines every second */
	struct trace_export *traces; /* posts decisions' spans (tracing) */
	/* the drain: its caller's done, and the blocks' give-back out */
	void (*drained)(void *arg);
	void *drained_arg;
	struct giveback *giveback;
};

static void declog_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	declog_flush();
}

struct config *server_config(const struct server *srv)
{
	return srv->cfg;
}

struct local *server_local(const struct server *srv)
{
	return srv->env.local;
}

struct store *server_store(const struct server *srv)
{
	return srv->env.store;
}

const struct cmd_env *server_env(const struct server *srv)
{
	return &srv->env;
}

struct leases *server_leases(const struct server *srv)
{
	return srv->env.leases;
}

size_t server_nclients(const struct server *srv)
{
	return clients_count(srv->clients);
}

size_t server_noverrides(const struct server *srv)
{
	return override_live_count(srv->env.live);
}

void server_blocks_counts(const struct server *srv, struct blocks_counts *sum, long long *held)
{
	const struct blocks *t[1 + CONFIG_STORES_MAX];
	size_t n = 0;
	t[n++] = srv->env.blocks;
	for (size_t i = 0; i < srv->env.nnamed && n < 1 + CONFIG_STORES_MAX; i++)
		t[n++] = srv->env.named[i].blocks;
	memset(sum, 0, sizeof(*sum));
	*held = 0;
	for (size_t i = 0; i < n; i++) {
		if (!t[i])
			continue;
		const struct blocks_counts *c = blocks_counts(t[i]);
		sum->blocks += c->blocks;
		sum->granted += c->granted;
		sum->lapsed += c->lapsed;
		sum->revoked += c->revoked;
		sum->returned += c->returned;
		*held += blocks_units(t[i]);
	}
}

size_t server_deny_entries(const struct server *srv)
{
	size_t n = srv->env.deny ? denycache_size(srv->env.deny) : 0;
	for (size_t i = 0; i < srv->env.nnamed; i++)
		if (srv->env.named[i].deny)
			n += denycache_size(srv->env.named[i].deny);
	return n;
}

/* A pair's cached denials and blocks, in every store's tables (a policy
 * is on one store, so its pair is in that one's at most). */
static void forget_pair(struct server *srv, const char *action, size_t alen, const char *user,
			size_t ulen)
{
	if (srv->env.deny)
		denycache_reset_pair(srv->env.deny, action, alen, user, ulen);
	if (srv->env.blocks)
		blocks_reset_pair(srv->env.blocks, action, alen, user, ulen);
	for (size_t i = 0; i < srv->env.nnamed; i++) {
		if (srv->env.named[i].deny)
			denycache_reset_pair(srv->env.named[i].deny, action, alen, user, ulen);
		if (srv->env.named[i].blocks)
			blocks_reset_pair(srv->env.named[i].blocks, action, alen, user, ulen);
	}
}

/* A RESET made through any daemon, in any store: our cached denials for
 * that pair are wrong now. Or a run-time override changed: read it again,
 * and its pair's cached denials were decided under other limits. */
static void reset_notice(void *arg, const char *tag, size_t len)
{
	struct server *srv = arg;
	const char *action;
	size_t alen, ulen;
	char user[KEYS_USER_MAX];
	size_t nl = sizeof(OVERRIDE_LIVE_NOTICE) - 1;
	if (len > nl && memcmp(tag, OVERRIDE_LIVE_NOTICE, nl) == 0) {
		const char *field = tag + nl, *sep = memchr(field, '\n', len - nl);
		if (srv->env.live)
			override_live_notice(srv->env.live, tag, len);
		size_t fl = sep ? (size_t)(sep - field) : 0, ul = sep ? len - nl - fl - 1 : 0;
		if (sep)
			forget_pair(srv, field, fl, sep + 1, ul);
		return;
	}
	if (keys_parse_tag(tag, len, &action, &alen, user, &ulen) < 0)
		return;
	forget_pair(srv, action, alen, user, ulen);
}

static void reload_tls(struct server *srv, const struct config *cfg);

void server_set_config(struct server *srv, struct config *cfg)
{
	config_ref(cfg);
	clients_set_config(srv->clients, cfg);
	config_unref(srv->cfg);
	srv->cfg = cfg;
	stats_bind(cfg);
	declog_configure(&cfg->declog);
	trace_export_configure(srv->traces, &cfg->tracing);
	/* Denials were decided under the old policies. */
	if (srv->env.deny)
		denycache_clear(srv->env.deny);
	/* and blocks taken under them go: this daemon's, now (each daemon's
	 * at its own reload) */
	if (srv->env.blocks)
		blocks_clear(srv->env.blocks);
	for (size_t i = 0; i < srv->env.nnamed; i++) {
		if (srv->env.named[i].deny)
			denycache_clear(srv->env.named[i].deny);
		if (srv->env.named[i].blocks)
			blocks_clear(srv->env.named[i].blocks);
	}
	if (srv->env.live)
		override_live_set_config(srv->env.live, cfg);
	store_watch_resets(srv->env.store, cfg->prefix, reset_notice, srv);
	for (size_t i = 0; i < srv->env.nnamed; i++)
		store_watch_resets(srv->env.named[i].store, cfg->prefix, reset_notice, srv);
	reload_tls(srv, cfg);
}

static void accept_cb(evutil_socket_t fd, const struct sockaddr *sa, void *arg)
{
	struct port *p = arg;
	clients_accept(p->clients, fd, sa, &p->cp);
}

void server_tls_files(const struct config_listen_tls *t, struct tls_server_files *f)
{
	f->cert_file = t->cert_file;
	f->key_file = t->key_file;
	f->ca_file = t->ca_file;
	f->ca_dir = t->ca_dir;
	switch (t->client_certs) {
	case CONFIG_CLIENT_CERTS_NONE:
		f->client_certs = TLS_CLIENT_CERTS_NONE;
		break;
	case CONFIG_CLIENT_CERTS_OPTIONAL:
		f->client_certs = TLS_CLIENT_CERTS_OPTIONAL;
		break;
	case CONFIG_CLIENT_CERTS_REQUIRED:
		f->client_certs = TLS_CLIENT_CERTS_REQUIRED;
		break;
	}
}

/* The ALPN protocol a listener agrees to: gRPC is h2 (RFC 7540's "h2" over TLS). */
static const char *listen_alpn(enum config_protocol p)
{
	switch (p) {
	case CONFIG_PROTOCOL_GRPC:
		return "h2";
	case CONFIG_PROTOCOL_HTTP:
		return "http/1.1";
	case CONFIG_PROTOCOL_LINE:
	case CONFIG_PROTOCOL_SPOE: /* HAProxy's SPOE backends send no ALPN */
		break;
	}
	return NULL;
}

/* -1 with err when cfg's listen[].tls files do not load (ratelimitd -t). */
int server_check_tls(const struct config *cfg, char *err, size_t errlen)
{
	for (size_t i = 0; i < cfg->nlisten; i++) {
		const struct config_listen *cl = &cfg->listen[i];
		if (!cl->tls.enabled)
			continue;
		struct tls_server_files f;
		server_tls_files(&cl->tls, &f);
		char why[300];
		struct tls_server *t =
			tls_server_new(&f, listen_alpn(cl->protocol), why, sizeof(why));
		if (!t) {
			snprintf(err, errlen, "listen %s: tls: %s", cl->address, why);
			return -1;
		}
		tls_server_unref(t);
	}
	if (cfg->metrics_listen && cfg->metrics_tls.enabled) {
		struct tls_server_files f;
		server_tls_files(&cfg->metrics_tls, &f);
		char why[300];
		struct tls_server *t = tls_server_new(&f, "http/1.1", why, sizeof(why));
		if (!t) {
			snprintf(err, errlen, "metrics %s: tls: %s", cfg->metrics_listen, why);
			return -1;
		}
		tls_server_unref(t);
	}
	return 0;
}

/* A reload: every TLS listener reads its files again, the new file's entry
 * of the same address (wherever it now stands in the list) when it still
 * has TLS; its client_certs stays as started (restart-only, reported as
 * pending). */
static void reload_tls(struct server *srv, const struct config *cfg)
{
	for (size_t i = 0; i < srv->nports; i++) {
		struct port *p = &srv->ports[i];
		const struct config_listen *cl = NULL;
		for (size_t j = 0; p->cp.tls && j < cfg->nlisten && !cl; j++)
			if (strcmp(cfg->listen[j].address, p->name) == 0)
				cl = &cfg->listen[j];
		if (!cl || !cl->tls.enabled)
			continue; /* a restart applies the change (reported as pending) */
		struct tls_server_files f;
		server_tls_files(&cl->tls, &f);
		f.client_certs = p->client_certs;
		char why[300];
		if (tls_server_reload(p->cp.tls, &f, why, sizeof(why)) < 0)
			log_error("reload: listen %s: tls: %s; new connections keep the "
				  "certificate loaded before",
				  p->cp.name, why);
		else
			log_info("reload: listen %s: certificate read again; new connections "
				 "use it",
				 p->cp.name);
	}
}

static void close_listeners(struct server *srv)
{
	for (size_t i = 0; i < srv->nports; i++)
		if (srv->ports[i].l)
			listener_close(srv->ports[i].l);
}

/* The stores of stores:, all of them, connecting in the background. */
static int named_stores_new(struct server *srv, struct event_base *base, const struct config *cfg,
			    char *err, size_t errlen)
{
	if (!cfg->nstores)
		return 0;
	srv->env.named = calloc(cfg->nstores, sizeof(*srv->env.named));
	if (!srv->env.named) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < cfg->nstores; i++) {
		struct cmd_named_store *n = &srv->env.named[i];
		char why[CONFIG_ERR_MAX / 2];
		memcpy(n->name, cfg->stores[i].name, sizeof(n->name));
		n->store = store_new_redis(base, &cfg->stores[i].redis, why, sizeof(why));
		if (!n->store) {
			snprintf(err, errlen, "stores.%s: %s", n->name, why);
			return -1;
		}
		srv->env.nnamed++;
		/* NULL: none (out of memory), its policies decided by Redis each time */
		n->deny = denycache_new(DENY_CACHE_ENTRIES);
		n->blocks = blocks_new(BLOCKS_ENTRIES);
	}
	return 0;
}

int server_check_stores(const struct server *srv, const struct config *cfg, char *err,
			size_t errlen)
{
	for (size_t i = 0; i < cfg->npolicies; i++) {
		const struct policy *p = &cfg->policies[i];
		if (p->store[0] && !cmd_env_store(&srv->env, p)) {
			snprintf(err, errlen,
				 "policies.%s.store: store %s is not running (a store added to "
				 "stores: starts at a restart)",
				 p->name, p->store);
			return -1;
		}
	}
	struct policy envoy = {.store = ""};
	memcpy(envoy.store, cfg->envoy.store, sizeof(envoy.store));
	if (envoy.store[0] && !cmd_env_store(&srv->env, &envoy)) {
		snprintf(err, errlen,
			 "envoy.store: store %s is not running (a store added to stores: starts at "
			 "a restart)",
			 envoy.store);
		return -1;
	}
	return 0;
}

void server_reload_stores_tls(struct server *srv, const struct config *cfg)
{
	for (size_t i = 0; i < srv->env.nnamed; i++) {
		const struct config_named_store *st =
			config_find_store(cfg, srv->env.named[i].name);
		char why[400];
		int rc = st ? store_reload_tls_redis(srv->env.named[i].store, &st->redis, why,
						     sizeof(why))
			    : 0;
		if (rc < 0)
			log_error("reload: stores.%s.%s; new connections keep the certificates "
				  "loaded before",
				  st->name, why);
		else if (rc > 0)
			log_info("reload: stores.%s.tls certificates read again", st->name);
	}
}

struct server *server_new(struct event_base *base, struct config *cfg, struct store *store,
			  struct activation *act, char *err, size_t errlen)
{
	struct server *srv = calloc(1, sizeof(*srv));
	if (!srv) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	srv->env.store = store;
	if (named_stores_new(srv, base, cfg, err, errlen) < 0) {
		server_free(srv);
		return NULL;
	}
	srv->env.deny = denycache_new(DENY_CACHE_ENTRIES);
	srv->env.blocks = blocks_new(BLOCKS_ENTRIES); /* NULL: no blocks */
	srv->env.live = override_live_new(base, store, cfg);
	if (!srv->env.live)
		log_error("out of memory: run-time overrides are off");
	/* made whatever the file says now: a reload may turn it on */
	char lerr[128];
	srv->env.leases = leases_new();	    /* NULL: lease requests say out of memory */
	srv->env.delays = delays_new(base); /* NULL: no request is delayed */
	srv->env.local = local_new(base, cfg, lerr, sizeof(lerr));
	if (!srv->env.local)
		log_error("%s: on_store_error: local answers as error", lerr);
	store_watch_resets(store, cfg->prefix, reset_notice, srv);
	for (size_t i = 0; i < srv->env.nnamed; i++)
		store_watch_resets(srv->env.named[i].store, cfg->prefix, reset_notice, srv);
	config_ref(cfg);
	srv->cfg = cfg;
	stats_bind(cfg);
	declog_configure(&cfg->declog);
	srv->traces = trace_export_new(base);
	trace_export_configure(srv->traces, &cfg->tracing);
	srv->declog_tick = event_new(base, -1, EV_PERSIST, declog_tick_cb, srv);
	if (srv->declog_tick) {
		struct timeval second = {1, 0};
		event_add(srv->declog_tick, &second);
	}
	srv->clients = clients_new(base, &srv->env, cfg);
	srv->ports = calloc(cfg->nlisten, sizeof(*srv->ports));
	if (!srv->clients || (cfg->nlisten && !srv->ports)) {
		snprintf(err, errlen, "out of memory");
		server_free(srv);
		return NULL;
	}
	for (size_t i = 0; i < cfg->nlisten; i++) {
		const struct config_listen *cl = &cfg->listen[i];
		struct port *p = &srv->ports[srv->nports++];
		p->clients = srv->clients;
		p->cp.admin = cl->admin;
		p->cp.auth = cl->auth;
		p->cp.protocol = cl->protocol;
		p->cp.http = cl->http;
		p->name = strdup(cl->address);
		p->cp.name = p->name;
		if (cl->tls.enabled) {
			struct tls_server_files f;
			server_tls_files(&cl->tls, &f);
			char why[300];
			p->client_certs = f.client_certs;
			p->cp.tls = tls_server_new(&f, listen_alpn(cl->protocol), why, sizeof(why));
			if (!p->cp.tls) {
				snprintf(err, errlen, "listen %s: tls: %s", cl->address, why);
				server_free(srv);
				return NULL;
			}
		}
		int fd = activation_claim(act, cl->address, cl->name);
		if (fd >= 0) {
			p->l = listener_new_fd(base, fd, cl->address, accept_cb, p, err, errlen);
			if (!p->l)
				close(fd);
			else
				log_info("listen %s: the socket systemd passed", cl->address);
		} else {
			p->l = listener_new(base, cl->address, cl->mode, accept_cb, p, err, errlen);
		}
		if (!p->l) {
			server_free(srv);
			return NULL;
		}
	}
	return srv;
}

static void given_back(void *arg)
{
	struct server *srv = arg;
	srv->giveback = NULL;
	srv->drained(srv->drained_arg);
}

/* No client is left, so no request is answered from a block again: the
 * units they hold go back to Redis (giveback.h), then the drain is done. */
static void clients_drained(void *arg)
{
	struct server *srv = arg;
	srv->giveback = giveback_start(&srv->env, srv->cfg, given_back, srv);
}

void server_drain(struct server *srv, void (*done)(void *arg), void *arg)
{
	/* delayed requests have their slots: answered now, not at the drain's end */
	delays_flush(srv->env.delays);
	close_listeners(srv);
	srv->drained = done;
	srv->drained_arg = arg;
	clients_drain(srv->clients, clients_drained, srv);
}

static struct denycache *late_deny;
static struct blocks *late_blocks;
static struct local *late_local;
static struct leases *late_leases;
static struct delays *late_delays;
static struct cmd_named_store *late_named;
static size_t late_nnamed;

void server_free_after_store(void)
{
	/* as the default store, before what their answers may touch */
	for (size_t i = 0; i < late_nnamed; i++)
		store_free(late_named[i].store);
	for (size_t i = 0; i < late_nnamed; i++) {
		denycache_free(late_named[i].deny);
		blocks_free(late_named[i].blocks);
	}
	free(late_named);
	late_named = NULL;
	late_nnamed = 0;
	delays_free(late_delays);
	late_delays = NULL;
	denycache_free(late_deny);
	blocks_free(late_blocks);
	local_free(late_local);
	leases_free(late_leases);
	late_deny = NULL;
	late_blocks = NULL;
	late_local = NULL;
	late_leases = NULL;
}

void server_free(struct server *srv)
{
	if (!srv)
		return;
	if (srv->declog_tick)
		event_free(srv->declog_tick);
	/* the drain ran out of time: the calls still out are answered as
	 * the stores go, after this (the blocks' tables go after them) */
	giveback_abandon(srv->giveback);
	srv->giveback = NULL;
	declog_close();
	trace_export_free(srv->traces);
	close_listeners(srv);
	clients_free(srv->clients);
	for (size_t i = 0; i < srv->nports; i++) {
		listener_free(srv->ports[i].l);
		tls_server_unref(srv->ports[i].cp.tls);
		free(srv->ports[i].name);
	}
	free(srv->ports);
	config_unref(srv->cfg);
	/* store_free answers what still waits on Redis after this (a drain
	 * that ran out of time): those replies may still touch the deny
	 * cache, the blocks (an ask's block), the local fallback (what
	 * on_store_error: local decides), the leases and the delays (a
	 * delayed ALLOW's claim), so they go after it */
	late_deny = srv->env.deny;
	late_blocks = srv->env.blocks;
	late_local = srv->env.local;
	late_leases = srv->env.leases;
	late_delays = srv->env.delays;
	late_named = srv->env.named;
	late_nnamed = srv->env.nnamed;
	delays_flush(late_delays); /* and anything delayed later is answered at once */
	override_live_free(srv->env.live);
	free(srv);
}
