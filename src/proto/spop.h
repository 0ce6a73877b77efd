/*
 * spop.h - HAProxy's Stream Processing Offload Protocol (SPOP 2.0, doc/
 * SPOE.txt of HAProxy 2.6), the bytes only: frames read from a buffer and
 * written into one, their key/value lists, messages and typed data. No I/O,
 * no state: the front end that speaks it to HAProxy (issue 47) keeps the
 * connection's. Every read is bounded by its buffer; nothing read points
 * outside it.
 */
#ifndef RL_SPOP_H
#define RL_SPOP_H

#include <stddef.h>
#include <stdint.h>

/* A frame's 4-byte length prefix, and the least max-frame-size a peer may
 * announce (SPOE.txt: at least 256). */
#define SPOP_LEN_SIZE 4
#define SPOP_FRAME_MIN 256
/* The most an agent offers (HAProxy's default max-frame-size is 16384). */
#define SPOP_FRAME_MAX 16384

enum spop_frame_type {
	SPOP_UNSET = 0, /* a fragment after the first */
	SPOP_HAPROXY_HELLO = 1,
	SPOP_HAPROXY_DISCONNECT = 2,
	SPOP_NOTIFY = 3,
	SPOP_AGENT_HELLO = 101,
	SPOP_AGENT_DISCONNECT = 102,
	SPOP_ACK = 103,
};

#define SPOP_FLAG_FIN 1u   /* the payload's last fragment (or only frame) */
#define SPOP_FLAG_ABORT 2u /* a fragmented payload given up */

enum spop_data_type {
	SPOP_NULL = 0,
	SPOP_BOOL = 1,
	SPOP_INT32 = 2,
	SPOP_UINT32 = 3,
	SPOP_INT64 = 4,
	SPOP_UINT64 = 5,
	SPOP_IPV4 = 6,
	SPOP_IPV6 = 7,
	SPOP_STRING = 8,
	SPOP_BINARY = 9,
};

/* The status codes of a DISCONNECT (SPOE.txt 3.5); agents may add theirs. */
enum spop_status {
	SPOP_ST_NONE = 0,
	SPOP_ST_IO = 1,
	SPOP_ST_TIMEOUT = 2,
	SPOP_ST_TOO_BIG = 3,
	SPOP_ST_INVALID = 4,
	SPOP_ST_NO_VSN = 5,
	SPOP_ST_NO_FRAME_SIZE = 6,
	SPOP_ST_NO_CAP = 7,
	SPOP_ST_BAD_VSN = 8,
	SPOP_ST_BAD_FRAME_SIZE = 9,
	SPOP_ST_FRAG_NOT_SUPPORTED = 10,
	SPOP_ST_INTERLACED_FRAMES = 11,
	SPOP_ST_FRAMEID_NOTFOUND = 12,
	SPOP_ST_RES_ALLOC = 13,
	SPOP_ST_UNKNOWN = 99,
};

/* A variable's scope in an ACK's set-var. */
enum spop_scope {
	SPOP_SCOPE_PROC = 0,
	SPOP_SCOPE_SESS = 1,
	SPOP_SCOPE_TXN = 2,
	SPOP_SCOPE_REQ = 3,
	SPOP_SCOPE_RES = 4,
};

/* A typed value, pointing into the buffer it was read from. */
struct spop_value {
	enum spop_data_type type;
	int boolean;	 /* SPOP_BOOL */
	int64_t i;	 /* SPOP_INT32, SPOP_INT64 (and the unsigned ones that fit) */
	uint64_t u;	 /* SPOP_UINT32, SPOP_UINT64 (and the signed ones >= 0) */
	uint8_t ip[16];	 /* SPOP_IPV4 (4 bytes), SPOP_IPV6 */
	const char *str; /* SPOP_STRING, SPOP_BINARY */
	size_t len;
};

/* One frame, its payload pointing into the buffer it was read from. */
struct spop_frame {
	unsigned type; /* enum spop_frame_type, or another (to be skipped) */
	uint32_t flags;
	uint64_t stream_id, frame_id;
	const uint8_t *payload;
	size_t payload_len;
};

/* What spop_frame_read found. */
enum spop_read {
	SPOP_READ_FRAME,     /* *f and *used: the frame and its bytes, prefix included */
	SPOP_READ_NEED_MORE, /* not yet a whole frame */
	SPOP_READ_TOO_BIG,   /* its length is above max_frame: SPOP_ST_TOO_BIG */
	SPOP_READ_INVALID,   /* not a frame: SPOP_ST_INVALID */
};

/* The frame at buf[0..len), if whole, no longer than max_frame (the length
 * prefix excluded, as HAProxy counts it). */
enum spop_read spop_frame_read(const uint8_t *buf, size_t len, size_t max_frame,
			       struct spop_frame *f, size_t *used);

/* A cursor over a payload (a KV-LIST, a LIST-OF-MESSAGES, an argument list). */
struct spop_cursor {
	const uint8_t *p, *end;
};

/* The next varint (HAProxy's encoding): 0, or -1 at a bad or cut one. */
int spop_varint_read(struct spop_cursor *c, uint64_t *v);
/* The next typed value: 0, or -1 (cut, an unknown type, a 32-bit value
 * out of its range). */
int spop_value_read(struct spop_cursor *c, struct spop_value *v);
/* The next KV of a KV-LIST: 1 with *name and *v, 0 at its end, -1 when
 * malformed. */
int spop_kv_next(struct spop_cursor *c, const char **name, size_t *name_len, struct spop_value *v);
/* The next message of a NOTIFY: 1 with its name, its argument count and a
 * cursor over its arguments (nargs KVs, spop_kv_next), the outer cursor
 * moved past them; 0 at the end; -1 when malformed. */
int spop_message_next(struct spop_cursor *c, const char **name, size_t *name_len, int *nargs,
		      struct spop_cursor *args);

/* A writer into buf[0..cap): every spop_put_* appends, or sets failed when
 * the room runs out (nothing after that is written). */
struct spop_writer {
	uint8_t *buf;
	size_t cap, len;
	int failed;
};

void spop_put_varint(struct spop_writer *w, uint64_t v);
void spop_put_string(struct spop_writer *w, const char *s, size_t len);
/* A typed value: the string kinds take str and len, IPs ip. */
void spop_put_value(struct spop_writer *w, const struct spop_value *v);

/* Starts a frame (its length filled by spop_frame_end): the type, FIN, and
 * the ids. */
void spop_frame_begin(struct spop_writer *w, enum spop_frame_type type, uint64_t stream_id,
		      uint64_t frame_id);
/* Ends the frame begun at buf[0]: its length prefix. 0, or -1 when it did
 * not fit (w->failed) or is above max_frame. */
int spop_frame_end(struct spop_writer *w, size_t max_frame);

/* The KV items of a HELLO or a DISCONNECT. */
void spop_put_kv_string(struct spop_writer *w, const char *name, const char *value);
void spop_put_kv_uint32(struct spop_writer *w, const char *name, uint32_t value);
/* An ACK's set-var action: scope, name, value. */
void spop_put_set_var(struct spop_writer *w, enum spop_scope scope, const char *name,
		      const struct spop_value *v);

/* Whether list (a comma-separated list, blanks ignored, as HAProxy's
 * capabilities and versions) holds word. */
int spop_list_has(const char *list, size_t len, const char *word);

#endif
