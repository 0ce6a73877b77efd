/*
 * watch.h - files whose change reloads the configuration (`watch: true`).
 *
 * inotify watches the directory of each file (and of the file a symlink
 * leads to), not the file: a kubelet updates a mounted ConfigMap or Secret
 * by writing a new timestamped directory and renaming the `..data` symlink
 * over the old one, and an editor writes a new file and renames it over
 * the old; a watch on the old file would see neither. Any event in those
 * directories starts a short quiet period (debounce); at its end each
 * file's content is compared with what it was, and only a real change
 * calls back, once, whatever the number of events. A directory that goes
 * (an unmounted volume) is looked for again every second until it is back.
 */
#ifndef RL_WATCH_H
#define RL_WATCH_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct watch;

/* The quiet period after the last event before the files are compared:
 * the kubelet's swap and an editor's save are each done well within it. */
#define WATCH_DEBOUNCE_MS 200
/* How often directories that are not there are looked for. */
#define WATCH_RETRY_MS 1000

/* Called once per change (path: the first file found changed); the files
 * compared then are the new baseline. */
typedef void watch_fn(void *arg, const char *path);

/* NULL when out of memory. Watches nothing until watch_set. */
struct watch *watch_new(struct event_base *base, watch_fn *fn, void *arg);
/* Watches exactly paths[0..n) from now on (0: none), their content now the
 * baseline. -1 with err when inotify cannot be had (then nothing is
 * watched); a path or directory missing now is not an error: it is looked
 * for until it comes. */
int watch_set(struct watch *w, const char *const *paths, size_t n, char *err, size_t errlen);
/* The files and directories watched now (for logs and tests). */
size_t watch_files(const struct watch *w);
size_t watch_dirs(const struct watch *w);
void watch_free(struct watch *w);

#endif
