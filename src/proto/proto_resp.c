/*
 * proto_resp.c - RESP framer, parser and reply formatter; pure: no I/O, no
 * allocation. A request is an array of bulk strings
 * ("*3\r\n$5\r\nALLOW\r\n$5\r\ndavid\r\n$5\r\nreply\r\n"); a decision is an
 * array of five integers. Besides ALLOW, PEEK, RESET, PING, QUIT and
 * redis-cell's CL.THROTTLE (when the configuration allows it), it
 * answers what Redis clients send when they connect (HELLO, CLIENT
 * SETNAME, SELECT 0, AUTH, INFO, COMMAND) the way they can handle.
 * HELLO 2 or 3 (with AUTH, an identity's proof) gets Redis's map of the
 * server and switches the replies that follow to that version: RESP3
 * differs only where Redis's replies do (maps, INFO's verbatim string);
 * decisions and errors are the same in both. MULTI is refused, and so is
 * everything up to its EXEC or DISCARD, so nothing queued is charged.
 */
#include "proto_resp.h"

#include <string.h>

#include "cmd_table.h"
#include "decimal.h"
#include "keys.h"
#include "lease.h"

/* The protocol's own replies (PROTO_LOCAL, cmd_result.local). */
enum resp_local {
	RESP_LOCAL_OK,		  /* CLIENT SETNAME/SETINFO, SELECT 0, DISCARD */
	RESP_LOCAL_NOPROTO,	  /* HELLO n, n not 2 or 3 */
	RESP_LOCAL_INFO,	  /* INFO: what a client's ready check reads */
	RESP_LOCAL_EMPTY_ARRAY,	  /* COMMAND: nothing to tell */
	RESP_LOCAL_EMPTY_MAP,	  /* COMMAND DOCS, CONFIG GET: nothing to tell */
	RESP_LOCAL_DB_RANGE,	  /* SELECT n, n != 0 */
	RESP_LOCAL_HELLO,	  /* HELLO [2|3]: the server's map */
	RESP_LOCAL_HELLO_VERSION, /* HELLO x: not a version number */
};

/* cmd_result.tag: a CL.THROTTLE, answered in redis-cell's shape; with a
 * quantity of 0 (a look that never limits). */
#define TAG_THROTTLE 1
#define TAG_THROTTLE_PEEK 2
/* an AUTH sent inside HELLO: its OK is HELLO's map */
#define TAG_HELLO 4
/* a HELLO that asked for a version: once answered with its map, the
 * connection's later replies are in it */
#define TAG_PROTO2 8
#define TAG_PROTO3 16
/* EXEC after a refused MULTI: Redis's EXECABORT, which clients know */
#define TAG_EXECABORT 32

/* Longest "*<n>\r\n" or "$<n>\r\n" header we read: a sign, 10 digits, CRLF. */
#define HEADER_MAX 14

#define INFO_TEXT                                                                            \
	"# Server\r\nratelimitd_version:" RATELIMITD_VERSION "\r\nredis_mode:standalone\r\n" \
	"loading:0\r\n"

/* HELLO's map (Redis's keys): a RESP3 map, or flat as RESP2 has it; no
 * client id here */
#define HELLO_HEAD2 "*14\r\n"
#define HELLO_HEAD3 "%7\r\n"
#define HELLO_SERVER "$6\r\nserver\r\n$10\r\nratelimitd\r\n$7\r\nversion\r\n"
#define HELLO_PROTO "$5\r\nproto\r\n:"
#define HELLO_TAIL                                                                                \
	"\r\n$2\r\nid\r\n:0\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n" \
	"$7\r\nmodules\r\n*0\r\n"

static const char *const local_replies[] = {
	[RESP_LOCAL_OK] = "+OK\r\n",
	[RESP_LOCAL_NOPROTO] = "-NOPROTO sorry, this protocol version is not supported\r\n",
	[RESP_LOCAL_INFO] = NULL, /* a bulk or verbatim string, formatted below */
	[RESP_LOCAL_EMPTY_ARRAY] = "*0\r\n",
	[RESP_LOCAL_EMPTY_MAP] = NULL, /* by version, below */
	[RESP_LOCAL_DB_RANGE] = "-ERR DB index is out of range\r\n",
	[RESP_LOCAL_HELLO] = NULL, /* HELLO_TEXT */
	[RESP_LOCAL_HELLO_VERSION] = "-ERR Protocol version is not an integer or out of range\r\n",
};

static enum proto_step fatal(struct proto_parsed *out, enum cmd_error code, const char *msg)
{
	out->used = 0;
	out->err.code = code;
	out->err.msg = msg;
	return PROTO_FATAL;
}

static enum proto_step bad(struct proto_parsed *out, enum cmd_error code, const char *msg)
{
	out->err.code = code;
	out->err.msg = msg;
	return PROTO_BAD;
}

static enum proto_step local(struct proto_parsed *out, enum resp_local which)
{
	out->local = which;
	return PROTO_LOCAL;
}

/*
 * Reads "<type><integer>\r\n" at buf[*pos]. Returns 1 with *v, 0 when the
 * CRLF is not there yet, -1 when malformed.
 */
static int read_header(const char *buf, size_t len, size_t *pos, char type, long long *v)
{
	size_t i = *pos;
	if (i >= len)
		return 0;
	if (buf[i] != type)
		return -1;
	i++;
	int neg = 0;
	if (i < len && buf[i] == '-') {
		neg = 1;
		i++;
	}
	long long n = 0;
	size_t digits = 0;
	while (i < len && buf[i] >= '0' && buf[i] <= '9') {
		if (++digits > 10)
			return -1;
		n = n * 10 + (buf[i] - '0');
		i++;
	}
	if (i >= len)
		return i - *pos > HEADER_MAX ? -1 : 0;
	if (!digits || buf[i] != '\r')
		return -1;
	if (i + 1 >= len)
		return 0;
	if (buf[i + 1] != '\n')
		return -1;
	*pos = i + 2;
	*v = neg ? -n : n;
	return 1;
}

/* A non-negative decimal integer below 10^18; -1 otherwise. */
static int64_t nonneg(const char *s, size_t len)
{
	int64_t v;
	return decimal_parse(s, len, 999999999999999999LL, &v) < 0 ? -1 : v;
}

/* CL.THROTTLE <key> <max_burst> <count> <period> [<quantity>] */
static enum proto_step throttle(const char *const *arg, const size_t *alen, int n,
				struct proto_parsed *out)
{
	struct cmd_request *req = &out->req;
	req->verb = CMD_THROTTLE;
	if (n < 5 || n > 6)
		return bad(out, CMD_ERR_SYNTAX,
			   "usage: CL.THROTTLE <key> <max_burst> <count> <period> [<quantity>]");
	req->max_burst = nonneg(arg[2], alen[2]);
	req->count = nonneg(arg[3], alen[3]);
	req->period_s = nonneg(arg[4], alen[4]);
	req->cost = n == 6 ? nonneg(arg[5], alen[5]) : 1;
	if (req->max_burst < 0 || req->count < 0 || req->period_s < 0)
		return bad(out, CMD_ERR_SYNTAX, "max_burst, count and period are integers");
	if (req->cost < 0 || req->cost > CMD_COST_MAX)
		return bad(out, CMD_ERR_BAD_COST,
			   "quantity must be an integer from 0 to 2147483647");
	out->tag = TAG_THROTTLE | (req->cost == 0 ? TAG_THROTTLE_PEEK : 0);
	if (alen[1] == 0)
		return bad(out, CMD_ERR_BAD_USER, "key is empty");
	if (alen[1] > KEYS_USER_MAX)
		return bad(out, CMD_ERR_BAD_USER, "key is longer than 512 bytes");
	req->user = arg[1];
	req->user_len = alen[1];
	return PROTO_REQUEST;
}

/*
 * HELLO [<protover> [AUTH <user> <token>] [SETNAME <name>]], as Redis 6
 * takes it. A version other than 2 or 3 gets NOPROTO before its AUTH is
 * looked at, as Redis answers it. An AUTH becomes the AUTH request,
 * answered with the map once it succeeds (and only then does the version
 * change: a failed AUTH leaves it); the name is not kept.
 */
static enum proto_step hello(const char *const *arg, const size_t *alen, int n,
			     struct proto_parsed *out)
{
	if (n == 1)
		return local(out, RESP_LOCAL_HELLO);
	int64_t ver = nonneg(arg[1], alen[1]);
	if (ver < 0)
		return local(out, RESP_LOCAL_HELLO_VERSION);
	if (ver != 2 && ver != 3)
		return local(out, RESP_LOCAL_NOPROTO);
	out->tag = ver == 3 ? TAG_PROTO3 : TAG_PROTO2;
	struct cmd_request *req = &out->req;
	for (int i = 2; i < n; i++) {
		if (proto_word_is(arg[i], alen[i], "AUTH") && i + 2 < n && !req->token) {
			if (alen[i + 2] == 0) /* no identity has an empty token */
				return bad(out, CMD_ERR_SYNTAX, "AUTH's token is empty");
			req->verb = CMD_AUTH;
			req->token = arg[i + 2];
			req->token_len = alen[i + 2];
			i += 2;
		} else if (proto_word_is(arg[i], alen[i], "SETNAME") && i + 1 < n) {
			i++;
		} else {
			out->tag = 0;
			return bad(out, CMD_ERR_SYNTAX,
				   "usage: HELLO [2|3 [AUTH <identity> <token>] [SETNAME <name>]]");
		}
	}
	if (!req->token)
		return local(out, RESP_LOCAL_HELLO);
	out->tag |= TAG_HELLO;
	return PROTO_REQUEST;
}

/*
 * MULTI, EXEC, DISCARD, and what comes between: 1 when arg[0] is none of
 * them and no MULTI is open, else the step. A transaction would make a
 * client believe several decisions are one; here each decision is atomic
 * on its own, so MULTI is refused with the way out, and what follows it
 * is refused (not run, nothing charged) until EXEC or DISCARD, which end
 * it, so a client that sent MULTI, its commands and EXEC in one write
 * (redis-py's default pipeline) gets errors for all and a charge for none.
 * Without state (no connection) each is refused alone.
 */
static int multi(const char *const *arg, const size_t *alen, struct proto_resp_conn *rc,
		 struct proto_parsed *out, enum proto_step *step)
{
	int open = rc && rc->in_multi;
	if (proto_word_is(arg[0], alen[0], "MULTI")) {
		if (open) {
			*step = bad(out, CMD_ERR_SYNTAX, "MULTI calls can not be nested");
			return 0;
		}
		if (rc)
			rc->in_multi = 1;
		*step = bad(out, CMD_ERR_UNKNOWN_COMMAND,
			    "MULTI is not supported: each decision is atomic on its own; send "
			    "them without MULTI (redis-py: pipeline(transaction=False)); "
			    "nothing is run until EXEC or DISCARD");
		return 0;
	}
	if (proto_word_is(arg[0], alen[0], "EXEC")) {
		if (!open) {
			*step = bad(out, CMD_ERR_SYNTAX, "EXEC without MULTI");
			return 0;
		}
		rc->in_multi = 0;
		out->tag = TAG_EXECABORT;
		*step = bad(out, CMD_ERR_UNKNOWN_COMMAND,
			    "Transaction discarded: MULTI is not supported; nothing was run");
		return 0;
	}
	if (proto_word_is(arg[0], alen[0], "DISCARD")) {
		if (!open) {
			*step = bad(out, CMD_ERR_SYNTAX, "DISCARD without MULTI");
			return 0;
		}
		rc->in_multi = 0;
		*step = local(out, RESP_LOCAL_OK);
		return 0;
	}
	if (open && !proto_word_is(arg[0], alen[0], "QUIT")) {
		*step = bad(out, CMD_ERR_UNKNOWN_COMMAND,
			    "not run: after MULTI, which is not supported; nothing is run until "
			    "EXEC or DISCARD");
		return 0;
	}
	return 1;
}

/* What the command in args means. */
static enum proto_step command(const char *const *arg, const size_t *alen, int n,
			       struct proto_resp_conn *rc, struct proto_parsed *out)
{
	struct cmd_request *req = &out->req;
	memset(req, 0, sizeof(*req));
	req->cost = 1;
	enum proto_step step;
	if (multi(arg, alen, rc, out, &step) == 0)
		return step;
	if (proto_word_is(arg[0], alen[0], "CL.THROTTLE"))
		return throttle(arg, alen, n, out);
	if (proto_word_is(arg[0], alen[0], "HELLO"))
		return hello(arg, alen, n, out);
	if (proto_word_is(arg[0], alen[0], "CLIENT")) {
		if (n >= 2 && (proto_word_is(arg[1], alen[1], "SETNAME") ||
			       proto_word_is(arg[1], alen[1], "SETINFO")))
			return local(out, RESP_LOCAL_OK);
		return bad(out, CMD_ERR_UNKNOWN_COMMAND, "CLIENT takes only SETNAME and SETINFO");
	}
	if (proto_word_is(arg[0], alen[0], "SELECT")) {
		if (n != 2)
			return bad(out, CMD_ERR_SYNTAX, "usage: SELECT 0");
		return local(out, alen[1] == 1 && arg[1][0] == '0' ? RESP_LOCAL_OK
								   : RESP_LOCAL_DB_RANGE);
	}
	if (proto_word_is(arg[0], alen[0], "INFO"))
		return local(out, RESP_LOCAL_INFO);
	if (proto_word_is(arg[0], alen[0], "COMMAND"))
		return local(out, n >= 2 && proto_word_is(arg[1], alen[1], "DOCS")
					  ? RESP_LOCAL_EMPTY_MAP
					  : RESP_LOCAL_EMPTY_ARRAY);
	if (proto_word_is(arg[0], alen[0], "CONFIG") && n >= 2 &&
	    proto_word_is(arg[1], alen[1], "GET"))
		return local(out, RESP_LOCAL_EMPTY_MAP); /* no Redis parameter here */
	/* the verbs of the table, read as the line protocol reads them */
	return proto_parse_verb(arg, alen, n, CMD_ON_RESP, req, &out->err) < 0 ? PROTO_BAD
									       : PROTO_REQUEST;
}

static enum proto_step resp_parse(const char *buf, size_t len, size_t max_line, void *state,
				  struct proto_parsed *out)
{
	/* Beyond this the request cannot be whole: the caller shows no more. */
	int window_full = len >= max_line + 2;
	size_t pos = 0;
	long long n;
	int r = read_header(buf, len, &pos, '*', &n);
	if (r < 0)
		return fatal(out, CMD_ERR_SYNTAX,
			     "Protocol error: expected an array of bulk strings");
	if (r == 0)
		goto more;
	if (n <= 0) { /* an empty or null array is no request (as in Redis) */
		out->used = pos;
		return PROTO_SKIP;
	}
	if (n > PROTO_RESP_ARGS_MAX)
		return fatal(out, CMD_ERR_SYNTAX, "Protocol error: too many arguments");
	const char *arg[PROTO_RESP_ARGS_MAX];
	size_t alen[PROTO_RESP_ARGS_MAX];
	for (int i = 0; i < n; i++) {
		long long bl;
		r = read_header(buf, len, &pos, '$', &bl);
		if (r < 0)
			return fatal(out, CMD_ERR_SYNTAX, "Protocol error: expected a bulk string");
		if (r == 0)
			goto more;
		if (bl < 0 || (unsigned long long)bl > max_line)
			return fatal(out, bl < 0 ? CMD_ERR_SYNTAX : CMD_ERR_LINE_TOO_LONG,
				     bl < 0 ? "Protocol error: invalid bulk length"
					    : "request exceeds max_line");
		if (len - pos < (size_t)bl + 2)
			goto more;
		if (buf[pos + (size_t)bl] != '\r' || buf[pos + (size_t)bl + 1] != '\n')
			return fatal(out, CMD_ERR_SYNTAX,
				     "Protocol error: bulk string without CRLF");
		arg[i] = buf + pos;
		alen[i] = (size_t)bl;
		pos += (size_t)bl + 2;
	}
	out->used = pos;
	return command(arg, alen, (int)n, state, out);
more:
	if (window_full)
		return fatal(out, CMD_ERR_LINE_TOO_LONG, "request exceeds max_line");
	return PROTO_NEED_MORE;
}

static size_t put(char *buf, size_t n, const char *s, size_t len)
{
	memcpy(buf + n, s, len);
	return n + len;
}

static size_t put_int_line(char *buf, size_t n, char type, int64_t v)
{
	buf[n++] = type;
	n += proto_put_int(buf + n, v);
	buf[n++] = '\r';
	buf[n++] = '\n';
	return n;
}

/* An error message cannot hold CR or LF in RESP. */
static size_t put_text(char *buf, size_t n, const char *s, size_t cap)
{
	for (; *s && n < cap; s++)
		buf[n++] = *s == '\r' || *s == '\n' ? ' ' : *s;
	return n;
}

/* a STATE's map of eight limits (an OVERRIDES item: a user (512), an
 * action (64), a spec (256), headers) */
#define REPLY_MAX 4096
_Static_assert(REPLY_MAX > 4 + 5 * 23 + 8 + LEASE_ID_MAX, "a lease's reply fits");

/* A bulk string of a NUL-terminated word. */
static size_t put_bulk(char *buf, size_t n, const char *s)
{
	size_t len = strlen(s);
	n = put_int_line(buf, n, '$', (int64_t)len);
	n = put(buf, n, s, len);
	return put(buf, n, "\r\n", 2);
}

/* A map's key (RESP3) before its value; nothing in RESP2's arrays. */
static size_t put_key(char *buf, size_t n, int resp3, const char *key)
{
	return resp3 ? put_bulk(buf, n, key) : n;
}

/*
 * STATE: RESP3 a map {algorithm, override, ban_ms, limits}, each limit a
 * map {window_ms, limit, used, remaining, reset_ms, start_ms, end_ms[,
 * calendar]}; RESP2 the same values as arrays, a limit's seven integers
 * in that order.
 */
static size_t state_reply(char *buf, const struct cmd_state *st, int resp3)
{
	static const char *const keys[7] = {"window_ms", "limit",    "used",  "remaining",
					    "reset_ms",	 "start_ms", "end_ms"};
	size_t n = put(buf, 0, resp3 ? "%4\r\n" : "*4\r\n", 4);
	n = put_key(buf, n, resp3, "algorithm");
	n = put_bulk(buf, n, policy_algo_name(st->algo));
	n = put_key(buf, n, resp3, "override");
	n = put_bulk(buf, n, proto_state_override_name(st->override));
	n = put_key(buf, n, resp3, "ban_ms");
	n = put_int_line(buf, n, ':', st->ban_ms);
	n = put_key(buf, n, resp3, "limits");
	int nl = st->nlimits < POLICY_MAX_LIMITS ? st->nlimits : POLICY_MAX_LIMITS;
	n = put_int_line(buf, n, '*', nl);
	for (int i = 0; i < nl; i++) {
		const struct cmd_state_limit *l = &st->limits[i];
		int cal = resp3 && l->calendar != CALENDAR_NONE;
		int64_t v[7] = {l->window_ms, l->limit,	   l->used,  l->remaining,
				l->reset_ms,  l->start_ms, l->end_ms};
		n = put_int_line(buf, n, resp3 ? '%' : '*', 7 + cal);
		for (int j = 0; j < 7; j++) {
			n = put_key(buf, n, resp3, keys[j]);
			n = put_int_line(buf, n, ':', v[j]);
		}
		if (cal) {
			n = put_key(buf, n, resp3, "calendar");
			n = put_bulk(buf, n, calendar_unit_name(l->calendar));
		}
	}
	return n;
}
_Static_assert(REPLY_MAX > 4 + 4 * 40 + 8 + POLICY_MAX_LIMITS * (4 + 8 * (16 + 23) + 16),
	       "STATE's reply fits");

/*
 * redis-cell's reply: [limited, limit, remaining, retry_after_s,
 * reset_after_s], the times in whole seconds cut toward zero as its
 * num_seconds() does, retry_after -1 unless limited. A fallback's -1 stays.
 */
static size_t throttle_reply(char *buf, size_t n, const struct cmd_result *res)
{
	int limited = !res->allowed && !(res->tag & TAG_THROTTLE_PEEK);
	n = put_int_line(buf, n, ':', limited);
	n = put_int_line(buf, n, ':', res->limit);
	n = put_int_line(buf, n, ':', res->remaining);
	n = put_int_line(buf, n, ':',
			 limited && res->retry_after_ms >= 0 ? res->retry_after_ms / 1000 : -1);
	return put_int_line(buf, n, ':', res->reset_ms >= 0 ? res->reset_ms / 1000 : -1);
}

static size_t hello_reply(char *buf, int resp3)
{
	size_t n = resp3 ? put(buf, 0, HELLO_HEAD3, sizeof(HELLO_HEAD3) - 1)
			 : put(buf, 0, HELLO_HEAD2, sizeof(HELLO_HEAD2) - 1);
	n = put(buf, n, HELLO_SERVER, sizeof(HELLO_SERVER) - 1);
	n = put_int_line(buf, n, '$', (int64_t)(sizeof(RATELIMITD_VERSION) - 1));
	n = put(buf, n, RATELIMITD_VERSION "\r\n", sizeof(RATELIMITD_VERSION) + 1);
	n = put(buf, n, HELLO_PROTO, sizeof(HELLO_PROTO) - 1);
	buf[n++] = resp3 ? '3' : '2';
	return put(buf, n, HELLO_TAIL, sizeof(HELLO_TAIL) - 1);
}

/* HELLO's map, after which the connection speaks the version it asked for
 * (HELLO alone: the one it speaks). */
static size_t hello_switch(char *buf, const struct cmd_result *res, struct proto_resp_conn *rc)
{
	int resp3 = rc && rc->resp3;
	if (res->tag & (TAG_PROTO2 | TAG_PROTO3))
		resp3 = (res->tag & TAG_PROTO3) != 0;
	if (rc)
		rc->resp3 = resp3;
	return hello_reply(buf, resp3);
}

/* INFO's text: a bulk string, or RESP3's verbatim string as Redis sends it. */
static size_t info_reply(char *buf, int resp3)
{
	size_t n;
	if (resp3) {
		n = put_int_line(buf, 0, '=', (int64_t)(sizeof(INFO_TEXT) - 1 + 4));
		n = put(buf, n, "txt:", 4);
	} else {
		n = put_int_line(buf, 0, '$', (int64_t)(sizeof(INFO_TEXT) - 1));
	}
	n = put(buf, n, INFO_TEXT, sizeof(INFO_TEXT) - 1);
	return put(buf, n, "\r\n", 2);
}

static size_t resp_format(char *buf, const struct cmd_result *res, void *state)
{
	struct proto_resp_conn *rc = state;
	int resp3 = rc && rc->resp3;
	size_t n = 0;
	switch (res->kind) {
	case CMD_REPLY_DECISION:
		if (res->tag & TAG_THROTTLE)
			return throttle_reply(buf, put(buf, n, "*5\r\n", 4), res);
		/* MALLOW and MPEEK: a sixth integer, the deciding pair */
		n = put(buf, n, res->multi ? "*6\r\n" : "*5\r\n", 4);
		n = put_int_line(buf, n, ':', res->allowed ? 1 : 0);
		n = put_int_line(buf, n, ':', res->limit);
		n = put_int_line(buf, n, ':', res->remaining);
		n = put_int_line(buf, n, ':', res->retry_after_ms);
		n = put_int_line(buf, n, ':', res->reset_ms);
		return res->multi ? put_int_line(buf, n, ':', res->pair) : n;
	case CMD_REPLY_LEASE: /* ACQUIRE, RENEW: a decision, then the lease's id */
		n = put(buf, n, "*6\r\n", 4);
		n = put_int_line(buf, n, ':', res->allowed ? 1 : 0);
		n = put_int_line(buf, n, ':', res->limit);
		n = put_int_line(buf, n, ':', res->remaining);
		n = put_int_line(buf, n, ':', res->retry_after_ms);
		n = put_int_line(buf, n, ':', res->reset_ms);
		n = put_int_line(buf, n, '$', res->item ? (int64_t)res->item->ulen : 0);
		if (res->item)
			n = put(buf, n, res->item->text, res->item->ulen);
		return put(buf, n, "\r\n", 2);
	case CMD_REPLY_ITEM: /* [index, user, action, spec, ttl_ms]; the end: [] */
		if (!res->item)
			return put(buf, n, "*0\r\n", 4);
		n = put(buf, n, "*5\r\n", 4);
		n = put_int_line(buf, n, ':', res->item->index);
		{
			const char *t = res->item->text;
			size_t parts[3] = {res->item->ulen, res->item->alen, res->item->spec_len};
			for (int i = 0; i < 3; i++) {
				n = put_int_line(buf, n, '$', (int64_t)parts[i]);
				n = put(buf, n, t, parts[i]);
				n = put(buf, n, "\r\n", 2);
				t += parts[i];
			}
		}
		return put_int_line(buf, n, ':', res->item->ttl_ms);
	case CMD_REPLY_TOP: /* [index, user, denied, requests, over, cut]; the end:
			     [count, requests, denied] */
		if (!res->item) {
			n = put(buf, n, "*3\r\n", 4);
			n = put_int_line(buf, n, ':', res->limit);
			n = put_int_line(buf, n, ':', res->remaining);
			return put_int_line(buf, n, ':', res->retry_after_ms);
		}
		n = put(buf, n, "*6\r\n", 4);
		n = put_int_line(buf, n, ':', res->item->index);
		n = put_int_line(buf, n, '$', (int64_t)res->item->ulen);
		n = put(buf, n, res->item->text, res->item->ulen);
		n = put(buf, n, "\r\n", 2);
		n = put_int_line(buf, n, ':', res->item->denied);
		n = put_int_line(buf, n, ':', res->item->requests);
		n = put_int_line(buf, n, ':', res->item->over);
		return put_int_line(buf, n, ':', (int64_t)res->item->cut);
	case CMD_REPLY_STATE:
		if (res->state)
			return state_reply(buf, res->state, resp3);
		break;
	case CMD_REPLY_OK:
		if (res->tag & TAG_HELLO)
			return hello_switch(buf, res, rc);
		return put(buf, n, "+OK\r\n", 5);
	case CMD_REPLY_BYE:
		return put(buf, n, "+OK\r\n", 5);
	case CMD_REPLY_PONG:
		return put(buf, n, "+PONG\r\n", 7);
	case CMD_REPLY_LOCAL:
		if (res->local == RESP_LOCAL_INFO)
			return info_reply(buf, resp3);
		if (res->local == RESP_LOCAL_HELLO)
			return hello_switch(buf, res, rc);
		if (res->local == RESP_LOCAL_EMPTY_MAP)
			return put(buf, n, resp3 ? "%0\r\n" : "*0\r\n", 4);
		if ((unsigned)res->local < sizeof(local_replies) / sizeof(local_replies[0])) {
			const char *s = local_replies[res->local];
			if (s)
				return put(buf, n, s, strlen(s));
		}
		break;
	case CMD_REPLY_ERROR:
		break;
	}
	size_t cap = REPLY_MAX - 2;
	/* AUTH to a daemon without identities: Redis's own words, which
	 * clients (ioredis) recognise and go on */
	if (res->kind == CMD_REPLY_ERROR && res->error == CMD_ERR_AUTH_FAILED &&
	    strncmp(res->msg, CMD_AUTH_NO_IDENTITIES, sizeof(CMD_AUTH_NO_IDENTITIES) - 1) == 0) {
		n = put_text(buf, 0, "-ERR ", cap);
		n = put_text(buf, n, res->msg, cap);
		return put(buf, n, "\r\n", 2);
	}
	if (res->kind == CMD_REPLY_ERROR && (res->tag & TAG_EXECABORT)) {
		n = put_text(buf, 0, "-EXECABORT ", cap);
		n = put_text(buf, n, res->msg, cap);
		return put(buf, n, "\r\n", 2);
	}
	/* the prefixes Redis clients know: they raise an authentication error */
	if (res->kind == CMD_REPLY_ERROR &&
	    (res->error == CMD_ERR_NOAUTH || res->error == CMD_ERR_AUTH_FAILED)) {
		n = put_text(buf, 0, res->error == CMD_ERR_NOAUTH ? "-NOAUTH " : "-WRONGPASS ",
			     cap);
		n = put_text(buf, n, res->msg, cap);
		return put(buf, n, "\r\n", 2);
	}
	n = put_text(buf, 0, "-ERR ", cap);
	n = put_text(buf, n, res->kind == CMD_REPLY_ERROR ? proto_error_code(res->error) : "syntax",
		     cap);
	n = put_text(buf, n, " ", cap);
	n = put_text(buf, n, res->kind == CMD_REPLY_ERROR ? res->msg : "no such reply", cap);
	return put(buf, n, "\r\n", 2);
}

const struct proto proto_resp = {
	.name = "resp",
	.reply_max = REPLY_MAX,
	.parse = resp_parse,
	.format = resp_format,
};
