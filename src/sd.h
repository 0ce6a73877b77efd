/* sd.h - systemd readiness notifications (no-ops without libsystemd or NOTIFY_SOCKET). */
#ifndef RL_SD_H
#define RL_SD_H

void sd_notify_ready(const char *status);
/* RELOADING=1 with MONOTONIC_USEC, as Type=notify-reload expects. */
void sd_notify_reloading(void);
void sd_notify_stopping(void);

#endif
