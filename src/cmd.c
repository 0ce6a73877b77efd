/* cmd.c - executes one parsed request: looks up the policy, asks the store, formats the reply. */
#include "cmd.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "config.h"
#include "denycache.h"
#include "log.h"
#include "policy.h"
#include "stats.h"
#include "store.h"

/* Suggested wait in a fail-closed DENIED reply: long enough not to hammer a
 * sick store, short enough to recover quickly. */
#define FALLBACK_RETRY_MS 1000

static void finish(struct cmd_slot *slot)
{
	struct config *cfg = slot->cfg;
	slot->cfg = NULL;
	slot->complete(slot);
	if (cfg)
		config_unref(cfg);
}

void cmd_reply_err(struct cmd_slot *slot, const char *code, const char *msg)
{
	stats_count_error(code);
	slot->len = proto_format_err(slot->buf, code, msg);
	finish(slot);
}

static void store_done(void *arg, const struct store_result *res)
{
	struct cmd_slot *slot = arg;
	const struct policy *p = slot->policy;
	enum store_op op = (enum store_op)slot->op;

	if (res->status == STORE_OK) {
		if (slot->deny && op == STORE_RESET)
			denycache_reset_pair(slot->deny, p->name, p->name_len, slot->user,
					     slot->user_len);
		else if (slot->deny && op == STORE_ALLOW && res->allowed)
			/* cached denials of this pair now show a stale remaining */
			denycache_forget(slot->deny, p->name, p->name_len, slot->user,
					 slot->user_len);
		else if (slot->deny && !res->allowed)
			denycache_put(slot->deny, slot->deny_epoch, p->name, p->name_len,
				      slot->user, slot->user_len, slot->cost, slot->sent_us,
				      res->limit, res->remaining, res->retry_after_ms,
				      res->reset_ms);
		if (op == STORE_RESET) {
			slot->len = proto_format_str(slot->buf, "OK");
		} else {
			stats_count_decision(slot->cfg, p, STATS_FROM_STORE, res->allowed);
			slot->len = proto_format_decision(slot->buf, res->allowed, res->limit,
							  res->remaining, res->retry_after_ms,
							  res->reset_ms);
		}
		finish(slot);
		return;
	}
	stats.store_errors[res->status]++;
	if (res->status == STORE_FAILED)
		stats.store_failures[res->error < STORE_ERROR_N ? res->error : STORE_ERROR_OTHER]++;
	char msg[128];
	snprintf(msg, sizeof(msg), "store %s: %s", store_status_name(res->status),
		 res->detail ? res->detail : "");
	enum policy_on_error mode = config_on_error(slot->cfg, p);
	if (op == STORE_RESET || mode == POLICY_ON_ERROR_ERROR) {
		cmd_reply_err(slot, "store-unavailable", msg);
		return;
	}
	int64_t limit = p->limits[0].capacity;
	if (mode == POLICY_ON_ERROR_ALLOW) {
		stats_count_decision(slot->cfg, p, STATS_FROM_FALLBACK, 1);
		slot->len = proto_format_decision(slot->buf, 1, limit, -1, 0, -1);
	} else {
		stats_count_decision(slot->cfg, p, STATS_FROM_FALLBACK, 0);
		slot->len = proto_format_decision(slot->buf, 0, limit, -1, FALLBACK_RETRY_MS, -1);
	}
	finish(slot);
}

void cmd_execute(struct config *cfg, const struct cmd_env *env, const struct proto_cmd *pc,
		 int admin, struct cmd_slot *slot)
{
	slot->cfg = NULL;
	slot->close_after = 0;
	stats.requests[pc->verb]++;
	switch (pc->verb) {
	case PROTO_PING:
		slot->len = proto_format_str(slot->buf, "PONG");
		finish(slot);
		return;
	case PROTO_QUIT:
		slot->len = proto_format_str(slot->buf, "BYE");
		slot->close_after = 1;
		finish(slot);
		return;
	case PROTO_RESET:
		if (!admin) {
			cmd_reply_err(slot, "forbidden", "RESET needs a listener with admin: true");
			return;
		}
		break;
	case PROTO_ALLOW:
	case PROTO_PEEK:
		break;
	}
	const struct policy *p = config_find_policy(cfg, pc->action, pc->action_len);
	if (!p) {
		cmd_reply_err(slot, "unknown-action", "no policy for this action");
		return;
	}
	enum store_op op = pc->verb == PROTO_ALLOW  ? STORE_ALLOW
			   : pc->verb == PROTO_PEEK ? STORE_PEEK
						    : STORE_RESET;
	slot->policy = p;
	slot->op = op;
	slot->deny = NULL;
	slot->sent_us = clock_mono_us();
	/* The cache is only safe while every daemon's RESETs reach us. */
	if (env->deny && store_resets_followed(env->store)) {
		struct denycache_hit hit;
		slot->deny = env->deny;
		denycache_sync(env->deny, store_generation(env->store));
		if (op == STORE_RESET)
			denycache_reset_pair(env->deny, p->name, p->name_len, pc->user,
					     pc->user_len);
		else if (denycache_lookup(env->deny, p->name, p->name_len, pc->user, pc->user_len,
					  pc->cost, slot->sent_us, &hit)) {
			stats_count_decision(cfg, p, STATS_FROM_CACHE, 0);
			slot->len = proto_format_decision(slot->buf, 0, hit.limit, hit.remaining,
							  hit.retry_after_ms, hit.reset_ms);
			finish(slot);
			return;
		}
		slot->deny_epoch = denycache_epoch(env->deny);
		slot->cost = pc->cost;
		slot->user_len = pc->user_len;
		memcpy(slot->user, pc->user, pc->user_len);
	}
	config_ref(cfg);
	slot->cfg = cfg;
	struct store_request req = {
		.op = op,
		.policy = p,
		.prefix = cfg->prefix,
		.prefix_len = strlen(cfg->prefix),
		.user = pc->user,
		.user_len = pc->user_len,
		.cost = pc->cost,
		.timeout_ms = cfg->redis.timeout_ms,
	};
	store_submit(env->store, &req, store_done, slot);
}
