/* log.h - leveled logging to stderr ("info: message"), for systemd's journal. */
#ifndef RL_LOG_H
#define RL_LOG_H

/* Prefixed: <syslog.h> defines LOG_DEBUG, LOG_INFO, LOG_ERR... as macros. */
enum log_level { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR };

void log_set_level(int level);
int log_get_level(void);
/* "debug" | "info" | "warn" | "error" -> level, or -1. */
int log_level_parse(const char *s);
const char *log_level_name(int level);

void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Logs and exits 1. */
void log_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* The word to print after a count n: log_plural(n, "policy", "policies"). */
static inline const char *log_plural(unsigned long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

#endif
