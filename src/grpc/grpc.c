/*
 * grpc.c - gRPC unary calls over HTTP/2 (h2c, prior knowledge) with
 * nghttp2: one session per client connection. A stream's headers pick the
 * method and deadline, its DATA is gathered (at most GRPC_MAX_MESSAGE),
 * and at END_STREAM the call starts. Answers go out as HEADERS, one DATA
 * and trailers (grpc-status, grpc-message), or as one HEADERS frame
 * ("Trailers-Only") for an error.
 *
 * A stream outlives its HTTP/2 stream while its call is in flight (the
 * client may reset it, the connection may close): the answer then goes
 * nowhere, and the last one frees the session.
 */
#include "grpc.h"

#include <event2/buffer.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "session.h"
#include "trace.h"

/* RST_STREAMs a client may send per second before the session ends
 * (nghttp2's rapid-reset guard: a burst, then a rate). Envoy cancels
 * calls that pass its timeout: during a stall of ours, many at once. */
#define GRPC_RESET_BURST 10000
#define GRPC_RESET_RATE 1000

/* Call states are recycled per method (one thread): a state is kilobytes,
 * and allocating and freeing one per call showed in profiles. */
#define STATE_POOL_MAX 256
#define METHODS_MAX 8
static void *state_pool[METHODS_MAX][STATE_POOL_MAX];
static size_t state_npool[METHODS_MAX];

static size_t method_index(const struct grpc_method *m)
{
	return (size_t)(m - grpc_methods);
}

static void *state_get(const struct grpc_method *m)
{
	size_t i = method_index(m);
	if (i < METHODS_MAX && state_npool[i])
		return state_pool[i][--state_npool[i]];
	return malloc(m->state_size);
}

static void state_put(const struct grpc_method *m, void *state)
{
	size_t i = method_index(m);
	if (!state)
		return;
	if (i < METHODS_MAX && state_npool[i] < STATE_POOL_MAX)
		state_pool[i][state_npool[i]++] = state;
	else
		free(state);
}

#define STREAM_INLINE 512

struct grpc_stream {
	struct grpc_session *s;
	struct grpc_stream *prev, *next; /* the session's list */
	int32_t id;
	const struct grpc_method *method; /* NULL: unknown path */
	int post, grpc_type;		  /* :method POST, content-type application/grpc */
	int bad_timeout, has_timeout;
	int identity_only; /* grpc-encoding absent or identity */
	int too_big;	   /* the body passed GRPC_MAX_MESSAGE + prefix */
	int started;	   /* the call was handed to its method */
	int cap_counted;   /* cap is counted in the session's buffered */
	int answered;	   /* ... and it answered */
	int gone;	   /* the HTTP/2 stream is closed */
	int64_t timeout_ms;
	char *token; /* authorization: Bearer's (allocated) */
	size_t token_len;
	/* the traceparent metadata (W3C: 55 bytes; a longer one is not kept) */
	char traceparent[64];
	size_t traceparent_len;
	uint64_t received_us; /* its headers read (only while tracing: trace.h) */
	uint8_t *body;
	size_t len, cap;
	/* the answer: the framed message, sent by the data provider */
	uint8_t *out;
	size_t out_len, out_off;
	int status;
	char message[256];
	struct grpc_call call; /* call.state: the method's room (state_get) */
	/* a typical request and answer fit here (no allocation) */
	uint8_t body_inline[STREAM_INLINE], out_inline[STREAM_INLINE];
	struct grpc_stream *pool_next;
};

/* Streams are recycled too, with their inline buffers. */
#define STREAM_POOL_MAX 1024
static struct grpc_stream *stream_pool;
static size_t stream_npool;

static struct grpc_stream *stream_get(void)
{
	struct grpc_stream *st = stream_pool;
	if (st) {
		stream_pool = st->pool_next;
		stream_npool--;
	} else {
		st = malloc(sizeof(*st));
		if (!st)
			return NULL;
	}
	/* every field but the inline buffers, which are written before read */
	memset(st, 0, offsetof(struct grpc_stream, body_inline));
	return st;
}

static void stream_put(struct grpc_stream *st)
{
	if (stream_npool >= STREAM_POOL_MAX) {
		free(st);
		return;
	}
	st->pool_next = stream_pool;
	stream_pool = st;
	stream_npool++;
}

struct grpc_session {
	nghttp2_session *h2;
	struct grpc_host host;
	struct grpc_stream *streams;
	unsigned calls;	 /* started and not answered */
	int freed;	 /* the connection is gone */
	int refused;	 /* a call was refused (store overload) */
	size_t buffered; /* bytes of request bodies held, all streams */
	int failed;	 /* a protocol error: close once the GOAWAY is out */
};

static void stream_unlink(struct grpc_stream *st)
{
	struct grpc_session *s = st->s;
	if (st->prev)
		st->prev->next = st->next;
	else
		s->streams = st->next;
	if (st->next)
		st->next->prev = st->prev;
}

static void stream_free(struct grpc_stream *st)
{
	stream_unlink(st);
	if (st->cap_counted)
		st->s->buffered -= st->cap;
	if (st->call.cfg)
		config_unref(st->call.cfg);
	if (st->method)
		state_put(st->method, st->call.state);
	if (st->body != st->body_inline)
		free(st->body);
	if (st->out != st->out_inline)
		free(st->out);
	if (st->token) {
		memset(st->token, 0, st->token_len);
		free(st->token);
	}
	stream_put(st);
}

static void session_destroy(struct grpc_session *s)
{
	while (s->streams)
		stream_free(s->streams);
	nghttp2_session_del(s->h2);
	free(s);
}

static void ready(struct grpc_session *s)
{
	if (!s->freed)
		s->host.ready(s->host.arg);
}

/* ---- answers ---- */

/* A header field; STATIC_NV when both are string literals (nghttp2 then
 * keeps pointers rather than copies). */
#define NV(n, v)                                                                               \
	{                                                                                      \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE \
	}
#define STATIC_NV(n, v)                                                              \
	{                                                                            \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1,        \
			NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE \
	}


static ssize_t data_read(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length,
			 uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
	(void)user_data;
	struct grpc_stream *st = source->ptr;
	size_t n = st->out_len - st->out_off;
	if (n > length)
		n = length;
	memcpy(buf, st->out + st->out_off, n);
	st->out_off += n;
	if (st->out_off == st->out_len) {
		*data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		/* only an OK answer has a message: its status is 0 */
		nghttp2_nv trailers[] = {STATIC_NV("grpc-status", "0")};
		if (nghttp2_submit_trailer(h2, stream_id, trailers, 1) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

/* Sends st's answer (status, message, st->out) on its HTTP/2 stream. */
static void stream_respond(struct grpc_stream *st)
{
	struct grpc_session *s = st->s;
	int rv;
	if (st->status == GRPC_OK) {
		nghttp2_nv hdrs[] = {STATIC_NV(":status", "200"),
				     STATIC_NV("content-type", "application/grpc"),
				     STATIC_NV("grpc-accept-encoding", "identity")};
		nghttp2_data_provider prd = {.source.ptr = st, .read_callback = data_read};
		rv = nghttp2_submit_response(s->h2, st->id, hdrs, 3, &prd);
	} else {
		char code[4], msg[sizeof(st->message) * 3];
		snprintf(code, sizeof(code), "%d", st->status);
		grpc_message_encode(msg, sizeof(msg), st->message);
		nghttp2_nv hdrs[] = {STATIC_NV(":status", "200"),
				     STATIC_NV("content-type", "application/grpc"),
				     NV("grpc-status", code), NV("grpc-message", msg)};
		rv = nghttp2_submit_response(s->h2, st->id, hdrs, 4, NULL);
	}
	if (rv != 0) /* the stream is gone meanwhile: nothing to answer */
		log_debug("grpc: cannot answer stream %d: %s", st->id, nghttp2_strerror(rv));
	ready(s);
}

static struct grpc_stream *stream_of(struct grpc_call *call)
{
	return (struct grpc_stream *)((char *)call - offsetof(struct grpc_stream, call));
}

/* The call is answered: send it, or drop it when nobody is listening. */
static void call_answered(struct grpc_stream *st)
{
	struct grpc_session *s = st->s;
	st->answered = 1;
	s->calls--;
	if (st->call.cfg) {
		config_unref(st->call.cfg);
		st->call.cfg = NULL;
	}
	if (s->freed) {
		stream_free(st);
		if (s->calls == 0)
			session_destroy(s);
		return;
	}
	if (st->gone) {
		stream_free(st);
		return;
	}
	stream_respond(st);
}

void grpc_call_reply(struct grpc_call *call, const uint8_t *msg, size_t len)
{
	struct grpc_stream *st = stream_of(call);
	st->out = len + GRPC_PREFIX_LEN <= sizeof(st->out_inline) ? st->out_inline
								  : malloc(len + GRPC_PREFIX_LEN);
	if (!st->out) {
		grpc_call_fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	grpc_prefix_put(st->out, (uint32_t)len);
	if (len)
		memcpy(st->out + GRPC_PREFIX_LEN, msg, len);
	st->out_len = len + GRPC_PREFIX_LEN;
	st->status = GRPC_OK;
	call_answered(st);
}

void grpc_call_refused(struct grpc_call *call)
{
	stream_of(call)->s->refused = 1;
}

int grpc_session_take_refused(struct grpc_session *s)
{
	int r = s->refused;
	s->refused = 0;
	return r;
}

void grpc_call_fail(struct grpc_call *call, enum grpc_status status, const char *message)
{
	struct grpc_stream *st = stream_of(call);
	st->status = status;
	snprintf(st->message, sizeof(st->message), "%s", message);
	call_answered(st);
}

/* An answer of the session's own, before any method runs. */
static void stream_refuse(struct grpc_stream *st, enum grpc_status status, const char *message)
{
	st->answered = 1;
	st->status = status;
	snprintf(st->message, sizeof(st->message), "%s", message);
	stream_respond(st);
}

/* ---- requests ---- */

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
	struct grpc_session *s = user_data;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct grpc_stream *st = stream_get();
	if (!st)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
	st->s = s;
	st->id = frame->hd.stream_id;
	st->identity_only = 1;
	st->received_us = trace_on() ? clock_mono_us() : 0;
	st->next = s->streams;
	if (s->streams)
		s->streams->prev = st;
	s->streams = st;
	nghttp2_session_set_stream_user_data(h2, st->id, st);
	return 0;
}

static int name_is(const uint8_t *name, size_t len, const char *want)
{
	return len == strlen(want) && memcmp(name, want, len) == 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user_data)
{
	(void)flags;
	(void)user_data;
	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0; /* trailers of a request: nothing we use */
	struct grpc_stream *st = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
	if (!st)
		return 0;
	if (name_is(name, namelen, ":path")) {
		st->method = NULL;
		for (const struct grpc_method *m = grpc_methods; m->path; m++)
			if (name_is(value, valuelen, m->path))
				st->method = m;
	} else if (name_is(name, namelen, ":method")) {
		st->post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
	} else if (name_is(name, namelen, "content-type")) {
		/* application/grpc, application/grpc+proto, application/grpc;... */
		st->grpc_type = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
				(valuelen == 16 || value[16] == '+' || value[16] == ';');
	} else if (name_is(name, namelen, "grpc-timeout")) {
		st->bad_timeout =
			grpc_timeout_parse((const char *)value, valuelen, &st->timeout_ms) < 0;
		st->has_timeout = 1;
	} else if (name_is(name, namelen, "grpc-encoding")) {
		st->identity_only = valuelen == 8 && memcmp(value, "identity", 8) == 0;
	} else if (name_is(name, namelen, "traceparent")) {
		if (valuelen < sizeof(st->traceparent)) {
			memcpy(st->traceparent, value, valuelen);
			st->traceparent_len = valuelen;
		}
	} else if (name_is(name, namelen, "authorization") && valuelen > 7 &&
		   strncasecmp((const char *)value, "bearer ", 7) == 0 && !st->token) {
		/* a listener with auth: required takes it (the header list is bounded) */
		st->token = malloc(valuelen - 7);
		if (st->token) {
			memcpy(st->token, value + 7, valuelen - 7);
			st->token_len = valuelen - 7;
		}
	}
	return 0;
}

/* A body that will not be read: its memory back, the stream marked so the
 * rest of it is dropped and the call answered with an error at its end. */
static void drop_body(struct grpc_stream *st)
{
	st->too_big = 1;
	st->s->buffered -= st->cap;
	if (st->body != st->body_inline)
		free(st->body);
	st->body = NULL;
	st->len = st->cap = 0;
}

static int on_data_chunk(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *data,
			 size_t len, void *user_data)
{
	(void)flags;
	(void)user_data;
	struct grpc_stream *st = nghttp2_session_get_stream_user_data(h2, stream_id);
	if (!st || st->too_big)
		return 0;
	struct grpc_session *s = st->s;
	if (st->len + len > GRPC_MAX_MESSAGE + GRPC_PREFIX_LEN ||
	    s->buffered + len > GRPC_MAX_BUFFERED) {
		drop_body(st); /* answered at the end of the stream; the rest is dropped */
		return 0;
	}
	if (!st->body && st->len + len <= sizeof(st->body_inline)) {
		st->body = st->body_inline;
		st->cap = sizeof(st->body_inline);
		s->buffered += st->cap;
		st->cap_counted = 1;
	}
	if (st->len + len > st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 1024;
		while (cap < st->len + len)
			cap *= 2;
		uint8_t *b = st->body == st->body_inline ? malloc(cap) : realloc(st->body, cap);
		if (!b) {
			drop_body(st); /* answered RESOURCE_EXHAUSTED at the end of the stream */
			return 0;
		}
		if (st->body == st->body_inline)
			memcpy(b, st->body_inline, st->len);
		s->buffered += cap - st->cap;
		st->cap_counted = 1;
		st->body = b;
		st->cap = cap;
	}
	memcpy(st->body + st->len, data, len);
	st->len += len;
	return 0;
}

static const char *body_problem(enum grpc_body b)
{
	switch (b) {
	case GRPC_BODY_OK:
		return NULL;
	case GRPC_BODY_EMPTY:
		return "the call carries no request message";
	case GRPC_BODY_TRUNCATED:
		return "the request message is cut short";
	case GRPC_BODY_SEVERAL:
		return "a unary call carries exactly one request message";
	case GRPC_BODY_COMPRESSED:
		return "compressed messages are not accepted (grpc-accept-encoding: identity)";
	case GRPC_BODY_BAD_FLAG:
		return "bad message prefix";
	case GRPC_BODY_TOO_BIG:
		return "the request message is too large";
	}
	return "bad request message";
}

/* The request is whole (END_STREAM): check it and start its call. */
static void stream_request(struct grpc_session *s, struct grpc_stream *st)
{
	if (!st->post || !st->grpc_type) {
		/* not gRPC at all: answered as gRPC anyway, for the client's log */
		stream_refuse(
			st, GRPC_INTERNAL,
			"ratelimitd serves gRPC here: POST with content-type application/grpc");
		return;
	}
	if (!st->method) {
		stream_refuse(st, GRPC_UNIMPLEMENTED, "unknown method");
		return;
	}
	if (st->bad_timeout) {
		stream_refuse(st, GRPC_INVALID_ARGUMENT, "malformed grpc-timeout");
		return;
	}
	if (st->has_timeout && st->timeout_ms == 0) {
		stream_refuse(st, GRPC_DEADLINE_EXCEEDED,
			      "grpc-timeout 0: the deadline has passed");
		return;
	}
	if (!st->identity_only) {
		stream_refuse(st, GRPC_UNIMPLEMENTED,
			      "grpc-encoding not accepted (grpc-accept-encoding: identity)");
		return;
	}
	size_t off = 0, mlen = 0;
	enum grpc_body b =
		st->too_big ? GRPC_BODY_TOO_BIG
			    : grpc_body_parse(st->body, st->len, GRPC_MAX_MESSAGE, &off, &mlen);
	if (b != GRPC_BODY_OK) {
		stream_refuse(st,
			      b == GRPC_BODY_TOO_BIG	  ? GRPC_RESOURCE_EXHAUSTED
			      : b == GRPC_BODY_COMPRESSED ? GRPC_UNIMPLEMENTED
							  : GRPC_INTERNAL,
			      body_problem(b));
		return;
	}
	void *state = NULL;
	if (st->method->state_size) {
		/* not zeroed: a call's state is kilobytes, and clearing it
		 * cost more than the rest of the call */
		state = state_get(st->method);
		if (!state) {
			stream_refuse(st, GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	}
	/* the state lives as long as the stream: freed with the body */
	st->call = (struct grpc_call){
		.msg = st->body + off,
		.len = mlen,
		/* a tenth of the deadline is left for the answer's way back */
		.timeout_ms = st->timeout_ms > 0 ? st->timeout_ms - st->timeout_ms / 10 : 0,
		.cfg = *s->host.cfg,
		.env = s->host.env,
		.caller = s->host.caller,
		.token = st->token,
		.token_len = st->token_len,
		.traceparent = st->traceparent_len ? st->traceparent : NULL,
		.traceparent_len = st->traceparent_len,
		.received_us = st->received_us,
		.state = state,
	};
	config_ref(st->call.cfg);
	st->started = 1;
	/* the body is whole: it no longer counts against what the
	 * connection may hold while bodies arrive (the calls in flight are
	 * bounded by the streams) */
	s->buffered -= st->cap;
	st->cap_counted = 0;
	s->calls++;
	st->method->start(&st->call);
	/* the method may have answered already (and the stream be freed) */
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *frame, void *user_data)
{
	struct grpc_session *s = user_data;
	if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
	    !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	struct grpc_stream *st = nghttp2_session_get_stream_user_data(h2, frame->hd.stream_id);
	if (st && !st->started && !st->answered)
		stream_request(s, st);
	return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t stream_id, uint32_t error_code,
			   void *user_data)
{
	(void)error_code;
	(void)user_data;
	struct grpc_stream *st = nghttp2_session_get_stream_user_data(h2, stream_id);
	if (!st)
		return 0;
	nghttp2_session_set_stream_user_data(h2, stream_id, NULL);
	st->gone = 1;
	if (!st->started || st->answered)
		stream_free(st);
	/* else the call's answer frees it */
	return 0;
}

/* ---- the session ---- */

struct grpc_session *grpc_session_new(const struct grpc_host *host)
{
	struct grpc_session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->host = *host;
	nghttp2_session_callbacks *cbs;
	nghttp2_option *opt;
	if (nghttp2_session_callbacks_new(&cbs) != 0) {
		free(s);
		return NULL;
	}
	if (nghttp2_option_new(&opt) != 0) {
		nghttp2_session_callbacks_del(cbs);
		free(s);
		return NULL;
	}
	nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
	/* bounds on what a client can make us hold or send */
	nghttp2_option_set_max_settings(opt, 32);
	nghttp2_option_set_max_outbound_ack(opt, 1000);
	nghttp2_option_set_max_send_header_block_length(opt, 16384);
	nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
	nghttp2_option_set_stream_reset_rate_limit(opt, GRPC_RESET_BURST, GRPC_RESET_RATE);
	nghttp2_option_set_max_continuations(opt, 8);
	int rv = nghttp2_session_server_new2(&s->h2, cbs, s, opt);
	nghttp2_session_callbacks_del(cbs);
	nghttp2_option_del(opt);
	if (rv != 0) {
		free(s);
		return NULL;
	}
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS},
		{NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_MAX_HEADER_LIST},
		{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
	};
	if (nghttp2_submit_settings(s->h2, NGHTTP2_FLAG_NONE, iv, sizeof(iv) / sizeof(iv[0])) !=
	    0) {
		nghttp2_session_del(s->h2);
		free(s);
		return NULL;
	}
	return s;
}

int grpc_session_input(struct grpc_session *s, const uint8_t *buf, size_t len)
{
	if (s->failed)
		return -1;
	ssize_t n = nghttp2_session_mem_recv(s->h2, buf, len);
	if (n < 0) {
		log_debug("grpc: closing a client: %s", nghttp2_strerror((int)n));
		/* nghttp2 queued a GOAWAY for the errors it knows; else end it */
		nghttp2_session_terminate_session(s->h2, NGHTTP2_PROTOCOL_ERROR);
		s->failed = 1;
		ready(s);
		return -1;
	}
	if (nghttp2_session_want_write(s->h2))
		ready(s);
	return 0;
}

ssize_t grpc_session_next(struct grpc_session *s, const uint8_t **data)
{
	ssize_t n = nghttp2_session_mem_send(s->h2, data);
	if (n < 0) {
		log_debug("grpc: %s", nghttp2_strerror((int)n));
		s->failed = 1;
		return -1;
	}
	return n;
}

int grpc_session_output(struct grpc_session *s, struct evbuffer *out)
{
	for (;;) {
		const uint8_t *data;
		ssize_t n = grpc_session_next(s, &data);
		if (n <= 0)
			return (int)n;
		if (evbuffer_add(out, data, (size_t)n) != 0)
			return -1;
	}
}

int grpc_session_over(struct grpc_session *s)
{
	return s->failed ||
	       (!nghttp2_session_want_read(s->h2) && !nghttp2_session_want_write(s->h2));
}

unsigned grpc_session_partial(const struct grpc_session *s)
{
	unsigned n = 0;
	for (const struct grpc_stream *st = s->streams; st; st = st->next)
		n += !st->started && !st->answered && !st->gone;
	return n;
}

void grpc_session_fail_partial(struct grpc_session *s, enum grpc_status status, const char *message)
{
	for (struct grpc_stream *st = s->streams; st; st = st->next)
		if (!st->started && !st->answered && !st->gone) {
			if (!st->too_big)
				drop_body(st); /* what still arrives is dropped */
			stream_refuse(st, status, message);
		}
}

unsigned grpc_session_calls(const struct grpc_session *s)
{
	return s->calls;
}

void grpc_session_drain(struct grpc_session *s)
{
	/* a GOAWAY naming the last stream taken: open calls finish, and
	 * nghttp2 stops wanting to read and write once they have */
	nghttp2_submit_goaway(s->h2, NGHTTP2_FLAG_NONE,
			      nghttp2_session_get_last_proc_stream_id(s->h2), NGHTTP2_NO_ERROR,
			      NULL, 0);
	ready(s);
}

void grpc_pool_free(void)
{
	while (stream_pool) {
		struct grpc_stream *st = stream_pool;
		stream_pool = st->pool_next;
		free(st);
	}
	stream_npool = 0;
	for (size_t i = 0; i < METHODS_MAX; i++) {
		while (state_npool[i])
			free(state_pool[i][--state_npool[i]]);
	}
}

void grpc_session_free(struct grpc_session *s)
{
	if (!s)
		return;
	s->freed = 1;
	/* streams with a call in flight stay until it is answered */
	struct grpc_stream *st = s->streams;
	while (st) {
		struct grpc_stream *next = st->next;
		if (!st->started || st->answered)
			stream_free(st);
		st = next;
	}
	if (s->calls == 0)
		session_destroy(s);
}

/* ---- behind struct session_ops (session.h): the connection's view ---- */

static void *ops_new(const struct frontend *fe, const struct session_host *host,
		     const struct conn_port *port, const struct sockaddr *sa)
{
	(void)fe;
	(void)port;
	(void)sa;
	struct grpc_host h = {
		.cfg = host->cfg,
		.env = host->env,
		.caller = host->caller,
		.ready = host->ready,
		.arg = host->arg,
	};
	return grpc_session_new(&h);
}

/* Every byte received goes to the session (nghttp2 keeps partial frames
 * itself). */
static void ops_input(void *p, struct evbuffer *in, int eof, struct session_step *st)
{
	struct grpc_session *s = p;
	size_t len = evbuffer_get_length(in);
	if (len) {
		const uint8_t *data = evbuffer_pullup(in, (ev_ssize_t)len);
		int rc = data ? grpc_session_input(s, data, len) : -1;
		evbuffer_drain(in, len);
		if (rc < 0)
			st->over = 1; /* the GOAWAY goes out, then the connection closes */
	}
	st->close |= eof;
	st->refused |= grpc_session_take_refused(s);
	st->progress |= len > 0;
}

static ssize_t ops_next(void *p, char *room, size_t len, const char **data, struct session_step *st)
{
	(void)room;
	(void)len;
	const uint8_t *d;
	ssize_t k = grpc_session_next(p, &d);
	if (k < 0)
		st->over = 1; /* nothing more is read, what was received is dropped */
	*data = (const char *)d;
	return k;
}

static void ops_sent(void *p, struct session_step *st)
{
	struct grpc_session *s = p;
	st->over |= grpc_session_over(s);
	st->refused |= grpc_session_take_refused(s);
}

static unsigned ops_calls(const void *p)
{
	return grpc_session_calls(p);
}

static int ops_partial(const void *p, size_t unread)
{
	(void)unread; /* nghttp2 has taken every byte: partial frames are its */
	return grpc_session_partial(p) > 0;
}

static int ops_yes(const void *p)
{
	(void)p;
	return 1;
}

/* A stream begun and not whole: answered DEADLINE_EXCEEDED (and the
 * connection then says goodbye). */
static int ops_timeout(void *p)
{
	struct grpc_session *s = p;
	if (grpc_session_partial(s) == 0)
		return 0; /* what was partial ended meanwhile */
	log_debug("closing a gRPC client whose call was not whole within request_timeout");
	grpc_session_fail_partial(s, GRPC_DEADLINE_EXCEEDED,
				  "the call was not complete within request_timeout");
	return 1;
}

static void ops_goodbye(void *p)
{
	grpc_session_drain(p);
}

static void ops_free(void *p)
{
	grpc_session_free(p);
}

const struct session_ops grpc_session_ops = {
	.new = ops_new,
	.input = ops_input,
	.next = ops_next,
	.sent = ops_sent,
	.owes = ops_calls,
	.inflight = ops_calls,
	.partial = ops_partial,
	.may_resume = ops_yes,
	.has_output = ops_yes,
	.timeout = ops_timeout,
	.goodbye = ops_goodbye,
	.free = ops_free,
	.pool_free = grpc_pool_free,
};
