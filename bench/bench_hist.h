/*
 * bench_hist.h - ratelimit-bench's latency histogram: records reply times in
 * nanoseconds and answers quantiles, in fixed memory (no allocation).
 */
#ifndef RL_BENCH_HIST_H
#define RL_BENCH_HIST_H

#include <stdint.h>

/*
 * Log-linear buckets over nanoseconds, as in HdrHistogram: values below 256
 * have one bucket each; above, each power of two is split into 128 buckets,
 * so a reported value is within 0.8% of the true one. Fixed 34 KiB.
 */
#define BENCH_HIST_SUB 128
#define BENCH_HIST_BUCKETS (33 * BENCH_HIST_SUB + 2 * BENCH_HIST_SUB)

/* Zero it to start empty. */
struct bench_hist {
	uint64_t counts[BENCH_HIST_BUCKETS];
	uint64_t total;
	uint64_t max; /* the largest value recorded, exact */
};

void bench_hist_add(struct bench_hist *h, uint64_t v);

/* The q-quantile in ns (highest value equivalent to the bucket, capped at max). */
uint64_t bench_hist_quantile(const struct bench_hist *h, double q);

#endif
