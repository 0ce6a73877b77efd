/*
 * store_lease.c - concurrency leases on a store (see store_lease.h): the
 * backend's own, or the decision script's 'lease' mode, its arguments and
 * its answer of 5 integers {ok, limit, remaining, ms, expired}.
 */
#include "store_lease.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

static const char *op_arg(enum lease_op op)
{
	switch (op) {
	case LEASE_ACQUIRE:
		return "a";
	case LEASE_RELEASE:
		return "r";
	case LEASE_RENEW:
		return "n";
	case LEASE_PEEK:
		return "p";
	case LEASE_RESET:
		return "x";
	}
	return "?";
}

/* What the script's call needs for its answer. */
struct script_call {
	store_lease_fn *done;
	void *arg;
};

static void script_done(void *arg, const redisReply *reply, const char *why)
{
	struct script_call sc = *(struct script_call *)arg;
	free(arg);
	struct store_lease_result r = {0};
	if (!reply) {
		r.why = why ? why : "no answer";
	} else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 5) {
		r.why = reply->type == REDIS_REPLY_ERROR ? reply->str : "not a lease answer";
	} else {
		long long v[5];
		for (size_t i = 0; i < 5; i++)
			v[i] = reply->element[i]->type == REDIS_REPLY_INTEGER
				       ? reply->element[i]->integer
				       : 0;
		r.lease.ok = v[0] == 1;
		r.lease.limit = v[1];
		r.lease.remaining = v[2];
		r.lease.ms = v[3];
		r.lease.expired = v[4];
		/* granted, but the replicas did not take it (redis.wait_replicas):
		 * a failover could lose the lease; a refusal stands */
		if (why && r.lease.ok) {
			stats.store_failures[STORE_ERROR_REPLICAS]++;
			r.why = why;
		}
	}
	sc.done(sc.arg, &r);
}

static void script_lease(struct store *s, const struct store_lease_request *req,
			 store_lease_fn *done, void *arg)
{
	struct script_call *c = malloc(sizeof(*c));
	if (!c) {
		struct store_lease_result r = {.why = "out of memory", .out_of_memory = 1};
		done(arg, &r);
		return;
	}
	c->done = done;
	c->arg = arg;
	char scost[24], slimit[24], slease[24];
	snprintf(scost, sizeof(scost), "%lld", (long long)req->cost);
	snprintf(slimit, sizeof(slimit), "%lld", (long long)req->limit);
	snprintf(slease, sizeof(slease), "%lld", (long long)req->lease_ms);
	const char *op = op_arg(req->op);
	const char *argv[8] = {req->key, "0", "lease", op, req->member, scost, slimit, slease};
	size_t argl[8] = {
		req->key_len,  1, 5, 1, strlen(req->member), strlen(scost), strlen(slimit),
		strlen(slease)};
	struct store_call sc = {
		.key = req->key,
		.key_len = req->key_len,
		.script = 1,
		.argc = 8,
		.argv = argv,
		.argvlen = argl,
		.timeout_ms = req->timeout_ms,
		/* a lease taken or extended is what a failover must not lose
		 * (redis.wait_replicas); a release lost only holds one longer */
		.durable = req->op == LEASE_ACQUIRE || req->op == LEASE_RENEW,
	};
	store_call(s, &sc, script_done, c);
}

void store_lease(struct store *s, const struct store_lease_request *req, store_lease_fn *done,
		 void *arg)
{
	if (s->ops->lease)
		s->ops->lease(s, req, done, arg);
	else
		script_lease(s, req, done, arg);
}
