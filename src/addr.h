/* addr.h - splitting "host:port" and "[v6]:port" addresses. */
#ifndef RL_ADDR_H
#define RL_ADDR_H

#include <stddef.h>

/*
 * Writes the host of "host:port" or "[v6]:port" (brackets removed) to host
 * and the port to *port. 0, or -1 when there is no port or the host does not
 * fit in cap bytes.
 */
int addr_split(const char *addr, char *host, size_t cap, int *port);

#endif
