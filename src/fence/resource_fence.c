/*-------------------------------------------------------------------------
 *
 * resource_fence.c
 *	  Resource fences: lease_fence.fence_resource(resource).
 *
 * The row fence guards the rows a newer holder has written.  A stale holder
 * can still write the rows the newer one has not touched yet, and INSERT
 * new ones.  A resource fence guards the resource itself: one row per
 * resource in lease_fence.resource_generation holds the highest generation
 * that fenced it.  fence_resource() compares the current generation with
 * it (lower: LF001), stores the current one, and keeps the row locked to
 * the end of the transaction.  A second holder's fence_resource() waits for
 * that lock and then checks against what the first one committed, so of two
 * transactions that fence one resource the stale one never commits after
 * the newer one, whatever rows either writes.
 *
 * Nobody but the table's owner has privileges on the table: a direct UPDATE
 * that lowered a stored generation would defeat the fence.  So this file
 * reads and writes it in C, with the heap and index access methods, as
 * next_generation() draws from its sequence: no privilege check, no query,
 * no executor, and so no trigger, rule, policy or index expression runs,
 * under the caller's identity or any other.  The only index maintained is
 * the primary key the extension created; a table that has any other index
 * is refused before anything is written.
 *
 * The stored row is read and locked in its newest committed version (a
 * dirty snapshot, then the tuple lock follows the update chain and waits
 * for a holder in progress), whatever the transaction's isolation level: like the row fence's READ COMMITTED
 * re-check, the decision is made against what the newest holder committed,
 * so a stale holder in REPEATABLE READ gets LF001 too, not 40001.
 *
 * The lease layer's check of a write comes through lf_write_check_hook.
 *
 * IDENTIFICATION
 *	  src/fence/resource_fence.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "catalog/pg_index.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "fence/fence.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "nodes/makefuncs.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(lf_fence_resource);
PG_FUNCTION_INFO_V1(lf_set_generation_resource);

#define LF_SCHEMA "lease_fence"

/* the columns of lease_fence.resource_generation */
#define Anum_rg_resource 1
#define Anum_rg_generation 2
#define Anum_rg_updated_at 3
#define Natts_rg 3


/*
 * Open one of the extension's tables keyed by resource (resource_generation,
 * resource_checkpoint) and its primary key, with lockmode (RowExclusiveLock
 * to write).  Any other index
 * (only a superuser could add one) is refused: we maintain the primary key
 * ourselves, and would leave another index without the new row versions.
 */
void
lf_open_resource_table(LfOwnRelation which, LOCKMODE lockmode, Relation *rel, Relation *pkey)
{
	Oid			relid = lf_own_relation(which);
	List	   *indexes;
	Oid			pkeyid = InvalidOid;
	ListCell   *lc;

	*rel = table_open(relid, lockmode);
	*pkey = NULL;
	indexes = RelationGetIndexList(*rel);
	foreach(lc, indexes)
	{
		Oid			indexid = lfirst_oid(lc);
		/* opened once, for the check and for writing (ours is kept open) */
		Relation	index = index_open(indexid, lockmode);
		bool		ours = index->rd_index->indisprimary &&
			index->rd_index->indnatts == 1 &&
			index->rd_index->indkey.values[0] == Anum_rg_resource &&
			RelationGetIndexExpressions(index) == NIL &&
			RelationGetIndexPredicate(index) == NIL;

		if (ours && !OidIsValid(pkeyid))
			*pkey = index;
		else
			index_close(index, lockmode);
		if (!ours || OidIsValid(pkeyid))
			ereport(ERROR,
					errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					errmsg("table %s.%s has an index lease_fence did not create: %s",
						   LF_SCHEMA, RelationGetRelationName(*rel), get_rel_name(indexid)),
					errhint("Drop that index: lease_fence maintains only the primary key of its tables."));
		pkeyid = indexid;
	}
	list_free(indexes);
	if (!OidIsValid(pkeyid))
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("table %s.%s has lost its primary key", LF_SCHEMA, RelationGetRelationName(*rel)));
}

/*
 * Find the resource's row in one of the tables keyed by resource (its
 * second column a generation): its newest committed version, or one a
 * transaction in progress inserted (then *inserter is that transaction),
 * or one of this transaction's own; *changer is a transaction in progress
 * that is updating or deleting the version found, and *stored its
 * generation.  False when there is none.
 */
bool
lf_find_resource_row(Relation rel, Relation pkey, text *resource, ItemPointer tid,
			  TransactionId *inserter, TransactionId *changer, int64 *stored)
{
	SnapshotData dirty;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tuple;
	bool		found = false;

	InitDirtySnapshot(dirty);
	/* the column is COLLATE "C", the collation ScanKeyInit gives the key */
	ScanKeyInit(&key, Anum_rg_resource, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(resource));
	scan = systable_beginscan(rel, RelationGetRelid(pkey), true, &dirty, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;

		*tid = tuple->t_self;
		*inserter = dirty.xmin;
		*changer = dirty.xmax;
		*stored = DatumGetInt64(heap_getattr(tuple, Anum_rg_generation, RelationGetDescr(rel), &isnull));
		if (isnull)
			ereport(ERROR,
					errcode(ERRCODE_DATA_CORRUPTED),
					errmsg("the fence of resource \"%s\" is NULL", text_to_cstring(resource)));
		found = true;
	}
	systable_endscan(scan);
	return found;
}

/*
 * Where the row version this backend last wrote for a resource is: a job
 * that fences the same resource again and again (a worker on its queue)
 * finds it there, without the index lookup and the walk along the row's
 * HOT chain (every version since the page was last pruned), which cost
 * more than the rest of the fence.  A hint only: the version there is
 * taken only if it is still one the dirty snapshot sees (not replaced by a
 * committed update, not from an aborted transaction) and holds the same
 * resource, in the same relation file; anything else is looked up through
 * the index, as before.
 */
static struct
{
	bool		valid;
	Oid			relid;
	Oid			relfilenode;
	ItemPointerData tid;
	char		resource[LF_MAX_RESOURCE + 1];
}			last_fenced;

static void
remember_fenced(Relation rel, const char *resource, ItemPointer tid)
{
	if (strlen(resource) > LF_MAX_RESOURCE)
	{
		last_fenced.valid = false;
		return;
	}
	last_fenced.relid = RelationGetRelid(rel);
	last_fenced.relfilenode = rel->rd_rel->relfilenode;
	last_fenced.tid = *tid;
	strlcpy(last_fenced.resource, resource, sizeof(last_fenced.resource));
	last_fenced.valid = true;
}

/*
 * find_resource for the resource this backend fenced last, at the version
 * it wrote: true (and the same outputs) when that version is still the one
 * the index would lead to, false when it must be looked up.
 */
static bool
find_resource_where_left(Relation rel, const char *resource, ItemPointer tid,
						 TransactionId *inserter, TransactionId *changer, int64 *stored)
{
	SnapshotData dirty;
	HeapTupleData tuple;
	Buffer		buf;
	bool		found = false;

	if (!last_fenced.valid ||
		last_fenced.relid != RelationGetRelid(rel) ||
		last_fenced.relfilenode != rel->rd_rel->relfilenode ||
		strcmp(last_fenced.resource, resource) != 0 ||
		ItemPointerGetBlockNumber(&last_fenced.tid) >= RelationGetNumberOfBlocks(rel))
		return false;

	InitDirtySnapshot(dirty);
	tuple.t_self = last_fenced.tid;
	if (!heap_fetch(rel, &dirty, &tuple, &buf, false))
		return false;
	{
		TupleDesc	desc = RelationGetDescr(rel);
		bool		isnull;
		Datum		d = heap_getattr(&tuple, Anum_rg_resource, desc, &isnull);

		if (!isnull)
		{
			text	   *t = DatumGetTextPP(d);
			size_t		len = strlen(resource);

			if (VARSIZE_ANY_EXHDR(t) == len && memcmp(VARDATA_ANY(t), resource, len) == 0)
			{
				Datum		g = heap_getattr(&tuple, Anum_rg_generation, desc, &isnull);

				if (isnull)
					ereport(ERROR,
							errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("the fence of resource \"%s\" is NULL", resource));
				*tid = tuple.t_self;
				*inserter = dirty.xmin;
				*changer = dirty.xmax;
				*stored = DatumGetInt64(g);
				found = true;
			}
		}
	}
	ReleaseBuffer(buf);
	return found;
}

/* Add the primary key entry of a new row version. */
void
lf_index_new_version(Relation rel, Relation pkey, HeapTuple tuple, Datum resource)
{
	IndexInfo  *info = BuildIndexInfo(pkey);
	Datum		values[1] = {resource};
	bool		isnull[1] = {false};

	(void) index_insert(pkey, values, isnull, &tuple->t_self, rel,
						UNIQUE_CHECK_YES, false, info);
}

/*
 * Replace the row at tid with one holding generation g, waiting for a
 * transaction that is changing it: false when that one changed it and
 * committed (the caller looks again).  heap_update() reports a HOT update
 * differently from 16 on (compat.h).
 */
static bool
update_resource(Relation rel, Relation pkey, ItemPointer tid, Datum resource, int64 g,
				ItemPointer newtid)
{
	Datum		values[Natts_rg];
	bool		nulls[Natts_rg] = {false, false, false};
	HeapTuple	tuple;
	bool		index_it;
	TM_Result	result;

	values[Anum_rg_resource - 1] = resource;
	values[Anum_rg_generation - 1] = Int64GetDatum(g);
	values[Anum_rg_updated_at - 1] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	result = lf_heap_update_waiting(rel, tid, tuple, &index_it);
	if (result == TM_Ok && index_it)
		lf_index_new_version(rel, pkey, tuple, resource);
	if (result == TM_Ok)
		*newtid = tuple->t_self;
	heap_freetuple(tuple);
	if (result == TM_Updated || result == TM_Deleted)
		return false;
	if (result != TM_Ok)
		elog(ERROR, "unexpected table_tuple_update result %d for the fence of a resource", (int) result);
	return true;
}

/* Insert the resource's first row, with generation g. */
static void
insert_resource(Relation rel, Relation pkey, Datum resource, int64 g, ItemPointer newtid)
{
	Datum		values[Natts_rg];
	bool		nulls[Natts_rg] = {false, false, false};
	HeapTuple	tuple;

	values[Anum_rg_resource - 1] = resource;
	values[Anum_rg_generation - 1] = Int64GetDatum(g);
	values[Anum_rg_updated_at - 1] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	simple_heap_insert(rel, tuple);
	lf_index_new_version(rel, pkey, tuple, resource);
	*newtid = tuple->t_self;
	heap_freetuple(tuple);
}

/*
 * Fence resource at generation g in this transaction: LF001 if a higher
 * generation is stored for it, else store g and keep the row locked to the
 * end of the transaction.  Returns g.  Used by fence_resource() and by a
 * transaction-scoped acquire().
 *
 * The row is looked up with a dirty snapshot, which also finds a row that
 * a transaction in progress inserted: the first fence of a resource by
 * another holder, which we wait for (and then look again) as for a row
 * lock.  A resource fenced for the first time has no row yet, and two first
 * fencers could both find none and both insert, the second then failing on
 * the primary key instead of being checked against the first.  So an
 * inserter takes a lock on the resource (an object lock on the table's OID
 * and a hash of the name: equal names always share it, others rarely do,
 * which only serializes them), looks again, inserts, and lets go of the
 * lock: whoever takes it next finds the new row, and waits for its
 * transaction.  No lock is kept per resource, so a transaction may fence
 * any number of them.
 */
int64
lf_fence_resource_at(const char *resource, int64 g)
{
	Relation	rel;
	Relation	pkey;
	text	   *name = cstring_to_text(resource);
	Datum		namedatum = PointerGetDatum(name);
	Oid			lock_objid = DatumGetUInt32(hash_any((const unsigned char *) resource,
													 strlen(resource)));
	bool		insert_locked = false;
	bool		pushed_snapshot = false;
	ItemPointerData written;

	ItemPointerSetInvalid(&written);

	/* no executor: its checks are ours */
	PreventCommandIfReadOnly("lease_fence.fence_resource()");
	PreventCommandIfParallelMode("lease_fence.fence_resource()");

	/*
	 * Heap access wants an active snapshot (for TOAST), which a query has
	 * and the PRE_COMMIT callback of a transaction-scoped lease does not.
	 */
	if (!ActiveSnapshotSet())
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		pushed_snapshot = true;
	}

	lf_open_resource_table(LF_RESOURCE_GENERATION, RowExclusiveLock, &rel, &pkey);
	for (;;)
	{
		ItemPointerData tid;
		TransactionId inserter = InvalidTransactionId;
		TransactionId changer = InvalidTransactionId;
		int64		stored = 0;

		CHECK_FOR_INTERRUPTS();
		if (!find_resource_where_left(rel, resource, &tid, &inserter, &changer, &stored) &&
			!lf_find_resource_row(rel, pkey, name, &tid, &inserter, &changer, &stored))
		{
			if (!insert_locked)
			{
				LockDatabaseObject(RelationGetRelid(rel), lock_objid, 0, ExclusiveLock);
				insert_locked = true;
				continue;		/* look again: the lock's last holder may have inserted it */
			}
			insert_resource(rel, pkey, namedatum, g, &written);
			break;
		}
		if (insert_locked)
		{
			UnlockDatabaseObject(RelationGetRelid(rel), lock_objid, 0, ExclusiveLock);
			insert_locked = false;
		}
		if (TransactionIdIsValid(inserter) || TransactionIdIsValid(changer))
		{
			/*
			 * Another holder's fence in progress (a first one, or a newer
			 * version of the row): wait for its transaction, look again.
			 * The decision is made against what the newest holder
			 * committed, whatever our snapshot.
			 */
			XactLockTableWait(TransactionIdIsValid(inserter) ? inserter : changer,
							  rel, &tid, XLTW_None);
			continue;
		}

		/* the newest committed version: its generation decides */
		if (stored > g)
		{
			lf_count(LF_C_RESOURCE_FENCE_LF001);
			ereport(ERROR,
					errcode(ERRCODE_LF_STALE_GENERATION),
					errmsg("stale generation: resource fence rejected"),
					errdetail("Resource \"%s\": stored generation " INT64_FORMAT ", supplied generation " INT64_FORMAT ".",
							  resource, stored, g),
					errhint("A holder with a newer generation has fenced this resource; this holder's lease is gone. Stop, and acquire a new generation before working on it again."),
					lf_errresource(resource));
		}

		/*
		 * Update it, which also keeps it locked to the end of the
		 * transaction.  No tuple lock first: heap_update() waits for a
		 * transaction that began to change the row since we looked, and
		 * reports whether it committed a change, after which we look again
		 * (one WAL record instead of two, and no lock to take).
		 */
		if (update_resource(rel, pkey, &tid, namedatum, g, &written))
			break;
	}
	if (ItemPointerIsValid(&written))
		remember_fenced(rel, resource, &written);
	if (insert_locked)
		UnlockDatabaseObject(RelationGetRelid(rel), lock_objid, 0, ExclusiveLock);

	/* a second fence of the same resource in this transaction sees ours */
	CommandCounterIncrement();
	index_close(pkey, NoLock);
	table_close(rel, NoLock);
	if (pushed_snapshot)
		PopActiveSnapshot();
	lf_count(LF_C_RESOURCE_FENCE_ACCEPTED);
	return g;
}

/* A resource argument: NULL, empty or over-long is 22023. */
char *
lf_check_resource_arg(text *t)
{
	if (t == NULL)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("resource must not be NULL"));
	if (VARSIZE_ANY_EXHDR(t) == 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("resource must not be empty"));
	if (VARSIZE_ANY_EXHDR(t) > LF_MAX_RESOURCE)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("resource is too long"),
				errdetail("It has %d bytes; the limit is %d.",
						  (int) VARSIZE_ANY_EXHDR(t), LF_MAX_RESOURCE));
	return text_to_cstring(t);
}

/*
 * Fence resource at the current generation, as fence_resource() does: no
 * current generation is LF002, one never issued LF004, the generation of a
 * lost kept-alive lease LF010 (the lease layer's hook), all before anything
 * is read or written; then lf_fence_resource_at().  Returns the generation.
 */
int64
lf_fence_resource_current(const char *resource)
{
	/* looked up first, so that the rejections below can name the table */
	(void) lf_own_relation(LF_RESOURCE_GENERATION);

	if (lf_generation_invalid)
	{
		lf_count(LF_C_RESOURCE_FENCE_LF002);
		ereport(ERROR,
				errcode(ERRCODE_LF_MISSING_GENERATION),
				errmsg("invalid generation: %s is not a generation", LF_GENERATION_GUC),
				errdetail("It was set to \"%s\" before lease_fence was loaded in this session.",
						  GetConfigOption(LF_GENERATION_GUC, true, false)),
				errhint("Set it to a non-negative bigint, or RESET it; preload lease_fence to catch this when it is set."),
				lf_errresource(resource));
	}
	if (!lf_generation_is_set)
	{
		lf_count(LF_C_RESOURCE_FENCE_LF002);
		ereport(ERROR,
				errcode(ERRCODE_LF_MISSING_GENERATION),
				errmsg("missing generation: resource fence rejected"),
				errdetail("Resource \"%s\": no current generation is set.", resource),
				errhint("Set the current generation with lease_fence.set_generation() or SET LOCAL %s.",
						LF_GENERATION_GUC),
				lf_errresource(resource));
	}

	/*
	 * A current generation this database never issued is refused (LF004)
	 * as the row fence refuses it, before any row is read, locked or
	 * written.  lf_fence_resource_at() itself needs no check: its other
	 * callers (a transaction-scoped acquire, its PRE_COMMIT re-fence) pass
	 * a generation they have just drawn.
	 */
	if (!lf_generation_issued(lf_generation))
		lf_report_unissued(lf_generation, LF_C_RESOURCE_FENCE_LF004,
						   psprintf("Resource \"%s\"", resource), NULL, 0, resource);
	/* the lease layer's check (keepalive.c: a lost kept-alive lease, LF010) */
	if (lf_write_check_hook != NULL)
		lf_write_check_hook(lf_generation, NULL, 0, resource);

	return lf_fence_resource_at(resource, lf_generation);
}

/*
 * lease_fence.fence_resource(resource text) RETURNS bigint
 *
 * Fence the resource at the current generation, in the caller's
 * transaction; returns that generation.  Bad input 22023, before anything
 * else.
 */
Datum
lf_fence_resource(PG_FUNCTION_ARGS)
{
	char	   *resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));

	PG_RETURN_INT64(lf_fence_resource_current(resource));
}

/*
 * lease_fence.set_generation(generation bigint, resource text DEFAULT NULL)
 *
 * One call per fenced transaction: the transaction's current generation
 * and, with a resource, its resource fence, exactly as fence_resource()
 * makes it (LF001 when a newer generation fenced it, held to the end of the
 * transaction).  Fencing a resource needs EXECUTE on fence_resource(): this
 * function, which everybody may call, is no way around that grant.  Bad
 * input (22004, 22023) and a missing privilege (42501) come before
 * anything is set or fenced.  Without a resource it must run in a
 * transaction block (25P01): outside one the generation would be gone when
 * the statement ends.  Returns the generation.
 */
Datum
lf_set_generation_resource(PG_FUNCTION_ARGS)
{
	int64		generation = lf_check_generation_arg(fcinfo, 0);
	char	   *resource = NULL;

	if (!PG_ARGISNULL(1))
	{
		Oid			nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
		Oid			argtypes[1] = {TEXTOID};
		Oid			fence_fn;

		resource = lf_check_resource_arg(PG_GETARG_TEXT_PP(1));
		fence_fn = LookupFuncName(list_make2(makeString(get_namespace_name(nsp)),
											 makeString("fence_resource")),
								  1, argtypes, false);
		if (lf_proc_aclcheck(fence_fn, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
			ereport(ERROR,
					errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					errmsg("permission denied for function fence_resource"),
					errdetail("set_generation() with a resource fences it, which needs EXECUTE on lease_fence.fence_resource()."));
	}
	else
		lf_require_transaction_block();
	lf_set_current_generation(generation, true);
	if (resource != NULL)
		(void) lf_fence_resource_current(resource);
	PG_RETURN_INT64(generation);
}
