/*
 * rls.h - Envoy's ShouldRateLimit, pure: a RateLimitRequest's bytes and
 * the envoy rules in, a plan out (what limit each descriptor has, and the
 * pairs to decide together); the plan and the decision in, the
 * RateLimitResponse's bytes out. No I/O and no heap (the wire format is
 * rls_wire.c's); fuzzed by fuzz/fuzz_rls.c. grpc_rls.c runs the plan.
 */
#ifndef RL_RLS_H
#define RL_RLS_H

#include <stddef.h>
#include <stdint.h>

#include "cmd.h"
#include "envoy_rules.h"
#include "keys.h"
#include "proto_grpc.h"

struct config;

/* The most descriptors one request may carry: every one may be limited,
 * each a pair of the one decision (cmd_types.h's CMD_MULTI_MAX); a 65th is
 * refused (INVALID_ARGUMENT). */
#define RLS_MAX_DESCRIPTORS 64
/* The longest answer rls_encode writes. */
#define RLS_ANSWER_MAX (RLS_MAX_DESCRIPTORS * 128 + 512)

/* What became of one descriptor. */
enum rls_kind {
	RLS_NONE,      /* no rule (or replaced, or an unknown domain): OK */
	RLS_UNLIMITED, /* unlimited: OK, remaining 2^32 - 1 */
	RLS_ZERO,      /* requests_per_unit 0: over the limit at any cost */
	RLS_COUNTED,   /* a pair of the decision */
};

/* The most descriptors of one request that carry their own limit. */
#define RLS_MAX_OWN 16

struct rls_desc {
	enum rls_kind kind;
	const struct envoy_limit *limit; /* the rule's, or one of the plan's own */
	int own;			 /* limit is plan->own[own - 1]; 0: a rule's */
	int pair;			 /* RLS_COUNTED: 1-based position among the pairs */
	uint64_t cost;
	int first; /* the entry the lookup starts at: 1 after RLS_CHARGE_KEY */
};

/* A descriptor whose first entry has this key is charged, not decided
 * (CHARGE): Envoy's apply_on_stream_done rate limit sends the response's
 * cost as hits_addend and ignores the answer. The entry itself is dropped:
 * the rest finds the same rule and key as the request's own call. */
#define RLS_CHARGE_KEY "ratelimitd_charge"

struct rls_plan {
	int n;
	struct rls_desc d[RLS_MAX_DESCRIPTORS];
	int unknown_domain;
	/* the decision: pairs, all with one cost (0: look without taking) */
	int npairs;
	uint64_t cost;
	int pair_desc[RLS_MAX_DESCRIPTORS]; /* the first descriptor of each pair */
	/* the pairs' users: in a static area, valid until the next rls_plan
	 * (the store copies them when asked) */
	size_t user_len[RLS_MAX_DESCRIPTORS];
	const char *user[RLS_MAX_DESCRIPTORS];
	/* the limits descriptors carry (RateLimitOverride) */
	int nown;
	struct envoy_limit own[RLS_MAX_OWN];
	/* a requests_per_unit 0 limit denies, whatever the pairs say (they
	 * are only looked at, for their statuses) */
	int zero_over;
	int charge; /* the descriptors say RLS_CHARGE_KEY: a CHARGE */
};

/*
 * Decodes msg[0..len) against cfg's envoy rules into plan. 0, or -1 with
 * the gRPC status and a message (static) for the caller to answer.
 */
int rls_plan(const struct config *cfg, const uint8_t *msg, size_t len, struct rls_plan *plan,
	     enum grpc_status *status, const char **why);

/* The pairs of the plan as a MALLOW (MPEEK for cost 0, or when a zero
 * limit denies anyway), its pairs written into pairs (room for
 * RLS_MAX_DESCRIPTORS, living while req is used); one pair as an ALLOW
 * (PEEK). */
void rls_request(const struct rls_plan *plan, struct cmd_pair *pairs, struct cmd_request *req);

/*
 * Writes the RateLimitResponse for plan into buf (RLS_ANSWER_MAX bytes):
 * res is the decision's result (NULL when the plan decided alone), allowed
 * the overall answer, now_s the wall clock (a window's reset when the
 * store did not tell), headers what envoy.response_headers asks for.
 * Returns the length.
 */
size_t rls_encode(const struct rls_plan *plan, const struct cmd_result *res, int allowed,
		  int headers, int64_t now_s, uint8_t *buf);

#endif
