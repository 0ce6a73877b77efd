/*
 * cmd_state.c - STATE <user> <action>: every limit of the pair's policy as
 * it stands (its window, limit, units counted, remaining, reset, and a
 * calendar window's bounds), whether an override or a ban applies, in one
 * reply. A PEEK of the whole policy: the store reads each limit's key and
 * writes nothing; nothing is counted, cached, logged or traced, and no
 * fallback answers for a store that cannot (proto/protocol.md, STATE).
 */
#include "cmd_table.h"

#include <stdlib.h>
#include <string.h>

#include "calendar.h"
#include "cmd_slot.h"
#include "config.h"
#include "decide.h"
#include "leases.h"
#include "override.h"
#include "policy.h"
#include "store.h"

/* A limit's window as STATE tells it: a funnel's time to drain when full
 * (as HTTP's RateLimit-Policy has it), a calendar window's the one the
 * store found holding now, else its period (a lease's time). */
static int64_t window_ms(const struct policy *p, const struct policy_limit *l,
			 const struct cmd_state_limit *s)
{
	if (p->algo == POLICY_FUNNEL) {
		/* capacity * period can pass 2^63: in double, and held below it */
		double ms = (double)l->capacity * (double)l->period_ms / (double)l->count;
		return ms < 4e18 ? (int64_t)ms : (int64_t)4e18;
	}
	if (l->calendar != CALENDAR_NONE && s->end_ms > s->start_ms)
		return s->end_ms - s->start_ms;
	return l->period_ms;
}

/* Completes slot with st (owned by the result from now on). */
static void state_reply(struct cmd_slot *slot, struct cmd_state *st)
{
	slot->res.state = st;
	slot->res.kind = CMD_REPLY_STATE;
	decide_complete(slot);
}

static struct cmd_state *state_new(struct cmd_slot *slot, const struct policy *p)
{
	struct cmd_state *st = calloc(1, sizeof(*st));
	if (!st) {
		decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
		return NULL;
	}
	st->algo = p->algo;
	st->override = (enum cmd_state_override)slot->overridden;
	st->nlimits = p->nlimits;
	return st;
}

static void state_done(void *arg, const struct store_result *res)
{
	struct cmd_slot *slot = arg;
	const struct policy *p = slot->policy;
	char why[CMD_MSG_MAX];
	if (res->status != STORE_OK) {
		decide_why(res, why, sizeof(why));
		decide_error(slot, CMD_ERR_STORE_UNAVAILABLE, why);
		return;
	}
	if (res->nkeys != policy_nkeys(p)) { /* cannot be: the reply was checked */
		decide_error(slot, CMD_ERR_STORE_UNAVAILABLE, "store: no figures per limit");
		return;
	}
	struct cmd_state *st = state_new(slot, p);
	if (!st)
		return;
	for (int i = 0; i < p->nlimits; i++) {
		const struct store_key *k = &res->keys[i];
		struct cmd_state_limit *s = &st->limits[i];
		*s = (struct cmd_state_limit){
			.calendar = p->limits[i].calendar,
			.limit = p->limits[i].capacity,
			.used = k->used,
			.remaining = k->remaining,
			.reset_ms = k->reset_ms,
			.start_ms = k->start_ms,
			.end_ms = k->end_ms,
		};
		s->window_ms = window_ms(p, &p->limits[i], s);
	}
	if (p->ban.after > 0 && res->keys[p->nlimits].used)
		st->ban_ms = res->keys[p->nlimits].reset_ms;
	state_reply(slot, st);
}

/* A concurrency policy's STATE, as leases_peek read it. */
static void state_lease(struct cmd_slot *slot, const struct policy *p, int64_t limit,
			int64_t remaining, int64_t last_ms)
{
	slot->overridden = CMD_STATE_NONE;
	struct cmd_state *st = state_new(slot, p);
	if (!st)
		return;
	st->nlimits = 1;
	st->limits[0] = (struct cmd_state_limit){
		.window_ms = p->limits[0].period_ms,
		.limit = limit,
		.used = limit - remaining,
		/* below 0 only when a reload lowered the limit under the leases held */
		.remaining = remaining > 0 ? remaining : 0,
		.reset_ms = last_ms,
	};
	state_reply(slot, st);
}

/* STATE <user> <action>: what PEEK refuses, it refuses alike. */
void cmd_run_state(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		   struct cmd_slot *slot)
{
	const struct policy *p = decide_policy(cfg, pc, slot);
	if (!p)
		return;
	if (p->algo == POLICY_CONCURRENCY) {
		leases_peek(cfg, env, p, pc->user, pc->user_len, slot, state_lease);
		return;
	}
	/* the override's kind travels in overridden while the store reads
	 * (the slot is this request's); an override's limits are the ones
	 * that count, an unlimited or blocked one leaves the policy's */
	slot->overridden = CMD_STATE_NONE;
	const struct override *o = decide_find_override(env, p, pc->user, pc->user_len);
	if (o) {
		switch (o->kind) {
		case OVERRIDE_LIMITS:
			slot->policy_copy = *o->policy;
			p = &slot->policy_copy;
			slot->overridden = CMD_STATE_LIMITS;
			break;
		case OVERRIDE_UNLIMITED:
			slot->overridden = CMD_STATE_UNLIMITED;
			break;
		case OVERRIDE_BLOCKED:
			slot->overridden = CMD_STATE_BLOCKED;
			break;
		}
	}
	slot->policy = p;
	slot->op = STORE_STATE;
	slot->deny = NULL;
	slot->local = NULL;
	slot->blocks = NULL;
	slot->delay_extra = 0;
	slot->delay_window = 0;
	config_ref(cfg);
	slot->cfg = cfg;
	struct store_request req = {
		.op = STORE_STATE,
		.policy = p,
		.prefix = cfg->prefix,
		.prefix_len = strlen(cfg->prefix),
		.user = pc->user,
		.user_len = pc->user_len,
		.cost = 1,
		.timeout_ms = decide_timeout_ms(cfg, p, pc),
		.eager = decide_eager(cfg, p),
	};
	struct store *st = cmd_env_store(env, p);
	if (!st) {
		decide_no_store(slot, p);
		return;
	}
	store_submit(st, &req, state_done, slot);
}
