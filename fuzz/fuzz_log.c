/* fuzz_log.c - the harnesses' check() and outcome logs (fuzz_log.h). */
#include "fuzz_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "%s: invariant violated: %s\n", fuzz_name, what);
		abort();
	}
}

void fuzz_append(char **buf, size_t *len, size_t *cap, const void *p, size_t n)
{
	if (*len + n > *cap) {
		size_t c = *cap ? *cap : 64;
		while (c < *len + n)
			c *= 2;
		*buf = realloc(*buf, c);
		check(*buf != NULL, "out of memory");
		*cap = c;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
}

void log_bytes(struct olog *l, const void *p, size_t n)
{
	fuzz_append(&l->p, &l->len, &l->cap, p, n);
}

void log_u64(struct olog *l, uint64_t v)
{
	log_bytes(l, &v, sizeof(v));
}

void log_str(struct olog *l, const char *s)
{
	size_t n = strlen(s);
	log_u64(l, n);
	log_bytes(l, s, n);
}

void log_same(const struct olog *a, const struct olog *b, const char *what)
{
	check(a->len == b->len && (a->len == 0 || memcmp(a->p, b->p, a->len) == 0), what);
}
