/*-------------------------------------------------------------------------
 *
 * acquire_wait.c
 *	  An acquire that waits while the lease is busy (wait_ms): the
 *	  subscription to the resource's release channel and the backoff loop.
 *
 * Invariants: the wait ends by its deadline, each of its requests by the
 * wait's hard deadline (one command_timeout_ms later); a release between
 * a busy answer and the subscription is not missed (another attempt
 * follows the subscription); the subscription ends with the wait.
 *
 * IDENTIFICATION
 *	  src/lease/acquire_wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lease/internal.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/wait_event.h"

#define LF_WAIT_POLL_MAX_MS 250
/* a subscribed waiter looks again at least this often (a lost message) */
#define LF_WAIT_RECHECK_MS 1000
/* stale answers retried in one wait (each heals the next generation) */
#define LF_WAIT_MAX_STALE 3

/* ms in [ms/2, ms]: waiters that polled together do not stay in step */
static int64
jittered(int64 ms)
{
	uint32		r;

	if (ms < 2 || !pg_strong_random(&r, sizeof(r)))
		return ms;
	return ms / 2 + (int64) (r % (uint32) (ms / 2 + 1));
}

/* Sleep until wake (lf_now_ms()) or the latch; an interrupt acts here. */
static void
nap(int64 now, int64 wake)
{
	int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   (long) Max(wake - now, 1), lf_wait_event());

	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * Subscribe a wait (lf_subscribe_release or lf_subscribe_wake, as channel
 * says: NULL the resource's release channel, else that waiter's own), once:
 * *subscribed, or *no_subscription when it failed (the wait polls then).
 */
static void
subscribe_once(LfRequest *req, const char *resource, const char *waiter,
			   bool *subscribed, bool *no_subscription)
{
	char		err[LF_ERRLEN];
	int			timeout = lf_request_timeout(req, lf_connect_timeout_ms);

	if (waiter ? lf_subscribe_wake(resource, waiter, timeout, err) :
		lf_subscribe_release(resource, timeout, err))
		*subscribed = true;
	else
	{
		char		buf[LF_ERRLEN];

		*no_subscription = true;
		ereport(DEBUG1,
				errmsg("waiting for resource \"%s\" without a subscription: %s",
					   resource, lf_visible_error(err, buf, sizeof(buf))));
	}
}

/*
 * Wait on the subscription until wake: a message is counted, an interrupt
 * acts (or is an ERROR), and a subscription that is gone turns the wait
 * into polling (*subscribed false, *no_subscription): its server may be
 * going down (killed, failing over) while the connection the next attempt
 * would use does not show it yet, so that one is dropped too -- the
 * attempt connects anew ("unavailable", tried again) instead of sending
 * into a dying connection (an unknown outcome) -- after a poll interval.
 */
static void
wait_subscribed(const char *resource, int64 wake, int64 deadline, int64 poll,
				bool *subscribed, bool *no_subscription)
{
	int			w = lf_subscriber_wait(wake);

	if (w == 1)
		lf_count(LF_C_WAIT_WOKEN);
	else if (w == -1)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR,
				errcode(ERRCODE_QUERY_CANCELED),
				errmsg("wait for resource \"%s\" interrupted", resource));
	}
	else if (w == -2)
	{
		int64		now;

		*subscribed = false;
		*no_subscription = true;
		(void) lf_redis_disconnect_all();
		now = lf_now_ms();
		nap(now, Min(deadline, now + jittered(poll)));
	}
}

/*
 * Acquire, waiting until deadline while the lease is busy.  The wait is
 * woken by the release script's message on the resource's channel (a
 * subscription made after the first busy answer, and followed by another
 * attempt, so a release in between is not missed), by the holder's lease
 * running out (the busy answer's PTTL), and, without a subscription, by a
 * jittered backoff.  The attempts of one wait share a generation until one
 * is not busy (see lf_acquire_once).
 */
static Datum
acquire_waiting(FunctionCallInfo fcinfo, LfRequest *req, const AcquireArgs *a, int64 deadline)
{
	bool		subscribed = false;
	bool		no_subscription = false;
	bool		waited = false;
	int			stale = 0;
	int64		poll = 10;
	int64		spare = 0;

	for (;;)
	{
		int64		pttl = -1;
		Datum		row = (Datum) 0;
		bool		retry = false;
		LfCounter	status = lf_acquire_once(fcinfo, req, a, &spare, &pttl, &row, &retry);
		int64		now;
		int64		wake;

		if (status != LF_C_ACQUIRE_BUSY && status != LF_C_ACQUIRE_STALE && !retry)
			return row;
		now = lf_now_ms();
		if (retry)
		{
			/*
			 * Nothing held, but no answer either (Redis unreachable, a
			 * failover under way, an unknown outcome released again): not
			 * yet.  Try again after the backoff of an unsubscribed wait;
			 * at the deadline, this attempt's outcome is the answer.
			 */
			if (now >= deadline)
				return row;
			nap(now, Min(deadline, now + jittered(poll)));
			poll = Min(poll * 2, LF_WAIT_POLL_MAX_MS);
			continue;
		}
		if (now >= deadline || (status == LF_C_ACQUIRE_STALE && ++stale > LF_WAIT_MAX_STALE))
		{
			if (waited && status == LF_C_ACQUIRE_BUSY)
				lf_count(LF_C_WAIT_DEADLINE);
			return lf_status_row(fcinfo, req, status, a->resource);
		}
		if (status == LF_C_ACQUIRE_STALE)
			continue;			/* healed: the next generation is above */
		if (!waited)
		{
			lf_count(LF_C_WAIT_WAITED);
			waited = true;
		}
		if (!subscribed && !no_subscription)
		{
			subscribe_once(req, a->resource, NULL, &subscribed, &no_subscription);
			continue;			/* a release before the subscription was missed: ask again */
		}

		/* until the holder's lease runs out, a release, or the deadline */
		wake = deadline;
		if (pttl >= 0)
			wake = Min(wake, now + pttl + 1);
		if (subscribed)
			wake = Min(wake, now + LF_WAIT_RECHECK_MS);
		else
		{
			wake = Min(wake, now + jittered(poll));
			poll = Min(poll * 2, LF_WAIT_POLL_MAX_MS);
		}
		if (!subscribed)
		{
			nap(now, wake);
			continue;
		}
		wait_subscribed(a->resource, wake, deadline, poll, &subscribed, &no_subscription);
	}
}

/*
 * A fair acquire, waiting until deadline: its place in the resource's
 * queue is taken by its first request (acquire_fair.lua) and kept under one
 * identity, renewed by a request at least every third of
 * lease_fence.fair_waiter_ttl_ms.  Woken by a message on its own channel,
 * which a release sends to the queue's head only (and a waiter leaving, or
 * a request finding the lease free while another waiter is the head); the
 * head also wakes when the holder's lease runs out.  Its subscription is
 * made after the first busy answer; at the head, another request follows
 * it (a release in between was sent to nobody).  However the wait ends
 * without a grant, it leaves the queue: here when its answer ends it, at
 * the end of its (sub)transaction when an error does (lease_registry.c).
 */
static Datum
acquire_fair_waiting(FunctionCallInfo fcinfo, LfRequest *req, AcquireArgs *a, int64 deadline)
{
	bool		subscribed = false;
	bool		no_subscription = false;
	bool		waited = false;
	int			stale = 0;
	int64		poll = 10;
	int64		spare = 0;
	int64		renew_every = Max(lf_fair_waiter_ttl_ms / 3, 1);

	lf_new_identity(a->fair_identity);
	a->join = deadline > lf_now_ms();
	if (a->join)
		lf_fair_open(a->resource, a->fair_identity);	/* (without, nothing joins) */
	for (;;)
	{
		int64		pttl = -1;
		Datum		row = (Datum) 0;
		bool		retry = false;
		LfCounter	status = lf_acquire_once(fcinfo, req, a, &spare, &pttl, &row, &retry);
		int64		asked = lf_now_ms();
		int64		now = asked;
		int64		wake;

		if (status == LF_C_ACQUIRE_ACQUIRED)
			return row;
		if (status == LF_C_ACQUIRE_BUSY && req->fair_position >= 0)
			lf_fair_queued();
		if ((status != LF_C_ACQUIRE_BUSY && status != LF_C_ACQUIRE_STALE && !retry) ||
			(retry && now >= deadline))
		{
			lf_fair_leave(lf_now_ms() + lf_cleanup_timeout_ms);
			return row;
		}
		if (retry)
		{
			/* nothing held, no answer (Redis unreachable, a failover): not yet */
			nap(now, Min(deadline, now + Min(jittered(poll), renew_every)));
			poll = Min(poll * 2, LF_WAIT_POLL_MAX_MS);
			continue;
		}
		if (now >= deadline || (status == LF_C_ACQUIRE_STALE && ++stale > LF_WAIT_MAX_STALE))
		{
			if (waited && status == LF_C_ACQUIRE_BUSY)
				lf_count(LF_C_WAIT_DEADLINE);
			lf_fair_leave(lf_now_ms() + lf_cleanup_timeout_ms);
			return lf_status_row(fcinfo, req, status, a->resource);
		}
		if (status == LF_C_ACQUIRE_STALE)
			continue;			/* healed: the next generation is above, the place kept */
		if (!waited)
		{
			lf_count(LF_C_WAIT_WAITED);
			waited = true;
		}
		if (!subscribed && !no_subscription)
		{
			subscribe_once(req, a->resource, a->fair_identity, &subscribed, &no_subscription);
			/* the head: a release before the subscription woke nobody */
			if (req->fair_position == 0 || !subscribed)
				continue;
			now = lf_now_ms();
		}

		/* until a message, the head's holder's lease running out, a renewal, the deadline */
		wake = Min(deadline, asked + renew_every);
		if (req->fair_position == 0 && pttl >= 0)
			wake = Min(wake, now + pttl + 1);
		if (subscribed)
			wait_subscribed(a->resource, wake, deadline, poll, &subscribed, &no_subscription);
		else
		{
			nap(now, Min(wake, now + jittered(poll)));
			poll = Min(poll * 2, LF_WAIT_POLL_MAX_MS);
		}

		/*
		 * Others were granted meanwhile, with generations drawn after this
		 * wait's: the next attempt draws anew, or it would be stale.
		 */
		spare = 0;
	}
}

/*
 * acquire_waiting until deadline, each of its requests bounded by the
 * wait's hard deadline (req->hard_deadline, for this call only); the
 * wait's subscription ends with it, however it ends.
 */
Datum
lf_acquire_waiting(FunctionCallInfo fcinfo, LfRequest *req, const AcquireArgs *a, int64 deadline)
{
	volatile Datum result = (Datum) 0;

	req->hard_deadline = deadline + lf_command_timeout_ms;
	PG_TRY();
	{
		if (a->fair)
		{
			AcquireArgs fa = *a;

			result = acquire_fair_waiting(fcinfo, req, &fa, deadline);
		}
		else
			result = acquire_waiting(fcinfo, req, a, deadline);
	}
	PG_CATCH();
	{
		req->hard_deadline = 0;
		lf_subscriber_close();
		PG_RE_THROW();
	}
	PG_END_TRY();
	req->hard_deadline = 0;
	lf_subscriber_close();
	return result;
}

