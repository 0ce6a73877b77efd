/*
 * fuzz_resp.c - libFuzzer harness for RESP2 (src/proto/proto_resp.c): the step
 * conn.c takes and the reply formatter, through the shared loop of
 * fuzz_step.c. Every reply is parsed back as one well-formed RESP2 value.
 *
 * Input: a 2-byte header, then the byte stream a client sends.
 *   bytes 0-1  max_line = 1 + (little-endian u16 % 8192); also seeds the
 *              random chunk sizes
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_step.h"
#include "proto_resp.h"

#define HEADER 2
#define MAX_LINE_RANGE 8192

const char *const fuzz_name = "fuzz_resp";
const struct proto *const fuzz_proto = &proto_resp;

/* ---- replies: one well-formed RESP2 value ---- */

/* Skips one value at s[*i]; -1 if malformed or incomplete. */
static int resp_value(const char *s, size_t n, size_t *i, int depth)
{
	if (*i >= n || depth > 2)
		return -1;
	char t = s[*i];
	const char *crlf = NULL;
	for (size_t k = *i + 1; k + 1 < n; k++)
		if (s[k] == '\r' && s[k + 1] == '\n') {
			crlf = s + k;
			break;
		}
	if (!crlf)
		return -1;
	size_t body = *i + 1, end = (size_t)(crlf - s);
	for (size_t k = body; k < end; k++)
		if (s[k] == '\r' || s[k] == '\n')
			return -1;
	*i = end + 2;
	if (t == '+' || t == '-')
		return 0;
	long long v = 0;
	size_t k = body;
	int neg = k < end && s[k] == '-';
	if (neg)
		k++;
	if (k == end)
		return -1;
	for (; k < end; k++) {
		if (s[k] < '0' || s[k] > '9')
			return -1;
		if (v < 100000000000000000LL) /* past that, only "too long for a length" matters */
			v = v * 10 + (s[k] - '0');
	}
	if (t == ':')
		return 0;
	if (neg || v > 4096)
		return -1;
	if (t == '$') {
		if (*i + (size_t)v + 2 > n || s[*i + v] != '\r' || s[*i + v + 1] != '\n')
			return -1;
		*i += (size_t)v + 2;
		return 0;
	}
	if (t == '*') {
		for (long long e = 0; e < v; e++)
			if (resp_value(s, n, i, depth + 1) < 0)
				return -1;
		return 0;
	}
	return -1;
}

void fuzz_check_reply(const struct cmd_result *res)
{
	char *buf = malloc(proto_resp.reply_max); /* exact size: ASan sees an overflow */
	check(buf != NULL, "out of memory");
	size_t n = proto_resp.format(buf, res);
	check(n > 0 && n <= proto_resp.reply_max, "reply length");
	size_t i = 0;
	check(resp_value(buf, n, &i, 0) == 0 && i == n, "a reply is one RESP2 value");
	if (res->kind == CMD_REPLY_DECISION)
		check(buf[0] == '*' && buf[1] == (res->multi ? '6' : '5'),
		      "a decision is an array of 5 (6 for MALLOW: the deciding pair)");
	if (res->kind == CMD_REPLY_ERROR)
		check(buf[0] == '-' && memcmp(buf, "-ERR ", 5) == 0, "an error is -ERR code msg");
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < HEADER)
		return 0;
	size_t max_line = 1 + (size_t)((data[0] | data[1] << 8) % MAX_LINE_RANGE);
	uint32_t rnd = (uint32_t)(data[0] | data[1] << 8) * 2654435761u;
	fuzz_run(max_line, NULL, 0, (const char *)data + HEADER, size - HEADER, rnd);
	return 0;
}
