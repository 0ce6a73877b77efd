/* yenum.h - one table of names per enum: name <-> value, and the "a, b or c" list messages give. */
#ifndef RL_YENUM_H
#define RL_YENUM_H

#include <stddef.h>

/*
 * One value's name, after nginx's ngx_conf_enum_t. A table lists every
 * value once, in the order messages name them, and ends with {NULL}.
 * gloss, when not NULL, is what a message adds in parentheses after the
 * name ("line (the line protocol and RESP)").
 */
struct yenum {
	const char *name;
	int value;
	const char *gloss;
};

/* The name of `value` in t, or NULL when t has none. */
const char *yenum_name(const struct yenum *t, int value);
/* The value named s[0..len) (exactly, case included); 0, or -1 when t has none. */
int yenum_parse(const struct yenum *t, const char *s, size_t len, int *out);
/* "a, b, c or d" into buf (cut short to fit cap), each name followed by
 * " (gloss)" when `glosses` is set and it has one; returns buf. */
const char *yenum_list(const struct yenum *t, int glosses, char *buf, size_t cap);

#endif
