/*
 * cmd.h - executes one request, whatever protocol carried it: command ->
 * policy -> deny cache or store -> result. Requests come in and results go
 * out protocol-neutral; each protocol (proto.h) parses into a cmd_request
 * and formats a cmd_result.
 */
#ifndef RL_CMD_H
#define RL_CMD_H

#include <stddef.h>
#include <stdint.h>

#include "cmd_types.h"
#include "keys.h"
#include "policy.h"

struct config;
struct denycache;
struct policy;
struct store;
struct store_result;
struct override_live;
struct local;

/* What requests are executed against; owned by the server. */
struct cmd_env {
	struct store *store;
	struct denycache *deny;	    /* NULL: no local deny cache */
	struct override_live *live; /* run-time overrides; NULL: none */
	struct local *local;	    /* on_store_error: local; NULL: out of memory */
};

/*
 * Where a request's result goes. The caller owns the slot; cmd_execute
 * fills res and calls complete(slot) exactly once, possibly before
 * returning.
 */
struct cmd_slot {
	struct cmd_result res;
	struct config *cfg;	     /* held while the store works on it */
	const struct policy *policy; /* in cfg */
	int op;			     /* enum store_op */
	struct denycache *deny;	     /* where to record a denial, or NULL */
	uint64_t sent_us;	     /* monotonic time the store was asked */
	unsigned long deny_epoch;    /* denycache_epoch() when asked */
	int64_t cost;
	size_t user_len;
	char user[KEYS_USER_MAX];
	int own_policy;	  /* policy is CMD_THROTTLE's (policy_copy), not cfg's */
	int overridden;	  /* policy is an override's limits */
	int shadow;	  /* answer a denial ALLOWED (shadow mode) */
	int names_policy; /* fill res.action and res.window_ms (set by the caller) */
	/* the front end that parsed the request (enum stats_front, set by the
	 * caller), and when cmd_execute took it: its decision's latency */
	int front;
	uint64_t parsed_us;
	/* CMD_THROTTLE's policy, built from the request; or an override's
	 * limits, copied: a run-time one may change while the store decides */
	struct policy policy_copy;
	struct multi *multi; /* MALLOW, MPEEK: while the store decides (multi.c) */
	/* on_store_error: local may decide it (user and cost are kept then) */
	struct local *local;
	int from_memory; /* the store is the memory store (store: memory) */
	void (*complete)(struct cmd_slot *slot);
};

/* admin: the request came through a listener with admin: true. */
void cmd_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *req,
		 int admin, struct cmd_slot *slot);

/* The override of (p, user): a run-time one (env->live) first, then p's own. */
const struct override *cmd_find_override(const struct cmd_env *env, const struct policy *p,
					 const char *user, size_t ulen);

/* Frees what a result owns (an OVERRIDES item); before a slot is reused. */
void cmd_result_release(struct cmd_result *res);

/* Fills the slot with an error (msg is copied) and completes it. */
void cmd_reply_error(struct cmd_slot *slot, enum cmd_error e, const char *msg);
/* Completes the slot with a reply of the protocol's own. */
void cmd_reply_local(struct cmd_slot *slot, int local);

/* For multi.c: completes the slot with a decision on slot->policy (shadow
 * mode applied when slot->shadow), releasing slot->cfg if held. */
void cmd_reply_decision(struct cmd_slot *slot, int allowed, int64_t limit, int64_t remaining,
			int64_t retry_after_ms, int64_t reset_ms);
/* Counts and logs a shadow denial by slot->user on policy p. */
void cmd_shadow_denied(struct cmd_slot *slot, const struct policy *p);
/* Where a decision the store made came from, for the metrics. */
int cmd_store_source(const struct store *s);
/* The store could not decide slot->op on slot->policy: counts it and
 * answers as mode says (an error, or a fallback decision). */
void cmd_store_failed(struct cmd_slot *slot, const struct store_result *res,
		      enum policy_on_error mode);

#endif
