/*
 * process.h - what the kernel says of this process (CPU time, memory,
 * descriptors), for the process_* metrics. Read only when /metrics is
 * scraped, never on a request's path.
 */
#ifndef RL_PROCESS_H
#define RL_PROCESS_H

#include <stddef.h>
#include <stdint.h>

struct process_stat {
	uint64_t cpu_ticks; /* user + system, in clock ticks */
	uint64_t vsize;	    /* virtual memory, bytes */
	uint64_t rss_pages; /* resident memory, pages */
};

/* Parses the text of /proc/PID/stat (proc(5)); 0, or -1 if it is not that. Pure. */
int process_parse_stat(const char *text, size_t len, struct process_stat *out);

struct process_info {
	int have_stat; /* the fields below it are known */
	double cpu_seconds;
	uint64_t resident_bytes, virtual_bytes;
	long open_fds; /* -1: unknown */
	long max_fds;  /* the soft RLIMIT_NOFILE; -1: unknown or unlimited */
};

/* This process's, now: reads /proc/self/stat, lists /proc/self/fd (at most
 * max_fds entries) and asks getrlimit. Parts it cannot read are unknown. */
void process_read(struct process_info *out);

#endif
