/* config.h - the YAML configuration, loaded into an immutable, refcounted snapshot. */
#ifndef RL_CONFIG_H
#define RL_CONFIG_H

/* max_delayed's default: 10,000 timers and slots, some 1 MB */
#define CONFIG_DEFAULT_MAX_DELAYED 10000

#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "policy.h"

/* meson sets it from sysconfdir: where `meson install` puts the example config */
#ifndef CONFIG_DEFAULT_PATH
#define CONFIG_DEFAULT_PATH "/etc/ratelimitd/ratelimitd.yaml"
#endif
/* Room for every message config_load gives: up to CONFIG_ERRORS_SHOWN lines. */
#define CONFIG_ERR_MAX 8192
#define CONFIG_ERRORS_SHOWN 20
/* A config is a few kilobytes; refuse to slurp /dev/zero or a stray log file. */
#define CONFIG_FILE_MAX (16 * 1024 * 1024)

enum config_redis_mode {
	CONFIG_REDIS_SINGLE,   /* one Redis at `address` */
	CONFIG_REDIS_CLUSTER,  /* a Redis Cluster found through `cluster` seeds */
	CONFIG_REDIS_SENTINEL, /* the master `sentinel_master` as told by `sentinels` */
};

/* Where the limits' state lives. */
enum config_store {
	CONFIG_STORE_REDIS,  /* in Redis (redis:), shared by every daemon on it */
	CONFIG_STORE_MEMORY, /* in this daemon's memory (memory:), no Redis at all */
};

/* The memory store's bounds (store: memory). */
struct config_memory {
	int max_keys; /* keys kept; the least recently used one goes first */
};
#define CONFIG_MEMORY_MAX_KEYS_DEFAULT 1000000

/* A list of "host:port" addresses. */
struct config_addrs {
	char **addr;
	size_t n;
};

/* TLS to Redis (redis.tls): files are re-read on every reload. */
struct config_redis_tls {
	int enabled;		    /* the tls section is there and does not say enabled: false */
	char *ca_file, *ca_dir;	    /* trusted CAs; both NULL: the system's */
	char *cert_file, *key_file; /* our certificate (mTLS), NULL when unset */
	char *server_name;	    /* verify servers as this name; NULL: as their host */
};

struct config_redis {
	enum config_redis_mode mode;
	char *address;		       /* "host:port" or "unix:/path" (single) */
	struct config_addrs cluster;   /* seed nodes (cluster) */
	char *sentinel_master;	       /* master name (sentinel) */
	struct config_addrs sentinels; /* sentinel addresses (sentinel) */
	char *username;		       /* NULL when unset */
	char *password;		       /* NULL when unset; never logged */
	int database;
	int64_t timeout_ms;
	int connections;
	/* durability: an ALLOWED answer waits until its batch's writes reached
	 * this many replicas (Redis WAIT), for at most wait_timeout_ms; 0: off */
	int wait_replicas;
	int64_t wait_timeout_ms;
	/* another region's, a WAN round trip away (docs/deployment.md,
	 * "Several regions"): its policies take blocks: {max: auto} unless
	 * they say otherwise, and never on_store_error: local */
	int remote;
	struct config_redis_tls tls;
};

/* A store of stores: (config_store.c): a name policies choose it by, and
 * what redis: takes. */
struct config_named_store {
	char name[POLICY_STORE_NAME_MAX + 1];
	struct config_redis redis;
};
/* stores: at most this many (each has its connections) */
#define CONFIG_STORES_MAX 16

/* What a listener speaks. Each value's word (listen.protocol) is also its
 * front end's label (enum stats_front takes these values). */
enum config_protocol {
	CONFIG_PROTOCOL_LINE, /* the line protocol, or RESP when the first byte is '*' */
	CONFIG_PROTOCOL_HTTP,
	CONFIG_PROTOCOL_GRPC, /* gRPC over h2c: Envoy's rate limit service (grpc.c) */
	CONFIG_PROTOCOL_SPOE, /* HAProxy's SPOE: the agent's side of SPOP (proto_spoe.c) */
};
#define CONFIG_PROTOCOL_N (CONFIG_PROTOCOL_SPOE + 1)

#define CONFIG_HEADER_NAME_MAX 64
#define CONFIG_TRUSTED_MAX 32

/* An HTTP listener's options (proto/protocol.md, "HTTP"). */
struct config_http {
	/* forward-auth: the user is this request header's value (from a
	 * trusted proxy); empty: the client's address */
	char user_header[CONFIG_HEADER_NAME_MAX + 1];
	/* peers whose X-Forwarded-For / X-Real-IP / user_header are believed */
	struct addr_net trusted[CONFIG_TRUSTED_MAX];
	size_t ntrusted;
	int deny_status;    /* forward-auth's answer to a denial: 429, or 403 for nginx */
	int legacy_headers; /* also X-RateLimit-Limit, -Remaining, -Reset */
};

/* CL.THROTTLE (redis-cell's command over RESP): limits given by the caller. */
struct config_throttle {
	int enabled;
	char namespace[POLICY_NAME_MAX + 1]; /* the action name its keys and metrics use */
	int64_t max_burst;		     /* largest max_burst */
	int64_t max_period_ms;		     /* longest period */
};

/* decision_log: a sampled log of decisions, for ratelimitctl replay. */
#define CONFIG_DECLOG_MAX_SIZE_DEFAULT (100 * 1024 * 1024)
#define CONFIG_DECLOG_KEEP_DEFAULT 3
struct config_declog {
	char *path;	     /* NULL: no log */
	double sample;	     /* the share of users logged (by a hash of the user) */
	size_t max_size;     /* bytes before the file is rotated */
	int keep;	     /* rotated files kept: path.1 ... path.keep */
	char *hash_key_file; /* users written as keyed hashes; NULL: as they are */
	int hashed;	     /* hash_key is read */
	uint8_t hash_key[16];
};

/* tracing: spans of decisions, exported as OTLP over HTTP. */
#define CONFIG_TRACING_QUEUE_DEFAULT 4096
struct config_tracing {
	char *endpoint;	   /* "http://host:port/path"; NULL: off */
	char *host, *path; /* endpoint's parts */
	int port;
	double sample; /* the share of requests traced without a traceparent */
	int max_queue; /* spans kept for export at most */
};

/* What the gRPC front end adds to its answers (envoy.response_headers). */
enum config_envoy_headers {
	CONFIG_ENVOY_HEADERS_NONE,
	CONFIG_ENVOY_HEADERS_RATELIMIT,	 /* RateLimit-Limit, -Remaining, -Reset */
	CONFIG_ENVOY_HEADERS_XRATELIMIT, /* X-RateLimit-Limit, -Remaining, -Reset */
};

/* envoyproxy/ratelimit's configuration files (envoy_rules.h). */
struct config_envoy {
	char *config; /* a file or a directory, as written */
	enum policy_algo algorithm;
	enum config_envoy_headers headers;
	/* the store of stores: every rule decides in; empty: the default */
	char store[POLICY_STORE_NAME_MAX + 1];
	struct envoy_rules *rules; /* loaded; NULL when no config */
};

/* A socket's name from systemd (FileDescriptorName=): at most 255 bytes */
#define CONFIG_FDNAME_MAX 255

/* Who must show a client certificate on a TLS listener. */
enum config_client_certs {
	CONFIG_CLIENT_CERTS_NONE,     /* none asked */
	CONFIG_CLIENT_CERTS_OPTIONAL, /* asked; one shown must verify */
	CONFIG_CLIENT_CERTS_REQUIRED, /* a client without one is refused */
};

/* TLS on a listener (listen[].tls): files re-read on every reload. */
struct config_listen_tls {
	int enabled;		    /* the tls section is there and does not say false */
	char *cert_file, *key_file; /* the listener's certificate chain and key */
	char *ca_file, *ca_dir;	    /* CAs that sign client certificates */
	enum config_client_certs client_certs;
};

/* Who a client may prove to be (identities.NAME), and what it may then do. */
#define CONFIG_IDENTITY_NAME_MAX 64
#define CONFIG_IDENTITIES_MAX 1024
#define CONFIG_TOKEN_MIN 16
#define CONFIG_TOKEN_MAX 4096
enum config_right {
	CONFIG_RIGHT_DECIDE = 1, /* ALLOW, PEEK, MALLOW, MPEEK, CL.THROTTLE */
	CONFIG_RIGHT_ADMIN = 2,	 /* RESET, OVERRIDE, UNOVERRIDE, OVERRIDES */
};
struct config_identity {
	char name[CONFIG_IDENTITY_NAME_MAX + 1];
	char *token_file; /* the token is this file's first line */
	char *token_env;  /* ... or this environment variable's value */
	char *cert_name;  /* ... or a verified client certificate with this common name */
	unsigned rights;  /* enum config_right bits */
	char **policies;  /* the only policies it may use; NULL: every one */
	size_t npolicies;
	char *token; /* read by config_load; never shown, logged or compared but in constant time */
	size_t token_len;
};

struct config_listen {
	char *address; /* "host:port" or "unix:/path" */
	/* the FileDescriptorName= of the socket systemd passes for this entry
	 * ("" : matched by address alone; activation.c) */
	char name[CONFIG_FDNAME_MAX + 1];
	int admin; /* RESET (and later admin commands) allowed here */
	int mode;  /* file mode of a unix socket */
	enum config_protocol protocol;
	struct config_http http;
	struct config_listen_tls tls;
	int auth; /* listen[].auth: required: a client proves who it is before anything else */
};

#define CONFIG_DEFAULT_SOCKET_MODE 0660
/* metrics.top_series: the heaviest denied users shown on /metrics */
#define CONFIG_DEFAULT_TOP_SERIES 10
/* metrics.max_clients: scrapers, probes and a few consoles' browsers */
#define CONFIG_DEFAULT_METRICS_MAX_CLIENTS 64

/* Count limits, errors at parse time. A cluster seed is a node from the
 * start, and store_cluster.c keeps at most this many nodes. */
#define CONFIG_CLUSTER_SEEDS_MAX 256
/* The metrics count each policy name separately for at most STATS_ACTIONS_MAX
 * names in a process's life; one file can always be counted whole. */
#define CONFIG_POLICIES_MAX 65536

/*
 * A validated snapshot. Never modified after config_load returns it;
 * a reload builds a new one. Requests hold a reference so they finish under
 * the policies they started with.
 */
struct config {
	int refs;
	char *path;
	struct config_listen *listen;
	size_t nlisten;
	enum config_store store;
	struct config_memory memory;
	struct config_redis redis; /* the default store's */
	/* stores: more stores, which a policy chooses by name (store: NAME) */
	struct config_named_store *stores;
	size_t nstores;
	char *prefix;
	enum policy_on_error on_store_error; /* never INHERIT here */
	double local_share;		     /* on_store_error: local: the share of each limit */
	size_t max_line;
	int max_clients;
	int64_t idle_timeout_ms; /* 0: clients may stay idle forever */
	int shadow;		 /* every policy in shadow mode unless it says no */
	int max_delayed;	 /* requests a funnel's delay may hold at once */
	/* a request begun must be whole within this (slow senders, slowloris) */
	int64_t request_timeout_ms;
	int log_level; /* LOG_LEVEL_DEBUG..LOG_LEVEL_ERROR from log.h */
	/* reload when this file or one it names changes (ops/watch.h) */
	int watch;
	char *metrics_listen; /* "host:port" of the HTTP metrics endpoint, or NULL */
	struct config_listen_tls metrics_tls; /* metrics.tls: HTTPS (enabled 0: HTTP) */
	int metrics_top_series;	 /* metrics.top_series: heavy hitters shown as series */
	int metrics_console;	 /* metrics.console: the live console (console.h) */
	int metrics_max_clients; /* metrics.max_clients: its connections at once */
	struct config_throttle throttle;
	struct config_envoy envoy;
	struct config_declog declog;
	struct config_tracing tracing;
	struct policy *policies; /* sorted by name */
	size_t npolicies;
	struct config_identity *identities; /* in the file's order */
	size_t nidentities;
};

/*
 * Loads and validates `path`. The result has refs == 1. NULL on failure, with
 * in err every error found, one "FILE:LINE:COL: message" per line (lines
 * separated by '\n', no final newline): the first CONFIG_ERRORS_SHOWN, then
 * "... and N more errors" if there were more. A YAML syntax error ends the
 * search (it is the last line). A file that cannot be read gives one line,
 * "FILE: cannot read: reason". err is cut short to fit errlen.
 */
struct config *config_load(const char *path, char *err, size_t errlen);
/* Same from memory; `name` stands for the file in error messages. Reads
 * no other file: envoy.config's rules are loaded by config_load only. */
struct config *config_parse(const char *name, const char *buf, size_t len, char *err,
			    size_t errlen);
/* The identity whose token is tok (compared in constant time), or NULL. */
const struct config_identity *config_identity_by_token(const struct config *c, const char *tok,
						       size_t len);
/* The identity a verified client certificate's common name proves, or NULL. */
const struct config_identity *config_identity_by_cert(const struct config *c, const char *cn);
/* The identity called name, or NULL. */
const struct config_identity *config_identity_by_name(const struct config *c, const char *name);
/* 1 if id has right and, when it names its policies, may use action. */
int config_identity_may(const struct config_identity *id, enum config_right right,
			const char *action, size_t action_len);

/* What a reload does with a key (the key tables say, key by key). */
enum config_reload {
	CONFIG_RELOAD_APPLIES,	  /* a reload applies it, and logs "KEY OLD -> NEW" */
	CONFIG_RELOAD_RESTART,	  /* only a restart does; a reload warns while it differs */
	CONFIG_RELOAD_SECTION,	  /* a mapping: its keys say */
	CONFIG_RELOAD_PER_POLICY, /* applies; logged per policy (added, changed, removed) */
};
/* "applies", "restart", "section", "per-policy": ratelimitd --reload-keys. */
const char *config_reload_name(enum config_reload r);
/* A protocol's word, as listen.protocol writes it ("line", "http", "grpc"). */
const char *config_protocol_name(enum config_protocol p);
/* Calls fn with the path of every key a file may hold, as the manual
 * writes them: "redis.timeout", "listen[].address", "policies.NAME.ban.for"
 * (a list's entries [], a name of the file's own NAME or USER). */
void config_key_paths(void (*fn)(const char *path, void *arg), void *arg);
/* The same, with what a reload does with each key. */
void config_key_reloads(void (*fn)(const char *path, enum config_reload how, void *arg), void *arg);
/* Logs each line of a config_load error at error level, after `context`. */
void config_log_errors(const char *context, const char *err);
void config_ref(struct config *c);
void config_unref(struct config *c);

/* What a reload changes, or would change after a restart. */
enum config_change_kind {
	CONFIG_CHANGE_APPLIED,	       /* a key the reload applied: old -> new */
	CONFIG_CHANGE_RESTART_PENDING, /* a restart-only key: old is the running value */
	CONFIG_CHANGE_POLICY_ADDED,    /* name is the policy's; new describes it */
	CONFIG_CHANGE_POLICY_CHANGED,  /* old and new describe it */
	CONFIG_CHANGE_POLICY_REMOVED,  /* old describes it */
};

struct config_change {
	enum config_change_kind kind;
	const char *name; /* "redis.timeout", "listen[1].name", a policy's name */
	int secret;	  /* the values must never be shown */
	/* printable values; both NULL when out of memory (for a key) or
	 * when there is none (a policy added has no old one) */
	const char *old, *new;
};

/*
 * A reload's report, from the key tables: calls fn, in table order, for
 * each key a reload applies whose value in `file` differs from the one in
 * `old` (the configuration being replaced), for each restart-only key whose
 * value in `file` differs from the one in `running` (the start-up snapshot:
 * a pending restart is reported on every reload until it happens), and for
 * each policy added, changed or removed. A key whose values could not be
 * compared for lack of memory counts as differing. Returns how many
 * restart-only keys differ.
 */
int config_diff(const struct config *running, const struct config *old, const struct config *file,
		void (*fn)(const struct config_change *ch, void *arg), void *arg);

const struct policy *config_find_policy(const struct config *c, const char *name, size_t len);
/* Whether p is in shadow mode under c. */
int config_shadow(const struct config *c, const struct policy *p);
/* The on_store_error that applies to p under c. */
/* 1 if on_store_error: local applies anywhere (top level or a policy). */
int config_uses_local(const struct config *c);
enum policy_on_error config_on_error(const struct config *c, const struct policy *p);
/* The store of stores: named `name`, or NULL. */
const struct config_named_store *config_find_store(const struct config *c, const char *name);
/* What the store p decides in takes (its timeout...): redis:'s for the
 * default store; NULL only for a store c lacks (config_load refuses that). */
const struct config_redis *config_redis_of(const struct config *c, const struct policy *p);

#endif
