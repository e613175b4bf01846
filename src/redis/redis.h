/*-------------------------------------------------------------------------
 *
 * redis.h
 *	  The Redis layer (layer 2; its files and the order of their calls:
 *	  docs/design.md, "The layers"): its settings, the TLS transport,
 *	  connections, which server a command goes to, the lease scripts, and
 *	  the one decoder of their replies, which turns every reply into a typed
 *	  answer (LfAnswer).  Nothing above this layer knows the Redis protocol
 *	  (test/layers.sh refuses hiredis there); nothing below it knows Redis
 *	  at all.
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

struct redisReply;

/* room for a reason in a WARNING: never a secret */
#define LF_ERRLEN 256

/* ---------------------------------------------------------------------
 * redis_settings.c: every setting of the layer
 * ---------------------------------------------------------------------
 */

/* where Redis is, and as whom (superuser-only) */
extern char *lf_redis_host;
extern int	lf_redis_port;
extern char *lf_redis_socket;
extern int	lf_redis_db;
extern char *lf_redis_user;
extern char *lf_redis_password_file;

/* how long to wait */
extern int	lf_connect_timeout_ms;
extern int	lf_command_timeout_ms;
extern int	lf_cleanup_timeout_ms;

/* TLS */
typedef enum LfSslMode
{
	LF_SSL_DISABLE,
	LF_SSL_REQUIRE,
	LF_SSL_VERIFY_CA,
	LF_SSL_VERIFY_FULL
} LfSslMode;

extern const struct config_enum_entry lf_sslmode_options[];
extern int	lf_redis_sslmode;
extern char *lf_redis_sslrootcert;
extern char *lf_redis_sslcert;
extern char *lf_redis_sslkey;

/* the topology, and the replicas a grant needs */
extern char *lf_sentinels;
extern char *lf_sentinel_master;
extern char *lf_sentinel_user;
extern char *lf_sentinel_password_file;
extern bool lf_cluster;
extern int	lf_min_replicas;
extern int	lf_replica_timeout_ms;

/* the key layout */
extern char *lf_key_prefix;
extern int	lf_gen_key_ttl_s;

/* a host and port of a sentinel or a cluster node */
#define LF_MAX_SENTINELS 16
typedef struct LfNode
{
	char		host[256];		/* an address or a DNS name (at most 253) */
	int			port;
} LfNode;

extern uint64 lf_redis_settings_version(void);
extern uint64 lf_redis_settings_fingerprint(void);
extern bool lf_parse_host_port(const char *s, size_t len, char *host, size_t hostlen, int *port);
extern int	lf_parse_sentinels(const char *list, LfNode *out);
extern bool lf_read_secret_file(const char *path, const char *setting,
								char *buf, size_t buflen, size_t *len,
								char *err, size_t errlen);
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
 * redis_conn.c: one cached connection per server
 * ---------------------------------------------------------------------
 */

/* what became of one command sent on a connection */
typedef enum LfSendResult
{
	LF_REPLY,					/* a reply arrived (it may be an error reply) */
	LF_NOT_SENT,				/* not one byte of it left this backend */
	LF_NO_REPLY,				/* it may have reached Redis; no reply came */
	LF_SEND_INTERRUPTED,		/* as LF_NO_REPLY, with an interrupt pending */
	LF_SENT_UNREAD				/* LF_DEFER: sent whole; its reply is read later */
} LfSendResult;

/* flags of lf_redis_command and lf_conn_command */
#define LF_FRESH			0x01	/* on a new connection, connect within the timeout */
#define LF_INTERRUPTIBLE	0x02	/* cancel and terminate end the wait */
#define LF_WITHIN			0x04	/* a new connection's connect shares the timeout */
#define LF_SAME_CONN		0x08	/* on the connection of the previous command */
#define LF_SUBSCRIBER		0x10	/* on a new subscription connection (a wait) */
#define LF_DEFER			0x20	/* the release after COMMIT: send, read the reply later */
#define LF_LARGE_REPLY		0x40	/* a reply that grows with the deployment (CLUSTER SLOTS) */

/* one server to talk to */
typedef enum LfEndpointKind
{
	LF_EP_SETTINGS,				/* the server redis_host/port/socket name */
	LF_EP_NODE,					/* a master Sentinel named, or a Cluster node */
	LF_EP_SENTINEL				/* a sentinel of redis_sentinels */
} LfEndpointKind;

typedef struct LfEndpoint
{
	LfEndpointKind kind;
	const char *host;			/* LF_EP_NODE, LF_EP_SENTINEL */
	int			port;
	bool		check_role;		/* a new connection asks ROLE: must be master */
	/* with check_role, an open connection asks ROLE again before a command */
	uint64		role_epoch;		/* ... when its last check was under another */
	int			role_max_age_ms;	/* ... or is older than this (0: no limit) */
} LfEndpoint;

extern LfSendResult lf_conn_command(const LfEndpoint *ep, int argc, const char **argv,
									const size_t *argvlen, int timeout_ms, int flags,
									struct redisReply **reply, char *err);
extern uint64 lf_conn_serial(const LfEndpoint *ep);
extern int	lf_subscriber_wait(int64 deadline);
extern void lf_subscriber_close(void);
extern bool lf_redis_is_error(const struct redisReply *reply, const char *code);
extern int	lf_redis_disconnect_all(void);
extern void lf_redis_read_deferred(int64 deadline);

/*
 * Set by the layer above (lease_registry.c): the deadline of the cleanups
 * of a backend whose termination is pending.  Every wait for Redis ends by
 * it once ProcDiePending is set, interrupts held or not.
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

/* ---------------------------------------------------------------------
 * redis_reply.c: what a script's reply means (scripts/answers.json)
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
								 * holder: also value (the identity), generation */
	LF_ANS_CLAIMED,				/* claim: value */
	LF_ANS_OURS,				/* claim: value */
	LF_ANS_OTHERS,				/* claim: value */
	LF_ANS_TAKEN_OVER,			/* takeover: value, if has_value (else none) */
	LF_ANS_NOSCRIPT,			/* EVALSHA: not run (lf_run_script sends EVAL) */
	LF_ANS_UNAVAILABLE,			/* certainly not applied */
	LF_ANS_UNKNOWN,				/* it may have run; nobody can tell */
	LF_ANS_INTERRUPTED,			/* as unknown, with an interrupt pending */
	LF_ANS_SENT_DEFERRED,		/* LF_DEFER: sent; redis_conn.c reads its reply */
	LF_NUM_ANSWER_OUTCOMES
} LfAnswerOutcome;

/* room for a claim value (a longer one is cut: it is only shown) */
#define LF_VALUELEN 256

typedef struct LfAnswer
{
	LfAnswerOutcome outcome;
	bool		replied;		/* a reply came (error replies included) */
	int64		generation;		/* acquired */
	int64		stored;			/* stale */
	bool		has_pttl;		/* busy, held: pttl_ms is known */
	int64		pttl_ms;
	bool		oversized;		/* corrupt: a key held more than 256 bytes */
	bool		has_value;		/* claimed, ours, others, taken_over */
	char		value[LF_VALUELEN];
	char		err[LF_ERRLEN]; /* why, when it is not the script's own answer */
} LfAnswer;

extern void lf_decode_reply(LfScript script, const struct redisReply *reply, LfAnswer *answer);

/*
 * What a reply may be at most (redis_reply.c): its array elements, all of
 * them counted together, and the bytes held unparsed at once.  A reader
 * made by lf_bounded_reader() refuses a reply beyond its bound as the reply
 * arrives, before anything of it is allocated; bound->oversized then says
 * what was refused (empty: nothing).
 */
typedef struct LfReplyLimits
{
	size_t		bytes;
	long		elements;
} LfReplyLimits;

extern const LfReplyLimits lf_small_reply;	/* every reply but ... */
extern const LfReplyLimits lf_large_reply;	/* ... CLUSTER SLOTS and ROLE */

typedef struct LfReplyBound
{
	const LfReplyLimits *limits;
	long		elements;		/* announced so far in the reply being read */
	char		oversized[96];	/* what was refused; empty: nothing */
} LfReplyBound;

struct redisReader;
extern struct redisReader *lf_bounded_reader(LfReplyBound *bound);
extern bool lf_reader_has_room(struct redisReader *reader, size_t n);
extern void lf_decode_send_result(LfSendResult r, const char *err, LfAnswer *answer);
extern bool lf_parse_canonical_generation(const char *s, size_t len, int64 *value);
extern bool lf_error_code_is(const char *str, const char *code);
extern char *lf_redis_text(char *dst, size_t dstlen, const char *src, size_t srclen);
extern const char *lf_reply_words(const struct redisReply *r, const char *otherwise, char *buf,
								  size_t buflen);
extern bool lf_printable_host(const char *s, size_t len);
extern const char *lf_answer_outcome_name(LfAnswerOutcome o);
extern const char *lf_answer_table_name(LfAnswerOutcome o);
extern const char *lf_script_name(LfScript script);

/* ---------------------------------------------------------------------
 * redis_watch.c: the Sentinel watch's answer (a background worker)
 * ---------------------------------------------------------------------
 */
typedef struct LfWatchAnswer
{
	uint64		epoch;			/* changes whenever the answer does */
	bool		settled;		/* the sentinels agree, no failover under way */
	char		host[256];		/* the master, when settled */
	int			port;
	char		why[LF_ERRLEN];	/* why not settled */
} LfWatchAnswer;

extern bool lf_watch_answer(LfWatchAnswer *out);
extern uint64 lf_watch_epoch(void);
extern void lf_watch_init(void);

/* ---------------------------------------------------------------------
 * redis_topology.c: which server a command goes to (the one the settings
 * name, the master Sentinel names, or the Cluster node of the key's slot)
 * ---------------------------------------------------------------------
 */
extern LfSendResult lf_redis_command(const char *route_key, int argc, const char **argv,
									 const size_t *argvlen, int timeout_ms, int flags,
									 struct redisReply **reply, char *err);
extern uint64 lf_redis_connection_serial(const char *route_key);
extern bool lf_redis_subscribe(const char *channel, int timeout_ms, char *err);
extern bool lf_redis_sharded_pubsub(void);
extern int	lf_wait_replicas(int timeout_ms, int flags, bool *interrupted, char *err);

/* ---------------------------------------------------------------------
 * redis_tls.c: the TLS transport (OpenSSL)
 * ---------------------------------------------------------------------
 */

/* what a non-blocking TLS call waits for before it is called again */
#define LF_WANT_READ	1
#define LF_WANT_WRITE	2

extern bool lf_tls_wanted(void);
extern bool lf_tls_has_client_cert(void);
extern void lf_tls_describe(char *buf, size_t len);
extern void *lf_tls_start(int fd, const char *host, char *err, size_t errlen);
extern int	lf_tls_handshake(void *tls, int *want, char *err, size_t errlen);
extern ssize_t lf_tls_read(void *tls, char *buf, size_t len, int *want, char *err, size_t errlen);
extern ssize_t lf_tls_write(void *tls, const char *buf, size_t len, int *want, char *err, size_t errlen);
extern bool lf_tls_pending(void *tls);
extern bool lf_tls_idle_ok(void *tls);
extern void lf_tls_free(void *tls);

/* ---------------------------------------------------------------------
 * redis_script.c: the scripts, their keys, and what their replies mean
 * ---------------------------------------------------------------------
 */

extern LfAnswerOutcome lf_run_script(LfScript script, int nkeys, const char **keys,
									 int nargs, const char **args, int timeout_ms,
									 int flags, LfAnswer *answer);
extern char *lf_lease_key(const char *resource);
extern char *lf_release_channel(const char *resource);
extern const char *lf_release_publish(void);
extern char *lf_generation_key(const char *resource);
extern char *lf_owner_key(void);
extern void lf_scripts_init(void);

#endif							/* LF_REDIS_H */
