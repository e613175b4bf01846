/*-------------------------------------------------------------------------
 *
 * redis_io.c
 *	  Socket I/O and the RESP exchange on one connection: bounded,
 *	  interruptible waits; a request formatted (an array of bulk strings)
 *	  and sent; its reply read through hiredis's bounded reader.
 *
 * Every wait ends by its deadline, by an interrupt that ends waits
 * (interruptible only), or by the exit budget once a termination is
 * pending.  An exchange ends in one of the LfSendResults: on anything but
 * LF_REPLY (or LF_SENT_UNREAD) the connection is in an unknown state and
 * its caller closes it; a late reply is never read as the answer to the
 * next request.  A connection's wait event set is its own (LfConn), kept
 * while its socket lives; one is open at a time.
 *
 * IDENTIFICATION
 *	  src/redis/redis_io.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <sys/socket.h>
#include <poll.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "base/compat.h"
#include "base/stats.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "redis/internal.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

/* the lease registry's exit budget, once a termination is pending (redis.h) */
int64		(*lf_die_deadline_hook) (void) = NULL;

/*
 * The connection an exchange is under way on; NULL between exchanges.  An
 * error thrown out of the middle of one (by an interrupt served during its
 * wait, say) leaves it set: that connection may still deliver the reply,
 * which would be read as the answer to its next command, so it is closed
 * before anything else runs on a connection (lf_close_abandoned).
 * File-scope: the error unwinds past every frame that could hold it.
 */
static LfConn *in_flight = NULL;

/*
 * The connection whose wait event set is open, if any.  File-scope: a set
 * is an epoll instance, counted as one of the backend's open files, so one
 * is kept at a time (building one per wait would cost four system calls,
 * a measurable part of a lease round trip).
 */
static LfConn *waiter = NULL;

/* ---------------------------------------------------------------------
 * Closing a socket, and what an oversized reply is
 * ---------------------------------------------------------------------
 */

/*
 * c sent a reply larger than its bound: count it, and say so (the
 * connection is closed by the caller; the request's outcome is in err).
 */
void
lf_report_oversized(LfConn *c, char *err)
{
	snprintf(err, LF_ERRLEN, "oversized reply from Redis: %s; the connection was closed", c->bound.oversized);
	lf_count(LF_C_CONNECTION_OVERSIZED_REPLY);
	HOLD_INTERRUPTS();			/* the caller serves a cancel once it closed c */
	ereport(WARNING,
			errmsg("closed a Redis connection that sent an oversized reply"),
			errdetail("It sent %s, more than lease_fence reads in a reply; none of it was kept.",
					  c->bound.oversized),
			errhint("lease_fence's requests are answered in a few short values. A Redis server, or something between it and this server, sent it; on a network you do not trust, use TLS (lease_fence.redis_sslmode)."));
	RESUME_INTERRUPTS();
}


/*
 * Close a connection's socket, TLS session and reader; the entry stays.  The
 * wait event set of the socket goes first: once closed, the socket's number
 * may be reused by the next connection, which the old epoll registration
 * would not watch.
 */
void
lf_close_socket(LfConn *c)
{
	if (c->wait_set != NULL)
	{
		FreeWaitEventSet(c->wait_set);
		c->wait_set = NULL;
		if (waiter == c)
			waiter = NULL;
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


/* ---------------------------------------------------------------------
 * Bounded, interruptible waits
 * ---------------------------------------------------------------------
 */

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
int
lf_wait_over(int64 deadline, bool interruptible)
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
 * Wait until c's socket is readable (want LF_WANT_READ) or writable, or the deadline
 * passes.  Returns 1 when ready, 0 on timeout, -1 when an interrupt that
 * ends the wait is pending and may be processed now (only if
 * interruptible; other interrupts are served during the wait).  Postmaster
 * death ends the process.
 */
int
lf_wait_socket(LfConn *c, int want, int64 deadline, bool interruptible)
{
	uint32		events = want == LF_WANT_WRITE ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;

	if (c->wait_set == NULL)
	{
		/* the set of the connection that waited before goes: one at a time */
		if (waiter != NULL)
		{
			FreeWaitEventSet(waiter->wait_set);
			waiter->wait_set = NULL;
		}
		c->wait_set = lf_create_session_wait_set(3);
		AddWaitEventToSet(c->wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		if (IsUnderPostmaster)
			AddWaitEventToSet(c->wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		c->wait_pos = AddWaitEventToSet(c->wait_set, events, c->fd, NULL, NULL);
		c->wait_events = events;
		waiter = c;
	}
	else if (c->wait_events != events)
	{
		ModifyWaitEvent(c->wait_set, c->wait_pos, events, NULL);
		c->wait_events = events;
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
		n = WaitEventSetWait(c->wait_set, (long) (deadline - now), &event, 1, lf_wait_event());
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


/* ---------------------------------------------------------------------
 * Bytes in and out, and the RESP exchange
 * ---------------------------------------------------------------------
 */

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
ssize_t
lf_conn_read(LfConn *c, char *buf, size_t len, int *want, char *err)
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
		w = lf_wait_socket(c, want, deadline, interruptible);
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
				lf_report_oversized(c, err);
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
			w = lf_wait_over(deadline, interruptible);
		}
		else
			w = lf_wait_socket(c, want, deadline, interruptible);
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
		n = lf_conn_read(c, buf, sizeof(buf), &want, why);
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
			lf_report_oversized(c, err);
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
 * Read the reply of c's oldest deferred request (redis_deferred.c), trying
 * the read before any wait: its request went a while ago.
 */
LfSendResult
lf_read_deferred_reply(LfConn *c, int64 deadline, bool interruptible,
					   redisReply **out, char *err)
{
	LfSendResult r;

	in_flight = c;
	r = read_reply(c, deadline, interruptible, true, out, err);
	in_flight = NULL;
	return r;
}

/* The connection an error left in the middle of an exchange; NULL: none. */
LfConn *
lf_abandoned_conn(void)
{
	return in_flight;
}

/* ... closed now (redis_deferred.c's lf_close_abandoned). */
void
lf_forget_abandoned(void)
{
	in_flight = NULL;
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
LfSendResult
lf_exchange_argv(LfConn *c, int argc, const char **argv, const size_t *argvlen,
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


/* ---------------------------------------------------------------------
 * Is a connection fit for a request?
 * ---------------------------------------------------------------------
 */

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
bool
lf_holds_stray_bytes(LfConn *c, bool just_read_all)
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
 * Is the idle cached connection still usable?  A connection the server has
 * closed (Redis restarted or stopped) reads as EOF; anything else readable
 * on an idle connection means it is not in a state we can trust, except,
 * over TLS, records that carry no data (session tickets), which
 * lf_tls_idle_ok consumes.  Checking before sending is what makes a stopped
 * Redis read as "unavailable" rather than "unknown".
 */
bool
lf_connection_looks_alive(LfConn *c)
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
bool
lf_answered_recently(const LfConn *c)
{
	return c->answered_at != 0 && lf_now_ms() - c->answered_at < LF_RECENT_ANSWER_MS;
}
