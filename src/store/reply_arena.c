/*
 * reply_arena.c - hiredis reply objects from one arena per reader
 * (reply_arena.h).
 *
 * hiredis's own functions make one calloc per element: a call of 256
 * decisions answers 1,280 integers, and their mallocs and frees were a
 * tenth of the daemon's CPU under a gRPC load. Here a reply's objects are
 * bumped out of one block that is kept from reply to reply; what does not
 * fit goes into blocks of its own, and the next reset grows the kept block
 * to what the reply needed (up to ARENA_KEEP_MAX), so a steady load stops
 * allocating. The reader hands out one reply at a time and frees only its
 * root (an error's partial reply too), so freeing the root frees them all.
 * Under AddressSanitizer the kept block is poisoned but for the bytes
 * handed out since the last reset (poison.h): a use of a reply after it is
 * freed, or past an object's end, is caught.
 */
#include "reply_arena.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "poison.h"

#define MAX_REPLY_ELEMENTS 65536
/* the block kept between replies: a full call's reply is about 72 KiB */
#define ARENA_FIRST (16 * 1024)
#define ARENA_KEEP_MAX (256 * 1024)
#define ARENA_ALIGN 16

struct arena_block {
	struct arena_block *next;
};

struct arena {
	char *base;
	size_t cap, used;
	struct arena_block *extra; /* what did not fit in base, this reply */
	size_t wanted;		   /* bytes this reply asked for, base and extra */
};

/* Before a root object: how its free finds the arena. */
struct root_head {
	struct arena *a; /* the object follows, ARENA_ALIGN bytes on */
};

static size_t round_up(size_t n)
{
	return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
}

static void *arena_alloc(struct arena *a, size_t n)
{
	size_t asked = n;
	n = round_up(n);
	a->wanted += n;
	if (a->cap - a->used >= n) {
		void *p = a->base + a->used;
		RL_UNPOISON(p, asked);
		a->used += n;
		return p;
	}
	size_t head = round_up(sizeof(struct arena_block));
	if (n > SIZE_MAX - head)
		return NULL;
	struct arena_block *b = malloc(head + n);
	if (!b)
		return NULL;
	b->next = a->extra;
	a->extra = b;
	return (char *)b + head;
}

static void arena_free_extra(struct arena *a)
{
	while (a->extra) {
		struct arena_block *b = a->extra;
		a->extra = b->next;
		free(b);
	}
}

static void arena_reset(struct arena *a)
{
	int spilled = a->extra != NULL;
	arena_free_extra(a);
	if (spilled || !a->base) {
		size_t want = a->wanted > ARENA_FIRST ? a->wanted : ARENA_FIRST;
		if (want > ARENA_KEEP_MAX)
			want = ARENA_KEEP_MAX;
		if (want > a->cap) {
			char *nb = malloc(want);
			if (nb) { /* else the old block stays: spills go on */
				if (a->base)
					RL_UNPOISON(a->base, a->cap);
				free(a->base);
				a->base = nb;
				a->cap = want;
			}
		}
	}
	if (a->base)
		RL_POISON(a->base, a->cap);
	a->used = 0;
	a->wanted = 0;
}

/* A new object for task, linked into its parent; the root gets a head. */
static redisReply *object_new(const redisReadTask *task, int type, size_t extra)
{
	struct arena *a = task->privdata;
	size_t head = task->parent ? 0 : round_up(sizeof(struct root_head));
	size_t size = round_up(sizeof(redisReply));
	if (extra > SIZE_MAX - size - head)
		return NULL;
	char *p = arena_alloc(a, head + size + extra);
	if (!p)
		return NULL;
	if (head)
		((struct root_head *)p)->a = a;
	redisReply *r = (redisReply *)(p + head);
	memset(r, 0, sizeof(*r));
	r->type = type;
	if (task->parent) {
		redisReply *parent = task->parent->obj;
		parent->element[task->idx] = r;
	}
	return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
	if (len == SIZE_MAX)
		return NULL;
	redisReply *r = object_new(task, task->type, len + 1);
	if (!r)
		return NULL;
	r->str = (char *)r + round_up(sizeof(redisReply));
	memcpy(r->str, str, len);
	r->str[len] = '\0';
	r->len = len;
	return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
	if (elements < 0 || elements > MAX_REPLY_ELEMENTS)
		return NULL; /* the reader reports out of memory: the connection is dropped */
	size_t n = (size_t)elements;
	redisReply *r = object_new(task, REDIS_REPLY_ARRAY, n * sizeof(redisReply *));
	if (!r)
		return NULL;
	if (n) {
		r->element = (redisReply **)((char *)r + round_up(sizeof(redisReply)));
		memset(r->element, 0, n * sizeof(redisReply *));
	}
	r->elements = n;
	return r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
	redisReply *r = object_new(task, REDIS_REPLY_INTEGER, 0);
	if (r)
		r->integer = value;
	return r;
}

static void *create_nil(const redisReadTask *task)
{
	return object_new(task, REDIS_REPLY_NIL, 0);
}

/* Only ever called on a root (by the reader on an error, by its owner). */
static void free_object(void *obj)
{
	if (!obj)
		return;
	struct root_head *h =
		(struct root_head *)((char *)obj - round_up(sizeof(struct root_head)));
	arena_reset(h->a);
}

static redisReplyObjectFunctions arena_functions = {
	.createString = create_string,
	.createArray = create_array,
	.createInteger = create_integer,
	.createNil = create_nil,
	.freeObject = free_object,
};

redisReader *reply_arena_reader_new(void)
{
	struct arena *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	redisReader *r = redisReaderCreateWithFunctions(&arena_functions);
	if (!r) {
		free(a);
		return NULL;
	}
	r->privdata = a; /* every task's privdata: how objects find it */
	return r;
}

void reply_arena_free(redisReader *r, void *reply)
{
	(void)r;
	free_object(reply);
}

void reply_arena_reader_free(redisReader *r)
{
	if (!r)
		return;
	struct arena *a = r->privdata;
	redisReaderFree(r); /* frees a partial reply: a reset */
	if (a) {
		arena_free_extra(a);
		if (a->base)
			RL_UNPOISON(a->base, a->cap);
		free(a->base);
		free(a);
	}
}
