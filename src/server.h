/* server.h - listeners, accepting clients, the current config, and draining on shutdown. */
#ifndef RL_SERVER_H
#define RL_SERVER_H

#include <stddef.h>

struct event_base;
struct config;
struct store;
struct conn;
struct cmd_env;
struct server;

/* Binds every listen address of cfg (takes a reference). NULL with err on failure. */
struct server *server_new(struct event_base *base, struct config *cfg, struct store *store,
			  char *err, size_t errlen);
/* Swaps in a new snapshot (takes a reference, drops the old one). */
void server_set_config(struct server *srv, struct config *cfg);
struct config *server_config(const struct server *srv);
struct store *server_store(const struct server *srv);
/* The store and deny cache requests run against. */
const struct cmd_env *server_cmd_env(const struct server *srv);
struct event_base *server_base(const struct server *srv);
/* Stops accepting; each client is closed once its in-flight replies are written.
 * done(arg) runs from the loop once no client is left. */
void server_drain(struct server *srv, void (*done)(void *arg), void *arg);
size_t server_nclients(const struct server *srv);
void server_free(struct server *srv);

/* For conn.c: membership and deferred freeing. */
void server_conn_added(struct server *srv, struct conn *c);
void server_conn_removed(struct server *srv, struct conn *c);
void server_defer_free(struct server *srv, struct conn *c);
void server_defer_flush(struct server *srv, struct conn *c);

#endif
