/* refuse_msg.c - a too-many-clients refusal's bytes over HTTP/2, pure (an
 * in-order protocol's are its own error reply: proto_refusal). */
#include "refuse_msg.h"

#include <string.h>

#define TEXT "too-many-clients max_clients reached"

/* RFC 9113: frame types, flags and error codes used here */
#define H2_HEADERS 0x1
#define H2_SETTINGS 0x4
#define H2_GOAWAY 0x7
#define H2_END_STREAM 0x1
#define H2_ACK 0x1
#define H2_END_HEADERS 0x4
#define H2_ENHANCE_YOUR_CALM 0xb

const uint8_t refuse_h2_settings[REFUSE_H2_SETTINGS_LEN] = {0, 0, 0, H2_SETTINGS, 0, 0, 0, 0, 0};

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define PREFACE_LEN (sizeof(preface) - 1)

enum refuse_h2_found refuse_h2_feed(struct refuse_h2_scan *s, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		if (s->seen >= REFUSE_H2_SCAN_MAX)
			return REFUSE_H2_NONE;
		if (s->seen < PREFACE_LEN) {
			if (p[i] != (uint8_t)preface[s->seen])
				return REFUSE_H2_NONE;
			s->seen++, i++;
			continue;
		}
		if (s->skip) { /* a frame's payload: not looked at */
			size_t k = n - i < s->skip ? n - i : s->skip;
			if (k > REFUSE_H2_SCAN_MAX - s->seen)
				k = REFUSE_H2_SCAN_MAX - s->seen;
			s->skip -= (uint32_t)k;
			s->seen += (uint32_t)k;
			i += k;
			continue;
		}
		s->hdr[s->nhdr++] = p[i++];
		s->seen++;
		if (s->nhdr < sizeof(s->hdr))
			continue;
		s->nhdr = 0;
		uint32_t len = ((uint32_t)s->hdr[0] << 16) | ((uint32_t)s->hdr[1] << 8) | s->hdr[2];
		uint32_t id = (((uint32_t)s->hdr[5] << 24) | ((uint32_t)s->hdr[6] << 16) |
			       ((uint32_t)s->hdr[7] << 8) | s->hdr[8]) &
			      0x7fffffffu;
		if (s->hdr[3] == H2_HEADERS) {
			/* a client's streams are odd */
			if (id == 0 || id % 2 == 0)
				return REFUSE_H2_NONE;
			s->stream = id;
			return REFUSE_H2_STREAM;
		}
		if (s->hdr[3] == H2_SETTINGS && !(s->hdr[4] & H2_ACK))
			s->settings = 1;
		s->skip = len;
	}
	return s->seen >= REFUSE_H2_SCAN_MAX ? REFUSE_H2_NONE : REFUSE_H2_MORE;
}

static uint8_t *frame_head(uint8_t *d, size_t len, uint8_t type, uint8_t flags, uint32_t stream)
{
	d[0] = (uint8_t)(len >> 16);
	d[1] = (uint8_t)(len >> 8);
	d[2] = (uint8_t)len;
	d[3] = type;
	d[4] = flags;
	d[5] = (uint8_t)(stream >> 24 & 0x7f);
	d[6] = (uint8_t)(stream >> 16);
	d[7] = (uint8_t)(stream >> 8);
	d[8] = (uint8_t)stream;
	return d + 9;
}

/* HPACK "literal header field without indexing, new name", no Huffman:
 * names and values here are shorter than 127 bytes (one length byte). */
static uint8_t *hpack_literal(uint8_t *d, const char *name, const char *value)
{
	size_t nl = strlen(name), vl = strlen(value);
	*d++ = 0x00;
	*d++ = (uint8_t)nl;
	memcpy(d, name, nl);
	d += nl;
	*d++ = (uint8_t)vl;
	memcpy(d, value, vl);
	return d + vl;
}

size_t refuse_h2_goodbye(uint8_t *dst, uint32_t stream, int ack)
{
	uint8_t *d = dst;
	if (ack)
		d = frame_head(d, 0, H2_SETTINGS, H2_ACK, 0);
	if (stream) {
		/* Trailers-Only: grpc-message needs no percent-encoding (TEXT
		 * is printable and has no '%') */
		uint8_t *h = d + 9, *end = h;
		end = hpack_literal(end, ":status", "200");
		end = hpack_literal(end, "content-type", "application/grpc");
		end = hpack_literal(end, "grpc-status", "14");
		end = hpack_literal(end, "grpc-message", TEXT);
		frame_head(d, (size_t)(end - h), H2_HEADERS, H2_END_STREAM | H2_END_HEADERS,
			   stream);
		d = end;
	}
	static const char debug[] = TEXT;
	d = frame_head(d, 8 + sizeof(debug) - 1, H2_GOAWAY, 0, 0);
	d[0] = (uint8_t)(stream >> 24 & 0x7f);
	d[1] = (uint8_t)(stream >> 16);
	d[2] = (uint8_t)(stream >> 8);
	d[3] = (uint8_t)stream;
	d[4] = d[5] = d[6] = 0;
	d[7] = H2_ENHANCE_YOUR_CALM;
	memcpy(d + 8, debug, sizeof(debug) - 1);
	d += 8 + sizeof(debug) - 1;
	return (size_t)(d - dst);
}
