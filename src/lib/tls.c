/*
 * tls.c - OpenSSL contexts and the nonblocking handshake, read and write
 * steps (tls.h). Every step clears OpenSSL's error queue first: a stale
 * entry would make SSL_get_error misreport the next step.
 */
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct tls_client {
	int refs;
	SSL_CTX *ctx;
	char *server_name;
};

/* OpenSSL's most recent reason, or fallback; empties the queue. */
static void openssl_reason(char *err, size_t errlen, const char *fallback)
{
	unsigned long e, last = 0;
	while ((e = ERR_get_error()) != 0)
		last = e;
	const char *r = last ? ERR_reason_error_string(last) : NULL;
	snprintf(err, errlen, "%s", r ? r : fallback);
}

/* A readable file (or directory), or err saying which key's path is not. */
static int readable(const char *what, const char *path, char *err, size_t errlen)
{
	if (access(path, R_OK) == 0)
		return 0;
	snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
	return -1;
}

static void ctx_defaults(SSL_CTX *ctx);
static int load_pair(SSL_CTX *ctx, const char *cert, const char *key, char *err, size_t errlen);

static SSL_CTX *client_ctx(const struct tls_client_files *f, char *err, size_t errlen)
{
	char why[160];
	if ((f->ca_file && readable("ca_file", f->ca_file, err, errlen) < 0) ||
	    (f->ca_dir && readable("ca_dir", f->ca_dir, err, errlen) < 0) ||
	    (f->cert_file && readable("cert_file", f->cert_file, err, errlen) < 0) ||
	    (f->key_file && readable("key_file", f->key_file, err, errlen) < 0))
		return NULL;
	ERR_clear_error();
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx) {
		openssl_reason(why, sizeof(why), "out of memory");
		snprintf(err, errlen, "cannot make a TLS context: %s", why);
		return NULL;
	}
	ctx_defaults(ctx);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	int ok = f->ca_file || f->ca_dir ? SSL_CTX_load_verify_locations(ctx, f->ca_file, f->ca_dir)
					 : SSL_CTX_set_default_verify_paths(ctx);
	if (!ok) {
		openssl_reason(why, sizeof(why), "unreadable");
		snprintf(err, errlen, "%s %s: %s", f->ca_file ? "ca_file" : "ca_dir",
			 f->ca_file  ? f->ca_file
			 : f->ca_dir ? f->ca_dir
				     : "(system)",
			 why);
		goto fail;
	}
	if (f->cert_file &&
	    load_pair(ctx, f->cert_file, f->key_file ? f->key_file : f->cert_file, err, errlen) < 0)
		goto fail;
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* What both sides' contexts share: TLS 1.2 at least, no renegotiation, a
 * peer gone without close_notify read as closed (as a plain socket's
 * EOF), a write buffer that may move and be taken in parts. */
static void ctx_defaults(SSL_CTX *ctx)
{
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* one read() takes what the socket holds, not a record header and then
	 * its body: half the system calls for small requests (tls_pending
	 * tells of what was read ahead) */
	SSL_CTX_set_read_ahead(ctx, 1);
}

/* cert_file and key_file into ctx; -1 with err. */
static int load_pair(SSL_CTX *ctx, const char *cert, const char *key, char *err, size_t errlen)
{
	char why[160];
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		openssl_reason(why, sizeof(why), "unreadable");
		snprintf(err, errlen, "cert_file %s: %s", cert, why);
		return -1;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		openssl_reason(why, sizeof(why), "unreadable");
		snprintf(err, errlen, "key_file %s: %s", key, why);
		return -1;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		openssl_reason(why, sizeof(why), "does not match");
		snprintf(err, errlen, "key_file %s does not match cert_file %s: %s", key, cert,
			 why);
		return -1;
	}
	return 0;
}

struct tls_client *tls_client_new(const struct tls_client_files *f, char *err, size_t errlen)
{
	struct tls_client *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->refs = 1;
	if (tls_client_reload(c, f, err, errlen) < 0) {
		free(c);
		return NULL;
	}
	return c;
}

int tls_client_reload(struct tls_client *c, const struct tls_client_files *f, char *err,
		      size_t errlen)
{
	SSL_CTX *ctx = client_ctx(f, err, errlen);
	if (!ctx)
		return -1;
	char *name = NULL;
	if (f->server_name && !(name = strdup(f->server_name))) {
		SSL_CTX_free(ctx);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	/* sessions hold their own reference to the context they were made with */
	SSL_CTX_free(c->ctx);
	free(c->server_name);
	c->ctx = ctx;
	c->server_name = name;
	return 0;
}

struct tls_client *tls_client_ref(struct tls_client *c)
{
	if (c)
		c->refs++;
	return c;
}

void tls_client_unref(struct tls_client *c)
{
	if (!c || --c->refs > 0)
		return;
	SSL_CTX_free(c->ctx);
	free(c->server_name);
	free(c);
}

static int is_ip(const char *host)
{
	unsigned char buf[16];
	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

SSL *tls_client_session(struct tls_client *c, int fd, const char *host, char *err, size_t errlen)
{
	const char *name = c->server_name ? c->server_name : host;
	ERR_clear_error();
	SSL *s = SSL_new(c->ctx);
	if (!s || SSL_set_fd(s, fd) != 1)
		goto fail;
	if (name && is_ip(name)) {
		/* an address is checked against the certificate's IP names; no SNI */
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), name) != 1)
			goto fail;
	} else if (name) {
		if (SSL_set_tlsext_host_name(s, name) != 1 || SSL_set1_host(s, name) != 1)
			goto fail;
	}
	SSL_set_connect_state(s);
	return s;
fail:
	openssl_reason(err, errlen, "cannot start a TLS session");
	SSL_free(s);
	return NULL;
}

/* What SSL_get_error says of a step that returned r. */
static enum tls_io step_result(SSL *s, int r, char *err, size_t errlen)
{
	int e = SSL_get_error(s, r);
	switch (e) {
	case SSL_ERROR_WANT_READ:
		return TLS_IO_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return TLS_IO_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return TLS_IO_CLOSED;
	case SSL_ERROR_SYSCALL:
		if (ERR_peek_error() == 0) {
			if (errno == 0)
				return TLS_IO_CLOSED; /* EOF without close_notify */
			snprintf(err, errlen, "%s", strerror(errno));
			return TLS_IO_ERROR;
		}
		break;
	default:
		break;
	}
	long v = SSL_get_verify_result(s);
	if (v != X509_V_OK) {
		ERR_clear_error();
		snprintf(err, errlen, "certificate verify failed: %s",
			 X509_verify_cert_error_string(v));
		return TLS_IO_ERROR;
	}
	openssl_reason(err, errlen, "TLS error");
	return TLS_IO_ERROR;
}

enum tls_io tls_handshake(SSL *s, char *err, size_t errlen)
{
	ERR_clear_error();
	errno = 0;
	int r = SSL_do_handshake(s);
	if (r == 1)
		return TLS_IO_DONE;
	enum tls_io res = step_result(s, r, err, errlen);
	if (res == TLS_IO_CLOSED) {
		snprintf(err, errlen, "closed during the TLS handshake");
		return TLS_IO_ERROR;
	}
	return res;
}

enum tls_io tls_read(SSL *s, void *buf, size_t len, size_t *n, char *err, size_t errlen)
{
	ERR_clear_error();
	errno = 0;
	int r = SSL_read_ex(s, buf, len, n);
	if (r == 1)
		return TLS_IO_DONE;
	return step_result(s, r, err, errlen);
}

enum tls_io tls_write(SSL *s, const void *buf, size_t len, size_t *n, char *err, size_t errlen)
{
	ERR_clear_error();
	errno = 0;
	int r = SSL_write_ex(s, buf, len, n);
	if (r == 1)
		return TLS_IO_DONE;
	return step_result(s, r, err, errlen);
}

void tls_session_close(SSL *s)
{
	ERR_clear_error();
	if (SSL_is_init_finished(s))
		(void)SSL_shutdown(s);
	ERR_clear_error();
}

void tls_session_drop(SSL *s)
{
	SSL_free(s);
}

void tls_session_free(SSL *s)
{
	if (!s)
		return;
	ERR_clear_error();
	if (SSL_is_init_finished(s))
		(void)SSL_shutdown(s); /* one try: a nonblocking socket never waits */
	ERR_clear_error();
	SSL_free(s);
}

/* ---- listeners ---- */

struct tls_server {
	int refs;
	SSL_CTX *ctx;
	const char *alpn; /* a static string */
};

/* ALPN: ours when the client offers it; else no protocol is agreed (the
 * client decides whether it can go on without). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
		       const unsigned char *in, unsigned int inlen, void *arg)
{
	(void)ssl;
	const char *want = arg;
	size_t wlen = strlen(want);
	for (unsigned int i = 0; i < inlen;) {
		unsigned int n = in[i];
		if (i + 1 + n > inlen)
			break;
		if (n == wlen && memcmp(in + i + 1, want, n) == 0) {
			*out = in + i + 1;
			*outlen = (unsigned char)n;
			return SSL_TLSEXT_ERR_OK;
		}
		i += 1 + n;
	}
	return SSL_TLSEXT_ERR_NOACK;
}

static SSL_CTX *server_ctx(const struct tls_server_files *f, const char *alpn, char *err,
			   size_t errlen)
{
	char why[160];
	if ((f->cert_file && readable("cert_file", f->cert_file, err, errlen) < 0) ||
	    (f->key_file && readable("key_file", f->key_file, err, errlen) < 0) ||
	    (f->ca_file && readable("ca_file", f->ca_file, err, errlen) < 0) ||
	    (f->ca_dir && readable("ca_dir", f->ca_dir, err, errlen) < 0))
		return NULL;
	ERR_clear_error();
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx) {
		openssl_reason(why, sizeof(why), "out of memory");
		snprintf(err, errlen, "cannot make a TLS context: %s", why);
		return NULL;
	}
	ctx_defaults(ctx);
	/* no session cache shared across daemons: tickets are this process's */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
	if (load_pair(ctx, f->cert_file, f->key_file, err, errlen) < 0)
		goto fail;
	if (f->client_certs != TLS_CLIENT_CERTS_NONE) {
		if (SSL_CTX_load_verify_locations(ctx, f->ca_file, f->ca_dir) != 1) {
			openssl_reason(why, sizeof(why), "unreadable");
			snprintf(err, errlen, "%s %s: %s", f->ca_file ? "ca_file" : "ca_dir",
				 f->ca_file ? f->ca_file : f->ca_dir, why);
			goto fail;
		}
		if (f->ca_file) {
			/* the CAs a client is told it may use */
			STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(f->ca_file);
			if (names)
				SSL_CTX_set_client_CA_list(ctx, names);
		}
		SSL_CTX_set_verify(ctx,
				   SSL_VERIFY_PEER | (f->client_certs == TLS_CLIENT_CERTS_REQUIRED
							      ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT
							      : 0),
				   NULL);
		static const unsigned char sid[] = "ratelimitd";
		SSL_CTX_set_session_id_context(ctx, sid, sizeof(sid) - 1);
	}
	if (alpn)
		SSL_CTX_set_alpn_select_cb(ctx, alpn_select, (void *)alpn);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

struct tls_server *tls_server_new(const struct tls_server_files *f, const char *alpn, char *err,
				  size_t errlen)
{
	struct tls_server *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->refs = 1;
	s->alpn = alpn;
	if (tls_server_reload(s, f, err, errlen) < 0) {
		free(s);
		return NULL;
	}
	return s;
}

int tls_server_reload(struct tls_server *s, const struct tls_server_files *f, char *err,
		      size_t errlen)
{
	SSL_CTX *ctx = server_ctx(f, s->alpn, err, errlen);
	if (!ctx)
		return -1;
	SSL_CTX_free(s->ctx); /* sessions open hold their own reference */
	s->ctx = ctx;
	return 0;
}

struct tls_server *tls_server_ref(struct tls_server *s)
{
	if (s)
		s->refs++;
	return s;
}

void tls_server_unref(struct tls_server *s)
{
	if (!s || --s->refs > 0)
		return;
	SSL_CTX_free(s->ctx);
	free(s);
}

SSL *tls_server_session(struct tls_server *s, int fd, char *err, size_t errlen)
{
	ERR_clear_error();
	SSL *ssl = SSL_new(s->ctx);
	if (!ssl || (fd >= 0 && SSL_set_fd(ssl, fd) != 1)) {
		openssl_reason(err, errlen, "cannot start a TLS session");
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_accept_state(ssl);
	return ssl;
}

int tls_peer_name(SSL *s, char *buf, size_t len)
{
	buf[0] = '\0';
	X509 *cert = SSL_get0_peer_certificate(s);
	if (!cert || SSL_get_verify_result(s) != X509_V_OK)
		return 0;
	int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf,
					  (int)len);
	if (n < 0)
		buf[0] = '\0';
	return 1;
}

int tls_pending(SSL *s)
{
	return SSL_has_pending(s);
}
