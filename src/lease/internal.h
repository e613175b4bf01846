/*-------------------------------------------------------------------------
 *
 * internal.h
 *	  What the lease layer's own files share and nobody above them uses:
 *	  the session's lease entries and the registry, the keep-alive table,
 *	  the lease table, one SQL call's state (LfRequest), the rows of
 *	  acquire, renew and release, the key_prefix owner check, the acquire
 *	  and its wait.
 *
 * Calls between these files go one way (test/layers.sh refuses a loop):
 *	  lease.c -> acquire_wait.c -> acquire.c -> key_prefix.c -> request.c
 *	  -> lease_registry.c -> ...
 *
 * IDENTIFICATION
 *	  src/lease/internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LF_LEASE_INTERNAL_H
#define LF_LEASE_INTERNAL_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "funcapi.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/backend_status.h"
#include "utils/relcache.h"

#include "base/compat.h"
#include "base/stats.h"
#include "fence/fence.h"				/* LF_MAX_RESOURCE */
#include "lease/lease.h"
#include "redis/redis.h"

typedef enum LeaseScope
{
	SCOPE_EXPLICIT,
	SCOPE_SESSION,
	SCOPE_TRANSACTION
} LeaseScope;

typedef enum LeaseState
{
	STATE_HELD,
	STATE_UNKNOWN,				/* outcome unknown, cleanup pending */
	STATE_UNCONFIRMED,			/* cleanup tried, not confirmed */
	STATE_RELEASED,
	STATE_LOST,					/* a renew found it lost: writes under it refused */
	STATE_WAITING				/* a fair waiter's place in its queue (fair_wait.c):
								 * shown in all_leases, never in the registry */
} LeaseState;

/* one lease of this session */
typedef struct LeaseEntry
{
	char	   *resource;
	char		identity[33];
	int64		generation;		/* 0: a release of another session's lease */
	LeaseScope	scope;
	LeaseState	state;
	TimestampTz acquired_at;
	TimestampTz expires_at;		/* local estimate: acquired_at + validity */
	int64		valid_until_ms; /* the same on lf_now_ms()'s clock */
	int64		ttl_ms;
	int64		min_validity_ms;
	bool		fenced_in_subxact;	/* transaction scope: fenced in a subtransaction */
	int			keepalive_slot;	/* kept alive: its slot (keepalive.c), else -1 */
	const char *lost_why;		/* STATE_LOST: why, for the LF010 (a constant) */
	/*
	 * Transaction scope: released, or left unknown, inside its own
	 * transaction, which then cannot COMMIT (LF010): why (a constant), else
	 * NULL.  Whatever the lease's state becomes.
	 */
	const char *doomed_why;
	bool		cleanup_counted;	/* a cleanup of it was counted (stats) */
	/*
	 * Won by campaign() or take_over() in this transaction: released if the
	 * transaction aborts (its resource fence, raised in it, is undone), and
	 * fenced again at COMMIT when a subtransaction took the fence with it.
	 */
	bool		release_at_abort;
	bool		wrote_in_xact;	/* a fenced write under it in this transaction */
	Oid			role;			/* the role that acquired it */
	int			table_slot;		/* its slot in the lease table, else -1 */
} LeaseEntry;

extern LeaseEntry *lf_find_lease(const char *resource, const char *identity);
extern LeaseEntry *lf_add_lease(const char *resource, const char *identity, int64 generation,
								LeaseScope scope, LeaseState state, int64 ttl, int64 minv,
								int64 validity);
extern void lf_settle_lease(LeaseEntry *e, bool fresh);
extern void lf_settle_lease_by(LeaseEntry *e, bool fresh, int64 deadline);
extern void lf_hold_in_transaction(LeaseEntry *e);
LF_NORETURN_BEFORE extern void lf_lease_interrupted(const char *resource, const char *identity,
													int64 generation, LeaseScope scope,
													int64 ttl, int64 minv) LF_NORETURN_AFTER;
extern void lf_report_redis_problem(const char *what, const char *resource, const char *err);
extern void lf_mark_lease_lost(LeaseEntry *e, const char *why);
extern void lf_mark_taken(LeaseEntry *e);
extern void lf_doom_transaction(LeaseEntry *e, const char *why);
extern void lf_set_lease_state(LeaseEntry *e, LeaseState state);
extern void lf_update_write_check(void);
extern void lf_note_resource_fenced(int64 g, const char *resource);
extern bool lf_may_see_settings(void);
extern const char *lf_visible_error(const char *err, char *buf, size_t buflen);


/* lease_fence.commit_check: when PRE_COMMIT asks Redis (lease_registry.c) */
typedef enum LfCommitCheck
{
	LF_COMMIT_CHECK_NEAR_EXPIRY,
	LF_COMMIT_CHECK_ALWAYS
} LfCommitCheck;

extern int	lf_commit_check;
extern void lf_lease_validity_set(LeaseEntry *e, int64 validity);

/* keepalive.c: how many leases the cluster can keep alive at once */
#define LF_KEEPALIVE_SLOTS 1024

/*
 * The keep-alive table in shared memory, which the owners (keepalive.c)
 * and the worker (keepalive_worker.c) share, under its LWLock.
 */
/* the state of a slot */
typedef enum KeepaliveState
{
	KA_FREE = 0,
	KA_ACTIVE,					/* renewed while its owner is active */
	KA_LOST						/* lost: its owner's fenced writes fail */
} KeepaliveState;

/* why a kept-alive lease was lost */
typedef enum KeepaliveLoss
{
	KL_NONE = 0,
	KL_NOT_HELD,				/* a renewal found the key gone or another's */
	KL_UNCONFIRMED,				/* no renewal was confirmed before it expired */
	KL_IDLE,					/* its owner was idle past its TTL */
	KL_MAX,						/* keepalive_max_ms was reached: released */
	KL_SETTINGS					/* the worker's Redis settings differ */
} KeepaliveLoss;

/* one kept-alive lease, in shared memory */
typedef struct KeepaliveSlot
{
	pg_atomic_uint32 state;		/* KeepaliveState: the owner reads it unlocked */
	pg_atomic_uint32 loss;		/* KeepaliveLoss */
	pg_atomic_uint64 valid_until;	/* lf_now_ms() by which it expires */
	int			owner_pid;
	PgBackendStatus *owner_status;	/* the owner's pg_stat_activity entry */
	uint64		fingerprint;	/* of the owner's Redis settings */
	int64		ttl_ms;
	int64		max_until;		/* lf_now_ms() when keepalive_max_ms is reached */
	int64		next_renew;		/* lf_now_ms() of the next renewal */
	char		identity[33];
	char		resource[LF_MAX_RESOURCE + 1];
} KeepaliveSlot;

typedef struct KeepaliveShared
{
	LWLock	   *lock;
	Latch	   *worker_latch;	/* NULL while no worker runs */
	pg_atomic_uint64 worker_fingerprint;	/* 0: no worker has started */
	KeepaliveSlot slots[LF_KEEPALIVE_SLOTS];
} KeepaliveShared;

extern KeepaliveShared *lf_ka;
extern const char *const lf_keepalive_loss_reasons[];
extern int	lf_keepalive_max_ms;
extern void lf_keepalive_precheck(LeaseScope scope);
extern bool lf_keepalive_start(LeaseEntry *e, int64 start, int64 validity);
extern void lf_keepalive_stop(LeaseEntry *e);
extern bool lf_keepalive_any(void);
extern void lf_keepalive_check_write(int64 g, Relation rel, int attnum, const char *resource);
extern bool lf_keepalive_is_lost(const LeaseEntry *e);
extern void lf_keepalive_check_commit(void);
extern void lf_keepalive_check_prepare(void);
extern void lf_keepalive_check_entry(const LeaseEntry *e);
extern void lf_keepalive_xact_end(void);
extern const char *lf_keepalive_state_of(const char *identity);

/*
 * idle_expiry.c: a session idle in a transaction whose guarding lease ran
 * out is ended (the registry tells it what the transaction guards)
 */
extern void lf_idle_note_fence(int64 g, const char *resource, List *leases);
extern void lf_idle_note_transaction_lease(List *leases);
extern void lf_idle_update(List *leases);
extern void lf_idle_expiry_init(void);

/* fair_wait.c: this backend's place in a fair queue */
extern int	lf_fair_waiter_ttl_ms;
extern void lf_fair_open(const char *resource, const char *identity);
extern bool lf_fair_is_open(void);
extern void lf_fair_queued(void);
extern void lf_fair_granted(void);
extern void lf_fair_leave(int64 deadline);
extern void lf_fair_init(void);

/* lease_table.c: every lease of the cluster, in shared memory (all_leases) */
extern const char *const lf_scope_names[];	/* LeaseScope as the views name it */
extern const char *const lf_state_names[];	/* LeaseState as the views name it */
extern int	lf_max_tracked_leases;
extern int	lf_max_tracked_leases_share;

extern bool lf_table_active(void);
extern void lf_table_register(LeaseEntry *e);
extern void lf_table_update(LeaseEntry *e);
extern void lf_table_forget(LeaseEntry *e);
extern void lf_table_rows(ReturnSetInfo *rsinfo);
extern void lf_table_put_entry(ReturnSetInfo *rsinfo, const LeaseEntry *e);
extern bool lf_may_see_identity(Oid holder_role);
extern bool lf_table_holder(const char *resource, const char *identity, int *pid,
							Oid *dboid, Oid *roleid, TimestampTz *since);
extern void lf_table_note_renewal(const char *resource, const char *identity, int64 valid_until);
extern int64 lf_table_renewed_until(int slot, const char *identity);
extern int	lf_table_take(const char *resource, const char *identity);

/* what holder() and leader() show of a holder (lf_show_holder) */
typedef struct LfShownHolder
{
	bool		in_table;		/* a backend of this cluster holds it */
	bool		identity_visible;	/* the current user may see its identity */
	int			pid;
	char	   *dbname;			/* NULL: its database is gone */
	TimestampTz since;			/* in the table: since when it holds (or waits) */
} LfShownHolder;

extern void lf_show_holder(const char *resource, const char *identity, LfShownHolder *out);
extern int	lf_table_taken_by(const LeaseEntry *e);

/*
 * One SQL call of the lease helper: made by its entry point, passed to
 * every helper that bounds a request or says why it failed.
 */
typedef struct LfRequest
{
	/*
	 * A waiting acquire: the latest moment any of its requests may still
	 * wait for Redis, wait_ms plus one command_timeout_ms after it started
	 * (a request started before the deadline ends by then, connects and
	 * cleanups included); 0 otherwise.
	 */
	int64		hard_deadline;

	/*
	 * Why the last request could not be applied or its outcome is not known
	 * (the text of its WARNING, never a secret, endpoints only for those who
	 * may see them): the reason column of an unavailable, unknown or
	 * unreplicated row.  Set by lf_request_problem() and the other reports,
	 * used and cleared by the next row built.
	 */
	char		reason[LF_ERRLEN];

	/* campaign(): its row is (status, identity, term, validity_ms, reason) */
	bool		campaign_row;

	/* take_over(): its row is not counted as an acquire's (takeover / taken is) */
	bool		uncounted;

	/* the lease an acquire granted (set with the acquired row), else NULL */
	LeaseEntry *granted;

	/* a fair acquire's last busy answer: its rank in the queue (0: the head; -1: none) */
	int64		fair_position;
} LfRequest;

/* what one call came to: everything its row shows */
typedef struct LfOutcome
{
	LfCounter	status;
	const char *resource;		/* acquire */
	const char *identity;		/* acquire: NULL unless the lease may be held */
	bool		have_generation;	/* acquire */
	int64		generation;
	bool		have_validity;	/* acquire, renew */
	int64		validity;
} LfOutcome;

/* request.c: the call's arguments, bounds, reason and row */
extern int64 lf_check_ttl(FunctionCallInfo fcinfo, int argno);
extern int64 lf_check_min_validity(FunctionCallInfo fcinfo, int argno, int64 ttl);
extern char *lf_check_identity(FunctionCallInfo fcinfo, int argno);
extern LeaseScope lf_check_scope(FunctionCallInfo fcinfo, int argno);
extern void lf_request_init(LfRequest *req);
extern LfCall lf_request_call(const LfRequest *req, int base_timeout_ms);
extern int	lf_request_timeout(const LfRequest *req, int base);
extern void lf_request_settle(const LfRequest *req, LeaseEntry *e, bool fresh);
extern void lf_request_reason(LfRequest *req, const char *why);
extern void lf_request_problem(LfRequest *req, const char *operation, const char *resource,
							   const char *err);
extern int	lf_request_replicas(const LfRequest *req, const char *resource, const char *identity,
								int64 generation, LeaseScope scope, int64 ttl, int64 minv,
								char *err);
extern Datum lf_outcome_row(FunctionCallInfo fcinfo, LfRequest *req, const LfOutcome *o);
extern Datum lf_status_row(FunctionCallInfo fcinfo, LfRequest *req, LfCounter status,
						   const char *resource);
LF_NORETURN_BEFORE extern void lf_report_corrupt_generation_key(const char *resource,
																bool oversized) LF_NORETURN_AFTER;

/* key_prefix.c: is key_prefix on this Redis this database's? */
extern bool lf_key_prefix_is_ours(LfRequest *req, const char *resource, int elevel);

/* acquire.c: one attempt to acquire */
typedef struct AcquireArgs
{
	char	   *resource;
	int64		ttl;
	int64		minv;
	LeaseScope	scope;
	bool		keepalive;
	bool		campaign;		/* campaign(): the election's value goes with the grant */
	const char *election_value; /* campaign(): NULL for none */
	bool		fair;			/* granted in the order waiters came (acquire_fair.lua) */
	bool		join;			/* fair: join the queue when not granted */
	char		fair_identity[33];	/* fair: the waiter's identity, the whole wait's */
} AcquireArgs;

extern void lf_new_identity(char *identity);

extern LfCounter lf_acquire_once(FunctionCallInfo fcinfo, LfRequest *req, const AcquireArgs *a,
								 int64 *spare, int64 *pttl, Datum *row, bool *retry);

/* acquire_wait.c: an acquire that waits while the lease is busy */
extern Datum lf_acquire_waiting(FunctionCallInfo fcinfo, LfRequest *req, const AcquireArgs *a,
								int64 deadline);

#endif							/* LF_LEASE_INTERNAL_H */
