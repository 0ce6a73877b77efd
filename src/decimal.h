/* decimal.h - integers to decimal text without printf, for the hot paths. */
#ifndef RL_DECIMAL_H
#define RL_DECIMAL_H

#include <stddef.h>
#include <stdint.h>

/* Writes v in decimal at p (no NUL; at most 20 bytes); returns the length. */
size_t decimal_put(char *p, uint64_t v);

#endif
