/* pidfile.c - writing and removing the pid file (see pidfile.h). */
#include "pidfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pidfile_write(const char *path, char *err, size_t errlen)
{
	char tmp[4096], text[32];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid()) >= sizeof(tmp)) {
		snprintf(err, errlen, "pid file %s: path too long", path);
		return -1;
	}
	int len = snprintf(text, sizeof(text), "%ld\n", (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		snprintf(err, errlen, "pid file %s: %s", tmp, strerror(errno));
		return -1;
	}
	ssize_t n = write(fd, text, (size_t)len);
	int e = n == len ? 0 : n < 0 ? errno : EIO;
	if (close(fd) < 0 && !e)
		e = errno;
	if (!e && rename(tmp, path) < 0)
		e = errno;
	if (e) {
		unlink(tmp);
		snprintf(err, errlen, "pid file %s: %s", path, strerror(e));
		return -1;
	}
	return 0;
}

void pidfile_remove(const char *path)
{
	char buf[32] = {0};
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0 && strtol(buf, NULL, 10) == (long)getpid())
		unlink(path);
}
