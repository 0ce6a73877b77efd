/*
 * declog.h - the decision log (decision_log in the configuration): one line
 * per decision of a sampled share of users, for `ratelimitctl replay`.
 *
 *   # ratelimitd decision log 1 sample=0.25 users=clear
 *   1795838461123 A login 1 alice
 *   1795838461125 D login 1 203.0.113.7
 *
 * Each line: the wall clock in ms, A (allowed) or D (denied, as enforced:
 * a shadow-mode denial is D), the action, the cost, and the user as
 * shown.h writes it (a leading "#" as %23), or "#" and 16 hex digits of
 * a keyed hash. A user is
 * in the sample or not by a hash of its name, so every decision of a
 * sampled user is there and a replay decides it as a daemon would.
 * Lines are buffered (64 KiB, written at least every second by the
 * server's timer) and the file is rotated by size. One process-wide log:
 * the daemon has one thread.
 */
#ifndef RL_DECLOG_H
#define RL_DECLOG_H

#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "policy.h"
#include "shown.h"

struct config_declog;

/* The longest line: a time, a word, an action, a cost and a shown user. */
#define DECLOG_LINE_MAX (20 + 3 + POLICY_NAME_MAX + 21 + SHOWN_USER_MAX(KEYS_USER_MAX) + 4)
/* A user read back: its bytes, or a cut user's 512 and "%..." */
#define KEYS_USER_MAX_SHOWN (KEYS_USER_MAX + 8)

/* Opens, reopens or closes the log as c says (at start and on each
 * reload; c->path NULL: off). A file that cannot be opened is logged, and
 * its lines are dropped until a reload names one that can. */
void declog_configure(const struct config_declog *c);

/* Whether the log is on (a test on every ALLOW: inline). */
extern int declog_enabled;
static inline int declog_on(void)
{
	return declog_enabled;
}

/* One decision, if its user is in the sample. now_ms: the wall clock. */
void declog_decision(uint64_t now_ms, const char *action, size_t alen, const char *user,
		     size_t ulen, int64_t cost, int allowed);

/* Writes what is buffered (the server's timer, and before a rotation). */
void declog_flush(void);

/* Flushes and closes (at exit). */
void declog_close(void);

/* One line of a log, read back (ratelimitctl replay). */
struct declog_line {
	int64_t ms;
	int allowed;
	const char *action; /* into the line */
	size_t action_len;
	int64_t cost;
	char user[KEYS_USER_MAX_SHOWN]; /* its bytes (a hash: "#" and 16 hex digits) */
	size_t user_len;
	int hashed;
};

/* Parses one line (without its LF): 0, 1 for a comment (the header), or
 * -1 when it is not a line the log writes. Pure: no I/O, no allocation. */
int declog_parse(const char *line, size_t len, struct declog_line *out);

/* Writes the line of a decision with a user in clear at p (at most
 * DECLOG_LINE_MAX bytes, LF included); returns its length. */
size_t declog_format(char *p, uint64_t ms, int allowed, const char *action, size_t alen,
		     int64_t cost, const char *user, size_t ulen);

/* Lines written, and lines dropped (no file, a failed write). */
extern unsigned long long declog_lines, declog_dropped;

#endif
