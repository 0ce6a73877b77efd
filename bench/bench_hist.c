/* bench_hist.c - ratelimit-bench's latency histogram: buckets, quantiles (see bench_hist.h). */
#include "bench_hist.h"

#include <math.h>

/* Larger values are counted as this one (max stays exact). */
#define HIST_MAX_NS ((1ULL << 40) - 1)

static unsigned hist_index(uint64_t v)
{
	if (v > HIST_MAX_NS)
		v = HIST_MAX_NS;
	if (v < 2 * BENCH_HIST_SUB)
		return (unsigned)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned b = msb - 7u;
	return b * BENCH_HIST_SUB + (unsigned)(v >> b);
}

static uint64_t hist_upper(unsigned idx)
{
	if (idx < 2 * BENCH_HIST_SUB)
		return idx;
	unsigned b = idx / BENCH_HIST_SUB - 1u;
	uint64_t sub = idx - b * BENCH_HIST_SUB;
	return ((sub + 1) << b) - 1;
}

void bench_hist_add(struct bench_hist *h, uint64_t v)
{
	h->counts[hist_index(v)]++;
	h->total++;
	if (v > h->max)
		h->max = v;
}

uint64_t bench_hist_quantile(const struct bench_hist *h, double q)
{
	if (!h->total)
		return 0;
	uint64_t rank = (uint64_t)ceil(q * (double)h->total);
	if (rank < 1)
		rank = 1;
	uint64_t seen = 0;
	for (unsigned i = 0; i < BENCH_HIST_BUCKETS; i++) {
		seen += h->counts[i];
		if (seen >= rank) {
			uint64_t v = hist_upper(i);
			return v < h->max ? v : h->max;
		}
	}
	return h->max;
}
