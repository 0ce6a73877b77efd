/*
 * fuzz_grpc.c - libFuzzer harness for the gRPC session (src/grpc/grpc.c):
 * nghttp2's server side and gRPC's framing of each call, fed the bytes a
 * client sends after its preface, in chunks. The methods here answer at
 * once, fail, or wait; the waiting ones are answered half before and half
 * after the connection is gone (the orphan path). Now and then the streams
 * still arriving are failed as request_timeout does.
 *
 * Input: byte 0 seeds the chunk sizes, the rest is the client's stream.
 * Invariants: every call started is answered exactly once, whatever the
 * bytes; the session never asks to be read after it is over; nothing
 * leaks (ASan).
 */
#include <event2/buffer.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fuzz_log.h"
#include "grpc.h"

const char *const fuzz_name = "fuzz_grpc";

static const uint8_t preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#define WAIT_MAX 512
static struct grpc_call *waiting[WAIT_MAX];
static size_t nwaiting;
static unsigned long started, answered;

static void answer(struct grpc_call *call, int how)
{
	answered++;
	if (how == 0)
		grpc_call_reply(call, call->msg, call->len); /* echo */
	else
		grpc_call_fail(call, GRPC_INVALID_ARGUMENT, "no\n\x01 thanks %");
}

static void start(struct grpc_call *call)
{
	started++;
	int *state = call->state;
	check(state != NULL, "state");
	*state = 1; /* ASan: the room is there */
	/* the message's length picks: answer now (0, 1), or wait (2) */
	int how = (int)(call->len % 3);
	if (how == 2 && nwaiting < WAIT_MAX)
		waiting[nwaiting++] = call;
	else
		answer(call, how == 2 ? 0 : how);
}

const struct grpc_method grpc_methods[] = {
	{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", sizeof(int), start},
	{"/grpc.health.v1.Health/Check", 0, start},
	{NULL, 0, NULL},
};

static int readies;
static void ready(void *arg)
{
	(void)arg;
	readies++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct config *cfg;
	if (!cfg) {
		char err[256];
		static const char text[] = "policies: {a: 1/1s}\n";
		cfg = config_parse("fuzz.yaml", text, sizeof(text) - 1, err, sizeof(err));
		check(cfg != NULL, "config");
	}
	if (size < 1)
		return 0;
	unsigned seed = data[0];
	data++;
	size--;
	struct grpc_host host = {.cfg = &cfg, .env = NULL, .caller = NULL, .ready = ready};
	struct grpc_session *s = grpc_session_new(&host);
	check(s != NULL, "session");
	struct evbuffer *out = evbuffer_new();
	started = answered = 0;
	nwaiting = 0;
	int over = grpc_session_input(s, preface, sizeof(preface) - 1) < 0;
	size_t at = 0;
	while (at < size && !over) {
		seed = seed * 1103515245u + 12345u;
		size_t n = 1 + (seed >> 16) % 64;
		if (n > size - at)
			n = size - at;
		over = grpc_session_input(s, data + at, n) < 0;
		at += n;
		check(grpc_session_output(s, out) == 0 || over, "output");
		evbuffer_drain(out, evbuffer_get_length(out));
		/* some waiting calls are answered between chunks */
		if (nwaiting && (seed & 0x100))
			answer(waiting[--nwaiting], 0);
		/* request_timeout now and then: streams still arriving are
		 * answered at once, and what more comes for them is dropped */
		if ((seed & 0x3e00) == 0x3e00) {
			grpc_session_fail_partial(s, GRPC_DEADLINE_EXCEEDED, "late");
			check(grpc_session_partial(s) == 0, "no stream partial after failing them");
			check(grpc_session_output(s, out) == 0 || over,
			      "output after failing partial streams");
			evbuffer_drain(out, evbuffer_get_length(out));
		}
	}
	grpc_session_output(s, out);
	check(grpc_session_calls(s) == started - answered, "calls in flight counted");
	size_t half = nwaiting / 2;
	while (nwaiting > half) {
		nwaiting--;
		answer(waiting[nwaiting], (int)(nwaiting & 1));
	}
	grpc_session_drain(s);
	grpc_session_output(s, out);
	grpc_session_free(s); /* the connection is gone */
	while (nwaiting) {    /* into nothing */
		nwaiting--;
		answer(waiting[nwaiting], (int)(nwaiting & 1));
	}
	check(started == answered, "every call answered once");
	evbuffer_free(out);
	return 0;
}
