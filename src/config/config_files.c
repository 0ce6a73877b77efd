/* config_files.c - the files a configuration names (config_files.h), each once. */
#include "config_files.h"

#include <string.h>

#include "config.h"

#define SEEN_MAX 64 /* names compared for duplicates; more are passed as they come */

struct seen {
	const char *path[SEEN_MAX];
	size_t n;
	void (*fn)(const char *path, void *arg);
	void *arg;
};

/* fn(path), unless path is NULL or given already (a certificate shared by
 * listeners). */
static void give(struct seen *s, const char *path)
{
	if (!path || !*path)
		return;
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->path[i], path) == 0)
			return;
	if (s->n < SEEN_MAX)
		s->path[s->n++] = path;
	s->fn(path, s->arg);
}

static void give_listen_tls(struct seen *s, const struct config_listen_tls *t)
{
	if (!t->enabled)
		return;
	give(s, t->cert_file);
	give(s, t->key_file);
	give(s, t->ca_file);
	give(s, t->ca_dir);
}

static void give_redis_tls(struct seen *s, const struct config_redis_tls *t)
{
	give(s, t->cert_file);
	give(s, t->key_file);
	give(s, t->ca_file);
	give(s, t->ca_dir);
}

void config_files(const struct config *cfg, void (*fn)(const char *path, void *arg), void *arg)
{
	struct seen s = {.fn = fn, .arg = arg};
	give(&s, cfg->envoy.config);
	for (size_t i = 0; i < cfg->nidentities; i++)
		give(&s, cfg->identities[i].token_file);
	for (size_t i = 0; i < cfg->nlisten; i++)
		give_listen_tls(&s, &cfg->listen[i].tls);
	if (cfg->metrics_listen)
		give_listen_tls(&s, &cfg->metrics_tls);
	if (cfg->redis.tls.enabled) /* only with a Redis: the configuration checks */
		give_redis_tls(&s, &cfg->redis.tls);
	for (size_t i = 0; i < cfg->nstores; i++)
		if (cfg->stores[i].redis.tls.enabled)
			give_redis_tls(&s, &cfg->stores[i].redis.tls);
	give(&s, cfg->declog.hash_key_file);
}
