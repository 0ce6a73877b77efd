/*
 * trace.h - spans of decisions (tracing in the configuration): the W3C
 * trace context a request carries (traceparent), whether a decision is
 * traced, its spans kept in a bounded queue, and the queue encoded as
 * OTLP's ExportTraceServiceRequest in protobuf for the exporter
 * (trace_export.c) to post. No I/O here; the clock is the caller's.
 *
 * A traced decision makes two to four spans: "ratelimitd.decision" (kind
 * SERVER), from the request's bytes read (or, when not known, it parsed)
 * to its answer, child of the caller's span when it sent a traceparent;
 * under it "ratelimitd.parse", from the bytes read to the request parsed
 * and executed (the requests before it in the same read included), when
 * the front end knew when; and one span named after who decided
 * ("ratelimitd.redis", ".cache", ".block", ".memory", ".fallback",
 * ".override", ".local"), from when the store was asked (or the answer,
 * for those that ask nobody) to the answer; under a Redis decision,
 * "ratelimitd.batch": the script call it rode in, from sent to its reply
 * read, with the requests in it (ratelimit.batch_size).
 */
#ifndef RL_TRACE_H
#define RL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "cmd_types.h"

struct config_tracing;

/* A W3C traceparent ("00-<32 hex>-<16 hex>-<2 hex>", or a later version's,
 * longer after a '-'): 0 with the trace and parent ids and the sampled flag
 * in out, or -1 (malformed, or an id of zeros). Pure. */
int trace_parse_parent(const char *s, size_t len, struct cmd_trace *out);

/* Takes the configuration (at start and on every reload; c->endpoint
 * NULL: off). The queue keeps its spans across a reload. */
void trace_configure(const struct config_tracing *c);
/* Whether tracing is on (a test on every request: inline). */
extern int trace_enabled;
static inline int trace_on(void)
{
	return trace_enabled;
}

/*
 * Whether a request is traced, in t: with a valid traceparent, as its
 * sampled flag says (the caller decided); without one (or a malformed
 * one, W3C's "restart the trace"), a share tracing.sample of requests, on
 * a new trace id. traceparent NULL: none.
 */
void trace_begin(struct cmd_trace *t, const char *traceparent, size_t len);

/* When a decision's steps happened: monotonic microseconds, 0 for a step
 * it did not take or whose time is not known. */
struct trace_times {
	uint64_t received_us;		       /* its bytes read */
	uint64_t parsed_us;		       /* parsed and executed (cmd_execute) */
	uint64_t asked_us;		       /* the decider asked (the store); 0: asked nobody */
	uint64_t batch_sent_us, batch_read_us; /* the Redis call it rode in */
	int batch_size;			       /* requests in that call; 0: none */
	uint64_t end_us;		       /* answered */
};

/* A traced decision's spans, queued together (dropped together, and
 * counted, when the queue is full). */
void trace_decision(const struct cmd_trace *t, const char *action, size_t alen, int allowed,
		    const char *source, const struct trace_times *tt);

/* Spans waiting to be exported. */
size_t trace_queued(void);

/* Encodes up to max of the oldest queued spans into buf (cap bytes) as one
 * ExportTraceServiceRequest, and takes them off the queue; returns the
 * bytes written (0: none queued) and the spans in *n. */
size_t trace_encode(uint8_t *buf, size_t cap, size_t max, size_t *n);

/* The most bytes one span takes encoded (trace_encode's cap per span). */
#define TRACE_SPAN_ENCODED_MAX 512

/* Spans made, dropped with the queue full, exported, failed (the exporter
 * counts the last two). */
extern unsigned long long trace_spans_made, trace_spans_dropped, trace_spans_exported,
	trace_spans_failed;

#endif
