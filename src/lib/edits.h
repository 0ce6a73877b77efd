/*
 * edits.h - how far a typo is from a word, for "did you mean": the
 * configuration's keys (config_yaml.c) and ratelimitctl's commands.
 */
#ifndef RL_EDITS_H
#define RL_EDITS_H

#include <stddef.h>

/* Edits (insert, delete, change, swap two neighbours) from a[0..al) to
 * b, or max + 1 when it is farther (or either is over 32 bytes). */
size_t edits_between(const char *a, size_t al, const char *b, size_t max);

#endif
