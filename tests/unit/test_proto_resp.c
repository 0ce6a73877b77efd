/* test_proto_resp.c - RESP (proto_resp.c): parse and format tables, every request split short,
 * HELLO's switch to RESP3 and MULTI's refusal across a connection's replies. */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "proto_resp.h"

/* The protocol's own replies, as proto_resp.c numbers them. */
enum { L_OK, L_NOPROTO, L_INFO, L_EMPTY_ARRAY, L_EMPTY_MAP, L_DB_RANGE, L_HELLO, L_HELLO_VERSION };

#define MAX_LINE 128

struct rcase {
	const char *in;
	size_t len; /* 0: strlen(in) */
	enum proto_step step;
	size_t used; /* 0: all of in (REQUEST, SKIP, BAD, LOCAL) */
	enum cmd_verb verb;
	const char *user; /* NULL: none checked */
	size_t user_len;  /* 0: strlen(user) */
	const char *action;
	long long cost;
	enum cmd_error err; /* BAD, FATAL */
	int local;	    /* LOCAL */
};

#define REQ(s, v, u, a, c)                                                                   \
	{                                                                                    \
		.in = s, .step = PROTO_REQUEST, .verb = v, .user = u, .action = a, .cost = c \
	}
#define SKIP(s, n)                                     \
	{                                              \
		.in = s, .step = PROTO_SKIP, .used = n \
	}
#define MORE(s)                                  \
	{                                        \
		.in = s, .step = PROTO_NEED_MORE \
	}
#define BAD(s, e)                                    \
	{                                            \
		.in = s, .step = PROTO_BAD, .err = e \
	}
#define LOCAL(s, l)                                      \
	{                                                \
		.in = s, .step = PROTO_LOCAL, .local = l \
	}
#define FATAL(s, e)                                    \
	{                                              \
		.in = s, .step = PROTO_FATAL, .err = e \
	}

static const struct rcase cases[] = {
	/* requests */
	REQ("*3\r\n$5\r\nALLOW\r\n$5\r\ndavid\r\n$5\r\nreply\r\n", CMD_ALLOW, "david", "reply", 1),
	REQ("*3\r\n$5\r\nallow\r\n$5\r\ndavid\r\n$5\r\nreply\r\n", CMD_ALLOW, "david", "reply", 1),
	REQ("*4\r\n$4\r\nPEEK\r\n$1\r\nu\r\n$1\r\na\r\n$2\r\n07\r\n", CMD_PEEK, "u", "a", 7),
	REQ("*4\r\n$6\r\nCHARGE\r\n$1\r\nu\r\n$1\r\na\r\n$3\r\n900\r\n", CMD_CHARGE, "u", "a", 900),
	BAD("*3\r\n$6\r\nCHARGE\r\n$1\r\nu\r\n$1\r\na\r\n", CMD_ERR_SYNTAX),
	BAD("*4\r\n$6\r\nCHARGE\r\n$0\r\n\r\n$1\r\na\r\n$1\r\n1\r\n", CMD_ERR_BAD_USER),
	REQ("*3\r\n$5\r\nRESET\r\n$1\r\nu\r\n$1\r\na\r\n", CMD_RESET, "u", "a", 1),
	REQ("*1\r\n$4\r\nPING\r\n", CMD_PING, NULL, NULL, 1),
	REQ("*2\r\n$4\r\nping\r\n$2\r\nhi\r\n", CMD_PING, NULL, NULL, 1),
	REQ("*1\r\n$4\r\nQUIT\r\n", CMD_QUIT, NULL, NULL, 1),
	/* a user is any bytes: NUL, CR, LF, spaces */
	{.in = "*3\r\n$5\r\nALLOW\r\n$5\r\na\0\r\n \r\n$1\r\nx\r\n",
	 .len = 33,
	 .step = PROTO_REQUEST,
	 .verb = CMD_ALLOW,
	 .user = "a\0\r\n ",
	 .user_len = 5,
	 .action = "x",
	 .cost = 1},
	REQ("*5\r\n$6\r\nMALLOW\r\n$2\r\nu1\r\n$2\r\na1\r\n$2\r\nu2\r\n$2\r\na2\r\n", CMD_MALLOW,
	    NULL, NULL, 1),
	REQ("*6\r\n$5\r\nMPEEK\r\n$2\r\nu1\r\n$2\r\na1\r\n$2\r\nu2\r\n$2\r\na2\r\n$1\r\n3\r\n",
	    CMD_MPEEK, NULL, NULL, 3),
	REQ("*5\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$2\r\n15\r\n$2\r\n30\r\n$2\r\n60\r\n",
	    CMD_THROTTLE, "k", NULL, 1),
	REQ("*6\r\n$11\r\ncl.throttle\r\n$1\r\nk\r\n$1\r\n0\r\n$1\r\n1\r\n$1\r\n1\r\n$1\r\n0\r\n",
	    CMD_THROTTLE, "k", NULL, 0),
	/* pipelined: the first request only */
	{.in = "*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n",
	 .step = PROTO_REQUEST,
	 .used = 14,
	 .verb = CMD_PING},
	/* empty and null arrays are no request */
	SKIP("*0\r\n", 4),
	SKIP("*-1\r\n", 5),
	/* not yet whole */
	MORE(""),
	MORE("*"),
	MORE("*3\r"),
	MORE("*3\r\n$5\r\nALL"),
	MORE("*3\r\n$5\r\nALLOW\r\n$5\r\ndavid\r\n$5\r\nreply\r"),
	/* bad requests: answered, the connection lives on */
	BAD("*2\r\n$5\r\nALLOW\r\n$1\r\nu\r\n", CMD_ERR_SYNTAX),
	BAD("*3\r\n$5\r\nALLOW\r\n$0\r\n\r\n$1\r\na\r\n", CMD_ERR_BAD_USER),
	BAD("*4\r\n$5\r\nALLOW\r\n$1\r\nu\r\n$1\r\na\r\n$1\r\n0\r\n", CMD_ERR_BAD_COST),
	BAD("*4\r\n$5\r\nALLOW\r\n$1\r\nu\r\n$1\r\na\r\n$10\r\n2147483648\r\n", CMD_ERR_BAD_COST),
	BAD("*4\r\n$5\r\nRESET\r\n$1\r\nu\r\n$1\r\na\r\n$1\r\n1\r\n", CMD_ERR_SYNTAX),
	BAD("*3\r\n$4\r\nPING\r\n$1\r\na\r\n$1\r\nb\r\n", CMD_ERR_SYNTAX),
	BAD("*1\r\n$3\r\nGET\r\n", CMD_ERR_UNKNOWN_COMMAND),
	BAD("*2\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n", CMD_ERR_UNKNOWN_COMMAND),
	BAD("*4\r\n$6\r\nMALLOW\r\n$1\r\nu\r\n$1\r\na\r\n$1\r\nv\r\n", CMD_ERR_BAD_COST),
	BAD("*4\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$1\r\n1\r\n$1\r\n1\r\n", CMD_ERR_SYNTAX),
	BAD("*5\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$2\r\n-1\r\n$1\r\n1\r\n$1\r\n1\r\n",
	    CMD_ERR_SYNTAX),
	BAD("*6\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$1\r\n1\r\n$1\r\n1\r\n$1\r\n1\r\n$10\r\n"
	    "2147483648\r\n",
	    CMD_ERR_BAD_COST),
	BAD("*5\r\n$11\r\nCL.THROTTLE\r\n$0\r\n\r\n$1\r\n1\r\n$1\r\n1\r\n$1\r\n1\r\n",
	    CMD_ERR_BAD_USER),
	/* what Redis clients send on connecting */
	LOCAL("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", L_HELLO),
	REQ("*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n", CMD_AUTH, NULL,
	    NULL, 1),
	LOCAL("*5\r\n$5\r\nHELLO\r\n$1\r\n4\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n", L_NOPROTO),
	LOCAL("*2\r\n$5\r\nHELLO\r\n$1\r\n1\r\n", L_NOPROTO),
	LOCAL("*1\r\n$5\r\nHELLO\r\n", L_HELLO),
	LOCAL("*2\r\n$5\r\nhello\r\n$1\r\n2\r\n", L_HELLO),
	LOCAL("*4\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$7\r\nSETNAME\r\n$1\r\nx\r\n", L_HELLO),
	LOCAL("*2\r\n$5\r\nHELLO\r\n$1\r\n4\r\n", L_NOPROTO),
	LOCAL("*2\r\n$5\r\nHELLO\r\n$2\r\n-3\r\n", L_HELLO_VERSION),
	LOCAL("*3\r\n$7\r\nCOMMAND\r\n$4\r\nDOCS\r\n$3\r\nGET\r\n", L_EMPTY_MAP),
	LOCAL("*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$1\r\n*\r\n", L_EMPTY_MAP),
	LOCAL("*1\r\n$7\r\nCOMMAND\r\n", L_EMPTY_ARRAY),
	/* without a connection's state, each of these is refused alone */
	BAD("*1\r\n$5\r\nMULTI\r\n", CMD_ERR_UNKNOWN_COMMAND),
	BAD("*1\r\n$4\r\nEXEC\r\n", CMD_ERR_SYNTAX),
	BAD("*1\r\n$7\r\nDISCARD\r\n", CMD_ERR_SYNTAX),
	LOCAL("*2\r\n$5\r\nHELLO\r\n$3\r\ntwo\r\n", L_HELLO_VERSION),
	REQ("*5\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$1\r\np\r\n", CMD_AUTH,
	    NULL, NULL, 1),
	REQ("*7\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$7\r\nSETNAME\r\n$1\r\nx\r\n$4\r\nauth\r\n$3\r\napp\r\n"
	    "$1\r\np\r\n",
	    CMD_AUTH, NULL, NULL, 1),
	BAD("*4\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$1\r\nu\r\n", CMD_ERR_SYNTAX),
	BAD("*3\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$6\r\nSELECT\r\n", CMD_ERR_SYNTAX),
	BAD("*8\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n$4\r\nAUTH\r\n$1\r\nu\r\n"
	    "$1\r\nq\r\n",
	    CMD_ERR_SYNTAX),
	LOCAL("*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$1\r\nx\r\n", L_OK),
	LOCAL("*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n", L_OK),
	LOCAL("*2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n", L_DB_RANGE),
	LOCAL("*2\r\n$6\r\nSELECT\r\n$2\r\n00\r\n", L_DB_RANGE),
	REQ("*2\r\n$4\r\nAUTH\r\n$1\r\np\r\n", CMD_AUTH, NULL, NULL, 1),
	REQ("*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$1\r\np\r\n", CMD_AUTH, NULL, NULL, 1),
	BAD("*1\r\n$4\r\nAUTH\r\n", CMD_ERR_SYNTAX),
	/* an empty token is no identity's (found by fuzz-resp) */
	BAD("*3\r\n$4\r\nAUTH\r\n$5\r\nALLOW\r\n$0\r\n\r\n", CMD_ERR_SYNTAX),
	BAD("*5\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$0\r\n\r\n", CMD_ERR_SYNTAX),
	LOCAL("*1\r\n$4\r\nINFO\r\n", L_INFO),
	/* framing lost: answered, then closed */
	FATAL("PING\r\n", CMD_ERR_SYNTAX),
	FATAL("*x\r\n", CMD_ERR_SYNTAX),
	FATAL("*1\n", CMD_ERR_SYNTAX),
	FATAL("*19\r\n", CMD_ERR_SYNTAX),
	FATAL("*12345678901\r\n", CMD_ERR_SYNTAX),
	FATAL("*1\r\n+PING\r\n", CMD_ERR_SYNTAX),
	FATAL("*1\r\n$-1\r\n", CMD_ERR_SYNTAX),
	FATAL("*1\r\n$4\r\nPINGxx", CMD_ERR_SYNTAX),
	FATAL("*1\r\n$129\r\n", CMD_ERR_LINE_TOO_LONG),
};

static size_t len_of(const struct rcase *c)
{
	return c->len ? c->len : strlen(c->in);
}

static void check_case(const struct rcase *c, size_t i)
{
	struct proto_parsed out;
	memset(&out, 0, sizeof(out));
	size_t len = len_of(c);
	enum proto_step st = proto_resp.parse(c->in, len, MAX_LINE, NULL, &out);
	ck_assert_msg(st == c->step, "case %zu: step %d, want %d", i, st, c->step);
	size_t used = c->used ? c->used : len;
	switch (st) {
	case PROTO_REQUEST:
		ck_assert_msg(out.used == used, "case %zu: used %zu", i, out.used);
		ck_assert_int_eq(out.req.verb, c->verb);
		if (c->user) {
			size_t ul = c->user_len ? c->user_len : strlen(c->user);
			ck_assert_uint_eq(out.req.user_len, ul);
			ck_assert_mem_eq(out.req.user, c->user, ul);
		}
		if (c->action) {
			ck_assert_uint_eq(out.req.action_len, strlen(c->action));
			ck_assert_mem_eq(out.req.action, c->action, strlen(c->action));
		}
		if (c->verb != CMD_PING && c->verb != CMD_QUIT)
			ck_assert_msg(out.req.cost == c->cost, "case %zu: cost %lld", i,
				      (long long)out.req.cost);
		break;
	case PROTO_SKIP:
		ck_assert_uint_eq(out.used, used);
		break;
	case PROTO_BAD:
		ck_assert_msg(out.used == used, "case %zu: used %zu", i, out.used);
		ck_assert_msg(out.err.code == c->err, "case %zu: error %d (%s)", i, out.err.code,
			      out.err.msg);
		ck_assert_ptr_nonnull(out.err.msg);
		break;
	case PROTO_LOCAL:
		ck_assert_uint_eq(out.used, used);
		ck_assert_int_eq(out.local, c->local);
		break;
	case PROTO_FATAL:
		ck_assert_msg(out.err.code == c->err, "case %zu: error %d (%s)", i, out.err.code,
			      out.err.msg);
		break;
	case PROTO_NEED_MORE:
		break;
	}
}

START_TEST(test_parse_table)
{
	check_case(&cases[_i], (size_t)_i);
}
END_TEST

/* Any whole request cut short asks for more, never misreads. */
START_TEST(test_split)
{
	const struct rcase *c = &cases[_i];
	if (c->step != PROTO_REQUEST && c->step != PROTO_BAD && c->step != PROTO_LOCAL)
		return;
	size_t used = c->used ? c->used : len_of(c);
	for (size_t k = 0; k < used; k++) {
		struct proto_parsed out;
		memset(&out, 0, sizeof(out));
		enum proto_step st = proto_resp.parse(c->in, k, MAX_LINE, NULL, &out);
		ck_assert_msg(st == PROTO_NEED_MORE, "case %d cut at %zu: step %d", _i, k, st);
	}
}
END_TEST

/* More than max_line + 2 bytes and still not whole: the request cannot be. */
START_TEST(test_window_full)
{
	char buf[MAX_LINE + 8] = "*2\r\n$4\r\nPING\r\n$120\r\n";
	size_t len = strlen(buf);
	memset(buf + len, 'x', sizeof(buf) - len);
	struct proto_parsed out;
	memset(&out, 0, sizeof(out));
	ck_assert_int_eq(proto_resp.parse(buf, MAX_LINE + 1, MAX_LINE, NULL, &out),
			 PROTO_NEED_MORE);
	ck_assert_int_eq(proto_resp.parse(buf, MAX_LINE + 2, MAX_LINE, NULL, &out), PROTO_FATAL);
	ck_assert_int_eq(out.err.code, CMD_ERR_LINE_TOO_LONG);
}
END_TEST

START_TEST(test_mallow_pairs)
{
	static const char in[] =
		"*6\r\n$6\r\nMALLOW\r\n$2\r\nu1\r\n$2\r\na1\r\n$2\r\nu2\r\n$2\r\na2\r\n$1\r\n5\r\n";
	struct proto_parsed out;
	memset(&out, 0, sizeof(out));
	ck_assert_int_eq(proto_resp.parse(in, sizeof(in) - 1, MAX_LINE, NULL, &out), PROTO_REQUEST);
	ck_assert_int_eq(out.req.npairs, 2);
	ck_assert_int_eq(out.req.cost, 5);
	ck_assert_mem_eq(out.req.pairs[0].user, "u1", 2);
	ck_assert_mem_eq(out.req.pairs[0].action, "a1", 2);
	ck_assert_mem_eq(out.req.pairs[1].user, "u2", 2);
	ck_assert_mem_eq(out.req.pairs[1].action, "a2", 2);
}
END_TEST

START_TEST(test_throttle_fields)
{
	static const char in[] =
		"*6\r\n$11\r\nCL.THROTTLE\r\n$3\r\nkey\r\n$2\r\n15\r\n$2\r\n30\r\n$"
		"2\r\n60\r\n$1\r\n2\r\n";
	struct proto_parsed out;
	memset(&out, 0, sizeof(out));
	ck_assert_int_eq(proto_resp.parse(in, sizeof(in) - 1, MAX_LINE, NULL, &out), PROTO_REQUEST);
	ck_assert_int_eq(out.req.max_burst, 15);
	ck_assert_int_eq(out.req.count, 30);
	ck_assert_int_eq(out.req.period_s, 60);
	ck_assert_int_eq(out.req.cost, 2);
}
END_TEST

/* ---- format ---- */

struct fcase {
	struct cmd_result res;
	const char *want;
};

static const struct fcase fcases[] = {
	{{.kind = CMD_REPLY_DECISION, .allowed = 1, .limit = 10, .remaining = 9, .reset_ms = 60000},
	 "*5\r\n:1\r\n:10\r\n:9\r\n:0\r\n:60000\r\n"},
	{{.kind = CMD_REPLY_DECISION, .limit = 3, .retry_after_ms = -1, .reset_ms = -1},
	 "*5\r\n:0\r\n:3\r\n:0\r\n:-1\r\n:-1\r\n"},
	{{.kind = CMD_REPLY_DECISION,
	  .allowed = 0,
	  .limit = 5,
	  .retry_after_ms = 1200,
	  .reset_ms = 2000,
	  .multi = 1,
	  .pair = 2},
	 "*6\r\n:0\r\n:5\r\n:0\r\n:1200\r\n:2000\r\n:2\r\n"},
	/* CL.THROTTLE: limited first, seconds cut toward zero */
	{{.kind = CMD_REPLY_DECISION,
	  .allowed = 0,
	  .limit = 16,
	  .remaining = 0,
	  .retry_after_ms = 1999,
	  .reset_ms = 30999,
	  .tag = 1},
	 "*5\r\n:1\r\n:16\r\n:0\r\n:1\r\n:30\r\n"},
	{{.kind = CMD_REPLY_DECISION,
	  .allowed = 1,
	  .limit = 16,
	  .remaining = 3,
	  .reset_ms = 4000,
	  .tag = 1},
	 "*5\r\n:0\r\n:16\r\n:3\r\n:-1\r\n:4\r\n"},
	/* quantity 0 never limits */
	{{.kind = CMD_REPLY_DECISION,
	  .allowed = 0,
	  .limit = 16,
	  .retry_after_ms = 5000,
	  .reset_ms = 4000,
	  .tag = 3},
	 "*5\r\n:0\r\n:16\r\n:0\r\n:-1\r\n:4\r\n"},
	{{.kind = CMD_REPLY_OK}, "+OK\r\n"},
	{{.kind = CMD_REPLY_BYE}, "+OK\r\n"},
	{{.kind = CMD_REPLY_PONG}, "+PONG\r\n"},
	{{.kind = CMD_REPLY_ITEM, .limit = 0}, "*0\r\n"},
	{{.kind = CMD_REPLY_ERROR, .error = CMD_ERR_BAD_COST, .msg = "cost\r\nmust"},
	 "-ERR bad-cost cost  must\r\n"},
	{{.kind = CMD_REPLY_ERROR, .error = CMD_ERR_STORE_UNAVAILABLE, .msg = "store failed: x"},
	 "-ERR store-unavailable store failed: x\r\n"},
	{{.kind = CMD_REPLY_ERROR, .error = CMD_ERR_OUT_OF_MEMORY, .msg = "out of memory"},
	 "-ERR out-of-memory out of memory\r\n"},
	{{.kind = CMD_REPLY_LOCAL, .local = L_OK}, "+OK\r\n"},
	{{.kind = CMD_REPLY_LOCAL, .local = L_NOPROTO},
	 "-NOPROTO sorry, this protocol version is not supported\r\n"},
	{{.kind = CMD_REPLY_LOCAL, .local = L_EMPTY_ARRAY}, "*0\r\n"},
	{{.kind = CMD_REPLY_LOCAL, .local = L_EMPTY_MAP}, "*0\r\n"},
	{{.kind = CMD_REPLY_LOCAL, .local = L_DB_RANGE}, "-ERR DB index is out of range\r\n"},
	{{.kind = CMD_REPLY_LOCAL, .local = L_HELLO_VERSION},
	 "-ERR Protocol version is not an integer or out of range\r\n"},
	{{.kind = CMD_REPLY_LOCAL, .local = 99}, "-ERR syntax no such reply\r\n"},
};

START_TEST(test_format_table)
{
	char buf[2048];
	size_t n = proto_resp.format(buf, &fcases[_i].res, NULL);
	ck_assert_uint_le(n, proto_resp.reply_max);
	buf[n] = '\0';
	ck_assert_str_eq(buf, fcases[_i].want);
}
END_TEST

/* HELLO's map, alone or as a successful HELLO 2 AUTH's reply: 7 pairs,
 * the version in the middle; its token's AUTH fails as AUTH does. */
START_TEST(test_format_hello)
{
	static const char want[] = "*14\r\n$6\r\nserver\r\n$10\r\nratelimitd\r\n$7\r\nversion\r\n";
	static const char tail[] = "$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
	struct cmd_result res[] = {{.kind = CMD_REPLY_LOCAL, .local = L_HELLO},
				   {.kind = CMD_REPLY_OK, .tag = 4}};
	for (size_t i = 0; i < 2; i++) {
		char buf[2048];
		size_t n = proto_resp.format(buf, &res[i], NULL);
		ck_assert_uint_le(n, proto_resp.reply_max);
		buf[n] = '\0';
		ck_assert_mem_eq(buf, want, sizeof(want) - 1);
		ck_assert_ptr_nonnull(
			strstr(buf, "\r\n" RATELIMITD_VERSION "\r\n$5\r\nproto\r\n:2\r\n"));
		ck_assert_str_eq(buf + n - (sizeof(tail) - 1), tail);
	}
	struct cmd_result bad = {.kind = CMD_REPLY_ERROR,
				 .error = CMD_ERR_AUTH_FAILED,
				 .msg = "invalid token",
				 .tag = 4};
	char buf[2048];
	size_t n = proto_resp.format(buf, &bad, NULL);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "-WRONGPASS invalid token\r\n");
}
END_TEST

START_TEST(test_format_info_and_item)
{
	char buf[2048];
	struct cmd_result r = {.kind = CMD_REPLY_LOCAL, .local = L_INFO};
	size_t n = proto_resp.format(buf, &r, NULL);
	buf[n] = '\0';
	ck_assert_msg(strncmp(buf, "$", 1) == 0 && strstr(buf, "\r\n# Server\r\n") &&
			      strstr(buf, "redis_mode:standalone\r\n"),
		      "%s", buf);
	/* the bulk length is the text's */
	long bl = strtol(buf + 1, NULL, 10);
	const char *body = strchr(buf, '\n') + 1;
	ck_assert_uint_eq(n, (size_t)(body - buf) + (size_t)bl + 2);

	struct cmd_item *it = malloc(sizeof(*it) + 8);
	ck_assert_ptr_nonnull(it);
	*it = (struct cmd_item){.index = 2, .ttl_ms = -1, .ulen = 3, .alen = 2, .spec_len = 3};
	memcpy(it->text, "bobapunl", 8);
	r = (struct cmd_result){.kind = CMD_REPLY_ITEM, .item = it};
	n = proto_resp.format(buf, &r, NULL);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "*5\r\n:2\r\n$3\r\nbob\r\n$2\r\nap\r\n$3\r\nunl\r\n:-1\r\n");
	free(it);
}
END_TEST

/* Parses one whole request of in through rc, as a connection does. */
static enum proto_step step(const char *in, struct proto_resp_conn *rc, struct proto_parsed *out)
{
	memset(out, 0, sizeof(*out));
	enum proto_step st = proto_resp.parse(in, strlen(in), MAX_LINE, rc, out);
	ck_assert_uint_eq(out->used, strlen(in));
	return st;
}

/* Formats r, as the connection's next reply, into buf. */
static const char *reply(struct cmd_result r, struct proto_resp_conn *rc, char *buf)
{
	size_t n = proto_resp.format(buf, &r, rc);
	ck_assert_uint_le(n, proto_resp.reply_max);
	buf[n] = '\0';
	return buf;
}

/* STATE: RESP2 arrays, RESP3 maps (a calendar's unit too); eight limits
 * of the largest figures fit a reply. */
START_TEST(test_state_reply)
{
	static struct cmd_state st = {.algo = POLICY_FUNNEL,
				      .nlimits = 1,
				      .limits = {{2000, CALENDAR_NONE, 4, 3, 1, 1500, 0, 0}}};
	struct proto_resp_conn rc = {0};
	char buf[4096 + 1];
	struct cmd_result r = {.kind = CMD_REPLY_STATE, .state = &st};
	ck_assert_str_eq(reply(r, &rc, buf),
			 "*4\r\n$6\r\nfunnel\r\n$4\r\nnone\r\n:0\r\n*1\r\n*7\r\n:2000\r\n:4\r\n"
			 ":3\r\n:1\r\n:1500\r\n:0\r\n:0\r\n");
	rc.resp3 = 1;
	st.limits[0].calendar = CALENDAR_DAY;
	ck_assert_str_eq(
		reply(r, &rc, buf),
		"%4\r\n$9\r\nalgorithm\r\n$6\r\nfunnel\r\n$8\r\noverride\r\n$4\r\nnone\r\n"
		"$6\r\nban_ms\r\n:0\r\n$6\r\nlimits\r\n*1\r\n%8\r\n$9\r\nwindow_ms\r\n:2000\r\n"
		"$5\r\nlimit\r\n:4\r\n$4\r\nused\r\n:3\r\n$9\r\nremaining\r\n:1\r\n"
		"$8\r\nreset_ms\r\n:1500\r\n$8\r\nstart_ms\r\n:0\r\n$6\r\nend_ms\r\n:0\r\n"
		"$8\r\ncalendar\r\n$3\r\nday\r\n");
	st.algo = POLICY_SLIDING_COUNTER;
	st.override = CMD_STATE_UNLIMITED;
	st.ban_ms = INT64_MIN;
	st.nlimits = POLICY_MAX_LIMITS;
	for (int i = 0; i < POLICY_MAX_LIMITS; i++)
		st.limits[i] =
			(struct cmd_state_limit){INT64_MIN, CALENDAR_MONTH, INT64_MIN, INT64_MIN,
						 INT64_MIN, INT64_MIN,	    INT64_MIN, INT64_MIN};
	reply(r, &rc, buf); /* (reply checks the length) */
	rc.resp3 = 0;
	reply(r, &rc, buf);
}
END_TEST

/* HELLO 3 switches the replies after its own to RESP3 (its map first);
 * decisions and errors stay as they are; HELLO 2 switches back; a HELLO 3
 * whose AUTH fails switches nothing. */
START_TEST(test_resp3_switch)
{
	struct proto_resp_conn rc = {0};
	struct proto_parsed out;
	char buf[2048];
	struct cmd_result decision = {.kind = CMD_REPLY_DECISION,
				      .allowed = 1,
				      .limit = 5,
				      .remaining = 4,
				      .reset_ms = 60000};
	struct cmd_result map = {.kind = CMD_REPLY_LOCAL, .local = L_EMPTY_MAP};
	struct cmd_result info = {.kind = CMD_REPLY_LOCAL, .local = L_INFO};

	ck_assert_int_eq(step("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", &rc, &out), PROTO_LOCAL);
	ck_assert_int_eq(rc.resp3, 0); /* not before its reply */
	struct cmd_result hello = {.kind = CMD_REPLY_LOCAL, .local = out.local, .tag = out.tag};
	reply(hello, &rc, buf);
	ck_assert_msg(strncmp(buf, "%7\r\n$6\r\nserver\r\n", 16) == 0, "%s", buf);
	ck_assert_ptr_nonnull(strstr(buf, "$5\r\nproto\r\n:3\r\n"));
	ck_assert_int_eq(rc.resp3, 1);
	ck_assert_str_eq(reply(decision, &rc, buf), "*5\r\n:1\r\n:5\r\n:4\r\n:0\r\n:60000\r\n");
	ck_assert_str_eq(reply(map, &rc, buf), "%0\r\n");
	reply(info, &rc, buf);
	ck_assert_msg(strncmp(buf, "=", 1) == 0 && strstr(buf, "\r\ntxt:# Server\r\n"), "%s", buf);
	long bl = strtol(buf + 1, NULL, 10);
	ck_assert_uint_eq(strlen(buf), (size_t)(strchr(buf, '\n') + 1 - buf) + (size_t)bl + 2);
	struct cmd_result err = {.kind = CMD_REPLY_ERROR, .error = CMD_ERR_BAD_COST, .msg = "x"};
	ck_assert_str_eq(reply(err, &rc, buf), "-ERR bad-cost x\r\n");

	/* HELLO alone answers in the version spoken, and keeps it */
	hello = (struct cmd_result){.kind = CMD_REPLY_LOCAL, .local = L_HELLO};
	ck_assert_int_eq(reply(hello, &rc, buf)[0], '%');
	ck_assert_int_eq(rc.resp3, 1);

	/* a failed HELLO 2 AUTH leaves RESP3 */
	ck_assert_int_eq(
		step("*5\r\n$5\r\nHELLO\r\n$1\r\n2\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$1\r\np\r\n", &rc,
		     &out),
		PROTO_REQUEST);
	struct cmd_result denied = {
		.kind = CMD_REPLY_ERROR, .error = CMD_ERR_AUTH_FAILED, .msg = "no", .tag = out.tag};
	ck_assert_str_eq(reply(denied, &rc, buf), "-WRONGPASS no\r\n");
	ck_assert_int_eq(rc.resp3, 1);
	/* its success switches back */
	struct cmd_result ok = {.kind = CMD_REPLY_OK, .tag = out.tag};
	ck_assert_int_eq(reply(ok, &rc, buf)[0], '*');
	ck_assert_ptr_nonnull(strstr(buf, "$5\r\nproto\r\n:2\r\n"));
	ck_assert_int_eq(rc.resp3, 0);
	ck_assert_str_eq(reply(map, &rc, buf), "*0\r\n");
}
END_TEST

/* MULTI is refused, and so is all up to EXEC (EXECABORT) or DISCARD; then
 * requests run again. */
START_TEST(test_multi_refused)
{
	struct proto_resp_conn rc = {0};
	struct proto_parsed out;
	char buf[2048];
	ck_assert_int_eq(step("*1\r\n$5\r\nMULTI\r\n", &rc, &out), PROTO_BAD);
	ck_assert_int_eq(out.err.code, CMD_ERR_UNKNOWN_COMMAND);
	ck_assert_ptr_nonnull(strstr(out.err.msg, "pipeline(transaction=False)"));
	ck_assert_int_eq(step("*3\r\n$5\r\nALLOW\r\n$1\r\nu\r\n$1\r\na\r\n", &rc, &out), PROTO_BAD);
	ck_assert_int_eq(step("*1\r\n$5\r\nMULTI\r\n", &rc, &out), PROTO_BAD);
	ck_assert_str_eq(out.err.msg, "MULTI calls can not be nested");
	ck_assert_int_eq(step("*1\r\n$4\r\nEXEC\r\n", &rc, &out), PROTO_BAD);
	struct cmd_result abort = {.kind = CMD_REPLY_ERROR, .error = out.err.code, .tag = out.tag};
	snprintf(abort.msg, sizeof(abort.msg), "%s", out.err.msg);
	ck_assert_msg(strncmp(reply(abort, &rc, buf), "-EXECABORT Transaction discarded", 32) == 0,
		      "%s", buf);
	ck_assert_int_eq(step("*3\r\n$5\r\nALLOW\r\n$1\r\nu\r\n$1\r\na\r\n", &rc, &out),
			 PROTO_REQUEST);
	ck_assert_int_eq(step("*1\r\n$5\r\nmulti\r\n", &rc, &out), PROTO_BAD);
	ck_assert_int_eq(step("*1\r\n$4\r\nPING\r\n", &rc, &out), PROTO_BAD);
	ck_assert_int_eq(step("*1\r\n$7\r\nDISCARD\r\n", &rc, &out), PROTO_LOCAL);
	ck_assert_int_eq(out.local, L_OK);
	ck_assert_int_eq(step("*1\r\n$4\r\nPING\r\n", &rc, &out), PROTO_REQUEST);
	ck_assert_int_eq(step("*1\r\n$7\r\nDISCARD\r\n", &rc, &out), PROTO_BAD);
}
END_TEST

/* The docs' bound on a request's elements is the parser's: PROTO_RESP_ARGS_MAX
 * elements parse, one more is refused (proto/protocol.md, docs/security.md). */
static int doc_number(const char *path, const char *before)
{
	char full[512];
	snprintf(full, sizeof(full), "%s/%s", TEST_SRCDIR, path);
	FILE *f = fopen(full, "r");
	ck_assert_msg(f != NULL, "%s", full);
	static char text[1 << 20];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	const char *at = strstr(text, before);
	ck_assert_msg(at != NULL, "%s: no \"%s\"", path, before);
	return atoi(at + strlen(before));
}

START_TEST(test_args_max_documented)
{
	ck_assert_int_eq(doc_number("proto/protocol.md", "It has at most "), PROTO_RESP_ARGS_MAX);
	ck_assert_int_eq(doc_number("proto/protocol.md", "CR LF, more than "), PROTO_RESP_ARGS_MAX);
	ck_assert_int_eq(doc_number("docs/security.md", "are capped the same way: at most "),
			 PROTO_RESP_ARGS_MAX);
	/* MALLOW with every pair and a cost: the most; one more argument is refused */
	for (int extra = 0; extra < 2; extra++) {
		char in[1024];
		int n = PROTO_RESP_ARGS_MAX + extra;
		size_t len = (size_t)snprintf(in, sizeof(in), "*%d\r\n$6\r\nMALLOW\r\n", n);
		for (int i = 1; i < n - 1; i++)
			len += (size_t)snprintf(in + len, sizeof(in) - len, "$1\r\n%c\r\n",
						'a' + i % 26);
		len += (size_t)snprintf(in + len, sizeof(in) - len, "$1\r\n3\r\n");
		struct proto_parsed out;
		memset(&out, 0, sizeof(out));
		enum proto_step st = proto_resp.parse(in, len, 4096, NULL, &out);
		if (extra == 0) {
			ck_assert_int_eq(st, PROTO_REQUEST);
			ck_assert_int_eq(out.req.npairs, CMD_PAIRS_MAX);
			ck_assert_int_eq(out.req.cost, 3);
		} else {
			ck_assert_int_eq(st, PROTO_FATAL);
			ck_assert_str_eq(out.err.msg, "Protocol error: too many arguments");
		}
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto_resp");
	TCase *tc = tcase_create("core");
	int n = (int)(sizeof(cases) / sizeof(cases[0]));
	tcase_add_loop_test(tc, test_parse_table, 0, n);
	tcase_add_loop_test(tc, test_split, 0, n);
	tcase_add_test(tc, test_window_full);
	tcase_add_test(tc, test_mallow_pairs);
	tcase_add_test(tc, test_throttle_fields);
	tcase_add_loop_test(tc, test_format_table, 0, (int)(sizeof(fcases) / sizeof(fcases[0])));
	tcase_add_test(tc, test_format_info_and_item);
	tcase_add_test(tc, test_format_hello);
	tcase_add_test(tc, test_resp3_switch);
	tcase_add_test(tc, test_state_reply);
	tcase_add_test(tc, test_multi_refused);
	tcase_add_test(tc, test_args_max_documented);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
