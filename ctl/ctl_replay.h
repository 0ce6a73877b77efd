/*
 * ctl_replay.h - `ratelimitctl replay LOG... CANDIDATE`: a decision log
 * (decision_log, src/ops/declog.h) decided again under another
 * configuration, in this process, by the memory store on the log's own
 * clock, and what would change, per action: decisions newly denied and
 * newly allowed, and the users most affected. Deterministic: the same logs
 * and configuration print the same report.
 */
#ifndef RL_CTL_REPLAY_H
#define RL_CTL_REPLAY_H

struct ctl_ctx;

/* args: the log files, oldest first, then the candidate configuration.
 * Prints the report (text, or --json's object); the exit status: 0, or 2
 * for an error (a file that cannot be read, an invalid configuration). */
int ctl_replay(struct ctl_ctx *x, char **args, int nargs);

#endif
