/*-------------------------------------------------------------------------
 *
 * current_generation.c
 *	  The current generation: the GUC lease_fence.generation with
 *	  set_generation() and current_generation() on top of it, and the hook
 *	  through which the lease layer checks fenced writes.
 *
 * The current generation is what the fence trigger compares with the stored
 * fence.  It is a GUC so that every client can set it with plain
 * "SET LOCAL lease_fence.generation = 42", and so that it follows the GUC
 * rules of transactions and subtransactions for free.  GUCs have no 64-bit
 * integer type, so it is a string GUC whose check hook parses it once; the
 * trigger reads the parsed value from two static variables.
 *
 * One thing outranks the GUC: the generation of a transaction-scoped lease.
 * The lease lives to the end of the top-level transaction, and so must its
 * generation, also after ROLLBACK TO SAVEPOINT or a PL/pgSQL EXCEPTION block
 * undid every SET LOCAL made after it.  The lease registry reports it
 * here, and while it is held a SET to any other value is refused.
 *
 * The lease layer reports a transaction-scoped lease's generation here
 * from above (lf_set_lease_generation), a call downward.
 *
 * IDENTIFICATION
 *	  src/fence/current_generation.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "access/parallel.h"
#include "access/xact.h"
#include "base/compat.h"
#include "executor/executor.h"
#include "fence/fence.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"

/* checks every fenced write while the lease layer needs it (fence.h) */
LfWriteCheck lf_write_check_hook = NULL;

/* what the fence reads: the effective current generation */
bool		lf_generation_is_set = false;
int64		lf_generation = 0;
bool		lf_generation_invalid = false;

/* its two sources: the GUC, and a transaction-scoped lease */
static bool guc_generation_is_set = false;
static int64 guc_generation = 0;
static bool guc_generation_invalid = false;
static bool lease_generation_is_set = false;
static int64 lease_generation = 0;

/* true while _PG_init defines our GUCs (placeholder values are re-applied) */
static bool defining_gucs = false;

static char *lf_generation_string = NULL;

/* what the check hook hands to the assign hook */
typedef struct GenerationExtra
{
	bool		is_set;
	int64		value;
	bool		invalid;
} GenerationExtra;

PG_FUNCTION_INFO_V1(lf_set_generation);
PG_FUNCTION_INFO_V1(lf_current_generation);

/*
 * Parse a generation: empty means "not set", otherwise a non-negative
 * decimal bigint with optional surrounding blanks.  Returns false on
 * anything else, without throwing (check hooks must not).
 */
bool
lf_parse_generation(const char *s, bool *is_set, int64 *value)
{
	char	   *end;
	int64		v;

	while (*s == ' ' || *s == '\t')
		s++;
	if (*s == '\0')
	{
		*is_set = false;
		*value = 0;
		return true;
	}
	if (*s < '0' || *s > '9')
		return false;			/* no sign, no hex, no junk */
	errno = 0;
	v = strtoi64(s, &end, 10);
	if (errno != 0 || end == s)
		return false;
	while (*end == ' ' || *end == '\t')
		end++;
	if (*end != '\0')
		return false;
	*is_set = true;
	*value = v;
	return true;
}

/*
 * GUC check hook: reject what is not a generation, hand the parsed value on.
 *
 * One exception.  A value SET before the library was loaded in this backend
 * is a placeholder that PostgreSQL re-applies while _PG_init defines the
 * variable; rejecting it then would only cost a WARNING and leave the
 * session with no generation at all, so that a lenient fence let its writes
 * through.  Such a value is kept as "invalid" instead, and every fenced
 * write fails with LF002 until the generation is set again.
 */
static bool
check_generation(char **newval, void **extra, GucSource source)
{
	GenerationExtra *parsed;
	bool		is_set;
	int64		value;
	bool		invalid = false;

	if (!lf_parse_generation(*newval ? *newval : "", &is_set, &value))
	{
		if (!defining_gucs)
		{
			GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
			GUC_check_errdetail("A generation is a non-negative bigint, or empty for none.");
			return false;
		}
		invalid = true;
		is_set = false;
		value = 0;
	}
	else if (lease_generation_is_set && (!is_set || value != lease_generation))
	{
		GUC_check_errcode(ERRCODE_LF_CONFLICTING_GENERATION);
		GUC_check_errdetail("This transaction holds a transaction-scoped lease with generation " INT64_FORMAT "; it is the current generation until the transaction ends.",
							lease_generation);
		return false;
	}
	/* the GUC machinery frees it: guc_malloc from 16 on (compat.h) */
	parsed = (GenerationExtra *) lf_guc_malloc(sizeof(GenerationExtra));
	if (parsed == NULL)
	{
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		GUC_check_errmsg("out of memory");
		return false;
	}
	parsed->is_set = is_set;
	parsed->value = value;
	parsed->invalid = invalid;
	*extra = parsed;
	return true;
}

/*
 * Publish the effective current generation: a held lease's, else the GUC's
 * (whose value set before loading, if it was one, is invalid; a held
 * lease's is not).
 */
static void
publish_generation(void)
{
	if (lease_generation_is_set)
	{
		lf_generation_is_set = true;
		lf_generation = lease_generation;
		lf_generation_invalid = false;
	}
	else
	{
		lf_generation_is_set = guc_generation_is_set;
		lf_generation = guc_generation;
		lf_generation_invalid = guc_generation_invalid;
	}
}

/*
 * GUC show hook: SHOW and current_setting() say the effective generation, a
 * held transaction-scoped lease's over the GUC's own value.  (The lease
 * makes no SET LOCAL: a GUC change per acquire, and its undoing at the
 * transaction's end, cost more than the acquire's other bookkeeping.)
 */
static const char *
show_generation(void)
{
	static char buf[32];

	if (!lease_generation_is_set)
		return lf_generation_string ? lf_generation_string : "";
	snprintf(buf, sizeof(buf), INT64_FORMAT, lease_generation);
	return buf;
}

/* GUC assign hook: publish the parsed value to the fence trigger */
static void
assign_generation(const char *newval, void *extra)
{
	GenerationExtra *parsed = (GenerationExtra *) extra;

	guc_generation_is_set = parsed->is_set;
	guc_generation = parsed->value;
	guc_generation_invalid = parsed->invalid;
	publish_generation();
}

/*
 * The lease registry: a transaction-scoped lease with generation g is held
 * (is_set), or the transaction that held one ended (!is_set).
 */
void
lf_set_lease_generation(bool is_set, int64 g)
{
	lease_generation_is_set = is_set;
	lease_generation = is_set ? g : 0;
	publish_generation();
}

/*
 * A parallel query's workers receive the leader's settings as their values,
 * not as SHOW says them, so a transaction-scoped lease's generation, which
 * only the show hook reports, would not reach them:
 * current_setting('lease_fence.generation') and current_generation() would
 * say the setting's own value there.  Before a query that may run in
 * parallel, the lease's generation is made the setting's value, for the
 * transaction (a SET LOCAL, which ends when the lease's generation does);
 * only then, since a SET per acquire is what the show hook saves.
 */
static ExecutorStart_hook_type prev_executor_start = NULL;

static void
generation_executor_start(QueryDesc *queryDesc, int eflags)
{
	if (lease_generation_is_set && queryDesc->plannedstmt->parallelModeNeeded &&
		!IsInParallelMode() && !IsParallelWorker() &&
		(!guc_generation_is_set || guc_generation != lease_generation))
	{
		char		buf[32];

		snprintf(buf, sizeof(buf), INT64_FORMAT, lease_generation);
		(void) set_config_option(LF_GENERATION_GUC, buf, PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
	}
	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

/*
 * Called from _PG_init: define lease_fence.generation.  USERSET: it is the
 * session's claim of which lease it writes under, not a privilege; the fence
 * makes a false claim harmless for everyone holding a higher generation.
 */
void
lf_current_generation_init(void)
{
	defining_gucs = true;
	DefineCustomStringVariable(LF_GENERATION_GUC,
							   "Current generation (fencing token) that fenced writes carry.",
							   "Empty means none.  Usually set with SET LOCAL or lease_fence.set_generation().",
							   &lf_generation_string,
							   "",
							   PGC_USERSET,
							   GUC_NOT_IN_SAMPLE,
							   check_generation,
							   assign_generation,
							   show_generation);
	defining_gucs = false;
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = generation_executor_start;
}

/*
 * lease_fence.set_generation(generation bigint, is_local boolean)
 *
 * set_config() for lease_fence.generation, with the types checked.
 * set_generation(generation, resource) (resource_fence.c) is the other
 * form, and the one a call with the generation alone means.
 */
/*
 * A generation argument, checked: NULL is an error, not "clear" (a caller
 * that passes the generation of a lease it did not get must not silently
 * write unfenced; RESET clears it), and so is a negative one.
 */
int64
lf_check_generation_arg(FunctionCallInfo fcinfo, int argno)
{
	int64		generation;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("generation must not be NULL"),
				errhint("To clear the current generation, use RESET %s.", LF_GENERATION_GUC));
	generation = PG_GETARG_INT64(argno);
	if (generation < 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("generation must not be negative"),
				errdetail("The generation given was " INT64_FORMAT ".", generation));
	return generation;
}

/* Make generation the current one, for the transaction (is_local) or the session. */
void
lf_set_current_generation(int64 generation, bool is_local)
{
	char		buf[32];

	snprintf(buf, sizeof(buf), INT64_FORMAT, generation);
	(void) set_config_option(LF_GENERATION_GUC, buf,
							 superuser() ? PGC_SUSET : PGC_USERSET,
							 PGC_S_SESSION,
							 is_local ? GUC_ACTION_LOCAL : GUC_ACTION_SET,
							 true, 0, false);
}

/*
 * A transaction-scoped generation set outside a transaction block would be
 * gone when the statement ends, and the next statement, in a transaction of
 * its own, would write without it: unfenced on a lenient table.  Refuse it
 * (25P01) rather than return it as if it had been set: a driver in
 * autocommit shows no WARNING, and the returned value reads as success.
 */
void
lf_require_transaction_block(void)
{
	if (!IsTransactionBlock())
		ereport(ERROR,
				errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				errmsg("set_generation only works inside a transaction block"),
				errdetail("Outside one, the generation would be gone when this statement ends, and the next statement would write without it."),
				errhint("Use BEGIN first, or the resource form lease_fence.set_generation(generation, resource)."));
}

Datum
lf_set_generation(PG_FUNCTION_ARGS)
{
	int64		generation = lf_check_generation_arg(fcinfo, 0);

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("is_local must not be NULL"));
	if (PG_GETARG_BOOL(1))
		lf_require_transaction_block();
	lf_set_current_generation(generation, PG_GETARG_BOOL(1));
	PG_RETURN_INT64(generation);
}

/* Refuse to go on with a generation that was set invalid before loading. */
void
lf_check_generation_valid(void)
{
	if (lf_generation_invalid)
	{
		lf_count(LF_C_FENCE_LF002);
		ereport(ERROR,
				errcode(ERRCODE_LF_MISSING_GENERATION),
				errmsg("invalid generation: %s is not a generation", LF_GENERATION_GUC),
				errdetail("It was set to \"%s\" before lease_fence was loaded in this session.",
						  lf_generation_string ? lf_generation_string : ""),
				errhint("Set it to a non-negative bigint, or RESET it; preload lease_fence to catch this when it is set."));
	}
}

/* lease_fence.current_generation(): the current generation, or NULL */
Datum
lf_current_generation(PG_FUNCTION_ARGS)
{
	lf_check_generation_valid();
	if (!lf_generation_is_set)
		PG_RETURN_NULL();
	PG_RETURN_INT64(lf_generation);
}
