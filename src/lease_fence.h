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

/* generation.c */
extern int64 lf_draw_generation(void);
extern void lf_advance_generation_past(int64 floor);
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

/* redis_conn.c: where Redis is, and how long we wait for it (GUCs) */
extern char *lf_redis_host;
extern int	lf_redis_port;
extern char *lf_redis_socket;
extern int	lf_redis_db;
extern char *lf_redis_user;
extern char *lf_redis_password_file;
extern int	lf_connect_timeout_ms;
extern int	lf_command_timeout_ms;
extern int	lf_cleanup_timeout_ms;

/* the outcome of one Redis request: see redis_conn.c */
typedef enum LfRedisResult
{
	LF_REDIS_OK,
	LF_REDIS_UNAVAILABLE,
	LF_REDIS_UNKNOWN,
	LF_REDIS_INTERRUPTED
} LfRedisResult;

struct redisReply;
extern int64 lf_now_ms(void);
extern LfRedisResult lf_redis_command(int argc, const char **argv, const size_t *argvlen,
									  int timeout_ms, bool fresh, bool interruptible,
									  struct redisReply **reply, char *err, size_t errlen);
extern void lf_redis_disconnect(void);
extern uint64 lf_redis_connection_serial;
extern bool lf_redis_connection_alive(void);

/* stats.c: one counter per outcome (names in stats.c, same order) */
typedef enum LfCounter
{
	LF_C_ACQUIRE_ACQUIRED,
	LF_C_ACQUIRE_BUSY,
	LF_C_ACQUIRE_STALE,
	LF_C_ACQUIRE_INSUFFICIENT_VALIDITY,
	LF_C_ACQUIRE_UNAVAILABLE,
	LF_C_ACQUIRE_UNKNOWN,
	LF_C_RENEW_RENEWED,
	LF_C_RENEW_LOST,
	LF_C_RENEW_INSUFFICIENT_VALIDITY,
	LF_C_RENEW_UNAVAILABLE,
	LF_C_RENEW_UNKNOWN,
	LF_C_RELEASE_RELEASED,
	LF_C_RELEASE_NOT_HELD,
	LF_C_RELEASE_UNAVAILABLE,
	LF_C_RELEASE_UNKNOWN,
	LF_C_CLEANUP_CONFIRMED,
	LF_C_CLEANUP_UNCONFIRMED,
	LF_C_COMMIT_CHECK_VERIFIED,
	LF_C_COMMIT_CHECK_LF010,
	LF_C_FENCE_ACCEPTED,
	LF_C_FENCE_LF001,
	LF_C_FENCE_LF002,
	LF_C_FENCE_LF003,
	LF_C_FENCE_LF004,
	LF_C_REPAIR_REPAIRED,
	LF_C_RESOURCE_FENCE_ACCEPTED,
	LF_C_RESOURCE_FENCE_LF001,
	LF_C_RESOURCE_FENCE_LF002,
	LF_C_RESOURCE_FENCE_LF004,
	LF_NUM_COUNTERS
} LfCounter;

extern uint64 lf_fence_accepted_pending;
extern void lf_count(LfCounter c);
extern void lf_count_n(LfCounter c, uint64 n);
extern void lf_count_named(const char *operation, const char *outcome);
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

/* lease.c */
extern char *lf_key_prefix;
extern int	lf_gen_key_ttl_s;
extern void lf_lease_init(void);

#endif							/* LEASE_FENCE_H */
