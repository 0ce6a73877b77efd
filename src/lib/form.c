/* form.c - a field of a URL-encoded form (form.h). */
#include "form.h"

#include <string.h>

#include "decimal.h"

long form_value(const char *form, size_t len, const char *key, char *out, size_t cap)
{
	size_t klen = strlen(key);
	for (size_t at = 0; at < len;) {
		const char *amp = memchr(form + at, '&', len - at);
		size_t end = amp ? (size_t)(amp - form) : len;
		const char *f = form + at;
		size_t flen = end - at;
		at = end + 1;
		if (flen <= klen || memcmp(f, key, klen) != 0 || f[klen] != '=')
			continue;
		size_t o = 0;
		for (size_t i = klen + 1; i < flen; i++) {
			if (o >= cap)
				return -2;
			if (f[i] == '+') {
				out[o++] = ' ';
			} else if (f[i] != '%') {
				out[o++] = f[i];
			} else {
				int hi = i + 2 < flen ? decimal_hex_digit((unsigned char)f[i + 1])
						      : -1;
				int lo = i + 2 < flen ? decimal_hex_digit((unsigned char)f[i + 2])
						      : -1;
				if (hi < 0 || lo < 0)
					return -2;
				out[o++] = (char)(hi << 4 | lo);
				i += 2;
			}
		}
		return (long)o;
	}
	return -1;
}
