/* hist.c - fixed-bucket histograms: observing a value, and the decimal text Prometheus reads. */
#include "hist.h"

#include <string.h>

#include "decimal.h"

size_t hist_bucket(const struct hist_bounds *b, uint64_t v)
{
	/* A linear scan: the bounds are few, and most values fall in the
	 * first buckets (a fast answer), where a scan from the bottom stops
	 * sooner than a binary search. */
	size_t i = 0;
	while (i < b->n && v > b->le[i])
		i++;
	return i;
}

void hist_observe(struct hist *h, const struct hist_bounds *b, uint64_t v)
{
	h->bucket[hist_bucket(b, v)]++;
	h->count++;
	h->sum += v;
}

size_t hist_format(char *buf, uint64_t v, unsigned scale)
{
	char digits[24];
	size_t n = decimal_put(digits, v);
	if (scale > 20)
		scale = 20;
	size_t len = 0;
	if (n <= scale) {
		/* 0.000ddd: leading zeros after the point */
		buf[len++] = '0';
		buf[len++] = '.';
		memset(buf + len, '0', scale - n);
		len += scale - n;
		memcpy(buf + len, digits, n);
		len += n;
	} else {
		memcpy(buf, digits, n - scale);
		len = n - scale;
		if (scale) {
			buf[len++] = '.';
			memcpy(buf + len, digits + n - scale, scale);
			len += scale;
		}
	}
	if (scale) {
		/* exact, but no longer than it needs to be */
		while (buf[len - 1] == '0')
			len--;
		if (buf[len - 1] == '.')
			len--;
	}
	buf[len] = '\0';
	return len;
}
