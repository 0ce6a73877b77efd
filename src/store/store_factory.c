/* store_factory.c - the store backends in one table: which one a configuration names, building it, describing it. */
#include "store_factory.h"

#include <stdio.h>

#include "config.h"
#include "store.h"
#include "store_cluster.h"
#include "store_memory.h"
#include "store_redis.h"
#include "store_sentinel.h"
#include "tls.h"

static struct store *memory_make(struct event_base *base, const struct config *cfg,
				 struct tls_client *tls, char *err, size_t errlen)
{
	(void)tls;
	return store_memory_new(base, &cfg->memory, err, errlen);
}

static void memory_describe(const struct config *cfg, char *buf, size_t len)
{
	snprintf(buf, len, "memory (at most %d keys)", cfg->memory.max_keys);
}

static struct store *redis_make(struct event_base *base, const struct config *cfg,
				struct tls_client *tls, char *err, size_t errlen)
{
	struct store *s = store_redis_new(base, &cfg->redis, tls, err, errlen);
	if (s)
		store_redis_follow_readonly(s);
	return s;
}

static void redis_describe(const struct config *cfg, char *buf, size_t len)
{
	snprintf(buf, len, "redis %s%s", cfg->redis.address,
		 cfg->redis.tls.enabled ? " (TLS)" : "");
}

static struct store *cluster_make(struct event_base *base, const struct config *cfg,
				  struct tls_client *tls, char *err, size_t errlen)
{
	return store_cluster_new(base, &cfg->redis, tls, err, errlen);
}

static void cluster_describe(const struct config *cfg, char *buf, size_t len)
{
	snprintf(buf, len, "redis cluster via %s%s", cfg->redis.cluster.addr[0],
		 cfg->redis.cluster.n > 1 ? " and more" : "");
}

static struct store *sentinel_make(struct event_base *base, const struct config *cfg,
				   struct tls_client *tls, char *err, size_t errlen)
{
	return store_sentinel_new(base, &cfg->redis, tls, err, errlen);
}

static void sentinel_describe(const struct config *cfg, char *buf, size_t len)
{
	snprintf(buf, len, "redis master %s via sentinels", cfg->redis.sentinel_master);
}

enum { BACKEND_MEMORY, BACKEND_REDIS, BACKEND_CLUSTER, BACKEND_SENTINEL, BACKEND_N };

static const struct store_backend store_backends[BACKEND_N] = {
	[BACKEND_MEMORY] = {"memory", "memory store", memory_make, memory_describe},
	[BACKEND_REDIS] = {"redis", "redis", redis_make, redis_describe},
	[BACKEND_CLUSTER] = {"cluster", "redis", cluster_make, cluster_describe},
	[BACKEND_SENTINEL] = {"sentinel", "redis", sentinel_make, sentinel_describe},
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

static void tls_files(const struct config_redis_tls *t, struct tls_client_files *f)
{
	f->ca_file = t->ca_file;
	f->ca_dir = t->ca_dir;
	f->cert_file = t->cert_file;
	f->key_file = t->key_file;
	f->server_name = t->server_name;
}

static int uses_tls(const struct config *cfg)
{
	return cfg->store == CONFIG_STORE_REDIS && cfg->redis.tls.enabled;
}

/* The TLS context cfg asks for: NULL and err[0] == 0 when it asks none. */
static struct tls_client *tls_make(const struct config *cfg, char *err, size_t errlen)
{
	err[0] = '\0';
	if (!uses_tls(cfg))
		return NULL;
	struct tls_client_files f;
	tls_files(&cfg->redis.tls, &f);
	char why[300];
	struct tls_client *tls = tls_client_new(&f, why, sizeof(why));
	if (!tls)
		snprintf(err, errlen, "redis.tls: %s", why);
	return tls;
}

static struct tls_client *tls_make_redis(const struct config_redis *r, char *err, size_t errlen);

int store_check_tls(const struct config *cfg, char *err, size_t errlen)
{
	struct tls_client *tls = tls_make(cfg, err, errlen);
	tls_client_unref(tls);
	for (size_t i = 0; !err[0] && i < cfg->nstores; i++) {
		char why[400];
		tls_client_unref(tls_make_redis(&cfg->stores[i].redis, why, sizeof(why)));
		if (why[0])
			snprintf(err, errlen, "stores.%s.%s", cfg->stores[i].name, why);
	}
	return err[0] ? -1 : 0;
}

struct store *store_new(struct event_base *base, const struct config *cfg, char *err, size_t errlen)
{
	struct tls_client *tls = tls_make(cfg, err, errlen);
	if (!tls && err[0])
		return NULL;
	struct store *s = store_backend_of(cfg)->make(base, cfg, tls, err, errlen);
	if (s)
		s->tls = tls; /* the store's own reference, for reloads */
	else
		tls_client_unref(tls);
	return s;
}

int store_reload_tls(struct store *s, const struct config *cfg, char *err, size_t errlen)
{
	err[0] = '\0';
	if (!s->tls || !uses_tls(cfg))
		return 0; /* turning TLS on or off takes a restart (reported as such) */
	struct tls_client_files f;
	tls_files(&cfg->redis.tls, &f);
	char why[300];
	if (tls_client_reload(s->tls, &f, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "redis.tls: %s", why);
		return -1;
	}
	return 1;
}

void store_describe(const struct config *cfg, char *buf, size_t len)
{
	store_backend_of(cfg)->describe(cfg, buf, len);
}

/* The TLS context r asks for: NULL and err[0] == 0 when it asks none. */
static struct tls_client *tls_make_redis(const struct config_redis *r, char *err, size_t errlen)
{
	err[0] = '\0';
	if (!r->tls.enabled)
		return NULL;
	struct tls_client_files f;
	tls_files(&r->tls, &f);
	char why[300];
	struct tls_client *tls = tls_client_new(&f, why, sizeof(why));
	if (!tls)
		snprintf(err, errlen, "tls: %s", why);
	return tls;
}

struct store *store_new_redis(struct event_base *base, const struct config_redis *r, char *err,
			      size_t errlen)
{
	struct tls_client *tls = tls_make_redis(r, err, errlen);
	if (!tls && err[0])
		return NULL;
	struct store *s;
	switch (r->mode) {
	case CONFIG_REDIS_CLUSTER:
		s = store_cluster_new(base, r, tls, err, errlen);
		break;
	case CONFIG_REDIS_SENTINEL:
		s = store_sentinel_new(base, r, tls, err, errlen);
		break;
	case CONFIG_REDIS_SINGLE:
	default:
		s = store_redis_new(base, r, tls, err, errlen);
		break;
	}
	if (s)
		s->tls = tls;
	else
		tls_client_unref(tls);
	return s;
}

int store_reload_tls_redis(struct store *s, const struct config_redis *r, char *err, size_t errlen)
{
	err[0] = '\0';
	if (!s->tls || !r->tls.enabled)
		return 0;
	struct tls_client_files f;
	tls_files(&r->tls, &f);
	char why[300];
	if (tls_client_reload(s->tls, &f, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "tls: %s", why);
		return -1;
	}
	return 1;
}
