/*
 * stats.h - process-wide counters of what the daemon answered, read by the
 * metrics endpoint. Plain counters in one struct: bumped on the hot path
 * with no locking (one thread), never reset while the process lives.
 */
#ifndef RL_STATS_H
#define RL_STATS_H

#include <stddef.h>

#include "cmd_types.h"
#include "config.h"
#include "hist.h"
#include "policy.h"
#include "store_types.h"
#include "top.h"

struct config;

/* Who decided an ALLOW or PEEK. */
enum stats_from {
	STATS_FROM_STORE,    /* Redis */
	STATS_FROM_CACHE,    /* the local deny cache (a denial only) */
	STATS_FROM_FALLBACK, /* on_store_error: Redis could not decide */
	STATS_FROM_OVERRIDE, /* an unlimited or blocked override: nothing to decide */
	STATS_FROM_MEMORY,   /* the memory store (store: memory) */
	STATS_FROM_LOCAL,    /* on_store_error: local: this daemon, while Redis could not */
	STATS_FROM_BLOCK,    /* a block of units Redis counted for this daemon (allowed only) */
	STATS_FROM_N
};

#define STATS_STORE_STATUS_N (STORE_FAILED + 1)

/* The front end a request came through: its decision latency's label. A
 * listener protocol's front end is that protocol's value, and its label
 * the protocol's word (config_protocol_name); RESP, on a line listener
 * and with no word of its own, comes after them. */
enum stats_front {
	STATS_FRONT_LINE = CONFIG_PROTOCOL_LINE,
	STATS_FRONT_HTTP = CONFIG_PROTOCOL_HTTP,
	STATS_FRONT_GRPC = CONFIG_PROTOCOL_GRPC,
	STATS_FRONT_SPOE = CONFIG_PROTOCOL_SPOE,
	STATS_FRONT_RESP = CONFIG_PROTOCOL_N,
	STATS_FRONT_N
};

/* Why a client's TLS connection failed (ratelimitd_client_tls_failures_total). */
enum stats_tls_failure {
	STATS_TLS_HANDSHAKE, /* the handshake failed: no common version, a bad certificate... */
	STATS_TLS_TIMEOUT,   /* not finished within request_timeout */
	STATS_TLS_PLAINTEXT, /* a client spoke plain text to a TLS listener */
	STATS_TLS_ON_PLAIN,  /* a client began TLS on a plaintext listener */
	STATS_TLS_N
};
const char *stats_tls_failure_name(enum stats_tls_failure f);

/* Why a request was refused before anything else (listen[].auth: required). */
enum stats_auth_failure {
	STATS_AUTH_NOAUTH,    /* no identity proved */
	STATS_AUTH_BAD_TOKEN, /* a token no identity has */
	STATS_AUTH_FORBIDDEN, /* the identity lacks the right, or the policy */
	STATS_AUTH_N
};
const char *stats_auth_failure_name(enum stats_auth_failure f);

/* What became of concurrency leases (leases.c). */
enum stats_lease_event {
	STATS_LEASE_ACQUIRED,
	STATS_LEASE_RELEASED,	       /* by RELEASE */
	STATS_LEASE_RELEASED_ON_CLOSE, /* by the close of the connection that took it */
	STATS_LEASE_EXPIRED,	       /* found past its expiry, never released */
	STATS_LEASE_FAILED,	       /* a lease request the store could not answer */
	STATS_LEASE_UNBOOKED,	       /* granted past the book's bound (lease_book.h) */
	STATS_LEASE_N
};
const char *stats_lease_event_name(enum stats_lease_event e);

/* Requests taken from each identity, by name (identities come from the
 * configuration: at most STATS_IDENTITIES_MAX names in a process's life). */
#define STATS_IDENTITIES_MAX 1024
struct stats_identity {
	char name[65];
	unsigned long long requests;
};
void stats_count_identity(const char *name);
/* The identities counted so far, in the order first seen. */
const struct stats_identity *stats_identities(size_t *n);

struct stats {
	unsigned long long requests[CMD_VERB_N]; /* parsed requests, by verb */
	/* ALLOW and PEEK answers: [where from][0 denied, 1 allowed] */
	unsigned long long decisions[STATS_FROM_N][2];
	/* store could not decide, by enum store_status (OK unused); answered
	 * per on_store_error */
	unsigned long long store_errors[STATS_STORE_STATUS_N];
	/* of store_errors[STORE_FAILED]: by kind of error Redis answered */
	unsigned long long store_failures[STORE_ERROR_N];
	unsigned long long errors[CMD_ERR_N]; /* error replies, by code */
	/* denials a shadow-mode policy answered ALLOWED */
	unsigned long long shadow_denied;
	/* MALLOWs a Cluster denied in their charge round, after charging
	 * some of their pairs (another request took the last units between
	 * its check and its charge) */
	unsigned long long multi_partial;
	unsigned long long clients_accepted;
	/* TLS handshakes and sessions with a Redis or a sentinel that failed (rlink.c) */
	unsigned long long redis_tls_failures;
	/* clients' TLS connections that failed, by why (conn.c) */
	unsigned long long client_tls_failures[STATS_TLS_N];
	unsigned long long client_tls_handshakes; /* finished */
	unsigned long long auth_failures[STATS_AUTH_N];
	unsigned long long leases[STATS_LEASE_N];
	unsigned long long delayed; /* requests answered later (a delay) */
	unsigned delayed_waiting;   /* of them, waiting now */
	/* gRPC ShouldRateLimit calls for a domain no envoy rule file has */
	unsigned long long envoy_unknown_domain;
	unsigned long long reloads_ok, reloads_failed;
	int restart_pending;	 /* the file changes keys only a restart applies */
	double start_time;	 /* wall clock, seconds since the epoch */
	double last_reload_time; /* last successful load (start-up counts) */
	/* decisions (any answer of ALLOW, PEEK, MALLOW, MPEEK, CL.THROTTLE):
	 * from the parse to the answer being ready, in microseconds, by front end */
	struct hist decision_us[STATS_FRONT_N];
	/* calls to Redis: from sending one to reading its reply, in microseconds */
	struct hist store_rtt_us;
	/* requests per call sent to Redis (a pipelined batch) */
	struct hist batch_size;
};

/* 50 us to 1 s (in microseconds, shown as seconds); and 1 to 256 requests. */
extern const struct hist_bounds stats_latency_bounds, stats_batch_bounds;

extern struct stats stats;

/* Answers per action (policy name), kept by name across reloads. */
struct stats_action {
	unsigned long long decisions[STATS_FROM_N][2]; /* as in struct stats */
	unsigned long long shadow_denied;
	/* concurrency: leases granted here and held (lease_book.h), and those
	 * of them that ran out or were found gone without a RELEASE here */
	long long leases_held;
	unsigned long long leases_expired;
	/* its heavy hitters (top.h), made on its first decision; NULL while
	 * none, or when STATS_TOP_MAX policies have theirs already */
	struct top *top;
	int top_failed; /* no room for one: not asked again */
	size_t name_len;
	char name[POLICY_NAME_MAX + 1];
};

/* At most this many distinct policy names are counted in a process's life. */
#define STATS_ACTIONS_MAX 65536

/* At most this many policies keep heavy hitters (about 11 KiB each). */
#define STATS_TOP_MAX 1024

/* Counts one ALLOW/PEEK answer for p of cfg, globally and per action (cfg
 * NULL: p is no policy of a configuration, CL.THROTTLE's: counted by name),
 * and for user among the action's heavy hitters (a request unless a peek;
 * a denial even when shadow mode answers it ALLOWED) at now_us (monotonic;
 * 0: read the clock). */
void stats_count_decision(const struct config *cfg, const struct policy *p, enum stats_from from,
			  int allowed, const char *user, size_t user_len, int peek,
			  uint64_t now_us);
/* The heavy hitters of the action `name` over about the last minute (top.h):
 * up to max rows ranked by `by`, and the action's estimated totals; 0 rows
 * and totals when it has none (never decided, or past STATS_TOP_MAX). */
size_t stats_top(const char *name, size_t len, enum top_by by, size_t max, struct top_row *rows,
		 uint64_t *requests, uint64_t *denied);
/* Policies whose heavy hitters could not be kept (past STATS_TOP_MAX). */
extern unsigned long long stats_top_untracked;
/* Counts a denial that shadow mode answered ALLOWED (after counting the
 * denial itself with stats_count_decision). */
void stats_count_shadow(const struct config *cfg, const struct policy *p);
/* cfg is now the running configuration: its policies get O(1) counters. */
void stats_bind(const struct config *cfg);
/* The counters of p (of the running configuration), or NULL. */
const struct stats_action *stats_action_of(const struct config *cfg, const struct policy *p);
/* The same, to count into (lease_book.c). */
struct stats_action *stats_action_counters(const struct config *cfg, const struct policy *p);
/* The counters of name if it was ever counted, or NULL (creates nothing:
 * for listing rules that may never be used, such as envoy rules). */
const struct stats_action *stats_action_find(const char *name, size_t len);
/* Frees the per-action table (at exit). */
void stats_free(void);

void stats_count_error(enum cmd_error e);
/* A decision answered us microseconds after its request was parsed. */
void stats_observe_decision(enum stats_front f, uint64_t us);
const char *stats_front_name(enum stats_front f);
const char *stats_from_name(enum stats_from f);

#endif
