/*-------------------------------------------------------------------------
 *
 * lease_fence.h
 *	  Declarations shared by the lease_fence source files.
 *
 * IDENTIFICATION
 *	  src/lease_fence.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LEASE_FENCE_H
#define LEASE_FENCE_H

#include "utils/elog.h"

#include "compat.h"

/* SQLSTATEs of class LF: see README.md */
#define ERRCODE_LF_STALE_GENERATION			MAKE_SQLSTATE('L','F','0','0','1')
#define ERRCODE_LF_MISSING_GENERATION		MAKE_SQLSTATE('L','F','0','0','2')
#define ERRCODE_LF_CONFLICTING_GENERATION	MAKE_SQLSTATE('L','F','0','0','3')
#define ERRCODE_LF_UNISSUED_GENERATION		MAKE_SQLSTATE('L','F','0','0','4')
#define ERRCODE_LF_LEASE_LOST_AT_COMMIT		MAKE_SQLSTATE('L','F','0','1','0')

/* name of the GUC that carries the current generation */
#define LF_GENERATION_GUC "lease_fence.generation"

/* lease_fence.c: the current generation, parsed from the GUC */
extern bool lf_generation_is_set;
extern int64 lf_generation;
extern bool lf_generation_invalid;
extern void lf_check_generation_valid(void);
extern void lf_set_lease_generation(bool is_set, int64 g);

extern void lf_define_generation_guc(void);
extern bool lf_parse_generation(const char *s, bool *is_set, int64 *value);

/* extension.c: the extension's own relations, found through the extension */
typedef enum LfOwnRelation
{
	LF_GENERATION_SEQ,			/* lease_fence.generation_seq */
	LF_RESOURCE_GENERATION,		/* lease_fence.resource_generation */
	LF_PROTECTED,				/* lease_fence.protected */
	LF_NUM_OWN_RELATIONS
} LfOwnRelation;

extern Oid	lf_own_relation(LfOwnRelation which);
extern void lf_extension_init(void);

/* generation.c */
extern int64 lf_draw_generation(void);
extern void lf_heal_generation(int64 stored, const char *resource);
extern void lf_generation_init(void);

/*
 * Issued generations (generation.c).  lf_highest_issued() is the one place
 * that knows what "issued" means; lf_issued_cached is this backend's last
 * reading of it, which only a larger supplied generation makes it refresh.
 */
extern int64 lf_issued_cached;
extern int64 lf_highest_issued(void);
extern bool lf_generation_issued_slow(int64 generation);

/* Was generation ever issued in this database?  Free unless it exceeds the cache. */
static inline bool
lf_generation_issued(int64 generation)
{
	return likely(generation <= lf_issued_cached) || lf_generation_issued_slow(generation);
}

/* resource_fence.c */
extern int64 lf_fence_resource_at(const char *resource, int64 g);

/*
 * stats.c: one counter per outcome.  This list is the one place that names
 * them: the enum below, the (operation, outcome) columns of lease_fence.stats,
 * and, for acquire, renew and release, the status each returns (lease.c).
 */
#define LF_COUNTERS(X) \
	X(ACQUIRE_ACQUIRED, "acquire", "acquired") \
	X(ACQUIRE_BUSY, "acquire", "busy") \
	X(ACQUIRE_STALE, "acquire", "stale") \
	X(ACQUIRE_INSUFFICIENT_VALIDITY, "acquire", "insufficient_validity") \
	X(ACQUIRE_UNAVAILABLE, "acquire", "unavailable") \
	X(ACQUIRE_UNKNOWN, "acquire", "unknown") \
	X(ACQUIRE_UNREPLICATED, "acquire", "unreplicated") \
	X(RENEW_RENEWED, "renew", "renewed") \
	X(RENEW_LOST, "renew", "lost") \
	X(RENEW_INSUFFICIENT_VALIDITY, "renew", "insufficient_validity") \
	X(RENEW_UNAVAILABLE, "renew", "unavailable") \
	X(RENEW_UNKNOWN, "renew", "unknown") \
	X(RELEASE_RELEASED, "release", "released") \
	X(RELEASE_NOT_HELD, "release", "not_held") \
	X(RELEASE_UNAVAILABLE, "release", "unavailable") \
	X(RELEASE_UNKNOWN, "release", "unknown") \
	X(CLEANUP_CONFIRMED, "cleanup", "confirmed") \
	X(CLEANUP_UNCONFIRMED, "cleanup", "unconfirmed") \
	X(CLEANUP_SKIPPED, "cleanup", "skipped") \
	X(COMMIT_CHECK_VERIFIED, "commit_check", "verified") \
	X(COMMIT_CHECK_LF010, "commit_check", "LF010") \
	X(FENCE_ACCEPTED, "fence", "accepted") \
	X(FENCE_LF001, "fence", "LF001") \
	X(FENCE_LF002, "fence", "LF002") \
	X(FENCE_LF003, "fence", "LF003") \
	X(FENCE_LF004, "fence", "LF004") \
	X(FENCE_LF010, "fence", "LF010") \
	X(REPAIR_REPAIRED, "repair", "repaired") \
	X(HEAL_REFUSED, "heal", "refused") \
	X(RESOURCE_FENCE_ACCEPTED, "resource_fence", "accepted") \
	X(RESOURCE_FENCE_LF001, "resource_fence", "LF001") \
	X(RESOURCE_FENCE_LF002, "resource_fence", "LF002") \
	X(RESOURCE_FENCE_LF004, "resource_fence", "LF004") \
	X(CLUSTER_REDIRECT_FOLLOWED, "cluster", "redirect_followed") \
	X(SENTINEL_MASTER_DISCOVERED, "sentinel", "master_discovered") \
	X(WAIT_WAITED, "wait", "waited") \
	X(WAIT_WOKEN, "wait", "woken") \
	X(WAIT_DEADLINE, "wait", "deadline") \
	X(KEEPALIVE_RENEWED, "keepalive", "renewed") \
	X(KEEPALIVE_LOST, "keepalive", "lost") \
	X(KEEPALIVE_UNCONFIRMED, "keepalive", "unconfirmed") \
	X(KEEPALIVE_IDLE_EXPIRED, "keepalive", "idle_expired") \
	X(KEEPALIVE_MAX_REACHED, "keepalive", "max_reached")

typedef enum LfCounter
{
#define LF_COUNTER_ENUM(id, operation, outcome) LF_C_##id,
	LF_COUNTERS(LF_COUNTER_ENUM)
#undef LF_COUNTER_ENUM
	LF_NUM_COUNTERS
} LfCounter;

extern uint64 lf_fence_accepted_pending;
extern void lf_count(LfCounter c);
extern void lf_count_n(LfCounter c, uint64 n);
extern const char *lf_counter_outcome(LfCounter c);
extern void lf_stats_init(void);

/*
 * generation.c: refuse (LF004, counted as c) a supplied generation this
 * database never issued, before anything is written.  target names what was
 * written, capitalised, for the DETAIL: "Table public.t, column \"fence\"",
 * "Resource \"r\"".  On a hot path, test lf_generation_issued() first and
 * build target only when it fails, as the fence trigger does.
 */
LF_NORETURN_BEFORE extern void lf_report_unissued(int64 supplied, LfCounter c, const char *target) LF_NORETURN_AFTER;
extern void lf_check_issued(int64 supplied, LfCounter c, const char *target);

/* each module defines its settings and hooks, called from _PG_init */
extern void lf_redis_conn_init(void);	/* redis_conn.c */
extern void lf_tls_init(void);			/* redis_tls.c */
extern void lf_topology_init(void);		/* redis_topology.c */
extern void lf_scripts_init(void);		/* redis_script.c */
extern void lf_registry_init(void);		/* lease_registry.c */
extern void lf_keepalive_init(void);	/* keepalive.c */

/* keepalive.c: this backend's kept-alive leases, checked by fenced writes */
extern int	lf_keepalive_held;
extern void lf_keepalive_check_write(int64 g);

#endif							/* LEASE_FENCE_H */
