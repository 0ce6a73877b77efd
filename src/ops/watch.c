/* watch.c - files whose change reloads the configuration (see watch.h). */
#include "watch.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "siphash.h"

/* The most bytes of a file compared (a configuration, a certificate, a
 * token, envoy's rules: far less), and of a directory's files. */
#define FILE_READ_MAX (64 * 1024 * 1024)
#define DIR_FILES_MAX 1024

#define DIR_EVENTS                                                                          \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY | \
	 IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

struct wfile {
	char *path;
	uint64_t sum; /* of its content (a directory's: its files'); 0: not there */
};

struct wdir {
	char *path;
	int wd; /* -1: not there now (looked for every WATCH_RETRY_MS) */
};

struct watch {
	struct event_base *base;
	watch_fn *fn;
	void *arg;
	int fd; /* inotify's; -1 until the first watch_set */
	struct event *readable, *quiet, *retry;
	struct wfile *files;
	size_t nfiles;
	struct wdir *dirs;
	size_t ndirs, dircap;
};

/* Only compared with itself: any fixed key does. */
static const uint8_t sum_key[16] = "ratelimitd watch";

/* The content of the regular file at path (symlinks followed) into *sum,
 * mixed with what was there before. 0, or -1 when it cannot be read. */
static int sum_file(const char *path, uint64_t *sum)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -1;
	}
	uint8_t buf[65536];
	size_t total = 0;
	ssize_t n;
	while (total < FILE_READ_MAX && (n = read(fd, buf, sizeof(buf))) > 0) {
		uint64_t part[2] = {*sum, siphash24(sum_key, buf, (size_t)n)};
		*sum = siphash24(sum_key, part, sizeof(part));
		total += (size_t)n;
	}
	close(fd);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

/* What a reload would read at path now: a file's content, or a directory's
 * regular files (names and contents, in name order, one level, as envoy's
 * rules are read). Never 0 for something there; 0 for nothing. */
static uint64_t sum_path(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return 0;
	uint64_t sum = 1;
	if (!S_ISDIR(st.st_mode))
		return sum_file(path, &sum) < 0 ? 0 : sum | 1;
	struct dirent **names;
	int n = scandir(path, &names, NULL, by_name);
	if (n < 0)
		return 0;
	for (int i = 0; i < n; i++) {
		char full[PATH_MAX];
		if (i < DIR_FILES_MAX && snprintf(full, sizeof(full), "%s/%s", path,
						  names[i]->d_name) < (int)sizeof(full)) {
			uint64_t before = sum;
			if (sum_file(full, &sum) == 0) { /* a regular file: its name too */
				uint64_t part[2] = {sum ^ before,
						    siphash24(sum_key, names[i]->d_name,
							      strlen(names[i]->d_name))};
				sum = siphash24(sum_key, part, sizeof(part));
			}
		}
		free(names[i]);
	}
	free(names);
	return sum | 1;
}

/* The directory path's events come from: path itself when it is a
 * directory, else the one holding it. */
static int dir_of(const char *path, char *out, size_t len)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return snprintf(out, len, "%s", path) < (int)len ? 0 : -1;
	const char *slash = strrchr(path, '/');
	if (!slash)
		return snprintf(out, len, ".") < (int)len ? 0 : -1;
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= len)
		return -1;
	memcpy(out, path, n);
	out[n] = '\0';
	return 0;
}

static void dir_add(struct watch *w, const char *dir)
{
	for (size_t i = 0; i < w->ndirs; i++)
		if (strcmp(w->dirs[i].path, dir) == 0)
			return;
	if (w->ndirs == w->dircap) {
		size_t cap = w->dircap ? 2 * w->dircap : 8;
		struct wdir *d = realloc(w->dirs, cap * sizeof(*d));
		if (!d)
			return; /* out of memory: that directory unwatched */
		w->dirs = d;
		w->dircap = cap;
	}
	char *copy = strdup(dir);
	if (!copy)
		return;
	w->dirs[w->ndirs++] = (struct wdir){copy, -1};
}

/*
 * Watches the directories of the files as they are now: a symlink's
 * target may have moved (the kubelet's `..data` swap), a directory may
 * have come or gone. Those no longer needed are let go; the retry timer
 * runs while one is missing.
 */
static void arm(struct watch *w)
{
	struct wdir *old = w->dirs;
	size_t nold = w->ndirs;
	w->dirs = NULL;
	w->ndirs = w->dircap = 0;
	for (size_t i = 0; i < w->nfiles; i++) {
		char dir[PATH_MAX], real[PATH_MAX];
		if (dir_of(w->files[i].path, dir, sizeof(dir)) == 0)
			dir_add(w, dir);
		/* a symlink's target elsewhere: its directory's events too */
		if (realpath(w->files[i].path, real) && dir_of(real, dir, sizeof(dir)) == 0)
			dir_add(w, dir);
	}
	int missing = 0;
	for (size_t i = 0; i < w->ndirs; i++) {
		w->dirs[i].wd = inotify_add_watch(w->fd, w->dirs[i].path, DIR_EVENTS);
		missing |= w->dirs[i].wd < 0;
	}
	for (size_t i = 0; i < nold; i++) {
		int kept = 0;
		for (size_t j = 0; j < w->ndirs && !kept; j++)
			kept = old[i].wd >= 0 && w->dirs[j].wd == old[i].wd;
		if (old[i].wd >= 0 && !kept)
			inotify_rm_watch(w->fd, old[i].wd);
		free(old[i].path);
	}
	free(old);
	if (missing && !evtimer_pending(w->retry, NULL)) {
		struct timeval tv = {WATCH_RETRY_MS / 1000, (WATCH_RETRY_MS % 1000) * 1000};
		evtimer_add(w->retry, &tv);
	}
}

/* The quiet period is over (or a missing directory is looked for): compare,
 * watch what is there now, and call back once if anything changed. */
static void check(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	struct watch *w = arg;
	char changed[PATH_MAX] = "";
	for (size_t i = 0; i < w->nfiles; i++) {
		uint64_t sum = sum_path(w->files[i].path);
		if (sum != w->files[i].sum && !changed[0])
			snprintf(changed, sizeof(changed), "%s", w->files[i].path);
		w->files[i].sum = sum;
	}
	arm(w);
	if (changed[0])
		w->fn(w->arg, changed); /* last: it may watch_set again */
}

/* Events: whatever they are, the quiet period starts again. */
static void readable(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct watch *w = arg;
	_Alignas(struct inotify_event) char buf[16384];
	int seen = 0;
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			/* IN_IGNORED: a watch let go (ours, or its directory gone,
			 * which IN_DELETE_SELF said already) */
			seen |= !(ev->mask & IN_IGNORED);
			p += sizeof(*ev) + ev->len;
		}
	}
	if (n < 0 && errno != EAGAIN && errno != EINTR)
		log_warn("watch: reading inotify: %s", strerror(errno));
	if (seen) {
		struct timeval tv = {WATCH_DEBOUNCE_MS / 1000, (WATCH_DEBOUNCE_MS % 1000) * 1000};
		evtimer_add(w->quiet, &tv);
	}
}

struct watch *watch_new(struct event_base *base, watch_fn *fn, void *arg)
{
	struct watch *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->base = base;
	w->fn = fn;
	w->arg = arg;
	w->fd = -1;
	w->quiet = evtimer_new(base, check, w);
	w->retry = evtimer_new(base, check, w);
	if (!w->quiet || !w->retry) {
		watch_free(w);
		return NULL;
	}
	return w;
}

static void files_free(struct watch *w)
{
	for (size_t i = 0; i < w->nfiles; i++)
		free(w->files[i].path);
	free(w->files);
	w->files = NULL;
	w->nfiles = 0;
}

int watch_set(struct watch *w, const char *const *paths, size_t n, char *err, size_t errlen)
{
	files_free(w);
	if (n == 0) {
		arm(w); /* lets every directory go */
		evtimer_del(w->quiet);
		evtimer_del(w->retry);
		return 0;
	}
	if (w->fd < 0) {
		w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
		if (w->fd < 0) {
			snprintf(err, errlen, "inotify: %s", strerror(errno));
			return -1;
		}
		w->readable = event_new(w->base, w->fd, EV_READ | EV_PERSIST, readable, w);
		if (!w->readable || event_add(w->readable, NULL) < 0) {
			snprintf(err, errlen, "inotify: cannot watch its descriptor");
			return -1;
		}
	}
	w->files = calloc(n, sizeof(*w->files));
	if (!w->files) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		char *copy = strdup(paths[i]);
		if (!copy) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		w->files[w->nfiles++] = (struct wfile){copy, sum_path(copy)};
	}
	arm(w);
	return 0;
}

size_t watch_files(const struct watch *w)
{
	return w->nfiles;
}

size_t watch_dirs(const struct watch *w)
{
	size_t n = 0;
	for (size_t i = 0; i < w->ndirs; i++)
		n += w->dirs[i].wd >= 0;
	return n;
}

void watch_free(struct watch *w)
{
	if (!w)
		return;
	files_free(w);
	for (size_t i = 0; i < w->ndirs; i++)
		free(w->dirs[i].path);
	free(w->dirs);
	if (w->readable)
		event_free(w->readable);
	if (w->quiet)
		event_free(w->quiet);
	if (w->retry)
		event_free(w->retry);
	if (w->fd >= 0)
		close(w->fd);
	free(w);
}
