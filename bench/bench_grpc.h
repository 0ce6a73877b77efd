/*
 * bench_grpc.h - the bytes of Envoy's ShouldRateLimit calls over HTTP/2
 * cleartext (prior knowledge) for ratelimit-bench, and a reader of the
 * frames that come back. No I/O and no allocation: the caller owns the
 * buffers and the socket.
 *
 * Why not h2load: on a 2-core box the client shares the cores with Redis and
 * the daemon, and h2load (a general HTTP/2 client) spends more per call than
 * the daemon does, so it measured itself as much as the daemon. This client
 * sends one precomputed header block per call and decodes only what it needs
 * of the answer: the frame headers, the message's overall_code, and
 * END_STREAM.
 */
#ifndef RL_BENCH_GRPC_H
#define RL_BENCH_GRPC_H

#include <stddef.h>
#include <stdint.h>

#define BENCH_GRPC_DESCRIPTORS_MAX 4
/* The connection's preface, SETTINGS and WINDOW_UPDATE fit in this. */
#define BENCH_GRPC_PREFACE_MAX 64
/* A frame we answer (SETTINGS ack, PING ack, WINDOW_UPDATE) fits in this. */
#define BENCH_GRPC_CONTROL_MAX 32
#define BENCH_GRPC_FRAME_HEADER 9

/* What every call of a run shares. */
struct bench_grpc_call {
	char block[256]; /* the request's HPACK header block */
	size_t block_len;
	char domain[64];
	size_t domain_len;
	const char *key; /* the per-user descriptor's one entry: (key, <user>) */
	size_t key_len;
	char fixed[512]; /* the constant descriptors after it, encoded */
	size_t fixed_len;
	int64_t hits; /* hits_addend; 0: not sent (Envoy's default of 1) */
};

/* A connection's HTTP/2 state as far as the client needs it. */
struct bench_grpc_conn {
	uint32_t next_stream;	   /* the next stream id (odd) */
	uint32_t max_streams;	   /* the server's SETTINGS_MAX_CONCURRENT_STREAMS */
	int64_t send_window;	   /* the connection's window for our DATA */
	int64_t stream_window;	   /* the server's initial window per stream */
	uint64_t received_unacked; /* DATA bytes since our last WINDOW_UPDATE */
};

/*
 * Fills call for the path's one method: descriptors[0] is "KEY" (the user
 * goes after it per call), the rest "KEY=VALUE" pairs sent unchanged.
 * 0, or -1 with err (a part too long for this client's fixed buffers).
 */
int bench_grpc_call_init(struct bench_grpc_call *call, const char *authority, const char *domain,
			 const char *const *descriptors, int n, int64_t hits, char *err,
			 size_t errlen);

/* The most bytes one call takes (HEADERS and DATA frames) with a user of
 * at most user_max bytes. */
size_t bench_grpc_call_max(const struct bench_grpc_call *call, size_t user_max);

/* Starts a connection's state; writes the client preface, our SETTINGS and
 * a connection WINDOW_UPDATE at p; returns their length. */
size_t bench_grpc_conn_start(struct bench_grpc_conn *g, char *p);

/* Writes one call for user on a new stream at p; returns its length and
 * the stream id in *stream. */
size_t bench_grpc_call_put(struct bench_grpc_conn *g, const struct bench_grpc_call *call,
			   const char *user, size_t user_len, char *p, uint32_t *stream);

/* One frame read by bench_grpc_frame. */
enum bench_grpc_event {
	BENCH_GRPC_NONE,   /* nothing for the caller (answered in reply[] if needed) */
	BENCH_GRPC_ANSWER, /* a stream's message: code is its overall_code (0: none) */
	BENCH_GRPC_RESET,  /* a stream was reset by the server */
	BENCH_GRPC_GOAWAY, /* the server closes the connection */
};

struct bench_grpc_frame {
	enum bench_grpc_event event;
	uint32_t stream;
	int code;			    /* BENCH_GRPC_ANSWER: 1 OK, 2 OVER_LIMIT, 0 unknown */
	int end;			    /* the stream ends with this frame (END_STREAM) */
	char reply[BENCH_GRPC_CONTROL_MAX]; /* bytes to send back, reply_len of them */
	size_t reply_len;
};

/*
 * Reads one frame from p[0..n): returns the bytes it took (the frame's
 * event in *f), 0 when the frame is not complete yet, -1 when the bytes are
 * not HTTP/2 a server may send (too long a frame among them).
 */
long bench_grpc_frame(struct bench_grpc_conn *g, const char *p, size_t n,
		      struct bench_grpc_frame *f);

/* Whether another call may start now: within the server's stream limit
 * (open: calls in flight) and its window for our DATA. */
int bench_grpc_may_send(const struct bench_grpc_conn *g, const struct bench_grpc_call *call,
			size_t user_max, unsigned open);

#endif
