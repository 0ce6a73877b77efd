/*
 * fuzz_http.c - libFuzzer harness for HTTP (src/proto/proto_http.c): the step
 * conn.c takes and the reply formatter, through the shared loop of
 * fuzz_step.c. Every reply is checked to be one well-formed HTTP/1.1
 * response whose Content-Length is its body's.
 *
 * Input: a 4-byte header, then the byte stream a client sends.
 *   bytes 0-1  max_line = 1 + (little-endian u16 % 32768); also seeds the
 *              random chunk sizes
 *   byte 2     the listener: bit 0 user_header set, bit 1 the peer is
 *              trusted, bit 2 legacy headers, bit 3 deny_status 403
 *   byte 3     the peer: 127.0.0.N, or a unix socket when 0
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_step.h"
#include "proto_http.h"

#define HEADER 4
#define MAX_LINE_RANGE 32768

const char *const fuzz_name = "fuzz_http";
const struct proto *const fuzz_proto = &proto_http;

static int starts(const char *s, size_t n, const char *p)
{
	size_t l = strlen(p);
	return n >= l && memcmp(s, p, l) == 0;
}

void fuzz_check_reply(const struct cmd_result *res)
{
	char *buf = malloc(proto_http.reply_max); /* exact size: ASan sees an overflow */
	check(buf != NULL, "out of memory");
	size_t n = proto_http.format(buf, res, NULL);
	check(n > 0 && n <= proto_http.reply_max, "reply length");
	check(starts(buf, n, "HTTP/1.1 ") && n > 12 && buf[9] >= '1' && buf[9] <= '5',
	      "a status line");
	/* header lines: no bare CR or LF, a colon each, then an empty line */
	size_t i = 0, clen = (size_t)-1;
	int lines = 0, closes = 0;
	for (;;) {
		const char *crlf = NULL;
		for (size_t k = i; k + 1 < n; k++)
			if (buf[k] == '\r' && buf[k + 1] == '\n') {
				crlf = buf + k;
				break;
			}
		check(crlf != NULL, "every header line ends in CRLF");
		size_t end = (size_t)(crlf - buf);
		for (size_t k = i; k < end; k++)
			check(buf[k] != '\r' && buf[k] != '\n', "no CR or LF inside a header line");
		if (end == i) {
			i = end + 2;
			break;
		}
		if (lines++ > 0) {
			check(memchr(buf + i, ':', end - i) != NULL, "a header has a colon");
			if (starts(buf + i, end - i, "Content-Length: "))
				clen = (size_t)strtoul(buf + i + 16, NULL, 10);
			if (starts(buf + i, end - i, "Connection: close"))
				closes = 1;
		}
		i = end + 2;
	}
	check(clen != (size_t)-1, "a Content-Length");
	if (res->tag & 0x8) { /* a HEAD's (proto_http.c's TAG_HEAD): the head alone */
		check(i == n, "no body after a HEAD's head");
		free(buf);
		return;
	}
	check(i + clen == n, "Content-Length is the body's length");
	check(closes == (res->close_after != 0), "Connection: close iff the connection closes");
	if (res->kind == CMD_REPLY_STATE)
		check(starts(buf, n, "HTTP/1.1 200 ") && clen > 0 && buf[i] == '{' &&
			      buf[n - 1] == '\n',
		      "a STATE is a 200 with a JSON body");
	if (res->kind == CMD_REPLY_DECISION && (res->tag & 3) == 0)
		check(clen > 0 && buf[i] == '{' && buf[n - 1] == '\n',
		      "a decision has a JSON body");
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < HEADER)
		return 0;
	size_t max_line = 1 + (size_t)((data[0] | data[1] << 8) % MAX_LINE_RANGE);
	uint32_t rnd = (uint32_t)(data[0] | data[1] << 8) * 2654435761u;
	static struct http_conn pc;
	memset(&pc, 0, sizeof(pc));
	if (data[2] & 1)
		memcpy(pc.http.user_header, "X-User", 7);
	pc.http.legacy_headers = (data[2] & 4) != 0;
	pc.http.deny_status = data[2] & 8 ? 403 : 429;
	addr_net_parse("127.0.0.0/8", 11, &pc.http.trusted[0]);
	pc.http.ntrusted = 1;
	if (data[3]) {
		char ip[16] = "127.0.0.";
		size_t l = 8;
		l += (size_t)(data[3] >= 100) + (size_t)(data[3] >= 10) + 1;
		for (size_t k = l, v = data[3]; k > 8; k--, v /= 10)
			ip[k - 1] = (char)('0' + v % 10);
		addr_ip_parse(ip, l, &pc.peer);
	}
	pc.peer_trusted = (data[2] & 2) != 0;
	fuzz_run(max_line, &pc, sizeof(pc), (const char *)data + HEADER, size - HEADER, rnd);
	return 0;
}
