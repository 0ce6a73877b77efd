/* decimal.h - integers to and from decimal text without printf or strtol,
 * for the hot paths and the parsers. */
#ifndef RL_DECIMAL_H
#define RL_DECIMAL_H

#include <stddef.h>
#include <stdint.h>

/* Writes v in decimal at p (no NUL; at most 20 bytes); returns the length. */
size_t decimal_put(char *p, uint64_t v);

/* Decimal digits only, 0 to max (leading zeros allowed, no sign, no
 * blank); checked before each step, so any max up to INT64_MAX is safe.
 * 0 with *out set, or -1. */
int decimal_parse(const char *s, size_t len, int64_t max, int64_t *out);

/* The value of a hexadecimal digit (either case), or -1. */
int decimal_hex_digit(int c);

#endif
