/*
 * fuzz_proto.c - libFuzzer harness for the line protocol's framer, parser,
 * step and reply formatter (src/proto/proto_line.c), and the client side's
 * reply parser (src/proto/line_reply.c), through the shared loop of
 * fuzz_step.c: the stream in one write through a reference loop on the
 * step, then byte by byte and in random chunks through the daemon's own
 * in-order session (src/proto/pipeline.c, cmd stubbed), as fuzz_resp and
 * fuzz_http do; the three outcome logs must agree.
 *
 * Input: a 4-byte header, then the byte stream a client sends.
 *   bytes 0-1  max_line = 1 + (little-endian u16 % 8192)
 *   bytes 0-3  seed the random chunk sizes
 * On each step of the one-write feed (an exact-size copy of its window:
 * ASan sees the step or the framer read past it) this harness also checks
 * that the step is the framer and the parser it is made of: it waits iff
 * proto_line_frame finds no line, gives up iff the line is too long, drops
 * the line and its LF, and parses as proto_line_parse does; the framing
 * result against the bytes; each line (from an exact-size copy) against the
 * parser's contract and a small reference classifier written from the
 * protocol spec; the replies each line can lead to, formatted and parsed
 * back by hand and by line_reply_parse, which also takes every input line
 * as a reply. Every reply fuzz_step.c makes is checked the same way
 * (fuzz_check_reply). Any violation aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease.h"
#include "decimal.h"
#include "fuzz_log.h"
#include "fuzz_step.h"
#include "keys.h"
#include "line_reply.h"
#include "policy.h"
#include "proto.h"
#include "shown.h"
#include "proto_line.h"
#include "top.h"

#define HEADER 4
#define MAX_LINE_RANGE 8192

const char *const fuzz_name = "fuzz_proto";
const struct proto *const fuzz_proto = &proto_line;

/* ---- reference classifier, from proto/protocol.md ---- */

static int blank(unsigned char c)
{
	return c == ' ' || c == '\t';
}

static int word_eq(const char *s, size_t n, const char *upper)
{
	if (n != strlen(upper))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c >= 'a' && c <= 'z')
			c = (char)(c - 'a' + 'A');
		if (c != upper[i])
			return 0;
	}
	return 1;
}

/* Decimal digits only, no sign, value 1..2147483647; leading zeros are
 * accepted as the spec says. Returns 0 and the value, or -1. */
static int ref_cost(const char *s, size_t n, int64_t *out)
{
	size_t i = 0;
	int64_t v = 0;
	if (n == 0)
		return -1;
	for (size_t k = 0; k < n; k++)
		if (s[k] < '0' || s[k] > '9')
			return -1;
	while (i < n && s[i] == '0')
		i++;
	if (n - i > 10)
		return -1;
	for (; i < n; i++)
		v = v * 10 + (s[i] - '0');
	if (v < 1 || v > CMD_COST_MAX)
		return -1;
	*out = v;
	return 0;
}

#define REF_TOKENS 20

struct ref {
	const char *code; /* NULL: parses */
	enum cmd_verb verb;
	const char *tok[REF_TOKENS];
	size_t tlen[REF_TOKENS];
	int ntok; /* REF_TOKENS + 1 means "more than fit" */
	int64_t cost;
	int trace; /* ALLOW's or PEEK's TRACE: its value's token; 0: none */
};

/* A W3C traceparent, from the spec: version "-" 32 hex "-" 16 hex "-" 2
 * hex, lowercase; version ff invalid, 00 exactly 55 bytes, a later one
 * going on after a '-'; neither id all zeros. */
static int ref_traceparent(const char *s, size_t n)
{
	static const char hexd[] = "0123456789abcdef";
	if (n < 55 || (n > 55 && (s[0] == '0' && s[1] == '0')) || (n > 55 && s[55] != '-'))
		return 0;
	for (size_t i = 0; i < 55; i++) {
		int dash = i == 2 || i == 35 || i == 52;
		if (dash ? s[i] != '-' : !memchr(hexd, s[i], 16) || !s[i])
			return 0;
	}
	if (s[0] == 'f' && s[1] == 'f')
		return 0;
	int tz = 1, pz = 1;
	for (size_t i = 3; i < 35; i++)
		tz &= s[i] == '0';
	for (size_t i = 36; i < 52; i++)
		pz &= s[i] == '0';
	return !tz && !pz;
}

/*
 * Classifies a line (LF excluded) as proto_line_parse should. Precedence, where
 * the spec leaves it open, follows proto_line.c: control bytes, then too many
 * tokens (more than 18, whatever the verb), empty, verb, token count, cost,
 * user length.
 */
static void ref_classify(const char *line, size_t len, struct ref *r)
{
	memset(r, 0, sizeof(*r));
	r->cost = 1;
	if (len > 0 && line[len - 1] == '\r')
		len--;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];
		if (c == '\0' || c == '\r') {
			r->code = "syntax";
			return;
		}
	}
	size_t i = 0;
	while (i < len) {
		while (i < len && blank((unsigned char)line[i]))
			i++;
		if (i == len)
			break;
		size_t start = i;
		while (i < len && !blank((unsigned char)line[i]))
			i++;
		if (r->ntok < REF_TOKENS) {
			r->tok[r->ntok] = line + start;
			r->tlen[r->ntok] = i - start;
		}
		if (r->ntok <= REF_TOKENS)
			r->ntok++;
	}
	if (r->ntok == 0 || r->ntok > 2 + 2 * CMD_PAIRS_MAX) {
		r->code = "syntax";
		return;
	}
	const char *v = r->tok[0];
	size_t vl = r->tlen[0];
	int n = r->ntok;
	if (word_eq(v, vl, "SETTLE") || word_eq(v, vl, "CANCEL")) {
		/* a hold id (a lease id's form), and a SETTLE's actual cost from 0 */
		int settle = word_eq(v, vl, "SETTLE");
		r->verb = settle ? CMD_SETTLE : CMD_CANCEL;
		int64_t actual;
		const char *colon = n == 2 + settle ? memchr(r->tok[1], ':', r->tlen[1]) : NULL;
		if (n != 2 + settle)
			r->code = "syntax";
		else if (settle && decimal_parse(r->tok[2], r->tlen[2], CMD_COST_MAX, &actual) < 0)
			r->code = "bad-cost";
		else if (!colon || colon == r->tok[1] || r->tlen[1] >= LEASE_ID_MAX)
			r->code = "no-hold";
	} else if (word_eq(v, vl, "RELEASE") || word_eq(v, vl, "RENEW")) {
		/* one argument with an action before a ':': a lease id */
		r->verb = word_eq(v, vl, "RELEASE") ? CMD_RELEASE : CMD_RENEW;
		const char *colon = n == 2 ? memchr(r->tok[1], ':', r->tlen[1]) : NULL;
		if (n != 2)
			r->code = "syntax";
		else if (!colon || colon == r->tok[1] || r->tlen[1] >= LEASE_ID_MAX)
			r->code = "no-lease";
	} else if (word_eq(v, vl, "ALLOW") || word_eq(v, vl, "PEEK") || word_eq(v, vl, "ACQUIRE")) {
		/* ACQUIRE's arguments are ALLOW's, with no WAIT */
		r->verb = word_eq(v, vl, "ALLOW")  ? CMD_ALLOW
			  : word_eq(v, vl, "PEEK") ? CMD_PEEK
						   : CMD_ACQUIRE;
		/* ALLOW's and PEEK's [TRACE <traceparent>], last of all: judged first */
		if (r->verb != CMD_ACQUIRE && n >= 5 &&
		    word_eq(r->tok[n - 2], r->tlen[n - 2], "TRACE")) {
			if (!ref_traceparent(r->tok[n - 1], r->tlen[n - 1])) {
				r->code = "syntax";
				return;
			}
			r->trace = n - 1;
			n -= 2;
		}
		/* ALLOW's [WAIT <ms>], last but TRACE, 0 to 60000 */
		if (r->verb == CMD_ALLOW && n >= 5 &&
		    word_eq(r->tok[n - 2], r->tlen[n - 2], "WAIT")) {
			int64_t ms;
			if (decimal_parse(r->tok[n - 1], r->tlen[n - 1], 60000, &ms) < 0) {
				r->code = "syntax";
				return;
			}
			n -= 2;
		}
		if (n < 3 || n > 4)
			r->code = "syntax";
		else if (n == 4 && ref_cost(r->tok[3], r->tlen[3], &r->cost) < 0)
			r->code = "bad-cost";
		else if (r->tlen[1] > KEYS_USER_MAX)
			r->code = "bad-user";
	} else if (word_eq(v, vl, "CHARGE") || word_eq(v, vl, "HOLD")) {
		/* exactly a user, an action and a cost (a HOLD's estimate) */
		r->verb = word_eq(v, vl, "CHARGE") ? CMD_CHARGE : CMD_HOLD;
		if (n != 4)
			r->code = "syntax";
		else if (ref_cost(r->tok[3], r->tlen[3], &r->cost) < 0)
			r->code = "bad-cost";
		else if (r->tlen[1] > KEYS_USER_MAX)
			r->code = "bad-user";
	} else if (word_eq(v, vl, "MALLOW") || word_eq(v, vl, "MPEEK")) {
		/* pairs, then a cost when the arguments are odd in number; the
		 * cost is judged before the users */
		r->verb = word_eq(v, vl, "MALLOW") ? CMD_MALLOW : CMD_MPEEK;
		if (n < 3) {
			r->code = "syntax";
			return;
		}
		if ((n - 1) % 2 == 1 && ref_cost(r->tok[n - 1], r->tlen[n - 1], &r->cost) < 0) {
			r->code = "bad-cost";
			return;
		}
		for (int i = 1; i + 1 < n; i += 2)
			if (r->tlen[i] > KEYS_USER_MAX) {
				r->code = "bad-user";
				return;
			}
	} else if (word_eq(v, vl, "TOP")) {
		int64_t idx;
		r->verb = CMD_TOP;
		if (n < 3 || n > 4 || decimal_parse(r->tok[2], r->tlen[2], INT32_MAX, &idx) < 0 ||
		    (n == 4 && !word_eq(r->tok[3], r->tlen[3], "DENIED") &&
		     !word_eq(r->tok[3], r->tlen[3], "REQUESTS")))
			r->code = "syntax";
	} else if (word_eq(v, vl, "OVERRIDES")) {
		int64_t idx;
		r->verb = CMD_OVERRIDES;
		if (n != 2 || decimal_parse(r->tok[1], r->tlen[1], INT32_MAX, &idx) < 0)
			r->code = "syntax";
	} else if (word_eq(v, vl, "OVERRIDE")) {
		int64_t ms;
		r->verb = CMD_OVERRIDE;
		if (n < 4 || n > 5)
			r->code = "syntax";
		else if (n == 5 &&
			 (policy_parse_duration(r->tok[4], r->tlen[4], &ms, NULL, 0) < 0 ||
			  ms < 1000 || ms > 366LL * 24 * 3600 * 1000))
			r->code = "syntax";
		else if (r->tlen[1] > KEYS_USER_MAX)
			r->code = "bad-user";
	} else if (word_eq(v, vl, "UNOVERRIDE")) {
		r->verb = CMD_UNOVERRIDE;
		if (n != 3)
			r->code = "syntax";
		else if (r->tlen[1] > KEYS_USER_MAX)
			r->code = "bad-user";
	} else if (word_eq(v, vl, "RESET") || word_eq(v, vl, "STATE")) {
		/* exactly a user and an action */
		r->verb = word_eq(v, vl, "RESET") ? CMD_RESET : CMD_STATE;
		if (n != 3)
			r->code = "syntax";
		else if (r->tlen[1] > KEYS_USER_MAX)
			r->code = "bad-user";
	} else if (word_eq(v, vl, "PING") || word_eq(v, vl, "QUIT")) {
		r->verb = word_eq(v, vl, "PING") ? CMD_PING : CMD_QUIT;
		if (n != 1)
			r->code = "syntax";
	} else if (word_eq(v, vl, "AUTH")) {
		r->verb = CMD_AUTH;
		if (n != 2)
			r->code = "syntax";
	} else {
		r->code = "unknown-command";
	}
}

/* ---- formatters ---- */

static uint64_t fnv(const char *s, size_t n, uint64_t h)
{
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* Parses "<int>" followed by `end`; returns the position after end or NULL. */
static const char *read_int(const char *p, const char *lim, int64_t *v, char end)
{
	int neg = 0;
	uint64_t u = 0;
	if (p < lim && *p == '-') {
		neg = 1;
		p++;
	}
	const char *start = p;
	while (p < lim && *p >= '0' && *p <= '9' && p - start < 20) {
		u = u * 10 + (uint64_t)(*p - '0');
		p++;
	}
	/* 19 digits hold every int64 and cannot overflow u. */
	if (p == start || p - start > 19 || p >= lim || *p != end)
		return NULL;
	/* Round trip through the two's complement: INT64_MIN is 9223372036854775808. */
	*v = neg ? (int64_t)(0 - u) : (int64_t)u;
	return p + 1;
}

/* pair: -1 for ALLOW's reply, else MALLOW's, which names the deciding pair */
static void check_decision_format(int allowed, const int64_t in[4], int pair)
{
	char *buf = malloc(PROTO_LINE_REPLY_MAX); /* exact size: ASan sees an overflow */
	check(buf != NULL, "out of memory");
	struct cmd_result r = {.kind = CMD_REPLY_DECISION,
			       .allowed = allowed,
			       .limit = in[0],
			       .remaining = in[1],
			       .retry_after_ms = in[2],
			       .reset_ms = in[3],
			       .multi = pair >= 0,
			       .pair = pair};
	size_t n = proto_line_format(buf, &r);
	check(n > 0 && n <= PROTO_LINE_REPLY_MAX, "decision reply length");
	check(buf[n - 1] == '\n' && !memchr(buf, '\n', n - 1), "decision reply is one line");
	const char *word = allowed ? "ALLOWED " : "DENIED ";
	size_t wl = strlen(word);
	check(n > wl && memcmp(buf, word, wl) == 0, "decision reply word");
	const char *p = buf + wl, *lim = buf + n;
	for (int i = 0; i < 4; i++) {
		int64_t v;
		p = read_int(p, lim, &v, i < 3 || pair >= 0 ? ' ' : '\n');
		check(p != NULL && v == in[i], "decision reply fields round-trip");
	}
	if (pair >= 0) {
		int64_t v;
		p = read_int(p, lim, &v, '\n');
		check(p != NULL && v == pair, "the deciding pair round-trips");
	}
	check(p == lim, "decision reply has nothing after the fields");
	/* the client's parser: exactly what the daemon can send, values kept */
	struct line_reply lr;
	int ok = line_reply_parse(buf, n - 1, &lr) == 0;
	/* -1 anywhere: fallbacks, overrides (limit -1: unlimited); see check_fixed_forms */
	int sendable = in[0] >= -1 && in[1] >= -1 && in[2] >= -1 && in[3] >= -1;
	check(ok == sendable, "line_reply takes exactly the decisions the daemon sends");
	if (ok) {
		check(lr.kind == (allowed ? LINE_REPLY_ALLOWED : LINE_REPLY_DENIED),
		      "line_reply: decision word");
		check(lr.limit == in[0] && lr.remaining == in[1] && lr.retry_after_ms == in[2] &&
			      lr.reset_ms == in[3] && lr.pair == (pair >= 0 ? pair : -1),
		      "line_reply: decision fields round-trip");
		check(line_reply_is_fallback(&lr) == (in[1] < 0 && in[0] >= 0),
		      "line_reply: fallback");
		check(line_reply_is_unlimited(&lr) == (in[0] < 0), "line_reply: unlimited");
	}
	free(buf);
}

/* The answers the daemon makes without the store, as cmd.c (answer_override,
 * the on_store_error fallback) and multi.c (every pair unlimited, a blocked
 * pair) write them, with the policy's first limit `limit`; each must parse
 * and be told apart as ratelimitctl does. pair: -1 for ALLOW's reply, else
 * the pairs of MALLOW's (the blocked one is the last). */
static void check_fixed_forms(int64_t limit, int pair)
{
	struct line_reply lr;
	char buf[PROTO_LINE_REPLY_MAX];
	const struct {
		int allowed;
		int64_t v[4];
		int decided; /* the reply names a pair: a blocked one */
		int fallback, unlimited, blocked;
	} forms[] = {
		{1, {-1, -1, 0, -1}, 0, 0, 1, 0},	/* unlimited */
		{0, {limit, 0, -1, -1}, 1, 0, 0, 1},	/* blocked */
		{1, {limit, -1, 0, -1}, 0, 1, 0, 0},	/* on_store_error: allow */
		{0, {limit, -1, 1000, -1}, 0, 1, 0, 0}, /* on_store_error: deny */
	};
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		int p = pair < 0 ? -1 : forms[i].decided ? pair : 0;
		check_decision_format(forms[i].allowed, forms[i].v, p);
		struct cmd_result r = {.kind = CMD_REPLY_DECISION,
				       .allowed = forms[i].allowed,
				       .limit = forms[i].v[0],
				       .remaining = forms[i].v[1],
				       .retry_after_ms = forms[i].v[2],
				       .reset_ms = forms[i].v[3],
				       .multi = p >= 0,
				       .pair = p};
		size_t n = proto_line_format(buf, &r);
		check(line_reply_parse(buf, n - 1, &lr) == 0,
		      "line_reply takes the daemon's own answers");
		check(line_reply_is_fallback(&lr) == forms[i].fallback &&
			      line_reply_is_unlimited(&lr) == forms[i].unlimited &&
			      line_reply_is_blocked(&lr) == forms[i].blocked,
		      "line_reply tells fallbacks and overrides apart");
	}
}

/* As cmd_reply_error does: the message is kept up to CMD_MSG_MAX - 1 bytes. */
static void check_err_format(enum cmd_error e, const char *msg)
{
	char *buf = malloc(PROTO_LINE_REPLY_MAX);
	check(buf != NULL, "out of memory");
	struct cmd_result r = {.kind = CMD_REPLY_ERROR, .error = e};
	size_t ml = strlen(msg);
	if (ml >= sizeof(r.msg))
		ml = sizeof(r.msg) - 1;
	memcpy(r.msg, msg, ml);
	msg = r.msg;
	size_t n = proto_line_format(buf, &r);
	check(n > 0 && n <= PROTO_LINE_REPLY_MAX && buf[n - 1] == '\n', "error reply length");
	const char *code = proto_error_code(e);
	size_t cl = strlen(code);
	size_t want = 4 + cl + 1 + ml + 1;
	if (want <= PROTO_LINE_REPLY_MAX) {
		check(n == want, "short error reply is complete");
		check(memcmp(buf, "ERR ", 4) == 0 && memcmp(buf + 4, code, cl) == 0 &&
			      buf[4 + cl] == ' ' && memcmp(buf + 5 + cl, msg, ml) == 0,
		      "error reply text");
		struct line_reply lr;
		/* a message is one line's text: never a CR or LF (users have none) */
		check(line_reply_parse(buf, n - 1, &lr) == 0 && lr.kind == LINE_REPLY_ERR &&
			      lr.code.len == cl && memcmp(lr.code.p, code, cl) == 0 &&
			      lr.message.len == ml && (!ml || memcmp(lr.message.p, msg, ml) == 0),
		      "line_reply: error reply round-trips");
	} else {
		check(n == PROTO_LINE_REPLY_MAX, "long error reply is cut at PROTO_LINE_REPLY_MAX");
	}
	free(buf);
}

static void check_str_format(enum cmd_reply kind, const char *word)
{
	char *buf = malloc(PROTO_LINE_REPLY_MAX);
	check(buf != NULL, "out of memory");
	struct cmd_result r = {.kind = kind};
	size_t n = proto_line_format(buf, &r);
	size_t wl = strlen(word);
	check(n == wl + 1 && memcmp(buf, word, wl) == 0 && buf[wl] == '\n', "word reply");
	struct line_reply lr;
	enum line_reply_kind want = kind == CMD_REPLY_PONG  ? LINE_REPLY_PONG
				    : kind == CMD_REPLY_BYE ? LINE_REPLY_BYE
							    : LINE_REPLY_OK;
	check(line_reply_parse(buf, n - 1, &lr) == 0 && lr.kind == want, "line_reply: word reply");
	free(buf);
}

/* Any line as a reply (a daemon, or something else, answering ratelimitctl):
 * what line_reply_parse takes points into the line and reads back as sent. */
static void check_line_reply(const char *line, size_t n)
{
	struct line_reply r;
	if (line_reply_parse(line, n, &r) < 0)
		return;
	const struct line_reply_str *strs[] = {&r.code, &r.message, &r.user, &r.action, &r.spec};
	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
		check(strs[i]->len == 0 ||
			      (strs[i]->p >= line && strs[i]->p + strs[i]->len <= line + n),
		      "line_reply: strings point into the line");
	size_t len = n && line[n - 1] == '\r' ? n - 1 : n;
	check(!memchr(line, '\n', len) && !memchr(line, '\r', len), "line_reply: one line");
	switch (r.kind) {
	case LINE_REPLY_ALLOWED:
	case LINE_REPLY_DENIED:
		check(r.limit >= -1 && r.remaining >= -1 && r.retry_after_ms >= -1 &&
			      r.reset_ms >= -1 && r.pair >= -1,
		      "line_reply: decision ranges");
		check(len >= 6 && memcmp(line, r.kind == LINE_REPLY_ALLOWED ? "ALLOWED" : "DENIED",
					 r.kind == LINE_REPLY_ALLOWED ? 7 : 6) == 0,
		      "line_reply: decision word");
		break;
	case LINE_REPLY_ERR:
		check(r.code.len > 0 && !memchr(r.code.p, ' ', r.code.len) && r.code.p == line + 4,
		      "line_reply: error code is the second word");
		break;
	case LINE_REPLY_OVERRIDE:
		check(r.index >= 0 && r.ttl_ms >= -1 && r.user.len && r.action.len && r.spec.len,
		      "line_reply: override item");
		break;
	case LINE_REPLY_END:
		check(r.index >= 0 && (r.requests == -1) == (r.denied == -1) && r.requests >= -1,
		      "line_reply: END count, and TOP's totals both or neither");
		break;
	case LINE_REPLY_TOP:
		check(r.index >= 0 && r.denied >= 0 && r.requests >= 0 && r.over >= 0 &&
			      r.user.len > 0 && !memchr(r.user.p, ' ', r.user.len),
		      "line_reply: TOP item");
		break;
	case LINE_REPLY_STATE:
		check(r.nlimits >= 1 && r.nlimits <= LINE_REPLY_LIMITS_MAX && r.ban_ms >= 0 &&
			      r.algorithm.len > 0 && r.override.len > 0 &&
			      r.algorithm.p == line + 6 && r.algorithm.p >= line &&
			      r.override.p + r.override.len <= line + n,
		      "line_reply: STATE's words");
		for (int i = 0; i < r.nlimits; i++)
			for (int j = 0; j < 7; j++)
				check(r.limits[i][j] >= 0, "line_reply: STATE's figures >= 0");
		break;
	case LINE_REPLY_OK:
	case LINE_REPLY_PONG:
	case LINE_REPLY_BYE:
		check(len == (r.kind == LINE_REPLY_PONG	 ? 4u
			      : r.kind == LINE_REPLY_BYE ? 3u
							 : 2u),
		      "line_reply: a word alone");
		break;
	}
}

/* ---- one line: the parser's contract and its replies ---- */

static int known_code(enum cmd_error code)
{
	return code == CMD_ERR_SYNTAX || code == CMD_ERR_UNKNOWN_COMMAND ||
	       code == CMD_ERR_BAD_COST || code == CMD_ERR_BAD_USER || code == CMD_ERR_NO_LEASE ||
	       code == CMD_ERR_NO_HOLD;
}

static int inside(const char *p, size_t n, const char *line, size_t len)
{
	return p >= line && n <= len && p <= line + len - n;
}

/* The parser's contract, and agreement with the reference classifier. */
static void check_outcome(const char *line, size_t n, int rc, const struct cmd_request *cmd,
			  const struct proto_error *err)
{
	struct ref ref;
	ref_classify(line, n, &ref);
	if (rc != 0) {
		check(rc == -1, "proto_line_parse returns 0 or -1");
		check(known_code(err->code), "error code is a known one");
		check(err->msg != NULL && err->msg[0] != '\0', "error message is set");
		for (const char *m = err->msg; *m; m++)
			check(*m >= 0x20 && *m < 0x7f, "error message is printable");
		check(ref.code != NULL, "rejected a line the spec accepts");
		check(!strcmp(proto_error_code(err->code), ref.code),
		      "error code differs from the reference");
		return;
	}
	check(ref.code == NULL, "parsed a line the spec rejects");
	check(cmd->verb == ref.verb, "verb differs from the reference");
	check(cmd->cost >= 1 && cmd->cost <= CMD_COST_MAX, "cost in 1..2147483647");
	check(cmd->cost == ref.cost, "cost differs from the reference");
	switch (cmd->verb) {
	case CMD_ALLOW:
	case CMD_PEEK:
	case CMD_RESET:
	case CMD_STATE:
	case CMD_ACQUIRE:
	case CMD_CHARGE:
	case CMD_HOLD:
		check(cmd->user_len >= 1 && cmd->user_len <= KEYS_USER_MAX, "user_len 1..512");
		check(cmd->action_len >= 1, "action_len >= 1");
		check(inside(cmd->user, cmd->user_len, line, n), "user inside the line");
		check(inside(cmd->action, cmd->action_len, line, n), "action inside the line");
		/* The reference tokens have no blanks and no control bytes. */
		check(cmd->user == ref.tok[1] && cmd->user_len == ref.tlen[1], "user token");
		check(cmd->action == ref.tok[2] && cmd->action_len == ref.tlen[2], "action token");
		check(ref.trace ? cmd->traceparent == ref.tok[ref.trace] &&
					  cmd->traceparent_len == ref.tlen[ref.trace]
				: cmd->traceparent == NULL,
		      "TRACE's traceparent token");
		if (cmd->verb == CMD_RESET || cmd->verb == CMD_STATE)
			check(cmd->cost == 1, "RESET's and STATE's cost is 1");
		break;
	case CMD_PING:
	case CMD_QUIT:
		check(cmd->cost == 1, "PING/QUIT cost is 1");
		break;
	case CMD_OVERRIDE:
	case CMD_UNOVERRIDE:
		check(cmd->user == ref.tok[1] && cmd->user_len == ref.tlen[1], "user token");
		check(cmd->action == ref.tok[2] && cmd->action_len == ref.tlen[2], "action token");
		if (cmd->verb == CMD_OVERRIDE)
			check(cmd->spec == ref.tok[3] && cmd->spec_len == ref.tlen[3],
			      "spec token");
		check(cmd->ttl_ms == 0 || (cmd->ttl_ms >= 1000 && ref.ntok == 5), "ttl");
		break;
	case CMD_OVERRIDES:
		check(cmd->index >= 0 && cmd->index <= INT32_MAX, "index in range");
		break;
	case CMD_TOP:
		check(cmd->index >= 0 && cmd->index <= INT32_MAX, "index in range");
		check(cmd->action == ref.tok[1] && cmd->action_len == ref.tlen[1], "action token");
		check(cmd->by_requests ==
			      (ref.ntok == 4 && word_eq(ref.tok[3], ref.tlen[3], "REQUESTS")),
		      "TOP's ranking word");
		break;
	case CMD_MALLOW:
	case CMD_MPEEK:
		check(cmd->npairs >= 1 && cmd->npairs <= CMD_PAIRS_MAX, "1 to 8 pairs");
		check(cmd->npairs == (ref.ntok - 1) / 2, "pairs: every two arguments");
		for (int i = 0; i < cmd->npairs; i++) {
			const struct cmd_pair *pr = &cmd->pairs[i];
			check(pr->user_len >= 1 && pr->user_len <= KEYS_USER_MAX,
			      "user_len 1..512");
			check(pr->user == ref.tok[1 + 2 * i] && pr->user_len == ref.tlen[1 + 2 * i],
			      "pair user token");
			check(pr->action == ref.tok[2 + 2 * i] &&
				      pr->action_len == ref.tlen[2 + 2 * i],
			      "pair action token");
		}
		break;
	case CMD_AUTH:
		check(ref.ntok == 2 && cmd->token == ref.tok[1] && cmd->token_len == ref.tlen[1],
		      "AUTH's token is its one argument");
		break;
	case CMD_RELEASE:
	case CMD_RENEW:
	case CMD_SETTLE:
	case CMD_CANCEL:
		check(cmd->lease_id == ref.tok[1] && cmd->lease_id_len == ref.tlen[1],
		      "the lease id is the one argument");
		check(cmd->verb != CMD_SETTLE || (cmd->actual >= 0 && cmd->actual <= CMD_COST_MAX),
		      "a settle's actual in 0..2147483647");
		check(cmd->action == ref.tok[1] &&
			      cmd->action_len ==
				      (size_t)((const char *)memchr(ref.tok[1], ':', ref.tlen[1]) -
					       ref.tok[1]),
		      "a lease id's action is before its first ':'");
		break;
	default:
		check(0, "unknown verb");
	}
}

/* Formats the replies this outcome can lead to, with awkward values. */
static void check_formats(const char *line, size_t n, int rc, const struct cmd_request *cmd,
			  const struct proto_error *err)
{
	if (rc != 0) {
		check_err_format(err->code, err->msg);
		return;
	}
	/* Fields from the line's hash: any int64, negatives included. */
	uint64_t h = fnv(line, n, 14695981039346656037ULL);
	int64_t v[4];
	for (int i = 0; i < 4; i++) {
		h = fnv((const char *)&h, sizeof(h), h);
		v[i] = (int64_t)h;
	}
	if (n % 3 == 0) {
		v[0] = INT64_MIN;
		v[3] = INT64_MAX;
	}
	int pair = cmd->verb == CMD_MALLOW || cmd->verb == CMD_MPEEK ? cmd->npairs : -1;
	check_decision_format(cmd->verb == CMD_ALLOW, v, pair);
	v[0] = cmd->cost;
	v[1] = -1;
	v[2] = 0;
	v[3] = (int64_t)n;
	check_decision_format(cmd->verb != CMD_ALLOW, v, pair);
	check_fixed_forms(cmd->cost, pair);
	check_fixed_forms(INT32_MAX, pair);
	if (cmd->verb == CMD_ALLOW || cmd->verb == CMD_PEEK) {
		/* The user as an error message: long, arbitrary bytes. */
		char *msg = malloc(cmd->user_len + 1);
		check(msg != NULL, "out of memory");
		memcpy(msg, cmd->user, cmd->user_len);
		msg[cmd->user_len] = '\0';
		check_err_format(CMD_ERR_UNKNOWN_ACTION, msg);
		free(msg);
	}
	if (cmd->verb == CMD_PING)
		check_str_format(CMD_REPLY_PONG, "PONG");
	else if (cmd->verb == CMD_QUIT)
		check_str_format(CMD_REPLY_BYE, "BYE");
	else
		check_str_format(CMD_REPLY_OK, "OK");
}

/* Checks what proto_line_frame said about buf[0..len) against the bytes. */
static void check_frame(const char *buf, size_t len, size_t max_line, long n, size_t consumed)
{
	size_t scan = len < max_line + 2 ? len : max_line + 2;
	const char *lf = memchr(buf, '\n', scan);
	if (n >= 0) {
		size_t un = (size_t)n;
		check(lf != NULL && (size_t)(lf - buf) == un, "frame ends at the first LF");
		check(consumed == un + 1, "frame consumes the line and its LF");
		size_t content = un > 0 && buf[un - 1] == '\r' ? un - 1 : un;
		check(content <= max_line, "framed line within max_line");
	} else if (n == -1) {
		check(lf == NULL && len <= max_line + 1, "need-more only while a line can fit");
	} else if (n == -2) {
		if (lf) {
			size_t un = (size_t)(lf - buf);
			size_t content = un > 0 && buf[un - 1] == '\r' ? un - 1 : un;
			check(content > max_line, "too-long line really is too long");
		} else {
			check(len >= max_line + 2, "too-long without LF only past max_line + 1");
		}
	} else {
		check(0, "proto_line_frame returns >= 0, -1 or -2");
	}
}

/* ---- the hooks fuzz_step.c calls ---- */

/* Every reply fuzz_step.c can make, in an exact-size buffer: one line that
 * line_reply_parse reads back as it was meant. */
void fuzz_check_reply(const struct cmd_result *res)
{
	switch (res->kind) {
	case CMD_REPLY_DECISION: {
		int64_t v[4] = {res->limit, res->remaining, res->retry_after_ms, res->reset_ms};
		check_decision_format(res->allowed, v, res->multi ? res->pair : -1);
		return;
	}
	case CMD_REPLY_ERROR:
	case CMD_REPLY_LOCAL: /* the line protocol has none: an error */
		check_err_format(res->error, res->msg);
		return;
	case CMD_REPLY_OK:
		check_str_format(res->kind, "OK");
		return;
	case CMD_REPLY_PONG:
		check_str_format(res->kind, "PONG");
		return;
	case CMD_REPLY_BYE:
		check_str_format(res->kind, "BYE");
		return;
	case CMD_REPLY_LEASE: {
		/* a decision, then the lease's id: line_reply reads both back */
		char *buf = malloc(PROTO_LINE_REPLY_MAX);
		check(buf != NULL, "out of memory");
		size_t n = proto_line_format(buf, res);
		check(n > 0 && n <= PROTO_LINE_REPLY_MAX && buf[n - 1] == '\n' &&
			      !memchr(buf, '\n', n - 1),
		      "a lease reply is one line");
		struct line_reply lr;
		int ok = line_reply_parse(buf, n - 1, &lr) == 0;
		const struct cmd_item *it = res->item;
		check(!ok || !it || memchr(it->text, ' ', it->ulen) ||
			      (lr.lease.len == it->ulen && !memcmp(lr.lease.p, it->text, it->ulen)),
		      "line_reply: a lease's id round-trips");
		free(buf);
		return;
	}
	case CMD_REPLY_TOP: {
		/* an item, its user shown as one word; or the end with the totals */
		char *buf = malloc(PROTO_LINE_REPLY_MAX);
		check(buf != NULL, "out of memory");
		size_t n = proto_line_format(buf, res);
		check(n > 0 && n <= PROTO_LINE_REPLY_MAX && buf[n - 1] == '\n' &&
			      !memchr(buf, '\n', n - 1),
		      "a TOP reply is one line");
		struct line_reply lr;
		check(line_reply_parse(buf, n - 1, &lr) == 0, "line_reply takes TOP's replies");
		const struct cmd_item *it = res->item;
		if (!it) {
			check(lr.kind == LINE_REPLY_END && lr.index == res->limit &&
				      lr.requests == res->remaining &&
				      lr.denied == res->retry_after_ms,
			      "line_reply: TOP's END round-trips");
		} else {
			char shown[SHOWN_USER_MAX(TOP_NAME_MAX)];
			size_t sl = shown_user(shown, it->text, it->ulen, it->cut);
			check(lr.kind == LINE_REPLY_TOP && lr.index == it->index &&
				      lr.denied == it->denied && lr.requests == it->requests &&
				      lr.over == it->over && lr.user.len == sl &&
				      !memcmp(lr.user.p, shown, sl),
			      "line_reply: a TOP item round-trips");
		}
		free(buf);
		return;
	}
	case CMD_REPLY_STATE: {
		/* one line; read back as it was meant when its figures are the
		 * daemon's (none below 0) */
		char *buf = malloc(PROTO_LINE_REPLY_MAX);
		check(buf != NULL, "out of memory");
		size_t n = proto_line_format(buf, res);
		check(n > 0 && n <= PROTO_LINE_REPLY_MAX && buf[n - 1] == '\n' &&
			      !memchr(buf, '\n', n - 1),
		      "a STATE reply is one line");
		const struct cmd_state *st = res->state;
		int daemons = st && st->ban_ms >= 0 && st->nlimits >= 1 &&
			      st->nlimits <= POLICY_MAX_LIMITS;
		for (int i = 0; daemons && i < st->nlimits; i++) {
			const struct cmd_state_limit *l = &st->limits[i];
			daemons = l->window_ms >= 0 && l->limit >= 0 && l->used >= 0 &&
				  l->remaining >= 0 && l->reset_ms >= 0 && l->start_ms >= 0 &&
				  l->end_ms >= 0;
		}
		struct line_reply lr;
		int ok = line_reply_parse(buf, n - 1, &lr) == 0;
		check(ok == daemons, "line_reply takes the STATE replies the daemon sends");
		for (int i = 0; ok && i < st->nlimits; i++) {
			const struct cmd_state_limit *l = &st->limits[i];
			int64_t v[7] = {l->window_ms, l->limit,	   l->used,  l->remaining,
					l->reset_ms,  l->start_ms, l->end_ms};
			check(lr.kind == LINE_REPLY_STATE && lr.nlimits == st->nlimits &&
				      lr.ban_ms == st->ban_ms &&
				      !memcmp(lr.limits[i], v, sizeof(v)),
			      "line_reply: a STATE round-trips");
		}
		free(buf);
		return;
	}
	case CMD_REPLY_ITEM:
		break;
	}
	char *buf = malloc(PROTO_LINE_REPLY_MAX);
	check(buf != NULL, "out of memory");
	size_t n = proto_line_format(buf, res);
	check(n > 0 && n <= PROTO_LINE_REPLY_MAX && buf[n - 1] == '\n' && !memchr(buf, '\n', n - 1),
	      "an OVERRIDES reply is one line");
	struct line_reply lr;
	int ok = line_reply_parse(buf, n - 1, &lr) == 0;
	const struct cmd_item *it = res->item;
	if (!it) {
		check(ok == (res->limit >= 0), "line_reply takes END with a count");
		check(!ok || (lr.kind == LINE_REPLY_END && lr.index == res->limit),
		      "line_reply: END's count round-trips");
	} else {
		check(ok == (it->index >= 0 && it->ttl_ms >= -1),
		      "line_reply takes the items the daemon sends");
		check(!ok || (lr.kind == LINE_REPLY_OVERRIDE && lr.index == it->index &&
			      lr.ttl_ms == it->ttl_ms && lr.user.len == it->ulen &&
			      lr.action.len == it->alen && lr.spec.len == it->spec_len &&
			      !memcmp(lr.user.p, it->text, it->ulen) &&
			      !memcmp(lr.action.p, it->text + it->ulen, it->alen) &&
			      !memcmp(lr.spec.p, it->text + it->ulen + it->alen, it->spec_len)),
		      "line_reply: an item round-trips");
	}
	free(buf);
}

/* p[0..n) at the same place in a as in b. */
static int same_at(const char *p, size_t n, const char *a, const char *q, size_t m, const char *b)
{
	return n == m && (n == 0 || p - a == q - b);
}

/* The step's request (in w) is the parser's (in line). */
static int same_request(const struct cmd_request *s, const char *w, const struct cmd_request *p,
			const char *line)
{
	if (s->verb != p->verb || s->cost != p->cost)
		return 0;
	switch (p->verb) {
	case CMD_ALLOW:
	case CMD_PEEK:
	case CMD_RESET:
		return same_at(s->user, s->user_len, w, p->user, p->user_len, line) &&
		       same_at(s->action, s->action_len, w, p->action, p->action_len, line);
	case CMD_OVERRIDE:
	case CMD_UNOVERRIDE:
		return same_at(s->user, s->user_len, w, p->user, p->user_len, line) &&
		       same_at(s->action, s->action_len, w, p->action, p->action_len, line) &&
		       (p->verb == CMD_UNOVERRIDE ||
			(same_at(s->spec, s->spec_len, w, p->spec, p->spec_len, line) &&
			 s->ttl_ms == p->ttl_ms));
	case CMD_OVERRIDES:
		return s->index == p->index;
	case CMD_TOP:
		return s->index == p->index && s->by_requests == p->by_requests &&
		       same_at(s->action, s->action_len, w, p->action, p->action_len, line);
	case CMD_MALLOW:
	case CMD_MPEEK:
		if (s->npairs != p->npairs)
			return 0;
		for (int i = 0; i < p->npairs; i++)
			if (!same_at(s->pairs[i].user, s->pairs[i].user_len, w, p->pairs[i].user,
				     p->pairs[i].user_len, line) ||
			    !same_at(s->pairs[i].action, s->pairs[i].action_len, w,
				     p->pairs[i].action, p->pairs[i].action_len, line))
				return 0;
		return 1;
	default:
		return 1;
	}
}

/* One step of the one-write feed, on the exact-size window w[0..len): the
 * framer and the parser it is made of, and the line's own checks. */
static void line_step(const char *w, size_t len, size_t max_line, enum proto_step st,
		      const struct proto_parsed *got)
{
	size_t consumed = 0;
	long n = proto_line_frame(w, len, max_line, &consumed);
	check_frame(w, len, max_line, n, consumed);
	check((st == PROTO_NEED_MORE) == (n == -1), "the step waits iff no line is there");
	check((st == PROTO_FATAL) == (n == -2), "the step gives up iff the line is too long");
	check(st != PROTO_FATAL || got->err.code == CMD_ERR_LINE_TOO_LONG,
	      "a too-long line is line-too-long");
	check(st != PROTO_SKIP && st != PROTO_LOCAL, "the line protocol neither skips nor answers");
	if (n < 0)
		return;
	check(got->used == consumed, "the step drops the line and its LF");
	char *line = malloc(n ? (size_t)n : 1); /* exact size: ASan sees an overread */
	check(line != NULL, "out of memory");
	memcpy(line, w, (size_t)n);
	struct cmd_request cmd;
	struct proto_error err = {0, NULL};
	memset(&cmd, 0xa5, sizeof(cmd));
	int rc = proto_line_parse(line, (size_t)n, &cmd, &err);
	check_outcome(line, (size_t)n, rc, &cmd, &err);
	check_formats(line, (size_t)n, rc, &cmd, &err);
	check_line_reply(line, (size_t)n);
	check((rc == 0) == (st == PROTO_REQUEST), "the step parses as the parser does");
	if (rc == 0)
		check(same_request(&got->req, w, &cmd, line), "the step's request is the parser's");
	else
		check(got->err.code == err.code && !strcmp(got->err.msg, err.msg),
		      "the step's error is the parser's");
	free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < HEADER)
		return 0;
	size_t max_line = 1 + (size_t)((data[0] | data[1] << 8) % MAX_LINE_RANGE);
	uint32_t rnd = (uint32_t)(data[0] | data[1] << 8 | data[2] << 16 | (uint32_t)data[3] << 24);
	fuzz_step_check = line_step;
	fuzz_run(max_line, NULL, 0, (const char *)data + HEADER, size - HEADER, rnd);
	return 0;
}
