/*
 * tls.h - TLS with OpenSSL for nonblocking sockets: a client context built
 * from files (CA, optional client certificate) that a SIGHUP can re-read
 * in place, sessions verified against a host name or address, and the
 * handshake, read and write steps as results a transport can act on.
 * Nothing here touches the event loop.
 */
#ifndef RL_TLS_H
#define RL_TLS_H

#include <stddef.h>

struct ssl_st;

/* Where a client's trust and identity come from (paths may be NULL). */
struct tls_client_files {
	const char *ca_file;   /* PEM bundle of trusted CAs */
	const char *ca_dir;    /* a c_rehash'ed directory of CAs */
	const char *cert_file; /* our certificate chain (mTLS), with key_file */
	const char *key_file;
	const char *server_name; /* verify every server as this name; NULL: as its host */
};

/* A client context shared by every connection to one store, counted. */
struct tls_client;

/*
 * Builds a context: TLS 1.2 at least, the peer's certificate verified
 * against ca_file/ca_dir (the system's store when both are NULL). NULL
 * with err naming the file and OpenSSL's reason.
 */
struct tls_client *tls_client_new(const struct tls_client_files *f, char *err, size_t errlen);
/* Re-reads the files into c: new sessions use them, sessions open keep
 * theirs. -1 with err when they do not load (c is unchanged). */
int tls_client_reload(struct tls_client *c, const struct tls_client_files *f, char *err,
		      size_t errlen);
struct tls_client *tls_client_ref(struct tls_client *c);
void tls_client_unref(struct tls_client *c);

/* A session on connected fd to host (a DNS name or an IP address), sent
 * as SNI and verified unless server_name overrides it. NULL with err. */
struct ssl_st *tls_client_session(struct tls_client *c, int fd, const char *host, char *err,
				  size_t errlen);

/* A listener's certificate, and the CAs its clients' certificates need. */
enum tls_client_certs {
	TLS_CLIENT_CERTS_NONE,
	TLS_CLIENT_CERTS_OPTIONAL,
	TLS_CLIENT_CERTS_REQUIRED
};
struct tls_server_files {
	const char *cert_file, *key_file;
	const char *ca_file, *ca_dir;
	enum tls_client_certs client_certs;
};

/* A listener's context, counted, re-read in place. */
struct tls_server;

/*
 * Builds a listener's context: TLS 1.2 at least, no renegotiation; alpn
 * ("h2", "http/1.1" or NULL) is chosen when the client offers it. NULL
 * with err naming the file and OpenSSL's reason.
 */
struct tls_server *tls_server_new(const struct tls_server_files *f, const char *alpn, char *err,
				  size_t errlen);
/* Re-reads the files: new sessions use them. -1 with err (s unchanged). */
int tls_server_reload(struct tls_server *s, const struct tls_server_files *f, char *err,
		      size_t errlen);
struct tls_server *tls_server_ref(struct tls_server *s);
void tls_server_unref(struct tls_server *s);
/* A server session on accepted fd (-1: none yet; libevent's OpenSSL
 * bufferevent sets it, for evhttp). NULL with err. */
struct ssl_st *tls_server_session(struct tls_server *s, int fd, char *err, size_t errlen);
/* The verified client certificate's common name into buf ("" when none):
 * 1 if there is one. */
int tls_peer_name(struct ssl_st *s, char *buf, size_t len);
/* 1 if OpenSSL holds input not yet read through it, decrypted or read
 * ahead from the socket: no readable event will tell of it. */
int tls_pending(struct ssl_st *s);

enum tls_io {
	TLS_IO_DONE,	   /* the step is complete (n bytes moved) */
	TLS_IO_WANT_READ,  /* retry once fd is readable */
	TLS_IO_WANT_WRITE, /* retry once fd is writable */
	TLS_IO_CLOSED,	   /* the peer closed (close_notify or EOF) */
	TLS_IO_ERROR,	   /* failed: err says why */
};

/* One step of a handshake (client or server). On TLS_IO_ERROR err names the cause:
 * a certificate's verify error ("certificate has expired", "hostname
 * mismatch", ...) or OpenSSL's reason. */
enum tls_io tls_handshake(struct ssl_st *s, char *err, size_t errlen);
/* Reads up to len bytes into buf (*n set on TLS_IO_DONE). */
enum tls_io tls_read(struct ssl_st *s, void *buf, size_t len, size_t *n, char *err, size_t errlen);
/* Writes up to len bytes of buf (partial writes allowed; *n set on TLS_IO_DONE). */
enum tls_io tls_write(struct ssl_st *s, const void *buf, size_t len, size_t *n, char *err,
		      size_t errlen);
/* Sends close_notify if it can without waiting, and frees s. */
void tls_session_free(struct ssl_st *s);
/* Sends close_notify if it can without waiting; s stays. */
void tls_session_close(struct ssl_st *s);
/* Frees s, sending nothing. */
void tls_session_drop(struct ssl_st *s);

#endif
