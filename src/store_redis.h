/* store_redis.h - the single-Redis store backend (hiredis async on libevent). */
#ifndef RL_STORE_REDIS_H
#define RL_STORE_REDIS_H

#include <stddef.h>

struct event_base;
struct config_redis;
struct store;

/*
 * Starts connecting at once and keeps reconnecting with capped backoff; a
 * Redis that is down at start-up is not an error. NULL with err only for a
 * configuration it cannot use.
 */
struct store *store_redis_new(struct event_base *base, const struct config_redis *cfg, char *err,
			      size_t errlen);

/*
 * A store for one Redis Cluster master at `address` (credentials, timeout and
 * pool size from cfg): the cluster variant of the script, several slots per
 * batch, ASKING on request, redirects reported in the result for
 * store_cluster.c to follow.
 */
struct store *store_redis_new_node(struct event_base *base, const struct config_redis *cfg,
				   const char *address, char *err, size_t errlen);

#endif
