/*-------------------------------------------------------------------------
 *
 * internal.h
 *	  The Redis layer's internal header: for the files of src/redis/ only
 *	  (test/layers.sh refuses its functions, and its inclusion, anywhere
 *	  else).  The command senders, the key names, the reply decoding, the
 *	  TLS transport, the topology, and what the connection files share.  What the layers above use is redis.h's.
 *
 * IDENTIFICATION
 *	  src/redis/internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LF_REDIS_INTERNAL_H
#define LF_REDIS_INTERNAL_H

#include "redis/redis.h"

struct redisReply;
struct redisReader;
struct WaitEventSet;

/* ---------------------------------------------------------------------
 * redis_settings.c: the settings only this layer reads
 * ---------------------------------------------------------------------
 */

/* where Redis is, and as whom (superuser-only) */
extern int	lf_redis_port;
extern int	lf_redis_db;
extern char *lf_redis_user;
extern char *lf_redis_password_file;

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

/* the topology */
extern char *lf_sentinels;
extern char *lf_sentinel_master;
extern char *lf_sentinel_user;
extern char *lf_sentinel_password_file;
extern bool lf_cluster;

/* a host and port of a sentinel or a cluster node */
#define LF_MAX_SENTINELS 16
typedef struct LfNode
{
	char		host[256];		/* an address or a DNS name (at most 253) */
	int			port;
} LfNode;

extern uint64 lf_redis_settings_version(void);
extern bool lf_parse_host_port(const char *s, size_t len, char *host, size_t hostlen, int *port);
extern int	lf_parse_sentinels(const char *list, LfNode *out);
extern bool lf_read_secret_file(const char *path, const char *setting,
								char *buf, size_t buflen, size_t *len,
								char *err, size_t errlen);

/* ---------------------------------------------------------------------
 * redis_conn*.c: one cached connection per server
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

/* flags of lf_redis_command and lf_conn_command beyond redis.h's */
#define LF_SAME_CONN		0x08	/* on the connection of the previous command */
#define LF_SUBSCRIBER		0x10	/* on a new subscription connection (a wait) */
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
extern bool lf_redis_is_error(const struct redisReply *reply, const char *code);

/* ---------------------------------------------------------------------
 * redis_reply.c: what a script's reply means (scripts/answers.json)
 * ---------------------------------------------------------------------
 */
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

extern struct redisReader *lf_bounded_reader(LfReplyBound *bound);
extern bool lf_reader_has_room(struct redisReader *reader, size_t n);
extern void lf_decode_send_result(LfSendResult r, const char *err, LfAnswer *answer);
extern bool lf_parse_canonical_generation(const char *s, size_t len, int64 *value);
extern bool lf_error_code_is(const char *str, const char *code);
extern char *lf_redis_text(char *dst, size_t dstlen, const char *src, size_t srclen);
extern const char *lf_reply_words(const struct redisReply *r, const char *otherwise, char *buf,
								  size_t buflen);
extern bool lf_printable_host(const char *s, size_t len);
extern const char *lf_answer_table_name(LfAnswerOutcome o);
extern const char *lf_script_name(LfScript script);

/* ---------------------------------------------------------------------
 * What the connection files share: redis_conn.c (the cache and set-up)
 * calls the other three; redis_subscriber.c (a waiting acquire's
 * subscription) calls redis_deferred.c (the replies read later, and
 * closing) and redis_io.c (socket I/O, the RESP exchange), which calls
 * none of them (no loop: test/layers.sh)
 * ---------------------------------------------------------------------
 */

/* requests sent with LF_DEFER and not yet answered, at most, per connection */
#define LF_MAX_DEFERRED 16

/* the key of a cached connection: every setting that decides the server */
#define LF_CONN_KEYLEN (MAXPGPATH * 6)

/*
 * A connection that answered this recently is used without looking at its
 * socket first (lf_connection_looks_alive): the look is a system call on
 * every command, and what it finds (a Redis that closed the connection,
 * after a restart or a stop) is found as well by the command itself, as
 * "unknown" instead of "unavailable" -- never as a success.
 */
#define LF_RECENT_ANSWER_MS 1000

/* one connection: a cached one, or the subscription */
typedef struct LfConn
{
	char		key[LF_CONN_KEYLEN];	/* hash key: must be first */
	pgsocket	fd;				/* PGINVALID_SOCKET: none */
	void	   *tls;			/* SSL *, or NULL on a plain connection */
	struct redisReader *reader; /* hiredis's reply parser, malloc'd */
	uint64		serial;			/* lf_conn_serial(); 0 while closed */
	uint64		role_epoch;		/* the endpoint's role_epoch at its last ROLE */
	int64		role_checked_at;	/* lf_now_ms() of its last ROLE */
	int64		answered_at;	/* lf_now_ms() of its last reply, 0: none */
	/* for lf_redis_connections(): set when it is opened */
	int64		opened_at;		/* lf_now_ms() when it was opened */
	uint64		requests;		/* commands sent on it since */
	const char *kind;			/* LF_KIND_* */
	char		endpoint[MAXPGPATH];	/* host:port, [v6]:port or a socket path */
	/* requests sent with LF_DEFER whose replies are still to be read */
	int			ndeferred;
	char	   *deferred_key[LF_MAX_DEFERRED];	/* their keys (TopMemoryContext) */
	/*
	 * The last read took less than it could: the socket held nothing more
	 * at that moment (set by a read of a reply, cleared by every send).
	 */
	bool		read_all;
	/* the bound of the reply being read: the reader's privdata */
	LfReplyBound bound;
	/* its wait event set, kept while its socket lives (redis_io.c) */
	struct WaitEventSet *wait_set;	/* NULL: none */
	int			wait_pos;		/* the socket's event in it */
	uint32		wait_events;	/* what it waits for now */
} LfConn;

/* redis_io.c */
extern void lf_close_socket(LfConn *c);
extern void lf_report_oversized(LfConn *c, char *err);
extern int	lf_wait_over(int64 deadline, bool interruptible);
extern int	lf_wait_socket(LfConn *c, int want, int64 deadline, bool interruptible);
extern ssize_t lf_conn_read(LfConn *c, char *buf, size_t len, int *want, char *err);
extern LfSendResult lf_exchange_argv(LfConn *c, int argc, const char **argv,
									 const size_t *argvlen, int64 deadline,
									 bool interruptible, struct redisReply **out,
									 char *err);
extern LfSendResult lf_read_deferred_reply(LfConn *c, int64 deadline, bool interruptible,
										   struct redisReply **out, char *err);
extern LfConn *lf_abandoned_conn(void);
extern void lf_forget_abandoned(void);
extern bool lf_holds_stray_bytes(LfConn *c, bool just_read_all);
extern bool lf_connection_looks_alive(LfConn *c);
extern bool lf_answered_recently(const LfConn *c);

/* redis_deferred.c */
extern void lf_deferred_sent(LfConn *c, const char *key, size_t keylen);
extern int	lf_deferred_total(void);
extern void lf_deferred_at_exit(void);
extern void lf_conn_close(LfConn *c);
extern void lf_close_abandoned(void);
extern bool lf_drain_deferred_by(LfConn *c, int64 deadline, bool interruptible,
								 bool *interrupted);

/* redis_subscriber.c */
extern LfConn *lf_subscriber_conn(void);

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
 * redis_script.c: the key names (the typed functions of redis.h use them)
 * ---------------------------------------------------------------------
 */
extern char *lf_lease_key(const char *resource);
extern char *lf_release_channel(const char *resource);
extern const char *lf_release_publish(void);
extern char *lf_generation_key(const char *resource);
extern char *lf_value_key(const char *resource);
extern char *lf_owner_key(void);

#endif							/* LF_REDIS_INTERNAL_H */
