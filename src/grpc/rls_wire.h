/*
 * rls_wire.h - Envoy's RateLimitRequest read and RateLimitResponse written
 * in protobuf's wire format by hand, pure: bytes in, fields pointing into
 * them out, and plain fields in, the bytes protobuf-c would pack out; no
 * allocation (protobuf-c's unpack and pack took a fifth of the daemon's
 * CPU per gRPC call). fuzz_rls checks the reader against protobuf-c's
 * unpack, unit-rls_wire the writer's bytes against protobuf-c's pack.
 */
#ifndef RL_RLS_WIRE_H
#define RL_RLS_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* The most descriptors, and entries of one, kept (more are counted). */
#define RLS_WIRE_MAX_DESCRIPTORS 64
#define RLS_WIRE_MAX_ENTRIES 16

/* A string of the request: its bytes up to the first NUL, if any (what
 * protobuf-c's NUL-terminated copy reads as), pointing into the message. */
struct rls_wire_str {
	const char *s;
	size_t len;
};

struct rls_wire_descriptor {
	size_t n_entries; /* all of them; the first RLS_WIRE_MAX_ENTRIES kept */
	struct rls_wire_entry {
		struct rls_wire_str key, value;
	} entries[RLS_WIRE_MAX_ENTRIES];
	int has_limit; /* RateLimitOverride limit = 2 */
	uint32_t requests_per_unit;
	int32_t unit;
	int has_hits_addend; /* google.protobuf.UInt64Value hits_addend = 3 */
	uint64_t hits_addend;
};

struct rls_wire_request {
	struct rls_wire_str domain;
	size_t n_descriptors; /* all of them; the first RLS_WIRE_MAX_DESCRIPTORS kept */
	struct rls_wire_descriptor d[RLS_WIRE_MAX_DESCRIPTORS];
	uint32_t hits_addend;
};

/*
 * Reads a RateLimitRequest from msg[0..len) into out, as protobuf-c's
 * unpack would: unknown fields skipped, the last of a field given twice.
 * 0, or -1 for bytes protobuf-c refuses. out points into msg.
 */
int rls_wire_request_read(const uint8_t *msg, size_t len, struct rls_wire_request *out);

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
