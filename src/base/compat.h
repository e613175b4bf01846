/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  The differences between the PostgreSQL majors lease_fence supports
 *	  (15 to 18), in one place.  Each wrapper keeps the behaviour of the
 *	  oldest API; see test/README.md, "Supported PostgreSQL versions".
 *	  Under every layer (docs/design.md, "The layers"): any file may
 *	  include it; it holds no code of lease_fence's.
 *
 * IDENTIFICATION
 *	  src/base/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_FENCE_COMPAT_H
#define LEASE_FENCE_COMPAT_H

#include "access/heapam.h"
#include "access/htup_details.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

/*
 * GUC check hooks hand their "extra" to the GUC machinery, which frees it.
 * From 16 on GUC memory lives in a memory context and is freed with pfree
 * (an Assert checks the context): it must come from guc_malloc, and a
 * malloc'd block makes the first reset of the setting fail with "pfree
 * called with invalid pointer" — at commit, a PANIC.  Up to 15 it is freed
 * with free().  guc_malloc(LOG, ...) returns NULL when out of memory, as
 * malloc does, so the hook reports it itself.
 */
#if PG_VERSION_NUM >= 160000
#define lf_guc_malloc(size) guc_malloc(LOG, (size))
#else
#define lf_guc_malloc(size) malloc(size)
#endif

/*
 * LockHeldByMe gained "orstronger" in 17; false asks, as before, for
 * exactly that mode.
 */
#if PG_VERSION_NUM >= 170000
#define lf_lock_held_by_me(tag, mode) LockHeldByMe((tag), (mode), false)
#else
#define lf_lock_held_by_me(tag, mode) LockHeldByMe((tag), (mode))
#endif

/*
 * CreateWaitEventSet takes a ResourceOwner instead of a memory context from
 * 17 on.  Our set lives as long as the backend (it is kept across
 * transactions and freed by us): before 17 that is TopMemoryContext, from
 * 17 no resource owner at all (NULL allocates it in TopMemoryContext too).
 */
#if PG_VERSION_NUM >= 170000
#define lf_create_session_wait_set(nevents) CreateWaitEventSet(NULL, (nevents))
#else
#define lf_create_session_wait_set(nevents) CreateWaitEventSet(TopMemoryContext, (nevents))
#endif

/*
 * A session-ending timeout is pending (ProcessInterrupts raises FATAL for
 * it): idle_in_transaction_session_timeout, idle_session_timeout, and from
 * 17 on transaction_timeout.
 */
static inline bool
lf_session_timeout_pending(void)
{
	return IdleInTransactionSessionTimeoutPending || IdleSessionTimeoutPending
#if PG_VERSION_NUM >= 170000
		|| TransactionTimeoutPending
#endif
		;
}

/*
 * The privilege check of a function: object_aclcheck() from 16 on, which
 * replaced pg_proc_aclcheck().
 */
#if PG_VERSION_NUM >= 160000
#define lf_proc_aclcheck(proc, role, mode) object_aclcheck(ProcedureRelationId, (proc), (role), (mode))
#else
#define lf_proc_aclcheck(proc, role, mode) pg_proc_aclcheck((proc), (role), (mode))
#endif

/* Does role own extension ext: object_ownercheck() from 16 on, as above. */
#if PG_VERSION_NUM >= 160000
#define lf_extension_ownercheck(ext, role) object_ownercheck(ExtensionRelationId, (ext), (role))
#else
#define lf_extension_ownercheck(ext, role) pg_extension_ownercheck((ext), (role))
#endif

/*
 * A function that never returns: 18 replaced pg_attribute_noreturn(),
 * written after the declarator, with pg_noreturn, written before it.
 */
#if PG_VERSION_NUM >= 180000
#define LF_NORETURN_BEFORE pg_noreturn
#define LF_NORETURN_AFTER
#else
#define LF_NORETURN_BEFORE
#define LF_NORETURN_AFTER pg_attribute_noreturn()
#endif

/*
 * simple_heap_update reports from 16 on whether the new version needs index
 * entries (TU_UpdateIndexes); before, a heap-only tuple needs none.  Returns
 * true when the indexes need the new version.
 */
static inline bool
lf_simple_heap_update(Relation rel, ItemPointer tid, HeapTuple tuple)
{
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes;

	simple_heap_update(rel, tid, tuple, &update_indexes);
	return update_indexes == TU_All;
#else
	simple_heap_update(rel, tid, tuple);
	return !HeapTupleIsHeapOnly(tuple);
#endif
}

/*
 * heap_update() of the row at tid, waiting for a transaction that is
 * changing it; *index_it as for lf_simple_heap_update.  TM_Updated or
 * TM_Deleted when that transaction changed it and committed.
 */
static inline TM_Result
lf_heap_update_waiting(Relation rel, ItemPointer tid, HeapTuple tuple, bool *index_it)
{
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	TM_Result	result;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes = TU_None;

	result = heap_update(rel, tid, tuple, GetCurrentCommandId(true), InvalidSnapshot, true,
						 &tmfd, &lockmode, &update_indexes);
	*index_it = update_indexes == TU_All;
#else
	result = heap_update(rel, tid, tuple, GetCurrentCommandId(true), InvalidSnapshot, true,
						 &tmfd, &lockmode);
	*index_it = !HeapTupleIsHeapOnly(tuple);
#endif
	return result;
}

/*
 * The wait event of a backend waiting for Redis (a reply, or a waiting
 * acquire's turn): from 17 on one of its own, LeaseFenceWait in
 * pg_stat_activity (registered on first use, once per file that waits);
 * before, Extension.
 */
#if PG_VERSION_NUM >= 170000
static inline uint32
lf_wait_event(void)
{
	static uint32 event = 0;

	if (event == 0)
		event = WaitEventExtensionNew("LeaseFenceWait");
	return event;
}
#else
#define lf_wait_event() PG_WAIT_EXTENSION
#endif

#endif							/* LEASE_FENCE_COMPAT_H */
