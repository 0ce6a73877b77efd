/*
 * trace.c - spans of decisions (trace.h): traceparent parsing, the
 * sampling choice, a ring of spans, and their protobuf encoding as OTLP's
 * ExportTraceServiceRequest (opentelemetry-proto's trace, resource and
 * common messages; only the fields below are written).
 */
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "config.h"
#include "pbwire.h"
#include "policy.h"

int trace_enabled;
unsigned long long trace_spans_made, trace_spans_dropped, trace_spans_exported, trace_spans_failed;

enum { KIND_INTERNAL = 1, KIND_SERVER = 2 };

struct span {
	uint8_t trace_id[16], span_id[8], parent_id[8];
	uint8_t has_parent, kind, allowed, child;
	int batch_size; /* "ratelimitd.batch": the requests of its call */
	uint64_t start_ns, end_ns;
	char name[32];
	char action[POLICY_NAME_MAX + 1];
};

static struct {
	int on;
	double sample;
	struct span *ring;
	size_t cap, head, n;
	uint64_t rng;
} T;

static uint64_t next_random(void)
{
	if (!T.rng) {
		if (getrandom(&T.rng, sizeof(T.rng), GRND_NONBLOCK) != sizeof(T.rng)) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			T.rng = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts.tv_sec;
		}
		T.rng |= 1;
	}
	/* splitmix64 */
	uint64_t z = (T.rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void random_id(uint8_t *id, size_t n)
{
	int any = 0;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t r = next_random();
		memcpy(id + i, &r, n - i < 8 ? n - i : 8);
		any |= r != 0;
	}
	if (!any)
		id[n - 1] = 1; /* an id of zeros is invalid */
}

static int hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int hex_bytes(const char *s, uint8_t *out, size_t n)
{
	int any = 0;
	for (size_t i = 0; i < n; i++) {
		int hi = hex(s[2 * i]), lo = hex(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
		any |= out[i];
	}
	return any ? 0 : -1;
}

int trace_parse_parent(const char *s, size_t len, struct cmd_trace *out)
{
	/* version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 */
	if (len < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-')
		return -1;
	int v0 = hex(s[0]), v1 = hex(s[1]);
	if (v0 < 0 || v1 < 0 || (v0 == 15 && v1 == 15))
		return -1; /* version ff is invalid */
	if (v0 == 0 && v1 == 0 && len != 55)
		return -1; /* version 00 is exactly this long */
	if (len > 55 && s[55] != '-')
		return -1; /* a later version goes on after a '-' */
	uint8_t flags;
	if (hex_bytes(s + 3, out->trace_id, 16) < 0 || hex_bytes(s + 36, out->parent_id, 8) < 0)
		return -1;
	int f0 = hex(s[53]), f1 = hex(s[54]);
	if (f0 < 0 || f1 < 0)
		return -1;
	flags = (uint8_t)(f0 << 4 | f1);
	out->has_parent = 1;
	out->sampled = flags & 1;
	return 0;
}

void trace_configure(const struct config_tracing *c)
{
	T.on = trace_enabled = c && c->endpoint;
	if (!T.on)
		return;
	T.sample = c->sample;
	size_t cap = (size_t)c->max_queue;
	if (cap == T.cap)
		return;
	struct span *ring = calloc(cap, sizeof(*ring));
	if (!ring)
		return; /* the old queue stays */
	/* the newest spans that fit move over, whole decisions only (a
	 * decision's spans are queued together, its SERVER span first) */
	size_t keep = T.n < cap ? T.n : cap;
	while (keep > 0 && T.ring[(T.head + T.n - keep) % T.cap].child)
		keep--;
	for (size_t i = 0; i < keep; i++)
		ring[i] = T.ring[(T.head + T.n - keep + i) % T.cap];
	trace_spans_dropped += T.n - keep;
	free(T.ring);
	T.ring = ring;
	T.cap = cap;
	T.head = 0;
	T.n = keep;
}

void trace_begin(struct cmd_trace *t, const char *traceparent, size_t len)
{
	memset(t, 0, sizeof(*t));
	if (!T.on)
		return;
	if (traceparent && trace_parse_parent(traceparent, len, t) == 0) {
		t->on = t->sampled;
		return;
	}
	memset(t, 0, sizeof(*t));
	if (T.sample <= 0 || (double)(next_random() >> 11) * 0x1p-53 >= T.sample)
		return;
	random_id(t->trace_id, 16);
	t->on = 1;
}

/* The next place in the ring (the caller made sure there is one). */
static struct span *push(void)
{
	struct span *s = &T.ring[(T.head + T.n++) % T.cap];
	trace_spans_made++;
	return s;
}

/* A child of parent named name, from start to end (unix nanoseconds). */
static struct span *child(const struct span *parent, const char *name, uint64_t start_ns,
			  uint64_t end_ns)
{
	struct span *c = push();
	*c = *parent;
	memcpy(c->parent_id, parent->span_id, 8);
	c->has_parent = 1;
	random_id(c->span_id, 8);
	c->kind = KIND_INTERNAL;
	c->child = 1;
	c->batch_size = 0;
	c->start_ns = start_ns;
	c->end_ns = end_ns;
	snprintf(c->name, sizeof(c->name), "%s", name);
	return c;
}

/* t clamped into [lo, hi]. */
static uint64_t within(uint64_t t, uint64_t lo, uint64_t hi)
{
	return t < lo ? lo : t > hi ? hi : t;
}

void trace_decision(const struct cmd_trace *t, const char *action, size_t alen, int allowed,
		    const char *source, const struct trace_times *tt)
{
	if (!t->on || !T.on)
		return;
	/* the monotonic times as unix nanoseconds */
	struct timespec wall, mono;
	clock_gettime(CLOCK_REALTIME, &wall);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	int64_t off = ((int64_t)wall.tv_sec - (int64_t)mono.tv_sec) * 1000000000LL +
		      ((int64_t)wall.tv_nsec - (int64_t)mono.tv_nsec);
#define NS(us) ((uint64_t)((int64_t)(us)*1000 + off))
	uint64_t end = tt->end_us;
	uint64_t parsed = tt->parsed_us && tt->parsed_us <= end ? tt->parsed_us : end;
	/* a parse span whenever the bytes' time is known, if only 0 us long */
	int parse = tt->received_us && tt->received_us <= parsed;
	uint64_t start = parse ? tt->received_us : parsed;
	uint64_t asked = tt->asked_us ? within(tt->asked_us, start, end) : end;
	int batch = tt->batch_size > 0 && tt->batch_sent_us && tt->batch_read_us;
	size_t need = 2 + (size_t)parse + (size_t)batch;
	/* a decision's spans go together, or none */
	if (!T.cap || T.cap - T.n < need) {
		trace_spans_dropped += need;
		return;
	}
	struct span *d = push();
	if (alen > POLICY_NAME_MAX)
		alen = POLICY_NAME_MAX;
	memset(d, 0, sizeof(*d));
	memcpy(d->trace_id, t->trace_id, 16);
	random_id(d->span_id, 8);
	if (t->has_parent) {
		memcpy(d->parent_id, t->parent_id, 8);
		d->has_parent = 1;
	}
	d->kind = KIND_SERVER;
	d->allowed = (uint8_t) !!allowed;
	d->start_ns = NS(start);
	d->end_ns = NS(end);
	memcpy(d->name, "ratelimitd.decision", sizeof("ratelimitd.decision"));
	memcpy(d->action, action, alen);
	if (parse)
		child(d, "ratelimitd.parse", NS(start), NS(parsed));
	char name[32];
	snprintf(name, sizeof(name), "ratelimitd.%s", source);
	struct span *c = child(d, name, NS(asked), NS(end));
	if (batch) {
		/* inside its parent: the call went after the store was asked */
		uint64_t sent = within(tt->batch_sent_us, asked, end);
		struct span *b = child(c, "ratelimitd.batch", NS(sent),
				       NS(within(tt->batch_read_us, sent, end)));
		b->batch_size = tt->batch_size;
	}
#undef NS
}

size_t trace_queued(void)
{
	return T.n;
}

/* ---- protobuf ---- */

struct pb {
	uint8_t *p;
	size_t n, cap;
	int full;
};

static void put(struct pb *b, const void *s, size_t n)
{
	if (b->n + n > b->cap) {
		b->full = 1;
		return;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void varint(struct pb *b, uint64_t v)
{
	uint8_t t[10];
	put(b, t, pbwire_varint(t, v));
}

static void tag(struct pb *b, unsigned field, unsigned wire)
{
	varint(b, field << 3 | wire);
}

static void bytes(struct pb *b, unsigned field, const void *s, size_t n)
{
	tag(b, field, 2);
	varint(b, n);
	put(b, s, n);
}

static void fixed64(struct pb *b, unsigned field, uint64_t v)
{
	uint8_t t[8];
	for (int i = 0; i < 8; i++)
		t[i] = (uint8_t)(v >> (8 * i));
	tag(b, field, 1);
	put(b, t, 8);
}

/* A KeyValue{key, value: AnyValue{string_value, bool_value or
 * int_value}} as field: str when not NULL, else number as a bool
 * (boolean 1) or an int. */
static void attr(struct pb *b, unsigned field, const char *key, const char *str, int boolean,
		 int64_t number)
{
	uint8_t tmp[160];
	struct pb kv = {tmp, 0, sizeof(tmp), 0}, v;
	uint8_t vtmp[96];
	v = (struct pb){vtmp, 0, sizeof(vtmp), 0};
	if (str) {
		bytes(&v, 1, str, strlen(str));
	} else {
		tag(&v, boolean ? 2 : 3, 0);
		varint(&v, (uint64_t)number);
	}
	bytes(&kv, 1, key, strlen(key));
	bytes(&kv, 2, v.p, v.n);
	bytes(b, field, kv.p, kv.n);
}

static void encode_span(struct pb *b, const struct span *s)
{
	uint8_t tmp[TRACE_SPAN_ENCODED_MAX - 8];
	struct pb m = {tmp, 0, sizeof(tmp), 0};
	bytes(&m, 1, s->trace_id, 16);
	bytes(&m, 2, s->span_id, 8);
	if (s->has_parent)
		bytes(&m, 4, s->parent_id, 8);
	bytes(&m, 5, s->name, strlen(s->name));
	tag(&m, 6, 0);
	varint(&m, s->kind);
	fixed64(&m, 7, s->start_ns);
	fixed64(&m, 8, s->end_ns);
	attr(&m, 9, "ratelimit.action", s->action, 0, 0);
	if (!s->child)
		attr(&m, 9, "ratelimit.allowed", NULL, 1, s->allowed);
	if (s->batch_size)
		attr(&m, 9, "ratelimit.batch_size", NULL, 0, s->batch_size);
	bytes(b, 2, m.p, m.n); /* ScopeSpans.spans */
}

size_t trace_encode(uint8_t *buf, size_t cap, size_t max, size_t *n)
{
	*n = 0;
	if (!T.n || max == 0)
		return 0;
	size_t take = T.n < max ? T.n : max;
	/* ScopeSpans{scope{name, version}, spans...} */
	size_t scap = take * TRACE_SPAN_ENCODED_MAX + 128;
	uint8_t *sbuf = malloc(scap);
	if (!sbuf)
		return 0;
	struct pb ss = {sbuf, 0, scap, 0};
	uint8_t scope[64];
	struct pb sc = {scope, 0, sizeof(scope), 0};
	bytes(&sc, 1, "ratelimitd", 10);
	bytes(&sc, 2, RATELIMITD_VERSION, strlen(RATELIMITD_VERSION));
	bytes(&ss, 1, sc.p, sc.n);
	for (size_t i = 0; i < take; i++)
		encode_span(&ss, &T.ring[(T.head + i) % T.cap]);
	/* ResourceSpans{resource{attributes: service.name}, scope_spans} */
	uint8_t res[96];
	struct pb r = {res, 0, sizeof(res), 0};
	attr(&r, 1, "service.name", "ratelimitd", 0, 0);
	struct pb out = {buf, 0, cap, 0};
	/* the ResourceSpans message's length: its two fields */
	size_t rs_len = 1 + pbwire_varint_len(r.n) + r.n + 1 + pbwire_varint_len(ss.n) + ss.n;
	tag(&out, 1, 2); /* ExportTraceServiceRequest.resource_spans */
	varint(&out, rs_len);
	bytes(&out, 1, r.p, r.n);
	bytes(&out, 2, ss.p, ss.n);
	free(sbuf);
	if (out.full || ss.full)
		return 0;
	T.head = (T.head + take) % T.cap;
	T.n -= take;
	*n = take;
	return out.n;
}
