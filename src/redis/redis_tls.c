/*-------------------------------------------------------------------------
 *
 * redis_tls.c
 *	  TLS to Redis through OpenSSL, on the non-blocking socket redis_conn.c
 *	  owns, with settings named like libpq's.
 *
 *	disable		 plain TCP (the default);
 *	require		 encrypted; the server's certificate is verified only when
 *				 redis_sslrootcert is set (then as verify-ca), as libpq does;
 *	verify-ca	 the certificate must chain to redis_sslrootcert (empty: the
 *				 system's trust store);
 *	verify-full	 verify-ca, and the certificate must name redis_host (a DNS
 *				 name, or an IP address when redis_host is one).
 *
 * SNI carries redis_host when it is a name.  A client certificate
 * (redis_sslcert, redis_sslkey) is sent when set; the key file is checked as
 * the password file is (a regular file of the server's OS user, mode 0600)
 * and read into memory before OpenSSL parses it, so the file checked is the
 * file used.  A key with a passphrase is refused, never prompted for.
 *
 * A context is built for each new connection, so a changed file takes
 * effect at the next connection, as a changed password file does.  Every
 * OpenSSL call here leaves the thread's error queue empty: the server's own
 * TLS code (libpq, the SSL server side) reads that queue too.
 *
 * IDENTIFICATION
 *	  src/redis/redis_tls.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <errno.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "redis/internal.h"

/* the largest key file we read */
#define LF_MAX_KEY_FILE 65536

static bool
is_set(const char *s)
{
	return s != NULL && s[0] != '\0';
}

/* Is TLS to be used (over TCP)? */
bool
lf_tls_wanted(void)
{
	return lf_redis_sslmode != LF_SSL_DISABLE;
}

/* Is a client certificate configured? */
bool
lf_tls_has_client_cert(void)
{
	return is_set(lf_redis_sslcert);
}

/* The TLS settings, for the key of a cached connection ("" when disabled). */
void
lf_tls_describe(char *buf, size_t len)
{
	if (lf_redis_sslmode == LF_SSL_DISABLE)
		buf[0] = '\0';
	else
		snprintf(buf, len, "%s|%s|%s|%s",
				 lf_sslmode_options[lf_redis_sslmode].name,
				 is_set(lf_redis_sslrootcert) ? lf_redis_sslrootcert : "",
				 is_set(lf_redis_sslcert) ? lf_redis_sslcert : "",
				 is_set(lf_redis_sslkey) ? lf_redis_sslkey : "");
}

/*
 * The reason of the first error in OpenSSL's queue, or fallback; the queue
 * is emptied.
 */
static void
openssl_reason(char *buf, size_t len, const char *fallback)
{
	unsigned long e = ERR_get_error();

	if (e == 0)
		snprintf(buf, len, "%s", fallback);
	else
	{
		const char *reason = ERR_reason_error_string(e);

		if (reason)
			snprintf(buf, len, "%s", reason);
		else
			ERR_error_string_n(e, buf, len);
	}
	ERR_clear_error();
}

/* never ask for a passphrase: a key that needs one is refused */
static int
no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
	return 0;
}

/* Load the client key from redis_sslkey into ctx. */
static bool
load_key(SSL_CTX *ctx, char *err, size_t errlen)
{
	char	   *pem = palloc(LF_MAX_KEY_FILE);
	size_t		len;
	BIO		   *bio;
	EVP_PKEY   *key;
	char		why[LF_ERRLEN];
	bool		ok = false;

	if (!lf_read_secret_file(lf_redis_sslkey, "lease_fence.redis_sslkey", pem,
							 LF_MAX_KEY_FILE, &len, err, errlen))
	{
		pfree(pem);
		return false;
	}
	bio = BIO_new_mem_buf(pem, (int) len);
	key = bio ? PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL) : NULL;
	if (key == NULL)
	{
		openssl_reason(why, sizeof(why), "out of memory");
		snprintf(err, errlen, "could not load lease_fence.redis_sslkey \"%s\": %s (a key with a passphrase is not supported)",
				 lf_redis_sslkey, why);
	}
	else if (SSL_CTX_use_PrivateKey(ctx, key) != 1 || SSL_CTX_check_private_key(ctx) != 1)
	{
		openssl_reason(why, sizeof(why), "unknown error");
		snprintf(err, errlen, "lease_fence.redis_sslkey \"%s\" does not fit lease_fence.redis_sslcert: %s",
				 lf_redis_sslkey, why);
	}
	else
		ok = true;
	EVP_PKEY_free(key);
	BIO_free(bio);
	explicit_bzero(pem, LF_MAX_KEY_FILE);
	pfree(pem);
	ERR_clear_error();
	return ok;
}

/* The context of a new connection, from the settings; NULL with err. */
static SSL_CTX *
make_context(char *err, size_t errlen)
{
	SSL_CTX    *ctx;
	char		why[LF_ERRLEN];
	bool		verify = lf_redis_sslmode >= LF_SSL_VERIFY_CA ||
		(lf_redis_sslmode == LF_SSL_REQUIRE && is_set(lf_redis_sslrootcert));

	ERR_clear_error();
	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL)
	{
		openssl_reason(why, sizeof(why), "out of memory");
		snprintf(err, errlen, "could not create a TLS context: %s", why);
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);

	if (verify)
	{
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		if (is_set(lf_redis_sslrootcert))
		{
			if (SSL_CTX_load_verify_locations(ctx, lf_redis_sslrootcert, NULL) != 1)
			{
				openssl_reason(why, sizeof(why), "unknown error");
				snprintf(err, errlen, "could not load lease_fence.redis_sslrootcert \"%s\": %s",
						 lf_redis_sslrootcert, why);
				goto fail;
			}
		}
		else if (SSL_CTX_set_default_verify_paths(ctx) != 1)
		{
			openssl_reason(why, sizeof(why), "unknown error");
			snprintf(err, errlen, "could not load the system's trusted certificates: %s", why);
			goto fail;
		}
	}
	else
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);

	if (is_set(lf_redis_sslcert) != is_set(lf_redis_sslkey))
	{
		snprintf(err, errlen, "lease_fence.%s is set but lease_fence.%s is not",
				 is_set(lf_redis_sslcert) ? "redis_sslcert" : "redis_sslkey",
				 is_set(lf_redis_sslcert) ? "redis_sslkey" : "redis_sslcert");
		goto fail;
	}
	if (is_set(lf_redis_sslcert))
	{
		if (SSL_CTX_use_certificate_chain_file(ctx, lf_redis_sslcert) != 1)
		{
			openssl_reason(why, sizeof(why), "unknown error");
			snprintf(err, errlen, "could not load lease_fence.redis_sslcert \"%s\": %s",
					 lf_redis_sslcert, why);
			goto fail;
		}
		if (!load_key(ctx, err, errlen))
			goto fail;
	}
	ERR_clear_error();
	return ctx;

fail:
	SSL_CTX_free(ctx);
	ERR_clear_error();
	return NULL;
}

/*
 * A TLS session on the connected socket fd to host, ready for
 * lf_tls_handshake; NULL with a message in err.
 */
void *
lf_tls_start(int fd, const char *host, char *err, size_t errlen)
{
	SSL_CTX    *ctx = make_context(err, errlen);
	SSL		   *ssl;
	char		why[LF_ERRLEN];
	unsigned char addr[16];
	bool		ip = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;

	if (ctx == NULL)
		return NULL;
	ssl = SSL_new(ctx);
	SSL_CTX_free(ctx);			/* the session keeps its own reference */
	if (ssl == NULL || SSL_set_fd(ssl, fd) != 1)
		goto fail;
	/* SNI: for names only (RFC 6066 forbids addresses) */
	if (!ip && SSL_set_tlsext_host_name(ssl, host) != 1)
		goto fail;
	if (lf_redis_sslmode == LF_SSL_VERIFY_FULL)
	{
		X509_VERIFY_PARAM *param = SSL_get0_param(ssl);

		X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		if (ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host) != 1
			: X509_VERIFY_PARAM_set1_host(param, host, 0) != 1)
			goto fail;
	}
	ERR_clear_error();
	return ssl;

fail:
	openssl_reason(why, sizeof(why), "out of memory");
	snprintf(err, errlen, "could not set up TLS: %s", why);
	SSL_free(ssl);
	return NULL;
}

/*
 * Why a TLS call with result rc failed: *want set and 0 when it only has to
 * wait, -1 with a message otherwise.
 */
static int
tls_result(SSL *ssl, int rc, int *want, char *err, size_t errlen)
{
	int			e = SSL_get_error(ssl, rc);
	int			saved_errno = errno;
	char		why[LF_ERRLEN];

	switch (e)
	{
		case SSL_ERROR_WANT_READ:
			*want = LF_WANT_READ;
			ERR_clear_error();
			return 0;
		case SSL_ERROR_WANT_WRITE:
			*want = LF_WANT_WRITE;
			ERR_clear_error();
			return 0;
		case SSL_ERROR_ZERO_RETURN:
			snprintf(err, errlen, "the server closed the connection");
			break;
		case SSL_ERROR_SYSCALL:
			if (ERR_peek_error() != 0)
			{
				openssl_reason(why, sizeof(why), "unknown error");
				snprintf(err, errlen, "TLS error: %s", why);
			}
			else if (rc == 0 || saved_errno == 0)
				snprintf(err, errlen, "the server closed the connection");
			else
				snprintf(err, errlen, "%s", strerror(saved_errno));
			break;
		default:
			{
				long		v = SSL_get_verify_result(ssl);

				/* (without SSL_VERIFY_PEER the result is kept, not acted on) */
				if (v != X509_V_OK && (SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER))
					snprintf(err, errlen, "server certificate verification failed: %s",
							 X509_verify_cert_error_string(v));
				else
				{
					openssl_reason(why, sizeof(why), "unknown error");
					snprintf(err, errlen, "TLS error: %s", why);
				}
			}
			break;
	}
	ERR_clear_error();
	return -1;
}

/* One step of the handshake: 1 done, 0 wait for *want, -1 failed (err). */
int
lf_tls_handshake(void *tls, int *want, char *err, size_t errlen)
{
	SSL		   *ssl = (SSL *) tls;
	int			rc;

	ERR_clear_error();
	errno = 0;
	rc = SSL_connect(ssl);
	if (rc == 1)
		return 1;
	return tls_result(ssl, rc, want, err, errlen);
}

/* As recv(): bytes read, 0 to wait for *want, -1 on error or EOF (err). */
ssize_t
lf_tls_read(void *tls, char *buf, size_t len, int *want, char *err, size_t errlen)
{
	SSL		   *ssl = (SSL *) tls;
	int			rc;

	ERR_clear_error();
	errno = 0;
	rc = SSL_read(ssl, buf, (int) Min(len, (size_t) INT_MAX));
	if (rc > 0)
		return rc;
	return tls_result(ssl, rc, want, err, errlen);
}

/* As send(): bytes written, 0 to wait for *want, -1 on error (err). */
ssize_t
lf_tls_write(void *tls, const char *buf, size_t len, int *want, char *err, size_t errlen)
{
	SSL		   *ssl = (SSL *) tls;
	int			rc;

	ERR_clear_error();
	errno = 0;
	rc = SSL_write(ssl, buf, (int) Min(len, (size_t) INT_MAX));
	if (rc > 0)
		return rc;
	return tls_result(ssl, rc, want, err, errlen);
}

/* Does the session hold decrypted bytes not yet read? */
bool
lf_tls_pending(void *tls)
{
	return SSL_pending((SSL *) tls) > 0;
}

/*
 * The idle socket is readable: is that only TLS housekeeping (a session
 * ticket, which OpenSSL consumes), with no data and no end of stream?
 */
bool
lf_tls_idle_ok(void *tls)
{
	SSL		   *ssl = (SSL *) tls;
	char		byte;
	int			rc;
	bool		ok;

	ERR_clear_error();
	rc = SSL_read(ssl, &byte, 1);
	ok = rc <= 0 && SSL_get_error(ssl, rc) == SSL_ERROR_WANT_READ;
	ERR_clear_error();
	return ok;
}

/* Free a session; a close_notify is sent if the socket takes it at once. */
void
lf_tls_free(void *tls)
{
	SSL		   *ssl = (SSL *) tls;

	ERR_clear_error();
	(void) SSL_shutdown(ssl);
	SSL_free(ssl);
	ERR_clear_error();
}

