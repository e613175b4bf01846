/*-------------------------------------------------------------------------
 *
 * redis.h
 *	  The Redis layer's public header (layer 2; its files and the order of
 *	  their calls: docs/design.md, "The layers"): what the layers above use.
 *	  A lease script is run by its own typed function (lf_script_*), which
 *	  names the keys, formats the numbers and hands back a typed answer
 *	  (LfAnswer); nothing above this layer builds a request or knows the
 *	  Redis protocol (test/layers.sh refuses hiredis there, and the
 *	  functions of src/redis/internal.h).
 *
 * IDENTIFICATION
 *	  src/redis/redis.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LF_REDIS_H
#define LF_REDIS_H

#include <sys/types.h>
#include <time.h>

#include "utils/guc.h"

/* room for a reason in a WARNING: never a secret */
#define LF_ERRLEN 256

/* ---------------------------------------------------------------------
 * redis_settings.c: the settings the layers above read
 * ---------------------------------------------------------------------
 */

/* where Redis is (superuser-only) */
extern char *lf_redis_host;
extern char *lf_redis_socket;

/* how long to wait */
extern int	lf_connect_timeout_ms;
extern int	lf_command_timeout_ms;
extern int	lf_cleanup_timeout_ms;

/* the replicas a grant needs */
extern int	lf_min_replicas;
extern int	lf_replica_timeout_ms;

/* the key layout */
extern char *lf_key_prefix;
extern int	lf_gen_key_ttl_s;

extern uint64 lf_redis_settings_fingerprint(void);
extern void lf_redis_settings_init(void);

/* Milliseconds on the monotonic clock: every deadline of the layer. */
static inline int64
lf_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------------
 * redis_conn.c and its companions: the connections
 * ---------------------------------------------------------------------
 */

/* how a request may run (LfCall.flags) */
#define LF_FRESH			0x01	/* on a new connection, connect within the timeout */
#define LF_INTERRUPTIBLE	0x02	/* cancel and terminate end the wait */
#define LF_WITHIN			0x04	/* a new connection's connect shares the timeout */
#define LF_DEFER			0x20	/* the release after COMMIT: send, read the reply later */

/*
 * Set by the layer above (the lease registry): the deadline of the
 * cleanups of a backend whose termination is pending.  Every wait for
 * Redis ends by it once ProcDiePending is set, interrupts held or not.
 */
extern int64 (*lf_die_deadline_hook) (void);

/* one open connection, as lease_fence.redis_connections() shows it */
#define LF_KIND_SERVER			"server"	/* redis_host/port/socket */
#define LF_KIND_MASTER			"master"	/* the master the sentinels named */
#define LF_KIND_CLUSTER_NODE	"cluster_node"
#define LF_KIND_SENTINEL		"sentinel"
typedef struct LfConnInfo
{
	char		endpoint[MAXPGPATH];	/* host:port, [v6]:port or a socket path */
	const char *kind;			/* LF_KIND_* */
	bool		tls;
	int64		age_ms;			/* since it was opened */
	uint64		requests;		/* commands sent on it, its setup's included */
} LfConnInfo;

extern int	lf_redis_connections(LfConnInfo **out);
extern int	lf_redis_disconnect(int64 deadline);
extern int	lf_redis_disconnect_all(void);
extern void lf_redis_read_deferred(int64 deadline);
extern int	lf_subscriber_wait(int64 deadline);
extern void lf_subscriber_close(void);

/* ---------------------------------------------------------------------
 * redis_reply.c: what a script's request came to (scripts/answers.json)
 * ---------------------------------------------------------------------
 */
typedef enum LfScript
{
	LF_SCRIPT_ACQUIRE,			/* KEYS lease, gen; ARGV identity, ttl_ms, generation, gen ttl */
	LF_SCRIPT_RENEW,			/* KEYS lease; ARGV identity, ttl_ms */
	LF_SCRIPT_RELEASE,			/* KEYS lease; ARGV identity, PUBLISH or SPUBLISH */
	LF_SCRIPT_CHECK,			/* KEYS lease; ARGV identity */
	LF_SCRIPT_CLAIM,			/* KEYS owner; ARGV owner id, claim value */
	LF_SCRIPT_TAKEOVER,			/* KEYS owner; ARGV claim value */
	LF_SCRIPT_HOLDER,			/* KEYS lease, gen; no ARGV */
	LF_SCRIPT_LEADER,			/* KEYS lease, gen, value; no ARGV */
	LF_SCRIPT_SEIZE,			/* KEYS lease, gen; ARGV identity, ttl_ms, generation, gen ttl */
	LF_SCRIPT_ACQUIRE_FAIR,		/* KEYS lease, gen[, value]; ARGV identity, ttl_ms, generation,
								 * gen ttl, waiter ttl, join, publish[, value] */
	LF_SCRIPT_LEAVE,			/* KEYS lease; ARGV identity, PUBLISH or SPUBLISH */
	LF_SCRIPT_QUEUE,			/* KEYS lease; ARGV how many */
	LF_NUM_SCRIPTS
} LfScript;

/*
 * What a script's request came to: the outcomes of scripts/answers.json
 * (what the caller must do with each is written there), and two of the
 * transport's own.
 */
typedef enum LfAnswerOutcome
{
	LF_ANS_ACQUIRED,			/* acquire: generation */
	LF_ANS_BUSY,				/* acquire: pttl_ms, if has_pttl */
	LF_ANS_STALE,				/* acquire: stored */
	LF_ANS_CORRUPT,				/* acquire: the generation key holds no generation */
	LF_ANS_RENEWED,				/* renew */
	LF_ANS_LOST,				/* renew */
	LF_ANS_RELEASED,			/* release */
	LF_ANS_NOT_HELD,			/* release, check; holder: generation (0: none) */
	LF_ANS_HELD,				/* check: pttl_ms, if has_pttl (else no expiry);
								 * holder, leader: also value (the identity),
								 * generation; leader: election_value */
	LF_ANS_CLAIMED,				/* claim: value */
	LF_ANS_OURS,				/* claim: value */
	LF_ANS_OTHERS,				/* claim: value */
	LF_ANS_TAKEN_OVER,			/* takeover: value, if has_value (else none) */
	LF_ANS_SEIZED,				/* seize: generation; value (the previous
								 * holder's identity), if has_value */
	LF_ANS_LEFT,				/* leave: the waiter left its queue */
	LF_ANS_NOT_QUEUED,			/* leave: it was not queued (granted, or dead) */
	LF_ANS_WAITERS,				/* queue: waiters, n_waiters */
	LF_ANS_NOSCRIPT,			/* EVALSHA: not run (the runner sends EVAL then) */
	LF_ANS_UNAVAILABLE,			/* certainly not applied */
	LF_ANS_UNKNOWN,				/* it may have run; nobody can tell */
	LF_ANS_INTERRUPTED,			/* as unknown, with an interrupt pending */
	LF_ANS_SENT_DEFERRED,		/* LF_DEFER: sent; its reply is read later */
	LF_NUM_ANSWER_OUTCOMES
} LfAnswerOutcome;

/* the most waiters queue() shows: two elements each in a small reply */
#define LF_QUEUE_SHOWN 500

/* one live waiter of a fair queue, as the queue script answers it */
typedef struct LfWaiter
{
	char		identity[65];	/* the script refuses a longer member */
	int64		pttl_ms;		/* what its waiter key has left; -1: no expiry */
} LfWaiter;

/* room for a claim value (a longer one is cut: it is only shown) */
#define LF_VALUELEN 256

/* the longest value of an election's leader, in bytes (leader.lua's bound) */
#define LF_ELECTION_VALUE_MAX 1024

typedef struct LfAnswer
{
	LfAnswerOutcome outcome;
	bool		replied;		/* a reply came (error replies included) */
	int64		generation;		/* acquired */
	int64		stored;			/* stale */
	bool		has_pttl;		/* busy, held: pttl_ms is known */
	int64		pttl_ms;
	int64		position;		/* busy (fair): rank in the queue, 0 the head; -1 not queued */
	int			n_waiters;		/* waiters: how many */
	LfWaiter   *waiters;		/* waiters: palloc'd (the caller's), NULL when none */
	bool		oversized;		/* corrupt: a key held more than 256 bytes */
	bool		has_value;		/* claimed, ours, others, taken_over */
	char		value[LF_VALUELEN];
	bool		has_election_value; /* leader: the leader's value, its bytes as stored */
	int			election_value_len;
	char		election_value[LF_ELECTION_VALUE_MAX + 1];
	char		err[LF_ERRLEN]; /* why, when it is not the script's own answer */
} LfAnswer;

extern const char *lf_answer_outcome_name(LfAnswerOutcome o);

/* ---------------------------------------------------------------------
 * redis_watch.c, redis_topology.c: the Sentinel watch, the replicas
 * ---------------------------------------------------------------------
 */
extern void lf_watch_init(void);
extern int	lf_wait_replicas(int timeout_ms, int flags, bool *interrupted, char *err);

/* ---------------------------------------------------------------------
 * redis_script.c: one typed function per script
 * ---------------------------------------------------------------------
 */

/* How one request to Redis may run: the caller's limits */
typedef struct LfCall
{
	int			timeout_ms;		/* the whole request (the connect too, with LF_WITHIN) */
	int			flags;			/* LF_FRESH, LF_INTERRUPTIBLE, LF_WITHIN, LF_DEFER */
	bool		keepalive_worker;	/* the keep-alive worker's renewals: their own histogram */
} LfCall;

/*
 * Each runs its script on the keys of its resource (or of key_prefix's
 * owner), its numbers formatted here, and returns answer->outcome; what
 * each outcome means, and what the caller must do with it, is
 * scripts/answers.json's.  Nothing they allocate outlives the call.
 */
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
/* acquire with an election's value (NULL: none; the value key is deleted) */
extern LfAnswerOutcome lf_script_campaign(const char *election, const char *identity,
										  int64 ttl_ms, int64 generation, int gen_key_ttl_s,
										  const char *value, const LfCall *call,
										  LfAnswer *answer);
extern LfAnswerOutcome lf_script_leader(const char *election, const LfCall *call,
										LfAnswer *answer);
extern LfAnswerOutcome lf_script_seize(const char *resource, const char *identity,
									   int64 ttl_ms, int64 generation, int gen_key_ttl_s,
									   const LfCall *call, LfAnswer *answer);
/*
 * Fair waiting: an acquire in the order waiters came (join: enter the
 * queue when not granted), the waiter leaving its queue, and the queue.
 */
extern LfAnswerOutcome lf_script_acquire_fair(const char *resource, const char *identity,
											  int64 ttl_ms, int64 generation, int gen_key_ttl_s,
											  int waiter_ttl_ms, bool join, bool campaign,
											  const char *value, const LfCall *call,
											  LfAnswer *answer);
extern LfAnswerOutcome lf_script_leave(const char *resource, const char *identity,
									   const LfCall *call, LfAnswer *answer);
extern LfAnswerOutcome lf_script_queue(const char *resource, const LfCall *call,
									   LfAnswer *answer);
/* the connection the owner key's requests go on; 0: none open */
extern uint64 lf_owner_connection_serial(void);
/* subscribe to resource's release channel (lf_subscriber_wait waits on it) */
extern bool lf_subscribe_release(const char *resource, int timeout_ms, char *err);
/* subscribe to a fair waiter's own channel (a release wakes the head only) */
extern bool lf_subscribe_wake(const char *resource, const char *identity, int timeout_ms,
							  char *err);
extern void lf_scripts_init(void);

#endif							/* LF_REDIS_H */
