/* activation.c - taking and matching the sockets systemd passes (see activation.h). */
#include "activation.h"

#include <arpa/inet.h>
#include <event2/util.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "addr.h"

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

struct passed {
	int fd; /* -1 once claimed */
	char *name;
	struct sockaddr_storage addr;
	socklen_t addrlen;
};

struct activation {
	size_t n;
	struct passed s[];
};

size_t activation_count(const struct activation *a)
{
	return a ? a->n : 0;
}

/* Whether a socket bound to sa is the one address names. */
static int same_address(const char *address, const struct sockaddr_storage *sa, socklen_t salen)
{
	if (strncmp(address, "unix:", 5) == 0) {
		const struct sockaddr_un *sun = (const struct sockaddr_un *)sa;
		size_t off = offsetof(struct sockaddr_un, sun_path);
		if (sa->ss_family != AF_UNIX || salen <= off)
			return 0;
		size_t len = strnlen(sun->sun_path, salen - off);
		return strlen(address + 5) == len && memcmp(address + 5, sun->sun_path, len) == 0;
	}
	struct sockaddr_storage want;
	int wantlen = sizeof(want);
	memset(&want, 0, sizeof(want));
	if (evutil_parse_sockaddr_port(address, (struct sockaddr *)&want, &wantlen) < 0 ||
	    want.ss_family != sa->ss_family)
		return 0;
	if (sa->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)&want, *y = (const void *)sa;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (sa->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)&want, *y = (const void *)sa;
		return x->sin6_port == y->sin6_port &&
		       memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
	}
	return 0;
}

int activation_claim(struct activation *a, const char *address, const char *name)
{
	if (!a)
		return -1;
	for (int by_name = 1; by_name >= 0; by_name--) {
		for (size_t i = 0; i < a->n; i++) {
			struct passed *p = &a->s[i];
			if (p->fd < 0)
				continue;
			int match = by_name ? name && name[0] && strcmp(p->name, name) == 0
					    : same_address(address, &p->addr, p->addrlen);
			if (match) {
				int fd = p->fd;
				p->fd = -1;
				return fd;
			}
		}
	}
	return -1;
}

int activation_check_claimed(const struct activation *a, char *err, size_t errlen)
{
	for (size_t i = 0; a && i < a->n; i++) {
		const struct passed *p = &a->s[i];
		if (p->fd < 0)
			continue;
		char where[128];
		addr_sockaddr_text(&p->addr, p->addrlen, where, sizeof(where));
		snprintf(err, errlen,
			 "socket activation: the socket named %s (%s) matches no listen entry (nor "
			 "metrics.listen): add one with that address, or with name: %s",
			 p->name, where, p->name);
		return -1;
	}
	return 0;
}

void activation_free(struct activation *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->n; i++) {
		if (a->s[i].fd >= 0)
			close(a->s[i].fd);
		free(a->s[i].name);
	}
	free(a);
}

#ifdef HAVE_SYSTEMD
struct activation *activation_take(char *err, size_t errlen)
{
	char **names = NULL;
	err[0] = '\0';
	int n = sd_listen_fds_with_names(1, &names);
	if (n <= 0) {
		if (n < 0)
			snprintf(err, errlen, "socket activation: %s", strerror(-n));
		return NULL;
	}
	struct activation *a = calloc(1, sizeof(*a) + (size_t)n * sizeof(a->s[0]));
	if (!a) {
		snprintf(err, errlen, "socket activation: out of memory");
		for (int i = 0; i < n; i++) {
			close(SD_LISTEN_FDS_START + i);
			free(names ? names[i] : NULL);
		}
		free(names);
		return NULL;
	}
	a->n = (size_t)n;
	for (int i = 0; i < n; i++) {
		struct passed *p = &a->s[i];
		p->fd = SD_LISTEN_FDS_START + i;
		p->name = names && names[i] ? names[i] : strdup("unknown");
		p->addrlen = sizeof(p->addr);
		if (getsockname(p->fd, (struct sockaddr *)&p->addr, &p->addrlen) < 0)
			p->addrlen = 0;
	}
	free(names); /* the strings are the entries' now */
	for (size_t i = 0; i < a->n; i++) {
		struct passed *p = &a->s[i];
		if (!p->name || sd_is_socket(p->fd, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
			snprintf(err, errlen,
				 "socket activation: passed socket %zu (%s) is not a listening "
				 "stream socket (ListenStream=)",
				 i + 1, p->name ? p->name : "?");
			activation_free(a);
			return NULL;
		}
		evutil_make_socket_closeonexec(p->fd);
		evutil_make_socket_nonblocking(p->fd);
	}
	return a;
}
#else
struct activation *activation_take(char *err, size_t errlen)
{
	(void)errlen;
	err[0] = '\0';
	return NULL;
}
#endif
