/*
 * store.h - the asynchronous decision store. A backend (one Redis, a
 * Cluster, a Sentinel-watched master, or this daemon's memory; built by
 * store_factory.c) takes one decision at a time and answers it exactly
 * once, within its deadline.
 */
#ifndef RL_STORE_H
#define RL_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "keys.h"
#include "policy.h"
#include "store_types.h"

struct event_base;
struct config;

/* The most (user, action) pairs one decision may take (cmd_types.h's
 * CMD_MULTI_MAX: gRPC's descriptors). A result holds each one's figures,
 * so a result is about 1.6 KB: kept on the stack during its callback,
 * never stored per request. */
#define STORE_PAIRS_MAX 64

/* One pair of a decision over several (store_request.pairs). */
struct store_pair {
	const struct policy *policy;
	const char *user;
	size_t user_len;
	int shadow; /* decided and charged when it passes, never denies */
};

/* Everything is copied during store_submit; nothing needs to outlive the call. */
struct store_request {
	enum store_op op;
	const struct policy *policy;
	const char *prefix;
	size_t prefix_len;
	const char *user;
	size_t user_len;
	int64_t cost;
	int64_t timeout_ms;
	/* STORE_ALLOW of a window algorithm's policy: a request that would be
	 * denied now and allowed within wait_ms is charged as running then,
	 * allowed with retry_after_ms the wait (docs/algorithms.md, Delay) */
	int64_t wait_ms;
	/* STORE_ALLOW without a wait, a Redis store: also take a block of up
	 * to block_want units for this daemon to answer from for at most
	 * block_ttl_ms (blocks.h); the result's block and block_ms */
	int64_t block_want, block_ttl_ms;
	/* a remote store's (redis.remote): the call leaves at the end of this
	 * loop turn, not after the one in flight on its connection (a WAN
	 * round trip would be waited twice) */
	int eager;
	/* STORE_HOLD, STORE_SETTLE, STORE_CANCEL: the hold's nonce; a HOLD's
	 * time (ms); a SETTLE's actual cost (cost is then the estimate's,
	 * unused) */
	uint64_t hold_nonce;
	int64_t hold_ms, actual;
	/* npairs > 0: one atomic decision (ALLOW or PEEK) over pairs[0..npairs),
	 * only for a store whose ops say multi; policy and user are unused. */
	int npairs;
	const struct store_pair *pairs;
};

/*
 * A store_request that owns copies of the bytes it points to, for backends
 * that keep a request past store_submit (to retry it elsewhere).
 */
struct store_saved_pair {
	struct policy policy;
	int shadow;
	size_t user_len;
	char user[KEYS_USER_MAX];
};

struct store_saved_request {
	enum store_op op;
	int64_t cost, wait_ms, block_want, block_ttl_ms;
	int eager;
	uint64_t hold_nonce;
	int64_t hold_ms, actual;
	struct policy policy;
	/* the user and the key prefix: one allocation (text) of just their
	 * length, not room for the longest, as up to redis.max_pending of
	 * these wait at once (a bound's memory is mostly them) */
	const char *user, *prefix;
	size_t user_len, prefix_len;
	char *text;
	/* a decision over several pairs: copies of them (allocated, NULL
	 * otherwise) and room for the store_pair view store_request_load gives */
	int npairs;
	struct store_saved_pair *pairs;
	struct store_pair *view;
};

/* 0, or -1 when the copy of a request's pairs cannot be allocated (sv
 * then holds no pairs). Release what it holds with store_request_release. */
int store_request_save(struct store_saved_request *sv, const struct store_request *req);
void store_request_release(struct store_saved_request *sv);
/* A request pointing into sv (valid while sv is), with timeout_ms set. */
struct store_request store_request_load(const struct store_saved_request *sv, int64_t timeout_ms);

struct store_result {
	enum store_status status;
	const char *detail;	/* why, when status != STORE_OK; valid during the callback */
	enum store_error error; /* with STORE_FAILED: what kind of error */
	int allowed;
	int64_t limit, remaining, retry_after_ms, reset_ms;
	/* a SETTLE's or CANCEL's hold is not open (status STORE_OK) */
	int no_hold;
	/* with STORE_UNAVAILABLE: the request had reached Redis when its
	 * connection went, so it may have been applied; the stores made of
	 * others (Cluster, Sentinel) never send it again */
	int sent;
	/* the units of a block taken with the decision, and for how long (ms)
	 * the daemon may answer from them; 0 for none; and the window they
	 * are counted in (the script's id of it, for a give-back: blocks.h),
	 * 0 when they cannot be given back (a funnel's, several limits') */
	int64_t block, block_ms, block_window;
	/* decided in this daemon's memory (the memory store), no Redis asked:
	 * the metrics' from="memory" */
	int memory;
	/* a decision over several pairs: the one that decided and the first
	 * shadow one that would have denied (1-based, 0 for none) */
	int pair, shadow_pair;
	/* the Redis call that decided it (a batch of batch_size requests): when
	 * it was sent and its reply read, monotonic microseconds; batch_size
	 * 0 when no call did (the memory store, an error before one) */
	uint64_t batch_sent_us, batch_read_us;
	int batch_size;
	/* STORE_STATE: how many keys' figures follow the groups (the
	 * policy's limits', then its ban's) */
	int nkeys;
	/* and each pair's own figures (ngroups: 0 when not told); last, so
	 * that what comes before may be cleared alone (only the first ngroups
	 * are read) */
	int ngroups;
	struct store_group {
		int allowed;
		int64_t remaining, reset_ms;
	} groups[STORE_PAIRS_MAX];
	/* STORE_STATE: each key's own figures, the first nkeys read: the
	 * units counted, remaining, reset and the window holding now (Unix
	 * ms; 0 0 for a log or a funnel); a ban's: used 1 while in force,
	 * reset_ms what it has left */
	struct store_key {
		int64_t used, remaining, reset_ms, start_ms, end_ms;
	} keys[POLICY_MAX_LIMITS + 1];
};

/*
 * Starts a result: every field 0 (STORE_OK, STORE_ERROR_NONE, no detail,
 * not sent, no block, no pair, no batch, no groups), but the groups
 * themselves (1.5 KB: only the first ngroups are read). Every result a
 * store fills in starts here, or as an initializer naming its fields,
 * which zeroes the rest the same way: a field added later starts at 0
 * everywhere (b289e9b: `sent`, missing from a field-by-field reset, was
 * stack garbage on Cluster and Sentinel).
 */
static inline void store_result_reset(struct store_result *res)
{
	_Static_assert(STORE_OK == 0 && STORE_ERROR_NONE == 0, "a zeroed result is STORE_OK");
	memset(res, 0, offsetof(struct store_result, groups));
}

/* Called exactly once per submitted request, possibly from inside store_submit. */
typedef void store_done_fn(void *arg, const struct store_result *res);

typedef void store_reset_fn(void *arg, const char *tag, size_t len);

/*
 * A command for Redis itself, no decision (leases and run-time overrides
 * on a Redis: store_lease.c, store_override.c):
 * argv as is, on the Redis holding key (a Cluster's master for its slot;
 * the store's Redis otherwise), answered within timeout_ms. With script,
 * argv are one key and then arguments of the decision script, run as
 * EVALSHA <its sha> 1 argv... (the script loaded for the decisions).
 */
#define STORE_CALL_ARGS_MAX 16
struct store_call {
	const char *key;
	size_t key_len;
	int script;
	int argc; /* at most STORE_CALL_ARGS_MAX */
	const char **argv;
	const size_t *argvlen;
	int64_t timeout_ms;
	/* with redis.wait_replicas: the reply is handed on once WAIT says
	 * that many replicas have the call's writes; if they do not, the reply
	 * comes with a why (a lease taken just before a failover must not be
	 * lost with it: the caller decides what a reply not kept safe means) */
	int durable;
};
struct redisReply;
/* Called exactly once, possibly from inside store_call: Redis's reply
 * (valid during the call; an error reply is a reply), or NULL with why;
 * both for a durable call whose writes the replicas did not acknowledge. */
typedef void store_call_fn(void *arg, const struct redisReply *reply, const char *why);

/* Concurrency leases and run-time overrides, each a store operation with
 * a typed result (store_lease.h, store_override.h): called exactly once,
 * possibly from inside the call. */
struct store_lease_request;
struct store_lease_result;
typedef void store_lease_fn(void *arg, const struct store_lease_result *res);
struct store_override_request;
struct store_override_result;
typedef void store_override_fn(void *arg, const struct store_override_result *res);

/* What a backend tells of its connections, for the metrics endpoint. */
struct store_health {
	unsigned conns;		       /* request connections kept, on every node */
	unsigned conns_up;	       /* of those, connected and answering */
	unsigned long long conns_lost; /* connections that were up and were lost */
	/* Redis servers that are up but answer decisions with errors, and why
	 * (the first one's; valid until the loop turns). */
	unsigned refusing;
	const char *refusal;
	/* while no connection is up: why the last one failed or was lost
	 * ("TLS handshake: certificate verify failed: ..."), NULL if unknown */
	const char *down_reason;
	int memory; /* decides in this daemon's memory: needs no connection */
	/* with memory: what it holds (store_memory.h's store_memory_stats) */
	size_t memory_keys, memory_bytes;
	unsigned long long memory_evicted, memory_expired;
};

struct store;
struct store_ops {
	void (*submit)(struct store *s, const struct store_request *req, store_done_fn *done,
		       void *arg);
	void (*free)(struct store *s);
	/* Requests submitted and not yet answered. */
	size_t (*pending)(const struct store *s);
	/* Changes whenever the store may have lost state (a connection to it
	 * was lost: Redis may have restarted empty). */
	unsigned long (*generation)(const struct store *s);
	/* Follow RESETs made through any daemon sharing this store: fn gets the
	 * hash tag "<action>:<escaped user>" of each. Call again when the
	 * prefix changes; with prefix NULL, stop. */
	void (*watch_resets)(struct store *s, const char *prefix, store_reset_fn *fn, void *arg);
	/* 1 while RESET notices are being received (the subscription is up):
	 * only then may denials be cached. */
	int (*resets_followed)(const struct store *s);
	/* Adds this store's connection counts to h. */
	void (*health)(const struct store *s, struct store_health *h);
	void (*call)(struct store *s, const struct store_call *c, store_call_fn *done, void *arg);
	/* A store keeping leases itself (store_lease.h); NULL: the decision
	 * script's 'lease' mode through call, routed by the key. */
	void (*lease)(struct store *s, const struct store_lease_request *req, store_lease_fn *done,
		      void *arg);
	/* A store keeping run-time overrides itself (store_override.h); NULL:
	 * a Redis hash, through call and the script's override modes. */
	void (*override)(struct store *s, const struct store_override_request *req,
			 store_override_fn *done, void *arg);
	/* 1 if it decides several pairs in one atomic call (store_request.npairs);
	 * 0: the caller must ask pair by pair (a Cluster: other slots, other nodes). */
	int multi;
};

struct tls_client;
struct store {
	const struct store_ops *ops;
	/* TLS to Redis, as store_new made it (re-read on reload); NULL: none */
	struct tls_client *tls;
};

/* A backend is built by store_new (store_factory.h). */
void store_submit(struct store *s, const struct store_request *req, store_done_fn *done, void *arg);
size_t store_pending(const struct store *s);
int store_multi(const struct store *s);
void store_call(struct store *s, const struct store_call *c, store_call_fn *done, void *arg);
unsigned long store_generation(const struct store *s);
void store_watch_resets(struct store *s, const char *prefix, store_reset_fn *fn, void *arg);
int store_resets_followed(const struct store *s);
/* Fills h (zeroed first). */
void store_health(const struct store *s, struct store_health *h);

/* Whether the daemon can decide, as /health and gRPC's health service say it. */
enum store_verdict {
	STORE_VERDICT_OK,	/* the store decides */
	STORE_VERDICT_DEGRADED, /* it does not, and this daemon decides alone (on_store_error: local) */
	STORE_VERDICT_DOWN,	/* it does not: decisions are fallbacks or errors */
};
/* mode: the top-level on_store_error; local_active: local.h's. *why: what
 * is wrong ("" when OK; static); *refusal: Redis's error when it refuses
 * decisions (valid until the loop turns), else NULL. */
enum store_verdict store_verdict(const struct store *s, enum policy_on_error mode, int local_active,
				 const char **why, const char **refusal);
/* Adds s's counts to h without zeroing it: for a backend made of others. */
void store_health_add(const struct store *s, struct store_health *h);
void store_free(struct store *s);
const char *store_status_name(enum store_status st);
/* "noperm", "oom", ...: the metric label and log word of e. */
const char *store_error_name(enum store_error e);

#endif
