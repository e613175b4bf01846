/*-------------------------------------------------------------------------
 *
 * redis_script.c
 *	  The Lua scripts of the lease protocol, the Redis keys they work on,
 *	  and one typed function per script that runs it to a typed answer
 *	  (what each reply means is redis_reply.c's, after scripts/answers.json;
 *	  each script's KEYS, ARGV and replies: scripts/README.md).
 *
 * Invariants: every lease operation is one script, so each compare-and-act
 * is atomic inside Redis; the texts are scripts/<name>.lua byte for byte,
 * embedded with their SHA1s (scripts/embed.sh makes src/redis/lua_scripts.h;
 * builds with assertions check the SHA1s at load time); a script goes as
 * EVALSHA, and once more as EVAL only on NOSCRIPT (a definite "not run"),
 * within the same deadline (a deferred release goes as EVAL at once: it
 * cannot be sent again); a reply never outlives the call that read it.
 *
 * IDENTIFICATION
 *	  src/redis/redis_script.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <hiredis/hiredis.h>
#ifdef USE_ASSERT_CHECKING
#include <openssl/sha.h>
#endif

#include "lib/stringinfo.h"
#include "redis/internal.h"
#include "base/stats.h"
#include "utils/builtins.h"

/* generated from scripts/<name>.lua: LF_LUA_<NAME> and LF_LUA_<NAME>_SHA1 */
#include "redis/lua_scripts.h"

/*
 * Generations are compared as decimal strings (shorter is smaller), so no
 * value goes through a Lua double and loses precision above 2^53.
 * KEYS: lease key, generation key.  ARGV: identity, ttl_ms, generation,
 * generation key TTL in seconds (0: none).
 * Returns {1, generation} acquired, {0, PTTL of the lease key} busy (a
 * waiting acquire sleeps at most that long), {2, stored max} stale.
 */
static const char acquire_script[] = LF_LUA_ACQUIRE;

/* KEYS: lease key.  ARGV: identity, ttl_ms.  1 renewed, 0 lost. */
static const char renew_script[] = LF_LUA_RENEW;

/*
 * KEYS: lease key.  ARGV: identity, PUBLISH or SPUBLISH.  1 released, 0 not
 * held.  A release wakes the acquires waiting for the lease: a message (no
 * payload) on the channel <lease key>:released.  redis.pcall: a server or
 * a user that may not publish still releases.
 */
static const char release_script[] = LF_LUA_RELEASE;

/* KEYS: lease key.  ARGV: identity.  PTTL if ours, -3 if not. */
static const char check_script[] = LF_LUA_CHECK;

/*
 * The owner of key_prefix: KEYS: claim key.  ARGV: our owner id
 * ("<system identifier>:<database OID>"), our claim value (the id, ':' and
 * the database name, which is only for people reading it).  Claims the
 * prefix if nobody has.  {2, value} claimed now, {1, value} ours already,
 * {0, value} another database's.
 */
static const char claim_script[] = LF_LUA_CLAIM;

/* KEYS: claim key.  ARGV: our claim value.  The previous value, or nil. */
static const char takeover_script[] = LF_LUA_TAKEOVER;

/*
 * KEYS: lease key, generation key.  No ARGV; only reads.  {1, identity,
 * PTTL, generation or ''} held, {0, generation or ''} not held.
 */
static const char holder_script[] = LF_LUA_HOLDER;

/*
 * KEYS: lease key, generation key, value key.  No ARGV; only reads.  {1,
 * identity, PTTL, generation or '', value or '', 1 if the value key holds
 * this identity's value else 0} led, {0, generation or ''} nobody leads.
 */
static const char leader_script[] = LF_LUA_LEADER;

/*
 * KEYS: lease key, generation key.  ARGV: identity, ttl_ms, generation,
 * generation key TTL.  {1, generation, previous identity or ''} seized,
 * {2, stored} stale.
 */
static const char seize_script[] = LF_LUA_SEIZE;

/*
 * Fair waiting.  acquire_fair: KEYS lease, generation[, value]; ARGV
 * identity, ttl_ms, generation, generation key TTL, waiter TTL in ms, '1'
 * to join the queue ('0' not), PUBLISH or SPUBLISH[, value].  {1,
 * generation} acquired, {0, PTTL, position} busy, {2, stored} stale.
 * leave: KEYS lease; ARGV identity, PUBLISH or SPUBLISH; 1 left, 0 not
 * queued.  queue: KEYS lease; ARGV how many; {identity, PTTL, ...}.
 */
static const char acquire_fair_script[] = LF_LUA_ACQUIRE_FAIR;
static const char leave_script[] = LF_LUA_LEAVE;
static const char queue_script[] = LF_LUA_QUEUE;

typedef struct LuaScript
{
	const char *text;
	const char *sha1;			/* of text: what EVALSHA names it by */
} LuaScript;

/* in LfScript order */
static const LuaScript scripts[LF_NUM_SCRIPTS] = {
	{acquire_script, LF_LUA_ACQUIRE_SHA1},
	{renew_script, LF_LUA_RENEW_SHA1},
	{release_script, LF_LUA_RELEASE_SHA1},
	{check_script, LF_LUA_CHECK_SHA1},
	{claim_script, LF_LUA_CLAIM_SHA1},
	{takeover_script, LF_LUA_TAKEOVER_SHA1},
	{holder_script, LF_LUA_HOLDER_SHA1},
	{leader_script, LF_LUA_LEADER_SHA1},
	{seize_script, LF_LUA_SEIZE_SHA1},
	{acquire_fair_script, LF_LUA_ACQUIRE_FAIR_SHA1},
	{leave_script, LF_LUA_LEAVE_SHA1},
	{queue_script, LF_LUA_QUEUE_SHA1},
};

/*
 * Send one command of a script and decode what it came to into *answer; a
 * reply is freed here, on every path.
 */
static void
send_decoded(LfScript script, const char *route_key, int argc, const char **argv,
			 const size_t *argvlen, int timeout_ms, int flags, LfAnswer *answer)
{
	char		err[LF_ERRLEN];
	redisReply *reply = NULL;
	LfSendResult r;

	err[0] = '\0';
	r = lf_redis_command(route_key, argc, argv, argvlen, timeout_ms, flags, &reply, err);
	if (r != LF_REPLY)
		lf_decode_send_result(r, err, answer);
	else
	{
		lf_decode_reply(script, reply, answer);
		freeReplyObject(reply);
	}
}

/*
 * Run a script: EVALSHA, and EVAL when Redis answers NOSCRIPT.  Both share
 * one deadline, timeout_ms.  *answer is what it came to, decoded by
 * redis_reply.c (scripts/answers.json); the reply itself is freed here, on
 * every path, so no caller ever holds one.  Returns answer->outcome.
 */
static LfAnswerOutcome
run_script(LfScript script, int nkeys, const char **keys,
		   int nargs, const char **args, int timeout_ms, int flags,
		   LfAnswer *answer, int64 start)
{
	const LuaScript *s = &scripts[script];
	const char *argv[16];
	size_t		argvlen[16];
	char		numkeys[12];
	int			argc = 0;
	int			i;

	Assert((size_t) (3 + nkeys + nargs) <= lengthof(argv));
	pg_ltoa(nkeys, numkeys);
	/* a request whose reply is read later cannot be sent again: EVAL */
	argv[argc++] = (flags & LF_DEFER) ? "EVAL" : "EVALSHA";
	argv[argc++] = (flags & LF_DEFER) ? s->text : s->sha1;
	argv[argc++] = numkeys;
	for (i = 0; i < nkeys; i++)
		argv[argc++] = keys[i];
	for (i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	for (i = 0; i < argc; i++)
		argvlen[i] = strlen(argv[i]);

	send_decoded(script, keys[0], argc, argv, argvlen, timeout_ms, flags, answer);
	if (answer->outcome == LF_ANS_NOSCRIPT && !(flags & LF_DEFER) &&
		strcmp(argv[0], "EVALSHA") == 0)
	{
		int			left = timeout_ms - (int) (lf_now_ms() - start);

		if (left <= 0)
		{
			lf_decode_send_result(LF_NOT_SENT, "timed out before the script could be loaded", answer);
			return answer->outcome;
		}
		argv[0] = "EVAL";
		argv[1] = s->text;
		argvlen[0] = 4;
		argvlen[1] = strlen(s->text);
		/* the connection that answered NOSCRIPT is fine: not a fresh one */
		send_decoded(script, keys[0], argc, argv, argvlen, left, flags & ~LF_FRESH, answer);
	}
	/* EVAL answering NOSCRIPT (or a deferred EVAL): nothing ran */
	if (answer->outcome == LF_ANS_NOSCRIPT)
		answer->outcome = LF_ANS_UNAVAILABLE;
	return answer->outcome;
}

/*
 * The histogram (lease_fence.latency) each script's round trips go to: a
 * renew of the keep-alive worker's is a keep-alive renew (a renew in any
 * other background worker, a scheduler's job say, is a renew).
 */
static int
latency_op(LfScript script, bool keepalive_worker)
{
	switch (script)
	{
		case LF_SCRIPT_ACQUIRE:
		case LF_SCRIPT_ACQUIRE_FAIR:
			return LF_LAT_ACQUIRE;
		case LF_SCRIPT_RENEW:
			return keepalive_worker ? LF_LAT_KEEPALIVE_RENEW : LF_LAT_RENEW;
		case LF_SCRIPT_RELEASE:
			return LF_LAT_RELEASE;
		case LF_SCRIPT_CHECK:
			return LF_LAT_COMMIT_CHECK;
		default:
			return -1;
	}
}

/*
 * Run a script (run_script) as call says, timing its round trip for
 * lease_fence.latency when a reply came.
 */
static LfAnswerOutcome
run_timed(LfScript script, int nkeys, const char **keys, int nargs, const char **args,
		  const LfCall *call, LfAnswer *answer)
{
	uint64		start = lf_now_us();
	int			op;

	/* (start in ms is lf_now_ms() then: the same clock) */
	(void) run_script(script, nkeys, keys, nargs, args, call->timeout_ms, call->flags,
					  answer, (int64) (start / 1000));
	op = latency_op(script, call->keepalive_worker);
	if (op >= 0 && answer->replied)
		lf_latency_add((LfLatencyOp_t) op, lf_now_us() - start);
	return answer->outcome;
}

/* ---------------------------------------------------------------------
 * The typed functions: one per script, each naming its keys and
 * formatting its numbers (KEYS and ARGV: the LfScript comments, redis.h)
 * ---------------------------------------------------------------------
 */

/*
 * A script that grants a lease (acquire, seize, acquire_fair): KEYS lease,
 * generation and, for a campaign, value; ARGV identity, ttl_ms,
 * generation, generation key TTL, the script's own (nextra of them: the
 * fair acquire's), and, for a campaign, the value (NULL: none, the value
 * key deleted).
 */
static LfAnswerOutcome
run_grant(LfScript script, const char *resource, const char *identity, int64 ttl_ms,
		  int64 generation, int gen_key_ttl_s, const char *const *extra, int nextra,
		  bool with_value_key, const char *value, const LfCall *call, LfAnswer *answer)
{
	char		ttlbuf[MAXINT8LEN + 1];
	char		genbuf[MAXINT8LEN + 1];
	char		genttl[12];
	const char *keys[3];
	const char *args[8];
	int			nkeys = with_value_key ? 3 : 2;
	int			nargs = 4;
	int			i;

	Assert(nextra <= 3);
	/* (pg_lltoa: printf-style formatting cost more than the rest of the args) */
	pg_lltoa(generation, genbuf);
	pg_lltoa(ttl_ms, ttlbuf);
	pg_ltoa(gen_key_ttl_s, genttl);
	keys[0] = lf_lease_key(resource);
	keys[1] = lf_generation_key(resource);
	if (with_value_key)
		keys[2] = lf_value_key(resource);
	args[0] = identity;
	args[1] = ttlbuf;
	args[2] = genbuf;
	args[3] = genttl;
	for (i = 0; i < nextra; i++)
		args[nargs++] = extra[i];
	if (value)
		args[nargs++] = value;
	(void) run_timed(script, nkeys, keys, nargs, args, call, answer);
	for (i = 0; i < nkeys; i++)
		pfree((char *) keys[i]);
	return answer->outcome;
}

LfAnswerOutcome
lf_script_acquire(const char *resource, const char *identity, int64 ttl_ms,
				  int64 generation, int gen_key_ttl_s, const LfCall *call,
				  LfAnswer *answer)
{
	return run_grant(LF_SCRIPT_ACQUIRE, resource, identity, ttl_ms, generation,
					 gen_key_ttl_s, NULL, 0, false, NULL, call, answer);
}

/*
 * An acquire that also stores an election's value with the grant (the
 * acquire script's third key): value NULL deletes an earlier leader's.
 */
LfAnswerOutcome
lf_script_campaign(const char *election, const char *identity, int64 ttl_ms,
				   int64 generation, int gen_key_ttl_s, const char *value,
				   const LfCall *call, LfAnswer *answer)
{
	return run_grant(LF_SCRIPT_ACQUIRE, election, identity, ttl_ms, generation,
					 gen_key_ttl_s, NULL, 0, true, value, call, answer);
}

LfAnswerOutcome
lf_script_renew(const char *resource, const char *identity, int64 ttl_ms,
				const LfCall *call, LfAnswer *answer)
{
	char		ttlbuf[MAXINT8LEN + 1];
	const char *keys[1];
	const char *args[2];

	pg_lltoa(ttl_ms, ttlbuf);
	keys[0] = lf_lease_key(resource);
	args[0] = identity;
	args[1] = ttlbuf;
	(void) run_timed(LF_SCRIPT_RENEW, 1, keys, 2, args, call, answer);
	pfree((char *) keys[0]);
	return answer->outcome;
}

/*
 * A script on the lease key that may wake waiters (release, leave): ARGV
 * identity, and how it publishes: PUBLISH, or SPUBLISH.
 */
static LfAnswerOutcome
run_waking(LfScript script, const char *resource, const char *identity, const LfCall *call,
		   LfAnswer *answer)
{
	const char *keys[1];
	const char *args[2];

	keys[0] = lf_lease_key(resource);
	args[0] = identity;
	args[1] = lf_release_publish();
	(void) run_timed(script, 1, keys, 2, args, call, answer);
	pfree((char *) keys[0]);
	return answer->outcome;
}

LfAnswerOutcome
lf_script_release(const char *resource, const char *identity, const LfCall *call,
				  LfAnswer *answer)
{
	return run_waking(LF_SCRIPT_RELEASE, resource, identity, call, answer);
}

LfAnswerOutcome
lf_script_check(const char *resource, const char *identity, const LfCall *call,
				LfAnswer *answer)
{
	const char *keys[1];
	const char *args[1];

	keys[0] = lf_lease_key(resource);
	args[0] = identity;
	(void) run_timed(LF_SCRIPT_CHECK, 1, keys, 1, args, call, answer);
	pfree((char *) keys[0]);
	return answer->outcome;
}

LfAnswerOutcome
lf_script_holder(const char *resource, const LfCall *call, LfAnswer *answer)
{
	const char *keys[2];

	keys[0] = lf_lease_key(resource);
	keys[1] = lf_generation_key(resource);
	(void) run_timed(LF_SCRIPT_HOLDER, 2, keys, 0, NULL, call, answer);
	pfree((char *) keys[0]);
	pfree((char *) keys[1]);
	return answer->outcome;
}

LfAnswerOutcome
lf_script_leader(const char *election, const LfCall *call, LfAnswer *answer)
{
	const char *keys[3];
	int			i;

	keys[0] = lf_lease_key(election);
	keys[1] = lf_generation_key(election);
	keys[2] = lf_value_key(election);
	(void) run_timed(LF_SCRIPT_LEADER, 3, keys, 0, NULL, call, answer);
	for (i = 0; i < 3; i++)
		pfree((char *) keys[i]);
	return answer->outcome;
}

LfAnswerOutcome
lf_script_seize(const char *resource, const char *identity, int64 ttl_ms,
				int64 generation, int gen_key_ttl_s, const LfCall *call,
				LfAnswer *answer)
{
	return run_grant(LF_SCRIPT_SEIZE, resource, identity, ttl_ms, generation,
					 gen_key_ttl_s, NULL, 0, false, NULL, call, answer);
}

/*
 * An acquire in the order the resource's waiters came (acquire_fair.lua):
 * join, and this identity enters the queue when it is not granted; a
 * campaign's value as lf_script_campaign's.
 */
LfAnswerOutcome
lf_script_acquire_fair(const char *resource, const char *identity, int64 ttl_ms,
					   int64 generation, int gen_key_ttl_s, int waiter_ttl_ms, bool join,
					   bool campaign, const char *value, const LfCall *call,
					   LfAnswer *answer)
{
	char		wttl[12];
	const char *extra[3];

	pg_ltoa(waiter_ttl_ms, wttl);
	extra[0] = wttl;
	extra[1] = join ? "1" : "0";
	extra[2] = lf_release_publish();
	return run_grant(LF_SCRIPT_ACQUIRE_FAIR, resource, identity, ttl_ms, generation,
					 gen_key_ttl_s, extra, 3, campaign, campaign ? value : NULL, call, answer);
}

/* A waiter leaves its queue; the next one is woken if it was the head. */
LfAnswerOutcome
lf_script_leave(const char *resource, const char *identity, const LfCall *call,
				LfAnswer *answer)
{
	return run_waking(LF_SCRIPT_LEAVE, resource, identity, call, answer);
}

/* The live waiters of resource's queue, at most LF_QUEUE_SHOWN (answer->waiters). */
LfAnswerOutcome
lf_script_queue(const char *resource, const LfCall *call, LfAnswer *answer)
{
	char		n[12];
	const char *keys[1];
	const char *args[1];

	pg_ltoa(LF_QUEUE_SHOWN, n);
	keys[0] = lf_lease_key(resource);
	args[0] = n;
	(void) run_timed(LF_SCRIPT_QUEUE, 1, keys, 1, args, call, answer);
	pfree((char *) keys[0]);
	return answer->outcome;
}

LfAnswerOutcome
lf_script_claim(const char *owner_id, const char *claim_value, const LfCall *call,
				LfAnswer *answer)
{
	const char *keys[1];
	const char *args[2];

	keys[0] = lf_owner_key();
	args[0] = owner_id;
	args[1] = claim_value;
	(void) run_timed(LF_SCRIPT_CLAIM, 1, keys, 2, args, call, answer);
	pfree((char *) keys[0]);
	return answer->outcome;
}

LfAnswerOutcome
lf_script_takeover(const char *claim_value, const LfCall *call, LfAnswer *answer)
{
	const char *keys[1];
	const char *args[1];

	keys[0] = lf_owner_key();
	args[0] = claim_value;
	(void) run_timed(LF_SCRIPT_TAKEOVER, 1, keys, 1, args, call, answer);
	pfree((char *) keys[0]);
	return answer->outcome;
}

/* The serial number of the connection the owner key's requests go on. */
uint64
lf_owner_connection_serial(void)
{
	char	   *key = lf_owner_key();
	uint64		serial = lf_redis_connection_serial(key);

	pfree(key);
	return serial;
}

/* Subscribe to the channel a release of resource publishes on. */
bool
lf_subscribe_release(const char *resource, int timeout_ms, char *err)
{
	char	   *channel = lf_release_channel(resource);
	bool		ok = lf_redis_subscribe(channel, timeout_ms, err);

	pfree(channel);
	return ok;
}

/*
 * Subscribe to a fair waiter's channel, <lease key>:wake:<identity>: a
 * release (or a waiter leaving) wakes only the queue's head.
 */
bool
lf_subscribe_wake(const char *resource, const char *identity, int timeout_ms, char *err)
{
	char	   *key = lf_lease_key(resource);
	char	   *channel = psprintf("%s:wake:%s", key, identity);
	bool		ok = lf_redis_subscribe(channel, timeout_ms, err);

	pfree(channel);
	pfree(key);
	return ok;
}

/* ---------------------------------------------------------------------
 * The key names (internal.h)
 * ---------------------------------------------------------------------
 */

/*
 * The keys of a resource: <key_prefix>{<resource>} and
 * <key_prefix>{<resource>}:gen (an election's value: :value).  Redis Cluster hashes the text between the
 * first '{' and the first '}' after it, so both keys share one slot, unless
 * that text is empty: a resource that starts with '}'.  Such a resource is
 * named by its hexadecimal spelling instead, <key_prefix>{<hex>}#lease and
 * <key_prefix>{<hex>}#gen: the tag is never empty, and no other resource's
 * key can be spelt the same (those end in '}', ':gen' or ':value').  The key_prefix
 * holds no brace (its check hook refuses them), and every other resource
 * keeps the key names of 1.1, so leases held across an upgrade stay valid.
 * The scripts name a lease's fair queue after its lease key (<lease
 * key>:queue, a waiter's key <lease key>:queue:<identity>): one slot too,
 * and no lease, generation or value key ends so.
 */
typedef enum KeyKind
{
	KEY_LEASE,
	KEY_GEN,
	KEY_VALUE
} KeyKind;

static char *
resource_key(const char *resource, KeyKind kind)
{
	static const char *const suffix[] = {"", ":gen", ":value"};
	static const char *const hex_suffix[] = {"}#lease", "}#gen", "}#value"};
	const char *prefix = lf_key_prefix ? lf_key_prefix : "";
	StringInfoData key;

	if (resource[0] != '}')
	{
		/* <prefix>{<resource>}[:gen], without printf: it runs twice per acquire */
		size_t		plen = strlen(prefix);
		size_t		rlen = strlen(resource);
		size_t		slen = strlen(suffix[kind]);
		char	   *k = palloc(plen + rlen + slen + 3);
		char	   *p = k;

		memcpy(p, prefix, plen);
		p += plen;
		*p++ = '{';
		memcpy(p, resource, rlen);
		p += rlen;
		*p++ = '}';
		memcpy(p, suffix[kind], slen);
		p += slen;
		*p = '\0';
		return k;
	}

	initStringInfo(&key);
	appendStringInfo(&key, "%s{", prefix);
	for (; *resource; resource++)
		appendStringInfo(&key, "%02x", (unsigned char) *resource);
	appendStringInfoString(&key, hex_suffix[kind]);
	return key.data;
}

char *
lf_lease_key(const char *resource)
{
	return resource_key(resource, KEY_LEASE);
}

/* An election's value key: the leader's identity, a newline, its value. */
char *
lf_value_key(const char *resource)
{
	return resource_key(resource, KEY_VALUE);
}

/* The channel a release of resource publishes on: <lease key>:released. */
char *
lf_release_channel(const char *resource)
{
	return psprintf("%s:released", resource_key(resource, KEY_LEASE));
}

/* The release script's ARGV[2]: how it publishes. */
const char *
lf_release_publish(void)
{
	return lf_redis_sharded_pubsub() ? "SPUBLISH" : "PUBLISH";
}

char *
lf_generation_key(const char *resource)
{
	return resource_key(resource, KEY_GEN);
}

/*
 * <key_prefix>owner: no brace follows the prefix, so it is never a lease key
 * <key_prefix>{...} or a generation key <key_prefix>{...}:gen.
 */
char *
lf_owner_key(void)
{
	return psprintf("%sowner", lf_key_prefix ? lf_key_prefix : "");
}

/* Called from _PG_init: builds with assertions check the scripts' SHA1s. */
void
lf_scripts_init(void)
{
#ifdef USE_ASSERT_CHECKING
	int			n;

	/* the SHA1 constants belong to the texts */
	for (n = 0; n < LF_NUM_SCRIPTS; n++)
	{
		unsigned char digest[SHA_DIGEST_LENGTH];
		char		hex[2 * SHA_DIGEST_LENGTH + 1];
		int			i;

		SHA1((const unsigned char *) scripts[n].text, strlen(scripts[n].text), digest);
		for (i = 0; i < SHA_DIGEST_LENGTH; i++)
			snprintf(hex + 2 * i, 3, "%02x", digest[i]);
		Assert(strcmp(hex, scripts[n].sha1) == 0);
	}
#endif

}
