/*-------------------------------------------------------------------------
 *
 * acquire.c
 *	  One attempt to acquire a lease: a new identity, the owner check, a
 *	  generation, the acquire script, and what its answer comes to.
 *
 * Invariants: an outcome that cannot be known is never reported as "not
 * acquired": after an unknown acquire a bounded conditional release with
 * the same identity runs at once on a fresh connection, and the lease is
 * recorded as "unconfirmed" when that is not confirmed.  The generation is
 * durable before it leaves the backend; a grant is reported held only
 * with the generation it was sent.
 *
 * IDENTIFICATION
 *	  src/lease/acquire.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence/fence.h"
#include "lease/internal.h"
#include "miscadmin.h"

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

void
lf_new_identity(char *identity)
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
acquire_unknown(FunctionCallInfo fcinfo, LfRequest *req, const char *resource,
				const char *identity, int64 generation, LeaseScope scope, int64 ttl,
				int64 minv, const char *err, bool *released)
{
	LfOutcome	o = {LF_C_ACQUIRE_UNKNOWN, resource, identity, true, generation};
	LeaseEntry *e;

	lf_request_problem(req, "acquire", resource, err);
	e = lf_add_lease(resource, identity, generation, scope, STATE_UNKNOWN, ttl, minv, 0);
	lf_request_settle(req, e, true);
	*released = e->state == STATE_RELEASED;
	return lf_outcome_row(fcinfo, req, &o);
}

/*
 * A grant fewer replicas than lease_fence.redis_min_replicas acknowledged:
 * a failover could lose it, so it is never reported as held.  It is
 * released at once (on a fresh connection when WAIT lost its own): status
 * unreplicated when that is confirmed, unknown when it is not.
 */
static Datum
acquire_unreplicated(FunctionCallInfo fcinfo, LfRequest *req, const char *resource,
					 const char *identity, int64 generation, LeaseScope scope, int64 ttl,
					 int64 minv, int acked, const char *err, bool *released)
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
				errmsg("acquire of resource \"%s\": %s; releasing it", resource, shown),
				shown != why ? errdetail_log("The full text: %s", why) : 0);
	}
	e = lf_add_lease(resource, identity, generation, scope, STATE_HELD, ttl, minv, 0);
	lf_request_settle(req, e, acked < 0);
	/* (the release's own WARNING, if any, comes first; the row says why it was needed) */
	lf_request_reason(req, why);
	*released = e->state == STATE_RELEASED;
	if (e->state == STATE_RELEASED)
		return lf_status_row(fcinfo, req, LF_C_ACQUIRE_UNREPLICATED, resource);
	{
		LfOutcome	o = {LF_C_ACQUIRE_UNKNOWN, resource, identity, true, generation};

		return lf_outcome_row(fcinfo, req, &o);
	}
}

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
 *
 * A fair acquire (a->fair) asks under the wait's identity, joins the queue
 * when a->join, and a busy answer leaves its rank in req->fair_position.
 */
LfCounter
lf_acquire_once(FunctionCallInfo fcinfo, LfRequest *req, const AcquireArgs *a, int64 *spare,
				int64 *pttl, Datum *row, bool *retry)
{
	const char *resource = a->resource;
	int64		ttl = a->ttl;
	int64		minv = a->minv;
	LeaseScope	scope = a->scope;
	char		identity[33];
	int64		generation;
	LfCall		call;
	LfAnswer	ans;
	char		err[LF_ERRLEN];
	int64		start;
	int64		validity;
	LeaseEntry *e;

	/* a fair wait asks under one identity: its place in the queue */
	if (a->fair && a->fair_identity[0] != '\0')
		strlcpy(identity, a->fair_identity, sizeof(identity));
	else
		lf_new_identity(identity);
	*retry = false;
	req->fair_position = -1;

	/* once per connection: is key_prefix ours?  (before drawing anything) */
	if (!lf_key_prefix_is_ours(req, resource, WARNING))
	{
		*row = lf_status_row(fcinfo, req, LF_C_ACQUIRE_UNAVAILABLE, resource);
		*retry = true;
		return LF_C_ACQUIRE_UNAVAILABLE;
	}

	/* the generation: durable before it leaves the backend */
	generation = *spare != 0 ? *spare : lf_draw_generation();
	*spare = 0;

	/* validity is measured from before the request is sent */
	call = lf_request_call(req, lf_command_timeout_ms);
	start = lf_now_ms();
	if (a->fair)
		lf_script_acquire_fair(resource, identity, ttl, generation, lf_gen_key_ttl_s,
							   lf_fair_waiter_ttl_ms, a->join, a->campaign, a->election_value,
							   &call, &ans);
	else if (a->campaign)
		lf_script_campaign(resource, identity, ttl, generation, lf_gen_key_ttl_s,
						   a->election_value, &call, &ans);
	else
		lf_script_acquire(resource, identity, ttl, generation, lf_gen_key_ttl_s, &call, &ans);
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
		case LF_ANS_NOSCRIPT:	/* (the Redis layer never answers it) */
		case LF_ANS_SENT_DEFERRED:
			lf_request_problem(req, "acquire", resource, ans.err);
			*row = lf_status_row(fcinfo, req, LF_C_ACQUIRE_UNAVAILABLE, resource);
			*retry = true;
			return LF_C_ACQUIRE_UNAVAILABLE;
		case LF_ANS_STALE:
			/* heal: every later generation is above the stored one (bounded) */
			lf_heal_generation(ans.stored, resource);
			return LF_C_ACQUIRE_STALE;
		case LF_ANS_CORRUPT:
			lf_count(LF_C_HEAL_REFUSED);
			lf_report_corrupt_generation_key(resource, ans.oversized);
			break;
		case LF_ANS_BUSY:
			*pttl = ans.has_pttl ? ans.pttl_ms : -1;
			*spare = generation;
			if (a->fair)
				req->fair_position = ans.position;
			return LF_C_ACQUIRE_BUSY;
		default:
			/* unknown, and every answer the acquire script never gives */
			*row = acquire_unknown(fcinfo, req, resource, identity, generation, scope,
								   ttl, minv, ans.err, retry);
			return LF_C_ACQUIRE_UNKNOWN;
	}

	if (lf_min_replicas > 0)
	{
		int			acked = lf_request_replicas(req, resource, identity, generation, scope,
												ttl, minv, err);

		if (acked < lf_min_replicas)
		{
			*row = acquire_unreplicated(fcinfo, req, resource, identity, generation,
										scope, ttl, minv, acked, err, retry);
			return LF_C_ACQUIRE_UNREPLICATED;
		}
		/* the lease is held from when it was asked for: WAIT took some of it */
		validity = lf_validity_after(ttl, lf_now_ms() - start);
	}

	/* (the grant took a fair waiter's entry out of its queue) */
	if (a->fair)
		lf_fair_granted();
	e = lf_add_lease(resource, identity, generation, scope, STATE_HELD, ttl, minv, validity);
	if (validity < minv)
	{
		LfOutcome	o = {LF_C_ACQUIRE_INSUFFICIENT_VALIDITY, resource, NULL, false, 0, true, validity};

		lf_request_settle(req, e, false);
		*row = lf_outcome_row(fcinfo, req, &o);
		return LF_C_ACQUIRE_INSUFFICIENT_VALIDITY;
	}
	if (a->keepalive && lf_keepalive_start(e, start, validity))
		lf_update_write_check();	/* its fenced writes are checked from now on */
	else if (a->keepalive)
	{
		lf_request_settle(req, e, false);
		ereport(ERROR,
				errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				errmsg("too many kept-alive leases"),
				errdetail("At most %d leases can be kept alive at once; the lease on resource \"%s\" was released again.",
						  LF_KEEPALIVE_SLOTS, e->resource));
	}
	if (scope == SCOPE_TRANSACTION)
		lf_hold_in_transaction(e);

	req->granted = e;
	{
		LfOutcome	o = {LF_C_ACQUIRE_ACQUIRED, resource, identity, true, generation, true, validity};

		*row = lf_outcome_row(fcinfo, req, &o);
	}
	return LF_C_ACQUIRE_ACQUIRED;
}

/* a waiter that could not subscribe polls: 10 ms, doubling, to this */
