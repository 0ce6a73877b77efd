/*
 * proto.c - what every protocol shares: verb names and error codes
 * (proto/protocol.md), and the small pure helpers their parsers and
 * formatters use alike.
 */
#include "proto.h"
#include "trace.h"

#include <stdio.h>
#include <string.h>

#include "cmd_table.h"
#include "decimal.h"
#include "keys.h"
#include "lease.h"
#include "policy.h"

static int lease_fail(struct proto_error *err, enum cmd_error code, const char *msg)
{
	err->code = code;
	err->msg = msg;
	return -1;
}


static const char *const error_codes[CMD_ERR_N] = {
	[CMD_ERR_SYNTAX] = "syntax",
	[CMD_ERR_UNKNOWN_COMMAND] = "unknown-command",
	[CMD_ERR_UNKNOWN_ACTION] = "unknown-action",
	[CMD_ERR_BAD_COST] = "bad-cost",
	[CMD_ERR_BAD_USER] = "bad-user",
	[CMD_ERR_LINE_TOO_LONG] = "line-too-long",
	[CMD_ERR_FORBIDDEN] = "forbidden",
	[CMD_ERR_TOO_MANY_CLIENTS] = "too-many-clients",
	[CMD_ERR_STORE_UNAVAILABLE] = "store-unavailable",
	[CMD_ERR_REQUEST_TIMEOUT] = "request-timeout",
	[CMD_ERR_TLS_REQUIRED] = "tls-required",
	[CMD_ERR_NOAUTH] = "noauth",
	[CMD_ERR_AUTH_FAILED] = "auth-failed",
	[CMD_ERR_POLICY_KIND] = "policy-kind",
	[CMD_ERR_NO_LEASE] = "no-lease",
	[CMD_ERR_NO_HOLD] = "no-hold",
	[CMD_ERR_OUT_OF_MEMORY] = "out-of-memory",
};

const char *proto_state_override_name(enum cmd_state_override o)
{
	static const char *const names[] = {
		[CMD_STATE_NONE] = "none",
		[CMD_STATE_LIMITS] = "limits",
		[CMD_STATE_UNLIMITED] = "unlimited",
		[CMD_STATE_BLOCKED] = "blocked",
	};
	return (unsigned)o < sizeof(names) / sizeof(names[0]) ? names[o] : "none";
}

const char *proto_verb_name(enum cmd_verb v)
{
	return (unsigned)v < CMD_VERB_N ? cmd_verbs[v].label : "other";
}

const char *proto_error_code(enum cmd_error e)
{
	return (unsigned)e < CMD_ERR_N ? error_codes[e] : "other";
}

/* An error the connection closes after: proto's words for it in buf. */
static size_t closing_error(const struct proto *proto, char *buf, enum cmd_error code,
			    const char *msg)
{
	struct cmd_result res;
	memset(&res, 0, sizeof(res));
	res.kind = CMD_REPLY_ERROR;
	res.error = code;
	res.close_after = 1;
	snprintf(res.msg, sizeof(res.msg), "%s", msg);
	return proto->format(buf, &res, NULL);
}

size_t proto_refusal(const struct proto *proto, char *buf)
{
	return closing_error(proto, buf, CMD_ERR_TOO_MANY_CLIENTS, "max_clients reached");
}

size_t proto_tls_required(const struct proto *proto, char *buf)
{
	return closing_error(proto, buf, CMD_ERR_TLS_REQUIRED,
			     "this listener speaks TLS: connect with TLS");
}

size_t proto_window(const struct proto *proto, size_t max_line)
{
	return max_line + 2 > proto->window_min ? max_line + 2 : proto->window_min;
}

int proto_word_is(const char *tok, size_t len, const char *word)
{
	size_t wlen = strlen(word);
	if (len != wlen)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = tok[i];
		if (c >= 'a' && c <= 'z')
			c = (char)(c - 'a' + 'A');
		if (c != word[i])
			return 0;
	}
	return 1;
}

int proto_parse_cost(const char *s, size_t len, int64_t *out)
{
	int64_t v;
	if (decimal_parse(s, len, CMD_COST_MAX, &v) < 0 || v < 1)
		return -1;
	*out = v;
	return 0;
}

size_t proto_put_int(char *p, int64_t v)
{
	if (v < 0) {
		*p = '-';
		return 1 + decimal_put(p + 1, (uint64_t)0 - (uint64_t)v);
	}
	return decimal_put(p, (uint64_t)v);
}

int proto_parse_pairs(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		      struct proto_error *err)
{
	int nargs = n - 1;
	err->code = CMD_ERR_SYNTAX;
	if (nargs < 2) {
		err->msg = req->verb == CMD_MALLOW
				   ? "usage: MALLOW <user> <action> [<user> <action>]... [<cost>]"
				   : "usage: MPEEK <user> <action> [<user> <action>]... [<cost>]";
		return -1;
	}
	if (nargs > 2 * CMD_PAIRS_MAX + 1) {
		err->msg = "at most 8 pairs";
		return -1;
	}
	if (nargs % 2 == 1 && proto_parse_cost(arg[n - 1], alen[n - 1], &req->cost) < 0) {
		err->code = CMD_ERR_BAD_COST;
		err->msg = "cost must be an integer from 1 to 2147483647";
		return -1;
	}
	req->npairs = nargs / 2;
	for (int i = 0; i < req->npairs; i++) {
		const int u = 1 + 2 * i;
		err->code = CMD_ERR_BAD_USER;
		if (alen[u] == 0) {
			err->msg = "user is empty";
			return -1;
		}
		if (alen[u] > KEYS_USER_MAX) {
			err->msg = "user is longer than 512 bytes";
			return -1;
		}
		req->pairs[i].user = arg[u];
		req->pairs[i].user_len = alen[u];
		req->pairs[i].action = arg[u + 1];
		req->pairs[i].action_len = alen[u + 1];
	}
	return 0;
}

int proto_parse_ttl(const char *s, size_t len, int64_t *ms)
{
	/* a duration as the configuration writes one, 1 s to 366 days */
	if (policy_parse_duration(s, len, ms, NULL, 0) < 0 || *ms < 1000 ||
	    *ms > 366LL * 24 * 3600 * 1000)
		return -1;
	return 0;
}

static int admin_fail(struct proto_error *err, enum cmd_error code, const char *msg)
{
	err->code = code;
	err->msg = msg;
	return -1;
}

int proto_parse_wait(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		     struct proto_error *err)
{
	if (n < 5 || !proto_word_is(arg[n - 2], alen[n - 2], "WAIT"))
		return 0;
	int64_t ms;
	if (decimal_parse(arg[n - 1], alen[n - 1], POLICY_DELAY_MAX_MS, &ms) < 0)
		return lease_fail(err, CMD_ERR_SYNTAX, "WAIT takes milliseconds, 0 to 60000");
	req->wait_given = 1;
	req->wait_ms = ms;
	return 1;
}

int proto_parse_trace(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		      struct proto_error *err)
{
	if (n < 5 || !proto_word_is(arg[n - 2], alen[n - 2], "TRACE"))
		return 0;
	struct cmd_trace t;
	if (trace_parse_parent(arg[n - 1], alen[n - 1], &t) < 0)
		return lease_fail(err, CMD_ERR_SYNTAX,
				  "TRACE takes a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>");
	req->traceparent = arg[n - 1];
	req->traceparent_len = alen[n - 1];
	return 1;
}

int proto_parse_hold(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		     struct proto_error *err)
{
	int settle = proto_word_is(arg[0], alen[0], "SETTLE");
	if (!settle && !proto_word_is(arg[0], alen[0], "CANCEL"))
		return 1;
	req->verb = settle ? CMD_SETTLE : CMD_CANCEL;
	if (n != (settle ? 3 : 2))
		return lease_fail(err, CMD_ERR_SYNTAX,
				  settle ? "usage: SETTLE <hold-id> <actual>"
					 : "usage: CANCEL <hold-id>");
	if (settle && decimal_parse(arg[2], alen[2], CMD_COST_MAX, &req->actual) < 0)
		return lease_fail(err, CMD_ERR_BAD_COST,
				  "the actual cost is an integer from 0 to 2147483647");
	size_t a = lease_id_action(arg[1], alen[1]);
	if (a == 0 || alen[1] >= LEASE_ID_MAX)
		return lease_fail(
			err, CMD_ERR_NO_HOLD,
			"not a hold id (HOLD's answer: <action>:<user>:<nonce>:<estimate>)");
	req->lease_id = arg[1];
	req->lease_id_len = alen[1];
	req->action = arg[1];
	req->action_len = a;
	return 0;
}

int proto_parse_lease(const char *const *arg, const size_t *alen, int n, struct cmd_request *req,
		      struct proto_error *err)
{
	int release = proto_word_is(arg[0], alen[0], "RELEASE");
	if (!release && !proto_word_is(arg[0], alen[0], "RENEW"))
		return 1;
	req->verb = release ? CMD_RELEASE : CMD_RENEW;
	if (n != 2)
		return lease_fail(err, CMD_ERR_SYNTAX,
				  release ? "usage: RELEASE <lease-id>"
					  : "usage: RENEW <lease-id>");
	size_t a = lease_id_action(arg[1], alen[1]);
	if (a == 0 || alen[1] >= LEASE_ID_MAX)
		return lease_fail(
			err, CMD_ERR_NO_LEASE,
			"not a lease id (ACQUIRE's answer: <action>:<user>:<nonce>:<cost>)");
	req->lease_id = arg[1];
	req->lease_id_len = alen[1];
	req->action = arg[1];
	req->action_len = a;
	return 0;
}

/* <user> <action> at arg[1], arg[2]: 0 with them in req, or -1. */
static int user_action(const char *const *arg, const size_t *alen, struct cmd_request *req,
		       struct proto_error *err)
{
	if (alen[1] == 0)
		return admin_fail(err, CMD_ERR_BAD_USER, "user is empty");
	if (alen[1] > KEYS_USER_MAX)
		return admin_fail(err, CMD_ERR_BAD_USER, "user is longer than 512 bytes");
	req->user = arg[1];
	req->user_len = alen[1];
	req->action = arg[2];
	req->action_len = alen[2];
	return 0;
}

int proto_parse_overrides(const char *const *arg, const size_t *alen, int n,
			  struct cmd_request *req, struct proto_error *err)
{
	if (proto_word_is(arg[0], alen[0], "TOP")) {
		static const char usage[] =
			"usage: TOP <action> <index> (from 0) [DENIED|REQUESTS]";
		req->verb = CMD_TOP;
		if (n < 3 || n > 4 || alen[1] == 0 ||
		    decimal_parse(arg[2], alen[2], INT32_MAX, &req->index) < 0)
			return admin_fail(err, CMD_ERR_SYNTAX, usage);
		if (n == 4 && proto_word_is(arg[3], alen[3], "REQUESTS"))
			req->by_requests = 1;
		else if (n == 4 && !proto_word_is(arg[3], alen[3], "DENIED"))
			return admin_fail(err, CMD_ERR_SYNTAX, usage);
		req->action = arg[1];
		req->action_len = alen[1];
		return 0;
	}
	if (proto_word_is(arg[0], alen[0], "OVERRIDES")) {
		req->verb = CMD_OVERRIDES;
		if (n != 2 || decimal_parse(arg[1], alen[1], INT32_MAX, &req->index) < 0)
			return admin_fail(err, CMD_ERR_SYNTAX, "usage: OVERRIDES <index> (from 0)");
		return 0;
	}
	if (proto_word_is(arg[0], alen[0], "OVERRIDE")) {
		req->verb = CMD_OVERRIDE;
		if (n < 4 || n > 5)
			return admin_fail(err, CMD_ERR_SYNTAX,
					  "usage: OVERRIDE <user> <action> "
					  "unlimited|blocked|<limits> [<ttl>]");
		req->spec = arg[3];
		req->spec_len = alen[3];
		if (n == 5 && proto_parse_ttl(arg[4], alen[4], &req->ttl_ms) < 0)
			return admin_fail(err, CMD_ERR_SYNTAX,
					  "the ttl is a duration from 1s to 366d: 90s, 1h, 7d");
	} else if (proto_word_is(arg[0], alen[0], "UNOVERRIDE")) {
		req->verb = CMD_UNOVERRIDE;
		if (n != 3)
			return admin_fail(err, CMD_ERR_SYNTAX, "usage: UNOVERRIDE <user> <action>");
	} else {
		return 1;
	}
	return user_action(arg, alen, req, err);
}

/* "usage: <the row's usage>": a syntax error's text, made once per verb. */
static const char *usage_of(enum cmd_verb v)
{
	static char usage[CMD_VERB_N][128];
	if (!usage[v][0])
		snprintf(usage[v], sizeof(usage[v]), "usage: %s", cmd_verbs[v].usage);
	return usage[v];
}

/* A verb of the common shape: <user> <action> and what its row's args allow
 * after them, [<cost>] or <cost>, [WAIT <ms>], [TRACE <traceparent>]. 0
 * with req's user, action, cost (and wait, trace), or -1. */
static int common_args(enum cmd_verb v, const char *const *arg, const size_t *alen, int n,
		       struct cmd_request *req, struct proto_error *err)
{
	unsigned args = cmd_verbs[v].args;
	int t = args & CMD_ARGS_TRACE ? proto_parse_trace(arg, alen, n, req, err) : 0;
	if (t < 0)
		return -1;
	n -= 2 * t;
	int w = args & CMD_ARGS_WAIT ? proto_parse_wait(arg, alen, n, req, err) : 0;
	if (w < 0)
		return -1;
	n -= 2 * w;
	int least = args & CMD_ARGS_COST_NEEDED ? 4 : 3;
	int most = args & (CMD_ARGS_COST | CMD_ARGS_COST_NEEDED) ? 4 : 3;
	if (n < least || n > most)
		return admin_fail(err, CMD_ERR_SYNTAX, usage_of(v));
	/* the cost is judged before the user */
	if (n == 4 && proto_parse_cost(arg[3], alen[3], &req->cost) < 0)
		return admin_fail(err, CMD_ERR_BAD_COST,
				  "cost must be an integer from 1 to 2147483647");
	return user_action(arg, alen, req, err);
}

int proto_parse_verb(const char *const *arg, const size_t *alen, int n, unsigned front,
		     struct cmd_request *req, struct proto_error *err)
{
	int resp = front == CMD_ON_RESP;
	int v = cmd_verb_named(arg[0], alen[0], front);
	if (v < 0 || v == CMD_THROTTLE) { /* the RESP parser reads CL.THROTTLE itself */
		/* the list, made once from the verbs' table, is static */
		static char unknown[256];
		if (!unknown[0])
			snprintf(unknown, sizeof(unknown), "known commands: %s",
				 cmd_known_commands());
		return admin_fail(err, CMD_ERR_UNKNOWN_COMMAND, unknown);
	}
	req->verb = (enum cmd_verb)v;
	if (cmd_verbs[v].args & CMD_ARGS_PAIR)
		return common_args(req->verb, arg, alen, n, req, err);
	switch (req->verb) {
	case CMD_OVERRIDE:
	case CMD_UNOVERRIDE:
	case CMD_OVERRIDES:
	case CMD_TOP:
		return proto_parse_overrides(arg, alen, n, req, err) < 0 ? -1 : 0;
	case CMD_RELEASE:
	case CMD_RENEW:
		return proto_parse_lease(arg, alen, n, req, err) < 0 ? -1 : 0;
	case CMD_SETTLE:
	case CMD_CANCEL:
		return proto_parse_hold(arg, alen, n, req, err) < 0 ? -1 : 0;
	case CMD_MALLOW:
	case CMD_MPEEK:
		return proto_parse_pairs(arg, alen, n, req, err) < 0 ? -1 : 0;
	case CMD_PING: /* RESP's carries a message, as Redis's */
		if (resp ? n > 2 : n != 1)
			return admin_fail(err, CMD_ERR_SYNTAX,
					  resp ? "usage: PING [<message>]" : "usage: PING");
		return 0;
	case CMD_QUIT:
		if (!resp && n != 1)
			return admin_fail(err, CMD_ERR_SYNTAX, "usage: QUIT");
		return 0;
	case CMD_AUTH:
		/* AUTH <token>; RESP also AUTH <user> <token> as Redis 6 clients
		 * send it (the user is the identity's name; the token decides) */
		if (resp ? n != 2 && n != 3 : n != 2)
			return admin_fail(err, CMD_ERR_SYNTAX,
					  resp ? "usage: AUTH [<identity>] <token>"
					       : "usage: AUTH <token>");
		if (alen[n - 1] == 0) /* no identity has an empty token (found by fuzz-resp) */
			return admin_fail(err, CMD_ERR_SYNTAX, "AUTH's token is empty");
		req->token = arg[n - 1];
		req->token_len = alen[n - 1];
		return 0;
	default: /* the common shape (common_args), or CL.THROTTLE (not reached) */
		break;
	}
	return admin_fail(err, CMD_ERR_SYNTAX, "no grammar for this command");
}
