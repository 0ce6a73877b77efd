/* store_reply.h - turns a Redis reply to the decision script into a result; pure. */
#ifndef RL_STORE_REPLY_H
#define RL_STORE_REPLY_H

#include <stddef.h>

#include "store.h"

struct redisReply;
struct store_result;

/* How many elements of the script's reply a decision takes: 5, 8 for one
 * that takes a block, 5 + 5 * state_keys for a STATE of that many keys
 * (0: not a STATE), or for a decision over npairs pairs 7 + 3 * npairs.
 * A call's decisions follow each other; `total`, their sum, is where
 * Redis's text of the first failure (a decision answered -1) follows
 * them. */
unsigned long store_reply_width(int npairs, int block, int state_keys);

/* The largest figures a decision of the script can carry: a count or a
 * remaining within a Lua number's exact integers, a wait or a reset
 * within about 35 years (no policy waits or resets past 2 x 366 days).
 * Anything larger did not come from the script; refusing it here keeps
 * what the front ends compute from these (seconds, rounded up) in range. */
#define STORE_REPLY_COUNT_MAX (1LL << 53)
#define STORE_REPLY_MS_MAX (1LL << 40)
/* A time of day (Unix ms, a STATE's window bounds): before year 10000. */
#define STORE_REPLY_TIME_MAX 253402300800000LL

/*
 * Reads the five integers of one decision (allowed, limit, remaining,
 * retry_after_ms, reset_ms) from elements [first, first+5) of an array reply
 * whose decisions take `total` elements. out is started first
 * (store_result_reset: whatever it held is gone).
 * Returns 0 with out filled (status STORE_OK), or -1 with out->status
 * STORE_FAILED, out->error and out->detail saying why (a static string, or
 * Redis's text inside rep: valid while rep is). Any reply shape,
 * including errors, nil and nested arrays, is handled.
 */
int store_reply_decision(const struct redisReply *rep, unsigned long first, unsigned long total,
			 struct store_result *out);
/* The same for a decision over npairs pairs, from element first: seven
 * integers, the five above, then the deciding pair (1 to npairs) and the
 * first shadow pair that would have denied (0 to npairs): out->pair and
 * out->shadow_pair; then three per pair, its own figures (out->groups). */
int store_reply_decision_all(const struct redisReply *rep, unsigned long first, unsigned long total,
			     int npairs, struct store_result *out);

/* After store_reply_decision of a decision that took a block (op "k"):
 * its units, valid ms and window, elements first+5 to first+7, into
 * out->block, out->block_ms and out->block_window (0 0 0 for none). 0,
 * or -1 as store_reply_decision. */
int store_reply_block(const struct redisReply *rep, unsigned long first, struct store_result *out);

/* After store_reply_decision of a STATE (op "t") of nkeys keys (1 to
 * POLICY_MAX_LIMITS + 1): five integers per key from element first+5,
 * into out->keys and out->nkeys. 0, or -1 as store_reply_decision. */
int store_reply_state(const struct redisReply *rep, unsigned long first, int nkeys,
		      struct store_result *out);

/* Classifies the text of an error reply ("NOPERM ...", "ERR ..."). */
enum store_error store_reply_error(const char *err, size_t len);
/*
 * Where a MOVED or ASK error reply ("MOVED 3999 127.0.0.1:7001") says to
 * ask: 0 with the slot and "host:port" (pointing into err, length in
 * *to_len), or -1 for any other or malformed text.
 */
int store_reply_redirect(const char *err, size_t len, int *slot, const char **to, size_t *to_len);

#endif
