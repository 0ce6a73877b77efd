/*
 * fuzz_procstat.c - libFuzzer harness for /proc/PID/stat parsing
 * (src/ops/process.c). The input is the file's text, in a buffer of exactly its
 * size (ASan sees any read past it). When it parses, fields after rss are
 * ignored: the same text with more fields parses to the same values, and
 * the text's fields after the last ')' are read back with strtoull.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_log.h"
#include "process.h"

const char *const fuzz_name = "fuzz_procstat";

/* Field n (3 = state) after the last ')' of s, as strtoull reads it; 0 if absent. */
static unsigned long long field(const char *s, int n)
{
	const char *p = strrchr(s, ')');
	if (!p)
		return 0;
	p++;
	for (int f = 3; f <= n; f++) {
		while (*p == ' ')
			p++;
		if (f == n)
			return *p == '-' ? 0 : strtoull(p, NULL, 10);
		while (*p && *p != ' ')
			p++;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size ? size : 1);
	memcpy(text, data, size);
	struct process_stat st;
	int rc = process_parse_stat(text, size, &st);
	if (rc == 0) {
		char *more = malloc(size + 8);
		memcpy(more, data, size);
		memcpy(more + size, " 7 8 9\n", 8); /* NUL included: strtoull below */
		struct process_stat again;
		int tail_ok = memchr(data, '\n', size) == NULL;
		if (tail_ok) {
			check(process_parse_stat(more, size + 7, &again) == 0,
			      "more fields refused");
			check(memcmp(&st, &again, sizeof(st)) == 0,
			      "more fields changed the values");
		}
		if (!memchr(data, '\0', size)) {
			memcpy(more, data, size);
			more[size] = '\0';
			check(st.cpu_ticks == field(more, 14) + field(more, 15), "cpu ticks");
			check(st.vsize == field(more, 23), "vsize");
			check(st.rss_pages == field(more, 24), "rss");
		}
		free(more);
	}
	free(text);
	return 0;
}
