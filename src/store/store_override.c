/*
 * store_override.c - the run-time overrides' hash on a store (see
 * store_override.h): the backend's own, or the Redis hash through the
 * store's call, its replies read here: HGETALL's fields and values, the
 * script's {now, field, value...} (oload) and {now, field, value or nil}
 * (oget, oput).
 */
#include "store_override.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a call needs for its answer. */
struct redis_call {
	enum store_override_op op;
	store_override_fn *done;
	void *arg;
};

/* Redis's now, the first element of the script's replies; 0 when not one. */
static int64_t redis_now(const redisReply *r)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 || !r->element[0] ||
	    r->element[0]->type != REDIS_REPLY_STRING)
		return 0;
	long long now = atoll(r->element[0]->str);
	return now > 0 ? now : 0;
}

/* HGETALL's reply (plain), or oload's (Redis's now first): the pairs of
 * strings, others skipped. */
static void all_done(const struct redis_call *c, const redisReply *r)
{
	struct store_override_result res = {.status = STORE_OVERRIDE_ODD};
	int plain = c->op == STORE_OVERRIDE_LOAD;
	size_t first = plain ? 0 : 1;
	if (r->type != REDIS_REPLY_ARRAY || (!plain && (res.now_ms = redis_now(r)) == 0) ||
	    (r->elements - first) % 2 != 0) {
		c->done(c->arg, &res);
		return;
	}
	struct store_override_field *v = NULL;
	size_t pairs = (r->elements - first) / 2;
	if (pairs && !(v = malloc(pairs * sizeof(*v)))) {
		res = (struct store_override_result){.status = STORE_OVERRIDE_DOWN,
						     .why = "out of memory"};
		c->done(c->arg, &res);
		return;
	}
	res.status = STORE_OVERRIDE_OK;
	for (size_t i = first; i + 1 < r->elements; i += 2) {
		const redisReply *f = r->element[i], *val = r->element[i + 1];
		if (f && val && f->type == REDIS_REPLY_STRING && val->type == REDIS_REPLY_STRING)
			v[res.n++] =
				(struct store_override_field){f->str, val->str, f->len, val->len};
	}
	res.fields = v;
	c->done(c->arg, &res);
	free(v);
}

/* oget's and oput's reply: {now, field, value or nil}. */
static void one_done(const struct redis_call *c, const redisReply *r)
{
	struct store_override_result res = {.status = STORE_OVERRIDE_ODD};
	struct store_override_field f;
	if ((res.now_ms = redis_now(r)) == 0 || r->elements != 3) {
		res.now_ms = 0;
		c->done(c->arg, &res);
		return;
	}
	res.status = STORE_OVERRIDE_OK;
	const redisReply *field = r->element[1], *value = r->element[2];
	if (field && field->type == REDIS_REPLY_STRING) {
		int has = value && value->type == REDIS_REPLY_STRING;
		f = (struct store_override_field){field->str, has ? value->str : NULL, field->len,
						  has ? value->len : 0};
		res.n = 1;
		res.fields = &f;
	}
	c->done(c->arg, &res);
}

static void redis_done(void *arg, const redisReply *reply, const char *why)
{
	struct redis_call c = *(struct redis_call *)arg;
	free(arg);
	if (!reply || why || reply->type == REDIS_REPLY_ERROR) {
		int refused = reply && reply->type == REDIS_REPLY_ERROR;
		struct store_override_result res = {
			.status = refused || reply ? STORE_OVERRIDE_REFUSED : STORE_OVERRIDE_DOWN,
			.why = refused ? reply->str
			       : why   ? why
				       : "no answer",
		};
		c.done(c.arg, &res);
	} else if (c.op == STORE_OVERRIDE_LOAD || c.op == STORE_OVERRIDE_PRUNE) {
		all_done(&c, reply);
	} else {
		one_done(&c, reply);
	}
}

static void redis_override(struct store *s, const struct store_override_request *req,
			   store_override_fn *done, void *arg)
{
	struct redis_call *c = malloc(sizeof(*c));
	if (!c) {
		struct store_override_result res = {.status = STORE_OVERRIDE_DOWN,
						    .why = "out of memory"};
		done(arg, &res);
		return;
	}
	*c = (struct redis_call){req->op, done, arg};
	/* LOAD is a plain HGETALL: reading is no script call (EVALSHA is for
	 * decisions, which tests and operators count); the others run the
	 * decision script's mode on the hash, so nothing else is sent */
	char ttl[24];
	int tl = snprintf(ttl, sizeof(ttl), "%lld", (long long)(req->ttl_ms > 0 ? req->ttl_ms : 0));
	const char *argv[8] = {req->hash, "0"};
	size_t argl[8] = {req->hash_len, 1};
	int argc = 2;
#define ARG(p, len) (argv[argc] = (p), argl[argc++] = (len))
	switch (req->op) {
	case STORE_OVERRIDE_LOAD:
		argc = 0;
		ARG("HGETALL", 7);
		ARG(req->hash, req->hash_len);
		break;
	case STORE_OVERRIDE_PRUNE:
		ARG("oload", 5);
		break;
	case STORE_OVERRIDE_GET:
		ARG("oget", 4);
		ARG(req->field, req->field_len);
		break;
	case STORE_OVERRIDE_PUT:
		ARG("oput", 4);
		ARG(req->field, req->field_len);
		ARG(req->spec ? req->spec : "", req->spec ? req->spec_len : 0);
		ARG(ttl, (size_t)tl);
		ARG(req->channel, req->channel_len);
		ARG(req->notice, req->notice_len);
		break;
	}
#undef ARG
	struct store_call sc = {
		.key = req->hash,
		.key_len = req->hash_len,
		.script = req->op != STORE_OVERRIDE_LOAD,
		.argc = argc,
		.argv = argv,
		.argvlen = argl,
		.timeout_ms = req->timeout_ms,
	};
	store_call(s, &sc, redis_done, c);
}

void store_override(struct store *s, const struct store_override_request *req,
		    store_override_fn *done, void *arg)
{
	if (s->ops->override)
		s->ops->override(s, req, done, arg);
	else
		redis_override(s, req, done, arg);
}
