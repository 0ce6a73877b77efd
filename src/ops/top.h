/*
 * top.h - heavy hitters of one policy: the users with the most requests and
 * the most denials over about the last minute, in fixed memory.
 *
 * Each list is a Space-Saving summary (Metwally et al.) of TOP_ENTRIES
 * users: a user seen is counted in its entry; a new one, with every entry
 * taken, replaces the smallest and starts from its count (kept as the
 * entry's error: its count is over by at most that). Any user whose true
 * count exceeds the list's total / TOP_ENTRIES is in the list, and no
 * count is over by more than that.
 *
 * Two windows of TOP_WINDOW_US each: the current one and the one before.
 * A read estimates the last TOP_WINDOW_US as the sliding window counter
 * does: the current window's count plus the previous one's, weighted by
 * the part of it still inside. The clock is the caller's (now_us,
 * monotonic): nothing here reads one.
 */
#ifndef RL_TOP_H
#define RL_TOP_H

#include <stddef.h>
#include <stdint.h>

#define TOP_ENTRIES 32
#define TOP_WINDOW_US 60000000ULL
/* Bytes of a user kept; a longer one is shown cut. Two users longer than
 * this are told apart by their length too, not by the bytes past it. */
#define TOP_NAME_MAX 64
/* The most users a read returns. */
#define TOP_ROWS_MAX TOP_ENTRIES

enum top_by { TOP_BY_DENIED, TOP_BY_REQUESTS };

struct top_entry {
	uint64_t head; /* the name's first 8 bytes (zero-padded): a quick test */
	uint32_t count, err;
	uint16_t len; /* the user's length (more than TOP_NAME_MAX: cut) */
	char name[TOP_NAME_MAX];
};

struct top_list {
	struct top_entry e[TOP_ENTRIES];
	uint32_t n;
	uint64_t total; /* everything counted in the window, kept or not */
};

/* Requests and denials, this window and the one before. */
struct top {
	uint64_t start_us; /* the current window's start; 0: nothing counted yet */
	struct top_list cur[2], prev[2];
};

/* One user as a read shows it: estimates over the last TOP_WINDOW_US. */
struct top_row {
	char name[TOP_NAME_MAX];
	size_t len;
	size_t cut;		   /* cut at TOP_NAME_MAX: the user's whole length; 0: whole */
	uint64_t requests, denied; /* rounded estimates */
	uint64_t over;		   /* the ranked count is over by at most this */
};

/* Counts one decision for user (at most 65535 bytes): a request unless
 * peek, and a denial when denied. */
void top_count(struct top *t, const char *user, size_t len, int request, int denied,
	       uint64_t now_us);

/* The top users by `by` (most first; ties by name), at most max (at most
 * TOP_ROWS_MAX) into rows; returns how many. Users with no count of `by`
 * are left out. */
size_t top_read(struct top *t, enum top_by by, uint64_t now_us, struct top_row *rows, size_t max);

/* The estimated totals over the last TOP_WINDOW_US (requests, denials). */
void top_totals(struct top *t, uint64_t now_us, uint64_t *requests, uint64_t *denied);

#endif
