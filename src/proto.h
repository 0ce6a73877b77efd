/* proto.h - the line protocol: a pure parser (bytes in, command out) and reply formatting. */
#ifndef RL_PROTO_H
#define RL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PROTO_DEFAULT_MAX_LINE 4096
#define PROTO_COST_MAX 2147483647LL
/* Longest reply line we format, newline included. */
#define PROTO_REPLY_MAX 160

enum proto_verb {
	PROTO_ALLOW,
	PROTO_PEEK,
	PROTO_RESET,
	PROTO_PING,
	PROTO_QUIT,
};

/* Points into the parsed line; valid as long as the line is. */
struct proto_cmd {
	enum proto_verb verb;
	const char *user;
	size_t user_len;
	const char *action;
	size_t action_len;
	int64_t cost;
};

/* An error reply: code is one of the words listed in proto/protocol.md. */
struct proto_err {
	const char *code;
	const char *msg;
};

/*
 * Parses one line (without its LF; a trailing CR is allowed and ignored).
 * Returns 0 with *cmd filled, or -1 with *err filled. Allocates nothing.
 */
int proto_parse(const char *line, size_t len, struct proto_cmd *cmd, struct proto_err *err);

/*
 * Framing: looks for the end of the first line in buf. Returns the length of
 * the line content (LF excluded) and sets *consumed to the bytes to drop
 * (content + LF); returns -1 when no LF is there yet, -2 when no LF appears
 * within max_line bytes (the line is too long).
 */
long proto_frame(const char *buf, size_t len, size_t max_line, size_t *consumed);

/* Reply formatting; each returns the bytes written (newline included). */
size_t proto_format_decision(char *buf, int allowed, int64_t limit, int64_t remaining,
			     int64_t retry_after_ms, int64_t reset_ms);
size_t proto_format_err(char *buf, const char *code, const char *msg);
size_t proto_format_str(char *buf, const char *word);

#endif
