/* proto.c - the line protocol parser and reply formatter; pure: no I/O, no allocation. */
#include "proto.h"

#include "decimal.h"
#include "keys.h"

#include <string.h>

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

long proto_frame(const char *buf, size_t len, size_t max_line, size_t *consumed)
{
	size_t scan = len < max_line + 2 ? len : max_line + 2;
	const char *lf = memchr(buf, '\n', scan);
	if (!lf)
		return len > max_line + 1 ? -2 : -1;
	size_t n = (size_t)(lf - buf);
	size_t content = n > 0 && buf[n - 1] == '\r' ? n - 1 : n;
	if (content > max_line)
		return -2;
	*consumed = n + 1;
	return (long)n;
}

static int verb_is(const char *tok, size_t len, const char *verb)
{
	size_t vlen = strlen(verb);
	if (len != vlen)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = tok[i];
		if (c >= 'a' && c <= 'z')
			c = (char)(c - 'a' + 'A');
		if (c != verb[i])
			return 0;
	}
	return 1;
}

static int parse_cost(const char *s, size_t len, int64_t *out)
{
	int64_t v = 0;
	if (len == 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
		if (v > PROTO_COST_MAX)
			return -1;
	}
	if (v < 1)
		return -1;
	*out = v;
	return 0;
}

static int fail(struct proto_err *err, const char *code, const char *msg)
{
	err->code = code;
	err->msg = msg;
	return -1;
}

#define MAX_TOKENS 5

int proto_parse(const char *line, size_t len, struct proto_cmd *cmd, struct proto_err *err)
{
	if (len > 0 && line[len - 1] == '\r')
		len--;
	/* A user is any bytes but blanks, CR, LF and NUL: NUL and a CR inside
	 * the line make the whole request invalid (other bytes, control bytes
	 * and non-UTF-8 included, may be part of a user). */
	if (memchr(line, '\0', len))
		return fail(err, "syntax", "NUL byte in request");
	if (memchr(line, '\r', len))
		return fail(err, "syntax", "CR inside the line");
	const char *tok[MAX_TOKENS];
	size_t tlen[MAX_TOKENS];
	int ntok = 0;
	size_t i = 0;
	while (i < len) {
		while (i < len && is_blank(line[i]))
			i++;
		if (i == len)
			break;
		size_t start = i;
		while (i < len && !is_blank(line[i]))
			i++;
		if (ntok == MAX_TOKENS)
			return fail(err, "syntax", "too many arguments");
		tok[ntok] = line + start;
		tlen[ntok] = i - start;
		ntok++;
	}
	if (ntok == 0)
		return fail(err, "syntax", "empty request");

	memset(cmd, 0, sizeof(*cmd));
	cmd->cost = 1;
	if (verb_is(tok[0], tlen[0], "ALLOW") || verb_is(tok[0], tlen[0], "PEEK")) {
		cmd->verb = verb_is(tok[0], tlen[0], "ALLOW") ? PROTO_ALLOW : PROTO_PEEK;
		if (ntok < 3 || ntok > 4)
			return fail(err, "syntax",
				    cmd->verb == PROTO_ALLOW
					    ? "usage: ALLOW <user> <action> [<cost>]"
					    : "usage: PEEK <user> <action> [<cost>]");
		if (ntok == 4 && parse_cost(tok[3], tlen[3], &cmd->cost) < 0)
			return fail(err, "bad-cost",
				    "cost must be an integer from 1 to 2147483647");
	} else if (verb_is(tok[0], tlen[0], "RESET")) {
		cmd->verb = PROTO_RESET;
		if (ntok != 3)
			return fail(err, "syntax", "usage: RESET <user> <action>");
	} else if (verb_is(tok[0], tlen[0], "PING")) {
		cmd->verb = PROTO_PING;
		if (ntok != 1)
			return fail(err, "syntax", "usage: PING");
		return 0;
	} else if (verb_is(tok[0], tlen[0], "QUIT")) {
		cmd->verb = PROTO_QUIT;
		if (ntok != 1)
			return fail(err, "syntax", "usage: QUIT");
		return 0;
	} else {
		return fail(err, "unknown-command", "known commands: ALLOW PEEK RESET PING QUIT");
	}
	if (tlen[1] > KEYS_USER_MAX)
		return fail(err, "bad-user", "user is longer than 512 bytes");
	cmd->user = tok[1];
	cmd->user_len = tlen[1];
	cmd->action = tok[2];
	cmd->action_len = tlen[2];
	return 0;
}

/* Writes v in decimal; returns bytes written. No sprintf on the hot path. */
static size_t put_int(char *p, int64_t v)
{
	if (v < 0) {
		*p = '-';
		return 1 + decimal_put(p + 1, (uint64_t)0 - (uint64_t)v);
	}
	return decimal_put(p, (uint64_t)v);
}

size_t proto_format_decision(char *buf, int allowed, int64_t limit, int64_t remaining,
			     int64_t retry_after_ms, int64_t reset_ms)
{
	size_t n;
	if (allowed) {
		memcpy(buf, "ALLOWED ", 8);
		n = 8;
	} else {
		memcpy(buf, "DENIED ", 7);
		n = 7;
	}
	n += put_int(buf + n, limit);
	buf[n++] = ' ';
	n += put_int(buf + n, remaining);
	buf[n++] = ' ';
	n += put_int(buf + n, retry_after_ms);
	buf[n++] = ' ';
	n += put_int(buf + n, reset_ms);
	buf[n++] = '\n';
	return n;
}

static size_t put_str(char *buf, size_t n, const char *s, size_t cap)
{
	while (*s && n < cap)
		buf[n++] = *s++;
	return n;
}

size_t proto_format_err(char *buf, const char *code, const char *msg)
{
	size_t cap = PROTO_REPLY_MAX - 1;
	size_t n = put_str(buf, 0, "ERR ", cap);
	n = put_str(buf, n, code, cap);
	n = put_str(buf, n, " ", cap);
	n = put_str(buf, n, msg, cap);
	buf[n++] = '\n';
	return n;
}

size_t proto_format_str(char *buf, const char *word)
{
	size_t n = put_str(buf, 0, word, PROTO_REPLY_MAX - 1);
	buf[n++] = '\n';
	return n;
}
