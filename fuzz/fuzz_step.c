/*
 * fuzz_step.c - the part of the protocol fuzzers (fuzz_resp, fuzz_http)
 * that is the same for every protocol: a loop shaped like conn.c's
 * (accumulate, take the step on at most the protocol's window, stop after
 * a fatal error, QUIT or a close; an unfinished last request is not a
 * request) run three times: (a) one write, (b) one byte at a time, (c)
 * writes of pseudo-random sizes. Their outcome logs must be identical. In
 * (a) each step sees an exact-size copy of its window (ASan sees any read
 * past it), its result is checked against the step's contract, and every
 * reply its outcome can lead to goes to the protocol's fuzz_check_reply.
 */
#include "fuzz_step.h"

#include "fuzz_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "override_live.h"
#include "policy.h"

size_t fuzz_window(size_t max_line)
{
	return max_line + 2 > fuzz_proto->window_min ? max_line + 2 : fuzz_proto->window_min;
}

static int inside(const char *p, size_t n, const char *buf, size_t len)
{
	return p >= buf && n <= len && p <= buf + len - n;
}

/* The step's contract for one outcome, and the replies it can lead to. */
static void check_step(const char *w, size_t len, size_t max_line, const struct proto_conn *pc,
		       enum proto_step st, const struct proto_parsed *got)
{
	struct cmd_result res;
	memset(&res, 0, sizeof(res));
	res.tag = got->tag;
	res.close_after = got->close_after || st == PROTO_FATAL;
	snprintf(res.action, sizeof(res.action), "act.ion-1");
	res.window_ms = 1;
	switch (st) {
	case PROTO_NEED_MORE:
		check(len < fuzz_window(max_line), "a full window is never 'more'");
		return;
	case PROTO_FATAL:
		check(got->err.code == CMD_ERR_SYNTAX || got->err.code == CMD_ERR_LINE_TOO_LONG,
		      "fatal: syntax or line-too-long");
		check(got->err.msg && got->err.msg[0], "fatal says why");
		res.kind = CMD_REPLY_ERROR;
		res.error = got->err.code;
		snprintf(res.msg, sizeof(res.msg), "%s", got->err.msg);
		fuzz_check_reply(&res);
		return;
	case PROTO_SKIP:
		check(got->used > 0 && got->used <= len, "skip drops bytes");
		return;
	case PROTO_BAD:
		check(got->used > 0 && got->used <= len, "bad drops its request");
		check(got->err.msg && got->err.msg[0], "bad says why");
		res.kind = CMD_REPLY_ERROR;
		res.error = got->err.code;
		snprintf(res.msg, sizeof(res.msg), "%s", got->err.msg);
		fuzz_check_reply(&res);
		return;
	case PROTO_LOCAL:
		check(got->used > 0 && got->used <= len, "local drops its request");
		res.kind = CMD_REPLY_LOCAL;
		res.local = got->local;
		fuzz_check_reply(&res);
		return;
	case PROTO_REQUEST:
		break;
	default:
		check(0, "unknown step");
	}
	check(got->used > 0 && got->used <= len && got->used <= fuzz_window(max_line),
	      "request size");
	const struct cmd_request *r = &got->req;
	check(r->cost >= (r->verb == CMD_THROTTLE ? 0 : 1) && r->cost <= CMD_COST_MAX,
	      "cost in 1..2147483647 (CL.THROTTLE's quantity from 0)");
	switch (r->verb) {
	case CMD_THROTTLE:
		check(r->max_burst >= 0 && r->count >= 0 && r->period_s >= 0,
		      "CL.THROTTLE's numbers are not negative");
		check(r->user_len >= 1 && r->user_len <= KEYS_USER_MAX, "key_len 1..512");
		check(inside(r->user, r->user_len, w, got->used), "key inside the request");
		break;
	case CMD_ALLOW:
	case CMD_PEEK:
	case CMD_RESET:
		check(r->user_len >= 1 && r->user_len <= KEYS_USER_MAX, "user_len 1..512");
		/* in the request's bytes, or decoded into the connection's room */
		check(inside(r->user, r->user_len, w, got->used) ||
			      (pc && inside(r->user, r->user_len, pc->user, sizeof(pc->user))),
		      "user inside the request");
		check(inside(r->action, r->action_len, w, got->used) ||
			      (pc && inside(r->action, r->action_len, pc->action,
					    sizeof(pc->action) - 1)),
		      "action inside the request");
		break;
	case CMD_OVERRIDE:
	case CMD_UNOVERRIDE:
		check(r->user_len >= 1 && r->user_len <= KEYS_USER_MAX, "user_len 1..512");
		check(inside(r->user, r->user_len, w, got->used), "user inside the request");
		check(inside(r->action, r->action_len, w, got->used), "action inside the request");
		if (r->verb == CMD_OVERRIDE)
			check(inside(r->spec, r->spec_len, w, got->used),
			      "spec inside the request");
		break;
	case CMD_OVERRIDES:
		check(r->index >= 0 && r->index <= INT32_MAX, "index in range");
		break;
	case CMD_MALLOW:
	case CMD_MPEEK:
		check(r->npairs >= 1 && r->npairs <= CMD_PAIRS_MAX, "1 to 8 pairs");
		for (int i = 0; i < r->npairs; i++) {
			const struct cmd_pair *p = &r->pairs[i];
			check(p->user_len >= 1 && p->user_len <= KEYS_USER_MAX, "user_len 1..512");
			/* in the request's bytes, or decoded into the connection's room */
			check(inside(p->user, p->user_len, w, got->used) ||
				      (pc && inside(p->user, p->user_len, pc->pair_user[i],
						    KEYS_USER_MAX)),
			      "user inside the request");
			check(inside(p->action, p->action_len, w, got->used) ||
				      (pc && inside(p->action, p->action_len, pc->pair_action[i],
						    POLICY_NAME_MAX)),
			      "action inside the request");
		}
		res.multi = 1;
		res.pair = r->npairs;
		break;
	case CMD_PING:
	case CMD_QUIT:
		break;
	default:
		check(0, "unknown verb");
	}
	/* every reply a request can get */
	res.kind = CMD_REPLY_DECISION;
	res.allowed = (int)(r->cost & 1);
	res.limit = INT64_MAX;
	res.remaining = -1;
	res.retry_after_ms = INT64_MIN;
	res.reset_ms = r->cost;
	fuzz_check_reply(&res);
	enum cmd_reply kinds[] = {CMD_REPLY_OK, CMD_REPLY_PONG, CMD_REPLY_BYE};
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		res.kind = kinds[k];
		fuzz_check_reply(&res);
	}
	/* OVERRIDES: the longest item there can be, and the end */
	{
		struct cmd_item *it = malloc(sizeof(*it) + KEYS_USER_MAX + POLICY_NAME_MAX +
					     OVERRIDE_LIVE_SPEC_MAX);
		check(it != NULL, "out of memory");
		it->index = INT32_MAX;
		it->ttl_ms = INT64_MAX;
		it->ulen = KEYS_USER_MAX;
		it->alen = POLICY_NAME_MAX;
		it->spec_len = OVERRIDE_LIVE_SPEC_MAX;
		memset(it->text, 'x', it->ulen + it->alen + it->spec_len);
		res.kind = CMD_REPLY_ITEM;
		res.item = it;
		res.multi = 0;
		fuzz_check_reply(&res);
		res.item = NULL;
		res.limit = INT64_MAX;
		fuzz_check_reply(&res);
		free(it);
	}
	res.kind = CMD_REPLY_ERROR;
	res.error = CMD_ERR_STORE_UNAVAILABLE;
	size_t m = r->user_len < sizeof(res.msg) - 1 ? r->user_len : sizeof(res.msg) - 1;
	if (r->user)
		memcpy(res.msg, r->user, m); /* any bytes, CR and LF included */
	res.msg[m] = '\0';
	fuzz_check_reply(&res);
}

struct conn {
	size_t max_line;
	struct proto_conn *pc;
	char *buf;
	size_t len, cap;
	int stopped;
	int full; /* exact-size windows and every check */
	struct olog log;
};

static void conn_process(struct conn *c)
{
	size_t off = 0;
	while (!c->stopped && off < c->len) {
		size_t len = c->len - off;
		size_t window = fuzz_window(c->max_line);
		size_t want = len < window ? len : window;
		const char *w = c->buf + off;
		char *copy = NULL;
		if (c->full) {
			copy = malloc(want);
			check(copy != NULL, "out of memory");
			memcpy(copy, w, want);
			w = copy;
		}
		struct proto_parsed got;
		memset(&got, 0xa5, sizeof(got));
		got.used = 0; /* as conn.c does */
		got.tag = 0;
		got.close_after = 0;
		enum proto_step st = fuzz_proto->parse(w, want, c->max_line, c->pc, &got);
		if (c->full)
			check_step(w, want, c->max_line, c->pc, st, &got);
		if (st == PROTO_NEED_MORE) { /* not logged: how the bytes came decides it */
			free(copy);
			break;
		}
		if (st == PROTO_SKIP) { /* no request, no reply: how much at once may vary */
			free(copy);
			off += got.used;
			continue;
		}
		log_u64(&c->log, (uint64_t)st);
		if (st == PROTO_FATAL) {
			log_u64(&c->log, (uint64_t)got.err.code);
			c->stopped = 1;
			free(copy);
			break;
		}
		log_u64(&c->log, got.used);
		if (st == PROTO_REQUEST) {
			log_u64(&c->log, (uint64_t)got.req.verb);
			log_u64(&c->log, (uint64_t)got.req.cost);
			if (got.req.verb == CMD_THROTTLE) {
				log_bytes(&c->log, got.req.user, got.req.user_len);
				log_u64(&c->log, (uint64_t)got.req.max_burst);
				log_u64(&c->log, (uint64_t)got.req.count);
				log_u64(&c->log, (uint64_t)got.req.period_s);
			} else if (got.req.verb == CMD_MALLOW || got.req.verb == CMD_MPEEK) {
				log_u64(&c->log, (uint64_t)got.req.npairs);
				for (int i = 0; i < got.req.npairs; i++)
					log_bytes(&c->log, got.req.pairs[i].user,
						  got.req.pairs[i].user_len);
			} else if (got.req.verb == CMD_OVERRIDES) {
				log_u64(&c->log, (uint64_t)got.req.index);
			} else if (got.req.verb != CMD_PING && got.req.verb != CMD_QUIT) {
				log_bytes(&c->log, got.req.user, got.req.user_len);
				log_u64(&c->log, got.req.action_len);
			}
			if (got.req.verb == CMD_QUIT)
				c->stopped = 1;
		} else if (st == PROTO_BAD) {
			log_u64(&c->log, (uint64_t)got.err.code);
		} else if (st == PROTO_LOCAL) {
			log_u64(&c->log, (uint64_t)got.local);
		}
		log_u64(&c->log, (uint64_t)got.close_after);
		if (got.close_after)
			c->stopped = 1; /* conn.c reads nothing more */
		free(copy);
		off += got.used;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
}

static void conn_feed(struct conn *c, const char *p, size_t n)
{
	if (c->stopped || n == 0)
		return;
	fuzz_append(&c->buf, &c->len, &c->cap, p, n);
	conn_process(c);
}

static void conn_eof(struct conn *c)
{
	log_u64(&c->log, c->stopped ? 0 : c->len);
	free(c->buf);
	c->buf = NULL;
}


void fuzz_run(size_t max_line, struct proto_conn *pc, const char *s, size_t n, uint32_t rnd)
{
	struct conn whole = {.max_line = max_line, .pc = pc, .full = 1};
	conn_feed(&whole, s, n);
	conn_eof(&whole);

	struct conn bytes = {.max_line = max_line, .pc = pc};
	for (size_t i = 0; i < n; i++)
		conn_feed(&bytes, s + i, 1);
	conn_eof(&bytes);

	struct conn chunks = {.max_line = max_line, .pc = pc};
	for (size_t i = 0; i < n;) {
		rnd = rnd * 1103515245u + 12345u;
		size_t k = 1 + (rnd >> 16) % 97;
		if (k > n - i)
			k = n - i;
		conn_feed(&chunks, s + i, k);
		i += k;
	}
	conn_eof(&chunks);

	log_same(&whole.log, &bytes.log, "one write and byte-by-byte differ");
	log_same(&whole.log, &chunks.log, "one write and random chunks differ");
	free(whole.log.p);
	free(bytes.log.p);
	free(chunks.log.p);
}
