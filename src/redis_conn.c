/*-------------------------------------------------------------------------
 *
 * redis_conn.c
 *	  One Redis connection per backend, through hiredis 0.14, with every wait
 *	  bounded and interruptible.
 *
 * The whole point of the lease helper is to tell "no" from "unknown", so this
 * file reports one of four outcomes for each request:
 *
 *	LF_REDIS_OK			 a reply arrived (which may be a Redis error reply);
 *	LF_REDIS_UNAVAILABLE nothing of the request left this backend (connect
 *						 failed or was refused, AUTH failed, a dead cached
 *						 connection was noticed before sending);
 *	LF_REDIS_UNKNOWN	 the request may have reached Redis, but no reply came
 *						 (timeout, connection lost after sending);
 *	LF_REDIS_INTERRUPTED like UNKNOWN, and an interrupt (cancel, statement
 *						 timeout, terminate) is pending: the caller records
 *						 the unknown outcome, then calls CHECK_FOR_INTERRUPTS.
 *
 * hiredis is used in non-blocking mode and we wait on its socket with
 * WaitLatchOrSocket, so a wait ends on the deadline, on the socket, on a
 * latch set by an interrupt, or on postmaster death.  A context that saw any
 * error, or timed out, is freed and never reused: a late reply would
 * otherwise be read as the answer to the next command.  hiredis 0.14 quirks:
 * a context is dead after any error (we free it, never clear err), and
 * redisReconnect would drop socket options, so we never use it.
 *
 * IDENTIFICATION
 *	  src/redis_conn.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <hiredis/sds.h>

#include "compat.h"
#include "lease_fence.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

/* GUCs (defined in lease_fence.c) */
char	   *lf_redis_host = NULL;
int			lf_redis_port = 6379;
char	   *lf_redis_socket = NULL;
int			lf_redis_db = 0;
char	   *lf_redis_user = NULL;
char	   *lf_redis_password_file = NULL;
int			lf_connect_timeout_ms = 1000;
int			lf_command_timeout_ms = 1000;
int			lf_cleanup_timeout_ms = 500;

/* the cached connection, and the settings it was made with */
static redisContext *cached_conn = NULL;
static char cached_target[1024];
static bool exit_hook_registered = false;

/*
 * Bumped each time a new connection is cached, so that lease.c can do its
 * once-per-connection check of the key_prefix owner (see lease.c).
 */
uint64		lf_redis_connection_serial = 0;

/*
 * The wait event set for the socket we wait on, kept while that socket
 * lives: building one per wait costs an epoll instance and four system
 * calls, a measurable part of a lease round trip.
 */
static WaitEventSet *wait_set = NULL;
static pgsocket wait_set_fd = PGINVALID_SOCKET;
static int	wait_set_pos = -1;
static uint32 wait_set_events = 0;

/* longest password we read from redis_password_file */
#define LF_MAX_PASSWORD 512

/* Milliseconds on the monotonic clock. */
int64
lf_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The settings that decide where we connect, as one comparable string. */
static void
describe_target(char *buf, size_t len)
{
	snprintf(buf, len, "%s|%s|%d|%d|%s|%s",
			 lf_redis_socket ? lf_redis_socket : "",
			 lf_redis_host ? lf_redis_host : "",
			 lf_redis_port, lf_redis_db,
			 lf_redis_user ? lf_redis_user : "",
			 lf_redis_password_file ? lf_redis_password_file : "");
}

/*
 * Free a hiredis context, and the wait event set of its socket first: once
 * the socket is closed its number may be reused by the next connection,
 * which the old epoll registration would not watch.
 */
static void
free_context(redisContext *c)
{
	if (wait_set != NULL && c->fd == wait_set_fd)
	{
		FreeWaitEventSet(wait_set);
		wait_set = NULL;
		wait_set_fd = PGINVALID_SOCKET;
	}
	redisFree(c);
}

/* Free the cached connection, if any. */
void
lf_redis_disconnect(void)
{
	if (cached_conn != NULL)
	{
		free_context(cached_conn);
		cached_conn = NULL;
	}
}

/*
 * Wait until the socket is readable (or writable) or the deadline passes.
 * Returns 1 when ready, 0 on timeout, -1 when an interrupt is pending and
 * may be processed now (only if interruptible).  Postmaster death ends the
 * process.
 */
static int
wait_socket(pgsocket fd, bool for_write, int64 deadline, bool interruptible)
{
	uint32		want = for_write ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE;

	if (wait_set == NULL || wait_set_fd != fd)
	{
		if (wait_set != NULL)
			FreeWaitEventSet(wait_set);
		wait_set = lf_create_session_wait_set(3);
		AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		if (IsUnderPostmaster)
			AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		wait_set_pos = AddWaitEventToSet(wait_set, want, fd, NULL, NULL);
		wait_set_fd = fd;
		wait_set_events = want;
	}
	else if (wait_set_events != want)
	{
		ModifyWaitEvent(wait_set, wait_set_pos, want, NULL);
		wait_set_events = want;
	}

	for (;;)
	{
		int64		now = lf_now_ms();
		WaitEvent	event;
		int			n;

		if (now >= deadline)
			return 0;
		n = WaitEventSetWait(wait_set, (long) (deadline - now), &event, 1, PG_WAIT_EXTENSION);
		if (n == 0)
			continue;			/* timed out: the loop checks the deadline */
		if (event.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			if (interruptible && INTERRUPTS_PENDING_CONDITION() && INTERRUPTS_CAN_BE_PROCESSED())
				return -1;
			continue;
		}
		if (event.events & want)
			return 1;
	}
}

/*
 * Is the idle cached connection still usable?  A connection the server has
 * closed (Redis restarted or stopped) reads as EOF; anything readable on an
 * idle connection means it is not in a state we can trust.  Checking before
 * sending is what makes a stopped Redis read as "unavailable" rather than
 * "unknown".
 */
static bool
connection_looks_alive(redisContext *c)
{
	struct pollfd pfd;

	if (c->err)
		return false;
	pfd.fd = c->fd;
	pfd.events = POLLIN | POLLRDHUP;
	pfd.revents = 0;
	if (poll(&pfd, 1, 0) < 0)
		return false;
	return pfd.revents == 0;
}

/*
 * Read the password from redis_password_file into buf.  The file must be a
 * regular file owned by the server's OS user and not readable by group or
 * others, like a .pgpass file.  Returns false with a message (never the
 * password) in err.
 *
 * The file is opened with O_NONBLOCK and its type checked on the open
 * descriptor before anything is read: a plain open() of a FIFO waits for a
 * writer, without bound and deaf to cancel and terminate (PostgreSQL's
 * signal handlers restart it).  Opening a FIFO for reading without blocking
 * returns at once, and O_NOCTTY keeps a terminal device from becoming our
 * controlling terminal before it is refused.  O_NONBLOCK does not change
 * how a regular file is read (POSIX: it has no effect there), so the read
 * below is the same as before.  Checking the descriptor, not the path, also
 * follows symlinks to what is actually opened.
 */
static bool
read_password(char *buf, size_t buflen, char *err, size_t errlen)
{
	int			fd;
	struct stat st;
	ssize_t		n;

	fd = open(lf_redis_password_file, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
	{
		snprintf(err, errlen, "could not open lease_fence.redis_password_file: %s", strerror(errno));
		return false;
	}
	if (fstat(fd, &st) != 0)
	{
		snprintf(err, errlen, "could not stat lease_fence.redis_password_file: %s", strerror(errno));
		close(fd);
		return false;
	}
	if (!S_ISREG(st.st_mode))
	{
		close(fd);
		snprintf(err, errlen, "lease_fence.redis_password_file is not a regular file (it is %s)",
				 S_ISFIFO(st.st_mode) ? "a FIFO" :
				 S_ISDIR(st.st_mode) ? "a directory" :
				 S_ISCHR(st.st_mode) ? "a character device" :
				 S_ISBLK(st.st_mode) ? "a block device" :
				 S_ISSOCK(st.st_mode) ? "a socket" : "of another type");
		return false;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		close(fd);
		snprintf(err, errlen, "lease_fence.redis_password_file must be owned by the server's user and have no group or world access (chmod 0600)");
		return false;
	}
	n = read(fd, buf, buflen - 1);
	close(fd);
	if (n < 0)
	{
		snprintf(err, errlen, "could not read lease_fence.redis_password_file: %s", strerror(errno));
		return false;
	}
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
		buf[--n] = '\0';
	return true;
}

/*
 * Send one command on c and wait for its reply until deadline.  *sent tells
 * whether any byte of it left the backend.  On anything but LF_REDIS_OK the
 * context is dead and the caller must free it.
 */
static LfRedisResult
exchange(redisContext *c, int argc, const char **argv, const size_t *argvlen,
		 int64 deadline, bool interruptible, redisReply **out, bool *sent,
		 char *err, size_t errlen)
{
	int			done = 0;
	int			w;

	*out = NULL;
	*sent = false;
	if (redisAppendCommandArgv(c, argc, argv, argvlen) != REDIS_OK)
	{
		snprintf(err, errlen, "could not format the command: %s", c->errstr);
		return LF_REDIS_UNAVAILABLE;
	}

	while (!done)
	{
		size_t		before = sdslen(c->obuf);

		if (redisBufferWrite(c, &done) != REDIS_OK)
		{
			snprintf(err, errlen, "could not send to Redis: %s", c->errstr);
			return *sent ? LF_REDIS_UNKNOWN : LF_REDIS_UNAVAILABLE;
		}
		if (done || sdslen(c->obuf) != before)
			*sent = true;
		if (done)
			break;
		w = wait_socket(c->fd, true, deadline, interruptible);
		if (w <= 0)
		{
			snprintf(err, errlen, "timed out sending to Redis");
			if (w < 0)
				return *sent ? LF_REDIS_INTERRUPTED : LF_REDIS_UNAVAILABLE;
			return *sent ? LF_REDIS_UNKNOWN : LF_REDIS_UNAVAILABLE;
		}
	}

	for (;;)
	{
		void	   *reply = NULL;

		if (redisGetReplyFromReader(c, &reply) != REDIS_OK)
		{
			snprintf(err, errlen, "could not parse the reply from Redis: %s", c->errstr);
			return LF_REDIS_UNKNOWN;
		}
		if (reply != NULL)
		{
			*out = (redisReply *) reply;
			return LF_REDIS_OK;
		}
		w = wait_socket(c->fd, false, deadline, interruptible);
		if (w < 0)
		{
			snprintf(err, errlen, "interrupted while waiting for Redis");
			return LF_REDIS_INTERRUPTED;
		}
		if (w == 0)
		{
			snprintf(err, errlen, "timed out waiting for Redis");
			return LF_REDIS_UNKNOWN;
		}
		if (redisBufferRead(c) != REDIS_OK)
		{
			snprintf(err, errlen, "lost the connection to Redis: %s", c->errstr);
			return LF_REDIS_UNKNOWN;
		}
	}
}

/*
 * Send a handshake command (AUTH, SELECT) and expect +OK.  Nothing of the
 * lease has been sent yet, so any failure makes the lease "unavailable".
 */
static bool
handshake(redisContext *c, int argc, const char **argv, int64 deadline,
		  bool interruptible, bool *interrupted, char *err, size_t errlen)
{
	redisReply *reply;
	bool		sent;
	LfRedisResult r;
	size_t		lens[3];
	int			i;

	for (i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	r = exchange(c, argc, argv, lens, deadline, interruptible, &reply, &sent, err, errlen);
	if (r == LF_REDIS_INTERRUPTED)
		*interrupted = true;
	if (r != LF_REDIS_OK)
		return false;
	if (reply->type != REDIS_REPLY_STATUS || strcmp(reply->str, "OK") != 0)
	{
		/* copy Redis's words, then free: the reply is malloc'd */
		snprintf(err, errlen, "%s failed: %s", argv[0],
				 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		freeReplyObject(reply);
		return false;
	}
	freeReplyObject(reply);
	return true;
}

/*
 * Open, and authenticate, a new connection, waiting at most until deadline.
 * Returns NULL with a message in err.  *interrupted is set when it gave up
 * because of a pending interrupt.
 */
static redisContext *
connect_redis(int64 deadline, bool interruptible, bool *interrupted, char *err, size_t errlen)
{
	redisContext *c;
	int			soerr = 0;
	socklen_t	solen = sizeof(soerr);
	int			w;

	*interrupted = false;
	if (lf_redis_socket && lf_redis_socket[0] != '\0')
		c = redisConnectUnixNonBlock(lf_redis_socket);
	else
		c = redisConnectNonBlock(lf_redis_host ? lf_redis_host : "127.0.0.1", lf_redis_port);
	if (c == NULL)
	{
		snprintf(err, errlen, "could not allocate a Redis context");
		return NULL;
	}
	if (c->err)
	{
		snprintf(err, errlen, "could not connect to Redis: %s", c->errstr);
		free_context(c);
		return NULL;
	}

	/* a non-blocking connect completes when the socket becomes writable */
	w = wait_socket(c->fd, true, deadline, interruptible);
	if (w <= 0)
	{
		*interrupted = (w < 0);
		snprintf(err, errlen, "timed out connecting to Redis");
		free_context(c);
		return NULL;
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &solen) != 0 || soerr != 0)
	{
		snprintf(err, errlen, "could not connect to Redis: %s", strerror(soerr ? soerr : errno));
		free_context(c);
		return NULL;
	}

	if (lf_redis_password_file && lf_redis_password_file[0] != '\0')
	{
		char		password[LF_MAX_PASSWORD];
		const char *argv[3];
		int			argc = 0;
		bool		ok;

		if (!read_password(password, sizeof(password), err, errlen))
		{
			free_context(c);
			return NULL;
		}
		argv[argc++] = "AUTH";
		if (lf_redis_user && lf_redis_user[0] != '\0')
			argv[argc++] = lf_redis_user;
		argv[argc++] = password;
		ok = handshake(c, argc, argv, deadline, interruptible, interrupted, err, errlen);
		explicit_bzero(password, sizeof(password));
		if (!ok)
		{
			free_context(c);
			return NULL;
		}
	}
	else if (lf_redis_user && lf_redis_user[0] != '\0')
	{
		snprintf(err, errlen, "lease_fence.redis_user is set but lease_fence.redis_password_file is not");
		free_context(c);
		return NULL;
	}

	if (lf_redis_db != 0)
	{
		char		db[16];
		const char *argv[2];

		snprintf(db, sizeof(db), "%d", lf_redis_db);
		argv[0] = "SELECT";
		argv[1] = db;
		if (!handshake(c, 2, argv, deadline, interruptible, interrupted, err, errlen))
		{
			free_context(c);
			return NULL;
		}
	}
	return c;
}

/*
 * Is there a cached connection that lf_redis_command would use as it is?
 * One made with other settings, or that looks dead, is dropped here, so the
 * next command opens a new one (and lf_redis_connection_serial moves).
 * lease.c asks before trusting the answer it keeps per connection.
 */
bool
lf_redis_connection_alive(void)
{
	char		target[sizeof(cached_target)];

	if (cached_conn == NULL)
		return false;
	describe_target(target, sizeof(target));
	if (strcmp(target, cached_target) != 0 || !connection_looks_alive(cached_conn))
	{
		lf_redis_disconnect();
		return false;
	}
	return true;
}

/* on_proc_exit: free the connection hiredis malloc'd */
static void
disconnect_at_exit(int code, Datum arg)
{
	lf_redis_disconnect();
}

/*
 * Run one command.  With fresh, a new connection is opened for it (the
 * cleanup after an unknown outcome must not share the connection that timed
 * out); otherwise the cached one is used if it still looks alive.
 * timeout_ms bounds the command (and, for fresh connections, the connect as
 * well); connect_timeout_ms bounds a normal connect.  On LF_REDIS_OK *reply
 * is a malloc'd hiredis reply the caller must freeReplyObject().
 */
LfRedisResult
lf_redis_command(int argc, const char **argv, const size_t *argvlen,
				 int timeout_ms, bool fresh, bool interruptible,
				 redisReply **reply, char *err, size_t errlen)
{
	char		target[sizeof(cached_target)];
	redisContext *c;
	LfRedisResult r;
	bool		sent;
	int64		deadline;
	int64		overall;

	*reply = NULL;
	err[0] = '\0';

	if (!exit_hook_registered)
	{
		on_proc_exit(disconnect_at_exit, (Datum) 0);
		exit_hook_registered = true;
	}

	describe_target(target, sizeof(target));
	if (cached_conn != NULL &&
		(fresh || strcmp(target, cached_target) != 0 || !connection_looks_alive(cached_conn)))
		lf_redis_disconnect();

	/* a fresh connection's connect and command share one deadline */
	overall = lf_now_ms() + timeout_ms;

	if (cached_conn == NULL)
	{
		bool		interrupted;

		deadline = fresh ? overall : lf_now_ms() + lf_connect_timeout_ms;
		cached_conn = connect_redis(deadline, interruptible, &interrupted, err, errlen);
		if (cached_conn == NULL)
		{
			/* nothing of the command was sent: a cancel can act right away */
			if (interrupted)
				CHECK_FOR_INTERRUPTS();
			return LF_REDIS_UNAVAILABLE;
		}
		strlcpy(cached_target, target, sizeof(cached_target));
		lf_redis_connection_serial++;
	}
	c = cached_conn;

	deadline = fresh ? overall : lf_now_ms() + timeout_ms;
	r = exchange(c, argc, argv, argvlen, deadline, interruptible, reply, &sent, err, errlen);
	if (r != LF_REDIS_OK)
		lf_redis_disconnect();		/* dead or timed out: never reuse */
	return r;
}
