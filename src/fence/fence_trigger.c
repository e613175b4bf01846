/*-------------------------------------------------------------------------
 *
 * fence_trigger.c
 *	  The fence: a BEFORE ROW trigger that rejects a write whose generation
 *	  is lower than the one stored in the row, and a BEFORE TRUNCATE guard.
 *
 * The trigger runs inside the write, on the row version PostgreSQL has
 * locked for it (for UPDATE and DELETE, GetTupleForTrigger locks the newest
 * version and, in READ COMMITTED, re-evaluates after a concurrent update), so
 * the comparison and the write are one atomic step: a writer that lost its
 * lease cannot slip a write in between check and write.
 *
 * Rows written by a logical replication worker (table sync, apply, parallel
 * apply) pass as they are: the publisher's fence decided them where they
 * were written, and the subscriber's workers carry no generation of their
 * own, so checking them again could only stall the subscription.
 *
 * Arguments: the fence column (default "fence"), then "lenient" (default)
 * or "strict", then "issued" (default: a supplied generation must have been
 * issued by this database, else LF004) or "external" (tokens come from
 * elsewhere: any value).  The column number and modes are looked up on the
 * first row of a statement and kept in fn_extra, which lives as long as the
 * executor's trigger function cache, so later rows cost no catalog or name
 * look-up; the issued check costs one comparison with a cached value.
 *
 * repair_unissued() (repair.c) opens one narrow door in the UPDATE rule,
 * for its own rows of one table: the trigger asks lf_repair_row().
 *
 * It never reaches Redis; the lease layer's check of a write (a lost
 * kept-alive lease) comes through lf_write_check_hook.
 *
 * IDENTIFICATION
 *	  src/fence/fence_trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "fence/fence.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "replication/logicalworker.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

PG_FUNCTION_INFO_V1(lf_fence_trigger);
PG_FUNCTION_INFO_V1(lf_truncate_guard);

#define DEFAULT_FENCE_COLUMN "fence"

/* What the first row of a statement learns, for the rows after it. */
typedef struct FenceConfig
{
	Oid			tgoid;			/* trigger it was computed for */
	Oid			relid;			/* relation it was computed for */
	AttrNumber	attnum;			/* fence column */
	bool		strict;			/* strict mode */
	bool		check_issued;	/* tokens "issued": refuse unissued values */
} FenceConfig;

/*
 * Is this process a logical replication worker?  Known once per process: a
 * backend never becomes one, and a worker is one from before its first
 * transaction (IsLogicalWorker() is MyLogicalRepWorker != NULL, set when the
 * worker attaches to its slot).  Cached because the row trigger asks for
 * every row.  -1: not asked yet.
 */
static int	in_logical_worker = -1;

static inline bool
is_logical_replication_worker(void)
{
	if (unlikely(in_logical_worker < 0))
		in_logical_worker = IsLogicalWorker() ? 1 : 0;
	return in_logical_worker == 1;
}

/*
 * May this logical replication worker write rel as the publisher decided?
 * Only when it acts with the rights of the table's owner, who could switch
 * the fence off anyway: PostgreSQL's apply and table-sync workers run as the
 * table owner (16+, the default) or as a superuser subscription owner (15).
 * A subscription created with run_as_owner = true by a role that merely
 * may write the table (16+) is fenced like any other writer: it must not be
 * a way around the fence.
 */
static bool
replication_may_bypass(Relation rel)
{
	return superuser() || has_privs_of_role(GetUserId(), rel->rd_rel->relowner);
}

/* "schema"."table" of rel, for messages; only called on error paths */
static char *
relation_display_name(Relation rel)
{
	return quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
}

/* The fence column named by the trigger's first argument (or the default). */
static const char *
fence_column_name(Trigger *trigger)
{
	return trigger->tgnargs >= 1 ? trigger->tgargs[0] : DEFAULT_FENCE_COLUMN;
}

/*
 * The tokens argument: "issued" (true: check that supplied generations were
 * issued) or "external" (false).  Misuse names the trigger and table.
 */
static bool
parse_tokens(const char *fname, Trigger *trigger, Relation rel, const char *tokens)
{
	if (pg_strcasecmp(tokens, "issued") == 0)
		return true;
	if (pg_strcasecmp(tokens, "external") == 0)
		return false;
	ereport(ERROR,
			errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("%s: unknown tokens \"%s\"", fname, tokens),
			errdetail("Trigger \"%s\" on table %s names tokens \"%s\".",
					  trigger->tgname, relation_display_name(rel), tokens),
			errhint("The tokens are \"issued\" (generations of this database) or \"external\"."));
	return true;				/* not reached */
}

/*
 * Find and validate the fence column of rel: it must exist, be a user column
 * of type bigint, and not be generated.  Misuse is reported naming the
 * trigger, table and column.
 */
static AttrNumber
lookup_fence_column(const char *fname, Relation rel, Trigger *trigger,
					const char *colname)
{
	TupleDesc	tupdesc = RelationGetDescr(rel);
	AttrNumber	attnum;
	Form_pg_attribute att;

	attnum = SPI_fnumber(tupdesc, colname);
	if (attnum == SPI_ERROR_NOATTRIBUTE)
		ereport(ERROR,
				errcode(ERRCODE_UNDEFINED_COLUMN),
				errmsg("%s: fence column \"%s\" of table %s does not exist",
					   fname, colname, relation_display_name(rel)),
				errdetail("Trigger \"%s\" names it as its fence column.", trigger->tgname),
				errhint("Use lease_fence.protect() to add the column, or name an existing bigint column as the trigger's first argument."));
	if (attnum <= 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
				errmsg("%s: fence column \"%s\" of table %s is a system column",
					   fname, colname, relation_display_name(rel)));

	att = TupleDescAttr(tupdesc, attnum - 1);
	if (att->attgenerated)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_COLUMN_DEFINITION),
				errmsg("%s: fence column \"%s\" of table %s is a generated column",
					   fname, colname, relation_display_name(rel)),
				errdetail("A generated column is computed after BEFORE triggers run, so it cannot carry a generation."));
	if (att->atttypid != INT8OID)
		ereport(ERROR,
				errcode(ERRCODE_DATATYPE_MISMATCH),
				errmsg("%s: fence column \"%s\" of table %s must be of type bigint",
					   fname, colname, relation_display_name(rel)),
				errdetail("It is of type %s.", format_type_be(att->atttypid)));
	return attnum;
}

/*
 * Check how fence_trigger was fired, in the order contrib's moddatetime
 * does, and read its arguments.  Runs on the first row of each statement.
 */
static void
configure(const char *fname, TriggerData *trigdata, FenceConfig *config)
{
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;

	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s: must be fired for each row", fname),
				errdetail("Trigger \"%s\" on table %s is a statement-level trigger.",
						  trigger->tgname, relation_display_name(rel)));
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s: must be fired BEFORE the write", fname),
				errdetail("Trigger \"%s\" on table %s is not a BEFORE trigger; only a BEFORE trigger can check the row before it is written.",
						  trigger->tgname, relation_display_name(rel)));
	/* a row-level trigger fires only for INSERT, UPDATE and DELETE */

	if (trigger->tgnargs > 3)
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s: too many arguments", fname),
				errdetail("Trigger \"%s\" on table %s has %d arguments; it takes the fence column, the mode and the tokens.",
						  trigger->tgname, relation_display_name(rel), trigger->tgnargs));

	config->strict = false;
	if (trigger->tgnargs >= 2)
	{
		const char *mode = trigger->tgargs[1];

		if (pg_strcasecmp(mode, "strict") == 0)
			config->strict = true;
		else if (pg_strcasecmp(mode, "lenient") != 0)
			ereport(ERROR,
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("%s: unknown mode \"%s\"", fname, mode),
					errdetail("Trigger \"%s\" on table %s names mode \"%s\".",
							  trigger->tgname, relation_display_name(rel), mode),
					errhint("The mode is \"lenient\" or \"strict\"."));
	}
	/* two arguments (a trigger made by protect() before 1.2): issued */
	config->check_issued = trigger->tgnargs < 3 ||
		parse_tokens(fname, trigger, rel, trigger->tgargs[2]);

	config->attnum = lookup_fence_column(fname, rel, trigger, fence_column_name(trigger));
	config->tgoid = trigger->tgoid;
	config->relid = RelationGetRelid(rel);
}

/* LF001: the write carries a generation lower than the row's fence. */
static void
report_stale(Relation rel, const char *colname, AttrNumber attnum, int64 stored, int64 supplied)
{
	lf_count(LF_C_FENCE_LF001);
	ereport(ERROR,
			errcode(ERRCODE_LF_STALE_GENERATION),
			errmsg("stale generation: write rejected by fence"),
			errdetail("Table %s, column \"%s\": stored generation " INT64_FORMAT ", supplied generation " INT64_FORMAT ".",
					  relation_display_name(rel), colname, stored, supplied),
			errhint("A holder with a newer generation has written this row; this writer's lease is gone. Stop, and acquire a new generation before writing again."),
			errtablecol(rel, attnum));
}

/* LF004: the supplied generation was never issued by this database. */
static void
report_unissued(Relation rel, const char *colname, AttrNumber attnum, int64 supplied)
{
	lf_report_unissued(supplied, LF_C_FENCE_LF004,
					   psprintf("Table %s, column \"%s\"", relation_display_name(rel), colname),
					   rel, attnum, NULL);
}

/* LF002: no generation where one is required. */
static void
report_missing(Relation rel, const char *colname, AttrNumber attnum, bool is_null)
{
	lf_count(LF_C_FENCE_LF002);
	if (is_null)
		ereport(ERROR,
				errcode(ERRCODE_LF_MISSING_GENERATION),
				errmsg("missing generation: write rejected by fence"),
				errdetail("Table %s, column \"%s\": the fence would be NULL, and a NULL fence is never accepted.",
						  relation_display_name(rel), colname),
				errhint("Set the current generation with lease_fence.set_generation() or SET LOCAL %s.",
						LF_GENERATION_GUC),
				errtablecol(rel, attnum));
	else
		ereport(ERROR,
				errcode(ERRCODE_LF_MISSING_GENERATION),
				errmsg("missing generation: write rejected by fence"),
				errdetail("Table %s is fenced in strict mode and no current generation is set.",
						  relation_display_name(rel)),
				errhint("Set the current generation with lease_fence.set_generation() or SET LOCAL %s.",
						LF_GENERATION_GUC),
				errtablecol(rel, attnum));
}

/* LF003: the statement writes a fence that contradicts the current generation. */
static void
report_conflict(Relation rel, const char *colname, AttrNumber attnum, int64 written, int64 current)
{
	lf_count(LF_C_FENCE_LF003);
	ereport(ERROR,
			errcode(ERRCODE_LF_CONFLICTING_GENERATION),
			errmsg("conflicting generation: write rejected by fence"),
			errdetail("Table %s, column \"%s\": the statement writes " INT64_FORMAT " but the current generation is " INT64_FORMAT ".",
					  relation_display_name(rel), colname, written, current),
			errhint("Leave the fence column out of the statement, or write the current generation into it."),
			errtablecol(rel, attnum));
}

/*
 * lease_fence.fence_trigger()
 *
 * The rules (docs/guides/fencing-tables.md, "The rules").  G is the current generation (if set),
 * S the stored fence of the locked row, N the fence the statement writes.
 * "Issued?" applies with tokens "issued" (the default): a value greater
 * than any next_generation() has handed out -> LF004.
 *
 *	UPDATE: N is NULL and differs from S -> LF002; G set and N above S and
 *			other than G -> LF003 (N at or below S is a full-row save's
 *			reloaded fence: not written); supplied = G if set, else N (strict: G
 *			required, LF002); supplied NULL -> LF002; G not issued, or no G
 *			and N differs from S and is not issued -> LF004; supplied < S
 *			-> LF001; otherwise the row's fence becomes supplied.
 *	DELETE: G set: G not issued -> LF004, G < S -> LF001; no G: strict ->
 *			LF002, lenient passes.
 *	INSERT: G set: G not issued -> LF004, else the fence becomes G; no G:
 *			strict -> LF002, lenient keeps N, but a NULL N -> LF002 and an
 *			N not issued -> LF004.
 *
 * A lenient UPDATE that leaves the fence alone brings no value of its own,
 * so it is not checked for issue: it cannot make the row's fence worse.
 *
 * In a logical replication worker every row passes unchanged and uncounted
 * (see the file header).
 */
Datum
lf_fence_trigger(PG_FUNCTION_ARGS)
{
	const char *fname = "fence_trigger";
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	FenceConfig *config;
	Relation	rel;
	TupleDesc	tupdesc;
	HeapTuple	newtuple;
	Datum		d;
	bool		n_null;
	int64		n;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s: not called by trigger manager", fname));

	/* a replicated row was fenced on the publisher: write it as given */
	if (unlikely(is_logical_replication_worker()) &&
		replication_may_bypass(trigdata->tg_relation))
		return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
							   trigdata->tg_newtuple : trigdata->tg_trigtuple);

	config = (FenceConfig *) fcinfo->flinfo->fn_extra;
	if (config == NULL ||
		config->tgoid != trigdata->tg_trigger->tgoid ||
		config->relid != RelationGetRelid(trigdata->tg_relation))
	{
		if (config == NULL)
			config = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, sizeof(FenceConfig));
		config->tgoid = InvalidOid;
		configure(fname, trigdata, config);
		fcinfo->flinfo->fn_extra = config;
	}

	rel = trigdata->tg_relation;
	tupdesc = RelationGetDescr(rel);

	if (unlikely(lf_generation_invalid))
		lf_check_generation_valid();
	/* the lease layer's check (keepalive.c: a lost kept-alive lease, LF010) */
	if (unlikely(lf_write_check_hook != NULL) && lf_generation_is_set)
		lf_write_check_hook(lf_generation, rel, config->attnum, NULL);

	if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
	{
		HeapTuple	oldtuple = trigdata->tg_trigtuple;

		if (lf_generation_is_set)
		{
			bool		s_null;
			int64		s;

			if (config->check_issued && !lf_generation_issued(lf_generation))
				report_unissued(rel, fence_column_name(trigdata->tg_trigger), config->attnum, lf_generation);
			d = heap_getattr(oldtuple, config->attnum, tupdesc, &s_null);
			s = s_null ? 0 : DatumGetInt64(d);
			if (!s_null && lf_generation < s)
				report_stale(rel, fence_column_name(trigdata->tg_trigger), config->attnum, s, lf_generation);
		}
		else if (config->strict)
			report_missing(rel, fence_column_name(trigdata->tg_trigger), config->attnum, false);
		lf_fence_accepted_pending++;
		return PointerGetDatum(oldtuple);
	}

	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
	{
		newtuple = trigdata->tg_trigtuple;
		d = heap_getattr(newtuple, config->attnum, tupdesc, &n_null);
		n = n_null ? 0 : DatumGetInt64(d);

		if (!lf_generation_is_set)
		{
			if (config->strict)
				report_missing(rel, fence_column_name(trigdata->tg_trigger), config->attnum, false);
			if (n_null)
				report_missing(rel, fence_column_name(trigdata->tg_trigger), config->attnum, true);
			if (config->check_issued && !lf_generation_issued(n))
				report_unissued(rel, fence_column_name(trigdata->tg_trigger), config->attnum, n);
			if (unlikely(lf_write_check_hook != NULL))
				lf_write_check_hook(n, rel, config->attnum, NULL);
			lf_fence_accepted_pending++;
			return PointerGetDatum(newtuple);
		}
		if (config->check_issued && !lf_generation_issued(lf_generation))
			report_unissued(rel, fence_column_name(trigdata->tg_trigger), config->attnum, lf_generation);
		if (!n_null && n == lf_generation)
		{
			lf_fence_accepted_pending++;
			return PointerGetDatum(newtuple);
		}
	}
	else
	{
		/* UPDATE */
		HeapTuple	oldtuple = trigdata->tg_trigtuple;
		bool		s_null;
		int64		s;
		bool		written;
		int64		supplied;

		newtuple = trigdata->tg_newtuple;
		d = heap_getattr(oldtuple, config->attnum, tupdesc, &s_null);
		s = s_null ? 0 : DatumGetInt64(d);
		d = heap_getattr(newtuple, config->attnum, tupdesc, &n_null);
		n = n_null ? 0 : DatumGetInt64(d);

		if (unlikely(lf_repair_relid == RelationGetRelid(rel)))
			return lf_repair_row(newtuple, s_null, s, n_null, n);

		/* did the statement write a value other than the stored one? */
		written = (n_null != s_null) || (!n_null && n != s);

		if (written && n_null)
			report_missing(rel, fence_column_name(trigdata->tg_trigger), config->attnum, true);

		if (lf_generation_is_set)
		{
			/*
			 * A full-row save: an ORM writes back every column, the fence
			 * as it loaded it.  A value below the stored one is not the
			 * statement's own generation, and is not counted as written:
			 * the current generation is checked as if the fence were left
			 * alone (LF001 when it is stale).
			 */
			if (written && !s_null && n < s)
				written = false;
			if (written && n != lf_generation)
				report_conflict(rel, fence_column_name(trigdata->tg_trigger), config->attnum, n, lf_generation);
			supplied = lf_generation;
			if (config->check_issued && !lf_generation_issued(supplied))
				report_unissued(rel, fence_column_name(trigdata->tg_trigger), config->attnum, supplied);
		}
		else
		{
			if (config->strict)
				report_missing(rel, fence_column_name(trigdata->tg_trigger), config->attnum, false);
			if (n_null)
				report_missing(rel, fence_column_name(trigdata->tg_trigger), config->attnum, true);
			supplied = n;
			if (written && config->check_issued && !lf_generation_issued(supplied))
				report_unissued(rel, fence_column_name(trigdata->tg_trigger), config->attnum, supplied);
			if (unlikely(lf_write_check_hook != NULL))
				lf_write_check_hook(supplied, rel, config->attnum, NULL);
		}

		if (!s_null && supplied < s)
			report_stale(rel, fence_column_name(trigdata->tg_trigger), config->attnum, s, supplied);

		if (!n_null && n == supplied)
		{
			lf_fence_accepted_pending++;
			return PointerGetDatum(newtuple);
		}
	}

	/* the row's fence becomes the current generation */
	{
		int			cols[1];
		Datum		values[1];
		bool		nulls[1];

		cols[0] = config->attnum;
		values[0] = Int64GetDatum(lf_generation);
		nulls[0] = false;
		newtuple = heap_modify_tuple_by_cols(newtuple, tupdesc, 1, cols, values, nulls);
	}
	lf_fence_accepted_pending++;
	return PointerGetDatum(newtuple);
}

/*
 * The highest fence of one relation with storage, in column attnum: a
 * sequential scan in C under snap.  No query is planned and nothing of the
 * table owner's runs (no index expression, no row level security policy, no
 * default), and no identity is switched: the scan reads every row the
 * snapshot sees, whoever the caller is.  False when no row has a fence.
 * Also adopt_generations()'s reader of every fence.
 */
bool
lf_highest_fence_in(Relation rel, AttrNumber attnum, Snapshot snap, int64 *highest)
{
	TableScanDesc scan;
	TupleTableSlot *slot;
	bool		found = false;

	slot = table_slot_create(rel, NULL);
	scan = table_beginscan(rel, snap, 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d = slot_getattr(slot, attnum, &isnull);

		if (!isnull && (!found || DatumGetInt64(d) > *highest))
		{
			*highest = DatumGetInt64(d);
			found = true;
		}
		CHECK_FOR_INTERRUPTS();
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	return found;
}

/*
 * ... of a fenced table's member, its fence column looked up by name, since
 * a partition's column numbers can differ from its parent's.
 */
static bool
highest_fence_of(const char *fname, Relation rel, Trigger *trigger,
				 const char *colname, Snapshot snap, int64 *highest)
{
	return lf_highest_fence_in(rel, lookup_fence_column(fname, rel, trigger, colname),
							   snap, highest);
}

/*
 * lease_fence.truncate_guard()
 *
 * BEFORE TRUNCATE FOR EACH STATEMENT.  TRUNCATE fires no row trigger, so
 * without this a stale holder could empty a fenced table.  It needs a current
 * generation, and that generation must not be lower than the highest fence
 * in the table (one scan: TRUNCATE is rare, and it is the only way to know).
 * With tokens "issued" it must also have been issued (LF004).  Arguments:
 * the fence column (default "fence"), then "issued" (default) or "external".
 * A TRUNCATE replayed by a logical replication worker passes: the
 * publisher's guard checked it.
 *
 * The scan uses the latest snapshot, not the transaction's: TRUNCATE removes
 * every row, also those committed after a REPEATABLE READ snapshot was taken
 * (it holds ACCESS EXCLUSIVE, so no write is in progress).  It sees every
 * row whatever row level security would show the caller, as TRUNCATE
 * ignores row level security too.  On a partitioned table it reads every
 * leaf partition; foreign partitions are not read (docs/guides/fencing-tables.md).
 */
Datum
lf_truncate_guard(PG_FUNCTION_ARGS)
{
	const char *fname = "truncate_guard";
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Relation	rel;
	const char *colname;
	char	   *relname;
	Snapshot	snap;
	List	   *members;
	ListCell   *lc;
	bool		found = false;
	int64		highest = 0;
	bool		check_issued;
	AttrNumber	attnum;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s: not called by trigger manager", fname));

	/* a replicated TRUNCATE was fenced on the publisher */
	if (is_logical_replication_worker() &&
		replication_may_bypass(trigdata->tg_relation))
		return PointerGetDatum(NULL);

	rel = trigdata->tg_relation;
	if (!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s: must be fired BEFORE TRUNCATE FOR EACH STATEMENT", fname),
				errdetail("Trigger \"%s\" on table %s is not.",
						  trigdata->tg_trigger->tgname, relation_display_name(rel)));
	if (trigdata->tg_trigger->tgnargs > 2)
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("%s: too many arguments", fname),
				errdetail("Trigger \"%s\" on table %s has %d arguments; it takes the fence column and the tokens.",
						  trigdata->tg_trigger->tgname, relation_display_name(rel),
						  trigdata->tg_trigger->tgnargs));
	/* one argument (a guard made by protect() before 1.2): issued */
	check_issued = trigdata->tg_trigger->tgnargs < 2 ||
		parse_tokens(fname, trigdata->tg_trigger, rel, trigdata->tg_trigger->tgargs[1]);

	colname = fence_column_name(trigdata->tg_trigger);
	relname = relation_display_name(rel);
	attnum = lookup_fence_column(fname, rel, trigdata->tg_trigger, colname);
	lf_check_generation_valid();

	if (!lf_generation_is_set)
	{
		lf_count(LF_C_FENCE_LF002);
		ereport(ERROR,
				errcode(ERRCODE_LF_MISSING_GENERATION),
				errmsg("missing generation: TRUNCATE rejected by fence"),
				errdetail("Table %s is fenced and no current generation is set.", relname),
				errhint("Set the current generation with lease_fence.set_generation() or SET LOCAL %s.",
						LF_GENERATION_GUC),
				errtablecol(rel, attnum));
	}

	if (check_issued && !lf_generation_issued(lf_generation))
		report_unissued(rel, colname, attnum, lf_generation);
	/* the lease layer's check, as for rows */
	if (unlikely(lf_write_check_hook != NULL))
		lf_write_check_hook(lf_generation, rel, attnum, NULL);

	/* TRUNCATE holds ACCESS EXCLUSIVE on the table and all its partitions */
	if (rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE)
		members = find_all_inheritors(RelationGetRelid(rel), NoLock, NULL);
	else
		members = list_make1_oid(RelationGetRelid(rel));

	snap = RegisterSnapshot(GetLatestSnapshot());
	foreach(lc, members)
	{
		Relation	member = table_open(lfirst_oid(lc), NoLock);
		int64		h = 0;

		if (member->rd_rel->relkind == RELKIND_RELATION &&
			highest_fence_of(fname, member, trigdata->tg_trigger, colname, snap, &h) &&
			(!found || h > highest))
		{
			highest = h;
			found = true;
		}
		table_close(member, NoLock);
	}
	UnregisterSnapshot(snap);

	if (found && highest > lf_generation)
		report_stale(rel, colname, attnum, highest, lf_generation);

	return PointerGetDatum(NULL);
}
