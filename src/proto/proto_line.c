/* proto_line.c - the line protocol's framer, parser and reply formatter; pure: no I/O, no allocation. */
#include "lease.h"
#include "proto_line.h"

#include "cmd_table.h"
#include "keys.h"
#include "shown.h"

#include <stdint.h>
#include <string.h>

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

long proto_line_frame(const char *buf, size_t len, size_t max_line, size_t *consumed)
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

static int fail(struct proto_error *err, enum cmd_error code, const char *msg)
{
	err->code = code;
	err->msg = msg;
	return -1;
}

/* MALLOW, then up to CMD_PAIRS_MAX pairs and a cost */
#define MAX_TOKENS (2 + 2 * CMD_PAIRS_MAX)

int proto_line_parse(const char *line, size_t len, struct cmd_request *cmd, struct proto_error *err)
{
	if (len > 0 && line[len - 1] == '\r')
		len--;
	/* A user is any bytes but blanks, CR, LF and NUL: NUL and a CR inside
	 * the line make the whole request invalid (other bytes, control bytes
	 * and non-UTF-8 included, may be part of a user). */
	if (memchr(line, '\0', len))
		return fail(err, CMD_ERR_SYNTAX, "NUL byte in request");
	if (memchr(line, '\r', len))
		return fail(err, CMD_ERR_SYNTAX, "CR inside the line");
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
			return fail(err, CMD_ERR_SYNTAX, "too many arguments");
		tok[ntok] = line + start;
		tlen[ntok] = i - start;
		ntok++;
	}
	if (ntok == 0)
		return fail(err, CMD_ERR_SYNTAX, "empty request");

	memset(cmd, 0, sizeof(*cmd));
	cmd->cost = 1;
	return proto_parse_verb(tok, tlen, ntok, CMD_ON_LINE, cmd, err);
}

static size_t format_decision(char *buf, const struct cmd_result *r)
{
	size_t n;
	if (r->allowed) {
		memcpy(buf, "ALLOWED ", 8);
		n = 8;
	} else {
		memcpy(buf, "DENIED ", 7);
		n = 7;
	}
	n += proto_put_int(buf + n, r->limit);
	buf[n++] = ' ';
	n += proto_put_int(buf + n, r->remaining);
	buf[n++] = ' ';
	n += proto_put_int(buf + n, r->retry_after_ms);
	buf[n++] = ' ';
	n += proto_put_int(buf + n, r->reset_ms);
	if (r->multi) {
		buf[n++] = ' ';
		n += proto_put_int(buf + n, r->pair);
	}
	if (r->kind == CMD_REPLY_LEASE && r->item) { /* ACQUIRE, RENEW: the lease's id */
		buf[n++] = ' ';
		memcpy(buf + n, r->item->text, r->item->ulen);
		n += r->item->ulen;
	}
	buf[n++] = '\n';
	return n;
}
_Static_assert(PROTO_LINE_REPLY_MAX > 8 + 4 * 21 + LEASE_ID_MAX + 1, "a lease's reply fits");

static size_t put_str(char *buf, size_t n, const char *s, size_t cap)
{
	while (*s && n < cap)
		buf[n++] = *s++;
	return n;
}

static size_t format_word(char *buf, const char *word)
{
	size_t n = put_str(buf, 0, word, PROTO_LINE_REPLY_MAX - 1);
	buf[n++] = '\n';
	return n;
}

/* OVERRIDE <index> <user> <action> <spec> <ttl_ms>, or END <count> */
static size_t format_item(char *buf, const struct cmd_result *res)
{
	const struct cmd_item *it = res->item;
	size_t n;
	if (!it) {
		memcpy(buf, "END ", 4);
		n = 4 + proto_put_int(buf + 4, res->limit);
		buf[n++] = '\n';
		return n;
	}
	memcpy(buf, "OVERRIDE ", 9);
	n = 9 + proto_put_int(buf + 9, it->index);
	const char *t = it->text;
	size_t parts[3] = {it->ulen, it->alen, it->spec_len};
	for (int i = 0; i < 3; i++) {
		buf[n++] = ' ';
		memcpy(buf + n, t, parts[i]);
		n += parts[i];
		t += parts[i];
	}
	buf[n++] = ' ';
	n += proto_put_int(buf + n, it->ttl_ms);
	buf[n++] = '\n';
	return n;
}

/* TOP <index> <user> <denied> <requests> <over>, or END <count> <requests>
 * <denied> */
static size_t format_top(char *buf, const struct cmd_result *res)
{
	const struct cmd_item *it = res->item;
	size_t n;
	if (!it) {
		memcpy(buf, "END ", 4);
		n = 4 + proto_put_int(buf + 4, res->limit);
		buf[n++] = ' ';
		n += proto_put_int(buf + n, res->remaining);
		buf[n++] = ' ';
		n += proto_put_int(buf + n, res->retry_after_ms);
		buf[n++] = '\n';
		return n;
	}
	memcpy(buf, "TOP ", 4);
	n = 4 + proto_put_int(buf + 4, it->index);
	buf[n++] = ' ';
	n += shown_user(buf + n, it->text, it->ulen, it->cut);
	int64_t v[3] = {it->denied, it->requests, it->over};
	for (int i = 0; i < 3; i++) {
		buf[n++] = ' ';
		n += proto_put_int(buf + n, v[i]);
	}
	buf[n++] = '\n';
	return n;
}
_Static_assert(PROTO_LINE_REPLY_MAX > 4 + 20 + 1 + SHOWN_USER_MAX(64) + 3 * 21 + 1,
	       "TOP's reply fits");

/* STATE <algorithm> <override> <ban_ms> <limit>...: a limit is
 * <window_ms>:<limit>:<used>:<remaining>:<reset_ms>:<start_ms>:<end_ms>,
 * one word each, in the policy's order. */
static size_t format_state(char *buf, const struct cmd_state *st)
{
	size_t n = put_str(buf, 0, "STATE ", PROTO_LINE_REPLY_MAX);
	n = put_str(buf, n, policy_algo_name(st->algo), n + 32); /* sliding_window_counter */
	buf[n++] = ' ';
	n = put_str(buf, n, proto_state_override_name(st->override), n + 16);
	buf[n++] = ' ';
	n += proto_put_int(buf + n, st->ban_ms);
	for (int i = 0; i < st->nlimits && i < POLICY_MAX_LIMITS; i++) {
		const struct cmd_state_limit *l = &st->limits[i];
		int64_t v[7] = {l->window_ms, l->limit,	   l->used,  l->remaining,
				l->reset_ms,  l->start_ms, l->end_ms};
		for (int j = 0; j < 7; j++) {
			buf[n++] = j ? ':' : ' ';
			n += proto_put_int(buf + n, v[j]);
		}
	}
	buf[n++] = '\n';
	return n;
}
_Static_assert(PROTO_LINE_REPLY_MAX > 6 + 32 + 1 + 16 + 21 + POLICY_MAX_LIMITS * 7 * 21 + 1,
	       "STATE's reply fits");

size_t proto_line_format(char *buf, const struct cmd_result *res)
{
	size_t cap = PROTO_LINE_REPLY_MAX - 1, n;
	switch (res->kind) {
	case CMD_REPLY_ITEM:
		return format_item(buf, res);
	case CMD_REPLY_TOP:
		return format_top(buf, res);
	case CMD_REPLY_STATE:
		if (res->state)
			return format_state(buf, res->state);
		break;
	case CMD_REPLY_DECISION:
	case CMD_REPLY_LEASE:
		return format_decision(buf, res);
	case CMD_REPLY_OK:
		return format_word(buf, "OK");
	case CMD_REPLY_PONG:
		return format_word(buf, "PONG");
	case CMD_REPLY_BYE:
		return format_word(buf, "BYE");
	case CMD_REPLY_ERROR:
	case CMD_REPLY_LOCAL: /* the line protocol has none */
		break;
	}
	n = put_str(buf, 0, "ERR ", cap);
	n = put_str(buf, n, proto_error_code(res->error), cap);
	n = put_str(buf, n, " ", cap);
	n = put_str(buf, n, res->msg, cap);
	buf[n++] = '\n';
	return n;
}

static enum proto_step line_parse(const char *buf, size_t len, size_t max_line, void *state,
				  struct proto_parsed *out)
{
	(void)state;
	size_t consumed = 0;
	long n = proto_line_frame(buf, len, max_line, &consumed);
	if (n == -1)
		return PROTO_NEED_MORE;
	if (n == -2) {
		out->used = 0;
		out->err.code = CMD_ERR_LINE_TOO_LONG;
		out->err.msg = "request line exceeds max_line";
		return PROTO_FATAL;
	}
	out->used = consumed;
	return proto_line_parse(buf, (size_t)n, &out->req, &out->err) == 0 ? PROTO_REQUEST
									   : PROTO_BAD;
}

/* The line protocol keeps no state between replies. */
static size_t line_format(char *buf, const struct cmd_result *res, void *state)
{
	(void)state;
	return proto_line_format(buf, res);
}

const struct proto proto_line = {
	.name = "line",
	.reply_max = PROTO_LINE_REPLY_MAX,
	.parse = line_parse,
	.format = line_format,
};
