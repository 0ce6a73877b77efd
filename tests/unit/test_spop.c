/* test_spop.c - SPOP's bytes (spop.h): varints at their boundaries, a
 * HAProxy HELLO and NOTIFY written by hand from SPOE.txt's layout, whole,
 * cut and byte by byte, an agent's HELLO and ACK read back, and the
 * malformed frames refused. */
#include <check.h>
#include <string.h>

#include "runner.h"

#include "spop.h"

/* v encoded, decoded back, in the byte count SPOE.txt's table gives. */
static void roundtrip(uint64_t v, size_t bytes)
{
	uint8_t buf[16];
	struct spop_writer w = {buf, sizeof(buf), 0, 0};
	spop_put_varint(&w, v);
	ck_assert(!w.failed);
	ck_assert_uint_eq(w.len, bytes);
	struct spop_cursor c = {buf, buf + w.len};
	uint64_t got;
	ck_assert_int_eq(spop_varint_read(&c, &got), 0);
	ck_assert_uint_eq(got, v);
	ck_assert_ptr_eq(c.p, buf + w.len);
	/* cut anywhere: refused, never read past */
	for (size_t cut = 0; cut < w.len; cut++) {
		struct spop_cursor d = {buf, buf + cut};
		ck_assert_int_eq(spop_varint_read(&d, &got), -1);
	}
}

START_TEST(test_varint_boundaries)
{
	roundtrip(0, 1);
	roundtrip(239, 1);
	roundtrip(240, 2);
	roundtrip(2287, 2);
	roundtrip(2288, 3);
	roundtrip(264431, 3);
	roundtrip(264432, 4);
	roundtrip(33818863, 4);
	roundtrip(33818864, 5);
	roundtrip(4328786159ull, 5);
	roundtrip(UINT32_MAX, 5);
	roundtrip(UINT64_MAX, 10);
	/* the spec's own example bytes: 240 is F0 00, 2288 is F0 80 00 */
	uint8_t a[] = {0xf0, 0x00}, b[] = {0xf0, 0x80, 0x00};
	uint64_t v;
	struct spop_cursor c = {a, a + 2};
	ck_assert_int_eq(spop_varint_read(&c, &v), 0);
	ck_assert_uint_eq(v, 240);
	c = (struct spop_cursor){b, b + 3};
	ck_assert_int_eq(spop_varint_read(&c, &v), 0);
	ck_assert_uint_eq(v, 2288);
	/* more than 64 bits, or more bytes than any value needs */
	uint8_t big[11] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
	c = (struct spop_cursor){big, big + 11};
	ck_assert_int_eq(spop_varint_read(&c, &v), -1);
}
END_TEST

/* buf[0..*n) gets a frame: type, flags, ids, then payload. */
static size_t frame(uint8_t *buf, uint8_t type, uint32_t flags, uint8_t sid, uint8_t fid,
		    const uint8_t *payload, size_t plen)
{
	size_t len = 1 + 4 + 1 + 1 + plen;
	uint8_t head[] = {(uint8_t)(len >> 24),
			  (uint8_t)(len >> 16),
			  (uint8_t)(len >> 8),
			  (uint8_t)len,
			  type,
			  (uint8_t)(flags >> 24),
			  (uint8_t)(flags >> 16),
			  (uint8_t)(flags >> 8),
			  (uint8_t)flags,
			  sid,
			  fid};
	memcpy(buf, head, sizeof(head));
	memcpy(buf + sizeof(head), payload, plen);
	return sizeof(head) + plen;
}

/* HAProxy's HELLO as 2.6 sends it: supported-versions, max-frame-size,
 * capabilities, engine-id. */
static const uint8_t hello_kv[] = {
	18,   's',
	'u',  'p',
	'p',  'o',
	'r',  't',
	'e',  'd',
	'-',  'v',
	'e',  'r',
	's',  'i',
	'o',  'n',
	's',  SPOP_STRING,
	3,    '2',
	'.',  '0',
	14,   'm',
	'a',  'x',
	'-',  'f',
	'r',  'a',
	'm',  'e',
	'-',  's',
	'i',  'z',
	'e',  SPOP_UINT32,
	0xfc, 0xf0,
	0x06, /* 16380 */
	12,   'c',
	'a',  'p',
	'a',  'b',
	'i',  'l',
	'i',  't',
	'i',  'e',
	's',  SPOP_STRING,
	10,   'p',
	'i',  'p',
	'e',  'l',
	'i',  'n',
	'i',  'n',
	'g',  11,
	'h',  'e',
	'a',  'l',
	't',  'h',
	'c',  'h',
	'e',  'c',
	'k',  SPOP_BOOL | 0x10,
};

START_TEST(test_hello_whole_cut_and_byte_by_byte)
{
	uint8_t buf[256];
	size_t n = frame(buf, SPOP_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0, hello_kv, sizeof(hello_kv));
	struct spop_frame f;
	size_t used = 0;
	for (size_t cut = 0; cut < n; cut++)
		ck_assert_int_eq(spop_frame_read(buf, cut, SPOP_FRAME_MAX, &f, &used),
				 SPOP_READ_NEED_MORE);
	ck_assert_int_eq(spop_frame_read(buf, n, SPOP_FRAME_MAX, &f, &used), SPOP_READ_FRAME);
	ck_assert_uint_eq(used, n);
	ck_assert_uint_eq(f.type, SPOP_HAPROXY_HELLO);
	ck_assert_uint_eq(f.flags, SPOP_FLAG_FIN);
	ck_assert_uint_eq(f.stream_id, 0);
	struct spop_cursor c = {f.payload, f.payload + f.payload_len};
	const char *name;
	size_t nl;
	struct spop_value v;
	int seen = 0;
	while (spop_kv_next(&c, &name, &nl, &v) == 1) {
		seen++;
		if (nl == 18 && memcmp(name, "supported-versions", 18) == 0) {
			ck_assert_int_eq(v.type, SPOP_STRING);
			ck_assert(spop_list_has(v.str, v.len, "2.0"));
		} else if (nl == 14 && memcmp(name, "max-frame-size", 14) == 0) {
			ck_assert_int_eq(v.type, SPOP_UINT32);
			ck_assert_uint_eq(v.u, 16380);
		} else if (nl == 12) {
			ck_assert(spop_list_has(v.str, v.len, "pipelining"));
			ck_assert(!spop_list_has(v.str, v.len, "async"));
		} else {
			ck_assert_int_eq(v.type, SPOP_BOOL);
			ck_assert_int_eq(v.boolean, 1);
		}
	}
	ck_assert_int_eq(seen, 4);
	ck_assert_ptr_eq(c.p, c.end);
	/* two frames back to back: the first, then the second */
	memcpy(buf + n, buf, n);
	ck_assert_int_eq(spop_frame_read(buf, 2 * n, SPOP_FRAME_MAX, &f, &used), SPOP_READ_FRAME);
	ck_assert_uint_eq(used, n);
	ck_assert_int_eq(spop_frame_read(buf + used, n, SPOP_FRAME_MAX, &f, &used),
			 SPOP_READ_FRAME);
	/* above the size agreed */
	ck_assert_int_eq(spop_frame_read(buf, n, n - SPOP_LEN_SIZE - 1, &f, &used),
			 SPOP_READ_TOO_BIG);
}
END_TEST

/* NOTIFY with the message "ratelimit" and its arguments: action, user
 * (an IPv4 address, as src), cost. */
START_TEST(test_notify_messages_and_arguments)
{
	static const uint8_t msgs[] = {
		9,   'r', 'a', 't', 'e',	'l', 'i',	  'm', 'i', 't', 3,   6,
		'a', 'c', 't', 'i', 'o',	'n', SPOP_STRING, 5,   'l', 'o', 'g', 'i',
		'n', 4,	  'u', 's', 'e',	'r', SPOP_IPV4,	  192, 0,   2,	 7,   4,
		'c', 'o', 's', 't', SPOP_INT32, 2,   4,		  'p', 'i', 'n', 'g', 0,
	};
	uint8_t buf[128];
	size_t n = frame(buf, SPOP_NOTIFY, SPOP_FLAG_FIN, 5, 9, msgs, sizeof(msgs));
	struct spop_frame f;
	size_t used;
	ck_assert_int_eq(spop_frame_read(buf, n, SPOP_FRAME_MAX, &f, &used), SPOP_READ_FRAME);
	ck_assert_uint_eq(f.stream_id, 5);
	ck_assert_uint_eq(f.frame_id, 9);
	struct spop_cursor c = {f.payload, f.payload + f.payload_len}, args;
	const char *name;
	size_t nl;
	int nargs;
	ck_assert_int_eq(spop_message_next(&c, &name, &nl, &nargs, &args), 1);
	ck_assert_uint_eq(nl, 9);
	ck_assert_int_eq(nargs, 3);
	struct spop_value v;
	ck_assert_int_eq(spop_kv_next(&args, &name, &nl, &v), 1);
	ck_assert_int_eq(v.type, SPOP_STRING);
	ck_assert(v.len == 5 && memcmp(v.str, "login", 5) == 0);
	ck_assert_int_eq(spop_kv_next(&args, &name, &nl, &v), 1);
	ck_assert_int_eq(v.type, SPOP_IPV4);
	ck_assert_uint_eq(v.ip[0], 192);
	ck_assert_uint_eq(v.ip[3], 7);
	ck_assert_int_eq(spop_kv_next(&args, &name, &nl, &v), 1);
	ck_assert_int_eq(v.type, SPOP_INT32);
	ck_assert_int_eq(v.i, 2);
	ck_assert_int_eq(spop_kv_next(&args, &name, &nl, &v), 0);
	/* the next message, with no argument */
	ck_assert_int_eq(spop_message_next(&c, &name, &nl, &nargs, &args), 1);
	ck_assert_int_eq(nargs, 0);
	ck_assert_int_eq(spop_message_next(&c, &name, &nl, &nargs, &args), 0);
	/* a message announcing more arguments than the payload has (4 would
	 * read "ping" and its count, a NULL, as a fourth: bytes cannot tell) */
	uint8_t bad[sizeof(msgs)];
	memcpy(bad, msgs, sizeof(msgs));
	bad[10] = 5;
	c = (struct spop_cursor){bad, bad + sizeof(bad)};
	ck_assert_int_eq(spop_message_next(&c, &name, &nl, &nargs, &args), -1);
}
END_TEST

START_TEST(test_values_refused)
{
	struct spop_value v;
	/* a string longer than what is left, a reserved type, a cut IPv6, an
	 * INT32 past 32 bits */
	uint8_t a[] = {SPOP_STRING, 9, 'x'}, b[] = {12}, c6[] = {SPOP_IPV6, 1, 2, 3},
		d[] = {SPOP_INT32, 0xf0 | 0x0f, 0xff, 0xff, 0xff, 0xff, 0x7f};
	const uint8_t *all[] = {a, b, c6, d};
	size_t lens[] = {sizeof(a), sizeof(b), sizeof(c6), sizeof(d)};
	for (int i = 0; i < 4; i++) {
		struct spop_cursor c = {all[i], all[i] + lens[i]};
		ck_assert_int_eq(spop_value_read(&c, &v), -1);
	}
	/* a negative INT32 and INT64 (two's complement bits) */
	uint8_t buf[32];
	struct spop_writer w = {buf, sizeof(buf), 0, 0};
	struct spop_value in = {.type = SPOP_INT32, .i = -5};
	spop_put_value(&w, &in);
	in = (struct spop_value){.type = SPOP_INT64, .i = INT64_MIN};
	spop_put_value(&w, &in);
	struct spop_cursor c = {buf, buf + w.len};
	ck_assert_int_eq(spop_value_read(&c, &v), 0);
	ck_assert_int_eq(v.i, -5);
	ck_assert_int_eq(spop_value_read(&c, &v), 0);
	ck_assert(v.i == INT64_MIN);
	/* frames too short for their metadata, or whose ids are cut */
	uint8_t f1[] = {0, 0, 0, 3, 1, 0, 0}, f2[] = {0, 0, 0, 7, 3, 0, 0, 0, 1, 0xf0, 0x80};
	struct spop_frame f;
	size_t used;
	ck_assert_int_eq(spop_frame_read(f1, sizeof(f1), SPOP_FRAME_MAX, &f, &used),
			 SPOP_READ_INVALID);
	ck_assert_int_eq(spop_frame_read(f2, sizeof(f2), SPOP_FRAME_MAX, &f, &used),
			 SPOP_READ_INVALID);
}
END_TEST

/* The agent's side: AGENT-HELLO and an ACK with set-var actions, written,
 * then read back as HAProxy would. */
START_TEST(test_agent_frames_read_back)
{
	uint8_t buf[512];
	struct spop_writer w = {buf, sizeof(buf), 0, 0};
	spop_frame_begin(&w, SPOP_AGENT_HELLO, 0, 0);
	spop_put_kv_string(&w, "version", "2.0");
	spop_put_kv_uint32(&w, "max-frame-size", 16380);
	spop_put_kv_string(&w, "capabilities", "pipelining");
	ck_assert_int_eq(spop_frame_end(&w, SPOP_FRAME_MAX), 0);
	struct spop_frame f;
	size_t used;
	ck_assert_int_eq(spop_frame_read(buf, w.len, SPOP_FRAME_MAX, &f, &used), SPOP_READ_FRAME);
	ck_assert_uint_eq(used, w.len);
	ck_assert_uint_eq(f.type, SPOP_AGENT_HELLO);
	ck_assert_uint_eq(f.flags, SPOP_FLAG_FIN);
	struct spop_cursor c = {f.payload, f.payload + f.payload_len};
	const char *name;
	size_t nl;
	struct spop_value v;
	ck_assert_int_eq(spop_kv_next(&c, &name, &nl, &v), 1);
	ck_assert(nl == 7 && memcmp(name, "version", 7) == 0);
	ck_assert(v.len == 3 && memcmp(v.str, "2.0", 3) == 0);
	ck_assert_int_eq(spop_kv_next(&c, &name, &nl, &v), 1);
	ck_assert_uint_eq(v.u, 16380);
	ck_assert_int_eq(spop_kv_next(&c, &name, &nl, &v), 1);
	ck_assert_int_eq(spop_kv_next(&c, &name, &nl, &v), 0);

	spop_frame_begin(&w, SPOP_ACK, 300, 7);
	struct spop_value allowed = {.type = SPOP_BOOL, .boolean = 0};
	struct spop_value retry = {.type = SPOP_INT64, .i = 1500};
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "allowed", &allowed);
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "retry_after_ms", &retry);
	ck_assert_int_eq(spop_frame_end(&w, SPOP_FRAME_MAX), 0);
	ck_assert_int_eq(spop_frame_read(buf, w.len, SPOP_FRAME_MAX, &f, &used), SPOP_READ_FRAME);
	ck_assert_uint_eq(f.stream_id, 300);
	ck_assert_uint_eq(f.frame_id, 7);
	/* an action: type 1 (set-var), 3 arguments, the scope, then a name
	 * and a typed value */
	c = (struct spop_cursor){f.payload, f.payload + f.payload_len};
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(c.p[0], 1);
		ck_assert_uint_eq(c.p[1], 3);
		ck_assert_uint_eq(c.p[2], SPOP_SCOPE_TXN);
		c.p += 3;
		ck_assert_int_eq(spop_kv_next(&c, &name, &nl, &v), 1);
		if (i == 0) {
			ck_assert_int_eq(v.type, SPOP_BOOL);
			ck_assert_int_eq(v.boolean, 0);
		} else {
			ck_assert_int_eq(v.i, 1500);
		}
	}
	ck_assert_ptr_eq(c.p, c.end);
	/* no room: failed, and no frame */
	struct spop_writer small = {buf, 12, 0, 0};
	spop_frame_begin(&small, SPOP_AGENT_DISCONNECT, 0, 0);
	spop_put_kv_uint32(&small, "status-code", SPOP_ST_TOO_BIG);
	ck_assert_int_eq(spop_frame_end(&small, SPOP_FRAME_MAX), -1);
}
END_TEST

START_TEST(test_list_has)
{
	const char *l = " pipelining ,async,fragmentation";
	ck_assert(spop_list_has(l, strlen(l), "pipelining"));
	ck_assert(spop_list_has(l, strlen(l), "async"));
	ck_assert(spop_list_has(l, strlen(l), "fragmentation"));
	ck_assert(!spop_list_has(l, strlen(l), "pipe"));
	ck_assert(!spop_list_has("", 0, "async"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("spop");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_varint_boundaries);
	tcase_add_test(tc, test_hello_whole_cut_and_byte_by_byte);
	tcase_add_test(tc, test_notify_messages_and_arguments);
	tcase_add_test(tc, test_values_refused);
	tcase_add_test(tc, test_agent_frames_read_back);
	tcase_add_test(tc, test_list_has);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
