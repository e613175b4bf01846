/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  The counters (stats.c): layer 0 (docs/design.md, "The layers"), which
 *	  every other file may call and which calls none of them.
 *
 * IDENTIFICATION
 *	  src/base/stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LF_STATS_H
#define LF_STATS_H

#include <time.h>

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
	X(RENEW_UNREPLICATED, "renew", "unreplicated") \
	X(RELEASE_RELEASED, "release", "released") \
	X(RELEASE_NOT_HELD, "release", "not_held") \
	X(RELEASE_UNAVAILABLE, "release", "unavailable") \
	X(RELEASE_UNKNOWN, "release", "unknown") \
	X(CLEANUP_CONFIRMED, "cleanup", "confirmed") \
	X(CLEANUP_UNCONFIRMED, "cleanup", "unconfirmed") \
	X(CLEANUP_SKIPPED, "cleanup", "skipped") \
	X(COMMIT_CHECK_VERIFIED, "commit_check", "verified") \
	X(COMMIT_CHECK_LF010, "commit_check", "LF010") \
	X(COMMIT_CHECK_LOCAL_VALIDITY, "commit_check", "local_validity") \
	X(FENCE_ACCEPTED, "fence", "accepted") \
	X(FENCE_LF001, "fence", "LF001") \
	X(FENCE_LF002, "fence", "LF002") \
	X(FENCE_LF003, "fence", "LF003") \
	X(FENCE_LF004, "fence", "LF004") \
	X(FENCE_LF010, "fence", "LF010") \
	X(REPAIR_REPAIRED, "repair", "repaired") \
	X(HEAL_REFUSED, "heal", "refused") \
	X(HEAL_MOVED, "heal", "moved") \
	X(RESOURCE_FENCE_ACCEPTED, "resource_fence", "accepted") \
	X(RESOURCE_FENCE_LF001, "resource_fence", "LF001") \
	X(RESOURCE_FENCE_LF002, "resource_fence", "LF002") \
	X(RESOURCE_FENCE_LF004, "resource_fence", "LF004") \
	X(CLUSTER_REDIRECT_FOLLOWED, "cluster", "redirect_followed") \
	X(SENTINEL_MASTER_DISCOVERED, "sentinel", "master_discovered") \
	X(CONNECTION_DESYNCHRONIZED, "connection", "desynchronized") \
	X(CONNECTION_OVERSIZED_REPLY, "connection", "oversized_reply") \
	X(WAIT_WAITED, "wait", "waited") \
	X(WAIT_WOKEN, "wait", "woken") \
	X(WAIT_DEADLINE, "wait", "deadline") \
	X(KEEPALIVE_RENEWED, "keepalive", "renewed") \
	X(KEEPALIVE_LOST, "keepalive", "lost") \
	X(KEEPALIVE_UNCONFIRMED, "keepalive", "unconfirmed") \
	X(KEEPALIVE_IDLE_EXPIRED, "keepalive", "idle_expired") \
	X(KEEPALIVE_MAX_REACHED, "keepalive", "max_reached") \
	X(IDLE_EXPIRY_SESSION_ENDED, "idle_expiry", "session_ended") \
	X(ALL_LEASES_OVERFLOW, "all_leases", "overflow") \
	X(ALL_LEASES_CAPPED, "all_leases", "capped") \
	X(ELECTION_WON, "election", "won") \
	X(TAKEOVER_TAKEN, "takeover", "taken") \
	X(TAKEOVER_TIMEOUT, "takeover", "timeout") \
	X(FAIR_QUEUED, "fair", "queued") \
	X(FAIR_GRANTED, "fair", "granted") \
	X(FAIR_LEFT, "fair", "left") \
	X(CHECKPOINT_WRITTEN, "checkpoint", "written") \
	X(GENERATION_ADOPTED, "generation", "adopted")

typedef enum LfCounter
{
#define LF_COUNTER_ENUM(id, operation, outcome) LF_C_##id,
	LF_COUNTERS(LF_COUNTER_ENUM)
#undef LF_COUNTER_ENUM
	LF_NUM_COUNTERS
} LfCounter;

/* accepted fence writes not yet added to the counter (once per transaction) */
extern uint64 lf_fence_accepted_pending;
extern void lf_count(LfCounter c);
extern void lf_count_n(LfCounter c, uint64 n);
extern const char *lf_counter_outcome(LfCounter c);
extern void lf_stats_init(void);

/*
 * latency.c: the Redis round trips of each operation, a histogram each
 * (lease_fence.latency)
 */
typedef enum LfLatencyOp_t
{
	LF_LAT_ACQUIRE,
	LF_LAT_RENEW,
	LF_LAT_RELEASE,
	LF_LAT_COMMIT_CHECK,
	LF_LAT_KEEPALIVE_RENEW,
	LF_NUM_LATENCY_OPS
} LfLatencyOp_t;

extern void lf_latency_add(LfLatencyOp_t op, uint64 us);
extern void lf_latency_reset(void);
extern void lf_latency_init(void);

/* Microseconds on the monotonic clock: round trips for latency.c. */
static inline uint64
lf_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64) ts.tv_sec * 1000000 + (uint64) ts.tv_nsec / 1000;
}

#endif							/* LF_STATS_H */
