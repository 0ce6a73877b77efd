/*
 * multi.h - MALLOW and MPEEK: one decision over several (user, action)
 * pairs, allowed only if every pair allows, and then charged to all of them.
 * Atomic in one script call where the store can (one Redis, Sentinel);
 * checked and then charged pair by pair on a Cluster (docs/algorithms.md
 * says what that guarantees).
 */
#ifndef RL_MULTI_H
#define RL_MULTI_H

#include "cmd_types.h"

struct config;

/* Executes req (CMD_MALLOW or CMD_MPEEK) into slot, as cmd_execute does. */
void multi_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *req,
		   struct cmd_slot *slot);

#endif
