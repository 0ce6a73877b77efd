/* log.h - leveled logging to stderr ("info: message"), for systemd's journal. */
#ifndef RL_LOG_H
#define RL_LOG_H

#include <stddef.h>

#include "yenum.h"

/* Prefixed: <syslog.h> defines LOG_DEBUG, LOG_INFO, LOG_ERR... as macros. */
enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

void log_set_level(int level);
int log_get_level(void);
/* "debug", "info", "warn", "error": entry i names level i. */
extern const struct yenum log_level_names[];
/* "debug" | "info" | "warn" | "error" -> level, or -1. */
int log_level_parse(const char *s);
const char *log_level_name(int level);

void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Logs and exits 1. */
void log_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* The length of a reason (len bytes) to print as "%.*s" before "; more":
 * without the final '.' Redis ends its texts with ("NOAUTH Authentication
 * required."), so the line does not read "required.; answering". */
static inline int log_reason_len(const char *why, size_t len)
{
	while (len && (why[len - 1] == '.' || why[len - 1] == ' '))
		len--;
	return len > 0x7fffffff ? 0x7fffffff : (int)len;
}

/* The word to print after a count n: log_plural(n, "policy", "policies"). */
static inline const char *log_plural(unsigned long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

#endif
