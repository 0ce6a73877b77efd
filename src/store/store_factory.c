/* store_factory.c - the store backends in one table: which one a configuration names, building it, describing it. */
#include "store_factory.h"

#include <stdio.h>

#include "config.h"
#include "store_cluster.h"
#include "store_memory.h"
#include "store_redis.h"
#include "store_sentinel.h"

static struct store *memory_make(struct event_base *base, const struct config *cfg, char *err,
				 size_t errlen)
{
	return store_memory_new(base, &cfg->memory, err, errlen);
}

static void memory_describe(const struct config *cfg, char *buf, size_t len)
{
	snprintf(buf, len, "memory (at most %d keys)", cfg->memory.max_keys);
}

static struct store *redis_make(struct event_base *base, const struct config *cfg, char *err,
				size_t errlen)
{
	return store_redis_new(base, &cfg->redis, err, errlen);
}

static void redis_describe(const struct config *cfg, char *buf, size_t len)
{
	snprintf(buf, len, "redis %s", cfg->redis.address);
}

static struct store *cluster_make(struct event_base *base, const struct config *cfg, char *err,
				  size_t errlen)
{
	return store_cluster_new(base, &cfg->redis, err, errlen);
}

static void cluster_describe(const struct config *cfg, char *buf, size_t len)
{
	snprintf(buf, len, "redis cluster via %s%s", cfg->redis.cluster.addr[0],
		 cfg->redis.cluster.n > 1 ? " and more" : "");
}

static struct store *sentinel_make(struct event_base *base, const struct config *cfg, char *err,
				   size_t errlen)
{
	return store_sentinel_new(base, &cfg->redis, err, errlen);
}

static void sentinel_describe(const struct config *cfg, char *buf, size_t len)
{
	snprintf(buf, len, "redis master %s via sentinels", cfg->redis.sentinel_master);
}

enum { BACKEND_MEMORY, BACKEND_REDIS, BACKEND_CLUSTER, BACKEND_SENTINEL, BACKEND_N };

static const struct store_backend store_backends[BACKEND_N] = {
	[BACKEND_MEMORY] = {"memory store", memory_make, memory_describe},
	[BACKEND_REDIS] = {"redis", redis_make, redis_describe},
	[BACKEND_CLUSTER] = {"redis", cluster_make, cluster_describe},
	[BACKEND_SENTINEL] = {"redis", sentinel_make, sentinel_describe},
};

const struct store_backend *store_backend_of(const struct config *cfg)
{
	switch (cfg->store) {
	case CONFIG_STORE_MEMORY:
		return &store_backends[BACKEND_MEMORY];
	case CONFIG_STORE_REDIS:
		break;
	}
	switch (cfg->redis.mode) {
	case CONFIG_REDIS_CLUSTER:
		return &store_backends[BACKEND_CLUSTER];
	case CONFIG_REDIS_SENTINEL:
		return &store_backends[BACKEND_SENTINEL];
	case CONFIG_REDIS_SINGLE:
		break;
	}
	return &store_backends[BACKEND_REDIS];
}

struct store *store_new(struct event_base *base, const struct config *cfg, char *err, size_t errlen)
{
	return store_backend_of(cfg)->make(base, cfg, err, errlen);
}

void store_describe(const struct config *cfg, char *buf, size_t len)
{
	store_backend_of(cfg)->describe(cfg, buf, len);
}
