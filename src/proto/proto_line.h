/*
 * proto_line.h - the line protocol (proto/protocol.md): one request per
 * line ("ALLOW david reply"), one reply line each ("ALLOWED 5 4 0 60000").
 */
#ifndef RL_PROTO_LINE_H
#define RL_PROTO_LINE_H

#include <stddef.h>

#include "proto.h"

/* Longest reply line, newline included. */
/* a STATE: eight limits of seven numbers (an OVERRIDES item: a user
 * (512), an action (64), a spec (256), numbers) */
#define PROTO_LINE_REPLY_MAX 2048

extern const struct proto proto_line;

/* Its pieces, for the tests and the fuzzer. */

/*
 * Framing: looks for the end of the first line in buf. Returns the length of
 * the line content (LF excluded) and sets *consumed to the bytes to drop
 * (content + LF); returns -1 when no LF is there yet, -2 when no LF appears
 * within max_line bytes (the line is too long).
 */
long proto_line_frame(const char *buf, size_t len, size_t max_line, size_t *consumed);

/*
 * Parses one line (without its LF; a trailing CR is allowed and ignored).
 * Returns 0 with *req filled (pointing into line), or -1 with *err filled.
 */
int proto_line_parse(const char *line, size_t len, struct cmd_request *req,
		     struct proto_error *err);

/* Writes res's reply line (at most PROTO_LINE_REPLY_MAX bytes). */
size_t proto_line_format(char *buf, const struct cmd_result *res);

#endif
