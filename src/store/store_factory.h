/*
 * store_factory.h - which store backend a configuration names, and building
 * it: one row per backend (store_backends in store_factory.c), so the
 * backends include store.h only and nothing names them but the table.
 */
#ifndef RL_STORE_FACTORY_H
#define RL_STORE_FACTORY_H

#include <stddef.h>

struct config;
struct config_redis;
struct event_base;
struct store;
struct tls_client;

struct store_backend {
	/* its one word, as the live console names it: "memory", "redis",
	 * "cluster", "sentinel" */
	const char *name;
	/* what the daemon's status line (systemd's STATUS=) calls the store:
	 * "memory store", "redis" */
	const char *kind;
	/* builds it, connecting in the background; NULL with err only for a
	 * configuration it cannot use */
	struct store *(*make)(struct event_base *base, const struct config *cfg,
			      struct tls_client *tls, char *err, size_t errlen);
	/* where cfg decides, for logs: "redis 127.0.0.1:6379" */
	void (*describe)(const struct config *cfg, char *buf, size_t len);
};

/* The row of the backend cfg names. */
const struct store_backend *store_backend_of(const struct config *cfg);

/*
 * The backend cfg names (memory; one Redis, a Cluster, a Sentinel-watched
 * master, connecting in the background). NULL with err only for a
 * configuration it cannot use.
 */
struct store *store_new(struct event_base *base, const struct config *cfg, char *err,
			size_t errlen);
/* -1 with err when cfg's redis.tls files (or a store's of stores:) do not
 * load (ratelimitd -t). */
int store_check_tls(const struct config *cfg, char *err, size_t errlen);
/*
 * A reload: s's TLS context (if it has one and cfg still asks for TLS)
 * reads cfg's files again; new connections use them, open ones keep
 * theirs. 1 when reloaded, 0 when there is none, -1 with err when the
 * files do not load (the context loaded before stays).
 */
int store_reload_tls(struct store *s, const struct config *cfg, char *err, size_t errlen);
/* A store of stores: (what redis: takes): one Redis, a Cluster or a
 * Sentinel-watched master, as store_new builds redis:'s. */
struct store *store_new_redis(struct event_base *base, const struct config_redis *r, char *err,
			      size_t errlen);
/* store_reload_tls for such a store's tls section. */
int store_reload_tls_redis(struct store *s, const struct config_redis *r, char *err, size_t errlen);
/* "redis 127.0.0.1:6379", "redis cluster via ...", "memory": where cfg
 * decides, for logs. */
void store_describe(const struct config *cfg, char *buf, size_t len);

#endif
