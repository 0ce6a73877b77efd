/* config_tracing.c - the schema of tracing (spans of decisions, exported as OTLP over HTTP). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_area.h"

enum { RK_ENDPOINT, RK_SAMPLE, RK_MAX_QUEUE, RK_N };

/* "http://host:port/path" (no TLS: a collector beside the daemon), into
 * the section's endpoint, host, port and path. */
static int set_endpoint(struct yparser *P, const struct ykey *k, void *dst)
{
	struct config_tracing *t = dst;
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "an http:// URL", &s, &len) < 0)
		return -1;
	const char *h = s + 7, *end = s + len, *colon, *slash;
	if (len < 8 || strncmp(s, "http://", 7) != 0)
		return yp_failk(P, P->ev.start_mark, k->name,
				"must be http://host:port/path (an OTLP/HTTP receiver; "
				"no https: keep the collector beside the daemon)");
	slash = memchr(h, '/', (size_t)(end - h));
	if (!slash)
		slash = end;
	colon = memchr(h, ':', (size_t)(slash - h));
	long port = 80;
	if (colon) {
		char *e;
		port = strtol(colon + 1, &e, 10);
		if (e != slash || port < 1 || port > 65535)
			return yp_failk(P, P->ev.start_mark, k->name, "a port from 1 to 65535");
	}
	const char *hend = colon ? colon : slash;
	if (hend == h || memchr(s, ' ', len) || memchr(s, '\0', len))
		return yp_failk(P, P->ev.start_mark, k->name, "needs a host");
	free(t->endpoint);
	free(t->host);
	free(t->path);
	t->endpoint = t->host = t->path = NULL;
	if (yp_dup_string(P, &t->endpoint, s, len) < 0 ||
	    yp_dup_string(P, &t->host, h, (size_t)(hend - h)) < 0 ||
	    yp_dup_string(P, &t->path, slash == end ? "/v1/traces" : slash,
			  slash == end ? 10 : (size_t)(end - slash)) < 0)
		return -1;
	t->port = (int)port;
	return 0;
}

static void put_endpoint(FILE *f, const struct ykey *k, const void *base)
{
	(void)k;
	const struct config_tracing *t = base;
	fputs(t->endpoint ? t->endpoint : "(none)", f);
}

/* 0 is a share here: only requests with a sampled traceparent */
static int set_sample(struct yparser *P, const struct ykey *k, void *dst)
{
	const char *s;
	size_t len;
	if (yp_scalar(P, k->name, "a number from 0 to 1", &s, &len) < 0)
		return -1;
	char *e;
	double v = strtod(s, &e);
	if (len == 0 || len > 12 || e != s + len || !(v >= 0 && v <= 1))
		return yp_failk(P, P->ev.start_mark, k->name,
				"must be a number from 0 to 1, such as 0.01");
	*(double *)dst = v;
	return 0;
}

/* The exporter (trace_export.c) and trace.c take every key on reload. */
static const struct ykey tracing_keys[RK_N] = {
	[RK_ENDPOINT] = {"endpoint", set_endpoint, 0, 0, 0, YP_RELOAD, put_endpoint, NULL},
	[RK_SAMPLE] = {"sample", set_sample, offsetof(struct config_tracing, sample), 0, 0,
		       YP_RELOAD, config_put_share, NULL},
	[RK_MAX_QUEUE] = {"max_queue", yp_set_int, offsetof(struct config_tracing, max_queue), 16,
			  1000000, YP_RELOAD, yp_put_int, NULL},
};

const struct ktable config_tracing_table = {"tracing.", tracing_keys, RK_N, KT_AT_BASE,
					    offsetof(struct config, tracing)};

int config_tracing_set(struct yparser *P, const struct ykey *k, void *dst)
{
	unsigned seen;
	yaml_mark_t marks[RK_N], start;
	if (yp_section(P, k, "expected a mapping", tracing_keys, RK_N, dst, &seen, marks, &start) <
	    0)
		return -1;
	if (!(seen & (1u << RK_ENDPOINT)))
		return yp_fail_section(P, start, "needs endpoint: http://host:port/v1/traces");
	return 0;
}

void config_tracing_free(struct config *c)
{
	free(c->tracing.endpoint);
	free(c->tracing.host);
	free(c->tracing.path);
}
