/*
 * proto_spoe.c - the SPOE agent's step and reply formatter (proto_spoe.h);
 * pure: no I/O, no allocation. A frame is one step: the HELLO and a
 * DISCONNECT are answered by the protocol itself (PROTO_LOCAL), a NOTIFY is
 * a request, and anything the agent cannot go on from is PROTO_FATAL,
 * answered by an AGENT-DISCONNECT with SPOP's status code.
 */
#include "proto_spoe.h"

#include <string.h>
#include <sys/socket.h>

#include "addr.h"
#include "spop.h"

/* What a reply is, kept in the request's tag: the low byte the kind, the
 * next a DISCONNECT's status code. A tag of 0 is a result from outside the
 * step (request_timeout, a refusal): a DISCONNECT. */
enum spoe_tag {
	TAG_ACK = 1, /* pops the FIFO's ids */
	TAG_BYE = 2, /* an AGENT-DISCONNECT, its status in the next byte */
};
#define TAG_STATUS_SHIFT 8

/* The protocol's own replies (PROTO_LOCAL). */
enum spoe_local {
	LOCAL_HELLO = 1, /* AGENT-HELLO */
	LOCAL_BYE,	 /* AGENT-DISCONNECT, status 0: HAProxy said goodbye */
	LOCAL_ACK,	 /* an ACK setting nothing (a NOTIFY with no message) */
	LOCAL_IDLE,	 /* AGENT-DISCONNECT, status 2: closed for idle_timeout */
};

/* The message a NOTIFY carries for us. */
#define SPOE_MESSAGE "ratelimit"

static uint32_t max_frame_of(const struct spoe_conn *sc)
{
	return sc && sc->max_frame ? sc->max_frame : SPOP_FRAME_MAX;
}

static enum proto_step fatal(struct proto_parsed *out, enum spop_status status, const char *msg)
{
	out->err.code = CMD_ERR_SYNTAX;
	out->err.msg = msg;
	out->tag = TAG_BYE | (int)status << TAG_STATUS_SHIFT;
	out->close_after = 1;
	return PROTO_FATAL;
}

static int name_is(const char *s, size_t len, const char *name)
{
	return len == strlen(name) && memcmp(s, name, len) == 0;
}

/* HAPROXY-HELLO: SPOP 2 among its versions, its frame size, its
 * capabilities. */
static enum proto_step hello(struct spoe_conn *sc, const struct spop_frame *f,
			     struct proto_parsed *out)
{
	struct spop_cursor c = {f->payload, f->payload + f->payload_len};
	int has_vsn = 0, v2 = 0, has_cap = 0, health = 0, k;
	uint64_t max = 0;
	const char *name;
	size_t nlen;
	struct spop_value v;
	while ((k = spop_kv_next(&c, &name, &nlen, &v)) == 1) {
		if (name_is(name, nlen, "supported-versions") && v.type == SPOP_STRING) {
			has_vsn = 1;
			/* a major version names all its minor ones: 2.0 is ours */
			for (size_t i = 0; i + 1 < v.len && !v2; i++)
				v2 = v.str[i] == '2' && v.str[i + 1] == '.' &&
				     (i == 0 || v.str[i - 1] == ',' || v.str[i - 1] == ' ');
		} else if (name_is(name, nlen, "max-frame-size") &&
			   (v.type == SPOP_UINT32 || v.type == SPOP_UINT64 ||
			    v.type == SPOP_INT32 || v.type == SPOP_INT64)) {
			max = v.u ? v.u : 1; /* a size that is no size is too small */
		} else if (name_is(name, nlen, "capabilities") && v.type == SPOP_STRING) {
			has_cap = 1;
		} else if (name_is(name, nlen, "healthcheck") && v.type == SPOP_BOOL) {
			health = v.boolean;
		}
	}
	if (k < 0)
		return fatal(out, SPOP_ST_INVALID, "a HAPROXY-HELLO whose KV-LIST is malformed");
	if (!has_vsn)
		return fatal(out, SPOP_ST_NO_VSN, "a HAPROXY-HELLO without supported-versions");
	if (!v2)
		return fatal(out, SPOP_ST_BAD_VSN, "ratelimitd speaks SPOP 2.0 only");
	if (!max)
		return fatal(out, SPOP_ST_NO_FRAME_SIZE, "a HAPROXY-HELLO without max-frame-size");
	if (max < SPOP_FRAME_MIN)
		return fatal(out, SPOP_ST_BAD_FRAME_SIZE, "max-frame-size is below 256");
	if (!has_cap)
		return fatal(out, SPOP_ST_NO_CAP, "a HAPROXY-HELLO without capabilities");
	sc->hello = 1;
	sc->max_frame = max < SPOP_FRAME_MAX ? (uint32_t)max : SPOP_FRAME_MAX;
	out->local = LOCAL_HELLO;
	/* a health check: HELLO answered, the connection closes */
	out->close_after = health;
	return PROTO_LOCAL;
}

/* An unsigned integer in decimal; its length. */
static size_t put_uint(char *p, uint64_t v)
{
	char t[20];
	size_t n = 0, i = 0;
	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		p[i++] = t[--n];
	return i;
}

/* A user of any type HAProxy samples: a string as it is, an address or an
 * integer as text (into room, 48 bytes). 0, or -1 with err. */
static int user_of(const struct spop_value *v, char *room, const char **user, size_t *len,
		   struct proto_error *err)
{
	struct addr_ip ip;
	if (!room && v->type != SPOP_STRING && v->type != SPOP_BINARY)
		v = NULL; /* room is the connection's: none without one */
	switch (v ? v->type : SPOP_NULL) {
	case SPOP_STRING:
	case SPOP_BINARY:
		*user = v->str;
		*len = v->len;
		break;
	case SPOP_IPV4:
	case SPOP_IPV6:
		memset(&ip, 0, sizeof(ip));
		ip.family = v->type == SPOP_IPV4 ? AF_INET : AF_INET6;
		memcpy(ip.bytes, v->ip, v->type == SPOP_IPV4 ? 4 : 16);
		*user = room;
		*len = addr_ip_text(&ip, room, 48);
		break;
	case SPOP_INT32:
	case SPOP_INT64:
		*user = room;
		*len = proto_put_int(room, v->i);
		break;
	case SPOP_UINT32:
	case SPOP_UINT64:
		*user = room;
		*len = put_uint(room, v->u);
		break;
	default:
		err->code = CMD_ERR_BAD_USER;
		err->msg = "user is missing (its sample found nothing)";
		return -1;
	}

	if (*len == 0) {
		err->code = CMD_ERR_BAD_USER;
		err->msg = "user is empty";
		return -1;
	}
	if (*len > KEYS_USER_MAX) {
		err->code = CMD_ERR_BAD_USER;
		err->msg = "user is longer than 512 bytes";
		return -1;
	}
	return 0;
}

/* A cost: an integer, or a string of digits; NULL (its sample found
 * nothing) is no cost. 0, or -1. */
static int cost_of(const struct spop_value *v, int64_t *cost)
{
	switch (v->type) {
	case SPOP_NULL:
		return 0;
	case SPOP_INT32:
	case SPOP_INT64:
	case SPOP_UINT32:
	case SPOP_UINT64:
		if (v->i < 1 || v->i > CMD_COST_MAX)
			return -1;
		*cost = v->i;
		return 0;
	case SPOP_STRING:
	case SPOP_BINARY:
		return proto_parse_cost(v->str, v->len, cost);
	default:
		return -1;
	}
}

static int arg_fail(struct proto_error *err, enum cmd_error code, const char *msg)
{
	err->code = code;
	err->msg = msg;
	return -1;
}

/* The `ratelimit` message's arguments: action and user (the k-th action
 * goes with the k-th user; several pairs are a MALLOW), cost, token. 0 with
 * req filled, or -1 with err. */
static int message_args(struct spoe_conn *sc, struct spop_cursor *args, struct cmd_request *req,
			struct proto_error *err)
{
	int nact = 0, nuser = 0, k;
	const char *name;
	size_t nlen;
	struct spop_value v;
	while ((k = spop_kv_next(args, &name, &nlen, &v)) == 1) {
		if (name_is(name, nlen, "action")) {
			if (nact == CMD_PAIRS_MAX)
				return arg_fail(err, CMD_ERR_SYNTAX, "at most 8 actions");
			if ((v.type != SPOP_STRING && v.type != SPOP_BINARY) || v.len == 0)
				return arg_fail(err, CMD_ERR_SYNTAX, "action must be a string");
			req->pairs[nact].action = v.str;
			req->pairs[nact++].action_len = v.len;
		} else if (name_is(name, nlen, "user")) {
			if (nuser == CMD_PAIRS_MAX)
				return arg_fail(err, CMD_ERR_SYNTAX, "at most 8 users");
			struct cmd_pair *p = &req->pairs[nuser];
			if (user_of(&v, sc ? sc->user[nuser] : NULL, &p->user, &p->user_len, err) <
			    0)
				return -1;
			nuser++;
		} else if (name_is(name, nlen, "cost")) {
			if (cost_of(&v, &req->cost) < 0)
				return arg_fail(err, CMD_ERR_BAD_COST,
						"cost must be an integer from 1 to 2147483647");
		} else if (name_is(name, nlen, "token")) {
			if (v.type == SPOP_STRING || v.type == SPOP_BINARY) {
				req->token = v.str;
				req->token_len = v.len;
			}
		} else {
			return arg_fail(err, CMD_ERR_SYNTAX,
					"an argument other than action, user, cost and token");
		}
	}
	if (k < 0)
		return arg_fail(err, CMD_ERR_SYNTAX, "malformed arguments");
	if (nact == 0)
		return arg_fail(err, CMD_ERR_SYNTAX, "action is missing");
	if (nuser != nact)
		return arg_fail(err, CMD_ERR_BAD_USER, "one user for each action");
	if (nact == 1) {
		req->verb = CMD_ALLOW;
		req->user = req->pairs[0].user;
		req->user_len = req->pairs[0].user_len;
		req->action = req->pairs[0].action;
		req->action_len = req->pairs[0].action_len;
	} else {
		req->verb = CMD_MALLOW;
		req->npairs = nact;
	}
	return 0;
}

/* A NOTIFY: its `ratelimit` message is the request. Its ids are owed an
 * ACK whatever the request's fate. */
static enum proto_step notify(struct spoe_conn *sc, const struct spop_frame *f,
			      struct proto_parsed *out)
{
	if (sc && sc->owed_n == PROTO_SPOE_OWED_MAX)
		return fatal(out, SPOP_ST_RES_ALLOC, "too many NOTIFY frames unanswered");
	if (sc) {
		struct spoe_ids *ids =
			&sc->owed[(sc->owed_head + sc->owed_n) % PROTO_SPOE_OWED_MAX];
		ids->stream_id = f->stream_id;
		ids->frame_id = f->frame_id;
		sc->owed_n++;
	}
	out->tag = TAG_ACK;
	struct spop_cursor c = {f->payload, f->payload + f->payload_len}, args;
	const char *name;
	size_t nlen;
	int nargs, k, found = 0;
	memset(&out->req, 0, sizeof(out->req));
	out->req.cost = 1;
	while ((k = spop_message_next(&c, &name, &nlen, &nargs, &args)) == 1) {
		if (!name_is(name, nlen, SPOE_MESSAGE)) {
			out->err.code = CMD_ERR_SYNTAX;
			out->err.msg = "a message other than ratelimit";
			return PROTO_BAD;
		}
		if (found++) {
			out->err.code = CMD_ERR_SYNTAX;
			out->err.msg = "two ratelimit messages in one NOTIFY";
			return PROTO_BAD;
		}
		if (message_args(sc, &args, &out->req, &out->err) < 0)
			return PROTO_BAD;
	}
	if (k < 0) {
		out->err.code = CMD_ERR_SYNTAX;
		out->err.msg = "malformed messages";
		return PROTO_BAD;
	}
	if (!found) {
		out->local = LOCAL_ACK;
		return PROTO_LOCAL;
	}
	return PROTO_REQUEST;
}

static enum proto_step spoe_parse(const char *buf, size_t len, size_t max_line, void *state,
				  struct proto_parsed *out)
{
	(void)max_line; /* frames are bounded by the size agreed */
	struct spoe_conn *sc = state;
	struct spop_frame f;
	size_t used = 0;
	switch (spop_frame_read((const uint8_t *)buf, len, max_frame_of(sc), &f, &used)) {
	case SPOP_READ_NEED_MORE:
		return PROTO_NEED_MORE;
	case SPOP_READ_TOO_BIG:
		return fatal(out, SPOP_ST_TOO_BIG, "a frame longer than max-frame-size");
	case SPOP_READ_INVALID:
		return fatal(out, SPOP_ST_INVALID, "not an SPOP frame");
	case SPOP_READ_FRAME:
		break;
	}
	out->used = used;
	/* no fragmentation is announced: HAProxy then sends none */
	if (f.type == SPOP_UNSET || !(f.flags & SPOP_FLAG_FIN))
		return fatal(out, SPOP_ST_FRAG_NOT_SUPPORTED,
			     "fragmented frames are not supported");
	int hello_done = sc ? sc->hello : 1;
	switch (f.type) {
	case SPOP_HAPROXY_HELLO:
		if (hello_done)
			return fatal(out, SPOP_ST_INVALID, "a second HAPROXY-HELLO");
		if (!sc) { /* no connection to agree for (a test's reply check) */
			out->local = LOCAL_HELLO;
			return PROTO_LOCAL;
		}
		return hello(sc, &f, out);
	case SPOP_HAPROXY_DISCONNECT:
		out->local = LOCAL_BYE;
		out->close_after = 1;
		return PROTO_LOCAL;
	case SPOP_NOTIFY:
		if (!hello_done)
			return fatal(out, SPOP_ST_INVALID, "a NOTIFY before the HELLO");
		return notify(sc, &f, out);
	case SPOP_AGENT_HELLO:
	case SPOP_AGENT_DISCONNECT:
	case SPOP_ACK:
		return fatal(out, SPOP_ST_INVALID, "an agent's frame sent to the agent");
	default:
		return PROTO_SKIP; /* unknown frames may be skipped (SPOE.txt 3.2.2) */
	}
}

/* ---- replies ---- */

static void set_int(struct spop_writer *w, const char *name, int64_t v)
{
	struct spop_value val = {.type = SPOP_INT64, .i = v};
	spop_put_set_var(w, SPOP_SCOPE_TXN, name, &val);
}

static void set_str(struct spop_writer *w, const char *name, const char *s)
{
	struct spop_value val = {.type = SPOP_STRING, .str = s, .len = strlen(s)};
	spop_put_set_var(w, SPOP_SCOPE_TXN, name, &val);
}

/* The ACK's actions: a decision's variables, or an error's (its message
 * only when full is set). */
static void ack_vars(struct spop_writer *w, const struct cmd_result *r, int full)
{
	if (r->kind == CMD_REPLY_LOCAL)
		return;
	if (r->kind != CMD_REPLY_DECISION) {
		set_str(w, "error",
			r->kind == CMD_REPLY_ERROR ? proto_error_code(r->error) : "other");
		if (full && r->kind == CMD_REPLY_ERROR)
			set_str(w, "message", r->msg);
		return;
	}
	set_int(w, "allowed", r->allowed != 0);
	set_int(w, "limit", r->limit);
	set_int(w, "remaining", r->remaining);
	set_int(w, "retry_after_ms", r->retry_after_ms);
	set_int(w, "reset_ms", r->reset_ms);
	if (r->multi)
		set_int(w, "pair", r->pair);
	if (full && r->action[0]) {
		set_int(w, "window_ms", r->window_ms);
		set_str(w, "policy", r->action);
	}
}

static size_t ack(char *buf, const struct cmd_result *r, struct spoe_conn *sc)
{
	struct spoe_ids ids = {0, 0};
	if (sc && sc->owed_n) {
		ids = sc->owed[sc->owed_head];
		sc->owed_head = (sc->owed_head + 1) % PROTO_SPOE_OWED_MAX;
		sc->owed_n--;
	}
	struct spop_writer w = {(uint8_t *)buf, PROTO_SPOE_REPLY_MAX, 0, 0};
	for (int full = 1; full >= 0; full--) {
		spop_frame_begin(&w, SPOP_ACK, ids.stream_id, ids.frame_id);
		ack_vars(&w, r, full);
		if (spop_frame_end(&w, max_frame_of(sc)) == 0)
			return w.len;
	}
	/* cannot be (the short form fits 256 bytes): an ACK setting nothing */
	spop_frame_begin(&w, SPOP_ACK, ids.stream_id, ids.frame_id);
	spop_frame_end(&w, max_frame_of(sc));
	return w.len;
}

static size_t agent_hello(char *buf, const struct spoe_conn *sc)
{
	struct spop_writer w = {(uint8_t *)buf, PROTO_SPOE_REPLY_MAX, 0, 0};
	spop_frame_begin(&w, SPOP_AGENT_HELLO, 0, 0);
	spop_put_kv_string(&w, "version", "2.0");
	spop_put_kv_uint32(&w, "max-frame-size", max_frame_of(sc));
	/* ACKs come in order, which pipelining allows; no fragmentation, no
	 * async (an ACK on another connection) */
	spop_put_kv_string(&w, "capabilities", "pipelining");
	spop_frame_end(&w, SPOP_FRAME_MAX);
	return w.len;
}

static size_t agent_disconnect(char *buf, unsigned status, const char *msg)
{
	struct spop_writer w = {(uint8_t *)buf, PROTO_SPOE_REPLY_MAX, 0, 0};
	spop_frame_begin(&w, SPOP_AGENT_DISCONNECT, 0, 0);
	spop_put_kv_uint32(&w, "status-code", status);
	spop_put_kv_string(&w, "message", msg);
	spop_frame_end(&w, SPOP_FRAME_MIN); /* fits any size HAProxy agreed to */
	return w.len;
}

/* A DISCONNECT's status for an error from outside the step. */
static unsigned status_of(enum cmd_error e)
{
	switch (e) {
	case CMD_ERR_REQUEST_TIMEOUT:
		return SPOP_ST_TIMEOUT;
	case CMD_ERR_TOO_MANY_CLIENTS:
	case CMD_ERR_OUT_OF_MEMORY:
		return SPOP_ST_RES_ALLOC;
	default:
		return SPOP_ST_INVALID;
	}
}

static size_t spoe_format(char *buf, const struct cmd_result *r, void *state)
{
	struct spoe_conn *sc = state;
	int kind = r->tag & 0xff;
	if (kind == TAG_ACK)
		return ack(buf, r, sc);
	if (r->kind == CMD_REPLY_LOCAL && r->local == LOCAL_HELLO)
		return agent_hello(buf, sc);
	if (r->kind == CMD_REPLY_LOCAL && r->local == LOCAL_BYE)
		return agent_disconnect(buf, SPOP_ST_NONE, "goodbye");
	if (r->kind == CMD_REPLY_LOCAL && r->local == LOCAL_IDLE)
		return agent_disconnect(buf, SPOP_ST_TIMEOUT, "idle for idle_timeout");
	if (r->kind == CMD_REPLY_LOCAL && r->local == LOCAL_ACK)
		return ack(buf, r, sc);
	unsigned status =
		kind == TAG_BYE ? (unsigned)r->tag >> TAG_STATUS_SHIFT : status_of(r->error);
	return agent_disconnect(buf, status, r->kind == CMD_REPLY_ERROR ? r->msg : "error");
}

const struct proto proto_spoe = {
	.name = "spoe",
	.reply_max = PROTO_SPOE_REPLY_MAX,
	.window_min = SPOP_LEN_SIZE + SPOP_FRAME_MAX,
	.names_policy = 1,
	/* SPOE.txt 3.2.3: an agent closes with a DISCONNECT, so that HAProxy
	 * sends no more NOTIFYs on the connection */
	.idle_local = LOCAL_IDLE,
	.parse = spoe_parse,
	.format = spoe_format,
};
