/*
 * fuzz_errors.h - the shape every loader's error text must have (config.c
 * and envoy_rules.c share src/config/config_yaml.c's reporting): 1 to max_lines
 * printable lines "NAME:LINE:COL: message", LINE and COL 1-based and inside
 * the input, perhaps followed by "... and N more errors".
 */
#ifndef RL_FUZZ_ERRORS_H
#define RL_FUZZ_ERRORS_H

#include <stddef.h>

/* Aborts (check()) unless err, the text for an input of `size` bytes named
 * `name`, has that shape. */
void check_errors(const char *name, const char *err, size_t size, size_t max_lines);

#endif
