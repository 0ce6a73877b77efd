/* addr.c - splitting "host:port" and "[v6]:port" addresses. */
#include "addr.h"

#include <stdlib.h>
#include <string.h>

int addr_split(const char *addr, char *host, size_t cap, int *port)
{
	const char *colon = strrchr(addr, ':');
	if (!colon)
		return -1;
	size_t hl = (size_t)(colon - addr);
	if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
		addr++;
		hl -= 2;
	}
	if (hl >= cap)
		return -1;
	memcpy(host, addr, hl);
	host[hl] = '\0';
	*port = atoi(colon + 1);
	return 0;
}
