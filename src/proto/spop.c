/* spop.c - SPOP's frames and data, read and written (spop.h). */
#include "spop.h"

#include <string.h>

/* A frame's metadata: its type (1 byte) and flags (4 bytes) before the two
 * varints, so a frame is at least this long. */
#define META_MIN 7

enum spop_read spop_frame_read(const uint8_t *buf, size_t len, size_t max_frame,
			       struct spop_frame *f, size_t *used)
{
	if (len < SPOP_LEN_SIZE)
		return SPOP_READ_NEED_MORE;
	uint32_t flen = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 |
			(uint32_t)buf[3];
	if (flen > max_frame)
		return SPOP_READ_TOO_BIG;
	if (flen < META_MIN)
		return SPOP_READ_INVALID;
	if (len - SPOP_LEN_SIZE < flen)
		return SPOP_READ_NEED_MORE;
	const uint8_t *p = buf + SPOP_LEN_SIZE;
	struct spop_cursor c = {p + 5, p + flen};
	f->type = p[0];
	f->flags = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
	if (spop_varint_read(&c, &f->stream_id) < 0 || spop_varint_read(&c, &f->frame_id) < 0)
		return SPOP_READ_INVALID;
	f->payload = c.p;
	f->payload_len = (size_t)(c.end - c.p);
	*used = SPOP_LEN_SIZE + flen;
	return SPOP_READ_FRAME;
}

int spop_varint_read(struct spop_cursor *c, uint64_t *v)
{
	if (c->p >= c->end)
		return -1;
	uint64_t x = *c->p++;
	if (x < 240) {
		*v = x;
		return 0;
	}
	/* then 7 bits a byte, the high bit saying more follow; 10 bytes
	 * hold any 64-bit value, and a sum past 2^64 is no value */
	unsigned shift = 4;
	for (int n = 0; n < 9; n++) {
		if (c->p >= c->end)
			return -1;
		uint64_t b = *c->p++;
		uint64_t add = shift < 64 ? b << shift : 0;
		if ((shift >= 64 && b) || (shift > 0 && shift < 64 && b >> (64 - shift)) ||
		    x + add < x)
			return -1;
		x += add;
		shift += 7;
		if (b < 128) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

static int read_bytes(struct spop_cursor *c, const char **s, size_t *len)
{
	uint64_t n;
	if (spop_varint_read(c, &n) < 0 || n > (uint64_t)(c->end - c->p))
		return -1;
	*s = (const char *)c->p;
	*len = (size_t)n;
	c->p += n;
	return 0;
}

int spop_value_read(struct spop_cursor *c, struct spop_value *v)
{
	if (c->p >= c->end)
		return -1;
	uint8_t tf = *c->p++;
	memset(v, 0, sizeof(*v));
	v->type = (enum spop_data_type)(tf & 0x0f);
	uint64_t u;
	switch (v->type) {
	case SPOP_NULL:
		return 0;
	case SPOP_BOOL:
		v->boolean = (tf >> 4) & 1;
		return 0;
	case SPOP_INT32:
	case SPOP_INT64:
		/* signed: the varint holds the value's two's complement bits */
		if (spop_varint_read(c, &u) < 0)
			return -1;
		if (v->type == SPOP_INT32 && (u > UINT32_MAX))
			return -1;
		v->i = v->type == SPOP_INT32 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
		v->u = v->i >= 0 ? (uint64_t)v->i : 0;
		return 0;
	case SPOP_UINT32:
	case SPOP_UINT64:
		if (spop_varint_read(c, &u) < 0 || (v->type == SPOP_UINT32 && u > UINT32_MAX))
			return -1;
		v->u = u;
		v->i = u <= INT64_MAX ? (int64_t)u : INT64_MAX;
		return 0;
	case SPOP_IPV4:
	case SPOP_IPV6: {
		size_t n = v->type == SPOP_IPV4 ? 4 : 16;
		if ((size_t)(c->end - c->p) < n)
			return -1;
		memcpy(v->ip, c->p, n);
		c->p += n;
		return 0;
	}
	case SPOP_STRING:
	case SPOP_BINARY:
		return read_bytes(c, &v->str, &v->len);
	}
	return -1; /* 10 to 15: reserved */
}

int spop_kv_next(struct spop_cursor *c, const char **name, size_t *name_len, struct spop_value *v)
{
	if (c->p >= c->end)
		return 0;
	if (read_bytes(c, name, name_len) < 0 || spop_value_read(c, v) < 0)
		return -1;
	return 1;
}

int spop_message_next(struct spop_cursor *c, const char **name, size_t *name_len, int *nargs,
		      struct spop_cursor *args)
{
	if (c->p >= c->end)
		return 0;
	if (read_bytes(c, name, name_len) < 0 || c->p >= c->end)
		return -1;
	*nargs = *c->p++;
	/* the arguments' extent: walked once here, read again by the caller */
	args->p = c->p;
	for (int i = 0; i < *nargs; i++) {
		const char *k;
		size_t kl;
		struct spop_value v;
		if (spop_kv_next(c, &k, &kl, &v) != 1)
			return -1;
	}
	args->end = c->p;
	return 1;
}

/* ---- writing ---- */

static void put(struct spop_writer *w, const void *p, size_t n)
{
	if (w->failed || w->cap - w->len < n) {
		w->failed = 1;
		return;
	}
	memcpy(w->buf + w->len, p, n);
	w->len += n;
}

static void put_byte(struct spop_writer *w, uint8_t b)
{
	put(w, &b, 1);
}

void spop_put_varint(struct spop_writer *w, uint64_t v)
{
	if (v < 240) {
		put_byte(w, (uint8_t)v);
		return;
	}
	put_byte(w, (uint8_t)(v | 240));
	v = (v - 240) >> 4;
	while (v >= 128) {
		put_byte(w, (uint8_t)(v | 128));
		v = (v - 128) >> 7;
	}
	put_byte(w, (uint8_t)v);
}

void spop_put_string(struct spop_writer *w, const char *s, size_t len)
{
	spop_put_varint(w, len);
	put(w, s, len);
}

void spop_put_value(struct spop_writer *w, const struct spop_value *v)
{
	switch (v->type) {
	case SPOP_NULL:
		put_byte(w, SPOP_NULL);
		return;
	case SPOP_BOOL:
		put_byte(w, (uint8_t)(SPOP_BOOL | (v->boolean ? 0x10 : 0)));
		return;
	case SPOP_INT32:
	case SPOP_INT64:
		put_byte(w, (uint8_t)v->type);
		spop_put_varint(w, v->type == SPOP_INT32 ? (uint64_t)(uint32_t)(int32_t)v->i
							 : (uint64_t)v->i);
		return;
	case SPOP_UINT32:
	case SPOP_UINT64:
		put_byte(w, (uint8_t)v->type);
		spop_put_varint(w, v->type == SPOP_UINT32 ? (uint32_t)v->u : v->u);
		return;
	case SPOP_IPV4:
	case SPOP_IPV6:
		put_byte(w, (uint8_t)v->type);
		put(w, v->ip, v->type == SPOP_IPV4 ? 4 : 16);
		return;
	case SPOP_STRING:
	case SPOP_BINARY:
		put_byte(w, (uint8_t)v->type);
		spop_put_string(w, v->str, v->len);
		return;
	}
	w->failed = 1; /* no such type */
}

void spop_frame_begin(struct spop_writer *w, enum spop_frame_type type, uint64_t stream_id,
		      uint64_t frame_id)
{
	w->len = 0;
	w->failed = 0;
	static const uint8_t room[SPOP_LEN_SIZE];
	put(w, room, sizeof(room)); /* the length, filled at the end */
	uint8_t meta[5] = {(uint8_t)type, 0, 0, 0, SPOP_FLAG_FIN};
	put(w, meta, sizeof(meta));
	spop_put_varint(w, stream_id);
	spop_put_varint(w, frame_id);
}

int spop_frame_end(struct spop_writer *w, size_t max_frame)
{
	if (w->failed || w->len - SPOP_LEN_SIZE > max_frame)
		return -1;
	size_t n = w->len - SPOP_LEN_SIZE;
	w->buf[0] = (uint8_t)(n >> 24);
	w->buf[1] = (uint8_t)(n >> 16);
	w->buf[2] = (uint8_t)(n >> 8);
	w->buf[3] = (uint8_t)n;
	return 0;
}

void spop_put_kv_string(struct spop_writer *w, const char *name, const char *value)
{
	spop_put_string(w, name, strlen(name));
	struct spop_value v = {.type = SPOP_STRING, .str = value, .len = strlen(value)};
	spop_put_value(w, &v);
}

void spop_put_kv_uint32(struct spop_writer *w, const char *name, uint32_t value)
{
	spop_put_string(w, name, strlen(name));
	struct spop_value v = {.type = SPOP_UINT32, .u = value};
	spop_put_value(w, &v);
}

void spop_put_set_var(struct spop_writer *w, enum spop_scope scope, const char *name,
		      const struct spop_value *v)
{
	uint8_t head[3] = {1 /* set-var */, 3 /* arguments */, (uint8_t)scope};
	put(w, head, sizeof(head));
	spop_put_string(w, name, strlen(name));
	spop_put_value(w, v);
}

int spop_list_has(const char *list, size_t len, const char *word)
{
	size_t wl = strlen(word), i = 0;
	while (i < len) {
		while (i < len && (list[i] == ' ' || list[i] == '\t'))
			i++;
		size_t start = i;
		while (i < len && list[i] != ',')
			i++;
		size_t end = i;
		while (end > start && (list[end - 1] == ' ' || list[end - 1] == '\t'))
			end--;
		if (end - start == wl && memcmp(list + start, word, wl) == 0)
			return 1;
		i++; /* past the comma */
	}
	return 0;
}
