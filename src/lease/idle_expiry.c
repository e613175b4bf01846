/*-------------------------------------------------------------------------
 *
 * idle_expiry.c
 *	  A session idle in a transaction is ended once a lease that the
 *	  transaction holds has run out.
 *
 * A transaction that fences a resource (a transaction-scoped acquire,
 * fence_resource(), set_generation(g, resource)) keeps the resource fence's
 * row locked to its end, so that a later holder's fence waits for it and is
 * ordered after it (docs/design.md, "The commit check").  A client that
 * freezes with such a transaction open (SIGSTOP, a long GC pause) would
 * keep every later holder waiting until idle_in_transaction_session_timeout,
 * which most installations leave off.  So the lease bounds it: while the
 * backend waits for its client's next command inside a transaction
 * (pg_stat_activity's "idle in transaction") and a guarding lease of that
 * transaction has run out by this backend's own estimate, the session is
 * ended as idle_in_transaction_session_timeout ends it (FATAL 25P03), a LOG
 * line names the resource and the pid, and the counter idle_expiry /
 * session_ended counts it.  The guarding leases of a transaction:
 *	- its transaction-scoped leases (each fenced its resource when granted);
 *	- every other lease of this session under whose generation the
 *	  transaction fenced the lease's resource (the fence's write-check hook
 *	  tells the registry, which tells this file: lf_idle_note_fence).
 * The estimate is the lease's validity from its grant or this session's last
 * renew (LeaseEntry.valid_until_ms), or a later one that another backend's
 * renew wrote into the lease's slot of the lease table (a client that
 * heartbeats from a second connection), or, for a kept-alive lease, what the
 * keep-alive worker last renewed it to.  The exact rule, and what it does
 * not cover, is in docs/operations.md, "A holder frozen inside a
 * transaction".
 *
 * How: a USER_TIMEOUT, registered in the backend the first time it is
 * needed, fires at the earliest expiry and then every
 * LF_IDLE_EXPIRY_INTERVAL_MS until the transaction ends, so that a backend
 * busy in a statement when the lease runs out is ended as soon as it goes
 * idle, never in the middle of the statement.  The handler runs in signal
 * context: it reads only this file's guard array and atomics of the lease
 * table and the keep-alive table, and sets PostgreSQL's own flags of the idle-in-transaction
 * timeout; ProcessInterrupts then ends the session with PostgreSQL's own
 * FATAL, which the client reads as it reads that timeout's.  The exit
 * callback writes the LOG line and counts it.
 *
 * IDENTIFICATION
 *	  src/lease/idle_expiry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "lease/internal.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/backend_status.h"
#include "utils/memutils.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/*
 * How often the timer looks again once the earliest lease has run out (a
 * backend busy in a statement then is ended within this of going idle), and
 * while a kept-alive lease's worker may have renewed it.
 */
#define LF_IDLE_EXPIRY_INTERVAL_MS 10

/* one guarding lease of the transaction, as the handler reads it */
typedef struct IdleGuard
{
	int64		valid_until;	/* lf_now_ms() by which it runs out */
	int64		generation;
	int			keepalive_slot; /* kept alive: its slot, else -1 */
	int			table_slot;		/* its slot in the lease table, else -1 */
	char		identity[33];
	char	   *resource;		/* in guard_cxt */
} IdleGuard;

/* a resource this transaction fenced, and under which generation */
typedef struct FencedResource
{
	int64		generation;
	char	   *resource;
} FencedResource;

/*
 * The transaction's state.  File-scope: the handler (signal context) reads
 * guards while guards_ready; everything else runs in normal context.
 */
static MemoryContext guard_cxt = NULL;	/* reset at every transaction end */
static bool xact_active = false;	/* something to guard in this transaction */
static List *fenced = NIL;		/* FencedResource *, in guard_cxt */
static IdleGuard *guards = NULL;	/* in guard_cxt */
static int	nguards = 0;
static int	guards_allocated = 0;
static volatile sig_atomic_t guards_ready = false;

static TimeoutId timeout_id = MAX_TIMEOUTS;	/* MAX_TIMEOUTS: not registered */
static bool timer_armed = false;
static bool exit_hook_registered = false;

/* set by the handler once it ended the session */
static volatile sig_atomic_t fired = false;
static volatile sig_atomic_t fired_guard = -1;
static char fired_resource[LF_MAX_RESOURCE + 1];
static int64 fired_generation;

/*
 * When guard g runs out: its own estimate, or later if another backend's
 * renew extended it (its lease-table slot) or, for a kept-alive lease, the
 * worker did (its keep-alive slot), while those slots still hold it.  Safe
 * in signal context (atomic reads and comparisons); a slot reused meanwhile
 * only makes the guard's own estimate count, that of a lease this backend
 * no longer tracks there.
 */
static int64
guard_valid_until(const IdleGuard *g)
{
	int64		until = Max(g->valid_until, lf_table_renewed_until(g->table_slot, g->identity));

	if (g->keepalive_slot >= 0 && lf_ka != NULL)
	{
		KeepaliveSlot *s = &lf_ka->slots[g->keepalive_slot];

		if (pg_atomic_read_u32(&s->state) != KA_FREE &&
			strncmp(s->identity, g->identity, sizeof(g->identity)) == 0)
			until = Max(until, (int64) pg_atomic_read_u64(&s->valid_until));
	}
	return until;
}

/* The guard that runs out first, or -1 when there is none. */
static int
earliest_guard(int64 *until)
{
	int			first = -1;
	int			i;

	*until = PG_INT64_MAX;
	for (i = 0; i < nguards; i++)
	{
		int64		u = guard_valid_until(&guards[i]);

		if (u < *until)
		{
			*until = u;
			first = i;
		}
	}
	return first;
}

/*
 * Is this backend waiting for its client's next command inside a
 * transaction?  Its pg_stat_activity state says "idle in transaction" (set
 * just before the command read, as PostgreSQL arms its own
 * idle_in_transaction_session_timeout there), and it is blocked reading
 * from the client (wait event ClientRead): not in the moment after the
 * command arrived and before it runs.  Reads only this process's own
 * entries: safe in signal context.
 */
static bool
waiting_for_client(void)
{
	volatile PgBackendStatus *be = MyBEEntry;

	if (be == NULL || be->st_state != STATE_IDLEINTRANSACTION)
		return false;
	return my_wait_event_info != NULL &&
		*(volatile uint32 *) my_wait_event_info == WAIT_EVENT_CLIENT_READ;
}

/*
 * The timer's handler (signal context).  When the backend waits for its
 * client and a guarding lease has run out, end the session the way
 * PostgreSQL's idle_in_transaction_session_timeout ends it: its pending
 * flag, which ProcessInterrupts turns into FATAL 25P03 as soon as the
 * command read notices the latch.  ProcessInterrupts honours the flag only
 * while that setting is above zero (it may have been set to 0 meanwhile),
 * so a setting of 0 is raised to 1 ms here: the backend is about to exit,
 * and nothing else reads the value before it does.  (No cleaner way reaches
 * the client with an error that says what happened: a cancel is ignored
 * while reading a command, and a termination (57P01) would read as an
 * administrator's.)
 */
static void
idle_expiry_handler(void)
{
	int64		until;
	int			first;

	if (!guards_ready || fired || !waiting_for_client())
		return;
	first = earliest_guard(&until);
	if (first < 0 || lf_now_ms() < until)
		return;
	fired_guard = first;
	fired = true;
	if (IdleInTransactionSessionTimeout <= 0)
		IdleInTransactionSessionTimeout = 1;
	IdleInTransactionSessionTimeoutPending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/* Remember what was ended while the guards still say it (normal context). */
static void
remember_fired(void)
{
	if (fired && fired_resource[0] == '\0' && fired_guard >= 0 && fired_guard < nguards)
	{
		strlcpy(fired_resource, guards[fired_guard].resource, sizeof(fired_resource));
		fired_generation = guards[fired_guard].generation;
	}
}

/*
 * Backend exit: if the handler ended the session, say so in the server log
 * (the resource and the pid, never the lease's identity) and count it.
 */
static void
idle_expiry_at_exit(int code, Datum arg)
{
	if (!fired)
		return;
	remember_fired();
	lf_count(LF_C_IDLE_EXPIRY_SESSION_ENDED);
	ereport(LOG,
			errmsg("terminated session of process %d idle in transaction: its lease on resource \"%s\" ran out",
				   MyProcPid, fired_resource),
			errdetail("The transaction held the resource's fence under generation " INT64_FORMAT
					  "; the lease had run out by this backend's estimate while it waited for its client.",
					  fired_generation));
}

/* Stop the timer (normal context). */
static void
disarm(void)
{
	guards_ready = false;
	if (timer_armed)
	{
		disable_timeout(timeout_id, false);
		timer_armed = false;
	}
}

/*
 * Arm the timer at the earliest expiry among the guards, then every
 * LF_IDLE_EXPIRY_INTERVAL_MS; disarm it when there is none.  Only regular
 * backends: their client's commands are what the rule waits on.
 */
static void
arm(void)
{
	int64		until;
	int64		left;

	if (nguards == 0 || MyBackendType != B_BACKEND)
	{
		disarm();
		return;
	}
	if (timeout_id == MAX_TIMEOUTS)
		timeout_id = RegisterTimeout(USER_TIMEOUT, idle_expiry_handler);
	if (!exit_hook_registered)
	{
		before_shmem_exit(idle_expiry_at_exit, (Datum) 0);
		exit_hook_registered = true;
	}
	(void) earliest_guard(&until);
	left = Max(until - lf_now_ms(), 0);
	pg_compiler_barrier();
	guards_ready = true;
	enable_timeout_every(timeout_id,
						 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), left),
						 LF_IDLE_EXPIRY_INTERVAL_MS);
	timer_armed = true;
}

/* Did this transaction fence e's resource under e's generation? */
static bool
fenced_under(const LeaseEntry *e)
{
	ListCell   *lc;

	foreach(lc, fenced)
	{
		FencedResource *f = (FencedResource *) lfirst(lc);

		if (f->generation == e->generation && strcmp(f->resource, e->resource) == 0)
			return true;
	}
	return false;
}

/*
 * Work out the transaction's guarding leases from the session's list and
 * arm the timer for them.  Called when the transaction fences a resource or
 * gets a transaction-scoped lease, and whenever a lease's validity changes
 * (a renew); costs one branch in a transaction that has nothing to guard.
 */
void
lf_idle_update(List *leases)
{
	ListCell   *lc;
	MemoryContext old;
	int			n = 0;

	if (!xact_active)
		return;
	guards_ready = false;		/* the handler must not read them while they change */
	pg_compiler_barrier();
	for (n = 0; n < nguards; n++)
		pfree(guards[n].resource);
	n = 0;
	old = MemoryContextSwitchTo(guard_cxt);
	foreach(lc, leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);
		bool		guard;

		if (e->generation == 0)
			continue;			/* a release of another session's lease */
		guard = (e->scope == SCOPE_TRANSACTION &&
				 (e->state == STATE_HELD || e->state == STATE_LOST || e->doomed_why != NULL)) ||
			fenced_under(e);
		if (!guard)
			continue;
		if (n == guards_allocated)
		{
			guards_allocated = Max(4, guards_allocated * 2);
			guards = guards == NULL ? palloc(sizeof(IdleGuard) * guards_allocated) :
				repalloc(guards, sizeof(IdleGuard) * guards_allocated);
		}
		guards[n].valid_until = e->valid_until_ms;
		guards[n].generation = e->generation;
		guards[n].keepalive_slot = e->keepalive_slot;
		guards[n].table_slot = e->table_slot;
		strlcpy(guards[n].identity, e->identity, sizeof(guards[n].identity));
		guards[n].resource = pstrdup(e->resource);
		n++;
	}
	MemoryContextSwitchTo(old);
	nguards = n;
	arm();
}

/*
 * The transaction fenced resource under generation g (the fence's
 * write-check hook, before the fence is made): a lease of this session with
 * that resource and generation now guards the transaction.
 */
void
lf_idle_note_fence(int64 g, const char *resource, List *leases)
{
	ListCell   *lc;
	MemoryContext old;
	FencedResource *f;

	if (guard_cxt == NULL)
		guard_cxt = AllocSetContextCreate(TopMemoryContext, "lease_fence idle expiry",
										  ALLOCSET_SMALL_SIZES);
	foreach(lc, fenced)
	{
		f = (FencedResource *) lfirst(lc);
		if (f->generation == g && strcmp(f->resource, resource) == 0)
			return;				/* fenced before in this transaction */
	}
	old = MemoryContextSwitchTo(guard_cxt);
	f = palloc(sizeof(FencedResource));
	f->generation = g;
	f->resource = pstrdup(resource);
	fenced = lappend(fenced, f);
	MemoryContextSwitchTo(old);
	xact_active = true;
	lf_idle_update(leases);
}

/* The transaction got a transaction-scoped lease: it guards the transaction. */
void
lf_idle_note_transaction_lease(List *leases)
{
	if (guard_cxt == NULL)
		guard_cxt = AllocSetContextCreate(TopMemoryContext, "lease_fence idle expiry",
										  ALLOCSET_SMALL_SIZES);
	xact_active = true;
	lf_idle_update(leases);
}

/* The transaction ended: nothing is guarded any more. */
static void
idle_expiry_xact_callback(XactEvent event, void *arg)
{
	if (!xact_active)
		return;
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT && event != XACT_EVENT_PREPARE)
		return;
	disarm();
	remember_fired();
	xact_active = false;
	fenced = NIL;
	guards = NULL;
	nguards = 0;
	guards_allocated = 0;
	MemoryContextReset(guard_cxt);
}

/*
 * A subtransaction aborted.  When it aborted on an error the client sees
 * (a failed statement inside a savepoint), PostgresMain's error recovery
 * has just disabled every timeout, this one too, before the abort; the
 * transaction goes on with the same guards (a fence made in the
 * subtransaction still counts, and its leases live on), so the timer is
 * armed again.
 */
static void
idle_expiry_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							 SubTransactionId parentSubid, void *arg)
{
	if (!xact_active || event != SUBXACT_EVENT_ABORT_SUB)
		return;
	timer_armed = false;		/* (disabled, or about to be armed again) */
	arm();
}

/* Called from lf_registry_init (_PG_init). */
void
lf_idle_expiry_init(void)
{
	RegisterXactCallback(idle_expiry_xact_callback, NULL);
	RegisterSubXactCallback(idle_expiry_subxact_callback, NULL);
}
