/* line_reply.c - parsing the line protocol's reply lines (see line_reply.h). */
#include "line_reply.h"

#include <string.h>

/* Splits at single spaces, as the daemon writes them: at most max words;
 * the last one takes the rest of the line when rest is set. */
static size_t split(const char *p, size_t len, struct line_reply_str *w, size_t max, int rest)
{
	size_t n = 0, i = 0;
	while (i <= len && n < max) {
		size_t start = i;
		if (rest && n == max - 1) {
			i = len;
		} else {
			while (i < len && p[i] != ' ')
				i++;
		}
		w[n].p = p + start;
		w[n].len = i - start;
		n++;
		if (i == len)
			return n;
		i++; /* the space */
	}
	return max + 1; /* more words than max */
}

/* A decimal integer, optionally negative, no leading '+', no overflow. */
static int parse_int(const struct line_reply_str *s, int64_t *out)
{
	size_t i = 0;
	int neg = 0;
	if (s->len && s->p[0] == '-') {
		neg = 1;
		i = 1;
	}
	if (i == s->len || s->len - i > 19)
		return -1;
	uint64_t v = 0;
	for (; i < s->len; i++) {
		if (s->p[i] < '0' || s->p[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s->p[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return -1;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

static int is(const struct line_reply_str *w, const char *word)
{
	size_t n = strlen(word);
	return w->len == n && memcmp(w->p, word, n) == 0;
}

static int parse_decision(const struct line_reply_str *w, size_t n, struct line_reply *r)
{
	if (n != 5 && n != 6)
		return -1;
	/* Every field may be -1: the limit in an unlimited override's reply
	 * (ALLOWED -1 -1 0 -1), the others in fallbacks and overrides too. */
	int64_t *f[4] = {&r->limit, &r->remaining, &r->retry_after_ms, &r->reset_ms};
	for (int i = 0; i < 4; i++)
		if (parse_int(&w[1 + i], f[i]) < 0 || *f[i] < -1)
			return -1;
	/* a sixth field: MALLOW's pair, or a lease's id (it has ':'s) */
	if (n == 6 && memchr(w[5].p, ':', w[5].len)) {
		r->lease = w[5];
		return 0;
	}
	if (n == 6 && (parse_int(&w[5], &r->pair) < 0 || r->pair < 0))
		return -1;
	return 0;
}

/* STATE <algorithm> <override> <ban_ms> <limit>..., a limit seven
 * integers joined by ':' (proto/protocol.md, STATE). */
static int parse_state(const char *line, size_t len, struct line_reply *r)
{
	struct line_reply_str w[4 + LINE_REPLY_LIMITS_MAX];
	size_t n = split(line, len, w, 4 + LINE_REPLY_LIMITS_MAX, 0);
	if (n < 5 || n > 4 + LINE_REPLY_LIMITS_MAX || w[1].len == 0 || w[2].len == 0 ||
	    parse_int(&w[3], &r->ban_ms) < 0 || r->ban_ms < 0)
		return -1;
	r->kind = LINE_REPLY_STATE;
	r->algorithm = w[1];
	r->override = w[2];
	r->nlimits = (int)(n - 4);
	for (int i = 0; i < r->nlimits; i++) {
		const char *p = w[4 + i].p, *end = p + w[4 + i].len;
		for (int j = 0; j < 7; j++) {
			const char *colon = memchr(p, ':', (size_t)(end - p));
			const char *stop = j < 6 ? colon : end;
			if (!stop || (j == 6 && colon))
				return -1;
			struct line_reply_str num = {p, (size_t)(stop - p)};
			/* a count, a time: never below 0 */
			if (parse_int(&num, &r->limits[i][j]) < 0 || r->limits[i][j] < 0)
				return -1;
			p = stop + 1;
		}
	}
	return 0;
}

int line_reply_parse(const char *line, size_t len, struct line_reply *r)
{
	struct line_reply_str w[7];
	memset(r, 0, sizeof(*r));
	r->pair = -1;
	r->requests = r->denied = -1;
	if (len && line[len - 1] == '\r')
		len--;
	if (len == 0 || memchr(line, '\n', len) || memchr(line, '\r', len))
		return -1;
	size_t n = split(line, len, w, 7, 0);
	if (n >= 1 && is(&w[0], "STATE"))
		return parse_state(line, len, r);
	if (n >= 1 && is(&w[0], "ERR")) {
		/* ERR <code> [<message>]: the message is free text */
		n = split(line, len, w, 3, 1);
		if (n < 2 || w[1].len == 0)
			return -1;
		r->kind = LINE_REPLY_ERR;
		r->code = w[1];
		if (n == 3)
			r->message = w[2];
		return 0;
	}
	if (n > 6)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (w[i].len == 0)
			return -1; /* two spaces, or one at an end */
	if (is(&w[0], "ALLOWED") || is(&w[0], "DENIED")) {
		r->kind = w[0].len == 7 ? LINE_REPLY_ALLOWED : LINE_REPLY_DENIED;
		return parse_decision(w, n, r);
	}
	if (n == 1 && is(&w[0], "OK"))
		r->kind = LINE_REPLY_OK;
	else if (n == 1 && is(&w[0], "PONG"))
		r->kind = LINE_REPLY_PONG;
	else if (n == 1 && is(&w[0], "BYE"))
		r->kind = LINE_REPLY_BYE;
	else if ((n == 2 || n == 4) && is(&w[0], "END")) {
		r->kind = LINE_REPLY_END;
		if (parse_int(&w[1], &r->index) < 0 || r->index < 0)
			return -1;
		if (n == 4 && (parse_int(&w[2], &r->requests) < 0 || r->requests < 0 ||
			       parse_int(&w[3], &r->denied) < 0 || r->denied < 0))
			return -1;
	} else if (n == 6 && is(&w[0], "TOP")) {
		r->kind = LINE_REPLY_TOP;
		int64_t *f[4] = {&r->index, &r->denied, &r->requests, &r->over};
		struct line_reply_str *s[4] = {&w[1], &w[3], &w[4], &w[5]};
		for (int i = 0; i < 4; i++)
			if (parse_int(s[i], f[i]) < 0 || *f[i] < 0)
				return -1;
		r->user = w[2];
	} else if (n == 6 && is(&w[0], "OVERRIDE")) {
		r->kind = LINE_REPLY_OVERRIDE;
		if (parse_int(&w[1], &r->index) < 0 || r->index < 0 ||
		    parse_int(&w[5], &r->ttl_ms) < 0 || r->ttl_ms < -1)
			return -1;
		r->user = w[2];
		r->action = w[3];
		r->spec = w[4];
	} else {
		return -1;
	}
	return 0;
}

static int is_decision(const struct line_reply *r)
{
	return r->kind == LINE_REPLY_ALLOWED || r->kind == LINE_REPLY_DENIED;
}

/* An unlimited override's remaining is -1 too, but its limit is -1 as well:
 * a fallback always carries the policy's limit. */
int line_reply_is_fallback(const struct line_reply *r)
{
	return is_decision(r) && r->remaining < 0 && r->limit >= 0;
}

int line_reply_is_unlimited(const struct line_reply *r)
{
	return is_decision(r) && r->limit < 0;
}

/* Only a blocked override has a known remaining (0) with no reset time: the
 * store's replies always have reset_ms >= 0, fallbacks a remaining of -1. */
int line_reply_is_blocked(const struct line_reply *r)
{
	return r->kind == LINE_REPLY_DENIED && r->limit >= 0 && r->remaining >= 0 &&
	       r->retry_after_ms < 0 && r->reset_ms < 0;
}
