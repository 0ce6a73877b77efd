/*
 * test_proto_http.c - HTTP/1.1 (proto_http.c): the API's query strings
 * (percent-decoding), JSON bodies (strings, escapes, surrogates), pairs,
 * forward-auth's user, and the framing (request line, headers, bodies);
 * table-driven, plus every request split short.
 */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "proto.h"
#include "proto_http.h"

#define MAX_LINE 4096

static struct http_conn pc;

static void conn_reset(void)
{
	memset(&pc, 0, sizeof(pc));
	pc.http.deny_status = 429;
	ck_assert_int_eq(addr_ip_parse("10.1.2.3", 8, &pc.peer), 0);
}

static enum proto_step parse(const char *in, size_t len, struct proto_parsed *out)
{
	memset(out, 0, sizeof(*out));
	return proto_http.parse(in, len, MAX_LINE, &pc, out);
}

/* ---- the API: a method, a target and a body, framed by the test ---- */

struct acase {
	const char *method, *target, *body;
	enum proto_step step;
	enum cmd_verb verb;
	const char *user; /* REQUEST: NULL for none checked */
	size_t user_len;  /* 0: strlen(user) */
	const char *action;
	long long cost;
	enum cmd_error err; /* BAD */
	const char *msg;    /* BAD: the message, when checked */
	int status;	    /* LOCAL */
};

#define OK(m, t, b, v, u, a, c)                                                                   \
	{                                                                                         \
		.method = m, .target = t, .body = b, .step = PROTO_REQUEST, .verb = v, .user = u, \
		.action = a, .cost = c                                                            \
	}
#define BAD(m, t, b, e)                                                          \
	{                                                                        \
		.method = m, .target = t, .body = b, .step = PROTO_BAD, .err = e \
	}
#define BADMSG(m, t, b, e, why)                                                              \
	{                                                                                    \
		.method = m, .target = t, .body = b, .step = PROTO_BAD, .err = e, .msg = why \
	}
#define LOCAL(m, t, b, s)                                                             \
	{                                                                             \
		.method = m, .target = t, .body = b, .step = PROTO_LOCAL, .status = s \
	}

static const struct acase acases[] = {
	/* query strings */
	OK("GET", "/v1/allow?user=david&action=reply", NULL, CMD_ALLOW, "david", "reply", 1),
	OK("POST", "/v1/allow?user=david&action=reply", NULL, CMD_ALLOW, "david", "reply", 1),
	OK("GET", "/v1/allow?action=login&cost=3&user=a%20b+c", NULL, CMD_ALLOW, "a b c", "login",
	   3),
	OK("GET", "/v1/allow?user=%41%62%2f%3D%26%25&action=x", NULL, CMD_ALLOW, "Ab/=&%", "x", 1),
	OK("GET", "/v1/allow?user=%e2%82%ac&action=x", NULL, CMD_ALLOW, "\xe2\x82\xac", "x", 1),
	OK("GET", "/v1/allow?user=u&action=x&other=%zz&flag", NULL, CMD_ALLOW, "u", "x", 1),
	/* our parameters once each: a repeat is refused, naming it */
	BADMSG("GET", "/v1/allow?user=first&user=last&action=x", NULL, CMD_ERR_SYNTAX,
	       "user is in the query more than once"),
	BADMSG("GET", "/v1/allow?user=u&action=x&cost=1&cost=2", NULL, CMD_ERR_SYNTAX,
	       "cost is in the query more than once"),
	BADMSG("GET", "/v1/allow?user=u&action=x&Cost=1&cost=1", NULL, CMD_ERR_SYNTAX,
	       "cost is in the query more than once"),
	BADMSG("GET", "/v1/allow?action=x&user=u&action=y", NULL, CMD_ERR_SYNTAX,
	       "action is in the query more than once"),
	BADMSG("GET", "/v1/allow?user=u&action=x&wait=10&wait=20", NULL, CMD_ERR_SYNTAX,
	       "wait is in the query more than once"),
	BADMSG("POST", "/v1/allow?cost=1&cost=2", "{\"user\":\"u\",\"action\":\"x\"}",
	       CMD_ERR_SYNTAX, "cost is in the query more than once"),
	BADMSG("POST", "/v1/holds/h1/settle?actual=1&actual=2", NULL, CMD_ERR_SYNTAX,
	       "actual is in the query more than once"),
	BADMSG("GET", "/auth/login?cost=1&cost=1", NULL, CMD_ERR_SYNTAX,
	       "cost is in the query more than once"),
	BADMSG("GET", "/v1/mallow?user=a&action=x&cost=2&user=b&action=y&cost=3", NULL,
	       CMD_ERR_SYNTAX, "cost is in the query more than once"),
	/* other parameters are the caller's: repeats are theirs too */
	OK("GET", "/v1/allow?user=u&tag=1&action=x&tag=2", NULL, CMD_ALLOW, "u", "x", 1),
	OK("GET", "/v1/peek?user=u&action=x&cost=0000012", NULL, CMD_PEEK, "u", "x", 12),
	/* STATE: a pair, no cost */
	OK("GET", "/v1/state?user=u&action=x", NULL, CMD_STATE, "u", "x", 1),
	OK("POST", "/v1/state", "{\"user\":\"u\",\"action\":\"r\"}", CMD_STATE, "u", "r", 1),
	BADMSG("GET", "/v1/state?user=u&action=x&cost=2", NULL, CMD_ERR_SYNTAX,
	       "STATE takes no cost"),
	BADMSG("GET", "/v1/state?action=x", NULL, CMD_ERR_BAD_USER, "user is missing or empty"),
	LOCAL("DELETE", "/v1/state?user=u&action=x", NULL, 405),
	OK("POST", "/v1/reset?user=u&action=x", NULL, CMD_RESET, "u", "x", 1),
	/* CHARGE: POST, with its cost (query or JSON) */
	OK("POST", "/v1/charge?user=u&action=llm&cost=1500", NULL, CMD_CHARGE, "u", "llm", 1500),
	OK("POST", "/v1/charge", "{\"user\":\"u\",\"action\":\"llm\",\"cost\":7}", CMD_CHARGE, "u",
	   "llm", 7),
	BAD("POST", "/v1/charge?user=u&action=llm", NULL, CMD_ERR_SYNTAX),
	LOCAL("GET", "/v1/charge?user=u&action=llm&cost=1", NULL, 405),
	/* holds: POST /v1/hold, POST /v1/holds/<id>/settle?actual=N, DELETE /v1/holds/<id> */
	OK("POST", "/v1/hold?user=u&action=llm&cost=800", NULL, CMD_HOLD, "u", "llm", 800),
	BAD("POST", "/v1/hold?user=u&action=llm", NULL, CMD_ERR_SYNTAX),
	BAD("POST", "/v1/holds/llm:dQ:0123456789abcdef:800/settle", NULL, CMD_ERR_SYNTAX),
	BAD("POST", "/v1/holds/nocolon/settle?actual=3", NULL, CMD_ERR_NO_HOLD),
	LOCAL("GET", "/v1/holds/llm:dQ:0123456789abcdef:800/settle?actual=3", NULL, 405),
	LOCAL("POST", "/v1/holds/llm:dQ:0123456789abcdef:800", NULL, 405),
	BAD("GET", "/v1/allow?user=%zz&action=x", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/v1/allow?user=%4&action=x", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/v1/allow?user=ab%&action=x", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/v1/allow?user=u&action=%g0", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/v1/allow?action=x", NULL, CMD_ERR_BAD_USER),
	BAD("GET", "/v1/allow?user=&action=x", NULL, CMD_ERR_BAD_USER),
	BAD("GET", "/v1/allow?user=u", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/v1/allow?user=u&action=", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/v1/allow?user=u&action=x&cost=0", NULL, CMD_ERR_BAD_COST),
	BAD("GET", "/v1/allow?user=u&action=x&cost=-1", NULL, CMD_ERR_BAD_COST),
	BAD("GET", "/v1/allow?user=u&action=x&cost=2147483648", NULL, CMD_ERR_BAD_COST),
	BAD("POST", "/v1/reset?user=u&action=x&cost=2", NULL, CMD_ERR_SYNTAX),
	/* JSON bodies */
	OK("POST", "/v1/allow", "{\"user\":\"david\",\"action\":\"reply\",\"cost\":2}", CMD_ALLOW,
	   "david", "reply", 2),
	OK("POST", "/v1/allow", " \r\n{ \"user\" : \"d\" ,\t\"action\":\"r\" }\n", CMD_ALLOW, "d",
	   "r", 1),
	OK("POST", "/v1/allow",
	   "{\"user\":\"a\\\"b\\\\\\/c\\n\\t\\b\\f\\r\\u0041\\u00e9\\u20AC\\ud83d\\ude00\","
	   "\"action\":\"r\"}",
	   CMD_ALLOW, "a\"b\\/c\n\t\b\f\rA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "r", 1),
	OK("POST", "/v1/allow", "{\"user\":\"\xc3\xa9\",\"action\":\"r\"}", CMD_ALLOW, "\xc3\xa9",
	   "r", 1),
	OK("POST", "/v1/allow",
	   "{\"user\":\"u\",\"action\":\"r\",\"x\":null,\"n\":-3e5,\"t\":true,\"f\":false,"
	   "\"longer than sixteen bytes\":\"s\"}",
	   CMD_ALLOW, "u", "r", 1),
	OK("POST", "/v1/allow?user=query&action=r", "{\"user\":\"body\"}", CMD_ALLOW, "body", "r",
	   1),
	OK("POST", "/v1/peek", "{\"user\":\"u\",\"action\":\"r\",\"cost\":10}", CMD_PEEK, "u", "r",
	   10),
	OK("POST", "/v1/reset", "{\"user\":\"u\",\"action\":\"r\"}", CMD_RESET, "u", "r", 1),
	BAD("POST", "/v1/allow", "{\"user\":\"\\ud83d\",\"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"\\ud83d\\u0041\",\"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"\\udc00\",\"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"\\u00zz\",\"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"\\u00\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"\\x41\",\"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"a\x01\",\"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"open", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"u\\", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":5,\"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":null,\"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"cost\":\"2\"}",
	    CMD_ERR_BAD_COST),
	BAD("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"cost\":true}",
	    CMD_ERR_BAD_COST),
	BAD("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"cost\":1.5}",
	    CMD_ERR_BAD_COST),
	/* an unknown key's value is ignored whatever its type, nested too */
	OK("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":{}}", CMD_ALLOW, "u", "r",
	   1),
	OK("POST", "/v1/allow", "{\"x\":[1],\"user\":\"u\",\"action\":\"r\"}", CMD_ALLOW, "u", "r",
	   1),
	OK("POST", "/v1/allow",
	   "{\"meta\":{\"trace\":\"t\\\"}\",\"tags\":[\"a\",{\"b\":[[], {}, null, -1.5e3]}],"
	   "\"on\":true},\"user\":\"u\", \"action\":\"r\",\"cost\":3, \"e\": [ ] }",
	   CMD_ALLOW, "u", "r", 3),
	OK("POST", "/v1/allow",
	   "{\"user\":\"u\",\"action\":\"r\",\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]"
	   "]]]]]]]]]]]]]]]]]}",
	   CMD_ALLOW, "u", "r", 1),
	BADMSG("POST", "/v1/allow",
	       "{\"user\":\"u\",\"action\":\"r\",\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]"
	       "]]]]]]]]]]]]]]]]]]]}",
	       CMD_ERR_SYNTAX, "JSON nested deeper than 32 levels in an ignored value"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":{\"a\":1]}",
	       CMD_ERR_SYNTAX, "malformed JSON: expected ',' or '}'"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":[1}", CMD_ERR_SYNTAX,
	       "malformed JSON: expected ',' or ']'"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":{1:2}}", CMD_ERR_SYNTAX,
	       "malformed JSON: expected a key"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":{\"a\" 2}}",
	       CMD_ERR_SYNTAX, "malformed JSON: expected ':'"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":[\"\\q\"]}",
	       CMD_ERR_SYNTAX, "malformed JSON string"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":[1,]}", CMD_ERR_SYNTAX,
	       "malformed JSON: values are strings, numbers, objects, arrays, true, false or null"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":[", CMD_ERR_SYNTAX,
	       "malformed JSON: a value is missing"),
	BADMSG("POST", "/v1/allow", "{\"user\":{\"name\":\"u\"},\"action\":\"r\"}", CMD_ERR_SYNTAX,
	       "user and action are JSON strings, cost and wait numbers"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"cost\":[2]}",
	       CMD_ERR_BAD_COST, "user and action are JSON strings, cost and wait numbers"),
	/* our keys at most once, and wait a number */
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"user\":\"v\"}",
	       CMD_ERR_SYNTAX, "user is in the JSON body more than once"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"cost\":1,\"action\":\"r\",\"cost\":2}",
	       CMD_ERR_SYNTAX, "cost is in the JSON body more than once"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"wait\":null}",
	       CMD_ERR_SYNTAX, "user and action are JSON strings, cost and wait numbers"),
	BADMSG("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"wait\":true}",
	       CMD_ERR_SYNTAX, "user and action are JSON strings, cost and wait numbers"),
	OK("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\",\"x\":1,\"x\":2}", CMD_ALLOW, "u",
	   "r", 1),
	BAD("POST", "/v1/allow", "{\"user\":\"u\",\"action\":\"r\"}x", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"u\",}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":\"u\" \"action\":\"r\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\" \"u\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{user:\"u\"}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{\"user\":}", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "[\"u\"]", CMD_ERR_SYNTAX),
	BAD("POST", "/v1/allow", "{}", CMD_ERR_BAD_USER),
	BAD("POST", "/v1/allow", "{\"user\":\"\",\"action\":\"r\"}", CMD_ERR_BAD_USER),
	BAD("POST", "/v1/allow", "{\"user\":\"u\"}", CMD_ERR_SYNTAX),
	/* pairs */
	OK("GET", "/v1/mallow?user=a&action=x&user=b&action=y&cost=2", NULL, CMD_MALLOW, NULL, NULL,
	   2),
	OK("POST", "/v1/mpeek?action=x&user=a", NULL, CMD_MPEEK, NULL, NULL, 1),
	BAD("GET", "/v1/mallow?user=a&action=x&user=b", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/v1/mallow", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/v1/mallow?user=&action=x", NULL, CMD_ERR_BAD_USER),
	BAD("GET", "/v1/mallow?user=a&action=x&cost=0", NULL, CMD_ERR_BAD_COST),
	BAD("GET", "/v1/mpeek?user=a%zz&action=x", NULL, CMD_ERR_SYNTAX),
	BAD("POST", "/v1/mallow?user=a&action=x", "{}", CMD_ERR_SYNTAX),
	LOCAL("PUT", "/v1/mallow?user=a&action=x", NULL, 405),
	/* forward-auth: the user is the peer (untrusted here), never the query */
	OK("GET", "/auth/login?cost=2&user=ignored", NULL, CMD_ALLOW, "10.1.2.3", "login", 2),
	OK("GET", "/auth/login?user=a&user=b&action=c&action=d", NULL, CMD_ALLOW, "10.1.2.3",
	   "login", 1),
	OK("HEAD", "/auth/lo%67in", NULL, CMD_ALLOW, "10.1.2.3", "login", 1),
	BAD("GET", "/auth/", NULL, CMD_ERR_UNKNOWN_ACTION),
	BAD("GET", "/auth/%zz", NULL, CMD_ERR_SYNTAX),
	BAD("GET", "/auth/login?cost=x", NULL, CMD_ERR_BAD_COST),
	/* methods and paths */
	LOCAL("GET", "/v1/reset?user=u&action=x", NULL, 405),
	LOCAL("DELETE", "/v1/allow?user=u&action=x", NULL, 405),
	LOCAL("GET", "/nope", NULL, 404),
	LOCAL("GET", "/v1/allowed?user=u&action=x", NULL, 404),
	LOCAL("GET", "/", NULL, 404),
};

/* The request of c, framed: request line, Host, Content-Length with a body. */
static size_t frame(const struct acase *c, char *buf, size_t cap)
{
	int n;
	if (c->body)
		n = snprintf(buf, cap, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
			     c->method, c->target, strlen(c->body), c->body);
	else
		n = snprintf(buf, cap, "%s %s HTTP/1.1\r\nHost: x\r\n\r\n", c->method, c->target);
	ck_assert_int_lt(n, (int)cap);
	return (size_t)n;
}

START_TEST(test_api_table)
{
	const struct acase *c = &acases[_i];
	char buf[1024];
	size_t len = frame(c, buf, sizeof(buf));
	struct proto_parsed out;
	conn_reset();
	enum proto_step st = parse(buf, len, &out);
	ck_assert_msg(st == c->step, "%s %s: step %d (%s), want %d", c->method, c->target, st,
		      st == PROTO_BAD ? out.err.msg : "", c->step);
	ck_assert_uint_eq(out.used, len);
	switch (st) {
	case PROTO_REQUEST:
		ck_assert_int_eq(out.req.verb, c->verb);
		if (c->user) {
			size_t ul = c->user_len ? c->user_len : strlen(c->user);
			ck_assert_msg(
				out.req.user_len == ul && memcmp(out.req.user, c->user, ul) == 0,
				"%s: user %.*s", c->target, (int)out.req.user_len, out.req.user);
		}
		if (c->action) {
			ck_assert_uint_eq(out.req.action_len, strlen(c->action));
			ck_assert_mem_eq(out.req.action, c->action, strlen(c->action));
		}
		ck_assert_int_eq(out.req.cost, c->cost);
		break;
	case PROTO_BAD:
		ck_assert_msg(out.err.code == c->err, "%s %s: error %d (%s)", c->method, c->target,
			      out.err.code, out.err.msg);
		if (c->msg)
			ck_assert_str_eq(out.err.msg, c->msg);
		break;
	case PROTO_LOCAL:
		ck_assert_int_eq(out.local, c->status);
		break;
	default:
		break;
	}
}
END_TEST

/* Any whole request cut short asks for more. */
START_TEST(test_api_split)
{
	const struct acase *c = &acases[_i];
	char buf[1024];
	size_t len = frame(c, buf, sizeof(buf));
	conn_reset();
	for (size_t k = 0; k < len; k++) {
		struct proto_parsed out;
		enum proto_step st = parse(buf, k, &out);
		ck_assert_msg(st == PROTO_NEED_MORE, "%s cut at %zu: step %d", c->target, k, st);
	}
}
END_TEST

START_TEST(test_pairs_decoded)
{
	static const char in[] = "GET /v1/mallow?user=a%20b&action=x&action=y&user=c&cost=3 "
				 "HTTP/1.1\r\nHost: h\r\n\r\n";
	struct proto_parsed out;
	conn_reset();
	ck_assert_int_eq(parse(in, sizeof(in) - 1, &out), PROTO_REQUEST);
	ck_assert_int_eq(out.req.npairs, 2);
	ck_assert_int_eq(out.req.cost, 3);
	ck_assert_uint_eq(out.req.pairs[0].user_len, 3);
	ck_assert_mem_eq(out.req.pairs[0].user, "a b", 3);
	ck_assert_mem_eq(out.req.pairs[0].action, "x", 1);
	ck_assert_mem_eq(out.req.pairs[1].user, "c", 1);
	ck_assert_mem_eq(out.req.pairs[1].action, "y", 1);
}
END_TEST

START_TEST(test_pairs_at_most_8)
{
	char in[1024] = "GET /v1/mallow?";
	for (int i = 0; i < 9; i++)
		snprintf(in + strlen(in), sizeof(in) - strlen(in), "user=u%d&action=a%d&", i, i);
	struct proto_parsed out;
	conn_reset();
	strcat(in, " HTTP/1.1\r\nHost: h\r\n\r\n");
	ck_assert_int_eq(parse(in, strlen(in), &out), PROTO_BAD);
	ck_assert_int_eq(out.err.code, CMD_ERR_SYNTAX);
}
END_TEST

/* A user of KEYS_USER_MAX bytes fits, one more does not; an action of
 * POLICY_NAME_MAX fits; both in a query and in JSON. */
START_TEST(test_lengths)
{
	static char in[4096], user[KEYS_USER_MAX + 2], action[POLICY_NAME_MAX + 2];
	struct proto_parsed out;
	for (int more = 0; more <= 1; more++) {
		memset(user, 'u', sizeof(user));
		user[KEYS_USER_MAX + more] = '\0';
		memset(action, 'a', sizeof(action));
		action[POLICY_NAME_MAX + more] = '\0';
		conn_reset();
		snprintf(in, sizeof(in),
			 "GET /v1/allow?user=%s&action=a HTTP/1.1\r\nHost: h\r\n\r\n", user);
		ck_assert_int_eq(parse(in, strlen(in), &out), more ? PROTO_BAD : PROTO_REQUEST);
		if (more)
			ck_assert_int_eq(out.err.code, CMD_ERR_BAD_USER);
		snprintf(in, sizeof(in),
			 "GET /v1/allow?user=u&action=%s HTTP/1.1\r\nHost: h\r\n\r\n", action);
		ck_assert_int_eq(parse(in, strlen(in), &out), more ? PROTO_BAD : PROTO_REQUEST);
		if (more)
			ck_assert_int_eq(out.err.code, CMD_ERR_UNKNOWN_ACTION);
		else
			ck_assert_uint_eq(out.req.action_len, POLICY_NAME_MAX);
		char body[1024];
		int bl = snprintf(body, sizeof(body), "{\"user\":\"%s\",\"action\":\"%s\"}", user,
				  more ? "a" : action);
		snprintf(in, sizeof(in),
			 "POST /v1/allow HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s", bl,
			 body);
		ck_assert_int_eq(parse(in, strlen(in), &out), more ? PROTO_BAD : PROTO_REQUEST);
		if (more)
			ck_assert_int_eq(out.err.code, CMD_ERR_BAD_USER);
		else
			ck_assert_uint_eq(out.req.user_len, KEYS_USER_MAX);
	}
}
END_TEST

/* forward-auth from a trusted proxy: X-Forwarded-For's rightmost address
 * that is not a trusted proxy; or the configured user header. */
START_TEST(test_auth_trusted)
{
	struct proto_parsed out;
	conn_reset();
	ck_assert_int_eq(addr_ip_parse("127.0.0.1", 9, &pc.peer), 0);
	ck_assert_int_eq(addr_net_parse("127.0.0.0/8", 11, &pc.http.trusted[0]), 0);
	pc.http.ntrusted = 1;
	pc.peer_trusted = 1;
	static const char xff[] = "GET /auth/login HTTP/1.1\r\nHost: h\r\n"
				  "X-Forwarded-For: 6.6.6.6, 1.2.3.4 , 127.0.0.2\r\n\r\n";
	ck_assert_int_eq(parse(xff, sizeof(xff) - 1, &out), PROTO_REQUEST);
	ck_assert_uint_eq(out.req.user_len, 7);
	ck_assert_mem_eq(out.req.user, "1.2.3.4", 7);
	static const char real[] = "GET /auth/login HTTP/1.1\r\nHost: h\r\n"
				   "X-Real-IP: 2001:db8::1\r\n\r\n";
	ck_assert_int_eq(parse(real, sizeof(real) - 1, &out), PROTO_REQUEST);
	ck_assert_uint_eq(out.req.user_len, 11);
	ck_assert_mem_eq(out.req.user, "2001:db8::1", 11);
	static const char junk[] = "GET /auth/login HTTP/1.1\r\nHost: h\r\n"
				   "X-Forwarded-For: not-an-address\r\n\r\n";
	ck_assert_int_eq(parse(junk, sizeof(junk) - 1, &out), PROTO_BAD);
	ck_assert_int_eq(out.err.code, CMD_ERR_BAD_USER);
	static const char none[] = "GET /auth/login HTTP/1.1\r\nHost: h\r\n\r\n";
	ck_assert_int_eq(parse(none, sizeof(none) - 1, &out), PROTO_REQUEST);
	ck_assert_mem_eq(out.req.user, "127.0.0.1", 9);
	strcpy(pc.http.user_header, "X-User");
	static const char hdr[] = "GET /auth/login HTTP/1.1\r\nHost: h\r\nx-user:  alice \r\n\r\n";
	ck_assert_int_eq(parse(hdr, sizeof(hdr) - 1, &out), PROTO_REQUEST);
	ck_assert_uint_eq(out.req.user_len, 5);
	ck_assert_mem_eq(out.req.user, "alice", 5);
	ck_assert_int_eq(parse(none, sizeof(none) - 1, &out), PROTO_BAD);
	ck_assert_int_eq(out.err.code, CMD_ERR_BAD_USER);
	/* an untrusted peer's headers are not believed */
	pc.peer_trusted = 0;
	ck_assert_int_eq(parse(hdr, sizeof(hdr) - 1, &out), PROTO_REQUEST);
	ck_assert_mem_eq(out.req.user, "127.0.0.1", 9);
}
END_TEST

/* ---- framing: raw requests ---- */

struct rcase {
	const char *in;
	enum proto_step step;
	size_t used; /* 0: all of in */
	int status;  /* LOCAL */
	enum cmd_error err;
	int close_after;
};

static const struct rcase rcases[] = {
	{"\r\n\r\nGET /v1/allow?user=u&action=x HTTP/1.1\r\nHost: x\r\n\r\n", PROTO_SKIP, 4, 0, 0,
	 0},
	{"\n", PROTO_SKIP, 1, 0, 0, 0},
	{"GET /v1/allow?user=u&action=x HTTP/1.1\r\nHost: x\r\n", PROTO_NEED_MORE, 0, 0, 0, 0},
	{"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}", PROTO_NEED_MORE, 0,
	 0, 0, 0},
	/* bare LF line ends are read too */
	{"GET /v1/allow?user=u&action=x HTTP/1.1\nHost: x\n\n", PROTO_REQUEST, 0, 0, 0, 0},
	/* pipelined: the first request */
	{"GET /v1/allow?user=u&action=x HTTP/1.1\r\nHost: x\r\n\r\nGET /", PROTO_REQUEST, 51, 0, 0,
	 0},
	{"GET /v1/allow?user=u&action=x HTTP/1.1\r\nHost: x\r\nConnection: foo, Close\r\n\r\n",
	 PROTO_REQUEST, 0, 0, 0, 1},
	{"GET /v1/allow?user=u&action=x HTTP/1.0\r\n\r\n", PROTO_REQUEST, 0, 0, 0, 1},
	{"GET /v1/allow?user=u&action=x HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", PROTO_REQUEST,
	 0, 0, 0, 0},
	{"GET /v1/allow?user=u&action=x HTTP/1.1\r\n\r\n", PROTO_BAD, 0, 0, CMD_ERR_SYNTAX, 0},
	{"GET /v1/allow?user=u&action=x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", PROTO_BAD, 0, 0,
	 CMD_ERR_SYNTAX, 0},
	{"GET /v1/allow HTTP/2.0\r\nHost: x\r\n\r\n", PROTO_LOCAL, 0, 505, 0, 1},
	{"GET /v1/allow FOO\r\nHost: x\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
	{"GET /v1/allow\r\nHost: x\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
	{"GET HTTP/1.1\r\nHost: x\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
	{"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
	{"GET /a\x7f HTTP/1.1\r\nHost: x\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
	{"POST /v1/allow HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", PROTO_LOCAL, 0,
	 501, 0, 1},
	{"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length: 4097\r\n\r\n", PROTO_LOCAL, 0, 413,
	 0, 1},
	{"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", PROTO_LOCAL, 0, 400, 0,
	 1},
	{"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\r\n", PROTO_LOCAL, 0, 400, 0,
	 1},
	{"POST /v1/allow HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
	 PROTO_LOCAL, 0, 400, 0, 1},
	{"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
	{"GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
	{"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
	{"GET / HTTP/1.1\r\nHost: x\r\nX: a\x01z\r\n\r\n", PROTO_LOCAL, 0, 400, 0, 1},
};

START_TEST(test_framing_table)
{
	const struct rcase *c = &rcases[_i];
	size_t len = strlen(c->in);
	struct proto_parsed out;
	conn_reset();
	enum proto_step st = parse(c->in, len, &out);
	ck_assert_msg(st == c->step, "case %d: step %d, want %d", _i, st, c->step);
	if (st == PROTO_NEED_MORE)
		return;
	if (st != PROTO_LOCAL || c->status != 400)
		ck_assert_msg(out.used == (c->used ? c->used : len), "case %d: used %zu", _i,
			      out.used);
	if (st == PROTO_LOCAL)
		ck_assert_int_eq(out.local, c->status);
	if (st == PROTO_BAD)
		ck_assert_int_eq(out.err.code, c->err);
	ck_assert_msg(out.close_after == c->close_after, "case %d: close_after %d", _i,
		      out.close_after);
}
END_TEST

/* A header block longer than the window, with no end: fatal. */
START_TEST(test_headers_too_large)
{
	static char in[PROTO_HTTP_WINDOW + 64];
	size_t n = (size_t)snprintf(in, sizeof(in), "GET / HTTP/1.1\r\nX: ");
	memset(in + n, 'x', sizeof(in) - n);
	struct proto_parsed out;
	conn_reset();
	ck_assert_int_eq(parse(in, PROTO_HTTP_WINDOW - 1, &out), PROTO_NEED_MORE);
	ck_assert_int_eq(parse(in, PROTO_HTTP_WINDOW, &out), PROTO_FATAL);
	ck_assert_int_eq(out.err.code, CMD_ERR_LINE_TOO_LONG);
}
END_TEST

/* ---- replies (Content-Length: # is the body's length) ---- */

/* cmd_result.tag as the parse sets it: kind (0 API, 1 forward-auth),
 * legacy headers (4), the denial status above bit 8. */
#define AUTH 1
#define LEGACY 4
#define DENY_403 (403 << 8)

struct fcase {
	struct cmd_result res;
	const char *want;
};

static const struct fcase fcases[] = {
	{{.kind = CMD_REPLY_DECISION,
	  .allowed = 1,
	  .limit = 10,
	  .remaining = 9,
	  .reset_ms = 59001,
	  .window_ms = 60000,
	  .action = "login"},
	 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: #\r\n"
	 "RateLimit-Policy: \"login\";q=10;w=60\r\nRateLimit: \"login\";r=9;t=60\r\n\r\n"
	 "{\"allowed\":true,\"limit\":10,\"remaining\":9,\"retry_after_ms\":0,\"reset_ms\":59001}\n"},
	{{.kind = CMD_REPLY_DECISION,
	  .limit = 3,
	  .retry_after_ms = 1500,
	  .reset_ms = 2000,
	  .window_ms = 1000,
	  .action = "api",
	  .multi = 1,
	  .pair = 2,
	  .tag = LEGACY,
	  .close_after = 1},
	 "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
	 "Content-Length: #\r\nConnection: close\r\n"
	 "RateLimit-Policy: \"api\";q=3;w=1\r\nRateLimit: \"api\";r=0;t=2\r\nRetry-After: 2\r\n"
	 "X-RateLimit-Limit: 3\r\nX-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 2\r\n\r\n"
	 "{\"allowed\":false,\"limit\":3,\"remaining\":0,\"retry_after_ms\":1500,\"reset_ms\":2000,"
	 "\"pair\":2}\n"},
	/* an unlimited override: nothing to announce */
	{{.kind = CMD_REPLY_DECISION, .allowed = 1, .limit = -1, .remaining = -1, .reset_ms = -1},
	 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: #\r\n\r\n"
	 "{\"allowed\":true,\"limit\":-1,\"remaining\":-1,\"retry_after_ms\":0,\"reset_ms\":-1}\n"},
	/* a fallback: no remaining, so no RateLimit field */
	{{.kind = CMD_REPLY_DECISION,
	  .limit = 5,
	  .remaining = -1,
	  .retry_after_ms = 1000,
	  .reset_ms = -1,
	  .window_ms = 60000,
	  .action = "a",
	  .tag = AUTH},
	 "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\n"
	 "Content-Length: #\r\nRateLimit-Policy: \"a\";q=5;w=60\r\nRetry-After: 1\r\n\r\n"
	 "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,"
	 "\"detail\":\"rate limited; retry after 1 s\",\"retry_after_ms\":1000}\n"},
	{{.kind = CMD_REPLY_DECISION,
	  .limit = 5,
	  .remaining = 0,
	  .retry_after_ms = -1,
	  .reset_ms = -1,
	  .window_ms = 60000,
	  .action = "a",
	  .tag = AUTH | DENY_403},
	 "HTTP/1.1 403 Forbidden\r\nContent-Type: application/problem+json\r\n"
	 "Content-Length: #\r\nRateLimit-Policy: \"a\";q=5;w=60\r\n\r\n"
	 "{\"type\":\"about:blank\",\"title\":\"Forbidden\",\"status\":403,"
	 "\"detail\":\"rate limited\",\"retry_after_ms\":-1}\n"},
	{{.kind = CMD_REPLY_DECISION,
	  .allowed = 1,
	  .limit = 5,
	  .remaining = 4,
	  .reset_ms = 12000,
	  .window_ms = 60000,
	  .action = "a",
	  .tag = AUTH | DENY_403},
	 "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nRateLimit-Policy: \"a\";q=5;w=60\r\n"
	 "RateLimit: \"a\";r=4;t=12\r\n\r\n"},
	{{.kind = CMD_REPLY_OK},
	 "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: #\r\n\r\n"
	 "{\"ok\":true}\n"},
	{{.kind = CMD_REPLY_ERROR, .error = CMD_ERR_BAD_USER, .msg = "a \"quoted\"\n\\ user"},
	 "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: #\r\n\r\n"
	 "{\"error\":\"bad-user\",\"message\":\"a \\\"quoted\\\"\\u000a\\\\ user\"}\n"},
	{{.kind = CMD_REPLY_ERROR, .error = CMD_ERR_UNKNOWN_ACTION, .msg = "no policy"},
	 "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: #\r\n\r\n"
	 "{\"error\":\"unknown-action\",\"message\":\"no policy\"}\n"},
	/* this daemon out of memory: try again later, as with the store */
	{{.kind = CMD_REPLY_ERROR, .error = CMD_ERR_OUT_OF_MEMORY, .msg = "out of memory"},
	 "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
	 "#\r\n\r\n"
	 "{\"error\":\"out-of-memory\",\"message\":\"out of memory\"}\n"},
};

/* want with its Content-Length ('#') that of its body. */
static void expand(const char *want, char *out, size_t cap)
{
	const char *hash = strchr(want, '#');
	if (!hash) {
		snprintf(out, cap, "%s", want);
		return;
	}
	const char *body = strstr(want, "\r\n\r\n") + 4;
	snprintf(out, cap, "%.*s%zu%s", (int)(hash - want), want, strlen(body), hash + 1);
}

START_TEST(test_format_table)
{
	static char buf[4096], want[4096];
	size_t n = proto_http.format(buf, &fcases[_i].res, NULL);
	ck_assert_uint_le(n, proto_http.reply_max);
	buf[n] = '\0';
	expand(fcases[_i].want, want, sizeof(want));
	ck_assert_str_eq(buf, want);
}
END_TEST

/* STATE's JSON: a limit's seven figures, a calendar's unit; eight limits
 * of the largest figures fit a reply. */
START_TEST(test_format_state)
{
	static struct cmd_state st = {.algo = POLICY_FIXED_WINDOW,
				      .nlimits = 2,
				      .limits = {{60000, CALENDAR_NONE, 5, 2, 3, 41000, 60, 120},
						 {86400000, CALENDAR_DAY, 100, 2, 98, 9, 10, 20}}};
	static char buf[4096 + 1], want[4096];
	struct cmd_result r = {.kind = CMD_REPLY_STATE, .state = &st};
	size_t n = proto_http.format(buf, &r, NULL);
	buf[n] = '\0';
	expand("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: #\r\n\r\n"
	       "{\"algorithm\":\"fixed_window\",\"override\":\"none\",\"ban_ms\":0,\"limits\":["
	       "{\"window_ms\":60000,\"limit\":5,\"used\":2,\"remaining\":3,\"reset_ms\":41000,"
	       "\"start_ms\":60,\"end_ms\":120},"
	       "{\"window_ms\":86400000,\"limit\":100,\"used\":2,\"remaining\":98,\"reset_ms\":9,"
	       "\"start_ms\":10,\"end_ms\":20,\"calendar\":\"day\"}]}\n",
	       want, sizeof(want));
	ck_assert_str_eq(buf, want);
	st.algo = POLICY_SLIDING_COUNTER;
	st.override = CMD_STATE_UNLIMITED;
	st.ban_ms = INT64_MIN;
	st.nlimits = POLICY_MAX_LIMITS;
	for (int i = 0; i < POLICY_MAX_LIMITS; i++)
		st.limits[i] =
			(struct cmd_state_limit){INT64_MIN, CALENDAR_MONTH, INT64_MIN, INT64_MIN,
						 INT64_MIN, INT64_MIN,	    INT64_MIN, INT64_MIN};
	r.close_after = 1;
	n = proto_http.format(buf, &r, NULL);
	ck_assert_uint_le(n, proto_http.reply_max);
	buf[n] = '\0';
	const char *body = strstr(buf, "\r\n\r\n") + 4;
	ck_assert_int_eq(strtol(strstr(buf, "Content-Length: ") + 16, NULL, 10),
			 (long)strlen(body));
	ck_assert_str_eq(body + strlen(body) - 4, "}]}\n"); /* whole */
}
END_TEST

/* The protocol's own replies: a status and a JSON error. */
START_TEST(test_format_local)
{
	static const int statuses[] = {400, 404, 405, 413, 501, 505};
	static char buf[4096];
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
		struct cmd_result r = {
			.kind = CMD_REPLY_LOCAL, .local = statuses[i], .close_after = 1};
		size_t n = proto_http.format(buf, &r, NULL);
		buf[n] = '\0';
		char status[16];
		snprintf(status, sizeof(status), "HTTP/1.1 %d ", statuses[i]);
		ck_assert_msg(strncmp(buf, status, strlen(status)) == 0, "%s", buf);
		ck_assert_msg(strstr(buf, "\r\nConnection: close\r\n") &&
				      strstr(buf, "\r\n\r\n{\"error\":\""),
			      "%s", buf);
		const char *body = strstr(buf, "\r\n\r\n") + 4;
		long cl = strtol(strstr(buf, "Content-Length: ") + 16, NULL, 10);
		ck_assert_int_eq(cl, (long)strlen(body));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto_http");
	TCase *tc = tcase_create("core");
	int na = (int)(sizeof(acases) / sizeof(acases[0]));
	tcase_add_loop_test(tc, test_api_table, 0, na);
	tcase_add_loop_test(tc, test_api_split, 0, na);
	tcase_add_test(tc, test_pairs_decoded);
	tcase_add_test(tc, test_pairs_at_most_8);
	tcase_add_test(tc, test_lengths);
	tcase_add_test(tc, test_auth_trusted);
	tcase_add_loop_test(tc, test_framing_table, 0, (int)(sizeof(rcases) / sizeof(rcases[0])));
	tcase_add_test(tc, test_headers_too_large);
	tcase_add_loop_test(tc, test_format_table, 0, (int)(sizeof(fcases) / sizeof(fcases[0])));
	tcase_add_test(tc, test_format_local);
	tcase_add_test(tc, test_format_state);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
