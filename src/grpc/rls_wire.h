/*
 * rls_wire.h - Envoy's RateLimitResponse written in protobuf's wire format
 * by hand, pure: plain fields in, the bytes protobuf-c would pack out, no
 * allocation (protobuf-c's structures and its pack took a tenth of the
 * daemon's CPU per gRPC call). unit-rls_wire checks the bytes against
 * protobuf-c's.
 */
#ifndef RL_RLS_WIRE_H
#define RL_RLS_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* RateLimitResponse.Code */
enum rls_wire_code { RLS_WIRE_UNKNOWN = 0, RLS_WIRE_OK = 1, RLS_WIRE_OVER_LIMIT = 2 };

/* One DescriptorStatus. */
struct rls_wire_status {
	enum rls_wire_code code;
	int has_limit; /* current_limit (and duration_until_reset) are set */
	uint32_t requests_per_unit;
	int unit;	  /* RateLimit.Unit */
	const char *name; /* NUL-terminated; "" is not sent */
	uint32_t limit_remaining;
	int64_t reset_seconds; /* duration_until_reset.seconds, with has_limit */
};

/* One of response_headers_to_add (NUL-terminated key and value). */
struct rls_wire_header {
	const char *key, *value;
};

/* The bytes of a RateLimitResponse: overall, then the statuses, then the
 * headers, as protobuf-c packs them (fields in number order, proto3's
 * zero values left out). Returns the length; buf holds at least
 * rls_wire_response_size() of the same arguments. */
size_t rls_wire_response(enum rls_wire_code overall, const struct rls_wire_status *st, int nst,
			 const struct rls_wire_header *hdr, int nhdr, uint8_t *buf);
size_t rls_wire_response_size(enum rls_wire_code overall, const struct rls_wire_status *st, int nst,
			      const struct rls_wire_header *hdr, int nhdr);

#endif
