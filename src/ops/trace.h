/*
 * trace.h - spans of decisions (tracing in the configuration): the W3C
 * trace context a request carries (traceparent), whether a decision is
 * traced, its spans kept in a bounded queue, and the queue encoded as
 * OTLP's ExportTraceServiceRequest in protobuf for the exporter
 * (trace_export.c) to post. No I/O here; the clock is the caller's.
 *
 * A traced decision makes two spans: "ratelimitd.decision" (kind SERVER),
 * from the request parsed to its answer, child of the caller's span when
 * it sent a traceparent; and under it one span named after who decided
 * ("ratelimitd.redis", ".cache", ".block", ".memory", ".fallback",
 * ".override", ".local"), from when the store was asked (or the answer,
 * for those that ask nobody) to the answer.
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

/* A traced decision's spans, queued (dropped, and counted, when the queue
 * is full). Times on the monotonic clock, microseconds; asked_us 0: the
 * decider asked nobody. */
void trace_decision(const struct cmd_trace *t, const char *action, size_t alen, int allowed,
		    const char *source, uint64_t start_us, uint64_t asked_us, uint64_t end_us);

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
