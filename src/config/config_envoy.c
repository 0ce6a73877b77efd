/* config_envoy.c - the schema of envoy: envoyproxy/ratelimit rule files, and loading them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_area.h"
#include "envoy_rules.h"

enum { EK_CONFIG, EK_ALGORITHM, EK_HEADERS, EK_STORE, EK_N };

/* store: NAME, a store of stores: (checked once the whole file is read:
 * config_envoy_check_store). */
static int set_store(struct yparser *P, const struct ykey *k, void *dst)
{
	if (config_store_name(P, k, dst) < 0)
		return -1;
	struct config_read *R = P->ctx;
	R->envoy_store_mark = P->ev.start_mark;
	return 0;
}

static void put_store(FILE *f, const struct ykey *k, const void *base)
{
	const char *s = (const char *)base + k->offset;
	fputs(s[0] ? s : "(default)", f);
}

static const struct yenum envoy_header_names[] = {
	{"none", CONFIG_ENVOY_HEADERS_NONE, NULL},
	{"ratelimit", CONFIG_ENVOY_HEADERS_RATELIMIT, "RateLimit-Limit, ..."},
	{"x-ratelimit", CONFIG_ENVOY_HEADERS_XRATELIMIT, "X-RateLimit-Limit, ..."},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(enum config_envoy_headers) == sizeof(int), "yp_set_enum stores an int");

/* The rules are loaded with the file (config_load) and each gRPC call
 * takes the configuration current when it arrives: all apply on reload. */
static const struct ykey envoy_keys[EK_N] = {
	[EK_CONFIG] = {"config", yp_set_string, offsetof(struct config_envoy, config), 0, 0,
		       YP_RELOAD, yp_put_string, NULL},
	[EK_ALGORITHM] = {"algorithm", yp_set_enum, offsetof(struct config_envoy, algorithm), 0, 0,
			  YP_RELOAD, yp_put_enum, policy_algo_names},
	[EK_HEADERS] = {"response_headers", yp_set_enum, offsetof(struct config_envoy, headers), 0,
			0, YP_RELOAD, yp_put_enum, envoy_header_names},
	/* a reload may choose only a store running (server_check_stores) */
	[EK_STORE] = {"store", set_store, offsetof(struct config_envoy, store), 0, 0, YP_RELOAD,
		      put_store, NULL},
};

const struct ktable config_envoy_table = {"envoy.", envoy_keys, EK_N, KT_AT_BASE,
					  offsetof(struct config, envoy)};

int config_envoy_set(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[EK_N], start;
	if (yp_section(P, k, "expected a mapping", envoy_keys, EK_N, dst, &seen, marks, &start) < 0)
		return -1;
	if (!(seen & (1u << EK_CONFIG)))
		return yp_fail_section(P, start,
				       "needs config: a file or directory of envoyproxy/ratelimit "
				       "configuration");
	if (policy_algo_shape(((struct config_envoy *)dst)->algorithm) == POLICY_SHAPE_LEASE)
		return yp_failk(P, marks[EK_ALGORITHM], "algorithm",
				"envoy's rules are rates: concurrency is not one");
	return 0;
}

/* envoy.config's files, a path relative to the configuration file's directory. */
int config_envoy_load(struct config *c, const char *name, char *err, size_t errlen)
{
	const char *path = c->envoy.config;
	char *full = NULL;
	const char *slash = strrchr(name, '/');
	if (path[0] != '/' && slash) {
		if (asprintf(&full, "%.*s/%s", (int)(slash - name), name, path) < 0) {
			snprintf(err, errlen, "%s: out of memory", name);
			return -1;
		}
		path = full;
	}
	c->envoy.rules = envoy_rules_load(path, c->envoy.algorithm, err, errlen);
	free(full);
	envoy_rules_set_store(c->envoy.rules, c->envoy.store);
	return c->envoy.rules ? 0 : -1;
}

void config_envoy_check_store(struct yparser *P, const struct config *c)
{
	const struct config_read *R = P->ctx;
	if (!c->envoy.store[0])
		return;
	if (!config_find_store(c, c->envoy.store))
		yp_fail(P, R->envoy_store_mark,
			"envoy.store: no store %s in stores: (the default store is redis:'s; "
			"leave store: out for it)",
			c->envoy.store);
	else if (c->on_store_error == POLICY_ON_ERROR_LOCAL)
		yp_fail(P, R->envoy_store_mark,
			"envoy.store: on_store_error: local is the default store's only (yet); "
			"give on_store_error: allow, deny or error");
}
