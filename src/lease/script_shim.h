/*-------------------------------------------------------------------------
 *
 * script_shim.h
 *	  Temporary: replaced by src/redis's typed functions at the merge.  The
 *	  typed script calls the lease layer codes against (one function per
 *	  script; the Redis layer names the keys, formats the numbers and picks
 *	  PUBLISH or SPUBLISH), declared here until src/redis/redis.h has them.
 *
 * IDENTIFICATION
 *	  src/lease/script_shim.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LF_SCRIPT_SHIM_H
#define LF_SCRIPT_SHIM_H

#include "redis/redis.h"

/* How one request to Redis may run: the caller's limits */
typedef struct LfCall
{
	int			timeout_ms;		/* the whole request (the connect too, with LF_WITHIN) */
	int			flags;			/* LF_FRESH, LF_INTERRUPTIBLE, LF_WITHIN, LF_DEFER */
	bool		keepalive_worker;	/* the keep-alive worker's renewals: their own histogram */
} LfCall;

extern LfAnswerOutcome lf_script_acquire(const char *resource, const char *identity,
										 int64 ttl_ms, int64 generation, int gen_key_ttl_s,
										 const LfCall *call, LfAnswer *answer);
extern LfAnswerOutcome lf_script_renew(const char *resource, const char *identity,
									   int64 ttl_ms, const LfCall *call, LfAnswer *answer);
extern LfAnswerOutcome lf_script_release(const char *resource, const char *identity,
										 const LfCall *call, LfAnswer *answer);
extern LfAnswerOutcome lf_script_check(const char *resource, const char *identity,
									   const LfCall *call, LfAnswer *answer);
extern LfAnswerOutcome lf_script_holder(const char *resource, const LfCall *call,
										LfAnswer *answer);
extern LfAnswerOutcome lf_script_claim(const char *owner_id, const char *claim_value,
									   const LfCall *call, LfAnswer *answer);
extern LfAnswerOutcome lf_script_takeover(const char *claim_value, const LfCall *call,
										  LfAnswer *answer);
extern uint64 lf_owner_connection_serial(void);
extern bool lf_subscribe_release(const char *resource, int timeout_ms, char *err);

#endif							/* LF_SCRIPT_SHIM_H */
