/*
 * bench_grpc.c - ShouldRateLimit calls over h2c for ratelimit-bench: the
 * HPACK header block built once, the protobuf body per call, and a reader
 * for the frames the server sends (RFC 9113; RFC 7541 for the block).
 */
#include "bench_grpc.h"

#include "pbwire.h"

#include <stdio.h>
#include <string.h>

#define FRAME_DATA 0x0
#define FRAME_HEADERS 0x1
#define FRAME_RST_STREAM 0x3
#define FRAME_SETTINGS 0x4
#define FRAME_PING 0x6
#define FRAME_GOAWAY 0x7
#define FRAME_WINDOW_UPDATE 0x8
#define FLAG_END_STREAM 0x1
#define FLAG_ACK 0x1
#define FLAG_END_HEADERS 0x4
#define FLAG_PADDED 0x8
#define SETTINGS_MAX_CONCURRENT_STREAMS 0x3
#define SETTINGS_INITIAL_WINDOW_SIZE 0x4
#define DEFAULT_WINDOW 65535
/* What we let the server send before we say we read it: a connection's
 * window, raised at the start and topped up at half. */
#define OUR_WINDOW (1 << 30)
/* The largest frame a server may send us (its SETTINGS_MAX_FRAME_SIZE
 * default; we never raise it). */
#define FRAME_MAX 16384
#define PATH "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

static size_t put_frame_header(char *p, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream)
{
	p[0] = (char)(len >> 16);
	p[1] = (char)(len >> 8);
	p[2] = (char)len;
	p[3] = (char)type;
	p[4] = (char)flags;
	p[5] = (char)(stream >> 24 & 0x7f);
	p[6] = (char)(stream >> 16);
	p[7] = (char)(stream >> 8);
	p[8] = (char)stream;
	return BENCH_GRPC_FRAME_HEADER;
}

static uint32_t get32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;
	return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static size_t put_varint(char *p, uint64_t v)
{
	return pbwire_varint((uint8_t *)p, v);
}

/* A length-delimited protobuf field: tag, length, bytes. */
static size_t put_field(char *p, unsigned field, const char *b, size_t len)
{
	size_t n = put_varint(p, field << 3 | 2);
	n += put_varint(p + n, len);
	memcpy(p + n, b, len);
	return n + len;
}

/* An HPACK string, not Huffman-coded; len < 127 (the caller checks). */
static size_t put_hstr(char *p, const char *s, size_t len)
{
	p[0] = (char)len;
	memcpy(p + 1, s, len);
	return len + 1;
}

/* One descriptor of one entry: RateLimitDescriptor{entries: [{key, value}]}. */
static size_t put_descriptor(char *p, const char *k, size_t kl, const char *v, size_t vl)
{
	char entry[256], desc[300];
	size_t e = put_field(entry, 1, k, kl);
	e += put_field(entry + e, 2, v, vl);
	size_t d = put_field(desc, 1, entry, e);
	return put_field(p, 2, desc, d);
}

int bench_grpc_call_init(struct bench_grpc_call *call, const char *authority, const char *domain,
			 const char *const *descriptors, int n, int64_t hits, char *err,
			 size_t errlen)
{
	memset(call, 0, sizeof(*call));
	size_t al = strlen(authority), dl = strlen(domain);
	if (al > 100 || dl > sizeof(call->domain) - 1 || n < 1 || n > BENCH_GRPC_DESCRIPTORS_MAX) {
		snprintf(err, errlen,
			 "gRPC: the domain, the address or the descriptors are too long");
		return -1;
	}
	/* :method POST and :scheme http are in HPACK's static table (3, 6);
	 * :path, :authority and content-type name it (4, 1, 31), te does not.
	 * Literals without indexing: the same bytes serve every call. */
	char *b = call->block;
	size_t k = 0;
	b[k++] = (char)0x83;
	b[k++] = (char)0x86;
	b[k++] = 0x04;
	k += put_hstr(b + k, PATH, strlen(PATH));
	b[k++] = 0x01;
	k += put_hstr(b + k, authority, al);
	b[k++] = 0x0f; /* name index 31: 15 + 16 */
	b[k++] = 0x10;
	k += put_hstr(b + k, "application/grpc", 16);
	b[k++] = 0x00;
	k += put_hstr(b + k, "te", 2);
	k += put_hstr(b + k, "trailers", 8);
	call->block_len = k;
	memcpy(call->domain, domain, dl);
	call->domain_len = dl;
	call->key = descriptors[0];
	call->key_len = strlen(descriptors[0]);
	if (call->key_len == 0 || call->key_len > 64) {
		snprintf(err, errlen, "gRPC: bad descriptor key \"%s\"", descriptors[0]);
		return -1;
	}
	for (int i = 1; i < n; i++) {
		const char *eq = strchr(descriptors[i], '=');
		size_t kl = eq ? (size_t)(eq - descriptors[i]) : 0, vl = eq ? strlen(eq + 1) : 0;
		if (!eq || kl == 0 || vl == 0 || kl > 64 || vl > 64) {
			snprintf(err, errlen,
				 "gRPC: a descriptor is KEY=VALUE, each 1 to 64 bytes: %s",
				 descriptors[i]);
			return -1;
		}
		call->fixed_len += put_descriptor(call->fixed + call->fixed_len, descriptors[i], kl,
						  eq + 1, vl);
	}
	call->hits = hits;
	return 0;
}

size_t bench_grpc_call_max(const struct bench_grpc_call *call, size_t user_max)
{
	/* HEADERS frame, DATA frame, the gRPC prefix and the message */
	return 2 * BENCH_GRPC_FRAME_HEADER + call->block_len + 5 + 2 + call->domain_len + 16 +
	       call->key_len + user_max + call->fixed_len + 12;
}

size_t bench_grpc_conn_start(struct bench_grpc_conn *g, char *p)
{
	g->next_stream = 1;
	g->max_streams = UINT32_MAX;
	g->send_window = DEFAULT_WINDOW;
	g->stream_window = DEFAULT_WINDOW;
	g->received_unacked = 0;
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	size_t n = sizeof(preface) - 1;
	memcpy(p, preface, n);
	/* SETTINGS: no push (2 = 0), our streams' window (4) */
	n += put_frame_header(p + n, 12, FRAME_SETTINGS, 0, 0);
	static const char settings[12] = {0, 2, 0, 0, 0, 0, 0, 4, 0x40, 0, 0, 0};
	memcpy(p + n, settings, sizeof(settings));
	n += sizeof(settings);
	n += put_frame_header(p + n, 4, FRAME_WINDOW_UPDATE, 0, 0);
	uint32_t inc = OUR_WINDOW - DEFAULT_WINDOW;
	p[n++] = (char)(inc >> 24);
	p[n++] = (char)(inc >> 16);
	p[n++] = (char)(inc >> 8);
	p[n++] = (char)inc;
	return n;
}

/* The DATA frame's payload length of one call for a user of user_len. */
static size_t call_message_len(const struct bench_grpc_call *call, size_t user_len, size_t *desc)
{
	size_t e = 2 + call->key_len + 1 + pbwire_varint_len(user_len) + user_len;
	size_t d = 1 + pbwire_varint_len(e) + e;
	*desc = d;
	size_t m = 1 + pbwire_varint_len(call->domain_len) + call->domain_len + 1 +
		   pbwire_varint_len(d) + d + call->fixed_len;
	if (call->hits)
		m += 1 + pbwire_varint_len((uint64_t)call->hits);
	return m;
}

size_t bench_grpc_call_put(struct bench_grpc_conn *g, const struct bench_grpc_call *call,
			   const char *user, size_t user_len, char *p, uint32_t *stream)
{
	uint32_t id = g->next_stream;
	g->next_stream += 2;
	*stream = id;
	size_t n =
		put_frame_header(p, (uint32_t)call->block_len, FRAME_HEADERS, FLAG_END_HEADERS, id);
	memcpy(p + n, call->block, call->block_len);
	n += call->block_len;
	size_t desc;
	size_t m = call_message_len(call, user_len, &desc);
	n += put_frame_header(p + n, (uint32_t)(5 + m), FRAME_DATA, FLAG_END_STREAM, id);
	p[n++] = 0; /* not compressed */
	p[n++] = (char)(m >> 24);
	p[n++] = (char)(m >> 16);
	p[n++] = (char)(m >> 8);
	p[n++] = (char)m;
	n += put_field(p + n, 1, call->domain, call->domain_len);
	/* descriptors[0]: {entries: [{key, user}]}, built in place */
	n += put_varint(p + n, 2 << 3 | 2);
	n += put_varint(p + n, desc);
	size_t e = 2 + call->key_len + 1 + pbwire_varint_len(user_len) + user_len;
	n += put_varint(p + n, 1 << 3 | 2);
	n += put_varint(p + n, e);
	n += put_field(p + n, 1, call->key, call->key_len);
	n += put_field(p + n, 2, user, user_len);
	memcpy(p + n, call->fixed, call->fixed_len);
	n += call->fixed_len;
	if (call->hits) {
		p[n++] = 3 << 3;
		n += put_varint(p + n, (uint64_t)call->hits);
	}
	g->send_window -= (int64_t)(5 + m);
	return n;
}

int bench_grpc_may_send(const struct bench_grpc_conn *g, const struct bench_grpc_call *call,
			size_t user_max, unsigned open)
{
	size_t desc;
	int64_t m = 5 + (int64_t)call_message_len(call, user_max, &desc);
	return open < g->max_streams && g->send_window >= m && g->stream_window >= m &&
	       g->next_stream < 0x7ffffff0u;
}

/* The overall_code of a RateLimitResponse (field 1, a varint): 0 if the
 * message does not start with it. */
static int overall_code(const unsigned char *m, size_t len)
{
	if (len < 2 || m[0] != 0x08 || m[1] >= 0x80)
		return 0;
	return m[1];
}

long bench_grpc_frame(struct bench_grpc_conn *g, const char *p, size_t n,
		      struct bench_grpc_frame *f)
{
	if (n < BENCH_GRPC_FRAME_HEADER)
		return 0;
	const unsigned char *u = (const unsigned char *)p;
	uint32_t len = (uint32_t)u[0] << 16 | (uint32_t)u[1] << 8 | u[2];
	uint8_t type = u[3], flags = u[4];
	uint32_t stream = get32(p + 5) & 0x7fffffff;
	if (len > FRAME_MAX)
		return -1;
	if (n < BENCH_GRPC_FRAME_HEADER + len)
		return 0;
	const char *pl = p + BENCH_GRPC_FRAME_HEADER;
	f->event = BENCH_GRPC_NONE;
	f->stream = stream;
	f->code = 0;
	f->end = 0;
	f->reply_len = 0;
	switch (type) {
	case FRAME_DATA: {
		g->received_unacked += len;
		if (g->received_unacked >= OUR_WINDOW / 2) {
			/* the connection's window: say we read it */
			uint32_t inc = (uint32_t)g->received_unacked;
			size_t k = put_frame_header(f->reply, 4, FRAME_WINDOW_UPDATE, 0, 0);
			f->reply[k++] = (char)(inc >> 24);
			f->reply[k++] = (char)(inc >> 16);
			f->reply[k++] = (char)(inc >> 8);
			f->reply[k++] = (char)inc;
			f->reply_len = k;
			g->received_unacked = 0;
		}
		size_t pad = 0, off = 0;
		if (flags & FLAG_PADDED) {
			if (len < 1)
				return -1;
			pad = u[BENCH_GRPC_FRAME_HEADER];
			off = 1;
			if (off + pad > len)
				return -1;
		}
		size_t body = len - off - pad;
		const unsigned char *b = u + BENCH_GRPC_FRAME_HEADER + off;
		if (stream == 0)
			return -1;
		if (body >= 5 && b[0] == 0) {
			f->event = BENCH_GRPC_ANSWER;
			f->code = overall_code(b + 5, body - 5);
		}
		f->end = (flags & FLAG_END_STREAM) != 0; /* no trailers: still the end */
		break;
	}
	case FRAME_HEADERS:
		if (stream == 0)
			return -1;
		f->end = (flags & FLAG_END_STREAM) != 0;
		break;
	case FRAME_RST_STREAM:
		if (stream == 0 || len != 4)
			return -1;
		f->event = BENCH_GRPC_RESET;
		break;
	case FRAME_SETTINGS:
		if (stream != 0 || len % 6)
			return -1;
		if (flags & FLAG_ACK)
			break;
		for (uint32_t i = 0; i < len; i += 6) {
			unsigned id = (unsigned)u[BENCH_GRPC_FRAME_HEADER + i] << 8 |
				      u[BENCH_GRPC_FRAME_HEADER + i + 1];
			uint32_t v = get32(pl + i + 2);
			if (id == SETTINGS_MAX_CONCURRENT_STREAMS)
				g->max_streams = v;
			else if (id == SETTINGS_INITIAL_WINDOW_SIZE)
				g->stream_window = v;
		}
		f->reply_len = put_frame_header(f->reply, 0, FRAME_SETTINGS, FLAG_ACK, 0);
		break;
	case FRAME_PING:
		if (stream != 0 || len != 8)
			return -1;
		if (flags & FLAG_ACK)
			break;
		f->reply_len = put_frame_header(f->reply, 8, FRAME_PING, FLAG_ACK, 0);
		memcpy(f->reply + f->reply_len, pl, 8);
		f->reply_len += 8;
		break;
	case FRAME_GOAWAY:
		f->event = BENCH_GRPC_GOAWAY;
		break;
	case FRAME_WINDOW_UPDATE:
		if (len != 4)
			return -1;
		if (stream == 0)
			g->send_window += get32(pl) & 0x7fffffff;
		/* a stream's: each call sends one small DATA frame and is done */
		break;
	default: /* PRIORITY, CONTINUATION, PUSH_PROMISE (refused), unknown: ignored */
		break;
	}
	return (long)(BENCH_GRPC_FRAME_HEADER + len);
}
