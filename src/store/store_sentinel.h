/* store_sentinel.h - the Sentinel store backend: follows the master that Redis Sentinel names. */
#ifndef RL_STORE_SENTINEL_H
#define RL_STORE_SENTINEL_H

#include <stddef.h>

struct event_base;
struct config_redis;
struct store;
struct tls_client;

/* Asks cfg->sentinels for cfg->sentinel_master in the background and follows failovers. */
struct store *store_sentinel_new(struct event_base *base, const struct config_redis *cfg,
				 struct tls_client *tls, char *err, size_t errlen);

#endif
