/*-------------------------------------------------------------------------
 *
 * script_shim.c
 *	  temporary: replaced by src/redis's typed functions at the merge.
 *
 * The typed script calls (script_shim.h) over today's generic runner,
 * lf_run_script: the keys and arguments built exactly as the lease layer's
 * call sites built them, with the caller's timeout and flags, so that every
 * request is the same on the wire.  A renew of the keep-alive worker
 * (call->keepalive_worker) sets lf_latency_keepalive_worker around the call,
 * so that its round trip goes to the keep-alive renew histogram as before.
 *
 * IDENTIFICATION
 *	  src/lease/script_shim.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "base/stats.h"
#include "lease/script_shim.h"
#include "redis/redis.h"
#include "utils/builtins.h"

/* Run script with the caller's limits; the keep-alive worker's flag around it. */
static LfAnswerOutcome
run(LfScript script, int nkeys, const char **keys, int nargs, const char **args,
	const LfCall *call, LfAnswer *answer)
{
	bool		was = lf_latency_keepalive_worker;
	LfAnswerOutcome r;

	lf_latency_keepalive_worker = call->keepalive_worker;
	r = lf_run_script(script, nkeys, keys, nargs, args, call->timeout_ms, call->flags, answer);
	lf_latency_keepalive_worker = was;
	return r;
}

LfAnswerOutcome
lf_script_acquire(const char *resource, const char *identity, int64 ttl_ms,
				  int64 generation, int gen_key_ttl_s, const LfCall *call, LfAnswer *answer)
{
	char		genbuf[32];
	char		ttlbuf[32];
	char		genttl[32];
	const char *keys[2];
	const char *args[4];
	LfAnswerOutcome r;

	pg_lltoa(generation, genbuf);
	pg_lltoa(ttl_ms, ttlbuf);
	pg_ltoa(gen_key_ttl_s, genttl);
	keys[0] = lf_lease_key(resource);
	keys[1] = lf_generation_key(resource);
	args[0] = identity;
	args[1] = ttlbuf;
	args[2] = genbuf;
	args[3] = genttl;
	r = run(LF_SCRIPT_ACQUIRE, 2, keys, 4, args, call, answer);
	pfree((char *) keys[0]);
	pfree((char *) keys[1]);
	return r;
}

LfAnswerOutcome
lf_script_renew(const char *resource, const char *identity, int64 ttl_ms,
				const LfCall *call, LfAnswer *answer)
{
	char		ttlbuf[32];
	const char *keys[1];
	const char *args[2];
	LfAnswerOutcome r;

	pg_lltoa(ttl_ms, ttlbuf);
	keys[0] = lf_lease_key(resource);
	args[0] = identity;
	args[1] = ttlbuf;
	r = run(LF_SCRIPT_RENEW, 1, keys, 2, args, call, answer);
	pfree((char *) keys[0]);
	return r;
}

LfAnswerOutcome
lf_script_release(const char *resource, const char *identity, const LfCall *call,
				  LfAnswer *answer)
{
	const char *keys[1];
	const char *args[2];
	LfAnswerOutcome r;

	keys[0] = lf_lease_key(resource);
	args[0] = identity;
	args[1] = lf_release_publish();
	r = run(LF_SCRIPT_RELEASE, 1, keys, 2, args, call, answer);
	pfree((char *) keys[0]);
	return r;
}

LfAnswerOutcome
lf_script_check(const char *resource, const char *identity, const LfCall *call,
				LfAnswer *answer)
{
	const char *keys[1];
	const char *args[1];
	LfAnswerOutcome r;

	keys[0] = lf_lease_key(resource);
	args[0] = identity;
	r = run(LF_SCRIPT_CHECK, 1, keys, 1, args, call, answer);
	pfree((char *) keys[0]);
	return r;
}

LfAnswerOutcome
lf_script_holder(const char *resource, const LfCall *call, LfAnswer *answer)
{
	const char *keys[2];
	LfAnswerOutcome r;

	keys[0] = lf_lease_key(resource);
	keys[1] = lf_generation_key(resource);
	r = run(LF_SCRIPT_HOLDER, 2, keys, 0, NULL, call, answer);
	pfree((char *) keys[0]);
	pfree((char *) keys[1]);
	return r;
}

LfAnswerOutcome
lf_script_claim(const char *owner_id, const char *claim_value, const LfCall *call,
				LfAnswer *answer)
{
	const char *keys[1];
	const char *args[2];
	LfAnswerOutcome r;

	keys[0] = lf_owner_key();
	args[0] = owner_id;
	args[1] = claim_value;
	r = run(LF_SCRIPT_CLAIM, 1, keys, 2, args, call, answer);
	pfree((char *) keys[0]);
	return r;
}

LfAnswerOutcome
lf_script_takeover(const char *claim_value, const LfCall *call, LfAnswer *answer)
{
	const char *keys[1];
	const char *args[1];
	LfAnswerOutcome r;

	keys[0] = lf_owner_key();
	args[0] = claim_value;
	r = run(LF_SCRIPT_TAKEOVER, 1, keys, 1, args, call, answer);
	pfree((char *) keys[0]);
	return r;
}

uint64
lf_owner_connection_serial(void)
{
	char	   *key = lf_owner_key();
	uint64		serial = lf_redis_connection_serial(key);

	pfree(key);
	return serial;
}

bool
lf_subscribe_release(const char *resource, int timeout_ms, char *err)
{
	char	   *channel = lf_release_channel(resource);
	bool		ok = lf_redis_subscribe(channel, timeout_ms, err);

	pfree(channel);
	return ok;
}
