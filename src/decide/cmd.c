/* cmd.c - executes one request: looks up the policy, asks the deny cache or the store, fills the result. */
#include "cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "clock.h"
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

void cmd_reply_error(struct cmd_slot *slot, enum cmd_error e, const char *msg)
{
	decide_error(slot, e, msg);
}

void cmd_reply_local(struct cmd_slot *slot, int local)
{
	slot->res.kind = CMD_REPLY_LOCAL;
	slot->res.local = local;
	decide_complete(slot);
}

static void reply(struct cmd_slot *slot, enum cmd_reply kind)
{
	slot->res.kind = kind;
	decide_complete(slot);
}

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
	decide_fill(slot, slot->cfg, p, slot->from_memory ? STATS_FROM_MEMORY : STATS_FROM_STORE,
		    res->allowed, l->capacity, remaining < 0 ? 0 : remaining, res->retry_after_ms,
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

/*
 * A hot pair's block (blocks.h), for an ALLOW of the policy's own limits
 * by slot (its policy, user, cost and cfg set): 1 when answered from it
 * or waiting for the ask out (the slot then holds a reference to cfg); 0
 * to ask the store, with *want units of a block when the slot asks.
 */
static int block_route(struct cmd_slot *slot, const struct cmd_env *env, struct config *cfg,
		       int may_ask, int64_t *want)
{
	const struct policy *p = slot->policy;
	struct blocks_hit hit;
	unsigned long epoch;
	void *asker;
	*want = 0;
	slot->block_env = env;
	blocks_sync(env->blocks, store_generation(env->store));
	switch (blocks_take(env->blocks, p, slot->user, slot->user_len, slot->cost, slot->sent_us,
			    may_ask, slot, &hit, want, &epoch, &asker)) {
	case BLOCKS_ANSWERED:
		decide_answer(slot, cfg, p, STATS_FROM_BLOCK, 1, hit.limit, hit.remaining, 0,
			      hit.reset_ms);
		return 1;
	case BLOCKS_FOLLOW: {
		struct cmd_slot *a = asker;
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
		slot->blocks = env->blocks;
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
	int64_t want = 0;
	if (failed) {
		store_done(slot, failed);
		return;
	}
	slot->sent_us = clock_mono_us();
	if (blocks_epoch(env->blocks) == slot->block_epoch && store_resets_followed(env->store) &&
	    block_route(slot, env, cfg, 1, &want))
		return;
	struct store_request req = {
		.op = STORE_ALLOW,
		.policy = slot->policy,
		.prefix = cfg->prefix,
		.prefix_len = strlen(cfg->prefix),
		.user = slot->user,
		.user_len = slot->user_len,
		.cost = slot->cost,
		.timeout_ms = cfg->redis.timeout_ms,
		.block_want = want,
		.block_ttl_ms = slot->policy->blocks.ttl_ms,
	};
	store_submit(env->store, &req, store_done, slot);
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
	if (res->status == STORE_OK && res->allowed) {
		blocks_put(b, p, slot->user, slot->user_len, slot, slot->sent_us, res->block,
			   res->block_ms, res->limit, res->remaining, res->reset_ms);
	} else {
		blocks_unask(b, p, slot->user, slot->user_len, slot, slot->sent_us,
			     res->status == STORE_OK ? res->retry_after_ms : 0);
		/* it asked as the block ran low: what is left answers it
		 * (unless the store's state moved meanwhile) */
		if (res->status == STORE_OK && slot->block_env) {
			blocks_sync(b, store_generation(slot->block_env->store));
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
			decide_fill(slot, slot->cfg, p,
				    slot->from_memory ? STATS_FROM_MEMORY : STATS_FROM_STORE, 1,
				    res->limit, res->remaining, 0, res->reset_ms);
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
	else if (slot->deny && !res->allowed)
		denycache_put(slot->deny, slot->deny_epoch, p->name, p->name_len, slot->user,
			      slot->user_len, slot->cost, slot->sent_us, res->limit, res->remaining,
			      res->retry_after_ms, res->reset_ms);
	else if (res->allowed)
		decide_cache_allowed(slot->deny, op, p, slot->user, slot->user_len);
	local_redis_back(slot->local);
	if (op == STORE_HOLD && res->allowed && hold_id(slot, p) < 0) {
		decide_error(slot, CMD_ERR_STORE_UNAVAILABLE, "out of memory");
		return;
	}
	if (op == STORE_RESET)
		reply(slot, CMD_REPLY_OK);
	else
		decide_answer(slot, slot->own_policy ? NULL : slot->cfg, p,
			      slot->from_memory ? STATS_FROM_MEMORY : STATS_FROM_STORE,
			      res->allowed, res->limit, res->remaining, res->retry_after_ms,
			      res->reset_ms);
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

static void throttle(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		     struct cmd_slot *slot);

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
	 * wrong now (the others hear of it from the script's notice) */
	if (slot->deny)
		denycache_reset_pair(slot->deny, slot->policy->name, slot->policy->name_len,
				     slot->user, slot->user_len);
	slot->deny = NULL;
	if (slot->op == STORE_CANCEL) {
		reply(slot, CMD_REPLY_OK);
		return;
	}
	decide_answer(slot, slot->cfg, slot->policy,
		      slot->from_memory ? STATS_FROM_MEMORY : STATS_FROM_STORE, 1, res->limit,
		      res->remaining, 0, res->reset_ms);
}

/* SETTLE and CANCEL of the hold whose id names the action, user, nonce
 * and estimate: on the limits it was charged to (an override's, if the
 * user has one now). */
static void hold_command(struct config *cfg, const struct cmd_env *env,
			 const struct cmd_request *pc, struct cmd_slot *slot)
{
	struct lease_id id;
	if (pc->lease_id_len >= LEASE_ID_MAX ||
	    lease_id_parse(pc->lease_id, pc->lease_id_len, &id) < 0) {
		cmd_reply_error(slot, CMD_ERR_NO_HOLD, "not a hold id");
		return;
	}
	const struct policy *p = config_find_policy(cfg, id.action, id.action_len);
	if (!p) {
		cmd_reply_error(slot, CMD_ERR_NO_HOLD, "not a hold id of a policy configured now");
		return;
	}
	if (p->algo == POLICY_CONCURRENCY) {
		cmd_reply_error(slot, CMD_ERR_POLICY_KIND,
				"a concurrency policy: RELEASE its leases (holds are a rate's)");
		return;
	}
	const struct override *o = decide_find_override(env, p, id.user, id.user_len);
	if (o && o->kind != OVERRIDE_LIMITS) {
		/* unlimited or blocked: its HOLD opened nothing */
		cmd_reply_error(slot, CMD_ERR_NO_HOLD,
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
	 * (hold_done) the pair's cached denials go */
	slot->deny = slot->op == STORE_CANCEL || pc->actual < id.cost ? decide_cache(env) : NULL;
	slot->user_len = id.user_len;
	memcpy(slot->user, id.user, id.user_len);
	slot->local = NULL;
	slot->from_memory = store_local(env->store);
	struct store_request req = {
		.op = (enum store_op)slot->op,
		.policy = p,
		.prefix = cfg->prefix,
		.prefix_len = strlen(cfg->prefix),
		.user = id.user,
		.user_len = id.user_len,
		.cost = id.cost,
		.timeout_ms = decide_timeout_ms(cfg, pc),
		.hold_nonce = id.nonce,
		.actual = pc->actual,
	};
	store_submit(env->store, &req, hold_done, slot);
}

/* ACQUIRE on a concurrency policy's action; RELEASE and RENEW on the
 * lease whose id names the action (pc->action, set by the parse). */
static void lease_command(struct config *cfg, const struct cmd_env *env,
			  const struct cmd_request *pc, struct cmd_slot *slot)
{
	const struct policy *p = config_find_policy(cfg, pc->action, pc->action_len);
	if (!p) {
		if (pc->verb == CMD_ACQUIRE)
			cmd_reply_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
		else
			cmd_reply_error(slot, CMD_ERR_NO_LEASE,
					"not a lease id of a policy configured now");
		return;
	}
	if (p->algo != POLICY_CONCURRENCY) {
		cmd_reply_error(slot, CMD_ERR_POLICY_KIND,
				"a rate policy: ALLOW it (ACQUIRE takes concurrency policies)");
		return;
	}
	leases_execute(cfg, env, pc, p, slot);
}

void cmd_result_release(struct cmd_result *res)
{
	free(res->item);
	res->item = NULL;
}

static void live_done(void *arg, const char *why)
{
	struct cmd_slot *slot = arg;
	if (why) {
		char msg[CMD_MSG_MAX];
		snprintf(msg, sizeof(msg), "redis: %s", why);
		cmd_reply_error(slot, CMD_ERR_STORE_UNAVAILABLE, msg);
		return;
	}
	reply(slot, CMD_REPLY_OK);
}

/* TOP <action> <index> (admin listeners): the index-th of the action's
 * heavy hitters as read now, or the end with how many there are and the
 * action's totals. A policy that never decided here has none. */
static void top_command(const struct config *cfg, const struct cmd_request *pc,
			struct cmd_slot *slot)
{
	if (!config_find_policy(cfg, pc->action, pc->action_len)) {
		cmd_reply_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
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
		reply(slot, CMD_REPLY_TOP);
		return;
	}
	const struct top_row *r = &rows[pc->index];
	struct cmd_item *item = calloc(1, sizeof(*item) + r->len);
	if (!item) {
		cmd_reply_error(slot, CMD_ERR_STORE_UNAVAILABLE, "out of memory");
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
	reply(slot, CMD_REPLY_TOP);
}

/* OVERRIDE, UNOVERRIDE, OVERRIDES (admin listeners). */
static void live_command(struct config *cfg, const struct cmd_env *env,
			 const struct cmd_request *pc, struct cmd_slot *slot)
{
	if (!env->live) {
		cmd_reply_error(slot, CMD_ERR_STORE_UNAVAILABLE, "out of memory at start");
		return;
	}
	if (pc->verb == CMD_OVERRIDES) {
		struct override_live_item it;
		slot->res.item = NULL;
		if (override_live_nth(env->live, (size_t)pc->index, &it) < 0) {
			slot->res.limit = (int64_t)override_live_count(env->live);
			reply(slot, CMD_REPLY_ITEM);
			return;
		}
		struct cmd_item *item = malloc(sizeof(*item) + it.ulen + it.alen + it.spec_len);
		if (!item) {
			cmd_reply_error(slot, CMD_ERR_STORE_UNAVAILABLE, "out of memory");
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
		reply(slot, CMD_REPLY_ITEM);
		return;
	}
	if (!policy_name_valid(pc->action, pc->action_len)) {
		cmd_reply_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
		return;
	}
	if (!override_live_user_valid(pc->user, pc->user_len)) {
		cmd_reply_error(slot, CMD_ERR_BAD_USER,
				"an override's user has no blank, CR, LF or NUL byte");
		return;
	}
	if (pc->verb == CMD_OVERRIDE) {
		const struct policy *p = config_find_policy(cfg, pc->action, pc->action_len);
		if (pc->spec_len > OVERRIDE_LIVE_SPEC_MAX) {
			cmd_reply_error(slot, CMD_ERR_SYNTAX, "an override is at most 256 bytes");
			return;
		}
		if (!p) {
			cmd_reply_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
			return;
		}
		enum override_kind kind;
		struct policy *built;
		char err[CMD_MSG_MAX];
		int bad = override_live_spec(p, pc->spec, pc->spec_len, &kind, &built, err,
					     sizeof(err));
		if (bad) {
			cmd_reply_error(slot, CMD_ERR_SYNTAX, err);
			return;
		}
		free(built);
	}
	/* answered once Redis has it (every daemon then applies it) */
	override_live_put(env->live, pc->action, pc->action_len, pc->user, pc->user_len,
			  pc->verb == CMD_OVERRIDE ? pc->spec : NULL, pc->spec_len, pc->ttl_ms,
			  live_done, slot);
}

_Static_assert(CMD_WHO_MAX == CONFIG_IDENTITY_NAME_MAX, "an identity's name fits a caller");

/* The right a verb needs; 0: none (PING, QUIT, AUTH are for anyone). */
static unsigned verb_right(enum cmd_verb v)
{
	switch (v) {
	case CMD_ALLOW:
	case CMD_PEEK:
	case CMD_MALLOW:
	case CMD_MPEEK:
	case CMD_THROTTLE:
	case CMD_ACQUIRE:
	case CMD_RELEASE:
	case CMD_RENEW:
	case CMD_CHARGE:
	case CMD_HOLD:
	case CMD_SETTLE:
	case CMD_CANCEL:
		return CONFIG_RIGHT_DECIDE;
	case CMD_RESET:
	case CMD_OVERRIDE:
	case CMD_UNOVERRIDE:
	case CMD_OVERRIDES:
	case CMD_TOP:
		return CONFIG_RIGHT_ADMIN;
	case CMD_PING:
	case CMD_QUIT:
	case CMD_AUTH:
		break;
	}
	return 0;
}

/* A token no identity has: counted; the connection closes at the
 * CMD_AUTH_FAILURES_MAXth in a row (guessing takes connections). */
static void auth_failed(struct cmd_caller *caller, struct cmd_slot *slot, const char *msg)
{
	stats.auth_failures[STATS_AUTH_BAD_TOKEN]++;
	if (caller && ++caller->failures >= CMD_AUTH_FAILURES_MAX)
		slot->res.close_after = 1;
	cmd_reply_error(slot, CMD_ERR_AUTH_FAILED, msg);
}

/* May id use action (NULL: none named) with right? */
static int may(const struct config_identity *id, unsigned right, const char *action, size_t len)
{
	return config_identity_may(id, (enum config_right)right, action, len);
}

/*
 * listen[].auth: who sends pc, and may it? 0: go on; -1: answered (AUTH's
 * OK, or an error that charges nothing). A listener without auth takes
 * every request as before, and ignores tokens (forward-auth's requests
 * carry their end users' Authorization headers).
 */
static int authorize(struct config *cfg, const struct cmd_request *pc, struct cmd_caller *caller,
		     struct cmd_slot *slot)
{
	if (pc->verb == CMD_AUTH) {
		if (cfg->nidentities == 0) {
			cmd_reply_error(slot, CMD_ERR_AUTH_FAILED, CMD_AUTH_NO_IDENTITIES);
			return -1;
		}
		const struct config_identity *id =
			config_identity_by_token(cfg, pc->token, pc->token_len);
		if (!id) {
			auth_failed(caller, slot, "invalid token");
			return -1;
		}
		if (caller) {
			memcpy(caller->who, id->name, strlen(id->name) + 1);
			caller->failures = 0;
		}
		reply(slot, CMD_REPLY_OK);
		return -1;
	}
	unsigned right = verb_right(pc->verb);
	if (!caller || !caller->auth || right == 0)
		return 0;
	const struct config_identity *id = NULL;
	if (pc->token) {
		id = config_identity_by_token(cfg, pc->token, pc->token_len);
		if (!id) {
			auth_failed(caller, slot, "invalid token");
			return -1;
		}
		caller->failures = 0; /* "in a row": a good one ends the row */
	} else if (caller->who[0]) {
		id = config_identity_by_name(cfg, caller->who);
	} else if (caller->cert_cn[0]) {
		id = config_identity_by_cert(cfg, caller->cert_cn);
	}
	if (!id) {
		/* how this client proves an identity, in its own protocol's words */
		stats.auth_failures[STATS_AUTH_NOAUTH]++;
		cmd_reply_error(slot, CMD_ERR_NOAUTH,
				slot->front == STATS_FRONT_HTTP
					? "authentication required: an Authorization: Bearer <token> "
					  "header on each request (or a client certificate of an "
					  "identity)"
					: "authentication required: AUTH <token> (or a token, or a "
					  "client certificate of an identity) first");
		return -1;
	}
	/* the action refused, for the message: the operator must see which
	 * policy the identity's list lacks, not guess it */
	const char *act;
	size_t act_len = 0;
	int ok;
	if (pc->verb == CMD_MALLOW || pc->verb == CMD_MPEEK) {
		const struct cmd_pair *pairs = cmd_pairs(pc);
		ok = pc->npairs > 0;
		act = NULL;
		for (int i = 0; i < pc->npairs && ok; i++) {
			act = pairs[i].action;
			act_len = pairs[i].action_len;
			ok = may(id, right, act, act_len);
		}
	} else if (pc->policy) {
		act = pc->policy->name;
		act_len = pc->policy->name_len;
		ok = may(id, right, act, act_len);
	} else if (pc->verb == CMD_THROTTLE) {
		act = cfg->throttle.namespace;
		act_len = strlen(act);
		ok = may(id, right, act, act_len);
	} else if (pc->verb == CMD_OVERRIDES) {
		act = NULL;
		ok = may(id, right, NULL, 0);
	} else {
		act = pc->action;
		act_len = pc->action_len;
		ok = may(id, right, act, act_len);
	}
	if (!ok) {
		char msg[CMD_MSG_MAX];
		const char *verb = right == CONFIG_RIGHT_ADMIN ? "administer" : "decide";
		stats.auth_failures[STATS_AUTH_FORBIDDEN]++;
		if (!(id->rights & right))
			snprintf(msg, sizeof(msg), "identity %s may not %s (its rights: lack %s)",
				 id->name, verb, right == CONFIG_RIGHT_ADMIN ? "admin" : "decide");
		else if (!act)
			snprintf(msg, sizeof(msg), "identity %s may not %s", id->name, verb);
		else
			snprintf(msg, sizeof(msg),
				 "identity %s may not %s%s %.*s (its policies: list lacks it)",
				 id->name, verb, right == CONFIG_RIGHT_ADMIN ? "" : " on",
				 (int)(act_len > 64 ? 64 : act_len), act);
		cmd_reply_error(slot, CMD_ERR_FORBIDDEN, msg);
		return -1;
	}
	stats_count_identity(id->name);
	return 0;
}

void cmd_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		 struct cmd_caller *caller, struct cmd_slot *slot)
{
	int admin = caller ? caller->admin : 0;
	slot->parsed_us = clock_mono_us();
	/* when the store was asked: now, unless submit or a block follower
	 * asks later (a trace's decider span starts there) */
	slot->sent_us = slot->parsed_us;
	if (trace_on()) { /* its decision traced or not (trace.h) */
		trace_begin(&slot->trace, pc->traceparent, pc->traceparent_len);
		slot->received_us = pc->received_us;
		slot->batch_size = 0;
	} else {
		slot->trace.on = 0;
	}
	slot->cfg = NULL;
	slot->multi = NULL;
	slot->overridden = 0;
	/* whose answer this is, for the heavy hitters (top.h): set where a
	 * request names its user; none (not counted) on the other paths */
	slot->user_len = 0;
	slot->op = STORE_ALLOW;
	if (pc->verb == CMD_ACQUIRE) {
		slot->user_len = pc->user_len;
		memcpy(slot->user, pc->user, pc->user_len);
	}
	slot->res.multi = 0;
	slot->res.pair = 0;
	slot->res.pairs = pc->figures;
	enum store_op op;
	if ((unsigned)pc->verb < CMD_VERB_N)
		stats.requests[pc->verb]++;
	if (authorize(cfg, pc, caller, slot) < 0)
		return;
	switch (pc->verb) {
	case CMD_PING:
		reply(slot, CMD_REPLY_PONG);
		return;
	case CMD_QUIT:
		reply(slot, CMD_REPLY_BYE);
		return;
	case CMD_AUTH: /* authorize answered it */
		return;
	case CMD_RESET:
		if (!admin) {
			cmd_reply_error(slot, CMD_ERR_FORBIDDEN,
					"RESET needs a listener with admin: true");
			return;
		}
		op = STORE_RESET;
		break;
	case CMD_ALLOW:
		op = STORE_ALLOW;
		break;
	case CMD_PEEK:
		op = STORE_PEEK;
		break;
	case CMD_CHARGE:
		op = STORE_CHARGE;
		break;
	case CMD_HOLD:
		op = STORE_HOLD;
		break;
	case CMD_SETTLE:
	case CMD_CANCEL:
		hold_command(cfg, env, pc, slot);
		return;
	case CMD_THROTTLE:
		throttle(cfg, env, pc, slot);
		return;
	case CMD_ACQUIRE:
	case CMD_RELEASE:
	case CMD_RENEW:
		lease_command(cfg, env, pc, slot);
		return;
	case CMD_MALLOW:
	case CMD_MPEEK:
		multi_execute(cfg, env, pc, slot);
		return;
	case CMD_OVERRIDE:
	case CMD_UNOVERRIDE:
	case CMD_OVERRIDES:
		if (!admin) {
			cmd_reply_error(slot, CMD_ERR_FORBIDDEN,
					"overrides need a listener with admin: true");
			return;
		}
		live_command(cfg, env, pc, slot);
		return;
	case CMD_TOP:
		if (!admin) {
			cmd_reply_error(slot, CMD_ERR_FORBIDDEN,
					"TOP needs a listener with admin: true");
			return;
		}
		top_command(cfg, pc, slot);
		return;
	default:
		cmd_reply_error(slot, CMD_ERR_UNKNOWN_COMMAND, "unknown command");
		return;
	}
	const struct policy *p =
		pc->policy ? pc->policy : config_find_policy(cfg, pc->action, pc->action_len);
	if (!p) {
		cmd_reply_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
		return;
	}
	if (p->algo == POLICY_CONCURRENCY) {
		if (op == STORE_RESET) {
			leases_execute(cfg, env, pc, p, slot); /* every lease of the user */
			return;
		}
		cmd_reply_error(slot, CMD_ERR_POLICY_KIND,
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

static void submit(struct config *cfg, const struct cmd_env *env, enum store_op op,
		   const struct policy *p, const struct cmd_request *pc, struct cmd_slot *slot)
{
	slot->policy = p;
	slot->op = op;
	slot->deny = NULL;
	slot->sent_us = slot->parsed_us; /* submit runs inside cmd_execute */
	slot->from_memory = store_local(env->store);
	shadow_setup(slot, cfg, op, p);
	/* Redis failing, the local fallback decides on what Redis would have */
	slot->local = NULL;
	if (env->local && op != STORE_RESET &&
	    config_on_error(cfg, slot->own_policy ? NULL : p) == POLICY_ON_ERROR_LOCAL) {
		slot->local = env->local;
		slot->cost = pc->cost > 0 ? pc->cost : 1;
	}
	/* A hot pair's block (blocks.h): answered from the units Redis
	 * counted for this daemon, or Redis is asked for some with this
	 * request. Only on the policy's own limits (an override's are
	 * another's), and only while RESETs reach us (they revoke blocks).
	 * Before the deny cache: units counted for us are ours to answer even
	 * once Redis denies others. */
	slot->blocks = NULL;
	slot->block_next = NULL;
	int64_t block_want = 0;
	if (op == STORE_RESET && env->blocks)
		blocks_reset_pair(env->blocks, p->name, p->name_len, pc->user, pc->user_len);
	if (op == STORE_ALLOW && p->blocks.max > 0 && env->blocks && !slot->own_policy &&
	    !slot->overridden && !store_local(env->store) && store_resets_followed(env->store)) {
		slot->cost = pc->cost > 0 ? pc->cost : 1;
		slot->delay_extra = 0; /* (a follower's store_done reads them) */
		slot->delay_window = 0;
		/* one that may wait, or has a deadline shorter than
		 * redis.timeout, is answered from a block but neither asks
		 * for one nor waits behind an ask */
		int may_ask = !(pc->wait_given && pc->wait_ms > 0) && p->delay.max_ms == 0 &&
			      decide_timeout_ms(cfg, pc) == cfg->redis.timeout_ms;
		if (block_route(slot, env, cfg, may_ask, &block_want))
			return;
	}
	/* The cache answers and learns only while every daemon's RESETs reach
	 * us (decide_cache), and only on the action's own limits (decide_cacheable). */
	struct denycache *deny;
	/* a request that may wait decides with another capacity, a CHARGE
	 * is never denied, and a HOLD opens a hold: no cache */
	int may_wait = pc->wait_given && pc->wait_ms > 0;
	if (op == STORE_HOLD) {
		if (!env->leases) {
			cmd_reply_error(slot, CMD_ERR_STORE_UNAVAILABLE, "out of memory");
			return;
		}
		slot->hold_nonce = leases_nonce(env->leases);
		slot->cost = pc->cost;
	}
	/* (an ask for a block goes to Redis: requests wait for its answer) */
	if (decide_cacheable(p, slot->own_policy || slot->overridden || may_wait ||
					op == STORE_CHARGE || op == STORE_HOLD || slot->blocks) &&
	    (deny = decide_cache(env))) {
		struct denycache_hit hit;
		slot->deny = deny;
		if (op == STORE_RESET)
			denycache_reset_pair(deny, p->name, p->name_len, pc->user, pc->user_len);
		else if (denycache_lookup(deny, p->name, p->name_len, pc->user, pc->user_len,
					  pc->cost, slot->sent_us, &hit)) {
			decide_answer(slot, cfg, p, STATS_FROM_CACHE, 0, hit.limit, hit.remaining,
				      hit.retry_after_ms, hit.reset_ms);
			return;
		}
		slot->deny_epoch = denycache_epoch(deny);
		slot->cost = pc->cost;
	}
	/* a delay (or the caller's deadline, if shorter), while below
	 * max_delayed: a window's is the store's (it charges the request as
	 * running when its window has room); a funnel's asks with the capacity
	 * raised by what drains in delay.max */
	slot->delay_extra = 0;
	slot->delay_window = 0;
	int64_t wait = p->delay.max_ms, window_wait = 0;
	if (pc->wait_given) /* WAIT: this request's bound, within the policy's */
		wait = wait > 0 && wait < pc->wait_ms ? wait : pc->wait_ms;
	if (pc->timeout_ms > 0 && pc->timeout_ms < wait)
		wait = pc->timeout_ms;
	if (op == STORE_ALLOW && p->algo != POLICY_FUNNEL && wait > 0 && !slot->shadow &&
	    delays_claim(env->delays, cfg->max_delayed)) {
		slot->delay_window = 1;
		slot->delays = env->delays;
		slot->deny = NULL; /* a delayed answer is no denial to cache */
		window_wait = wait;
	}
	if (op == STORE_ALLOW && p->algo == POLICY_FUNNEL && wait > 0 && !slot->own_policy &&
	    !slot->overridden && !slot->shadow && delays_claim(env->delays, cfg->max_delayed)) {
		const struct policy_limit *l = &p->limits[0];
		int64_t extra = wait * l->count / l->period_ms;
		if (extra > 0) {
			slot->delay_policy = p; /* cfg's: held with cfg */
			slot->policy_copy = *p;
			slot->policy_copy.limits[0].capacity += extra;
			p = &slot->policy_copy;
			slot->policy = p;
			slot->delay_extra = extra;
			slot->delays = env->delays;
			slot->deny = NULL; /* its denials are another capacity's */
		} else {
			delays_unclaim(env->delays);
		}
	}
	if (slot->blocks && (window_wait > 0 || slot->delay_extra > 0)) {
		/* a request that may wait asks no block */
		blocks_unask(slot->blocks, p, pc->user, pc->user_len, slot, 0, 0);
		slot->blocks = NULL;
		block_want = 0;
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
		.cost = pc->cost > 0 ? pc->cost : 1,
		.timeout_ms = decide_timeout_ms(cfg, pc),
		.wait_ms = window_wait,
		.block_want = block_want,
		.block_ttl_ms = p->blocks.ttl_ms,
		.hold_nonce = slot->hold_nonce,
		.hold_ms = p->hold_ms ? p->hold_ms : POLICY_HOLD_DEFAULT_MS,
	};
	store_submit(env->store, &req, store_done, slot);
}

/*
 * CL.THROTTLE key max_burst count period [quantity]: redis-cell's GCRA is
 * our funnel with capacity max_burst + 1 draining count per period, under
 * the configured namespace (so its keys never meet a policy's). Off unless
 * the configuration says so: the caller chooses the limit.
 */
static void throttle(struct config *cfg, const struct cmd_env *env, const struct cmd_request *pc,
		     struct cmd_slot *slot)
{
	const struct config_throttle *t = &cfg->throttle;
	char msg[CMD_MSG_MAX];
	if (!t->enabled) {
		cmd_reply_error(slot, CMD_ERR_UNKNOWN_COMMAND,
				"CL.THROTTLE is off (throttle: {enabled: true} turns it on)");
		return;
	}
	if (pc->max_burst < 0 || pc->max_burst > t->max_burst) {
		snprintf(msg, sizeof(msg), "max_burst must be from 0 to %lld (throttle.max_burst)",
			 (long long)t->max_burst);
		cmd_reply_error(slot, CMD_ERR_SYNTAX, msg);
		return;
	}
	if (pc->count < 1 || pc->count > POLICY_MAX_COUNT) {
		cmd_reply_error(slot, CMD_ERR_SYNTAX, "count must be from 1 to 1000000000");
		return;
	}
	if (pc->period_s < 1 || pc->period_s > t->max_period_ms / 1000) {
		snprintf(msg, sizeof(msg),
			 "period must be from 1 to %lld seconds (throttle.max_period)",
			 (long long)(t->max_period_ms / 1000));
		cmd_reply_error(slot, CMD_ERR_SYNTAX, msg);
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
