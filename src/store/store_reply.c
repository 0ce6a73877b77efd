/* store_reply.c - checks and decodes the decision script's reply; never trusts its shape. */
#include "store_reply.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <stdint.h>
#include <string.h>

#include "script_layout.h"
#include "store.h"

enum store_error store_reply_error(const char *err, size_t len)
{
	/* The first word of an error reply is its code (Redis's convention). */
	static const struct {
		const char *code;
		enum store_error e;
	} codes[] = {
		{"NOSCRIPT", STORE_ERROR_NOSCRIPT}, {"NOPERM", STORE_ERROR_NOPERM},
		{"NOAUTH", STORE_ERROR_AUTH},	    {"WRONGPASS", STORE_ERROR_AUTH},
		{"READONLY", STORE_ERROR_READONLY}, {"MASTERDOWN", STORE_ERROR_MASTERDOWN},
		{"MOVED", STORE_ERROR_MOVED},	    {"ASK", STORE_ERROR_ASK},
		{"TRYAGAIN", STORE_ERROR_TRYAGAIN}, {"CLUSTERDOWN", STORE_ERROR_CLUSTERDOWN},
		{"OOM", STORE_ERROR_OOM},	    {"BUSY", STORE_ERROR_BUSY},
		{"LOADING", STORE_ERROR_LOADING},   {"WRONGTYPE", STORE_ERROR_KEY},
	};
	size_t w = 0;
	while (w < len && err[w] != ' ' && err[w] != '\r' && err[w] != '\n')
		w++;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		if (strlen(codes[i].code) == w && memcmp(err, codes[i].code, w) == 0)
			return codes[i].e;
	/* Redis 7.0 and Valkey 8 report a script's own failures as "ERR ...
	 * script: <sha>, on @user_script:N.", ACL refusals inside it included:
	 * "The user executing the script can't ..." (Redis), "ACL failure in
	 * script: ..." (Valkey). */
	if (w == 3 && memcmp(err, "ERR", 3) == 0) {
		if (memmem(err, len, "user executing the script can't", 31) ||
		    memmem(err, len, "ACL failure in script", 21))
			return STORE_ERROR_NOPERM;
		if (memmem(err, len, "user_script", 11) ||
		    memmem(err, len, "Error running script", 20))
			return STORE_ERROR_SCRIPT;
	}
	return STORE_ERROR_OTHER;
}

int store_reply_redirect(const char *err, size_t len, int *slot, const char **to, size_t *to_len)
{
	size_t i;
	switch (store_reply_error(err, len)) {
	case STORE_ERROR_MOVED:
		i = 6;
		break;
	case STORE_ERROR_ASK:
		i = 4;
		break;
	default:
		return -1;
	}
	int s = 0;
	size_t digits = 0;
	while (i < len && err[i] >= '0' && err[i] <= '9' && digits < 6) {
		s = s * 10 + (err[i++] - '0');
		digits++;
	}
	if (!digits || s > 16383 || i >= len || err[i] != ' ')
		return -1;
	i++;
	size_t start = i;
	while (i < len && err[i] != ' ' && err[i] != '\r' && err[i] != '\n')
		i++;
	if (i == start || !memchr(err + start, ':', i - start))
		return -1;
	*slot = s;
	*to = err + start;
	*to_len = i - start;
	return 0;
}

static int fail(struct store_result *out, enum store_error e, const char *why)
{
	out->status = STORE_FAILED;
	out->error = e;
	out->detail = why;
	return -1;
}

static int decision(const struct redisReply *rep, unsigned long first, unsigned long total,
		    struct store_result *out);

/* (script_layout.txt's widths) */
unsigned long store_reply_width(int npairs, int block, int state_keys)
{
	return npairs > 0
		       ? SCRIPT_PAIRS_REPLY_WIDTH + SCRIPT_GROUP_REPLY_WIDTH * (unsigned long)npairs
	       : block ? SCRIPT_OP_BLOCK_REPLY
	       : state_keys
		       ? SCRIPT_OP_STATE_REPLY + SCRIPT_STATE_KEY_WIDTH * (unsigned long)state_keys
		       : SCRIPT_REPLY_WIDTH;
}

int store_reply_state(const struct redisReply *rep, unsigned long first, int nkeys,
		      struct store_result *out)
{
	out->nkeys = 0;
	/* (store_reply_decision checked first <= elements, and the type) */
	if (nkeys < 1 || nkeys > POLICY_MAX_LIMITS + 1 ||
	    rep->elements - first < store_reply_width(0, 0, nkeys))
		return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
	for (int k = 0; k < nkeys; k++) {
		int64_t v[SCRIPT_STATE_KEY_WIDTH];
		for (int i = 0; i < SCRIPT_STATE_KEY_WIDTH; i++) {
			const redisReply *e =
				rep->element[first + SCRIPT_OP_STATE_REPLY +
					     SCRIPT_STATE_KEY_WIDTH * (unsigned long)k +
					     (unsigned long)i];
			if (!e || e->type != REDIS_REPLY_INTEGER)
				return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
			v[i] = e->integer;
		}
		/* a count may pass its limit (a CHARGE's debt, a lowered
		 * limit), never below 0; the window's bounds are times */
		if (v[0] < 0 || v[0] > STORE_REPLY_COUNT_MAX || v[1] < 0 ||
		    v[1] > STORE_REPLY_COUNT_MAX || v[2] < 0 || v[2] > STORE_REPLY_MS_MAX ||
		    v[3] < 0 || v[3] > STORE_REPLY_TIME_MAX || v[4] < v[3] ||
		    v[4] > STORE_REPLY_TIME_MAX)
			return fail(out, STORE_ERROR_REPLY, "implausible decision from redis");
		out->keys[k] = (struct store_key){v[0], v[1], v[2], v[3], v[4]};
	}
	out->nkeys = nkeys;
	return 0;
}

/* a window's block lasts until the window ends: at most 400 days */
#define STORE_BLOCK_VALID_MAX_MS 34560000000LL

int store_reply_block(const struct redisReply *rep, unsigned long first, struct store_result *out)
{
	out->block = out->block_ms = out->block_window = 0;
	/* (store_reply_decision checked first <= elements, and the type) */
	if (rep->elements - first < SCRIPT_OP_BLOCK_REPLY)
		return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
	const redisReply *u = rep->element[first + 5], *v = rep->element[first + 6],
			 *w = rep->element[first + 7];
	if (!u || u->type != REDIS_REPLY_INTEGER || !v || v->type != REDIS_REPLY_INTEGER || !w ||
	    w->type != REDIS_REPLY_INTEGER)
		return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
	/* units only with an allowed answer, valid for at most a block's ttl;
	 * a window only with units (a window's number, or a calendar
	 * window's start in ms) */
	if (u->integer < 0 || u->integer > POLICY_BLOCKS_MAX || v->integer < 0 ||
	    v->integer > STORE_BLOCK_VALID_MAX_MS || (u->integer > 0 && !out->allowed) ||
	    (u->integer > 0) != (v->integer > 0) || w->integer < 0 ||
	    w->integer > STORE_REPLY_COUNT_MAX || (w->integer > 0 && u->integer == 0))
		return fail(out, STORE_ERROR_REPLY, "implausible decision from redis");
	out->block = u->integer;
	out->block_ms = v->integer;
	out->block_window = w->integer;
	return 0;
}

int store_reply_decision(const struct redisReply *rep, unsigned long first, unsigned long total,
			 struct store_result *out)
{
	store_result_reset(out);
	return decision(rep, first, total, out);
}

int store_reply_decision_all(const struct redisReply *rep, unsigned long first, unsigned long total,
			     int npairs, struct store_result *out)
{
	store_result_reset(out);
	if (npairs < 1 || npairs > STORE_PAIRS_MAX)
		return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
	unsigned long width = store_reply_width(npairs, 0, 0);
	if (decision(rep, first, total, out) < 0)
		return -1;
	/* (decision() checked first <= elements) */
	if (rep->elements - first < width)
		return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
	const redisReply *const *el = (const redisReply *const *)rep->element + first;
	const redisReply *p = el[5], *sh = el[6];
	if (!p || p->type != REDIS_REPLY_INTEGER || !sh || sh->type != REDIS_REPLY_INTEGER ||
	    p->integer < 1 || p->integer > npairs || sh->integer < 0 || sh->integer > npairs)
		return fail(out, STORE_ERROR_REPLY, "implausible decision from redis");
	out->pair = (int)p->integer;
	out->shadow_pair = (int)sh->integer;
	for (int g = 0; g < npairs; g++) {
		int64_t v[3];
		for (int i = 0; i < 3; i++) {
			const redisReply *e =
				el[SCRIPT_PAIRS_REPLY_WIDTH +
				   SCRIPT_GROUP_REPLY_WIDTH * (unsigned long)g + (unsigned long)i];
			if (!e || e->type != REDIS_REPLY_INTEGER)
				return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
			v[i] = e->integer;
		}
		if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[1] > STORE_REPLY_COUNT_MAX ||
		    v[2] < 0 || v[2] > STORE_REPLY_MS_MAX)
			return fail(out, STORE_ERROR_REPLY, "implausible decision from redis");
		out->groups[g] = (struct store_group){(int)v[0], v[1], v[2]};
	}
	out->ngroups = npairs;
	return 0;
}

static int decision(const struct redisReply *rep, unsigned long first, unsigned long total,
		    struct store_result *out)
{
	if (!rep)
		return fail(out, STORE_ERROR_REPLY, "no reply from redis");
	if (rep->type == REDIS_REPLY_ERROR)
		return fail(out, store_reply_error(rep->str, rep->len),
			    "redis answered with an error");
	if (rep->type != REDIS_REPLY_ARRAY || first > rep->elements || rep->elements - first < 5)
		return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
	int64_t v[5];
	for (int i = 0; i < 5; i++) {
		const redisReply *e = rep->element[first + (unsigned long)i];
		if (!e || e->type != REDIS_REPLY_INTEGER)
			return fail(out, STORE_ERROR_REPLY, "unexpected reply from redis");
		v[i] = e->integer;
	}
	if (v[0] == -1) {
		/* Redis's text of the failure follows the last decision. */
		const redisReply *why = total < rep->elements && rep->elements - total == 1
						? rep->element[total]
						: NULL;
		/* (a text starting with NUL would say nothing: the fuzzer found one) */
		if (why && why->type == REDIS_REPLY_STRING && why->len > 0 && why->str[0] != '\0')
			return fail(out, store_reply_error(why->str, why->len), why->str);
		return fail(out, STORE_ERROR_KEY,
			    "redis could not decide (a key of the wrong type?)");
	}
	if (v[0] == -2)
		return fail(out, STORE_ERROR_WRONG_NODE, "the keys are not on this cluster node");
	out->no_hold = v[0] == -3; /* a SETTLE's or CANCEL's hold is not open */
	if (out->no_hold) {
		out->status = STORE_OK;
		out->error = STORE_ERROR_NONE;
		out->detail = NULL;
		out->allowed = 0;
		out->limit = out->remaining = out->retry_after_ms = out->reset_ms = 0;
		return 0;
	}
	/* Values the script cannot produce mean something else answered. */
	if ((v[0] != 0 && v[0] != 1) || v[1] < 0 || v[1] > STORE_REPLY_COUNT_MAX ||
	    v[2] < -STORE_REPLY_COUNT_MAX || v[2] > STORE_REPLY_COUNT_MAX || v[3] < -1 ||
	    v[3] > STORE_REPLY_MS_MAX || v[4] < 0 || v[4] > STORE_REPLY_MS_MAX)
		return fail(out, STORE_ERROR_REPLY, "implausible decision from redis");
	out->status = STORE_OK;
	out->error = STORE_ERROR_NONE;
	out->detail = NULL;
	out->allowed = v[0] == 1;
	out->limit = v[1];
	out->remaining = v[2];
	out->retry_after_ms = v[3];
	out->reset_ms = v[4];
	return 0;
}
