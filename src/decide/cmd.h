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

#include "cmd_slot.h"
#include "cmd_types.h"

struct config;

/* caller: who sends it (the listener's admin and auth, the identity proved;
 * AUTH changes it). */
void cmd_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *req,
		 struct cmd_caller *caller, struct cmd_slot *slot);

/* Frees what a result owns (an OVERRIDES item); before a slot is reused. */
void cmd_result_release(struct cmd_result *res);

/* Fills the slot with an error (msg is copied) and completes it. */
void cmd_reply_error(struct cmd_slot *slot, enum cmd_error e, const char *msg);
/* Completes the slot with a reply of the protocol's own. */
void cmd_reply_local(struct cmd_slot *slot, int local);

#endif
