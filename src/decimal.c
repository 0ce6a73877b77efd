/* decimal.c - integers to decimal text without printf, for the hot paths. */
#include "decimal.h"

size_t decimal_put(char *p, uint64_t v)
{
	char tmp[20];
	size_t n = 0, len;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	len = n;
	while (n)
		*p++ = tmp[--n];
	return len;
}
