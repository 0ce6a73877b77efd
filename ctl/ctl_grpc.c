/*
 * ctl_grpc.c - ratelimitctl's gRPC client: `rls` sends Envoy's
 * envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit and `health`
 * grpc.health.v1.Health/Check to a `protocol: grpc` listener, so the
 * service can be tried without Envoy (grpcurl is not in Debian 12).
 *
 * One unary call on one HTTP/2 connection, cleartext (prior knowledge, as
 * Envoy connects) or TLS with ALPN h2 (--tls), the token (-k) as the
 * authorization metadata: libnghttp2's client session over a blocking loop of
 * poll() with the -T deadline (sent as grpc-timeout), the messages packed
 * and unpacked by the same protoc-c code the daemon is built with (the
 * inverse of src/grpc/rls.c and src/grpc/grpc.c). Exit status as the other commands:
 * 0 OK (SERVING), 1 OVER_LIMIT (not SERVING), 2 an error (a gRPC status
 * other than OK among them). Kept apart from ratelimitctl.c, which calls
 * ctl_grpc() alone; what the two share (errors, the deadline, connecting,
 * the config's listener) is ctl_util.c's.
 */
#include "ctl_grpc.h"

#include <errno.h>
#include <inttypes.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctl_util.h"
#include "grpc_pb.h"
#include "proto_grpc.h"

/* Where docs/envoy.md's example listens, when the config names none */
#define GRPC_DEFAULT_ADDRESS "127.0.0.1:8081"
/* The daemon takes up to 64 descriptors of up to 16 entries (proto/grpc.md);
 * more are sent as given, for the daemon to refuse. */
#define MAX_DESCRIPTORS 256
#define MAX_ENTRIES 64
/* A response is small: statuses of at most 64 descriptors and 4 headers */
#define MAX_RESPONSE (1024 * 1024)

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest RlsRequest;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse RlsResponse;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus RlsStatus;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor RlsDescriptor;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry RlsEntry;

struct call {
	struct ctl_ctx *x; /* x->address: --addr, else the config's listener */
	const char *config_path;
	int fd;
	nghttp2_session *h2;
	/* the request message, with its 5-byte gRPC prefix */
	uint8_t *req;
	size_t req_len, req_sent;
	/* the answer */
	int closed;	 /* the stream ended */
	int http_status; /* :status */
	int grpc_status; /* grpc-status, -1 absent */
	char grpc_message[512];
	char content_type[64];
	uint8_t *body;
	size_t body_len;
	int too_big;
};

static const char *status_name(int s)
{
	static const char *names[] = {
		"OK",
		"CANCELLED",
		"UNKNOWN",
		"INVALID_ARGUMENT",
		"DEADLINE_EXCEEDED",
		"NOT_FOUND",
		"ALREADY_EXISTS",
		"PERMISSION_DENIED",
		"RESOURCE_EXHAUSTED",
		"FAILED_PRECONDITION",
		"ABORTED",
		"OUT_OF_RANGE",
		"UNIMPLEMENTED",
		"INTERNAL",
		"UNAVAILABLE",
		"DATA_LOSS",
		"UNAUTHENTICATED",
	};
	return s >= 0 && s < (int)(sizeof(names) / sizeof(names[0])) ? names[s] : "?";
}

static const char *code_name(int code)
{
	switch (code) {
	case ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK:
		return "OK";
	case ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT:
		return "OVER_LIMIT";
	default:
		return "UNKNOWN";
	}
}

static const char *unit_name(int unit)
{
	static const char *names[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
				      "DAY",	 "MONTH",  "YEAR",   "WEEK"};
	return unit >= 0 && unit < 8 ? names[unit] : "UNKNOWN";
}

/* -- nghttp2's callbacks */

static ssize_t read_body(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t len,
			 uint32_t *flags, nghttp2_data_source *src, void *data)
{
	(void)s;
	(void)stream;
	(void)src;
	struct call *k = data;
	size_t n = k->req_len - k->req_sent;
	if (n > len)
		n = len;
	memcpy(buf, k->req + k->req_sent, n);
	k->req_sent += n;
	if (k->req_sent == k->req_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *data)
{
	(void)s;
	(void)f;
	(void)flags;
	struct call *k = data;
	char v[512];
	size_t n = valuelen < sizeof(v) - 1 ? valuelen : sizeof(v) - 1;
	memcpy(v, value, n);
	v[n] = 0;
#define IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)
	if (IS(":status"))
		k->http_status = atoi(v);
	else if (IS("grpc-status"))
		k->grpc_status = atoi(v);
	else if (IS("grpc-message"))
		snprintf(k->grpc_message, sizeof(k->grpc_message), "%s", v);
	else if (IS("content-type"))
		snprintf(k->content_type, sizeof(k->content_type), "%.63s", v);
#undef IS
	return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *d, size_t len,
		   void *data)
{
	(void)s;
	(void)flags;
	(void)stream;
	struct call *k = data;
	if (k->body_len + len > MAX_RESPONSE) {
		k->too_big = 1;
		return 0;
	}
	uint8_t *b = realloc(k->body, k->body_len + len);
	if (!b)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	memcpy(b + k->body_len, d, len);
	k->body = b;
	k->body_len += len;
	return 0;
}

static int on_close(nghttp2_session *s, int32_t stream, uint32_t code, void *data)
{
	(void)s;
	(void)stream;
	struct call *k = data;
	k->closed = code == NGHTTP2_NO_ERROR ? 1 : -(int)code - 1;
	return 0;
}

/* Writes what the session has to send; 0, or -1 with the error printed. */
static int flush_out(struct call *k)
{
	for (;;) {
		const uint8_t *out;
		ssize_t n = nghttp2_session_mem_send(k->h2, &out);
		if (n < 0)
			return ctl_failed(k->x, "protocol", "HTTP/2: %s", nghttp2_strerror((int)n));
		if (n == 0)
			return 0;
		if (ctl_send_all(k->x, k->fd, out, (size_t)n) < 0)
			return -1;
	}
}

/*
 * One unary call of method with msg (packed, unprefixed): the response
 * message, unprefixed, in k->body[5...]. 0 when grpc-status is 0 and one
 * whole message came; else -1 with the error printed.
 */
static int unary(struct call *k, const char *method, const uint8_t *msg, size_t len)
{
	k->grpc_status = -1;
	k->req_len = len + 5;
	k->req = malloc(k->req_len);
	if (!k->req)
		return ctl_failed(k->x, "memory", "out of memory");
	/* the length-prefixed message: not compressed, length big-endian */
	k->req[0] = 0;
	k->req[1] = (uint8_t)(len >> 24);
	k->req[2] = (uint8_t)(len >> 16);
	k->req[3] = (uint8_t)(len >> 8);
	k->req[4] = (uint8_t)len;
	if (len)
		memcpy(k->req + 5, msg, len);

	if (ctl_choose_address(k->x, k->config_path, CTL_LISTENER_GRPC, GRPC_DEFAULT_ADDRESS,
			       "--addr") < 0)
		return -1;
	char tok[4100], bearer[4200];
	int have = ctl_token(k->x, tok, sizeof(tok));
	if (have < 0)
		return -1;
	snprintf(bearer, sizeof(bearer), "Bearer %s", have ? tok : "");
	memset(tok, 0, sizeof(tok));
	k->x->alpn = "h2";
	k->fd = ctl_connect(k->x, 0);
	if (k->fd < 0)
		return -1;
	nghttp2_session_callbacks *cb;
	if (nghttp2_session_callbacks_new(&cb) != 0)
		return ctl_failed(k->x, "memory", "out of memory");
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
	int rc = nghttp2_session_client_new(&k->h2, cb, k);
	nghttp2_session_callbacks_del(cb);
	if (rc != 0)
		return ctl_failed(k->x, "memory", "HTTP/2: %s", nghttp2_strerror(rc));

	/* the call's deadline is ours, what is left of -T (rounded up to fit
	 * grpc-timeout's 8 digits, in a larger unit if need be) */
	char timeout[GRPC_TIMEOUT_MAX];
	grpc_timeout_format(timeout, k->x->deadline_ms - ctl_now_ms());
	char authority[300];
	snprintf(authority, sizeof(authority), "%s", k->x->address);
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
	nghttp2_nv hdrs[] = {
		NV(":method", "POST"),
		NV(":scheme", k->x->ssl ? "https" : "http"),
		NV(":authority", authority),
		NV(":path", method),
		NV("content-type", "application/grpc"),
		NV("te", "trailers"),
		NV("grpc-timeout", timeout),
		NV("user-agent", "ratelimitctl/" RATELIMITD_VERSION),
		NV("authorization", bearer), /* the last: left out without a token */
	};
#undef NV
	size_t nhdrs = sizeof(hdrs) / sizeof(hdrs[0]) - (have ? 0 : 1);
	nghttp2_data_provider body = {.read_callback = read_body};
	if (nghttp2_submit_settings(k->h2, NGHTTP2_FLAG_NONE, NULL, 0) != 0 ||
	    nghttp2_submit_request(k->h2, NULL, hdrs, nhdrs, &body, NULL) < 0)
		return ctl_failed(k->x, "memory", "HTTP/2: cannot submit the request");

	while (!k->closed) {
		if (flush_out(k) < 0)
			return -1;
		uint8_t buf[16384];
		long r = ctl_recv(k->x, k->fd, buf, sizeof(buf));
		if (r < 0)
			return -1;
		ssize_t used = nghttp2_session_mem_recv(k->h2, buf, (size_t)r);
		if (used < 0)
			return ctl_failed(k->x, "protocol", "not HTTP/2 from %s: %s", k->x->address,
					  nghttp2_strerror((int)used));
	}
	/* a polite goodbye; the answer does not depend on it */
	nghttp2_session_terminate_session(k->h2, NGHTTP2_NO_ERROR);
	const uint8_t *out;
	ssize_t n = nghttp2_session_mem_send(k->h2, &out);
	if (n > 0 && !k->x->ssl) /* over TLS, the close_notify says goodbye */
		(void)send(k->fd, out, (size_t)n, MSG_NOSIGNAL);

	if (k->closed < 0)
		return ctl_failed(k->x, "protocol", "%s reset the stream (HTTP/2 error %d)",
				  k->x->address, -k->closed - 1);
	if (k->http_status != 200 || strncmp(k->content_type, "application/grpc", 16) != 0)
		return ctl_failed(k->x, "protocol",
				  "%s answered HTTP status %d (%s), not a gRPC answer",
				  k->x->address, k->http_status, k->content_type);
	if (k->grpc_status != 0) {
		ctl_error(k->x, "grpc", k->grpc_status, "%s: gRPC status %d (%s)%s%s", method,
			  k->grpc_status, status_name(k->grpc_status),
			  k->grpc_message[0] ? ": " : "", k->grpc_message);
		return -1;
	}
	if (k->too_big || k->body_len < 5 || k->body[0] != 0 ||
	    ((size_t)k->body[1] << 24 | (size_t)k->body[2] << 16 | (size_t)k->body[3] << 8 |
	     k->body[4]) != k->body_len - 5)
		return ctl_failed(k->x, "protocol",
				  "%s: not one uncompressed message in the answer (%zu bytes)",
				  method, k->body_len);
	return 0;
}

static void call_free(struct call *k)
{
	if (k->h2)
		nghttp2_session_del(k->h2);
	ctl_close(k->x, k->fd);
	free(k->req);
	free(k->body);
}

/* -- the commands */

static int parse_count(const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!*s || *end || errno || v > UINT32_MAX || s[0] == '-')
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static void print_limit_text(const RlsStatus *s)
{
	if (s->current_limit) {
		printf(" limit=%" PRIu32 "/%s", s->current_limit->requests_per_unit,
		       unit_name(s->current_limit->unit));
		if (s->current_limit->name && s->current_limit->name[0])
			printf(" name=%s", s->current_limit->name);
	} else if (s->limit_remaining == UINT32_MAX) {
		printf(" limit=unlimited");
	} else {
		printf(" limit=none");
	}
}

static int print_rls(const struct ctl_ctx *x, const RlsResponse *r, char **descs, int ndescs)
{
	int over = r->overall_code ==
		   ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
	if (x->json) {
		printf("{\"command\":\"rls\",\"result\":\"%s\",\"overall_code\":\"%s\","
		       "\"statuses\":[",
		       over ? "over_limit"
		       : r->overall_code ==
				       ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
			       ? "ok"
			       : "unknown",
		       code_name(r->overall_code));
	} else {
		printf("%s\n", code_name(r->overall_code));
	}
	for (size_t i = 0; i < r->n_statuses; i++) {
		const RlsStatus *s = r->statuses[i];
		int64_t reset = s->duration_until_reset ? s->duration_until_reset->seconds : 0;
		const char *desc = (int)i < ndescs ? descs[i] : "?";
		if (x->json) {
			printf("%s{\"descriptor\":", i ? "," : "");
			ctl_json_cstr(desc);
			printf(",\"code\":\"%s\",\"limit\":", code_name(s->code));
			if (s->current_limit) {
				printf("{\"requests_per_unit\":%" PRIu32
				       ",\"unit\":\"%s\",\"name\":",
				       s->current_limit->requests_per_unit,
				       unit_name(s->current_limit->unit));
				ctl_json_cstr(s->current_limit->name ? s->current_limit->name : "");
				printf("}");
			} else {
				printf("null");
			}
			printf(",\"remaining\":%" PRIu32 ",\"reset_s\":%lld}", s->limit_remaining,
			       (long long)reset);
		} else {
			printf("  %s: %s", desc, code_name(s->code));
			print_limit_text(s);
			printf(" remaining=%" PRIu32 " reset=%llds\n", s->limit_remaining,
			       (long long)reset);
		}
	}
	if (x->json)
		printf("],\"headers\":{");
	for (size_t i = 0; i < r->n_response_headers_to_add; i++) {
		const char *key = r->response_headers_to_add[i]->key;
		const char *value = r->response_headers_to_add[i]->value;
		if (x->json) {
			if (i)
				putchar(',');
			ctl_json_cstr(key ? key : "");
			putchar(':');
			ctl_json_cstr(value ? value : "");
		} else {
			printf("  header %s: %s\n", key ? key : "", value ? value : "");
		}
	}
	if (x->json)
		printf("}}\n");
	return over ? CTL_EXIT_DENIED
	       : r->overall_code == ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
		       ? CTL_EXIT_OK
		       : CTL_EXIT_ERROR;
}

/* rls DOMAIN KEY=VALUE[,KEY=VALUE...] [DESCRIPTOR...] [--hits N] */
static int cmd_rls(struct call *k, char **args, int nargs)
{
	struct ctl_ctx *x = k->x;
	const char *domain = NULL;
	char *descs[MAX_DESCRIPTORS];
	int ndescs = 0;
	uint32_t hits = 0;
	for (int i = 0; i < nargs; i++) {
		if (!strcmp(args[i], "--hits") || !strcmp(args[i], "--addr")) {
			if (i + 1 == nargs)
				return ctl_fail(x, "usage", "%s needs a value", args[i]);
			if (args[i][2] == 'a')
				k->x->address = args[++i];
			else if (parse_count(args[++i], &hits) < 0)
				return ctl_fail(x, "usage", "bad --hits %s: 0 to 4294967295",
						args[i]);
		} else if (!domain) {
			domain = args[i];
		} else if (ndescs == MAX_DESCRIPTORS) {
			return ctl_fail(x, "usage", "more than %d descriptors", MAX_DESCRIPTORS);
		} else {
			descs[ndescs++] = args[i];
		}
	}
	if (!domain || !ndescs)
		return ctl_fail(x, "usage",
				"usage: rls [--addr HOST:PORT] [--hits N] DOMAIN "
				"KEY=VALUE[,KEY=VALUE...] [DESCRIPTOR...]");

	/* the descriptors: entries split at ',' and each at its first '=' */
	static RlsDescriptor d[MAX_DESCRIPTORS];
	static RlsDescriptor *dp[MAX_DESCRIPTORS];
	static RlsEntry e[MAX_DESCRIPTORS][MAX_ENTRIES];
	static RlsEntry *ep[MAX_DESCRIPTORS][MAX_ENTRIES];
	static char copy[MAX_DESCRIPTORS][4096];
	for (int i = 0; i < ndescs; i++) {
		envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(&d[i]);
		dp[i] = &d[i];
		if (strlen(descs[i]) >= sizeof(copy[i]))
			return ctl_fail(x, "usage", "descriptor %d is too long", i + 1);
		strcpy(copy[i], descs[i]);
		char *save = NULL;
		for (char *ent = strtok_r(copy[i], ",", &save); ent;
		     ent = strtok_r(NULL, ",", &save)) {
			char *eq = strchr(ent, '=');
			if (!eq || eq == ent)
				return ctl_fail(
					x, "usage",
					"descriptor %s: entries are KEY=VALUE, split by ','",
					descs[i]);
			if (d[i].n_entries == MAX_ENTRIES)
				return ctl_fail(x, "usage", "descriptor %s: more than %d entries",
						descs[i], MAX_ENTRIES);
			*eq = 0;
			RlsEntry *en = &e[i][d[i].n_entries];
			envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(
				en);
			en->key = ent;
			en->value = eq + 1;
			ep[i][d[i].n_entries++] = en;
		}
		if (!d[i].n_entries)
			return ctl_fail(x, "usage", "descriptor %d has no KEY=VALUE", i + 1);
		d[i].entries = ep[i];
	}
	RlsRequest req;
	envoy__service__ratelimit__v3__rate_limit_request__init(&req);
	req.domain = (char *)domain;
	req.n_descriptors = (size_t)ndescs;
	req.descriptors = dp;
	req.hits_addend = hits;
	size_t len = envoy__service__ratelimit__v3__rate_limit_request__get_packed_size(&req);
	uint8_t *msg = malloc(len ? len : 1);
	if (!msg)
		return ctl_fail(x, "memory", "out of memory");
	envoy__service__ratelimit__v3__rate_limit_request__pack(&req, msg);
	int rc = unary(k, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", msg, len);
	free(msg);
	if (rc < 0)
		return CTL_EXIT_ERROR;
	RlsResponse *r = envoy__service__ratelimit__v3__rate_limit_response__unpack(
		NULL, k->body_len - 5, k->body + 5);
	if (!r)
		return ctl_fail(x, "protocol", "undecodable RateLimitResponse from %s",
				k->x->address);
	rc = print_rls(x, r, descs, ndescs);
	envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
	return rc;
}

/* health [--addr HOST:PORT] [SERVICE] */
static int cmd_health(struct call *k, char **args, int nargs)
{
	struct ctl_ctx *x = k->x;
	const char *service = NULL;
	for (int i = 0; i < nargs; i++) {
		if (!strcmp(args[i], "--addr") && i + 1 < nargs)
			k->x->address = args[++i];
		else if (!service && strcmp(args[i], "--addr"))
			service = args[i];
		else
			return ctl_fail(x, "usage", "usage: health [--addr HOST:PORT] [SERVICE]");
	}
	Grpc__Health__V1__HealthCheckRequest req;
	grpc__health__v1__health_check_request__init(&req);
	req.service = (char *)(service ? service : "");
	uint8_t msg[4096];
	size_t len = grpc__health__v1__health_check_request__get_packed_size(&req);
	if (len > sizeof(msg))
		return ctl_fail(x, "usage", "service name too long");
	grpc__health__v1__health_check_request__pack(&req, msg);
	if (unary(k, "/grpc.health.v1.Health/Check", msg, len) < 0)
		return CTL_EXIT_ERROR;
	Grpc__Health__V1__HealthCheckResponse *r =
		grpc__health__v1__health_check_response__unpack(NULL, k->body_len - 5, k->body + 5);
	if (!r)
		return ctl_fail(x, "protocol", "undecodable HealthCheckResponse from %s",
				k->x->address);
	const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
		&grpc__health__v1__health_check_response__serving_status__descriptor, r->status);
	const char *name = v ? v->name : "UNKNOWN";
	int serving = r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
	if (x->json) {
		printf("{\"command\":\"health\",\"result\":\"%s\",\"status\":\"%s\"}\n",
		       serving ? "ok" : "not_serving", name);
	} else {
		printf("%s\n", name);
	}
	grpc__health__v1__health_check_response__free_unpacked(r, NULL);
	return serving ? CTL_EXIT_OK : CTL_EXIT_DENIED;
}

int ctl_grpc(struct ctl_ctx *x, const char *config_path, char **args, int nargs)
{
	struct call k = {.x = x, .config_path = config_path, .fd = -1};
	int rc = !strcmp(x->command, "health") ? cmd_health(&k, args, nargs)
					       : cmd_rls(&k, args, nargs);
	call_free(&k);
	return rc;
}
