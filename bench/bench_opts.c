/* bench_opts.c - ratelimit-bench's options: defaults, parsing, usage, checks (see bench_opts.h). */
#include "bench_opts.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define MAX_CONNECTIONS 100000
#define MAX_PIPELINE 65536
#define ZIPF_MAX_KEYS 10000000ULL

/* The algorithms --policy takes limits for ("a, b or c"). */
static const char *window_algos(char *buf, size_t cap)
{
	struct yenum w[POLICY_ALGO_N + 1];
	size_t n = 0;
	for (const struct yenum *a = policy_algo_names; a->name; a++)
		if (policy_algo_shape((enum policy_algo)a->value) == POLICY_SHAPE_WINDOWS)
			w[n++] = *a;
	w[n] = (struct yenum){NULL, 0, NULL};
	return yenum_list(w, 0, buf, cap);
}

static void usage(FILE *f)
{
	char algos[128];
	fprintf(f,
		"usage: ratelimit-bench [options]\n"
		"  --target daemon|redis|both   what to drive (default daemon; redis = direct EVALSHA)\n"
		"  -c, --connections N          connections (default 50)\n"
		"  -P, --pipeline P             requests in flight per connection (default 16)\n"
		"  -n, --requests TOTAL         measured requests per target (default: by duration)\n"
		"  -d, --duration SECONDS       measured time per target (default 5)\n"
		"      --warmup SECONDS         load before measuring (default 0)\n"
		"      --latency                1 connection, pipeline 1\n"
		"      --rate R                 pace to R requests/s in total (default: as fast as possible)\n"
		"      --keys uniform:K|zipf:K:S|hot   user distribution (default uniform:100000)\n"
		"      --action NAME            action / policy name (default bench)\n"
		"      --cost C                 cost per request (default 1, not sent to the daemon)\n"
		"      --policy SPEC            direct mode policy: \"ALGORITHM 5/60000 [...]\" (%s)\n"
		"                               or \"funnel CAPACITY COUNT/PERIOD\"; periods in ms or with a unit\n"
		"      --config FILE            take the policy, prefix and addresses from the daemon's YAML\n"
		"      --prefix P               key prefix for direct mode (default rl:)\n"
		"      --redis HOST:PORT|unix:PATH      Redis for direct mode (default 127.0.0.1:6379)\n"
		"      --daemon HOST:PORT|unix:PATH     ratelimitd (default 127.0.0.1:7379)\n"
		"      --resp                   talk RESP to the daemon (ALLOW as an array), not lines\n"
		"      --grpc DOMAIN            ask the daemon's gRPC listener Envoy's ShouldRateLimit:\n"
		"                               one descriptor [(ACTION, user)] per call, over h2c\n"
		"      --descriptor KEY=VALUE   with --grpc, a constant descriptor after it (up to 3)\n"
		"      --tls                    TLS to the daemon (the direct Redis target stays plaintext)\n"
		"      --cacert FILE            CAs to trust with --tls (default: the system's store)\n"
		"      --cert FILE --key FILE   client certificate and key with --tls (mTLS)\n"
		"      --servername NAME        name to send and verify with --tls (default: the\n"
		"                               address's host; needed for a unix: address)\n"
		"      --token-file FILE        AUTH with the file's first line on every daemon\n"
		"                               connection (else $RATELIMIT_BENCH_TOKEN, if set)\n"
		"      --flushdb                FLUSHDB on --redis before each target (throwaway Redis only)\n"
		"      --redis-pid PID          report Redis CPU time per decision (from /proc)\n"
		"      --daemon-pid PID         report ratelimitd CPU time per decision\n"
		"      --idle-connections N     also hold N silent connections to the target; reports\n"
		"                               the target's RSS growth per connection (with its --*-pid)\n"
		"      --seed N                 key sequence seed (default 1)\n"
		"      --csv                    print one CSV line instead of the report\n"
		"      --csv-header             print the CSV header line and exit\n"
		"  -h, --help\n",
		window_algos(algos, sizeof(algos)));
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	if (!*s || *s == '-')
		return -1;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max))
		return -1;
	*out = v;
	return 0;
}

static int parse_keys(struct bench_opts *o, const char *s)
{
	o->keys_spec = s;
	if (strcmp(s, "hot") == 0) {
		o->dist = BENCH_OPTS_KEYS_HOT;
		o->nkeys = 1;
		return 0;
	}
	if (strncmp(s, "uniform:", 8) == 0) {
		o->dist = BENCH_OPTS_KEYS_UNIFORM;
		return parse_u64(s + 8, 1, UINT64_MAX / 2, &o->nkeys);
	}
	if (strncmp(s, "zipf:", 5) == 0) {
		char k[32];
		const char *colon = strchr(s + 5, ':');
		if (!colon || (size_t)(colon - s - 5) >= sizeof(k))
			return -1;
		memcpy(k, s + 5, (size_t)(colon - s - 5));
		k[colon - s - 5] = 0;
		o->dist = BENCH_OPTS_KEYS_ZIPF;
		return parse_u64(k, 1, ZIPF_MAX_KEYS, &o->nkeys) < 0 ||
				       parse_double(colon + 1, 0.0, 10.0, &o->zipf_s) < 0
			       ? -1
			       : 0;
	}
	return -1;
}

/* "5/60000" (period in ms) or "5/60s" (a unit as in the YAML). */
static int parse_rate_arg(const char *s, int64_t *count, int64_t *period_ms, const char **err)
{
	char buf[64];
	size_t len = strlen(s);
	if (len + 3 > sizeof(buf)) {
		*err = "rate too long";
		return -1;
	}
	memcpy(buf, s, len + 1);
	if (len && buf[len - 1] >= '0' && buf[len - 1] <= '9') {
		memcpy(buf + len, "ms", 3);
		len += 2;
	}
	static char why[POLICY_ERR_MAX];
	if (policy_parse_rate(buf, len, count, period_ms, why, sizeof(why)) < 0) {
		*err = why;
		return -1;
	}
	return 0;
}

/* --policy "sliding_window 5/60000 [20/1h ...]" (or another window
 * algorithm) | "funnel 15 30/60000" */
static int parse_policy_spec(struct bench_opts *o, const char *spec, char *err, size_t errlen)
{
	char buf[512];
	const char *why = NULL;
	struct policy *p = &o->policy;
	memset(p, 0, sizeof(*p));
	p->on_store_error = POLICY_ON_ERROR_INHERIT;
	if (strlen(spec) >= sizeof(buf)) {
		snprintf(err, errlen, "--policy: too long");
		return -1;
	}
	strcpy(buf, spec);
	char *save = NULL, *tok = strtok_r(buf, " \t", &save);
	if (!tok) {
		snprintf(err, errlen, "--policy: empty");
		return -1;
	}
	if (strcmp(tok, "funnel") == 0) {
		p->algo = POLICY_FUNNEL;
		char *cap = strtok_r(NULL, " \t", &save);
		char *rate = strtok_r(NULL, " \t", &save);
		uint64_t c;
		if (!cap || !rate || strtok_r(NULL, " \t", &save) ||
		    parse_u64(cap, 1, (uint64_t)POLICY_MAX_COUNT, &c) < 0) {
			snprintf(err, errlen,
				 "--policy: expected \"funnel CAPACITY COUNT/PERIOD\"");
			return -1;
		}
		p->nlimits = 1;
		p->limits[0].capacity = (int64_t)c;
		if (parse_rate_arg(rate, &p->limits[0].count, &p->limits[0].period_ms, &why) < 0)
			goto bad;
	} else if (strcmp(tok, "sliding") == 0 ||
		   policy_algo_parse(tok, strlen(tok), &p->algo) == 0) {
		if (strcmp(tok, "sliding") == 0)
			p->algo = POLICY_SLIDING_WINDOW;
		if (policy_algo_shape(p->algo) != POLICY_SHAPE_WINDOWS) {
			why = "a concurrency policy takes ACQUIRE, not a rate";
			goto bad;
		}
		while ((tok = strtok_r(NULL, " \t", &save))) {
			if (p->nlimits >= POLICY_MAX_LIMITS) {
				why = "too many limits (at most 8)";
				goto bad;
			}
			struct policy_limit *l = &p->limits[p->nlimits++];
			if (parse_rate_arg(tok, &l->count, &l->period_ms, &why) < 0)
				goto bad;
			l->capacity = l->count;
		}
	} else {
		char names[128];
		snprintf(err, errlen, "--policy: algorithm must be %s",
			 yenum_list(policy_algo_names, 0, names, sizeof(names)));
		return -1;
	}
	if (policy_validate(p, &why) < 0)
		goto bad;
	return 0;
bad:
	snprintf(err, errlen, "--policy: %s", why ? why : "invalid");
	return -1;
}

/* The first "host:port" listen address of a config, with 0.0.0.0/:: made loopback. */
static void daemon_addr_from_config(struct bench_opts *o, const struct config *cfg)
{
	size_t i = 0;
	/* --grpc: the first gRPC listener; else the first listener */
	while (o->grpc_domain && i < cfg->nlisten &&
	       cfg->listen[i].protocol != CONFIG_PROTOCOL_GRPC)
		i++;
	if (i >= cfg->nlisten)
		return;
	const char *a = cfg->listen[i].address;
	if (strncmp(a, "0.0.0.0:", 8) == 0)
		snprintf(o->daemon_buf, sizeof(o->daemon_buf), "127.0.0.1:%s", a + 8);
	else if (strncmp(a, "[::]:", 5) == 0)
		snprintf(o->daemon_buf, sizeof(o->daemon_buf), "[::1]:%s", a + 5);
	else
		snprintf(o->daemon_buf, sizeof(o->daemon_buf), "%s", a);
	o->daemon_addr = o->daemon_buf;
}

/* The token's bytes, checked as the daemon checks its identities' tokens:
 * the line protocol and RESP would split a token at a blank or a line end,
 * so such a token could only ever be refused. */
static int token_check(struct bench_opts *o)
{
	if (o->token_len < CONFIG_TOKEN_MIN || o->token_len > CONFIG_TOKEN_MAX) {
		fprintf(stderr, "ratelimit-bench: the token in %s must be %d to %d bytes\n",
			o->token_source, CONFIG_TOKEN_MIN, CONFIG_TOKEN_MAX);
		return -1;
	}
	for (size_t i = 0; i < o->token_len; i++)
		if ((unsigned char)o->token[i] <= ' ' || o->token[i] == 0x7f) {
			fprintf(stderr,
				"ratelimit-bench: the token in %s holds a blank or control byte\n",
				o->token_source);
			return -1;
		}
	return 0;
}

/* The token: --token-file's first line (without its line end), else
 * $RATELIMIT_BENCH_TOKEN when set and not empty, else none. */
static int token_load(struct bench_opts *o)
{
	if (o->token_file) {
		FILE *f = fopen(o->token_file, "r");
		if (!f) {
			fprintf(stderr, "ratelimit-bench: --token-file %s: %s\n", o->token_file,
				strerror(errno));
			return -1;
		}
		/* one byte beyond the longest token tells a longer one */
		char buf[CONFIG_TOKEN_MAX + 2];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		int bad = ferror(f) ? errno : 0;
		fclose(f);
		if (bad) {
			fprintf(stderr, "ratelimit-bench: --token-file %s: %s\n", o->token_file,
				strerror(bad));
			return -1;
		}
		buf[n] = 0;
		n = strcspn(buf, "\r\n");
		buf[n] = 0;
		o->token_source = o->token_file;
		o->token_len = n;
		if (n <= CONFIG_TOKEN_MAX)
			memcpy(o->token, buf, n + 1);
		memset(buf, 0, sizeof(buf));
		if (n == 0) {
			fprintf(stderr,
				"ratelimit-bench: --token-file %s: its first line is empty\n",
				o->token_file);
			return -1;
		}
		return token_check(o);
	}
	const char *v = getenv("RATELIMIT_BENCH_TOKEN");
	if (!v || !*v)
		return 0;
	o->token_source = "RATELIMIT_BENCH_TOKEN";
	o->token_len = strlen(v);
	if (o->token_len <= CONFIG_TOKEN_MAX)
		memcpy(o->token, v, o->token_len + 1);
	return token_check(o);
}

/* --tls and its files, and the token: they concern the daemon target only. */
static int check_daemon_link(struct bench_opts *o)
{
	const char *tls_only = o->cacert ? "--cacert"
			       : o->cert ? "--cert"
			       : o->key	 ? "--key"
			       : o->sni	 ? "--servername"
					 : NULL;
	if (tls_only && !o->tls) {
		fprintf(stderr, "ratelimit-bench: %s needs --tls\n", tls_only);
		return -1;
	}
	if (o->key && !o->cert) {
		fprintf(stderr, "ratelimit-bench: --key needs --cert\n");
		return -1;
	}
	int daemon = (o->targets & BENCH_OPTS_TARGET_DAEMON) != 0;
	if (o->grpc_ndescriptors && !o->grpc_domain) {
		fprintf(stderr, "ratelimit-bench: --descriptor needs --grpc\n");
		return -1;
	}
	if (o->grpc_domain && (o->resp || o->tls || o->token_file || !daemon)) {
		fprintf(stderr, "ratelimit-bench: --grpc is plaintext h2c to the daemon target, "
				"without --resp, --tls or --token-file\n");
		return -1;
	}
	if (!daemon && (o->tls || o->token_file)) {
		fprintf(stderr,
			"ratelimit-bench: %s is for the daemon target (direct Redis is plaintext, without AUTH)\n",
			o->tls ? "--tls" : "--token-file");
		return -1;
	}
	if (o->tls && !o->sni && strncmp(o->daemon_addr, "unix:", 5) == 0) {
		fprintf(stderr,
			"ratelimit-bench: --tls to %s: give --servername NAME, the name its certificate must hold\n",
			o->daemon_addr);
		return -1;
	}
	return daemon ? token_load(o) : 0;
}

enum {
	OPT_TARGET = 256,
	OPT_WARMUP,
	OPT_LATENCY,
	OPT_RATE,
	OPT_KEYS,
	OPT_ACTION,
	OPT_COST,
	OPT_POLICY,
	OPT_CONFIG,
	OPT_PREFIX,
	OPT_REDIS,
	OPT_DAEMON,
	OPT_FLUSHDB,
	OPT_REDIS_PID,
	OPT_DAEMON_PID,
	OPT_SEED,
	OPT_CSV,
	OPT_CSV_HEADER,
	OPT_IDLE,
	OPT_RESP,
	OPT_GRPC,
	OPT_DESCRIPTOR,
	OPT_TLS,
	OPT_CACERT,
	OPT_CERT,
	OPT_KEY,
	OPT_SNI,
	OPT_TOKEN_FILE,
};

static const struct option long_opts[] = {
	{"target", required_argument, NULL, OPT_TARGET},
	{"connections", required_argument, NULL, 'c'},
	{"pipeline", required_argument, NULL, 'P'},
	{"requests", required_argument, NULL, 'n'},
	{"duration", required_argument, NULL, 'd'},
	{"warmup", required_argument, NULL, OPT_WARMUP},
	{"latency", no_argument, NULL, OPT_LATENCY},
	{"rate", required_argument, NULL, OPT_RATE},
	{"keys", required_argument, NULL, OPT_KEYS},
	{"action", required_argument, NULL, OPT_ACTION},
	{"cost", required_argument, NULL, OPT_COST},
	{"policy", required_argument, NULL, OPT_POLICY},
	{"config", required_argument, NULL, OPT_CONFIG},
	{"prefix", required_argument, NULL, OPT_PREFIX},
	{"redis", required_argument, NULL, OPT_REDIS},
	{"daemon", required_argument, NULL, OPT_DAEMON},
	{"flushdb", no_argument, NULL, OPT_FLUSHDB},
	{"redis-pid", required_argument, NULL, OPT_REDIS_PID},
	{"daemon-pid", required_argument, NULL, OPT_DAEMON_PID},
	{"seed", required_argument, NULL, OPT_SEED},
	{"csv", no_argument, NULL, OPT_CSV},
	{"csv-header", no_argument, NULL, OPT_CSV_HEADER},
	{"idle-connections", required_argument, NULL, OPT_IDLE},
	{"resp", no_argument, NULL, OPT_RESP},
	{"grpc", required_argument, NULL, OPT_GRPC},
	{"descriptor", required_argument, NULL, OPT_DESCRIPTOR},
	{"tls", no_argument, NULL, OPT_TLS},
	{"cacert", required_argument, NULL, OPT_CACERT},
	{"cert", required_argument, NULL, OPT_CERT},
	{"key", required_argument, NULL, OPT_KEY},
	{"servername", required_argument, NULL, OPT_SNI},
	{"token-file", required_argument, NULL, OPT_TOKEN_FILE},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int bad_arg(const char *opt, const char *val)
{
	fprintf(stderr, "ratelimit-bench: bad value for %s: %s\n", opt, val);
	return -1;
}

int bench_opts_parse(int argc, char **argv, struct bench_opts *o)
{
	memset(o, 0, sizeof(*o));
	uint64_t u;
	int latency = 0, have_n = 0, have_d = 0;
	o->targets = BENCH_OPTS_TARGET_DAEMON;
	o->conns = 50;
	o->pipeline = 16;
	o->duration = 5;
	o->dist = BENCH_OPTS_KEYS_UNIFORM;
	o->nkeys = 100000;
	o->keys_spec = "uniform:100000";
	o->action = "bench";
	o->cost = 1;
	o->seed = 1;
	int ch;
	while ((ch = getopt_long(argc, argv, "c:P:n:d:h", long_opts, NULL)) != -1) {
		switch (ch) {
		case OPT_TARGET:
			if (strcmp(optarg, "daemon") == 0)
				o->targets = BENCH_OPTS_TARGET_DAEMON;
			else if (strcmp(optarg, "redis") == 0 || strcmp(optarg, "direct") == 0)
				o->targets = BENCH_OPTS_TARGET_DIRECT;
			else if (strcmp(optarg, "both") == 0)
				o->targets = BENCH_OPTS_TARGET_DIRECT | BENCH_OPTS_TARGET_DAEMON;
			else
				return bad_arg("--target", optarg);
			break;
		case 'c':
			if (parse_u64(optarg, 1, MAX_CONNECTIONS, &u) < 0)
				return bad_arg("--connections", optarg);
			o->conns = (int)u;
			break;
		case 'P':
			if (parse_u64(optarg, 1, MAX_PIPELINE, &u) < 0)
				return bad_arg("--pipeline", optarg);
			o->pipeline = (int)u;
			break;
		case 'n':
			if (parse_u64(optarg, 1, UINT64_MAX / 2, &o->requests) < 0)
				return bad_arg("--requests", optarg);
			have_n = 1;
			break;
		case 'd':
			if (parse_double(optarg, 0.001, 86400, &o->duration) < 0)
				return bad_arg("--duration", optarg);
			have_d = 1;
			break;
		case OPT_WARMUP:
			if (parse_double(optarg, 0, 3600, &o->warmup) < 0)
				return bad_arg("--warmup", optarg);
			break;
		case OPT_LATENCY:
			latency = 1;
			break;
		case OPT_RATE:
			if (parse_double(optarg, 1, 1e9, &o->rate) < 0)
				return bad_arg("--rate", optarg);
			break;
		case OPT_KEYS:
			if (parse_keys(o, optarg) < 0)
				return bad_arg("--keys", optarg);
			break;
		case OPT_ACTION:
			if (!policy_name_valid(optarg, strlen(optarg)))
				return bad_arg("--action", optarg);
			o->action = optarg;
			break;
		case OPT_COST:
			if (parse_u64(optarg, 1, 2147483647, &u) < 0)
				return bad_arg("--cost", optarg);
			o->cost = (int64_t)u;
			o->cost_given = 1;
			break;
		case OPT_POLICY:
			o->policy_spec = optarg;
			break;
		case OPT_CONFIG:
			o->config_path = optarg;
			break;
		case OPT_PREFIX:
			if (strlen(optarg) > KEYS_PREFIX_MAX || strpbrk(optarg, "{} \t\r\n"))
				return bad_arg("--prefix", optarg);
			o->prefix = optarg;
			break;
		case OPT_REDIS:
			o->redis_addr = optarg;
			break;
		case OPT_DAEMON:
			o->daemon_addr = optarg;
			break;
		case OPT_FLUSHDB:
			o->flushdb = 1;
			break;
		case OPT_REDIS_PID:
			if (parse_u64(optarg, 1, INT32_MAX, &u) < 0)
				return bad_arg("--redis-pid", optarg);
			o->redis_pid = (int)u;
			break;
		case OPT_DAEMON_PID:
			if (parse_u64(optarg, 1, INT32_MAX, &u) < 0)
				return bad_arg("--daemon-pid", optarg);
			o->daemon_pid = (int)u;
			break;
		case OPT_SEED:
			if (parse_u64(optarg, 0, UINT64_MAX, &o->seed) < 0)
				return bad_arg("--seed", optarg);
			break;
		case OPT_CSV:
			o->csv = 1;
			break;
		case OPT_RESP:
			o->resp = 1;
			break;
		case OPT_GRPC:
			if (!*optarg)
				return bad_arg("--grpc", optarg);
			o->grpc_domain = optarg;
			break;
		case OPT_DESCRIPTOR:
			if (o->grpc_ndescriptors == 3 || !strchr(optarg, '='))
				return bad_arg("--descriptor", optarg);
			o->grpc_descriptors[o->grpc_ndescriptors++] = optarg;
			break;
		case OPT_TLS:
			o->tls = 1;
			break;
		case OPT_CACERT:
			o->cacert = optarg;
			break;
		case OPT_CERT:
			o->cert = optarg;
			break;
		case OPT_KEY:
			o->key = optarg;
			break;
		case OPT_SNI:
			if (!*optarg || strpbrk(optarg, " \t\r\n"))
				return bad_arg("--servername", optarg);
			o->sni = optarg;
			break;
		case OPT_TOKEN_FILE:
			o->token_file = optarg;
			break;
		case OPT_CSV_HEADER:
			o->csv_header = 1;
			break;
		case OPT_IDLE:
			if (parse_u64(optarg, 0, 1000000, &o->idle) < 0)
				return bad_arg("--idle-connections", optarg);
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ratelimit-bench: unexpected argument %s\n", argv[optind]);
		usage(stderr);
		return -1;
	}
	if (have_n && have_d) {
		fprintf(stderr, "ratelimit-bench: give -n or -d, not both\n");
		return -1;
	}
	if (have_n)
		o->duration = 0;
	if (latency)
		o->conns = o->pipeline = 1;

	char err[CONFIG_ERR_MAX + 64];
	if (o->config_path) {
		struct config *cfg = config_load(o->config_path, err, sizeof(err));
		if (!cfg) {
			fprintf(stderr, "ratelimit-bench: %s\n", err);
			return -1;
		}
		const struct policy *p = config_find_policy(cfg, o->action, strlen(o->action));
		if (p && !o->policy_spec) {
			o->policy = *p;
			o->have_policy = 1;
		}
		if (!o->prefix) {
			snprintf(o->prefix_buf, sizeof(o->prefix_buf), "%s", cfg->prefix);
			o->prefix = o->prefix_buf;
		}
		if (!o->redis_addr) {
			snprintf(o->redis_buf, sizeof(o->redis_buf), "%s", cfg->redis.address);
			o->redis_addr = o->redis_buf;
		}
		if (!o->daemon_addr)
			daemon_addr_from_config(o, cfg);
		config_unref(cfg);
		if (!o->have_policy && !o->policy_spec && (o->targets & BENCH_OPTS_TARGET_DIRECT)) {
			fprintf(stderr, "ratelimit-bench: %s has no policy named %s\n",
				o->config_path, o->action);
			return -1;
		}
	}
	if (o->policy_spec) {
		if (parse_policy_spec(o, o->policy_spec, err, sizeof(err)) < 0) {
			fprintf(stderr, "ratelimit-bench: %s\n", err);
			return -1;
		}
		o->have_policy = 1;
	}
	if ((o->targets & BENCH_OPTS_TARGET_DIRECT) && !o->have_policy) {
		fprintf(stderr, "ratelimit-bench: direct mode needs --policy or --config\n");
		return -1;
	}
	if (o->have_policy) {
		/* keys carry the action name inside their hash tag */
		snprintf(o->policy.name, sizeof(o->policy.name), "%s", o->action);
		o->policy.name_len = strlen(o->action);
	}
	if (!o->prefix)
		o->prefix = "rl:";
	if (!o->redis_addr)
		o->redis_addr = "127.0.0.1:6379";
	if (!o->daemon_addr)
		o->daemon_addr = "127.0.0.1:7379";
	return check_daemon_link(o);
}
