/*
 * grpc_rls.c - the gRPC methods: Envoy's ShouldRateLimit (rls.c's plan run
 * as one MALLOW) and the standard health Check.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "config.h"
#include "grpc.h"
#include "grpc_pb.h"
#include "local.h"
#include "rls.h"
#include "stats.h"
#include "store.h"

struct rls_call {
	struct cmd_slot slot; /* first: complete() gets this pointer */
	struct grpc_call *call;
	struct rls_plan plan;
	/* each pair's own figures (slot.res.pairs): a status per descriptor */
	struct cmd_pair_result pairs[RLS_MAX_DESCRIPTORS];
};

/* UNAUTHENTICATED's detail: how a call proves an identity (grpc.c takes
 * the token from the authorization metadata, conn.c the certificate) */
#define RLS_NOAUTH_MSG                                                                      \
	"authentication required: send the authorization metadata \"Bearer <token>\" with " \
	"an identity's token on each call (or, over TLS, a client certificate of an identity)"

static void rls_answer(struct rls_call *rc, const struct cmd_result *res, int allowed)
{
	static uint8_t buf[RLS_ANSWER_MAX];
	size_t len = rls_encode(&rc->plan, res, allowed, rc->call->cfg->envoy.headers,
				(int64_t)time(NULL), buf);
	grpc_call_reply(rc->call, buf, len);
}

/* The status a call's error is answered with. */
static enum grpc_status rls_status_of(enum cmd_error e)
{
	switch (e) {
	case CMD_ERR_STORE_UNAVAILABLE:
		return GRPC_UNAVAILABLE;
	case CMD_ERR_OUT_OF_MEMORY: /* as grpc.c's own */
		return GRPC_RESOURCE_EXHAUSTED;
	case CMD_ERR_REQUEST_TIMEOUT:
		return GRPC_DEADLINE_EXCEEDED;
	case CMD_ERR_NOAUTH:
	case CMD_ERR_AUTH_FAILED:
		return GRPC_UNAUTHENTICATED;
	case CMD_ERR_FORBIDDEN:
		return GRPC_PERMISSION_DENIED;
	case CMD_ERR_SYNTAX:
	case CMD_ERR_UNKNOWN_COMMAND:
	case CMD_ERR_UNKNOWN_ACTION:
	case CMD_ERR_BAD_COST:
	case CMD_ERR_BAD_USER:
	case CMD_ERR_LINE_TOO_LONG:
	case CMD_ERR_TOO_MANY_CLIENTS:
	case CMD_ERR_TLS_REQUIRED:
	case CMD_ERR_POLICY_KIND: /* envoy's rules are rates: never here */
	case CMD_ERR_NO_LEASE:
	case CMD_ERR_NO_HOLD:
		break;
	}
	return GRPC_INVALID_ARGUMENT;
}

static void rls_complete(struct cmd_slot *slot)
{
	struct rls_call *rc = (struct rls_call *)slot;
	struct cmd_result *res = &slot->res;
	if (rc->plan.npairs == 1 && res->kind == CMD_REPLY_DECISION && !res->multi &&
	    res->limit >= 0)
		/* a single ALLOW: its figures are the pair's */
		res->pairs[0] =
			(struct cmd_pair_result){1, res->allowed, res->remaining, res->reset_ms};
	/* answering may free rc: nothing of the slot is held past this (a
	 * decision's result owns nothing) */
	cmd_result_release(&slot->res);
	if (res->refused)
		grpc_call_refused(rc->call);
	switch (res->kind) {
	case CMD_REPLY_DECISION:
		/* a look (hits_addend 0) is never over: nothing was taken */
		rls_answer(rc, res, (res->allowed || rc->plan.cost == 0) && !rc->plan.zero_over);
		break;
	case CMD_REPLY_ERROR:
		/* the decider's noauth tells of the line protocol's AUTH; a
		 * gRPC call proves its identity in its metadata instead */
		grpc_call_fail(rc->call, rls_status_of(res->error),
			       res->error == CMD_ERR_NOAUTH ? RLS_NOAUTH_MSG : res->msg);
		break;
	default:
		grpc_call_fail(rc->call, GRPC_INTERNAL, "unexpected reply");
		break;
	}
}

static void rls_start(struct grpc_call *call)
{
	struct rls_call *rc = call->state;
	enum grpc_status status;
	const char *why;
	memset(&rc->slot, 0, sizeof(rc->slot));
	rc->call = call;
	if (rls_plan(call->cfg, call->msg, call->len, &rc->plan, &status, &why) < 0) {
		grpc_call_fail(call, status, why);
		return;
	}
	if (rc->plan.unknown_domain)
		stats.envoy_unknown_domain++;
	if (rc->plan.npairs == 0) {
		/* nothing to ask the store: a requests_per_unit 0 limit denies,
		 * no limit allows */
		rls_answer(rc, NULL, !rc->plan.zero_over);
		return;
	}
	struct cmd_request req;
	struct cmd_pair pairs[RLS_MAX_DESCRIPTORS];
	rls_request(&rc->plan, pairs, &req);
	req.timeout_ms = call->timeout_ms;
	req.token = call->token;
	req.token_len = call->token_len;
	req.traceparent = call->traceparent;
	req.traceparent_len = call->traceparent_len;
	req.received_us = call->received_us;
	cmd_slot_init(&rc->slot, STATS_FRONT_GRPC, 0, rls_complete);
	rc->pairs[0].known = 0; /* a MALLOW clears its own */
	req.figures = rc->pairs;
	cmd_execute(call->cfg, call->env, &req, call->caller, &rc->slot);
}

/* ---- health ---- */

static void health_check(struct grpc_call *call)
{
	Grpc__Health__V1__HealthCheckRequest *req =
		grpc__health__v1__health_check_request__unpack(NULL, call->len, call->msg);
	if (!req) {
		grpc_call_fail(call, GRPC_INVALID_ARGUMENT, "cannot decode the HealthCheckRequest");
		return;
	}
	int known = !req->service[0] || strcmp(req->service, "ratelimit") == 0 ||
		    strcmp(req->service, "envoy.service.ratelimit.v3.RateLimitService") == 0;
	grpc__health__v1__health_check_request__free_unpacked(req, NULL);
	if (!known) {
		grpc_call_fail(call, GRPC_NOT_FOUND, "unknown service");
		return;
	}
	const char *why, *refusal;
	enum store_verdict v = store_verdict(call->env->store, call->cfg->on_store_error,
					     local_active(call->env->local), &why, &refusal);
	Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
	resp.status = v == STORE_VERDICT_DOWN
			      ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
			      : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
	uint8_t buf[16];
	size_t len = grpc__health__v1__health_check_response__pack(&resp, buf);
	grpc_call_reply(call, buf, len);
}

const struct grpc_method grpc_methods[] = {
	{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", sizeof(struct rls_call),
	 rls_start},
	{"/grpc.health.v1.Health/Check", 0, health_check},
	{NULL, 0, NULL},
};
