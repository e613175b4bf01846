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
 * IDENTIFICATION
 *	  src/generation.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

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
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/resowner.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#define LF_SCHEMA "lease_fence"
#define LF_GENERATION_SEQ "generation_seq"

PG_FUNCTION_INFO_V1(lf_next_generation);

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
