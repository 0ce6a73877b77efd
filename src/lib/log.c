/* log.c - leveled logging to stderr; one line per call, written with a single write(2). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int threshold = LOG_LEVEL_INFO;
const struct yenum log_level_names[] = {
	{"debug", LOG_LEVEL_DEBUG, NULL},
	{"info", LOG_LEVEL_INFO, NULL},
	{"warn", LOG_LEVEL_WARN, NULL},
	{"error", LOG_LEVEL_ERROR, NULL},
	{NULL, 0, NULL},
};

void log_set_level(int level)
{
	threshold = level;
}

int log_get_level(void)
{
	return threshold;
}

int log_level_parse(const char *s)
{
	int level;
	return yenum_parse(log_level_names, s, strlen(s), &level) == 0 ? level : -1;
}

const char *log_level_name(int level)
{
	const char *name = yenum_name(log_level_names, level);
	return name ? name : "?";
}

static void log_emit(int level, const char *fmt, va_list ap)
{
	char line[2048];
	int n = snprintf(line, sizeof(line), "%s: ", log_level_names[level].name);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}

#define LOG_FN(fn, level)                 \
	void fn(const char *fmt, ...)     \
	{                                 \
		if (level < threshold)    \
			return;           \
		va_list ap;               \
		va_start(ap, fmt);        \
		log_emit(level, fmt, ap); \
		va_end(ap);               \
	}

LOG_FN(log_debug, LOG_LEVEL_DEBUG)
LOG_FN(log_info, LOG_LEVEL_INFO)
LOG_FN(log_warn, LOG_LEVEL_WARN)
LOG_FN(log_error, LOG_LEVEL_ERROR)

void log_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_emit(LOG_LEVEL_ERROR, fmt, ap);
	va_end(ap);
	exit(1);
}
