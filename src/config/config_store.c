/* config_store.c - the schema of store, memory and redis (one server, a cluster or sentinels). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_area.h"

const struct yenum config_store_names[] = {
	{"redis", CONFIG_STORE_REDIS, NULL},
	{"memory", CONFIG_STORE_MEMORY, NULL},
	{NULL, 0, NULL},
};
_Static_assert(sizeof(enum config_store) == sizeof(int), "yp_set_enum stores an int");

enum { MEMK_MAX_KEYS, MEMK_N };

static const struct ykey memory_keys[MEMK_N] = {
	[MEMK_MAX_KEYS] = {"max_keys", yp_set_int, offsetof(struct config_memory, max_keys), 1000,
			   1000000000, YP_RESTART, yp_put_int, NULL},
};

const struct ktable config_memory_table = {"memory.", memory_keys, MEMK_N, KT_AT_BASE,
					   offsetof(struct config, memory)};

int config_store_set_memory(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[MEMK_N], start;
	return yp_section(P, k, "expected a mapping", memory_keys, MEMK_N, dst, &seen, marks,
			  &start);
}

#define UNSET "(none)"

static void put_addrs(FILE *f, const struct config_addrs *a)
{
	fputc('[', f);
	for (size_t i = 0; i < a->n; i++)
		fprintf(f, "%s%s", i ? ", " : "", a->addr[i]);
	fputc(']', f);
}

/* The printers below show "(none)" for the ways to reach Redis not in use. */
static void put_redis_address(FILE *f, const struct ykey *k, const void *base)
{
	const struct config_redis *r = base;
	(void)k;
	fputs(r->mode == CONFIG_REDIS_SINGLE ? r->address : UNSET, f);
}

static void put_redis_cluster(FILE *f, const struct ykey *k, const void *base)
{
	const struct config_redis *r = base;
	(void)k;
	if (r->mode == CONFIG_REDIS_CLUSTER)
		put_addrs(f, &r->cluster);
	else
		fputs(UNSET, f);
}

static void put_sentinel_master(FILE *f, const struct ykey *k, const void *base)
{
	const struct config_redis *r = base;
	(void)k;
	fputs(r->mode == CONFIG_REDIS_SENTINEL ? r->sentinel_master : UNSET, f);
}

static void put_sentinel_addresses(FILE *f, const struct ykey *k, const void *base)
{
	const struct config_redis *r = base;
	(void)k;
	if (r->mode == CONFIG_REDIS_SENTINEL)
		put_addrs(f, &r->sentinels);
	else
		fputs(UNSET, f);
}

static int set_addr_list(struct yparser *P, const struct ykey *k, void *dst);
static int set_sentinel(struct yparser *P, const struct ykey *k, void *dst);
static int set_tls(struct yparser *P, const struct ykey *k, void *dst);

enum {
	RK_ADDRESS,
	RK_CLUSTER,
	RK_SENTINEL,
	RK_USERNAME,
	RK_PASSWORD,
	RK_DATABASE,
	RK_TIMEOUT,
	RK_CONNECTIONS,
	RK_WAIT_REPLICAS,
	RK_WAIT_TIMEOUT,
	RK_REMOTE,
	RK_TLS,
	RK_N
};

static const struct ykey redis_keys[RK_N] = {
	[RK_ADDRESS] = {"address", config_set_address, offsetof(struct config_redis, address), 0, 0,
			YP_RESTART, put_redis_address, NULL},
	[RK_CLUSTER] = {"cluster", set_addr_list, offsetof(struct config_redis, cluster), 0,
			CONFIG_CLUSTER_SEEDS_MAX, YP_RESTART, put_redis_cluster, NULL},
	[RK_SENTINEL] = {"sentinel", set_sentinel, 0, 0, 0, YP_SECTION, NULL, NULL},
	[RK_USERNAME] = {"username", yp_set_string, offsetof(struct config_redis, username), 0, 0,
			 YP_RESTART, yp_put_string, NULL},
	[RK_PASSWORD] = {"password", yp_set_string, offsetof(struct config_redis, password), 0, 0,
			 YP_RESTART_SECRET, yp_put_string, NULL},
	[RK_DATABASE] = {"database", yp_set_int, offsetof(struct config_redis, database), 0,
			 2147483647, YP_RESTART, yp_put_int, NULL},
	/* each request takes its deadline from its configuration */
	[RK_TIMEOUT] = {"timeout", yp_set_duration, offsetof(struct config_redis, timeout_ms), 1,
			60000, YP_RELOAD, yp_put_duration, NULL},
	[RK_CONNECTIONS] = {"connections", yp_set_int, offsetof(struct config_redis, connections),
			    1, 64, YP_RESTART, yp_put_int, NULL},
	[RK_WAIT_REPLICAS] = {"wait_replicas", yp_set_int,
			      offsetof(struct config_redis, wait_replicas), 0, 16, YP_RESTART,
			      yp_put_int, NULL},
	[RK_WAIT_TIMEOUT] = {"wait_timeout", yp_set_duration,
			     offsetof(struct config_redis, wait_timeout_ms), 1, 60000, YP_RESTART,
			     yp_put_duration, NULL},
	/* policies are made anew on reload: their defaults follow it */
	[RK_REMOTE] = {"remote", yp_set_bool, offsetof(struct config_redis, remote), 0, 0,
		       YP_RELOAD, yp_put_bool, NULL},
	[RK_TLS] = {"tls", set_tls, offsetof(struct config_redis, tls), 0, 0, YP_SECTION, NULL,
		    NULL},
};

int config_store_set_redis(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[RK_N], start;
	if (yp_section(P, k, "expected a mapping", redis_keys, RK_N, dst, &seen, marks, &start) < 0)
		return -1;
	/* Redis 6 ACL AUTH takes both; a user alone would silently log in as default. */
	if ((seen & (1u << RK_USERNAME)) && !(seen & (1u << RK_PASSWORD)))
		return yp_failk(P, marks[RK_USERNAME], "username", "requires redis.password");
	struct config_redis *r = dst;
	/* a WAIT that outlasts the decision's deadline would turn every
	 * shortfall into a timeout, and hold the connection past it */
	if (r->wait_replicas > 0 && r->wait_timeout_ms >= r->timeout_ms) {
		int at = (seen & (1u << RK_WAIT_TIMEOUT)) ? RK_WAIT_TIMEOUT : RK_WAIT_REPLICAS;
		return yp_failk(P, marks[at], redis_keys[at].name,
				"redis.wait_timeout must be shorter than redis.timeout");
	}
	int modes = !!(seen & (1u << RK_ADDRESS)) + !!(seen & (1u << RK_CLUSTER)) +
		    !!(seen & (1u << RK_SENTINEL));
	if (modes > 1) {
		int second = (seen & (1u << RK_SENTINEL)) ? RK_SENTINEL : RK_CLUSTER;
		return yp_fail(P, marks[second],
			       "redis: use only one of address, cluster and sentinel");
	}
	if (seen & (1u << RK_CLUSTER)) {
		r->mode = CONFIG_REDIS_CLUSTER;
		/* Redis Cluster has database 0 only. */
		if ((seen & (1u << RK_DATABASE)) && r->database != 0)
			return yp_failk(P, marks[RK_DATABASE], "database",
					"must be 0 with cluster");
	} else if (seen & (1u << RK_SENTINEL)) {
		r->mode = CONFIG_REDIS_SENTINEL;
	}
	return 0;
}

static void free_addrs(struct config_addrs *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->addr[i]);
	free(a->addr);
	a->addr = NULL;
	a->n = 0;
}

void config_store_free_redis(struct config_redis *r)
{
	free(r->tls.ca_file);
	free(r->tls.ca_dir);
	free(r->tls.cert_file);
	free(r->tls.key_file);
	free(r->tls.server_name);
	free(r->address);
	free_addrs(&r->cluster);
	free_addrs(&r->sentinels);
	free(r->sentinel_master);
	free(r->username);
	free(r->password);
}

/* A list of host:port while it is read. */
struct addrs_read {
	struct config_addrs *a;
	size_t cap;
};

static int addr_entry(struct yparser *P, const struct ykey *k, void *dst, size_t i)
{
	struct addrs_read *A = dst;
	struct config_addrs *a = A->a;
	const char *s;
	size_t len;
	(void)i;
	if (config_address_scalar(P, k->name, &s, &len) < 0)
		return -1;
	if (len >= 5 && memcmp(s, "unix:", 5) == 0)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected host:port, not a unix socket");
	if (yp_grow((void **)&a->addr, &A->cap, a->n, sizeof(*a->addr)) < 0)
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	a->addr[a->n] = strndup(s, len);
	if (!a->addr[a->n])
		return yp_fail_fatal(P, P->ev.start_mark, "out of memory");
	a->n++;
	return 0;
}

/* A list of host:port (TCP only: cluster nodes and sentinels announce TCP addresses). */
static int set_addr_list(struct yparser *P, const struct ykey *k, void *dst)
{
	struct addrs_read A = {dst, 0};
	if (P->ev.type != YAML_SEQUENCE_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name, "expected a list of host:port");
	yaml_mark_t start = P->ev.start_mark;
	size_t n;
	free_addrs(A.a);
	if (yp_seq(P, k, "addresses", addr_entry, &A, &n) < 0)
		return -1;
	if (A.a->n == 0)
		return yp_failk(P, start, k->name, "at least one address is required");
	return 0;
}

enum { SK_MASTER, SK_ADDRESSES, SK_N };

static const struct ykey sentinel_keys[SK_N] = {
	[SK_MASTER] = {"master", yp_set_string, offsetof(struct config_redis, sentinel_master), 0,
		       0, YP_RESTART, put_sentinel_master, NULL},
	[SK_ADDRESSES] = {"addresses", set_addr_list, offsetof(struct config_redis, sentinels), 0,
			  0, YP_RESTART, put_sentinel_addresses, NULL},
};

static int set_sentinel(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[SK_N], start;
	if (yp_section(P, k, "expected {master: NAME, addresses: [...]}", sentinel_keys, SK_N, dst,
		       &seen, marks, &start) < 0)
		return -1;
	if (seen != (1u << SK_N) - 1)
		return yp_fail_section(P, start, "needs master and addresses");
	return 0;
}

/* The paths are read when the store starts and again on every reload
 * (new connections use what they hold); turning TLS on or off takes a restart. */
enum { TLK_ENABLED, TLK_CA_FILE, TLK_CA_DIR, TLK_CERT_FILE, TLK_KEY_FILE, TLK_SERVER_NAME, TLK_N };

static const struct ykey tls_keys[TLK_N] = {
	[TLK_ENABLED] = {"enabled", yp_set_bool, offsetof(struct config_redis_tls, enabled), 0, 0,
			 YP_RESTART, yp_put_bool, NULL},
	[TLK_CA_FILE] = {"ca_file", config_set_path, offsetof(struct config_redis_tls, ca_file), 0,
			 0, YP_RELOAD, yp_put_string, NULL},
	[TLK_CA_DIR] = {"ca_dir", config_set_path, offsetof(struct config_redis_tls, ca_dir), 0, 0,
			YP_RELOAD, yp_put_string, NULL},
	[TLK_CERT_FILE] = {"cert_file", config_set_path,
			   offsetof(struct config_redis_tls, cert_file), 0, 0, YP_RELOAD,
			   yp_put_string, NULL},
	[TLK_KEY_FILE] = {"key_file", config_set_path, offsetof(struct config_redis_tls, key_file),
			  0, 0, YP_RELOAD, yp_put_string, NULL},
	[TLK_SERVER_NAME] = {"server_name", yp_set_string,
			     offsetof(struct config_redis_tls, server_name), 0, 0, YP_RELOAD,
			     yp_put_string, NULL},
};

static int set_tls(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config_redis_tls *t = dst;
	unsigned seen;
	yaml_mark_t marks[TLK_N], start;
	t->enabled = 1;
	if (yp_section(P, k, "expected a mapping (tls: {} for the system's CAs)", tls_keys, TLK_N,
		       dst, &seen, marks, &start) < 0)
		return -1;
	if ((seen & (1u << TLK_KEY_FILE)) && !(seen & (1u << TLK_CERT_FILE)))
		return yp_failk(P, marks[TLK_KEY_FILE], "key_file", "requires redis.tls.cert_file");
	if ((seen & (1u << TLK_CERT_FILE)) && !(seen & (1u << TLK_KEY_FILE)))
		return yp_failk(P, marks[TLK_CERT_FILE], "cert_file",
				"requires redis.tls.key_file");
	return 0;
}

const struct ktable config_redis_table = {"redis.", redis_keys, RK_N, KT_AT_BASE,
					  offsetof(struct config, redis)};
const struct ktable config_sentinel_table = {"redis.sentinel.", sentinel_keys, SK_N, KT_AT_BASE,
					     offsetof(struct config, redis)};
const struct ktable config_redis_tls_table = {"redis.tls.", tls_keys, TLK_N, KT_AT_BASE,
					      offsetof(struct config, redis.tls)};

/* stores: NAME -> what redis: takes. A name is [a-z0-9_-] (metrics
 * labels, log lines), and not "default", the store redis: configures. */
static const char *store_name_error(const char *s, size_t len)
{
	if (len == 0 || len > POLICY_STORE_NAME_MAX)
		return "a store's name is 1 to 32 characters of a-z 0-9 _ -";
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			return "a store's name is 1 to 32 characters of a-z 0-9 _ -";
	if (len == 7 && memcmp(s, "default", 7) == 0)
		return "\"default\" is the store redis: configures: name this one otherwise";
	return NULL;
}

/* The stores read so far, while stores: is read. */
struct stores_read {
	struct config *c;
	size_t cap;
};

static int store_entry(struct yparser *P, const struct ykey *k, void *dst)
{
	struct stores_read *S = dst;
	struct config *c = S->c;
	yaml_mark_t km = P->ev.start_mark;
	(void)k;
	if (P->ev.type != YAML_SCALAR_EVENT) {
		yp_fail(P, km, "a store's name must be a plain string");
		return YP_BAD_KEY;
	}
	const char *s = (const char *)P->ev.data.scalar.value;
	size_t len = P->ev.data.scalar.length;
	const char *why = store_name_error(s, len);
	if (why) {
		yp_fail(P, km, "stores: %s", why);
		return YP_BAD_KEY;
	}
	for (size_t i = 0; i < c->nstores; i++)
		if (strlen(c->stores[i].name) == len && memcmp(c->stores[i].name, s, len) == 0) {
			yp_fail(P, km, "duplicate store \"%s\"", c->stores[i].name);
			return YP_BAD_KEY;
		}
	if (yp_grow((void **)&c->stores, &S->cap, c->nstores, sizeof(*c->stores)) < 0)
		return yp_fail_fatal(P, km, "out of memory");
	struct config_named_store *st = &c->stores[c->nstores++];
	memset(st, 0, sizeof(*st));
	memcpy(st->name, s, len);
	if (config_redis_defaults(&st->redis) < 0)
		return yp_fail_fatal(P, km, "out of memory");
	if (yp_next(P) < 0)
		return -1;
	struct ykey named = *k;
	named.name = st->name;
	return config_store_set_redis(P, &named, &st->redis);
}

int config_store_set_stores(struct yparser *P, const struct ykey *k, void *dst)
{
	struct stores_read S = {dst, 0};
	if (P->ev.type != YAML_MAPPING_START_EVENT)
		return yp_failk(P, P->ev.start_mark, k->name,
				"expected a mapping of store names to what redis: takes");
	config_store_free_stores(S.c);
	size_t n;
	return yp_dict(P, k, "stores", store_entry, &S, &n);
}

void config_store_put_stores(FILE *f, const struct ykey *k, const void *base)
{
	const struct config *c = base;
	(void)k;
	fputc('[', f);
	for (size_t i = 0; i < c->nstores; i++)
		fprintf(f, "%s%s", i ? ", " : "", c->stores[i].name);
	fputc(']', f);
}

void config_store_free_stores(struct config *c)
{
	for (size_t i = 0; i < c->nstores; i++)
		config_store_free_redis(&c->stores[i].redis);
	free(c->stores);
	c->stores = NULL;
	c->nstores = 0;
}

const struct ktable config_stores_table = {"stores.NAME.", redis_keys, RK_N, KT_STORE,
					   offsetof(struct config_named_store, redis)};
const struct ktable config_stores_sentinel_table = {"stores.NAME.sentinel.", sentinel_keys, SK_N,
						    KT_STORE,
						    offsetof(struct config_named_store, redis)};
const struct ktable config_stores_tls_table = {"stores.NAME.tls.", tls_keys, TLK_N, KT_STORE,
					       offsetof(struct config_named_store, redis.tls)};
