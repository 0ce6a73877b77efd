/* clock.c - the monotonic clock every deadline and backoff is measured on. */
#include "clock.h"

#include <time.h>

uint64_t clock_mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
