/*
 * fuzz_log.h - what every harness uses to say it found something and to
 * compare runs: check() aborts (libFuzzer keeps the input), and an outcome
 * log is a byte string, so comparing two runs is one memcmp.
 */
#ifndef RL_FUZZ_LOG_H
#define RL_FUZZ_LOG_H

#include <stddef.h>
#include <stdint.h>

/* Set by each harness: named in the abort message. */
extern const char *const fuzz_name;

/* Aborts with what when ok is 0. */
void check(int ok, const char *what);

/* Appends p[0..n) to the growing buffer *buf of *len bytes (room *cap). */
void fuzz_append(char **buf, size_t *len, size_t *cap, const void *p, size_t n);

struct olog {
	char *p;
	size_t len, cap;
};

void log_bytes(struct olog *l, const void *p, size_t n);
void log_u64(struct olog *l, uint64_t v);
/* Its length, then its bytes. */
void log_str(struct olog *l, const char *s);
/* Aborts with what unless a and b hold the same bytes. */
void log_same(const struct olog *a, const struct olog *b, const char *what);

#endif
