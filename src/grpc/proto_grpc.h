/*
 * proto_grpc.h - gRPC's own framing, pure: the 5-byte prefix of a message
 * and the grpc-timeout header. No I/O, no allocation; fuzzed with the
 * session (fuzz/fuzz_grpc.c).
 */
#ifndef RL_PROTO_GRPC_H
#define RL_PROTO_GRPC_H

#include <stddef.h>
#include <stdint.h>

#define GRPC_PREFIX_LEN 5

/* gRPC status codes (grpc/doc/statuscodes.md), the ones we answer. */
enum grpc_status {
	GRPC_OK = 0,
	GRPC_CANCELLED = 1,
	GRPC_UNKNOWN = 2,
	GRPC_INVALID_ARGUMENT = 3,
	GRPC_DEADLINE_EXCEEDED = 4,
	GRPC_NOT_FOUND = 5,
	GRPC_PERMISSION_DENIED = 7,
	GRPC_RESOURCE_EXHAUSTED = 8,
	GRPC_UNIMPLEMENTED = 12,
	GRPC_INTERNAL = 13,
	GRPC_UNAVAILABLE = 14,
	GRPC_UNAUTHENTICATED = 16,
};

/* What a unary call's body (the DATA of its stream, whole) holds. */
enum grpc_body {
	GRPC_BODY_OK,	      /* one message: msg_off, msg_len */
	GRPC_BODY_EMPTY,      /* no message at all */
	GRPC_BODY_TRUNCATED,  /* a prefix or message cut short */
	GRPC_BODY_SEVERAL,    /* more than one message: a unary call has one */
	GRPC_BODY_COMPRESSED, /* compressed flag set: we accept identity only */
	GRPC_BODY_BAD_FLAG,   /* a flag byte other than 0 or 1 */
	GRPC_BODY_TOO_BIG,    /* the message is longer than max */
};

/* Checks body[0..len) of a unary call; on GRPC_BODY_OK the message is
 * body[*msg_off .. *msg_off + *msg_len). */
enum grpc_body grpc_body_parse(const uint8_t *body, size_t len, size_t max, size_t *msg_off,
			       size_t *msg_len);

/* Writes the prefix of an uncompressed message of msg_len bytes. */
void grpc_prefix_put(uint8_t *dst, uint32_t msg_len);

/* grpc-timeout: 1-8 digits and a unit (H M S m u n) -> milliseconds,
 * rounded up (a nonzero timeout is at least 1 ms). 0, or -1 when malformed. */
int grpc_timeout_parse(const char *s, size_t len, int64_t *ms);

/* Room for grpc_timeout_format's text: 8 digits, a unit, the NUL. */
#define GRPC_TIMEOUT_MAX 10

/* grpc-timeout for a deadline ms from now: at most 8 digits in the finest
 * unit they fit (m, S, M, H), rounded up, so that grpc_timeout_parse gives
 * back at least ms, and at least 1 ms (0 or less: "1m"; beyond 99999999 H:
 * that). Writes dst (GRPC_TIMEOUT_MAX bytes) and returns its length. */
size_t grpc_timeout_format(char *dst, int64_t ms);

/* grpc-message's value: percent-encodes bytes outside 0x20-0x7E and '%'
 * into dst (at most dstlen - 1 bytes, NUL-terminated, never cut in the
 * middle of an escape); returns the length. */
size_t grpc_message_encode(char *dst, size_t dstlen, const char *msg);

/* "OK", "INVALID_ARGUMENT", ... */
const char *grpc_status_name(enum grpc_status s);

#endif
