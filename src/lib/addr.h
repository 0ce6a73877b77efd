/* addr.h - splitting "host:port" and "[v6]:port" addresses; IP networks. */
#ifndef RL_ADDR_H
#define RL_ADDR_H

#include <stddef.h>

/*
 * Writes the host of "host:port" or "[v6]:port" (brackets removed) to host
 * and the port to *port. 0, or -1 when there is no port or the host does not
 * fit in cap bytes.
 */
int addr_split(const char *addr, char *host, size_t cap, int *port);

/* An IPv4 or IPv6 address (an IPv4-mapped IPv6 address is taken as IPv4). */
struct addr_ip {
	int family; /* AF_INET or AF_INET6; 0: none (a unix socket) */
	unsigned char bytes[16];
};

/* A network: an address and how many leading bits must match. */
struct addr_net {
	struct addr_ip ip;
	int prefix;
};

/* Parses "10.1.2.3" or "::1" (no brackets, no port). 0 or -1. */
int addr_ip_parse(const char *s, size_t len, struct addr_ip *out);
/* "127.0.0.0/8", "::1/128", or an address alone (all its bits). 0 or -1. */
int addr_net_parse(const char *s, size_t len, struct addr_net *out);
int addr_net_match(const struct addr_net *net, const struct addr_ip *ip);
/* The IP of a socket address (family 0 for anything else). */
void addr_ip_of(const void *sockaddr, struct addr_ip *out);
/* Writes ip as text ("10.1.2.3", "::1") to buf (at least 46 bytes); its length. */
size_t addr_ip_text(const struct addr_ip *ip, char *buf, size_t cap);
/* A socket's address of len bytes as a listen entry would name it:
 * "10.1.2.3:80", "[::1]:80" (an IPv4-mapped one too) or "unix:/path";
 * "?" for anything else. */
void addr_sockaddr_text(const void *sockaddr, size_t len, char *buf, size_t cap);

/*
 * Whether sockets bound at listen addresses a and b ("host:port",
 * "[v6]:port", "unix:/path") would collide: the same unix path; the same
 * port on an equal host (IP literals compared as addresses, so 127.0.0.1
 * and ::ffff:127.0.0.1 are one; names as text, ignoring case; a name and
 * an IP never, as resolving is not done here), or on a wildcard (0.0.0.0
 * takes the port of every IPv4 address, :: of every IPv6 one and, dual-stack, every IPv4 one too). 1 or 0.
 */
int addr_overlap(const char *a, const char *b);

#endif
