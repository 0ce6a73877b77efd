/*
 * rls_wire.c - a RateLimitResponse in protobuf's wire format (rls_wire.h).
 *
 * Every nested message's length comes before its bytes, so each message has
 * a size function and a writer: the sizes of a status's parts are small
 * and computed again rather than kept.
 */
#include "rls_wire.h"

#include <string.h>

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

static size_t varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* A tag of field numbers below 16: one byte. */
static uint8_t *put_tag(uint8_t *p, int field, int wire)
{
	*p++ = (uint8_t)(field << 3 | wire);
	return p;
}

/* A varint field left out when 0 (proto3); signed ones as protobuf does,
 * sign-extended to 64 bits. */
static size_t uint_field_size(uint64_t v)
{
	return v ? 1 + varint_size(v) : 0;
}

static uint8_t *put_uint_field(uint8_t *p, int field, uint64_t v)
{
	if (!v)
		return p;
	return put_varint(put_tag(p, field, WIRE_VARINT), v);
}

static size_t string_field_size(const char *s)
{
	size_t len = s ? strlen(s) : 0;
	return len ? 1 + varint_size(len) + len : 0;
}

static uint8_t *put_string_field(uint8_t *p, int field, const char *s)
{
	size_t len = s ? strlen(s) : 0;
	if (!len)
		return p;
	p = put_varint(put_tag(p, field, WIRE_LEN), len);
	memcpy(p, s, len);
	return p + len;
}

/* RateLimit: requests_per_unit = 1, unit = 2, name = 3. */
static size_t limit_size(const struct rls_wire_status *s)
{
	return uint_field_size(s->requests_per_unit) + uint_field_size((uint64_t)(int64_t)s->unit) +
	       string_field_size(s->name);
}

/* Duration: seconds = 1 (nanos, 2, is always 0 here). */
static size_t duration_size(const struct rls_wire_status *s)
{
	return uint_field_size((uint64_t)s->reset_seconds);
}

/* DescriptorStatus: code = 1, current_limit = 2, limit_remaining = 3,
 * duration_until_reset = 4. */
static size_t status_size(const struct rls_wire_status *s)
{
	size_t n =
		uint_field_size((uint64_t)(int64_t)s->code) + uint_field_size(s->limit_remaining);
	if (s->has_limit) {
		size_t l = limit_size(s), d = duration_size(s);
		n += 1 + varint_size(l) + l + 1 + varint_size(d) + d;
	}
	return n;
}

static uint8_t *put_status(uint8_t *p, const struct rls_wire_status *s)
{
	p = put_uint_field(p, 1, (uint64_t)(int64_t)s->code);
	if (s->has_limit) {
		p = put_varint(put_tag(p, 2, WIRE_LEN), limit_size(s));
		p = put_uint_field(p, 1, s->requests_per_unit);
		p = put_uint_field(p, 2, (uint64_t)(int64_t)s->unit);
		p = put_string_field(p, 3, s->name);
	}
	p = put_uint_field(p, 3, s->limit_remaining);
	if (s->has_limit) {
		p = put_varint(put_tag(p, 4, WIRE_LEN), duration_size(s));
		p = put_uint_field(p, 1, (uint64_t)s->reset_seconds);
	}
	return p;
}

/* HeaderValue: key = 1, value = 2. */
static size_t header_size(const struct rls_wire_header *h)
{
	return string_field_size(h->key) + string_field_size(h->value);
}

size_t rls_wire_response_size(enum rls_wire_code overall, const struct rls_wire_status *st, int nst,
			      const struct rls_wire_header *hdr, int nhdr)
{
	size_t n = uint_field_size((uint64_t)(int64_t)overall);
	for (int i = 0; i < nst; i++) {
		size_t s = status_size(&st[i]);
		n += 1 + varint_size(s) + s;
	}
	for (int i = 0; i < nhdr; i++) {
		size_t h = header_size(&hdr[i]);
		n += 1 + varint_size(h) + h;
	}
	return n;
}

/* RateLimitResponse: overall_code = 1, statuses = 2,
 * response_headers_to_add = 3 (request_headers_to_add, 4, never sent). */
size_t rls_wire_response(enum rls_wire_code overall, const struct rls_wire_status *st, int nst,
			 const struct rls_wire_header *hdr, int nhdr, uint8_t *buf)
{
	uint8_t *p = put_uint_field(buf, 1, (uint64_t)(int64_t)overall);
	for (int i = 0; i < nst; i++) {
		p = put_varint(put_tag(p, 2, WIRE_LEN), status_size(&st[i]));
		p = put_status(p, &st[i]);
	}
	for (int i = 0; i < nhdr; i++) {
		p = put_varint(put_tag(p, 3, WIRE_LEN), header_size(&hdr[i]));
		p = put_string_field(p, 1, hdr[i].key);
		p = put_string_field(p, 2, hdr[i].value);
	}
	return (size_t)(p - buf);
}
