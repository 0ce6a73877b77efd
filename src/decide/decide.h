/*
 * decide.h - the end of a decision, written once for the verbs' handlers
 * (cmd_pair.c, cmd_hold.c, cmd_admin.c, leases.c) and MALLOW/MPEEK
 * (multi.c): overrides, the deny cache's rules, the counts, shadow mode,
 * the local fallback, on_store_error and the completion. Private to
 * decide/; callers use cmd.h.
 */
#ifndef RL_DECIDE_H
#define RL_DECIDE_H

#include <stddef.h>
#include <stdint.h>

#include "cmd_types.h"
#include "policy.h"
#include "stats.h"
#include "store_types.h"

struct config;
struct denycache;
struct local;
struct override;
struct store;
struct store_request;
struct store_result;

/* Completes the slot with res as filled: the decision's latency counted
 * (a decision only), complete called, then slot->cfg released if held. */
void decide_complete(struct cmd_slot *slot);
/* Fills the slot with an error (msg is copied) and completes it. */
void decide_error(struct cmd_slot *slot, enum cmd_error e, const char *msg);
/* Completes the slot with a reply of this kind (its fields set already). */
void decide_reply(struct cmd_slot *slot, enum cmd_reply kind);

/* The override of (p, user): a run-time one (env->live) first, then p's own. */
const struct override *decide_find_override(const struct cmd_env *env, const struct policy *p,
					    const char *user, size_t ulen);

/* Counts and logs a shadow denial by slot->user on policy p (at most one
 * line a second). */
void decide_shadow_denied(struct cmd_slot *slot, const struct policy *p);

/*
 * Answers a decision: counted as from on p (the action's policy) under cfg
 * (NULL: counted by p's name), then completed with the figures on
 * slot->policy, a denial answered ALLOWED when slot->shadow.
 */
void decide_answer(struct cmd_slot *slot, const struct config *cfg, const struct policy *p,
		   enum stats_from from, int allowed, int64_t limit, int64_t remaining,
		   int64_t retry_after_ms, int64_t reset_ms);
/* decide_answer's result and counts, without completing the slot (a
 * delayed answer completes later). */
void decide_fill(struct cmd_slot *slot, const struct config *cfg, const struct policy *p,
		 enum stats_from from, int allowed, int64_t limit, int64_t remaining,
		 int64_t retry_after_ms, int64_t reset_ms);
/* An unlimited (allowed) or blocked override of p: answered without the
 * store. Unlimited is ALLOWED -1 -1 0 -1 (no limit applies); blocked is
 * DENIED with p's first limit and retry_after -1 (never). */
void decide_override(struct cmd_slot *slot, const struct config *cfg, const struct policy *p,
		     int allowed);

/* Whether p's store is remote (redis.remote): its calls leave at once
 * (store_request.eager). */
int decide_eager(const struct config *cfg, const struct policy *p);
/* A request's store deadline: the caller's (gRPC's grpc-timeout) when
 * shorter than redis.timeout. */
int64_t decide_timeout_ms(const struct config *cfg, const struct policy *p,
			  const struct cmd_request *req);
/* Answers slot with the error of a store p names and env lacks. */
void decide_no_store(struct cmd_slot *slot, const struct policy *p);

/* Where a decision the store made came from, for the metrics: as its
 * result says. */
enum stats_from decide_store_source(const struct store_result *res);

/* p's store's deny cache when it may answer or learn (while every daemon's
 * RESETs in that store reach us; brought up to its generation), or NULL. */
struct denycache *decide_cache(const struct cmd_env *env, const struct policy *p);
/* Whether decisions on p may be cached; other: p is not the action's own
 * policy (an override's limits, or CL.THROTTLE's). */
int decide_cacheable(const struct policy *p, int other);
/* After the store allowed an ALLOW of (p, user): forgets its cached
 * denials, whose remaining is now stale. */
void decide_cache_allowed(struct denycache *deny, enum store_op op, const struct policy *p,
			  const char *user, size_t ulen);

/* Why the store could not decide, as the error reply and the local
 * fallback's log say it: "store <status>: <detail>". */
void decide_why(const struct store_result *res, char *buf, size_t len);
/* on_store_error: local: req (its prefix set here from slot->cfg) decided
 * in this daemon's memory. 0 with *lr its decision, or -1 (out of memory). */
int decide_local(struct cmd_slot *slot, struct local *local, struct store_request *req,
		 const char *why, struct store_result *lr);
/* The store could not decide slot->op on slot->policy (whose user, cost
 * and local are in the slot): counts it and answers as mode says (an
 * error, or a fallback decision). */
void decide_store_failed(struct cmd_slot *slot, const struct store_result *res,
			 enum policy_on_error mode);

/* The policy pc names (its own, CL.THROTTLE's, or its action's in cfg);
 * NULL with slot answered unknown-action when there is none. */
const struct policy *decide_policy(const struct config *cfg, const struct cmd_request *pc,
				   struct cmd_slot *slot);

#endif
