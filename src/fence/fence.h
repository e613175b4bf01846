/*-------------------------------------------------------------------------
 *
 * fence.h
 *	  The fence layer (layer 1; its files and the order of their calls:
 *	  docs/design.md, "The layers"): the extension's own relations, issued
 *	  and current generations, resource fences, repair_unissued and the row
 *	  fence.  It needs no Redis and reaches no file above it: what the
 *	  leases above must tell the fence, they tell through
 *	  lf_write_check_hook.
 *
 * IDENTIFICATION
 *	  src/fence/fence.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LF_FENCE_H
#define LF_FENCE_H

#include "access/attnum.h"
#include "access/htup.h"
#include "fmgr.h"
#include "storage/lockdefs.h"
#include "utils/elog.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
#include "datatype/timestamp.h"

#include "base/compat.h"
#include "base/stats.h"

/* SQLSTATEs of class LF: docs/reference.md, "SQLSTATEs", says when and what to do */
#define ERRCODE_LF_STALE_GENERATION			MAKE_SQLSTATE('L','F','0','0','1')
#define ERRCODE_LF_MISSING_GENERATION		MAKE_SQLSTATE('L','F','0','0','2')
#define ERRCODE_LF_CONFLICTING_GENERATION	MAKE_SQLSTATE('L','F','0','0','3')
#define ERRCODE_LF_UNISSUED_GENERATION		MAKE_SQLSTATE('L','F','0','0','4')
#define ERRCODE_LF_LEASE_LOST_AT_COMMIT		MAKE_SQLSTATE('L','F','0','1','0')

/* ---------------------------------------------------------------------
 * extension.c: the extension's own relations, found through the extension
 * ---------------------------------------------------------------------
 */
typedef enum LfOwnRelation
{
	LF_GENERATION_SEQ,			/* lease_fence.generation_seq */
	LF_RESOURCE_GENERATION,		/* lease_fence.resource_generation */
	LF_PROTECTED,				/* lease_fence.protected */
	LF_HEAL_BUDGET_SEQ,			/* lease_fence.heal_budget_seq */
	LF_RESOURCE_CHECKPOINT,		/* lease_fence.resource_checkpoint */
	LF_GENERATION_ADOPTION,		/* lease_fence.generation_adoption */
	LF_NUM_OWN_RELATIONS
} LfOwnRelation;

extern Oid	lf_own_relation(LfOwnRelation which);
extern Oid	lf_own_relation_if_present(LfOwnRelation which);
extern bool lf_is_extension_owner(void);
/* error fields naming a resource fence's table and resource (in an ereport) */
extern int	lf_errresource(const char *resource);
extern void lf_extension_init(void);

/* ---------------------------------------------------------------------
 * generation.c: durable generations, and which were issued
 * ---------------------------------------------------------------------
 */
extern int64 lf_draw_generation(void);
extern void lf_heal_generation(int64 stored, const char *resource);
extern void lf_generation_init(void);

/*
 * lf_highest_issued() is the one place that knows what "issued" means;
 * lf_issued_cached is this backend's last reading of it, which only a larger
 * supplied generation makes it refresh.  lf_refused_cached is this backend's
 * reading of adopt.c's refused_through (PG_INT64_MAX until read, and again
 * whenever an adoption may have changed it): generations 1 to it are another
 * database's, refused.
 */
extern int64 lf_issued_cached;
extern int64 lf_refused_cached;
extern int64 lf_highest_issued(void);
extern bool lf_generation_issued_slow(int64 generation);

/*
 * Was generation issued in this database, and not before an adoption?  Free
 * unless it exceeds the cache or is at most the refused one.
 */
static inline bool
lf_generation_issued(int64 generation)
{
	return likely(generation <= lf_issued_cached && generation > lf_refused_cached) ||
		lf_generation_issued_slow(generation);
}

/*
 * Refuse (LF004, counted as c) a supplied generation this database never
 * issued, before anything is written.  target names what was written,
 * capitalised, for the DETAIL: "Table public.t, column \"fence\"",
 * "Resource \"r\"".  On a hot path, test lf_generation_issued() first and
 * build target only when it fails, as the fence trigger does.
 */
LF_NORETURN_BEFORE extern void lf_report_unissued(int64 supplied, LfCounter c, const char *target,
												  Relation rel, int attnum, const char *resource) LF_NORETURN_AFTER;

/*
 * generation.c, for adopt.c: move the generations to the first value of a
 * new epoch above top, and above every epoch this database has issued in
 * (never down); returns that value, and *own_before the highest issued
 * before the move.
 */
extern int64 lf_start_epoch_above(int64 top, int64 *own_before);

/* ---------------------------------------------------------------------
 * adopt.c: adopt_generations(), and which generations it refused
 * ---------------------------------------------------------------------
 */

/*
 * The highest generation an adoption refused (0: none), read from the
 * table of adoptions when the backend's reading is gone; *adopted_at when
 * it was (may be NULL).
 */
extern int64 lf_refused_through(TimestampTz *adopted_at);
extern void lf_adopt_init(void);

/* fence_trigger.c: the highest fence in column attnum of rel, under snap */
extern bool lf_highest_fence_in(Relation rel, AttrNumber attnum, Snapshot snap, int64 *highest);

/* ---------------------------------------------------------------------
 * current_generation.c: the generation fenced writes carry
 * ---------------------------------------------------------------------
 */

/* name of the GUC that carries the current generation */
#define LF_GENERATION_GUC "lease_fence.generation"

extern bool lf_generation_is_set;
extern int64 lf_generation;
extern bool lf_generation_invalid;
extern void lf_check_generation_valid(void);
extern bool lf_parse_generation(const char *s, bool *is_set, int64 *value);
extern void lf_set_lease_generation(bool is_set, int64 g);
extern int64 lf_check_generation_arg(FunctionCallInfo fcinfo, int argno);
extern void lf_set_current_generation(int64 generation, bool is_local);
extern void lf_require_transaction_block(void);
extern void lf_current_generation_init(void);

/*
 * A check of every fenced write (rows, TRUNCATE, fence_resource) under
 * generation g, before anything is written: it throws to refuse the write,
 * naming what was written in the error's fields (rel and attnum for a row,
 * resource for a resource fence: lf_errresource).
 * NULL while nobody needs one, so that the fence pays one branch.  The
 * lease layer installs it while this session has leases (LF010 for a lost
 * one; a resource fence bounds an idle transaction by the lease): news
 * from above travels down by a hook, never by a call upward.
 */
typedef void (*LfWriteCheck) (int64 g, Relation rel, int attnum, const char *resource);
extern LfWriteCheck lf_write_check_hook;

/* ---------------------------------------------------------------------
 * resource_fence.c
 * ---------------------------------------------------------------------
 */
extern int64 lf_fence_resource_at(const char *resource, int64 g);
extern int64 lf_fence_resource_current(const char *resource);
/* the tables keyed by resource (resource_generation, resource_checkpoint) */
extern void lf_open_resource_table(LfOwnRelation which, LOCKMODE lockmode, Relation *rel,
								   Relation *pkey);
extern bool lf_find_resource_row(Relation rel, Relation pkey, text *resource, ItemPointer tid,
								 TransactionId *inserter, TransactionId *changer, int64 *stored);
extern void lf_index_new_version(Relation rel, Relation pkey, HeapTuple tuple, Datum resource);
/* a resource name longer than this is refused (lf_check_resource_arg) */
#define LF_MAX_RESOURCE 1024

extern char *lf_check_resource_arg(text *t);

/* ---------------------------------------------------------------------
 * repair.c: repair_unissued() and the one door it opens in the fence
 * ---------------------------------------------------------------------
 */
extern Oid	lf_repair_relid;
extern Datum lf_repair_row(HeapTuple newtuple, bool s_null, int64 s, bool n_null, int64 n);

#endif							/* LF_FENCE_H */
