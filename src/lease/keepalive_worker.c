/*-------------------------------------------------------------------------
 *
 * keepalive_worker.c
 *	  The keep-alive worker: one background worker per cluster that renews
 *	  the kept-alive leases in the shared table while their owners are
 *	  active, and marks the ones it could not keep.
 *
 * Each pass copies the active slots, then, without the lock, for each:
 *	- its owner is gone, or idle (in a transaction or not) longer than the
 *	  lease's TTL, as its pg_stat_activity entry says: it is left to expire
 *	  (lost, KL_IDLE), and freed once its owner is gone;
 *	- keepalive_max_ms is about to be reached: it is released
 *	  (compare-identity) and marked (KL_MAX);
 *	- the owner's Redis settings differ from the worker's: lost (KL_SETTINGS);
 *	- a third of its TTL has passed since the last renewal: it is renewed
 *	  (compare-identity, as renew()), never past keepalive_max_ms.  Renewed:
 *	  its validity moves on; lost (the key gone or someone else's): marked
 *	  (KL_NOT_HELD); unavailable or unknown: tried again soon, and marked
 *	  (KL_UNCONFIRMED) when the lease would expire first.
 * The owners' side (keepalive.c) reads the marks.  The worker connects to
 * no database: it uses the server's settings.
 *
 * IDENTIFICATION
 *	  src/lease/keepalive_worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "fence/fence.h"
#include "lease/internal.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "redis/redis.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

/* ---------------------------------------------------------------------
 * The worker
 * ---------------------------------------------------------------------
 */

/* what the worker copies of a slot before it works on it, unlocked */
typedef struct SlotCopy
{
	int			slot;
	int			owner_pid;
	PgBackendStatus *owner_status;
	uint64		fingerprint;
	int64		ttl_ms;
	int64		max_until;
	int64		next_renew;
	int64		valid_until;
	char		identity[33];
	char		resource[LF_MAX_RESOURCE + 1];
} SlotCopy;

/*
 * Is the owner alive (the same process still in its pg_stat_activity
 * entry), and active: running a statement, or idle for less than ttl_ms?
 */
static bool
owner_active(const SlotCopy *c, bool *alive)
{
	PgBackendStatus *be = c->owner_status;
	int			pid;
	BackendState st;
	TimestampTz since;

	for (;;)
	{
		int			before,
					after;

		pgstat_begin_read_activity(be, before);
		pid = be->st_procpid;
		st = be->st_state;
		since = be->st_state_start_timestamp;
		pgstat_end_read_activity(be, after);
		if (pgstat_read_activity_complete(before, after))
			break;
		CHECK_FOR_INTERRUPTS();
	}
	*alive = pid == c->owner_pid;
	if (!*alive)
		return false;
	if (st == STATE_RUNNING || st == STATE_FASTPATH)
		return true;
	if (st == STATE_IDLE || st == STATE_IDLEINTRANSACTION ||
		st == STATE_IDLEINTRANSACTION_ABORTED)
		return GetCurrentTimestamp() - since < c->ttl_ms * 1000;
	return false;				/* activity not tracked: not known to be active */
}

/* Change a slot the worker worked on, if it still holds the same lease. */
static bool
slot_still(const SlotCopy *c)
{
	KeepaliveSlot *s = &lf_ka->slots[c->slot];

	return pg_atomic_read_u32(&s->state) == KA_ACTIVE && s->owner_pid == c->owner_pid &&
		strcmp(s->identity, c->identity) == 0;
}

static void
mark_lost(const SlotCopy *c, KeepaliveLoss why, LfCounter counter)
{
	bool		done = false;

	LWLockAcquire(lf_ka->lock, LW_EXCLUSIVE);
	if (slot_still(c))
	{
		pg_atomic_write_u32(&lf_ka->slots[c->slot].loss, why);
		pg_atomic_write_u32(&lf_ka->slots[c->slot].state, KA_LOST);
		done = true;
	}
	LWLockRelease(lf_ka->lock);
	if (done)
		lf_count(counter);
	if (done)
		ereport(LOG,
				errmsg("kept-alive lease on resource \"%s\" lost: %s",
					   c->resource, lf_keepalive_loss_reasons[why]),
				errdetail("Its owner is the process with PID %d.", c->owner_pid));
}

static void
free_slot(const SlotCopy *c)
{
	LWLockAcquire(lf_ka->lock, LW_EXCLUSIVE);
	if (lf_ka->slots[c->slot].owner_pid == c->owner_pid &&
		strcmp(lf_ka->slots[c->slot].identity, c->identity) == 0)
		pg_atomic_write_u32(&lf_ka->slots[c->slot].state, KA_FREE);
	LWLockRelease(lf_ka->lock);
}

/* One renewal of the lease in c: never past max_until. */
static void
renew_one(SlotCopy *c, int64 now)
{
	int64		ttl = Min(c->ttl_ms, c->max_until - now);
	LfCall		call = {lf_command_timeout_ms, LF_INTERRUPTIBLE, true};
	LfAnswer	ans;
	int64		start = lf_now_ms();

	if (ttl < 1)
		ttl = 1;
	lf_script_renew(c->resource, c->identity, ttl, &call, &ans);
	if (ans.outcome == LF_ANS_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();

	if (ans.outcome == LF_ANS_RENEWED && lf_min_replicas > 0)
	{
		/* a renewal the replicas do not have is no renewal: try again soon */
		bool		interrupted;
		int			acked = lf_wait_replicas(lf_replica_timeout_ms + lf_command_timeout_ms,
											 LF_INTERRUPTIBLE, &interrupted, ans.err);

		if (interrupted)
			CHECK_FOR_INTERRUPTS();
		if (acked < lf_min_replicas)
		{
			if (acked >= 0)
				snprintf(ans.err, sizeof(ans.err), "%d of %d replicas acknowledged the renewal",
						 acked, lf_min_replicas);
			ans.outcome = LF_ANS_UNKNOWN;
		}
	}
	if (ans.outcome == LF_ANS_RENEWED)
	{
		int64		validity = lf_validity_after(ttl, lf_now_ms() - start);

		lf_count(LF_C_KEEPALIVE_RENEWED);
		LWLockAcquire(lf_ka->lock, LW_EXCLUSIVE);
		if (slot_still(c))
		{
			pg_atomic_write_u64(&lf_ka->slots[c->slot].valid_until,
								(uint64) (start + Max(validity, 0)));
			lf_ka->slots[c->slot].next_renew = start + c->ttl_ms / 3;
		}
		LWLockRelease(lf_ka->lock);
		return;
	}
	if (ans.outcome == LF_ANS_LOST)
	{
		mark_lost(c, KL_NOT_HELD, LF_C_KEEPALIVE_LOST);
		return;
	}
	/* not confirmed (unavailable, unknown): again soon, unless the lease expires first */
	{
		int64		retry = lf_now_ms() + Max(c->ttl_ms / 20, 10);

		if (retry >= c->valid_until)
		{
			ereport(WARNING,
					errmsg("keep-alive of resource \"%s\": %s", c->resource, ans.err));
			mark_lost(c, KL_UNCONFIRMED, LF_C_KEEPALIVE_UNCONFIRMED);
			return;
		}
		LWLockAcquire(lf_ka->lock, LW_EXCLUSIVE);
		if (slot_still(c))
			lf_ka->slots[c->slot].next_renew = retry;
		LWLockRelease(lf_ka->lock);
	}
}

/*
 * When the worker releases a lease at keepalive_max_ms: a little before it,
 * since no renewal extends the key past it, so that the release finds the
 * key and wakes the lease's waiters.
 */
static int64
release_at(const SlotCopy *c)
{
	return c->max_until - Min(c->ttl_ms / 10, 100);
}

/* keepalive_max_ms reached: release the lease (compare-identity), mark it. */
static void
release_at_max(const SlotCopy *c)
{
	LfCall		call = {lf_cleanup_timeout_ms, LF_INTERRUPTIBLE, true};
	LfAnswer	ans;

	lf_script_release(c->resource, c->identity, &call, &ans);
	if (ans.outcome != LF_ANS_RELEASED && ans.outcome != LF_ANS_NOT_HELD)
		ereport(WARNING,
				errmsg("could not confirm the release of resource \"%s\" at keepalive_max_ms", c->resource),
				errdetail("%s", ans.err),
				errhint("The lease expires by its TTL, at the latest when keepalive_max_ms is reached."));
	if (ans.outcome == LF_ANS_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
	mark_lost(c, KL_MAX, LF_C_KEEPALIVE_MAX_REACHED);
}

/* One pass over the table; returns when the worker should look again. */
static int64
keepalive_pass(MemoryContext cxt)
{
	static SlotCopy copies[LF_KEEPALIVE_SLOTS];
	int			n = 0;
	int			i;
	int64		wake = lf_now_ms() + 1000;
	uint64		fingerprint = pg_atomic_read_u64(&lf_ka->worker_fingerprint);

	LWLockAcquire(lf_ka->lock, LW_SHARED);
	for (i = 0; i < LF_KEEPALIVE_SLOTS; i++)
	{
		KeepaliveSlot *s = &lf_ka->slots[i];
		SlotCopy   *c;

		if (pg_atomic_read_u32(&s->state) != KA_ACTIVE)
			continue;
		c = &copies[n++];
		c->slot = i;
		c->owner_pid = s->owner_pid;
		c->owner_status = s->owner_status;
		c->fingerprint = s->fingerprint;
		c->ttl_ms = s->ttl_ms;
		c->max_until = s->max_until;
		c->next_renew = s->next_renew;
		c->valid_until = (int64) pg_atomic_read_u64(&s->valid_until);
		memcpy(c->identity, s->identity, sizeof(c->identity));
		memcpy(c->resource, s->resource, sizeof(c->resource));
	}
	LWLockRelease(lf_ka->lock);

	for (i = 0; i < n; i++)
	{
		SlotCopy   *c = &copies[i];
		bool		alive;
		bool		active = owner_active(c, &alive);
		int64		now = lf_now_ms();

		MemoryContextReset(cxt);
		CHECK_FOR_INTERRUPTS();
		if (!alive)
		{
			/* its owner is gone (its exit releases its leases) */
			free_slot(c);
			continue;
		}
		if (c->fingerprint != fingerprint)
		{
			mark_lost(c, KL_SETTINGS, LF_C_KEEPALIVE_LOST);
			continue;
		}
		if (now >= release_at(c))
		{
			release_at_max(c);
			continue;
		}
		if (!active)
		{
			/* an idle owner: its lease runs out by its TTL */
			if (now >= c->valid_until)
				mark_lost(c, KL_IDLE, LF_C_KEEPALIVE_IDLE_EXPIRED);
			else
				wake = Min(wake, c->valid_until);
			continue;
		}
		if (now >= c->next_renew)
		{
			renew_one(c, now);
			/* its new next_renew is at least ttl/20 away; look by then */
			wake = Min(wake, lf_now_ms() + Max(c->ttl_ms / 20, 10));
		}
		else
			wake = Min(wake, c->next_renew);
		wake = Min(wake, release_at(c));
	}
	return wake;
}

/* The worker's exit: nobody is to set its latch any more. */
static void
worker_exit(int code, Datum arg)
{
	LWLockAcquire(lf_ka->lock, LW_EXCLUSIVE);
	if (lf_ka->worker_latch == MyLatch)
		lf_ka->worker_latch = NULL;
	LWLockRelease(lf_ka->lock);
}

void
lf_keepalive_main(Datum arg)
{
	MemoryContext cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	cxt = AllocSetContextCreate(TopMemoryContext, "lease_fence keepalive",
								ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);

	LWLockAcquire(lf_ka->lock, LW_EXCLUSIVE);
	lf_ka->worker_latch = MyLatch;
	LWLockRelease(lf_ka->lock);
	before_shmem_exit(worker_exit, (Datum) 0);
	pg_atomic_write_u64(&lf_ka->worker_fingerprint, lf_redis_settings_fingerprint());
	ereport(LOG, errmsg("lease_fence keep-alive worker started"));

	for (;;)
	{
		int64		wake = keepalive_pass(cxt);
		int64		now = lf_now_ms();

		MemoryContextReset(cxt);
		if (wake > now)
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 (long) (wake - now), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			pg_atomic_write_u64(&lf_ka->worker_fingerprint, lf_redis_settings_fingerprint());
		}
	}
}

