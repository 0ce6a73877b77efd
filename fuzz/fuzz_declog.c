/*
 * fuzz_declog.c - libFuzzer harness for the operators' small text formats.
 * The decision log's lines (src/ops/declog.c): declog_parse on any bytes,
 * from a buffer of exactly their size, takes what it reads from inside
 * them; a line it takes, written again by declog_format (users in clear),
 * reads back the same; and any bytes as a user, written and read back, are
 * that user. Shown users (src/lib/shown.c) and the console's forms
 * (src/lib/form.c) on the same bytes: shown_parse and form_value stay
 * within their output, and what they read is what was written.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "declog.h"
#include "form.h"
#include "shown.h"
#include "fuzz_log.h"

const char *const fuzz_name = "fuzz_declog";

static int same(const struct declog_line *a, const struct declog_line *b)
{
	return a->ms == b->ms && a->allowed == b->allowed && a->cost == b->cost &&
	       a->hashed == b->hashed && a->action_len == b->action_len &&
	       !memcmp(a->action, b->action, a->action_len) && a->user_len == b->user_len &&
	       !memcmp(a->user, b->user, a->user_len);
}

/* The bytes as a shown user and as a form, read and written again. */
static void shown_and_form(const char *in, size_t size)
{
	static char out[4 * KEYS_USER_MAX], again[SHOWN_USER_MAX(4 * KEYS_USER_MAX)],
		back[4 * KEYS_USER_MAX], form[3 * KEYS_USER_MAX + 16];
	long n = shown_parse(in, size, out, KEYS_USER_MAX);
	check(n >= -1 && n <= KEYS_USER_MAX, "shown_parse within its output");
	if (n >= 0) {
		size_t m = shown_user(again, out, (size_t)n, 0);
		check(shown_parse(again, m, back, sizeof(back)) == n &&
			      !memcmp(back, out, (size_t)n),
		      "a shown user read back is the same bytes");
	}
	/* any bytes shown, then read: those bytes */
	size_t ulen = size < KEYS_USER_MAX ? size : KEYS_USER_MAX;
	size_t m = shown_user(again, in, ulen, 0);
	check(shown_parse(again, m, back, sizeof(back)) == (long)ulen && !memcmp(back, in, ulen),
	      "any bytes shown read back");
	n = form_value(in, size, "user", out, KEYS_USER_MAX);
	check(n >= -2 && n <= KEYS_USER_MAX, "form_value within its output");
	/* any bytes as a form's value, %-encoded as a browser does */
	static const char hex[] = "0123456789ABCDEF";
	size_t k = (size_t)snprintf(form, sizeof(form), "a=1&user=");
	for (size_t i = 0; i < ulen; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c == ' ') {
			form[k++] = '+';
		} else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') {
			form[k++] = (char)c;
		} else {
			form[k++] = '%';
			form[k++] = hex[c >> 4];
			form[k++] = hex[c & 15];
		}
	}
	check(form_value(form, k, "user", out, KEYS_USER_MAX) == (long)ulen &&
		      !memcmp(out, in, ulen),
	      "a form's value read back");
	check(form_value(form, k, "nothing", out, KEYS_USER_MAX) == -1, "no such field");
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
	shown_and_form(line, size);
	free(line);
	return 0;
}
