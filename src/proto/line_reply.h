/*
 * line_reply.h - the client side of the line protocol (proto/protocol.md):
 * one reply line ("ALLOWED 5 4 0 60000", "ERR forbidden ...") parsed into
 * its fields. Pure: no I/O, no allocation; the strings point into the line.
 * Used by ratelimitctl and ratelimit-bench.
 */
#ifndef RL_LINE_REPLY_H
#define RL_LINE_REPLY_H

#include <stddef.h>
#include <stdint.h>

enum line_reply_kind {
	LINE_REPLY_ALLOWED,
	LINE_REPLY_DENIED,
	LINE_REPLY_OK,
	LINE_REPLY_PONG,
	LINE_REPLY_BYE,
	LINE_REPLY_ERR,
	LINE_REPLY_OVERRIDE, /* an item of OVERRIDES */
	LINE_REPLY_END,	     /* past OVERRIDES' or TOP's last item */
	LINE_REPLY_TOP,	     /* an item of TOP */
	LINE_REPLY_STATE,    /* STATE's limits */
};

/* The most limits a STATE reply lists (policy.h's POLICY_MAX_LIMITS). */
#define LINE_REPLY_LIMITS_MAX 8

struct line_reply_str {
	const char *p;
	size_t len;
};

struct line_reply {
	enum line_reply_kind kind;
	/* ALLOWED, DENIED: as proto/protocol.md's "Reply fields" */
	int64_t limit, remaining, retry_after_ms, reset_ms;
	/* MALLOW, MPEEK: the deciding pair (1-based; 0 none); -1: not there */
	int64_t pair;
	/* ACQUIRE, RENEW: the lease's id (len 0: none) */
	struct line_reply_str lease;
	/* ERR: the code (one word) and the message (may be empty) */
	struct line_reply_str code, message;
	/* OVERRIDE: index user action spec ttl_ms; END: index is the count */
	int64_t index, ttl_ms;
	struct line_reply_str user, action, spec;
	/* TOP: index user (as shown: %XX) denied requests over; TOP's END:
	 * index, then the action's requests and denied (-1: an END of
	 * OVERRIDES, without them) */
	int64_t denied, requests, over;
	/* STATE: the algorithm, the override (none, limits, unlimited,
	 * blocked), a ban's time left (ms, 0: none) and per limit, in the
	 * policy's order: window_ms limit used remaining reset_ms start_ms
	 * end_ms */
	struct line_reply_str algorithm, override;
	int64_t ban_ms;
	int nlimits;
	int64_t limits[LINE_REPLY_LIMITS_MAX][7];
};

/*
 * Parses one reply line, without its LF (a trailing CR is dropped). 0 with
 * *out filled, or -1 when the line is not a reply this protocol sends.
 */
int line_reply_parse(const char *line, size_t len, struct line_reply *out);

/* A decision the store did not make (remaining -1, a limit): on_store_error's answer. */
int line_reply_is_fallback(const struct line_reply *r);

/* An unlimited override's answer: ALLOWED -1 -1 0 -1 (limit -1: none applies). */
int line_reply_is_unlimited(const struct line_reply *r);

/* A blocked override's answer: DENIED <limit> 0 -1 -1 (never allowed). */
int line_reply_is_blocked(const struct line_reply *r);

#endif
