/*
 * pidfile.h - the daemon's pid file (ratelimitd -p FILE), which ratelimitctl
 * reload reads to find the process to signal.
 */
#ifndef RL_PIDFILE_H
#define RL_PIDFILE_H

#include <stddef.h>

/* Writes this process's pid to path, whole or not at all (a temporary file
 * renamed over it). 0, or -1 with err filled. */
int pidfile_write(const char *path, char *err, size_t errlen);

/* Removes path if it still holds this process's pid (a newer daemon may
 * have written its own since). */
void pidfile_remove(const char *path);

#endif
