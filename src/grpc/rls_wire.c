/*
 * rls_wire.c - a RateLimitRequest read and a RateLimitResponse written in
 * protobuf's wire format (rls_wire.h).
 *
 * The reader takes what protobuf-c 1.4's unpack takes, the same way: a
 * field's tag in at most 5 bytes, a varint in at most 10 (of which a
 * 32-bit field reads 5, the fifth unmasked), a length prefix in at most 5,
 * a known field of the wrong wire type refused, groups refused, unknown
 * fields skipped; a field given twice takes the last (a message field
 * too: protobuf-c merges the two, and ours hold only proto3 scalars, for
 * which its merge keeps the later's).
 *
 * On the writer's side every nested message's length comes before its
 * bytes, so each message has a size function and a writer: the sizes of a
 * status's parts are small and computed again rather than kept.
 */
#include "rls_wire.h"

#include <string.h>

#include "pbwire.h"

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

/* ---- reading ---- */

/* One field as the scan finds it: its number, wire type and value bytes
 * (for WIRE_LEN, the bytes after the length prefix). */
struct field {
	uint32_t num;
	int wire;
	const uint8_t *v;
	size_t vlen;
};

/* The tag at p (protobuf-c's parse_tag_and_wiretype): its length, or 0. */
static size_t read_tag(const uint8_t *p, size_t rem, uint32_t *num, int *wire)
{
	size_t max = rem > 5 ? 5 : rem;
	if ((p[0] & 0xf8) == 0)
		return 0;
	uint32_t tag = (uint32_t)(p[0] & 0x7f) >> 3;
	unsigned shift = 4;
	*wire = p[0] & 7;
	if (!(p[0] & 0x80)) {
		*num = tag;
		return 1;
	}
	for (size_t i = 1; i < max; i++) {
		if (p[i] & 0x80) {
			tag |= (uint32_t)(p[i] & 0x7f) << shift;
			shift += 7;
		} else {
			tag |= (uint32_t)p[i] << shift;
			*num = tag;
			return i + 1;
		}
	}
	return 0;
}

/* The next field of msg[*at..len): 1, 0 at the end, -1 for bytes that are
 * not a field. */
static int next_field(const uint8_t *msg, size_t len, size_t *at, struct field *f)
{
	if (*at >= len)
		return 0;
	const uint8_t *p = msg + *at;
	size_t rem = len - *at;
	size_t used = read_tag(p, rem, &f->num, &f->wire);
	if (!used)
		return -1;
	p += used;
	rem -= used;
	size_t n;
	switch (f->wire) {
	case WIRE_VARINT: {
		size_t max = rem < 10 ? rem : 10, i;
		for (i = 0; i < max; i++)
			if (!(p[i] & 0x80))
				break;
		if (i == max)
			return -1;
		f->v = p;
		f->vlen = n = i + 1;
		break;
	}
	case WIRE_I64:
	case WIRE_I32:
		n = f->wire == WIRE_I64 ? 8 : 4;
		if (rem < n)
			return -1;
		f->v = p;
		f->vlen = n;
		break;
	case WIRE_LEN: {
		size_t max = rem < 5 ? rem : 5, i, v = 0;
		unsigned shift = 0;
		for (i = 0; i < max; i++) {
			v |= (size_t)(p[i] & 0x7f) << shift;
			shift += 7;
			if (!(p[i] & 0x80))
				break;
		}
		if (i == max || v > rem - (i + 1))
			return -1;
		f->v = p + i + 1;
		f->vlen = v;
		n = i + 1 + v;
		break;
	}
	default: /* groups (3, 4) and 6, 7 */
		return -1;
	}
	*at += used + n;
	return 1;
}

/* A varint's value as a 32-bit field reads it (protobuf-c's parse_uint32). */
static uint32_t varint32(const struct field *f)
{
	uint32_t v = f->v[0] & 0x7f;
	for (size_t i = 1; i < f->vlen && i < 4; i++)
		v |= (uint32_t)(f->v[i] & 0x7f) << (7 * i);
	if (f->vlen > 4)
		v |= (uint32_t)f->v[4] << 28;
	return v;
}

/* ... and as a 64-bit one (parse_uint64). */
static uint64_t varint64(const struct field *f)
{
	if (f->vlen < 5)
		return varint32(f);
	uint64_t v = 0;
	for (size_t i = 0; i < f->vlen; i++)
		v |= (uint64_t)(f->v[i] & 0x7f) << (7 * i);
	return v;
}

static struct rls_wire_str str_of(const struct field *f)
{
	const char *s = (const char *)f->v;
	const char *nul = f->vlen ? memchr(s, '\0', f->vlen) : NULL;
	return (struct rls_wire_str){s, nul ? (size_t)(nul - s) : f->vlen};
}

/* Entry: key = 1, value = 2 (strings). */
static int read_entry(const uint8_t *m, size_t len, struct rls_wire_entry *e)
{
	struct field f;
	size_t at = 0;
	int r;
	*e = (struct rls_wire_entry){{"", 0}, {"", 0}};
	while ((r = next_field(m, len, &at, &f)) > 0) {
		if (f.num != 1 && f.num != 2)
			continue;
		if (f.wire != WIRE_LEN)
			return -1;
		if (f.num == 1)
			e->key = str_of(&f);
		else
			e->value = str_of(&f);
	}
	return r;
}

/* A message of varint fields 1 and 2 into *a and *b (RateLimitOverride:
 * requests_per_unit, unit; UInt64Value: value, and no field 2). Given
 * twice, the later replaces the earlier whole: protobuf-c's merge of two
 * messages of proto3 scalars keeps the later's fields, 0 or not. */
static int read_two_varints(const uint8_t *m, size_t len, int with_second, uint64_t *a, uint32_t *b)
{
	struct field f;
	size_t at = 0;
	int r;
	uint64_t na = 0;
	uint32_t nb = 0;
	while ((r = next_field(m, len, &at, &f)) > 0) {
		if (f.num != 1 && (f.num != 2 || !with_second))
			continue;
		if (f.wire != WIRE_VARINT)
			return -1;
		if (f.num == 1)
			na = with_second ? varint32(&f) : varint64(&f);
		else
			nb = varint32(&f);
	}
	if (r < 0)
		return -1;
	*a = na;
	if (b)
		*b = nb;
	return 0;
}

/* RateLimitDescriptor: entries = 1, limit = 2, hits_addend = 3. */
static int read_descriptor(const uint8_t *m, size_t len, struct rls_wire_descriptor *d)
{
	struct field f;
	size_t at = 0;
	int r;
	d->n_entries = 0;
	d->has_limit = d->has_hits_addend = 0;
	d->requests_per_unit = 0;
	d->unit = 0;
	d->hits_addend = 0;
	while ((r = next_field(m, len, &at, &f)) > 0) {
		if (f.num < 1 || f.num > 3)
			continue;
		if (f.wire != WIRE_LEN)
			return -1;
		if (f.num == 1) {
			struct rls_wire_entry e;
			if (read_entry(f.v, f.vlen, &e) < 0)
				return -1;
			if (d->n_entries < RLS_WIRE_MAX_ENTRIES)
				d->entries[d->n_entries] = e;
			d->n_entries++;
		} else if (f.num == 2) {
			uint64_t rpu = d->requests_per_unit;
			uint32_t unit = (uint32_t)d->unit;
			if (read_two_varints(f.v, f.vlen, 1, &rpu, &unit) < 0)
				return -1;
			d->requests_per_unit = (uint32_t)rpu;
			d->unit = (int32_t)unit;
			d->has_limit = 1;
		} else {
			if (read_two_varints(f.v, f.vlen, 0, &d->hits_addend, NULL) < 0)
				return -1;
			d->has_hits_addend = 1;
		}
	}
	return r;
}

/* RateLimitRequest: domain = 1, descriptors = 2, hits_addend = 3. */
int rls_wire_request_read(const uint8_t *msg, size_t len, struct rls_wire_request *out)
{
	struct field f;
	size_t at = 0;
	int r;
	out->domain = (struct rls_wire_str){"", 0};
	out->n_descriptors = 0;
	out->hits_addend = 0;
	while ((r = next_field(msg, len, &at, &f)) > 0) {
		if (f.num < 1 || f.num > 3)
			continue;
		if (f.num == 3) {
			if (f.wire != WIRE_VARINT)
				return -1;
			out->hits_addend = varint32(&f);
			continue;
		}
		if (f.wire != WIRE_LEN)
			return -1;
		if (f.num == 1) {
			out->domain = str_of(&f);
			continue;
		}
		static struct rls_wire_descriptor spare; /* one past those kept: checked only */
		struct rls_wire_descriptor *d = out->n_descriptors < RLS_WIRE_MAX_DESCRIPTORS
							? &out->d[out->n_descriptors]
							: &spare;
		if (read_descriptor(f.v, f.vlen, d) < 0)
			return -1;
		out->n_descriptors++;
	}
	return r;
}

/* ---- writing ---- */

static size_t varint_size(uint64_t v)
{
	return pbwire_varint_len(v);
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	return p + pbwire_varint(p, v);
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
