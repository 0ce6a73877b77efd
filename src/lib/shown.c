/* shown.c - a user written as one word of printable ASCII (shown.h). */
#include "shown.h"

#include <string.h>

size_t shown_user(char *p, const char *user, size_t len, int cut)
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
	if (cut) {
		memcpy(p + n, "%...", 4);
		n += 4;
	}
	return n;
}
