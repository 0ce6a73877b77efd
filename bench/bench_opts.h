/*
 * bench_opts.h - ratelimit-bench's command line: the options, their defaults,
 * parsing and checking (with --config, the daemon's YAML fills in the rest).
 */
#ifndef RL_BENCH_OPTS_H
#define RL_BENCH_OPTS_H

#include <stdint.h>

#include "config.h"
#include "keys.h"
#include "policy.h"

enum bench_opts_target { BENCH_OPTS_TARGET_DIRECT = 1, BENCH_OPTS_TARGET_DAEMON = 2 };
enum bench_opts_keydist { BENCH_OPTS_KEYS_UNIFORM, BENCH_OPTS_KEYS_ZIPF, BENCH_OPTS_KEYS_HOT };

/* What the command line asked for, with defaults filled in (bench_opts_parse). */
struct bench_opts {
	int targets; /* BENCH_OPTS_TARGET_* bits */
	int conns;
	int pipeline;
	uint64_t requests; /* 0: run for duration */
	double duration;
	double warmup;
	enum bench_opts_keydist dist;
	uint64_t nkeys;
	double zipf_s;
	const char *keys_spec;
	const char *action;
	int64_t cost;
	int cost_given;
	const char *policy_spec;
	const char *config_path;
	const char *prefix;
	const char *redis_addr;
	const char *daemon_addr;
	uint64_t seed;
	int csv;
	int csv_header;
	double rate; /* requests/s over all connections; 0: as fast as possible */
	int redis_pid, daemon_pid;
	int flushdb;
	uint64_t idle; /* extra connections that stay silent */
	int resp;      /* the daemon target is spoken to in RESP */
	/* --grpc DOMAIN: the daemon target is a protocol: grpc listener, asked
	 * ShouldRateLimit with descriptors [(action, user)] and then these */
	const char *grpc_domain;
	const char *grpc_descriptors[3]; /* "KEY=VALUE", --descriptor */
	int grpc_ndescriptors;
	/* TLS to the daemon target (the direct Redis target stays plaintext) */
	int tls;
	const char *cacert;	  /* NULL: the system's trust store */
	const char *cert, *key;	  /* client certificate (mTLS); key NULL: in cert */
	const char *sni;	  /* verify and SNI name; NULL: the address's host */
	const char *token_file;	  /* --token-file, else RATELIMIT_BENCH_TOKEN */
	const char *token_source; /* where the token came from, for errors */
	char token[CONFIG_TOKEN_MAX + 1];
	size_t token_len; /* 0: no AUTH */
	/* derived */
	struct policy policy;
	int have_policy;
	char prefix_buf[KEYS_PREFIX_MAX + 1];
	char redis_buf[256], daemon_buf[256];
};

/*
 * Fills o (need not be initialised) from argv; prints usage or the error.
 * 0 ok, 1 exit 0 (help), -1 usage error.
 */
int bench_opts_parse(int argc, char **argv, struct bench_opts *o);

#endif
