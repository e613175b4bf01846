/*-------------------------------------------------------------------------
 *
 * redis_topology.c
 *	  Which server each command goes to: the one the settings name
 *	  (standalone), the master the sentinels name (Sentinel), or the node
 *	  that serves the hash slot of the command's first key (Cluster).
 *
 * Sentinel: the master's address is asked of the sentinels in
 * lease_fence.redis_sentinels, in order, the first that answers
 * (SENTINEL get-master-addr-by-name), all within connect_timeout_ms.  A new
 * connection to it must say it is a master (ROLE) before anything of a
 * lease is sent.  The address is asked again after a connect failure, a
 * timeout or lost reply, a READONLY reply, and when it is older than
 * LF_SENTINEL_RECHECK_MS.  A command that was certainly not applied (the
 * connection failed, READONLY) on an address known from before this call is
 * tried once more on the address the sentinels give now.
 *
 * Cluster: redis_host:redis_port, and every node learnt since, only seed
 * the slot map (CLUSTER SLOTS).  Each key's slot is computed here (CRC16 of
 * its hash tag, as Redis does), and its command goes to that slot's master,
 * one cached connection per node.  MOVED updates the slot, marks the map
 * for a refresh, and is followed; ASK is followed with ASKING on the
 * target; TRYAGAIN and CLUSTERDOWN are retried until command_timeout_ms.
 * A redirection is an answer that nothing was applied, so following it
 * never makes an outcome unknown: only a lost reply does.
 *
 * IDENTIFICATION
 *	  src/redis/redis_topology.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <netdb.h>

#include <hiredis/hiredis.h>

#include "miscadmin.h"
#include "redis/internal.h"
#include "base/stats.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

/*
 * Without the Sentinel watch: how long an address the sentinels gave is
 * used before asking again, and how old a master connection's last ROLE
 * answer may be before a command (redis_watch.c says why)
 */
#define LF_SENTINEL_RECHECK_MS 5000
#define LF_ROLE_MAX_AGE_MS 1000
/* redirections followed for one command before giving up */
#define LF_MAX_REDIRECTS 16
/* pause between tries of a command a cluster answered TRYAGAIN or CLUSTERDOWN */
#define LF_CLUSTER_RETRY_MS 20
/* the sentinels and the cluster nodes a backend keeps track of */
#define LF_MAX_NODES 1024
#define LF_SLOTS 16384

/*
 * The master the sentinels named last.  File-scope: the backend's, kept
 * between commands until it is older than LF_SENTINEL_RECHECK_MS or fails.
 */
static struct
{
	bool		known;
	char		host[NI_MAXHOST];
	int			port;
	int64		asked_at;
	uint64		version;		/* lf_redis_settings_version() when asked */
}			master;

/*
 * The cluster: nodes seen, and which serves each slot (index + 1; 0:
 * none).  File-scope: the backend's slot map, kept between commands and
 * refreshed on MOVED or a changed setting.
 */
static struct
{
	LfNode	   *nodes;			/* LF_MAX_NODES of them, in TopMemoryContext */
	int			nnodes;
	uint16	   *slot_node;		/* LF_SLOTS of them */
	bool		map_valid;
	uint64		map_version;	/* lf_redis_settings_version() of the map */
}			cluster;

/* ---------------------------------------------------------------------
 * Sentinel
 * ---------------------------------------------------------------------
 */

static bool
sentinel_mode(void)
{
	return lf_sentinels && lf_sentinels[0] != '\0';
}

/*
 * The deadline of finding the server (asking the sentinels, loading the
 * slot map): connect_timeout_ms, and no later than a request's own
 * deadline when its connect shares its timeout (a cleanup's
 * cleanup_timeout_ms bounds all of it).
 */
static int64
discovery_deadline(int flags, int64 overall)
{
	int64		deadline = lf_now_ms() + lf_connect_timeout_ms;

	if ((flags & (LF_FRESH | LF_WITHIN)) && overall < deadline)
		deadline = overall;
	return deadline;
}

/*
 * Ask the sentinels where the master is: the first that answers, all
 * before deadline.  False with a message in err when none could say.
 * Nothing of a lease has been sent, so an interrupt acts at once.
 */
static bool
ask_sentinels(int flags, int64 deadline, char *err)
{
	LfNode		list[LF_MAX_SENTINELS];
	int			n;
	int			i;
	char		why[LF_ERRLEN];

	master.known = false;
	if (!lf_sentinel_master || lf_sentinel_master[0] == '\0')
	{
		snprintf(err, LF_ERRLEN, "lease_fence.redis_sentinels is set but lease_fence.redis_sentinel_master is not");
		return false;
	}
	n = lf_parse_sentinels(lf_sentinels, list);
	if (n <= 0)
	{
		snprintf(err, LF_ERRLEN, "lease_fence.redis_sentinels names no sentinel");
		return false;
	}
	snprintf(why, sizeof(why), "no time left");
	for (i = 0; i < n; i++)
	{
		LfEndpoint	ep = {LF_EP_SENTINEL, list[i].host, list[i].port, false};
		const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", lf_sentinel_master};
		size_t		lens[3] = {8, 23, strlen(lf_sentinel_master)};
		redisReply *reply;
		int			left = (int) (deadline - lf_now_ms());
		LfSendResult r;

		if (left <= 0)
			break;
		r = lf_conn_command(&ep, 3, argv, lens, left,
							(flags & LF_INTERRUPTIBLE) | LF_WITHIN, &reply, why);
		if (r == LF_SEND_INTERRUPTED)
			CHECK_FOR_INTERRUPTS();
		if (r != LF_REPLY)
			continue;
		if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
			reply->element[0]->type == REDIS_REPLY_STRING &&
			reply->element[1]->type == REDIS_REPLY_STRING)
		{
			char		host[NI_MAXHOST];
			char	   *end;
			long		port = strtol(reply->element[1]->str, &end, 10);
			bool		ok = *end == '\0' && port >= 1 && port <= 65535 &&
				lf_printable_host(reply->element[0]->str, reply->element[0]->len) &&
				strlcpy(host, reply->element[0]->str, sizeof(host)) < sizeof(host);

			freeReplyObject(reply);
			if (!ok)
			{
				snprintf(why, sizeof(why), "sentinel %s:%d gave an address that is not one",
						 list[i].host, list[i].port);
				continue;
			}
			if (strcmp(host, master.host) != 0 || port != master.port)
			{
				lf_count(LF_C_SENTINEL_MASTER_DISCOVERED);
				strlcpy(master.host, host, sizeof(master.host));
				master.port = (int) port;
			}
			master.known = true;
			master.asked_at = lf_now_ms();
			master.version = lf_redis_settings_version();
			return true;
		}
		if (reply->type == REDIS_REPLY_NIL)
			snprintf(why, sizeof(why), "sentinel %s:%d does not monitor a master named \"%s\"",
					 list[i].host, list[i].port, lf_sentinel_master);
		else
		{
			char		words[LF_ERRLEN];

			snprintf(why, sizeof(why), "sentinel %s:%d answered: %s", list[i].host, list[i].port,
					 lf_reply_words(reply, "something unexpected", words, sizeof(words)));
		}
		freeReplyObject(reply);
	}
	snprintf(err, LF_ERRLEN, "no sentinel could name master \"%s\": %s", lf_sentinel_master, why);
	return false;
}

/* Is the master's address to be asked of the sentinels (again)? */
static bool
master_needs_asking(void)
{
	return !master.known || master.version != lf_redis_settings_version() ||
		lf_now_ms() - master.asked_at >= LF_SENTINEL_RECHECK_MS;
}

/*
 * A command for the master, with the Sentinel watch's answer (redis_watch.c):
 * not sent while the master is not settled (a failover under way, the
 * sentinels disagreeing), and a reply that arrives under another answer
 * than the command was sent under is no answer: it may come from a server
 * that is no longer the master (LF_NO_REPLY, an unknown outcome).
 */
static LfSendResult
watched_command(const LfWatchAnswer *w, int argc, const char **argv, const size_t *argvlen,
				int timeout_ms, int flags, redisReply **reply, char *err)
{
	LfEndpoint	ep = {LF_EP_NODE, w->host, w->port, true, w->epoch, 0};
	LfSendResult r;

	*reply = NULL;
	if (!w->settled)
	{
		snprintf(err, LF_ERRLEN, "the Sentinel master \"%s\" is not settled: %s",
				 lf_sentinel_master, w->why);
		return LF_NOT_SENT;
	}
	r = lf_conn_command(&ep, argc, argv, argvlen, timeout_ms, flags, reply, err);
	if (r == LF_REPLY && lf_watch_epoch() != w->epoch)
	{
		freeReplyObject(*reply);
		*reply = NULL;
		snprintf(err, LF_ERRLEN, "the Sentinel master \"%s\" changed while the request was in flight",
				 lf_sentinel_master);
		return LF_NO_REPLY;
	}
	return r;
}

static LfSendResult
sentinel_command(int argc, const char **argv, const size_t *argvlen,
				 int timeout_ms, int flags, redisReply **reply, char *err)
{
	int64		overall = lf_now_ms() + timeout_ms;
	int			attempt;
	LfWatchAnswer w;

	if (lf_watch_answer(&w))
		return watched_command(&w, argc, argv, argvlen, timeout_ms, flags, reply, err);

	*reply = NULL;
	for (attempt = 0;; attempt++)
	{
		bool		asked = false;
		LfEndpoint	ep;
		LfSendResult r;
		int			left = timeout_ms;

		if (master_needs_asking())
		{
			if (!ask_sentinels(flags, discovery_deadline(flags, overall), err))
				return LF_NOT_SENT;
			asked = true;
		}
		ep.kind = LF_EP_NODE;
		ep.host = master.host;
		ep.port = master.port;
		ep.check_role = true;
		ep.role_epoch = 0;
		ep.role_max_age_ms = LF_ROLE_MAX_AGE_MS;
		if ((attempt > 0 || asked) && (flags & (LF_FRESH | LF_WITHIN)))
		{
			left = (int) (overall - lf_now_ms());
			if (left <= 0)
			{
				snprintf(err, LF_ERRLEN, "timed out before the new master could be tried");
				return LF_NOT_SENT;
			}
		}
		r = lf_conn_command(&ep, argc, argv, argvlen, left, flags, reply, err);
		if (r == LF_REPLY && lf_redis_is_error(*reply, "READONLY"))
		{
			/* a master demoted since we asked: certainly not applied */
			master.known = false;
			if (attempt == 0 && !asked)
			{
				freeReplyObject(*reply);
				*reply = NULL;
				continue;
			}
		}
		else if (r == LF_NOT_SENT)
		{
			master.known = false;
			if (attempt == 0 && !asked)
				continue;
		}
		else if (r != LF_REPLY)
			master.known = false;
		return r;
	}
}

/* ---------------------------------------------------------------------
 * Cluster
 * ---------------------------------------------------------------------
 */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster. */
static uint16
crc16(const char *buf, size_t len)
{
	uint16		crc = 0;
	size_t		i;
	int			bit;

	for (i = 0; i < len; i++)
	{
		crc ^= (uint16) ((unsigned char) buf[i]) << 8;
		for (bit = 0; bit < 8; bit++)
			crc = (crc & 0x8000) ? (uint16) ((crc << 1) ^ 0x1021) : (uint16) (crc << 1);
	}
	return crc;
}

/*
 * The hash slot of key: the CRC16 of its hash tag (the text between the
 * first '{' and the first '}' after it, when not empty), else of the key.
 */
static int
key_slot(const char *key)
{
	size_t		len = strlen(key);
	const char *open = memchr(key, '{', len);

	if (open != NULL)
	{
		const char *close = memchr(open + 1, '}', len - (open + 1 - key));

		if (close != NULL && close > open + 1)
			return crc16(open + 1, close - open - 1) & (LF_SLOTS - 1);
	}
	return crc16(key, len) & (LF_SLOTS - 1);
}

/* The index + 1 of node host:port, added if new; 0 when the table is full. */
static int
node_index(const char *host, int port)
{
	int			i;

	if (cluster.nodes == NULL)
	{
		cluster.nodes = MemoryContextAlloc(TopMemoryContext, sizeof(LfNode) * LF_MAX_NODES);
		cluster.slot_node = MemoryContextAllocZero(TopMemoryContext, sizeof(uint16) * LF_SLOTS);
	}
	for (i = 0; i < cluster.nnodes; i++)
		if (cluster.nodes[i].port == port && strcmp(cluster.nodes[i].host, host) == 0)
			return i + 1;
	if (cluster.nnodes == LF_MAX_NODES || strlen(host) >= sizeof(cluster.nodes[0].host))
		return 0;
	strlcpy(cluster.nodes[cluster.nnodes].host, host, sizeof(cluster.nodes[cluster.nnodes].host));
	cluster.nodes[cluster.nnodes].port = port;
	return ++cluster.nnodes;
}

/*
 * Read one CLUSTER SLOTS reply into the slot map.  asked is the node that
 * answered (a node that does not know its own address names it "").
 */
static bool
load_slot_map(const redisReply *reply, const LfNode *asked)
{
	size_t		i;

	if (reply->type != REDIS_REPLY_ARRAY)
		return false;
	memset(cluster.slot_node, 0, sizeof(uint16) * LF_SLOTS);
	for (i = 0; i < reply->elements; i++)
	{
		const redisReply *range = reply->element[i];
		const redisReply *m;
		const char *host;
		long long	lo,
					hi,
					s;
		int			idx;

		if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
			range->element[0]->type != REDIS_REPLY_INTEGER ||
			range->element[1]->type != REDIS_REPLY_INTEGER ||
			range->element[2]->type != REDIS_REPLY_ARRAY ||
			range->element[2]->elements < 2 ||
			range->element[2]->element[0]->type != REDIS_REPLY_STRING ||
			range->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
			return false;
		lo = range->element[0]->integer;
		hi = range->element[1]->integer;
		m = range->element[2];
		if (lo < 0 || hi >= LF_SLOTS || lo > hi)
			return false;
		if (m->element[0]->str[0] != '\0' && strcmp(m->element[0]->str, "?") != 0 &&
			!lf_printable_host(m->element[0]->str, m->element[0]->len))
			return false;
		host = m->element[0]->str[0] != '\0' && strcmp(m->element[0]->str, "?") != 0 ?
			m->element[0]->str : asked->host;
		if (m->element[1]->integer < 1 || m->element[1]->integer > 65535)
			return false;
		idx = node_index(host, (int) m->element[1]->integer);
		if (idx == 0)
			return false;
		for (s = lo; s <= hi; s++)
			cluster.slot_node[s] = (uint16) idx;
	}
	return true;
}

/*
 * Load the slot map from the first node that answers CLUSTER SLOTS: the
 * seed redis_host:redis_port first, then every node seen before (the seed
 * may be the node that failed), all before deadline.
 */
static bool
refresh_slot_map(int flags, int64 deadline, char *err)
{
	const char *seed = lf_redis_host && lf_redis_host[0] ? lf_redis_host : "127.0.0.1";
	char		why[LF_ERRLEN];
	int			seed_idx;
	int			k;

	cluster.map_valid = false;
	seed_idx = node_index(seed, lf_redis_port);
	if (seed_idx == 0)
	{
		snprintf(err, LF_ERRLEN, "too many Redis Cluster nodes (the limit is %d)", LF_MAX_NODES);
		return false;
	}
	snprintf(why, sizeof(why), "no time left");
	for (k = 0; k < cluster.nnodes; k++)
	{
		/* the seed first, then the others in the order they were seen */
		int			i = k == 0 ? seed_idx - 1 : k <= seed_idx - 1 ? k - 1 : k;
		LfNode		asked = cluster.nodes[i];
		LfEndpoint	ep = {LF_EP_NODE, asked.host, asked.port, false};
		const char *argv[2] = {"CLUSTER", "SLOTS"};
		size_t		lens[2] = {7, 5};
		redisReply *reply;
		int			left = (int) (deadline - lf_now_ms());
		LfSendResult r;
		bool		ok;

		if (left <= 0)
			break;
		r = lf_conn_command(&ep, 2, argv, lens, left,
							(flags & LF_INTERRUPTIBLE) | LF_WITHIN | LF_LARGE_REPLY, &reply, why);
		if (r == LF_SEND_INTERRUPTED)
			CHECK_FOR_INTERRUPTS();
		if (r != LF_REPLY)
			continue;
		ok = load_slot_map(reply, &asked);
		if (!ok)
		{
			char		words[LF_ERRLEN];

			snprintf(why, sizeof(why), "%s:%d answered CLUSTER SLOTS with %s", asked.host, asked.port,
					 lf_reply_words(reply, "something unexpected", words, sizeof(words)));
		}
		freeReplyObject(reply);
		if (ok)
		{
			cluster.map_valid = true;
			cluster.map_version = lf_redis_settings_version();
			return true;
		}
	}
	snprintf(err, LF_ERRLEN, "could not load the Redis Cluster slot map: %s", why);
	return false;
}

/*
 * Parse the target of a MOVED or ASK error ("MOVED <slot> <host>:<port>")
 * into a node index.  0 when it does not parse.
 */
static int
redirect_target(const char *str)
{
	const char *p = strchr(str, ' ');
	char		host[NI_MAXHOST];
	int			port;

	if (p == NULL || (p = strchr(p + 1, ' ')) == NULL)
		return 0;
	p++;
	if (!lf_parse_host_port(p, strlen(p), host, sizeof(host), &port))
		return 0;
	return node_index(host, port);
}

/*
 * Sleep ms.  When interruptible, a cancel acts at once: the last answer
 * said nothing ran, so nothing is held.
 */
static void
cluster_pause(int ms, bool interruptible)
{
	int			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   ms, PG_WAIT_EXTENSION);

	if (rc & WL_LATCH_SET)
		ResetLatch(MyLatch);
	if (interruptible)
		CHECK_FOR_INTERRUPTS();
}

/*
 * A try that failed after the cluster answered TRYAGAIN or CLUSTERDOWN:
 * its reason says those answers came first (the deadline is theirs too).
 */
static void
note_tryagains(char *err, int tryagains)
{
	size_t		len = strlen(err);

	if (tryagains > 0 && len < LF_ERRLEN)
		snprintf(err + len, LF_ERRLEN - len, " (after %d TRYAGAIN or CLUSTERDOWN answers)", tryagains);
}

static LfSendResult
cluster_command(const char *route_key, int argc, const char **argv, const size_t *argvlen,
				int timeout_ms, int flags, redisReply **reply, char *err)
{
	int64		deadline = lf_now_ms() + timeout_ms;
	int			slot = key_slot(route_key);
	int			idx;
	bool		asking = false;
	int			redirects = 0;
	int			tries = 0;
	int			tryagains = 0;	/* TRYAGAIN and CLUSTERDOWN answers so far */

	*reply = NULL;
	if (!cluster.map_valid || cluster.map_version != lf_redis_settings_version())
	{
		if (!refresh_slot_map(flags, discovery_deadline(flags, deadline), err))
			return LF_NOT_SENT;
	}
	idx = cluster.slot_node[slot];
	if (idx == 0)
	{
		cluster.map_valid = false;
		snprintf(err, LF_ERRLEN, "no Redis Cluster node serves hash slot %d", slot);
		return LF_NOT_SENT;
	}

	for (;;)
	{
		LfEndpoint	ep = {LF_EP_NODE, cluster.nodes[idx - 1].host, cluster.nodes[idx - 1].port, false};
		int			left = (int) (deadline - lf_now_ms());
		int			cflags = flags;
		LfSendResult r;
		int64		sent_at;
		int64		took;

		if (tries++ == 0 && !(flags & (LF_FRESH | LF_WITHIN)))
			left = timeout_ms;	/* as on one server: the first try has all of it */
		else if (left <= 0)
		{
			snprintf(err, LF_ERRLEN, "timed out before the request could be sent to the Redis Cluster");
			note_tryagains(err, tryagains);
			return LF_NOT_SENT;
		}
		if (asking)
		{
			/* ASKING, then the command, on one connection */
			const char *ask[1] = {"ASKING"};
			size_t		asklen[1] = {6};
			bool		ok;

			r = lf_conn_command(&ep, 1, ask, asklen, left, flags, reply, err);
			if (r == LF_SEND_INTERRUPTED)
				CHECK_FOR_INTERRUPTS();
			if (r != LF_REPLY)
			{
				note_tryagains(err, tryagains);
				return LF_NOT_SENT; /* nothing of the command was sent */
			}
			ok = (*reply)->type == REDIS_REPLY_STATUS;
			if (!ok)
			{
				char		words[LF_ERRLEN];

				snprintf(err, LF_ERRLEN, "ASKING failed: %s",
						 lf_reply_words(*reply, "unexpected reply", words, sizeof(words)));
			}
			freeReplyObject(*reply);
			*reply = NULL;
			if (!ok)
			{
				note_tryagains(err, tryagains);
				return LF_NOT_SENT;
			}
			cflags = (flags & ~LF_FRESH) | LF_SAME_CONN;
		}
		sent_at = lf_now_ms();
		r = lf_conn_command(asking ? NULL : &ep, argc, argv, argvlen, left, cflags, reply, err);
		took = lf_now_ms() - sent_at;
		if (r != LF_REPLY)
		{
			/* a node gone or silent: learn the map again next time */
			cluster.map_valid = false;
			note_tryagains(err, tryagains);
			return r;
		}
		if ((*reply)->type != REDIS_REPLY_ERROR)
			return r;
		if (lf_redis_is_error(*reply, "MOVED") || lf_redis_is_error(*reply, "ASK"))
		{
			int			target = redirect_target((*reply)->str);

			if (target == 0 || redirects++ >= LF_MAX_REDIRECTS)
				return r;
			/* a subscription follows no ASK: the slot is moving */
			if ((*reply)->str[0] == 'A' && (flags & LF_SUBSCRIBER))
				return r;
			lf_count(LF_C_CLUSTER_REDIRECT_FOLLOWED);
			asking = (*reply)->str[0] == 'A';
			if (!asking)
			{
				/* the slot has moved for good: the map is out of date */
				cluster.slot_node[slot] = (uint16) target;
				cluster.map_valid = false;
			}
			idx = target;
			freeReplyObject(*reply);
			*reply = NULL;
			continue;
		}
		if (lf_redis_is_error(*reply, "TRYAGAIN") || lf_redis_is_error(*reply, "CLUSTERDOWN"))
		{
			/*
			 * The same command to the same node (with ASKING again), a little
			 * later, if there is time for its answer: twice what this one
			 * took.  A try sent with less would likely time out, "unknown",
			 * where stopping here is a certain "not applied".
			 */
			if (lf_now_ms() + LF_CLUSTER_RETRY_MS + 2 * took >= deadline)
				return r;
			tryagains++;
			freeReplyObject(*reply);
			*reply = NULL;
			cluster_pause(LF_CLUSTER_RETRY_MS, (flags & LF_INTERRUPTIBLE) != 0);
			continue;
		}
		return r;
	}
}

/* ---------------------------------------------------------------------
 * The entry points
 * ---------------------------------------------------------------------
 */

/* the server the settings name (a constant: not state) */
static const LfEndpoint settings_endpoint = {LF_EP_SETTINGS, NULL, 0, false};

/*
 * Run one command on the server that serves route_key (the command's first
 * key; with LF_SAME_CONN, NULL: the connection of the previous command).
 * What the flags and the result mean: lf_conn_command.
 */
LfSendResult
lf_redis_command(const char *route_key, int argc, const char **argv,
				 const size_t *argvlen, int timeout_ms, int flags,
				 redisReply **reply, char *err)
{
	if (flags & LF_SAME_CONN)
		return lf_conn_command(NULL, argc, argv, argvlen, timeout_ms, flags & ~LF_DEFER, reply, err);
	/* a deferred reply could be a redirect or a demoted master: wait for it */
	if (lf_cluster || sentinel_mode())
		flags &= ~LF_DEFER;
	if (lf_cluster && sentinel_mode())
	{
		*reply = NULL;
		snprintf(err, LF_ERRLEN, "lease_fence.redis_cluster and lease_fence.redis_sentinels cannot both be set");
		return LF_NOT_SENT;
	}
	if (lf_cluster)
		return cluster_command(route_key, argc, argv, argvlen, timeout_ms, flags, reply, err);
	if (sentinel_mode())
		return sentinel_command(argc, argv, argvlen, timeout_ms, flags, reply, err);
	return lf_conn_command(&settings_endpoint, argc, argv, argvlen, timeout_ms, flags, reply, err);
}

/*
 * The serial number of the live cached connection that a command on
 * route_key would use now, or 0 when there is none (or it is not known yet:
 * the command itself will find out).
 */
uint64
lf_redis_connection_serial(const char *route_key)
{
	if (lf_cluster)
	{
		int			idx;

		if (!cluster.map_valid || cluster.map_version != lf_redis_settings_version())
			return 0;
		idx = cluster.slot_node[key_slot(route_key)];
		if (idx == 0)
			return 0;
		{
			LfEndpoint	ep = {LF_EP_NODE, cluster.nodes[idx - 1].host, cluster.nodes[idx - 1].port, false};

			return lf_conn_serial(&ep);
		}
	}
	if (sentinel_mode())
	{
		LfEndpoint	ep = {LF_EP_NODE, master.host, master.port, true, 0, LF_ROLE_MAX_AGE_MS};
		LfWatchAnswer w;

		if (lf_watch_answer(&w))
		{
			LfEndpoint	wep = {LF_EP_NODE, w.host, w.port, true, w.epoch, 0};

			return w.settled ? lf_conn_serial(&wep) : 0;
		}

		/*
		 * Not master_needs_asking(): the periodic re-ask is no reason to
		 * check the claim again.  If it names another master, that one's
		 * connection is new, with a serial of its own.
		 */
		if (!master.known || master.version != lf_redis_settings_version())
			return 0;
		return lf_conn_serial(&ep);
	}
	return lf_conn_serial(&settings_endpoint);
}

/*
 * Subscribe to channel on a new subscription connection to the server that
 * serves the channel's name as a key (its hash tag is the resource's), for
 * a waiting acquire: SSUBSCRIBE on a Redis Cluster, where the release
 * script publishes with SPUBLISH to the shard of the slot; SUBSCRIBE
 * elsewhere.  False with a reason in err when there is no subscription (the
 * wait then polls); an interrupt acts at once (nothing of a lease was sent).
 */
bool
lf_redis_subscribe(const char *channel, int timeout_ms, char *err)
{
	const char *argv[2];
	size_t		lens[2];
	redisReply *reply = NULL;
	LfSendResult r;
	bool		ok;

	argv[0] = lf_cluster ? "SSUBSCRIBE" : "SUBSCRIBE";
	argv[1] = channel;
	lens[0] = strlen(argv[0]);
	lens[1] = strlen(channel);
	r = lf_redis_command(channel, 2, argv, lens, timeout_ms,
						 LF_INTERRUPTIBLE | LF_WITHIN | LF_SUBSCRIBER, &reply, err);
	if (r == LF_SEND_INTERRUPTED)
	{
		lf_subscriber_close();
		CHECK_FOR_INTERRUPTS();
	}
	if (r != LF_REPLY)
	{
		lf_subscriber_close();
		return false;
	}
	ok = reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
		reply->element[0]->type == REDIS_REPLY_STRING &&
		strcasecmp(reply->element[0]->str, argv[0]) == 0;
	if (!ok)
	{
		char		words[LF_ERRLEN];

		snprintf(err, LF_ERRLEN, "%s answered: %s", argv[0],
				 lf_reply_words(reply, "something unexpected", words, sizeof(words)));
	}
	freeReplyObject(reply);
	if (!ok)
		lf_subscriber_close();
	return ok;
}

/* Does the release script publish with SPUBLISH (a Redis Cluster)? */
bool
lf_redis_sharded_pubsub(void)
{
	return lf_cluster;
}

/*
 * After a write: how many replicas acknowledged it (WAIT
 * lease_fence.redis_min_replicas, on the connection the write ran on: WAIT
 * counts the replicas that have its own connection's writes), or -1 when
 * WAIT gave no answer (err says why; *interrupted when an interrupt that
 * ends a wait is pending, for the caller to act on).  All of it within
 * timeout_ms; WAIT itself waits replica_timeout_ms at most.
 */
int
lf_wait_replicas(int timeout_ms, int flags, bool *interrupted, char *err)
{
	char		want[16];
	char		timeout[16];
	const char *argv[3] = {"WAIT", want, timeout};
	size_t		lens[3];
	redisReply *reply = NULL;
	LfSendResult r;
	int			acked = -1;

	pg_ltoa(lf_min_replicas, want);
	pg_ltoa(Max(1, Min(lf_replica_timeout_ms, timeout_ms - lf_command_timeout_ms)), timeout);
	lens[0] = 4;
	lens[1] = strlen(want);
	lens[2] = strlen(timeout);
	r = lf_redis_command(NULL, 3, argv, lens, timeout_ms, flags | LF_SAME_CONN, &reply, err);
	*interrupted = r == LF_SEND_INTERRUPTED;
	if (r == LF_REPLY)
	{
		if (reply->type == REDIS_REPLY_INTEGER)
			acked = reply->integer > INT_MAX ? INT_MAX : (int) reply->integer;
		else
		{
			char		words[LF_ERRLEN];

			snprintf(err, LF_ERRLEN, "WAIT answered: %s",
					 lf_reply_words(reply, "something unexpected", words, sizeof(words)));
		}
		freeReplyObject(reply);
	}
	return acked;
}
