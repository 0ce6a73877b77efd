/* store_reply.c - checks and decodes the decision script's reply; never trusts its shape. */
#include "store_reply.h"

#include <hiredis/hiredis.h>
#include <stdint.h>

#include "store.h"

static int fail(struct store_result *out, const char *why)
{
	out->status = STORE_FAILED;
	out->detail = why;
	return -1;
}

int store_reply_decision(const struct redisReply *rep, unsigned long first,
			 struct store_result *out)
{
	if (!rep)
		return fail(out, "no reply from redis");
	if (rep->type == REDIS_REPLY_ERROR)
		return fail(out, "redis answered with an error");
	if (rep->type != REDIS_REPLY_ARRAY || first > rep->elements || rep->elements - first < 5)
		return fail(out, "unexpected reply from redis");
	int64_t v[5];
	for (int i = 0; i < 5; i++) {
		const redisReply *e = rep->element[first + (unsigned long)i];
		if (!e || e->type != REDIS_REPLY_INTEGER)
			return fail(out, "unexpected reply from redis");
		v[i] = e->integer;
	}
	if (v[0] == -1)
		return fail(out, "redis could not decide (a key of the wrong type?)");
	/* Values the script cannot produce mean something else answered. */
	if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[3] < -1 || v[4] < 0)
		return fail(out, "implausible decision from redis");
	out->status = STORE_OK;
	out->detail = NULL;
	out->allowed = v[0] == 1;
	out->limit = v[1];
	out->remaining = v[2];
	out->retry_after_ms = v[3];
	out->reset_ms = v[4];
	return 0;
}
