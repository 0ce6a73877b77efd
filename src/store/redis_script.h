/*
 * redis_script.h - the calls of the decision script: the keys and arguments
 * of each decision and their RESP form; no I/O but a calendar window's
 * bounds (lib/calendar.h, cached: tzdata read at a window's first use), no hiredis.
 */
#ifndef RL_REDIS_SCRIPT_H
#define RL_REDIS_SCRIPT_H

#include <stddef.h>
#include <stdint.h>

#include "calendar.h"
#include "script_layout.h"
#include "store.h"

struct policy;

/* Arguments of one decision: op, cost, nlimits, then per limit
 * <algorithm> capacity count period_ms, then the op's own (a reset's
 * notice's channel and message, a HOLD's nonce and time, a SETTLE's and a
 * CANCEL's nonce and a notice as a reset's): the script's ARGV spec, its
 * decision_argc, both from script_layout.txt. An ALLOW that may wait ("d")
 * or takes a block ("k") has its own too, fewer than SCRIPT_OP_ARGS_MAX. */
#define REDIS_SCRIPT_DECISION_ARGC(op, nlimits)             \
	(SCRIPT_HEAD_ARGC + SCRIPT_LIMIT_ARGC * (nlimits) + \
	 ((op) == STORE_RESET	 ? SCRIPT_OP_RESET_ARGS     \
	  : (op) == STORE_HOLD	 ? SCRIPT_OP_HOLD_ARGS      \
	  : (op) == STORE_SETTLE ? SCRIPT_OP_SETTLE_ARGS    \
	  : (op) == STORE_CANCEL ? SCRIPT_OP_CANCEL_ARGS    \
				 : 0))
/* a ban is one more "limit" (policy_nkeys) */
#define REDIS_SCRIPT_DECISION_ARGC_MAX \
	(SCRIPT_HEAD_ARGC + SCRIPT_LIMIT_ARGC * (POLICY_MAX_LIMITS + 1) + SCRIPT_OP_ARGS_MAX)

/*
 * The argv of a command being built. Strings are pointed to, not copied;
 * numbers and keys are written into arena (sized by redis_script_arena_size).
 */
struct redis_argv {
	const char **argv;
	size_t *argl;
	int argc;
	char *arena;
	size_t arena_used;
};

/* Room a call deciding up to max_batch requests needs: argv entries, arena
 * bytes, and RESP bytes (less the script body, sent by EVAL). */
size_t redis_script_argv_max(int max_batch);
size_t redis_script_arena_size(int max_batch);
size_t redis_script_resp_max(int max_batch);

void redis_argv_add(struct redis_argv *a, const char *s, size_t len);
/* v >= 0, in decimal. */
void redis_argv_num(struct redis_argv *a, int64_t v);

/* Appends what follows the keys in a call deciding reqs[0..n):
 * "0" (`now`: the script reads Redis's TIME), n, then each decision's
 * arguments; a plain ALLOW of one limit (no ban, wait or block) whose limit
 * is that of the plain ALLOW just before it is "=<cost>" alone, and a
 * decision over several pairs whose op, groups and limits are those of the
 * last one given in full in the call is "~<cost>" alone. */
void redis_script_args(struct redis_argv *a, const struct store_saved_request *const *reqs, int n);

/*
 * Builds into a (from empty) the call deciding reqs[0..n), each atomic on
 * its own keys:
 *
 *   <cmd> <script> <numkeys> <key>... 0 <n> {<a|p|r> <cost> <nlimits>
 *                                          {<algo> <capacity> <count> <period_ms>}...
 *                                          [<reset channel> <tag>] | =<cost> |
 *                                          <A|P> <cost> <ngroups> {<shadow> <nlimits>
 *                                          {<algo> ...}...}... | ~<cost>}...
 *
 * cmd is "EVALSHA" with the sha, or "EVAL" with the body. With keys_after
 * (a Redis Cluster batch over several slots) numkeys is 0 and the keys come
 * after the arguments.
 */
void redis_script_call(struct redis_argv *a, const char *cmd, const char *script, size_t script_len,
		       const struct store_saved_request *const *reqs, int n, int keys_after);

/*
 * A give-back's arguments (op "b", store_give.h), what follows its one key
 * in a store_call of the script: "0" 1 b <units> 1 <algo> <capacity>
 * <count> <period_ms> <window>, of p's one limit. At most
 * REDIS_SCRIPT_GIVE_ARGC arguments, REDIS_SCRIPT_GIVE_ARENA bytes of a's
 * arena.
 */
#define REDIS_SCRIPT_GIVE_ARGC (2 + SCRIPT_HEAD_ARGC + SCRIPT_LIMIT_ARGC + SCRIPT_OP_GIVE_ARGS)
#define REDIS_SCRIPT_GIVE_ARENA (8 * 24 + CALENDAR_ARG_MAX)
void redis_script_give_args(struct redis_argv *a, const struct policy *p, int64_t units,
			    int64_t window);

/* One RESP bulk string; returns its length. */
size_t redis_resp_bulk(char *out, const char *s, size_t len);
/* The RESP array of a's arguments, as hiredis would format it, without its
 * per-argument allocations; returns its length. */
size_t redis_resp_format(char *out, const struct redis_argv *a);

#endif
