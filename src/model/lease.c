/*
 * lease.c - concurrency leases in C (see lease.h): ids, and one key's set
 * of leases with the same rules as the script's 'lease' mode.
 */
#include "lease.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "decimal.h"

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url without padding: users hold any byte, an id none that a
 * protocol splits at (blanks, ':') */
static size_t b64_put(char *out, const unsigned char *s, size_t len)
{
	size_t n = 0, i = 0;
	for (; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		out[n++] = b64[v >> 18];
		out[n++] = b64[(v >> 12) & 63];
		out[n++] = b64[(v >> 6) & 63];
		out[n++] = b64[v & 63];
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)s[i] << 16;
		out[n++] = b64[v >> 18];
		out[n++] = b64[(v >> 12) & 63];
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
		out[n++] = b64[v >> 18];
		out[n++] = b64[(v >> 12) & 63];
		out[n++] = b64[(v >> 6) & 63];
	}
	return n;
}

static int b64_val(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;
	return p ? (int)(p - b64) : -1;
}

/* -1 when s is not what b64_put writes (or decodes to more than cap). */
static long b64_get(unsigned char *out, size_t cap, const char *s, size_t len)
{
	if (len % 4 == 1)
		return -1;
	size_t n = 0;
	for (size_t i = 0; i < len; i += 4) {
		size_t k = len - i < 4 ? len - i : 4;
		uint32_t v = 0;
		for (size_t j = 0; j < 4; j++) {
			int d = j < k ? b64_val(s[i + j]) : 0;
			if (d < 0)
				return -1;
			v = v << 6 | (uint32_t)d;
		}
		size_t bytes = k - 1;
		if (n + bytes > cap)
			return -1;
		for (size_t j = 0; j < bytes; j++)
			out[n++] = (unsigned char)(v >> (16 - 8 * j));
		/* the bits past the last byte are 0, as b64_put leaves them */
		if (k < 4 && (v & ((1u << (8 * (3 - bytes))) - 1)))
			return -1;
	}
	return (long)n;
}

static size_t member_put(char *out, uint64_t nonce, int64_t cost)
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < LEASE_NONCE_LEN; i++)
		out[i] = hex[(nonce >> (60 - 4 * i)) & 15];
	out[LEASE_NONCE_LEN] = ':';
	size_t n = LEASE_NONCE_LEN + 1 + decimal_put(out + LEASE_NONCE_LEN + 1, (uint64_t)cost);
	out[n] = '\0';
	return n;
}

size_t lease_id_format(char *out, const char *action, size_t alen, const char *user, size_t ulen,
		       uint64_t nonce, int64_t cost)
{
	size_t n = 0;
	memcpy(out, action, alen);
	n += alen;
	out[n++] = ':';
	n += b64_put(out + n, (const unsigned char *)user, ulen);
	out[n++] = ':';
	return n + member_put(out + n, nonce, cost);
}

size_t lease_id_action(const char *s, size_t len)
{
	const char *colon = memchr(s, ':', len);
	return colon ? (size_t)(colon - s) : 0;
}

int lease_id_parse(const char *s, size_t len, struct lease_id *out)
{
	size_t alen = lease_id_action(s, len);
	if (alen == 0 || alen > POLICY_NAME_MAX)
		return -1;
	const char *u = s + alen + 1, *end = s + len;
	const char *c2 = memchr(u, ':', (size_t)(end - u));
	if (!c2)
		return -1;
	const char *nonce = c2 + 1;
	if (end - nonce < LEASE_NONCE_LEN + 2 || nonce[LEASE_NONCE_LEN] != ':')
		return -1;
	uint64_t n = 0;
	for (int i = 0; i < LEASE_NONCE_LEN; i++) {
		char h = nonce[i];
		if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f')))
			return -1;
		n = n << 4 | (uint64_t)(h <= '9' ? h - '0' : h - 'a' + 10);
	}
	const char *cost = nonce + LEASE_NONCE_LEN + 1;
	int64_t c;
	if (decimal_parse(cost, (size_t)(end - cost), 2147483647LL, &c) < 0 || c < 1)
		return -1;
	long ul = b64_get((unsigned char *)out->user, sizeof(out->user), u, (size_t)(c2 - u));
	if (ul <= 0)
		return -1;
	out->action = s;
	out->action_len = alen;
	out->user_len = (size_t)ul;
	out->cost = c;
	out->nonce = n;
	out->member_len = (size_t)(end - nonce);
	/* the member as member_put writes it: no leading zeros in the cost */
	if (out->member_len >= sizeof(out->member) || (cost[0] == '0'))
		return -1;
	memcpy(out->member, nonce, out->member_len);
	out->member[out->member_len] = '\0';
	return 0;
}

/* Leases whose expiry is not after now are gone; returns how many went. */
static int64_t purge(struct lease_set *s, int64_t now_us)
{
	size_t k = 0;
	int64_t gone = 0;
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i].expire_us <= now_us) {
			gone++;
			continue;
		}
		s->v[k++] = s->v[i];
	}
	s->n = k;
	return gone;
}

static int64_t held(const struct lease_set *s)
{
	int64_t h = 0;
	for (size_t i = 0; i < s->n; i++)
		h += s->v[i].cost;
	return h;
}

static ssize_t find(const struct lease_set *s, const char *member)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].member, member) == 0)
			return (ssize_t)i;
	return -1;
}

/* Milliseconds from now until the soonest expiry, rounded up. */
static int64_t soonest_ms(const struct lease_set *s, int64_t now_us)
{
	int64_t t = 0;
	for (size_t i = 0; i < s->n; i++)
		if (t == 0 || s->v[i].expire_us < t)
			t = s->v[i].expire_us;
	return t ? (t - now_us + 999) / 1000 : 0;
}

int lease_apply(struct lease_set *s, enum lease_op op, const char *member, int64_t cost,
		int64_t limit, int64_t lease_ms, int64_t now_us, struct lease_result *out)
{
	memset(out, 0, sizeof(*out));
	out->limit = limit;
	if (op == LEASE_RESET) {
		s->n = 0;
		out->ok = 1;
		out->remaining = limit;
		return 0;
	}
	out->expired = purge(s, now_us);
	int64_t h = held(s);
	ssize_t at;
	if (op == LEASE_PEEK && cost == 0) {
		/* STATE: the units held, and ms until the last lease expires */
		int64_t last = lease_set_last_us(s);
		out->ok = 1;
		out->remaining = limit - h;
		out->ms = last > now_us ? (last - now_us + 999) / 1000 : 0;
		return 0;
	}
	switch (op) {
	case LEASE_ACQUIRE:
	case LEASE_PEEK:
		if (cost > limit) {
			out->remaining = limit - h;
			out->ms = -1;
			return 0;
		}
		if (h + cost > limit) {
			out->remaining = limit - h;
			out->ms = soonest_ms(s, now_us);
			return 0;
		}
		out->ok = 1;
		out->remaining = limit - h;
		if (op == LEASE_PEEK)
			return 0;
		if (s->n == s->cap) {
			size_t cap = s->cap ? s->cap * 2 : 4;
			struct lease_entry *v = realloc(s->v, cap * sizeof(*v));
			if (!v)
				return -1;
			s->v = v;
			s->cap = cap;
		}
		struct lease_entry *e = &s->v[s->n++];
		snprintf(e->member, sizeof(e->member), "%s", member);
		e->cost = cost;
		e->expire_us = now_us + lease_ms * 1000;
		out->remaining = limit - h - cost;
		out->ms = lease_ms;
		return 0;
	case LEASE_RELEASE:
		at = find(s, member);
		if (at >= 0) {
			h -= s->v[at].cost;
			s->v[at] = s->v[--s->n];
			out->ok = 1;
		}
		out->remaining = limit - h;
		return 0;
	case LEASE_RENEW:
		at = find(s, member);
		if (at >= 0) {
			s->v[at].expire_us = now_us + lease_ms * 1000;
			out->ok = 1;
			out->ms = lease_ms;
		}
		out->remaining = limit - h;
		return 0;
	case LEASE_RESET:
		break;
	}
	return 0;
}

int64_t lease_set_last_us(const struct lease_set *s)
{
	int64_t t = 0;
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].expire_us > t)
			t = s->v[i].expire_us;
	return t;
}

void lease_set_free(struct lease_set *s)
{
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}
