/*
 * refuse_msg.h - what an HTTP/2 (gRPC) client refused at max_clients is
 * told, pure: the scan of its opening bytes for its first stream, and the
 * frames that answer that stream and end the connection. No I/O, no
 * allocation (refuse.c does the sockets; an in-order protocol's refusal is
 * its own error reply, proto_refusal).
 */
#ifndef RL_REFUSE_MSG_H
#define RL_REFUSE_MSG_H

#include <stddef.h>
#include <stdint.h>

/* The server's connection preface: an empty SETTINGS frame. */
#define REFUSE_H2_SETTINGS_LEN 9
extern const uint8_t refuse_h2_settings[REFUSE_H2_SETTINGS_LEN];

/* Bytes of an HTTP/2 client's opening looked through for its first
 * HEADERS frame; past this the client gets the stream-less goodbye. */
#define REFUSE_H2_SCAN_MAX 65536

/* Where the scan of a client's bytes is: zero it to begin. */
struct refuse_h2_scan {
	uint32_t seen;	  /* bytes taken so far */
	uint32_t skip;	  /* payload bytes of the current frame still to pass */
	uint8_t hdr[9];	  /* the frame header being gathered */
	uint8_t nhdr;	  /* its bytes so far */
	uint8_t settings; /* the client sent its SETTINGS: acknowledge them */
	uint32_t stream;  /* the first stream, once found */
};

enum refuse_h2_found {
	REFUSE_H2_MORE,	  /* no HEADERS frame yet: feed more */
	REFUSE_H2_STREAM, /* s->stream is the client's first stream */
	REFUSE_H2_NONE,	  /* not an HTTP/2 preface, a bad stream id, or too
			   * much before a stream: answer without a stream */
};

/* Takes the next n bytes the client sent. Once it returned something
 * other than REFUSE_H2_MORE, feed it no more. */
enum refuse_h2_found refuse_h2_feed(struct refuse_h2_scan *s, const uint8_t *p, size_t n);

/* Enough for any refuse_h2_goodbye. */
#define REFUSE_H2_GOODBYE_MAX 256

/*
 * The end of a refused HTTP/2 connection, after refuse_h2_settings: a
 * SETTINGS acknowledgement when ack, then, when stream is nonzero, that
 * stream answered as a failed gRPC call (Trailers-Only: grpc-status 14
 * UNAVAILABLE, grpc-message "too-many-clients max_clients reached"), then a
 * GOAWAY naming stream as the last one taken (ENHANCE_YOUR_CALM, the same
 * text as debug data). Writes into dst (at least REFUSE_H2_GOODBYE_MAX
 * bytes) and returns the length.
 */
size_t refuse_h2_goodbye(uint8_t *dst, uint32_t stream, int ack);

#endif
