/* addr.c - splitting "host:port" and "[v6]:port" addresses; IP networks. */
#include "addr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

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

static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static void ip_set(struct addr_ip *out, int family, const void *bytes)
{
	memset(out, 0, sizeof(*out));
	if (family == AF_INET6 && memcmp(bytes, v4mapped, 12) == 0) {
		out->family = AF_INET;
		memcpy(out->bytes, (const unsigned char *)bytes + 12, 4);
		return;
	}
	out->family = family;
	memcpy(out->bytes, bytes, family == AF_INET ? 4 : 16);
}

int addr_ip_parse(const char *s, size_t len, struct addr_ip *out)
{
	char buf[64];
	unsigned char bytes[16];
	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, bytes) == 1) {
		ip_set(out, AF_INET, bytes);
		return 0;
	}
	if (inet_pton(AF_INET6, buf, bytes) == 1) {
		ip_set(out, AF_INET6, bytes);
		return 0;
	}
	return -1;
}

int addr_net_parse(const char *s, size_t len, struct addr_net *out)
{
	const char *slash = memchr(s, '/', len);
	size_t alen = slash ? (size_t)(slash - s) : len;
	if (addr_ip_parse(s, alen, &out->ip) < 0)
		return -1;
	int max = out->ip.family == AF_INET ? 32 : 128;
	if (!slash) {
		out->prefix = max;
		return 0;
	}
	const char *p = slash + 1, *end = s + len;
	if (p == end || end - p > 3)
		return -1;
	int v = 0;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (*p - '0');
	}
	/* "::ffff:10.0.0.0/104" is 10.0.0.0/8 */
	if (out->ip.family == AF_INET && alen && memchr(s, ':', alen))
		v -= 96;
	if (v < 0 || v > max)
		return -1;
	out->prefix = v;
	return 0;
}

int addr_net_match(const struct addr_net *net, const struct addr_ip *ip)
{
	if (net->ip.family != ip->family || ip->family == 0)
		return 0;
	int full = net->prefix / 8, rest = net->prefix % 8;
	if (memcmp(net->ip.bytes, ip->bytes, (size_t)full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	unsigned char mask = (unsigned char)(0xff << (8 - rest));
	return (net->ip.bytes[full] & mask) == (ip->bytes[full] & mask);
}

void addr_ip_of(const void *sockaddr, struct addr_ip *out)
{
	const struct sockaddr *sa = sockaddr;
	memset(out, 0, sizeof(*out));
	if (sa->sa_family == AF_INET)
		ip_set(out, AF_INET, &((const struct sockaddr_in *)sockaddr)->sin_addr);
	else if (sa->sa_family == AF_INET6)
		ip_set(out, AF_INET6, &((const struct sockaddr_in6 *)sockaddr)->sin6_addr);
}

void addr_sockaddr_text(const void *sockaddr, size_t len, char *buf, size_t cap)
{
	const struct sockaddr *sa = sockaddr;
	int family = len >= sizeof(sa->sa_family) ? sa->sa_family : AF_UNSPEC;
	size_t path_at = offsetof(struct sockaddr_un, sun_path);
	if (family == AF_UNIX && len > path_at) {
		const struct sockaddr_un *sun = sockaddr;
		snprintf(buf, cap, "unix:%.*s", (int)strnlen(sun->sun_path, len - path_at),
			 sun->sun_path);
		return;
	}
	/* as bound, not as addr_ip_of takes it: an IPv4-mapped address stays
	 * IPv6, the form a listen entry needs to match the socket */
	const void *ip = NULL;
	int port = 0;
	if (family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		ip = &((const struct sockaddr_in *)sockaddr)->sin_addr;
		port = ntohs(((const struct sockaddr_in *)sockaddr)->sin_port);
	} else if (family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		ip = &((const struct sockaddr_in6 *)sockaddr)->sin6_addr;
		port = ntohs(((const struct sockaddr_in6 *)sockaddr)->sin6_port);
	}
	char host[INET6_ADDRSTRLEN];
	if (!ip || !inet_ntop(family, ip, host, sizeof(host)))
		snprintf(buf, cap, "?");
	else
		snprintf(buf, cap, family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
}

size_t addr_ip_text(const struct addr_ip *ip, char *buf, size_t cap)
{
	if (ip->family == 0 || !inet_ntop(ip->family, ip->bytes, buf, (socklen_t)cap)) {
		if (cap)
			buf[0] = '\0';
		return 0;
	}
	return strlen(buf);
}

static int ip_any(const struct addr_ip *ip)
{
	static const unsigned char zero[16];
	return memcmp(ip->bytes, zero, ip->family == AF_INET ? 4 : 16) == 0;
}

int addr_overlap(const char *a, const char *b)
{
	int ua = strncmp(a, "unix:", 5) == 0, ub = strncmp(b, "unix:", 5) == 0;
	if (ua || ub)
		return ua && ub && strcmp(a + 5, b + 5) == 0;
	char ha[256], hb[256];
	int pa, pb;
	if (addr_split(a, ha, sizeof(ha), &pa) < 0 || addr_split(b, hb, sizeof(hb), &pb) < 0 ||
	    pa != pb)
		return 0;
	struct addr_ip ia, ib;
	int na = addr_ip_parse(ha, strlen(ha), &ia) == 0,
	    nb = addr_ip_parse(hb, strlen(hb), &ib) == 0;
	if (!na || !nb) /* a name: only the same name is known to be the same */
		return !na && !nb && strcasecmp(ha, hb) == 0;
	if (ia.family != ib.family) /* :: takes IPv4's port too: the daemon leaves
				      * IPV6_V6ONLY off, as Linux's default bindv6only=0 */
		return (ia.family == AF_INET6 && ip_any(&ia)) ||
		       (ib.family == AF_INET6 && ip_any(&ib));
	return ip_any(&ia) || ip_any(&ib) ||
	       memcmp(ia.bytes, ib.bytes, ia.family == AF_INET ? 4 : 16) == 0;
}
