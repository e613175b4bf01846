/*-------------------------------------------------------------------------
 *
 * redis_subscriber.c
 *	  The subscriber: the connection a waiting acquire listens on for the
 *	  release of its resource (SUBSCRIBE, or SSUBSCRIBE on a Cluster).
 *
 * Invariants: it is never cached and never takes another command; it is
 * opened for one wait (lf_conn_command with LF_SUBSCRIBER) and closed when
 * the wait ends; anything but a message on it (a Cluster's sunsubscribe as
 * a slot moves, an oversized or unparsable reply) ends the subscription.
 *
 * IDENTIFICATION
 *	  src/redis/redis_subscriber.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "redis/internal.h"

/*
 * The subscription connection of a waiting acquire.  File-scope: a backend
 * waits for one lease at a time, and the wait (lf_subscriber_wait) is
 * called from above without a handle.
 */
static LfConn subscriber = {.fd = PGINVALID_SOCKET};

/* The subscription's connection, for lf_conn_command to open. */
LfConn *
lf_subscriber_conn(void)
{
	return &subscriber;
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

	lf_close_abandoned();
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
				lf_report_oversized(c, why);
			lf_conn_close(c);
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
			lf_conn_close(c);
			return -2;
		}
		if (c->tls == NULL || !lf_tls_pending(c->tls))
			w = lf_wait_socket(c, want, deadline, true);
		else
			w = lf_wait_over(deadline, true);
		if (w < 0)
		{
			lf_conn_close(c);
			return -1;
		}
		if (w == 0)
			return 0;
		n = lf_conn_read(c, buf, sizeof(buf), &want, why);
		if (n < 0)
		{
			lf_conn_close(c);
			return -2;
		}
		if (n == 0)
			continue;
		want = LF_WANT_READ;
		if (!lf_reader_has_room(c->reader, (size_t) n))
		{
			lf_report_oversized(c, why);
			lf_conn_close(c);
			return -2;
		}
		if (redisReaderFeed(c->reader, buf, (size_t) n) != REDIS_OK)
		{
			lf_conn_close(c);
			return -2;
		}
	}
}

/* End the wait's subscription: close its connection. */
void
lf_subscriber_close(void)
{
	lf_conn_close(&subscriber);
}


