/* clock.c - the monotonic clock every deadline and backoff is measured on. */
#include "clock.h"

#include <stddef.h>
#include <time.h>

static clock_mono_fn *test_clock;
static void *test_clock_arg;

uint64_t clock_mono_us(void)
{
	if (test_clock)
		return test_clock(test_clock_arg);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int64_t clock_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void clock_mono_set(clock_mono_fn *fn, void *arg)
{
	test_clock = fn;
	test_clock_arg = arg;
}
