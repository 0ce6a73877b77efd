/*
 * config_area.h - private to the config*.c files: what config.c (the top
 * table, snapshot and reload diff) shares with each area's schema,
 * config_listen.c, config_store.c, config_policy.c and config_envoy.c
 * (HAProxy's cfgparse-*.c).
 */
#ifndef RL_CONFIG_AREA_H
#define RL_CONFIG_AREA_H

#include <stddef.h>
#include <stdio.h>

#include "config_yaml.h"
#include "yenum.h"

/* config.h's, by pointer only: the areas include config.h themselves, and
 * config.c includes this header (no module cycle between the two). */
struct config;
struct config_http;
struct config_redis;

/* Where the values of a table's keys are in a snapshot, for a reload to compare them. */
enum ktable_values {
	KT_AT_BASE,  /* at `base` in struct config */
	KT_LISTEN,   /* in each listen entry, compared entry by entry */
	KT_POLICY,   /* in each policy: the policies key reports them, policy by policy */
	KT_IDENTITY, /* in each identity: the identities key reports them */
	KT_STORE,    /* in each store of stores:, compared store by store */
};

/* A table of keys, where it sits in the file and where its values are;
 * config.c lists every one (key_tables) in the order --config-keys shows. */
struct ktable {
	const char *at; /* "redis.sentinel.", "listen[].", "policies.NAME." */
	const struct ykey *keys;
	size_t nkeys;
	enum ktable_values values;
	size_t base; /* KT_AT_BASE */
};

struct pentry;

/* The schema's state while a file is read (the parser's ctx): the
 * policies read so far, and where each listen address and metrics.listen
 * were, for config_listen_check_binds. */
struct config_read {
	struct pentry *pol; /* config_policy.c's */
	size_t npol, cappol;
	yaml_mark_t *listen_marks; /* one per c->listen entry read */
	size_t caplm;
	yaml_mark_t metrics_mark;
	yaml_mark_t envoy_store_mark; /* envoy.store's, when given */
};

/* config.c: address values, for every area that has one. */
/* "host:port", "[v6]:port" or "unix:/absolute/path" at the current event, for key. */
int config_address_scalar(struct yparser *P, const char *key, const char **s, size_t *len);
/* A setter: such an address, into a char *. */
int config_set_address(struct yparser *P, const struct ykey *k, void *dst);
/* A setter: a file's path into a char *, a relative one taken from the
 * configuration file's directory (a daemon's working directory is /). */
int config_set_path(struct yparser *P, const struct ykey *k, void *dst);
/* A store's name (stores: NAME) as key k's value, into out (room for
 * POLICY_STORE_NAME_MAX + 1): 0, or -1 with the error reported. Whether
 * stores: has it is checked once the whole file is read. */
int config_store_name(struct yparser *P, const struct ykey *k, char *out);

/* config_listen.c: listen (a list of addresses and their options) and metrics. */
extern const struct ktable config_listen_table, config_listen_tls_table, config_metrics_table,
	config_metrics_tls_table;
/* The listen key's setter (dst: the struct config) and printer. */
int config_listen_set(struct yparser *P, const struct ykey *k, void *dst);
void config_listen_put(FILE *f, const struct ykey *k, const void *base);
/* The metrics section's setter (dst: the struct config). */
int config_listen_set_metrics(struct yparser *P, const struct ykey *k, void *dst);
/* An HTTP listener's defaults. */
void config_listen_http_defaults(struct config_http *h);
/* Addresses no two sockets can bind: errors at the later one. listed: the
 * listen key was given (else metrics.listen takes the blame). */
void config_listen_check_binds(struct yparser *P, const struct config *c, int listed);
void config_listen_free(struct config *c);

/* config_store.c: store, memory and redis (single, cluster, sentinel). */
extern const struct yenum config_store_names[];
extern const struct ktable config_memory_table, config_redis_table, config_sentinel_table,
	config_redis_tls_table;
int config_store_set_memory(struct yparser *P, const struct ykey *k, void *dst);
int config_store_set_redis(struct yparser *P, const struct ykey *k, void *dst);
void config_store_free_redis(struct config_redis *r);
/* stores: (more stores by name): the tables, the key's setter (dst: the
 * struct config), its printer (the names), and freeing them. */
extern const struct ktable config_stores_table, config_stores_sentinel_table,
	config_stores_tls_table;
int config_store_set_stores(struct yparser *P, const struct ykey *k, void *dst);
void config_store_put_stores(FILE *f, const struct ykey *k, const void *base);
void config_store_free_stores(struct config *c);
/* config.c: redis:'s defaults, which a store of stores: starts from too; -1 out of memory. */
int config_redis_defaults(struct config_redis *r);

/* config_policy.c: policies, their bans and overrides. */
extern const struct ktable config_policy_table, config_ban_table, config_override_table,
	config_delay_table, config_blocks_table;
/* The policies key's setter (dst: the struct config); the policies go to
 * c->policies, sorted by name, once all are read without error. */
int config_policy_set(struct yparser *P, const struct ykey *k, void *dst);
/* Each policy's store: one of c's stores (an error at its store key); a
 * remote store's policies get blocks: {max: auto} unless they set blocks. */
void config_policy_check_stores(struct yparser *P, struct config *c);
/* Frees what reading the policies took; `handed`: they went to a
 * snapshot (else their overrides are freed too). */
void config_policy_read_done(struct config_read *R, int handed);

/* config_envoy.c: envoy (envoyproxy/ratelimit's rule files). */
extern const struct ktable config_envoy_table;
int config_envoy_set(struct yparser *P, const struct ykey *k, void *dst);
/* Loads c->envoy.config's rules, a path relative to the directory of the
 * configuration file `name`; 0, or -1 with err. */
int config_envoy_load(struct config *c, const char *name, char *err, size_t errlen);
/* envoy.store: one of c's stores (an error at that key). */
void config_envoy_check_store(struct yparser *P, const struct config *c);

/* config.c: a share, a number above 0 and at most 1 (a double). */
int config_set_share(struct yparser *P, const struct ykey *k, void *dst);
void config_put_share(FILE *f, const struct ykey *k, const void *base);

/* config_declog.c: decision_log (the sampled log of decisions). */
extern const struct ktable config_declog_table;
int config_declog_set(struct yparser *P, const struct ykey *k, void *dst);
/* Reads decision_log.hash_key_file into the key; -1 with err. */
int config_declog_load(struct config *c, const char *name, char *err, size_t errlen);
void config_declog_free(struct config *c);

/* config_tracing.c: tracing (spans of decisions, OTLP over HTTP). */
extern const struct ktable config_tracing_table;
int config_tracing_set(struct yparser *P, const struct ykey *k, void *dst);
void config_tracing_free(struct config *c);

/* config_identity.c: identities (who a client may prove to be). */
extern const struct ktable config_identity_table;
int config_identity_set(struct yparser *P, const struct ykey *k, void *dst);
void config_identity_put(FILE *f, const struct ykey *k, const void *base);
void config_identity_free(struct config *c);
/* Reads each identity's token (file or environment) and checks the
 * policies they name; -1 with "NAME: why" in err. */
int config_identity_load(struct config *c, const char *name, char *err, size_t errlen);

#endif
