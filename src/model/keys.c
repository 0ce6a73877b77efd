/* keys.c - Redis key names: prefix, a {hash tag} per (action, user), and a per-limit suffix. */
#include "keys.h"

#include <stdint.h>
#include <string.h>

#include "decimal.h"
#include "policy.h"

size_t keys_tag(char *out, const struct policy *p, const char *user, size_t user_len)
{
	size_t n = 0;
	memcpy(out + n, p->name, p->name_len);
	n += p->name_len;
	out[n++] = ':';
	for (size_t i = 0; i < user_len; i++) {
		char c = user[i];
		if (c == '%') {
			memcpy(out + n, "%25", 3);
			n += 3;
		} else if (c == '}') {
			memcpy(out + n, "%7D", 3);
			n += 3;
		} else {
			out[n++] = c;
		}
	}
	return n;
}

size_t keys_reset_channel(char *out, const char *prefix, size_t prefix_len)
{
	memcpy(out, prefix, prefix_len);
	memcpy(out + prefix_len, "reset", 5);
	return prefix_len + 5;
}

size_t keys_build(char *out, const char *prefix, size_t prefix_len, const struct policy *p,
		  int index, const char *user, size_t user_len)
{
	size_t n = 0;
	memcpy(out + n, prefix, prefix_len);
	n += prefix_len;
	out[n++] = '{';
	n += keys_tag(out + n, p, user, user_len);
	out[n++] = '}';
	out[n++] = ':';
	if (index == p->nlimits) { /* the ban's (policy_nkeys) */
		out[n++] = 'b';
		return n;
	}
	if (index == KEYS_HOLDS_INDEX) {
		out[n++] = 'h';
		return n;
	}
	switch (p->algo) {
	case POLICY_FUNNEL:
		out[n++] = 'f';
		break;
	case POLICY_SLIDING_WINDOW:
		out[n++] = 's';
		n += decimal_put(out + n, (uint64_t)p->limits[index].period_ms);
		break;
	case POLICY_FIXED_WINDOW:
	case POLICY_SLIDING_COUNTER: {
		const struct policy_limit *l = &p->limits[index];
		out[n++] = p->algo == POLICY_FIXED_WINDOW ? 'w' : 'c';
		if (l->calendar !=
		    CALENDAR_NONE) { /* "wmonth": the window's start is in the value */
			const char *u = calendar_unit_name(l->calendar);
			memcpy(out + n, u, strlen(u));
			n += strlen(u);
		} else {
			n += decimal_put(out + n, (uint64_t)l->period_ms);
		}
		break;
	}
	case POLICY_CONCURRENCY: /* the leases held (lease.h), whatever their time */
		out[n++] = 'l';
		break;
	}
	return n;
}

int keys_parse_tag(const char *tag, size_t len, const char **action, size_t *alen, char *user,
		   size_t *ulen)
{
	const char *colon = memchr(tag, ':', len);
	if (!colon || colon == tag)
		return -1;
	*action = tag;
	*alen = (size_t)(colon - tag);
	size_t n = 0;
	for (size_t i = *alen + 1; i < len; i++) {
		if (n == KEYS_USER_MAX)
			return -1;
		if (tag[i] == '%') {
			if (i + 2 < len && tag[i + 1] == '2' && tag[i + 2] == '5')
				user[n++] = '%';
			else if (i + 2 < len && tag[i + 1] == '7' && tag[i + 2] == 'D')
				user[n++] = '}';
			else
				return -1;
			i += 2;
		} else {
			user[n++] = tag[i];
		}
	}
	if (n == 0)
		return -1;
	*ulen = n;
	return 0;
}

const char *keys_hash_tag(const char *key, size_t len, size_t *tag_len)
{
	const char *open = memchr(key, '{', len);
	if (open) {
		size_t rest = len - (size_t)(open - key) - 1;
		const char *close = memchr(open + 1, '}', rest);
		if (close && close > open + 1) {
			*tag_len = (size_t)(close - open - 1);
			return open + 1;
		}
	}
	*tag_len = len;
	return key;
}

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as Redis Cluster uses. */
static uint16_t crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;
	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((uint8_t)buf[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
	}
	return crc;
}

unsigned keys_slot(const char *key, size_t len)
{
	size_t tl;
	const char *tag = keys_hash_tag(key, len, &tl);
	return crc16(tag, tl) & 16383u;
}
