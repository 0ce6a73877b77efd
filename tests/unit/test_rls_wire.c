/* test_rls_wire.c - the RateLimitResponse rls_wire.c writes is, byte for
 * byte, what protobuf-c packs from the same fields: every field at zero and
 * not, sizes across varint lengths, names, headers, up to 64 statuses. */
#include <check.h>

#include "runner.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "grpc_pb.h"
#include "rls_wire.h"

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse Resp;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus Status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit Limit;
typedef Envoy__Config__Core__V3__HeaderValue Header;

static uint64_t rnd_state = 88172645463325252ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/* A value of one of the varint lengths, often 0. */
static uint64_t some(uint64_t max)
{
	static const uint64_t edges[] = {0,	1,	 127,	  128,	     16383,
					 16384, 2097151, 2097152, 1000000000};
	uint64_t v =
		rnd() % 3 ? edges[rnd() % (sizeof(edges) / sizeof(edges[0]))] : rnd() % (max + 1);
	return v > max ? max : v;
}

static const char *const names[] = {"", "u", "per-user",
				    "a name of sixty-four bytes, "
				    "the longest the rules take, 0123456789"};

/* Packs the same response with protobuf-c and with rls_wire; they must agree. */
static void same_bytes(enum rls_wire_code overall, const struct rls_wire_status *st, int nst,
		       const struct rls_wire_header *hdr, int nhdr)
{
	static Status ps[64];
	static Status *psp[64];
	static Limit pl[64];
	static Google__Protobuf__Duration pd[64];
	static Header ph[4];
	static Header *php[4];
	Resp r;
	envoy__service__ratelimit__v3__rate_limit_response__init(&r);
	r.overall_code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)overall;
	for (int i = 0; i < nst; i++) {
		envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(&ps[i]);
		ps[i].code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)st[i].code;
		ps[i].limit_remaining = st[i].limit_remaining;
		if (st[i].has_limit) {
			envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(
				&pl[i]);
			pl[i].requests_per_unit = st[i].requests_per_unit;
			pl[i].unit =
				(Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)
					st[i]
						.unit;
			pl[i].name = (char *)st[i].name;
			ps[i].current_limit = &pl[i];
			google__protobuf__duration__init(&pd[i]);
			pd[i].seconds = st[i].reset_seconds;
			ps[i].duration_until_reset = &pd[i];
		}
		psp[i] = &ps[i];
	}
	r.n_statuses = (size_t)nst;
	r.statuses = psp;
	for (int i = 0; i < nhdr; i++) {
		envoy__config__core__v3__header_value__init(&ph[i]);
		ph[i].key = (char *)hdr[i].key;
		ph[i].value = (char *)hdr[i].value;
		php[i] = &ph[i];
	}
	r.n_response_headers_to_add = (size_t)nhdr;
	r.response_headers_to_add = php;
	static uint8_t want[65536], got[65536];
	size_t wl = envoy__service__ratelimit__v3__rate_limit_response__pack(&r, want);
	size_t size = rls_wire_response_size(overall, st, nst, hdr, nhdr);
	size_t gl = rls_wire_response(overall, st, nst, hdr, nhdr, got);
	ck_assert_uint_eq(gl, size);
	ck_assert_uint_eq(gl, wl);
	ck_assert_msg(memcmp(got, want, wl) == 0, "%d statuses, %d headers: bytes differ", nst,
		      nhdr);
}

START_TEST(test_empty)
{
	same_bytes(RLS_WIRE_UNKNOWN, NULL, 0, NULL, 0);
	same_bytes(RLS_WIRE_OK, NULL, 0, NULL, 0);
	struct rls_wire_status s = {.code = RLS_WIRE_UNKNOWN};
	same_bytes(RLS_WIRE_OVER_LIMIT, &s, 1, NULL, 0); /* an empty status is still sent */
	s.has_limit = 1;				 /* an empty limit and reset too */
	same_bytes(RLS_WIRE_OK, &s, 1, NULL, 0);
}
END_TEST

START_TEST(test_random)
{
	static struct rls_wire_status st[64];
	static char hv[4][24];
	struct rls_wire_header hdr[4];
	for (int round = 0; round < 3000; round++) {
		int nst = (int)(rnd() % 65), nhdr = (int)(rnd() % 5);
		for (int i = 0; i < nst; i++)
			st[i] = (struct rls_wire_status){
				.code = (enum rls_wire_code)(rnd() % 3),
				.has_limit = (int)(rnd() % 4 != 0),
				.requests_per_unit = (uint32_t)some(UINT32_MAX),
				.unit = (int)(rnd() % 8),
				.name = names[rnd() % 4],
				.limit_remaining = (uint32_t)some(UINT32_MAX),
				.reset_seconds = (int64_t)some(31622400),
			};
		for (int i = 0; i < nhdr; i++) {
			snprintf(hv[i], sizeof(hv[i]), "%llu",
				 (unsigned long long)some(UINT32_MAX));
			hdr[i] = (struct rls_wire_header){
				i == 3 ? "Retry-After" : "X-RateLimit-Remaining", hv[i]};
		}
		same_bytes((enum rls_wire_code)(rnd() % 3), st, nst, hdr, nhdr);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rls_wire");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_random);
	suite_add_tcase(s, tc);
	return run_suite(s);
}
