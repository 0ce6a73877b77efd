/* decide.c - the end of a decision, shared by the verbs' handlers (cmd_pair.c, cmd_hold.c,
 * cmd_admin.c, leases.c) and MALLOW/MPEEK (multi.c). */
#include "decide.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "cmd_slot.h"
#include "config.h"
#include "declog.h"
#include "denycache.h"
#include "local.h"
#include "log.h"
#include "override.h"
#include "override_live.h"
#include "store.h"
#include "trace.h"

/* Suggested wait in a fail-closed DENIED reply: long enough not to hammer a
 * sick store, short enough to recover quickly. */
#define FALLBACK_RETRY_MS 1000

void decide_complete(struct cmd_slot *slot)
{
	struct config *cfg = slot->cfg;
	slot->cfg = NULL;
	/* only cmd_execute's requests get a decision: parsed_us is theirs */
	if (slot->res.kind == CMD_REPLY_DECISION || slot->res.kind == CMD_REPLY_LEASE)
		stats_observe_decision((enum stats_front)slot->front,
				       clock_mono_us() - slot->parsed_us);
	slot->complete(slot);
	if (cfg)
		config_unref(cfg);
}

void decide_reply(struct cmd_slot *slot, enum cmd_reply kind)
{
	slot->res.kind = kind;
	decide_complete(slot);
}

void decide_error(struct cmd_slot *slot, enum cmd_error e, const char *msg)
{
	stats_count_error(e);
	slot->res.kind = CMD_REPLY_ERROR;
	slot->res.error = e;
	size_t n = strlen(msg);
	if (n >= sizeof(slot->res.msg))
		n = sizeof(slot->res.msg) - 1;
	memcpy(slot->res.msg, msg, n);
	slot->res.msg[n] = '\0';
	decide_complete(slot);
}

const struct override *decide_find_override(const struct cmd_env *env, const struct policy *p,
					    const char *user, size_t ulen)
{
	/* one set at run time wins over the file's */
	const struct override *o = override_live_find(env->live, p, user, ulen);
	if (!o && p->overrides)
		o = override_find(p->overrides, user, ulen);
	return o;
}

/*
 * Shadow mode: a denial is counted (per action) and logged, at most one line
 * a second with how many were not, and answered ALLOWED. The user is shown
 * printable and cut short: it comes from the client.
 */
void decide_shadow_denied(struct cmd_slot *slot, const struct policy *p)
{
	static uint64_t last_us;
	static unsigned long long quiet;
	const char *user = slot->user;
	size_t user_len = slot->user_len;
	stats_count_shadow(slot->cfg, p); /* cfg is NULL for a cached denial: found by name */
	uint64_t now = clock_mono_us();
	if (last_us && now - last_us < 1000000) {
		quiet++;
		return;
	}
	char who[65];
	size_t n = 0;
	for (size_t i = 0; i < user_len && n < sizeof(who) - 1; i++)
		who[n++] = user[i] > 0x20 && user[i] < 0x7f ? user[i] : '?';
	who[n] = '\0';
	if (quiet)
		log_info("shadow: %s would be denied for %s%s (and %llu other shadow "
			 "denials in the last second or more)",
			 p->name, who, user_len > n ? "..." : "", quiet);
	else
		log_info("shadow: %s would be denied for %s%s", p->name, who,
			 user_len > n ? "..." : "");
	last_us = now;
	quiet = 0;
}

void decide_answer(struct cmd_slot *slot, const struct config *cfg, const struct policy *p,
		   enum stats_from from, int allowed, int64_t limit, int64_t remaining,
		   int64_t retry_after_ms, int64_t reset_ms)
{
	decide_fill(slot, cfg, p, from, allowed, limit, remaining, retry_after_ms, reset_ms);
	decide_complete(slot);
}

void decide_fill(struct cmd_slot *slot, const struct config *cfg, const struct policy *p,
		 enum stats_from from, int allowed, int64_t limit, int64_t remaining,
		 int64_t retry_after_ms, int64_t reset_ms)
{
	stats_count_decision(cfg, p, from, allowed, slot->user, slot->user_len,
			     slot->op == STORE_PEEK, slot->parsed_us);
	if (slot->trace.on) {
		struct trace_times tt = {
			.received_us = slot->received_us,
			.parsed_us = slot->parsed_us,
			.asked_us = from == STATS_FROM_STORE || from == STATS_FROM_MEMORY
					    ? slot->sent_us
					    : 0,
			.batch_sent_us = slot->batch_sent_us,
			.batch_read_us = slot->batch_read_us,
			.batch_size = from == STATS_FROM_STORE ? slot->batch_size : 0,
			.end_us = clock_mono_us(),
		};
		trace_decision(&slot->trace, p->name, p->name_len, allowed, stats_from_name(from),
			       &tt);
	}
	/* the decision log: ALLOWs of one pair (a replay decides them again) */
	if (declog_on() && slot->op == STORE_ALLOW && !slot->res.multi && !slot->own_policy &&
	    p->algo != POLICY_CONCURRENCY)
		declog_decision((uint64_t)clock_wall_ms(), p->name, p->name_len, slot->user,
				slot->user_len, slot->cost > 0 ? slot->cost : 1, allowed);
	struct cmd_result *r = &slot->res;
	const struct policy *sp = slot->policy;
	if (!allowed && slot->shadow) {
		decide_shadow_denied(slot, sp);
		allowed = 1;
		retry_after_ms = 0;
	}
	if (slot->names_policy) {
		r->window_ms = policy_window_ms(sp, limit, clock_wall_ms());
		memcpy(r->action, sp->name, sp->name_len);
		r->action[sp->name_len] = '\0';
	}
	/* a lease acquired or renewed carries its id (leases.c) */
	r->kind = r->item ? CMD_REPLY_LEASE : CMD_REPLY_DECISION;
	r->allowed = allowed;
	r->limit = limit;
	r->remaining = remaining;
	r->retry_after_ms = retry_after_ms;
	r->reset_ms = reset_ms;
}

void decide_override(struct cmd_slot *slot, const struct config *cfg, const struct policy *p,
		     int allowed)
{
	if (allowed)
		decide_answer(slot, cfg, p, STATS_FROM_OVERRIDE, 1, -1, -1, 0, -1);
	else
		decide_answer(slot, cfg, p, STATS_FROM_OVERRIDE, 0, p->limits[0].capacity, 0, -1,
			      -1);
}

int decide_eager(const struct config *cfg, const struct policy *p)
{
	const struct config_redis *r = config_redis_of(cfg, p);
	return r && r->remote;
}

int64_t decide_timeout_ms(const struct config *cfg, const struct policy *p,
			  const struct cmd_request *req)
{
	/* each store's own timeout: stores.NAME.timeout applies on reload */
	const struct config_redis *r = config_redis_of(cfg, p);
	int64_t t = r ? r->timeout_ms : cfg->redis.timeout_ms;
	return req->timeout_ms > 0 && req->timeout_ms < t ? req->timeout_ms : t;
}

void decide_no_store(struct cmd_slot *slot, const struct policy *p)
{
	char msg[128];
	snprintf(msg, sizeof(msg),
		 "store %s is not running (stores: added by a reload take a "
		 "restart)",
		 p->store);
	decide_error(slot, CMD_ERR_STORE_UNAVAILABLE, msg);
}

enum stats_from decide_store_source(const struct store_result *res)
{
	return res->memory ? STATS_FROM_MEMORY : STATS_FROM_STORE;
}

struct denycache *decide_cache(const struct cmd_env *env, const struct policy *p)
{
	struct denycache *deny = cmd_env_deny(env, p);
	struct store *store = cmd_env_store(env, p);
	if (!deny || !store || !store_resets_followed(store))
		return NULL;
	denycache_sync(deny, store_generation(store));
	return deny;
}

int decide_cacheable(const struct policy *p, int other)
{
	/* A throttle's limit comes with each request, so a denial under one
	 * request's limit says nothing of the next one's; an override's limits
	 * may end (a run-time one expires) while its denial would still be
	 * cached; a ban must see every denial to count it; and a funnel with
	 * a delay is asked with another capacity than a look's. */
	return !other && p->ban.after == 0 && p->delay.max_ms == 0;
}

void decide_cache_allowed(struct denycache *deny, enum store_op op, const struct policy *p,
			  const char *user, size_t ulen)
{
	if (deny && (op == STORE_ALLOW || op == STORE_CHARGE || op == STORE_HOLD))
		denycache_forget(deny, p->name, p->name_len, user, ulen);
}

void decide_why(const struct store_result *res, char *buf, size_t len)
{
	snprintf(buf, len, "store %s: %s", store_status_name(res->status),
		 res->detail ? res->detail : "");
}

int decide_local(struct cmd_slot *slot, struct local *local, struct store_request *req,
		 const char *why, struct store_result *lr)
{
	req->prefix = slot->cfg->prefix;
	req->prefix_len = strlen(slot->cfg->prefix);
	local_decide(local, req, slot->cfg->local_share, why, lr);
	return lr->status == STORE_OK ? 0 : -1;
}

void decide_store_failed(struct cmd_slot *slot, const struct store_result *res,
			 enum policy_on_error mode)
{
	const struct policy *p = slot->policy;
	const struct config *counted = slot->own_policy ? NULL : slot->cfg;
	slot->res.refused = res->status == STORE_OVERLOAD;
	stats.store_errors[res->status]++;
	if (res->status == STORE_FAILED)
		stats.store_failures[res->error < STORE_ERROR_N ? res->error : STORE_ERROR_OTHER]++;
	char msg[128];
	decide_why(res, msg, sizeof(msg));
	/* the local fallback opens no holds (a SETTLE would reach Redis) */
	if (mode == POLICY_ON_ERROR_LOCAL && slot->local && slot->op != STORE_RESET &&
	    slot->op != STORE_HOLD && slot->cfg) {
		struct store_request req = {
			.op = (enum store_op)slot->op,
			.policy = p,
			.user = slot->user,
			.user_len = slot->user_len,
			.cost = slot->cost > 0 ? slot->cost : 1,
		};
		struct store_result lr;
		if (decide_local(slot, slot->local, &req, msg, &lr) == 0) {
			decide_answer(slot, counted, p, STATS_FROM_LOCAL, lr.allowed, lr.limit,
				      lr.remaining, lr.retry_after_ms, lr.reset_ms);
			return;
		}
		mode = POLICY_ON_ERROR_ERROR; /* out of memory: say so */
	}
	/* a RESET, or a CHARGE that was not counted: never answered as if done */
	if (slot->op == STORE_RESET || slot->op == STORE_CHARGE || slot->op == STORE_SETTLE ||
	    slot->op == STORE_CANCEL || mode == POLICY_ON_ERROR_ERROR ||
	    mode == POLICY_ON_ERROR_LOCAL) {
		decide_error(slot, CMD_ERR_STORE_UNAVAILABLE, msg);
		return;
	}
	int64_t limit = p->limits[0].capacity;
	if (mode == POLICY_ON_ERROR_ALLOW)
		decide_answer(slot, counted, p, STATS_FROM_FALLBACK, 1, limit, -1, 0, -1);
	else
		decide_answer(slot, counted, p, STATS_FROM_FALLBACK, 0, limit, -1,
			      FALLBACK_RETRY_MS, -1);
}

const struct policy *decide_policy(const struct config *cfg, const struct cmd_request *pc,
				   struct cmd_slot *slot)
{
	const struct policy *p =
		pc->policy ? pc->policy : config_find_policy(cfg, pc->action, pc->action_len);
	if (!p)
		decide_error(slot, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
	return p;
}
