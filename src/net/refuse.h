/*
 * refuse.h - clients refused at max_clients, told so in their own protocol
 * (the bytes: refuse_msg.h), then closed without an RST destroying the
 * answer. A small fixed set of refusals at once, each for a second or two.
 */
#ifndef RL_REFUSE_H
#define RL_REFUSE_H

#include <event2/util.h>

#include "config.h"

struct event_base;
struct refuse;

/* NULL when out of memory. */
struct refuse *refuse_new(struct event_base *base);
/* Takes fd, a client accepted on a port of protocol: answers it
 * too-many-clients and closes it, from the loop. */
void refuse_start(struct refuse *rf, evutil_socket_t fd, enum config_protocol protocol);
/* Closes every refusal still under way (shutdown). */
void refuse_close_all(struct refuse *rf);
/* Closes them and frees. NULL is fine. */
void refuse_free(struct refuse *rf);

#endif
