/* clock.h - the monotonic clock every deadline and backoff is measured on. */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H

#include <stdint.h>

/* Microseconds on CLOCK_MONOTONIC (never jumps with the wall clock). */
uint64_t clock_mono_us(void);

/* Milliseconds since the epoch on CLOCK_REALTIME: only for what is
 * named by the calendar (lib/calendar.h), never to measure time. */
int64_t clock_wall_ms(void);

/* For tests: clock_mono_us returns fn(arg), a clock they move; fn NULL
 * goes back to CLOCK_MONOTONIC. */
typedef uint64_t clock_mono_fn(void *arg);
void clock_mono_set(clock_mono_fn *fn, void *arg);

#endif
