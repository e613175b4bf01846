/*-------------------------------------------------------------------------
 *
 * keepalive.c
 *	  Keep-alive of session- and transaction-scoped leases: a background
 *	  worker renews them while their owner is active, and tells the owner
 *	  when one is lost.
 *
 * acquire(..., keepalive => true) puts the lease in a table in shared
 * memory (LF_KEEPALIVE_SLOTS entries, under one LWLock).  The worker, one
 * per cluster, started with the server when lease_fence is in
 * shared_preload_libraries, renews each lease (compare-identity, as
 * renew()) at a third of its TTL while
 *	- its owner is alive and active: running a statement, or idle (in a
 *	  transaction or not) for less than the lease's TTL, as the owner's
 *	  pg_stat_activity entry says;
 *	- and keepalive_max_ms has not passed since the acquire: a renewal never
 *	  extends the lease past that point, and when it is reached the lease
 *	  is released.
 * A renewal that finds the key gone or someone else's, or that cannot be
 * confirmed before the lease would expire, marks the lease lost; so does
 * the end of an idle owner's lease (its TTL ran out) and keepalive_max_ms.
 * The owner checks the mark, and the lease's local expiry, on every fenced
 * write under the lease's generation and at COMMIT of a transaction that
 * made one: both fail with LF010 (lf_keepalive_check_write, which the
 * registry's lf_write_check_hook calls while the session keeps a lease
 * alive, and lf_keepalive_check_commit), before the write reaches a row.
 *
 * The worker connects to no database, so it uses the server's settings
 * (postgresql.conf, ALTER SYSTEM): each entry carries a fingerprint of the
 * acquiring session's Redis settings, and an acquire whose settings differ
 * from the worker's is refused (or, if the worker learns it first, the
 * lease is marked lost).
 *
 * A keep-alive extends a lease; it does not make a paused holder harmless.
 * Only the fence does.
 *
 * Layer 3 (docs/design.md, "Layers"), its lowest file: it calls the Redis
 * layer and the fence layer's hook, never the registry or the SQL functions
 * above it (an acquire that finds the table full is released by lease.c).
 *
 * IDENTIFICATION
 *	  src/keepalive.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <signal.h>

#include "fence.h"
#include "lease.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "redis.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PGDLLEXPORT void lf_keepalive_main(Datum arg);

/* the longest a keep-alive lasts (superuser-only) */
int			lf_keepalive_max_ms = 600000;

typedef enum KeepaliveState
{
	KA_FREE = 0,
	KA_ACTIVE,					/* renewed while its owner is active */
	KA_LOST						/* lost: its owner's fenced writes fail */
} KeepaliveState;

/* why a kept-alive lease was lost */
typedef enum KeepaliveLoss
{
	KL_NONE = 0,
	KL_NOT_HELD,				/* a renewal found the key gone or another's */
	KL_UNCONFIRMED,				/* no renewal was confirmed before it expired */
	KL_IDLE,					/* its owner was idle past its TTL */
	KL_MAX,						/* keepalive_max_ms was reached: released */
	KL_SETTINGS					/* the worker's Redis settings differ */
} KeepaliveLoss;

static const char *const loss_reasons[] = {
	"",
	"a renewal found that the lease key no longer holds this lease's identity",
	"no renewal could be confirmed before the lease expired",
	"the session was idle longer than the lease's TTL, so the lease was left to expire",
	"lease_fence.keepalive_max_ms was reached, so the lease was released",
	"the keep-alive worker uses other Redis settings than the session that acquired the lease"
};

typedef struct KeepaliveSlot
{
	pg_atomic_uint32 state;		/* KeepaliveState: the owner reads it unlocked */
	pg_atomic_uint32 loss;		/* KeepaliveLoss */
	pg_atomic_uint64 valid_until;	/* lf_now_ms() by which it expires */
	int			owner_pid;
	PgBackendStatus *owner_status;	/* the owner's pg_stat_activity entry */
	uint64		fingerprint;	/* of the owner's Redis settings */
	int64		ttl_ms;
	int64		max_until;		/* lf_now_ms() when keepalive_max_ms is reached */
	int64		next_renew;		/* lf_now_ms() of the next renewal */
	char		identity[33];
	char		resource[LF_MAX_RESOURCE + 1];
} KeepaliveSlot;

typedef struct KeepaliveShared
{
	LWLock	   *lock;
	Latch	   *worker_latch;	/* NULL while no worker runs */
	pg_atomic_uint64 worker_fingerprint;	/* 0: no worker has started */
	KeepaliveSlot slots[LF_KEEPALIVE_SLOTS];
} KeepaliveShared;

static KeepaliveShared *ka = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* this backend's kept-alive leases */
typedef struct MyKeepalive
{
	int			slot;
	int64		generation;
	bool		written;		/* a fenced write of this transaction used it */
	char	   *resource;
} MyKeepalive;

static MyKeepalive mine[LF_KEEPALIVE_SLOTS];
static int	held = 0;


/* ---------------------------------------------------------------------
 * Shared memory
 * ---------------------------------------------------------------------
 */

static void
ka_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(KeepaliveShared)));
	RequestNamedLWLockTranche("lease_fence keepalive", 1);
}

static void
ka_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	ka = ShmemInitStruct("lease_fence keepalive", sizeof(KeepaliveShared), &found);
	if (!found)
	{
		ka->lock = &(GetNamedLWLockTranche("lease_fence keepalive"))->lock;
		ka->worker_latch = NULL;
		pg_atomic_init_u64(&ka->worker_fingerprint, 0);
		for (i = 0; i < LF_KEEPALIVE_SLOTS; i++)
		{
			pg_atomic_init_u32(&ka->slots[i].state, KA_FREE);
			pg_atomic_init_u32(&ka->slots[i].loss, KL_NONE);
			pg_atomic_init_u64(&ka->slots[i].valid_until, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* ---------------------------------------------------------------------
 * The owner's side
 * ---------------------------------------------------------------------
 */

/*
 * Before anything is sent: can this acquire be kept alive?  An ERROR when
 * not (scope, preloading, activity tracking, settings).
 */
void
lf_keepalive_precheck(LeaseScope scope)
{
	uint64		worker;

	if (scope == SCOPE_EXPLICIT)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("keepalive needs a session- or transaction-scoped lease"),
				errdetail("An explicit lease outlives the session that took it; nothing could tell whether its holder is alive."),
				errhint("Use scope 'session' or 'transaction', or renew the lease yourself."));
	if (ka == NULL)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("keepalive needs lease_fence in shared_preload_libraries"),
				errdetail("The keep-alive worker starts with the server."),
				errhint("Add lease_fence to shared_preload_libraries and restart the server."));
	if (!pgstat_track_activities || MyBEEntry == NULL)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("keepalive needs track_activities"),
				errdetail("The keep-alive worker tells an active session from an idle one by its pg_stat_activity entry."));
	worker = pg_atomic_read_u64(&ka->worker_fingerprint);
	if (worker != 0 && worker != lf_redis_settings_fingerprint())
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("keepalive needs the server's Redis settings"),
				errdetail("This session's lease_fence Redis settings (server, TLS, Sentinel, Cluster or key_prefix) differ from the keep-alive worker's, which come from the server's configuration."),
				errhint("Set them in postgresql.conf or with ALTER SYSTEM, not per database, role or session."));
}

/*
 * A kept-alive lease was granted: put it in the table for the worker.
 * start is lf_now_ms() from before the grant was asked for; validity what
 * was left of the lease after it.  False when the table is full: the
 * caller releases the lease again and fails the acquire.
 */
bool
lf_keepalive_start(LeaseEntry *e, int64 start, int64 validity)
{
	int			i;
	int			slot = -1;
	KeepaliveSlot *s;
	int64		max = lf_keepalive_max_ms;

	Assert(ka != NULL);
	LWLockAcquire(ka->lock, LW_EXCLUSIVE);
	for (i = 0; i < LF_KEEPALIVE_SLOTS; i++)
		if (pg_atomic_read_u32(&ka->slots[i].state) == KA_FREE)
		{
			slot = i;
			break;
		}
	if (slot < 0)
	{
		LWLockRelease(ka->lock);
		return false;
	}
	s = &ka->slots[slot];
	s->owner_pid = MyProcPid;
	s->owner_status = MyBEEntry;
	s->fingerprint = lf_redis_settings_fingerprint();
	s->ttl_ms = e->ttl_ms;
	s->max_until = start + max;
	s->next_renew = start + e->ttl_ms / 3;
	strlcpy(s->identity, e->identity, sizeof(s->identity));
	strlcpy(s->resource, e->resource, sizeof(s->resource));
	pg_atomic_write_u32(&s->loss, KL_NONE);
	pg_atomic_write_u64(&s->valid_until, (uint64) (start + Max(validity, 0)));
	pg_atomic_write_u32(&s->state, KA_ACTIVE);
	if (ka->worker_latch)
		SetLatch(ka->worker_latch);
	LWLockRelease(ka->lock);

	mine[held].slot = slot;
	mine[held].generation = e->generation;
	mine[held].written = false;
	mine[held].resource = e->resource;
	held++;
	e->keepalive_slot = slot;
	return true;
}

/* The lease ends (release, end of its transaction or session): no more renewals. */
void
lf_keepalive_stop(LeaseEntry *e)
{
	int			i;

	if (e->keepalive_slot < 0 || ka == NULL)
		return;
	LWLockAcquire(ka->lock, LW_EXCLUSIVE);
	pg_atomic_write_u32(&ka->slots[e->keepalive_slot].state, KA_FREE);
	LWLockRelease(ka->lock);
	for (i = 0; i < held; i++)
		if (mine[i].slot == e->keepalive_slot)
		{
			mine[i] = mine[--held];
			break;
		}
	e->keepalive_slot = -1;
}

/* Does this session keep a lease alive (so its fenced writes need checking)? */
bool
lf_keepalive_any(void)
{
	return held > 0;
}

/* Is the kept-alive lease in slot lost?  Its reason in *why. */
static bool
slot_lost(int slot, const char **why)
{
	KeepaliveSlot *s = &ka->slots[slot];

	if (pg_atomic_read_u32(&s->state) == KA_LOST)
	{
		*why = loss_reasons[pg_atomic_read_u32(&s->loss)];
		return true;
	}
	if ((int64) pg_atomic_read_u64(&s->valid_until) <= lf_now_ms())
	{
		*why = "it expired before the keep-alive worker could renew it";
		return true;
	}
	return false;
}

/* The state lease_fence.leases shows for a kept-alive lease. */
bool
lf_keepalive_is_lost(const LeaseEntry *e)
{
	const char *why;

	return e->keepalive_slot >= 0 && ka != NULL && slot_lost(e->keepalive_slot, &why);
}

LF_NORETURN_BEFORE static void report_lost(const MyKeepalive *m, const char *why, bool at_commit,
											Relation rel, int attnum, const char *resource) LF_NORETURN_AFTER;

/*
 * LF010: the kept-alive lease m was lost.  A refused write names what it
 * wrote in the error's fields: the table and column (rel, attnum), or the
 * resource it fenced.
 */
static void
report_lost(const MyKeepalive *m, const char *why, bool at_commit,
			Relation rel, int attnum, const char *resource)
{
	lf_count(at_commit ? LF_C_COMMIT_CHECK_LF010 : LF_C_FENCE_LF010);
	ereport(ERROR,
			errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
			errmsg(at_commit ? "kept-alive lease on resource \"%s\" was lost before commit"
				   : "kept-alive lease on resource \"%s\" was lost: write refused", m->resource),
			errdetail("Generation " INT64_FORMAT ": %s.", m->generation, why),
			errhint("Stop working under this lease; acquire it again. Releasing it acknowledges the loss."),
			rel != NULL ? errtablecol(rel, attnum) : 0,
			resource != NULL ? lf_errresource(resource) : 0);
}

/*
 * Part of the fence's lf_write_check_hook (the registry installs it while
 * this session keeps leases alive): a fenced write under generation g is
 * refused (LF010) when g is the generation of a kept-alive lease of this
 * session that was lost.
 */
void
lf_keepalive_check_write(int64 g, Relation rel, int attnum, const char *resource)
{
	int			i;

	for (i = 0; i < held; i++)
	{
		const char *why;

		if (mine[i].generation != g)
			continue;
		if (slot_lost(mine[i].slot, &why))
			report_lost(&mine[i], why, false, rel, attnum, resource);
		mine[i].written = true;
	}
}

/*
 * PRE_COMMIT: a transaction that wrote under a kept-alive lease fails with
 * LF010 if the lease was lost meanwhile.  (A transaction-scoped one is
 * checked by the registry in any case: lf_keepalive_check_entry.)
 */
void
lf_keepalive_check_commit(void)
{
	int			i;

	for (i = 0; i < held; i++)
	{
		const char *why;

		if (mine[i].written && slot_lost(mine[i].slot, &why))
		{
			mine[i].written = false;
			report_lost(&mine[i], why, true, NULL, 0, NULL);
		}
	}
}

/*
 * PRE_PREPARE: a transaction that wrote under a kept-alive lease is not
 * prepared.  COMMIT PREPARED can come at any time later, after the lease was
 * lost, and nothing could refuse it then; COMMIT checks the lease first.
 */
void
lf_keepalive_check_prepare(void)
{
	int			i;

	for (i = 0; i < held; i++)
		if (mine[i].written)
			ereport(ERROR,
					errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					errmsg("cannot PREPARE a transaction that wrote under a kept-alive lease"),
					errdetail("Resource \"%s\", generation " INT64_FORMAT ": COMMIT PREPARED could come after the lease was lost, and nothing would refuse it then.",
							  mine[i].resource, mine[i].generation),
					errhint("Use COMMIT, which fails with LF010 when the lease was lost."));
}

/* The end of a transaction: its writes are done. */
void
lf_keepalive_xact_end(void)
{
	int			i;

	for (i = 0; i < held; i++)
		mine[i].written = false;
}

/* The state of a kept-alive transaction-scoped lease at PRE_COMMIT. */
void
lf_keepalive_check_entry(const LeaseEntry *e)
{
	int			i;
	const char *why;

	if (e->keepalive_slot < 0 || ka == NULL || !slot_lost(e->keepalive_slot, &why))
		return;
	for (i = 0; i < held; i++)
		if (mine[i].slot == e->keepalive_slot)
			report_lost(&mine[i], why, true, NULL, 0, NULL);
}

/*
 * The state of the kept-alive lease of identity, from any session:
 * "active" while the worker keeps it alive, "lost" once it could not, NULL
 * when no kept-alive lease has it (never kept alive, released, or its
 * session ended).  lease_fence.keepalive_state() (lease.c) shows it.
 */
const char *
lf_keepalive_state_of(const char *identity)
{
	const char *state = NULL;
	int			i;

	if (ka == NULL)
		return NULL;
	LWLockAcquire(ka->lock, LW_SHARED);
	for (i = 0; i < LF_KEEPALIVE_SLOTS; i++)
	{
		const char *why;

		if (pg_atomic_read_u32(&ka->slots[i].state) == KA_FREE ||
			strcmp(ka->slots[i].identity, identity) != 0)
			continue;
		state = slot_lost(i, &why) ? "lost" : "active";
		break;
	}
	LWLockRelease(ka->lock);
	return state;
}

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
	KeepaliveSlot *s = &ka->slots[c->slot];

	return pg_atomic_read_u32(&s->state) == KA_ACTIVE && s->owner_pid == c->owner_pid &&
		strcmp(s->identity, c->identity) == 0;
}

static void
mark_lost(const SlotCopy *c, KeepaliveLoss why, LfCounter counter)
{
	bool		done = false;

	LWLockAcquire(ka->lock, LW_EXCLUSIVE);
	if (slot_still(c))
	{
		pg_atomic_write_u32(&ka->slots[c->slot].loss, why);
		pg_atomic_write_u32(&ka->slots[c->slot].state, KA_LOST);
		done = true;
	}
	LWLockRelease(ka->lock);
	if (done)
		lf_count(counter);
	if (done)
		ereport(LOG,
				errmsg("lease_fence: kept-alive lease on resource \"%s\" lost: %s",
					   c->resource, loss_reasons[why]),
				errdetail("Its owner is the process with PID %d.", c->owner_pid));
}

static void
free_slot(const SlotCopy *c)
{
	LWLockAcquire(ka->lock, LW_EXCLUSIVE);
	if (ka->slots[c->slot].owner_pid == c->owner_pid &&
		strcmp(ka->slots[c->slot].identity, c->identity) == 0)
		pg_atomic_write_u32(&ka->slots[c->slot].state, KA_FREE);
	LWLockRelease(ka->lock);
}

/* One renewal of the lease in c: never past max_until. */
static void
renew_one(SlotCopy *c, int64 now)
{
	int64		ttl = Min(c->ttl_ms, c->max_until - now);
	char		ttlbuf[32];
	const char *keys[1];
	const char *args[2];
	LfAnswer	ans;
	int64		start = lf_now_ms();

	if (ttl < 1)
		ttl = 1;
	pg_lltoa(ttl, ttlbuf);
	keys[0] = lf_lease_key(c->resource);
	args[0] = c->identity;
	args[1] = ttlbuf;
	lf_run_script(LF_SCRIPT_RENEW, 1, keys, 2, args, lf_command_timeout_ms,
				  LF_INTERRUPTIBLE, &ans);
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
		LWLockAcquire(ka->lock, LW_EXCLUSIVE);
		if (slot_still(c))
		{
			pg_atomic_write_u64(&ka->slots[c->slot].valid_until,
								(uint64) (start + Max(validity, 0)));
			ka->slots[c->slot].next_renew = start + c->ttl_ms / 3;
		}
		LWLockRelease(ka->lock);
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
					errmsg("lease_fence: keep-alive of resource \"%s\": %s", c->resource, ans.err));
			mark_lost(c, KL_UNCONFIRMED, LF_C_KEEPALIVE_UNCONFIRMED);
			return;
		}
		LWLockAcquire(ka->lock, LW_EXCLUSIVE);
		if (slot_still(c))
			ka->slots[c->slot].next_renew = retry;
		LWLockRelease(ka->lock);
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
	const char *keys[1];
	const char *args[2];
	LfAnswer	ans;

	keys[0] = lf_lease_key(c->resource);
	args[0] = c->identity;
	args[1] = lf_release_publish();
	lf_run_script(LF_SCRIPT_RELEASE, 1, keys, 2, args, lf_cleanup_timeout_ms,
				  LF_INTERRUPTIBLE, &ans);
	if (ans.outcome != LF_ANS_RELEASED && ans.outcome != LF_ANS_NOT_HELD)
		ereport(WARNING,
				errmsg("lease_fence: could not confirm the release of resource \"%s\" at keepalive_max_ms", c->resource),
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
	uint64		fingerprint = pg_atomic_read_u64(&ka->worker_fingerprint);

	LWLockAcquire(ka->lock, LW_SHARED);
	for (i = 0; i < LF_KEEPALIVE_SLOTS; i++)
	{
		KeepaliveSlot *s = &ka->slots[i];
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
	LWLockRelease(ka->lock);

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
	LWLockAcquire(ka->lock, LW_EXCLUSIVE);
	if (ka->worker_latch == MyLatch)
		ka->worker_latch = NULL;
	LWLockRelease(ka->lock);
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

	LWLockAcquire(ka->lock, LW_EXCLUSIVE);
	ka->worker_latch = MyLatch;
	LWLockRelease(ka->lock);
	before_shmem_exit(worker_exit, (Datum) 0);
	pg_atomic_write_u64(&ka->worker_fingerprint, lf_redis_settings_fingerprint());
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
			pg_atomic_write_u64(&ka->worker_fingerprint, lf_redis_settings_fingerprint());
		}
	}
}

/* Called from _PG_init. */
void
lf_keepalive_init(void)
{
	BackgroundWorker worker;

	DefineCustomIntVariable("lease_fence.keepalive_max_ms",
							"The longest a keep-alive renews a lease, from its acquire; then the lease is released.",
							"So a stuck holder cannot keep a lease forever.",
							&lf_keepalive_max_ms, 600000, 1, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);

	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ka_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ka_shmem_startup;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	strlcpy(worker.bgw_library_name, "lease_fence", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "lf_keepalive_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "lease_fence keepalive", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "lease_fence keepalive", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}
