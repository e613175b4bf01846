/*-------------------------------------------------------------------------
 *
 * refused.c
 *	  Which generations an adoption refused: the table of adoptions
 *	  (lease_fence.generation_adoption), read for the fence's issued check
 *	  and written by adopt_generations() (adopt.c).
 *
 * Each row is one adoption; the fence refuses every generation up to the
 * highest refused_through (fence.h, lf_generation_issued).  The table is
 * written and read in C like the resource fences (nobody else has
 * privileges on it).  Each backend keeps its reading in lf_refused_cached,
 * PG_INT64_MAX until read; an adoption resets every backend's relation
 * cache at its commit, and with it that reading.
 *
 * IDENTIFICATION
 *	  src/fence/refused.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "fence/fence.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* lease_fence.generation_adoption, as the install script creates it */
#define Anum_ga_adopted_at 1
#define Anum_ga_refused_through 2
#define Anum_ga_highest_fence 3
#define Anum_ga_old_highest_issued 4
#define Anum_ga_highest_issued_before 5
#define Natts_ga 5

/* this backend's reading of the highest refused generation (fence.h) */
int64		lf_refused_cached = PG_INT64_MAX;

/* the table it was read from */
static Oid	adoption_relid = InvalidOid;

/* An adoption (or a new table of adoptions) makes the reading stale. */
static void
adoption_relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == adoption_relid)
	{
		adoption_relid = InvalidOid;
		lf_refused_cached = PG_INT64_MAX;
	}
}

/* Called from _PG_init. */
void
lf_refused_init(void)
{
	CacheRegisterRelcacheCallback(adoption_relcache_callback, (Datum) 0);
}

/* The table of adoptions must be as the install script made it. */
static void
check_adoption_table(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);
	static const Oid types[Natts_ga] = {TIMESTAMPTZOID, INT8OID, INT8OID, INT8OID, INT8OID};
	int			i;

	if (desc->natts != Natts_ga)
		goto bad;
	for (i = 0; i < Natts_ga; i++)
		if (TupleDescAttr(desc, i)->attisdropped || TupleDescAttr(desc, i)->atttypid != types[i])
			goto bad;
	return;
bad:
	ereport(ERROR,
			errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			errmsg("the extension's table lease_fence.generation_adoption is not as lease_fence made it"));
}

/*
 * The highest generation an adoption refused, 0 when none did (or this
 * installation's version has no table of adoptions yet); *adopted_at when
 * (may be NULL).  Read under the latest snapshot, whatever the
 * transaction's isolation: an adoption committed since it began counts.
 * Keeps the answer in lf_refused_cached.
 */
int64
lf_refused_through(TimestampTz *adopted_at)
{
	Oid			relid = lf_own_relation_if_present(LF_GENERATION_ADOPTION);
	Relation	rel;
	Snapshot	snap;
	TableScanDesc scan;
	TupleTableSlot *slot;
	int64		refused = 0;
	TimestampTz at = 0;

	if (!OidIsValid(relid))
	{
		/*
		 * An installation of an earlier version: nothing was adopted, and
		 * nothing can be before ALTER EXTENSION UPDATE, whose adoption then
		 * resets every backend's relation cache (see adopt_generations).
		 */
		lf_refused_cached = 0;
		adoption_relid = InvalidOid;
		if (adopted_at)
			*adopted_at = 0;
		return 0;
	}
	rel = table_open(relid, AccessShareLock);
	check_adoption_table(rel);
	snap = RegisterSnapshot(GetLatestSnapshot());
	slot = table_slot_create(rel, NULL);
	scan = table_beginscan(rel, snap, 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		r_null;
		bool		a_null;
		Datum		r = slot_getattr(slot, Anum_ga_refused_through, &r_null);
		Datum		a = slot_getattr(slot, Anum_ga_adopted_at, &a_null);

		if (!r_null && DatumGetInt64(r) > refused)
		{
			refused = DatumGetInt64(r);
			at = a_null ? 0 : DatumGetTimestampTz(a);
		}
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	table_close(rel, AccessShareLock);

	adoption_relid = relid;
	lf_refused_cached = refused;
	if (adopted_at)
		*adopted_at = at;
	return refused;
}

/*
 * Open the table of adoptions to record one, with lockmode (one adoption
 * at a time: ShareRowExclusiveLock), checked to be lease_fence's own and
 * without an index (we maintain none).
 */
Relation
lf_open_adoption_table(LOCKMODE lockmode)
{
	Relation	rel = table_open(lf_own_relation(LF_GENERATION_ADOPTION), lockmode);
	List	   *indexes;

	check_adoption_table(rel);
	indexes = RelationGetIndexList(rel);
	if (indexes != NIL)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("table lease_fence.generation_adoption has an index lease_fence did not create: %s",
					   get_rel_name(linitial_oid(indexes))),
				errhint("Drop that index."));
	return rel;
}

/*
 * Record an adoption in rel (lf_open_adoption_table): every generation up
 * to refused is refused from now on, in every backend once this
 * transaction commits.  fence and old are NULL when not found / not given.
 */
void
lf_record_adoption(Relation rel, int64 refused, bool has_fence, int64 fence,
				   bool has_old, int64 old, int64 own_before)
{
	Datum		values[Natts_ga];
	bool		nulls[Natts_ga] = {false, false, false, false, false};
	HeapTuple	tuple;

	values[Anum_ga_adopted_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[Anum_ga_refused_through - 1] = Int64GetDatum(refused);
	values[Anum_ga_highest_fence - 1] = Int64GetDatum(fence);
	nulls[Anum_ga_highest_fence - 1] = !has_fence;
	values[Anum_ga_old_highest_issued - 1] = Int64GetDatum(old);
	nulls[Anum_ga_old_highest_issued - 1] = !has_old;
	values[Anum_ga_highest_issued_before - 1] = Int64GetDatum(own_before);
	tuple = heap_form_tuple(RelationGetDescr(rel), values, nulls);
	simple_heap_insert(rel, tuple);
	heap_freetuple(tuple);

	/*
	 * Every backend reads the refused generation again at its next
	 * transaction after our commit: also one that read it when this
	 * database's version had no table of adoptions (it knows no OID to be
	 * told about).  An adoption is rare; a relation cache rebuilt once is
	 * its whole cost.
	 */
	CacheInvalidateRelcacheAll();
	lf_refused_cached = PG_INT64_MAX;
}
