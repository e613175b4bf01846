/*-------------------------------------------------------------------------
 *
 * lease_registry.c
 *	  This session's leases: what it holds, what it must release at the end
 *	  of a transaction or of the session, and what it could not settle.
 *
 * Each acquire, renew and release records its outcome here (lease.c,
 * acquire.c); the list is the view lease_fence.leases.  Invariants: a
 * transaction-scoped lease is verified at PRE_COMMIT (LF010 if lost) and
 * released at its transaction's end, a session-scoped one at backend exit;
 * while a session- or transaction-scoped lease is lost, fenced writes
 * under its generation and its transaction's COMMIT fail with LF010 (the
 * fence's write-check hook); a lease whose outcome is unknown is released
 * conditionally, bounded, and recorded as "unconfirmed" when that is not
 * confirmed either.
 *
 * IDENTIFICATION
 *	  src/lease/lease_registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdio.h>

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "fence/fence.h"
#include "funcapi.h"
#include "lease/internal.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "redis/redis.h"
#include "storage/ipc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/pidfile.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(lf_session_leases);
PG_FUNCTION_INFO_V1(lf_all_leases);

/*
 * How much of the session's list is kept (see trim_entries): released
 * leases, and explicit-scope held and unconfirmed ones.  Session- and
 * transaction-scoped held leases are never forgotten.
 */
#define LF_KEEP_RELEASED 64
#define LF_KEEP_HELD_EXPLICIT 1000
#define LF_KEEP_UNCONFIRMED 1000

/* constants: what lease_fence.leases shows for each scope and state */

/*
 * The session's registry.  File-scope: it outlives every call, and the
 * transaction and exit callbacks find it here.
 */
static struct
{
	/*
	 * The session's leases, oldest first, and everything they use, in a
	 * memory context of their own ("lease_fence leases", a child of
	 * TopMemoryContext): its size shows in pg_backend_memory_contexts.
	 */
	List	   *leases;
	MemoryContext cxt;

	/*
	 * The session- and transaction-scoped entries of leases that a renew
	 * found lost (STATE_LOST), and the transaction-scoped ones their
	 * transaction gave up (doomed_why): fenced writes under their
	 * generations are refused (check_write).  Entries that have left both
	 * since are dropped by lf_update_write_check, which runs before
	 * trim_entries frees anything.
	 */
	List	   *lost;

	/*
	 * The held session- and transaction-scoped entries the lease table
	 * shows: a take_over() of one is seen by check_write and at COMMIT.
	 */
	List	   *takeable;
	bool		exit_hook_registered;

	/* the highest generation of a transaction-scoped lease of this transaction */
	bool		xact_generation_set;
	int64		xact_generation;

	int			added_since_trim;	/* additions since the last trim (maybe_trim) */
	int64		exit_deadline;	/* of the cleanups at this backend's exit, once known */
} reg;

static void release_at_exit(int code, Datum arg);

/* ---------------------------------------------------------------------
 * The session's list
 * ---------------------------------------------------------------------
 */

/*
 * The session's entry for resource and identity, or NULL.  A linear search,
 * over a list that trim_entries keeps to a few thousand entries at most.
 */
LeaseEntry *
lf_find_lease(const char *resource, const char *identity)
{
	int			i;

	/*
	 * Newest first: the lease a session renews or releases is usually the
	 * one it took last.  An identity is unique, so the order does not change
	 * the answer; it is compared first, as it differs soonest.
	 */
	for (i = list_length(reg.leases) - 1; i >= 0; i--)
	{
		LeaseEntry *e = (LeaseEntry *) list_nth(reg.leases, i);

		if (strcmp(e->identity, identity) == 0 && strcmp(e->resource, resource) == 0)
			return e;
	}
	return NULL;
}

/*
 * Keep the session's list bounded, for a backend that lives for days behind
 * a pooler, where explicit leases are typically released on another backend
 * and stay "held" here.  Forget
 *	- explicit-scope held leases past their expires_at (their key has expired
 *	  in Redis by itself, or they were renewed elsewhere: either way this
 *	  backend has nothing to do for them), and the oldest beyond
 *	  LF_KEEP_HELD_EXPLICIT;
 *	- the oldest unconfirmed leases beyond LF_KEEP_UNCONFIRMED (their exit
 *	  retry is lost; they expire by their TTL);
 *	- the oldest released leases beyond LF_KEEP_RELEASED (explicit-scope
 *	  leases a renew found lost count as released: nothing is left to do).
 * Session- and transaction-scoped held or lost leases are obligations
 * (released at exit or at transaction end, and a lost one refuses writes
 * until then) and never dropped, nor is a transaction-scoped one its
 * transaction gave up (doomed_why), until that transaction ends; unknown
 * ones are settled at transaction end.  keep, if not NULL, is never dropped (an entry a caller
 * is about to use).
 *
 * The view trims before it shows anything, so it always shows the caps
 * exactly.  Adding a lease and ending a transaction trim only every
 * LF_TRIM_EVERY additions (maybe_trim): a walk over the whole list per
 * acquire cost more than the rest of the bookkeeping, and the list then
 * holds at most LF_TRIM_EVERY entries beyond the caps.
 */
#define LF_TRIM_EVERY 32


static void
trim_entries(LeaseEntry *keep)
{
	int			held = 0;
	int			unconfirmed = 0;
	int			released = 0;
	TimestampTz now;
	ListCell   *lc;

	reg.added_since_trim = 0;
	lf_update_write_check();	/* before any entry is freed */
	if (reg.leases == NIL)
		return;
	now = GetCurrentTimestamp();
	foreach(lc, reg.leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if (e->state == STATE_HELD && e->scope == SCOPE_EXPLICIT && e->expires_at >= now)
			held++;
		else if (e->state == STATE_UNCONFIRMED)
			unconfirmed++;
		else if (e->state == STATE_RELEASED || (e->state == STATE_LOST && e->scope == SCOPE_EXPLICIT))
			released++;
	}
	foreach(lc, reg.leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);
		bool		drop = false;

		/* (a lease its transaction gave up is kept for that COMMIT to refuse) */
		if (e == keep || e->doomed_why != NULL)
			continue;
		if (e->state == STATE_HELD && e->scope == SCOPE_EXPLICIT)
		{
			if (e->expires_at < now)
				drop = true;
			else if (held > LF_KEEP_HELD_EXPLICIT)
			{
				drop = true;
				held--;
			}
		}
		else if (e->state == STATE_UNCONFIRMED && unconfirmed > LF_KEEP_UNCONFIRMED)
		{
			drop = true;
			unconfirmed--;
		}
		else if ((e->state == STATE_RELEASED || (e->state == STATE_LOST && e->scope == SCOPE_EXPLICIT)) &&
				 released > LF_KEEP_RELEASED)
		{
			drop = true;
			released--;
		}
		if (drop)
		{
			lf_table_forget(e);
			reg.leases = foreach_delete_current(reg.leases, lc);
			pfree(e->resource);
			pfree(e);
		}
	}
}

/* Trim when LF_TRIM_EVERY leases were added since the last trim. */
static void
maybe_trim(LeaseEntry *keep)
{
	if (reg.added_since_trim >= LF_TRIM_EVERY)
		trim_entries(keep);
}

/* Record a new lease of this session. */
/*
 * A lease was granted or renewed with validity ms left (lf_validity_after:
 * measured from before the request was sent, drift taken off).
 */
void
lf_lease_validity_set(LeaseEntry *e, int64 validity)
{
	if (validity < 0)
		validity = 0;
	e->expires_at = GetCurrentTimestamp() + validity * 1000;
	e->valid_until_ms = lf_now_ms() + validity;
	lf_table_update(e);
	lf_idle_update(reg.leases); /* a lease that guards an idle transaction: its new expiry */
}

/*
 * e's state changes: the lease table shows it; a released lease leaves the
 * table (the registry may keep it a while, as released).
 */
static void
track_takeable(LeaseEntry *e)
{
	bool		takeable = e->state == STATE_HELD && e->scope != SCOPE_EXPLICIT &&
		e->table_slot >= 0;
	bool		listed = list_member_ptr(reg.takeable, e);

	if (takeable && !listed)
	{
		MemoryContext old = MemoryContextSwitchTo(reg.cxt);

		reg.takeable = lappend(reg.takeable, e);
		MemoryContextSwitchTo(old);
		lf_update_write_check();
	}
	else if (!takeable && listed)
	{
		reg.takeable = list_delete_ptr(reg.takeable, e);
		lf_update_write_check();
	}
}

void
lf_set_lease_state(LeaseEntry *e, LeaseState state)
{
	e->state = state;
	if (state == STATE_RELEASED)
		lf_table_forget(e);
	else
		lf_table_update(e);
	track_takeable(e);
}

LeaseEntry *
lf_add_lease(const char *resource, const char *identity, int64 generation,
		  LeaseScope scope, LeaseState state, int64 ttl, int64 minv, int64 validity)
{
	MemoryContext old;
	LeaseEntry *e;

	if (!reg.exit_hook_registered)
	{
		/* runs before redis_conn.c frees the connection at on_proc_exit */
		before_shmem_exit(release_at_exit, (Datum) 0);
		reg.exit_hook_registered = true;
	}
	if (reg.cxt == NULL)
		reg.cxt = AllocSetContextCreate(TopMemoryContext, "lease_fence leases",
										  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(reg.cxt);
	e = palloc0(sizeof(LeaseEntry));
	e->table_slot = -1;			/* (lf_lease_validity_set writes it when set) */

	e->resource = pstrdup(resource);
	strlcpy(e->identity, identity, sizeof(e->identity));
	e->generation = generation;
	e->scope = scope;
	e->state = state;
	lf_lease_validity_set(e, validity);
	e->acquired_at = GetCurrentTimestamp();
	e->ttl_ms = ttl;
	e->min_validity_ms = minv;
	e->keepalive_slot = -1;
	e->role = GetUserId();
	reg.leases = lappend(reg.leases, e);
	MemoryContextSwitchTo(old);
	lf_table_register(e);
	track_takeable(e);
	if (lf_write_check_hook == NULL)
		lf_update_write_check();	/* the fences this session makes are noted (idle_expiry.c) */
	reg.added_since_trim++;
	maybe_trim(e);
	return e;
}

/* ---------------------------------------------------------------------
 * Settling a lease: the bounded conditional release
 * ---------------------------------------------------------------------
 */

/*
 * The longest a backend's exit spends releasing its leases, all together
 * (superuser-only): a session's own cleanup_timeout_ms applies when lower,
 * but a session cannot make its exit, and so pg_terminate_backend or a
 * shutdown, wait longer than this.
 */
static int	lf_exit_timeout_ms = 1000;

/*
 * When PRE_COMMIT asks Redis whether a transaction-scoped lease is still
 * ours (see commit_check_needed).
 */
int			lf_commit_check = LF_COMMIT_CHECK_NEAR_EXPIRY;

static const struct config_enum_entry commit_check_options[] = {
	{"near_expiry", LF_COMMIT_CHECK_NEAR_EXPIRY, false},
	{"always", LF_COMMIT_CHECK_ALWAYS, false},
	{NULL, 0, false}
};


static int64 exit_cleanup_deadline(void);

/*
 * The bounded conditional release: same identity, compare-and-delete,
 * never raising an error (it also runs at commit, abort and backend exit),
 * done by deadline (lf_now_ms()), connect included.  fresh: on a new
 * connection.  True when Redis confirmed that the key no longer holds the
 * identity.  A release whose deadline has passed is not tried at all
 * (*skipped, counted as cleanup / skipped unless a cleanup of the lease
 * was counted before: a lease left untried at ROLLBACK and again at exit
 * is one lease not released, counted once); the caller says so once for
 * the batch.
 */
static bool
cleanup_release(LeaseEntry *e, bool fresh, bool defer, int64 deadline, bool *skipped)
{
	const char *resource = e->resource;
	const char *identity = e->identity;
	LfCall		call;
	LfAnswer	ans;
	bool		confirmed;
	int64		left;

	/*
	 * Once the backend is being terminated, its cleanups end by the exit's
	 * budget (the Redis layer's waits too: lf_die_deadline_hook), not by a
	 * cleanup_timeout_ms the session may have set far higher: a session
	 * cannot make pg_terminate_backend wait past exit_timeout_ms.
	 */
	if (ProcDiePending)
		deadline = Min(deadline, exit_cleanup_deadline());
	left = deadline - lf_now_ms();
	*skipped = left <= 0;
	if (*skipped)
	{
		if (e->cleanup_counted)
			*skipped = false;	/* counted, and said, before */
		else
			lf_count(LF_C_CLEANUP_SKIPPED);
		e->cleanup_counted = true;
		return false;
	}
	e->cleanup_counted = true;
	call.timeout_ms = (int) Min(left, INT_MAX);
	call.flags = (fresh ? LF_FRESH : 0) | (defer ? LF_DEFER : 0) | LF_WITHIN;
	call.keepalive_worker = false;
	lf_script_release(resource, identity, &call, &ans);
	/* its reply is read (and counted) before the connection's next command */
	if (ans.outcome == LF_ANS_SENT_DEFERRED)
		return true;
	/* the key no longer holds the identity: only the script's own two answers say so */
	confirmed = ans.outcome == LF_ANS_RELEASED || ans.outcome == LF_ANS_NOT_HELD;
	lf_count(confirmed ? LF_C_CLEANUP_CONFIRMED : LF_C_CLEANUP_UNCONFIRMED);
	if (!confirmed)
	{
		char		buf[LF_ERRLEN];

		ereport(WARNING,
				errmsg("could not confirm the release of resource \"%s\"", resource),
				errdetail("%s", lf_visible_error(ans.err, buf, sizeof(buf))),
				errdetail_log("%s", ans.err),
				errhint("The lease expires by its TTL; writes under its generation are still fenced."));
	}
	return confirmed;
}

/*
 * Settle an entry by deadline: stop its keep-alive, release it, bounded.
 * Returns 1 when the deadline had passed before it could be tried (and no
 * cleanup of it was counted before), else 0.
 */
static int	settle_deferring(LeaseEntry *e, bool fresh, bool defer, int64 deadline);

static int
settle_by(LeaseEntry *e, bool fresh, int64 deadline)
{
	return settle_deferring(e, fresh, false, deadline);
}

/*
 * settle_by, where defer lets the release go without waiting for its reply
 * (the releases after COMMIT): the entry is "released" once it is sent.
 */
static int
settle_deferring(LeaseEntry *e, bool fresh, bool defer, int64 deadline)
{
	bool		skipped;

	lf_keepalive_stop(e);
	lf_set_lease_state(e, cleanup_release(e, fresh, defer, deadline, &skipped) ?
					   STATE_RELEASED : STATE_UNCONFIRMED);
	return skipped ? 1 : 0;
}

/* Settle one entry whose outcome is unknown: release it within cleanup_timeout_ms. */
void
lf_settle_lease(LeaseEntry *e, bool fresh)
{
	(void) settle_by(e, fresh, lf_now_ms() + lf_cleanup_timeout_ms);
}

/* The same, done by deadline (lf_now_ms()). */
void
lf_settle_lease_by(LeaseEntry *e, bool fresh, int64 deadline)
{
	(void) settle_by(e, fresh, deadline);
}

/*
 * Is the server shutting down?  The postmaster writes "stopping" into the
 * status line of postmaster.pid (the one pg_ctl reads) before it sends its
 * children SIGTERM.  Read only at a backend's exit with leases to settle.
 */
static bool
server_stopping(void)
{
	FILE	   *f = fopen("postmaster.pid", "r");
	char		line[256];
	int			n = 0;
	bool		stopping = false;

	if (f == NULL)
		return false;
	while (fgets(line, sizeof(line), f) != NULL)
		if (++n == LOCK_FILE_LINE_PM_STATUS)
		{
			stopping = strncmp(line, PM_STATUS_STOPPING, strlen(PM_STATUS_STOPPING)) == 0;
			break;
		}
	fclose(f);
	return stopping;
}

/*
 * The deadline of every cleanup at this backend's exit: one budget for all
 * of them, the lower of cleanup_timeout_ms and exit_timeout_ms, counted
 * from the first.
 */
static int64
exit_cleanup_deadline(void)
{
	if (reg.exit_deadline == 0)
		reg.exit_deadline = lf_now_ms() + Min(lf_cleanup_timeout_ms, lf_exit_timeout_ms);
	return reg.exit_deadline;
}

/* Say once for a batch how many cleanups its deadline left untried. */
static void
report_skipped(int skipped, const char *bound, int bound_ms)
{
	if (skipped > 0)
		ereport(WARNING,
				errmsg("%d lease releases not tried: %s (%d ms) had passed", skipped, bound, bound_ms),
				errhint("Those leases expire by their TTL; writes under their generations are still fenced."));
}

/*
 * An operation was interrupted with its outcome unknown: record it, so the
 * end of the transaction cleans it up, then let the interrupt act.
 */
void
lf_lease_interrupted(const char *resource, const char *identity, int64 generation,
					 LeaseScope scope, int64 ttl, int64 minv)
{
	LeaseEntry *e = lf_find_lease(resource, identity);

	if (e == NULL)
		e = lf_add_lease(resource, identity, generation, scope, STATE_UNKNOWN, ttl, minv, 0);
	else
	{
		/*
		 * A renew (or release) of this transaction's lease left its outcome
		 * unknown: its COMMIT cannot trust the lease, whatever catches the
		 * interrupt (a PL/pgSQL EXCEPTION block, a savepoint).
		 */
		if (e->scope == SCOPE_TRANSACTION && e->state == STATE_HELD)
			lf_doom_transaction(e, "a request about it was interrupted, and its outcome is unknown");
		if (!(e->state == STATE_LOST && e->scope != SCOPE_EXPLICIT))
			lf_set_lease_state(e, STATE_UNKNOWN);	/* (a lost lease stays lost: it is settled all the same) */
	}
	CHECK_FOR_INTERRUPTS();
	/* not reached when the interrupt throws; if it did not, say so */
	ereport(ERROR,
			errcode(ERRCODE_QUERY_CANCELED),
			errmsg("Redis request interrupted"));
}

/* ---------------------------------------------------------------------
 * Lost leases and the write check
 * ---------------------------------------------------------------------
 */

/*
 * A renew found e lost (the key gone or another's) or left it too little
 * validity.  A session- or transaction-scoped lease is then as good as lost
 * to this session, as a lost kept-alive lease is: fenced writes under its
 * generation are refused (LF010) until it is released or its transaction
 * ends, and a transaction-scoped one fails its COMMIT (LF010), whatever
 * lease_fence.commit_check says.  It is still released at the end of its
 * transaction or session (a conditional release: the key may still be
 * ours).  An explicit-scope lease is only shown as lost: nothing about it
 * is automatic, and its writes may run on another backend than its renew.
 */
void
lf_mark_lease_lost(LeaseEntry *e, const char *why)
{
	MemoryContext old;

	lf_keepalive_stop(e);
	lf_set_lease_state(e, STATE_LOST);
	e->lost_why = why;
	if (e->scope == SCOPE_EXPLICIT)
		return;
	old = MemoryContextSwitchTo(reg.cxt);
	reg.lost = lappend(reg.lost, e);
	MemoryContextSwitchTo(old);
	lf_update_write_check();
}

/*
 * A take_over() took e from this session (lf_table_taken_by): lost, as if
 * a renew had found it so.
 */
void
lf_mark_taken(LeaseEntry *e)
{
	char		why[128];

	snprintf(why, sizeof(why), "lease_fence.take_over() in the backend with pid %d took it",
			 lf_table_taken_by(e));
	lf_mark_lease_lost(e, MemoryContextStrdup(reg.cxt, why));
}

/*
 * e, a transaction-scoped lease, was given up inside its own transaction:
 * released (whatever the release answered), or left unknown.  That
 * transaction cannot COMMIT (LF010 at PRE_COMMIT, and it cannot PREPARE),
 * and its fenced writes under e's generation are refused from now on: the
 * writes it made before and after would otherwise commit as if the lease
 * had covered them.  why is a constant.
 */
void
lf_doom_transaction(LeaseEntry *e, const char *why)
{
	MemoryContext old;

	Assert(e->scope == SCOPE_TRANSACTION);
	if (e->doomed_why != NULL)
		return;
	e->doomed_why = why;
	old = MemoryContextSwitchTo(reg.cxt);
	if (!list_member_ptr(reg.lost, e))
		reg.lost = lappend(reg.lost, e);
	MemoryContextSwitchTo(old);
	lf_update_write_check();
}

/* LF010: a write under the generation of e, a lease a renew found lost. */
LF_NORETURN_BEFORE static void report_lost_write(const LeaseEntry *e, Relation rel, int attnum,
												 const char *resource) LF_NORETURN_AFTER;

static void
report_lost_write(const LeaseEntry *e, Relation rel, int attnum, const char *resource)
{
	lf_count(LF_C_FENCE_LF010);
	if (e->doomed_why != NULL && e->state != STATE_LOST)
		ereport(ERROR,
				errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
				errmsg("lease on resource \"%s\" was given up in this transaction: write refused", e->resource),
				errdetail("Generation " INT64_FORMAT ": %s.", e->generation, e->doomed_why),
				errhint("This transaction cannot commit its fenced writes any more: roll it back, and acquire the lease again."),
				rel != NULL ? errtablecol(rel, attnum) : 0,
				resource != NULL ? lf_errresource(resource) : 0);
	ereport(ERROR,
			errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
			errmsg("lease on resource \"%s\" was lost: write refused", e->resource),
			errdetail("Generation " INT64_FORMAT ": %s.", e->generation, e->lost_why),
			errhint(e->scope == SCOPE_TRANSACTION ?
					"Stop working under this lease: roll the transaction back, and acquire it again." :
					"Stop working under this lease; acquire it again. Releasing it acknowledges the loss."),
			rel != NULL ? errtablecol(rel, attnum) : 0,
			resource != NULL ? lf_errresource(resource) : 0);
}

/*
 * The fence's lf_write_check_hook while this session has leases: a
 * resource fence is noted for idle_expiry.c, a fenced write under the
 * generation of a lease a renew found lost is refused (LF010), then
 * keepalive.c checks its own.
 */
static void
check_write(int64 g, Relation rel, int attnum, const char *resource)
{
	ListCell   *lc;

	/* a resource fence: a lease of ours under g now guards the transaction */
	if (resource != NULL)
		lf_idle_note_fence(g, resource, reg.leases);
	foreach(lc, reg.takeable)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if (e->generation != g)
			continue;
		if (lf_table_taken_by(e) != 0)
		{
			lf_mark_taken(e);
			report_lost_write(e, rel, attnum, resource);
		}
		e->wrote_in_xact = true;
	}
	foreach(lc, reg.lost)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if ((e->state == STATE_LOST || e->doomed_why != NULL) && e->generation == g)
			report_lost_write(e, rel, attnum, resource);
	}
	lf_keepalive_check_write(g, rel, attnum, resource);
}

/*
 * This transaction fenced resource under generation g without the fence's
 * hook (a fence a lease function makes itself, with lf_fence_resource_at):
 * the session's lease under g now bounds the transaction when it is left
 * idle (idle_expiry.c), as for fence_resource().
 */
void
lf_note_resource_fenced(int64 g, const char *resource)
{
	lf_idle_note_fence(g, resource, reg.leases);
}

/*
 * Install the fence's write check while anything needs it (a lost lease, a
 * kept-alive one, any lease whose resource a transaction may fence:
 * idle_expiry.c), and remove it otherwise, so that a session without
 * leases pays one branch per fenced row; forget entries that are no longer
 * lost.  Called after every
 * change that may need the check (a lease found lost, a keep-alive
 * started); one that ends the need may leave it installed until the next
 * call, which costs a call per fenced row and nothing else.
 */
void
lf_update_write_check(void)
{
	ListCell   *lc;

	foreach(lc, reg.lost)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if (e->state != STATE_LOST && e->doomed_why == NULL)
			reg.lost = foreach_delete_current(reg.lost, lc);
	}
	lf_write_check_hook = (reg.lost != NIL || reg.takeable != NIL || lf_keepalive_any() ||
						   reg.leases != NIL) ?
		check_write : NULL;
}

/*
 * A transaction-scoped lease was granted: its generation is the
 * transaction's current generation to its end, whatever savepoints roll back
 * (lease_fence.c), and what SHOW lease_fence.generation says.
 *
 * The lease fences its resource in this transaction, at its own generation
 * (resource_fence.c): a holder with a newer one has fenced it already
 * (LF001, and the transaction rolls back, releasing the lease), or a later
 * holder's acquire waits here until this transaction ends, so this one never
 * commits after it.  A fence made in a subtransaction dies with it if that
 * rolls back, while the lease lives on: it is made again at commit.
 */
void
lf_hold_in_transaction(LeaseEntry *e)
{
	Assert(e->scope == SCOPE_TRANSACTION && e->state == STATE_HELD);
	if (!reg.xact_generation_set || e->generation > reg.xact_generation)
		reg.xact_generation = e->generation;
	reg.xact_generation_set = true;
	lf_set_lease_generation(true, reg.xact_generation);

	e->fenced_in_subxact = GetCurrentTransactionNestLevel() > 1;
	(void) lf_fence_resource_at(e->resource, e->generation);
	lf_idle_note_transaction_lease(reg.leases);
}

/* ---------------------------------------------------------------------
 * Views
 * ---------------------------------------------------------------------
 */

/* lease_fence.session_leases(): the rows of lease_fence.leases */
Datum
lf_session_leases(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	trim_entries(NULL);			/* no expired explicit lease is shown */
	foreach(lc, reg.leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);
		Datum		values[7];
		bool		nulls[7];

		memset(nulls, 0, sizeof(nulls));
		values[0] = CStringGetTextDatum(e->resource);
		values[1] = CStringGetTextDatum(e->identity);
		values[2] = Int64GetDatum(e->generation);
		nulls[2] = (e->generation == 0);	/* a release of another session's lease */
		values[3] = CStringGetTextDatum(lf_scope_names[e->scope]);
		values[4] = CStringGetTextDatum(e->state == STATE_HELD && lf_keepalive_is_lost(e) ?
										"lost" : lf_state_names[e->state]);
		values[5] = TimestampTzGetDatum(e->acquired_at);
		values[6] = TimestampTzGetDatum(e->expires_at);
		nulls[6] = (e->state != STATE_HELD && e->state != STATE_LOST);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * lease_fence.all_leases_rows(): the rows of lease_fence.all_leases, every
 * lease of every backend from the lease table (lease_table.c), or, when
 * lease_fence is not preloaded, this session's own.
 */
Datum
lf_all_leases(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	if (lf_table_active())
	{
		lf_table_rows(rsinfo);
		return (Datum) 0;
	}
	trim_entries(NULL);			/* no expired explicit lease is shown */
	foreach(lc, reg.leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if (e->state != STATE_RELEASED)
			lf_table_put_entry(rsinfo, e);
	}
	return (Datum) 0;
}

/* ---------------------------------------------------------------------
 * Transaction and session ends
 * ---------------------------------------------------------------------
 */

/*
 * Must PRE_COMMIT ask Redis about e?  Not when more than min_validity_ms +
 * ttl_ms / 2 of it are left by this backend's own clock (the validity of its
 * grant or last renewal, measured from before that request was sent, with
 * the clock drift already taken off), unless lease_fence.commit_check is
 * 'always' or the lease is kept alive (the worker renews it; its state is
 * what is checked).  The lease then cannot have expired by the commit, so
 * the question would only find a key lost in other ways (deleted by hand,
 * or lost in a Redis failover), and the fence still holds without it: the
 * acquire fenced the resource, so a newer holder's acquire waits for this
 * commit and is ordered after it (docs/design.md, "The commit check").
 */
static bool
commit_check_needed(const LeaseEntry *e)
{
	if (lf_commit_check == LF_COMMIT_CHECK_ALWAYS || e->keepalive_slot >= 0)
		return true;
	return e->valid_until_ms - lf_now_ms() < e->min_validity_ms + e->ttl_ms / 2;
}

/*
 * PRE_COMMIT: every transaction-scoped lease must still be ours, with at
 * least min_validity_ms left, or the commit fails with LF010: one round
 * trip per lease, unless its own validity shows that (commit_check_needed).
 * A lease acquired in a subtransaction fences its resource again first
 * (LF001 if a newer holder fenced it meanwhile).
 */
static void
verify_at_commit(void)
{
	ListCell   *lc;

	foreach(lc, reg.leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);
		LfCall		call = {lf_command_timeout_ms, LF_INTERRUPTIBLE, false};
		LfAnswer	ans;
		int64		start;

		/*
		 * A lease this transaction gave up (released, or left unknown by an
		 * interrupted request), whatever its state now: no need to ask.
		 */
		if (e->scope == SCOPE_TRANSACTION && e->doomed_why != NULL)
		{
			lf_count(LF_C_COMMIT_CHECK_LF010);
			if (e->state == STATE_UNKNOWN)
				ereport(ERROR,
						errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
						errmsg("lease on resource \"%s\" could not be verified at commit", e->resource),
						errdetail("Generation " INT64_FORMAT ": %s.", e->generation, e->doomed_why),
						errhint("The transaction was rolled back because its lease may have been lost."));
			ereport(ERROR,
					errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
					errmsg("lease on resource \"%s\" was released before commit", e->resource),
					errdetail("Generation " INT64_FORMAT ": %s.", e->generation, e->doomed_why),
					errhint("The transaction was rolled back. A transaction-scoped lease is released by the transaction's end: COMMIT while it is held; release() inside the transaction gives it up, and the transaction's fenced writes with it."));
		}
		/*
		 * A lease a take_over() took from this session: lost; a transaction
		 * that wrote under a session-scoped one does not commit (one of
		 * transaction scope fails just below).
		 */
		if (e->state == STATE_HELD && e->scope != SCOPE_EXPLICIT && lf_table_taken_by(e) != 0)
		{
			lf_mark_taken(e);
			if (e->scope == SCOPE_SESSION && e->wrote_in_xact)
			{
				lf_count(LF_C_COMMIT_CHECK_LF010);
				ereport(ERROR,
						errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
						errmsg("lease on resource \"%s\" was taken over before commit", e->resource),
						errdetail("Generation " INT64_FORMAT ": %s; this transaction wrote under it.",
								  e->generation, e->lost_why),
						errhint("The transaction was rolled back; the lease is another holder's now."));
			}
		}
		/* won in a subtransaction that rolled back: its fence again, first */
		if (e->release_at_abort && e->fenced_in_subxact && e->state == STATE_HELD &&
			e->scope != SCOPE_TRANSACTION)
			(void) lf_fence_resource_at(e->resource, e->generation);
		/* a lease a renew found lost: no need to ask, whatever commit_check says */
		if (e->scope == SCOPE_TRANSACTION && e->state == STATE_LOST)
		{
			lf_count(LF_C_COMMIT_CHECK_LF010);
			ereport(ERROR,
					errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
					errmsg("lease on resource \"%s\" was lost before commit", e->resource),
					errdetail("Generation " INT64_FORMAT ": %s.", e->generation, e->lost_why),
					errhint("The transaction was rolled back; acquire the lease again and retry."));
		}
		if (e->scope != SCOPE_TRANSACTION || e->state != STATE_HELD)
			continue;
		/* a kept-alive lease the worker found lost: no need to ask */
		lf_keepalive_check_entry(e);
		/* a fence a rolled-back subtransaction took with it: again, first */
		if (e->fenced_in_subxact)
			(void) lf_fence_resource_at(e->resource, e->generation);
		if (!commit_check_needed(e))
		{
			lf_count(LF_C_COMMIT_CHECK_LOCAL_VALIDITY);
			continue;
		}
		start = lf_now_ms();
		lf_script_check(e->resource, e->identity, &call, &ans);
		if (ans.outcome == LF_ANS_INTERRUPTED)
			lf_lease_interrupted(e->resource, e->identity, e->generation, e->scope, e->ttl_ms, e->min_validity_ms);

		/* held: with pttl_ms left (none: the key has no expiry) */
		if (ans.outcome == LF_ANS_HELD &&
			!(ans.has_pttl && lf_validity_after(ans.pttl_ms, lf_now_ms() - start) < e->min_validity_ms))
		{
			lf_count(LF_C_COMMIT_CHECK_VERIFIED);
			continue;
		}
		lf_count(LF_C_COMMIT_CHECK_LF010);

		if (ans.outcome == LF_ANS_NOT_HELD)
			ereport(ERROR,
					errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
					errmsg("lease on resource \"%s\" was lost before commit", e->resource),
					errdetail("The lease key no longer holds this transaction's identity (generation " INT64_FORMAT ").",
							  e->generation),
					errhint("The transaction was rolled back; acquire the lease again and retry."));
		if (ans.outcome == LF_ANS_HELD)
		{
			int64		left = lf_validity_after(ans.pttl_ms, lf_now_ms() - start);

			ereport(ERROR,
					errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
					errmsg("lease on resource \"%s\" has too little validity left at commit", e->resource),
					errdetail("About " INT64_FORMAT " ms are left; min_validity_ms is " INT64_FORMAT ".",
							  left, e->min_validity_ms),
					errhint("The transaction was rolled back; use a longer ttl_ms or renew before commit."));
		}
		/* unavailable, unknown, and any reply the check script never gives */
		{
			char		buf[LF_ERRLEN];

			ereport(ERROR,
					errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
					errmsg("lease on resource \"%s\" could not be verified at commit", e->resource),
					errdetail("%s", lf_visible_error(ans.err, buf, sizeof(buf))),
					errdetail_log("%s", ans.err),
					errhint("The transaction was rolled back because its lease may have been lost."));
		}
	}
}

/*
 * End of transaction: release transaction-scoped leases, and settle leases
 * whose outcome an interrupt left unknown, all within one cleanup_timeout_ms
 * (within the exit budget when the transaction ends because the backend
 * exits).  Must not throw.  After a COMMIT the releases of its leases are
 * sent without waiting for their replies (LF_DEFER, where the connection
 * allows it): the commit is durable and visible by then, nothing the
 * transaction did depends on the answer, and the reply is read, counted and
 * (if the release failed) warned about before the connection's next
 * command.
 */
static void
release_at_xact_end(bool committed)
{
	ListCell   *lc;
	int64		deadline = proc_exit_inprogress ? exit_cleanup_deadline() :
		lf_now_ms() + lf_cleanup_timeout_ms;
	int			skipped = 0;
	bool		dying;

	foreach(lc, reg.leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if ((e->scope == SCOPE_TRANSACTION &&
			 (e->state == STATE_HELD || e->state == STATE_LOST)) ||
			(e->release_at_abort && !committed &&
			 (e->state == STATE_HELD || e->state == STATE_LOST)) ||
			e->state == STATE_UNKNOWN)
			skipped += e->state == STATE_UNKNOWN ? settle_by(e, true, deadline) :
				settle_deferring(e, false, committed && !proc_exit_inprogress, deadline);
		/* its transaction is over: nothing is left for the doom to refuse */
		e->doomed_why = NULL;
		e->release_at_abort = false;
		e->wrote_in_xact = false;
	}
	/* a termination that arrived meanwhile bounded them by the exit's budget */
	dying = proc_exit_inprogress || ProcDiePending;
	report_skipped(skipped, dying ? "the exit's cleanup budget" : "lease_fence.cleanup_timeout_ms",
				   dying ? Min(lf_cleanup_timeout_ms, lf_exit_timeout_ms) : lf_cleanup_timeout_ms);
	lf_update_write_check();
	maybe_trim(NULL);
}

/*
 * A fair wait an error or a termination ended leaves its queue at the end
 * of the (sub)transaction it ran in, within cleanup_timeout_ms (the exit's
 * budget when the backend exits).
 */
static void
leave_open_queue(void)
{
	if (lf_fair_is_open())
		lf_fair_leave(proc_exit_inprogress || ProcDiePending ? exit_cleanup_deadline() :
					  lf_now_ms() + lf_cleanup_timeout_ms);
}

static void
lease_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		leave_open_queue();
}

static void
lease_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		leave_open_queue();
	if (reg.xact_generation_set &&
		(event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		 event == XACT_EVENT_PREPARE))
	{
		reg.xact_generation_set = false;
		reg.xact_generation = 0;
		lf_set_lease_generation(false, 0);
	}
	if (reg.leases == NIL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			verify_at_commit();
			lf_keepalive_check_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			{
				ListCell   *lc;

				foreach(lc, reg.leases)
				{
					LeaseEntry *e = (LeaseEntry *) lfirst(lc);

					if (e->scope == SCOPE_TRANSACTION &&
						(e->state == STATE_HELD || e->state == STATE_LOST || e->doomed_why != NULL))
						ereport(ERROR,
								errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
								errmsg("cannot PREPARE a transaction that holds a transaction-scoped lease"),
								e->state != STATE_HELD && e->state != STATE_LOST ?
								errdetail("It released, or could not settle, one inside the transaction.") : 0);
				}
				lf_keepalive_check_prepare();
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			lf_keepalive_xact_end();
			release_at_xact_end(event == XACT_EVENT_COMMIT);
			break;
		default:
			break;
	}
}

/*
 * Backend exit: read the answers to the releases sent after COMMIT, release
 * session-scoped leases and settle the unsure ones, all within one budget
 * (exit_cleanup_deadline).  A backend terminated
 * while the server shuts down tries none: a fast shutdown must not wait on
 * a Redis that does not answer, and every such lease expires by its TTL.
 */
static void
release_at_exit(int code, Datum arg)
{
	ListCell   *lc;
	int			pending = 0;
	int			skipped = 0;
	bool		shutting_down = code != 0 && server_stopping();

	/* the answers to the releases sent after a COMMIT, within the budget */
	if (!shutting_down)
		lf_redis_read_deferred(exit_cleanup_deadline());

	foreach(lc, reg.leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if ((e->scope != SCOPE_EXPLICIT &&
			 (e->state == STATE_HELD || e->state == STATE_LOST)) ||
			e->state == STATE_UNKNOWN || e->state == STATE_UNCONFIRMED)
			pending++;
	}
	if (pending == 0)
		return;

	if (shutting_down)
		reg.exit_deadline = lf_now_ms();	/* nothing is tried */
	foreach(lc, reg.leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if ((e->scope != SCOPE_EXPLICIT &&
			 (e->state == STATE_HELD || e->state == STATE_LOST)) ||
			e->state == STATE_UNKNOWN || e->state == STATE_UNCONFIRMED)
			skipped += settle_by(e, false, exit_cleanup_deadline());
	}
	if (shutting_down)
		ereport(LOG,
				errmsg("the server is shutting down: %d leases of this session are left to expire by their TTL", skipped));
	else
		report_skipped(skipped, "the exit's cleanup budget",
					   Min(lf_cleanup_timeout_ms, lf_exit_timeout_ms));
}

/* Called from _PG_init. */
void
lf_registry_init(void)
{
	DefineCustomIntVariable("lease_fence.exit_timeout_ms",
							"The longest a backend's exit spends releasing its leases, all of them together.",
							"A session's lease_fence.cleanup_timeout_ms applies when it is lower; 0 releases nothing at exit.",
							&lf_exit_timeout_ms, 1000, 0, 60000,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomEnumVariable("lease_fence.commit_check",
							 "When COMMIT asks Redis whether a transaction-scoped lease is still held: near_expiry or always.",
							 "near_expiry asks only when less than min_validity_ms plus half the TTL is left by this backend's clock.",
							 &lf_commit_check, LF_COMMIT_CHECK_NEAR_EXPIRY, commit_check_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	RegisterXactCallback(lease_xact_callback, NULL);
	RegisterSubXactCallback(lease_subxact_callback, NULL);
	lf_fair_init();
	lf_die_deadline_hook = exit_cleanup_deadline;
	lf_idle_expiry_init();
}
