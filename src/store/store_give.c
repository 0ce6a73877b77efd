/*
 * store_give.c - a block's units given back (see store_give.h): the
 * script's "b" through the store's call, and its answer of one integer,
 * the units taken back (-1 and Redis's text when the decision failed).
 */
#include "store_give.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>

#include "keys.h"
#include "redis_script.h"

_Static_assert(1 + REDIS_SCRIPT_GIVE_ARGC <= STORE_CALL_ARGS_MAX, "a give-back's call fits");

/* What the call needs for its answer. */
struct give_call {
	store_give_fn *done;
	void *arg;
	int64_t units;
};

static void give_done(void *arg, const redisReply *reply, const char *why)
{
	struct give_call gc = *(struct give_call *)arg;
	free(arg);
	struct store_give_result r = {0};
	if (!reply)
		r.why = why ? why : "no answer";
	else if (reply->type == REDIS_REPLY_ERROR)
		r.why = reply->str;
	else if (reply->type != REDIS_REPLY_ARRAY || reply->elements < SCRIPT_OP_GIVE_REPLY ||
		 !reply->element[0] || reply->element[0]->type != REDIS_REPLY_INTEGER)
		r.why = "not a give-back answer";
	else if (reply->element[0]->integer < 0)
		r.why = reply->elements > 1 && reply->element[1]->type == REDIS_REPLY_STRING
				? reply->element[1]->str
				: "redis could not take them back";
	else if (reply->element[0]->integer > gc.units)
		r.why = "more taken back than given";
	else
		r.returned = reply->element[0]->integer;
	gc.done(gc.arg, &r);
}

void store_give(struct store *s, const struct store_give_request *req, store_give_fn *done,
		void *arg)
{
	if (policy_nkeys(req->policy) != 1 || req->units <= 0 || req->window <= 0) {
		struct store_give_result r = {.why = "not a window's block"};
		done(arg, &r);
		return;
	}
	struct give_call *c = malloc(sizeof(*c));
	if (!c) {
		struct store_give_result r = {.why = "out of memory"};
		done(arg, &r);
		return;
	}
	*c = (struct give_call){done, arg, req->units};
	char key[KEYS_MAX], arena[REDIS_SCRIPT_GIVE_ARENA];
	const char *argv[1 + REDIS_SCRIPT_GIVE_ARGC];
	size_t argl[1 + REDIS_SCRIPT_GIVE_ARGC];
	struct redis_argv a = {.argv = argv, .argl = argl, .arena = arena};
	size_t kl = keys_build(key, req->prefix, req->prefix_len, req->policy, 0, req->user,
			       req->user_len);
	redis_argv_add(&a, key, kl);
	redis_script_give_args(&a, req->policy, req->units, req->window);
	struct store_call sc = {
		.key = key,
		.key_len = kl,
		.script = 1,
		.argc = a.argc,
		.argv = argv,
		.argvlen = argl,
		.timeout_ms = req->timeout_ms,
		/* units given back and lost with a failover only lapse */
		.durable = 0,
	};
	store_call(s, &sc, give_done, c);
}
