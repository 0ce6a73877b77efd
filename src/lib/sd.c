/* sd.c - systemd notifications (see sd.h); compiled to no-ops without libsystemd. */
#include "sd.h"

#ifdef HAVE_SYSTEMD
#include <stdint.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>
#include <time.h>

void sd_notify_ready(const char *status)
{
	sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void sd_notify_reloading(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	unsigned long long usec = (unsigned long long)ts.tv_sec * 1000000ull +
				  (unsigned long long)ts.tv_nsec / 1000ull;
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu", usec);
}

void sd_notify_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}

void sd_notify_status(const char *text)
{
	sd_notifyf(0, "STATUS=%s", text);
}

unsigned long long sd_watchdog_usec(void)
{
	uint64_t usec = 0;
	/* keeps $WATCHDOG_USEC: a child would not be pinging for us anyway */
	return sd_watchdog_enabled(0, &usec) > 0 ? (unsigned long long)usec : 0;
}

void sd_notify_watchdog(void)
{
	sd_notify(0, "WATCHDOG=1");
}
#else
void sd_notify_ready(const char *status)
{
	(void)status;
}

void sd_notify_reloading(void)
{
}

void sd_notify_stopping(void)
{
}

void sd_notify_status(const char *text)
{
	(void)text;
}

unsigned long long sd_watchdog_usec(void)
{
	return 0;
}

void sd_notify_watchdog(void)
{
}
#endif
