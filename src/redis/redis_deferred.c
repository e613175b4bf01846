/*-------------------------------------------------------------------------
 *
 * redis_deferred.c
 *	  The deferred replies: a release after COMMIT (LF_DEFER) is only sent,
 *	  and its reply is read before its connection's next request, or at
 *	  exit, or never (the connection closed): each counts as a cleanup
 *	  confirmed or unconfirmed.  And closing a connection, which forgets
 *	  the replies it owes.
 *
 * Invariants: a connection owes at most LF_MAX_DEFERRED replies, read in
 * the order their requests went; every one is counted exactly once
 * (confirmed when read with the release's own answer, unconfirmed
 * otherwise); a WARNING about one never names its key (it may reach
 * another client's statement behind a pooler), the server log does.
 *
 * IDENTIFICATION
 *	  src/redis/redis_deferred.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "base/stats.h"
#include "miscadmin.h"
#include "redis/internal.h"
#include "utils/memutils.h"

/*
 * The requests sent with LF_DEFER whose replies are unread, on every
 * connection.  File-scope: a count over the whole cache, so that a request
 * looks at the other connections only when one of them owes a reply.
 */
static int	deferred_total = 0;

/*
 * on_proc_exit has run: shared memory is gone, so nothing is counted or
 * said.  File-scope: set once, by the exit callback of redis_conn.c.
 */
static bool exiting = false;

/* ---------------------------------------------------------------------
 * Registering a deferred request, and how many are unread
 * ---------------------------------------------------------------------
 */

/*
 * c sent a request with LF_DEFER whose reply is to be read later: remember
 * its key (in TopMemoryContext) for the server log.
 */
void
lf_deferred_sent(LfConn *c, const char *key, size_t keylen)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	c->deferred_key[c->ndeferred++] = pnstrdup(key, keylen);
	deferred_total++;
	MemoryContextSwitchTo(old);
}

/* The replies owed on every connection together. */
int
lf_deferred_total(void)
{
	return deferred_total;
}

/* The backend exits, shared memory is gone: count and say nothing more. */
void
lf_deferred_at_exit(void)
{
	exiting = true;
}

/* ---------------------------------------------------------------------
 * Closing a connection: the replies it owes are forgotten
 * ---------------------------------------------------------------------
 */

/*
 * The replies of c's deferred requests will never be read (the connection
 * is closed, or was lost): each counts as an unconfirmed cleanup, and one
 * WARNING says how many.  That WARNING reaches whatever statement runs
 * now, which behind a pooler may be another client's: it names no key (the
 * server log does).  A request already sent is still run by Redis unless
 * Redis finds the connection closed before it reads it; either way its key
 * expires by its TTL.
 */
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
					errmsg("the release of key \"%s\" sent after COMMIT is unconfirmed: its connection was closed before the answer was read",
						   c->deferred_key[i]));
		}
		pfree(c->deferred_key[i]);
		c->deferred_key[i] = NULL;
	}
	c->ndeferred = 0;
	deferred_total -= n;
	if (n > 0 && !exiting)
		ereport(WARNING,
				errmsg("%d lease releases sent after an earlier COMMIT are unconfirmed", n),
				errdetail("Their Redis connection was closed before their answers were read."),
				errhint("Those leases expire by their TTL; writes under their generations are still fenced. The server log names their keys."));
	RESUME_INTERRUPTS();
}


/*
 * Close c: its socket, TLS session and reader (redis_io.c), and the
 * replies it still owes, which will never be read.  The entry stays.
 */
void
lf_conn_close(LfConn *c)
{
	lf_close_socket(c);
	if (c->reader)
		redisReaderFree(c->reader);
	c->reader = NULL;
	c->serial = 0;
	c->answered_at = 0;
	forget_deferred(c);
}

/* Close the connection an error left in the middle of an exchange, if any. */
void
lf_close_abandoned(void)
{
	LfConn	   *c = lf_abandoned_conn();

	if (unlikely(c != NULL))
	{
		lf_conn_close(c);
		lf_forget_abandoned();
	}
}


/* ---------------------------------------------------------------------
 * Reading the replies owed
 * ---------------------------------------------------------------------
 */

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
bool
lf_drain_deferred_by(LfConn *c, int64 deadline, bool interruptible, bool *interrupted)
{
	while (c->ndeferred > 0)
	{
		redisReply *reply = NULL;
		char		err[LF_ERRLEN];
		char	   *key = c->deferred_key[0];
		LfSendResult r;
		bool		confirmed;

		r = lf_read_deferred_reply(c, deadline, interruptible, &reply, err);
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
					errmsg("could not confirm the release of key \"%s\" sent after COMMIT", key),
					errdetail("%s", err));
			ereport(WARNING,
					errmsg("could not confirm a lease release sent after an earlier COMMIT"),
					errdetail("%s", r == LF_REPLY ? "Redis did not answer it with the release's result." : err),
					errhint("The lease expires by its TTL; writes under its generation are still fenced. The server log names its key."));
		}
		pfree(key);
		if (r != LF_REPLY)
			lf_conn_close(c);		/* the rest count as unconfirmed */
		RESUME_INTERRUPTS();
		if (r != LF_REPLY)
			return false;
		c->answered_at = lf_now_ms();
	}
	return true;
}

