/* sd.h - systemd notifications: readiness, status, watchdog (no-ops without libsystemd or NOTIFY_SOCKET). */
#ifndef RL_SD_H
#define RL_SD_H

void sd_notify_ready(const char *status);
/* RELOADING=1 with MONOTONIC_USEC, as Type=notify-reload expects. */
void sd_notify_reloading(void);
void sd_notify_stopping(void);
/* STATUS=text: what `systemctl status` shows. */
void sd_notify_status(const char *text);
/* The watchdog interval systemd expects WATCHDOG=1 within (WatchdogSec=),
 * in microseconds; 0 when there is no watchdog. */
unsigned long long sd_watchdog_usec(void);
void sd_notify_watchdog(void);

#endif
