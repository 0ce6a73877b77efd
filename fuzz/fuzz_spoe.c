/*
 * fuzz_spoe.c - libFuzzer harness for HAProxy's SPOE agent
 * (src/proto/proto_spoe.c): its step and reply formatter through the shared
 * loop of fuzz_step.c, so what HAProxy sends is fed whole, byte by byte and
 * in chunks of random sizes, through the daemon's own in-order session.
 * Every reply is checked to be one whole SPOP frame of an agent's type,
 * within the smallest frame size HAProxy may agree to, whose payload reads
 * back (a KV-LIST, or an ACK's set-var actions).
 *
 * Input: a 2-byte header (max_line, and the chunk sizes' seed), then the
 * byte stream HAProxy sends.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_step.h"
#include "proto_spoe.h"
#include "spop.h"

#define HEADER 2

const char *const fuzz_name = "fuzz_spoe";
const struct proto *const fuzz_proto = &proto_spoe;

/* An ACK's actions: set-var, 3 arguments, the txn scope, a name, a value. */
static void check_actions(struct spop_cursor *c)
{
	while (c->p < c->end) {
		check(c->end - c->p >= 3 && c->p[0] == 1 && c->p[1] == 3 &&
			      c->p[2] == SPOP_SCOPE_TXN,
		      "a set-var in the txn scope");
		c->p += 3;
		const char *name;
		size_t len;
		struct spop_value v;
		check(spop_kv_next(c, &name, &len, &v) == 1 && len > 0, "a variable and its value");
	}
}

void fuzz_check_reply(const struct cmd_result *res)
{
	uint8_t *buf = malloc(proto_spoe.reply_max); /* exact size: ASan sees an overflow */
	check(buf != NULL, "out of memory");
	size_t n = proto_spoe.format((char *)buf, res, NULL);
	check(n > 0 && n <= proto_spoe.reply_max, "reply length");
	struct spop_frame f;
	size_t used = 0;
	check(spop_frame_read(buf, n, SPOP_FRAME_MIN, &f, &used) == SPOP_READ_FRAME && used == n,
	      "one whole frame within 256 bytes");
	check(f.flags == SPOP_FLAG_FIN, "unfragmented");
	struct spop_cursor c = {f.payload, f.payload + f.payload_len};
	if (f.type == SPOP_ACK) {
		check_actions(&c);
	} else {
		check(f.type == SPOP_AGENT_HELLO || f.type == SPOP_AGENT_DISCONNECT,
		      "an agent's frame");
		check(f.stream_id == 0 && f.frame_id == 0, "ids 0 outside an ACK");
		const char *name;
		size_t len;
		struct spop_value v;
		int k;
		while ((k = spop_kv_next(&c, &name, &len, &v)) == 1)
			;
		check(k == 0, "a KV-LIST");
	}
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < HEADER)
		return 0;
	size_t max_line = 1 + (size_t)((data[0] | data[1] << 8) % 8192);
	uint32_t rnd = (uint32_t)(data[0] | data[1] << 8) * 2654435761u;
	static struct spoe_conn sc;
	memset(&sc, 0, sizeof(sc));
	fuzz_run(max_line, &sc, sizeof(sc), (const char *)data + HEADER, size - HEADER, rnd);
	return 0;
}
