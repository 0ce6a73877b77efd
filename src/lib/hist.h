/*
 * hist.h - fixed-bucket histograms as Prometheus exposes them: a count per
 * bucket, a sum and a count. Values are integers (microseconds, requests),
 * so observing one is a short scan and three additions. Pure.
 */
#ifndef RL_HIST_H
#define RL_HIST_H

#include <stddef.h>
#include <stdint.h>

/* The most bounds a histogram has (its +Inf bucket not counted). */
#define HIST_BOUNDS_MAX 16

/* Upper bounds (inclusive, ascending) and how they are shown: a value v
 * is v / 10^scale (scale 6: microseconds shown as seconds). */
struct hist_bounds {
	size_t n;
	unsigned scale;
	uint64_t le[HIST_BOUNDS_MAX];
};

struct hist {
	/* observations per bucket, not cumulative; [n]: above every bound */
	uint64_t bucket[HIST_BOUNDS_MAX + 1];
	uint64_t count, sum;
};

/* The bucket v falls in: the first i with v <= b->le[i], else b->n. */
size_t hist_bucket(const struct hist_bounds *b, uint64_t v);
void hist_observe(struct hist *h, const struct hist_bounds *b, uint64_t v);
/*
 * Writes v / 10^scale in decimal, as short as it is exact ("0.00005",
 * "2.5", "1"), NUL-terminated, into buf (at least HIST_TEXT_MAX bytes);
 * returns its length. For le labels and sums.
 */
#define HIST_TEXT_MAX 48
size_t hist_format(char *buf, uint64_t v, unsigned scale);

#endif
