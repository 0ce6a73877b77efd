/* clock.h - the monotonic clock every deadline and backoff is measured on. */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H

#include <stdint.h>

/* Microseconds on CLOCK_MONOTONIC (never jumps with the wall clock). */
uint64_t clock_mono_us(void);

#endif
