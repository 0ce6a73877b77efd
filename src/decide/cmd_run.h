/*
 * cmd_run.h - the verbs' handlers, as cmd_table.c's rows name them, and
 * their type; decide/'s own, not for the front ends, which go through
 * cmd_execute.
 */
#ifndef RL_CMD_RUN_H
#define RL_CMD_RUN_H

#include "cmd_types.h"
#include "multi.h" /* multi_execute: MALLOW, MPEEK */

struct config;
struct policy;

/* Executes pc into slot (completing it once); authorize has passed. */
typedef void cmd_handler(struct config *cfg, const struct cmd_env *env,
			 const struct cmd_request *pc, struct cmd_slot *slot);

cmd_handler cmd_run_pair;     /* ALLOW, PEEK, RESET, CHARGE, HOLD: one pair, its row's op */
cmd_handler cmd_run_throttle; /* CL.THROTTLE: the limit comes with the request */
cmd_handler cmd_run_hold;     /* SETTLE, CANCEL of a hold */
cmd_handler cmd_run_lease;    /* ACQUIRE, RELEASE, RENEW (leases.c) */
cmd_handler cmd_run_live;     /* OVERRIDE, UNOVERRIDE, OVERRIDES */
cmd_handler cmd_run_top;      /* TOP */
cmd_handler cmd_run_state;    /* STATE (cmd_state.c) */

#endif
