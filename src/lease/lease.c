/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  The SQL functions of the lease helper: acquire, renew and release a
 *	  Redis lease, with three-way outcomes, holder, keepalive_state, and
 *	  the backend's Redis connections (redis_connections, redis_disconnect).
 *
 * Each function checks its arguments (an ERROR before anything is sent),
 * makes the call's LfRequest (internal.h) and passes it down, runs one
 * script (a typed call of the Redis layer), turns what became of it into a
 * status, and records the lease in the session's registry
 * (lease_registry.c).  One attempt to acquire is acquire.c's, its wait
 * acquire_wait.c's, the key_prefix owner check key_prefix.c's.
 *
 * An outcome we cannot know ("unknown": a timeout after sending, a lost
 * connection) is never reported as "not acquired"; an operation
 * interrupted by a cancel is recorded as "unknown" and cleaned up at the
 * end of the transaction.
 *
 * IDENTIFICATION
 *	  src/lease/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "fence/fence.h"
#include "funcapi.h"
#include "lease/internal.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(lf_acquire);
PG_FUNCTION_INFO_V1(lf_queue);
PG_FUNCTION_INFO_V1(lf_renew);
PG_FUNCTION_INFO_V1(lf_release);
PG_FUNCTION_INFO_V1(lf_keepalive_state);
PG_FUNCTION_INFO_V1(lf_holder);
PG_FUNCTION_INFO_V1(lf_redis_connections_sql);
PG_FUNCTION_INFO_V1(lf_redis_disconnect_sql);

/* ---------------------------------------------------------------------
 * SQL functions
 * ---------------------------------------------------------------------
 */

/*
 * lease_fence.acquire(resource text, ttl_ms bigint, min_validity_ms bigint
 *					   DEFAULT 0, scope text DEFAULT 'explicit', wait_ms bigint
 *					   DEFAULT 0, keepalive boolean DEFAULT false, fair boolean
 *					   DEFAULT false)
 *
 * fair: granted in the order the waiters' first requests reached Redis
 * (acquire_wait.c); with wait_ms 0, busy while anybody waits in the queue.
 *
 * (Called with four arguments by the 1.1 definition, until ALTER EXTENSION
 * UPDATE.)
 */
Datum
lf_acquire(PG_FUNCTION_ARGS)
{
	AcquireArgs a;
	LfRequest	req;
	int64		wait_ms = 0;
	int64		pttl;

	lf_request_init(&req);
	a.resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	a.ttl = lf_check_ttl(fcinfo, 1);
	a.scope = lf_check_scope(fcinfo, 3);
	a.keepalive = false;
	a.campaign = false;
	a.election_value = NULL;
	a.fair = false;
	a.join = false;
	a.fair_identity[0] = '\0';
	if (PG_NARGS() > 4)
	{
		if (PG_ARGISNULL(4))
			ereport(ERROR,
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("wait_ms must not be NULL"));
		wait_ms = PG_GETARG_INT64(4);
		if (wait_ms < 0 || wait_ms > INT_MAX)
			ereport(ERROR,
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("wait_ms must be between 0 and %d", INT_MAX),
					errdetail("The wait_ms given was " INT64_FORMAT ".", wait_ms));
	}
	if (PG_NARGS() > 5)
	{
		if (PG_ARGISNULL(5))
			ereport(ERROR,
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("keepalive must not be NULL"));
		a.keepalive = PG_GETARG_BOOL(5);
	}
	if (PG_NARGS() > 6)
	{
		if (PG_ARGISNULL(6))
			ereport(ERROR,
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("fair must not be NULL"));
		a.fair = PG_GETARG_BOOL(6);
	}
	/*
	 * A kept-alive lease never outlives keepalive_max_ms, the first grant
	 * included: a release at that point that fails leaves a key that
	 * expires by then.
	 */
	if (a.keepalive && a.ttl > lf_keepalive_max_ms)
		a.ttl = lf_keepalive_max_ms;
	a.minv = lf_check_min_validity(fcinfo, 2, a.ttl);

	if (a.scope == SCOPE_TRANSACTION && !IsTransactionBlock())
		ereport(ERROR,
				errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				errmsg("a transaction-scoped lease needs a transaction block"),
				errdetail("It would be released as soon as this statement ends."),
				errhint("Use BEGIN first, or scope 'explicit'."));
	if (a.keepalive)
		lf_keepalive_precheck(a.scope);

	if (wait_ms == 0)
	{
		Datum		row = (Datum) 0;
		int64		spare = 0;
		bool		retry;
		LfCounter	status = lf_acquire_once(fcinfo, &req, &a, &spare, &pttl, &row, &retry);

		if (status == LF_C_ACQUIRE_BUSY || status == LF_C_ACQUIRE_STALE)
			row = lf_status_row(fcinfo, &req, status, a.resource);
		PG_RETURN_DATUM(row);
	}

	PG_RETURN_DATUM(lf_acquire_waiting(fcinfo, &req, &a, lf_now_ms() + wait_ms));
}

/* Say that fewer replicas than redis_min_replicas have a write of operation. */
static void
report_unreplicated(LfRequest *req, const char *operation, const char *resource, int acked,
					const char *err)
{
	if (acked >= 0)
	{
		snprintf(req->reason, sizeof(req->reason), "%d of %d replicas acknowledged it within %d ms",
				 acked, lf_min_replicas, lf_replica_timeout_ms);
		ereport(WARNING,
				errmsg("%s of resource \"%s\": %s", operation, resource, req->reason));
	}
	else
	{
		char		why[LF_ERRLEN + 64];

		snprintf(why, sizeof(why), "could not learn whether replicas have it (%s)", err);
		lf_request_reason(req, why);
		ereport(WARNING,
				errmsg("%s of resource \"%s\": %s", operation, resource, req->reason),
				errdetail_log("The full text: %s", why));
	}
}

/*
 * Renew (ttl > 0) or release (ttl 0) the lease of identity on resource
 * (compare-identity scripts).  What both share is handled here: an
 * interrupt (recorded as unknown, then raised), and the WARNING that says
 * why a request was not applied or its outcome unknown.  Returns the
 * answer's outcome: the script's own two (renewed or lost, released or not
 * held), unavailable, or unknown (every other reply among them).
 */
static LfAnswerOutcome
run_identity_script(LfRequest *req, const char *resource, const char *identity,
					LeaseEntry *e, int64 ttl, int64 minv)
{
	LfScript	script = ttl > 0 ? LF_SCRIPT_RENEW : LF_SCRIPT_RELEASE;
	const char *operation = ttl > 0 ? "renew" : "release";
	LfCall		call = {lf_command_timeout_ms, LF_INTERRUPTIBLE, false};
	LfAnswer	ans;

	if (script == LF_SCRIPT_RENEW)
		lf_script_renew(resource, identity, ttl, &call, &ans);
	else
		lf_script_release(resource, identity, &call, &ans);
	switch (ans.outcome)
	{
		case LF_ANS_INTERRUPTED:
			lf_lease_interrupted(resource, identity, e ? e->generation : 0,
								 e ? e->scope : SCOPE_EXPLICIT, ttl, minv);
			break;
		case LF_ANS_RENEWED:
		case LF_ANS_LOST:
			if (script == LF_SCRIPT_RENEW)
				return ans.outcome;
			break;
		case LF_ANS_RELEASED:
		case LF_ANS_NOT_HELD:
			if (script == LF_SCRIPT_RELEASE)
				return ans.outcome;
			break;
		case LF_ANS_UNAVAILABLE:
			lf_request_problem(req, operation, resource, ans.err);
			return LF_ANS_UNAVAILABLE;
		default:
			break;
	}
	lf_request_problem(req, operation, resource, ans.err);
	return LF_ANS_UNKNOWN;
}

/*
 * lease_fence.renew(resource text, identity text, ttl_ms bigint,
 *					 min_validity_ms bigint DEFAULT 0)
 */
Datum
lf_renew(PG_FUNCTION_ARGS)
{
	char	   *resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	char	   *identity = lf_check_identity(fcinfo, 1);
	int64		ttl = lf_check_ttl(fcinfo, 2);
	int64		minv = lf_check_min_validity(fcinfo, 3, ttl);
	LfRequest	req;
	LfAnswerOutcome r;
	int64		start;
	LfOutcome	o = {LF_C_RENEW_RENEWED};
	LeaseEntry *e = lf_find_lease(resource, identity);

	lf_request_init(&req);
	start = lf_now_ms();
	r = run_identity_script(&req, resource, identity, e, ttl, minv);
	o.validity = lf_validity_after(ttl, lf_now_ms() - start);

	if (r == LF_ANS_UNAVAILABLE)
		PG_RETURN_DATUM(lf_status_row(fcinfo, &req, LF_C_RENEW_UNAVAILABLE, resource));
	/* unknown: the lease may or may not have been extended; nothing to undo */
	if (r == LF_ANS_UNKNOWN)
		PG_RETURN_DATUM(lf_status_row(fcinfo, &req, LF_C_RENEW_UNKNOWN, resource));

	/*
	 * Lost: a session- or transaction-scoped lease of this session is lost
	 * to it (lf_mark_lease_lost: its writes and its COMMIT fail with
	 * LF010), never "released" (that would switch the commit check off).
	 */
	if (r == LF_ANS_LOST)
	{
		if (e && e->state == STATE_HELD)
			lf_mark_lease_lost(e, "lease_fence.renew() found that the lease key no longer holds this lease's identity");
		PG_RETURN_DATUM(lf_status_row(fcinfo, &req, LF_C_RENEW_LOST, resource));
	}
	if (lf_min_replicas > 0)
	{
		/* a renewal the replicas do not have could be undone by a failover */
		char		err[LF_ERRLEN];
		int			acked = lf_request_replicas(&req, resource, identity, e ? e->generation : 0,
												e ? e->scope : SCOPE_EXPLICIT, ttl, minv, err);

		if (acked < lf_min_replicas)
		{
			report_unreplicated(&req, "renew", resource, acked, err);
			PG_RETURN_DATUM(lf_status_row(fcinfo, &req, LF_C_RENEW_UNREPLICATED, resource));
		}
		o.validity = lf_validity_after(ttl, lf_now_ms() - start);
	}
	if (e)
		lf_lease_validity_set(e, o.validity);
	else
		lf_table_note_renewal(resource, identity, lf_now_ms() + o.validity);	/* another backend's? */
	o.have_validity = true;
	if (o.validity < minv)
	{
		/*
		 * It may expire before the work under it is done: as lost, for a
		 * session- or transaction-scoped lease (an explicit one stays
		 * held; its caller decides).
		 */
		o.status = LF_C_RENEW_INSUFFICIENT_VALIDITY;
		if (e && e->state == STATE_HELD && e->scope != SCOPE_EXPLICIT)
			lf_mark_lease_lost(e, "lease_fence.renew() left it less than min_validity_ms of validity");
	}
	PG_RETURN_DATUM(lf_outcome_row(fcinfo, &req, &o));
}

/* lease_fence.release(resource text, identity text) */
Datum
lf_release(PG_FUNCTION_ARGS)
{
	char	   *resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	char	   *identity = lf_check_identity(fcinfo, 1);
	LfRequest	req;
	LfAnswerOutcome r;
	LeaseEntry *e = lf_find_lease(resource, identity);

	lf_request_init(&req);
	/* a kept-alive lease is renewed no more */
	if (e)
		lf_keepalive_stop(e);

	/*
	 * A transaction-scoped lease released inside its own transaction: that
	 * transaction cannot COMMIT its fenced writes any more (LF010), whatever
	 * the release answers -- also not_held, also after a renew found it
	 * lost, and under either commit_check: the COMMIT must not go through
	 * as if the lease had covered the writes before and after.
	 */
	if (e && e->scope == SCOPE_TRANSACTION &&
		(e->state == STATE_HELD || e->state == STATE_LOST || e->state == STATE_UNKNOWN))
		lf_doom_transaction(e, e->state == STATE_LOST ?
							"a renew found it lost, and lease_fence.release() gave it up inside its transaction" :
							"lease_fence.release() gave it up inside its transaction");
	r = run_identity_script(&req, resource, identity, e, 0, 0);

	if (r == LF_ANS_UNAVAILABLE)
		PG_RETURN_DATUM(lf_status_row(fcinfo, &req, LF_C_RELEASE_UNAVAILABLE, resource));
	if (r == LF_ANS_UNKNOWN)
	{
		/* retried, bounded, at the end of the transaction */
		if (e)
			lf_set_lease_state(e, STATE_UNKNOWN);
		else
			lf_add_lease(resource, identity, 0, SCOPE_EXPLICIT, STATE_UNKNOWN, 0, 0, 0);
		PG_RETURN_DATUM(lf_status_row(fcinfo, &req, LF_C_RELEASE_UNKNOWN, resource));
	}

	if (r == LF_ANS_RELEASED && lf_min_replicas > 0)
	{
		/*
		 * A deletion the replicas do not have could be undone by a
		 * failover, and the lease come back until its TTL: not "released"
		 * but unknown, settled at the end of the transaction.
		 */
		char		err[LF_ERRLEN];
		int			acked = lf_request_replicas(&req, resource, identity, e ? e->generation : 0,
												e ? e->scope : SCOPE_EXPLICIT, 0, 0, err);

		if (acked < lf_min_replicas)
		{
			report_unreplicated(&req, "release", resource, acked, err);
			if (e)
				lf_set_lease_state(e, STATE_UNKNOWN);
			else
				lf_add_lease(resource, identity, 0, SCOPE_EXPLICIT, STATE_UNKNOWN, 0, 0, 0);
			PG_RETURN_DATUM(lf_status_row(fcinfo, &req, LF_C_RELEASE_UNKNOWN, resource));
		}
	}
	if (e)
		lf_set_lease_state(e, STATE_RELEASED);
	lf_update_write_check();	/* a lost lease released: its loss acknowledged */
	PG_RETURN_DATUM(lf_status_row(fcinfo, &req, r == LF_ANS_RELEASED ? LF_C_RELEASE_RELEASED : LF_C_RELEASE_NOT_HELD,
								resource));
}

/*
 * lease_fence.keepalive_state(identity text): 'active' while the worker
 * keeps the lease of that identity alive, 'lost' once it could not, NULL
 * when no kept-alive lease has it.  From any session: an application
 * watches its lease on another connection, so that the watching does not
 * keep the owner busy.
 */
Datum
lf_keepalive_state(PG_FUNCTION_ARGS)
{
	const char *state = lf_keepalive_state_of(lf_check_identity(fcinfo, 0));

	if (state == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

/*
 * lease_fence.holder(resource text): who holds resource in Redis, in one
 * round trip (scripts/holder.lua; two on a connection whose owner check is
 * still to be made, see below): held, identity, ttl_ms (NULL: no
 * expiry), the highest generation granted for it (NULL: none, or its
 * generation key expired), and, when a backend of this cluster holds it
 * (the lease table: lease_fence preloaded), that backend's pid and
 * database.  identity follows all_leases' rule: the holder's role, its
 * members and pg_read_all_stats; a holder outside this cluster, or one the
 * table does not show, only superusers and pg_read_all_stats.  EXECUTE is
 * not PUBLIC's: it sends a request to Redis.
 *
 * Only where key_prefix is this database's, as for acquire: the owner check
 * runs first (once per connection, as for acquire, and claiming the prefix
 * when nobody has), and another database's prefix is an ERROR, so that
 * nothing of that database's leases is shown here.
 */
Datum
lf_holder(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	char	   *resource;
	LfRequest	req;
	LfCall		call = {lf_command_timeout_ms, LF_INTERRUPTIBLE, false};
	LfAnswer	ans;
	Datum		values[6];
	bool		nulls[6];
	LfShownHolder shown = {false};

	resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	lf_request_init(&req);
	(void) lf_key_prefix_is_ours(&req, resource, ERROR);
	lf_script_holder(resource, &call, &ans);
	if (ans.outcome == LF_ANS_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
	if (ans.outcome == LF_ANS_CORRUPT && ans.oversized)
		ereport(ERROR,
				errcode(ERRCODE_DATA_CORRUPTED),
				errmsg("a key of resource \"%s\" holds more than 256 bytes", resource),
				errdetail("lease_fence writes a 32-byte identity into the lease key and at most 19 digits into the generation key; the holder script refuses to read more."),
				errhint("Something other than lease_fence wrote the lease key or the generation key of that resource: delete it."));
	if (ans.outcome == LF_ANS_CORRUPT)
		lf_report_corrupt_generation_key(resource, false);
	if (ans.outcome != LF_ANS_HELD && ans.outcome != LF_ANS_NOT_HELD)
		ereport(ERROR,
				errcode(ERRCODE_CONNECTION_FAILURE),
				errmsg("could not ask Redis who holds resource \"%s\"", resource),
				errdetail("Redis was unavailable or did not answer: %s.", lf_answer_outcome_name(ans.outcome)),
				errdetail_log("%s", ans.err));

	memset(nulls, true, sizeof(nulls));
	values[0] = BoolGetDatum(ans.outcome == LF_ANS_HELD);
	nulls[0] = false;
	if (ans.outcome == LF_ANS_HELD)
	{
		lf_show_holder(resource, ans.value, &shown);
		if (shown.identity_visible)
		{
			values[1] = CStringGetTextDatum(ans.value);
			nulls[1] = false;
		}
		if (ans.has_pttl)
		{
			values[2] = Int64GetDatum(ans.pttl_ms);
			nulls[2] = false;
		}
	}
	if (ans.generation > 0)
	{
		values[3] = Int64GetDatum(ans.generation);
		nulls[3] = false;
	}
	if (shown.in_table)
	{
		values[4] = Int32GetDatum(shown.pid);
		nulls[4] = false;
		if (shown.dbname)
		{
			values[5] = CStringGetTextDatum(shown.dbname);
			nulls[5] = false;
		}
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/*
 * lease_fence.queue(resource text)
 *	  RETURNS SETOF (position, identity, pid, database, waiting_since, ttl_ms)
 *
 * The live waiters of resource's fair queue as Redis holds them, first to
 * last (at most LF_QUEUE_SHOWN; position 1 is the next to be granted), with
 * the pid, database and since when of those that wait in this cluster, and
 * each identity under holder()'s rule.  After the key_prefix owner check,
 * as holder(); errors as holder()'s.
 */
Datum
lf_queue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *resource;
	LfRequest	req;
	LfCall		call = {lf_command_timeout_ms, LF_INTERRUPTIBLE, false};
	LfAnswer	ans;
	int			i;

	resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	InitMaterializedSRF(fcinfo, 0);
	lf_request_init(&req);
	(void) lf_key_prefix_is_ours(&req, resource, ERROR);
	lf_script_queue(resource, &call, &ans);
	if (ans.outcome == LF_ANS_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
	if (ans.outcome == LF_ANS_CORRUPT)
		ereport(ERROR,
				errcode(ERRCODE_DATA_CORRUPTED),
				errmsg("the queue of resource \"%s\" holds a member longer than 64 bytes", resource),
				errdetail("lease_fence queues 32-byte identities; the queue script refuses to read more."),
				errhint("Something other than lease_fence wrote the queue key of that resource: delete it."));
	if (ans.outcome != LF_ANS_WAITERS)
		ereport(ERROR,
				errcode(ERRCODE_CONNECTION_FAILURE),
				errmsg("could not ask Redis who waits for resource \"%s\"", resource),
				errdetail("Redis was unavailable or did not answer: %s.", lf_answer_outcome_name(ans.outcome)),
				errdetail_log("%s", ans.err));

	for (i = 0; i < ans.n_waiters; i++)
	{
		Datum		values[6];
		bool		nulls[6];
		LfShownHolder shown;

		memset(nulls, true, sizeof(nulls));
		lf_show_holder(resource, ans.waiters[i].identity, &shown);
		values[0] = Int32GetDatum(i + 1);
		nulls[0] = false;
		if (shown.identity_visible)
		{
			values[1] = CStringGetTextDatum(ans.waiters[i].identity);
			nulls[1] = false;
		}
		if (shown.in_table)
		{
			values[2] = Int32GetDatum(shown.pid);
			nulls[2] = false;
			if (shown.dbname)
			{
				values[3] = CStringGetTextDatum(shown.dbname);
				nulls[3] = false;
			}
			values[4] = TimestampTzGetDatum(shown.since);
			nulls[4] = false;
		}
		if (ans.waiters[i].pttl_ms >= 0)
		{
			values[5] = Int64GetDatum(ans.waiters[i].pttl_ms);
			nulls[5] = false;
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	if (ans.waiters)
		pfree(ans.waiters);
	return (Datum) 0;
}

/*
 * lease_fence.redis_connections(): this backend's open Redis connections,
 * as postgres_fdw_get_connections() lists its own.  Where it connects is
 * shown only to those who may read the where-to-connect settings
 * (GUC_SUPERUSER_ONLY: superusers and pg_read_all_settings).
 */
Datum
lf_redis_connections_sql(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		may_see = lf_may_see_settings();
	LfConnInfo *conns;
	int			n;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	n = lf_redis_connections(&conns);
	for (i = 0; i < n; i++)
	{
		Datum		values[5];
		bool		nulls[5];

		memset(nulls, 0, sizeof(nulls));
		if (may_see)
			values[0] = CStringGetTextDatum(conns[i].endpoint);
		else
			nulls[0] = true;
		values[1] = CStringGetTextDatum(conns[i].kind);
		values[2] = BoolGetDatum(conns[i].tls);
		values[3] = Int64GetDatum(conns[i].age_ms);
		values[4] = Int64GetDatum((int64) conns[i].requests);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(conns);
	return (Datum) 0;
}

/*
 * lease_fence.redis_disconnect(): close every Redis connection of this
 * backend (postgres_fdw_disconnect_all() for Redis); returns how many were
 * open.  The answers of releases sent after COMMIT are read first, within
 * cleanup_timeout_ms.  No lease is released: the next request connects
 * again.
 */
Datum
lf_redis_disconnect_sql(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(lf_redis_disconnect(lf_now_ms() + lf_cleanup_timeout_ms));
}
