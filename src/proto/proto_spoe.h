/*
 * proto_spoe.h - HAProxy's SPOE on listeners with `protocol: spoe`: the
 * agent's side of SPOP 2.0 (its bytes in spop.c). HAPROXY-HELLO is answered
 * by AGENT-HELLO, a NOTIFY's `ratelimit` message is an ALLOW (a MALLOW for
 * several pairs) whose ACK sets HAProxy's variables, HAPROXY-DISCONNECT by
 * AGENT-DISCONNECT (docs/proxies.md, "HAProxy (SPOE)").
 */
#ifndef RL_PROTO_SPOE_H
#define RL_PROTO_SPOE_H

#include <stdint.h>

#include "keys.h"
#include "proto.h"

/* The NOTIFYs one connection may have unanswered: pipeline.c's MAX_PENDING,
 * which stops reading at that many owed. */
#define PROTO_SPOE_OWED_MAX 1024
/* Longest frame format writes (an ACK with an error's message is the
 * longest), its length prefix included. */
#define PROTO_SPOE_REPLY_MAX 1024

/* A NOTIFY's ids, echoed in its ACK. */
struct spoe_ids {
	uint64_t stream_id, frame_id;
};

/*
 * An SPOE connection's state: whether the HELLO was answered, the frame
 * size agreed there, the ids of the NOTIFYs owed an ACK (replies are
 * formatted in order, so a FIFO), and room to write users that came as
 * addresses or integers (valid until the next step).
 */
struct spoe_conn {
	int hello;
	uint32_t max_frame; /* 0 before the HELLO: SPOP_FRAME_MAX */
	struct spoe_ids owed[PROTO_SPOE_OWED_MAX];
	unsigned owed_head, owed_n;
	char user[CMD_PAIRS_MAX][48]; /* an IPv6 address's text, or a 64-bit integer's */
};

extern const struct proto proto_spoe;

#endif
