/* yenum.c - lookups in an enum's table of names, both ways, and its list for messages. */
#include "yenum.h"

#include <stdio.h>
#include <string.h>

const char *yenum_name(const struct yenum *t, int value)
{
	for (; t->name; t++)
		if (t->value == value)
			return t->name;
	return NULL;
}

int yenum_parse(const struct yenum *t, const char *s, size_t len, int *out)
{
	for (; t->name; t++)
		if (strlen(t->name) == len && memcmp(t->name, s, len) == 0) {
			*out = t->value;
			return 0;
		}
	return -1;
}

const char *yenum_list(const struct yenum *t, int glosses, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 0; t[i].name && n < cap; i++) {
		const char *sep = i == 0 ? "" : t[i + 1].name ? ", " : " or ";
		n += (size_t)snprintf(buf + n, cap - n, "%s%s", sep, t[i].name);
		if (glosses && t[i].gloss && n < cap)
			n += (size_t)snprintf(buf + n, cap - n, " (%s)", t[i].gloss);
	}
	return buf;
}
