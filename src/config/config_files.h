/*
 * config_files.h - the files a configuration reads besides its own: what a
 * reload reads again, so what `watch: true` watches (ops/watch.h).
 */
#ifndef RL_CONFIG_FILES_H
#define RL_CONFIG_FILES_H

struct config;

/* Calls fn once with each file (or directory: envoy.config, a TLS ca_dir)
 * cfg names: envoy.config, identities' token files, every TLS section's
 * files (listeners, metrics, Redis), the decision log's hash key. */
void config_files(const struct config *cfg, void (*fn)(const char *path, void *arg), void *arg);

#endif
