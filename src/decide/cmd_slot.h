/*
 * cmd_slot.h - a request's slot, from cmd_execute to its answer: the
 * caller's head (the answer, who takes it, which front end) and decide/'s
 * own state behind it.
 */
#ifndef RL_CMD_SLOT_H
#define RL_CMD_SLOT_H

#include <stddef.h>
#include <stdint.h>

#include "cmd_types.h"

/*
 * Where a request's result goes. The caller owns the slot (embedded in its
 * own per-request state: no allocation per request) and sets it up once with
 * cmd_slot_init; cmd_execute fills res and calls complete(slot) exactly once,
 * possibly before returning.
 */
struct cmd_slot {
	/* The caller's: set by cmd_slot_init (front, names_policy, complete);
	 * res holds the answer when complete runs. */
	struct cmd_result res;
	void (*complete)(struct cmd_slot *slot);
	int front;	  /* the front end that parsed the request (enum stats_front) */
	int names_policy; /* fill res.action and res.window_ms */

	/* decide/'s own, from cmd_execute to complete: nothing above decide/
	 * reads or writes them (scripts/include_graph.py checks) */
	struct config *cfg;	     /* held while the store works on it */
	const struct policy *policy; /* in cfg */
	int op;			     /* enum store_op */
	struct denycache *deny;	     /* where to record a denial, or NULL */
	uint64_t sent_us;	     /* monotonic time the store was asked */
	unsigned long deny_epoch;    /* denycache_epoch() when asked */
	struct blocks *blocks;	     /* the store was asked for a block too (blocks.h) */
	unsigned long block_epoch;   /* what blocks_take gave with the ask */
	/* an asker's requests waiting for its block, chained through theirs */
	struct cmd_slot *block_next;
	const struct cmd_env *block_env; /* a follower's, to go on with */
	/* no client's: an ask for a block beside an answer (blocks_ask_begin),
	 * allocated by cmd_pair.c and freed when the store answers it */
	int block_own_ask;
	int64_t cost;
	size_t user_len;
	char user[KEYS_USER_MAX];
	int own_policy;		/* policy is CMD_THROTTLE's (policy_copy), not cfg's */
	int overridden;		/* policy is an override's limits */
	int shadow;		/* answer a denial ALLOWED (shadow mode) */
	uint64_t parsed_us;	/* when cmd_execute took it: its decision's latency */
	struct cmd_trace trace; /* its decision's spans (ops/trace.h) */
	/* a traced decision's times (trace.h's struct trace_times): its bytes
	 * read, and the Redis call it rode in (sent, its reply read, the
	 * requests in it; batch_size 0: none) */
	uint64_t received_us, batch_sent_us, batch_read_us;
	int batch_size;
	/* CMD_THROTTLE's policy, built from the request; or an override's
	 * limits, copied: a run-time one may change while the store decides */
	struct policy policy_copy;
	struct multi *multi; /* MALLOW, MPEEK: while the store decides (multi.c) */
	/* on_store_error: local may decide it (user and cost are kept then) */
	struct local *local;
	/* a funnel's delay: the store asked with its capacity raised by
	 * delay_extra units (what drains in delay.max); the answer is the
	 * policy's own (delay_policy), held until the slot comes */
	int64_t delay_extra;
	const struct policy *delay_policy;
	/* a window's delay: the store was asked to wait (store_request.wait_ms)
	 * and charges a delayed request as running then (its retry the wait) */
	int delay_window;
	struct delays *delays;
	/* HOLD: the hold's nonce (its id is made from it when allowed) */
	uint64_t hold_nonce;
};

/* Sets up a slot (again) for a request: its front end (enum stats_front),
 * whether its protocol names the deciding policy (res.action, window_ms),
 * and what takes the answer. No result is owned afterwards. */
static inline void cmd_slot_init(struct cmd_slot *slot, int front, int names_policy,
				 void (*complete)(struct cmd_slot *slot))
{
	slot->complete = complete;
	slot->front = front;
	slot->names_policy = names_policy;
	slot->res.item = NULL;
	slot->res.refused = 0;
	slot->res.tag = 0;
	slot->res.close_after = 0;
	slot->cfg = NULL; /* an answer without cmd_execute (a parse error) holds none */
}

#endif
