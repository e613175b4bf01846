/*-------------------------------------------------------------------------
 *
 * request.c
 *	  One SQL call of the lease helper (LfRequest): the bounds of its
 *	  requests, why one failed (its reason), and the row it returns.
 *
 * Invariants: a request of a waiting acquire never waits past the wait's
 * hard deadline (LF_WITHIN: its connect neither); a row's reason is the
 * last one said in its own call, shown only with an unavailable, unknown
 * or unreplicated status, and cleared once a row is built.
 *
 * IDENTIFICATION
 *	  src/lease/request.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "lease/internal.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

/* ---------------------------------------------------------------------
 * Arguments: each a clear ERROR (22023) before anything is sent
 * ---------------------------------------------------------------------
 */

int64
lf_check_ttl(FunctionCallInfo fcinfo, int argno)
{
	int64		ttl;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("ttl_ms must not be NULL"));
	ttl = PG_GETARG_INT64(argno);
	if (ttl <= 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("ttl_ms must be positive"),
				errdetail("The ttl_ms given was " INT64_FORMAT ".", ttl));
	/* Redis takes PX up to LLONG_MAX - now; keep well inside that */
	if (ttl > INT64CONST(1000) * 60 * 60 * 24 * 365 * 100)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("ttl_ms is too large"),
				errdetail("The ttl_ms given was " INT64_FORMAT ".", ttl));
	return ttl;
}

int64
lf_check_min_validity(FunctionCallInfo fcinfo, int argno, int64 ttl)
{
	int64		minv;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("min_validity_ms must not be NULL"));
	minv = PG_GETARG_INT64(argno);
	if (minv < 0 || minv > ttl)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("min_validity_ms must be between 0 and ttl_ms"),
				errdetail("min_validity_ms is " INT64_FORMAT ", ttl_ms is " INT64_FORMAT ".", minv, ttl));
	return minv;
}

char *
lf_check_identity(FunctionCallInfo fcinfo, int argno)
{
	char	   *identity;
	size_t		i,
				n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("identity must not be NULL"));
	identity = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	n = strlen(identity);
	for (i = 0; i < n; i++)
		if (!((identity[i] >= '0' && identity[i] <= '9') || (identity[i] >= 'a' && identity[i] <= 'f')))
			break;
	if (n != 32 || i != n)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("identity is not one returned by lease_fence.acquire()"),
				errdetail("An identity is 32 lower-case hexadecimal digits."));
	return identity;
}

LeaseScope
lf_check_scope(FunctionCallInfo fcinfo, int argno)
{
	char	   *s;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("scope must not be NULL"));
	s = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	if (strcmp(s, "explicit") == 0)
		return SCOPE_EXPLICIT;
	if (strcmp(s, "session") == 0)
		return SCOPE_SESSION;
	if (strcmp(s, "transaction") == 0)
		return SCOPE_TRANSACTION;
	ereport(ERROR,
			errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("unknown lease scope \"%s\"", s),
			errhint("The scope is 'explicit', 'session' or 'transaction'."));
	return SCOPE_EXPLICIT;		/* keep compiler quiet */
}

/* ---------------------------------------------------------------------
 * Bounds
 * ---------------------------------------------------------------------
 */

/* A call that is no wait: no hard deadline, no reason yet. */
void
lf_request_init(LfRequest *req)
{
	req->hard_deadline = 0;
	req->reason[0] = '\0';
	req->campaign_row = false;
	req->uncounted = false;
	req->granted = NULL;
}

/* The timeout of one request of an acquire: at most base, never past the hard deadline. */
int
lf_request_timeout(const LfRequest *req, int base)
{
	int64		left;

	if (req->hard_deadline == 0)
		return base;
	left = req->hard_deadline - lf_now_ms();
	return (int) Max(1, Min(left, base));
}

/*
 * The limits of one request of the call: lf_request_timeout(base), and
 * interruptible; in a wait, connects count too (LF_WITHIN).
 */
LfCall
lf_request_call(const LfRequest *req, int base_timeout_ms)
{
	LfCall		call;

	call.timeout_ms = lf_request_timeout(req, base_timeout_ms);
	call.flags = LF_INTERRUPTIBLE | (req->hard_deadline != 0 ? LF_WITHIN : 0);
	call.keepalive_worker = false;
	return call;
}

/* Release e, bounded by cleanup_timeout_ms and, in a wait, by its hard deadline. */
void
lf_request_settle(const LfRequest *req, LeaseEntry *e, bool fresh)
{
	int64		deadline = lf_now_ms() + lf_cleanup_timeout_ms;

	if (req->hard_deadline != 0 && req->hard_deadline < deadline)
		deadline = req->hard_deadline;
	lf_settle_lease_by(e, fresh, deadline);
}

/*
 * After a grant, a renewal or a release, with lease_fence.redis_min_replicas
 * set: how many replicas acknowledged it (WAIT, on the connection that ran
 * it), or -1 when WAIT gave no answer (err says why).  An interrupt records
 * the lease as unknown, to be released at the end of the transaction, and
 * acts.
 */
int
lf_request_replicas(const LfRequest *req, const char *resource, const char *identity,
					int64 generation, LeaseScope scope, int64 ttl, int64 minv, char *err)
{
	bool		interrupted;
	int			acked = lf_wait_replicas(lf_request_timeout(req, lf_replica_timeout_ms + lf_command_timeout_ms),
										 LF_INTERRUPTIBLE, &interrupted, err);

	if (interrupted)
		lf_lease_interrupted(resource, identity, generation, scope, ttl, minv);
	return acked;
}

/* ---------------------------------------------------------------------
 * Reasons and reports
 * ---------------------------------------------------------------------
 */

/* Keep why, as the current user may see it, as the reason of the call's next row. */
void
lf_request_reason(LfRequest *req, const char *why)
{
	char		buf[LF_ERRLEN];

	strlcpy(req->reason, lf_visible_error(why, buf, sizeof(buf)), sizeof(req->reason));
}

/* Say why a request was not applied or its outcome is unknown, and keep it. */
void
lf_request_problem(LfRequest *req, const char *operation, const char *resource, const char *err)
{
	lf_report_redis_problem(operation, resource, err);
	lf_request_reason(req, err);
}

/*
 * The generation key of resource holds no generation (the acquire and the
 * holder script refuse it): XX001, the one text of that condition.
 * oversized: it holds more than the 256 bytes a script reads.
 */
void
lf_report_corrupt_generation_key(const char *resource, bool oversized)
{
	ereport(ERROR,
			errcode(ERRCODE_DATA_CORRUPTED),
			errmsg("the generation key of resource \"%s\" does not hold a generation", resource),
			oversized ?
			errdetail("lease_fence writes a generation there as at most 19 decimal digits; the key holds more than 256 bytes, which the acquire script refuses to read.") :
			errdetail("lease_fence writes a generation there as decimal digits without leading zeros; the key holds something else, which the acquire script compares as greater than every generation."),
			errhint("Something other than lease_fence wrote that key: delete it."));
	pg_unreachable();
}

/* ---------------------------------------------------------------------
 * Outcomes
 *
 * A status is the counter it is counted under (stats.h names both);
 * this table adds what the row says beside it: which function returns it,
 * and the value of its first column (acquired, renewed, released), which
 * is NULL exactly when the outcome is unknown.
 * ---------------------------------------------------------------------
 */
typedef enum LfOperation
{
	OP_ACQUIRE,
	OP_RENEW,
	OP_RELEASE
} LfOperation;

#define LF_NULL (-1)

static const struct
{
	LfOperation operation;
	int8		done;			/* 1 true, 0 false, LF_NULL unknown */
}			statuses[LF_C_RELEASE_UNKNOWN + 1] = {
	[LF_C_ACQUIRE_ACQUIRED] = {OP_ACQUIRE, 1},
	[LF_C_ACQUIRE_BUSY] = {OP_ACQUIRE, 0},
	[LF_C_ACQUIRE_STALE] = {OP_ACQUIRE, 0},
	[LF_C_ACQUIRE_INSUFFICIENT_VALIDITY] = {OP_ACQUIRE, 0},
	[LF_C_ACQUIRE_UNAVAILABLE] = {OP_ACQUIRE, 0},
	[LF_C_ACQUIRE_UNKNOWN] = {OP_ACQUIRE, LF_NULL},
	[LF_C_ACQUIRE_UNREPLICATED] = {OP_ACQUIRE, 0},
	[LF_C_RENEW_RENEWED] = {OP_RENEW, 1},
	[LF_C_RENEW_LOST] = {OP_RENEW, 0},
	[LF_C_RENEW_INSUFFICIENT_VALIDITY] = {OP_RENEW, 0},
	[LF_C_RENEW_UNAVAILABLE] = {OP_RENEW, 0},
	[LF_C_RENEW_UNKNOWN] = {OP_RENEW, LF_NULL},
	[LF_C_RENEW_UNREPLICATED] = {OP_RENEW, 0},
	[LF_C_RELEASE_RELEASED] = {OP_RELEASE, 1},
	[LF_C_RELEASE_NOT_HELD] = {OP_RELEASE, 0},
	[LF_C_RELEASE_UNAVAILABLE] = {OP_RELEASE, 0},
	[LF_C_RELEASE_UNKNOWN] = {OP_RELEASE, LF_NULL},
};

/*
 * Count the outcome and build its row: lease_fence.lease for acquire (for
 * campaign() without acquired and resource, the generation its term),
 * (renewed, status, validity_ms) for renew, (released, status) for release,
 * each with the reason last (from 1.3 on: a function of 1.2 has no such
 * column until ALTER EXTENSION UPDATE, and gets none).
 */
Datum
lf_outcome_row(FunctionCallInfo fcinfo, LfRequest *req, const LfOutcome *o)
{
	TupleDesc	tupdesc;
	Datum		values[7];
	bool		nulls[7];
	int			n = 0;

	Assert(o->status <= LF_C_RELEASE_UNKNOWN);

	/*
	 * The row type, built once per call site and kept with it (fn_extra,
	 * in the memory context of the call's FmgrInfo): building it costs
	 * more than the rest of the row.
	 */
	tupdesc = (TupleDesc) fcinfo->flinfo->fn_extra;
	if (tupdesc == NULL)
	{
		MemoryContext old;

		if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
		tupdesc = BlessTupleDesc(CreateTupleDescCopy(tupdesc));
		MemoryContextSwitchTo(old);
		fcinfo->flinfo->fn_extra = tupdesc;
	}
	if (!req->uncounted)
		lf_count(o->status);

	memset(nulls, 0, sizeof(nulls));
	if (!req->campaign_row)
	{
		values[n] = BoolGetDatum(statuses[o->status].done == 1);
		nulls[n++] = statuses[o->status].done == LF_NULL;
	}
	values[n++] = CStringGetTextDatum(lf_counter_outcome(o->status));
	if (statuses[o->status].operation == OP_ACQUIRE)
	{
		if (!req->campaign_row)
			values[n++] = CStringGetTextDatum(o->resource);
		nulls[n] = o->identity == NULL;
		values[n++] = o->identity ? CStringGetTextDatum(o->identity) : (Datum) 0;
		nulls[n] = !o->have_generation;
		values[n++] = Int64GetDatum(o->generation);
	}
	if (statuses[o->status].operation != OP_RELEASE)
	{
		nulls[n] = !o->have_validity;
		values[n++] = Int64GetDatum(o->validity);
	}
	if (n < tupdesc->natts)
	{
		bool		why = req->reason[0] != '\0' &&
			(statuses[o->status].done == LF_NULL ||
			 o->status == LF_C_ACQUIRE_UNAVAILABLE || o->status == LF_C_RENEW_UNAVAILABLE ||
			 o->status == LF_C_RELEASE_UNAVAILABLE || o->status == LF_C_ACQUIRE_UNREPLICATED ||
			 o->status == LF_C_RENEW_UNREPLICATED);

		nulls[n] = !why;
		values[n++] = why ? CStringGetTextDatum(req->reason) : (Datum) 0;
	}
	req->reason[0] = '\0';
	Assert(n == tupdesc->natts);
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/* An outcome that is only a status (and, for acquire, the resource). */
Datum
lf_status_row(FunctionCallInfo fcinfo, LfRequest *req, LfCounter status, const char *resource)
{
	LfOutcome	o = {status, resource};

	return lf_outcome_row(fcinfo, req, &o);
}

