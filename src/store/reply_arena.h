/*
 * reply_arena.h - a hiredis reader whose reply objects are carved from one
 * arena: a reply of a few hundred integers is a few bump allocations, not
 * a malloc and a free per element, and freeing it is a reset.
 */
#ifndef RL_REPLY_ARENA_H
#define RL_REPLY_ARENA_H

struct redisReader;

/*
 * A reader (NULL when out of memory) whose replies are hiredis's redisReply
 * trees, read only, as hiredis builds them. One reply lives at a time: the
 * reply redisReaderGetReply hands out is valid until reply_arena_free(r, it)
 * or the next redisReaderGetReply, whichever comes first (the next reply
 * reuses its memory). Arrays announcing more than 65536 elements are
 * refused as hiredis 0.14 would not (it allocates whatever is announced):
 * the reader fails with out of memory.
 */
struct redisReader *reply_arena_reader_new(void);
/* Done with reply (from r): its memory is reused. NULL is ignored. */
void reply_arena_free(struct redisReader *r, void *reply);
/* Frees r, its arena and any reply it holds. */
void reply_arena_reader_free(struct redisReader *r);

#endif
