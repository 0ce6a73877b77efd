/*
 * fuzz_declog.c - libFuzzer harness for the decision log's lines
 * (src/ops/declog.c): declog_parse on any bytes, from a buffer of exactly
 * their size, takes what it reads from inside them; a line it takes,
 * written again by declog_format (users in clear), reads back the same;
 * and any bytes as a user, written and read back, are that user.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "declog.h"
#include "fuzz_log.h"

const char *const fuzz_name = "fuzz_declog";

static int same(const struct declog_line *a, const struct declog_line *b)
{
	return a->ms == b->ms && a->allowed == b->allowed && a->cost == b->cost &&
	       a->hashed == b->hashed && a->action_len == b->action_len &&
	       !memcmp(a->action, b->action, a->action_len) && a->user_len == b->user_len &&
	       !memcmp(a->user, b->user, a->user_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *line = malloc(size ? size : 1);
	memcpy(line, data, size);
	struct declog_line d, e;
	char out[DECLOG_LINE_MAX];
	int r = declog_parse(line, size, &d);
	check(r >= -1 && r <= 1, "declog_parse returns -1, 0 or 1");
	if (r == 0) {
		check(d.action >= line && d.action + d.action_len <= line + size,
		      "the action inside the line");
		check(d.cost >= 1 && d.ms >= 0 && d.user_len > 0 &&
			      d.user_len <= (d.hashed ? 17u : (size_t)KEYS_USER_MAX),
		      "fields in range");
		if (!d.hashed) {
			size_t n = declog_format(out, (uint64_t)d.ms, d.allowed, d.action,
						 d.action_len, d.cost, d.user, d.user_len);
			check(n <= DECLOG_LINE_MAX && out[n - 1] == '\n' &&
				      !memchr(out, '\n', n - 1),
			      "one line, within DECLOG_LINE_MAX");
			check(declog_parse(out, n - 1, &e) == 0 && same(&d, &e),
			      "a line written again reads back the same");
		}
	}
	/* the bytes as a user: written and read back */
	size_t ulen = size < KEYS_USER_MAX ? size : KEYS_USER_MAX;
	if (ulen > 0) {
		size_t n =
			declog_format(out, 1795838461123ULL, size & 1, "login", 5, 3, line, ulen);
		check(n <= DECLOG_LINE_MAX, "within DECLOG_LINE_MAX");
		check(declog_parse(out, n - 1, &e) == 0 && !e.hashed && e.user_len == ulen &&
			      !memcmp(e.user, line, ulen) && e.cost == 3 &&
			      e.allowed == (int)(size & 1),
		      "a user round-trips");
	}
	free(line);
	return 0;
}
