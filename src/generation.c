/*-------------------------------------------------------------------------
 *
 * generation.c
 *	  Durable generations: lease_fence.next_generation().
 *
 * A generation must be greater than every generation this database has ever
 * returned, also after a crash at any instant, also when the transaction
 * that drew it aborted, also with synchronous_commit = off.  A sequence
 * alone does not promise that: nextval() logs a batch of values ahead
 * (SEQ_LOG_VALS) and hands out values of that batch before the WAL record
 * that covers it has reached disk; the record is flushed only when some
 * later commit happens to flush it.  After a crash the sequence restarts
 * from the last *flushed* record, so an unflushed batch is handed out again.
 *
 * So after nextval we flush the WAL up to the LSN of the sequence's page.
 * Whichever backend logged the batch our value came from, that record's end
 * is <= the page LSN, so the flush makes our value durable.  When the record
 * is already on disk (every call but about one per batch), XLogFlush returns
 * after comparing two LSNs: at most one WAL flush per batch of values.
 *
 * Issued generations.  A value is issued once nextval() has handed it out
 * (to next_generation() or to the lease helper's draw), committed or not.
 * nextval leaves the highest value it handed out as last_value in the
 * sequence's buffer page (the WAL record logs up to 32 values ahead; after
 * a crash the page restarts from there, which only counts more values as
 * issued, never fewer), and a setval() that heals a stale generation leaves
 * its value there as called.  So the highest issued generation is read
 * from that page, in C: no SQL, no privilege check on the sequence, no
 * change of user.  Each backend caches the last value it read and reads the
 * page again only when a larger generation is supplied; a value is issued
 * once, for good, so a cache that lags can only cause a re-read, never a
 * refusal.  The cache is dropped when the sequence's relcache entry is
 * invalidated (DROP EXTENSION, ALTER SEQUENCE RESTART), since a new
 * sequence starts again from 1.
 *
 * IDENTIFICATION
 *	  src/generation.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "commands/sequence.h"
#include "compat.h"
#include "fmgr.h"
#include "lease_fence.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/resowner.h"

#define LF_SCHEMA "lease_fence"
#define LF_GENERATION_SEQ "generation_seq"

/* the special space of a sequence page, as commands/sequence.c defines it */
#define LF_SEQ_MAGIC	  0x1717
typedef struct LfSequenceMagic
{
	uint32		magic;
} LfSequenceMagic;

PG_FUNCTION_INFO_V1(lf_next_generation);

/* the highest generation this backend has seen issued (0 is always accepted) */
int64		lf_issued_cached = 0;

/* the sequence lf_issued_cached was read from */
static Oid	issued_seqid = InvalidOid;

/* The OID of lease_fence.generation_seq, looked up through the syscache. */
static Oid
generation_seq_oid(void)
{
	Oid			nspid = get_namespace_oid(LF_SCHEMA, true);
	Oid			seqid = InvalidOid;

	if (OidIsValid(nspid))
		seqid = get_relname_relid(LF_GENERATION_SEQ, nspid);
	if (!OidIsValid(seqid))
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("sequence %s.%s does not exist", LF_SCHEMA, LF_GENERATION_SEQ),
				errhint("Run CREATE EXTENSION lease_fence in this database."));
	return seqid;
}

/*
 * Forget the cached highest issued generation when its sequence changes or
 * goes away (relid is InvalidOid when the whole relcache is reset): a new
 * generation_seq starts again from 1, and its values are not issued until
 * it hands them out.
 */
static void
issued_relcache_callback(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == issued_seqid)
	{
		issued_seqid = InvalidOid;
		lf_issued_cached = 0;
	}
}

/* Called from _PG_init. */
void
lf_generation_init(void)
{
	CacheRegisterRelcacheCallback(issued_relcache_callback, (Datum) 0);
}

/*
 * The highest generation ever issued in this database: the largest value
 * nextval() has handed out of generation_seq, read from the sequence's
 * buffer page under a share lock (nextval changes it under an exclusive
 * one), or 0 if none was.  Refreshes this backend's cache.
 *
 * Everything that asks "was this generation issued?" comes through here,
 * so that a future notion of issued (generations of earlier timelines of
 * this database's history) changes one function.
 */
int64
lf_highest_issued(void)
{
	Oid			seqid = OidIsValid(issued_seqid) ? issued_seqid : generation_seq_oid();
	Relation	seqrel;
	Buffer		buf;
	Page		page;
	ItemId		lp;
	HeapTupleHeader tuphdr;
	Form_pg_sequence_data seq;
	int64		highest;

	seqrel = try_relation_open(seqid, AccessShareLock);
	if (seqrel == NULL)
	{
		/* dropped since we cached its OID (our invalidation comes with the lock) */
		seqid = generation_seq_oid();
		seqrel = relation_open(seqid, AccessShareLock);
	}
	if (seqrel->rd_rel->relkind != RELKIND_SEQUENCE)
		elog(ERROR, "%s.%s is not a sequence", LF_SCHEMA, LF_GENERATION_SEQ);
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (((LfSequenceMagic *) PageGetSpecialPointer(page))->magic != LF_SEQ_MAGIC)
		elog(ERROR, "bad magic number in sequence %s.%s", LF_SCHEMA, LF_GENERATION_SEQ);
	lp = PageGetItemId(page, FirstOffsetNumber);
	if (!ItemIdIsNormal(lp))
		elog(ERROR, "sequence %s.%s has no tuple", LF_SCHEMA, LF_GENERATION_SEQ);
	tuphdr = (HeapTupleHeader) PageGetItem(page, lp);
	seq = (Form_pg_sequence_data) ((char *) tuphdr + tuphdr->t_hoff);

	/*
	 * is_called: last_value was handed out.  Not called (a new sequence):
	 * last_value is the next value to hand out; the sequence goes up by 1
	 * from MINVALUE 1 (see the install script), so nothing below it is ours.
	 */
	highest = seq->is_called ? seq->last_value : seq->last_value - 1;
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, AccessShareLock);

	if (highest < 0)
		highest = 0;
	issued_seqid = seqid;
	lf_issued_cached = highest;
	return highest;
}

/* The slow half of lf_generation_issued(): read the sequence again. */
bool
lf_generation_issued_slow(int64 generation)
{
	return generation <= lf_highest_issued();
}

/*
 * LF004: the supplied generation was never issued in this database.  A
 * fence that took such a value (a typo, a timestamp, a generation of
 * another database) would lock every real holder out of the row; refusing
 * it before anything is written keeps the fence a fence.
 */
void
lf_report_unissued(int64 supplied, LfCounter c, const char *target)
{
	int64		highest = lf_highest_issued();

	lf_count(c);
	ereport(ERROR,
			errcode(ERRCODE_LF_UNISSUED_GENERATION),
			errmsg("unissued generation: write rejected by fence"),
			errdetail("%s: supplied generation " INT64_FORMAT ", highest generation issued in this database " INT64_FORMAT ".",
					  target, supplied, highest),
			errhint("Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => 'external'."));
}

/* Refuse (LF004) a supplied generation that was never issued. */
void
lf_check_issued(int64 supplied, LfCounter c, const char *target)
{
	if (!lf_generation_issued(supplied))
		lf_report_unissued(supplied, c, target);
}

/* Flush the WAL that covers the current state of sequence seqid. */
static void
flush_sequence_wal(Oid seqid)
{
	Relation	seqrel;
	Buffer		buf;
	XLogRecPtr	lsn;

	seqrel = relation_open(seqid, AccessShareLock);
	if (!RelationNeedsWAL(seqrel))
	{
		/* created in this transaction under wal_level=minimal: synced at commit */
		relation_close(seqrel, AccessShareLock);
		return;
	}
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	lsn = PageGetLSN(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, AccessShareLock);

	XLogFlush(lsn);
}

/*
 * Locks on the sequence for one draw.
 *
 * nextval() takes RowExclusiveLock on its first call in a transaction, under
 * the top transaction's resource owner, and keeps it to the end of the
 * transaction.  We hold it only around each draw (taking our own under the
 * same owner, since nextval takes none on later calls), so that
 * lf_advance_generation_past() waits for draws in flight, not for every open
 * transaction that once drew a generation: two backends healing a stale
 * generation at once would otherwise deadlock.
 */
static void
lock_for_draw(Oid seqid)
{
	ResourceOwner save = CurrentResourceOwner;

	CurrentResourceOwner = TopTransactionResourceOwner;
	LockRelationOid(seqid, RowExclusiveLock);
	CurrentResourceOwner = save;
}

static void
release_draw_locks(Oid seqid)
{
	ResourceOwner save = CurrentResourceOwner;
	LOCKTAG		tag;
	int			n;

	SET_LOCKTAG_RELATION(tag, MyDatabaseId, seqid);
	CurrentResourceOwner = TopTransactionResourceOwner;
	/* ours and, on the transaction's first draw, nextval's */
	for (n = 0; n < 2 && lf_lock_held_by_me(&tag, RowExclusiveLock); n++)
		UnlockRelationOid(seqid, RowExclusiveLock);
	CurrentResourceOwner = save;
}

/*
 * Draw a durable generation.  Usable from C by the lease helper, which takes
 * its generation in-process.
 */
int64
lf_draw_generation(void)
{
	Oid			seqid = generation_seq_oid();
	int64		value;

	/*
	 * Our own lock around the draw: nextval takes one only on its first call
	 * in a transaction, and we drop that one below.
	 */
	lock_for_draw(seqid);
	/* no privilege check, as for identity columns: see the install script */
	value = nextval_internal(seqid, false);
	flush_sequence_wal(seqid);
	release_draw_locks(seqid);
	/* issued now: a write under it need not read the sequence again */
	if (issued_seqid != seqid)
	{
		issued_seqid = seqid;
		lf_issued_cached = 0;
	}
	if (value > lf_issued_cached)
		lf_issued_cached = value;
	return value;
}

/*
 * Make every later generation greater than floor, durably, never moving the
 * sequence backwards.  Used when Redis reports that a generation >= ours was
 * already granted (a database restored from a backup, or an acquirer that
 * stalled between drawing its generation and reaching Redis).
 *
 * nextval-then-setval is a check-then-act race with concurrent drawers, so
 * it runs under ShareRowExclusiveLock, which conflicts with the
 * RowExclusiveLock every draw holds while it runs (and only then) and with
 * other advancers.  It is released as soon as the (non-transactional) setval
 * is done.
 */
void
lf_advance_generation_past(int64 floor)
{
	Oid			seqid = generation_seq_oid();
	int64		value;

	LockRelationOid(seqid, ShareRowExclusiveLock);
	value = nextval_internal(seqid, false);
	release_draw_locks(seqid);	/* if this was the transaction's first nextval */
	if (value <= floor)
	{
		Relation	seqrel = relation_open(seqid, AccessShareLock);
		Oid			save_userid;
		int			save_sec_context;

		/* setval checks privileges: act as the sequence's owner */
		GetUserIdAndSecContext(&save_userid, &save_sec_context);
		SetUserIdAndSecContext(seqrel->rd_rel->relowner,
							   save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
		DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seqid), Int64GetDatum(floor));
		SetUserIdAndSecContext(save_userid, save_sec_context);
		release_draw_locks(seqid);	/* setval may lock it like nextval */
		relation_close(seqrel, AccessShareLock);
	}
	flush_sequence_wal(seqid);
	UnlockRelationOid(seqid, ShareRowExclusiveLock);
}

/* lease_fence.next_generation() */
Datum
lf_next_generation(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(lf_draw_generation());
}
