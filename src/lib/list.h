/*
 * list.h - an intrusive doubly linked list: a head, and a link inside each
 * element (BSD's LIST_* of sys/queue.h, as functions). Pushed at the front,
 * walked from the first, unlinked in O(1) without the head: a link points
 * at the pointer that points at it (the head's, or the element before's).
 * Nothing is allocated; an element is on at most one list per link, and
 * an unlinked link is all NULL (list_linked says whether it is on one).
 */
#ifndef RL_LIST_H
#define RL_LIST_H

#include <stddef.h>

struct list_link {
	struct list_link *next;
	struct list_link **pprev; /* what points at this link; NULL: on no list */
};

struct list {
	struct list_link *first;
};

/* The element whose member `link` is at l (NULL for NULL). */
#define list_entry(l, type, member) ((type *)list_entry_at_((l), offsetof(type, member)))

static inline void *list_entry_at_(struct list_link *l, size_t offset)
{
	return l ? (void *)((char *)l - offset) : NULL;
}

static inline int list_empty(const struct list *h)
{
	return h->first == NULL;
}

static inline int list_linked(const struct list_link *l)
{
	return l->pprev != NULL;
}

/* l, on no list, becomes h's first. */
static inline void list_push(struct list *h, struct list_link *l)
{
	l->next = h->first;
	if (l->next)
		l->next->pprev = &l->next;
	h->first = l;
	l->pprev = &h->first;
}

/* l leaves its list; nothing when it is on none. */
static inline void list_unlink(struct list_link *l)
{
	if (!l->pprev)
		return;
	*l->pprev = l->next;
	if (l->next)
		l->next->pprev = l->pprev;
	l->next = NULL;
	l->pprev = NULL;
}

#endif
