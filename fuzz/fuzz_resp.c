/*
 * fuzz_resp.c - libFuzzer harness for RESP (src/proto/proto_resp.c): the step
 * conn.c takes, with a connection's state (MULTI), and the reply formatter,
 * through the shared loop of fuzz_step.c. Every reply is formatted in both
 * versions and read back by a strict reader of its own (Debian 12's hiredis,
 * 0.14, reads no RESP3): one well-formed RESP2 value, one well-formed RESP3
 * value, the same bytes in both unless it is a map or INFO's text.
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

/* ---- replies: one well-formed RESP2 or RESP3 value ---- */

/* Skips one value at s[*i]; -1 if malformed, incomplete, or of a type its
 * version lacks (resp3: maps, verbatim strings, nulls, doubles, booleans),
 * or nested deeper than a reply goes (STATE's: its limits, each a map). */
static int resp_value(const char *s, size_t n, size_t *i, int depth, int resp3)
{
	if (*i >= n || depth > 3)
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
	if (resp3 && t == '_')
		return end == body ? 0 : -1;
	if (resp3 && t == '#')
		return end == body + 1 && (s[body] == 't' || s[body] == 'f') ? 0 : -1;
	if (resp3 && t == ',') {
		if (end == body)
			return -1;
		for (size_t k = body; k < end; k++)
			if (!strchr("0123456789.-+eEinfa", s[k]))
				return -1;
		return 0;
	}
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
	if (t == '$' || (resp3 && t == '=')) {
		if (*i + (size_t)v + 2 > n || s[*i + v] != '\r' || s[*i + v + 1] != '\n')
			return -1;
		/* a verbatim string starts with its 3-letter format and ':' */
		if (t == '=' && (v < 4 || s[*i + 3] != ':'))
			return -1;
		*i += (size_t)v + 2;
		return 0;
	}
	if (t == '*' || (resp3 && t == '%')) {
		long long items = t == '%' ? 2 * v : v;
		for (long long e = 0; e < items; e++)
			if (resp_value(s, n, i, depth + 1, resp3) < 0)
				return -1;
		return 0;
	}
	return -1;
}

/* res formatted as the next reply of a connection in state *rc. */
static size_t format_as(const struct cmd_result *res, struct proto_resp_conn *rc, char **out)
{
	char *buf = malloc(proto_resp.reply_max); /* exact size: ASan sees an overflow */
	check(buf != NULL, "out of memory");
	size_t n = proto_resp.format(buf, res, rc);
	check(n > 0 && n <= proto_resp.reply_max, "reply length");
	*out = buf;
	return n;
}

void fuzz_check_reply(const struct cmd_result *res)
{
	char *b2, *b3;
	struct proto_resp_conn rc2 = {0}, rc3 = {.resp3 = 1};
	size_t n2 = format_as(res, &rc2, &b2);
	size_t n3 = format_as(res, &rc3, &b3);
	/* each is in the version its connection speaks once it is written
	 * (HELLO's map: the one it asked for) */
	size_t i = 0;
	check(resp_value(b2, n2, &i, 0, rc2.resp3) == 0 && i == n2,
	      "a reply is one value of its version (RESP2 unless HELLO 3's)");
	i = 0;
	check(resp_value(b3, n3, &i, 0, rc3.resp3) == 0 && i == n3,
	      "a reply is one value of its version (RESP3 unless HELLO 2's)");
	/* only HELLO's map, the empty maps and INFO's text differ by version */
	int same = !(b2[0] == '*' && b3[0] == '%') && !(b2[0] == '$' && b3[0] == '=');
	check(!same || (n2 == n3 && memcmp(b2, b3, n2) == 0),
	      "a reply differs by version only where RESP3 has its own type");
	check((b2[0] != '%' && b3[0] != '%') || res->kind == CMD_REPLY_LOCAL ||
		      res->kind == CMD_REPLY_OK || res->kind == CMD_REPLY_STATE,
	      "only the protocol's own replies, HELLO's and STATE's are maps");
	if (res->kind == CMD_REPLY_STATE)
		check(memcmp(b2, "*4\r\n", 4) == 0 && memcmp(b3, "%4\r\n", 4) == 0,
		      "a STATE is an array of 4 (RESP3: a map of 4)");
	if (res->kind == CMD_REPLY_DECISION)
		check(b2[0] == '*' && b2[1] == (res->multi ? '6' : '5'),
		      "a decision is an array of 5 (6 for MALLOW: the deciding pair)");
	if (res->kind == CMD_REPLY_ERROR)
		check(b2[0] == '-' &&
			      (memcmp(b2, "-ERR ", 5) == 0 || memcmp(b2, "-NOAUTH ", 8) == 0 ||
			       memcmp(b2, "-WRONGPASS ", 11) == 0 ||
			       memcmp(b2, "-EXECABORT ", 11) == 0),
		      "an error is -ERR code msg, or a prefix Redis clients know");
	/* a reply in the version asked switches a connection to it */
	static const char server[] = "\r\n$6\r\nserver\r\n$10\r\nratelimitd\r\n";
	int hello2 = n2 > 4 + sizeof(server) &&
		     memcmp(b2 + (b2[0] == '*' ? 3 : 2), server, sizeof(server) - 1) == 0;
	int hello3 = n3 > 4 + sizeof(server) &&
		     memcmp(b3 + (b3[0] == '*' ? 3 : 2), server, sizeof(server) - 1) == 0;
	check(hello2 == hello3, "HELLO's map in both versions or neither");
	if (hello2) {
		check(memmem(b2, n2, rc2.resp3 ? "proto\r\n:3" : "proto\r\n:2", 9) != NULL &&
			      memmem(b3, n3, rc3.resp3 ? "proto\r\n:3" : "proto\r\n:2", 9) != NULL,
		      "HELLO's map says the version the connection now speaks");
		check((b2[0] == '%') == rc2.resp3 && (b3[0] == '%') == rc3.resp3,
		      "HELLO's map is in the version it switched to");
	} else {
		check(rc2.resp3 == 0 && rc3.resp3 == 1, "only HELLO's map switches versions");
	}
	free(b2);
	free(b3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < HEADER)
		return 0;
	size_t max_line = 1 + (size_t)((data[0] | data[1] << 8) % MAX_LINE_RANGE);
	uint32_t rnd = (uint32_t)(data[0] | data[1] << 8) * 2654435761u;
	struct proto_resp_conn rc = {0}; /* a new connection's: no MULTI open */
	fuzz_run(max_line, &rc, sizeof(rc), (const char *)data + HEADER, size - HEADER, rnd);
	return 0;
}
