/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *	  Connections to Redis: one cached connection per server, on a socket of
 *	  our own (plain, or TLS through redis_tls.c).  A server is an endpoint
 *	  (LfEndpoint): the one the settings name, a master Sentinel named, a
 *	  Cluster node, or a sentinel; redis_topology.c picks it.  Requests are
 *	  formatted here (RESP arrays of bulk strings); hiredis's reader parses
 *	  every reply.  Every wait is bounded and interruptible.
 *
 * The whole point of the lease helper is to tell "no" from "unknown", so each
 * command ends in one of four ways (LfSendResult):
 *
 *	LF_REPLY			a reply arrived (which may be a Redis error reply);
 *	LF_NOT_SENT			nothing of the command left this backend;
 *	LF_NO_REPLY			the command may have reached Redis, but no reply came
 *						(timeout, connection lost after sending);
 *	LF_SEND_INTERRUPTED	like LF_NO_REPLY, with an interrupt (cancel, statement
 *						timeout, terminate) pending: the caller records the
 *						unknown outcome, then calls CHECK_FOR_INTERRUPTS.
 *
 * A new connection is made ready before the first command is handed to it:
 * TCP or unix-socket connect, the TLS handshake, AUTH, SELECT, and a PING
 * whose PONG proves the whole path works (a plaintext client on a TLS port,
 * or a TLS server refusing our certificate after the handshake, fails here).
 * So every failure before a command is sent is LF_NOT_SENT by construction.
 *
 * Connections are cached in a hash keyed by everything that decides where
 * and how we connect (as postgres_fdw's connection hash is keyed by server
 * and user): a session that switches between servers, or talks to several
 * Cluster nodes, keeps one connection to each.  A connection that saw any error, or timed out, is closed and
 * never reused: a late reply would otherwise be read as the answer to the
 * next command.
 *
 * Host names are resolved with getaddrinfo(), which does not honour
 * connect_timeout_ms or interrupts (see docs/reference.md, "Settings").
 *
 * Layer 2, Redis (docs/design.md, "The layers": its files and the order
 * of their calls).
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
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "base/compat.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "redis/internal.h"
#include "base/stats.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

/* requests sent with LF_DEFER and not yet answered, at most, per connection */
#define LF_MAX_DEFERRED 16

/* longest password we read from redis_password_file */
#define LF_MAX_PASSWORD 512
/* the key of a cached connection: every setting that decides the server */
#define LF_CONN_KEYLEN (MAXPGPATH * 6)

/* one cached connection */
typedef struct LfConn
{
	char		key[LF_CONN_KEYLEN];	/* hash key: must be first */
	pgsocket	fd;				/* PGINVALID_SOCKET: none */
	void	   *tls;			/* SSL *, or NULL on a plain connection */
	redisReader *reader;		/* hiredis's reply parser, malloc'd */
	uint64		serial;			/* lf_conn_serial() */
	uint64		role_epoch;		/* the endpoint's role_epoch at its last ROLE */
	int64		role_checked_at;	/* lf_now_ms() of its last ROLE */
	int64		answered_at;	/* lf_now_ms() of its last reply, 0: none */
	/* for lf_redis_connections(): set when it is opened */
	int64		opened_at;		/* lf_now_ms() when it was opened */
	uint64		requests;		/* commands sent on it since */
	const char *kind;			/* LF_KIND_* */
	char		endpoint[MAXPGPATH];	/* host:port, [v6]:port or a socket path */
	/* requests sent with LF_DEFER whose replies are still to be read */
	int			ndeferred;
	char	   *deferred_key[LF_MAX_DEFERRED];	/* their keys (TopMemoryContext) */
	/*
	 * The last read took less than it could: the socket held nothing more
	 * at that moment (set by read_reply, cleared by every send).
	 */
	bool		read_all;
	/* the bound of the reply being read: the reader's privdata (redis.h) */
	LfReplyBound bound;
} LfConn;


/*
 * A connection that answered this recently is used without looking at its
 * socket first (connection_looks_alive): the look is a system call on every
 * command, and what it finds (a Redis that closed the connection, after a
 * restart or a stop) is found as well by the command itself, as "unknown"
 * instead of "unavailable" -- never as a success.
 */
#define LF_RECENT_ANSWER_MS 1000

static HTAB *connections = NULL;
static uint64 last_serial = 0;

/* the requests sent with LF_DEFER whose replies are unread, on every connection */
static int	deferred_total = 0;

/* lease_registry.c's exit budget, once a termination is pending (redis.h) */
int64		(*lf_die_deadline_hook) (void) = NULL;

/* the connection the last command ran on (LF_SAME_CONN), if still open */
static LfConn *last_used = NULL;

/*
 * The subscription connection of a waiting acquire (LF_SUBSCRIBER): not
 * cached, opened for one wait and closed when it ends.  A subscribed
 * connection takes no other command.
 */
static LfConn subscriber = {.fd = PGINVALID_SOCKET};

/*
 * The connection an exchange is under way on; NULL between exchanges.  An
 * error thrown out of the middle of one (by an interrupt served during its
 * wait, say) leaves it set: that connection may still deliver the reply,
 * which would be read as the answer to its next command, so it is closed
 * before anything else runs on a connection (close_abandoned).
 */
static LfConn *in_flight = NULL;

/*
 * The entry lookup_conn found last, for the same endpoint and settings
 * version (lf_redis_settings_version): it is the one it would find again,
 * without building the key.  Entries are never removed, and dynahash never
 * moves them.
 */
static LfConn *last_conn = NULL;
static uint64 last_conn_version = 0;
static LfEndpoint last_ep;		/* the endpoint last_conn is for; its host: */
static char last_ep_host[256];

/*
 * One wait event set, for the socket last waited on, kept while that socket
 * lives: building one per wait costs an epoll instance and four system
 * calls, a measurable part of a lease round trip.
 */
static WaitEventSet *wait_set = NULL;
static pgsocket wait_set_fd = PGINVALID_SOCKET;
static int	wait_set_pos = -1;
static uint32 wait_set_events = 0;

/*
 * c sent a reply larger than its bound: count it, and say so (the
 * connection is closed by the caller; the request's outcome is in err).
 */
static void
report_oversized(LfConn *c, char *err)
{
	snprintf(err, LF_ERRLEN, "oversized reply from Redis: %s; the connection was closed", c->bound.oversized);
	lf_count(LF_C_CONNECTION_OVERSIZED_REPLY);
	HOLD_INTERRUPTS();			/* the caller serves a cancel once it closed c */
	ereport(WARNING,
			errmsg("lease_fence: closed a Redis connection that sent an oversized reply"),
			errdetail("It sent %s, more than lease_fence reads in a reply; none of it was kept.",
					  c->bound.oversized),
			errhint("lease_fence's requests are answered in a few short values. A Redis server, or something between it and this server, sent it; on a network you do not trust, use TLS (lease_fence.redis_sslmode)."));
	RESUME_INTERRUPTS();
}

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

/*
 * Close a connection's socket, TLS session and reader; the entry stays.  The
 * wait event set of the socket goes first: once closed, the socket's number
 * may be reused by the next connection, which the old epoll registration
 * would not watch.
 */
static void
close_socket(LfConn *c)
{
	if (wait_set != NULL && c->fd == wait_set_fd)
	{
		FreeWaitEventSet(wait_set);
		wait_set = NULL;
		wait_set_fd = PGINVALID_SOCKET;
	}
	if (c->tls)
		lf_tls_free(c->tls);
	c->tls = NULL;
	if (c->fd != PGINVALID_SOCKET)
	{
		close(c->fd);
		ReleaseExternalFD();
	}
	c->fd = PGINVALID_SOCKET;
}

/*
 * The replies of c's deferred requests will never be read (the connection
 * is closed, or was lost): each counts as an unconfirmed cleanup, and one
 * WARNING says how many.  That WARNING reaches whatever statement runs
 * now, which behind a pooler may be another client's: it names no key (the
 * server log does).  A request already sent is still run by Redis unless
 * Redis finds the connection closed before it reads it; either way its key
 * expires by its TTL.
 */
static bool exiting = false;	/* on_proc_exit: shared memory is gone */

static bool drain_deferred_by(LfConn *c, int64 deadline, bool interruptible,
							  bool *interrupted);
static bool read_deferred_except(LfConn *keep, int64 deadline, bool interruptible);

static void
forget_deferred(LfConn *c)
{
	int			i;
	int			n = c->ndeferred;

	/* a report must not throw a pending cancel out of the middle of this */
	HOLD_INTERRUPTS();
	for (i = 0; i < n; i++)
	{
		if (!exiting)
		{
			lf_count(LF_C_CLEANUP_UNCONFIRMED);
			ereport(LOG_SERVER_ONLY,
					errmsg("lease_fence: the release of key \"%s\" sent after COMMIT is unconfirmed: its connection was closed before the answer was read",
						   c->deferred_key[i]));
		}
		pfree(c->deferred_key[i]);
		c->deferred_key[i] = NULL;
	}
	c->ndeferred = 0;
	deferred_total -= n;
	if (n > 0 && !exiting)
		ereport(WARNING,
				errmsg("lease_fence: %d lease releases sent after an earlier COMMIT are unconfirmed", n),
				errdetail("Their Redis connection was closed before their answers were read."),
				errhint("Those leases expire by their TTL; writes under their generations are still fenced. The server log names their keys."));
	RESUME_INTERRUPTS();
}

static void
close_conn(LfConn *c)
{
	if (c == last_used)
		last_used = NULL;
	close_socket(c);
	if (c->reader)
		redisReaderFree(c->reader);
	c->reader = NULL;
	c->serial = 0;
	c->answered_at = 0;
	forget_deferred(c);
}

/* Close the connection an error left in the middle of an exchange, if any. */
static inline void
close_abandoned(void)
{
	if (unlikely(in_flight != NULL))
	{
		close_conn(in_flight);
		in_flight = NULL;
	}
}

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

	close_conn(&subscriber);
	if (connections == NULL)
		return 0;
	hash_seq_init(&seq, connections);
	while ((c = hash_seq_search(&seq)) != NULL)
	{
		if (c->fd != PGINVALID_SOCKET)
			n++;
		close_conn(c);
	}
	return n;
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

	if (connections == NULL || deferred_total <= (keep ? keep->ndeferred : 0))
		return false;
	hash_seq_init(&seq, connections);
	while ((c = hash_seq_search(&seq)) != NULL)
	{
		if (c != keep && c->ndeferred > 0)
			(void) drain_deferred_by(c, deadline, interruptible, &interrupted);
		if (interrupted)
		{
			hash_seq_term(&seq);
			break;
		}
	}
	return interrupted;
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

	close_abandoned();
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

	close_abandoned();
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
	exiting = true;
	(void) lf_redis_disconnect_all();
}

/*
 * Does the pending interrupt end a wait for Redis?  A cancel (which
 * statement_timeout and lock_timeout are), a termination, a session or
 * transaction timeout and a lost client do: ProcessInterrupts throws for
 * each, and the caller must first record what became of its request
 * (unknown).  Every other interrupt -- the ProcSignalBarrier that every
 * DROP DATABASE sends to every backend, PostgreSQL 15's idle-stats timeout
 * that a statement started soon after an earlier one finds armed, a
 * memory-context dump, client_connection_check_interval's check of a
 * client that is still there -- returns normally from ProcessInterrupts: it
 * is served where the wait stands, and the wait goes on.  (Should a served
 * interrupt throw after all -- that check finding the client gone, which
 * ends the backend -- the connection it left mid-request is closed before
 * any further use: see close_abandoned.)
 */
static bool
interrupt_ends_wait(void)
{
	return QueryCancelPending || ProcDiePending || ClientConnectionLost ||
		lf_session_timeout_pending();
}

/*
 * Is the wait over without waiting?  0 when the deadline has passed, -1
 * when an interrupt that ends the wait is pending (interruptible only), 1
 * to go on: wait_socket's rules, for a loop that reads what is there
 * already (TLS's decrypted bytes, a deferred reply) without waiting.
 */
static int
wait_over(int64 deadline, bool interruptible)
{
	if (unlikely(ProcDiePending) && lf_die_deadline_hook != NULL)
		deadline = Min(deadline, lf_die_deadline_hook());
	if (lf_now_ms() >= deadline)
		return 0;
	if (interruptible && INTERRUPTS_PENDING_CONDITION() && INTERRUPTS_CAN_BE_PROCESSED() &&
		interrupt_ends_wait())
		return -1;
	return 1;
}

/*
 * Wait until fd is readable (want LF_WANT_READ) or writable, or the deadline
 * passes.  Returns 1 when ready, 0 on timeout, -1 when an interrupt that
 * ends the wait is pending and may be processed now (only if
 * interruptible; other interrupts are served during the wait).  Postmaster
 * death ends the process.
 */
static int
wait_socket(pgsocket fd, int want, int64 deadline, bool interruptible)
{
	uint32		events = want == LF_WANT_WRITE ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;

	if (wait_set == NULL || wait_set_fd != fd)
	{
		if (wait_set != NULL)
			FreeWaitEventSet(wait_set);
		wait_set = lf_create_session_wait_set(3);
		AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		if (IsUnderPostmaster)
			AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		wait_set_pos = AddWaitEventToSet(wait_set, events, fd, NULL, NULL);
		wait_set_fd = fd;
		wait_set_events = events;
	}
	else if (wait_set_events != events)
	{
		ModifyWaitEvent(wait_set, wait_set_pos, events, NULL);
		wait_set_events = events;
	}

	for (;;)
	{
		int64		now = lf_now_ms();
		WaitEvent	event;
		int			n;

		/*
		 * A termination is pending: the wait ends by the exit's budget,
		 * whatever its own deadline, and also where interrupts are held (the
		 * releases at COMMIT and ROLLBACK), which no cancel can end.
		 */
		if (unlikely(ProcDiePending) && lf_die_deadline_hook != NULL)
			deadline = Min(deadline, lf_die_deadline_hook());
		if (now >= deadline)
			return 0;
		n = WaitEventSetWait(wait_set, (long) (deadline - now), &event, 1, lf_wait_event());
		if (n == 0)
			continue;			/* timed out: the loop checks the deadline */
		if (event.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			if (interruptible && INTERRUPTS_PENDING_CONDITION() && INTERRUPTS_CAN_BE_PROCESSED())
			{
				if (interrupt_ends_wait())
					return -1;
				/* a benign one: served here, and the wait goes on */
				CHECK_FOR_INTERRUPTS();
			}
			continue;
		}
		if (event.events & events)
			return 1;
	}
}

/*
 * Write up to len bytes.  Returns the bytes written, 0 when the socket would
 * block (*want says for what), -1 on an error (message in err).
 */
static ssize_t
conn_write(LfConn *c, const char *buf, size_t len, int *want, char *err)
{
	ssize_t		n;

	if (c->tls)
		return lf_tls_write(c->tls, buf, len, want, err, LF_ERRLEN);
	/* MSG_NOSIGNAL: a peer that went away is an error, not a SIGPIPE */
	n = send(c->fd, buf, len, MSG_NOSIGNAL);
	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
	{
		*want = LF_WANT_WRITE;
		return 0;
	}
	snprintf(err, LF_ERRLEN, "%s", strerror(errno));
	return -1;
}

/*
 * Read what there is, up to len bytes.  Returns the bytes read, 0 when
 * nothing is there yet (*want says what to wait for), -1 on an error or the
 * end of the stream (message in err).
 */
static ssize_t
conn_read(LfConn *c, char *buf, size_t len, int *want, char *err)
{
	ssize_t		n;

	if (c->tls)
		return lf_tls_read(c->tls, buf, len, want, err, LF_ERRLEN);
	n = recv(c->fd, buf, len, 0);
	if (n > 0)
		return n;
	if (n == 0)
	{
		snprintf(err, LF_ERRLEN, "the server closed the connection");
		return -1;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
	{
		*want = LF_WANT_READ;
		return 0;
	}
	snprintf(err, LF_ERRLEN, "%s", strerror(errno));
	return -1;
}

/*
 * The system calls of one command on a cached connection, each needed:
 *	poll()			the idle-connection check before sending (lookup_conn),
 *					on a connection that has not answered for a second
 *					(LF_RECENT_ANSWER_MS): a Redis that closed the
 *					connection (restart, stop) is seen here, and the command
 *					goes on a new connection or is "unavailable".  Without
 *					it, a write to a closed TCP peer succeeds and only the
 *					read fails, which makes a stopped Redis "unknown".  A
 *					cheaper tell does not exist: the kernel alone knows the
 *					peer has gone.
 *	recv()			a peek (MSG_PEEK) for bytes no request asked for
 *					(holds_stray_bytes): they would be read as this
 *					request's answer;
 *	send()			the request, whole in one call (it is small);
 *	epoll_wait()	the wait for the reply, on the latch too (cancel,
 *					terminate, postmaster death), bounded by the deadline;
 *	recv()			the reply, usually whole in one call.
 * No read is tried before the wait (the reply cannot be there before it is
 * sent), and the wait event set is kept while the socket lives.
 *
 * A release after COMMIT (LF_DEFER) is only sent: its reply is read before
 * the connection's next command (drain_deferred), by when it has usually
 * arrived, so that no backend sleeps waiting for it.  That read is tried
 * before any wait (one recv(), no epoll_wait(), when the reply is there);
 * a recv() that took less than it could also answers the peek for stray
 * bytes, which is then not made again: the next command of a job costs
 * recv(), send(), epoll_wait(), recv().
 *
 * exchange() sends one formatted command on c and waits for its reply until
 * deadline.  On anything but LF_REPLY (or LF_SENT_UNREAD, when out is NULL)
 * the connection is in an unknown state: the caller closes it.  On LF_REPLY
 * *out is a malloc'd hiredis reply.
 */

/* Write all of cmd to c: LF_REPLY once it is all sent. */
static LfSendResult
send_request(LfConn *c, const char *cmd, size_t len, int64 deadline,
			 bool interruptible, char *err)
{
	size_t		off = 0;
	char		why[LF_ERRLEN];
	int			want = LF_WANT_WRITE;
	int			w;

	c->requests++;
	c->read_all = false;
	while (off < len)
	{
		ssize_t		n = conn_write(c, cmd + off, len - off, &want, why);

		if (n < 0)
		{
			snprintf(err, LF_ERRLEN, "could not send to Redis: %s", why);
			return off > 0 ? LF_NO_REPLY : LF_NOT_SENT;
		}
		off += n;
		if (off == len)
			break;
		if (n > 0)
			continue;
		w = wait_socket(c->fd, want, deadline, interruptible);
		if (w <= 0)
		{
			snprintf(err, LF_ERRLEN, "timed out sending to Redis");
			if (off == 0)
				return LF_NOT_SENT;
			return w < 0 ? LF_SEND_INTERRUPTED : LF_NO_REPLY;
		}
	}
	return LF_REPLY;
}

/*
 * Wait, then read what arrived, until the reader has a whole reply.
 * Waiting first saves a read that would only say "not yet" (the reply
 * cannot be there before it is sent): one system call per command.  The
 * reader is asked first (no system call: a deferred request's reply may
 * have come with the one before it), and the wait is skipped when TLS holds
 * decrypted bytes already, which the socket would not announce.
 */
static LfSendResult
read_reply(LfConn *c, int64 deadline, bool interruptible, bool read_first,
		   redisReply **out, char *err)
{
	char		why[LF_ERRLEN];
	int			want = LF_WANT_READ;
	int			w;

	*out = NULL;
	for (;;)
	{
		void	   *reply = NULL;
		char		buf[16384];
		ssize_t		n;

		/*
		 * A whole reply in what was read so far?  (Replies to deferred
		 * requests may arrive together; the first look finds nothing.)
		 * The reader parses at most the reply's bound, and refuses an
		 * announced array beyond it before allocating it.
		 */
		if (redisReaderGetReply(c->reader, &reply) != REDIS_OK)
		{
			if (reply)
				freeReplyObject(reply);
			if (c->bound.oversized[0] != '\0')
				report_oversized(c, err);
			else
				snprintf(err, LF_ERRLEN, "could not parse the reply from Redis: %s", c->reader->errstr);
			return LF_NO_REPLY;
		}
		if (reply != NULL)
		{
			c->bound.elements = 0;	/* the next reply has a bound of its own */
			*out = (redisReply *) reply;
			return LF_REPLY;
		}
		/*
		 * read_first (a deferred reply, whose request went a while ago):
		 * try the read before any wait, once.  Without a wait (that, or TLS
		 * holding decrypted bytes already), the deadline and the interrupts
		 * still end the reading: no turn of this loop reads without them.
		 */
		if ((read_first && c->tls == NULL) || (c->tls != NULL && lf_tls_pending(c->tls)))
		{
			read_first = false;
			w = wait_over(deadline, interruptible);
		}
		else
			w = wait_socket(c->fd, want, deadline, interruptible);
		if (w < 0)
		{
			snprintf(err, LF_ERRLEN, "interrupted while waiting for Redis");
			return LF_SEND_INTERRUPTED;
		}
		if (w == 0)
		{
			snprintf(err, LF_ERRLEN, "timed out waiting for Redis");
			return LF_NO_REPLY;
		}
		n = conn_read(c, buf, sizeof(buf), &want, why);
		if (n < 0)
		{
			snprintf(err, LF_ERRLEN, "lost the connection to Redis: %s", why);
			return LF_NO_REPLY;
		}
		if (n == 0)
			continue;			/* nothing yet: wait for what conn_read said */
		c->read_all = c->tls == NULL && (size_t) n < sizeof(buf);
		want = LF_WANT_READ;
		if (!lf_reader_has_room(c->reader, (size_t) n))
		{
			report_oversized(c, err);
			return LF_NO_REPLY;
		}
		if (redisReaderFeed(c->reader, buf, (size_t) n) != REDIS_OK)
		{
			snprintf(err, LF_ERRLEN, "could not parse the reply from Redis: %s", c->reader->errstr);
			return LF_NO_REPLY;
		}
	}
}

/* Send cmd and read its reply; with out NULL, only send it (LF_DEFER). */
static LfSendResult
exchange_once(LfConn *c, const char *cmd, size_t len, int64 deadline,
			  bool interruptible, redisReply **out, char *err)
{
	LfSendResult r = send_request(c, cmd, len, deadline, interruptible, err);

	if (r != LF_REPLY)
	{
		if (out)
			*out = NULL;
		return r;
	}
	if (out == NULL)
		return LF_SENT_UNREAD;
	return read_reply(c, deadline, interruptible, false, out, err);
}

static LfSendResult
exchange(LfConn *c, const char *cmd, size_t len, int64 deadline,
		 bool interruptible, redisReply **out, char *err)
{
	LfSendResult r;

	in_flight = c;
	r = exchange_once(c, cmd, len, deadline, interruptible, out, err);
	in_flight = NULL;
	return r;
}

/*
 * Read the replies of c's deferred requests (the releases after COMMIT),
 * before anything else is sent on it, by deadline: each counts as a cleanup
 * confirmed or not, and one that failed is a WARNING, as a release at the
 * end of a transaction is -- but one that names no key: it reaches the
 * statement that runs now, which behind a pooler may be another client's.
 * The key goes to the server log only.  With interruptible, a cancel or a
 * termination ends the wait at once (*interrupted is set; the reply is
 * unread, unconfirmed).  False when the connection had to be closed (a
 * reply did not come, or did not parse).
 */
static bool
drain_deferred_by(LfConn *c, int64 deadline, bool interruptible, bool *interrupted)
{
	while (c->ndeferred > 0)
	{
		redisReply *reply = NULL;
		char		err[LF_ERRLEN];
		char	   *key = c->deferred_key[0];
		LfSendResult r;
		bool		confirmed;

		in_flight = c;
		r = read_reply(c, deadline, interruptible, true, &reply, err);
		in_flight = NULL;
		if (r == LF_SEND_INTERRUPTED)
			*interrupted = true;
		/* the release script's own two answers confirm it (redis_reply.c) */
		if (r == LF_REPLY)
		{
			LfAnswer	ans;

			lf_decode_reply(LF_SCRIPT_RELEASE, reply, &ans);
			confirmed = ans.outcome == LF_ANS_RELEASED || ans.outcome == LF_ANS_NOT_HELD;
			if (!confirmed)
				strlcpy(err, ans.err, LF_ERRLEN);
		}
		else
			confirmed = false;
		if (reply)
			freeReplyObject(reply);
		/* the next one moves up */
		c->ndeferred--;
		deferred_total--;
		memmove(&c->deferred_key[0], &c->deferred_key[1], sizeof(char *) * c->ndeferred);
		c->deferred_key[c->ndeferred] = NULL;
		lf_count(confirmed ? LF_C_CLEANUP_CONFIRMED : LF_C_CLEANUP_UNCONFIRMED);
		/*
		 * errfinish serves a pending cancel after a WARNING is sent: held
		 * off, so that the connection is closed below before it acts.
		 */
		HOLD_INTERRUPTS();
		if (!confirmed)
		{
			ereport(LOG_SERVER_ONLY,
					errmsg("lease_fence: could not confirm the release of key \"%s\" sent after COMMIT", key),
					errdetail("%s", err));
			ereport(WARNING,
					errmsg("lease_fence: could not confirm a lease release sent after an earlier COMMIT"),
					errdetail("%s", r == LF_REPLY ? "Redis did not answer it with the release's result." : err),
					errhint("The lease expires by its TTL; writes under its generation are still fenced. The server log names its key."));
		}
		pfree(key);
		if (r != LF_REPLY)
			close_conn(c);		/* the rest count as unconfirmed */
		RESUME_INTERRUPTS();
		if (r != LF_REPLY)
			return false;
		c->answered_at = lf_now_ms();
	}
	return true;
}

/*
 * Does c hold bytes that no request of ours asked for?  Asked before a
 * request is sent, once every reply c owes has been read: anything left
 * then -- in hiredis's reader, in TLS's buffer, or on the socket -- came
 * from a Redis that sent more replies than it was asked for, or from
 * something between it and us, and would be read as the answer to the
 * request.  One system call (a peek) on a plain connection.  Over TLS the
 * socket may hold records that carry no data (session tickets): only
 * decrypted bytes count there.
 */
static bool
holds_stray_bytes(LfConn *c, bool just_read_all)
{
	char		byte;

	if (c->reader != NULL && c->reader->len > c->reader->pos)
		return true;
	if (c->tls != NULL)
		return lf_tls_pending(c->tls);
	/* the read of the replies owed, just now, took all there was: no peek */
	if (just_read_all)
		return false;
	return recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
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
		(void) drain_deferred_by(c, lf_now_ms() + lf_command_timeout_ms, interruptible,
								 &interrupted);
	if (interrupted)
		return true;
	if (c->fd != PGINVALID_SOCKET && holds_stray_bytes(c, c->read_all))
	{
		lf_count(LF_C_CONNECTION_DESYNCHRONIZED);
		close_conn(c);
		HOLD_INTERRUPTS();		/* the request's own wait serves a cancel */
		ereport(WARNING,
				errmsg("lease_fence: closed a Redis connection that sent a reply no request asked for"),
				errdetail("Bytes were waiting on it before a request was sent; they were not read as an answer, and the request goes on a new connection."),
				errhint("A Redis server, or something between it and this server, sent them; on a network you do not trust, use TLS (lease_fence.redis_sslmode)."));
		RESUME_INTERRUPTS();
	}
	return false;
}

/* Is reply an error reply whose code (first word) is code? */
bool
lf_redis_is_error(const redisReply *reply, const char *code)
{
	size_t		n = strlen(code);

	return reply->type == REDIS_REPLY_ERROR &&
		strncmp(reply->str, code, n) == 0 &&
		(reply->str[n] == ' ' || reply->str[n] == '\0');
}

/* Write n as decimal digits at p; returns the end. */
static char *
put_decimal(char *p, size_t n)
{
	char		digits[24];
	int			i = sizeof(digits);

	do
	{
		digits[--i] = '0' + n % 10;
		n /= 10;
	} while (n > 0);
	memcpy(p, digits + i, sizeof(digits) - i);
	return p + sizeof(digits) - i;
}

/*
 * Format argv as a RESP request (an array of bulk strings: *argc, then
 * $len and the bytes of each argument) and exchange it.  The request is
 * built in one buffer kept for the backend's life, sized once per request,
 * without printf (it runs for every argument of every command).
 */
static LfSendResult
exchange_argv(LfConn *c, int argc, const char **argv, const size_t *argvlen,
			  int64 deadline, bool interruptible, redisReply **out, char *err)
{
	static StringInfoData request = {NULL, 0, 0, 0};
	size_t		need = 16;
	char	   *p;
	int			i;
	LfSendResult r;

	for (i = 0; i < argc; i++)
		need += argvlen[i] + 26;	/* $, up to 20 digits, 2 CRLFs, the bytes */
	if (request.data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&request);
		MemoryContextSwitchTo(old);
	}
	resetStringInfo(&request);
	enlargeStringInfo(&request, (int) need);

	p = request.data;
	*p++ = '*';
	p = put_decimal(p, (size_t) argc);
	*p++ = '\r';
	*p++ = '\n';
	for (i = 0; i < argc; i++)
	{
		*p++ = '$';
		p = put_decimal(p, argvlen[i]);
		*p++ = '\r';
		*p++ = '\n';
		memcpy(p, argv[i], argvlen[i]);
		p += argvlen[i];
		*p++ = '\r';
		*p++ = '\n';
	}
	request.len = (int) (p - request.data);
	Assert((size_t) request.len < need);
	r = exchange(c, request.data, (size_t) request.len, deadline, interruptible,
				 out, err);
	/* AUTH carries the password: leave none of it in the kept buffer */
	explicit_bzero(request.data, (size_t) request.len);
	return r;
}

/*
 * Is the idle cached connection still usable?  A connection the server has
 * closed (Redis restarted or stopped) reads as EOF; anything else readable
 * on an idle connection means it is not in a state we can trust, except,
 * over TLS, records that carry no data (session tickets), which
 * lf_tls_idle_ok consumes.  Checking before sending is what makes a stopped
 * Redis read as "unavailable" rather than "unknown".
 */
static bool
connection_looks_alive(LfConn *c)
{
	struct pollfd pfd;

	if (c->fd == PGINVALID_SOCKET)
		return false;
	pfd.fd = c->fd;
	pfd.events = POLLIN | POLLRDHUP;
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) < 0)
		return false;
	if (pfd.revents == 0)
		return true;
	if (pfd.revents != POLLIN || c->tls == NULL)
		return false;
	return lf_tls_idle_ok(c->tls);
}

/* Did c answer a command within the last LF_RECENT_ANSWER_MS? */
static bool
answered_recently(const LfConn *c)
{
	return c->answered_at != 0 && lf_now_ms() - c->answered_at < LF_RECENT_ANSWER_MS;
}

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
	r = exchange_argv(c, argc, argv, lens, deadline, interruptible, &reply, why);
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
 * Connect fd to one resolved address, non-blocking.  Returns 1 when
 * connected, 0 on failure (err), -1 at the deadline, -2 on an interrupt.
 */
static int
connect_one(pgsocket fd, const struct sockaddr *addr, socklen_t addrlen,
			int64 deadline, bool interruptible, char *err)
{
	int			soerr = 0;
	socklen_t	solen = sizeof(soerr);
	int			w;

	if (connect(fd, addr, addrlen) == 0)
		return 1;
	if (errno != EINPROGRESS && errno != EINTR)
	{
		snprintf(err, LF_ERRLEN, "%s", strerror(errno));
		return 0;
	}
	/* a non-blocking connect completes when the socket becomes writable */
	w = wait_socket(fd, LF_WANT_WRITE, deadline, interruptible);
	if (w <= 0)
	{
		snprintf(err, LF_ERRLEN, w < 0 ? "interrupted" : "timed out");
		return w < 0 ? -2 : -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &solen) != 0 || soerr != 0)
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
		rc = connect_one(c->fd, (struct sockaddr *) &sun, sizeof(sun), deadline, interruptible, why);
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
			rc = connect_one(c->fd, ai->ai_addr, ai->ai_addrlen, deadline, interruptible, why);
			if (rc == 1)
			{
				freeaddrinfo(res);
				return true;
			}
			close_socket(c);
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
		w = wait_socket(c->fd, want, deadline, interruptible);
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
	r = exchange_argv(c, 1, argv, len, deadline, interruptible, &reply, why);
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

	/* the connection check: after it, nothing stands between us and Redis */
	if (!setup_command(c, 1, ping, "PONG", deadline, interruptible, interrupted, err))
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
	close_conn(c);
	return false;
}

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

	close_abandoned();
	if (connections == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = LF_CONN_KEYLEN;
		ctl.entrysize = sizeof(LfConn);
		connections = hash_create("lease_fence Redis connections", 8, &ctl,
								  HASH_ELEM | HASH_STRINGS);
		on_proc_exit(disconnect_at_exit, (Datum) 0);
	}
	if (last_conn != NULL && last_conn_version == lf_redis_settings_version() &&
		ep->kind == last_ep.kind && ep->check_role == last_ep.check_role &&
		(ep->kind == LF_EP_SETTINGS ||
		 (ep->port == last_ep.port && strcmp(ep->host, last_ep_host) == 0)))
		c = last_conn;
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
		}
		last_conn = c;
		last_conn_version = lf_redis_settings_version();
		last_ep = *ep;
		if (ep->kind != LF_EP_SETTINGS)
			strlcpy(last_ep_host, ep->host, sizeof(last_ep_host));
		if (strlen(ep->kind != LF_EP_SETTINGS ? ep->host : "") >= sizeof(last_ep_host))
			last_conn = NULL;	/* too long to remember: look it up each time */
	}
	/* (replies to read make a socket readable: lf_conn_command reads them) */
	if (c->fd != PGINVALID_SOCKET && c->ndeferred == 0 && !answered_recently(c) &&
		!connection_looks_alive(c))
		close_conn(c);
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
	close_abandoned();

	if (flags & LF_SUBSCRIBER)
	{
		/* always a new connection: one subscription, one wait */
		c = &subscriber;
		close_conn(c);
	}
	else if (flags & LF_SAME_CONN)
	{
		c = last_used;
		if (c != NULL && settle_before_request(c, interruptible))
		{
			CHECK_FOR_INTERRUPTS();
			snprintf(err, LF_ERRLEN, "interrupted while reading the answers to earlier releases");
			return LF_NOT_SENT;
		}
		if (c == NULL || c->fd == PGINVALID_SOCKET ||
			(!answered_recently(c) && !connection_looks_alive(c)))
		{
			if (c != NULL)
				close_conn(c);
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
			close_conn(c);
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
			close_conn(c);
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
	if ((flags & LF_DEFER) && c != &subscriber && c->tls == NULL &&
		c->ndeferred < LF_MAX_DEFERRED && answered_recently(c) && argc > 3)
	{
		r = exchange_argv(c, argc, argv, argvlen, within ? overall : lf_now_ms() + timeout_ms,
						  interruptible, NULL, err);
		if (r == LF_SENT_UNREAD)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			c->deferred_key[c->ndeferred++] = pnstrdup(argv[3], argvlen[3]);
			deferred_total++;
			MemoryContextSwitchTo(old);
			return r;
		}
		close_conn(c);
		return r;
	}

	if (flags & LF_LARGE_REPLY)
		c->bound.limits = &lf_large_reply;
	r = exchange_argv(c, argc, argv, argvlen, within ? overall : lf_now_ms() + timeout_ms,
					  interruptible, reply, err);
	c->bound.limits = &lf_small_reply;
	if (r != LF_REPLY)
		close_conn(c);			/* dead or timed out: never reuse */
	else
	{
		c->answered_at = lf_now_ms();
		if (c != &subscriber)
			last_used = c;
	}
	return r;
}

/*
 * Wait on the subscription connection for a message (a release of the
 * resource it subscribed to) until deadline.  Returns 1 for a message, 0 at
 * the deadline, -1 when an interrupt is pending (the connection is closed
 * then), -2 when there is no subscription (never made, or lost: closed).
 */
int
lf_subscriber_wait(int64 deadline)
{
	LfConn	   *c = &subscriber;
	int			want = LF_WANT_READ;

	close_abandoned();
	for (;;)
	{
		void	   *reply = NULL;
		char		buf[4096];
		char		why[LF_ERRLEN];
		ssize_t		n;
		int			w;

		if (c->fd == PGINVALID_SOCKET)
			return -2;
		/* what arrived with an earlier read comes first */
		if (redisReaderGetReply(c->reader, &reply) != REDIS_OK)
		{
			if (reply)
				freeReplyObject(reply);
			if (c->bound.oversized[0] != '\0')
				report_oversized(c, why);
			close_conn(c);
			return -2;
		}
		if (reply != NULL)
		{
			redisReply *m = (redisReply *) reply;
			bool		message = m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
				m->element[0]->type == REDIS_REPLY_STRING &&
				(strcmp(m->element[0]->str, "message") == 0 ||
				 strcmp(m->element[0]->str, "smessage") == 0);

			c->bound.elements = 0;	/* each message has a bound of its own */

			freeReplyObject(reply);
			if (message)
				return 1;
			/* anything else (a cluster's sunsubscribe as a slot moves): gone */
			close_conn(c);
			return -2;
		}
		if (c->tls == NULL || !lf_tls_pending(c->tls))
			w = wait_socket(c->fd, want, deadline, true);
		else
			w = wait_over(deadline, true);
		if (w < 0)
		{
			close_conn(c);
			return -1;
		}
		if (w == 0)
			return 0;
		n = conn_read(c, buf, sizeof(buf), &want, why);
		if (n < 0)
		{
			close_conn(c);
			return -2;
		}
		if (n == 0)
			continue;
		want = LF_WANT_READ;
		if (!lf_reader_has_room(c->reader, (size_t) n))
		{
			report_oversized(c, why);
			close_conn(c);
			return -2;
		}
		if (redisReaderFeed(c->reader, buf, (size_t) n) != REDIS_OK)
		{
			close_conn(c);
			return -2;
		}
	}
}

/* End the wait's subscription: close its connection. */
void
lf_subscriber_close(void)
{
	close_conn(&subscriber);
}

