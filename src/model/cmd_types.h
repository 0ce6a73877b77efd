/*
 * cmd_types.h - the types of a request and its result, alone: verbs, error
 * codes, cmd_request, cmd_result, and where a request runs and answers
 * (cmd_env, cmd_slot). For those that only name them (stats.h, proto.h,
 * multi.h, decide.h); executing a request is cmd.h's.
 */
#ifndef RL_CMD_TYPES_H
#define RL_CMD_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "keys.h"
#include "policy.h"

struct config;
struct blocks;
struct delays;
struct denycache;
struct leases;
struct local;
struct multi;
struct override_live;
struct store;

enum cmd_verb {
	CMD_ALLOW,
	CMD_PEEK,
	CMD_RESET,
	CMD_PING,
	CMD_QUIT,
	CMD_THROTTLE, /* redis-cell's CL.THROTTLE: the limit comes with the request */
	CMD_MALLOW,   /* ALLOW over several (user, action) pairs, all or nothing */
	CMD_MPEEK,
	CMD_OVERRIDE,	/* admin: set a run-time override (override_live.h) */
	CMD_UNOVERRIDE, /* admin: clear one */
	CMD_OVERRIDES,	/* admin: the index-th one in force */
	CMD_AUTH,	/* prove an identity (token): the connection's requests are its */
	CMD_ACQUIRE,	/* take a lease of a concurrency policy (lease.h) */
	CMD_RELEASE,	/* give one back, by its id */
	CMD_RENEW,	/* extend one */
	CMD_CHARGE,	/* count a cost known afterwards, never denied */
	CMD_HOLD,	/* ALLOW an estimate and open a hold (its id in the reply) */
	CMD_SETTLE,	/* a hold's actual cost: the difference charged or given back */
	CMD_CANCEL,	/* a hold's estimate given back */
	CMD_TOP,	/* admin: the index-th heavy hitter of an action (top.h) */
	CMD_STATE,	/* every limit of a pair as it stands, nothing counted (cmd_state.c) */
};
#define CMD_VERB_N (CMD_STATE + 1)

/* The most pairs one MALLOW or MPEEK of the text protocols (line, RESP,
 * HTTP) may name: what their requests hold in place. */
#define CMD_PAIRS_MAX 8
/* The most pairs one decision may take: gRPC's descriptors (each limited
 * one a pair), which an Envoy route sends without the user choosing how
 * many; a caller with more than CMD_PAIRS_MAX gives its own array. */
#define CMD_MULTI_MAX 64

struct cmd_pair {
	const char *user;
	size_t user_len;
	const char *action;
	size_t action_len;
	/* the pair's policy when the caller has it (gRPC's envoy rules, which
	 * are not the configuration's policies; it lives until the request is
	 * answered); NULL: the action's */
	const struct policy *policy;
};

/* One pair's own result in a MALLOW or MPEEK (gRPC answers each
 * descriptor): known only when the store told it. */
struct cmd_pair_result {
	int known;
	int allowed; /* this pair alone would allow */
	int64_t remaining, reset_ms;
};

/* The largest cost a request may carry. */
#define CMD_COST_MAX 2147483647LL

/* A request's trace context (ops/trace.h): `on` when its decision is
 * traced, its trace id, and the caller's span when it sent one. */
struct cmd_trace {
	uint8_t trace_id[16];
	uint8_t parent_id[8];
	uint8_t has_parent; /* a traceparent came with the request */
	uint8_t sampled;    /* its flag */
	uint8_t on;
};

/* One request; user and action point into the caller's bytes, which need
 * to live only during cmd_execute (what the store needs, it copies). */
struct cmd_request {
	enum cmd_verb verb;
	const char *user;
	size_t user_len;
	const char *action;
	size_t action_len;
	int64_t cost; /* CMD_THROTTLE: 0 looks without taking */
	/* CMD_THROTTLE: max_burst + 1 units at once, count per period_s seconds */
	int64_t max_burst, count, period_s;
	/* CMD_MALLOW, CMD_MPEEK: the pairs, in the request's order (user and
	 * action above are unused): in pairs, or, when many is set, there
	 * (the caller's, up to CMD_MULTI_MAX, living until cmd_execute
	 * returns; gRPC's); cmd_pairs says which */
	int npairs;
	struct cmd_pair pairs[CMD_PAIRS_MAX];
	const struct cmd_pair *many;
	/* MALLOW, MPEEK (and one pair's ALLOW, PEEK): where each pair's own
	 * figures go (cmd_result.pairs), the caller's array of npairs living
	 * until the reply (gRPC's statuses); NULL: not wanted */
	struct cmd_pair_result *figures;
	/* CMD_OVERRIDE: what (override_spec_parse's), for how long (0: no
	 * expiry); CMD_OVERRIDES, CMD_TOP: which */
	const char *spec;
	size_t spec_len;
	int64_t ttl_ms;
	int64_t index;
	int by_requests; /* CMD_TOP: ranked by requests, not denials */
	/* the caller's deadline (gRPC's grpc-timeout), when shorter than
	 * redis.timeout; 0: none */
	int64_t timeout_ms;
	/* ALLOW, PEEK: the policy when the caller has it (gRPC's envoy rules,
	 * living until the request is answered); NULL: the action's */
	const struct policy *policy;
	/* AUTH's token, or the one a request carries (HTTP's Authorization:
	 * Bearer, gRPC's authorization metadata); NULL: none */
	const char *token;
	size_t token_len;
	/* ALLOW: WAIT <ms>, the longest this request will wait for a funnel's
	 * slot (at most the policy's delay.max when it has one); not given:
	 * the policy's delay */
	int wait_given;
	int64_t wait_ms;
	/* RELEASE, RENEW: the lease's id (its action is also in action);
	 * SETTLE, CANCEL: the hold's, and a SETTLE's actual cost */
	const char *lease_id;
	size_t lease_id_len;
	int64_t actual;
	/* a W3C traceparent that came with it (HTTP's header, gRPC's
	 * metadata, ALLOW's TRACE); NULL: none */
	const char *traceparent;
	size_t traceparent_len;
	/* when the bytes it came in were read (monotonic, microseconds), for
	 * its trace's parse span; 0: not known (front ends set it only while
	 * tracing is on) */
	uint64_t received_us;
};

/* The pairs of a MALLOW or MPEEK (npairs of them). */
static inline const struct cmd_pair *cmd_pairs(const struct cmd_request *req)
{
	return req->many ? req->many : req->pairs;
}

/* The longest identity name (config.h's CONFIG_IDENTITY_NAME_MAX). */
#define CMD_WHO_MAX 64

/*
 * Who sends a connection's requests: the listener's admin and auth, and
 * the identity proved on it (by AUTH, or a client certificate's name).
 * Names, not pointers: a reload may change or remove the identity, and
 * each request finds it again in its own configuration.
 */
struct cmd_caller {
	int admin;		       /* listen[].admin */
	int auth;		       /* listen[].auth: required */
	char who[CMD_WHO_MAX + 1];     /* the identity AUTH proved; "" none */
	char cert_cn[CMD_WHO_MAX + 1]; /* a verified client certificate's name; "" none */
	unsigned failures;	       /* failed AUTHs in a row: at CMD_AUTH_FAILURES_MAX, closed */
};
#define CMD_AUTH_FAILURES_MAX 3
/* AUTH's answer when no identity is configured: Redis's words for AUTH to
 * a server without a password (clients such as ioredis then go on). */
#define CMD_AUTH_NO_IDENTITIES                                                              \
	"AUTH <password> called without any password configured for the default user. Are " \
	"you sure your configuration is correct?"

/* Why a request got an error: the codes of proto/protocol.md, in order
 * (proto_error_code names them). */
enum cmd_error {
	CMD_ERR_SYNTAX,
	CMD_ERR_UNKNOWN_COMMAND,
	CMD_ERR_UNKNOWN_ACTION,
	CMD_ERR_BAD_COST,
	CMD_ERR_BAD_USER,
	CMD_ERR_LINE_TOO_LONG,
	CMD_ERR_FORBIDDEN,
	CMD_ERR_TOO_MANY_CLIENTS,
	CMD_ERR_STORE_UNAVAILABLE,
	CMD_ERR_REQUEST_TIMEOUT, /* a request begun was not whole in time */
	CMD_ERR_TLS_REQUIRED,	 /* plain text sent to a TLS listener */
	CMD_ERR_NOAUTH,		 /* listen[].auth: required, and no identity proved */
	CMD_ERR_AUTH_FAILED,	 /* a token no identity has */
	CMD_ERR_POLICY_KIND,	 /* ALLOW on a concurrency policy, ACQUIRE on a rate */
	CMD_ERR_NO_LEASE,	 /* RELEASE, RENEW of a lease not held (or no lease id) */
	CMD_ERR_NO_HOLD,	 /* SETTLE, CANCEL of a hold not open (or no hold id) */
	CMD_ERR_OUT_OF_MEMORY,	 /* this daemon could not allocate what the request needs */
};
#define CMD_ERR_N (CMD_ERR_OUT_OF_MEMORY + 1)

enum cmd_reply {
	CMD_REPLY_DECISION, /* ALLOW, PEEK */
	CMD_REPLY_OK,	    /* RESET */
	CMD_REPLY_PONG,	    /* PING */
	CMD_REPLY_BYE,	    /* QUIT: the connection closes once it is written */
	CMD_REPLY_ERROR,
	CMD_REPLY_LOCAL, /* a reply of the protocol's own (PROTO_LOCAL) */
	CMD_REPLY_ITEM,	 /* OVERRIDES: an override (item), or the end (item NULL) */
	CMD_REPLY_LEASE, /* ACQUIRE, RENEW: a decision (allowed) and the lease's id (item) */
	CMD_REPLY_TOP,	 /* TOP: a heavy hitter (item: its user), or the end (item NULL) */
	CMD_REPLY_STATE, /* STATE: every limit of the pair (state) */
};

/* STATE: one limit of the pair's policy as it stands. */
struct cmd_state_limit {
	/* its window: a window's period (a calendar window's: the one holding
	 * now), a funnel's time to drain when full, a lease's time */
	int64_t window_ms;
	enum calendar_unit calendar; /* CALENDAR_NONE: no calendar window */
	int64_t limit, used, remaining, reset_ms;
	/* the window holding now (Unix ms); 0 0: none (a log, a funnel, leases) */
	int64_t start_ms, end_ms;
};

/* What applies to a pair besides its counts (STATE). */
enum cmd_state_override {
	CMD_STATE_NONE,
	CMD_STATE_LIMITS,    /* an override's limits count, not the policy's */
	CMD_STATE_UNLIMITED, /* always allowed: the counts are kept, unused */
	CMD_STATE_BLOCKED,   /* always denied */
};

/* STATE's reply: the pair's limits in the policy's order. */
struct cmd_state {
	enum policy_algo algo;
	enum cmd_state_override override;
	int64_t ban_ms; /* a ban in force: what it has left; 0: none */
	int nlimits;
	struct cmd_state_limit limits[POLICY_MAX_LIMITS];
};

/* One run-time override as OVERRIDES shows it; text holds user, action and
 * spec, one after the other. A lease (CMD_REPLY_LEASE): text holds its id,
 * ulen long. A heavy hitter (CMD_REPLY_TOP): text holds its user, ulen
 * long (cut at top.h's TOP_NAME_MAX when cut is 1). */
struct cmd_item {
	/* OVERRIDES, TOP: the index; CMD_REPLY_LEASE: 1 when the id is a
	 * hold's (HOLD), 0 a lease's */
	int64_t index, ttl_ms; /* ttl -1: no expiry */
	/* TOP: estimates over the last minute, and how much the ranked one
	 * may be over */
	int64_t denied, requests, over;
	size_t cut; /* TOP: the user's whole length when text holds it cut; 0: whole */
	size_t ulen, alen, spec_len;
	char text[];
};

/* Longest error message kept, NUL included; protocols may cut it shorter. */
#define CMD_MSG_MAX 192

struct cmd_result {
	enum cmd_reply kind;
	/* CMD_REPLY_DECISION */
	int allowed;
	int64_t limit, remaining, retry_after_ms, reset_ms;
	/* the deciding limit's window (ms) and its policy's name, for
	 * protocols that announce the policy (HTTP's RateLimit-Policy); only
	 * filled when the slot's names_policy says so */
	int64_t window_ms;
	char action[POLICY_NAME_MAX + 1];
	/* MALLOW, MPEEK: the reply names the deciding pair (1-based position
	 * in the request; 0: none decided, a fallback or every pair unlimited) */
	int multi;
	int pair;
	/* each pair's own figures, by position in the request: the request's
	 * figures (cmd_execute sets it), NULL when not wanted. When wanted, a
	 * cached denial of one pair may not answer alone: it knows nothing of
	 * the others' remaining. */
	struct cmd_pair_result *pairs;
	/* CMD_REPLY_ERROR */
	enum cmd_error error;
	char msg[CMD_MSG_MAX];
	/* CMD_REPLY_LOCAL: which, as the protocol numbers them */
	int local;
	/* CMD_REPLY_ITEM, CMD_REPLY_TOP: owned by the result
	 * (cmd_result_release); NULL for the end, with the number in force in
	 * `limit` (TOP: the users listed, and the action's estimated requests
	 * and denials in remaining and retry_after_ms) */
	struct cmd_item *item;
	/* CMD_REPLY_STATE: owned by the result (cmd_result_release) */
	struct cmd_state *state;
	/* The store refused it at once, too busy to decide it in time (store
	 * overload), whatever the reply says: the connection then slows its
	 * reading (conn.c). */
	int refused;
	/* Set by the connection from the parse, never by cmd: the protocol's
	 * own note on the request (proto_parsed.tag), and whether the
	 * connection closes once this reply is written. */
	int tag;
	int close_after;
};

/* A store of stores: (config.h), by the name its policies give. */
struct cmd_named_store {
	char name[POLICY_STORE_NAME_MAX + 1];
	struct store *store;
	/* its own, as the default store's below: each follows its store's
	 * RESETs and generation; NULL: none */
	struct denycache *deny;
	struct blocks *blocks;
};

/* What requests are executed against; owned by the server. */
struct cmd_env {
	struct store *store;	    /* the default store (redis: or store: memory) */
	struct denycache *deny;	    /* NULL: no local deny cache */
	struct override_live *live; /* run-time overrides; NULL: none */
	struct local *local;	    /* on_store_error: local; NULL: out of memory */
	struct leases *leases;	    /* concurrency leases (leases.h); NULL: out of memory */
	struct delays *delays;	    /* requests a funnel's delay holds (delay.h); NULL: none */
	struct blocks *blocks;	    /* hot keys' blocks (blocks.h); NULL: none */
	/* the stores of stores: as started (a restart adds or removes one) */
	struct cmd_named_store *named;
	size_t nnamed;
};

/* p's store of stores: (NULL: the default store's policy, or a store not
 * running). */
static inline const struct cmd_named_store *cmd_env_named_of(const struct cmd_env *env,
							     const struct policy *p)
{
	for (size_t i = 0; p && p->store[0] && i < env->nnamed; i++)
		if (strcmp(env->named[i].name, p->store) == 0)
			return &env->named[i];
	return NULL;
}

/* The store p decides in: the default one, or its store of stores:; NULL
 * when that store is not running (a reload that names one is refused, so
 * only as a last guard). */
static inline struct store *cmd_env_store(const struct cmd_env *env, const struct policy *p)
{
	const struct cmd_named_store *n = cmd_env_named_of(env, p);
	return !p || !p->store[0] ? env->store : n ? n->store : NULL;
}

/* p's store's deny cache and blocks (NULL: none, or its store is not running). */
static inline struct denycache *cmd_env_deny(const struct cmd_env *env, const struct policy *p)
{
	const struct cmd_named_store *n = cmd_env_named_of(env, p);
	return !p || !p->store[0] ? env->deny : n ? n->deny : NULL;
}

static inline struct blocks *cmd_env_blocks(const struct cmd_env *env, const struct policy *p)
{
	const struct cmd_named_store *n = cmd_env_named_of(env, p);
	return !p || !p->store[0] ? env->blocks : n ? n->blocks : NULL;
}

/* Where a request's result goes: decide/cmd.h. */
struct cmd_slot;

#endif
