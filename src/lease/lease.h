/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  The lease layer's public header: what the module's entry
 *	  (src/lease_fence.c) and the keep-alive worker's start need, and the
 *	  validity arithmetic.  Everything the layer's own files share is
 *	  src/lease/internal.h's.
 *
 * IDENTIFICATION
 *	  src/lease/lease.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LF_LEASE_H
#define LF_LEASE_H

#include "fmgr.h"

/* what _PG_init (src/lease_fence.c) calls: the layer's set-up */
extern void lf_registry_init(void);
extern void lf_keepalive_init(void);
extern void lf_table_init(void);

/* keepalive_worker.c: the background worker (lease_fence keepalive) */
PGDLLEXPORT void lf_keepalive_main(Datum arg);

/*
 * Validity left after a request that took elapsed ms, for a lease of ttl
 * ms: ttl - elapsed - drift, with drift = 1% of ttl + 2 ms (as Redlock
 * clients allow for clock drift between this host and Redis).
 */
static inline int64
lf_validity_after(int64 ttl, int64 elapsed)
{
	return ttl - elapsed - (ttl / 100 + 2);
}

#endif							/* LF_LEASE_H */
