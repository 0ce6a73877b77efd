/*
 * fuzz_refuse.c - libFuzzer harness for what a client refused at
 * max_clients is told over HTTP/2 (src/grpc/refuse_msg.c): the scan of its
 * opening bytes for the first stream, fed whole and in chunks of
 * input-seeded sizes (each chunk an exact-size copy: ASan sees any read
 * past it), which must agree; a found stream is odd, nonzero and the id of
 * a HEADERS frame header in the input; nothing is taken past
 * REFUSE_H2_SCAN_MAX; and the goodbye for what was found, written into a
 * buffer of exactly REFUSE_H2_GOODBYE_MAX bytes, is whole frames ending in
 * a GOAWAY that names the stream.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_log.h"
#include "refuse_msg.h"

const char *const fuzz_name = "fuzz_refuse";

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct outcome {
	enum refuse_h2_found found;
	uint32_t stream;
	uint8_t settings;
};

static struct outcome scan(const uint8_t *p, size_t n, uint32_t seed)
{
	struct refuse_h2_scan s = {0};
	enum refuse_h2_found f = REFUSE_H2_MORE;
	size_t at = 0;
	while (at < n && f == REFUSE_H2_MORE) {
		size_t k = n - at;
		if (seed) {
			seed = seed * 1103515245u + 12345u;
			size_t most = 1 + (seed >> 16) % 64;
			k = k < most ? k : most;
		}
		uint8_t *chunk = malloc(k);
		memcpy(chunk, p + at, k);
		f = refuse_h2_feed(&s, chunk, k);
		free(chunk);
		at += k;
		check(s.seen <= REFUSE_H2_SCAN_MAX, "scanned past REFUSE_H2_SCAN_MAX");
	}
	return (struct outcome){f, f == REFUSE_H2_STREAM ? s.stream : 0, s.settings};
}

static uint32_t be(const uint8_t *p, int n)
{
	uint32_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint32_t seed = data[0] | 1u;
	const uint8_t *in = data + 1;
	size_t n = size - 1;

	struct outcome whole = scan(in, n, 0), chunks = scan(in, n, seed);
	check(whole.found == chunks.found && whole.stream == chunks.stream &&
		      whole.settings == chunks.settings,
	      "whole and chunked scans differ");
	size_t pl = sizeof(preface) - 1;
	if (memcmp(in, preface, n < pl ? n : pl) != 0)
		check(whole.found == REFUSE_H2_NONE, "not a preface, yet not NONE");
	if (whole.found == REFUSE_H2_STREAM) {
		check(whole.stream % 2 == 1 && whole.stream <= 0x7fffffffu,
		      "a stream id clients use");
		/* some HEADERS frame header in the input names it */
		int seen = 0;
		for (size_t i = pl; i + 9 <= n && !seen; i++)
			seen = in[i + 3] == 0x1 &&
			       (be(in + i + 5, 4) & 0x7fffffffu) == whole.stream;
		check(seen, "the stream is no HEADERS frame's");
	}

	uint8_t *out = malloc(REFUSE_H2_GOODBYE_MAX);
	size_t len = refuse_h2_goodbye(out, whole.stream, whole.settings);
	check(len <= REFUSE_H2_GOODBYE_MAX, "goodbye longer than REFUSE_H2_GOODBYE_MAX");
	size_t at = 0, last = 0;
	while (at < len) {
		check(at + 9 <= len, "a frame header cut short");
		last = at;
		at += 9 + be(out + at, 3);
		check(at <= len, "a frame cut short");
	}
	check(out[last + 3] == 0x7, "the last frame is no GOAWAY");
	check(be(out + last + 9, 4) == whole.stream, "the GOAWAY names another stream");
	free(out);
	return 0;
}
