/*
 * trace_export.h - the exporter of decisions' spans (trace_export.c): OTLP
 * over HTTP with protobuf to tracing.endpoint, batched, one POST at a time.
 */
#ifndef RL_TRACE_EXPORT_H
#define RL_TRACE_EXPORT_H

struct event_base;
struct config_tracing;
struct trace_export;

/* NULL when out of memory (then nothing is exported). */
struct trace_export *trace_export_new(struct event_base *base);

/* Takes the configuration (start and every reload): trace.c's sampling and
 * queue, and the endpoint (a new one: a new connection). x may be NULL. */
void trace_export_configure(struct trace_export *x, const struct config_tracing *c);

void trace_export_free(struct trace_export *x);

#endif
