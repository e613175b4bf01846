/*-------------------------------------------------------------------------
 *
 * key_prefix.c
 *	  Key prefix ownership: the owner check before an acquire or a
 *	  holder(), its cache, and lease_fence.claim_key_prefix().
 *
 * Invariants: no lease request goes to a connection on which key_prefix
 * has not been found this database's (claimed, or ours already) since
 * the connection was made or key_prefix last changed; another database's
 * prefix is never taken without claim_key_prefix().
 *
 * IDENTIFICATION
 *	  src/lease/key_prefix.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "lease/internal.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

PG_FUNCTION_INFO_V1(lf_claim_key_prefix);

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
 * The claim cache: the connection (lf_owner_connection_serial) and the
 * prefix last found ours.  File-scope: the answer holds for the backend's
 * connection, across calls.
 */
static uint64 claim_checked_serial = 0;
static char *claim_checked_prefix = NULL;

/*
 * The owner key's name, <key_prefix>owner, for the messages only (the
 * requests name it in the Redis layer).
 */
static char *
owner_key_name(void)
{
	return psprintf("%sowner", lf_key_prefix ? lf_key_prefix : "");
}

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
remember_claim(void)
{
	claim_checked_serial = lf_owner_connection_serial();
	if (claim_checked_prefix)
		pfree(claim_checked_prefix);
	claim_checked_prefix = MemoryContextStrdup(TopMemoryContext,
											   lf_key_prefix ? lf_key_prefix : "");
}

/*
 * Before an acquire or a holder() (req: its call): is key_prefix on this Redis ours?
 * Claims it when nobody has.  Another database's prefix, or a check that
 * could not be made, is reported at elevel: for an acquire a WARNING, after
 * which false is returned (the acquire is then "unavailable"); for holder()
 * an ERROR, so that no other database's lease is ever shown.  Runs before
 * the generation is drawn, so a refused acquire moves nothing.  An
 * interrupt is raised at once: nothing of the lease was sent.  resource
 * names the request in the messages.
 */
bool
lf_key_prefix_is_ours(LfRequest *req, const char *resource, int elevel)
{
	char		id[64];
	char	   *value;
	LfAnswer	ans;
	LfCall		call;
	uint64		serial;

	/*
	 * The answer holds for the connection it was given on.  A connection
	 * Redis has closed is replaced here, before the acquire, so that its
	 * successor is checked too.
	 */
	serial = lf_owner_connection_serial();
	if (claim_checked_prefix != NULL &&
		strcmp(claim_checked_prefix, lf_key_prefix ? lf_key_prefix : "") == 0 &&
		serial != 0 && claim_checked_serial == serial)
		return true;

	owner_identity(id, sizeof(id), &value);
	call = lf_request_call(req, lf_command_timeout_ms);
	lf_script_claim(id, value, &call, &ans);
	if (ans.outcome == LF_ANS_INTERRUPTED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR,
				errcode(ERRCODE_QUERY_CANCELED),
				errmsg("Redis request interrupted"));
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
					errmsg("could not ask Redis who holds resource \"%s\"", resource),
					errdetail("Redis was unavailable or did not answer: %s.", lf_answer_outcome_name(ans.outcome)),
					errdetail_log("%s", msg));
		lf_request_problem(req, "acquire", resource, msg);
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
									owner_key_name(), describe_owner(owner), describe_owner(value));

		if (lf_may_see_settings())
			snprintf(why, sizeof(why), "key_prefix \"%s\" on this Redis belongs to another database",
					 lf_key_prefix ? lf_key_prefix : "");
		else
			snprintf(why, sizeof(why), "key_prefix on this Redis belongs to another database");
		if (elevel < ERROR)
			strlcpy(req->reason, why, sizeof(req->reason));
		ereport(elevel,
				elevel >= ERROR ? errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE) : 0,
				errmsg("%s", why),
				superuser() ? errdetail("%s", full) :
				errdetail("The key_prefix is claimed by another database (the server log says which). Two databases sharing a key_prefix would push each other's generations up."),
				errdetail_log("%s", full),
				errhint("Give each database its own lease_fence.key_prefix. If this database replaces that one (a dump restored into a new cluster), a superuser takes the prefix over with SELECT lease_fence.claim_key_prefix()."));
		return false;
	}
	if (ans.outcome == LF_ANS_CLAIMED)
		ereport(LOG,
				errmsg("key_prefix \"%s\" claimed for %s",
					   lf_key_prefix ? lf_key_prefix : "", describe_owner(value)));
	remember_claim();
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
	LfAnswer	ans;
	LfCall		call = {lf_command_timeout_ms, LF_INTERRUPTIBLE, false};
	char	   *old = NULL;

	if (!superuser())
		ereport(ERROR,
				errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				errmsg("permission denied to take over a lease_fence key_prefix"),
				errdetail("Only superusers may call lease_fence.claim_key_prefix()."));

	owner_identity(id, sizeof(id), &value);
	lf_script_takeover(value, &call, &ans);
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
				errhint("The key \"%s\" may or may not have changed; running the function again is safe.", owner_key_name()));

	ereport(LOG,
			errmsg("key_prefix \"%s\" taken over by %s",
				   lf_key_prefix ? lf_key_prefix : "", describe_owner(value)),
			old ? errdetail("It belonged to %s.", describe_owner(old))
			: errdetail("It had no owner."));
	remember_claim();
	if (old == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(old));
}

