/*
 * fuzz_step.c - the part of the protocol fuzzers (fuzz_proto, fuzz_resp, fuzz_http)
 * that is the same for every protocol. The stream is fed three times: (a)
 * in one write, through a reference loop that takes the protocol's step
 * itself (accumulate, take the step on at most its window, stop after a
 * fatal error, QUIT or a close; an unfinished last request is not a
 * request); (b) one byte at a time and (c) in writes of pseudo-random
 * sizes, both through the daemon's own in-order session (src/proto/pipeline.c,
 * with cmd's entry points stubbed below: each request answered at once).
 * Their outcome logs must be identical. In (a) each step sees an exact-size
 * copy of its window (ASan sees any read past it), its result is checked
 * against the step's contract, and every reply its outcome can lead to goes
 * to the protocol's fuzz_check_reply (and the step to the harness's own
 * fuzz_step_check, if it set one); in (b) and (c) every reply is
 * formatted by the pipeline as it would be written.
 */
#include "lease.h"
#include "fuzz_step.h"

#include "fuzz_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "cmd.h"
#include "config.h"
#include "frontend.h"
#include "keys.h"
#include "override_live.h"
#include "pipeline.h"
#include "policy.h"
#include "session.h"
#include "top.h"

void (*fuzz_step_check)(const char *w, size_t len, size_t max_line, enum proto_step st,
			const struct proto_parsed *got);

size_t fuzz_window(size_t max_line)
{
	return proto_window(fuzz_proto, max_line);
}

static int inside(const char *p, size_t n, const char *buf, size_t len)
{
	return p >= buf && n <= len && p <= buf + len - n;
}

/* The step's contract for one outcome, and the replies it can lead to. */
/* In the request's bytes, or decoded into the connection's state. */
static int in_request(const void *p, size_t n, const char *w, size_t used, const void *state,
		      size_t state_size)
{
	return inside(p, n, w, used) || (state && inside(p, n, state, state_size));
}

static void check_step(const char *w, size_t len, size_t max_line, const void *state,
		       size_t state_size, enum proto_step st, const struct proto_parsed *got)
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
	case CMD_STATE:
	case CMD_ACQUIRE:
	case CMD_CHARGE:
	case CMD_HOLD:
		check(r->user_len >= 1 && r->user_len <= KEYS_USER_MAX, "user_len 1..512");
		check(in_request(r->user, r->user_len, w, got->used, state, state_size),
		      "user inside the request");
		check(in_request(r->action, r->action_len, w, got->used, state, state_size),
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
	case CMD_TOP:
		check(r->index >= 0 && r->index <= INT32_MAX, "index in range");
		check(r->action_len >= 1 && inside(r->action, r->action_len, w, got->used),
		      "TOP's action inside the request");
		check(r->by_requests == 0 || r->by_requests == 1, "TOP's ranking");
		break;
	case CMD_MALLOW:
	case CMD_MPEEK:
		check(r->npairs >= 1 && r->npairs <= CMD_PAIRS_MAX, "1 to 8 pairs");
		for (int i = 0; i < r->npairs; i++) {
			const struct cmd_pair *p = &r->pairs[i];
			check(p->user_len >= 1 && p->user_len <= KEYS_USER_MAX, "user_len 1..512");
			check(in_request(p->user, p->user_len, w, got->used, state, state_size),
			      "user inside the request");
			check(in_request(p->action, p->action_len, w, got->used, state, state_size),
			      "action inside the request");
		}
		res.multi = 1;
		res.pair = r->npairs;
		break;
	case CMD_PING:
	case CMD_QUIT:
		break;
	case CMD_AUTH:
		check(r->token_len >= 1 &&
			      in_request(r->token, r->token_len, w, got->used, state, state_size),
		      "AUTH's token inside the request");
		break;
	case CMD_RELEASE:
	case CMD_RENEW:
	case CMD_SETTLE:
	case CMD_CANCEL:
		/* the id's action is its bytes before the first ':' */
		check(r->lease_id_len >= 2 && r->lease_id_len < LEASE_ID_MAX &&
			      inside(r->lease_id, r->lease_id_len, w, got->used),
		      "a lease id inside the request");
		check(r->action == r->lease_id && r->action_len >= 1 &&
			      r->action_len < r->lease_id_len &&
			      r->lease_id[r->action_len] == ':' &&
			      !memchr(r->action, ':', r->action_len),
		      "a lease id's action");
		break;
	default:
		check(0, "unknown verb");
	}
	check(r->verb == CMD_ALLOW || !r->wait_given, "WAIT is ALLOW's");
	check(!r->traceparent || in_request(r->traceparent, r->traceparent_len, w, got->used, state,
					    state_size),
	      "a traceparent inside the request");
	check(!r->wait_given || (r->wait_ms >= 0 && r->wait_ms <= 60000), "WAIT 0..60000");
	/* every reply a request can get */
	res.kind = CMD_REPLY_DECISION;
	res.allowed = (int)(r->cost & 1);
	res.limit = INT64_MAX;
	res.remaining = -1;
	res.retry_after_ms = INT64_MIN;
	res.reset_ms = r->cost;
	fuzz_check_reply(&res);
	/* STATE: eight limits, the largest figures (a calendar's among them),
	 * and as many as the request's cost says, its own figures */
	{
		struct cmd_state st = {.algo = (enum policy_algo)(r->cost % POLICY_ALGO_N),
				       .override = (enum cmd_state_override)(r->cost % 4),
				       .ban_ms = INT64_MAX,
				       .nlimits = POLICY_MAX_LIMITS};
		for (int i = 0; i < POLICY_MAX_LIMITS; i++)
			st.limits[i] = (struct cmd_state_limit){
				INT64_MAX, (enum calendar_unit)(i % CALENDAR_UNIT_N),
				INT64_MAX, INT64_MAX,
				INT64_MAX, INT64_MAX,
				INT64_MAX, INT64_MAX};
		struct cmd_result sr = {.kind = CMD_REPLY_STATE, .state = &st, .tag = res.tag};
		fuzz_check_reply(&sr);
		st.nlimits = 1 + (int)(r->cost % POLICY_MAX_LIMITS);
		st.ban_ms = r->cost - 1;
		for (int i = 0; i < st.nlimits; i++)
			st.limits[i] = (struct cmd_state_limit){
				r->cost, CALENDAR_NONE, r->cost, 0, r->cost, 0, 0, 0};
		fuzz_check_reply(&sr);
	}
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
	/* TOP: the longest user shown (every byte escaped, then cut), the
	 * largest figures, and the end with the totals */
	{
		struct cmd_item *it = calloc(1, sizeof(*it) + TOP_NAME_MAX);
		check(it != NULL, "out of memory");
		it->index = INT32_MAX;
		it->ulen = TOP_NAME_MAX;
		it->cut = KEYS_USER_MAX; /* cut from the longest */
		it->denied = it->requests = it->over = INT64_MAX;
		for (size_t k = 0; k < TOP_NAME_MAX; k++)
			it->text[k] = r->user_len ? r->user[k % r->user_len] : (char)(0x80 + k);
		res.kind = CMD_REPLY_TOP;
		res.item = it;
		fuzz_check_reply(&res);
		res.item = NULL;
		res.limit = TOP_ROWS_MAX;
		res.remaining = res.retry_after_ms = INT64_MAX;
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

/* What both ways of feeding log of a request: where it starts in the
 * stream, what it is, and whether the connection closes after it. */
static void log_request(struct olog *l, const struct cmd_request *r)
{
	log_u64(l, 0);
	log_u64(l, (uint64_t)r->verb);
	log_u64(l, (uint64_t)r->cost);
	if (r->verb == CMD_THROTTLE) {
		log_bytes(l, r->user, r->user_len);
		log_u64(l, (uint64_t)r->max_burst);
		log_u64(l, (uint64_t)r->count);
		log_u64(l, (uint64_t)r->period_s);
	} else if (r->verb == CMD_MALLOW || r->verb == CMD_MPEEK) {
		log_u64(l, (uint64_t)r->npairs);
		for (int i = 0; i < r->npairs; i++)
			log_bytes(l, r->pairs[i].user, r->pairs[i].user_len);
	} else if (r->verb == CMD_OVERRIDES) {
		log_u64(l, (uint64_t)r->index);
	} else if (r->verb == CMD_TOP) {
		log_u64(l, (uint64_t)r->index);
		log_bytes(l, r->action, r->action_len);
		log_u64(l, (uint64_t)r->by_requests);
	} else if (r->verb == CMD_AUTH) {
		log_bytes(l, r->token, r->token_len);
	} else if (r->verb == CMD_RELEASE || r->verb == CMD_RENEW || r->verb == CMD_SETTLE ||
		   r->verb == CMD_CANCEL) {
		log_bytes(l, r->lease_id, r->lease_id_len);
		log_u64(l, (uint64_t)r->actual);
	} else if (r->verb != CMD_PING && r->verb != CMD_QUIT) {
		log_bytes(l, r->user, r->user_len);
		log_u64(l, r->action_len);
	}
	log_u64(l, r->wait_given ? (uint64_t)r->wait_ms : UINT64_MAX);
}

/* ---- (a): the reference loop, on the step itself ---- */

struct conn {
	size_t max_line;
	void *state;
	size_t state_size;
	char *buf;
	size_t len, cap;
	uint64_t base; /* stream offset of buf[0] */
	int stopped;
	struct olog log;
};

static void conn_process(struct conn *c)
{
	size_t off = 0;
	while (!c->stopped && off < c->len) {
		size_t len = c->len - off;
		size_t window = fuzz_window(c->max_line);
		size_t want = len < window ? len : window;
		char *w = malloc(want ? want : 1);
		check(w != NULL, "out of memory");
		memcpy(w, c->buf + off, want);
		struct proto_parsed got;
		memset(&got, 0xa5, sizeof(got));
		got.used = 0; /* as pipeline.c does */
		got.tag = 0;
		got.close_after = 0;
		enum proto_step st = fuzz_proto->parse(w, want, c->max_line, c->state, &got);
		check_step(w, want, c->max_line, c->state, c->state_size, st, &got);
		if (fuzz_step_check)
			fuzz_step_check(w, want, c->max_line, st, &got);
		if (st == PROTO_NEED_MORE) { /* not logged: how the bytes came decides it */
			free(w);
			break;
		}
		if (st == PROTO_SKIP) { /* no request, no reply: how much at once may vary */
			free(w);
			off += got.used;
			continue;
		}
		log_u64(&c->log, c->base + off);
		switch (st) {
		case PROTO_REQUEST:
			log_request(&c->log, &got.req);
			if (got.req.verb == CMD_QUIT)
				c->stopped = 1;
			break;
		case PROTO_FATAL:
			/* answered, and nothing more is read */
			got.close_after = 1;
			/* fall through */
		case PROTO_BAD:
			log_u64(&c->log, 1);
			log_u64(&c->log, (uint64_t)got.err.code);
			break;
		default:
			log_u64(&c->log, 2);
			log_u64(&c->log, (uint64_t)got.local);
			break;
		}
		log_u64(&c->log, (uint64_t)got.close_after);
		if (got.close_after)
			c->stopped = 1; /* pipeline.c reads nothing more */
		free(w);
		off += got.used;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
	c->base += off;
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

/* ---- (b), (c): the daemon's pipeline, with cmd stubbed ---- */

struct feed {
	void *session;
	struct evbuffer *in;
	uint64_t fed; /* bytes added to in so far */
	int stopped;
	struct olog log;
};

/* The front end the pipeline runs: the harness's proto (fuzz_run). */
static struct frontend fuzz_frontend;
/* The feed whose pipeline is running: the stubs log to it. */
static struct feed *cur;
static const void *state_template;

static void state_copy(void *state, const struct conn_port *port, const struct sockaddr *sa)
{
	(void)port;
	(void)sa;
	memcpy(state, state_template, fuzz_frontend.state_size);
}

/* Where the request being answered starts: its bytes are drained after. */
static void log_start(const struct cmd_slot *slot)
{
	check(cur != NULL, "cmd called outside a feed");
	log_u64(&cur->log, cur->fed - evbuffer_get_length(cur->in));
	(void)slot;
}

static void answer(struct cmd_slot *slot)
{
	log_u64(&cur->log, (uint64_t)slot->res.close_after);
	snprintf(slot->res.action, sizeof(slot->res.action), "act.ion-1");
	slot->res.window_ms = 1;
	slot->complete(slot);
}

void cmd_execute(struct config *cfg, const struct cmd_env *env, const struct cmd_request *req,
		 struct cmd_caller *caller, struct cmd_slot *slot)
{
	(void)cfg;
	(void)env;
	(void)caller;
	log_start(slot);
	log_request(&cur->log, req);
	struct cmd_result *res = &slot->res;
	switch (req->verb) {
	case CMD_PING:
		res->kind = CMD_REPLY_PONG;
		break;
	case CMD_QUIT:
		res->kind = CMD_REPLY_BYE;
		break;
	case CMD_RESET:
	case CMD_OVERRIDE:
	case CMD_UNOVERRIDE:
		res->kind = CMD_REPLY_OK;
		break;
	case CMD_OVERRIDES:
		res->kind = CMD_REPLY_ITEM;
		res->item = NULL;
		res->limit = 0;
		break;
	case CMD_TOP:
		res->kind = CMD_REPLY_TOP;
		res->item = NULL;
		res->limit = res->remaining = res->retry_after_ms = 0;
		break;
	default:
		res->kind = CMD_REPLY_DECISION;
		res->allowed = (int)(req->cost & 1);
		res->limit = req->cost;
		res->remaining = 0;
		res->retry_after_ms = -1;
		res->reset_ms = 1000;
		res->multi = req->verb == CMD_MALLOW || req->verb == CMD_MPEEK;
		res->pair = res->multi ? req->npairs : 0;
		break;
	}
	answer(slot);
}

void cmd_reply_error(struct cmd_slot *slot, enum cmd_error e, const char *msg)
{
	log_start(slot);
	log_u64(&cur->log, 1);
	log_u64(&cur->log, (uint64_t)e);
	slot->res.kind = CMD_REPLY_ERROR;
	slot->res.error = e;
	snprintf(slot->res.msg, sizeof(slot->res.msg), "%s", msg);
	answer(slot);
}

void cmd_reply_local(struct cmd_slot *slot, int local)
{
	log_start(slot);
	log_u64(&cur->log, 2);
	log_u64(&cur->log, (uint64_t)local);
	slot->res.kind = CMD_REPLY_LOCAL;
	slot->res.local = local;
	answer(slot);
}

void cmd_result_release(struct cmd_result *res)
{
	free(res->item);
	res->item = NULL;
}

static void ready(void *arg)
{
	(void)arg;
}

static struct config feed_cfg;
static struct config *feed_cfgp = &feed_cfg;

static void feed_start(struct feed *f)
{
	static const struct session_host host = {.cfg = &feed_cfgp, .ready = ready};
	memset(f, 0, sizeof(*f));
	f->in = evbuffer_new();
	f->session = pipeline_ops.new(&fuzz_frontend, &host, NULL, NULL);
	check(f->in && f->session, "out of memory");
}

/* What the pipeline has to send, as conn.c's flush takes it. */
static void feed_flush(struct feed *f)
{
	static char room[65536];
	struct session_step st = {0};
	const char *data;
	ssize_t k;
	while ((k = pipeline_ops.next(f->session, room, sizeof(room), &data, &st)) > 0)
		check(data == room && (size_t)k <= fuzz_proto->reply_max, "a reply in its room");
	check(k == 0, "the pipeline gives every reply");
	check(pipeline_ops.owes(f->session) == 0, "every request answered");
}

static void feed_input(struct feed *f, int eof)
{
	struct session_step st;
	do {
		memset(&st, 0, sizeof(st));
		cur = f;
		pipeline_ops.input(f->session, f->in, eof, &st);
		cur = NULL;
		check(!st.fail, "the pipeline ran out of memory");
		feed_flush(f);
	} while (st.pause && !st.close);
	if (st.close)
		f->stopped = 1;
}

static void feed(struct feed *f, const char *p, size_t n)
{
	if (f->stopped || n == 0)
		return;
	check(evbuffer_add(f->in, p, n) == 0, "out of memory");
	f->fed += n;
	feed_input(f, 0);
}

static void feed_eof(struct feed *f)
{
	uint64_t left = f->stopped ? 0 : evbuffer_get_length(f->in);
	if (!f->stopped)
		feed_input(f, 1);
	check(f->stopped, "a client's end closes");
	log_u64(&f->log, left);
	pipeline_ops.free(f->session);
	evbuffer_free(f->in);
}

void fuzz_run(size_t max_line, const void *state, size_t state_size, const char *s, size_t n,
	      uint32_t rnd)
{
	/* each feed starts from a copy of the harness's connection state */
	fuzz_frontend.session = &pipeline_ops;
	fuzz_frontend.proto = fuzz_proto;
	fuzz_frontend.state_size = state_size;
	fuzz_frontend.state_init = state_size ? state_copy : NULL;
	state_template = state;
	feed_cfg.max_line = max_line;

	struct conn whole = {.max_line = max_line, .state_size = state_size};
	if (state_size) {
		whole.state = malloc(state_size);
		check(whole.state != NULL, "out of memory");
		memcpy(whole.state, state, state_size);
	}
	conn_feed(&whole, s, n);
	conn_eof(&whole);
	free(whole.state);

	struct feed bytes;
	feed_start(&bytes);
	for (size_t i = 0; i < n; i++)
		feed(&bytes, s + i, 1);
	feed_eof(&bytes);

	struct feed chunks;
	feed_start(&chunks);
	for (size_t i = 0; i < n;) {
		rnd = rnd * 1103515245u + 12345u;
		size_t k = 1 + (rnd >> 16) % 97;
		if (k > n - i)
			k = n - i;
		feed(&chunks, s + i, k);
		i += k;
	}
	feed_eof(&chunks);

	log_same(&whole.log, &bytes.log, "one write and byte-by-byte (the pipeline) differ");
	log_same(&whole.log, &chunks.log, "one write and random chunks (the pipeline) differ");
	free(whole.log.p);
	free(bytes.log.p);
	free(chunks.log.p);
}
