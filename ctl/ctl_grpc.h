/*
 * ctl_grpc.h - ratelimitctl's gRPC commands (ctl_grpc.c): `rls`, Envoy's
 * ShouldRateLimit, and `health`, grpc.health.v1 Check, on a `protocol:
 * grpc` listener.
 */
#ifndef RL_CTL_GRPC_H
#define RL_CTL_GRPC_H

#include <stdint.h>

struct ctl_grpc_opts {
	const char *command;	 /* "rls" or "health" */
	const char *config_path; /* where the first grpc listener is found */
	int json;
	int64_t timeout_ms; /* the whole call: connecting, sending, the answer */
};

/* Runs the command on its arguments (after the command word); prints the
 * answer or the error. Returns the exit status: 0 OK / SERVING, 1
 * OVER_LIMIT / not SERVING, 2 an error. */
int ctl_grpc(const struct ctl_grpc_opts *o, char **args, int nargs);

#endif
