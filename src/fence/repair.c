/*-------------------------------------------------------------------------
 *
 * repair.c
 *	  lease_fence.repair_unissued(): reset fences that took a value this
 *	  database never issued, and the one narrow door in the fence trigger
 *	  it goes through.
 *
 * IDENTIFICATION
 *	  src/fence/repair.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fence/fence.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(lf_repair_unissued);

/*
 * While repair_unissued() runs its UPDATE on one table, that table's OID
 * (which the fence trigger reads) and the generation it writes; InvalidOid
 * otherwise.  Only repair_update() below sets them.
 */
Oid			lf_repair_relid = InvalidOid;
static int64 repair_generation = 0;

/* "schema"."table" of rel, for messages and the query */
static char *
qualified_name(Relation rel)
{
	return quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
}

/*
 * The fence trigger, for a row of repair_unissued()'s UPDATE.  It goes through only if its fence
 * is still above the highest issued generation, read again now that the
 * row is locked (a value issued since may be a real holder's: it stays),
 * and if the statement writes the repair's generation; any other row is
 * skipped.
 */
Datum
lf_repair_row(HeapTuple newtuple, bool s_null, int64 s, bool n_null, int64 n)
{
	if (!s_null && s > lf_highest_issued() && !n_null && n == repair_generation)
		return PointerGetDatum(newtuple);
	return PointerGetDatum(NULL);
}

/*
 * What protect() recorded for relid in lease_fence.protected: the fence
 * column and the tokens.  False when the table is not there.  Read in C,
 * through the extension (extension.c): no query runs, so no policy of that
 * table and nothing a look-alike schema defines is involved.
 */
static bool
read_protected(Oid relid, char **colname, char **tokens)
{
	Relation	rel = table_open(lf_own_relation(LF_PROTECTED), AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	int			a_relid = SPI_fnumber(desc, "relid");
	int			a_column = SPI_fnumber(desc, "fence_column");
	int			a_tokens = SPI_fnumber(desc, "tokens");
	ScanKeyData key;
	TableScanDesc scan;
	TupleTableSlot *slot;
	bool		found = false;

	if (a_relid <= 0 || a_column <= 0 || a_tokens <= 0)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("the extension's table lease_fence.protected lacks a column"),
				errhint("Run ALTER EXTENSION lease_fence UPDATE."));
	ScanKeyInit(&key, a_relid, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(relid));
	slot = table_slot_create(rel, NULL);
	scan = table_beginscan(rel, GetActiveSnapshot(), 1, &key);
	if (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		col_null;
		bool		tok_null;
		Datum		col = slot_getattr(slot, a_column, &col_null);
		Datum		tok = slot_getattr(slot, a_tokens, &tok_null);

		if (col_null || tok_null)
			ereport(ERROR,
					errcode(ERRCODE_DATA_CORRUPTED),
					errmsg("the row of lease_fence.protected for the table with OID %u is incomplete", relid));
		*colname = pstrdup(NameStr(*DatumGetName(col)));
		*tokens = TextDatumGetCString(tok);
		found = true;
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Run repair_unissued()'s UPDATE on one table (query, with $1 = the
 * generation and $2 = the highest issued), with the trigger's door open for
 * that table only while it runs; the number of rows it changed.
 *
 * The UPDATE runs as the table's owner, as a security-restricted operation
 * with a safe search_path and its setting changes undone after it, as
 * VACUUM, ANALYZE and REFRESH MATERIALIZED VIEW run what the owner defined:
 * planning and executing it runs the owner's code (its other triggers,
 * index expressions, functions in policies and defaults), which must never
 * run with the calling superuser's rights.
 */
static uint64
repair_update(Oid member, Oid owner, int64 generation, const char *query, Datum *args)
{
	Oid			save_relid = lf_repair_relid;
	int64		save_generation = repair_generation;
	Oid			argtypes[2] = {INT8OID, INT8OID};
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	volatile uint64 n = 0;
	int			ret;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner, save_sec_context | SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		lf_repair_relid = member;
		repair_generation = generation;
		ret = SPI_execute_with_args(query, 2, argtypes, args, NULL, false, 0);
		if (ret != SPI_OK_UPDATE)
			elog(ERROR, "UPDATE of %s failed: %s",
				 get_rel_name(member), SPI_result_code_string(ret));
		n = SPI_processed;
	}
	PG_FINALLY();
	{
		lf_repair_relid = save_relid;
		repair_generation = save_generation;
	}
	PG_END_TRY();
	AtEOXact_GUC(false, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	return n;
}

/*
 * lease_fence.repair_unissued(tbl regclass, generation bigint) RETURNS bigint
 *
 * Superuser only.  Sets every fence of tbl (and of the partitions under it)
 * that is above the highest issued generation back to generation, which
 * must have been issued; returns the number of rows changed, logs it, and
 * counts it in stats (repair / repaired).
 *
 * How: one ordinary UPDATE per table of the tree, through SPI, each run as
 * that table's owner under the restrictions of a security-restricted
 * operation (repair_update): whatever the owner defined runs with the
 * owner's rights, never the superuser's.  An UPDATE rather than a heap scan
 * in C keeps indexes, row locks, concurrent writers (the READ COMMITTED
 * re-check) and the table's other triggers (an audit trigger sees the
 * repair) as for any write.  The fence trigger would refuse it (it lowers
 * fences), so while the UPDATE runs the trigger lets exactly its rows
 * through, on that one table only (repair_row).
 */
Datum
lf_repair_unissued(PG_FUNCTION_ARGS)
{
	Oid			relid;
	int64		generation;
	int64		highest;
	Relation	rel;
	char		relkind;
	char	   *relname;
	char	   *colname;
	char	   *tokens;
	List	   *members = NIL;
	ListCell   *lc;
	uint64		repaired = 0;
	Datum		args[2];

	if (!superuser())
		ereport(ERROR,
				errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				errmsg("must be superuser to repair fences"),
				errdetail("repair_unissued() lowers fences, which the fence exists to prevent."));
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("arguments must not be NULL"));
	relid = PG_GETARG_OID(0);
	generation = PG_GETARG_INT64(1);

	highest = lf_highest_issued();
	if (generation < 0 || generation > highest)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("generation " INT64_FORMAT " was never issued", generation),
				errdetail("The highest generation issued in this database is " INT64_FORMAT ".", highest),
				errhint("Use lease_fence.next_generation(), or the generation of the current holder."));

	rel = table_open(relid, RowExclusiveLock);
	relkind = rel->rd_rel->relkind;
	relname = qualified_name(rel);
	table_close(rel, NoLock);

	/* what protect() recorded: the fence column, and whose tokens they are */
	if (!read_protected(relid, &colname, &tokens))
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("table %s is not protected", relname),
				errhint("Only tables fenced with lease_fence.protect() can be repaired."));
	if (strcmp(tokens, "issued") != 0)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("table %s takes %s tokens", relname, tokens),
				errdetail("Its fences are not generations of this database, so none of them is unissued."));

	/* the tables that hold rows: the table itself, or its leaf partitions */
	if (relkind == RELKIND_PARTITIONED_TABLE)
	{
		foreach(lc, find_all_inheritors(relid, RowExclusiveLock, NULL))
		{
			if (get_rel_relkind(lfirst_oid(lc)) == RELKIND_RELATION)
				members = lappend_oid(members, lfirst_oid(lc));
		}
	}
	else
		members = list_make1_oid(relid);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	args[0] = Int64GetDatum(generation);
	args[1] = Int64GetDatum(highest);
	foreach(lc, members)
	{
		Oid			member = lfirst_oid(lc);
		Relation	mrel = table_open(member, NoLock);	/* locked above */
		Oid			owner = mrel->rd_rel->relowner;
		char	   *query;

		query = psprintf("UPDATE ONLY %s SET %s = $1 WHERE %s > $2",
						 qualified_name(mrel),
						 quote_identifier(colname), quote_identifier(colname));
		table_close(mrel, NoLock);
		repaired += repair_update(member, owner, generation, query, args);
	}
	SPI_finish();

	lf_count_n(LF_C_REPAIR_REPAIRED, repaired);
	ereport(LOG,
			errmsg("repair_unissued() set " UINT64_FORMAT " fences of table %s, column \"%s\", above the highest issued generation " INT64_FORMAT " to " INT64_FORMAT,
				   repaired, relname, colname, highest, generation));
	PG_RETURN_INT64((int64) repaired);
}
