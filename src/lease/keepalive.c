/*-------------------------------------------------------------------------
 *
 * keepalive.c
 *	  Keep-alive of session- and transaction-scoped leases, the owner's
 *	  side: what a backend calls to have a lease kept alive, to stop, and to
 *	  learn that one was lost.  The worker that renews them is
 *	  keepalive_worker.c; the table they share is here.
 *
 * acquire(..., keepalive => true) puts the lease in a table in shared
 * memory (LF_KEEPALIVE_SLOTS entries, under one LWLock); the worker renews
 * it while its owner is active and keepalive_max_ms has not passed, and
 * marks it lost when it cannot (docs/guides/keepalive-and-waiting.md).
 * Invariants: every fenced write under a kept-alive lease's generation, and
 * the COMMIT of a transaction that made one, fail with LF010 once the lease
 * is marked lost or its local expiry has passed, before the write reaches
 * a row (lf_keepalive_check_write, through the registry's write-check hook,
 * and lf_keepalive_check_commit); an acquire whose Redis settings differ
 * from the worker's (their fingerprint) is refused, or its lease marked
 * lost if the worker learns it first.  A keep-alive extends a lease; it
 * does not make a paused holder harmless: only the fence does.
 *
 * IDENTIFICATION
 *	  src/lease/keepalive.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
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
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* the longest a keep-alive lasts (superuser-only) */
int			lf_keepalive_max_ms = 600000;

/* the table in shared memory (NULL unless preloaded) */
KeepaliveShared *lf_ka = NULL;

/* why a kept-alive lease was lost, by KeepaliveLoss: its LF010's detail */
const char *const lf_keepalive_loss_reasons[] = {
	"",
	"a renewal found that the lease key no longer holds this lease's identity",
	"no renewal could be confirmed before the lease expired",
	"the session was idle longer than the lease's TTL, so the lease was left to expire",
	"lease_fence.keepalive_max_ms was reached, so the lease was released",
	"the keep-alive worker uses other Redis settings than the session that acquired the lease"
};

/* the hooks this module chained (once per process, _PG_init) */
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

/* this backend's kept-alive leases: the session's, across calls and transactions */
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
	lf_ka = ShmemInitStruct("lease_fence keepalive", sizeof(KeepaliveShared), &found);
	if (!found)
	{
		lf_ka->lock = &(GetNamedLWLockTranche("lease_fence keepalive"))->lock;
		lf_ka->worker_latch = NULL;
		pg_atomic_init_u64(&lf_ka->worker_fingerprint, 0);
		for (i = 0; i < LF_KEEPALIVE_SLOTS; i++)
		{
			pg_atomic_init_u32(&lf_ka->slots[i].state, KA_FREE);
			pg_atomic_init_u32(&lf_ka->slots[i].loss, KL_NONE);
			pg_atomic_init_u64(&lf_ka->slots[i].valid_until, 0);
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
	if (lf_ka == NULL)
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
	worker = pg_atomic_read_u64(&lf_ka->worker_fingerprint);
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

	Assert(lf_ka != NULL);
	LWLockAcquire(lf_ka->lock, LW_EXCLUSIVE);
	for (i = 0; i < LF_KEEPALIVE_SLOTS; i++)
		if (pg_atomic_read_u32(&lf_ka->slots[i].state) == KA_FREE)
		{
			slot = i;
			break;
		}
	if (slot < 0)
	{
		LWLockRelease(lf_ka->lock);
		return false;
	}
	s = &lf_ka->slots[slot];
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
	if (lf_ka->worker_latch)
		SetLatch(lf_ka->worker_latch);
	LWLockRelease(lf_ka->lock);

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

	if (e->keepalive_slot < 0 || lf_ka == NULL)
		return;
	LWLockAcquire(lf_ka->lock, LW_EXCLUSIVE);
	pg_atomic_write_u32(&lf_ka->slots[e->keepalive_slot].state, KA_FREE);
	LWLockRelease(lf_ka->lock);
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
	KeepaliveSlot *s = &lf_ka->slots[slot];

	if (pg_atomic_read_u32(&s->state) == KA_LOST)
	{
		*why = lf_keepalive_loss_reasons[pg_atomic_read_u32(&s->loss)];
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

	return e->keepalive_slot >= 0 && lf_ka != NULL && slot_lost(e->keepalive_slot, &why);
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

	if (e->keepalive_slot < 0 || lf_ka == NULL || !slot_lost(e->keepalive_slot, &why))
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

	if (lf_ka == NULL)
		return NULL;
	LWLockAcquire(lf_ka->lock, LW_SHARED);
	for (i = 0; i < LF_KEEPALIVE_SLOTS; i++)
	{
		const char *why;

		if (pg_atomic_read_u32(&lf_ka->slots[i].state) == KA_FREE ||
			strcmp(lf_ka->slots[i].identity, identity) != 0)
			continue;
		state = slot_lost(i, &why) ? "lost" : "active";
		break;
	}
	LWLockRelease(lf_ka->lock);
	return state;
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
