/*
 * server.h - the daemon's wiring: the current config snapshot, the store and
 * deny cache requests run against, and the client ports; draining on shutdown.
 */
#ifndef RL_SERVER_H
#define RL_SERVER_H

#include <stddef.h>

struct event_base;
struct config;
struct store;
struct local;
struct server;
struct activation;
struct blocks;
struct cmd_env;

/* Binds every listen address of cfg (takes a reference), or takes the
 * socket systemd passed for it from act (NULL: none). NULL with err on
 * failure. */
struct server *server_new(struct event_base *base, struct config *cfg, struct store *store,
			  struct activation *act, char *err, size_t errlen);
/* Swaps in a new snapshot (takes a reference, drops the old one). */
void server_set_config(struct server *srv, struct config *cfg);
/* -1 with err when cfg's listen[].tls (and metrics.tls) files do not load
 * (ratelimitd -t). */
int server_check_tls(const struct config *cfg, char *err, size_t errlen);
struct config_listen_tls;
struct tls_server_files;
/* A listener's TLS files (listen[].tls, metrics.tls) as lib/tls.h takes them. */
void server_tls_files(const struct config_listen_tls *t, struct tls_server_files *f);
struct config *server_config(const struct server *srv);
struct store *server_store(const struct server *srv);
/* A reload's file: each policy's store must be running (stores: are
 * built at start). 0, or -1 with "policies.NAME.store: why" in err. */
int server_check_stores(const struct server *srv, const struct config *cfg, char *err,
			size_t errlen);
/* A reload: the stores of stores: read their tls files again (logged). */
void server_reload_stores_tls(struct server *srv, const struct config *cfg);
/* What requests are executed against (cmd_execute): for a front end
 * outside the listeners (the console). */
const struct cmd_env *server_env(const struct server *srv);
/* Concurrency leases (leases.h); NULL when out of memory. */
struct leases *server_leases(const struct server *srv);
/* The local fallback (on_store_error: local); NULL when out of memory. */
struct local *server_local(const struct server *srv);
/* Stops accepting; each client is closed once its in-flight replies are written.
 * done(arg) runs from the loop once no client is left. */
void server_drain(struct server *srv, void (*done)(void *arg), void *arg);
size_t server_nclients(const struct server *srv);
/* Run-time overrides in force (override_live.h). */
size_t server_noverrides(const struct server *srv);
/* Denials the deny caches hold now, every store's (0 without one). */
size_t server_deny_entries(const struct server *srv);
/* The hot keys' blocks (blocks.h), every store's summed; *held: units held now. */
struct blocks_counts;
void server_blocks_counts(const struct server *srv, struct blocks_counts *sum, long long *held);
void server_free(struct server *srv);
/* After store_free: what late replies may touch (server_free left it). */
void server_free_after_store(void);

#endif
