/*-------------------------------------------------------------------------
 *
 * fair_wait.c
 *	  This backend's place in a fair queue (acquire(fair => true)): what it
 *	  is, how all_leases shows it, and leaving it when the wait ends
 *	  without a grant.
 *
 * Invariants: a backend waits in at most one queue at a time; from before
 * its first request that may join a queue until the wait ends, the wait is
 * "open" here, and a wait that ends any other way than by a grant leaves
 * the queue (leave.lua, conditional on the identity, bounded): at once when
 * it ends by its own answer, and at the end of the (sub)transaction an
 * error or a termination ends (lease_registry.c's callbacks), so a
 * cancelled, timed-out or terminated waiter never holds up the queue.  A
 * waiter that cannot say so (a crash, SIGKILL, Redis unreachable) ends by
 * its waiter key's TTL, lease_fence.fair_waiter_ttl_ms.
 *
 * IDENTIFICATION
 *	  src/lease/fair_wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lease/internal.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* how long a waiter's queue entry outlives its last request */
int			lf_fair_waiter_ttl_ms = 3000;

/*
 * The open wait.  File-scope: the transaction callbacks that leave the
 * queue after an error find it here, and one backend waits once at a time.
 * shown is how all_leases shows it (state waiting), from when it opens.
 */
static struct
{
	bool		open;
	bool		queued;			/* a request's answer said it joined */
	char		resource[LF_MAX_RESOURCE + 1];
	LeaseEntry	shown;
} wait = {false};

/*
 * A fair wait of resource under identity begins: from now on, however it
 * ends, its queue entry is removed (lf_fair_leave) unless it is granted.
 */
void
lf_fair_open(const char *resource, const char *identity)
{
	Assert(!wait.open);
	wait.open = true;
	wait.queued = false;
	strlcpy(wait.resource, resource, sizeof(wait.resource));
	memset(&wait.shown, 0, sizeof(wait.shown));
	wait.shown.resource = wait.resource;
	strlcpy(wait.shown.identity, identity, sizeof(wait.shown.identity));
	wait.shown.state = STATE_WAITING;
	wait.shown.scope = SCOPE_EXPLICIT;
	wait.shown.role = GetUserId();
	wait.shown.table_slot = -1;
	wait.shown.keepalive_slot = -1;
	/*
	 * Shown from before its first request: queue() never finds it in
	 * Redis's queue without finding this backend's pid too.
	 */
	wait.shown.acquired_at = GetCurrentTimestamp();
	lf_table_register(&wait.shown);
}

/* Is a fair wait open (its entry not yet left)? */
bool
lf_fair_is_open(void)
{
	return wait.open;
}

/* A request's answer says the waiter is in the queue: counted once. */
void
lf_fair_queued(void)
{
	if (!wait.open || wait.queued)
		return;
	wait.queued = true;
	lf_count(LF_C_FAIR_QUEUED);
}

/* The wait ends, its entry no longer in the queue: it is not shown any more. */
static void
close_wait(void)
{
	lf_table_forget(&wait.shown);
	wait.open = false;
	wait.queued = false;
}

/* The wait was granted: the script took its entry out of the queue. */
void
lf_fair_granted(void)
{
	if (!wait.open)
		return;
	if (wait.queued)
		lf_count(LF_C_FAIR_GRANTED);
	close_wait();
}

/*
 * Leave the queue, by deadline (lf_now_ms()), never raising an error (it
 * also runs in the transaction callbacks).  A waiter that never joined,
 * or was removed as dead, answers "not queued": left all the same.  One
 * that cannot be confirmed ends by its waiter key's TTL, and says so.
 */
void
lf_fair_leave(int64 deadline)
{
	LfCall		call;
	LfAnswer	ans;
	int64		left = deadline - lf_now_ms();

	if (!wait.open)
		return;
	if (left > 0)
	{
		call.timeout_ms = (int) Min(left, INT_MAX);
		call.flags = LF_WITHIN;
		call.keepalive_worker = false;
		lf_script_leave(wait.resource, wait.shown.identity, &call, &ans);
	}
	else
	{
		ans.outcome = LF_ANS_UNAVAILABLE;
		strlcpy(ans.err, "its deadline had passed", sizeof(ans.err));
	}
	if (ans.outcome == LF_ANS_LEFT)
		lf_count(LF_C_FAIR_LEFT);
	else if (ans.outcome != LF_ANS_NOT_QUEUED && wait.queued)
	{
		char		buf[LF_ERRLEN];

		ereport(WARNING,
				errmsg("could not confirm that this backend left the queue of resource \"%s\"",
					   wait.resource),
				errdetail("%s", lf_visible_error(ans.err, buf, sizeof(buf))),
				errdetail_log("%s", ans.err),
				errhint("Its place ends by lease_fence.fair_waiter_ttl_ms (%d ms) at the latest.",
						lf_fair_waiter_ttl_ms));
	}
	close_wait();
}

/* Called from lf_registry_init (_PG_init). */
void
lf_fair_init(void)
{
	DefineCustomIntVariable("lease_fence.fair_waiter_ttl_ms",
							"How long a fair waiter's place in its queue outlives its last request to Redis.",
							"A waiting backend renews it every third of this; a waiter whose PostgreSQL crashed holds up the queue at most this long.",
							&lf_fair_waiter_ttl_ms, 3000, 100, 60000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
}
