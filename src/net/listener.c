/* listener.c - listening sockets (TCP and unix) with a pause on EMFILE, for clients and metrics. */
#include "listener.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

#define LISTEN_BACKLOG 1024

struct listener {
	struct evconnlistener *lev; /* NULL once closed */
	struct event *resume;	    /* enables lev again after a pause */
	listener_cb cb;
	void *arg;
	char *name;
	char *unix_path; /* removed on close */
	int given;	 /* lev belongs to someone else (listener_give) */
	struct listener *next_given;
	unsigned long long paused; /* accept pauses for lack of descriptors */
};

/*
 * libevent calls a listener's error callback with the accept callback's
 * argument, which an evhttp_bind_listener owner replaces with its own. The
 * error callback finds a given-away listener here instead.
 */
static struct listener *given;

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
		      int salen, void *arg)
{
	(void)lev;
	(void)salen;
	struct listener *l = arg;
	if (l->cb)
		l->cb(fd, sa, l->arg);
	else
		evutil_closesocket(fd);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	struct listener *l = arg;
	if (l->lev)
		evconnlistener_enable(l->lev);
}

/*
 * accept() failed with err. Out of descriptors or memory: accepting is
 * disabled for LISTENER_ACCEPT_PAUSE_MS, with a warning at the 1st,
 * 1001st... pause. Any other error is logged.
 */
static void accept_failed(struct listener *l, int err)
{
	if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM) {
		log_warn("accept on %s: %s", l->name, strerror(err));
		return;
	}
	/* once, then every 1000th time: the pause repeats 10 times a second */
	if (l->paused++ % 1000 == 0)
		log_warn("accept on %s: %s; pausing accepts for %d ms (%llu %s so far)", l->name,
			 strerror(err), LISTENER_ACCEPT_PAUSE_MS, l->paused,
			 log_plural(l->paused, "time", "times"));
	evconnlistener_disable(l->lev);
	struct timeval tv = {0, LISTENER_ACCEPT_PAUSE_MS * 1000};
	evtimer_add(l->resume, &tv);
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
	(void)lev;
	accept_failed(arg, EVUTIL_SOCKET_ERROR());
}

static void given_error_cb(struct evconnlistener *lev, void *arg)
{
	(void)arg; /* the new owner's */
	int err = EVUTIL_SOCKET_ERROR();
	for (struct listener *l = given; l; l = l->next_given)
		if (l->lev == lev) {
			accept_failed(l, err);
			return;
		}
}

static struct listener *listener_alloc(struct event_base *base, const char *name, listener_cb cb,
				       void *arg, char *err, size_t errlen)
{
	struct listener *l = calloc(1, sizeof(*l));
	if (!l || !(l->name = strdup(name)) || !(l->resume = evtimer_new(base, resume_cb, l))) {
		snprintf(err, errlen, "listen %s: out of memory", name);
		listener_free(l);
		return NULL;
	}
	l->cb = cb;
	l->arg = arg;
	return l;
}

static int bind_listen(struct event_base *base, struct listener *l, const struct sockaddr *sa,
		       int salen, char *err, size_t errlen)
{
	unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE;
	l->lev = evconnlistener_new_bind(base, accept_cb, l, flags, LISTEN_BACKLOG, sa, salen);
	if (!l->lev) {
		snprintf(err, errlen, "listen %s: %s", l->name, strerror(errno));
		return -1;
	}
	evconnlistener_set_error_cb(l->lev, accept_error_cb);
	return 0;
}

struct listener *listener_new_sockaddr(struct event_base *base, const struct sockaddr *sa,
				       int salen, const char *name, listener_cb cb, void *arg,
				       char *err, size_t errlen)
{
	struct listener *l = listener_alloc(base, name, cb, arg, err, errlen);
	if (l && bind_listen(base, l, sa, salen, err, errlen) < 0) {
		int e = errno; /* the bind's: callers say why (metrics.c) */
		listener_free(l);
		errno = e;
		return NULL;
	}
	return l;
}

static int listen_unix(struct event_base *base, struct listener *l, const char *path, int mode,
		       char *err, size_t errlen)
{
	struct sockaddr_un sun;
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun.sun_path)) {
		snprintf(err, errlen, "listen %s: path too long", l->name);
		return -1;
	}
	strcpy(sun.sun_path, path);
	/* A socket file left by a previous run would make bind fail. */
	struct stat st;
	if (stat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	if (bind_listen(base, l, (struct sockaddr *)&sun, sizeof(sun), err, errlen) < 0)
		return -1;
	if (!(l->unix_path = strdup(path))) {
		snprintf(err, errlen, "listen %s: out of memory", l->name);
		return -1;
	}
	if (chmod(path, (mode_t)mode) < 0)
		log_warn("chmod %s: %s", path, strerror(errno));
	return 0;
}

struct listener *listener_new(struct event_base *base, const char *address, int unix_mode,
			      listener_cb cb, void *arg, char *err, size_t errlen)
{
	struct listener *l = listener_alloc(base, address, cb, arg, err, errlen);
	if (!l)
		return NULL;
	int rc;
	if (strncmp(address, "unix:", 5) == 0) {
		rc = listen_unix(base, l, address + 5, unix_mode, err, errlen);
	} else {
		struct sockaddr_storage ss;
		int sslen = sizeof(ss);
		memset(&ss, 0, sizeof(ss));
		rc = evutil_parse_sockaddr_port(address, (struct sockaddr *)&ss, &sslen);
		if (rc < 0)
			snprintf(err, errlen, "listen %s: not an address", address);
		else
			rc = bind_listen(base, l, (struct sockaddr *)&ss, sslen, err, errlen);
	}
	if (rc < 0) {
		listener_free(l);
		return NULL;
	}
	return l;
}

struct listener *listener_new_fd(struct event_base *base, int fd, const char *name, listener_cb cb,
				 void *arg, char *err, size_t errlen)
{
	struct listener *l = listener_alloc(base, name, cb, arg, err, errlen);
	if (!l)
		return NULL;
	/* backlog 0: it listens already, with the backlog systemd gave it */
	unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC;
	l->lev = evconnlistener_new(base, accept_cb, l, flags, 0, fd);
	if (!l->lev) {
		snprintf(err, errlen, "listen %s (passed by systemd): %s", name, strerror(errno));
		listener_free(l);
		return NULL;
	}
	evconnlistener_set_error_cb(l->lev, accept_error_cb);
	return l;
}

struct evconnlistener *listener_give(struct listener *l)
{
	if (!l->given) {
		l->given = 1;
		l->next_given = given;
		given = l;
		evconnlistener_set_error_cb(l->lev, given_error_cb);
	}
	return l->lev;
}

void listener_close(struct listener *l)
{
	if (!l->lev)
		return;
	if (l->given)
		evconnlistener_disable(l->lev);
	else
		evconnlistener_free(l->lev);
	l->lev = NULL;
	if (l->unix_path)
		unlink(l->unix_path);
}

void listener_free(struct listener *l)
{
	if (!l)
		return;
	listener_close(l);
	if (l->given) {
		struct listener **p = &given;
		while (*p != l)
			p = &(*p)->next_given;
		*p = l->next_given;
	}
	if (l->resume)
		event_free(l->resume);
	free(l->unix_path);
	free(l->name);
	free(l);
}
