/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  The SQL functions of the lease helper: acquire, renew and release a
 *	  Redis lease, with three-way outcomes, claim_key_prefix, holder, and
 *	  the backend's Redis connections (redis_connections, redis_disconnect).
 *
 * Each function checks its arguments (an ERROR before anything is sent),
 * runs one script (redis_script.c), turns what became of it into a status,
 * and records the lease in the session's registry (lease_registry.c).
 *
 * An outcome we cannot know ("unknown": a timeout after sending, a lost
 * connection) is never reported as "not acquired".  After an unknown acquire
 * a bounded conditional release with the same identity runs at once on a
 * fresh connection; if it is not confirmed the lease is recorded as
 * "unconfirmed".  An operation interrupted by a cancel is recorded as
 * "unknown" and cleaned up at the end of the transaction.
 *
 * Layer 3, the leases (docs/design.md, "The layers": its files and the order
 * of their calls).
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
#include "lease/lease.h"
#include "miscadmin.h"
#include "redis/redis.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

PG_FUNCTION_INFO_V1(lf_acquire);
PG_FUNCTION_INFO_V1(lf_renew);
PG_FUNCTION_INFO_V1(lf_release);
PG_FUNCTION_INFO_V1(lf_claim_key_prefix);
PG_FUNCTION_INFO_V1(lf_keepalive_state);
PG_FUNCTION_INFO_V1(lf_holder);
PG_FUNCTION_INFO_V1(lf_redis_connections_sql);
PG_FUNCTION_INFO_V1(lf_redis_disconnect_sql);

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

/*
 * Why the last request could not be applied or its outcome is not known (the
 * text of its WARNING, never a secret, endpoints only for those who may see
 * them): the reason column of an unavailable, unknown or unreplicated row.
 * Set by report_problem() and the other reports, used and cleared by the
 * next row built.
 */
static char reason[LF_ERRLEN];

/* Keep why, as the current user may see it, as the reason of the next row. */
static void
set_reason(const char *why)
{
	char		buf[LF_ERRLEN];

	strlcpy(reason, lf_visible_error(why, buf, sizeof(buf)), sizeof(reason));
}

/* Say why a request was not applied or its outcome is unknown, and keep it. */
static void
report_problem(const char *operation, const char *resource, const char *err)
{
	lf_report_redis_problem(operation, resource, err);
	set_reason(err);
}

/*
 * Count the outcome and build its row: lease_fence.lease for acquire,
 * (renewed, status, validity_ms) for renew, (released, status) for release,
 * each with the reason last (from 1.3 on: a function of 1.2 has no such
 * column until ALTER EXTENSION UPDATE, and gets none).
 */
static Datum
outcome_row(FunctionCallInfo fcinfo, const LfOutcome *o)
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
	lf_count(o->status);

	memset(nulls, 0, sizeof(nulls));
	values[n] = BoolGetDatum(statuses[o->status].done == 1);
	nulls[n++] = statuses[o->status].done == LF_NULL;
	values[n++] = CStringGetTextDatum(lf_counter_outcome(o->status));
	if (statuses[o->status].operation == OP_ACQUIRE)
	{
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
		bool		why = reason[0] != '\0' &&
			(statuses[o->status].done == LF_NULL ||
			 o->status == LF_C_ACQUIRE_UNAVAILABLE || o->status == LF_C_RENEW_UNAVAILABLE ||
			 o->status == LF_C_RELEASE_UNAVAILABLE || o->status == LF_C_ACQUIRE_UNREPLICATED ||
			 o->status == LF_C_RENEW_UNREPLICATED);

		nulls[n] = !why;
		values[n++] = why ? CStringGetTextDatum(reason) : (Datum) 0;
	}
	reason[0] = '\0';
	Assert(n == tupdesc->natts);
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/* An outcome that is only a status (and, for acquire, the resource). */
static Datum
status_only(FunctionCallInfo fcinfo, LfCounter status, const char *resource)
{
	LfOutcome	o = {status, resource};

	return outcome_row(fcinfo, &o);
}

/* ---------------------------------------------------------------------
 * Input checks
 * ---------------------------------------------------------------------
 */


static int64
check_ttl(FunctionCallInfo fcinfo, int argno)
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

static int64
check_min_validity(FunctionCallInfo fcinfo, int argno, int64 ttl)
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

static char *
check_identity(FunctionCallInfo fcinfo, int argno)
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

static LeaseScope
check_scope(FunctionCallInfo fcinfo, int argno)
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
 * Key prefix ownership
 *
 * Two databases that share one key_prefix on one Redis would drag each
 * other's generations up through "stale" without either being told.  So
 * the prefix has an owner, the key <key_prefix>owner (no brace follows the
 * prefix, so it is never a lease key <key_prefix>{...} or a generation key
 * <key_prefix>{...}:gen), holding "<system identifier>:<database OID>:<name>".
 * Both numbers survive a physical copy (base backup, promoted standby); a
 * dump restored into another cluster is a new owner and must take the
 * prefix over with lease_fence.claim_key_prefix().
 *
 * The check costs one round trip per connection, not per acquire: its
 * answer is kept until the connection is replaced or key_prefix changes.
 * A vanished claim key (Redis restarted without persistence) is claimed
 * again by the first backend that opens a new connection.
 * ---------------------------------------------------------------------
 */

/*
 * While a waiting acquire runs: the latest moment any of its requests may
 * still wait for Redis, wait_ms plus one command_timeout_ms after it
 * started (a request started before the deadline ends by then, connects
 * and cleanups included); 0 otherwise.
 */
static int64 wait_hard_deadline = 0;

/* The timeout of one request of an acquire: at most base, never past the hard deadline. */
static int
request_timeout(int base)
{
	int64		left;

	if (wait_hard_deadline == 0)
		return base;
	left = wait_hard_deadline - lf_now_ms();
	return (int) Max(1, Min(left, base));
}

/* The flags of one request of an acquire: in a wait, connects count too. */
static int
request_flags(void)
{
	return LF_INTERRUPTIBLE | (wait_hard_deadline != 0 ? LF_WITHIN : 0);
}

/* Release e, bounded by cleanup_timeout_ms and, in a wait, by its hard deadline. */
static void
settle(LeaseEntry *e, bool fresh)
{
	int64		deadline = lf_now_ms() + lf_cleanup_timeout_ms;

	if (wait_hard_deadline != 0 && wait_hard_deadline < deadline)
		deadline = wait_hard_deadline;
	lf_settle_lease_by(e, fresh, deadline);
}

/* the connection (lf_redis_connection_serial) and prefix last found ours */
static uint64 claim_checked_serial = 0;
static char *claim_checked_prefix = NULL;

/*
 * This database as the owner of a prefix: id is what is compared (system
 * identifier and database OID), value what is stored (id and name).
 */
static void
owner_identity(char *id, size_t idlen, char **value)
{
	char	   *dbname = get_database_name(MyDatabaseId);

	snprintf(id, idlen, UINT64_FORMAT ":%u", GetSystemIdentifier(), MyDatabaseId);
	*value = psprintf("%s:%s", id, dbname ? dbname : "");
}

/* A stored claim value, for a message: "database "x" (OID n) of system s". */
static char *
describe_owner(const char *value)
{
	uint64		sysid;
	unsigned int oid;
	int			n = 0;

	if (sscanf(value, UINT64_FORMAT ":%u:%n", &sysid, &oid, &n) == 2 && n > 0)
		return psprintf("database \"%s\" (OID %u) of the cluster with system identifier " UINT64_FORMAT,
						value + n, oid, sysid);
	return psprintf("\"%s\"", value);
}

/*
 * Remember that on the current connection key_prefix is ours (the
 * connection to the server of the owner key: on a Redis Cluster, a node).
 */
static void
remember_claim(const char *owner_key)
{
	claim_checked_serial = lf_redis_connection_serial(owner_key);
	if (claim_checked_prefix)
		pfree(claim_checked_prefix);
	claim_checked_prefix = MemoryContextStrdup(TopMemoryContext,
											   lf_key_prefix ? lf_key_prefix : "");
}

/*
 * Before an acquire or a holder(): is key_prefix on this Redis ours?
 * Claims it when nobody has.  Another database's prefix, or a check that
 * could not be made, is reported at elevel: for an acquire a WARNING, after
 * which false is returned (the acquire is then "unavailable"); for holder()
 * an ERROR, so that no other database's lease is ever shown.  Runs before
 * the generation is drawn, so a refused acquire moves nothing.  An
 * interrupt is raised at once: nothing of the lease was sent.  resource
 * names the request in the messages.
 */
static bool
key_prefix_is_ours(const char *resource, int elevel)
{
	char		id[64];
	char	   *value;
	char	   *key;
	const char *keys[1];
	const char *args[2];
	LfAnswer	ans;
	uint64		serial;

	/*
	 * The answer holds for the connection it was given on.  A connection
	 * Redis has closed is replaced here, before the acquire, so that its
	 * successor is checked too.
	 */
	key = lf_owner_key();
	serial = lf_redis_connection_serial(key);
	if (claim_checked_prefix != NULL &&
		strcmp(claim_checked_prefix, lf_key_prefix ? lf_key_prefix : "") == 0 &&
		serial != 0 && claim_checked_serial == serial)
		return true;

	owner_identity(id, sizeof(id), &value);
	keys[0] = key;
	args[0] = id;
	args[1] = value;
	lf_run_script(LF_SCRIPT_CLAIM, 1, keys, 2, args, request_timeout(lf_command_timeout_ms),
				  request_flags(), &ans);
	if (ans.outcome == LF_ANS_INTERRUPTED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR,
				errcode(ERRCODE_QUERY_CANCELED),
				errmsg("lease_fence: Redis request interrupted"));
	}
	if (ans.outcome != LF_ANS_CLAIMED && ans.outcome != LF_ANS_OURS &&
		ans.outcome != LF_ANS_OTHERS)
	{
		/*
		 * Not one byte of the lease was sent: definitely not acquired,
		 * whatever became of the check (unavailable or unknown).  When the
		 * check itself reached Redis, say that it was the check that failed
		 * (a timeout would otherwise read like an unknown lease).
		 */
		char		msg[LF_ERRLEN + 64];

		if (ans.outcome == LF_ANS_UNAVAILABLE && !ans.replied)
			snprintf(msg, sizeof(msg), "%s", ans.err);
		else
			snprintf(msg, sizeof(msg), "checking the owner of key_prefix: %s", ans.err);
		if (elevel >= ERROR)
			ereport(ERROR,
					errcode(ERRCODE_CONNECTION_FAILURE),
					errmsg("lease_fence: could not ask Redis who holds resource \"%s\"", resource),
					errdetail("Redis was unavailable or did not answer: %s.", lf_answer_outcome_name(ans.outcome)),
					errdetail_log("%s", msg));
		report_problem("acquire", resource, msg);
		return false;
	}

	if (ans.outcome == LF_ANS_OTHERS)
	{
		const char *owner = ans.value;
		char		why[LF_ERRLEN];

		/*
		 * The reason says what happened; the other database's name, OID and
		 * system identifier only superusers see (pg_control_system() is
		 * theirs; the server log has them), and the key_prefix (a
		 * where-to-connect setting) only those who may read it.  holder()
		 * says the same as an ERROR: it must not show that database's
		 * leases, as acquire must not take them.
		 */
		char	   *full = psprintf("The key \"%s\" names %s; this is %s. Two databases sharing a key_prefix would push each other's generations up.",
									key, describe_owner(owner), describe_owner(value));

		if (lf_may_see_settings())
			snprintf(why, sizeof(why), "key_prefix \"%s\" on this Redis belongs to another database",
					 lf_key_prefix ? lf_key_prefix : "");
		else
			snprintf(why, sizeof(why), "key_prefix on this Redis belongs to another database");
		if (elevel < ERROR)
			strlcpy(reason, why, sizeof(reason));
		ereport(elevel,
				elevel >= ERROR ? errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE) : 0,
				errmsg("lease_fence: %s", why),
				superuser() ? errdetail("%s", full) :
				errdetail("The key_prefix is claimed by another database (the server log says which). Two databases sharing a key_prefix would push each other's generations up."),
				errdetail_log("%s", full),
				errhint("Give each database its own lease_fence.key_prefix. If this database replaces that one (a dump restored into a new cluster), a superuser takes the prefix over with SELECT lease_fence.claim_key_prefix()."));
		return false;
	}
	if (ans.outcome == LF_ANS_CLAIMED)
		ereport(LOG,
				errmsg("lease_fence: key_prefix \"%s\" claimed for %s",
					   lf_key_prefix ? lf_key_prefix : "", describe_owner(value)));
	remember_claim(key);
	return true;
}

/*
 * lease_fence.claim_key_prefix(): make key_prefix on this Redis this
 * database's, whoever had it.  Superusers only (EXECUTE is also revoked from
 * PUBLIC): taking a prefix away from a live database reopens the very
 * problem the owner check exists for.  Returns the previous claim, or NULL.
 */
Datum
lf_claim_key_prefix(PG_FUNCTION_ARGS)
{
	char		id[64];
	char	   *value;
	char	   *key;
	const char *keys[1];
	const char *args[1];
	LfAnswer	ans;
	char	   *old = NULL;

	if (!superuser())
		ereport(ERROR,
				errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				errmsg("permission denied to take over a lease_fence key_prefix"),
				errdetail("Only superusers may call lease_fence.claim_key_prefix()."));

	owner_identity(id, sizeof(id), &value);
	key = lf_owner_key();
	keys[0] = key;
	args[0] = value;
	lf_run_script(LF_SCRIPT_TAKEOVER, 1, keys, 1, args, lf_command_timeout_ms,
				  LF_INTERRUPTIBLE, &ans);
	if (ans.outcome == LF_ANS_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
	if (ans.outcome == LF_ANS_TAKEN_OVER && ans.has_value)
		old = pstrdup(ans.value);
	if (ans.outcome != LF_ANS_TAKEN_OVER)
		ereport(ERROR,
				errcode(ERRCODE_CONNECTION_FAILURE),
				errmsg("could not take over lease_fence.key_prefix \"%s\"",
					   lf_key_prefix ? lf_key_prefix : ""),
				errdetail("%s", ans.err),
				errhint("The key \"%s\" may or may not have changed; running the function again is safe.", key));

	ereport(LOG,
			errmsg("lease_fence: key_prefix \"%s\" taken over by %s",
				   lf_key_prefix ? lf_key_prefix : "", describe_owner(value)),
			old ? errdetail("It belonged to %s.", describe_owner(old))
			: errdetail("It had no owner."));
	remember_claim(key);
	if (old == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(old));
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ---------------------------------------------------------------------
 */

/*
 * A new lease identity: 128 bits from the strong random source, as 32
 * lower-case hex digits.  The bits are drawn 32 kB at a time, because each
 * call into the random source first asks OpenSSL whether it is seeded
 * (RAND_status), which costs as much as generating tens of kB.  Every byte
 * is handed out once: each identity takes the next 16 bytes, and the bytes
 * are wiped as they go.  The buffer belongs to the process
 * that filled it: a child of a fork (a background worker, say) would share
 * its parent's unread bytes, so a process that did not fill it draws anew
 * (MyProcPid: every PostgreSQL process sets it after its fork, and reading
 * it costs no system call, unlike getpid()).
 */
#define LF_RANDOM_BLOCK 32768

static void
new_identity(char *identity)
{
	static uint8 block[LF_RANDOM_BLOCK];
	static size_t used = LF_RANDOM_BLOCK;
	static int	filled_by = 0;
	static const char hex[] = "0123456789abcdef";
	int			i;

	if (used + 16 > LF_RANDOM_BLOCK || filled_by != MyProcPid)
	{
		if (!pg_strong_random(block, sizeof(block)))
			ereport(ERROR,
					errcode(ERRCODE_INTERNAL_ERROR),
					errmsg("could not generate a random lease identity"));
		used = 0;
		filled_by = MyProcPid;
	}
	for (i = 0; i < 16; i++)
	{
		identity[2 * i] = hex[block[used + i] >> 4];
		identity[2 * i + 1] = hex[block[used + i] & 0x0f];
	}
	identity[32] = '\0';
	memset(block + used, 0, 16);
	used += 16;
}

/*
 * An acquire whose outcome is unknown: recorded, and released at once,
 * bounded, on a fresh connection (the one that lost the reply may still
 * deliver it late).
 */
static Datum
acquire_unknown(FunctionCallInfo fcinfo, const char *resource, const char *identity,
				int64 generation, LeaseScope scope, int64 ttl, int64 minv, const char *err,
				bool *released)
{
	LfOutcome	o = {LF_C_ACQUIRE_UNKNOWN, resource, identity, true, generation};
	LeaseEntry *e;

	report_problem("acquire", resource, err);
	e = lf_add_lease(resource, identity, generation, scope, STATE_UNKNOWN, ttl, minv, 0);
	settle(e, true);
	*released = e->state == STATE_RELEASED;
	return outcome_row(fcinfo, &o);
}

/*
 * After a grant, a renewal or a release, with lease_fence.redis_min_replicas
 * set: how many replicas acknowledged it (WAIT, on the connection that ran
 * it), or -1 when WAIT gave no answer (err says why).  An interrupt records
 * the lease as unknown, to be released at the end of the transaction, and
 * acts.
 */
/* Say that fewer replicas than redis_min_replicas have a write of operation. */
static void
report_unreplicated(const char *operation, const char *resource, int acked, const char *err)
{
	if (acked >= 0)
	{
		snprintf(reason, sizeof(reason), "%d of %d replicas acknowledged it within %d ms",
				 acked, lf_min_replicas, lf_replica_timeout_ms);
		ereport(WARNING,
				errmsg("lease_fence: %s of resource \"%s\": %s", operation, resource, reason));
	}
	else
	{
		char		why[LF_ERRLEN + 64];

		snprintf(why, sizeof(why), "could not learn whether replicas have it (%s)", err);
		set_reason(why);
		ereport(WARNING,
				errmsg("lease_fence: %s of resource \"%s\": %s", operation, resource, reason),
				errdetail_log("The full text: %s", why));
	}
}

static int
replicas_acknowledged(const char *resource, const char *identity, int64 generation,
					  LeaseScope scope, int64 ttl, int64 minv, char *err)
{
	bool		interrupted;
	int			acked = lf_wait_replicas(request_timeout(lf_replica_timeout_ms + lf_command_timeout_ms),
										 LF_INTERRUPTIBLE, &interrupted, err);

	if (interrupted)
		lf_lease_interrupted(resource, identity, generation, scope, ttl, minv);
	return acked;
}

/*
 * A grant fewer replicas than lease_fence.redis_min_replicas acknowledged:
 * a failover could lose it, so it is never reported as held.  It is
 * released at once (on a fresh connection when WAIT lost its own): status
 * unreplicated when that is confirmed, unknown when it is not.
 */
static Datum
acquire_unreplicated(FunctionCallInfo fcinfo, const char *resource, const char *identity,
					 int64 generation, LeaseScope scope, int64 ttl, int64 minv,
					 int acked, const char *err, bool *released)
{
	LeaseEntry *e;
	char		why[LF_ERRLEN];

	if (acked >= 0)
		snprintf(why, sizeof(why), "%d of %d replicas acknowledged the grant within %d ms",
				 acked, lf_min_replicas, lf_replica_timeout_ms);
	else
		snprintf(why, sizeof(why), "could not learn whether replicas have the grant (%s)", err);
	{
		char		buf[LF_ERRLEN];
		const char *shown = lf_visible_error(why, buf, sizeof(buf));

		ereport(WARNING,
				errmsg("lease_fence: acquire of resource \"%s\": %s; releasing it", resource, shown),
				shown != why ? errdetail_log("The full text: %s", why) : 0);
	}
	e = lf_add_lease(resource, identity, generation, scope, STATE_HELD, ttl, minv, 0);
	settle(e, acked < 0);
	/* (the release's own WARNING, if any, comes first; the row says why it was needed) */
	set_reason(why);
	*released = e->state == STATE_RELEASED;
	if (e->state == STATE_RELEASED)
		return status_only(fcinfo, LF_C_ACQUIRE_UNREPLICATED, resource);
	{
		LfOutcome	o = {LF_C_ACQUIRE_UNKNOWN, resource, identity, true, generation};

		return outcome_row(fcinfo, &o);
	}
}

/* what an acquire was asked for */
typedef struct AcquireArgs
{
	char	   *resource;
	int64		ttl;
	int64		minv;
	LeaseScope	scope;
	bool		keepalive;
} AcquireArgs;

/*
 * One attempt to acquire.  Returns its status; for every status but busy and
 * stale *row is the call's result (counted).  Busy: *pttl is what the
 * holder's lease has left (-1 if not known); stale: the next generation
 * drawn is above the stored one.  *retry: an outcome that certainly holds
 * nothing now, which a waiting acquire tries again (unavailable,
 * unreplicated, and unknown once its release was confirmed).
 *
 * The generation: *spare, when it is not 0, else a fresh one.  A busy answer
 * hands the attempt's generation back in *spare for the next attempt of the
 * same wait; every other answer clears it.  A busy answer means the script
 * stopped at the lease key and stored nothing, so the generation was granted
 * to nobody, and the script checks it against the highest generation granted
 * for the resource when it is tried again, exactly as for an acquirer that
 * drew it and took that long to reach Redis: lease order and generation order
 * still agree.  So a wait draws one generation, not one per wake-up.
 */
static LfCounter
acquire_once(FunctionCallInfo fcinfo, const AcquireArgs *a, int64 *spare, int64 *pttl,
			 Datum *row, bool *retry)
{
	const char *resource = a->resource;
	int64		ttl = a->ttl;
	int64		minv = a->minv;
	LeaseScope	scope = a->scope;
	char		identity[33];
	int64		generation;
	char		genbuf[32];
	char		ttlbuf[32];
	char		genttl[32];
	const char *keys[2];
	const char *args[4];
	LfAnswer	ans;
	char		err[LF_ERRLEN];
	int64		start;
	int64		validity;
	LeaseEntry *e;

	new_identity(identity);
	*retry = false;

	/* once per connection: is key_prefix ours?  (before drawing anything) */
	if (!key_prefix_is_ours(resource, WARNING))
	{
		*row = status_only(fcinfo, LF_C_ACQUIRE_UNAVAILABLE, resource);
		*retry = true;
		return LF_C_ACQUIRE_UNAVAILABLE;
	}

	/* the generation: durable before it leaves the backend */
	generation = *spare != 0 ? *spare : lf_draw_generation();
	*spare = 0;
	/* (pg_lltoa: printf-style formatting cost more than the rest of the args) */
	pg_lltoa(generation, genbuf);
	pg_lltoa(ttl, ttlbuf);
	pg_ltoa(lf_gen_key_ttl_s, genttl);

	keys[0] = lf_lease_key(resource);
	keys[1] = lf_generation_key(resource);
	args[0] = identity;
	args[1] = ttlbuf;
	args[2] = genbuf;
	args[3] = genttl;

	/* validity is measured from before the request is sent */
	start = lf_now_ms();
	lf_run_script(LF_SCRIPT_ACQUIRE, 2, keys, 4, args, request_timeout(lf_command_timeout_ms),
				  request_flags(), &ans);
	validity = lf_validity_after(ttl, lf_now_ms() - start);

	/* the script echoes the generation it was sent: any other is no grant */
	if (ans.outcome == LF_ANS_ACQUIRED && ans.generation != generation)
	{
		ans.outcome = LF_ANS_UNKNOWN;
		snprintf(ans.err, sizeof(ans.err),
				 "the acquire script answered acquired with a generation it was not sent");
	}

	switch (ans.outcome)
	{
		case LF_ANS_ACQUIRED:
			break;
		case LF_ANS_INTERRUPTED:
			lf_lease_interrupted(resource, identity, generation, scope, ttl, minv);
			break;
		case LF_ANS_UNAVAILABLE:
		case LF_ANS_NOSCRIPT:	/* (lf_run_script never answers it) */
		case LF_ANS_SENT_DEFERRED:
			report_problem("acquire", resource, ans.err);
			*row = status_only(fcinfo, LF_C_ACQUIRE_UNAVAILABLE, resource);
			*retry = true;
			return LF_C_ACQUIRE_UNAVAILABLE;
		case LF_ANS_STALE:
			/* heal: every later generation is above the stored one (bounded) */
			lf_heal_generation(ans.stored, resource);
			return LF_C_ACQUIRE_STALE;
		case LF_ANS_CORRUPT:
			lf_count(LF_C_HEAL_REFUSED);
			ereport(ERROR,
					errcode(ERRCODE_DATA_CORRUPTED),
					errmsg("lease_fence: the generation key of resource \"%s\" does not hold a generation",
						   resource),
					ans.oversized ?
					errdetail("lease_fence writes a generation there as at most 19 decimal digits; the key holds more than 256 bytes, which the acquire script refuses to read.") :
					errdetail("lease_fence writes a generation there as decimal digits without leading zeros; the key holds something else, which the acquire script compares as greater than every generation."),
					errhint("Something other than lease_fence wrote that key: delete it."));
			break;
		case LF_ANS_BUSY:
			*pttl = ans.has_pttl ? ans.pttl_ms : -1;
			*spare = generation;
			return LF_C_ACQUIRE_BUSY;
		default:
			/* unknown, and every answer the acquire script never gives */
			*row = acquire_unknown(fcinfo, resource, identity, generation, scope,
								   ttl, minv, ans.err, retry);
			return LF_C_ACQUIRE_UNKNOWN;
	}

	if (lf_min_replicas > 0)
	{
		int			acked = replicas_acknowledged(resource, identity, generation, scope,
												  ttl, minv, err);

		if (acked < lf_min_replicas)
		{
			*row = acquire_unreplicated(fcinfo, resource, identity, generation,
										scope, ttl, minv, acked, err, retry);
			return LF_C_ACQUIRE_UNREPLICATED;
		}
		/* the lease is held from when it was asked for: WAIT took some of it */
		validity = lf_validity_after(ttl, lf_now_ms() - start);
	}

	e = lf_add_lease(resource, identity, generation, scope, STATE_HELD, ttl, minv, validity);
	if (validity < minv)
	{
		LfOutcome	o = {LF_C_ACQUIRE_INSUFFICIENT_VALIDITY, resource, NULL, false, 0, true, validity};

		settle(e, false);
		*row = outcome_row(fcinfo, &o);
		return LF_C_ACQUIRE_INSUFFICIENT_VALIDITY;
	}
	if (a->keepalive && lf_keepalive_start(e, start, validity))
		lf_update_write_check();	/* its fenced writes are checked from now on */
	else if (a->keepalive)
	{
		settle(e, false);
		ereport(ERROR,
				errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				errmsg("too many kept-alive leases"),
				errdetail("At most %d leases can be kept alive at once; the lease on resource \"%s\" was released again.",
						  LF_KEEPALIVE_SLOTS, e->resource));
	}
	if (scope == SCOPE_TRANSACTION)
		lf_hold_in_transaction(e);

	{
		LfOutcome	o = {LF_C_ACQUIRE_ACQUIRED, resource, identity, true, generation, true, validity};

		*row = outcome_row(fcinfo, &o);
	}
	return LF_C_ACQUIRE_ACQUIRED;
}

/* a waiter that could not subscribe polls: 10 ms, doubling, to this */
#define LF_WAIT_POLL_MAX_MS 250
/* a subscribed waiter looks again at least this often (a lost message) */
#define LF_WAIT_RECHECK_MS 1000
/* stale answers retried in one wait (each heals the next generation) */
#define LF_WAIT_MAX_STALE 3

/* ms in [ms/2, ms]: waiters that polled together do not stay in step */
static int64
jittered(int64 ms)
{
	uint32		r;

	if (ms < 2 || !pg_strong_random(&r, sizeof(r)))
		return ms;
	return ms / 2 + (int64) (r % (uint32) (ms / 2 + 1));
}

/*
 * Acquire, waiting until deadline while the lease is busy.  The wait is
 * woken by the release script's message on the resource's channel (a
 * subscription made after the first busy answer, and followed by another
 * attempt, so a release in between is not missed), by the holder's lease
 * running out (the busy answer's PTTL), and, without a subscription, by a
 * jittered backoff.  The attempts of one wait share a generation until one
 * is not busy (see acquire_once).
 */
static Datum
acquire_waiting(FunctionCallInfo fcinfo, const AcquireArgs *a, int64 deadline)
{
	bool		subscribed = false;
	bool		no_subscription = false;
	bool		waited = false;
	int			stale = 0;
	int64		poll = 10;
	int64		spare = 0;
	char	   *channel = lf_release_channel(a->resource);

	for (;;)
	{
		int64		pttl = -1;
		Datum		row = (Datum) 0;
		bool		retry = false;
		LfCounter	status = acquire_once(fcinfo, a, &spare, &pttl, &row, &retry);
		int64		now;
		int64		wake;
		int			w;

		if (status != LF_C_ACQUIRE_BUSY && status != LF_C_ACQUIRE_STALE && !retry)
			return row;
		now = lf_now_ms();
		if (retry)
		{
			/*
			 * Nothing held, but no answer either (Redis unreachable, a
			 * failover under way, an unknown outcome released again): not
			 * yet.  Try again after the backoff of an unsubscribed wait;
			 * at the deadline, this attempt's outcome is the answer.
			 */
			int			rc;

			if (now >= deadline)
				return row;
			wake = Min(deadline, now + jittered(poll));
			poll = Min(poll * 2, LF_WAIT_POLL_MAX_MS);
			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						   (long) Max(wake - now, 1), lf_wait_event());
			if (rc & WL_LATCH_SET)
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		if (now >= deadline || (status == LF_C_ACQUIRE_STALE && ++stale > LF_WAIT_MAX_STALE))
		{
			if (waited && status == LF_C_ACQUIRE_BUSY)
				lf_count(LF_C_WAIT_DEADLINE);
			return status_only(fcinfo, status, a->resource);
		}
		if (status == LF_C_ACQUIRE_STALE)
			continue;			/* healed: the next generation is above */
		if (!waited)
		{
			lf_count(LF_C_WAIT_WAITED);
			waited = true;
		}
		if (!subscribed && !no_subscription)
		{
			char		err[LF_ERRLEN];

			if (lf_redis_subscribe(channel, request_timeout(lf_connect_timeout_ms), err))
				subscribed = true;
			else
			{
				char		buf[LF_ERRLEN];

				no_subscription = true;
				ereport(DEBUG1,
						errmsg("lease_fence: waiting for resource \"%s\" without a subscription: %s",
							   a->resource, lf_visible_error(err, buf, sizeof(buf))));
			}
			continue;			/* a release before the subscription was missed: ask again */
		}

		/* until the holder's lease runs out, a release, or the deadline */
		wake = deadline;
		if (pttl >= 0)
			wake = Min(wake, now + pttl + 1);
		if (subscribed)
			wake = Min(wake, now + LF_WAIT_RECHECK_MS);
		else
		{
			wake = Min(wake, now + jittered(poll));
			poll = Min(poll * 2, LF_WAIT_POLL_MAX_MS);
		}
		if (!subscribed)
		{
			int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
									   (long) Max(wake - now, 1), lf_wait_event());

			if (rc & WL_LATCH_SET)
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		w = lf_subscriber_wait(wake);
		if (w == 1)
			lf_count(LF_C_WAIT_WOKEN);
		else if (w == -1)
		{
			CHECK_FOR_INTERRUPTS();
			ereport(ERROR,
					errcode(ERRCODE_QUERY_CANCELED),
					errmsg("lease_fence: wait for resource \"%s\" interrupted", a->resource));
		}
		else if (w == -2)
		{
			/*
			 * The subscription is gone: poll from here on.  Its server may
			 * be going down (killed, failing over) while the connection the
			 * next attempt would use does not show it yet: drop that one
			 * too, so that the attempt connects anew ("unavailable", tried
			 * again) instead of sending into a dying connection (an
			 * unknown outcome), and wait a poll interval first.
			 */
			int			rc;

			subscribed = false;
			no_subscription = true;
			(void) lf_redis_disconnect_all();
			now = lf_now_ms();
			wake = Min(deadline, now + jittered(poll));
			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						   (long) Max(wake - now, 1), lf_wait_event());
			if (rc & WL_LATCH_SET)
				ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
}

/* acquire_waiting, and the wait's subscription ends with it, however it ends */
static Datum
acquire_waiting_closing(FunctionCallInfo fcinfo, const AcquireArgs *a, int64 deadline)
{
	volatile Datum result = (Datum) 0;

	wait_hard_deadline = deadline + lf_command_timeout_ms;
	PG_TRY();
	{
		result = acquire_waiting(fcinfo, a, deadline);
	}
	PG_CATCH();
	{
		wait_hard_deadline = 0;
		lf_subscriber_close();
		PG_RE_THROW();
	}
	PG_END_TRY();
	wait_hard_deadline = 0;
	lf_subscriber_close();
	return result;
}

/*
 * lease_fence.acquire(resource text, ttl_ms bigint, min_validity_ms bigint
 *					   DEFAULT 0, scope text DEFAULT 'explicit', wait_ms bigint
 *					   DEFAULT 0, keepalive boolean DEFAULT false)
 *
 * (Called with four arguments by the 1.1 definition, until ALTER EXTENSION
 * UPDATE.)
 */
Datum
lf_acquire(PG_FUNCTION_ARGS)
{
	AcquireArgs a;
	int64		wait_ms = 0;
	int64		pttl;

	reason[0] = '\0';
	a.resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	a.ttl = check_ttl(fcinfo, 1);
	a.scope = check_scope(fcinfo, 3);
	a.keepalive = false;
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
	/*
	 * A kept-alive lease never outlives keepalive_max_ms, the first grant
	 * included: a release at that point that fails leaves a key that
	 * expires by then.
	 */
	if (a.keepalive && a.ttl > lf_keepalive_max_ms)
		a.ttl = lf_keepalive_max_ms;
	a.minv = check_min_validity(fcinfo, 2, a.ttl);

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
		LfCounter	status = acquire_once(fcinfo, &a, &spare, &pttl, &row, &retry);

		if (status == LF_C_ACQUIRE_BUSY || status == LF_C_ACQUIRE_STALE)
			row = status_only(fcinfo, status, a.resource);
		PG_RETURN_DATUM(row);
	}

	PG_RETURN_DATUM(acquire_waiting_closing(fcinfo, &a, lf_now_ms() + wait_ms));
}

/*
 * Run a compare-identity script (renew, release) on the lease key of
 * resource.  What both share is handled here: an interrupt (recorded as
 * unknown, then raised), and the WARNING that says why a request was not
 * applied or its outcome unknown.  Returns the answer's outcome: the
 * script's own two (renewed or lost, released or not held), unavailable,
 * or unknown (every other reply among them).
 */
static LfAnswerOutcome
run_identity_script(LfScript script, const char *operation, const char *resource,
					const char *identity, const char *extra_arg, LeaseEntry *e,
					int64 ttl, int64 minv)
{
	const char *keys[1];
	const char *args[2];
	int			nargs = 0;
	LfAnswer	ans;

	keys[0] = lf_lease_key(resource);
	args[nargs++] = identity;
	if (extra_arg)
		args[nargs++] = extra_arg;
	lf_run_script(script, 1, keys, nargs, args, lf_command_timeout_ms,
				  LF_INTERRUPTIBLE, &ans);
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
			report_problem(operation, resource, ans.err);
			return LF_ANS_UNAVAILABLE;
		default:
			break;
	}
	report_problem(operation, resource, ans.err);
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
	char	   *identity = check_identity(fcinfo, 1);
	int64		ttl = check_ttl(fcinfo, 2);
	int64		minv = check_min_validity(fcinfo, 3, ttl);
	char		ttlbuf[32];
	LfAnswerOutcome r;
	int64		start;
	LfOutcome	o = {LF_C_RENEW_RENEWED};
	LeaseEntry *e = lf_find_lease(resource, identity);

	reason[0] = '\0';
	pg_lltoa(ttl, ttlbuf);

	start = lf_now_ms();
	r = run_identity_script(LF_SCRIPT_RENEW, "renew", resource, identity, ttlbuf, e, ttl, minv);
	o.validity = lf_validity_after(ttl, lf_now_ms() - start);

	if (r == LF_ANS_UNAVAILABLE)
		PG_RETURN_DATUM(status_only(fcinfo, LF_C_RENEW_UNAVAILABLE, resource));
	/* unknown: the lease may or may not have been extended; nothing to undo */
	if (r == LF_ANS_UNKNOWN)
		PG_RETURN_DATUM(status_only(fcinfo, LF_C_RENEW_UNKNOWN, resource));

	/*
	 * Lost: a session- or transaction-scoped lease of this session is lost
	 * to it (lf_mark_lease_lost: its writes and its COMMIT fail with
	 * LF010), never "released" (that would switch the commit check off).
	 */
	if (r == LF_ANS_LOST)
	{
		if (e && e->state == STATE_HELD)
			lf_mark_lease_lost(e, "lease_fence.renew() found that the lease key no longer holds this lease's identity");
		PG_RETURN_DATUM(status_only(fcinfo, LF_C_RENEW_LOST, resource));
	}
	if (lf_min_replicas > 0)
	{
		/* a renewal the replicas do not have could be undone by a failover */
		char		err[LF_ERRLEN];
		int			acked = replicas_acknowledged(resource, identity, e ? e->generation : 0,
												  e ? e->scope : SCOPE_EXPLICIT, ttl, minv, err);

		if (acked < lf_min_replicas)
		{
			report_unreplicated("renew", resource, acked, err);
			PG_RETURN_DATUM(status_only(fcinfo, LF_C_RENEW_UNREPLICATED, resource));
		}
		o.validity = lf_validity_after(ttl, lf_now_ms() - start);
	}
	if (e)
		lf_lease_validity_set(e, o.validity);
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
	PG_RETURN_DATUM(outcome_row(fcinfo, &o));
}

/* lease_fence.release(resource text, identity text) */
Datum
lf_release(PG_FUNCTION_ARGS)
{
	char	   *resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	char	   *identity = check_identity(fcinfo, 1);
	LfAnswerOutcome r;
	LeaseEntry *e = lf_find_lease(resource, identity);

	reason[0] = '\0';
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
	r = run_identity_script(LF_SCRIPT_RELEASE, "release", resource, identity,
							lf_release_publish(), e, 0, 0);

	if (r == LF_ANS_UNAVAILABLE)
		PG_RETURN_DATUM(status_only(fcinfo, LF_C_RELEASE_UNAVAILABLE, resource));
	if (r == LF_ANS_UNKNOWN)
	{
		/* retried, bounded, at the end of the transaction */
		if (e)
			lf_set_lease_state(e, STATE_UNKNOWN);
		else
			lf_add_lease(resource, identity, 0, SCOPE_EXPLICIT, STATE_UNKNOWN, 0, 0, 0);
		PG_RETURN_DATUM(status_only(fcinfo, LF_C_RELEASE_UNKNOWN, resource));
	}

	if (r == LF_ANS_RELEASED && lf_min_replicas > 0)
	{
		/*
		 * A deletion the replicas do not have could be undone by a
		 * failover, and the lease come back until its TTL: not "released"
		 * but unknown, settled at the end of the transaction.
		 */
		char		err[LF_ERRLEN];
		int			acked = replicas_acknowledged(resource, identity, e ? e->generation : 0,
												  e ? e->scope : SCOPE_EXPLICIT, 0, 0, err);

		if (acked < lf_min_replicas)
		{
			report_unreplicated("release", resource, acked, err);
			if (e)
				lf_set_lease_state(e, STATE_UNKNOWN);
			else
				lf_add_lease(resource, identity, 0, SCOPE_EXPLICIT, STATE_UNKNOWN, 0, 0, 0);
			PG_RETURN_DATUM(status_only(fcinfo, LF_C_RELEASE_UNKNOWN, resource));
		}
	}
	if (e)
		lf_set_lease_state(e, STATE_RELEASED);
	lf_update_write_check();	/* a lost lease released: its loss acknowledged */
	PG_RETURN_DATUM(status_only(fcinfo, r == LF_ANS_RELEASED ? LF_C_RELEASE_RELEASED : LF_C_RELEASE_NOT_HELD,
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
	const char *state = lf_keepalive_state_of(check_identity(fcinfo, 0));

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
	const char *keys[2];
	LfAnswer	ans;
	Datum		values[6];
	bool		nulls[6];
	int			pid = 0;
	Oid			dboid = InvalidOid;
	Oid			roleid = InvalidOid;
	bool		in_table = false;

	resource = lf_check_resource_arg(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	(void) key_prefix_is_ours(resource, ERROR);
	keys[0] = lf_lease_key(resource);
	keys[1] = lf_generation_key(resource);
	lf_run_script(LF_SCRIPT_HOLDER, 2, keys, 0, NULL, lf_command_timeout_ms,
				  LF_INTERRUPTIBLE, &ans);
	if (ans.outcome == LF_ANS_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
	if (ans.outcome == LF_ANS_CORRUPT && ans.oversized)
		ereport(ERROR,
				errcode(ERRCODE_DATA_CORRUPTED),
				errmsg("a key of resource \"%s\" holds more than 256 bytes", resource),
				errdetail("lease_fence writes a 32-byte identity into the lease key and at most 19 digits into the generation key; the holder script refuses to read more."),
				errhint("Something other than lease_fence wrote %s or %s: delete it.", keys[0], keys[1]));
	if (ans.outcome == LF_ANS_CORRUPT)
		ereport(ERROR,
				errcode(ERRCODE_DATA_CORRUPTED),
				errmsg("the generation key of resource \"%s\" holds no generation", resource),
				errhint("Delete it (DEL %s) if nothing else wrote it: lease_fence writes a decimal generation there.",
						keys[1]));
	if (ans.outcome != LF_ANS_HELD && ans.outcome != LF_ANS_NOT_HELD)
		ereport(ERROR,
				errcode(ERRCODE_CONNECTION_FAILURE),
				errmsg("lease_fence: could not ask Redis who holds resource \"%s\"", resource),
				errdetail("Redis was unavailable or did not answer: %s.", lf_answer_outcome_name(ans.outcome)),
				errdetail_log("%s", ans.err));

	memset(nulls, true, sizeof(nulls));
	values[0] = BoolGetDatum(ans.outcome == LF_ANS_HELD);
	nulls[0] = false;
	if (ans.outcome == LF_ANS_HELD)
	{
		in_table = lf_table_holder(resource, ans.value, &pid, &dboid, &roleid);
		if (in_table ? lf_may_see_identity(roleid) :
			has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS))
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
	if (in_table)
	{
		char	   *dbname = get_database_name(dboid);

		values[4] = Int32GetDatum(pid);
		nulls[4] = false;
		if (dbname)
		{
			values[5] = CStringGetTextDatum(dbname);
			nulls[5] = false;
		}
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
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
