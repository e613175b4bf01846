/*-------------------------------------------------------------------------
 *
 * election.c
 *	  Fenced leader election and take-over: lease_fence.campaign(),
 *	  lease_fence.leader() and lease_fence.take_over().  (resign() is
 *	  release(): lease.c.)
 *
 * An election is a resource.  Its leader holds the resource's lease; its
 * term is the lease's generation.  campaign() is an acquire that waits
 * (acquire_wait.c) and, when it wins, raises the election's resource fence
 * to the term in the same statement, so that from then on every write of
 * an older term that checks that fence is refused (LF001), before the new
 * leader writes anything.  take_over() raises the fence first (waiting,
 * bounded by timeout_ms, for a transaction that fenced the resource), then
 * takes the lease in Redis whoever holds it, with a generation above every
 * one granted, and marks the lease lost to a holder of this cluster.
 *
 * Invariants: a win or a take-over whose transaction aborts holds nothing
 * (the lease is released at the abort: LeaseEntry.release_at_abort); an
 * unknown outcome is never reported as lost or not taken; take_over()
 * either takes the lease and raises the fence, or raises an ERROR having
 * taken nothing.
 *
 * IDENTIFICATION
 *	  src/lease/election.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/async.h"
#include "fence/fence.h"
#include "funcapi.h"
#include "lease/internal.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(lf_campaign);
PG_FUNCTION_INFO_V1(lf_leader);
PG_FUNCTION_INFO_V1(lf_take_over);

/* the channel a win is announced on (NOTIFY, at COMMIT): "<term> <election>" */
#define LF_LEADER_CHANNEL "lease_fence_leader"

/* a wait "until cancelled": far enough that no deadline arithmetic overflows */
#define LF_WAIT_FOREVER_MS (INT64CONST(1000) * 60 * 60 * 24 * 365 * 100)

/* stale answers a take-over retries (each heals the next generation) */
#define LF_TAKE_OVER_MAX_STALE 3

/* A scope for campaign() and take_over(): explicit or session. */
static LeaseScope
check_lasting_scope(FunctionCallInfo fcinfo, int argno, const char *function)
{
	LeaseScope	scope = lf_check_scope(fcinfo, argno);

	if (scope == SCOPE_TRANSACTION)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("%s takes scope 'session' or 'explicit'", function),
				errdetail("A lease of scope 'transaction' would end with this statement's transaction."));
	return scope;
}

/*
 * A lease this statement won (campaign) or took (take_over) is released if
 * its transaction aborts: the resource fence raised with it is undone then.
 * A subtransaction that rolls back takes the fence with it: COMMIT raises
 * it again (lease_registry.c).
 */
static void
hold_until_commit(LeaseEntry *e)
{
	e->release_at_abort = true;
	e->fenced_in_subxact = GetCurrentTransactionNestLevel() > 1;
}

/*
 * lease_fence.campaign(election text, ttl_ms bigint, wait_ms bigint DEFAULT
 *						NULL, value text DEFAULT NULL, scope text DEFAULT
 *						'session', fair boolean DEFAULT false)
 *	  RETURNS (status, identity, term, validity_ms, reason)
 *
 * Waits until this session leads the election (wait_ms NULL: until
 * cancelled), as acquire() with wait_ms waits: woken by the leader's
 * release, or when its lease runs out.  A win raises the election's
 * resource fence to the term and announces it at COMMIT.
 */
Datum
lf_campaign(PG_FUNCTION_ARGS)
{
	AcquireArgs a;
	LfRequest	req;
	int64		wait_ms = LF_WAIT_FOREVER_MS;
	Datum		row;
	LeaseEntry *e;

	lf_request_init(&req);
	req.campaign_row = true;
	memset(&a, 0, sizeof(a));
	a.resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	a.ttl = lf_check_ttl(fcinfo, 1);
	a.minv = 0;
	if (!PG_ARGISNULL(2))
	{
		wait_ms = PG_GETARG_INT64(2);
		if (wait_ms < 0 || wait_ms > INT_MAX)
			ereport(ERROR,
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("wait_ms must be between 0 and %d, or NULL", INT_MAX),
					errdetail("The wait_ms given was " INT64_FORMAT ".", wait_ms));
	}
	if (!PG_ARGISNULL(3))
	{
		text	   *v = PG_GETARG_TEXT_PP(3);

		if (VARSIZE_ANY_EXHDR(v) > LF_ELECTION_VALUE_MAX)
			ereport(ERROR,
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("value is too long"),
					errdetail("A leader's value is at most %d bytes; this one has %d.",
							  LF_ELECTION_VALUE_MAX, (int) VARSIZE_ANY_EXHDR(v)));
		a.election_value = text_to_cstring(v);
	}
	a.scope = check_lasting_scope(fcinfo, 4, "campaign()");
	a.campaign = true;
	if (PG_NARGS() > 5)
	{
		if (PG_ARGISNULL(5))
			ereport(ERROR,
					errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					errmsg("fair must not be NULL"));
		a.fair = PG_GETARG_BOOL(5);
	}

	row = lf_acquire_waiting(fcinfo, &req, &a, lf_now_ms() + wait_ms);
	e = req.granted;
	if (e == NULL)
		PG_RETURN_DATUM(row);

	/*
	 * Won.  The fence first: an ERROR from here on aborts the transaction,
	 * which releases the lease.
	 */
	hold_until_commit(e);
	(void) lf_fence_resource_at(e->resource, e->generation);
	lf_note_resource_fenced(e->generation, e->resource);	/* bounds an idle transaction */
	{
		char		payload[MAXINT8LEN + LF_MAX_RESOURCE + 2];

		snprintf(payload, sizeof(payload), INT64_FORMAT " %s", e->generation, e->resource);
		Async_Notify(LF_LEADER_CHANNEL, payload);
	}
	lf_count(LF_C_ELECTION_WON);
	PG_RETURN_DATUM(row);
}

/*
 * lease_fence.leader(election text)
 *	  RETURNS (held, term, value, ttl_ms, identity, pid, database)
 *
 * Who leads the election, in one round trip (scripts/leader.lua), after
 * the key_prefix owner check (as holder()).  term: the highest generation
 * granted for it (the leader's, while one leads); identity, pid and
 * database: holder()'s rule.
 */
Datum
lf_leader(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	char	   *election;
	LfRequest	req;
	LfCall		call = {lf_command_timeout_ms, LF_INTERRUPTIBLE, false};
	LfAnswer   *ans;
	Datum		values[7];
	bool		nulls[7];
	LfShownHolder shown = {false};

	election = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	lf_request_init(&req);
	(void) lf_key_prefix_is_ours(&req, election, ERROR);
	ans = palloc(sizeof(LfAnswer));
	lf_script_leader(election, &call, ans);
	if (ans->outcome == LF_ANS_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
	if (ans->outcome == LF_ANS_CORRUPT && ans->oversized)
		ereport(ERROR,
				errcode(ERRCODE_DATA_CORRUPTED),
				errmsg("a key of election \"%s\" holds more than lease_fence writes there", election),
				errdetail("lease_fence writes a 32-byte identity into the lease key, at most 19 digits into the generation key and at most 1,057 bytes into the value key; the leader script refuses to read more."),
				errhint("Something other than lease_fence wrote a key of that election: delete it."));
	if (ans->outcome == LF_ANS_CORRUPT)
		lf_report_corrupt_generation_key(election, false);
	if (ans->outcome != LF_ANS_HELD && ans->outcome != LF_ANS_NOT_HELD)
		ereport(ERROR,
				errcode(ERRCODE_CONNECTION_FAILURE),
				errmsg("could not ask Redis who leads election \"%s\"", election),
				errdetail("Redis was unavailable or did not answer: %s.", lf_answer_outcome_name(ans->outcome)),
				errdetail_log("%s", ans->err));
	if (ans->has_election_value &&
		!pg_verifymbstr(ans->election_value, ans->election_value_len, true))
		ereport(ERROR,
				errcode(ERRCODE_DATA_CORRUPTED),
				errmsg("the value of the leader of election \"%s\" is not valid in this database's encoding", election),
				errhint("Something other than lease_fence wrote the value key of that election: delete it."));

	memset(nulls, true, sizeof(nulls));
	values[0] = BoolGetDatum(ans->outcome == LF_ANS_HELD);
	nulls[0] = false;
	if (ans->generation > 0)
	{
		values[1] = Int64GetDatum(ans->generation);
		nulls[1] = false;
	}
	if (ans->outcome == LF_ANS_HELD)
	{
		if (ans->has_election_value)
		{
			values[2] = PointerGetDatum(cstring_to_text_with_len(ans->election_value,
																 ans->election_value_len));
			nulls[2] = false;
		}
		if (ans->has_pttl)
		{
			values[3] = Int64GetDatum(ans->pttl_ms);
			nulls[3] = false;
		}
		lf_show_holder(election, ans->value, &shown);
		if (shown.identity_visible)
		{
			values[4] = CStringGetTextDatum(ans->value);
			nulls[4] = false;
		}
	}
	if (shown.in_table)
	{
		values[5] = Int32GetDatum(shown.pid);
		nulls[5] = false;
		if (shown.dbname)
		{
			values[6] = CStringGetTextDatum(shown.dbname);
			nulls[6] = false;
		}
	}
	pfree(ans);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/*
 * Raise resource's fence to g, waiting at most timeout_ms for a
 * transaction that fenced it (lock_timeout, for this call only).  Its
 * timeout is take_over()'s clean failure: nothing taken.
 */
static void
raise_fence_within(const char *resource, int64 g, int timeout_ms)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			nest = NewGUCNestLevel();
	char		buf[32];

	snprintf(buf, sizeof(buf), "%d", timeout_ms);
	(void) set_config_option("lock_timeout", buf, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		(void) lf_fence_resource_at(resource, g);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
		{
			FreeErrorData(edata);
			PG_RE_THROW();
		}
		FlushErrorState();
		FreeErrorData(edata);
		lf_count(LF_C_TAKEOVER_TIMEOUT);
		ereport(ERROR,
				errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				errmsg("could not take over resource \"%s\": a transaction that fenced it did not end within %d ms",
					   resource, timeout_ms),
				errdetail("Its holder's transaction (a transaction-scoped lease, or a fence_resource() in an open transaction) is still running; nothing was taken."),
				errhint("Try again, with a longer timeout_ms, or end that transaction (pg_terminate_backend)."));
	}
	PG_END_TRY();
	AtEOXact_GUC(true, nest);
}

/*
 * lease_fence.take_over(resource text, ttl_ms bigint, timeout_ms bigint
 *						 DEFAULT 5000, scope text DEFAULT 'explicit')
 *	  RETURNS lease_fence.lease
 *
 * Grants the caller the lease whoever holds it, under a new generation
 * above every one granted for the resource, and raises the resource's
 * fence to it.  First the fence: a transaction that fenced the resource
 * (the holder's transaction-scoped lease, its fence_resource()) commits
 * before the take-over or the take-over fails after timeout_ms, having
 * taken nothing.  Then Redis (scripts/seize.lua).  Then the holder, if it
 * is a backend of this cluster: its lease is marked lost there, so that
 * its next fenced write under it, and the COMMIT of a transaction that
 * wrote under it, fail with LF010.  Anything but a take-over is an ERROR:
 * 08006 Redis unavailable, 08007 the outcome unknown (what it may have
 * taken is released when the transaction ends).
 */
Datum
lf_take_over(PG_FUNCTION_ARGS)
{
	char	   *resource;
	int64		ttl;
	int64		timeout_ms;
	LeaseScope	scope;
	LfRequest	req;
	char		identity[33];
	int64		g;
	LfAnswer	ans;
	int64		start;
	int64		validity;
	int			stale = 0;
	LeaseEntry *e;
	int			victim = 0;

	resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	ttl = lf_check_ttl(fcinfo, 1);
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("timeout_ms must not be NULL"));
	timeout_ms = PG_GETARG_INT64(2);
	if (timeout_ms < 1 || timeout_ms > INT_MAX)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("timeout_ms must be between 1 and %d", INT_MAX),
				errdetail("The timeout_ms given was " INT64_FORMAT ".", timeout_ms));
	scope = check_lasting_scope(fcinfo, 3, "take_over()");

	lf_request_init(&req);
	(void) lf_key_prefix_is_ours(&req, resource, ERROR);
	lf_new_identity(identity);

	for (;;)
	{
		LfCall		call;

		/* the fence first, bounded: its failure takes nothing */
		g = lf_draw_generation();
		raise_fence_within(resource, g, (int) timeout_ms);

		call = lf_request_call(&req, lf_command_timeout_ms);
		start = lf_now_ms();
		lf_script_seize(resource, identity, ttl, g, lf_gen_key_ttl_s, &call, &ans);
		if (ans.outcome == LF_ANS_SEIZED && ans.generation != g)
		{
			ans.outcome = LF_ANS_UNKNOWN;
			snprintf(ans.err, sizeof(ans.err),
					 "the seize script answered seized with a generation it was not sent");
		}
		if (ans.outcome != LF_ANS_STALE)
			break;
		/* heal: the next generation is above the stored one (bounded) */
		lf_heal_generation(ans.stored, resource);
		if (++stale > LF_TAKE_OVER_MAX_STALE)
			ereport(ERROR,
					errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					errmsg("could not take over resource \"%s\": its generation key stayed above every generation drawn", resource),
					errdetail("The generation key holds " INT64_FORMAT ".", ans.stored));
	}

	switch (ans.outcome)
	{
		case LF_ANS_SEIZED:
			break;
		case LF_ANS_INTERRUPTED:
			lf_lease_interrupted(resource, identity, g, scope, ttl, 0);
			break;
		case LF_ANS_CORRUPT:
			lf_count(LF_C_HEAL_REFUSED);
			lf_report_corrupt_generation_key(resource, ans.oversized);
			break;
		case LF_ANS_UNAVAILABLE:
		case LF_ANS_NOSCRIPT:
		case LF_ANS_SENT_DEFERRED:
			lf_request_problem(&req, "take_over", resource, ans.err);
			ereport(ERROR,
					errcode(ERRCODE_CONNECTION_FAILURE),
					errmsg("could not take over resource \"%s\": Redis is unavailable", resource),
					errdetail("%s; nothing was taken.", req.reason));
			break;
		default:
			/* unknown: recorded, and released when the transaction ends */
			lf_request_problem(&req, "take_over", resource, ans.err);
			(void) lf_add_lease(resource, identity, g, scope, STATE_UNKNOWN, ttl, 0, 0);
			ereport(ERROR,
					errcode(ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN),
					errmsg("the outcome of the take-over of resource \"%s\" is unknown", resource),
					errdetail("%s; whatever it took is released as the transaction ends.", req.reason));
			break;
	}
	validity = lf_validity_after(ttl, lf_now_ms() - start);

	/* ours now; released again if this transaction aborts */
	e = lf_add_lease(resource, identity, g, scope, STATE_HELD, ttl, 0, validity);
	hold_until_commit(e);
	lf_note_resource_fenced(g, resource);	/* its fence, raised above, bounds an idle transaction */
	if (lf_min_replicas > 0)
	{
		char		err[LF_ERRLEN];
		int			acked = lf_request_replicas(&req, resource, identity, g, scope, ttl, 0, err);

		if (acked < lf_min_replicas)
			ereport(ERROR,
					errcode(ERRCODE_CONNECTION_FAILURE),
					errmsg("could not take over resource \"%s\": too few replicas acknowledged it", resource),
					acked >= 0 ?
					errdetail("%d of %d replicas acknowledged it within %d ms; it is released as the transaction ends.",
							  acked, lf_min_replicas, lf_replica_timeout_ms) :
					errdetail("Could not learn whether replicas have it; it is released as the transaction ends."));
		validity = lf_validity_after(ttl, lf_now_ms() - start);
		lf_lease_validity_set(e, validity);
	}

	/* the previous holder, if it is a backend of this cluster: lost to it */
	if (ans.has_value)
		victim = lf_table_take(resource, ans.value);
	if (victim != 0)
		ereport(LOG,
				errmsg("resource \"%s\" taken over by the backend with pid %d from the backend with pid %d",
					   resource, MyProcPid, victim));
	else
		ereport(LOG,
				errmsg("resource \"%s\" taken over by the backend with pid %d from %s",
					   resource, MyProcPid,
					   ans.has_value ? "a holder this cluster's lease table does not show" : "no holder"));
	lf_count(LF_C_TAKEOVER_TAKEN);
	{
		LfOutcome	o = {LF_C_ACQUIRE_ACQUIRED, resource, identity, true, g, true, validity};

		req.uncounted = true;
		PG_RETURN_DATUM(lf_outcome_row(fcinfo, &req, &o));
	}
}
