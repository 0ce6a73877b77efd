/*
 * cmd_hold.c - SETTLE and CANCEL of a hold (a HOLD is an ALLOW of its
 * estimate, cmd_pair.c): the difference charged or given back, on the
 * limits the hold was charged to.
 */
#include "cmd_run.h"

#include <string.h>

#include "cmd_slot.h"
#include "config.h"
#include "decide.h"
#include "denycache.h"
#include "lease.h"
#include "override.h"
#include "policy.h"
#include "stats.h"
#include "store.h"

/* A SETTLE or CANCEL answered by the store. */
static void hold_done(void *arg, const struct store_result *res)
{
	struct cmd_slot *slot = arg;
	if (res->status != STORE_OK) {
		decide_store_failed(slot, res, POLICY_ON_ERROR_ERROR);
		return;
	}
	if (res->no_hold) {
		decide_error(slot, CMD_ERR_NO_HOLD,
			     "hold not open: settled, cancelled, expired or never taken");
		return;
	}
	/* units came back: this daemon's cached denials of the pair are
	 * wrong now (the others hear of it from the script's notice); or,
	 * a SETTLE above its estimate, more were taken: their remaining is */
	if (slot->deny && slot->cost > 0)
		denycache_forget(slot->deny, slot->policy->name, slot->policy->name_len, slot->user,
				 slot->user_len);
	else if (slot->deny)
		denycache_reset_pair(slot->deny, slot->policy->name, slot->policy->name_len,
				     slot->user, slot->user_len);
	slot->deny = NULL;
	if (slot->op == STORE_CANCEL) {
		decide_reply(slot, CMD_REPLY_OK);
		return;
	}
	decide_answer(slot, slot->cfg, slot->policy, decide_store_source(res), 1, res->limit,
		      res->remaining, 0, res->reset_ms);
}

/* SETTLE and CANCEL of the hold whose id names the action, user, nonce
 * and estimate: on the limits it was charged to (an override's, if the
 * user has one now). */
void cmd_run_hold(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		  struct cmd_slot *slot)
{
	struct lease_id id;
	if (pc->lease_id_len >= LEASE_ID_MAX ||
	    lease_id_parse(pc->lease_id, pc->lease_id_len, &id) < 0) {
		decide_error(slot, CMD_ERR_NO_HOLD, "not a hold id");
		return;
	}
	const struct policy *p = config_find_policy(cfg, id.action, id.action_len);
	if (!p) {
		decide_error(slot, CMD_ERR_NO_HOLD, "not a hold id of a policy configured now");
		return;
	}
	if (p->algo == POLICY_CONCURRENCY) {
		decide_error(slot, CMD_ERR_POLICY_KIND,
			     "a concurrency policy: RELEASE its leases (holds are a rate's)");
		return;
	}
	const struct override *o = decide_find_override(env, p, id.user, id.user_len);
	if (o && o->kind != OVERRIDE_LIMITS) {
		/* unlimited or blocked: its HOLD opened nothing */
		decide_error(slot, CMD_ERR_NO_HOLD,
			     "hold not open: settled, cancelled, expired or never taken");
		return;
	}
	if (o) {
		slot->policy_copy = *o->policy;
		p = &slot->policy_copy;
	}
	config_ref(cfg);
	slot->cfg = cfg;
	slot->policy = p;
	slot->op = pc->verb == CMD_SETTLE ? STORE_SETTLE : STORE_CANCEL;
	slot->shadow = 0;
	slot->own_policy = 0;
	/* a CANCEL, or a SETTLE below the estimate, gives units back: then
	 * (hold_done) the pair's cached denials go; a SETTLE above it takes
	 * more: their remaining goes (slot->cost: what it takes beyond the
	 * estimate, 0 for none) */
	slot->deny =
		slot->op == STORE_CANCEL || pc->actual != id.cost ? decide_cache(env, p) : NULL;
	slot->cost = slot->op == STORE_SETTLE && pc->actual > id.cost ? pc->actual - id.cost : 0;
	slot->user_len = id.user_len;
	memcpy(slot->user, id.user, id.user_len);
	slot->local = NULL;
	struct store_request req = {
		.op = (enum store_op)slot->op,
		.policy = p,
		.prefix = cfg->prefix,
		.prefix_len = strlen(cfg->prefix),
		.user = id.user,
		.user_len = id.user_len,
		.cost = id.cost,
		.timeout_ms = decide_timeout_ms(cfg, p, pc),
		.eager = decide_eager(cfg, p),
		.hold_nonce = id.nonce,
		.actual = pc->actual,
	};
	struct store *st = cmd_env_store(env, p);
	if (!st) {
		decide_no_store(slot, p);
		return;
	}
	store_submit(st, &req, hold_done, slot);
}
