/*
 * proto_http.c - HTTP/1.1 framer, parser and reply formatter; pure: no
 * I/O, no allocation (arguments are decoded into the connection's
 * http_conn). Keep-alive and pipelining come from pipeline.c like for every
 * protocol: replies in request order, backpressure, bounds.
 *
 *   GET|POST /v1/allow?user=U&action=A[&cost=N]  (or a JSON body)
 *   GET|POST /v1/peek?...
 *   GET|POST /v1/state?user=U&action=A          every limit of the pair (STATE)
 *   GET|POST /v1/mallow?user=U1&action=A1&user=U2&action=A2...[&cost=N]
 *   GET|POST /v1/mpeek?...                       (pairs: the i-th user with
 *                                                 the i-th action)
 *   POST     /v1/reset?user=U&action=A           (admin listeners)
 *   POST     /v1/acquire?user=U&action=A[&cost=N] (or a JSON body): a lease
 *   DELETE   /v1/leases/<id>                     RELEASE
 *   POST     /v1/leases/<id>/renew               RENEW
 *   ANY      /auth/<action>[?cost=N]             (forward-auth: the user is
 *                                                 the client, see user_of)
 */
#include "proto_http.h"

#include "cmd_table.h"

#include <stdio.h>
#include <string.h>

#include "lease.h"

/* Where a request came in (cmd_result.tag, low bits). */
enum http_kind { HTTP_API, HTTP_AUTH };

#define TAG_KIND 0x3
#define TAG_LEGACY 0x4
#define TAG_HEAD 0x8 /* a HEAD: the reply's head only (RFC 9110 9.3.2) */
#define TAG_DENY_SHIFT 8

/* Statuses answered without cmd (PROTO_LOCAL: local is the status). */
#define NOT_FOUND 404
#define METHOD_NOT_ALLOWED 405
#define TOO_LARGE 413
#define BAD_REQUEST 400
#define NOT_IMPLEMENTED 501
#define VERSION_NOT_SUPPORTED 505

#define REPLY_MAX 4096
/* a reply's body: what the head and its headers leave (at most 1024) */
#define BODY_MAX (REPLY_MAX - 1024)
/* a decision's JSON (some 130 bytes) and a lease's id fit the body, and a
 * STATE's eight limits (state_body) */
_Static_assert(BODY_MAX > 200 + LEASE_ID_MAX, "a lease's body fits");

static size_t window_of(size_t max_line)
{
	return proto_window(&proto_http, max_line);
}

static int lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

static int name_is(const char *s, size_t len, const char *name)
{
	size_t n = strlen(name);
	if (len != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (lower((unsigned char)s[i]) != lower((unsigned char)name[i]))
			return 0;
	return 1;
}

static int is_tchar(int c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A comma-separated header value holds `token` (any case). */
static int has_token(const char *v, size_t len, const char *token)
{
	size_t i = 0;
	while (i < len) {
		while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		size_t start = i;
		while (i < len && v[i] != ',' && v[i] != ' ' && v[i] != '\t')
			i++;
		if (i > start && name_is(v + start, i - start, token))
			return 1;
	}
	return 0;
}

static enum proto_step bad(struct proto_parsed *out, enum cmd_error code, const char *msg)
{
	out->err.code = code;
	out->err.msg = msg;
	return PROTO_BAD;
}

static enum proto_step local(struct proto_parsed *out, int status, int close_after)
{
	out->local = status;
	out->close_after |= close_after;
	return PROTO_LOCAL;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = lower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decodes s (and '+' as a space) into dst; its length, -1 for a
 * bad escape, -2 when it does not fit in cap. */
static long pct_decode(const char *s, size_t len, char *dst, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		int c = (unsigned char)s[i];
		if (c == '%') {
			if (i + 2 >= len)
				return -1;
			int h = hexval((unsigned char)s[i + 1]),
			    l = hexval((unsigned char)s[i + 2]);
			if (h < 0 || l < 0)
				return -1;
			c = h * 16 + l;
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (n == cap)
			return -2;
		dst[n++] = (char)c;
	}
	return (long)n;
}

/* The arguments of an API request, found in a query string or a JSON body. */
struct args {
	const char *user, *action, *cost, *wait, *actual; /* actual: a settle's, query only */
	size_t user_len, action_len, cost_len, wait_len, actual_len;
	int cost_is_text; /* from a query string: digits as text */
};

/* The next key=value of a query string from *i on: 0 past the end. */
static int query_next(const char *q, size_t len, size_t *i, const char **k, size_t *klen,
		      const char **v, size_t *vlen)
{
	if (*i >= len)
		return 0;
	size_t start = *i;
	while (*i < len && q[*i] != '&')
		(*i)++;
	const char *kv = q + start, *eq = memchr(kv, '=', *i - start);
	*k = kv;
	*klen = eq ? (size_t)(eq - kv) : *i - start;
	*v = eq ? eq + 1 : kv + *klen;
	*vlen = (size_t)(q + *i - *v);
	(*i)++; /* the '&' */
	return 1;
}

/* Our parameters, each at most once in a query: a repeat (cost=1&cost=2)
 * is refused rather than one of its values taken, since which one the
 * caller meant is not ours to guess. The message naming kv when it is one
 * already seen (bit i of *seen for names[i]), else NULL. */
static const char *query_repeat(const char *kv, size_t klen, unsigned *seen)
{
	static const char *const names[] = {"user", "action", "cost", "wait", "actual"};
	static const char *const msgs[] = {
		"user is in the query more than once", "action is in the query more than once",
		"cost is in the query more than once", "wait is in the query more than once",
		"actual is in the query more than once"};
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (name_is(kv, klen, names[i])) {
			if (*seen & 1u << i)
				return msgs[i];
			*seen |= 1u << i;
		}
	return NULL;
}

/* forward_auth: the query may be the client's own (Caddy's forward_auth
 * keeps it when its uri gives only a path), so its user and action are
 * the proxied application's parameters, never ours: the path names the
 * policy, the proxy the user. */
static enum proto_step query_args(const char *q, size_t len, struct http_conn *pc, struct args *a,
				  int forward_auth, struct proto_parsed *out)
{
	size_t i = 0, klen, vlen;
	const char *kv, *v;
	unsigned seen = 0;
	while (query_next(q, len, &i, &kv, &klen, &v, &vlen)) {
		long n;
		int theirs =
			forward_auth && (name_is(kv, klen, "user") || name_is(kv, klen, "action"));
		const char *twice = theirs ? NULL : query_repeat(kv, klen, &seen);
		if (twice)
			return bad(out, CMD_ERR_SYNTAX, twice);
		if (theirs) {
			n = 0;
		} else if (name_is(kv, klen, "user")) {
			n = pct_decode(v, vlen, pc->user, sizeof(pc->user));
			if (n == -2)
				return bad(out, CMD_ERR_BAD_USER, "user is longer than 512 bytes");
			a->user = pc->user;
			a->user_len = (size_t)n;
		} else if (name_is(kv, klen, "action")) {
			n = pct_decode(v, vlen, pc->action, sizeof(pc->action) - 1);
			if (n == -2)
				return bad(out, CMD_ERR_UNKNOWN_ACTION,
					   "no policy for this action");
			a->action = pc->action;
			a->action_len = (size_t)n;
		} else if (name_is(kv, klen, "wait")) {
			a->wait = v;
			a->wait_len = vlen;
			n = 0;
		} else if (name_is(kv, klen, "actual")) {
			a->actual = v;
			a->actual_len = vlen;
			n = 0;
		} else if (name_is(kv, klen, "cost")) {
			a->cost = v;
			a->cost_len = vlen;
			a->cost_is_text = 1;
			n = 0;
		} else {
			n = 0; /* other parameters are the caller's business */
		}
		if (n == -1)
			return bad(out, CMD_ERR_SYNTAX, "bad percent-encoding in the query");
	}
	return PROTO_REQUEST;
}

/* /v1/mallow, /v1/mpeek: user and action parameters paired in order, into
 * the connection's room for pairs. */
static enum proto_step query_pairs(const char *q, size_t len, struct http_conn *pc,
				   struct cmd_request *req, struct proto_parsed *out)
{
	int nu = 0, na = 0;
	const char *cost = NULL, *kv, *v;
	size_t cost_len = 0, i = 0, klen, vlen;
	unsigned seen = 0;
	while (query_next(q, len, &i, &kv, &klen, &v, &vlen)) {
		int is_user = name_is(kv, klen, "user"), is_action = name_is(kv, klen, "action");
		long n = 0;
		/* users and actions come in pairs: any other of ours once */
		const char *twice = is_user || is_action ? NULL : query_repeat(kv, klen, &seen);
		if (twice)
			return bad(out, CMD_ERR_SYNTAX, twice);
		if ((is_user && nu == CMD_PAIRS_MAX) || (is_action && na == CMD_PAIRS_MAX))
			return bad(out, CMD_ERR_SYNTAX, "at most 8 pairs");
		if (is_user) {
			n = pct_decode(v, vlen, pc->pair_user[nu], KEYS_USER_MAX);
			if (n == -2)
				return bad(out, CMD_ERR_BAD_USER, "user is longer than 512 bytes");
			if (n == 0)
				return bad(out, CMD_ERR_BAD_USER, "user is missing or empty");
			if (n > 0) {
				req->pairs[nu].user = pc->pair_user[nu];
				req->pairs[nu++].user_len = (size_t)n;
			}
		} else if (is_action) {
			n = pct_decode(v, vlen, pc->pair_action[na], POLICY_NAME_MAX);
			if (n == -2)
				return bad(out, CMD_ERR_UNKNOWN_ACTION,
					   "no policy for this action");
			if (n >= 0) {
				req->pairs[na].action = pc->pair_action[na];
				req->pairs[na++].action_len = (size_t)n;
			}
		} else if (name_is(kv, klen, "cost")) {
			cost = v;
			cost_len = vlen;
		}
		if (n == -1)
			return bad(out, CMD_ERR_SYNTAX, "bad percent-encoding in the query");
	}
	if (nu == 0 || nu != na)
		return bad(out, CMD_ERR_SYNTAX, "pairs of user and action parameters, 1 to 8");
	if (cost && proto_parse_cost(cost, cost_len, &req->cost) < 0)
		return bad(out, CMD_ERR_BAD_COST, "cost must be an integer from 1 to 2147483647");
	req->npairs = nu;
	return PROTO_REQUEST;
}

static size_t json_ws(const char *s, size_t len, size_t i)
{
	while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
		i++;
	return i;
}

static size_t put_utf8(char *dst, unsigned cp)
{
	if (cp < 0x80) {
		dst[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		dst[0] = (char)(0xc0 | cp >> 6);
		dst[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		dst[0] = (char)(0xe0 | cp >> 12);
		dst[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		dst[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	dst[0] = (char)(0xf0 | cp >> 18);
	dst[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	dst[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	dst[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static int hex4(const char *s, size_t len, size_t i, unsigned *cp)
{
	if (i + 4 > len)
		return -1;
	unsigned v = 0;
	for (size_t k = 0; k < 4; k++) {
		int h = hexval((unsigned char)s[i + k]);
		if (h < 0)
			return -1;
		v = v * 16 + (unsigned)h;
	}
	*cp = v;
	return 0;
}

/*
 * A JSON string at s[*i] (its opening quote) decoded into dst (NULL: only
 * skipped). Its decoded length, -1 when malformed, -2 when longer than cap.
 */
static long json_string(const char *s, size_t len, size_t *i, char *dst, size_t cap)
{
	size_t k = *i + 1, n = 0;
	int too_long = 0;
	while (k < len && s[k] != '"') {
		unsigned char c = (unsigned char)s[k++];
		char tmp[4];
		size_t tl = 1;
		if (c < 0x20)
			return -1;
		tmp[0] = (char)c;
		if (c == '\\') {
			if (k >= len)
				return -1;
			char e = s[k++];
			unsigned cp;
			switch (e) {
			case '"':
			case '\\':
			case '/':
				tmp[0] = e;
				break;
			case 'b':
				tmp[0] = '\b';
				break;
			case 'f':
				tmp[0] = '\f';
				break;
			case 'n':
				tmp[0] = '\n';
				break;
			case 'r':
				tmp[0] = '\r';
				break;
			case 't':
				tmp[0] = '\t';
				break;
			case 'u':
				if (hex4(s, len, k, &cp) < 0)
					return -1;
				k += 4;
				if (cp >= 0xd800 && cp < 0xdc00) {
					unsigned lo;
					if (k + 6 > len || s[k] != '\\' || s[k + 1] != 'u' ||
					    hex4(s, len, k + 2, &lo) < 0 || lo < 0xdc00 ||
					    lo >= 0xe000)
						return -1;
					k += 6;
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				} else if (cp >= 0xdc00 && cp < 0xe000) {
					return -1;
				}
				tl = put_utf8(tmp, cp);
				break;
			default:
				return -1;
			}
		}
		if (n + tl > cap)
			too_long = 1;
		else if (dst)
			memcpy(dst + n, tmp, tl);
		n += too_long ? 0 : tl;
	}
	if (k >= len)
		return -1;
	*i = k + 1;
	return too_long ? -2 : (long)n;
}

/* How deep an ignored value's objects and arrays may nest: the skip is
 * recursive, so a body of brackets gets an error, not a deep stack. */
#define JSON_SKIP_DEPTH 32

/*
 * Skips the JSON value at s[*i] of any type, its objects and arrays nested
 * at most depth deep (an unknown key's value: ignored, as JSON APIs do).
 * NULL, or why it is refused.
 */
static const char *json_skip(const char *s, size_t len, size_t *i, int depth)
{
	if (*i >= len)
		return "malformed JSON: a value is missing";
	char c = s[*i];
	if (c == '"')
		return json_string(s, len, i, NULL, 0) == -1 ? "malformed JSON string" : NULL;
	if ((c >= '0' && c <= '9') || c == '-') {
		while (*i < len && s[*i] && strchr("0123456789+-.eE", s[*i]))
			(*i)++;
		return NULL;
	}
	if (c == '{' || c == '[') {
		if (depth == 0)
			return "JSON nested deeper than 32 levels in an ignored value";
		char close = c == '{' ? '}' : ']';
		*i = json_ws(s, len, *i + 1);
		if (*i < len && s[*i] == close) {
			(*i)++;
			return NULL;
		}
		for (;;) {
			if (c == '{') {
				if (*i >= len || s[*i] != '"')
					return "malformed JSON: expected a key";
				if (json_string(s, len, i, NULL, 0) == -1)
					return "malformed JSON string";
				*i = json_ws(s, len, *i);
				if (*i >= len || s[*i] != ':')
					return "malformed JSON: expected ':'";
				*i = json_ws(s, len, *i + 1);
			}
			const char *why = json_skip(s, len, i, depth - 1);
			if (why)
				return why;
			*i = json_ws(s, len, *i);
			if (*i < len && s[*i] == ',') {
				*i = json_ws(s, len, *i + 1);
				continue;
			}
			if (*i < len && s[*i] == close) {
				(*i)++;
				return NULL;
			}
			return c == '{' ? "malformed JSON: expected ',' or '}'"
					: "malformed JSON: expected ',' or ']'";
		}
	}
	static const char *const words[] = {"true", "false", "null"};
	for (size_t w = 0; w < 3; w++) {
		size_t wl = strlen(words[w]);
		if (len - *i >= wl && memcmp(s + *i, words[w], wl) == 0) {
			*i += wl;
			return NULL;
		}
	}
	return "malformed JSON: values are strings, numbers, objects, arrays, true, false or "
	       "null";
}

static enum proto_step json_args(const char *s, size_t len, struct http_conn *pc, struct args *a,
				 struct proto_parsed *out)
{
	size_t i = json_ws(s, len, 0);
	if (i >= len || s[i] != '{')
		return bad(out, CMD_ERR_SYNTAX, "the body is not a JSON object");
	i = json_ws(s, len, i + 1);
	if (i < len && s[i] == '}') {
		i++;
		goto end;
	}
	/* our keys seen: each at most once, as in a query (which of two
	 * values a client meant is not ours to guess) */
	static const char *const repeated[] = {"user is in the JSON body more than once",
					       "action is in the JSON body more than once",
					       "cost is in the JSON body more than once",
					       "wait is in the JSON body more than once"};
	unsigned seen = 0;
	for (;;) {
		char key[16];
		if (i >= len || s[i] != '"')
			return bad(out, CMD_ERR_SYNTAX, "malformed JSON: expected a key");
		long kl = json_string(s, len, &i, key, sizeof(key));
		if (kl == -1)
			return bad(out, CMD_ERR_SYNTAX, "malformed JSON string");
		i = json_ws(s, len, i);
		if (i >= len || s[i] != ':')
			return bad(out, CMD_ERR_SYNTAX, "malformed JSON: expected ':'");
		i = json_ws(s, len, i + 1);
		if (i >= len)
			return bad(out, CMD_ERR_SYNTAX, "malformed JSON: a value is missing");
		int is_user = kl == 4 && memcmp(key, "user", 4) == 0;
		int is_action = kl == 6 && memcmp(key, "action", 6) == 0;
		int is_cost = kl == 4 && memcmp(key, "cost", 4) == 0;
		int is_wait = kl == 4 && memcmp(key, "wait", 4) == 0;
		int which = is_user ? 0 : is_action ? 1 : is_cost ? 2 : is_wait ? 3 : -1;
		if (which >= 0 && (seen & 1u << which))
			return bad(out, CMD_ERR_SYNTAX, repeated[which]);
		if (which >= 0)
			seen |= 1u << which;
		if (s[i] == '"') {
			if (is_wait)
				return bad(out, CMD_ERR_SYNTAX, "wait must be a JSON number");
			char *dst = is_user ? pc->user : is_action ? pc->action : NULL;
			size_t cap = is_user ? sizeof(pc->user) : sizeof(pc->action) - 1;
			if (is_cost)
				return bad(out, CMD_ERR_BAD_COST, "cost must be a JSON number");
			long n = json_string(s, len, &i, dst, cap);
			if (n == -1)
				return bad(out, CMD_ERR_SYNTAX, "malformed JSON string");
			if (n == -2 && is_user)
				return bad(out, CMD_ERR_BAD_USER, "user is longer than 512 bytes");
			if (n == -2 && is_action)
				return bad(out, CMD_ERR_UNKNOWN_ACTION,
					   "no policy for this action");
			if (is_user) {
				a->user = pc->user;
				a->user_len = (size_t)n;
			} else if (is_action) {
				a->action = pc->action;
				a->action_len = (size_t)n;
			}
		} else if ((s[i] >= '0' && s[i] <= '9') || s[i] == '-') {
			size_t start = i;
			while (i < len && strchr("0123456789+-.eE", s[i]) && s[i])
				i++;
			if (is_cost) {
				a->cost = s + start;
				a->cost_len = i - start;
			} else if (is_wait) {
				a->wait = s + start;
				a->wait_len = i - start;
			} else if (is_user || is_action) {
				return bad(out, CMD_ERR_SYNTAX, "user and action are JSON strings");
			}
		} else {
			/* true, false, null, an object or an array */
			const char *why = json_skip(s, len, &i, JSON_SKIP_DEPTH);
			if (why)
				return bad(out, CMD_ERR_SYNTAX, why);
			if (is_user || is_action || is_cost || is_wait)
				return bad(
					out, is_cost ? CMD_ERR_BAD_COST : CMD_ERR_SYNTAX,
					"user and action are JSON strings, cost and wait numbers");
		}
		i = json_ws(s, len, i);
		if (i < len && s[i] == ',') {
			i = json_ws(s, len, i + 1);
			continue;
		}
		if (i < len && s[i] == '}') {
			i++;
			break;
		}
		return bad(out, CMD_ERR_SYNTAX, "malformed JSON: expected ',' or '}'");
	}
end:
	if (json_ws(s, len, i) != len)
		return bad(out, CMD_ERR_SYNTAX, "malformed JSON: bytes after the object");
	return PROTO_REQUEST;
}

/* The request's headers that matter here. */
struct headers {
	const char *host, *xff, *real_ip, *user, *connection, *bearer, *traceparent;
	size_t xff_len, real_ip_len, user_len, connection_len, bearer_len, traceparent_len;
	int nhost, te, ncl;
	long long cl;
};

/*
 * forward-auth: who the request is about. From a trusted peer (a proxy on
 * loopback by default): user_header's value if one is configured, else the
 * client address of X-Forwarded-For (its rightmost address that is not a
 * trusted proxy) or X-Real-IP. From anyone else: the peer's own address.
 */
static enum proto_step user_of(const struct headers *h, struct http_conn *pc, struct args *a,
			       struct proto_parsed *out)
{
	struct addr_ip ip = pc->peer;
	if (pc->peer_trusted && pc->http.user_header[0]) {
		if (!h->user || h->user_len == 0)
			return bad(out, CMD_ERR_BAD_USER,
				   "the user header is missing (user_header in the configuration)");
		if (h->user_len > sizeof(pc->user))
			return bad(out, CMD_ERR_BAD_USER, "user is longer than 512 bytes");
		a->user = h->user;
		a->user_len = h->user_len;
		return PROTO_REQUEST;
	}
	if (pc->peer_trusted && (h->xff || h->real_ip)) {
		const char *v = h->xff ? h->xff : h->real_ip;
		size_t len = h->xff ? h->xff_len : h->real_ip_len;
		int found = 0;
		size_t end = len;
		for (;;) {
			size_t start = end;
			while (start > 0 && v[start - 1] != ',')
				start--;
			size_t s = start, e = end;
			while (s < e && (v[s] == ' ' || v[s] == '\t'))
				s++;
			while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
				e--;
			struct addr_ip cand;
			if (addr_ip_parse(v + s, e - s, &cand) < 0)
				break;
			ip = cand;
			found = 1;
			int trusted = 0;
			for (size_t k = 0; k < pc->http.ntrusted && !trusted; k++)
				trusted = addr_net_match(&pc->http.trusted[k], &cand);
			if (!trusted || start == 0)
				break;
			end = start - 1;
		}
		if (!found)
			return bad(out, CMD_ERR_BAD_USER, "no client address in X-Forwarded-For");
	}
	if (ip.family == 0) {
		memcpy(pc->user, "unix", 4);
		a->user_len = 4;
	} else {
		a->user_len = addr_ip_text(&ip, pc->user, sizeof(pc->user));
	}
	a->user = pc->user;
	return PROTO_REQUEST;
}

/* Reads the header lines of buf[0..hend): -1 when malformed. */
static int read_headers(const char *buf, size_t from, size_t hend, const struct http_conn *pc,
			struct headers *h)
{
	size_t i = from;
	while (i < hend) {
		const char *lf = memchr(buf + i, '\n', hend - i);
		size_t eol = (size_t)(lf - buf), end = eol;
		if (end > i && buf[end - 1] == '\r')
			end--;
		if (end == i)
			break; /* the empty line */
		if (buf[i] == ' ' || buf[i] == '\t')
			return -1; /* obsolete line folding */
		const char *colon = memchr(buf + i, ':', end - i);
		if (!colon || colon == buf + i)
			return -1;
		size_t nlen = (size_t)(colon - (buf + i));
		for (size_t k = 0; k < nlen; k++)
			if (!is_tchar((unsigned char)buf[i + k]))
				return -1;
		const char *name = buf + i, *v = colon + 1, *ve = buf + end;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		size_t vlen = (size_t)(ve - v);
		for (size_t k = 0; k < vlen; k++)
			if ((unsigned char)v[k] < 0x20 && v[k] != '\t')
				return -1; /* NUL, CR and other controls */
		if (name_is(name, nlen, "host")) {
			h->host = v;
			h->nhost++;
		} else if (name_is(name, nlen, "content-length")) {
			long long n = 0;
			if (vlen == 0 || vlen > 12)
				return -1;
			for (size_t k = 0; k < vlen; k++) {
				if (v[k] < '0' || v[k] > '9')
					return -1;
				n = n * 10 + (v[k] - '0');
			}
			if (h->ncl++ && n != h->cl)
				return -1;
			h->cl = n;
		} else if (name_is(name, nlen, "transfer-encoding")) {
			h->te = 1;
		} else if (name_is(name, nlen, "connection")) {
			h->connection = v;
			h->connection_len = vlen;
		} else if (name_is(name, nlen, "x-forwarded-for")) {
			/* of several lines, the last holds the nearest hops */
			h->xff = v;
			h->xff_len = vlen;
		} else if (name_is(name, nlen, "x-real-ip")) {
			h->real_ip = v;
			h->real_ip_len = vlen;
		} else if (name_is(name, nlen, "authorization") && vlen > 7 &&
			   name_is(v, 6, "bearer") && v[6] == ' ') {
			/* a listener with auth: required takes the token (RFC 6750) */
			h->bearer = v + 7;
			h->bearer_len = vlen - 7;
		} else if (name_is(name, nlen, "traceparent")) {
			/* W3C trace context: judged where the request is traced */
			h->traceparent = v;
			h->traceparent_len = vlen;
		}
		if (pc->http.user_header[0] && name_is(name, nlen, pc->http.user_header)) {
			h->user = v;
			h->user_len = vlen;
		}
		i = eol + 1;
	}
	return 0;
}

/* The end of the header block (just past its empty line), or 0. */
static size_t headers_end(const char *buf, size_t len)
{
	size_t i = 0;
	while (i < len) {
		const char *lf = memchr(buf + i, '\n', len - i);
		if (!lf)
			return 0;
		size_t eol = (size_t)(lf - buf);
		if (eol == i || (eol == i + 1 && buf[i] == '\r'))
			return i == 0 ? 0 : eol + 1; /* an empty first line is not a request */
		i = eol + 1;
	}
	return 0;
}

/*
 * The API's routes, one row each: a path (a prefix, when it ends in '/',
 * followed by an id), the verb, the methods it takes and how its
 * arguments are read. A route with an id takes a second verb when the id
 * ends in its suffix (/v1/holds/<id>/settle).
 */
#define M_GET 1u
#define M_POST 2u
#define M_DELETE 4u

enum route_form {
	ROUTE_ARGS,  /* user, action, cost, wait: the query, or a POST's JSON body */
	ROUTE_PAIRS, /* MALLOW, MPEEK: user and action pairs in the query */
	ROUTE_ID,    /* a lease's or a hold's id in the path */
};

struct route {
	const char *path;
	enum cmd_verb verb;
	unsigned methods;
	enum route_form form;
	const char *suffix; /* ROUTE_ID: the id's suffix that names suffix_verb */
	enum cmd_verb suffix_verb;
	unsigned suffix_methods;
};

/* The routes of the verbs of their own form; those of the common shape
 * (<user> <action> [cost], ROUTE_ARGS) are their rows' in cmd_table.c. */
static const struct route routes[] = {
	{"/v1/mallow", CMD_MALLOW, M_GET | M_POST, ROUTE_PAIRS, NULL, 0, 0},
	{"/v1/mpeek", CMD_MPEEK, M_GET | M_POST, ROUTE_PAIRS, NULL, 0, 0},
	/* DELETE /v1/holds/<id>: CANCEL; POST /v1/holds/<id>/settle?actual=N */
	{"/v1/holds/", CMD_CANCEL, M_DELETE, ROUTE_ID, "/settle", CMD_SETTLE, M_POST},
	/* DELETE /v1/leases/<id>: RELEASE; POST /v1/leases/<id>/renew */
	{"/v1/leases/", CMD_RELEASE, M_DELETE, ROUTE_ID, "/renew", CMD_RENEW, M_POST},
};


static const struct route *route_of(const char *path, size_t len)
{
	/* a verb of the common shape: its row's route, POST (and GET) */
	static struct route verb_routes[CMD_VERB_N];
	for (int v = 0; v < CMD_VERB_N; v++) {
		const struct cmd_verb_row *row = &cmd_verbs[v];
		if (!row->http || strlen(row->http) != len || memcmp(path, row->http, len) != 0)
			continue;
		verb_routes[v] = (struct route){row->http,
						(enum cmd_verb)v,
						M_POST | (row->http_get ? M_GET : 0),
						ROUTE_ARGS,
						NULL,
						0,
						0};
		return &verb_routes[v];
	}
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		size_t n = strlen(routes[i].path);
		int prefix = routes[i].path[n - 1] == '/';
		if ((prefix ? len > n : len == n) && memcmp(path, routes[i].path, n) == 0)
			return &routes[i];
	}
	return NULL;
}

static unsigned method_bit(const char *m, size_t len)
{
	return name_is(m, len, "GET")	   ? M_GET
	       : name_is(m, len, "POST")   ? M_POST
	       : name_is(m, len, "DELETE") ? M_DELETE
					   : 0;
}

/* A route with an id: the id as ACQUIRE or HOLD gave it (nothing in it is
 * ever escaped), read as the text protocols read it; a settle's actual
 * cost from the query. */
static enum proto_step id_route(const struct route *r, const char *target, size_t plen, unsigned m,
				const char *q, size_t qlen, struct http_conn *pc,
				struct proto_parsed *out)
{
	size_t n = strlen(r->path), slen = strlen(r->suffix);
	const char *arg[3] = {NULL, target + n, NULL};
	size_t al[3] = {0, plen - n, 0};
	enum cmd_verb verb = r->verb;
	unsigned methods = r->methods;
	if (al[1] > slen && memcmp(arg[1] + al[1] - slen, r->suffix, slen) == 0) {
		verb = r->suffix_verb;
		methods = r->suffix_methods;
		al[1] -= slen;
	}
	int argc = 2;
	if (verb == CMD_SETTLE) {
		struct args a;
		memset(&a, 0, sizeof(a));
		enum proto_step st = query_args(q, qlen, pc, &a, 0, out);
		if (st != PROTO_REQUEST)
			return st;
		if (!a.actual)
			return bad(out, CMD_ERR_SYNTAX,
				   "a settle needs its actual cost (?actual=N)");
		arg[2] = a.actual;
		al[2] = a.actual_len;
		argc = 3;
	}
	if (!(methods & m))
		return local(out, METHOD_NOT_ALLOWED, 0);
	arg[0] = cmd_verbs[verb].name;
	al[0] = strlen(arg[0]);
	if (proto_parse_verb(arg, al, argc, CMD_ON_LINE, &out->req, &out->err) != 0)
		return PROTO_BAD;
	return PROTO_REQUEST;
}

/* An HTTP/1.x request line, split (proto_http's own parse). */
struct request_line {
	const char *method, *target;
	size_t mlen, tlen;
	size_t len; /* up to its CR LF (or LF) */
	int v11;    /* HTTP/1.1, else 1.0 */
};

/* The request line of the head buf[0..hend): METHOD SP TARGET SP HTTP/1.x.
 * PROTO_REQUEST, or the reply of a line that will not do. */
static enum proto_step request_line(const char *buf, size_t hend, struct request_line *l,
				    struct proto_parsed *out)
{
	const char *lf = memchr(buf, '\n', hend);
	size_t rl = (size_t)(lf - buf);
	if (rl && buf[rl - 1] == '\r')
		rl--;
	const char *sp1 = memchr(buf, ' ', rl);
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(buf + rl - sp1 - 1)) : NULL;
	if (!sp1 || !sp2 || sp1 == buf || sp2 == sp1 + 1)
		return local(out, BAD_REQUEST, 1);
	const char *method = buf, *target = sp1 + 1, *version = sp2 + 1;
	size_t mlen = (size_t)(sp1 - buf), tlen = (size_t)(sp2 - target),
	       vlen = (size_t)(buf + rl - version);
	for (size_t k = 0; k < mlen; k++)
		if (!is_tchar((unsigned char)method[k]))
			return local(out, BAD_REQUEST, 1);
	/* a body after a HEAD's reply would be read as the next reply's
	 * start by a keep-alive client */
	if (mlen == 4 && memcmp(method, "HEAD", 4) == 0)
		out->tag |= TAG_HEAD;
	for (size_t k = 0; k < tlen; k++)
		if ((unsigned char)target[k] <= 0x20 || target[k] == 0x7f)
			return local(out, BAD_REQUEST, 1);
	int v11;
	if (vlen == 8 && memcmp(version, "HTTP/1.1", 8) == 0)
		v11 = 1;
	else if (vlen == 8 && memcmp(version, "HTTP/1.0", 8) == 0)
		v11 = 0;
	else if (vlen >= 5 && memcmp(version, "HTTP/", 5) == 0)
		return local(out, VERSION_NOT_SUPPORTED, 1);
	else
		return local(out, BAD_REQUEST, 1);
	*l = (struct request_line){method, target, mlen, tlen, rl, v11};
	return PROTO_REQUEST;
}

/* The request the arguments name (user, action, cost, wait), checked as a
 * verb needs them. */
static enum proto_step request_of(const struct args *a, struct cmd_request *req,
				  struct proto_parsed *out)
{
	if (!a->user || a->user_len == 0)
		return bad(out, CMD_ERR_BAD_USER, "user is missing or empty");
	if (a->user_len > KEYS_USER_MAX)
		return bad(out, CMD_ERR_BAD_USER, "user is longer than 512 bytes");
	if (!a->action || a->action_len == 0)
		return bad(out, CMD_ERR_SYNTAX, "action is missing");
	/* what the verb's row says of its cost (a forward-auth request is an
	 * ALLOW); the messages made once per verb */
	static char no_cost[CMD_VERB_N][48], need_cost[CMD_VERB_N][48];
	const struct cmd_verb_row *row = &cmd_verbs[req->verb];
	if (a->cost && !(row->args & (CMD_ARGS_COST | CMD_ARGS_COST_NEEDED))) {
		snprintf(no_cost[req->verb], sizeof(no_cost[0]), "%s takes no cost", row->name);
		return bad(out, CMD_ERR_SYNTAX, no_cost[req->verb]);
	}
	if (!a->cost && (row->args & CMD_ARGS_COST_NEEDED)) {
		snprintf(need_cost[req->verb], sizeof(need_cost[0]), "%s needs a cost", row->name);
		return bad(out, CMD_ERR_SYNTAX, need_cost[req->verb]);
	}
	if (a->cost && proto_parse_cost(a->cost, a->cost_len, &req->cost) < 0)
		return bad(out, CMD_ERR_BAD_COST, "cost must be an integer from 1 to 2147483647");
	if (a->wait) {
		/* ALLOW's WAIT: an API request's, or a forward-auth one's
		 * (/auth/<action>?wait=500) */
		const char *wa[5] = {"ALLOW", "", "", "WAIT", a->wait};
		size_t wl[5] = {5, 0, 0, 4, a->wait_len};
		if (!(row->args & CMD_ARGS_WAIT))
			return bad(out, CMD_ERR_SYNTAX, "wait is for an allow");
		if (proto_parse_wait(wa, wl, 5, req, &out->err) < 0)
			return PROTO_BAD;
	}
	req->user = a->user;
	req->user_len = a->user_len;
	req->action = a->action;
	req->action_len = a->action_len;
	return PROTO_REQUEST;
}

static enum proto_step http_parse(const char *buf, size_t len, size_t max_line, void *state,
				  struct proto_parsed *out)
{
	struct http_conn *pc = state;
	/* Blank lines before a request are ignored (RFC 9112 2.2). */
	size_t skip = 0;
	while (skip < len && (buf[skip] == '\r' || buf[skip] == '\n'))
		skip++;
	if (skip) {
		out->used = skip;
		return PROTO_SKIP;
	}
	size_t hend = headers_end(buf, len);
	if (!hend) {
		if (len >= window_of(max_line)) {
			out->err.code = CMD_ERR_LINE_TOO_LONG;
			out->err.msg = "request header fields too large";
			return PROTO_FATAL;
		}
		return PROTO_NEED_MORE;
	}
	out->tag = (pc->http.deny_status << TAG_DENY_SHIFT) |
		   (pc->http.legacy_headers ? TAG_LEGACY : 0) | HTTP_API;
	out->used = hend;
	struct request_line line;
	enum proto_step st = request_line(buf, hend, &line, out);
	if (st != PROTO_REQUEST)
		return st;
	const char *method = line.method, *target = line.target;
	size_t mlen = line.mlen, tlen = line.tlen, rl = line.len;
	int v11 = line.v11;

	struct headers h;
	memset(&h, 0, sizeof(h));
	if (read_headers(buf, rl + (buf[rl] == '\r' ? 2 : 1), hend, pc, &h) < 0)
		return local(out, BAD_REQUEST, 1);
	out->close_after = v11 ? has_token(h.connection, h.connection_len, "close")
			       : !has_token(h.connection, h.connection_len, "keep-alive");
	if (h.te)
		return local(out, NOT_IMPLEMENTED, 1); /* chunked bodies: framing unknown */
	if (h.cl > PROTO_HTTP_BODY_MAX)
		return local(out, TOO_LARGE, 1);
	if (hend + (size_t)h.cl > len) {
		if (hend + (size_t)h.cl > window_of(max_line))
			return local(out, TOO_LARGE, 1);
		out->close_after = 0;
		out->tag = 0;
		return PROTO_NEED_MORE;
	}
	out->used = hend + (size_t)h.cl;
	const char *body = buf + hend;
	size_t blen = (size_t)h.cl;
	if (v11 && h.nhost != 1)
		return bad(out, CMD_ERR_SYNTAX, "an HTTP/1.1 request needs one Host header");

	/* the target: an origin-form path and query */
	const char *q = memchr(target, '?', tlen);
	size_t plen = q ? (size_t)(q - target) : tlen;
	size_t qlen = q ? tlen - plen - 1 : 0;
	if (q)
		q++;
	int post = name_is(method, mlen, "POST");
	struct cmd_request *req = &out->req;
	memset(req, 0, sizeof(*req));
	req->cost = 1;
	req->token = h.bearer;
	req->token_len = h.bearer_len;
	req->traceparent = h.traceparent;
	req->traceparent_len = h.traceparent_len;
	struct args a;
	memset(&a, 0, sizeof(a));
	if (plen == 6 && memcmp(target, "/auth/", 6) == 0) {
		return bad(out, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
	} else if (plen > 6 && memcmp(target, "/auth/", 6) == 0) {
		out->tag = (out->tag & ~TAG_KIND) | HTTP_AUTH;
		req->verb = CMD_ALLOW;
		long n = pct_decode(target + 6, plen - 6, pc->action, sizeof(pc->action) - 1);
		if (n == -1)
			return bad(out, CMD_ERR_SYNTAX, "bad percent-encoding in the path");
		if (n == -2)
			return bad(out, CMD_ERR_UNKNOWN_ACTION, "no policy for this action");
		a.action = pc->action;
		a.action_len = (size_t)n;
		st = query_args(q ? q : "", qlen, pc, &a, 1, out);
		if (st != PROTO_REQUEST)
			return st;
		st = user_of(&h, pc, &a, out);
		if (st != PROTO_REQUEST)
			return st;
	} else {
		const struct route *r = route_of(target, plen);
		if (!r)
			return local(out, NOT_FOUND, 0);
		unsigned m = method_bit(method, mlen);
		req->verb = r->verb;
		switch (r->form) {
		case ROUTE_PAIRS:
			if (!(r->methods & m))
				return local(out, METHOD_NOT_ALLOWED, 0);
			if (post && blen > 0)
				return bad(out, CMD_ERR_SYNTAX, "the pairs go in the query string");
			return query_pairs(q ? q : "", qlen, pc, req, out);
		case ROUTE_ARGS:
			if (!(r->methods & m))
				return local(out, METHOD_NOT_ALLOWED, 0);
			st = query_args(q ? q : "", qlen, pc, &a, 0, out);
			if (st == PROTO_REQUEST && post && blen > 0)
				st = json_args(body, blen, pc, &a, out);
			if (st != PROTO_REQUEST)
				return st;
			break;
		case ROUTE_ID:
			return id_route(r, target, plen, m, q ? q : "", qlen, pc, out);
		}
	}
	return request_of(&a, req, out);
}

/* ---- replies ---- */

static const char *reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	case 503:
		return "Service Unavailable";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return status < 500 ? "Client Error" : "Server Error";
	}
}

static int error_status(enum cmd_error e)
{
	switch (e) {
	case CMD_ERR_SYNTAX:
	case CMD_ERR_BAD_COST:
	case CMD_ERR_BAD_USER:
	case CMD_ERR_POLICY_KIND:
		return 400;
	case CMD_ERR_NO_LEASE:
	case CMD_ERR_NO_HOLD:
		return 404;
	case CMD_ERR_UNKNOWN_ACTION:
	case CMD_ERR_UNKNOWN_COMMAND:
		return 404;
	case CMD_ERR_FORBIDDEN:
		return 403;
	case CMD_ERR_LINE_TOO_LONG:
		return 431;
	case CMD_ERR_TOO_MANY_CLIENTS:
	case CMD_ERR_STORE_UNAVAILABLE:
	case CMD_ERR_OUT_OF_MEMORY:
		return 503;
	case CMD_ERR_REQUEST_TIMEOUT:
		return 408;
	case CMD_ERR_TLS_REQUIRED:
		return 400;
	case CMD_ERR_NOAUTH:
	case CMD_ERR_AUTH_FAILED:
		return 401;
	}
	return 500;
}

static const char *local_code(int status)
{
	switch (status) {
	case NOT_FOUND:
		return "not-found";
	case METHOD_NOT_ALLOWED:
		return "method-not-allowed";
	case TOO_LARGE:
		return "body-too-large";
	case NOT_IMPLEMENTED:
		return "not-implemented";
	case VERSION_NOT_SUPPORTED:
		return "http-version";
	default:
		return "syntax";
	}
}

/* What a 404 and a 405 say: the routes and their methods, made once from
 * the verbs' rows (those of the common shape) and routes[]. */
static const char *routes_text(int methods_too)
{
	static char endpoints[512], methods[768];
	if (!endpoints[0]) {
		size_t e = 0, g = 0, p = 0;
		char get[256] = "", post[256] = "";
		for (int v = 0; v < CMD_VERB_N; v++) {
			const struct cmd_verb_row *row = &cmd_verbs[v];
			if (!row->http)
				continue;
			e += (size_t)snprintf(endpoints + e, sizeof(endpoints) - e, " %s",
					      row->http);
			if (row->http_get)
				g += (size_t)snprintf(get + g, sizeof(get) - g, " %s", row->http);
			else
				p += (size_t)snprintf(post + p, sizeof(post) - p, " %s", row->http);
		}
		snprintf(endpoints + e, sizeof(endpoints) - e,
			 " /v1/mallow /v1/mpeek /v1/holds/<id> /v1/leases/<id> /auth/<action>");
		snprintf(methods, sizeof(methods),
			 "GET or POST:%s /v1/mallow /v1/mpeek; POST:%s /v1/holds/<id>/settle "
			 "/v1/leases/<id>/renew; DELETE: /v1/holds/<id> /v1/leases/<id>",
			 get, post);
	}
	return methods_too ? methods : endpoints + 1;
}

static const char *local_message(int status)
{
	static char not_found[600];
	switch (status) {
	case NOT_FOUND:
		if (!not_found[0])
			snprintf(not_found, sizeof(not_found), "endpoints: %s", routes_text(0));
		return not_found;
	case METHOD_NOT_ALLOWED:
		return routes_text(1);
	case TOO_LARGE:
		return "a body is at most 4096 bytes";
	case NOT_IMPLEMENTED:
		return "Transfer-Encoding is not supported: send Content-Length";
	case VERSION_NOT_SUPPORTED:
		return "HTTP/1.1 or HTTP/1.0 only";
	default:
		return "malformed request";
	}
}

static size_t put(char *buf, size_t n, const char *s)
{
	size_t l = strlen(s);
	memcpy(buf + n, s, l);
	return n + l;
}

static size_t put_int(char *buf, size_t n, int64_t v)
{
	return n + proto_put_int(buf + n, v);
}

/* Whole seconds, rounded up: a client that waits that long is not early. */
static int64_t ceil_s(int64_t ms)
{
	return ms <= 0 ? 0 : (ms + 999) / 1000;
}

/* A JSON string's content: quotes, backslashes and control bytes escaped. */
static size_t put_json_text(char *buf, size_t n, const char *s, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	for (; *s && n + 6 < cap; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			buf[n++] = '\\';
			buf[n++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			n = put(buf, n, "\\u00");
			buf[n++] = hex[c >> 4];
			buf[n++] = hex[c & 15];
		} else {
			buf[n++] = (char)c;
		}
	}
	return n;
}

/* Status line and the headers every reply has; the body comes after. */
static size_t head(char *buf, int status, const char *type, size_t body_len, int close)
{
	size_t n = put(buf, 0, "HTTP/1.1 ");
	n = put_int(buf, n, status);
	n = put(buf, n, " ");
	n = put(buf, n, reason(status));
	n = put(buf, n, "\r\n");
	if (type) {
		n = put(buf, n, "Content-Type: ");
		n = put(buf, n, type);
		n = put(buf, n, "\r\n");
	}
	n = put(buf, n, "Content-Length: ");
	n = put_int(buf, n, (int64_t)body_len);
	n = put(buf, n, "\r\n");
	if (close)
		n = put(buf, n, "Connection: close\r\n");
	return n;
}

/* RateLimit-Policy, RateLimit (draft-ietf-httpapi-ratelimit-headers),
 * Retry-After, and the legacy X-RateLimit-* when asked for. */
static size_t ratelimit_headers(char *buf, size_t n, const struct cmd_result *r, int legacy)
{
	if (r->limit < 0) /* an unlimited override: no limit to announce */
		return n;
	n = put(buf, n, "RateLimit-Policy: \"");
	n = put(buf, n, r->action);
	n = put(buf, n, "\";q=");
	n = put_int(buf, n, r->limit);
	n = put(buf, n, ";w=");
	n = put_int(buf, n, ceil_s(r->window_ms));
	n = put(buf, n, "\r\n");
	/* -1: Redis did not say (a fallback), or never (a blocked override) */
	if (r->remaining >= 0 && r->reset_ms >= 0) {
		n = put(buf, n, "RateLimit: \"");
		n = put(buf, n, r->action);
		n = put(buf, n, "\";r=");
		n = put_int(buf, n, r->remaining);
		n = put(buf, n, ";t=");
		n = put_int(buf, n, ceil_s(r->reset_ms));
		n = put(buf, n, "\r\n");
	}
	if (!r->allowed && r->retry_after_ms >= 0) {
		n = put(buf, n, "Retry-After: ");
		n = put_int(buf, n, ceil_s(r->retry_after_ms));
		n = put(buf, n, "\r\n");
	}
	if (legacy) {
		n = put(buf, n, "X-RateLimit-Limit: ");
		n = put_int(buf, n, r->limit);
		n = put(buf, n, "\r\n");
		if (r->remaining >= 0 && r->reset_ms >= 0) {
			n = put(buf, n, "X-RateLimit-Remaining: ");
			n = put_int(buf, n, r->remaining);
			n = put(buf, n, "\r\nX-RateLimit-Reset: ");
			n = put_int(buf, n, ceil_s(r->reset_ms));
			n = put(buf, n, "\r\n");
		}
	}
	return n;
}

/* STATE's JSON: {"algorithm", "override", "ban_ms", "limits": [{"window_ms",
 * "limit", "used", "remaining", "reset_ms", "start_ms", "end_ms"[,
 * "calendar"]}...]}, the limits in the policy's order. */
static size_t state_body(char *body, const struct cmd_state *st)
{
	static const char *const keys[7] = {
		"{\"window_ms\":", ",\"limit\":",    ",\"used\":",  ",\"remaining\":",
		",\"reset_ms\":",  ",\"start_ms\":", ",\"end_ms\":"};
	size_t bl = put(body, 0, "{\"algorithm\":\"");
	bl = put(body, bl, policy_algo_name(st->algo));
	bl = put(body, bl, "\",\"override\":\"");
	bl = put(body, bl, proto_state_override_name(st->override));
	bl = put(body, bl, "\",\"ban_ms\":");
	bl = put_int(body, bl, st->ban_ms);
	bl = put(body, bl, ",\"limits\":[");
	for (int i = 0; i < st->nlimits && i < POLICY_MAX_LIMITS; i++) {
		const struct cmd_state_limit *l = &st->limits[i];
		int64_t v[7] = {l->window_ms, l->limit,	   l->used,  l->remaining,
				l->reset_ms,  l->start_ms, l->end_ms};
		if (i)
			bl = put(body, bl, ",");
		for (int j = 0; j < 7; j++) {
			bl = put(body, bl, keys[j]);
			bl = put_int(body, bl, v[j]);
		}
		if (l->calendar != CALENDAR_NONE) {
			bl = put(body, bl, ",\"calendar\":\"");
			bl = put(body, bl, calendar_unit_name(l->calendar));
			bl = put(body, bl, "\"");
		}
		bl = put(body, bl, "}");
	}
	return put(body, bl, "]}\n");
}
/* its head (the longest algorithm and override), then per limit its keys,
 * seven numbers, a calendar's unit */
_Static_assert(BODY_MAX > 100 + POLICY_MAX_LIMITS * (110 + 7 * 20) + 4, "STATE's body fits");

static size_t http_format(char *buf, const struct cmd_result *r, void *state)
{
	(void)state; /* HTTP's state is the request side's */
	int kind = r->tag & TAG_KIND, legacy = (r->tag & TAG_LEGACY) != 0;
	int deny = r->tag >> TAG_DENY_SHIFT;
	char body[BODY_MAX];
	size_t bl = 0;
	size_t n;
	switch (r->kind) {
	case CMD_REPLY_LEASE: /* ACQUIRE, RENEW: the decision's body and the id */
	case CMD_REPLY_DECISION:
		if (kind == HTTP_AUTH) {
			int status = r->allowed ? 200 : deny ? deny : 429;
			if (r->allowed) {
				n = head(buf, status, NULL, 0, r->close_after);
				n = ratelimit_headers(buf, n, r, legacy);
				return put(buf, n, "\r\n");
			}
			/* A proxy that passes the denial on (Caddy, Traefik) gives the
			 * client a problem details body (RFC 9457), as the RateLimit
			 * draft suggests; nginx drops it. */
			bl = put(body, bl, "{\"type\":\"about:blank\",\"title\":\"");
			bl = put(body, bl, reason(status));
			bl = put(body, bl, "\",\"status\":");
			bl = put_int(body, bl, status);
			bl = put(body, bl, ",\"detail\":\"");
			if (r->retry_after_ms >= 0) {
				bl = put(body, bl, "rate limited; retry after ");
				bl = put_int(body, bl, ceil_s(r->retry_after_ms));
				bl = put(body, bl, " s\"");
			} else {
				bl = put(body, bl, "rate limited\"");
			}
			bl = put(body, bl, ",\"retry_after_ms\":");
			bl = put_int(body, bl, r->retry_after_ms);
			bl = put(body, bl, "}\n");
			n = head(buf, status, "application/problem+json", bl, r->close_after);
			n = ratelimit_headers(buf, n, r, legacy);
			break;
		}
		bl = put(body, bl, r->allowed ? "{\"allowed\":true" : "{\"allowed\":false");
		bl = put(body, bl, ",\"limit\":");
		bl = put_int(body, bl, r->limit);
		bl = put(body, bl, ",\"remaining\":");
		bl = put_int(body, bl, r->remaining);
		bl = put(body, bl, ",\"retry_after_ms\":");
		bl = put_int(body, bl, r->retry_after_ms);
		bl = put(body, bl, ",\"reset_ms\":");
		bl = put_int(body, bl, r->reset_ms);
		if (r->multi) { /* MALLOW: the deciding pair, 1-based */
			bl = put(body, bl, ",\"pair\":");
			bl = put_int(body, bl, r->pair);
		}
		if (r->kind == CMD_REPLY_LEASE && r->item) { /* its bytes need no escaping */
			bl = put(body, bl, r->item->index == 1 ? ",\"hold\":\"" : ",\"lease\":\"");
			memcpy(body + bl, r->item->text, r->item->ulen);
			bl += r->item->ulen;
			bl = put(body, bl, "\"");
		}
		bl = put(body, bl, "}\n");
		n = head(buf, r->allowed ? 200 : 429, "application/json", bl, r->close_after);
		n = ratelimit_headers(buf, n, r, legacy);
		break;
	case CMD_REPLY_STATE:
		if (!r->state) { /* cannot be: cmd_state.c sets it with the kind */
			bl = put(body, bl,
				 "{\"error\":\"out-of-memory\",\"message\":\"no state\"}\n");
			n = head(buf, error_status(CMD_ERR_OUT_OF_MEMORY), "application/json", bl,
				 r->close_after);
			break;
		}
		bl = state_body(body, r->state);
		n = head(buf, 200, "application/json", bl, r->close_after);
		break;
	case CMD_REPLY_OK:
	case CMD_REPLY_PONG:
	case CMD_REPLY_BYE:
		bl = put(body, bl, "{\"ok\":true}\n");
		n = head(buf, 200, "application/json", bl, r->close_after);
		break;
	case CMD_REPLY_ITEM: /* OVERRIDES and TOP have no HTTP endpoint */
	case CMD_REPLY_TOP:
	case CMD_REPLY_ERROR:
	case CMD_REPLY_LOCAL:
	default: {
		int status = r->kind == CMD_REPLY_ERROR	  ? error_status(r->error)
			     : r->kind == CMD_REPLY_LOCAL ? r->local
							  : 500;
		const char *code = r->kind == CMD_REPLY_ERROR ? proto_error_code(r->error)
							      : local_code(status);
		const char *msg = r->kind == CMD_REPLY_ERROR ? r->msg : local_message(status);
		bl = put(body, bl, "{\"error\":\"");
		bl = put(body, bl, code);
		bl = put(body, bl, "\",\"message\":\"");
		bl = put_json_text(body, bl, msg, sizeof(body) - 4);
		bl = put(body, bl, "\"}\n");
		n = head(buf, status, "application/json", bl, r->close_after);
		if (status == 401) /* RFC 6750: how to authenticate */
			n = put(buf, n, "WWW-Authenticate: Bearer realm=\"ratelimitd\"\r\n");
		break;
	}
	}
	n = put(buf, n, "\r\n");
	if (r->tag & TAG_HEAD)
		return n; /* Content-Length says what a GET would get */
	memcpy(buf + n, body, bl);
	return n + bl;
}

const struct proto proto_http = {
	.name = "http",
	.reply_max = REPLY_MAX,
	.window_min = PROTO_HTTP_WINDOW,
	.names_policy = 1,
	.parse = http_parse,
	.format = http_format,
};
