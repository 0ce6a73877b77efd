/*
 * config.c - the configuration's top level: the top key table, defaults,
 * the values more than one area writes (addresses), every key table in
 * file order, loading and checking a file into the refcounted snapshot,
 * and a reload's report (config_diff). Each area's keys are in
 * config_listen.c, config_store.c, config_policy.c and config_envoy.c.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_area.h"
#include "config_yaml.h"
#include "envoy_rules.h"
#include "keys.h"
#include "log.h"
#include "override.h"

_Static_assert(CONFIG_ERR_MAX == YP_ERR_MAX && CONFIG_ERRORS_SHOWN == YP_ERRORS_SHOWN,
	       "config.h promises what config_yaml.c gives");

/* Every default lives here; config_defaults() is the only place that applies them. */
#define DEFAULT_LISTEN "127.0.0.1:7379"
#define DEFAULT_REDIS_ADDRESS "127.0.0.1:6379"
#define DEFAULT_REDIS_DATABASE 0
#define DEFAULT_REDIS_TIMEOUT_MS 50
#define DEFAULT_REDIS_CONNECTIONS 2
#define DEFAULT_REDIS_WAIT_TIMEOUT_MS 20
#define DEFAULT_PREFIX "rl:"
#define DEFAULT_ON_STORE_ERROR POLICY_ON_ERROR_ALLOW
#define DEFAULT_MAX_LINE 4096
#define DEFAULT_MAX_CLIENTS 10000
#define DEFAULT_IDLE_TIMEOUT_MS 0
#define DEFAULT_REQUEST_TIMEOUT_MS 10000
#define DEFAULT_LOG_LEVEL LOG_LEVEL_INFO

/* sizeof(sockaddr_un.sun_path) on Linux, terminating NUL included. */
#define UNIX_PATH_MAX 108

/* Keys are built as <prefix>{action:user}...; a brace would break Redis
 * Cluster hash tags, whitespace and control bytes have no business there. */
static int set_prefix(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a string", &s, &len) < 0)
		return -1;
	if (len > KEYS_PREFIX_MAX)
		return yp_failk(P, P->ev.start_mark, k->name, "longer than %d bytes",
				KEYS_PREFIX_MAX);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '{' || ch == '}' || ch <= ' ' || ch == 0x7f)
			return yp_failk(
				P, P->ev.start_mark, k->name,
				"must not contain '{', '}', whitespace or control characters");
	}
	return yp_dup_string(P, (char **)dst, s, len);
}

static int port_valid(const char *s, size_t len)
{
	int64_t port;
	return yp_parse_dec(s, len, 1, 65535, &port) == 0;
}

static int host_char(char ch, int bracketed)
{
	if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	    ch == '.' || ch == '-' || ch == '_')
		return 1;
	/* Inside brackets: IPv6 colons and a %zone suffix. */
	return bracketed && (ch == ':' || ch == '%');
}

/* "host:port", "[v6]:port" or "unix:/absolute/path"; only the syntax is
 * checked here, resolving is the listener's and the store's business. */
static const char *address_error(const char *s, size_t len)
{
	if (len >= 5 && memcmp(s, "unix:", 5) == 0) {
		if (len == 5 || s[5] != '/')
			return "a unix socket path must be absolute: unix:/path";
		if (len - 5 >= UNIX_PATH_MAX)
			return "unix socket path too long (at most 107 bytes)";
		return NULL;
	}
	const char *usage = "expected host:port, [IPv6]:port or unix:/path";
	size_t colon = len;
	while (colon > 0 && s[colon - 1] != ':')
		colon--;
	if (colon == 0)
		return usage;
	colon--;
	if (!port_valid(s + colon + 1, len - colon - 1))
		return "port must be an integer from 1 to 65535";
	const char *host = s;
	size_t hlen = colon;
	int bracketed = hlen > 0 && host[0] == '[';
	if (bracketed) {
		if (hlen < 3 || host[hlen - 1] != ']' || !memchr(host + 1, ':', hlen - 2))
			return "an IPv6 address goes in brackets: [::1]:port";
		host++;
		hlen -= 2;
	}
	if (hlen == 0)
		return usage;
	for (size_t i = 0; i < hlen; i++) {
		if (!host_char(host[i], bracketed))
			return host[i] == ':' ? "an IPv6 address goes in brackets: [::1]:port"
					      : "invalid character in host name";
	}
	return NULL;
}

int config_address_scalar(struct yparser *P, const char *key, const char **s, size_t *len)
{
	if (yp_scalar(P, key, "an address (host:port or unix:/path)", s, len) < 0)
		return -1;
	const char *why = address_error(*s, *len);
	if (why)
		return yp_failk(P, P->ev.start_mark, key, "%s", why);
	return 0;
}

/* A file's path; a relative one is taken from the configuration file's
 * directory (a daemon's working directory is /), as envoy.config is. */
int config_store_name(struct yparser *P, const struct ykey *k, char *out)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a store's name (stores: NAME)", &s, &len) < 0)
		return -1;
	if (len == 0 || len > POLICY_STORE_NAME_MAX || memchr(s, '\0', len))
		return yp_failk(P, P->ev.start_mark, k->name,
				"a store's name is 1 to %d characters", POLICY_STORE_NAME_MAX);
	memcpy(out, s, len);
	out[len] = '\0';
	return 0;
}

int config_set_path(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s, *slash = strrchr(P->name, '/');
	size_t len;
	if (yp_scalar(P, k->name, "a file's path", &s, &len) < 0)
		return -1;
	if (len == 0)
		return yp_failk(P, P->ev.start_mark, k->name, "must not be empty");
	if (memchr(s, '\0', len))
		return yp_failk(P, P->ev.start_mark, k->name, "must not hold a NUL byte");
	char **out = dst;
	free(*out);
	*out = NULL;
	if (s[0] == '/' || !slash)
		return yp_dup_string(P, out, s, len);
	if (asprintf(out, "%.*s/%.*s", (int)(slash - P->name), P->name, (int)len, s) < 0) {
		*out = NULL;
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	}
	return 0;
}

int config_set_address(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (config_address_scalar(P, k->name, &s, &len) < 0)
		return -1;
	return yp_dup_string(P, (char **)dst, s, len);
}

/* A share of a limit, 0 < x <= 1, written as a decimal ("0.5", "1"). */
int config_set_share(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a number above 0, at most 1", &s, &len) < 0)
		return -1;
	int digits = 0, dots = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] >= '0' && s[i] <= '9')
			digits++;
		else if (s[i] == '.' && dots++ == 0)
			continue;
		else
			digits = -1000;
	}
	/* libyaml NUL-terminates scalars: strtod stops at the end */
	double v = digits > 0 && digits <= 12 ? strtod(s, NULL) : -1;
	if (!(v > 0 && v <= 1))
		return yp_failk(P, P->ev.start_mark, k->name,
				"must be a number above 0 and at most 1, such as 0.5");
	*(double *)dst = v;
	return 0;
}

/* The printers below show a value as a file would write it. */
void config_put_share(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "%g", *(const double *)((const char *)base + k->offset));
}

/* Quoted: "" is a prefix too. */
static void put_prefix(FILE *f, const struct ykey *k, const void *base)
{
	fprintf(f, "\"%s\"", *(char *const *)((const char *)base + k->offset));
}

/* A name usable as an action in keys and metrics: [A-Za-z0-9_.-]. */
static int set_namespace(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a name", &s, &len) < 0)
		return -1;
	if (len == 0 || len > POLICY_NAME_MAX)
		return yp_failk(P, P->ev.start_mark, k->name, "1 to %d characters",
				POLICY_NAME_MAX);
	for (size_t i = 0; i < len; i++)
		if (!strchr("_.-", s[i]) && !(s[i] >= '0' && s[i] <= '9') &&
		    !(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z'))
			return yp_failk(P, P->ev.start_mark, k->name,
					"letters, digits, '_', '.' and '-' only");
	memcpy(dst, s, len);
	((char *)dst)[len] = '\0';
	return 0;
}

enum { HK_ENABLED, HK_NAMESPACE, HK_MAX_BURST, HK_MAX_PERIOD, HK_N };

/* cmd.c reads them from each request's configuration: all apply on reload. */
static const struct ykey throttle_keys[HK_N] = {
	[HK_ENABLED] = {"enabled", yp_set_bool, offsetof(struct config_throttle, enabled), 0, 0,
			YP_RELOAD, yp_put_bool, NULL},
	[HK_NAMESPACE] = {"namespace", set_namespace, offsetof(struct config_throttle, namespace),
			  0, 0, YP_RELOAD, yp_put_chars, NULL},
	[HK_MAX_BURST] = {"max_burst", yp_set_int64, offsetof(struct config_throttle, max_burst), 0,
			  POLICY_MAX_COUNT - 1, YP_RELOAD, yp_put_int64, NULL},
	[HK_MAX_PERIOD] = {"max_period", yp_set_duration,
			   offsetof(struct config_throttle, max_period_ms), 1000,
			   POLICY_MAX_PERIOD_MS, YP_RELOAD, yp_put_duration, NULL},
};

static int set_throttle(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[HK_N], start;
	return yp_section(P, k, "expected a mapping", throttle_keys, HK_N, dst, &seen, marks,
			  &start);
}

enum {
	TK_LISTEN,
	TK_STORE,
	TK_MEMORY,
	TK_REDIS,
	TK_STORES,
	TK_PREFIX,
	TK_ON_ERROR,
	TK_LOCAL_SHARE,
	TK_MAX_LINE,
	TK_MAX_CLIENTS,
	TK_IDLE_TIMEOUT,
	TK_REQUEST_TIMEOUT,
	TK_LOG_LEVEL,
	TK_METRICS,
	TK_THROTTLE,
	TK_SHADOW,
	TK_WATCH,
	TK_MAX_DELAYED,
	TK_ENVOY,
	TK_DECISION_LOG,
	TK_TRACING,
	TK_IDENTITIES,
	TK_POLICIES,
	TK_N
};

static const struct ykey top_keys[TK_N] = {
	[TK_LISTEN] = {"listen", config_listen_set, 0, 0, 0, YP_RESTART_LIST, config_listen_put,
		       NULL},
	[TK_STORE] = {"store", yp_set_enum, offsetof(struct config, store), 0, 0, YP_RESTART,
		      yp_put_enum, config_store_names},
	[TK_MEMORY] = {"memory", config_store_set_memory, offsetof(struct config, memory), 0, 0,
		       YP_SECTION, NULL, NULL},
	[TK_REDIS] = {"redis", config_store_set_redis, offsetof(struct config, redis), 0, 0,
		      YP_SECTION, NULL, NULL},
	/* each store's keys follow redis:'s rules, store by store (diff_stores) */
	[TK_STORES] = {"stores", config_store_set_stores, 0, 0, CONFIG_STORES_MAX, YP_RESTART,
		       config_store_put_stores, NULL},
	[TK_PREFIX] = {"prefix", set_prefix, offsetof(struct config, prefix), 0, 0, YP_RELOAD,
		       put_prefix, NULL},
	[TK_ON_ERROR] = {"on_store_error", yp_set_enum, offsetof(struct config, on_store_error), 0,
			 0, YP_RELOAD, yp_put_enum, policy_on_error_names},
	/* read by each decision taken locally */
	[TK_LOCAL_SHARE] = {"local_share", config_set_share, offsetof(struct config, local_share),
			    0, 0, YP_RELOAD, config_put_share, NULL},
	[TK_MAX_LINE] = {"max_line", yp_set_size, offsetof(struct config, max_line), 64, 1048576,
			 YP_RELOAD, yp_put_size, NULL},
	[TK_MAX_CLIENTS] = {"max_clients", yp_set_int, offsetof(struct config, max_clients), 1,
			    1000000, YP_RELOAD, yp_put_int, NULL},
	/* for the clients that connect after the reload */
	[TK_IDLE_TIMEOUT] = {"idle_timeout", yp_set_duration,
			     offsetof(struct config, idle_timeout_ms), 1000, POLICY_MAX_PERIOD_MS,
			     YP_RELOAD, yp_put_duration, NULL},
	[TK_REQUEST_TIMEOUT] = {"request_timeout", yp_set_duration,
				offsetof(struct config, request_timeout_ms), 100, 3600000,
				YP_RELOAD, yp_put_duration, NULL},
	/* main.c's reload sets it */
	[TK_LOG_LEVEL] = {"log_level", yp_set_enum, offsetof(struct config, log_level), 0, 0,
			  YP_RELOAD, yp_put_enum, log_level_names},
	[TK_METRICS] = {"metrics", config_listen_set_metrics, 0, 0, 0, YP_SECTION, NULL, NULL},
	[TK_SHADOW] = {"shadow", yp_set_bool, offsetof(struct config, shadow), 0, 0, YP_RELOAD,
		       yp_put_bool, NULL},
	/* main.c's reload watches the new file's files (ops/watch.h) */
	[TK_WATCH] = {"watch", yp_set_bool, offsetof(struct config, watch), 0, 0, YP_RELOAD,
		      yp_put_bool, NULL},
	/* read by each request a funnel's delay may hold */
	[TK_MAX_DELAYED] = {"max_delayed", yp_set_int, offsetof(struct config, max_delayed), 0,
			    1000000, YP_RELOAD, yp_put_int, NULL},
	[TK_THROTTLE] = {"throttle", set_throttle, offsetof(struct config, throttle), 0, 0,
			 YP_SECTION, NULL, NULL},
	[TK_ENVOY] = {"envoy", config_envoy_set, offsetof(struct config, envoy), 0, 0, YP_SECTION,
		      NULL, NULL},
	[TK_DECISION_LOG] = {"decision_log", config_declog_set, offsetof(struct config, declog), 0,
			     0, YP_SECTION, NULL, NULL},
	[TK_TRACING] = {"tracing", config_tracing_set, offsetof(struct config, tracing), 0, 0,
			YP_SECTION, NULL, NULL},
	/* tokens are read again on every reload (config_load) */
	[TK_IDENTITIES] = {"identities", config_identity_set, 0, 0, CONFIG_IDENTITIES_MAX,
			   YP_RELOAD, config_identity_put, NULL},
	[TK_POLICIES] = {"policies", config_policy_set, 0, 0, CONFIG_POLICIES_MAX, YP_PER_POLICY,
			 NULL, NULL},
};

static const struct policy *find_own_policy(const struct config *c, const char *name, size_t len);

static const struct ktable top_table = {"", top_keys, TK_N, KT_AT_BASE, 0};
static const struct ktable throttle_table = {"throttle.", throttle_keys, HK_N, KT_AT_BASE,
					     offsetof(struct config, throttle)};

/* Every table of keys, in the order --config-keys lists them. */
static const struct ktable *const key_tables[] = {
	&top_table,		       /* "" */
	&config_listen_table,	       /* "listen[]." (config_listen.c) */
	&config_listen_tls_table,      /* "listen[].tls." */
	&config_memory_table,	       /* "memory." (config_store.c) */
	&config_redis_table,	       /* "redis." */
	&config_sentinel_table,	       /* "redis.sentinel." */
	&config_redis_tls_table,       /* "redis.tls." */
	&config_stores_table,	       /* "stores.NAME." (config_store.c) */
	&config_stores_sentinel_table, /* "stores.NAME.sentinel." */
	&config_stores_tls_table,      /* "stores.NAME.tls." */
	&config_metrics_table,	       /* "metrics." (config_listen.c) */
	&config_metrics_tls_table,     /* "metrics.tls." */
	&throttle_table,	       /* "throttle." */
	&config_envoy_table,	       /* "envoy." (config_envoy.c) */
	&config_declog_table,	       /* "decision_log." (config_declog.c) */
	&config_tracing_table,	       /* "tracing." (config_tracing.c) */
	&config_identity_table,	       /* "identities.NAME." (config_identity.c) */
	&config_policy_table,	       /* "policies.NAME." (config_policy.c) */
	&config_ban_table,	       /* "policies.NAME.ban." */
	&config_delay_table,	       /* "policies.NAME.delay." */
	&config_blocks_table,	       /* "policies.NAME.blocks." */
	&config_override_table,	       /* "policies.NAME.overrides.USER." */
};

static enum config_reload reload_of(enum yp_reload r)
{
	switch (r) {
	case YP_RELOAD:
		return CONFIG_RELOAD_APPLIES;
	case YP_RESTART:
	case YP_RESTART_SECRET:
	case YP_RESTART_LIST:
		return CONFIG_RELOAD_RESTART;
	case YP_SECTION:
		return CONFIG_RELOAD_SECTION;
	case YP_PER_POLICY:
		return CONFIG_RELOAD_PER_POLICY;
	}
	return CONFIG_RELOAD_SECTION; /* not reached: the switch names every kind */
}

const char *config_reload_name(enum config_reload r)
{
	switch (r) {
	case CONFIG_RELOAD_APPLIES:
		return "applies";
	case CONFIG_RELOAD_RESTART:
		return "restart";
	case CONFIG_RELOAD_SECTION:
		return "section";
	case CONFIG_RELOAD_PER_POLICY:
		return "per-policy";
	}
	return "?";
}

void config_key_reloads(void (*fn)(const char *path, enum config_reload how, void *arg), void *arg)
{
	for (size_t t = 0; t < sizeof(key_tables) / sizeof(key_tables[0]); t++)
		for (size_t k = 0; k < key_tables[t]->nkeys; k++) {
			char path[128];
			snprintf(path, sizeof(path), "%s%s", key_tables[t]->at,
				 key_tables[t]->keys[k].name);
			fn(path, reload_of(key_tables[t]->keys[k].reload), arg);
		}
}

/* config_key_paths' callback, under config_key_reloads. */
struct key_path_fn {
	void (*fn)(const char *path, void *arg);
	void *arg;
};

static void key_path_only(const char *path, enum config_reload how, void *arg)
{
	const struct key_path_fn *f = arg;
	(void)how;
	f->fn(path, f->arg);
}

void config_key_paths(void (*fn)(const char *path, void *arg), void *arg)
{
	struct key_path_fn f = {fn, arg};
	config_key_reloads(key_path_only, &f);
}

/* k's value in the struct at base, as text; malloc'd, NULL when out of memory. */
static char *key_text(const struct ykey *k, const void *base)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f)
		return NULL;
	k->put(f, k, base);
	if (fclose(f) != 0) {
		free(s);
		return NULL;
	}
	return s;
}

/* One reload's comparison. */
struct diff {
	const struct config *running, *old, *file;
	void (*fn)(const struct config_change *ch, void *arg);
	void *arg;
	int pending; /* restart-pending keys reported */
};

/* Reports k (named `name`) when its values at a and b print differently. */
static void diff_key(struct diff *D, enum config_change_kind kind, const char *name,
		     const struct ykey *k, const void *a, const void *b)
{
	char *x = key_text(k, a), *y = key_text(k, b);
	if (!x || !y || strcmp(x, y) != 0) {
		struct config_change ch = {kind, name, k->reload == YP_RESTART_SECRET,
					   x && y ? x : NULL, x && y ? y : NULL};
		D->fn(&ch, D->arg);
		D->pending += kind == CONFIG_CHANGE_RESTART_PENDING;
	}
	free(x);
	free(y);
}

/* A policy as a reload describes it: its limits, and how many overrides. */
static void describe_policy(const struct policy *p, char *buf, size_t cap)
{
	size_t n = policy_describe(p, buf, cap);
	if (p->overrides && n < cap)
		snprintf(buf + n, cap - n, " overrides %zu", p->overrides->n);
}

/* Policies added, changed and removed since the previous file. */
static void diff_policies(struct diff *D)
{
	char was[256], desc[256];
	for (size_t i = 0; i < D->file->npolicies; i++) {
		const struct policy *np = &D->file->policies[i];
		const struct policy *op = find_own_policy(D->old, np->name, np->name_len);
		if (op && policy_equal(op, np) && override_set_equal(op->overrides, np->overrides))
			continue;
		describe_policy(np, desc, sizeof(desc));
		if (op)
			describe_policy(op, was, sizeof(was));
		struct config_change ch = {op ? CONFIG_CHANGE_POLICY_CHANGED
					      : CONFIG_CHANGE_POLICY_ADDED,
					   np->name, 0, op ? was : NULL, desc};
		D->fn(&ch, D->arg);
	}
	for (size_t i = 0; i < D->old->npolicies; i++) {
		const struct policy *op = &D->old->policies[i];
		if (find_own_policy(D->file, op->name, op->name_len))
			continue;
		describe_policy(op, was, sizeof(was));
		struct config_change ch = {CONFIG_CHANGE_POLICY_REMOVED, op->name, 0, was, NULL};
		D->fn(&ch, D->arg);
	}
}

/* One key of a table whose values are at base (KT_AT_BASE). */
static void diff_at_base(struct diff *D, const char *name, const struct ykey *k, size_t base)
{
	const char *run = (const char *)D->running + base, *old = (const char *)D->old + base,
		   *file = (const char *)D->file + base;
	switch (k->reload) {
	case YP_RELOAD:
		diff_key(D, CONFIG_CHANGE_APPLIED, name, k, old, file);
		break;
	case YP_RESTART:
	case YP_RESTART_SECRET:
		diff_key(D, CONFIG_CHANGE_RESTART_PENDING, name, k, run, file);
		break;
	case YP_RESTART_LIST:
		/* listen, the only one: entries added or removed make the whole
		 * list differ; otherwise its table compares entry by entry */
		if (D->running->nlisten != D->file->nlisten)
			diff_key(D, CONFIG_CHANGE_RESTART_PENDING, name, k, run, file);
		break;
	case YP_SECTION:
		break; /* its own table follows */
	case YP_PER_POLICY:
		diff_policies(D);
		break;
	}
}

/* Key k of every listen entry, when the file has as many as are running. */
static void diff_listen(struct diff *D, const struct ktable *kt, const struct ykey *k)
{
	if (D->running->nlisten != D->file->nlisten)
		return; /* reported as listen */
	for (size_t i = 0; i < D->file->nlisten; i++) {
		char name[64];
		/* "listen[].tls." -> "listen[2].tls.cert_file" */
		snprintf(name, sizeof(name), "listen[%zu].%s%s", i,
			 kt->at + sizeof("listen[].") - 1, k->name);
		const char *run = (const char *)&D->running->listen[i] + kt->base,
			   *file = (const char *)&D->file->listen[i] + kt->base;
		switch (k->reload) {
		case YP_RESTART:
		case YP_RESTART_SECRET:
			diff_key(D, CONFIG_CHANGE_RESTART_PENDING, name, k, run, file);
			break;
		case YP_RELOAD:
			/* a listener's files (tls), read again on every reload */
			if (D->old->nlisten == D->file->nlisten)
				diff_key(D, CONFIG_CHANGE_APPLIED, name, k,
					 (const char *)&D->old->listen[i] + kt->base, file);
			break;
		case YP_RESTART_LIST: /* no list in a listen entry */
		case YP_SECTION:
		case YP_PER_POLICY:
			break;
		}
	}
}

/* The same names in the same order: a store's keys compare by position. */
static int same_stores(const struct config *a, const struct config *b)
{
	if (a->nstores != b->nstores)
		return 0;
	for (size_t i = 0; i < a->nstores; i++)
		if (strcmp(a->stores[i].name, b->stores[i].name) != 0)
			return 0;
	return 1;
}

/* Key k of every store of stores:, as redis:'s (the stores key itself
 * reports names added, removed or moved: a restart). */
static void diff_stores(struct diff *D, const struct ktable *kt, const struct ykey *k)
{
	if (!same_stores(D->running, D->file))
		return;
	for (size_t i = 0; i < D->file->nstores; i++) {
		char name[128];
		/* "stores.NAME.tls." -> "stores.eu.tls.ca_file" */
		snprintf(name, sizeof(name), "stores.%s.%s%s", D->file->stores[i].name,
			 kt->at + sizeof("stores.NAME.") - 1, k->name);
		const char *run = (const char *)&D->running->stores[i] + kt->base,
			   *file = (const char *)&D->file->stores[i] + kt->base;
		switch (k->reload) {
		case YP_RESTART:
		case YP_RESTART_SECRET:
			diff_key(D, CONFIG_CHANGE_RESTART_PENDING, name, k, run, file);
			break;
		case YP_RELOAD:
			if (same_stores(D->old, D->file))
				diff_key(D, CONFIG_CHANGE_APPLIED, name, k,
					 (const char *)&D->old->stores[i] + kt->base, file);
			break;
		case YP_RESTART_LIST:
		case YP_SECTION:
		case YP_PER_POLICY:
			break;
		}
	}
}

int config_diff(const struct config *running, const struct config *old, const struct config *file,
		void (*fn)(const struct config_change *ch, void *arg), void *arg)
{
	struct diff D = {running, old, file, fn, arg, 0};
	for (size_t t = 0; t < sizeof(key_tables) / sizeof(key_tables[0]); t++) {
		const struct ktable *kt = key_tables[t];
		for (size_t i = 0; i < kt->nkeys; i++) {
			const struct ykey *k = &kt->keys[i];
			char name[64];
			snprintf(name, sizeof(name), "%s%s", kt->at, k->name);
			switch (kt->values) {
			case KT_AT_BASE:
				diff_at_base(&D, name, k, kt->base);
				break;
			case KT_LISTEN:
				diff_listen(&D, kt, k);
				break;
			case KT_POLICY:
				break; /* the policies key reported them */
			case KT_IDENTITY:
				break; /* the identities key reported them */
			case KT_STORE:
				diff_stores(&D, kt, k);
				break;
			}
		}
	}
	return D.pending;
}

int config_redis_defaults(struct config_redis *r)
{
	r->address = strdup(DEFAULT_REDIS_ADDRESS);
	r->database = DEFAULT_REDIS_DATABASE;
	r->timeout_ms = DEFAULT_REDIS_TIMEOUT_MS;
	r->connections = DEFAULT_REDIS_CONNECTIONS;
	r->wait_timeout_ms = DEFAULT_REDIS_WAIT_TIMEOUT_MS;
	return r->address ? 0 : -1;
}

static int config_defaults(struct config *c)
{
	c->listen = calloc(1, sizeof(*c->listen));
	if (!c->listen)
		return -1;
	c->nlisten = 1;
	c->listen[0].address = strdup(DEFAULT_LISTEN);
	c->listen[0].mode = CONFIG_DEFAULT_SOCKET_MODE;
	c->store = CONFIG_STORE_REDIS;
	c->local_share = 1;
	c->memory.max_keys = CONFIG_MEMORY_MAX_KEYS_DEFAULT;
	config_redis_defaults(&c->redis);
	c->prefix = strdup(DEFAULT_PREFIX);
	c->on_store_error = DEFAULT_ON_STORE_ERROR;
	c->max_line = DEFAULT_MAX_LINE;
	c->max_clients = DEFAULT_MAX_CLIENTS;
	c->metrics_top_series = CONFIG_DEFAULT_TOP_SERIES;
	c->metrics_console = 1;
	c->metrics_max_clients = CONFIG_DEFAULT_METRICS_MAX_CLIENTS;
	c->max_delayed = CONFIG_DEFAULT_MAX_DELAYED;
	c->declog.sample = 1;
	c->declog.max_size = CONFIG_DECLOG_MAX_SIZE_DEFAULT;
	c->declog.keep = CONFIG_DECLOG_KEEP_DEFAULT;
	c->tracing.max_queue = CONFIG_TRACING_QUEUE_DEFAULT;
	c->idle_timeout_ms = DEFAULT_IDLE_TIMEOUT_MS;
	c->request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS;
	c->log_level = DEFAULT_LOG_LEVEL;
	memcpy(c->throttle.namespace, "cl.throttle", sizeof("cl.throttle"));
	c->throttle.max_burst = 100000;
	c->throttle.max_period_ms = 86400000;
	c->envoy.algorithm = POLICY_FIXED_WINDOW;
	config_listen_http_defaults(&c->listen[0].http);
	return c->listen[0].address && c->redis.address && c->prefix ? 0 : -1;
}

/* stream-start, exactly one document whose root is a mapping, stream-end. */
static int parse_stream(struct yparser *P, struct config *c)
{
	yaml_mark_t root;
	if (yp_open_document(P, &root) < 0)
		return -1;
	unsigned seen;
	yaml_mark_t marks[TK_N];
	if (yp_map(P, NULL, top_keys, TK_N, c, &seen, marks) < 0 && P->fatal)
		return -1;
	if (c->store == CONFIG_STORE_MEMORY && (seen & (1u << TK_REDIS)))
		yp_fail(P, marks[TK_REDIS],
			"redis: not used with store: memory (state lives in this daemon); remove "
			"it, or write store: redis");
	else if (c->store == CONFIG_STORE_REDIS && (seen & (1u << TK_MEMORY)) &&
		 !config_uses_local(c))
		yp_fail(P, marks[TK_MEMORY],
			"memory: only used with store: memory or on_store_error: local; remove it");
	/* an entry's error at that entry (its address), as -t prints every other */
	const struct config_read *R = P->ctx;
	for (size_t i = 0; i < c->nlisten && !(seen & (1u << TK_ENVOY)); i++)
		if (c->listen[i].protocol == CONFIG_PROTOCOL_GRPC) {
			/* without rules every call would be answered OK: say so */
			yp_fail(P, R->listen_marks ? R->listen_marks[i] : marks[TK_LISTEN],
				"listen %s: protocol: grpc needs envoy: {config: FILE_OR_DIR}, the "
				"rules its calls are decided by",
				c->listen[i].address);
			break;
		}
	config_listen_check_binds(P, c, (seen & (1u << TK_LISTEN)) != 0);
	config_policy_check_stores(P, c);
	config_envoy_check_store(P, c);
	if (!(seen & (1u << TK_POLICIES)) && !(seen & (1u << TK_ENVOY)))
		yp_fail(P, root,
			"policies: required, with at least one policy (or envoy: with rules)");
	else if (c->throttle.enabled &&
		 config_find_policy(c, c->throttle.namespace, strlen(c->throttle.namespace)))
		yp_fail(P, marks[TK_THROTTLE],
			"throttle.namespace: %s is a policy's name too: they would share keys",
			c->throttle.namespace);
	for (size_t i = 0; i < c->nlisten && !c->nidentities; i++)
		if (c->listen[i].auth) {
			yp_fail(P, R->listen_marks ? R->listen_marks[i] : marks[TK_LISTEN],
				"listen %s: auth: required needs identities (who may connect)",
				c->listen[i].address);
			break;
		}
	if (yp_close_document(P) < 0 && P->fatal)
		return -1;
	return P->nerr ? -1 : 0;
}

static void config_free(struct config *c)
{
	free(c->path);
	config_listen_free(c);
	config_store_free_redis(&c->redis);
	config_store_free_stores(c);
	free(c->prefix);
	free(c->metrics_listen);
	free(c->envoy.config);
	config_declog_free(c);
	config_tracing_free(c);
	envoy_rules_free(c->envoy.rules);
	config_identity_free(c);
	for (size_t i = 0; i < c->npolicies; i++)
		override_set_free(c->policies[i].overrides);
	free(c->policies);
	free(c);
}

struct config *config_parse(const char *name, const char *buf, size_t len, char *err, size_t errlen)
{
	struct yparser P;
	struct config_read R = {0};
	struct config *c = NULL;
	if (yp_begin(&P, name, buf, len) == 0) {
		P.ctx = &R;
		c = calloc(1, sizeof(*c));
		if (!c || config_defaults(c) < 0 || !(c->path = strdup(P.name))) {
			yaml_mark_t none = {0, 0, 0};
			yp_fail_fatal(&P, none, "out of memory");
		} else {
			parse_stream(&P, c);
		}
	}
	/* Overrides not handed to c->policies (a file in error) are freed here. */
	config_policy_read_done(&R, c && c->policies);
	free(R.listen_marks);
	if (yp_end(&P, err, errlen) < 0) {
		if (c)
			config_free(c);
		return NULL;
	}
	c->refs = 1;
	return c;
}

struct config *config_load(const char *path, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	if (yp_read_file(path, CONFIG_FILE_MAX, &buf, &len, err, errlen) < 0)
		return NULL;
	struct config *c = config_parse(path, buf, len, err, errlen);
	free(buf);
	/* the envoy rules' files: here, so that config_parse reads no file */
	if (c && c->envoy.config && config_envoy_load(c, path, err, errlen) < 0) {
		config_free(c);
		return NULL;
	}
	/* the decision log's hash key */
	if (c && config_declog_load(c, path, err, errlen) < 0) {
		config_free(c);
		return NULL;
	}
	/* the identities' tokens, after the rules: a policy they name may be a rule's */
	if (c && config_identity_load(c, path, err, errlen) < 0) {
		config_free(c);
		return NULL;
	}
	return c;
}

void config_log_errors(const char *context, const char *err)
{
	const char *p = err;
	do {
		const char *nl = strchr(p, '\n');
		int len = nl ? (int)(nl - p) : (int)strlen(p);
		log_error("%s%.*s", context, len, p);
		p = nl ? nl + 1 : NULL;
	} while (p);
}

void config_ref(struct config *c)
{
	c->refs++;
}

void config_unref(struct config *c)
{
	if (!c || --c->refs > 0)
		return;
	config_free(c);
}

const struct policy *config_find_policy(const struct config *c, const char *name, size_t len)
{
	const struct policy *p = find_own_policy(c, name, len);
	/* then an envoy rule's (named "<path>-<8 hex digits>"; a policy of
	 * the file with the very same name comes first) */
	if (!p && c && name && len)
		p = envoy_find_policy(c->envoy.rules, name, len);
	return p;
}

static const struct policy *find_own_policy(const struct config *c, const char *name, size_t len)
{
	if (!c || !name || len == 0 || len > POLICY_NAME_MAX)
		return NULL;
	size_t lo = 0, hi = c->npolicies;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct policy *p = &c->policies[mid];
		size_t n = p->name_len < len ? p->name_len : len;
		int d = memcmp(p->name, name, n);
		if (d == 0 && p->name_len != len)
			d = p->name_len < len ? -1 : 1;
		if (d == 0)
			return p;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int config_shadow(const struct config *c, const struct policy *p)
{
	if (p && p->shadow >= 0)
		return p->shadow;
	return c->shadow;
}

int config_uses_local(const struct config *c)
{
	if (c->on_store_error == POLICY_ON_ERROR_LOCAL)
		return 1;
	for (size_t i = 0; i < c->npolicies; i++)
		if (c->policies[i].on_store_error == POLICY_ON_ERROR_LOCAL)
			return 1;
	return 0;
}

enum policy_on_error config_on_error(const struct config *c, const struct policy *p)
{
	if (p && p->on_store_error != POLICY_ON_ERROR_INHERIT)
		return p->on_store_error;
	return c->on_store_error;
}

const struct config_named_store *config_find_store(const struct config *c, const char *name)
{
	for (size_t i = 0; i < c->nstores; i++)
		if (strcmp(c->stores[i].name, name) == 0)
			return &c->stores[i];
	return NULL;
}

const struct config_redis *config_redis_of(const struct config *c, const struct policy *p)
{
	if (!p || !p->store[0])
		return &c->redis;
	const struct config_named_store *st = config_find_store(c, p->store);
	return st ? &st->redis : NULL;
}
