/*
 * cmd.c - the entry of every request, whatever protocol carried it: its
 * verb's row (cmd_table.h), the identity's rights and the admin listener
 * checked from it, then the row's handler (cmd_pair.c, cmd_hold.c,
 * cmd_admin.c, multi.c, leases.c) fills the result.
 */
#include "cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cmd_table.h"
#include "config.h"
#include "decide.h"
#include "stats.h"
#include "trace.h"

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

void cmd_result_release(struct cmd_result *res)
{
	free(res->item);
	res->item = NULL;
	/* only a STATE's reply holds one (cmd_execute starts it NULL) */
	if (res->kind == CMD_REPLY_STATE) {
		free(res->state);
		res->state = NULL;
	}
}

_Static_assert(CMD_WHO_MAX == CONFIG_IDENTITY_NAME_MAX, "an identity's name fits a caller");

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
		decide_reply(slot, CMD_REPLY_OK);
		return -1;
	}
	unsigned right = cmd_verbs[pc->verb].right;
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
		cmd_reply_error(
			slot, CMD_ERR_NOAUTH,
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
	slot->res.state = NULL;
	slot->res.pairs = pc->figures;
	if ((unsigned)pc->verb >= CMD_VERB_N) {
		cmd_reply_error(slot, CMD_ERR_UNKNOWN_COMMAND, "unknown command");
		return;
	}
	const struct cmd_verb_row *row = &cmd_verbs[pc->verb];
	stats.requests[pc->verb]++;
	if (authorize(cfg, pc, caller, slot) < 0)
		return;
	if (row->admin && !admin) {
		char msg[CMD_MSG_MAX];
		if (row->admin_what)
			snprintf(msg, sizeof(msg), "%s a listener with admin: true",
				 row->admin_what);
		else
			snprintf(msg, sizeof(msg), "%s needs a listener with admin: true",
				 row->name);
		cmd_reply_error(slot, CMD_ERR_FORBIDDEN, msg);
		return;
	}
	row->run(cfg, env, pc, slot);
}
