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
 * A flush makes a value durable on this server, not across a failover: a
 * promoted asynchronous standby (or a point-in-time recovery) replays the
 * sequence only up to where its WAL ends, and the old primary may have
 * handed out values beyond that.  Both start a new timeline, so a generation
 * carries an epoch in its high bits, generation = (epoch << 40) + counter,
 * and the first draw on a new timeline moves the sequence to a new, higher
 * epoch (docs/guides/failover-and-generations.md, "Generations across a failover").  The epoch lives in
 * the sequence value itself, so whatever keeps the sequence (its WAL, a
 * dump, pg_upgrade) keeps the epoch, and values never go down.  With
 * synchronous standbys, a value is returned only once they confirmed the
 * WAL that covers it.
 *
 * IDENTIFICATION
 *	  src/fence/generation.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/timeline.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "base/compat.h"
#include "fence/fence.h"
#include "fmgr.h"
#include "fence/generation_math.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#define LF_SCHEMA "lease_fence"
#define LF_SEQ_NAME "generation_seq"

/* the special space of a sequence page, as commands/sequence.c defines it */
#define LF_SEQ_MAGIC	  0x1717
typedef struct LfSequenceMagic
{
	uint32		magic;
} LfSequenceMagic;

/* the epoch layout and its bounds: generation_math.h */

/* the timeline this backend last looked up, and the LSN where it begins */
static TimeLineID known_tli = 0;
static XLogRecPtr known_tli_begin = InvalidXLogRecPtr;

PG_FUNCTION_INFO_V1(lf_next_generation);
PG_FUNCTION_INFO_V1(lf_advance_generation);
PG_FUNCTION_INFO_V1(lf_highest_issued_sql);

static XLogRecPtr timeline_begin(TimeLineID tli);

/* the highest generation this backend has seen issued (0 is always accepted) */
int64		lf_issued_cached = 0;

/* the sequence lf_issued_cached was read from */
static Oid	issued_seqid = InvalidOid;

/* The OID of lease_fence.generation_seq, found through the extension. */
static Oid
generation_seq_oid(void)
{
	return lf_own_relation(LF_GENERATION_SEQ);
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
	XLogRecPtr	lsn;

	seqrel = try_relation_open(seqid, AccessShareLock);
	if (seqrel == NULL)
	{
		/* dropped since we cached its OID (our invalidation comes with the lock) */
		seqid = generation_seq_oid();
		seqrel = relation_open(seqid, AccessShareLock);
	}
	if (seqrel->rd_rel->relkind != RELKIND_SEQUENCE)
		elog(ERROR, "%s.%s is not a sequence", LF_SCHEMA, LF_SEQ_NAME);
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (((LfSequenceMagic *) PageGetSpecialPointer(page))->magic != LF_SEQ_MAGIC)
		elog(ERROR, "bad magic number in sequence %s.%s", LF_SCHEMA, LF_SEQ_NAME);
	lp = PageGetItemId(page, FirstOffsetNumber);
	if (!ItemIdIsNormal(lp))
		elog(ERROR, "sequence %s.%s has no tuple", LF_SCHEMA, LF_SEQ_NAME);
	tuphdr = (HeapTupleHeader) PageGetItem(page, lp);
	seq = (Form_pg_sequence_data) ((char *) tuphdr + tuphdr->t_hoff);

	/*
	 * is_called: last_value was handed out.  Not called (a new sequence):
	 * last_value is the next value to hand out; the sequence goes up by 1
	 * from MINVALUE 1 (see the install script), so nothing below it is ours.
	 */
	highest = seq->is_called ? seq->last_value : seq->last_value - 1;
	lsn = PageGetLSN(page);
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, AccessShareLock);

	if (highest < 0)
		highest = 0;

	/*
	 * Issued on an earlier timeline counts too.  Until this timeline's first
	 * draw starts its epoch, the page holds what this server replayed, and
	 * the timeline it branched off may have gone on drawing in that epoch:
	 * a holder's generation from the old primary must not be refused as
	 * unissued.  So while the new epoch is due, the whole current epoch
	 * counts as issued (the same test as epoch_to_start, without its locks:
	 * it only widens what is accepted, and the first draw ends it).
	 */
	if (!RecoveryInProgress())
	{
		TimeLineID	tli = GetWALInsertionTimeLine();
		XLogRecPtr	begin = timeline_begin(tli);

		if ((!XLogRecPtrIsInvalid(begin) && lsn < begin) ||
			LF_EPOCH_OF(highest) < (int64) tli - 1)
			highest = ((LF_EPOCH_OF(highest) + 1) << LF_EPOCH_SHIFT) - 1;
	}
	issued_seqid = seqid;
	lf_issued_cached = highest;
	return highest;
}

/*
 * The slow half of lf_generation_issued(): read what an adoption refused
 * if this backend's reading is gone, then the sequence again.  Generation
 * 0 was never drawn and is never refused: it is what a row holds before any
 * holder wrote it.
 */
bool
lf_generation_issued_slow(int64 generation)
{
	int64		refused = lf_refused_cached;

	if (refused == PG_INT64_MAX)
		refused = lf_refused_through(NULL);
	if (generation > 0 && generation <= refused)
		return false;
	return generation <= lf_highest_issued();
}

/* lease_fence.highest_issued() */
Datum
lf_highest_issued_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(lf_highest_issued());
}

/*
 * LF004: the supplied generation was never issued in this database.  A
 * fence that took such a value (a typo, a timestamp, a generation of
 * another database) would lock every real holder out of the row; refusing
 * it before anything is written keeps the fence a fence.  The error names
 * the table and column (rel, attnum) or the resource it refuses.
 */
void
lf_report_unissued(int64 supplied, LfCounter c, const char *target,
				   Relation rel, int attnum, const char *resource)
{
	int64		highest = lf_highest_issued();
	TimestampTz adopted_at = 0;
	int64		refused = lf_refused_through(&adopted_at);

	lf_count(c);
	if (supplied > 0 && supplied <= refused)
		ereport(ERROR,
				errcode(ERRCODE_LF_UNISSUED_GENERATION),
				errmsg("generation issued before lease_fence.adopt_generations(): write rejected by fence"),
				errdetail("%s: supplied generation " INT64_FORMAT "; this database adopted the generations of the database it replaced at %s and refuses every generation up to " INT64_FORMAT ".",
						  target, supplied, timestamptz_to_str(adopted_at), refused),
				errhint("Take the lease again on this database: its generations are above every one of the database it replaced."),
				rel != NULL ? errtablecol(rel, attnum) : 0,
				resource != NULL ? lf_errresource(resource) : 0);
	ereport(ERROR,
			errcode(ERRCODE_LF_UNISSUED_GENERATION),
			errmsg("unissued generation: write rejected by fence"),
			errdetail("%s: supplied generation " INT64_FORMAT ", highest generation issued in this database " INT64_FORMAT ".",
					  target, supplied, highest),
			errhint("Supply a generation from lease_fence.next_generation() or lease_fence.acquire(); a table whose tokens come from elsewhere is protected with tokens => 'external'."),
			rel != NULL ? errtablecol(rel, attnum) : 0,
			resource != NULL ? lf_errresource(resource) : 0);
}

/*
 * Flush the WAL that covers the current state of sequence seqid; returns
 * that WAL's position (InvalidXLogRecPtr when there is none).  With locked,
 * the caller holds a lock on the sequence (a draw's or an epoch start's),
 * and none is taken here: a lock costs more than the rest of the look.
 */
static XLogRecPtr
flush_sequence_wal(Oid seqid, bool locked)
{
	LOCKMODE	mode = locked ? NoLock : AccessShareLock;
	Relation	seqrel;
	Buffer		buf;
	XLogRecPtr	lsn;

	seqrel = relation_open(seqid, mode);
	if (!RelationNeedsWAL(seqrel))
	{
		/* created in this transaction under wal_level=minimal: synced at commit */
		relation_close(seqrel, mode);
		return InvalidXLogRecPtr;
	}
	buf = ReadBuffer(seqrel, 0);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	lsn = PageGetLSN(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, mode);

	XLogFlush(lsn);
	return lsn;
}

/*
 * Locks on the sequence for one draw.
 *
 * nextval() takes RowExclusiveLock on its first call in a transaction, under
 * the top transaction's resource owner, and keeps it to the end of the
 * transaction.  We hold it only around each draw (taking our own under the
 * same owner, since nextval takes none on later calls), so that
 * advance_past() (a heal, or advance_generation()) waits for draws in
 * flight, not for every open transaction that once drew a generation: two
 * backends healing a stale generation at once would otherwise deadlock.
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
 * Where timeline tli begins: the LSN at which it branched off its parent,
 * from its history file (InvalidXLogRecPtr for timeline 1, or when the file
 * is missing).  A primary's timeline does not change while it runs, so the
 * answer is kept for the backend's life and the file read once.
 */
static XLogRecPtr
timeline_begin(TimeLineID tli)
{
	if (tli != known_tli)
	{
		List	   *history = readTimeLineHistory(tli);

		/* newest first: the first entry is tli itself */
		known_tli_begin = ((TimeLineHistoryEntry *) linitial(history))->begin;
		known_tli = tli;
		list_free_deep(history);
	}
	return known_tli_begin;
}

/*
 * The sequence's state as its page holds it: last_value, and the LSN of the
 * last WAL record that changed the page.  Read under the buffer's share
 * lock, like the page LSN in flush_sequence_wal; the page has one tuple.
 * locked as for flush_sequence_wal.
 */
static void
read_sequence_state(Oid seqid, int64 *last_value, XLogRecPtr *lsn, bool locked)
{
	LOCKMODE	mode = locked ? NoLock : AccessShareLock;
	Relation	seqrel = relation_open(seqid, mode);
	Buffer		buf = ReadBuffer(seqrel, 0);
	Page		page;
	HeapTupleHeader tuple;

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	tuple = (HeapTupleHeader) PageGetItem(page, PageGetItemId(page, FirstOffsetNumber));
	*last_value = ((Form_pg_sequence_data) ((char *) tuple + tuple->t_hoff))->last_value;
	*lsn = PageGetLSN(page);
	UnlockReleaseBuffer(buf);
	relation_close(seqrel, mode);
}

/*
 * The epoch the next draw must start, or -1 when the current one will do;
 * *epoch is the current one.  The caller holds a lock on the sequence that
 * excludes advancing it (a draw's RowExclusiveLock or an advancer's
 * ShareRowExclusiveLock).
 *
 * A new epoch is due when the sequence was last written before the current
 * timeline began: then its state is what this server replayed from an older
 * timeline, which may have gone on drawing from it after the point where
 * this one branched off (a promoted asynchronous standby, a point-in-time
 * recovery).  Every write of the sequence on this timeline comes after this
 * check (draws, advances and healing all check first), so the first one is
 * the advance itself, and the check is true exactly once per timeline.  The
 * new epoch is the current one plus the timeline's number: above the
 * current one, and above whatever epoch the timeline we branched off could
 * have started after the branch point (its number is lower than ours, and
 * it started from the same state or an older one).  As a second net, for a
 * history file that has gone missing, the epoch is never below timeline-1.
 */
static int64
epoch_to_start(Oid seqid, int64 *epoch)
{
	TimeLineID	tli = GetWALInsertionTimeLine();
	XLogRecPtr	begin = timeline_begin(tli);
	int64		last_value;
	XLogRecPtr	lsn;
	int64		target = -1;
	LfEpochStep step;

	if (!lf_timeline_fits_epoch((int64) tli))
		ereport(ERROR,
				errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				errmsg("timeline %u is too large for lease_fence generations", tli),
				errdetail("A generation's epoch has %d bits: timelines up to " INT64_FORMAT " are supported.",
						  63 - LF_EPOCH_SHIFT, LF_EPOCH_MAX));

	read_sequence_state(seqid, &last_value, &lsn, true);
	step = lf_epoch_step(last_value, (int64) tli,
						 !XLogRecPtrIsInvalid(begin) && lsn < begin, epoch, &target);

	if (step == LF_EPOCH_KEEP || step == LF_EPOCH_EXHAUSTED)
	{
		if (step == LF_EPOCH_EXHAUSTED)
			ereport(ERROR,
					errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					errmsg("the generations of epoch " INT64_FORMAT " are exhausted", *epoch),
					errdetail("lease_fence.generation_seq is at " INT64_FORMAT "; the counter of an epoch has %d bits, and the last 2^24 values of each are never handed out.",
							  last_value, LF_EPOCH_SHIFT),
					errhint("A new timeline (a promotion or a point-in-time recovery) starts a new epoch."));
		return -1;
	}

	if (step == LF_EPOCH_NONE_LEFT)
		ereport(ERROR,
				errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				errmsg("no generation epoch is left for timeline %u", tli),
				errdetail("The current epoch is " INT64_FORMAT " and epochs go up to " INT64_FORMAT ".",
						  *epoch, LF_EPOCH_MAX));
	return target;
}

/*
 * setval() on our sequence, as its owner: setval checks privileges, and
 * nobody else has any (see the install script).  setval is built in, on our
 * own sequence: no user code runs under the switched identity.
 */
static void
setval_as_owner(Oid seqid, int64 value)
{
	Relation	seqrel = relation_open(seqid, AccessShareLock);
	Oid			save_userid;
	int			save_sec_context;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(seqrel->rd_rel->relowner,
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seqid), Int64GetDatum(value));
	SetUserIdAndSecContext(save_userid, save_sec_context);
	release_draw_locks(seqid);	/* setval may lock it like nextval */
	relation_close(seqrel, AccessShareLock);
}

/*
 * Start the epoch this timeline needs, if it has not been started yet.  The
 * caller holds ShareRowExclusiveLock on the sequence, so no draw runs and
 * the check is not raced.  Only ever moves the sequence up: to the first
 * value of the new epoch, which is above every value of the older ones.
 */
static void
start_epoch_if_due(Oid seqid)
{
	int64		epoch;
	int64		target = epoch_to_start(seqid, &epoch);

	if (target < 0)
		return;
	elog(LOG, "lease_fence: timeline %u: generations move from epoch " INT64_FORMAT " to epoch " INT64_FORMAT,
		 GetWALInsertionTimeLine(), epoch, target);
	/* setval(base) is "called": the next draw returns base + 1 */
	setval_as_owner(seqid, target << LF_EPOCH_SHIFT);
	(void) flush_sequence_wal(seqid, true);
}

/*
 * With synchronous standbys, wait until they confirmed the WAL up to lsn,
 * which covers the value just drawn, as a commit waits for its commit
 * record: a value must not leave the backend before a standby that could be
 * promoted has it.  Like a commit, it follows synchronous_commit (local and
 * off do not wait) and synchronous_standby_names.  The wait is the flush
 * level at most (remote_write waits for the write): applying a sequence
 * record is not needed for it to survive a promotion.  When the WAL is
 * already confirmed (every draw of a batch after the first), it is one LSN
 * comparison.
 *
 * SyncRepWaitForLSN() was made for commits, which cannot be undone once
 * their record is flushed: on a query cancel (pg_cancel_backend,
 * statement_timeout) it stops waiting and returns with only a WARNING ("the
 * transaction has already committed locally"), having cleared the cancel.
 * A generation can still be withheld, and must be: so when it returns
 * without the standbys having confirmed lsn while an interrupt arrived
 * during the wait (a cancel leaves InterruptPending set, which is cleared
 * only where interrupts are processed, and they are held here), we raise
 * the cancel as an ERROR instead, and the value is never returned.  A
 * terminate (ProcDiePending, left set by SyncRepWaitForLSN) is the same
 * ERROR, then the backend exits.  It returns unconfirmed and uninterrupted
 * only where a commit would not wait either (no synchronous standby is
 * defined as far as the walsenders know): then the value is returned, as
 * a commit would be.
 */
static void
wait_for_sync_standbys(XLogRecPtr lsn)
{
	int			mode;
	bool		confirmed;
	bool		interrupted;

	if (XLogRecPtrIsInvalid(lsn) || !SyncRepRequested() ||
		SyncRepStandbyNames == NULL || SyncRepStandbyNames[0] == '\0')
		return;

	/* a cancel that came before the wait is an ordinary cancel */
	CHECK_FOR_INTERRUPTS();

	mode = synchronous_commit == SYNCHRONOUS_COMMIT_REMOTE_WRITE ?
		SYNC_REP_WAIT_WRITE : SYNC_REP_WAIT_FLUSH;

	/* SyncRepWaitForLSN expects interrupts held, as at commit */
	HOLD_INTERRUPTS();
	SyncRepWaitForLSN(lsn, false);
	LWLockAcquire(SyncRepLock, LW_SHARED);
	confirmed = lsn <= WalSndCtl->lsn[mode];
	LWLockRelease(SyncRepLock);
	interrupted = InterruptPending || ProcDiePending;
	RESUME_INTERRUPTS();

	if (!confirmed && interrupted)
		ereport(ERROR,
				errcode(ERRCODE_QUERY_CANCELED),
				errmsg("canceling the wait for synchronous standbys: no generation is returned"),
				errdetail("The generation drawn is durable on this server, but the synchronous standbys have not confirmed it."),
				errhint("Draw a new generation once the standbys are back."));
	/* a cancel after the standbys confirmed: an ordinary cancel */
	CHECK_FOR_INTERRUPTS();
}

/*
 * Draw a durable generation.  Usable from C by the lease helper, which takes
 * its generation in-process.
 */
int64
lf_draw_generation(void)
{
	Oid			seqid = generation_seq_oid();
	int64		epoch;
	int64		value;
	XLogRecPtr	lsn;

	/* GetWALInsertionTimeLine() is for servers that write WAL */
	PreventCommandDuringRecovery("lease_fence.next_generation()");

	/*
	 * Our own lock around the draw: nextval takes one only on its first call
	 * in a transaction, and we drop that one below.  A draw that finds a new
	 * epoch due lets go of it (holding it while waiting for the stronger
	 * lock would deadlock with another such draw) and starts the epoch under
	 * the lock that excludes draws, then checks again.
	 */
	for (;;)
	{
		lock_for_draw(seqid);
		if (epoch_to_start(seqid, &epoch) < 0)
			break;
		release_draw_locks(seqid);
		LockRelationOid(seqid, ShareRowExclusiveLock);
		start_epoch_if_due(seqid);
		UnlockRelationOid(seqid, ShareRowExclusiveLock);
	}

	/* no privilege check, as for identity columns: see the install script */
	value = nextval_internal(seqid, false);
	if (lf_draw_exhausted(value, epoch))
		ereport(ERROR,
				errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				errmsg("the generations of epoch " INT64_FORMAT " are exhausted", epoch),
				errdetail("lease_fence.generation_seq reached " INT64_FORMAT "; the counter of an epoch has %d bits, and the last 2^24 values of each are never handed out.",
						  value, LF_EPOCH_SHIFT),
				errhint("A new timeline (a promotion or a point-in-time recovery) starts a new epoch."));
	lsn = flush_sequence_wal(seqid, true);
	release_draw_locks(seqid);
	/* issued now: a write under it need not read the sequence again */
	if (issued_seqid != seqid)
	{
		issued_seqid = seqid;
		lf_issued_cached = 0;
	}
	if (value > lf_issued_cached)
		lf_issued_cached = value;
	wait_for_sync_standbys(lsn);
	return value;
}

/*
 * adopt_generations()'s move (adopt.c): the first value of a new epoch,
 * one above the epoch of top and of everything this database issued, so
 * that every later draw is above every generation the database it replaced
 * could have issued in its epoch, also after top was read.  Under the lock
 * that excludes draws and advances, after the epoch check every write of
 * the sequence makes (a promotion's epoch comes first).  Only ever moves
 * the sequence up; the heal budget is left as it is.  ERROR 54000, before
 * anything is moved, when no epoch is left.
 */
int64
lf_start_epoch_above(int64 top, int64 *own_before)
{
	Oid			seqid = generation_seq_oid();
	int64		epoch;
	int64		target;

	PreventCommandDuringRecovery("lease_fence.adopt_generations()");
	LockRelationOid(seqid, ShareRowExclusiveLock);
	start_epoch_if_due(seqid);
	*own_before = lf_highest_issued();
	epoch = lf_epoch_above(*own_before, top);
	if (epoch > LF_EPOCH_MAX)
		ereport(ERROR,
				errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				errmsg("no generation epoch is left above generation " INT64_FORMAT, Max(*own_before, top)),
				errdetail("Epochs go up to " INT64_FORMAT ". Nothing was moved.", LF_EPOCH_MAX));
	target = epoch << LF_EPOCH_SHIFT;
	setval_as_owner(seqid, target);
	(void) flush_sequence_wal(seqid, true);
	UnlockRelationOid(seqid, ShareRowExclusiveLock);
	issued_seqid = seqid;
	lf_issued_cached = target;
	return target;
}

/*
 * How far stale answers may move the sequence by themselves, in total, since
 * the install or a superuser's last advance_generation()
 * (docs/guides/failover-and-generations.md, "How far a stale answer moves
 * the generations"): 2^24, about 4.6 hours of generations at 1,000
 * acquires a second, enough for the generations a restored database issued
 * after its backup was taken.  The budget is what bounds writes into Redis:
 * a :gen key set by hand (or by anybody who may write Redis) to 2^63-1 or
 * to a timestamp would otherwise move the sequence there in one heal, and
 * one set just above what was issued before every acquire would walk it
 * there in steps; either exhausts the epoch for every later draw and makes
 * every value below "issued" to the fence.  lease_fence.heal_budget_seq
 * holds how much of it the heals used (its MAXVALUE is this value).
 */
/* (LF_HEAL_BUDGET, generation_math.h) */

/* How much of the heal budget is used: heal_budget_seq's value. */
static int64
heal_budget_used(Oid budgetid)
{
	int64		used;
	XLogRecPtr	lsn;

	read_sequence_state(budgetid, &used, &lsn, false);
	return used;
}

/*
 * Move the sequence so that every later generation is greater than floor,
 * durably, never backwards.  With checked (a heal), floor must be something
 * this database could have issued, and the move must fit in what is left
 * of the heal budget: in the current epoch, and at most LF_HEAL_BUDGET
 * minus what earlier heals used above what it has issued, else ERROR XX001
 * before anything is moved.  A heal's move is added to the budget's use
 * before the sequence moves, and one WAL flush covers both (the budget's
 * record comes first), so a crash can lose a move but never the cost of a
 * move it kept.  Unchecked (advance_generation(), a superuser's decision),
 * any floor that leaves the next draw a generation, and the budget is
 * renewed whole.
 *
 * Read-then-setval is a check-then-act race with concurrent drawers, so it
 * runs under ShareRowExclusiveLock, which conflicts with the
 * RowExclusiveLock every draw holds while it runs (and only then) and with
 * other advancers; the budget is only read and written under it too.  It is
 * released as soon as the (non-transactional) setvals are done.  The epoch
 * check comes first, like a draw's: this writes the sequence too.  Returns
 * the highest issued generation afterwards.
 */
static int64
advance_past(int64 floor, bool checked, const char *resource)
{
	Oid			seqid = generation_seq_oid();
	int64		last;
	XLogRecPtr	lsn;

	PreventCommandDuringRecovery("lease_fence.next_generation()");
	/* floor + 1, the next draw, must be a generation */
	if (!checked && lf_floor_leaves_none(floor))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("generation " INT64_FORMAT " leaves no generation to draw after it", floor),
				errdetail("The last 2^24 values of each epoch are never handed out."));
	LockRelationOid(seqid, ShareRowExclusiveLock);
	start_epoch_if_due(seqid);
	/* no draw runs: last_value is the highest issued (or, new, the next) */
	read_sequence_state(seqid, &last, &lsn, true);
	if (checked && last <= floor)
	{
		if (lf_heal_not_issued(floor, last))
		{
			lf_count(LF_C_HEAL_REFUSED);
			ereport(ERROR,
					errcode(ERRCODE_DATA_CORRUPTED),
					errmsg("the highest generation Redis holds for resource \"%s\" was not issued by this database", resource),
					errdetail("Redis holds " INT64_FORMAT "; this database has issued up to " INT64_FORMAT " (epoch " INT64_FORMAT "), and stale answers move the generations at most " INT64_FORMAT " past that in total, within the epoch. Nothing was moved.",
							  floor, last, LF_EPOCH_OF(last), LF_HEAL_BUDGET),
					errhint("If this database was restored from a backup older than that generation, a superuser who has checked the value moves the generations past it with lease_fence.advance_generation(). Otherwise something other than lease_fence wrote the resource's generation key: delete that key."));
		}
		/*
		 * Only a heal that moves the sequence needs the budget (an acquirer
		 * that stalled moves nothing): so a 1.2 installation served by this
		 * library heals such answers until its update, and refuses only
		 * moves, for want of the budget's sequence (55000).
		 */
		if (floor > last)
		{
			Oid			budgetid = lf_own_relation(LF_HEAL_BUDGET_SEQ);
			int64		used = heal_budget_used(budgetid);

			if (lf_heal_over_budget(floor, last, used))
			{
				lf_count(LF_C_HEAL_REFUSED);
				ereport(ERROR,
						errcode(ERRCODE_DATA_CORRUPTED),
						errmsg("the stale answer for resource \"%s\" would move the generations beyond the heal budget", resource),
						errdetail("Redis holds " INT64_FORMAT ", " INT64_FORMAT " above the highest generation this database issued (" INT64_FORMAT "); stale answers may move the generations " INT64_FORMAT " in total until a superuser runs lease_fence.advance_generation(), and " INT64_FORMAT " of that is left. Nothing was moved.",
								  floor, floor - last, last, LF_HEAL_BUDGET, LF_HEAL_BUDGET - used),
						errhint("If this database was restored from a backup older than that generation, a superuser who has checked the value runs lease_fence.advance_generation() with it, which also renews the heal budget. Otherwise something other than lease_fence writes the generation keys in Redis: stop it, and delete the key."));
			}
			/* the cost first: a crash between the two keeps it */
			setval_as_owner(budgetid, used + (floor - last));
			lf_count(LF_C_HEAL_MOVED);
		}
		setval_as_owner(seqid, floor);
		(void) flush_sequence_wal(seqid, true);
	}
	else if (!checked)
	{
		Oid			budgetid = lf_own_relation(LF_HEAL_BUDGET_SEQ);

		setval_as_owner(budgetid, 0);
		if (last <= floor)
			setval_as_owner(seqid, floor);
		(void) flush_sequence_wal(last <= floor ? seqid : budgetid, last <= floor);
	}
	UnlockRelationOid(seqid, ShareRowExclusiveLock);
	return lf_highest_issued();
}

/*
 * Heal a stale answer: Redis holds a generation >= ours for resource (a
 * database restored from a backup, or an acquirer that stalled between
 * drawing its generation and reaching Redis).  Refuses a value this
 * database could not have issued, or a move the heal budget has no room
 * for (see advance_past).
 */
void
lf_heal_generation(int64 stored, const char *resource)
{
	(void) advance_past(stored, true, resource);
}

/*
 * lease_fence.advance_generation(past bigint) RETURNS bigint
 *
 * Superuser only (EXECUTE is revoked from PUBLIC too): every later
 * generation is greater than past, durably; the sequence never goes back.
 * For a database restored from a backup older than the generations Redis
 * or its fenced rows hold beyond what stale answers heal by themselves.
 * It also renews the heal budget: the superuser has looked.
 * Returns the highest issued generation afterwards.
 */
Datum
lf_advance_generation(PG_FUNCTION_ARGS)
{
	int64		past;

	if (!superuser())
		ereport(ERROR,
				errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				errmsg("must be superuser to advance the generations"),
				errdetail("Every value up to the new one counts as issued: the fence then accepts it."));
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("past must not be NULL"));
	past = PG_GETARG_INT64(0);
	if (past < 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("past must not be negative"));
	past = advance_past(past, false, NULL);
	ereport(LOG,
			errmsg("generations advanced: the highest issued generation is now " INT64_FORMAT, past));
	PG_RETURN_INT64(past);
}

/* lease_fence.next_generation() */
Datum
lf_next_generation(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT64(lf_draw_generation());
}
