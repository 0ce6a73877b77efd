/*
 * pbwire.h - protobuf's base-128 varint, written and measured: what the
 * hand-made encoders share (ops/trace.c's OTLP spans, the bench's
 * ShouldRateLimit calls), where protoc-c's generated code would be more
 * than the few fields they write.
 */
#ifndef RL_PBWIRE_H
#define RL_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

/* Writes v at p (at most 10 bytes); returns how many. */
size_t pbwire_varint(uint8_t *p, uint64_t v);

/* How many bytes pbwire_varint writes for v. */
size_t pbwire_varint_len(uint64_t v);

#endif
