/* process.c - this process's CPU time, memory and descriptors from /proc, for the process_* metrics. */
#include "process.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Field numbers of proc(5), counted from 1 (pid) */
#define F_STATE 3
#define F_UTIME 14
#define F_STIME 15
#define F_VSIZE 23
#define F_RSS 24

int process_parse_stat(const char *text, size_t len, struct process_stat *out)
{
	/* The command name (field 2) is in parentheses and may hold spaces
	 * and parentheses of its own: the fields we want follow the last ')'. */
	const char *end = text + len, *p = NULL;
	for (const char *q = text; q < end; q++)
		if (*q == ')')
			p = q + 1;
	if (!p)
		return -1;
	uint64_t utime = 0, stime = 0, vsize = 0, rss = 0;
	int field = F_STATE - 1, seen = 0;
	while (p < end && field < F_RSS) {
		while (p < end && *p == ' ')
			p++;
		if (p == end || *p == '\n')
			break;
		field++;
		const char *tok = p;
		while (p < end && *p != ' ' && *p != '\n')
			p++;
		uint64_t *want = field == F_UTIME   ? &utime
				 : field == F_STIME ? &stime
				 : field == F_VSIZE ? &vsize
				 : field == F_RSS   ? &rss
						    : NULL;
		if (!want)
			continue;
		/* rss is signed in the kernel; taken as 0 should it be below */
		int neg = *tok == '-';
		const char *d = tok + neg;
		if (d == p)
			return -1;
		uint64_t v = 0;
		for (; d < p; d++) {
			if (*d < '0' || *d > '9' || v > (UINT64_MAX - 9) / 10)
				return -1;
			v = v * 10 + (uint64_t)(*d - '0');
		}
		*want = neg ? 0 : v;
		seen++;
	}
	if (seen != 4)
		return -1;
	out->cpu_ticks = utime + stime;
	out->vsize = vsize;
	out->rss_pages = rss;
	return 0;
}

/* Descriptors open, counted from /proc/self/fd, at most limit of them
 * (the one listing it not counted); -1 if it cannot be listed. */
static long count_fds(long limit)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	long n = 0;
	struct dirent *e;
	while ((limit < 0 || n <= limit) && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n > 0 ? n - 1 : 0;
}

void process_read(struct process_info *out)
{
	memset(out, 0, sizeof(*out));
	struct rlimit rl;
	out->max_fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
			       ? (long)rl.rlim_cur
			       : -1;
	out->open_fds = count_fds(out->max_fds);

	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	struct process_stat st;
	long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	if (n <= 0 || ticks <= 0 || page <= 0 || process_parse_stat(buf, (size_t)n, &st) < 0)
		return;
	out->have_stat = 1;
	out->cpu_seconds = (double)st.cpu_ticks / (double)ticks;
	out->resident_bytes = st.rss_pages * (uint64_t)page;
	out->virtual_bytes = st.vsize;
}
