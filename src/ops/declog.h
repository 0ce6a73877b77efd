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
 * shown.h writes it, or "#" and 16 hex digits of a keyed hash. A user is
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

struct config_declog;

/* Opens, reopens or closes the log as c says (at start and on each
 * reload; c->path NULL: off). A file that cannot be opened is logged, and
 * its lines are dropped until a reload names one that can. */
void declog_configure(const struct config_declog *c);

/* Whether the log is on. */
int declog_on(void);

/* One decision, if its user is in the sample. now_ms: the wall clock. */
void declog_decision(uint64_t now_ms, const char *action, size_t alen, const char *user,
		     size_t ulen, int64_t cost, int allowed);

/* Writes what is buffered (the server's timer, and before a rotation). */
void declog_flush(void);

/* Flushes and closes (at exit). */
void declog_close(void);

/* Lines written, and lines dropped (no file, a failed write). */
extern unsigned long long declog_lines, declog_dropped;

#endif
