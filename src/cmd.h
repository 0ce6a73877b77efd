/* cmd.h - executes one parsed request: command -> policy -> store -> reply line. */
#ifndef RL_CMD_H
#define RL_CMD_H

#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "proto.h"

struct config;
struct denycache;
struct policy;
struct store;

/* What requests are executed against; owned by the server. */
struct cmd_env {
	struct store *store;
	struct denycache *deny; /* NULL: no local deny cache */
};

/*
 * Where a request's reply goes. The caller owns the slot; cmd_execute fills
 * buf/len and calls complete(slot) exactly once, possibly before returning.
 */
struct cmd_slot {
	char buf[PROTO_REPLY_MAX];
	size_t len;
	int close_after;	     /* QUIT: close once this reply is written */
	struct config *cfg;	     /* held while the store works on it */
	const struct policy *policy; /* in cfg */
	int op;			     /* enum store_op */
	struct denycache *deny;	     /* where to record a denial, or NULL */
	uint64_t sent_us;	     /* monotonic time the store was asked */
	unsigned long deny_epoch;    /* denycache_epoch() when asked */
	int64_t cost;
	size_t user_len;
	char user[KEYS_USER_MAX];
	void (*complete)(struct cmd_slot *slot);
};

/* admin: the request came through a listener with admin: true. */
void cmd_execute(struct config *cfg, const struct cmd_env *env, const struct proto_cmd *pc,
		 int admin, struct cmd_slot *slot);

/* Fills the slot with an error reply and completes it. */
void cmd_reply_err(struct cmd_slot *slot, const char *code, const char *msg);

#endif
