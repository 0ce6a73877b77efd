/* decimal.c - integers to and from decimal text (decimal.h). */
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

int decimal_parse(const char *s, size_t len, int64_t max, int64_t *out)
{
	int64_t v = 0;
	if (len == 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		int d = s[i] - '0';
		/* before the step: it must not overflow (and d > max first, as
		 * (max - d) / 10 rounds toward zero) */
		if (d > max || v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int decimal_hex_digit(int c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
				      : -1;
}
