/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  The lease helper: acquire / renew / release a Redis lease from SQL, with
 *	  three-way outcomes, and this session's list of leases.
 *
 * Every operation is one Lua script, run with EVALSHA (EVAL after NOSCRIPT),
 * so each compare-and-act happens atomically inside Redis:
 *
 *	acquire: busy if the lease key exists; stale if our generation is not
 *			 above the highest generation ever granted for the resource;
 *			 otherwise SET key identity PX ttl and store the generation.
 *	renew:	 PEXPIRE only if the key still holds our identity (never
 *			 recreates a lost key).
 *	release: DEL only if the key still holds our identity.
 *	check:	 PTTL if the key holds our identity (transaction scope, at
 *			 PRE_COMMIT).
 *
 * An outcome we cannot know ("unknown": a timeout after sending, a lost
 * connection) is never reported as "not acquired".  After an unknown acquire
 * a bounded conditional release with the same identity runs at once on a
 * fresh connection; if it is not confirmed the lease is recorded as
 * "unconfirmed".  An operation interrupted by a cancel is recorded as
 * "unknown" and cleaned up at the end of the transaction.
 *
 * IDENTIFICATION
 *	  src/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "common/cryptohash.h"
#include "funcapi.h"
#include "lease_fence.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(lf_acquire);
PG_FUNCTION_INFO_V1(lf_renew);
PG_FUNCTION_INFO_V1(lf_release);
PG_FUNCTION_INFO_V1(lf_session_leases);
PG_FUNCTION_INFO_V1(lf_claim_key_prefix);

/* GUCs (defined in lease_fence.c) */
char	   *lf_key_prefix = NULL;
int			lf_gen_key_ttl_s = 604800;

/* a resource name longer than this is refused */
#define LF_MAX_RESOURCE 1024
/*
 * How much of the session's list is kept (see trim_entries): released
 * leases, and explicit-scope held and unconfirmed ones.  Session- and
 * transaction-scoped held leases are never forgotten.
 */
#define LF_KEEP_RELEASED 64
#define LF_KEEP_HELD_EXPLICIT 1000
#define LF_KEEP_UNCONFIRMED 1000
#define LF_ERRLEN 256

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
	STATE_RELEASED
} LeaseState;

static const char *const scope_names[] = {"explicit", "session", "transaction"};
static const char *const state_names[] = {"held", "unknown", "unconfirmed", "released"};

/* one lease of this session, in lease_cxt */
typedef struct LeaseEntry
{
	char	   *resource;
	char		identity[33];
	int64		generation;
	LeaseScope	scope;
	LeaseState	state;
	TimestampTz acquired_at;
	TimestampTz expires_at;		/* local estimate: acquired_at + validity */
	int64		ttl_ms;
	int64		min_validity_ms;
	bool		fenced_in_subxact;	/* transaction scope: fenced in a subtransaction */
} LeaseEntry;

/*
 * The session's leases, oldest first, and everything they use, in a memory
 * context of their own ("lease_fence leases", a child of TopMemoryContext):
 * its size shows in pg_backend_memory_contexts.
 */
static List *leases = NIL;
static MemoryContext lease_cxt = NULL;
static bool exit_hook_registered = false;

/* the highest generation of a transaction-scoped lease of this transaction */
static bool xact_generation_set = false;
static int64 xact_generation = 0;

static void release_at_exit(int code, Datum arg);

/* ---------------------------------------------------------------------
 * The scripts
 * ---------------------------------------------------------------------
 */

/*
 * Generations are compared as decimal strings (shorter is smaller), so no
 * value goes through a Lua double and loses precision above 2^53.
 * KEYS: lease key, generation key.  ARGV: identity, ttl_ms, generation,
 * generation key TTL in seconds (0: none).
 * Returns {1, generation} acquired, {0, ""} busy, {2, stored max} stale.
 */
static const char acquire_script[] =
"local function lt(a, b)\n"
"  if #a ~= #b then return #a < #b end\n"
"  return a < b\n"
"end\n"
"local ttl = tonumber(ARGV[2])\n"
"if not ttl or ttl <= 0 or ttl % 1 ~= 0 then\n"
"  return redis.error_reply('ERR lease_fence: ttl must be a positive integer')\n"
"end\n"
"if redis.call('EXISTS', KEYS[1]) == 1 then return {0, ''} end\n"
"local maxg = redis.call('GET', KEYS[2])\n"
"if maxg and not lt(maxg, ARGV[3]) then return {2, maxg} end\n"
"redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])\n"
"if ARGV[4] ~= '0' then\n"
"  redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])\n"
"else\n"
"  redis.call('SET', KEYS[2], ARGV[3])\n"
"end\n"
"return {1, ARGV[3]}\n";

/* KEYS: lease key.  ARGV: identity, ttl_ms.  1 renewed, 0 lost. */
static const char renew_script[] =
"local ttl = tonumber(ARGV[2])\n"
"if not ttl or ttl <= 0 or ttl % 1 ~= 0 then\n"
"  return redis.error_reply('ERR lease_fence: ttl must be a positive integer')\n"
"end\n"
"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"
"redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
"return 1\n";

/* KEYS: lease key.  ARGV: identity.  1 released, 0 not held. */
static const char release_script[] =
"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
"  redis.call('DEL', KEYS[1])\n"
"  return 1\n"
"end\n"
"return 0\n";

/* KEYS: lease key.  ARGV: identity.  PTTL if ours, -3 if not. */
static const char check_script[] =
"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
"  return redis.call('PTTL', KEYS[1])\n"
"end\n"
"return -3\n";

/*
 * The owner of key_prefix: KEYS: claim key.  ARGV: our owner id
 * ("<system identifier>:<database OID>"), our claim value (the id, ':' and
 * the database name, which is only for people reading it).  Claims the
 * prefix if nobody has.  {2, value} claimed now, {1, value} ours already,
 * {0, value} another database's.
 */
static const char claim_script[] =
"local cur = redis.call('GET', KEYS[1])\n"
"if not cur then\n"
"  redis.call('SET', KEYS[1], ARGV[2])\n"
"  return {2, ARGV[2]}\n"
"end\n"
"if cur == ARGV[1] or string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then\n"
"  return {1, cur}\n"
"end\n"
"return {0, cur}\n";

/* KEYS: claim key.  ARGV: our claim value.  The previous value, or nil. */
static const char takeover_script[] =
"local old = redis.call('GET', KEYS[1])\n"
"redis.call('SET', KEYS[1], ARGV[1])\n"
"return old\n";

typedef struct LuaScript
{
	const char *text;
	char		sha1[41];
} LuaScript;

static LuaScript scripts[] = {
	{acquire_script, ""},
	{renew_script, ""},
	{release_script, ""},
	{check_script, ""},
	{claim_script, ""},
	{takeover_script, ""},
};

#define SCRIPT_ACQUIRE	(&scripts[0])
#define SCRIPT_RENEW	(&scripts[1])
#define SCRIPT_RELEASE	(&scripts[2])
#define SCRIPT_CHECK	(&scripts[3])
#define SCRIPT_CLAIM	(&scripts[4])
#define SCRIPT_TAKEOVER (&scripts[5])

/*
 * Compute the SHA1 that EVALSHA names each script by.  Called at the top of
 * every SQL-callable function, inside a transaction: pg_cryptohash needs a
 * resource owner, and the commit, abort and exit hooks that run scripts later
 * may have none.
 */
static void
prepare_scripts(void)
{
	size_t		n;

	for (n = 0; n < lengthof(scripts); n++)
	{
		LuaScript  *script = &scripts[n];
		pg_cryptohash_ctx *ctx;
		uint8		digest[20];
		int			i;

		if (script->sha1[0] != '\0')
			continue;
		ctx = pg_cryptohash_create(PG_SHA1);
		if (ctx == NULL ||
			pg_cryptohash_init(ctx) < 0 ||
			pg_cryptohash_update(ctx, (const uint8 *) script->text, strlen(script->text)) < 0 ||
			pg_cryptohash_final(ctx, digest, sizeof(digest)) < 0)
		{
			pg_cryptohash_free(ctx);
			elog(ERROR, "could not compute the SHA1 of a lease_fence script");
		}
		pg_cryptohash_free(ctx);
		for (i = 0; i < 20; i++)
			snprintf(script->sha1 + 2 * i, 3, "%02x", digest[i]);
	}
}

/*
 * Run a script: EVALSHA, and EVAL when Redis answers NOSCRIPT (a definite
 * "not run", so sending it again is safe).  Both share one deadline.
 */
static LfRedisResult
run_script(LuaScript *script, int nkeys, const char **keys,
		   int nargs, const char **args, int timeout_ms, bool fresh,
		   bool interruptible, redisReply **reply, char *err)
{
	const char *argv[12];
	size_t		argvlen[12];
	char		numkeys[8];
	int			argc = 0;
	int			i;
	int64		start = lf_now_ms();
	LfRedisResult r;

	Assert((size_t) (3 + nkeys + nargs) <= lengthof(argv));
	snprintf(numkeys, sizeof(numkeys), "%d", nkeys);
	Assert(script->sha1[0] != '\0');
	argv[argc++] = "EVALSHA";
	argv[argc++] = script->sha1;
	argv[argc++] = numkeys;
	for (i = 0; i < nkeys; i++)
		argv[argc++] = keys[i];
	for (i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	for (i = 0; i < argc; i++)
		argvlen[i] = strlen(argv[i]);

	r = lf_redis_command(argc, argv, argvlen, timeout_ms, fresh, interruptible,
						 reply, err, LF_ERRLEN);
	if (r == LF_REDIS_OK && (*reply)->type == REDIS_REPLY_ERROR &&
		strncmp((*reply)->str, "NOSCRIPT", 8) == 0)
	{
		int			left = timeout_ms - (int) (lf_now_ms() - start);

		freeReplyObject(*reply);
		*reply = NULL;
		if (left <= 0)
		{
			snprintf(err, LF_ERRLEN, "timed out before the script could be loaded");
			return LF_REDIS_UNAVAILABLE;
		}
		argv[0] = "EVAL";
		argv[1] = script->text;
		argvlen[0] = 4;
		argvlen[1] = strlen(script->text);
		r = lf_redis_command(argc, argv, argvlen, left, false, interruptible,
							 reply, err, LF_ERRLEN);
	}
	return r;
}

/*
 * A Redis error reply to a script.  Errors Redis raises before running any
 * of it (loading, busy, auth, read-only replica, out of memory, cluster
 * redirections) mean nothing was applied: "unavailable".  Anything else
 * might have happened after a write: "unknown".
 */
static LfRedisResult
classify_error_reply(redisReply *reply, char *err)
{
	static const char *const not_applied[] = {
		"LOADING", "BUSY", "NOAUTH", "NOPERM", "WRONGPASS", "READONLY",
		"MASTERDOWN", "OOM", "MISCONF", "CLUSTERDOWN", "MOVED", "ASK",
		"TRYAGAIN", "CROSSSLOT", "NOREPLICAS"
	};
	size_t		i;

	snprintf(err, LF_ERRLEN, "Redis answered: %s", reply->str);
	for (i = 0; i < lengthof(not_applied); i++)
	{
		size_t		n = strlen(not_applied[i]);

		if (strncmp(reply->str, not_applied[i], n) == 0 &&
			(reply->str[n] == ' ' || reply->str[n] == '\0'))
			return LF_REDIS_UNAVAILABLE;
	}
	return LF_REDIS_UNKNOWN;
}

/* ---------------------------------------------------------------------
 * Keys, input checks, the session's list
 * ---------------------------------------------------------------------
 */

/*
 * The two keys of a resource: <key_prefix>{<resource>} and
 * <key_prefix>{<resource>}:gen.  Redis Cluster hashes the text between the
 * first '{' and the first '}' after it, so both keys share one slot, unless
 * that text is empty: a resource that starts with '}'.  Such a resource is
 * named by its hexadecimal spelling instead, <key_prefix>{<hex>}#lease and
 * <key_prefix>{<hex>}#gen: the tag is never empty, and no other resource's
 * key can be spelt the same (those end in '}' or ':gen').  The key_prefix
 * holds no brace (its check hook refuses them), and every other resource
 * keeps the key names of 1.1, so leases held across an upgrade stay valid.
 */
static char *
resource_key(const char *resource, bool gen)
{
	const char *prefix = lf_key_prefix ? lf_key_prefix : "";
	StringInfoData key;

	if (resource[0] != '}')
		return psprintf("%s{%s}%s", prefix, resource, gen ? ":gen" : "");

	initStringInfo(&key);
	appendStringInfo(&key, "%s{", prefix);
	for (; *resource; resource++)
		appendStringInfo(&key, "%02x", (unsigned char) *resource);
	appendStringInfoString(&key, gen ? "}#gen" : "}#lease");
	return key.data;
}

static char *
lease_key(const char *resource)
{
	return resource_key(resource, false);
}

static char *
generation_key(const char *resource)
{
	return resource_key(resource, true);
}

/* Bad input is an error before anything is sent. */
static char *
check_resource(FunctionCallInfo fcinfo, int argno)
{
	text	   *t;
	char	   *resource;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("resource must not be NULL"));
	t = PG_GETARG_TEXT_PP(argno);
	if (VARSIZE_ANY_EXHDR(t) == 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("resource must not be empty"));
	if (VARSIZE_ANY_EXHDR(t) > LF_MAX_RESOURCE)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("resource is too long"),
				errdetail("It has %d bytes; the limit is %d.",
						  (int) VARSIZE_ANY_EXHDR(t), LF_MAX_RESOURCE));
	resource = text_to_cstring(t);
	return resource;
}

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

/*
 * Validity left after a request that took elapsed ms, for a lease of ttl
 * ms: ttl - elapsed - drift, with drift = 1% of ttl + 2 ms (as Redlock
 * clients allow for clock drift between this host and Redis).
 */
static int64
validity_after(int64 ttl, int64 elapsed)
{
	return ttl - elapsed - (ttl / 100 + 2);
}

/*
 * The session's entry for resource and identity, or NULL.  A linear search,
 * over a list that trim_entries keeps to a few thousand entries at most.
 */
static LeaseEntry *
find_entry(const char *resource, const char *identity)
{
	ListCell   *lc;

	foreach(lc, leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if (strcmp(e->resource, resource) == 0 && strcmp(e->identity, identity) == 0)
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
 *	- the oldest released leases beyond LF_KEEP_RELEASED.
 * Session- and transaction-scoped held leases are obligations (released at
 * exit or at transaction end) and never dropped; unknown ones are settled at
 * transaction end.  keep, if not NULL, is never dropped (an entry a caller
 * is about to use).
 */
static void
trim_entries(LeaseEntry *keep)
{
	int			held = 0;
	int			unconfirmed = 0;
	int			released = 0;
	TimestampTz now;
	ListCell   *lc;

	if (leases == NIL)
		return;
	now = GetCurrentTimestamp();
	foreach(lc, leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if (e->state == STATE_HELD && e->scope == SCOPE_EXPLICIT && e->expires_at >= now)
			held++;
		else if (e->state == STATE_UNCONFIRMED)
			unconfirmed++;
		else if (e->state == STATE_RELEASED)
			released++;
	}
	foreach(lc, leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);
		bool		drop = false;

		if (e == keep)
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
		else if (e->state == STATE_RELEASED && released > LF_KEEP_RELEASED)
		{
			drop = true;
			released--;
		}
		if (drop)
		{
			leases = foreach_delete_current(leases, lc);
			pfree(e->resource);
			pfree(e);
		}
	}
}

/* Record a new lease of this session. */
static LeaseEntry *
add_entry(const char *resource, const char *identity, int64 generation,
		  LeaseScope scope, LeaseState state, int64 ttl, int64 minv, int64 validity)
{
	MemoryContext old;
	LeaseEntry *e;

	if (!exit_hook_registered)
	{
		/* runs before redis_conn.c frees the connection at on_proc_exit */
		before_shmem_exit(release_at_exit, (Datum) 0);
		exit_hook_registered = true;
	}
	if (lease_cxt == NULL)
		lease_cxt = AllocSetContextCreate(TopMemoryContext, "lease_fence leases",
										  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(lease_cxt);
	e = palloc0(sizeof(LeaseEntry));

	e->resource = pstrdup(resource);
	strlcpy(e->identity, identity, sizeof(e->identity));
	e->generation = generation;
	e->scope = scope;
	e->state = state;
	e->acquired_at = GetCurrentTimestamp();
	e->expires_at = e->acquired_at + (validity > 0 ? validity : 0) * 1000;
	e->ttl_ms = ttl;
	e->min_validity_ms = minv;
	leases = lappend(leases, e);
	MemoryContextSwitchTo(old);
	trim_entries(e);
	return e;
}

/*
 * The bounded conditional release: same identity, compare-and-delete,
 * within cleanup_timeout_ms, never raising an error (it also runs at commit,
 * abort and backend exit).  fresh: on a new connection.  True when Redis
 * confirmed that the key no longer holds the identity.
 */
static bool
cleanup_release(const char *resource, const char *identity, bool fresh)
{
	char	   *key = lease_key(resource);
	const char *keys[1];
	const char *args[1];
	redisReply *reply = NULL;
	char		err[LF_ERRLEN];
	LfRedisResult r;
	bool		confirmed = false;

	keys[0] = key;
	args[0] = identity;
	r = run_script(SCRIPT_RELEASE, 1, keys, 1, args, lf_cleanup_timeout_ms, fresh,
				   false, &reply, err);
	if (r == LF_REDIS_OK)
	{
		confirmed = (reply->type == REDIS_REPLY_INTEGER);
		if (!confirmed)
			snprintf(err, sizeof(err), "unexpected reply to the release script");
		freeReplyObject(reply);
	}
	lf_count(confirmed ? LF_C_CLEANUP_CONFIRMED : LF_C_CLEANUP_UNCONFIRMED);
	if (!confirmed)
		ereport(WARNING,
				errmsg("lease_fence: could not confirm the release of resource \"%s\"", resource),
				errdetail("%s", err),
				errhint("The lease expires by its TTL; writes under its generation are still fenced."));
	pfree(key);
	return confirmed;
}

/* Settle an entry whose outcome is unknown: release it, bounded. */
static void
settle_entry(LeaseEntry *e, bool fresh)
{
	e->state = cleanup_release(e->resource, e->identity, fresh) ? STATE_RELEASED : STATE_UNCONFIRMED;
}

/*
 * An operation was interrupted with its outcome unknown: record it, so the
 * end of the transaction cleans it up, then let the interrupt act.
 */
static void
interrupted(const char *resource, const char *identity, int64 generation,
			LeaseScope scope, int64 ttl, int64 minv)
{
	LeaseEntry *e = find_entry(resource, identity);

	if (e == NULL)
		e = add_entry(resource, identity, generation, scope, STATE_UNKNOWN, ttl, minv, 0);
	else
		e->state = STATE_UNKNOWN;
	CHECK_FOR_INTERRUPTS();
	/* not reached when the interrupt throws; if it did not, say so */
	ereport(ERROR,
			errcode(ERRCODE_QUERY_CANCELED),
			errmsg("lease_fence: Redis request interrupted"));
}

/* Say why Redis was unavailable or the outcome unknown, without secrets. */
static void
report_redis_problem(const char *what, const char *resource, const char *err)
{
	ereport(WARNING,
			errmsg("lease_fence: %s of resource \"%s\": %s", what, resource, err));
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

/* the connection (lf_redis_connection_serial) and prefix last found ours */
static uint64 claim_checked_serial = 0;
static char *claim_checked_prefix = NULL;

/* <key_prefix>owner */
static char *
owner_key(void)
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

/* Remember that on the current connection key_prefix is ours. */
static void
remember_claim(void)
{
	claim_checked_serial = lf_redis_connection_serial;
	if (claim_checked_prefix)
		pfree(claim_checked_prefix);
	claim_checked_prefix = MemoryContextStrdup(TopMemoryContext,
											   lf_key_prefix ? lf_key_prefix : "");
}

/*
 * Before an acquire: is key_prefix on this Redis ours?  Claims it when
 * nobody has.  False after a WARNING (the acquire is then "unavailable"):
 * the prefix is another database's, or Redis could not be asked.  Runs
 * before the generation is drawn, so a refused acquire moves nothing.  An
 * interrupt is raised at once: nothing of the lease was sent.
 */
static bool
key_prefix_is_ours(const char *resource)
{
	char		id[64];
	char	   *value;
	char	   *key;
	const char *keys[1];
	const char *args[2];
	redisReply *reply = NULL;
	char		err[LF_ERRLEN];
	LfRedisResult r;
	char	   *owner;
	long long	code;
	bool		answered;

	/*
	 * The answer holds for the connection it was given on.  A connection
	 * Redis has closed is replaced here, before the acquire, so that its
	 * successor is checked too.
	 */
	if (claim_checked_prefix != NULL &&
		strcmp(claim_checked_prefix, lf_key_prefix ? lf_key_prefix : "") == 0 &&
		lf_redis_connection_alive() &&
		claim_checked_serial == lf_redis_connection_serial)
		return true;

	owner_identity(id, sizeof(id), &value);
	key = owner_key();
	keys[0] = key;
	args[0] = id;
	args[1] = value;
	r = run_script(SCRIPT_CLAIM, 1, keys, 2, args, lf_command_timeout_ms, false, true, &reply, err);
	if (r == LF_REDIS_INTERRUPTED)
	{
		CHECK_FOR_INTERRUPTS();
		ereport(ERROR,
				errcode(ERRCODE_QUERY_CANCELED),
				errmsg("lease_fence: Redis request interrupted"));
	}
	answered = (r == LF_REDIS_OK);
	if (r == LF_REDIS_OK)
	{
		if (reply->type == REDIS_REPLY_ERROR)
		{
			(void) classify_error_reply(reply, err);
			r = LF_REDIS_UNAVAILABLE;
		}
		else if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
				 reply->element[0]->type != REDIS_REPLY_INTEGER ||
				 reply->element[1]->type != REDIS_REPLY_STRING)
		{
			snprintf(err, sizeof(err), "unexpected reply to the key_prefix owner check");
			r = LF_REDIS_UNAVAILABLE;
		}
		if (r != LF_REDIS_OK)
			freeReplyObject(reply);
	}
	if (r != LF_REDIS_OK)
	{
		/*
		 * Not one byte of the lease was sent: definitely not acquired.  When
		 * the check itself reached Redis, say that it was the check that
		 * failed (a timeout would otherwise read like an unknown lease).
		 */
		char		msg[LF_ERRLEN + 64];

		if (r == LF_REDIS_UNAVAILABLE && !answered)
			snprintf(msg, sizeof(msg), "%s", err);
		else
			snprintf(msg, sizeof(msg), "checking the owner of key_prefix: %s", err);
		report_redis_problem("acquire", resource, msg);
		return false;
	}

	code = reply->element[0]->integer;
	owner = pstrdup(reply->element[1]->str);
	freeReplyObject(reply);

	if (code == 0)
	{
		ereport(WARNING,
				errmsg("lease_fence: key_prefix \"%s\" on this Redis belongs to another database",
					   lf_key_prefix ? lf_key_prefix : ""),
				errdetail("The key \"%s\" names %s; this is %s. Two databases sharing a key_prefix would push each other's generations up.",
						  key, describe_owner(owner), describe_owner(value)),
				errhint("Give each database its own lease_fence.key_prefix. If this database replaces that one (a dump restored into a new cluster), a superuser takes the prefix over with SELECT lease_fence.claim_key_prefix()."));
		return false;
	}
	if (code == 2)
		ereport(LOG,
				errmsg("lease_fence: key_prefix \"%s\" claimed for %s",
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
	char	   *key;
	const char *keys[1];
	const char *args[1];
	redisReply *reply = NULL;
	char		err[LF_ERRLEN];
	LfRedisResult r;
	char	   *old = NULL;

	if (!superuser())
		ereport(ERROR,
				errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				errmsg("permission denied to take over a lease_fence key_prefix"),
				errdetail("Only superusers may call lease_fence.claim_key_prefix()."));

	prepare_scripts();
	owner_identity(id, sizeof(id), &value);
	key = owner_key();
	keys[0] = key;
	args[0] = value;
	r = run_script(SCRIPT_TAKEOVER, 1, keys, 1, args, lf_command_timeout_ms, false, true, &reply, err);
	if (r == LF_REDIS_INTERRUPTED)
		CHECK_FOR_INTERRUPTS();
	if (r == LF_REDIS_OK)
	{
		if (reply->type == REDIS_REPLY_STRING)
			old = pstrdup(reply->str);
		else if (reply->type != REDIS_REPLY_NIL)
		{
			snprintf(err, sizeof(err), "%s",
					 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
			r = LF_REDIS_UNKNOWN;
		}
		freeReplyObject(reply);
	}
	if (r != LF_REDIS_OK)
		ereport(ERROR,
				errcode(ERRCODE_CONNECTION_FAILURE),
				errmsg("could not take over lease_fence.key_prefix \"%s\"",
					   lf_key_prefix ? lf_key_prefix : ""),
				errdetail("%s", err),
				errhint("The key \"%s\" may or may not have changed; running the function again is safe.", key));

	ereport(LOG,
			errmsg("lease_fence: key_prefix \"%s\" taken over by %s",
				   lf_key_prefix ? lf_key_prefix : "", describe_owner(value)),
			old ? errdetail("It belonged to %s.", describe_owner(old))
			: errdetail("It had no owner."));
	remember_claim();
	if (old == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(old));
}

/* ---------------------------------------------------------------------
 * SQL functions
 * ---------------------------------------------------------------------
 */

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

/* Make the transaction's current generation g (transaction scope). */
static void
set_local_generation(int64 g)
{
	char		buf[32];

	snprintf(buf, sizeof(buf), INT64_FORMAT, g);
	(void) set_config_option(LF_GENERATION_GUC, buf,
							 superuser() ? PGC_SUSET : PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/* Build the lease_fence.lease row. */
static Datum
lease_row(FunctionCallInfo fcinfo, const char *status, const char *resource,
		  bool acquired_known, bool acquired, const char *identity,
		  bool have_generation, int64 generation, bool have_validity, int64 validity)
{
	TupleDesc	tupdesc;
	Datum		values[6];
	bool		nulls[6];

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	lf_count_named("acquire", status);
	memset(nulls, 0, sizeof(nulls));
	values[0] = BoolGetDatum(acquired);
	nulls[0] = !acquired_known;
	values[1] = CStringGetTextDatum(status);
	values[2] = CStringGetTextDatum(resource);
	if (identity)
		values[3] = CStringGetTextDatum(identity);
	else
		nulls[3] = true;
	values[4] = Int64GetDatum(generation);
	nulls[4] = !have_generation;
	values[5] = Int64GetDatum(validity);
	nulls[5] = !have_validity;
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/*
 * lease_fence.acquire(resource text, ttl_ms bigint, min_validity_ms bigint
 *					   DEFAULT 0, scope text DEFAULT 'explicit')
 */
Datum
lf_acquire(PG_FUNCTION_ARGS)
{
	char	   *resource = check_resource(fcinfo, 0);
	int64		ttl = check_ttl(fcinfo, 1);
	int64		minv = check_min_validity(fcinfo, 2, ttl);
	LeaseScope	scope = check_scope(fcinfo, 3);
	uint8		random[16];
	char		identity[33];
	int64		generation;
	char		genbuf[32];
	char		ttlbuf[32];
	char		genttl[32];
	char	   *keys[2];
	const char *args[4];
	redisReply *reply = NULL;
	char		err[LF_ERRLEN];
	LfRedisResult r;
	int64		start;
	int64		validity;
	int			i;

	prepare_scripts();
	if (scope == SCOPE_TRANSACTION && !IsTransactionBlock())
		ereport(ERROR,
				errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
				errmsg("a transaction-scoped lease needs a transaction block"),
				errdetail("It would be released as soon as this statement ends."),
				errhint("Use BEGIN first, or scope 'explicit'."));

	if (!pg_strong_random(random, sizeof(random)))
		ereport(ERROR,
				errcode(ERRCODE_INTERNAL_ERROR),
				errmsg("could not generate a random lease identity"));
	for (i = 0; i < 16; i++)
		snprintf(identity + 2 * i, 3, "%02x", random[i]);

	/* once per connection: is key_prefix ours?  (before drawing anything) */
	if (!key_prefix_is_ours(resource))
		PG_RETURN_DATUM(lease_row(fcinfo, "unavailable", resource, true, false,
								  NULL, false, 0, false, 0));

	/* the generation: durable before it leaves the backend */
	generation = lf_draw_generation();
	snprintf(genbuf, sizeof(genbuf), INT64_FORMAT, generation);
	snprintf(ttlbuf, sizeof(ttlbuf), INT64_FORMAT, ttl);
	snprintf(genttl, sizeof(genttl), "%d", lf_gen_key_ttl_s);

	keys[0] = lease_key(resource);
	keys[1] = generation_key(resource);
	args[0] = identity;
	args[1] = ttlbuf;
	args[2] = genbuf;
	args[3] = genttl;

	/* validity is measured from before the request is sent */
	start = lf_now_ms();
	r = run_script(SCRIPT_ACQUIRE, 2, (const char **) keys, 4, args,
				   lf_command_timeout_ms, false, true, &reply, err);
	validity = validity_after(ttl, lf_now_ms() - start);

	if (r == LF_REDIS_INTERRUPTED)
		interrupted(resource, identity, generation, scope, ttl, minv);

	if (r == LF_REDIS_OK && reply->type == REDIS_REPLY_ERROR)
	{
		r = classify_error_reply(reply, err);
		freeReplyObject(reply);
		reply = NULL;
	}

	if (r == LF_REDIS_UNAVAILABLE)
	{
		report_redis_problem("acquire", resource, err);
		PG_RETURN_DATUM(lease_row(fcinfo, "unavailable", resource, true, false,
								  NULL, false, 0, false, 0));
	}
	if (r == LF_REDIS_UNKNOWN)
	{
		LeaseEntry *e;

		report_redis_problem("acquire", resource, err);
		e = add_entry(resource, identity, generation, scope, STATE_UNKNOWN, ttl, minv, 0);
		settle_entry(e, true);
		PG_RETURN_DATUM(lease_row(fcinfo, "unknown", resource, false, false,
								  identity, true, generation, false, 0));
	}

	/* a reply: {code, value} */
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
		reply->element[0]->type != REDIS_REPLY_INTEGER ||
		reply->element[1]->type != REDIS_REPLY_STRING)
	{
		LeaseEntry *e;

		freeReplyObject(reply);
		report_redis_problem("acquire", resource, "unexpected reply to the acquire script");
		e = add_entry(resource, identity, generation, scope, STATE_UNKNOWN, ttl, minv, 0);
		settle_entry(e, true);
		PG_RETURN_DATUM(lease_row(fcinfo, "unknown", resource, false, false,
								  identity, true, generation, false, 0));
	}

	switch (reply->element[0]->integer)
	{
		case 0:
			freeReplyObject(reply);
			PG_RETURN_DATUM(lease_row(fcinfo, "busy", resource, true, false,
									  NULL, false, 0, false, 0));
		case 2:
			{
				int64		stored;
				bool		is_set;
				bool		ok = lf_parse_generation(reply->element[1]->str, &is_set, &stored) && is_set;

				freeReplyObject(reply);
				if (!ok)
					ereport(ERROR,
							errcode(ERRCODE_DATA_CORRUPTED),
							errmsg("lease_fence: the generation key of resource \"%s\" does not hold a generation",
								   resource));
				/* heal: every later generation is above the stored one */
				lf_advance_generation_past(stored);
				PG_RETURN_DATUM(lease_row(fcinfo, "stale", resource, true, false,
										  NULL, false, 0, false, 0));
			}
		case 1:
			break;
		default:
			freeReplyObject(reply);
			elog(ERROR, "lease_fence: unexpected code from the acquire script");
	}
	freeReplyObject(reply);

	if (validity < minv)
	{
		LeaseEntry *e = add_entry(resource, identity, generation, scope, STATE_HELD, ttl, minv, validity);

		settle_entry(e, false);
		PG_RETURN_DATUM(lease_row(fcinfo, "insufficient_validity", resource, true, false,
								  NULL, false, 0, true, validity));
	}

	{
		LeaseEntry *e = add_entry(resource, identity, generation, scope, STATE_HELD, ttl, minv, validity);

		if (scope == SCOPE_TRANSACTION)
		{
			/*
			 * The lease's generation is the transaction's current generation
			 * to its end, whatever savepoints roll back (lease_fence.c); the
			 * SET LOCAL only makes SHOW agree.
			 */
			if (!xact_generation_set || generation > xact_generation)
				xact_generation = generation;
			xact_generation_set = true;
			lf_set_lease_generation(true, xact_generation);
			set_local_generation(generation);

			/*
			 * The lease fences its resource in this transaction, at its own
			 * generation (resource_fence.c): a holder with a newer one has
			 * fenced it already (LF001, and the transaction rolls back,
			 * releasing the lease), or a later holder's acquire waits here
			 * until this transaction ends, so this one never commits after
			 * it.  A fence made in a subtransaction dies with it if that
			 * rolls back, while the lease lives on: it is made again at
			 * commit.
			 */
			e->fenced_in_subxact = GetCurrentTransactionNestLevel() > 1;
			(void) lf_fence_resource_at(resource, generation);
		}
	}

	PG_RETURN_DATUM(lease_row(fcinfo, "acquired", resource, true, true,
							  identity, true, generation, true, validity));
}

/* Build a (boolean, status[, validity]) row. */
static Datum
status_row(FunctionCallInfo fcinfo, const char *operation, bool known, bool value,
		   const char *status, bool with_validity, bool have_validity, int64 validity)
{
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3];

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	lf_count_named(operation, status);
	values[0] = BoolGetDatum(value);
	nulls[0] = !known;
	values[1] = CStringGetTextDatum(status);
	nulls[1] = false;
	if (with_validity)
	{
		values[2] = Int64GetDatum(validity);
		nulls[2] = !have_validity;
	}
	return HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls));
}

/*
 * Run a compare-identity script that answers with an integer (renew,
 * release) on the lease key of resource.  What both share is handled here:
 * an interrupt (recorded as unknown, then raised), Redis error replies,
 * replies of the wrong type, and the WARNING that says why a request was
 * unavailable or unknown.  On LF_REDIS_OK, *value is the script's answer.
 */
static LfRedisResult
run_identity_script(LuaScript *script, const char *operation, const char *resource,
					const char *identity, const char *extra_arg, LeaseEntry *e,
					int64 ttl, int64 minv, long long *value)
{
	const char *keys[1];
	const char *args[2];
	int			nargs = 0;
	redisReply *reply = NULL;
	char		err[LF_ERRLEN];
	LfRedisResult r;

	keys[0] = lease_key(resource);
	args[nargs++] = identity;
	if (extra_arg)
		args[nargs++] = extra_arg;
	r = run_script(script, 1, keys, nargs, args, lf_command_timeout_ms, false, true, &reply, err);
	if (r == LF_REDIS_INTERRUPTED)
		interrupted(resource, identity, e ? e->generation : 0,
					e ? e->scope : SCOPE_EXPLICIT, ttl, minv);
	if (r == LF_REDIS_OK)
	{
		if (reply->type == REDIS_REPLY_INTEGER)
			*value = reply->integer;
		else if (reply->type == REDIS_REPLY_ERROR)
			r = classify_error_reply(reply, err);
		else
		{
			snprintf(err, sizeof(err), "unexpected reply to the %s script", operation);
			r = LF_REDIS_UNKNOWN;
		}
		freeReplyObject(reply);
	}
	if (r != LF_REDIS_OK)
		report_redis_problem(operation, resource, err);
	return r;
}

/*
 * lease_fence.renew(resource text, identity text, ttl_ms bigint,
 *					 min_validity_ms bigint DEFAULT 0)
 */
Datum
lf_renew(PG_FUNCTION_ARGS)
{
	char	   *resource = check_resource(fcinfo, 0);
	char	   *identity = check_identity(fcinfo, 1);
	int64		ttl = check_ttl(fcinfo, 2);
	int64		minv = check_min_validity(fcinfo, 3, ttl);
	char		ttlbuf[32];
	LfRedisResult r;
	long long	answer = 0;
	int64		start;
	int64		validity;
	LeaseEntry *e = find_entry(resource, identity);

	prepare_scripts();
	snprintf(ttlbuf, sizeof(ttlbuf), INT64_FORMAT, ttl);

	start = lf_now_ms();
	r = run_identity_script(SCRIPT_RENEW, "renew", resource, identity, ttlbuf, e, ttl, minv, &answer);
	validity = validity_after(ttl, lf_now_ms() - start);

	if (r == LF_REDIS_UNAVAILABLE)
		PG_RETURN_DATUM(status_row(fcinfo, "renew", true, false, "unavailable", true, false, 0));
	/* unknown: the lease may or may not have been extended; nothing to undo */
	if (r == LF_REDIS_UNKNOWN)
		PG_RETURN_DATUM(status_row(fcinfo, "renew", false, false, "unknown", true, false, 0));

	if (answer != 1)
	{
		if (e && e->state == STATE_HELD)
			e->state = STATE_RELEASED;
		PG_RETURN_DATUM(status_row(fcinfo, "renew", true, false, "lost", true, false, 0));
	}
	if (e)
		e->expires_at = GetCurrentTimestamp() + (validity > 0 ? validity : 0) * 1000;
	if (validity < minv)
		PG_RETURN_DATUM(status_row(fcinfo, "renew", true, false, "insufficient_validity", true, true, validity));
	PG_RETURN_DATUM(status_row(fcinfo, "renew", true, true, "renewed", true, true, validity));
}

/* lease_fence.release(resource text, identity text) */
Datum
lf_release(PG_FUNCTION_ARGS)
{
	char	   *resource = check_resource(fcinfo, 0);
	char	   *identity = check_identity(fcinfo, 1);
	LfRedisResult r;
	long long	answer = 0;
	LeaseEntry *e = find_entry(resource, identity);

	prepare_scripts();
	r = run_identity_script(SCRIPT_RELEASE, "release", resource, identity, NULL, e, 0, 0, &answer);

	if (r == LF_REDIS_UNAVAILABLE)
		PG_RETURN_DATUM(status_row(fcinfo, "release", true, false, "unavailable", false, false, 0));
	if (r == LF_REDIS_UNKNOWN)
	{
		/* retried, bounded, at the end of the transaction */
		if (e)
			e->state = STATE_UNKNOWN;
		else
			add_entry(resource, identity, 0, SCOPE_EXPLICIT, STATE_UNKNOWN, 0, 0, 0);
		PG_RETURN_DATUM(status_row(fcinfo, "release", false, false, "unknown", false, false, 0));
	}

	if (e)
		e->state = STATE_RELEASED;
	if (answer == 1)
		PG_RETURN_DATUM(status_row(fcinfo, "release", true, true, "released", false, false, 0));
	PG_RETURN_DATUM(status_row(fcinfo, "release", true, false, "not_held", false, false, 0));
}

/* lease_fence.session_leases(): the rows of lease_fence.leases */
Datum
lf_session_leases(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	trim_entries(NULL);			/* no expired explicit lease is shown */
	foreach(lc, leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);
		Datum		values[7];
		bool		nulls[7];

		memset(nulls, 0, sizeof(nulls));
		values[0] = CStringGetTextDatum(e->resource);
		values[1] = CStringGetTextDatum(e->identity);
		values[2] = Int64GetDatum(e->generation);
		nulls[2] = (e->generation == 0);	/* a release of another session's lease */
		values[3] = CStringGetTextDatum(scope_names[e->scope]);
		values[4] = CStringGetTextDatum(state_names[e->state]);
		values[5] = TimestampTzGetDatum(e->acquired_at);
		values[6] = TimestampTzGetDatum(e->expires_at);
		nulls[6] = (e->state != STATE_HELD);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ---------------------------------------------------------------------
 * Transaction and session ends
 * ---------------------------------------------------------------------
 */

/*
 * PRE_COMMIT: every transaction-scoped lease must still be ours, with at
 * least min_validity_ms left, or the commit fails with LF010.  One round
 * trip per lease.  A lease acquired in a subtransaction fences its resource
 * again first (LF001 if a newer holder fenced it meanwhile).
 */
static void
verify_at_commit(void)
{
	ListCell   *lc;

	foreach(lc, leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);
		char	   *key;
		const char *keys[1];
		const char *args[1];
		redisReply *reply = NULL;
		char		err[LF_ERRLEN];
		LfRedisResult r;
		int64		start;
		int64		pttl = -3;

		if (e->scope != SCOPE_TRANSACTION || e->state != STATE_HELD)
			continue;
		/* a fence a rolled-back subtransaction took with it: again, first */
		if (e->fenced_in_subxact)
			(void) lf_fence_resource_at(e->resource, e->generation);
		key = lease_key(e->resource);
		keys[0] = key;
		args[0] = e->identity;
		start = lf_now_ms();
		r = run_script(SCRIPT_CHECK, 1, keys, 1, args, lf_command_timeout_ms, false, true, &reply, err);
		if (r == LF_REDIS_INTERRUPTED)
			interrupted(e->resource, e->identity, e->generation, e->scope, e->ttl_ms, e->min_validity_ms);
		if (r == LF_REDIS_OK)
		{
			if (reply->type == REDIS_REPLY_INTEGER)
				pttl = reply->integer;
			else
			{
				snprintf(err, sizeof(err), "%s",
						 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
				r = LF_REDIS_UNKNOWN;
			}
			freeReplyObject(reply);
		}
		pfree(key);

		if (r != LF_REDIS_OK || pttl == -3 || pttl == -2 ||
			(pttl >= 0 && validity_after(pttl, lf_now_ms() - start) < e->min_validity_ms))
			lf_count(LF_C_COMMIT_CHECK_LF010);
		else
			lf_count(LF_C_COMMIT_CHECK_VERIFIED);

		if (r != LF_REDIS_OK)
			ereport(ERROR,
					errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
					errmsg("lease on resource \"%s\" could not be verified at commit", e->resource),
					errdetail("%s", err),
					errhint("The transaction was rolled back because its lease may have been lost."));
		if (pttl == -3 || pttl == -2)
			ereport(ERROR,
					errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
					errmsg("lease on resource \"%s\" was lost before commit", e->resource),
					errdetail("The lease key no longer holds this transaction's identity (generation " INT64_FORMAT ").",
							  e->generation),
					errhint("The transaction was rolled back; acquire the lease again and retry."));
		if (pttl >= 0)
		{
			int64		left = validity_after(pttl, lf_now_ms() - start);

			if (left < e->min_validity_ms)
				ereport(ERROR,
						errcode(ERRCODE_LF_LEASE_LOST_AT_COMMIT),
						errmsg("lease on resource \"%s\" has too little validity left at commit", e->resource),
						errdetail("About " INT64_FORMAT " ms are left; min_validity_ms is " INT64_FORMAT ".",
								  left, e->min_validity_ms),
						errhint("The transaction was rolled back; use a longer ttl_ms or renew before commit."));
		}
	}
}

/*
 * End of transaction: release transaction-scoped leases, and settle leases
 * whose outcome an interrupt left unknown.  Must not throw.
 */
static void
release_at_xact_end(void)
{
	ListCell   *lc;

	foreach(lc, leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if ((e->scope == SCOPE_TRANSACTION && e->state == STATE_HELD) ||
			e->state == STATE_UNKNOWN)
			settle_entry(e, e->state == STATE_UNKNOWN);
	}
	trim_entries(NULL);
}

static void
lease_xact_callback(XactEvent event, void *arg)
{
	if (xact_generation_set &&
		(event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		 event == XACT_EVENT_PREPARE))
	{
		xact_generation_set = false;
		xact_generation = 0;
		lf_set_lease_generation(false, 0);
	}
	if (leases == NIL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			verify_at_commit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			{
				ListCell   *lc;

				foreach(lc, leases)
				{
					LeaseEntry *e = (LeaseEntry *) lfirst(lc);

					if (e->scope == SCOPE_TRANSACTION && e->state == STATE_HELD)
						ereport(ERROR,
								errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
								errmsg("cannot PREPARE a transaction that holds a transaction-scoped lease"));
				}
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			release_at_xact_end();
			break;
		default:
			break;
	}
}

/* Backend exit: release session-scoped leases and settle the unsure ones. */
static void
release_at_exit(int code, Datum arg)
{
	ListCell   *lc;

	foreach(lc, leases)
	{
		LeaseEntry *e = (LeaseEntry *) lfirst(lc);

		if ((e->scope != SCOPE_EXPLICIT && e->state == STATE_HELD) ||
			e->state == STATE_UNKNOWN || e->state == STATE_UNCONFIRMED)
			settle_entry(e, false);
	}
}

/* Called from _PG_init. */
void
lf_lease_init(void)
{
	RegisterXactCallback(lease_xact_callback, NULL);
}
