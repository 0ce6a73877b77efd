/* store_cluster.h - the Redis Cluster store backend: slot routing, redirects, per-master pools. */
#ifndef RL_STORE_CLUSTER_H
#define RL_STORE_CLUSTER_H

#include <stddef.h>

struct event_base;
struct config_redis;
struct store;
struct tls_client;

/* Starts from cfg->cluster seeds; reads the slot map in the background. */
struct store *store_cluster_new(struct event_base *base, const struct config_redis *cfg,
				struct tls_client *tls, char *err, size_t errlen);

#endif
