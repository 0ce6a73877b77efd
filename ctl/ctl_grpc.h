/*
 * ctl_grpc.h - ratelimitctl's gRPC commands (ctl_grpc.c): `rls`, Envoy's
 * ShouldRateLimit, and `health`, grpc.health.v1 Check, on a `protocol:
 * grpc` listener.
 */
#ifndef RL_CTL_GRPC_H
#define RL_CTL_GRPC_H

struct ctl_ctx;

/* Runs x->command ("rls" or "health") on its arguments (after the command
 * word), within x->timeout_ms for the whole call (connecting, sending, the
 * answer); the listener is --addr, else the first grpc one of the config
 * file at config_path (ctl_choose_address). Prints the answer or the error
 * and returns the exit status: 0 OK / SERVING, 1 OVER_LIMIT / not SERVING,
 * 2 an error. */
int ctl_grpc(struct ctl_ctx *x, const char *config_path, char **args, int nargs);

#endif
