/* test_proto.c - the pure line parser and framer: table-driven cases, byte-by-byte framing. */
#include <check.h>

#include "runner.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decimal.h"
#include "line_reply.h"
#include "proto.h"
#include "proto_line.h"

struct pcase {
	const char *line;
	const char *err; /* NULL: parses */
	enum cmd_verb verb;
	const char *user, *action;
	long long cost;
};

static const struct pcase cases[] = {
	{"ALLOW david reply", NULL, CMD_ALLOW, "david", "reply", 1},
	{"allow david reply", NULL, CMD_ALLOW, "david", "reply", 1},
	{"AlLoW david reply 7", NULL, CMD_ALLOW, "david", "reply", 7},
	{"ALLOW david reply\r", NULL, CMD_ALLOW, "david", "reply", 1},
	{"  ALLOW   david\treply  ", NULL, CMD_ALLOW, "david", "reply", 1},
	{"PEEK 10.0.0.1 login 2147483647", NULL, CMD_PEEK, "10.0.0.1", "login", 2147483647},
	{"RESET u a", NULL, CMD_RESET, "u", "a", 1},
	{"ping", NULL, CMD_PING, NULL, NULL, 1},
	{"QUIT", NULL, CMD_QUIT, NULL, NULL, 1},
	{"ALLOW {a}%:\xff\xfe reply", NULL, CMD_ALLOW, "{a}%:\xff\xfe", "reply", 1},
	{"", "syntax", 0, NULL, NULL, 0},
	{"   ", "syntax", 0, NULL, NULL, 0},
	{"\r", "syntax", 0, NULL, NULL, 0},
	{"ALLOW david", "syntax", 0, NULL, NULL, 0},
	{"ALLOW david reply 1 2", "syntax", 0, NULL, NULL, 0},
	/* WAIT <ms>: ALLOW's only, last, 0 to 60000 */
	{"ALLOW david reply WAIT 500", NULL, CMD_ALLOW, "david", "reply", 1},
	{"ALLOW david reply 3 wait 0", NULL, CMD_ALLOW, "david", "reply", 3},
	{"ALLOW david reply WAIT 60001", "syntax", 0, NULL, NULL, 0},
	{"ALLOW david reply WAIT -1", "syntax", 0, NULL, NULL, 0},
	{"ALLOW david reply 3 WAIT", "syntax", 0, NULL, NULL, 0},
	{"ALLOW david reply 1 2 WAIT 5", "syntax", 0, NULL, NULL, 0},
	{"PEEK david reply WAIT 5", "syntax", 0, NULL, NULL, 0},
	/* leases */
	{"ACQUIRE david export", NULL, CMD_ACQUIRE, "david", "export", 1},
	{"ACQUIRE david export 2", NULL, CMD_ACQUIRE, "david", "export", 2},
	{"ACQUIRE david", "syntax", 0, NULL, NULL, 0},
	{"RELEASE export:ZGF2aWQ:0123456789abcdef:1", NULL, CMD_RELEASE, NULL, "export", 1},
	{"RENEW export:ZGF2aWQ:0123456789abcdef:1", NULL, CMD_RENEW, NULL, "export", 1},
	{"RELEASE nocolon", "no-lease", 0, NULL, NULL, 0},
	/* holds: HOLD's estimate; SETTLE's actual from 0; CANCEL */
	{"HOLD david llm 500", NULL, CMD_HOLD, "david", "llm", 500},
	{"HOLD david llm", "syntax", 0, NULL, NULL, 0},
	{"HOLD david llm 0", "bad-cost", 0, NULL, NULL, 0},
	{"SETTLE llm:ZGF2aWQ:0123456789abcdef:500 120", NULL, CMD_SETTLE, NULL, "llm", 1},
	{"SETTLE llm:ZGF2aWQ:0123456789abcdef:500 0", NULL, CMD_SETTLE, NULL, "llm", 1},
	{"SETTLE llm:ZGF2aWQ:0123456789abcdef:500 -1", "bad-cost", 0, NULL, NULL, 0},
	{"SETTLE llm:ZGF2aWQ:0123456789abcdef:500", "syntax", 0, NULL, NULL, 0},
	{"SETTLE nocolon 5", "no-hold", 0, NULL, NULL, 0},
	{"CANCEL llm:ZGF2aWQ:0123456789abcdef:500", NULL, CMD_CANCEL, NULL, "llm", 1},
	{"CANCEL a b", "syntax", 0, NULL, NULL, 0},
	/* CHARGE: a cost, always given */
	{"CHARGE david llm 1200", NULL, CMD_CHARGE, "david", "llm", 1200},
	{"charge david llm 1", NULL, CMD_CHARGE, "david", "llm", 1},
	{"CHARGE david llm", "syntax", 0, NULL, NULL, 0},
	{"CHARGE david llm 5 6", "syntax", 0, NULL, NULL, 0},
	{"CHARGE david llm 0", "bad-cost", 0, NULL, NULL, 0},
	{"CHARGE david llm WAIT", "bad-cost", 0, NULL, NULL, 0},
	{"RELEASE a:b c", "syntax", 0, NULL, NULL, 0},
	{"ALLOW a b c d e f", "syntax", 0, NULL, NULL, 0},
	{"RESET david reply 1", "syntax", 0, NULL, NULL, 0},
	{"PING x", "syntax", 0, NULL, NULL, 0},
	{"QUIT now", "syntax", 0, NULL, NULL, 0},
	{"ALLOW da\rvid reply", "syntax", 0, NULL, NULL, 0},
	{"ALLOW da\x01vid reply", NULL, CMD_ALLOW, "da\x01vid", "reply", 1},
	{"ALLOW \x1b[0m\x7f reply", NULL, CMD_ALLOW, "\x1b[0m\x7f", "reply", 1},
	{"PING\x1b", "unknown-command", 0, NULL, NULL, 0},
	{"ALLOW a reply \x02", "bad-cost", 0, NULL, NULL, 0},
	{"ALLOWED david reply", "unknown-command", 0, NULL, NULL, 0},
	{"GET x", "unknown-command", 0, NULL, NULL, 0},
	{"ALLOW david reply 0", "bad-cost", 0, NULL, NULL, 0},
	{"ALLOW david reply -1", "bad-cost", 0, NULL, NULL, 0},
	{"ALLOW david reply +1", "bad-cost", 0, NULL, NULL, 0},
	{"ALLOW david reply 1x", "bad-cost", 0, NULL, NULL, 0},
	{"ALLOW david reply 2147483648", "bad-cost", 0, NULL, NULL, 0},
	{"ALLOW david reply 99999999999999999999999999", "bad-cost", 0, NULL, NULL, 0},
	{"PEEK david reply 1.5", "bad-cost", 0, NULL, NULL, 0},
	{"ALLOW d r 0000000000000000000000000000000000000000042", NULL, CMD_ALLOW, "d", "r", 42},
	{"ALLOW d r 0000000000000000000000000000000000000000000", "bad-cost", 0, NULL, NULL, 0},
};

START_TEST(test_parse_table)
{
	const struct pcase *c = &cases[_i];
	struct cmd_request cmd;
	struct proto_error err = {0};
	int rc = proto_line_parse(c->line, strlen(c->line), &cmd, &err);
	if (c->err) {
		ck_assert_msg(rc == -1, "'%s' should fail", c->line);
		ck_assert_str_eq(proto_error_code(err.code), c->err);
		ck_assert(err.msg && err.msg[0]);
		return;
	}
	ck_assert_msg(rc == 0, "'%s' failed: %s %s", c->line, proto_error_code(err.code), err.msg);
	ck_assert_int_eq(cmd.verb, c->verb);
	ck_assert_int_eq(cmd.cost, c->cost);
	if (c->user) {
		ck_assert_uint_eq(cmd.user_len, strlen(c->user));
		ck_assert(memcmp(cmd.user, c->user, cmd.user_len) == 0);
		ck_assert_uint_eq(cmd.action_len, strlen(c->action));
		ck_assert(memcmp(cmd.action, c->action, cmd.action_len) == 0);
	}
}
END_TEST

START_TEST(test_nul_byte)
{
	const char line[] = "ALLOW da\0vid reply";
	struct cmd_request cmd;
	struct proto_error err;
	ck_assert_int_eq(proto_line_parse(line, sizeof(line) - 1, &cmd, &err), -1);
	ck_assert_int_eq(err.code, CMD_ERR_SYNTAX);
}
END_TEST

START_TEST(test_user_length)
{
	char line[700];
	struct cmd_request cmd;
	struct proto_error err;
	memcpy(line, "ALLOW ", 6);
	memset(line + 6, 'u', 512);
	memcpy(line + 518, " a", 2);
	ck_assert_int_eq(proto_line_parse(line, 520, &cmd, &err), 0);
	ck_assert_uint_eq(cmd.user_len, 512);
	memset(line + 6, 'u', 513);
	memcpy(line + 519, " a", 2);
	ck_assert_int_eq(proto_line_parse(line, 521, &cmd, &err), -1);
	ck_assert_int_eq(err.code, CMD_ERR_BAD_USER);
}
END_TEST

START_TEST(test_frame)
{
	size_t used = 0;
	ck_assert_int_eq(proto_line_frame("PING\n", 5, 4096, &used), 4);
	ck_assert_uint_eq(used, 5);
	ck_assert_int_eq(proto_line_frame("PING\r\nPING\n", 11, 4096, &used), 5);
	ck_assert_uint_eq(used, 6);
	ck_assert_int_eq(proto_line_frame("PIN", 3, 4096, &used), -1);
	/* exactly max_line bytes of content is fine, with LF or CRLF */
	ck_assert_int_eq(proto_line_frame("abcd\n", 5, 4, &used), 4);
	ck_assert_int_eq(proto_line_frame("abcd\r\n", 6, 4, &used), 5);
	ck_assert_int_eq(proto_line_frame("abcd\r", 5, 4, &used), -1);
	ck_assert_int_eq(proto_line_frame("abcde\n", 6, 4, &used), -2);
	ck_assert_int_eq(proto_line_frame("abcdef", 6, 4, &used), -2);
	ck_assert_int_eq(proto_line_frame("abcde", 5, 4, &used), -1);
}
END_TEST

/* Feeding a stream in any split gives the same lines as feeding it whole. */
START_TEST(test_frame_split)
{
	const char stream[] = "PING\nALLOW a b\r\n\nPEEK x y 3\nQUIT\n";
	size_t total = sizeof(stream) - 1;
	for (size_t chunk = 1; chunk <= total; chunk++) {
		char buf[128];
		size_t have = 0, fed = 0;
		int lines = 0;
		while (fed < total || have) {
			size_t add = total - fed < chunk ? total - fed : chunk;
			memcpy(buf + have, stream + fed, add);
			have += add;
			fed += add;
			size_t used;
			long n;
			while ((n = proto_line_frame(buf, have, 64, &used)) >= 0) {
				lines++;
				memmove(buf, buf + used, have - used);
				have -= used;
			}
			ck_assert_int_eq(n, -1);
			if (fed == total)
				break;
		}
		ck_assert_int_eq(lines, 5);
		ck_assert_uint_eq(have, 0);
	}
}
END_TEST

static size_t fmt(char *buf, struct cmd_result r)
{
	return proto_line_format(buf, &r);
}

/* MALLOW, MPEEK: pairs, then a cost when the arguments are odd in number. */
/* WAIT's value, and a lease id's action read from it */
START_TEST(test_wait_and_lease_id)
{
	struct cmd_request cmd;
	struct proto_error err = {0};
	const char *l = "ALLOW d r 3 WAIT 250";
	ck_assert_int_eq(proto_line_parse(l, strlen(l), &cmd, &err), 0);
	ck_assert_int_eq(cmd.wait_given, 1);
	ck_assert_int_eq(cmd.wait_ms, 250);
	l = "ALLOW d r 3";
	ck_assert_int_eq(proto_line_parse(l, strlen(l), &cmd, &err), 0);
	ck_assert_int_eq(cmd.wait_given, 0);
	l = "RENEW up.load:ZA:0123456789abcdef:7";
	ck_assert_int_eq(proto_line_parse(l, strlen(l), &cmd, &err), 0);
	ck_assert_uint_eq(cmd.action_len, 7);
	ck_assert_mem_eq(cmd.action, "up.load", 7);
	ck_assert_uint_eq(cmd.lease_id_len, strlen(l) - 6);
}
END_TEST

START_TEST(test_parse_pairs)
{
	struct cmd_request cmd;
	struct proto_error err = {0};
	const char *l = "mallow alice login 1.2.3.4 login_ip - login_all 3";
	ck_assert_int_eq(proto_line_parse(l, strlen(l), &cmd, &err), 0);
	ck_assert_int_eq(cmd.verb, CMD_MALLOW);
	ck_assert_int_eq(cmd.npairs, 3);
	ck_assert_int_eq(cmd.cost, 3);
	ck_assert(cmd.pairs[1].user_len == 7 && memcmp(cmd.pairs[1].user, "1.2.3.4", 7) == 0);
	ck_assert(cmd.pairs[2].action_len == 9 && memcmp(cmd.pairs[2].action, "login_all", 9) == 0);
	l = "MPEEK 5 6";
	ck_assert_int_eq(proto_line_parse(l, strlen(l), &cmd, &err), 0);
	ck_assert(cmd.verb == CMD_MPEEK && cmd.npairs == 1 && cmd.cost == 1);
	ck_assert(cmd.pairs[0].user_len == 1 && cmd.pairs[0].user[0] == '5');
	/* 8 pairs and a cost are the most; one token more is too many */
	char line[256] = "MALLOW";
	for (int i = 0; i < 8; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), " u%d a", i);
	strcat(line, " 2");
	ck_assert_int_eq(proto_line_parse(line, strlen(line), &cmd, &err), 0);
	ck_assert(cmd.npairs == 8 && cmd.cost == 2);
	strcat(line, " x");
	ck_assert_int_eq(proto_line_parse(line, strlen(line), &cmd, &err), -1);
	ck_assert_str_eq(proto_error_code(err.code), "syntax");
	static const struct {
		const char *line, *code;
	} bad[] = {{"MALLOW", "syntax"},
		   {"MALLOW a", "syntax"},
		   {"MALLOW a b 0", "bad-cost"},
		   {"MALLOW a b c d x", "bad-cost"},
		   {"MPEEK a b c", "bad-cost"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(proto_line_parse(bad[i].line, strlen(bad[i].line), &cmd, &err),
				 -1);
		ck_assert_str_eq(proto_error_code(err.code), bad[i].code);
	}
}
END_TEST

START_TEST(test_format)
{
	char buf[PROTO_LINE_REPLY_MAX];
	size_t n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_DECISION,
						.allowed = 1,
						.limit = 5,
						.remaining = 4,
						.reset_ms = 60000});
	ck_assert_uint_eq(n, strlen("ALLOWED 5 4 0 60000\n"));
	ck_assert(memcmp(buf, "ALLOWED 5 4 0 60000\n", n) == 0);
	n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_DECISION,
					 .limit = 2147483647,
					 .remaining = -1,
					 .retry_after_ms = -1,
					 .reset_ms = 9223372036854775807LL});
	ck_assert(memcmp(buf, "DENIED 2147483647 -1 -1 9223372036854775807\n", n) == 0);
	/* MALLOW's reply names the deciding pair */
	n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_DECISION,
					 .limit = 10,
					 .remaining = 9,
					 .retry_after_ms = -1,
					 .reset_ms = 1000,
					 .multi = 1,
					 .pair = 2});
	ck_assert(memcmp(buf, "DENIED 10 9 -1 1000 2\n", n) == 0);
	n = fmt(buf, (struct cmd_result){
			     .kind = CMD_REPLY_ERROR, .error = CMD_ERR_BAD_COST, .msg = "nope"});
	ck_assert(memcmp(buf, "ERR bad-cost nope\n", n) == 0);
	n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_ERROR,
					 .error = CMD_ERR_OUT_OF_MEMORY,
					 .msg = "out of memory"});
	ck_assert(memcmp(buf, "ERR out-of-memory out of memory\n", n) == 0);
	n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_PONG});
	ck_assert(memcmp(buf, "PONG\n", n) == 0);
	n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_OK});
	ck_assert(memcmp(buf, "OK\n", n) == 0);
	n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_BYE});
	ck_assert(memcmp(buf, "BYE\n", n) == 0);
	/* a long message is cut, the newline kept */
	struct cmd_result r = {.kind = CMD_REPLY_ERROR, .error = CMD_ERR_STORE_UNAVAILABLE};
	memset(r.msg, 'x', sizeof(r.msg) - 1);
	n = fmt(buf, r);
	ck_assert_uint_eq(n, strlen("ERR store-unavailable ") + sizeof(r.msg) - 1 + 1);
	ck_assert(n <= PROTO_LINE_REPLY_MAX && buf[n - 1] == '\n');
}
END_TEST

/* Every decision form the daemon sends (proto/protocol.md, "Fallback
 * replies"), parsed by the client side as ratelimitctl does: the unlimited
 * override's limit -1 once made ratelimitctl exit 2. */
START_TEST(test_line_reply_forms)
{
	static const struct {
		const char *line;
		enum line_reply_kind kind;
		long long limit, remaining, retry, reset, pair;
		int fallback, unlimited, blocked;
	} forms[] = {
		{"ALLOWED 5 4 0 60000", LINE_REPLY_ALLOWED, 5, 4, 0, 60000, -1, 0, 0, 0},
		{"DENIED 5 0 1200 60000", LINE_REPLY_DENIED, 5, 0, 1200, 60000, -1, 0, 0, 0},
		{"DENIED 5 0 -1 60000", LINE_REPLY_DENIED, 5, 0, -1, 60000, -1, 0, 0, 0},
		/* overrides: unlimited, blocked; alone and in MALLOW (pair 0, or the blocked one) */
		{"ALLOWED -1 -1 0 -1", LINE_REPLY_ALLOWED, -1, -1, 0, -1, -1, 0, 1, 0},
		{"ALLOWED -1 -1 0 -1 0", LINE_REPLY_ALLOWED, -1, -1, 0, -1, 0, 0, 1, 0},
		{"DENIED 5 0 -1 -1", LINE_REPLY_DENIED, 5, 0, -1, -1, -1, 0, 0, 1},
		{"DENIED 5 0 -1 -1 2", LINE_REPLY_DENIED, 5, 0, -1, -1, 2, 0, 0, 1},
		/* on_store_error allow and deny */
		{"ALLOWED 5 -1 0 -1", LINE_REPLY_ALLOWED, 5, -1, 0, -1, -1, 1, 0, 0},
		{"DENIED 5 -1 1000 -1", LINE_REPLY_DENIED, 5, -1, 1000, -1, -1, 1, 0, 0},
		{"ALLOWED 5 -1 0 -1 0", LINE_REPLY_ALLOWED, 5, -1, 0, -1, 0, 1, 0, 0},
	};
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		struct line_reply r;
		ck_assert_msg(line_reply_parse(forms[i].line, strlen(forms[i].line), &r) == 0, "%s",
			      forms[i].line);
		ck_assert_int_eq(r.kind, forms[i].kind);
		ck_assert_int_eq(r.limit, forms[i].limit);
		ck_assert_int_eq(r.remaining, forms[i].remaining);
		ck_assert_int_eq(r.retry_after_ms, forms[i].retry);
		ck_assert_int_eq(r.reset_ms, forms[i].reset);
		ck_assert_int_eq(r.pair, forms[i].pair);
		ck_assert_msg(line_reply_is_fallback(&r) == forms[i].fallback, "%s", forms[i].line);
		ck_assert_msg(line_reply_is_unlimited(&r) == forms[i].unlimited, "%s",
			      forms[i].line);
		ck_assert_msg(line_reply_is_blocked(&r) == forms[i].blocked, "%s", forms[i].line);
	}
	/* and nothing the daemon never sends */
	static const char *bad[] = {"ALLOWED -2 4 0 60000", "ALLOWED 5 -2 0 60000",
				    "DENIED 5 0 -2 1",	    "ALLOWED 5 4 0",
				    "ALLOWED  5 4 0 1",	    "ALLOWED 5 4 0 1 -1",
				    "ALLOWED 5 4 0 1 1 1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct line_reply r;
		ck_assert_msg(line_reply_parse(bad[i], strlen(bad[i]), &r) == -1, "%s", bad[i]);
	}
}
END_TEST

/* STATE's line: a word of seven integers per limit, read back by the
 * client side; eight limits of the largest figures fit the line. */
START_TEST(test_state_line)
{
	static struct cmd_state st = {.algo = POLICY_FIXED_WINDOW,
				      .override = CMD_STATE_LIMITS,
				      .ban_ms = 12,
				      .nlimits = 2,
				      .limits = {{60000, CALENDAR_NONE, 5, 2, 3, 41000, 0, 0},
						 {86400000, CALENDAR_DAY, 100, 2, 98, 9, 10, 20}}};
	char buf[PROTO_LINE_REPLY_MAX];
	size_t n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_STATE, .state = &st});
	static const char want[] =
		"STATE fixed_window limits 12 60000:5:2:3:41000:0:0 86400000:100:2:98:9:10:20\n";
	ck_assert_uint_eq(n, strlen(want));
	ck_assert(memcmp(buf, want, n) == 0);
	struct line_reply r;
	ck_assert_int_eq(line_reply_parse(buf, n - 1, &r), 0);
	ck_assert_int_eq(r.kind, LINE_REPLY_STATE);
	ck_assert_int_eq(r.nlimits, 2);
	ck_assert_int_eq(r.ban_ms, 12);
	ck_assert(r.override.len == 6 && memcmp(r.override.p, "limits", 6) == 0);
	ck_assert_int_eq(r.limits[1][0], 86400000);
	ck_assert_int_eq(r.limits[1][6], 20);
	/* the longest: eight limits of the largest numbers */
	st.algo = POLICY_SLIDING_COUNTER;
	st.override = CMD_STATE_UNLIMITED;
	st.ban_ms = INT64_MAX;
	st.nlimits = POLICY_MAX_LIMITS;
	for (int i = 0; i < POLICY_MAX_LIMITS; i++)
		st.limits[i] =
			(struct cmd_state_limit){INT64_MAX, CALENDAR_YEAR, INT64_MAX, INT64_MAX,
						 INT64_MAX, INT64_MAX,	   INT64_MAX, INT64_MAX};
	n = fmt(buf, (struct cmd_result){.kind = CMD_REPLY_STATE, .state = &st});
	ck_assert_uint_le(n, PROTO_LINE_REPLY_MAX);
	ck_assert_int_eq(line_reply_parse(buf, n - 1, &r), 0);
	ck_assert_int_eq(r.nlimits, POLICY_MAX_LIMITS);
	ck_assert_int_eq(r.limits[7][6], INT64_MAX);
	/* and no STATE line the daemon never sends */
	static const char *bad[] = {"STATE fixed_window none 0",
				    "STATE fixed_window none 0 1:2:3:4:5:6",
				    "STATE fixed_window none 0 1:2:3:4:5:6:7:8",
				    "STATE fixed_window none 0 1:2:3:4:5:6:-7",
				    "STATE fixed_window none -1 1:2:3:4:5:6:7",
				    "STATE fixed_window none 0 1:2:3:4:5:6:7 ",
				    "STATE fixed_window none 0 1:2::4:5:6:7"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(line_reply_parse(bad[i], strlen(bad[i]), &r) == -1, "%s", bad[i]);
}
END_TEST

/* The step conn.c takes: a request, a bad one, a fatal one, or more bytes. */
START_TEST(test_step)
{
	struct proto_parsed got = {.used = 99};
	ck_assert_int_eq(proto_line.parse("ALLOW a b 3\nPING\n", 17, 64, NULL, &got),
			 PROTO_REQUEST);
	ck_assert_uint_eq(got.used, 12);
	ck_assert_int_eq(got.req.verb, CMD_ALLOW);
	ck_assert_int_eq(got.req.cost, 3);
	ck_assert_int_eq(proto_line.parse("NOPE\n", 5, 64, NULL, &got), PROTO_BAD);
	ck_assert_uint_eq(got.used, 5);
	ck_assert_int_eq(got.err.code, CMD_ERR_UNKNOWN_COMMAND);
	ck_assert_int_eq(proto_line.parse("PIN", 3, 64, NULL, &got), PROTO_NEED_MORE);
	ck_assert_int_eq(proto_line.parse("abcdef", 6, 4, NULL, &got), PROTO_FATAL);
	ck_assert_int_eq(got.err.code, CMD_ERR_LINE_TOO_LONG);
	ck_assert_str_eq(proto_line.name, "line");
}
END_TEST

/* Bounded before each step: no input overflows, whatever the bound. */
START_TEST(test_parse_uint_bounds)
{
	int64_t v = -1;
	ck_assert_int_eq(decimal_parse("92233720368547758090", 20, 999999999999999999LL, &v), -1);
	ck_assert_int_eq(decimal_parse("92233720368547758080", 20, 999999999999999999LL, &v), -1);
	ck_assert_int_eq(decimal_parse("999999999999999999", 18, 999999999999999999LL, &v), 0);
	ck_assert_int_eq(v, 999999999999999999LL);
	ck_assert_int_eq(decimal_parse("9223372036854775807", 19, INT64_MAX, &v), 0);
	ck_assert_int_eq(v, INT64_MAX);
	ck_assert_int_eq(decimal_parse("9223372036854775808", 19, INT64_MAX, &v), -1);
	ck_assert_int_eq(decimal_parse("000000000000000000000000000042", 30, 100, &v), 0);
	ck_assert_int_eq(v, 42);
	ck_assert_int_eq(decimal_parse("", 0, 100, &v), -1);
	ck_assert_int_eq(decimal_parse("1x", 2, 100, &v), -1);
	/* a digit above a max under 10 (the overflow test alone rounds it in) */
	ck_assert_int_eq(decimal_parse("7", 1, 5, &v), -1);
	ck_assert_int_eq(decimal_parse("5", 1, 5, &v), 0);
	ck_assert_int_eq(v, 5);
	ck_assert_int_eq(decimal_parse("0", 1, 0, &v), 0);
	ck_assert_int_eq(decimal_parse("1", 1, 0, &v), -1);
	ck_assert_int_eq(proto_parse_cost("0", 1, &v), -1);
	ck_assert_int_eq(proto_parse_cost("2147483648", 10, &v), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_parse_table, 0, (int)(sizeof(cases) / sizeof(cases[0])));
	tcase_add_test(tc, test_nul_byte);
	tcase_add_test(tc, test_parse_pairs);
	tcase_add_test(tc, test_wait_and_lease_id);
	tcase_add_test(tc, test_parse_uint_bounds);
	tcase_add_test(tc, test_user_length);
	tcase_add_test(tc, test_frame);
	tcase_add_test(tc, test_frame_split);
	tcase_add_test(tc, test_format);
	tcase_add_test(tc, test_step);
	tcase_add_test(tc, test_line_reply_forms);
	tcase_add_test(tc, test_state_line);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
