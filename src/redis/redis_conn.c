/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *	  The connection cache and the set-up of a connection: one cached
 *	  connection per server (LfEndpoint: the one the settings name, a master
 *	  Sentinel named, a Cluster node, a sentinel; redis_topology.c picks
 *	  it), opened on a socket of our own (plain, or TLS through
 *	  redis_tls.c), and one command run on it (lf_conn_command).
 *
 * Invariants: a new connection is ready before a command is handed to it
 * (connect, TLS, AUTH, SELECT, PING, and ROLE on a master Sentinel named),
 * so every failure before a command is sent is LF_NOT_SENT; a connection
 * that saw an error or a timeout is closed and never reused; each socket
 * counts as one of PostgreSQL's open files while it is open.
 *
 * IDENTIFICATION
 *	  src/redis/redis_conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "base/stats.h"
#include "miscadmin.h"
#include "redis/internal.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "utils/hsearch.h"

/* longest password we read from redis_password_file */
#define LF_MAX_PASSWORD 512

/*
 * The cached connections, keyed by everything that decides where and how
 * we connect (describe_target).  File-scope: the cache is the backend's,
 * for its life; entries are never removed, and dynahash never moves them.
 */
static HTAB *connections = NULL;

/* The last serial number given to a new connection.  File-scope: unique per backend. */
static uint64 last_serial = 0;

/*
 * The connection the last command ran on (LF_SAME_CONN), by its serial
 * number: one closed since, or opened anew, is not it.  File-scope: the
 * next command, WAIT, comes from another call of the layer above.
 */
static struct
{
	LfConn	   *conn;
	uint64		serial;
} last_used;

/*
 * The entry lookup_conn found last, for the same endpoint and settings
 * version (lf_redis_settings_version): it is the one it would find again,
 * without building the key.  File-scope: a cache of the cache's lookup.
 */
static struct
{
	LfConn	   *conn;
	uint64		version;
	LfEndpoint	ep;				/* the endpoint conn is for; its host: */
	char		host[256];
} memo;

/* ---------------------------------------------------------------------
 * The endpoint: where, and the key of its cached connection
 * ---------------------------------------------------------------------
 */

/* Does ep mean the unix socket lease_fence.redis_socket names? */
static bool
uses_unix_socket(const LfEndpoint *ep)
{
	return ep->kind == LF_EP_SETTINGS && lf_redis_socket && lf_redis_socket[0] != '\0';
}

/* The host and port of ep (a TCP endpoint). */
static const char *
endpoint_host(const LfEndpoint *ep)
{
	if (ep->kind != LF_EP_SETTINGS)
		return ep->host;
	return lf_redis_host && lf_redis_host[0] ? lf_redis_host : "127.0.0.1";
}

static int
endpoint_port(const LfEndpoint *ep)
{
	return ep->kind == LF_EP_SETTINGS ? lf_redis_port : ep->port;
}

/*
 * The key of ep's cached connection: every setting that decides where and
 * how it connects, TLS settings included.  A sentinel is a server of its
 * own kind, with its own credentials.
 */
static void
describe_target(const LfEndpoint *ep, char *buf, size_t len)
{
	char		tls[MAXPGPATH * 3 + 32];
	bool		unix_socket = uses_unix_socket(ep);
	bool		sentinel = ep->kind == LF_EP_SENTINEL;
	const char *user = sentinel ? lf_sentinel_user : lf_redis_user;
	const char *pwfile = sentinel ? lf_sentinel_password_file : lf_redis_password_file;

	/* TLS is not used over a unix socket (as libpq) */
	tls[0] = '\0';
	if (!unix_socket)
		lf_tls_describe(tls, sizeof(tls));
	snprintf(buf, len, "%c|%s|%s|%d|%d|%s|%s|%s",
			 sentinel ? 'S' : ep->check_role ? 'M' : 'R',
			 unix_socket ? lf_redis_socket : "",
			 unix_socket ? "" : endpoint_host(ep),
			 unix_socket ? 0 : endpoint_port(ep),
			 sentinel ? 0 : lf_redis_db,
			 user ? user : "", pwfile ? pwfile : "", tls);
}

/* ---------------------------------------------------------------------
 * The cache: closing, reading what is owed, listing
 * ---------------------------------------------------------------------
 */

/*
 * Close every cached connection (the subscription's included); returns how
 * many of the cached ones were open.
 */
int
lf_redis_disconnect_all(void)
{
	HASH_SEQ_STATUS seq;
	LfConn	   *c;
	int			n = 0;

	lf_subscriber_close();
	if (connections == NULL)
		return 0;
	hash_seq_init(&seq, connections);
	while ((c = hash_seq_search(&seq)) != NULL)
	{
		if (c->fd != PGINVALID_SOCKET)
			n++;
		lf_conn_close(c);
	}
	return n;
}

/*
 * Read the replies of the deferred requests of every connection but keep,
 * by deadline; with interruptible, a cancel or a termination ends the
 * reading (true is returned then, the rest unread).
 */
static bool
read_deferred_except(LfConn *keep, int64 deadline, bool interruptible)
{
	HASH_SEQ_STATUS seq;
	LfConn	   *c;
	bool		interrupted = false;

	if (connections == NULL || lf_deferred_total() <= (keep ? keep->ndeferred : 0))
		return false;
	hash_seq_init(&seq, connections);
	while ((c = hash_seq_search(&seq)) != NULL)
	{
		if (c != keep && c->ndeferred > 0)
			(void) lf_drain_deferred_by(c, deadline, interruptible, &interrupted);
		if (interrupted)
		{
			hash_seq_term(&seq);
			break;
		}
	}
	return interrupted;
}

/*
 * Backend exit (before shared memory goes): read the replies of the
 * requests sent without waiting, by deadline, so that they are counted.
 * Those not read by then count as unconfirmed; Redis runs each request it
 * has read, whatever becomes of its reply.
 */
void
lf_redis_read_deferred(int64 deadline)
{
	(void) read_deferred_except(NULL, deadline, false);
}

/* Put the description of c into *out when it is open; false if not. */
static bool
describe_conn(const LfConn *c, int64 now, LfConnInfo *out)
{
	if (c->fd == PGINVALID_SOCKET)
		return false;
	strlcpy(out->endpoint, c->endpoint, sizeof(out->endpoint));
	out->kind = c->kind;
	out->tls = c->tls != NULL;
	out->age_ms = now - c->opened_at;
	out->requests = c->requests;
	return true;
}

/*
 * This backend's open Redis connections into a palloc'd array (*out, in the
 * current memory context); returns how many.  A waiting acquire's
 * subscription is not among them: it is closed when its wait ends, before
 * any SQL could ask.
 */
int
lf_redis_connections(LfConnInfo **out)
{
	HASH_SEQ_STATUS seq;
	LfConn	   *c;
	int64		now = lf_now_ms();
	int			n = 0;
	int			max = connections ? (int) hash_get_num_entries(connections) : 0;

	lf_close_abandoned();
	*out = palloc0(sizeof(LfConnInfo) * Max(max, 1));
	if (connections == NULL)
		return n;
	hash_seq_init(&seq, connections);
	while ((c = hash_seq_search(&seq)) != NULL)
		if (n < max && describe_conn(c, now, &(*out)[n]))
			n++;
	return n;
}

/*
 * Close every Redis connection of this backend and return how many were
 * open.  The answers of releases sent after COMMIT are read first, within
 * deadline, so that a deliberate disconnect does not leave them unconfirmed.
 */
int
lf_redis_disconnect(int64 deadline)
{
	int			n;

	lf_close_abandoned();
	if (read_deferred_except(NULL, deadline, true))
	{
		/* a cancel ends the reading: what is unread counts as unconfirmed */
		(void) lf_redis_disconnect_all();
		CHECK_FOR_INTERRUPTS();
	}
	n = lf_redis_disconnect_all();
	return n;
}

/* on_proc_exit: free what OpenSSL and hiredis malloc'd */
static void
disconnect_at_exit(int code, Datum arg)
{
	lf_deferred_at_exit();
	(void) lf_redis_disconnect_all();
}

/*
 * Before a request goes on c: read the replies every connection owes (the
 * releases after COMMIT), then make sure c holds nothing else; a connection
 * that does is closed as desynchronized (counted, WARNING), its bytes never
 * read as an answer, and the request goes on a new one.  Returns true when
 * an interrupt ended the reading (interruptible only): nothing is sent.
 */
static bool
settle_before_request(LfConn *c, bool interruptible)
{
	bool		interrupted = read_deferred_except(c, lf_now_ms() + lf_command_timeout_ms,
												   interruptible);

	/* set by the drain's last read, if it took all the socket held */
	c->read_all = false;
	if (!interrupted && c->ndeferred > 0)
		(void) lf_drain_deferred_by(c, lf_now_ms() + lf_command_timeout_ms, interruptible,
								 &interrupted);
	if (interrupted)
		return true;
	if (c->fd != PGINVALID_SOCKET && lf_holds_stray_bytes(c, c->read_all))
	{
		lf_count(LF_C_CONNECTION_DESYNCHRONIZED);
		lf_conn_close(c);
		HOLD_INTERRUPTS();		/* the request's own wait serves a cancel */
		ereport(WARNING,
				errmsg("closed a Redis connection that sent a reply no request asked for"),
				errdetail("Bytes were waiting on it before a request was sent; they were not read as an answer, and the request goes on a new connection."),
				errhint("A Redis server, or something between it and this server, sent them; on a network you do not trust, use TLS (lease_fence.redis_sslmode)."));
		RESUME_INTERRUPTS();
	}
	return false;
}

/* ---------------------------------------------------------------------
 * Setting up a new connection: socket, TLS, AUTH, SELECT, PING, ROLE
 * ---------------------------------------------------------------------
 */

/*
 * Send a command of the connection's set-up (AUTH, SELECT, PING) and expect
 * the status reply expected.  Nothing of a lease has been sent yet, so any
 * failure leaves the lease "unavailable".
 */
static bool
setup_command(LfConn *c, int argc, const char **argv, const char *expected,
			  int64 deadline, bool interruptible, bool *interrupted, char *err)
{
	redisReply *reply;
	LfSendResult r;
	size_t		lens[3];
	char		why[LF_ERRLEN];
	int			i;

	for (i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	r = lf_exchange_argv(c, argc, argv, lens, deadline, interruptible, &reply, why);
	if (r == LF_SEND_INTERRUPTED)
		*interrupted = true;
	if (r != LF_REPLY)
	{
		if (strcmp(argv[0], "PING") == 0)
		{
			/*
			 * A server that expects TLS closes a plaintext connection as soon
			 * as our first bytes arrive: say where to look.
			 */
			bool		closed = strstr(why, "closed the connection") != NULL ||
				strstr(why, "reset by peer") != NULL;

			/*
			 * Likewise a TLS server that requires a client certificate:
			 * under TLS 1.3 it says so (an alert) after the handshake, and
			 * closes the connection; when the reset overtakes the alert, the
			 * alert is lost, so say where to look here too.
			 */
			snprintf(err, LF_ERRLEN, "connection check (PING) failed: %s%s", why,
					 !closed ? "" :
					 c->tls == NULL ?
					 " (a server that expects TLS closes a plaintext connection: see lease_fence.redis_sslmode)" :
					 !lf_tls_has_client_cert() ?
					 " (a server that requires a client certificate closes a connection without one: see lease_fence.redis_sslcert)" : "");
		}
		else
			snprintf(err, LF_ERRLEN, "%s failed: %s", argv[0], why);
		return false;
	}
	if (reply->type != REDIS_REPLY_STATUS || strcmp(reply->str, expected) != 0)
	{
		char		words[LF_ERRLEN];

		/* copy Redis's words, then free: the reply is malloc'd */
		snprintf(err, LF_ERRLEN, "%s failed: %s", argv[0],
				 lf_reply_words(reply, "unexpected reply", words, sizeof(words)));
		freeReplyObject(reply);
		return false;
	}
	freeReplyObject(reply);
	return true;
}

/*
 * Connect c's socket to one resolved address, non-blocking.  Returns 1 when
 * connected, 0 on failure (err), -1 at the deadline, -2 on an interrupt.
 */
static int
connect_one(LfConn *c, const struct sockaddr *addr, socklen_t addrlen,
			int64 deadline, bool interruptible, char *err)
{
	int			soerr = 0;
	socklen_t	solen = sizeof(soerr);
	int			w;

	if (connect(c->fd, addr, addrlen) == 0)
		return 1;
	if (errno != EINPROGRESS && errno != EINTR)
	{
		snprintf(err, LF_ERRLEN, "%s", strerror(errno));
		return 0;
	}
	/* a non-blocking connect completes when the socket becomes writable */
	w = lf_wait_socket(c, LF_WANT_WRITE, deadline, interruptible);
	if (w <= 0)
	{
		snprintf(err, LF_ERRLEN, w < 0 ? "interrupted" : "timed out");
		return w < 0 ? -2 : -1;
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &solen) != 0 || soerr != 0)
	{
		snprintf(err, LF_ERRLEN, "%s", strerror(soerr ? soerr : errno));
		return 0;
	}
	return 1;
}

/*
 * A new non-blocking socket, close-on-exec, or PGINVALID_SOCKET (err).
 *
 * Each socket is counted as one of PostgreSQL's own open files
 * (AcquireExternalFD, as postgres_fdw's connections are), and given back in
 * close_socket: PostgreSQL keeps its files under max_files_per_process by
 * closing cached ones, which it can only do when it knows how many other
 * descriptors the process holds.  When the backend's share for such
 * descriptors is used up, the connection is refused before anything is
 * sent: "unavailable", with the reason in the WARNING.
 */
static pgsocket
new_socket(int family, char *err)
{
	pgsocket	fd;

	if (!AcquireExternalFD())
	{
		snprintf(err, LF_ERRLEN, "this backend has too many open files for another Redis connection (see max_files_per_process)");
		return PGINVALID_SOCKET;
	}
	fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == PGINVALID_SOCKET)
	{
		snprintf(err, LF_ERRLEN, "could not create a socket: %s", strerror(errno));
		ReleaseExternalFD();
	}
	return fd;
}

/*
 * The socket: the unix socket, or each address of ep's host:port in turn.
 * On success c->fd is connected; returns false with a message in err, and
 * sets *interrupted when it gave up for an interrupt.
 */
static bool
open_socket(LfConn *c, const LfEndpoint *ep, int64 deadline, bool interruptible,
			bool *interrupted, char *err)
{
	char		why[LF_ERRLEN];
	int			rc;

	if (uses_unix_socket(ep))
	{
		struct sockaddr_un sun;

		if (strlen(lf_redis_socket) >= sizeof(sun.sun_path))
		{
			snprintf(err, LF_ERRLEN, "lease_fence.redis_socket is too long for a unix socket path");
			return false;
		}
		memset(&sun, 0, sizeof(sun));
		sun.sun_family = AF_UNIX;
		strlcpy(sun.sun_path, lf_redis_socket, sizeof(sun.sun_path));
		if ((c->fd = new_socket(AF_UNIX, err)) == PGINVALID_SOCKET)
			return false;
		rc = connect_one(c, (struct sockaddr *) &sun, sizeof(sun), deadline, interruptible, why);
		if (rc == 1)
			return true;
		*interrupted = (rc == -2);
		snprintf(err, LF_ERRLEN, "could not connect to Redis at %s: %s", lf_redis_socket, why);
		return false;
	}
	else
	{
		const char *host = endpoint_host(ep);
		const char *what = ep->kind == LF_EP_SENTINEL ? "Redis Sentinel" : "Redis";
		char		port[16];
		struct addrinfo hints;
		struct addrinfo *res = NULL;
		struct addrinfo *ai;
		int			gai;

		snprintf(port, sizeof(port), "%d", endpoint_port(ep));
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = AI_ADDRCONFIG;
		gai = getaddrinfo(host, port, &hints, &res);
		if (gai != 0)
		{
			snprintf(err, LF_ERRLEN, "could not resolve %s host \"%s\": %s", what, host, gai_strerror(gai));
			return false;
		}
		snprintf(why, sizeof(why), "no address");
		for (ai = res; ai != NULL; ai = ai->ai_next)
		{
			int			one = 1;

			if ((c->fd = new_socket(ai->ai_family, why)) == PGINVALID_SOCKET)
				continue;
			/* requests are small and each waits for its reply */
			(void) setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			rc = connect_one(c, ai->ai_addr, ai->ai_addrlen, deadline, interruptible, why);
			if (rc == 1)
			{
				freeaddrinfo(res);
				return true;
			}
			lf_close_socket(c);
			if (rc < 0)
			{
				/* the deadline is shared by every address */
				*interrupted = (rc == -2);
				break;
			}
		}
		freeaddrinfo(res);
		snprintf(err, LF_ERRLEN, "could not connect to %s at %s:%s: %s", what, host, port, why);
		return false;
	}
}

/* The TLS handshake on c->fd, within the deadline. */
static bool
tls_handshake(LfConn *c, const LfEndpoint *ep, int64 deadline, bool interruptible,
			  bool *interrupted, char *err)
{
	const char *host = endpoint_host(ep);
	int			port = endpoint_port(ep);
	char		why[LF_ERRLEN];

	c->tls = lf_tls_start(c->fd, host, why, sizeof(why));
	if (c->tls == NULL)
	{
		snprintf(err, LF_ERRLEN, "%s", why);
		return false;
	}
	for (;;)
	{
		int			want = 0;
		int			rc = lf_tls_handshake(c->tls, &want, why, sizeof(why));
		int			w;

		if (rc > 0)
			return true;
		if (rc < 0)
		{
			snprintf(err, LF_ERRLEN, "TLS handshake with %s at %s:%d failed: %s",
					 ep->kind == LF_EP_SENTINEL ? "Redis Sentinel" : "Redis", host, port, why);
			return false;
		}
		w = lf_wait_socket(c, want, deadline, interruptible);
		if (w <= 0)
		{
			*interrupted = (w < 0);
			snprintf(err, LF_ERRLEN, "TLS handshake with %s at %s:%d %s",
					 ep->kind == LF_EP_SENTINEL ? "Redis Sentinel" : "Redis", host, port,
					 w < 0 ? "interrupted" : "timed out");
			return false;
		}
	}
}

/*
 * A master that Sentinel named must say it is one (ROLE) before anything
 * of a lease is sent to it: Sentinel's answer may be older than a failover,
 * and a demoted master would refuse the writes anyway (READONLY), but only
 * after we sent them.
 */
static bool
check_role(LfConn *c, const LfEndpoint *ep, int64 deadline, bool interruptible,
		   bool *interrupted, char *err)
{
	const char *argv[1] = {"ROLE"};
	size_t		len[1] = {4};
	redisReply *reply;
	char		why[LF_ERRLEN];
	LfSendResult r;
	bool		master;

	/* a master lists its replicas: a reply that grows with the deployment */
	c->bound.limits = &lf_large_reply;
	r = lf_exchange_argv(c, 1, argv, len, deadline, interruptible, &reply, why);
	c->bound.limits = &lf_small_reply;
	if (r == LF_SEND_INTERRUPTED)
		*interrupted = true;
	if (r != LF_REPLY)
	{
		snprintf(err, LF_ERRLEN, "ROLE failed: %s", why);
		return false;
	}
	master = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
		reply->element[0]->type == REDIS_REPLY_STRING &&
		strcmp(reply->element[0]->str, "master") == 0;
	if (!master)
	{
		char		words[LF_ERRLEN];

		snprintf(err, LF_ERRLEN, "Redis at %s:%d is not a master (ROLE says %s)",
				 ep->host, ep->port,
				 reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
				 reply->element[0]->type == REDIS_REPLY_STRING ?
				 lf_redis_text(words, sizeof(words), reply->element[0]->str, reply->element[0]->len) :
				 lf_reply_words(reply, "something unexpected", words, sizeof(words)));
	}
	freeReplyObject(reply);
	return master;
}

/*
 * Make c a ready connection to ep, within the deadline: socket, TLS, AUTH,
 * SELECT (not on a sentinel), PING, and ROLE on a master Sentinel named.
 * Returns false with a message in err (c is closed then); *interrupted is
 * set when it gave up for a pending interrupt.
 */
static bool
connect_redis(LfConn *c, const LfEndpoint *ep, int64 deadline, bool interruptible,
			  bool *interrupted, char *err)
{
	bool		unix_socket = uses_unix_socket(ep);
	bool		sentinel = ep->kind == LF_EP_SENTINEL;
	const char *user = sentinel ? lf_sentinel_user : lf_redis_user;
	const char *pwfile = sentinel ? lf_sentinel_password_file : lf_redis_password_file;
	const char *ping[1] = {"PING"};

	*interrupted = false;
	c->fd = PGINVALID_SOCKET;
	c->tls = NULL;
	c->reader = NULL;
	c->serial = 0;
	c->requests = 0;
	c->opened_at = lf_now_ms();
	c->kind = sentinel ? LF_KIND_SENTINEL :
		ep->kind == LF_EP_SETTINGS ? LF_KIND_SERVER :
		lf_cluster ? LF_KIND_CLUSTER_NODE : LF_KIND_MASTER;
	if (unix_socket)
		strlcpy(c->endpoint, lf_redis_socket, sizeof(c->endpoint));
	else if (strchr(endpoint_host(ep), ':') != NULL)
		snprintf(c->endpoint, sizeof(c->endpoint), "[%s]:%d", endpoint_host(ep), endpoint_port(ep));
	else
		snprintf(c->endpoint, sizeof(c->endpoint), "%s:%d", endpoint_host(ep), endpoint_port(ep));

	if (user && user[0] != '\0' && !(pwfile && pwfile[0] != '\0'))
	{
		snprintf(err, LF_ERRLEN, sentinel ?
				 "lease_fence.redis_sentinel_user is set but lease_fence.redis_sentinel_password_file is not" :
				 "lease_fence.redis_user is set but lease_fence.redis_password_file is not");
		return false;
	}
	c->reader = lf_bounded_reader(&c->bound);
	if (c->reader == NULL)
	{
		snprintf(err, LF_ERRLEN, "could not allocate a Redis reply reader");
		return false;
	}
	if (!open_socket(c, ep, deadline, interruptible, interrupted, err))
		goto fail;
	if (!unix_socket && lf_tls_wanted() &&
		!tls_handshake(c, ep, deadline, interruptible, interrupted, err))
		goto fail;

	if (pwfile && pwfile[0] != '\0')
	{
		char		password[LF_MAX_PASSWORD];
		size_t		len;
		const char *argv[3];
		int			argc = 0;
		bool		ok;

		if (!lf_read_secret_file(pwfile, sentinel ? "lease_fence.redis_sentinel_password_file" :
								 "lease_fence.redis_password_file",
								 password, sizeof(password), &len, err, LF_ERRLEN))
			goto fail;
		while (len > 0 && (password[len - 1] == '\n' || password[len - 1] == '\r'))
			password[--len] = '\0';
		argv[argc++] = "AUTH";
		if (user && user[0] != '\0')
			argv[argc++] = user;
		argv[argc++] = password;
		ok = setup_command(c, argc, argv, "OK", deadline, interruptible, interrupted, err);
		explicit_bzero(password, sizeof(password));
		if (!ok)
			goto fail;
	}

	if (!sentinel && lf_redis_db != 0)
	{
		char		db[16];
		const char *argv[2];

		snprintf(db, sizeof(db), "%d", lf_redis_db);
		argv[0] = "SELECT";
		argv[1] = db;
		if (!setup_command(c, 2, argv, "OK", deadline, interruptible, interrupted, err))
			goto fail;
	}

	/*
	 * The connection check: after it, nothing stands between us and Redis.
	 * Not on the subscriber: its only command, SUBSCRIBE, changes nothing,
	 * and its answer is that check (a wait without it polls).
	 */
	if (c != lf_subscriber_conn() &&
		!setup_command(c, 1, ping, "PONG", deadline, interruptible, interrupted, err))
		goto fail;
	if (ep->check_role)
	{
		if (!check_role(c, ep, deadline, interruptible, interrupted, err))
			goto fail;
		c->role_epoch = ep->role_epoch;
		c->role_checked_at = lf_now_ms();
	}

	c->serial = ++last_serial;
	return true;

fail:
	lf_conn_close(c);
	return false;
}

/* ---------------------------------------------------------------------
 * Finding a connection, and running one command on it
 * ---------------------------------------------------------------------
 */

/*
 * The cache entry of ep, created empty if new.  A cached connection that
 * looks dead is closed here.  The server the settings name is found
 * without building its key while no setting changed.
 */
static LfConn *
lookup_conn(const LfEndpoint *ep)
{
	char		key[LF_CONN_KEYLEN];
	LfConn	   *c;
	bool		found;

	lf_close_abandoned();
	if (connections == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = LF_CONN_KEYLEN;
		ctl.entrysize = sizeof(LfConn);
		connections = hash_create("lease_fence Redis connections", 8, &ctl,
								  HASH_ELEM | HASH_STRINGS);
		on_proc_exit(disconnect_at_exit, (Datum) 0);
	}
	if (memo.conn != NULL && memo.version == lf_redis_settings_version() &&
		ep->kind == memo.ep.kind && ep->check_role == memo.ep.check_role &&
		(ep->kind == LF_EP_SETTINGS ||
		 (ep->port == memo.ep.port && strcmp(ep->host, memo.host) == 0)))
		c = memo.conn;
	else
	{
		describe_target(ep, key, sizeof(key));
		c = hash_search(connections, key, HASH_ENTER, &found);
		if (!found)
		{
			c->fd = PGINVALID_SOCKET;
			c->tls = NULL;
			c->reader = NULL;
			c->serial = 0;
			c->role_epoch = 0;
			c->role_checked_at = 0;
			c->answered_at = 0;
			c->ndeferred = 0;
			c->read_all = false;
			c->requests = 0;
			c->kind = NULL;
			c->endpoint[0] = '\0';
			c->wait_set = NULL;
		}
		memo.conn = c;
		memo.version = lf_redis_settings_version();
		memo.ep = *ep;
		if (ep->kind != LF_EP_SETTINGS)
			strlcpy(memo.host, ep->host, sizeof(memo.host));
		if (strlen(ep->kind != LF_EP_SETTINGS ? ep->host : "") >= sizeof(memo.host))
			memo.conn = NULL;	/* too long to remember: look it up each time */
	}
	/* (replies to read make a socket readable: lf_conn_command reads them) */
	if (c->fd != PGINVALID_SOCKET && c->ndeferred == 0 && !lf_answered_recently(c) &&
		!lf_connection_looks_alive(c))
		lf_conn_close(c);
	return c;
}

/*
 * The serial number of ep's live cached connection, or 0 when there is none
 * (a dead one is closed first).  lease.c keeps its once-per-connection
 * answer under this number.
 */
uint64
lf_conn_serial(const LfEndpoint *ep)
{
	LfConn	   *c = lookup_conn(ep);

	return c->fd == PGINVALID_SOCKET ? 0 : c->serial;
}

/*
 * Run one command on ep (redis_topology.c decides which).  With LF_FRESH a
 * new connection is opened for it (the cleanup after an unknown outcome
 * must not share the connection that timed out); with LF_FRESH or
 * LF_WITHIN a new connection and the command share timeout_ms; otherwise
 * the cached connection is used if it still looks alive, and a new one is
 * bounded by connect_timeout_ms.  With LF_SAME_CONN (ep NULL) the command
 * goes on the connection the previous one ran on, or is not sent when that
 * one is gone (WAIT counts the replicas of its own connection's writes).
 * On LF_REPLY *reply is a malloc'd hiredis reply the caller must
 * freeReplyObject().
 */
LfSendResult
lf_conn_command(const LfEndpoint *ep, int argc, const char **argv, const size_t *argvlen,
				int timeout_ms, int flags, redisReply **reply, char *err)
{
	bool		interruptible = (flags & LF_INTERRUPTIBLE) != 0;
	bool		fresh = (flags & LF_FRESH) != 0;
	bool		within = (flags & (LF_FRESH | LF_WITHIN)) != 0;
	LfConn	   *c;
	LfSendResult r;
	int64		overall;

	*reply = NULL;
	err[0] = '\0';
	lf_close_abandoned();

	if (flags & LF_SUBSCRIBER)
	{
		/* always a new connection: one subscription, one wait */
		c = lf_subscriber_conn();
		lf_conn_close(c);
	}
	else if (flags & LF_SAME_CONN)
	{
		/* (closed since, it is gone: its serial number was its own) */
		c = last_used.conn != NULL && last_used.conn->serial == last_used.serial ?
			last_used.conn : NULL;
		if (c != NULL && settle_before_request(c, interruptible))
		{
			CHECK_FOR_INTERRUPTS();
			snprintf(err, LF_ERRLEN, "interrupted while reading the answers to earlier releases");
			return LF_NOT_SENT;
		}
		if (c == NULL || c->fd == PGINVALID_SOCKET ||
			(!lf_answered_recently(c) && !lf_connection_looks_alive(c)))
		{
			if (c != NULL)
				lf_conn_close(c);
			snprintf(err, LF_ERRLEN, "the connection of the previous command is gone");
			return LF_NOT_SENT;
		}
	}
	else
	{
		c = lookup_conn(ep);
		if (settle_before_request(c, interruptible))
		{
			/* nothing of the command was sent: a cancel can act right away */
			CHECK_FOR_INTERRUPTS();
			snprintf(err, LF_ERRLEN, "interrupted while reading the answers to earlier releases");
			return LF_NOT_SENT;
		}
		if (fresh && c->fd != PGINVALID_SOCKET)
			lf_conn_close(c);
	}

	overall = lf_now_ms() + timeout_ms;
	if (c->fd == PGINVALID_SOCKET)
	{
		bool		interrupted;

		if (!connect_redis(c, ep, within ? overall : lf_now_ms() + lf_connect_timeout_ms,
						   interruptible, &interrupted, err))
		{
			/* nothing of the command was sent: a cancel can act right away */
			if (interrupted)
				CHECK_FOR_INTERRUPTS();
			return LF_NOT_SENT;
		}
	}
	else if (ep != NULL && ep->check_role &&
			 (c->role_epoch != ep->role_epoch ||
			  (ep->role_max_age_ms > 0 && lf_now_ms() - c->role_checked_at > ep->role_max_age_ms)))
	{
		/*
		 * A master's connection whose ROLE answer may be out of date (the
		 * Sentinel watch's answer changed since, or it is older than the
		 * endpoint allows): ask again before the command, which is not sent
		 * to a server that says it is no longer a master.
		 */
		bool		interrupted = false;

		if (!check_role(c, ep, within ? overall : lf_now_ms() + lf_command_timeout_ms,
						interruptible, &interrupted, err))
		{
			lf_conn_close(c);
			if (interrupted)
				CHECK_FOR_INTERRUPTS();
			return LF_NOT_SENT;
		}
		c->role_epoch = ep->role_epoch;
		c->role_checked_at = lf_now_ms();
	}

	/*
	 * LF_DEFER: on a connection that answered within the last second, send
	 * it and return; drain_deferred reads its reply before the connection's
	 * next command.  Not over TLS, nor on a connection just made.
	 */
	if ((flags & LF_DEFER) && !(flags & LF_SUBSCRIBER) && c->tls == NULL &&
		c->ndeferred < LF_MAX_DEFERRED && lf_answered_recently(c) && argc > 3)
	{
		r = lf_exchange_argv(c, argc, argv, argvlen, within ? overall : lf_now_ms() + timeout_ms,
						  interruptible, NULL, err);
		if (r == LF_SENT_UNREAD)
		{
			lf_deferred_sent(c, argv[3], argvlen[3]);
			return r;
		}
		lf_conn_close(c);
		return r;
	}

	if (flags & LF_LARGE_REPLY)
		c->bound.limits = &lf_large_reply;
	r = lf_exchange_argv(c, argc, argv, argvlen, within ? overall : lf_now_ms() + timeout_ms,
					  interruptible, reply, err);
	c->bound.limits = &lf_small_reply;
	if (r != LF_REPLY)
		lf_conn_close(c);			/* dead or timed out: never reuse */
	else
	{
		c->answered_at = lf_now_ms();
		if (!(flags & LF_SUBSCRIBER))
		{
			last_used.conn = c;
			last_used.serial = c->serial;
		}
	}
	return r;
}

