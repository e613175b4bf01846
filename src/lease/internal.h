/*-------------------------------------------------------------------------
 *
 * internal.h
 *	  What the lease layer's own files share and nobody above them uses:
 *	  one SQL call's state (LfRequest), the rows of acquire, renew and
 *	  release, the key_prefix owner check, the acquire and its wait.
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

#include "base/stats.h"
#include "lease/lease.h"
#include "lease/script_shim.h"	/* temporary: the typed script calls */
#include "redis/redis.h"

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

/* request.c: the call's bounds, its reason, its row */
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
} AcquireArgs;

extern LfCounter lf_acquire_once(FunctionCallInfo fcinfo, LfRequest *req, const AcquireArgs *a,
								 int64 *spare, int64 *pttl, Datum *row, bool *retry);

/* acquire_wait.c: an acquire that waits while the lease is busy */
extern Datum lf_acquire_waiting(FunctionCallInfo fcinfo, LfRequest *req, const AcquireArgs *a,
								int64 deadline);

#endif							/* LF_LEASE_INTERNAL_H */
