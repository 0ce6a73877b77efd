/*
 * cmd_admin.c - the admin listeners' verbs: OVERRIDE, UNOVERRIDE and
 * OVERRIDES (run-time overrides, override_live.h) and TOP (the heavy
 * hitters, top.h).
 */
#include "cmd_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "clock.h"
#include "cmd_slot.h"
#include "config.h"
#include "decide.h"
#include "delay.h"
#include "denycache.h"
#include "lease.h"
#include "leases.h"
#include "local.h"
#include "multi.h"
#include "override.h"
#include "override_live.h"
#include "policy.h"
#include "stats.h"
#include "trace.h"
#include "store.h"

static void live_done(void *arg, const char *why)
{
	struct cmd_slot *slot = arg;
	if (why) {
		char msg[CMD_MSG_MAX];
		snprintf(msg, sizeof(msg), "redis: %s", why);
		decide_error(slot, CMD_ERR_STORE_UNAVAILABLE, msg);
		return;
	}
	decide_reply(slot, CMD_REPLY_OK);
}

/* TOP <action> <index> (admin listeners): the index-th of the action's
 * heavy hitters as read now, or the end with how many there are and the
 * action's totals. A policy that never decided here has none. */
void cmd_run_top(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		 struct cmd_slot *slot)
{
	(void)env;
	if (!config_find_policy(cfg, pc->action, pc->action_len)) {
		decide_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
		return;
	}
	struct top_row rows[TOP_ROWS_MAX];
	uint64_t requests, denied;
	size_t n = stats_top(pc->action, pc->action_len,
			     pc->by_requests ? TOP_BY_REQUESTS : TOP_BY_DENIED, TOP_ROWS_MAX, rows,
			     &requests, &denied);
	slot->res.item = NULL;
	if ((uint64_t)pc->index >= n) {
		slot->res.limit = (int64_t)n;
		slot->res.remaining = (int64_t)requests;
		slot->res.retry_after_ms = (int64_t)denied;
		decide_reply(slot, CMD_REPLY_TOP);
		return;
	}
	const struct top_row *r = &rows[pc->index];
	struct cmd_item *item = calloc(1, sizeof(*item) + r->len);
	if (!item) {
		decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
		return;
	}
	item->index = pc->index;
	item->ulen = r->len;
	item->cut = r->cut;
	item->denied = (int64_t)r->denied;
	item->requests = (int64_t)r->requests;
	item->over = (int64_t)r->over;
	memcpy(item->text, r->name, r->len);
	slot->res.item = item;
	decide_reply(slot, CMD_REPLY_TOP);
}

/* OVERRIDE, UNOVERRIDE, OVERRIDES (admin listeners). */
void cmd_run_live(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		  struct cmd_slot *slot)
{
	if (!env->live) {
		decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory at start");
		return;
	}
	if (pc->verb == CMD_OVERRIDES) {
		struct override_live_item it;
		slot->res.item = NULL;
		if (override_live_nth(env->live, (size_t)pc->index, &it) < 0) {
			slot->res.limit = (int64_t)override_live_count(env->live);
			decide_reply(slot, CMD_REPLY_ITEM);
			return;
		}
		struct cmd_item *item = malloc(sizeof(*item) + it.ulen + it.alen + it.spec_len);
		if (!item) {
			decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
			return;
		}
		item->index = pc->index;
		item->ttl_ms = it.ttl_ms;
		item->ulen = it.ulen;
		item->alen = it.alen;
		item->spec_len = it.spec_len;
		memcpy(item->text, it.user, it.ulen);
		memcpy(item->text + it.ulen, it.action, it.alen);
		memcpy(item->text + it.ulen + it.alen, it.spec, it.spec_len);
		slot->res.item = item;
		decide_reply(slot, CMD_REPLY_ITEM);
		return;
	}
	if (!policy_name_valid(pc->action, pc->action_len)) {
		decide_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
		return;
	}
	if (!override_live_user_valid(pc->user, pc->user_len)) {
		decide_error(slot, CMD_ERR_BAD_USER,
			     "an override's user has no blank, CR, LF or NUL byte");
		return;
	}
	if (pc->verb == CMD_OVERRIDE) {
		const struct policy *p = config_find_policy(cfg, pc->action, pc->action_len);
		if (pc->spec_len > OVERRIDE_LIVE_SPEC_MAX) {
			decide_error(slot, CMD_ERR_SYNTAX, "an override is at most 256 bytes");
			return;
		}
		if (!p) {
			decide_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
			return;
		}
		enum override_kind kind;
		struct policy *built;
		char err[CMD_MSG_MAX];
		int bad = override_live_spec(p, pc->spec, pc->spec_len, &kind, &built, err,
					     sizeof(err));
		if (bad) {
			decide_error(slot, CMD_ERR_SYNTAX, err);
			return;
		}
		free(built);
	}
	/* answered once Redis has it (every daemon then applies it) */
	override_live_put(env->live, pc->action, pc->action_len, pc->user, pc->user_len,
			  pc->verb == CMD_OVERRIDE ? pc->spec : NULL, pc->spec_len, pc->ttl_ms,
			  live_done, slot);
}
