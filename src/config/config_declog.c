/* config_declog.c - the schema of decision_log (the sampled log of decisions ratelimitctl replays). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_area.h"
#include "siphash.h"

enum { DK_PATH, DK_SAMPLE, DK_MAX_SIZE, DK_KEEP, DK_HASH_KEY_FILE, DK_N };

/* The writer (ops/declog.c) takes each from the configuration a reload
 * makes: every key applies on reload. */
static const struct ykey declog_keys[DK_N] = {
	[DK_PATH] = {"path", config_set_path, offsetof(struct config_declog, path), 0, 0, YP_RELOAD,
		     yp_put_string, NULL},
	[DK_SAMPLE] = {"sample", config_set_share, offsetof(struct config_declog, sample), 0, 0,
		       YP_RELOAD, config_put_share, NULL},
	[DK_MAX_SIZE] = {"max_size", yp_set_size, offsetof(struct config_declog, max_size), 4096,
			 (int64_t)1 << 40, YP_RELOAD, yp_put_size, NULL},
	[DK_KEEP] = {"keep", yp_set_int, offsetof(struct config_declog, keep), 0, 100, YP_RELOAD,
		     yp_put_int, NULL},
	[DK_HASH_KEY_FILE] = {"hash_key_file", config_set_path,
			      offsetof(struct config_declog, hash_key_file), 0, 0, YP_RELOAD,
			      yp_put_string, NULL},
};

const struct ktable config_declog_table = {"decision_log.", declog_keys, DK_N, KT_AT_BASE,
					   offsetof(struct config, declog)};

int config_declog_set(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[DK_N], start;
	if (yp_section(P, k, "expected a mapping", declog_keys, DK_N, dst, &seen, marks, &start) <
	    0)
		return -1;
	if (!(seen & (1u << DK_PATH)))
		return yp_fail_section(P, start, "needs path: the log file");
	return 0;
}

/* The key is made from the file's bytes (at least 16 of them): any secret
 * the operator keeps, the same on every daemon so that a user hashes alike
 * in all their logs. */
int config_declog_load(struct config *c, const char *name, char *err, size_t errlen)
{
	struct config_declog *d = &c->declog;
	if (!d->hash_key_file)
		return 0;
	FILE *f = fopen(d->hash_key_file, "r");
	if (!f) {
		snprintf(err, errlen, "%s: decision_log.hash_key_file %s: %s", name,
			 d->hash_key_file, strerror(errno));
		return -1;
	}
	unsigned char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	if (n < 16) {
		snprintf(err, errlen,
			 "%s: decision_log.hash_key_file %s: needs 16 bytes at least (a secret "
			 "such as `head -c 32 /dev/urandom | base64`)",
			 name, d->hash_key_file);
		return -1;
	}
	static const uint8_t k0[16] = "ratelimitd-key-0", k1[16] = "ratelimitd-key-1";
	uint64_t a = siphash24(k0, buf, n), b = siphash24(k1, buf, n);
	memcpy(d->hash_key, &a, 8);
	memcpy(d->hash_key + 8, &b, 8);
	d->hashed = 1;
	return 0;
}

void config_declog_free(struct config *c)
{
	free(c->declog.path);
	free(c->declog.hash_key_file);
	memset(c->declog.hash_key, 0, sizeof(c->declog.hash_key));
}
