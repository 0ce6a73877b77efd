/*
 * ctl_util.h - what ratelimitctl's two clients share (ratelimitctl.c, the
 * line protocol; ctl_grpc.c, gRPC): the exit statuses, errors on stderr and
 * as --json's object, JSON strings, the clock and the -T deadline, a
 * connection made within it (TLS when asked), the token a listener with
 * auth: required is given, and the listener address and why it was chosen
 * (the config file's, else a default).
 */
#ifndef RL_CTL_UTIL_H
#define RL_CTL_UTIL_H

#include <stddef.h>
#include <stdint.h>

struct config;
struct ssl_st;
struct tls_client;

#define CTL_EXIT_OK 0
#define CTL_EXIT_DENIED 1 /* denied, OVER_LIMIT, not SERVING, an invalid file */
#define CTL_EXIT_ERROR 2

/* One run of a command: how it reports, when it gives up, whom it asks. */
struct ctl_ctx {
	const char *command; /* the command word, --json's "command" */
	int json;	     /* --json: an error is also one object on stdout */
	int64_t timeout_ms;  /* -T */
	int64_t deadline_ms; /* set by ctl_connect: now + timeout_ms */
	const char *address; /* NULL until given or chosen (ctl_choose_address) */
	/* where address came from, when not from the command line: its
	 * connect, timeout and protocol errors say it ("" : nothing to say) */
	char why[1024];
	char address_buf[512];
	/* --tls and its files: the connection is TLS, the listener's
	 * certificate verified against ca_file (NULL: the system's CAs) as
	 * server_name (NULL: the address's host); cert_file and key_file our
	 * certificate for client_certs. Also set when the config's listener
	 * chosen is TLS. */
	int tls;
	const char *ca_file, *cert_file, *key_file, *server_name;
	const char *alpn;	/* offered in the handshake ("h2" for gRPC), or NULL */
	const char *token_file; /* -k; NULL: RATELIMITCTL_TOKEN, else no token */
	struct tls_client *tls_ctx;
	struct ssl_st *ssl; /* the connection's session, when TLS */
};

int64_t ctl_now_ms(void); /* CLOCK_MONOTONIC */

/* A JSON string on stdout: bytes that are not UTF-8 are written as \u00XX
 * (their Latin-1 reading), so anything the daemon takes can be printed. */
void ctl_json_str(const char *s, size_t len);
void ctl_json_cstr(const char *s);

/* An error: "ratelimitctl: message" on stderr, and with --json
 * {"command","result":"error","error":code[,"grpc_status"],"message"} on
 * stdout (grpc_status >= 0 adds it). */
void ctl_error(const struct ctl_ctx *x, const char *code, int grpc_status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* ctl_error(), then the exit status; or -1, for the steps whose caller
 * turns a failure into it. */
#define ctl_fail(x, code, ...) (ctl_error((x), (code), -1, __VA_ARGS__), CTL_EXIT_ERROR)
#define ctl_failed(x, code, ...) (ctl_error((x), (code), -1, __VA_ARGS__), -1)

/* A config file's errors as ratelimitd -t prints them, one a line on
 * stderr; with --json {"result":"invalid","file","errors":[...]}. */
void ctl_config_errors(const struct ctl_ctx *x, const char *path, const char *err);
/* config_load(), its errors printed; NULL when invalid. */
struct config *ctl_load_config(const struct ctl_ctx *x, const char *path);

/* The listener a command asks, in the config file. */
enum ctl_listener {
	CTL_LISTENER_LINE,  /* protocol: line */
	CTL_LISTENER_ADMIN, /* protocol: line, admin: true */
	CTL_LISTENER_GRPC,  /* protocol: grpc (not unix:) */
};

/*
 * Unless x->address is set (the command line named it): the first listener
 * of that kind in the config file at path, else fallback (the file has
 * none, or cannot be read: mode 0640 for a Redis password, or no file),
 * with x->why saying which and why; option names the option that would
 * name another. 0; or -1 when the file is read but invalid (a guess then
 * would hide its errors): the errors printed, as ctl_load_config's.
 */
int ctl_choose_address(struct ctl_ctx *x, const char *path, enum ctl_listener kind,
		       const char *fallback, const char *option);

/* Waits until fd is ready for events or deadline_ms passes, in waits of at
 * most 60 s (poll() takes an int of milliseconds: about 24.8 days). 1
 * ready, 0 the deadline passed, -1 poll failed (errno). */
int ctl_wait(int fd, short events, int64_t deadline_ms);
/* ctl_wait(): 0 ready, or -1 with the error printed ("timeout": "no answer
 * from ADDRESS within -T"). */
int ctl_wait_ready(const struct ctl_ctx *x, int fd, short events);
/* Sends len bytes of buf on fd (non-blocking; through x->ssl when TLS)
 * within the deadline: 0, or -1 with the error printed. */
int ctl_send_all(const struct ctl_ctx *x, int fd, const void *buf, size_t len);
/* Reads what arrives next on fd (through x->ssl when TLS), waiting within
 * the deadline: the bytes read (> 0), or -1 with the error printed (a
 * close among them: "ADDRESS closed the connection"). */
long ctl_recv(const struct ctl_ctx *x, int fd, void *buf, size_t len);
/* Closes fd and its TLS session (close_notify sent if it can be). */
void ctl_close(struct ctl_ctx *x, int fd);

/* The token of x->token_file (its first line), else RATELIMITCTL_TOKEN,
 * into buf: 1, 0 when there is none, -1 with the error printed (a file
 * that cannot be read, an empty token or one with a blank). */
int ctl_token(const struct ctl_ctx *x, char *buf, size_t len);

/*
 * A non-blocking socket connected to x->address (host:port, [v6]:port, a
 * listener on every address reached on loopback; also unix:PATH when
 * unix_ok) within -T, from now: sets x->deadline_ms. With x->tls the TLS
 * handshake is made too (x->ssl). The socket, or -1 with the error printed
 * ("usage", "connect", "timeout", "tls").
 */
int ctl_connect(struct ctl_ctx *x, int unix_ok);

#endif
