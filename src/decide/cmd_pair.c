/*
 * cmd_pair.c - the single-pair engine: ALLOW, PEEK, RESET, CHARGE and HOLD
 * of one (user, action) and CL.THROTTLE, from the policy and its overrides
 * through blocks, the deny cache and delays to the store and back.
 */
#include "cmd_table.h"

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
#include "lease.h"

/*
 * A funnel's delay: the store decided with the capacity raised by what
 * drains in delay.max (delay_extra units), so a request that would pass
 * within it was taken, its slot reserved in the funnel's TAT. It is
 * answered as the policy itself would count it, ALLOWED when its slot
 * comes: new_tat - now (the reply's reset) less the policy's own tau.
 */
static void delayed_done(struct cmd_slot *slot, const struct store_result *res)
{
	const struct policy *p = slot->delay_policy;
	const struct policy_limit *l = &p->limits[0];
	struct delays *d = slot->delays;
	slot->delay_extra = 0;
	slot->policy = p;
	if (res->status != STORE_OK) {
		delays_unclaim(d);
		decide_store_failed(slot, res, config_on_error(slot->cfg, p));
		return;
	}
	local_redis_back(slot->local); /* Redis decides again */
	int64_t extra = slot->policy_copy.limits[0].capacity - l->capacity;
	int64_t remaining = res->remaining - extra;
	int64_t wait_ms = 0;
	if (res->allowed) {
		/* tau in us, as the script has it: capacity * period / count */
		double tau_us =
			(double)l->capacity * (double)l->period_ms * 1000.0 / (double)l->count;
		double over_us = (double)res->reset_ms * 1000.0 - tau_us;
		wait_ms = over_us > 0 ? (int64_t)((over_us + 999.0) / 1000.0) : 0;
	}
	/* told when the slot comes: the funnel is then wait_ms nearer empty */
	decide_fill(slot, slot->cfg, p, decide_store_source(res), res->allowed, l->capacity,
		    remaining < 0 ? 0 : remaining, res->retry_after_ms,
		    res->reset_ms > wait_ms ? res->reset_ms - wait_ms : 0);
	if (wait_ms > 0) {
		delays_hold(d, slot, wait_ms);
		return;
	}
	delays_unclaim(d);
	decide_complete(slot);
}

/* An allowed HOLD's id, <action>:<user>:<nonce>:<estimate> (a lease id's
 * form): the reply's item. 0, or -1 out of memory. */
static int hold_id(struct cmd_slot *slot, const struct policy *p)
{
	struct cmd_item *item = malloc(sizeof(*item) + LEASE_ID_MAX);
	if (!item)
		return -1;
	memset(item, 0, sizeof(*item));
	item->index = 1; /* a hold's id */
	item->ulen = lease_id_format(item->text, p->name, p->name_len, slot->user, slot->user_len,
				     slot->hold_nonce, slot->cost);
	slot->res.item = item;
	return 0;
}

static void store_done(void *arg, const struct store_result *res);

/* An ALLOW of slot's pair (policy, user set) for cost units, taking a
 * block of up to want units with it, in the policy's store: a follower's,
 * or an ask of the daemon's own (cost 0). */
static void block_submit(struct cmd_slot *slot, const struct cmd_env *env, struct config *cfg,
			 int64_t cost, int64_t want, int64_t timeout_ms)
{
	const struct policy *p = slot->policy;
	const struct config_redis *rc = config_redis_of(cfg, p);
	struct store_request req = {
		.op = STORE_ALLOW,
		.policy = p,
		.prefix = cfg->prefix,
		.prefix_len = strlen(cfg->prefix),
		.user = slot->user,
		.user_len = slot->user_len,
		.cost = cost,
		.timeout_ms = timeout_ms,
		.block_want = want,
		.block_ttl_ms = want > 0 ? blocks_ttl_ms(cmd_env_blocks(env, p), p) : 0,
		.eager = rc && rc->remote,
	};
	store_submit(cmd_env_store(env, p), &req, store_done, slot);
}

/* The next block of slot's pair asked by a request of its own (no
 * client's, no cost), so slot, answered from the block meanwhile, does
 * not wait for it: a remote store's (max: auto). Without memory, none:
 * the next request asks. */
static void block_ask_beside(const struct cmd_slot *slot, const struct cmd_env *env,
			     struct config *cfg, struct blocks *b, int64_t want)
{
	const struct policy *p = slot->policy;
	struct cmd_slot *a = calloc(1, sizeof(*a));
	if (!a)
		return;
	uint64_t now = clock_mono_us();
	if (blocks_ask_begin(b, p, slot->user, slot->user_len, a, now) < 0) {
		free(a);
		return;
	}
	config_ref(cfg);
	a->cfg = cfg;
	a->policy = p;
	a->op = STORE_ALLOW;
	a->sent_us = now;
	a->blocks = b;
	a->block_epoch = blocks_epoch(b);
	a->block_env = env;
	a->block_own_ask = 1;
	a->user_len = slot->user_len;
	memcpy(a->user, slot->user, slot->user_len);
	const struct config_redis *rc = config_redis_of(cfg, p);
	/* the block alone: no request's units */
	block_submit(a, env, cfg, 0, want, rc ? rc->timeout_ms : cfg->redis.timeout_ms);
}

/*
 * A hot pair's block (blocks.h), for an ALLOW of the policy's own limits
 * by slot (its policy, user, cost and cfg set): 1 when answered from it
 * or waiting for the ask out (the slot then holds a reference to cfg); 0
 * to ask the store, with *want units of a block when the slot asks.
 */
static int block_route(struct cmd_slot *slot, const struct cmd_env *env, struct config *cfg,
		       int may_ask, int may_follow, int64_t *want)
{
	const struct policy *p = slot->policy;
	struct blocks *b = cmd_env_blocks(env, p);
	struct blocks_hit hit;
	unsigned long epoch;
	void *asker;
	*want = 0;
	slot->block_env = env;
	blocks_sync(b, store_generation(cmd_env_store(env, p)));
	switch (blocks_take(b, p, slot->user, slot->user_len, slot->cost, slot->sent_us, may_ask,
			    slot, &hit, want, &epoch, &asker)) {
	case BLOCKS_ANSWERED:
		if (*want > 0)
			block_ask_beside(slot, env, cfg, b, *want);
		*want = 0;
		decide_answer(slot, cfg, p, STATS_FROM_BLOCK, 1, hit.limit, hit.remaining, 0,
			      hit.reset_ms);
		return 1;
	case BLOCKS_FOLLOW: {
		struct cmd_slot *a = asker;
		if (!may_follow) { /* its deadline runs: the store, with what is left of it */
			blocks_unfollow(b, p, slot->user, slot->user_len);
			return 0;
		}
		if (!slot->cfg) {
			config_ref(cfg);
			slot->cfg = cfg;
		}
		slot->block_env = env;
		slot->block_epoch = epoch; /* what it waits under */
		slot->block_next = a->block_next;
		a->block_next = slot;
		return 1;
	}
	case BLOCKS_ASK:
		slot->blocks = b;
		slot->block_epoch = epoch;
		slot->block_next = NULL;
		return 0;
	case BLOCKS_REDIS:
		break;
	}
	return 0;
}

/* A follower whose asker was answered: from the new block, behind the
 * next ask, or by the store; the ask failed, as it did (asks go with
 * redis.timeout, and no request with a deadline of its own follows one).
 * One that waited across a RESET, an override or a reload was decided
 * under what may have changed (its cfg may be the old one): Redis decides
 * it, with no block; so while RESETs do not reach us. */
static void block_follow(struct cmd_slot *slot, const struct store_result *failed)
{
	const struct cmd_env *env = slot->block_env;
	struct config *cfg = slot->cfg;
	const struct policy *p = slot->policy;
	struct store *store = cmd_env_store(env, p);
	int64_t want = 0;
	if (failed) {
		store_done(slot, failed);
		return;
	}
	/* its deadline ran while it waited: what is left of it is the store
	 * call's, and it follows no other ask (an answer within the store's
	 * timeout, however long the ask took: a WAN's) */
	const struct config_redis *rc = config_redis_of(cfg, p);
	int64_t timeout_ms = rc ? rc->timeout_ms : cfg->redis.timeout_ms;
	uint64_t now = clock_mono_us();
	int64_t left_ms = timeout_ms - (int64_t)((now - slot->parsed_us) / 1000u);
	if (left_ms <= 0) {
		struct store_result late = {.status = STORE_TIMEOUT,
					    .detail = "no answer within its deadline (behind a "
						      "block's ask)"};
		store_done(slot, &late);
		return;
	}
	slot->sent_us = now;
	if (blocks_epoch(cmd_env_blocks(env, p)) == slot->block_epoch &&
	    store_resets_followed(store) && block_route(slot, env, cfg, 1, 0, &want))
		return;
	block_submit(slot, env, cfg, slot->cost, want, left_ms);
}

/* The answer to a request that asked for a block too: the block is this
 * daemon's to answer from (or another may be asked for), and those that
 * waited for it go on. */
static int block_done(struct cmd_slot *slot, const struct store_result *res)
{
	const struct policy *p = slot->policy;
	struct blocks *b = slot->blocks;
	struct cmd_slot *f = slot->block_next;
	struct blocks_hit hit;
	int spent = 0;
	slot->blocks = NULL;
	slot->block_next = NULL;
	if (res->status == STORE_OK)
		blocks_rtt_sample(b, slot->sent_us, clock_mono_us());
	if (res->status == STORE_OK && res->allowed) {
		blocks_put(b, p, slot->user, slot->user_len, slot, slot->sent_us, res->block,
			   res->block_ms, res->block_window, res->limit, res->remaining,
			   res->reset_ms);
	} else {
		blocks_unask(b, p, slot->user, slot->user_len, slot, slot->sent_us,
			     res->status == STORE_OK ? res->retry_after_ms : 0);
		/* it asked as the block ran low: what is left answers it
		 * (unless the store's state moved meanwhile) */
		if (res->status == STORE_OK && slot->block_env) {
			blocks_sync(b, store_generation(cmd_env_store(slot->block_env, p)));
			spent = blocks_spend(b, p, slot->user, slot->user_len, slot->cost,
					     clock_mono_us(), &hit);
		}
	}
	int denied = res->status == STORE_OK && !res->allowed && !spent;
	while (f) {
		struct cmd_slot *next = f->block_next;
		f->block_next = NULL;
		if (denied && f->cost >= slot->cost && f->block_epoch == slot->block_epoch) {
			/* Redis just denied the pair this many units: no daemon can
			 * make room before its retry time (the deny cache's reason),
			 * and more units need more room */
			decide_answer(f, f->cfg, f->policy, STATS_FROM_CACHE, 0, res->limit,
				      res->remaining, res->retry_after_ms, res->reset_ms);
		} else {
			block_follow(f, res->status == STORE_OK ? NULL : res);
		}
		f = next;
	}
	if (slot->block_own_ask) { /* no one to answer */
		struct config *cfg = slot->cfg;
		free(slot);
		config_unref(cfg);
		return 1;
	}
	if (spent)
		decide_answer(slot, slot->cfg, p, STATS_FROM_BLOCK, 1, hit.limit, hit.remaining, 0,
			      hit.reset_ms);
	return spent;
}

static void store_done(void *arg, const struct store_result *res)
{
	struct cmd_slot *slot = arg;
	const struct policy *p = slot->policy;
	enum store_op op = (enum store_op)slot->op;

	if (slot->trace.on) {
		slot->batch_sent_us = res->batch_sent_us;
		slot->batch_read_us = res->batch_read_us;
		slot->batch_size = res->batch_size;
	}
	if (slot->blocks && block_done(slot, res))
		return;

	if (slot->delay_extra) {
		delayed_done(slot, res);
		return;
	}
	if (slot->delay_window) {
		/* a window's delay: the store charged it as running retry ms
		 * from now, and answers it as it will be then */
		struct delays *d = slot->delays;
		slot->delay_window = 0;
		if (res->status == STORE_OK && res->allowed && res->retry_after_ms > 0) {
			local_redis_back(slot->local);
			decide_fill(slot, slot->cfg, p, decide_store_source(res), 1, res->limit,
				    res->remaining, 0, res->reset_ms);
			delays_hold(d, slot, res->retry_after_ms);
			return;
		}
		delays_unclaim(d);
	}
	if (res->status != STORE_OK) {
		decide_store_failed(slot, res, config_on_error(slot->cfg, p));
		return;
	}
	if (slot->deny && op == STORE_RESET)
		denycache_reset_pair(slot->deny, p->name, p->name_len, slot->user, slot->user_len);
	else if (slot->deny && !res->allowed && op != STORE_HOLD)
		denycache_put(slot->deny, slot->deny_epoch, p->name, p->name_len, slot->user,
			      slot->user_len, slot->cost, slot->sent_us, res->limit, res->remaining,
			      res->retry_after_ms, res->reset_ms);
	else if (res->allowed)
		decide_cache_allowed(slot->deny, op, p, slot->user, slot->user_len);
	local_redis_back(slot->local);
	if (op == STORE_HOLD && res->allowed && hold_id(slot, p) < 0) {
		decide_error(slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
		return;
	}
	if (op == STORE_RESET)
		decide_reply(slot, CMD_REPLY_OK);
	else
		decide_answer(slot, slot->own_policy ? NULL : slot->cfg, p,
			      decide_store_source(res), res->allowed, res->limit, res->remaining,
			      res->retry_after_ms, res->reset_ms);
}

static void submit(struct config *cfg, const struct cmd_env *env, enum store_op op,
		   const struct policy *p, const struct cmd_request *pc, struct cmd_slot *slot);
static void shadow_setup(struct cmd_slot *slot, struct config *cfg, enum store_op op,
			 const struct policy *p);

/* An unlimited or blocked override: answered without the store. */
static void answer_override(struct config *cfg, enum store_op op, const struct policy *p,
			    struct cmd_slot *slot, int allowed)
{
	slot->policy = p;
	slot->op = op;
	shadow_setup(slot, cfg, op, p);
	decide_override(slot, cfg, p, allowed);
}


/* ALLOW, PEEK, RESET, CHARGE, HOLD: one pair, with its row's store op. */
void cmd_run_pair(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		  struct cmd_slot *slot)
{
	enum store_op op = (enum store_op)cmd_verbs[pc->verb].op;
	const struct policy *p = decide_policy(cfg, pc, slot);
	if (!p)
		return;
	if (p->algo == POLICY_CONCURRENCY) {
		if (op == STORE_RESET) {
			leases_execute(cfg, env, pc, p, slot); /* every lease of the user */
			return;
		}
		decide_error(slot, CMD_ERR_POLICY_KIND,
			     "a concurrency policy: ACQUIRE a lease (RELEASE it when done)");
		return;
	}
	slot->own_policy = 0;
	/* the user, for the heavy hitters every answer is counted in (top.h),
	 * the shadow log, the deny cache, the local fallback, blocks and
	 * holds; and the cost, for the decision log (declog.h). submit's
	 * callers all come through here or throttle(), which does the same. */
	slot->user_len = pc->user_len;
	memcpy(slot->user, pc->user, pc->user_len);
	slot->cost = pc->cost;
	/* Only a policy with overrides pays for looking them up. A RESET
	 * clears the keys the user's limits use. */
	const struct override *o = decide_find_override(env, p, pc->user, pc->user_len);
	if (o) {
		switch (o->kind) {
		case OVERRIDE_LIMITS:
			slot->policy_copy = *o->policy;
			p = &slot->policy_copy;
			slot->overridden = 1;
			break;
		case OVERRIDE_UNLIMITED:
		case OVERRIDE_BLOCKED:
			if (op != STORE_RESET) {
				answer_override(cfg, op, p, slot, o->kind == OVERRIDE_UNLIMITED);
				return;
			}
			break;
		}
	}
	submit(cfg, env, op, p, pc, slot);
}

/* Whether a denial is answered ALLOWED (shadow mode). (Every caller has
 * the user in the slot already, for its log line.) */
static void shadow_setup(struct cmd_slot *slot, struct config *cfg, enum store_op op,
			 const struct policy *p)
{
	slot->shadow = op != STORE_RESET && !slot->own_policy && config_shadow(cfg, p);
}

/*
 * The single pair's stages, in the order proto/protocol.md and
 * docs/algorithms.md describe (nginx's phase handlers): each reads and
 * sets what its comment says, and either answers the request (STAGE_DONE,
 * the slot completed or handed on) or passes it on. The overrides come
 * before them (cmd_run_pair); bans are the script's.
 */
struct pair {
	struct config *cfg;
	const struct cmd_env *env;
	enum store_op op;
	const struct policy *p; /* the policy, or a funnel's with its delay's capacity */
	const struct cmd_request *pc;
	struct cmd_slot *slot;
	int64_t block_want;  /* units to ask Redis for with this request (blocks.h) */
	int64_t window_wait; /* a window's delay: how long the store may hold it */
	struct store *store; /* the policy's (stage_which_store) */
};

enum stage_step { STAGE_NEXT, STAGE_DONE };

/* Redis failing, the local fallback decides on what Redis would have. */
static enum stage_step stage_local(struct pair *r)
{
	struct cmd_slot *slot = r->slot;
	slot->local = NULL;
	if (r->env->local && r->op != STORE_RESET &&
	    config_on_error(r->cfg, slot->own_policy ? NULL : r->p) == POLICY_ON_ERROR_LOCAL) {
		slot->local = r->env->local;
		slot->cost = r->pc->cost > 0 ? r->pc->cost : 1;
	}
	return STAGE_NEXT;
}

/*
 * A hot pair's block (blocks.h): answered from the units Redis counted for
 * this daemon, or Redis is asked for some with this request. Only on the
 * policy's own limits (an override's are another's), and only while
 * RESETs reach us (they revoke blocks; a store that sends none, as the
 * memory store, has no blocks to give). Before the deny cache: units
 * counted for us are ours to answer even once Redis denies others.
 */
static enum stage_step stage_block(struct pair *r)
{
	struct cmd_slot *slot = r->slot;
	const struct cmd_request *pc = r->pc;
	const struct policy *p = r->p;
	slot->blocks = NULL;
	slot->block_next = NULL;
	slot->block_own_ask = 0; /* a client's (slots are reused) */
	struct blocks *b = cmd_env_blocks(r->env, p);
	if (r->op == STORE_RESET && b)
		blocks_reset_pair(b, p->name, p->name_len, pc->user, pc->user_len);
	if (r->op != STORE_ALLOW || p->blocks.max <= 0 || !b || slot->own_policy ||
	    slot->overridden || !store_resets_followed(r->store))
		return STAGE_NEXT;
	slot->cost = pc->cost > 0 ? pc->cost : 1;
	slot->delay_extra = 0; /* (a follower's store_done reads them) */
	slot->delay_window = 0;
	/* one that may wait, or has a deadline shorter than redis.timeout,
	 * is answered from a block but neither asks for one nor waits
	 * behind an ask */
	const struct config_redis *rc = config_redis_of(r->cfg, p);
	int may_ask = !(pc->wait_given && pc->wait_ms > 0) && p->delay.max_ms == 0 && rc &&
		      decide_timeout_ms(r->cfg, p, pc) == rc->timeout_ms;
	return block_route(slot, r->env, r->cfg, may_ask, 1, &r->block_want) ? STAGE_DONE
									     : STAGE_NEXT;
}

/* A HOLD's nonce, its id's own (lease.h). */
static enum stage_step stage_hold(struct pair *r)
{
	if (r->op != STORE_HOLD)
		return STAGE_NEXT;
	if (!r->env->leases) {
		decide_error(r->slot, CMD_ERR_OUT_OF_MEMORY, "out of memory");
		return STAGE_DONE;
	}
	r->slot->hold_nonce = leases_nonce(r->env->leases);
	r->slot->cost = r->pc->cost;
	return STAGE_NEXT;
}

/*
 * The deny cache answers and learns only while every daemon's RESETs
 * reach us (decide_cache), and only on the action's own limits
 * (decide_cacheable). A request that may wait decides with another
 * capacity, a CHARGE is never denied, a HOLD opens a hold, and an ask
 * for a block goes to Redis (requests wait for its answer): no cache.
 */
static enum stage_step stage_deny_cache(struct pair *r)
{
	struct cmd_slot *slot = r->slot;
	const struct cmd_request *pc = r->pc;
	const struct policy *p = r->p;
	enum store_op op = r->op;
	struct denycache *deny;
	int may_wait = pc->wait_given && pc->wait_ms > 0;
	if (decide_cacheable(p, slot->own_policy || slot->overridden || may_wait ||
					op == STORE_CHARGE || op == STORE_HOLD || slot->blocks) &&
	    (deny = decide_cache(r->env, p))) {
		struct denycache_hit hit;
		slot->deny = deny;
		if (op == STORE_RESET)
			denycache_reset_pair(deny, p->name, p->name_len, pc->user, pc->user_len);
		else if (denycache_lookup(deny, p->name, p->name_len, pc->user, pc->user_len,
					  pc->cost, slot->sent_us, &hit)) {
			decide_answer(slot, r->cfg, p, STATS_FROM_CACHE, 0, hit.limit,
				      hit.remaining, hit.retry_after_ms, hit.reset_ms);
			return STAGE_DONE;
		}
		slot->deny_epoch = denycache_epoch(deny);
		slot->cost = pc->cost;
	}
	/* A CHARGE or a HOLD is never answered from the cache nor cached (a
	 * CHARGE is never denied), but the units it takes make the pair's
	 * cached denials' remaining stale: they go once it is answered, as an
	 * allowed ALLOW's do (store_done, decide_cache_allowed). */
	if ((op == STORE_CHARGE || op == STORE_HOLD) && !slot->deny &&
	    decide_cacheable(p, slot->own_policy || slot->overridden))
		slot->deny = decide_cache(r->env, p);
	return STAGE_NEXT;
}

/*
 * A delay (or the caller's deadline, if shorter), while below max_delayed:
 * a window's is the store's (it charges the request as running when its
 * window has room); a funnel's asks with the capacity raised by what
 * drains in delay.max. A request that may wait asks no block.
 */
static enum stage_step stage_delay(struct pair *r)
{
	struct cmd_slot *slot = r->slot;
	const struct cmd_request *pc = r->pc;
	const struct policy *p = r->p;
	const struct cmd_env *env = r->env;
	slot->delay_extra = 0;
	slot->delay_window = 0;
	int64_t wait = p->delay.max_ms;
	if (pc->wait_given) /* WAIT: this request's bound, within the policy's */
		wait = wait > 0 && wait < pc->wait_ms ? wait : pc->wait_ms;
	if (pc->timeout_ms > 0 && pc->timeout_ms < wait)
		wait = pc->timeout_ms;
	if (r->op == STORE_ALLOW && p->algo != POLICY_FUNNEL && wait > 0 && !slot->shadow &&
	    delays_claim(env->delays, r->cfg->max_delayed)) {
		slot->delay_window = 1;
		slot->delays = env->delays;
		slot->deny = NULL; /* a delayed answer is no denial to cache */
		r->window_wait = wait;
	}
	if (r->op == STORE_ALLOW && p->algo == POLICY_FUNNEL && wait > 0 && !slot->own_policy &&
	    !slot->overridden && !slot->shadow && delays_claim(env->delays, r->cfg->max_delayed)) {
		const struct policy_limit *l = &p->limits[0];
		int64_t extra = wait * l->count / l->period_ms;
		if (extra > 0) {
			slot->delay_policy = p; /* cfg's: held with cfg */
			slot->policy_copy = *p;
			slot->policy_copy.limits[0].capacity += extra;
			r->p = &slot->policy_copy;
			slot->policy = r->p;
			slot->delay_extra = extra;
			slot->delays = env->delays;
			slot->deny = NULL; /* its denials are another capacity's */
		} else {
			delays_unclaim(env->delays);
		}
	}
	if (slot->blocks && (r->window_wait > 0 || slot->delay_extra > 0)) {
		blocks_unask(slot->blocks, r->p, pc->user, pc->user_len, slot, 0, 0);
		slot->blocks = NULL;
		r->block_want = 0;
	}
	return STAGE_NEXT;
}

/* The policy's store, first: a store not running answers before anything is taken. */
static enum stage_step stage_which_store(struct pair *r)
{
	r->store = cmd_env_store(r->env, r->p);
	if (r->store)
		return STAGE_NEXT;
	decide_no_store(r->slot, r->p);
	return STAGE_DONE;
}

/* The store decides (store_done answers), with whatever the stages added. */
static enum stage_step stage_store(struct pair *r)
{
	const struct policy *p = r->p;
	const struct cmd_request *pc = r->pc;
	config_ref(r->cfg);
	r->slot->cfg = r->cfg;
	struct store_request req = {
		.op = r->op,
		.policy = p,
		.prefix = r->cfg->prefix,
		.prefix_len = strlen(r->cfg->prefix),
		.user = pc->user,
		.user_len = pc->user_len,
		.cost = pc->cost > 0 ? pc->cost : 1,
		.timeout_ms = decide_timeout_ms(r->cfg, p, pc),
		.wait_ms = r->window_wait,
		.block_want = r->block_want,
		.block_ttl_ms = r->block_want ? blocks_ttl_ms(cmd_env_blocks(r->env, p), p) : 0,
		.eager = decide_eager(r->cfg, p),
		.hold_nonce = r->slot->hold_nonce,
		.hold_ms = p->hold_ms ? p->hold_ms : POLICY_HOLD_DEFAULT_MS,
	};
	store_submit(r->store, &req, store_done, r->slot);
	return STAGE_DONE;
}

static enum stage_step (*const stages[])(struct pair *) = {
	stage_which_store, stage_local, stage_block, stage_hold,
	stage_deny_cache,  stage_delay, stage_store,
};

static void submit(struct config *cfg, const struct cmd_env *env, enum store_op op,
		   const struct policy *p, const struct cmd_request *pc, struct cmd_slot *slot)
{
	slot->policy = p;
	slot->op = op;
	slot->deny = NULL;
	slot->sent_us = slot->parsed_us; /* submit runs inside cmd_execute */
	shadow_setup(slot, cfg, op, p);
	struct pair r = {.cfg = cfg, .env = env, .op = op, .p = p, .pc = pc, .slot = slot};
	for (size_t i = 0; i < sizeof(stages) / sizeof(stages[0]); i++)
		if (stages[i](&r) == STAGE_DONE)
			return;
}

/*
 * CL.THROTTLE key max_burst count period [quantity]: redis-cell's GCRA is
 * our funnel with capacity max_burst + 1 draining count per period, under
 * the configured namespace (so its keys never meet a policy's). Off unless
 * the configuration says so: the caller chooses the limit.
 */
void cmd_run_throttle(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		      struct cmd_slot *slot)
{
	const struct config_throttle *t = &cfg->throttle;
	char msg[CMD_MSG_MAX];
	if (!t->enabled) {
		decide_error(slot, CMD_ERR_UNKNOWN_COMMAND,
			     "CL.THROTTLE is off (throttle: {enabled: true} turns it on)");
		return;
	}
	if (pc->max_burst < 0 || pc->max_burst > t->max_burst) {
		snprintf(msg, sizeof(msg), "max_burst must be from 0 to %lld (throttle.max_burst)",
			 (long long)t->max_burst);
		decide_error(slot, CMD_ERR_SYNTAX, msg);
		return;
	}
	if (pc->count < 1 || pc->count > POLICY_MAX_COUNT) {
		decide_error(slot, CMD_ERR_SYNTAX, "count must be from 1 to 1000000000");
		return;
	}
	if (pc->period_s < 1 || pc->period_s > t->max_period_ms / 1000) {
		snprintf(msg, sizeof(msg),
			 "period must be from 1 to %lld seconds (throttle.max_period)",
			 (long long)(t->max_period_ms / 1000));
		decide_error(slot, CMD_ERR_SYNTAX, msg);
		return;
	}
	struct policy *p = &slot->policy_copy;
	memset(p, 0, sizeof(*p));
	p->name_len = strlen(t->namespace);
	memcpy(p->name, t->namespace, p->name_len + 1);
	p->algo = POLICY_FUNNEL;
	p->nlimits = 1;
	p->limits[0].capacity = pc->max_burst + 1;
	p->limits[0].count = pc->count;
	p->limits[0].period_ms = pc->period_s * 1000;
	p->on_store_error = POLICY_ON_ERROR_INHERIT;
	slot->own_policy = 1;
	slot->user_len = pc->user_len;
	memcpy(slot->user, pc->user, pc->user_len);
	submit(cfg, env, pc->cost > 0 ? STORE_ALLOW : STORE_PEEK, p, pc, slot);
}
