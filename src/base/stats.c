/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Counters of every outcome: lease statuses, cleanups, commit checks,
 *	  fence writes and resource fences accepted or rejected by SQLSTATE, and
 *	  rows whose unissued fence repair_unissued() reset.
 *
 * What to watch is not the lock success rate but the unknown outcomes,
 * unconfirmed cleanups, lost renewals, leases with too little validity, and
 * the stale writes the fence refused.  With lease_fence in
 * shared_preload_libraries the counters are cluster-wide, in shared memory,
 * as atomics (no lock).  Without it, each backend counts for itself and
 * lease_fence.stats shows that backend's counters, saying so.
 *
 * Accepted fence writes are the hot path: they are summed in a backend-local
 * variable and added to shared memory once per transaction.  Rejections are
 * added at once, so they count although the rejecting transaction aborts.
 *
 * IDENTIFICATION
 *	  src/base/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "base/stats.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(lf_stats);
PG_FUNCTION_INFO_V1(lf_stats_reset);

/* (operation, outcome) of each counter, from the one list in stats.h */
static const char *const counter_names[LF_NUM_COUNTERS][2] = {
#define LF_COUNTER_NAMES(id, operation, outcome) {operation, outcome},
	LF_COUNTERS(LF_COUNTER_NAMES)
#undef LF_COUNTER_NAMES
};

typedef struct LfSharedStats
{
	pg_atomic_uint64 counters[LF_NUM_COUNTERS];
	pg_atomic_uint64 reset_at;	/* TimestampTz */
} LfSharedStats;

static LfSharedStats *shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* this backend's counters, when not preloaded */
static uint64 local_counters[LF_NUM_COUNTERS];
static TimestampTz local_reset_at = 0;

/* accepted fence writes not yet added to shared memory */
uint64		lf_fence_accepted_pending = 0;

/* Count one outcome. */
void
lf_count(LfCounter c)
{
	if (shared)
		pg_atomic_fetch_add_u64(&shared->counters[c], 1);
	else
		local_counters[c]++;
}

/* Count n outcomes at once (rows repaired by one statement). */
void
lf_count_n(LfCounter c, uint64 n)
{
	if (shared)
		pg_atomic_fetch_add_u64(&shared->counters[c], n);
	else
		local_counters[c] += n;
}

/* The outcome column of counter c: for acquire, renew, release, the status. */
const char *
lf_counter_outcome(LfCounter c)
{
	Assert(c >= 0 && c < LF_NUM_COUNTERS);
	return counter_names[c][1];
}

/* Add the accepted fence writes of this transaction. */
static void
flush_accepted(void)
{
	if (lf_fence_accepted_pending == 0)
		return;
	if (shared)
		pg_atomic_fetch_add_u64(&shared->counters[LF_C_FENCE_ACCEPTED], lf_fence_accepted_pending);
	else
		local_counters[LF_C_FENCE_ACCEPTED] += lf_fence_accepted_pending;
	lf_fence_accepted_pending = 0;
}

static void
stats_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		flush_accepted();
}

static void
lf_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(LfSharedStats)));
}

static void
lf_shmem_startup(void)
{
	bool		found;
	int			i;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("lease_fence stats", sizeof(LfSharedStats), &found);
	if (!found)
	{
		for (i = 0; i < LF_NUM_COUNTERS; i++)
			pg_atomic_init_u64(&shared->counters[i], 0);
		pg_atomic_init_u64(&shared->reset_at, (uint64) GetCurrentTimestamp());
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Called from _PG_init.  The shared counters exist only when the library is
 * preloaded; otherwise the hooks are not installed and counting stays local.
 */
void
lf_stats_init(void)
{
	RegisterXactCallback(stats_xact_callback, NULL);
	local_reset_at = GetCurrentTimestamp();
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = lf_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = lf_shmem_startup;
}

/* Say, once per call, that the counters are this backend's only. */
static void
notice_if_local(void)
{
	if (!shared)
		ereport(NOTICE,
				errmsg("lease_fence is not in shared_preload_libraries: these counters are this backend's only"),
				errhint("Add lease_fence to shared_preload_libraries and restart for cluster-wide counters."));
}

/*
 * lease_fence.stats(): one row per counter — operation, outcome, count —
 * with the scope ('cluster' or 'backend') and the time of the last reset.
 */
Datum
lf_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz reset_at;
	int			i;

	notice_if_local();
	InitMaterializedSRF(fcinfo, 0);
	reset_at = shared ? (TimestampTz) pg_atomic_read_u64(&shared->reset_at) : local_reset_at;
	for (i = 0; i < LF_NUM_COUNTERS; i++)
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		uint64		v = shared ? pg_atomic_read_u64(&shared->counters[i]) : local_counters[i];

		/* this backend's accepted writes of the open transaction too */
		if (i == LF_C_FENCE_ACCEPTED)
			v += lf_fence_accepted_pending;
		values[0] = CStringGetTextDatum(counter_names[i][0]);
		values[1] = CStringGetTextDatum(counter_names[i][1]);
		values[2] = Int64GetDatum((int64) v);
		values[3] = CStringGetTextDatum(shared ? "cluster" : "backend");
		values[4] = TimestampTzGetDatum(reset_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* lease_fence.stats_reset(): zero every counter, and the latency histograms */
Datum
lf_stats_reset(PG_FUNCTION_ARGS)
{
	int			i;

	notice_if_local();
	lf_fence_accepted_pending = 0;
	for (i = 0; i < LF_NUM_COUNTERS; i++)
	{
		if (shared)
			pg_atomic_write_u64(&shared->counters[i], 0);
		else
			local_counters[i] = 0;
	}
	lf_latency_reset();
	if (shared)
		pg_atomic_write_u64(&shared->reset_at, (uint64) GetCurrentTimestamp());
	else
		local_reset_at = GetCurrentTimestamp();
	PG_RETURN_VOID();
}
