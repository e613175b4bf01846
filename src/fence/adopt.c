/*-------------------------------------------------------------------------
 *
 * adopt.c
 *	  Moving a database: lease_fence.adopt_generations(), and which
 *	  generations it refused.
 *
 * Logical replication copies rows and their fences (and the resource fences
 * and checkpoints, when they are published) but not the generation
 * sequence.  After a switchover to the subscriber, the new primary would
 * draw generations far below the fences it holds, and a holder that took
 * its generation on the old primary would write under a value this
 * database never issued.  adopt_generations(), run once on the new primary
 * before it takes writers, makes both right:
 *
 *	 - it finds the highest fence this database holds (every protected table
 *	   whose tokens are this database's generations, partitions included,
 *	   every resource fence and every checkpoint: sequential scans in C under
 *	   the latest snapshot, no query on anybody's table), takes the old
 *	   primary's highest issued generation when given (refusing one below
 *	   those fences: it cannot be that), and moves the sequence to the first
 *	   value of a new epoch above all of them (generation.c), so that every
 *	   later draw is above every generation the old primary issued in its
 *	   epoch, also after the value was read;
 *	 - from then on the fence refuses every generation up to that value
 *	   (LF004, saying why): a holder of the old primary cannot know whether
 *	   its last writes there reached this database (those after the switch
 *	   never do), so it takes its lease again here, and every holder gets the
 *	   same answer.
 *
 * What was refused is a row of lease_fence.generation_adoption (refused.c,
 * which the fence's issued check reads), dumped by pg_dump and carried by
 * pg_upgrade with the sequence.
 *
 * IDENTIFICATION
 *	  src/fence/adopt.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xlog.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fence/fence.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(lf_adopt_generations);

/* The highest fence found so far, and where: for the LOG and the errors. */
typedef struct FenceFound
{
	bool		found;
	int64		highest;
	char	   *where;
} FenceFound;

/* Scan column colname of relation relid (of kind r) into *ff. */
static void
scan_member(Oid relid, const char *colname, const char *what, Snapshot snap, FenceFound *ff)
{
	Relation	rel = table_open(relid, NoLock);	/* locked by the caller */
	AttrNumber	attnum = get_attnum(relid, colname);
	int64		h = 0;

	if (attnum == InvalidAttrNumber || TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid != INT8OID)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("table %s has no bigint column \"%s\"",
					   quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												  RelationGetRelationName(rel)), colname),
				errdetail("lease_fence.protected names it as the table's fence column."));
	if (lf_highest_fence_in(rel, attnum, snap, &h) && (!ff->found || h > ff->highest))
	{
		ff->found = true;
		ff->highest = h;
		ff->where = what ? pstrdup(what) :
			psprintf("table %s, column \"%s\"",
					 quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
												RelationGetRelationName(rel)), colname);
	}
	table_close(rel, NoLock);
}

/*
 * The highest fence this database holds: every fence of every protected
 * table whose tokens are this database's generations ("issued"; an
 * "external" table's fences are another system's tokens), leaf partitions
 * of a partitioned one included (foreign ones are not read), every resource
 * fence and every checkpoint.  A protected table dropped since is skipped.
 */
static void
highest_fence_held(Snapshot snap, FenceFound *ff)
{
	Relation	prot = table_open(lf_own_relation(LF_PROTECTED), AccessShareLock);
	TupleDesc	desc = RelationGetDescr(prot);
	int			a_relid = SPI_fnumber(desc, "relid");
	int			a_column = SPI_fnumber(desc, "fence_column");
	int			a_tokens = SPI_fnumber(desc, "tokens");
	List	   *relids = NIL;
	List	   *columns = NIL;
	ListCell   *lr;
	ListCell   *lc;
	TableScanDesc scan;
	TupleTableSlot *slot;

	if (a_relid <= 0 || a_column <= 0 || a_tokens <= 0)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("the extension's table lease_fence.protected lacks a column"),
				errhint("Run ALTER EXTENSION lease_fence UPDATE."));
	slot = table_slot_create(prot, NULL);
	scan = table_beginscan(prot, snap, 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		r_null,
					c_null,
					t_null;
		Datum		r = slot_getattr(slot, a_relid, &r_null);
		Datum		c = slot_getattr(slot, a_column, &c_null);
		Datum		t = slot_getattr(slot, a_tokens, &t_null);

		if (r_null || c_null || t_null)
			continue;
		if (strcmp(TextDatumGetCString(t), "issued") != 0)
			continue;
		relids = lappend_oid(relids, DatumGetObjectId(r));
		columns = lappend(columns, pstrdup(NameStr(*DatumGetName(c))));
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	table_close(prot, AccessShareLock);

	forboth(lr, relids, lc, columns)
	{
		Oid			relid = lfirst_oid(lr);
		Relation	rel = try_table_open(relid, AccessShareLock);
		List	   *members;
		ListCell   *lm;

		if (rel == NULL)
			continue;
		if (rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE)
			members = find_all_inheritors(relid, AccessShareLock, NULL);
		else
			members = list_make1_oid(relid);
		foreach(lm, members)
		{
			if (get_rel_relkind(lfirst_oid(lm)) == RELKIND_RELATION)
				scan_member(lfirst_oid(lm), (char *) lfirst(lc), NULL, snap, ff);
		}
		table_close(rel, NoLock);
	}

	/* the resource fences and the checkpoints: their column "generation" */
	{
		Oid			own[2] = {lf_own_relation(LF_RESOURCE_GENERATION),
		lf_own_relation(LF_RESOURCE_CHECKPOINT)};
		const char *what[2] = {"lease_fence.resource_generation", "lease_fence.resource_checkpoint"};
		int			i;

		for (i = 0; i < 2; i++)
		{
			LockRelationOid(own[i], AccessShareLock);
			scan_member(own[i], "generation", what[i], snap, ff);
		}
	}
}

/*
 * lease_fence.adopt_generations(old_highest_issued bigint DEFAULT NULL)
 * RETURNS bigint
 *
 * Superuser or the extension's owner.  See the file's header; returns the
 * highest refused generation, above which every later draw is.
 */
Datum
lf_adopt_generations(PG_FUNCTION_ARGS)
{
	bool		has_old = !PG_ARGISNULL(0);
	int64		old = has_old ? PG_GETARG_INT64(0) : 0;
	Relation	rel;
	Snapshot	snap;
	FenceFound	ff = {false, 0, NULL};
	int64		own_before;
	int64		refused;

	if (!lf_is_extension_owner())
		ereport(ERROR,
				errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				errmsg("must be superuser or the owner of extension lease_fence to adopt generations"),
				errdetail("Every holder's generation up to the new one is refused from then on."));
	if (has_old && old < 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("old_highest_issued must not be negative"));
	PreventCommandDuringRecovery("lease_fence.adopt_generations()");
	PreventCommandIfReadOnly("lease_fence.adopt_generations()");

	/* one adoption at a time */
	rel = lf_open_adoption_table(ShareRowExclusiveLock);

	snap = RegisterSnapshot(GetLatestSnapshot());
	highest_fence_held(snap, &ff);
	UnregisterSnapshot(snap);

	if (has_old && ff.found && ff.highest > old)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("old_highest_issued " INT64_FORMAT " is below a fence this database holds", old),
				errdetail("%s holds generation " INT64_FORMAT ", so the database it came from issued at least that. Nothing was changed.",
						  ff.where, ff.highest),
				errhint("Read lease_fence.highest_issued() on the old primary once its writers have stopped and this database has caught up."));

	refused = lf_start_epoch_above(Max(ff.found ? ff.highest : 0, old), &own_before);
	lf_record_adoption(rel, refused, ff.found, ff.highest, has_old, old, own_before);
	table_close(rel, NoLock);

	lf_count(LF_C_GENERATION_ADOPTED);
	ereport(LOG,
			errmsg("generations adopted: every generation up to " INT64_FORMAT " is refused from now on (highest fence %s, old primary's highest issued %s, this database's highest issued before " INT64_FORMAT ")",
				   refused,
				   ff.found ? psprintf(INT64_FORMAT " in %s", ff.highest, ff.where) : "none",
				   has_old ? psprintf(INT64_FORMAT, old) : "not given",
				   own_before));
	PG_RETURN_INT64(refused);
}
