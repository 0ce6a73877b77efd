/*
 * fuzz_resp.c - libFuzzer harness for the RESP2 protocol (src/proto_resp.c):
 * the step conn.c takes and the reply formatter.
 *
 * Input: a 2-byte header, then the byte stream a client sends.
 *   bytes 0-1  max_line = 1 + (little-endian u16 % 8192); also seeds the
 *              random chunk sizes of feed (c)
 * The stream goes through a loop shaped like conn.c's (accumulate, take the
 * step on at most max_line + 2 bytes, stop after a fatal error or QUIT; an
 * unfinished last request is not a request) three times: (a) one write,
 * (b) one byte at a time, (c) writes of pseudo-random sizes. Their outcome
 * logs must be identical. In (a) each step sees an exact-size copy of its
 * window (ASan sees any read past it), its result is checked against the
 * step's contract, and the reply each outcome leads to is formatted into an
 * exact-size buffer and checked to be one well-formed RESP2 value. Any
 * violation aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "proto_resp.h"

#define HEADER 2
#define MAX_LINE_RANGE 8192

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz_resp: invariant violated: %s\n", what);
		abort();
	}
}

struct olog {
	unsigned char *p;
	size_t len, cap;
};

static void log_bytes(struct olog *l, const void *p, size_t n)
{
	if (l->len + n > l->cap) {
		size_t cap = l->cap ? l->cap : 256;
		while (cap < l->len + n)
			cap *= 2;
		l->p = realloc(l->p, cap);
		check(l->p != NULL, "out of memory");
		l->cap = cap;
	}
	memcpy(l->p + l->len, p, n);
	l->len += n;
}

static void log_u64(struct olog *l, uint64_t v)
{
	log_bytes(l, &v, sizeof(v));
}

/* ---- replies: one well-formed RESP2 value ---- */

/* Skips one value at s[*i]; -1 if malformed or incomplete. */
static int resp_value(const char *s, size_t n, size_t *i, int depth)
{
	if (*i >= n || depth > 2)
		return -1;
	char t = s[*i];
	const char *crlf = NULL;
	for (size_t k = *i + 1; k + 1 < n; k++)
		if (s[k] == '\r' && s[k + 1] == '\n') {
			crlf = s + k;
			break;
		}
	if (!crlf)
		return -1;
	size_t body = *i + 1, end = (size_t)(crlf - s);
	for (size_t k = body; k < end; k++)
		if (s[k] == '\r' || s[k] == '\n')
			return -1;
	*i = end + 2;
	if (t == '+' || t == '-')
		return 0;
	long long v = 0;
	size_t k = body;
	int neg = k < end && s[k] == '-';
	if (neg)
		k++;
	if (k == end)
		return -1;
	for (; k < end; k++) {
		if (s[k] < '0' || s[k] > '9')
			return -1;
		v = v * 10 + (s[k] - '0');
		if (v > 1000000000000000000LL)
			break;
	}
	if (t == ':')
		return 0;
	if (neg || v > 4096)
		return -1;
	if (t == '$') {
		if (*i + (size_t)v + 2 > n || s[*i + v] != '\r' || s[*i + v + 1] != '\n')
			return -1;
		*i += (size_t)v + 2;
		return 0;
	}
	if (t == '*') {
		for (long long e = 0; e < v; e++)
			if (resp_value(s, n, i, depth + 1) < 0)
				return -1;
		return 0;
	}
	return -1;
}

static void check_reply(const struct cmd_result *res)
{
	char *buf = malloc(proto_resp.reply_max); /* exact size: ASan sees an overflow */
	check(buf != NULL, "out of memory");
	size_t n = proto_resp.format(buf, res);
	check(n > 0 && n <= proto_resp.reply_max, "reply length");
	size_t i = 0;
	check(resp_value(buf, n, &i, 0) == 0 && i == n, "a reply is one RESP2 value");
	if (res->kind == CMD_REPLY_DECISION)
		check(buf[0] == '*' && buf[1] == '5', "a decision is an array of 5");
	if (res->kind == CMD_REPLY_ERROR)
		check(buf[0] == '-' && memcmp(buf, "-ERR ", 5) == 0, "an error is -ERR code msg");
	free(buf);
}

static int inside(const char *p, size_t n, const char *buf, size_t len)
{
	return p >= buf && n <= len && p <= buf + len - n;
}

/* The step's contract for one outcome, and the replies it can lead to. */
static void check_step(const char *w, size_t len, size_t max_line, enum proto_step st,
		       const struct proto_parsed *got)
{
	struct cmd_result res;
	memset(&res, 0, sizeof(res));
	switch (st) {
	case PROTO_NEED_MORE:
		check(len < max_line + 2, "a full window is never 'more'");
		return;
	case PROTO_FATAL:
		check(got->err.code == CMD_ERR_SYNTAX || got->err.code == CMD_ERR_LINE_TOO_LONG,
		      "fatal: syntax or line-too-long");
		check(got->err.msg && got->err.msg[0], "fatal says why");
		res.kind = CMD_REPLY_ERROR;
		res.error = got->err.code;
		snprintf(res.msg, sizeof(res.msg), "%s", got->err.msg);
		check_reply(&res);
		return;
	case PROTO_SKIP:
		check(got->used >= 4 && got->used <= len, "skip drops a header");
		return;
	case PROTO_BAD:
		check(got->used > 0 && got->used <= len, "bad drops its request");
		check(got->err.msg && got->err.msg[0], "bad says why");
		res.kind = CMD_REPLY_ERROR;
		res.error = got->err.code;
		snprintf(res.msg, sizeof(res.msg), "%s", got->err.msg);
		check_reply(&res);
		return;
	case PROTO_LOCAL:
		check(got->used > 0 && got->used <= len, "local drops its request");
		res.kind = CMD_REPLY_LOCAL;
		res.local = got->local;
		check_reply(&res);
		return;
	case PROTO_REQUEST:
		break;
	default:
		check(0, "unknown step");
	}
	check(got->used > 0 && got->used <= len && got->used <= max_line + 2, "request size");
	const struct cmd_request *r = &got->req;
	check(r->cost >= 1 && r->cost <= CMD_COST_MAX, "cost in 1..2147483647");
	switch (r->verb) {
	case CMD_ALLOW:
	case CMD_PEEK:
	case CMD_RESET:
		check(r->user_len >= 1 && r->user_len <= KEYS_USER_MAX, "user_len 1..512");
		check(inside(r->user, r->user_len, w, got->used), "user inside the request");
		check(inside(r->action, r->action_len, w, got->used), "action inside the request");
		break;
	case CMD_PING:
	case CMD_QUIT:
		break;
	default:
		check(0, "unknown verb");
	}
	/* every reply a request can get */
	res.kind = CMD_REPLY_DECISION;
	res.allowed = (int)(r->cost & 1);
	res.limit = INT64_MAX;
	res.remaining = -1;
	res.retry_after_ms = INT64_MIN;
	res.reset_ms = r->cost;
	check_reply(&res);
	enum cmd_reply kinds[] = {CMD_REPLY_OK, CMD_REPLY_PONG, CMD_REPLY_BYE};
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		res.kind = kinds[k];
		check_reply(&res);
	}
	res.kind = CMD_REPLY_ERROR;
	res.error = CMD_ERR_STORE_UNAVAILABLE;
	size_t m = r->user_len < sizeof(res.msg) - 1 ? r->user_len : sizeof(res.msg) - 1;
	if (r->user)
		memcpy(res.msg, r->user, m); /* any bytes, CR and LF included */
	res.msg[m] = '\0';
	check_reply(&res);
}

struct conn {
	size_t max_line;
	char *buf;
	size_t len, cap;
	int stopped;
	int full; /* exact-size windows and every check */
	struct olog log;
};

static void conn_process(struct conn *c)
{
	size_t off = 0;
	while (!c->stopped && off < c->len) {
		size_t len = c->len - off;
		size_t want = len < c->max_line + 2 ? len : c->max_line + 2;
		const char *w = c->buf + off;
		char *copy = NULL;
		if (c->full) {
			copy = malloc(want);
			check(copy != NULL, "out of memory");
			memcpy(copy, w, want);
			w = copy;
		}
		struct proto_parsed got;
		memset(&got, 0xa5, sizeof(got));
		got.used = 0;
		enum proto_step st = proto_resp.parse(w, want, c->max_line, NULL, &got);
		if (c->full)
			check_step(w, want, c->max_line, st, &got);
		if (st == PROTO_NEED_MORE) { /* not logged: how the bytes came decides it */
			free(copy);
			break;
		}
		log_u64(&c->log, (uint64_t)st);
		if (st == PROTO_FATAL) {
			log_u64(&c->log, (uint64_t)got.err.code);
			c->stopped = 1;
			free(copy);
			break;
		}
		log_u64(&c->log, got.used);
		if (st == PROTO_REQUEST) {
			log_u64(&c->log, (uint64_t)got.req.verb);
			log_u64(&c->log, (uint64_t)got.req.cost);
			if (got.req.verb != CMD_PING && got.req.verb != CMD_QUIT) {
				log_bytes(&c->log, got.req.user, got.req.user_len);
				log_u64(&c->log, got.req.action_len);
			}
			if (got.req.verb == CMD_QUIT)
				c->stopped = 1;
		} else if (st == PROTO_BAD) {
			log_u64(&c->log, (uint64_t)got.err.code);
		} else if (st == PROTO_LOCAL) {
			log_u64(&c->log, (uint64_t)got.local);
		}
		free(copy);
		off += got.used;
	}
	memmove(c->buf, c->buf + off, c->len - off);
	c->len -= off;
}

static void conn_feed(struct conn *c, const char *p, size_t n)
{
	if (c->stopped || n == 0)
		return;
	if (c->len + n > c->cap) {
		size_t cap = c->cap ? c->cap : 64;
		while (cap < c->len + n)
			cap *= 2;
		c->buf = realloc(c->buf, cap);
		check(c->buf != NULL, "out of memory");
		c->cap = cap;
	}
	memcpy(c->buf + c->len, p, n);
	c->len += n;
	conn_process(c);
}

static void conn_eof(struct conn *c)
{
	log_u64(&c->log, c->stopped ? 0 : c->len);
	free(c->buf);
	c->buf = NULL;
}

static void same(const struct olog *a, const struct olog *b, const char *what)
{
	check(a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0), what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < HEADER)
		return 0;
	size_t max_line = 1 + (size_t)((data[0] | data[1] << 8) % MAX_LINE_RANGE);
	const char *s = (const char *)data + HEADER;
	size_t n = size - HEADER;
	uint32_t rnd = (uint32_t)(data[0] | data[1] << 8) * 2654435761u;

	struct conn whole = {.max_line = max_line, .full = 1};
	conn_feed(&whole, s, n);
	conn_eof(&whole);

	struct conn bytes = {.max_line = max_line};
	for (size_t i = 0; i < n; i++)
		conn_feed(&bytes, s + i, 1);
	conn_eof(&bytes);

	struct conn chunks = {.max_line = max_line};
	for (size_t i = 0; i < n;) {
		rnd = rnd * 1103515245u + 12345u;
		size_t k = 1 + (rnd >> 16) % 97;
		if (k > n - i)
			k = n - i;
		conn_feed(&chunks, s + i, k);
		i += k;
	}
	conn_eof(&chunks);

	same(&whole.log, &bytes.log, "one write and byte-by-byte differ");
	same(&whole.log, &chunks.log, "one write and random chunks differ");
	free(whole.log.p);
	free(bytes.log.p);
	free(chunks.log.p);
	return 0;
}
