/*
 * fuzz_spop.c - libFuzzer harness for SPOP's bytes (src/proto/spop.c).
 *
 * Input: byte 0 chooses the frame size limit and how the rest is fed (whole,
 * or as a stream growing by chunks of 1..255 bytes, or byte by byte, as HAProxy's
 * frames arrive from a socket); the rest is what HAProxy sends. Every frame
 * read must lie inside what was fed, be no longer than the limit, be the
 * same whatever the chunks, and the stream must stop at the same point.
 * Each frame's payload is walked as a KV list and as a list of messages
 * (each message's arguments too); every value read is written back with the
 * writer and read again, and must come back the same.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spop.h"

#define MAX_FRAMES 256

struct seen {
	size_t n;
	size_t used[MAX_FRAMES];
	unsigned type[MAX_FRAMES];
	enum spop_read end;
};

static void same_value(const struct spop_value *a, const struct spop_value *b)
{
	if (a->type != b->type)
		abort();
	switch (a->type) {
	case SPOP_BOOL:
		if (a->boolean != b->boolean)
			abort();
		break;
	case SPOP_INT32:
	case SPOP_INT64:
	case SPOP_UINT32:
	case SPOP_UINT64:
		if (a->i != b->i || a->u != b->u)
			abort();
		break;
	case SPOP_IPV4:
	case SPOP_IPV6:
		if (memcmp(a->ip, b->ip, a->type == SPOP_IPV4 ? 4 : 16) != 0)
			abort();
		break;
	case SPOP_STRING:
	case SPOP_BINARY:
		if (a->len != b->len || memcmp(a->str, b->str, a->len) != 0)
			abort();
		break;
	case SPOP_NULL:
		break;
	}
}

/* v written and read back. */
static void roundtrip(const struct spop_value *v)
{
	static uint8_t buf[SPOP_FRAME_MAX + 64];
	struct spop_writer w = {buf, sizeof(buf), 0, 0};
	spop_put_value(&w, v);
	if (w.failed)
		return; /* a string too long for the room */
	struct spop_cursor c = {buf, buf + w.len};
	struct spop_value back;
	if (spop_value_read(&c, &back) != 0 || c.p != c.end)
		abort();
	same_value(v, &back);
}

static void walk(const struct spop_frame *f, const uint8_t *lo, const uint8_t *hi)
{
	if (f->payload < lo || f->payload + f->payload_len > hi)
		abort();
	struct spop_cursor c = {f->payload, f->payload + f->payload_len};
	const char *name;
	size_t nl;
	struct spop_value v;
	int r;
	while ((r = spop_kv_next(&c, &name, &nl, &v)) == 1) {
		if ((const uint8_t *)name < lo || (const uint8_t *)name + nl > hi || c.p > c.end)
			abort();
		roundtrip(&v);
	}
	c = (struct spop_cursor){f->payload, f->payload + f->payload_len};
	struct spop_cursor args;
	int nargs;
	while (spop_message_next(&c, &name, &nl, &nargs, &args) == 1) {
		if (args.p < f->payload || args.end > c.p || nargs < 0 || nargs > 255)
			abort();
		int n = 0;
		while (spop_kv_next(&args, &name, &nl, &v) == 1) {
			roundtrip(&v);
			n++;
		}
		if (n != nargs) /* the outer walk read exactly nargs */
			abort();
	}
}

/* Frames from the stream fed as it grows by `chunk` bytes (0: whole). */
static void run(const uint8_t *data, size_t size, size_t max_frame, size_t chunk, struct seen *s)
{
	size_t fed = chunk ? 0 : size, pos = 0;
	s->n = 0;
	for (;;) {
		struct spop_frame f;
		size_t used = 0;
		enum spop_read r = spop_frame_read(data + pos, fed - pos, max_frame, &f, &used);
		if (r == SPOP_READ_FRAME) {
			if (used > fed - pos || used - SPOP_LEN_SIZE > max_frame)
				abort();
			walk(&f, data + pos, data + pos + used);
			if (s->n < MAX_FRAMES) {
				s->used[s->n] = used;
				s->type[s->n] = f.type;
			}
			s->n++;
			pos += used;
			continue;
		}
		if (r == SPOP_READ_NEED_MORE && fed < size) {
			fed += chunk;
			if (fed > size)
				fed = size;
			continue;
		}
		s->end = r;
		return;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	data++;
	size--;
	size_t max_frame = mode & 1 ? SPOP_FRAME_MIN : SPOP_FRAME_MAX;
	size_t chunk = (mode >> 1) & 3 ? 1u + (mode >> 1) : 1;
	static struct seen whole, cut;
	run(data, size, max_frame, 0, &whole);
	run(data, size, max_frame, chunk, &cut);
	if (whole.n != cut.n || whole.end != cut.end)
		abort();
	for (size_t i = 0; i < whole.n && i < MAX_FRAMES; i++)
		if (whole.used[i] != cut.used[i] || whole.type[i] != cut.type[i])
			abort();
	return 0;
}
