/*-------------------------------------------------------------------------
 *
 * checkpoint.c
 *	  Fenced checkpoints: lease_fence.checkpoint(resource, state) and
 *	  lease_fence.last_checkpoint(resource).
 *
 * A long job commits its progress as it goes, so that a successor that
 * takes its work over resumes where it stopped rather than from the start.
 * The progress must move only under the current holder: a job that stalled
 * past its lease, and whose successor has since written a newer state,
 * must not put its older one back.  So checkpoint() is a resource fence
 * (fence_resource(), with all its refusals: LF001, LF002, LF004, LF010)
 * and, in the same transaction, the write of the state into
 * lease_fence.resource_checkpoint, one row per resource.  The fence keeps
 * the resource's row of lease_fence.resource_generation locked to the end
 * of the transaction, so the checkpoints of one resource are written one
 * transaction at a time, each under a generation no lower than the one
 * before: the row of resource_checkpoint is never changed by two
 * transactions at once.
 *
 * As for resource_generation, nobody but the table's owner has privileges
 * on resource_checkpoint (a direct UPDATE would move a checkpoint under no
 * lease), and this file reads and writes it in C: no privilege check, no
 * query, nothing of anybody's runs.
 *
 * last_checkpoint() reads with a snapshot taken at the call, whatever the
 * transaction's isolation level: a successor that fenced the resource
 * first (and so waited for a stale holder still inside its transaction)
 * sees the newest state committed before it.
 *
 * IDENTIFICATION
 *	  src/fence/checkpoint.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "fence/fence.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(lf_checkpoint);
PG_FUNCTION_INFO_V1(lf_last_checkpoint);

/* the columns of lease_fence.resource_checkpoint */
#define Anum_rc_resource 1
#define Anum_rc_generation 2
#define Anum_rc_state 3
#define Anum_rc_written_at 4
#define Natts_rc 4

/* the largest state, in bytes of its text form (docs/reference.md) */
#define LF_MAX_CHECKPOINT (1024 * 1024)

/* A state argument: NULL is 22004, over LF_MAX_CHECKPOINT 22023. */
static Jsonb *
check_state_arg(FunctionCallInfo fcinfo, int argno)
{
	Jsonb	   *state;
	char	   *text_form;
	size_t		len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("state must not be NULL"),
				errhint("A checkpoint with nothing to say can be '{}'."));
	state = PG_GETARG_JSONB_P(argno);
	text_form = JsonbToCString(NULL, &state->root, VARSIZE(state));
	len = strlen(text_form);
	pfree(text_form);
	if (len > LF_MAX_CHECKPOINT)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("state is too large for a checkpoint"),
				errdetail("Its text form has %zu bytes; the limit is %d.", len, LF_MAX_CHECKPOINT),
				errhint("Keep the progress in a table of your own, fenced, and checkpoint a reference to it."));
	return state;
}

/* The row of resource_checkpoint for resource, at generation g. */
static HeapTuple
form_checkpoint(Relation rel, Datum resource, int64 g, Jsonb *state)
{
	Datum		values[Natts_rc];
	bool		nulls[Natts_rc] = {false, false, false, false};

	values[Anum_rc_resource - 1] = resource;
	values[Anum_rc_generation - 1] = Int64GetDatum(g);
	values[Anum_rc_state - 1] = JsonbPGetDatum(state);
	values[Anum_rc_written_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	return heap_form_tuple(RelationGetDescr(rel), values, nulls);
}

/*
 * Store state as resource's checkpoint at generation g, replacing the one
 * before.  The caller has fenced the resource at g in this transaction:
 * every other writer of this row waits for our end, so what we find is
 * committed or ours.  A version another transaction is changing can only
 * be a direct write by the table's owner: waited for, as the fence does.
 */
static void
write_checkpoint(Relation rel, Relation pkey, const char *resource, int64 g, Jsonb *state)
{
	text	   *name = cstring_to_text(resource);
	Datum		namedatum = PointerGetDatum(name);

	for (;;)
	{
		ItemPointerData tid;
		TransactionId inserter = InvalidTransactionId;
		TransactionId changer = InvalidTransactionId;
		int64		stored = 0;
		HeapTuple	tuple;
		bool		index_it;
		TM_Result	result;

		CHECK_FOR_INTERRUPTS();
		if (!lf_find_resource_row(rel, pkey, name, &tid, &inserter, &changer, &stored))
		{
			tuple = form_checkpoint(rel, namedatum, g, state);
			simple_heap_insert(rel, tuple);
			lf_index_new_version(rel, pkey, tuple, namedatum);
			heap_freetuple(tuple);
			break;
		}
		if (TransactionIdIsValid(inserter) || TransactionIdIsValid(changer))
		{
			XactLockTableWait(TransactionIdIsValid(inserter) ? inserter : changer,
							  rel, &tid, XLTW_None);
			continue;
		}
		tuple = form_checkpoint(rel, namedatum, g, state);
		result = lf_heap_update_waiting(rel, &tid, tuple, &index_it);
		if (result == TM_Ok && index_it)
			lf_index_new_version(rel, pkey, tuple, namedatum);
		heap_freetuple(tuple);
		if (result == TM_Ok)
			break;
		if (result != TM_Updated && result != TM_Deleted)
			elog(ERROR, "unexpected table_tuple_update result %d for a checkpoint", (int) result);
	}
	/* a later read in this transaction sees it */
	CommandCounterIncrement();
}

/*
 * lease_fence.checkpoint(resource text, state jsonb) RETURNS bigint
 *
 * Fence the resource at the current generation (as fence_resource()), and
 * store state as its checkpoint under that generation; returns it.  Bad
 * input (22023, 22004) before anything else.
 */
Datum
lf_checkpoint(PG_FUNCTION_ARGS)
{
	char	   *resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	Jsonb	   *state = check_state_arg(fcinfo, 1);
	Relation	rel;
	Relation	pkey;
	int64		g;

	/* opened (and its indexes checked) before anything is fenced */
	lf_open_resource_table(LF_RESOURCE_CHECKPOINT, RowExclusiveLock, &rel, &pkey);
	g = lf_fence_resource_current(resource);
	write_checkpoint(rel, pkey, resource, g, state);
	index_close(pkey, NoLock);
	table_close(rel, NoLock);
	lf_count(LF_C_CHECKPOINT_WRITTEN);
	PG_RETURN_INT64(g);
}

/*
 * lease_fence.last_checkpoint(resource text)
 *	 RETURNS TABLE (state jsonb, generation bigint, written_at timestamptz)
 *
 * The newest committed checkpoint of the resource, or this transaction's
 * own: one row, or none.  Read with a snapshot of its own, taken now.
 */
Datum
lf_last_checkpoint(PG_FUNCTION_ARGS)
{
	char	   *resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Relation	rel;
	Relation	pkey;
	Snapshot	snapshot;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;

	InitMaterializedSRF(fcinfo, 0);
	lf_open_resource_table(LF_RESOURCE_CHECKPOINT, AccessShareLock, &rel, &pkey);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	/* the column is COLLATE "C", the collation ScanKeyInit gives the key */
	ScanKeyInit(&key, Anum_rc_resource, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(cstring_to_text(resource)));
	scan = systable_beginscan(rel, RelationGetRelid(pkey), true, snapshot, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		TupleDesc	desc = RelationGetDescr(rel);
		Datum		values[3];
		bool		nulls[3];
		Datum		d;

		/* copied out of the buffer, and out of TOAST, before the scan ends */
		d = heap_getattr(tuple, Anum_rc_state, desc, &nulls[0]);
		values[0] = nulls[0] ? (Datum) 0 : PointerGetDatum(PG_DETOAST_DATUM_COPY(d));
		values[1] = heap_getattr(tuple, Anum_rc_generation, desc, &nulls[1]);
		values[2] = heap_getattr(tuple, Anum_rc_written_at, desc, &nulls[2]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	systable_endscan(scan);
	UnregisterSnapshot(snapshot);
	index_close(pkey, AccessShareLock);
	table_close(rel, AccessShareLock);
	return (Datum) 0;
}
