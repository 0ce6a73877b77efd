/* proto_grpc.c - gRPC's message prefix and grpc-timeout, pure. */
#include "proto_grpc.h"

enum grpc_body grpc_body_parse(const uint8_t *body, size_t len, size_t max, size_t *msg_off,
			       size_t *msg_len)
{
	if (len == 0)
		return GRPC_BODY_EMPTY;
	if (len < GRPC_PREFIX_LEN)
		return GRPC_BODY_TRUNCATED;
	if (body[0] > 1)
		return GRPC_BODY_BAD_FLAG;
	if (body[0] == 1)
		return GRPC_BODY_COMPRESSED;
	uint64_t n = ((uint64_t)body[1] << 24) | ((uint64_t)body[2] << 16) |
		     ((uint64_t)body[3] << 8) | (uint64_t)body[4];
	if (n > max)
		return GRPC_BODY_TOO_BIG;
	if (n > len - GRPC_PREFIX_LEN)
		return GRPC_BODY_TRUNCATED;
	if (n < len - GRPC_PREFIX_LEN)
		return GRPC_BODY_SEVERAL;
	*msg_off = GRPC_PREFIX_LEN;
	*msg_len = (size_t)n;
	return GRPC_BODY_OK;
}

void grpc_prefix_put(uint8_t *dst, uint32_t msg_len)
{
	dst[0] = 0;
	dst[1] = (uint8_t)(msg_len >> 24);
	dst[2] = (uint8_t)(msg_len >> 16);
	dst[3] = (uint8_t)(msg_len >> 8);
	dst[4] = (uint8_t)msg_len;
}

int grpc_timeout_parse(const char *s, size_t len, int64_t *ms)
{
	/* "TimeoutValue: positive integer as ASCII string of at most 8 digits" */
	if (len < 2 || len > 9)
		return -1;
	int64_t v = 0;
	for (size_t i = 0; i + 1 < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	int64_t per_ms_num, per_ms_den; /* ms = v * num / den, rounded up */
	switch (s[len - 1]) {
	case 'H':
		per_ms_num = 3600000, per_ms_den = 1;
		break;
	case 'M':
		per_ms_num = 60000, per_ms_den = 1;
		break;
	case 'S':
		per_ms_num = 1000, per_ms_den = 1;
		break;
	case 'm':
		per_ms_num = 1, per_ms_den = 1;
		break;
	case 'u':
		per_ms_num = 1, per_ms_den = 1000;
		break;
	case 'n':
		per_ms_num = 1, per_ms_den = 1000000;
		break;
	default:
		return -1;
	}
	/* at most 99999999 H: 3.6e14 ms, far from overflow */
	*ms = (v * per_ms_num + per_ms_den - 1) / per_ms_den;
	return 0;
}

size_t grpc_timeout_format(char *dst, int64_t ms)
{
	static const struct {
		char unit;
		int64_t ms;
	} units[] = {{'m', 1}, {'S', 1000}, {'M', 60000}, {'H', 3600000}};
	const int64_t max = 99999999; /* "at most 8 digits" */
	if (ms < 1)
		ms = 1;
	size_t i = 0;
	int64_t v = ms;
	for (;; i++) {
		v = ms / units[i].ms + (ms % units[i].ms != 0);
		if (v <= max || i + 1 == sizeof(units) / sizeof(units[0]))
			break;
	}
	if (v > max)
		v = max;
	/* the digits, then the unit: no snprintf, this file does no I/O */
	char digits[8];
	size_t n = 0, len = 0;
	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		dst[len++] = digits[--n];
	dst[len++] = units[i].unit;
	dst[len] = '\0';
	return len;
}

size_t grpc_message_encode(char *dst, size_t dstlen, const char *msg)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;
	if (dstlen == 0)
		return 0;
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		if (*p >= 0x20 && *p <= 0x7E && *p != '%') {
			if (n + 1 >= dstlen)
				break;
			dst[n++] = (char)*p;
		} else {
			if (n + 3 >= dstlen)
				break;
			dst[n++] = '%';
			dst[n++] = hex[*p >> 4];
			dst[n++] = hex[*p & 15];
		}
	}
	dst[n] = '\0';
	return n;
}

const char *grpc_status_name(enum grpc_status s)
{
	switch (s) {
	case GRPC_OK:
		return "OK";
	case GRPC_CANCELLED:
		return "CANCELLED";
	case GRPC_UNKNOWN:
		return "UNKNOWN";
	case GRPC_INVALID_ARGUMENT:
		return "INVALID_ARGUMENT";
	case GRPC_DEADLINE_EXCEEDED:
		return "DEADLINE_EXCEEDED";
	case GRPC_NOT_FOUND:
		return "NOT_FOUND";
	case GRPC_RESOURCE_EXHAUSTED:
		return "RESOURCE_EXHAUSTED";
	case GRPC_UNIMPLEMENTED:
		return "UNIMPLEMENTED";
	case GRPC_INTERNAL:
		return "INTERNAL";
	case GRPC_UNAVAILABLE:
		return "UNAVAILABLE";
	case GRPC_PERMISSION_DENIED:
		return "PERMISSION_DENIED";
	case GRPC_UNAUTHENTICATED:
		return "UNAUTHENTICATED";
	}
	return "UNKNOWN";
}
