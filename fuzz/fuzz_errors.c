/* fuzz_errors.c - the shape of a loader's error text (fuzz_errors.h). */
#include "fuzz_errors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_log.h"

/* Reads 1-based decimal digits up to `end`; returns the position after it. */
static const char *read_pos(const char *p, char end, size_t *v)
{
	size_t n = 0, digits = 0;
	if (*p == '0')
		return NULL;
	while (*p >= '0' && *p <= '9' && digits < 19) {
		n = n * 10 + (size_t)(*p - '0');
		p++;
		digits++;
	}
	if (digits == 0 || *p != end)
		return NULL;
	*v = n;
	return p + 1;
}

/* One line of an error, up to its '\n' or the end: "NAME:L:C: message". */
static void check_error_line(const char *name, const char *err, const char *end, size_t size)
{
	size_t nl = strlen(name);
	check(strncmp(err, name, nl) == 0 && err[nl] == ':', "message starts with the file name");
	size_t line, col;
	const char *p = read_pos(err + nl + 1, ':', &line);
	check(p != NULL, "message has :LINE:");
	p = read_pos(p, ':', &col);
	check(p != NULL, "message has :COL:");
	check(*p == ' ' && p + 1 < end, "a message follows FILE:LINE:COL: ");
	/* Every line break takes at least one byte; so does every column. */
	check(line - 1 <= size, "LINE within the input");
	check(col - 1 <= size, "COL within the input");
	for (const char *q = err; q < end; q++)
		check((unsigned char)*q >= 0x20 && *q != 0x7f, "message lines are printable");
}

void check_errors(const char *name, const char *err, size_t size, size_t max_lines)
{
	check(err[0] != '\0', "failure without a message");
	size_t lines = 0;
	for (const char *p = err;;) {
		const char *end = strchr(p, '\n');
		if (!end)
			end = p + strlen(p);
		if (lines > 0 && strncmp(p, "... and ", 8) == 0) {
			unsigned long more = strtoul(p + 8, NULL, 10);
			char want[64];
			snprintf(want, sizeof(want), "... and %lu more error%s", more,
				 more == 1 ? "" : "s");
			check(more >= 1 && *end == '\0' && strcmp(p, want) == 0,
			      "\"... and N more errors\" is the last line");
			break;
		}
		check(lines < max_lines, "at most max_lines lines");
		check_error_line(name, p, end, size);
		lines++;
		if (*end == '\0')
			break;
		p = end + 1;
	}
}
