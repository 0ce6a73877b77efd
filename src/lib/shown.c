/* shown.c - a user written as one word of printable ASCII (shown.h). */
#include "shown.h"

#include <string.h>

#include "decimal.h"

size_t shown_user(char *p, const char *user, size_t len, size_t full_len)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)user[i];
		if (c <= ' ' || c == '%' || c >= 0x7f) {
			p[n++] = '%';
			p[n++] = hex[c >> 4];
			p[n++] = hex[c & 15];
		} else {
			p[n++] = (char)c;
		}
	}
	if (full_len > len) {
		memcpy(p + n, "%...", 4);
		n += 4 + decimal_put(p + n + 4, full_len);
	}
	return n;
}

long shown_parse(const char *s, size_t len, char *out, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (o >= cap || c <= ' ' || c >= 0x7f)
			return -1;
		if (c != '%') {
			out[o++] = (char)c;
			continue;
		}
		int hi = i + 2 < len ? decimal_hex_digit(s[i + 1]) : -1,
		    lo = i + 2 < len ? decimal_hex_digit(s[i + 2]) : -1;
		if (hi < 0 || lo < 0)
			return -1;
		out[o++] = (char)(hi << 4 | lo);
		i += 2;
	}
	return (long)o;
}
