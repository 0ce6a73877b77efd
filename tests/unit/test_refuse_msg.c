/* test_refuse_msg.c - a too-many-clients refusal's bytes per protocol: the
 * in-order protocols' (proto_refusal), the scan of an HTTP/2 client's
 * opening and the frames that end a refused HTTP/2 connection. */
#include <check.h>

#include "runner.h"
#include <nghttp2/nghttp2.h>
#include <string.h>

#include "proto.h"
#include "proto_http.h"
#include "proto_line.h"
#include "proto_resp.h"
#include "refuse_msg.h"

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* Appends a frame header (and payload of len zero bytes) to b at *n. */
static void frame(uint8_t *b, size_t *n, uint32_t len, uint8_t type, uint8_t flags, uint32_t id)
{
	uint8_t h[9] = {
		(uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len,       type,	   flags,
		(uint8_t)(id >> 24),  (uint8_t)(id >> 16), (uint8_t)(id >> 8), (uint8_t)id};
	memcpy(b + *n, h, 9);
	memset(b + *n + 9, 0, len);
	*n += 9 + len;
}

/* What grpcio sends first: the preface, SETTINGS, WINDOW_UPDATE, HEADERS. */
static size_t grpc_opening(uint8_t *b, uint32_t stream)
{
	size_t n = sizeof(preface) - 1;
	memcpy(b, preface, n);
	frame(b, &n, 18, 0x4, 0, 0);
	frame(b, &n, 4, 0x8, 0, 0);
	frame(b, &n, 40, 0x1, 0x4, stream);
	return n;
}

START_TEST(test_texts)
{
	char t[4096];
	size_t len = proto_refusal(&proto_line, t);
	ck_assert_uint_eq(len, strlen("ERR too-many-clients max_clients reached\n"));
	ck_assert(memcmp(t, "ERR too-many-clients max_clients reached\n", len) == 0);
	len = proto_refusal(&proto_resp, t);
	ck_assert_uint_eq(len, strlen("-ERR too-many-clients max_clients reached\r\n"));
	ck_assert(memcmp(t, "-ERR too-many-clients max_clients reached\r\n", len) == 0);
	len = proto_refusal(&proto_http, t);
	t[len] = '\0';
	ck_assert(memcmp(t, "HTTP/1.1 503 ", 13) == 0);
	static const char http[] =
		"HTTP/1.1 503 Service Unavailable\r\n"
		"Content-Type: application/json\r\n"
		"Content-Length: 61\r\nConnection: close\r\n\r\n"
		"{\"error\":\"too-many-clients\",\"message\":\"max_clients reached\"}\n";
	ck_assert_uint_eq(len, sizeof(http) - 1);
	ck_assert(memcmp(t, http, len) == 0);
	/* Content-Length matches the body */
	const char *body = strstr(t, "\r\n\r\n") + 4;
	ck_assert_uint_eq((size_t)(t + len - body), 61);
	ck_assert(memcmp(body, "{\"error\":\"too-many-clients\"", 27) == 0);
}
END_TEST

START_TEST(test_scan_whole_and_bytewise)
{
	uint8_t b[256];
	size_t n = grpc_opening(b, 1);
	struct refuse_h2_scan s = {0};
	ck_assert_int_eq(refuse_h2_feed(&s, b, n), REFUSE_H2_STREAM);
	ck_assert_uint_eq(s.stream, 1);
	ck_assert_uint_eq(s.settings, 1);

	/* one byte at a time: the same, and MORE until the HEADERS header is whole */
	n = grpc_opening(b, 7);
	size_t headers_end = n - 40;
	s = (struct refuse_h2_scan){0};
	for (size_t i = 0; i < headers_end - 1; i++)
		ck_assert_int_eq(refuse_h2_feed(&s, b + i, 1), REFUSE_H2_MORE);
	ck_assert_int_eq(refuse_h2_feed(&s, b + headers_end - 1, 1), REFUSE_H2_STREAM);
	ck_assert_uint_eq(s.stream, 7);

	/* a settings acknowledgement alone asks for none */
	n = sizeof(preface) - 1;
	memcpy(b, preface, n);
	frame(b, &n, 0, 0x4, 0x1, 0);
	s = (struct refuse_h2_scan){0};
	ck_assert_int_eq(refuse_h2_feed(&s, b, n), REFUSE_H2_MORE);
	ck_assert_uint_eq(s.settings, 0);
}
END_TEST

START_TEST(test_scan_refuses)
{
	struct refuse_h2_scan s = {0};
	/* not HTTP/2: an HTTP/1.1 request, a line */
	ck_assert_int_eq(refuse_h2_feed(&s, (const uint8_t *)"POST / HTTP/1.1\r\n", 17),
			 REFUSE_H2_NONE);
	s = (struct refuse_h2_scan){0};
	ck_assert_int_eq(refuse_h2_feed(&s, (const uint8_t *)"PRI * HTTP/1.1", 14), REFUSE_H2_NONE);
	/* a stream id a client may not use: 0, even */
	uint8_t b[256];
	size_t n = grpc_opening(b, 0);
	s = (struct refuse_h2_scan){0};
	ck_assert_int_eq(refuse_h2_feed(&s, b, n), REFUSE_H2_NONE);
	n = grpc_opening(b, 2);
	s = (struct refuse_h2_scan){0};
	ck_assert_int_eq(refuse_h2_feed(&s, b, n), REFUSE_H2_NONE);
	/* a huge first frame: scanned no further than REFUSE_H2_SCAN_MAX */
	n = sizeof(preface) - 1;
	memcpy(b, preface, n);
	frame(b, &n, 0, 0x0, 0, 1);
	b[n - 9] = 0xff; /* length 16 MiB - 1 */
	b[n - 8] = 0xff;
	b[n - 7] = 0xff;
	s = (struct refuse_h2_scan){0};
	ck_assert_int_eq(refuse_h2_feed(&s, b, n), REFUSE_H2_MORE);
	static uint8_t zeros[REFUSE_H2_SCAN_MAX];
	ck_assert_int_eq(refuse_h2_feed(&s, zeros, sizeof(zeros)), REFUSE_H2_NONE);
	ck_assert_uint_eq(s.seen, REFUSE_H2_SCAN_MAX);
}
END_TEST

static uint32_t be32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Decodes a header block with nghttp2's own HPACK decoder: every field
 * must decode, the block must be whole, and the fields are what a gRPC
 * client reads as a failed call. */
static void check_hpack(const uint8_t *p, size_t len, const char *message)
{
	nghttp2_hd_inflater *inf;
	ck_assert_int_eq(nghttp2_hd_inflate_new(&inf), 0);
	int status = 0, grpc_status = 0, grpc_message = 0, fields = 0;
	for (;;) {
		nghttp2_nv nv;
		int flags = 0;
		ssize_t used = nghttp2_hd_inflate_hd2(inf, &nv, &flags, p, len, 1);
		ck_assert_int_ge(used, 0);
		p += used;
		len -= (size_t)used;
		if (flags & NGHTTP2_HD_INFLATE_EMIT) {
			fields++;
			if (nv.namelen == 7 && memcmp(nv.name, ":status", 7) == 0)
				status = nv.valuelen == 3 && memcmp(nv.value, "200", 3) == 0;
			else if (nv.namelen == 11 && memcmp(nv.name, "grpc-status", 11) == 0)
				grpc_status = nv.valuelen == 2 && memcmp(nv.value, "14", 2) == 0;
			else if (nv.namelen == 12 && memcmp(nv.name, "grpc-message", 12) == 0)
				grpc_message = nv.valuelen == strlen(message) &&
					       memcmp(nv.value, message, nv.valuelen) == 0;
		}
		if (flags & NGHTTP2_HD_INFLATE_FINAL) {
			nghttp2_hd_inflate_end_headers(inf);
			break;
		}
		if (len == 0 && !(flags & NGHTTP2_HD_INFLATE_EMIT))
			break;
	}
	ck_assert_uint_eq(len, 0);
	ck_assert(status && grpc_status && grpc_message);
	ck_assert_int_ge(fields, 3);
	nghttp2_hd_inflate_del(inf);
}

/* Walks the frames of out: their types in order, and the frames checked. */
START_TEST(test_goodbye)
{
	static const char text[] = "too-many-clients max_clients reached";
	uint8_t out[REFUSE_H2_GOODBYE_MAX];
	ck_assert_uint_eq(refuse_h2_settings[3], 0x4);
	ck_assert_uint_eq(refuse_h2_settings[0] | refuse_h2_settings[1] | refuse_h2_settings[2], 0);

	size_t n = refuse_h2_goodbye(out, 5, 1);
	ck_assert_uint_le(n, REFUSE_H2_GOODBYE_MAX);
	uint8_t types[4];
	size_t nt = 0;
	for (size_t at = 0; at < n;) {
		ck_assert_uint_le(at + 9, n);
		size_t len = ((size_t)out[at] << 16) | ((size_t)out[at + 1] << 8) | out[at + 2];
		const uint8_t *p = out + at + 9;
		ck_assert_uint_le(at + 9 + len, n);
		ck_assert_uint_lt(nt, 4);
		types[nt++] = out[at + 3];
		uint32_t id = be32(out + at + 5);
		switch (out[at + 3]) {
		case 0x4: /* the acknowledgement */
			ck_assert_uint_eq(out[at + 4], 0x1);
			ck_assert_uint_eq(len, 0);
			ck_assert_uint_eq(id, 0);
			break;
		case 0x1: /* END_STREAM | END_HEADERS on stream 5, literal fields */
			ck_assert_uint_eq(out[at + 4], 0x5);
			ck_assert_uint_eq(id, 5);
			ck_assert(memmem(p, len,
					 "\x00\x07:status\x03"
					 "200",
					 13));
			ck_assert(memmem(p, len,
					 "\x00\x0bgrpc-status\x02"
					 "14",
					 16));
			ck_assert(memmem(p, len, "\x00\x0cgrpc-message\x24", 15));
			ck_assert(memmem(p, len, text, sizeof(text) - 1));
			check_hpack(p, len, text);
			break;
		case 0x7: /* GOAWAY: last stream 5, ENHANCE_YOUR_CALM, the text */
			ck_assert_uint_eq(id, 0);
			ck_assert_uint_eq(be32(p), 5);
			ck_assert_uint_eq(be32(p + 4), 0xb);
			ck_assert_uint_eq(len, 8 + sizeof(text) - 1);
			ck_assert(memcmp(p + 8, text, sizeof(text) - 1) == 0);
			break;
		default:
			ck_abort_msg("unexpected frame type %d", out[at + 3]);
		}
		at += 9 + len;
	}
	ck_assert_uint_eq(nt, 3);
	ck_assert_uint_eq(types[0], 0x4);
	ck_assert_uint_eq(types[1], 0x1);
	ck_assert_uint_eq(types[2], 0x7);

	/* no stream, nothing to acknowledge: the GOAWAY alone, last stream 0 */
	n = refuse_h2_goodbye(out, 0, 0);
	ck_assert_uint_eq(n, 9 + 8 + sizeof(text) - 1);
	ck_assert_uint_eq(out[3], 0x7);
	ck_assert_uint_eq(be32(out + 9), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("refuse_msg");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_texts);
	tcase_add_test(tc, test_scan_whole_and_bytewise);
	tcase_add_test(tc, test_scan_refuses);
	tcase_add_test(tc, test_goodbye);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
