/*-------------------------------------------------------------------------
 *
 * redis_watch.c
 *	  The Sentinel watch: a background worker that asks every sentinel,
 *	  every LF_WATCH_POLL_MS, which server is the master and whether a
 *	  failover is under way, and publishes one answer in shared memory for
 *	  every backend (and the keep-alive worker) to use before each request.
 *
 * Invariants: the master is published only while it is settled (every
 * sentinel that answered names the same address, none reports it down or
 * a failover under way); each change of the answer bumps its epoch; a
 * session whose Sentinel settings differ from the worker's (the published
 * fingerprint), or that finds no fresh answer (LF_WATCH_STALE_MS), asks the
 * sentinels itself.  Why, and what each request does with the epoch:
 * docs/guides/redis-deployments.md, "Sentinel".
 *
 * IDENTIFICATION
 *	  src/redis/redis_watch.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <netdb.h>

#include <hiredis/hiredis.h>

#include "miscadmin.h"
#include "port/atomics.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "redis/internal.h"
#include "base/stats.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

PGDLLEXPORT void lf_watch_main(Datum arg);

/* how often the worker asks the sentinels */
#define LF_WATCH_POLL_MS 50
/* how long one sentinel may take to answer */
#define LF_WATCH_ANSWER_MS 250
/* an answer older than this is the worker's no more: backends ask themselves */
#define LF_WATCH_STALE_MS 1000

typedef struct WatchShared
{
	slock_t		mutex;			/* protects the fields below */
	uint64		fingerprint;	/* of the worker's Sentinel settings; 0: none */
	uint64		epoch;			/* bumped whenever the answer changes */
	bool		settled;
	char		host[NI_MAXHOST];
	int			port;
	int64		updated_at;		/* lf_now_ms() of the last poll */
	char		why[LF_ERRLEN];	/* when not settled: why not */
} WatchShared;

/* the answer in shared memory.  File-scope: attached once per process */
static WatchShared *watch = NULL;

/* the hooks chained before ours.  File-scope: PostgreSQL's hook protocol */
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
watch_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(WatchShared)));
}

static void
watch_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	watch = ShmemInitStruct("lease_fence sentinel watch", sizeof(WatchShared), &found);
	if (!found)
	{
		memset(watch, 0, sizeof(WatchShared));
		SpinLockInit(&watch->mutex);
		watch->epoch = 1;
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * A fingerprint of the settings the watch answers for: the sentinels and
 * the master's name.
 */
static uint64
sentinel_fingerprint(void)
{
	uint64		h = UINT64CONST(14695981039346656037);	/* FNV-1a */
	const char *parts[2] = {lf_sentinels, lf_sentinel_master};
	int			i;

	for (i = 0; i < 2; i++)
	{
		const char *p;

		for (p = parts[i] ? parts[i] : ""; *p; p++)
			h = (h ^ (unsigned char) *p) * UINT64CONST(1099511628211);
		h = (h ^ 0xff) * UINT64CONST(1099511628211);
	}
	return h == 0 ? 1 : h;
}

/*
 * The watch's answer, for this session's Sentinel settings: true when the
 * worker runs, watches the same sentinels and master, and answered lately;
 * then *out is its answer.  False: ask the sentinels yourself.
 */
bool
lf_watch_answer(LfWatchAnswer *out)
{
	uint64		mine;
	bool		ours;

	if (watch == NULL)
		return false;
	mine = sentinel_fingerprint();
	SpinLockAcquire(&watch->mutex);
	ours = watch->fingerprint == mine && lf_now_ms() - watch->updated_at < LF_WATCH_STALE_MS;
	if (ours)
	{
		out->epoch = watch->epoch;
		out->settled = watch->settled;
		strlcpy(out->host, watch->host, sizeof(out->host));
		out->port = watch->port;
		strlcpy(out->why, watch->why, sizeof(out->why));
	}
	SpinLockRelease(&watch->mutex);
	return ours;
}

/* The epoch of the watch's answer now (0 without one): one spinlock. */
uint64
lf_watch_epoch(void)
{
	uint64		epoch;

	if (watch == NULL)
		return 0;
	SpinLockAcquire(&watch->mutex);
	epoch = watch->epoch;
	SpinLockRelease(&watch->mutex);
	return epoch;
}

/* what one sentinel said of the master */
typedef struct SentinelView
{
	bool		answered;
	bool		unsettled;		/* o_down, or a failover in progress */
	char		host[NI_MAXHOST];
	int			port;
	char		flags[128];
} SentinelView;

/*
 * Ask one sentinel SENTINEL MASTER <name>: the master's address and its
 * flags.  A sentinel that cannot be asked, or does not know the master,
 * has not answered.
 */
static void
ask_one(const LfNode *s, SentinelView *v)
{
	LfEndpoint	ep = {LF_EP_SENTINEL, s->host, s->port, false};
	const char *argv[3] = {"SENTINEL", "MASTER", lf_sentinel_master};
	size_t		lens[3] = {8, 6, strlen(lf_sentinel_master)};
	redisReply *reply = NULL;
	char		err[LF_ERRLEN];
	size_t		i;

	memset(v, 0, sizeof(*v));
	if (lf_conn_command(&ep, 3, argv, lens, LF_WATCH_ANSWER_MS, LF_INTERRUPTIBLE | LF_WITHIN,
						&reply, err) != LF_REPLY)
		return;
	if (reply->type == REDIS_REPLY_ARRAY)
	{
		/* a flat list of field, value */
		for (i = 0; i + 1 < reply->elements; i += 2)
		{
			const redisReply *f = reply->element[i];
			const redisReply *val = reply->element[i + 1];

			if (f->type != REDIS_REPLY_STRING || val->type != REDIS_REPLY_STRING)
				continue;
			if (strcmp(f->str, "ip") == 0)
			{
				if (lf_printable_host(val->str, val->len))
					strlcpy(v->host, val->str, sizeof(v->host));
			}
			else if (strcmp(f->str, "port") == 0)
				v->port = atoi(val->str);
			else if (strcmp(f->str, "flags") == 0)
				strlcpy(v->flags, val->str, sizeof(v->flags));
		}
		v->answered = v->host[0] != '\0' && v->port > 0;
		v->unsettled = strstr(v->flags, "failover_in_progress") != NULL ||
			strstr(v->flags, "o_down") != NULL;
	}
	freeReplyObject(reply);
}

/*
 * What each sentinel (by its place in the list) said last, and when.
 * File-scope: the worker's memory between polls (a sentinel that missed a
 * poll counts with what it said last).
 */
static SentinelView last[LF_MAX_SENTINELS];
static int64 last_at[LF_MAX_SENTINELS];

/*
 * One poll: every sentinel asked, the answer computed and, when it changed,
 * published under a new epoch.
 */
static void
poll_once(uint64 fingerprint)
{
	LfNode		list[LF_MAX_SENTINELS];
	SentinelView views[LF_MAX_SENTINELS];
	int			n = lf_parse_sentinels(lf_sentinels ? lf_sentinels : "", list);
	int			i;
	int			answered = 0;
	bool		settled = true;
	const SentinelView *first = NULL;
	char		why[LF_ERRLEN];
	bool		discovered;

	why[0] = '\0';
	for (i = 0; i < n; i++)
	{
		ask_one(&list[i], &views[i]);
		CHECK_FOR_INTERRUPTS();
		if (views[i].answered)
		{
			last[i] = views[i];
			last_at[i] = lf_now_ms();
		}
		else if (last[i].answered && lf_now_ms() - last_at[i] < LF_WATCH_STALE_MS)
		{
			/*
			 * A sentinel that missed this poll counts with what it said last,
			 * for a while: during a graceful failover only its leader
			 * reports it, and one missed answer of the leader must not let
			 * the others, who still name the old master, settle on it.
			 */
			views[i] = last[i];
		}
		if (!views[i].answered)
			continue;
		answered++;
		if (first == NULL)
			first = &views[i];
		if (views[i].unsettled && settled)
		{
			settled = false;
			snprintf(why, sizeof(why), "sentinel %s:%d reports master \"%s\" as %s",
					 list[i].host, list[i].port, lf_sentinel_master, views[i].flags);
		}
		else if (settled && (strcmp(views[i].host, first->host) != 0 || views[i].port != first->port))
		{
			settled = false;
			snprintf(why, sizeof(why), "the sentinels name different masters for \"%s\" (%s:%d and %s:%d)",
					 lf_sentinel_master, first->host, first->port, views[i].host, views[i].port);
		}
	}
	/* a majority of the sentinels must have answered */
	if (settled && answered * 2 <= n)
	{
		settled = false;
		snprintf(why, sizeof(why), "only %d of %d sentinels answered", answered, n);
	}

	SpinLockAcquire(&watch->mutex);
	discovered = settled && (strcmp(watch->host, first->host) != 0 || watch->port != first->port);
	if (watch->fingerprint != fingerprint || watch->settled != settled || discovered)
	{
		watch->epoch++;
		watch->fingerprint = fingerprint;
		watch->settled = settled;
		if (settled)
		{
			strlcpy(watch->host, first->host, sizeof(watch->host));
			watch->port = first->port;
		}
	}
	strlcpy(watch->why, why, sizeof(watch->why));
	watch->updated_at = lf_now_ms();
	SpinLockRelease(&watch->mutex);
	if (discovered)
	{
		lf_count(LF_C_SENTINEL_MASTER_DISCOVERED);
		ereport(LOG,
				errmsg("the sentinels name %s:%d the master \"%s\"",
					   first->host, first->port, lf_sentinel_master));
	}
}

/* The worker: poll while Sentinel is configured, idle otherwise. */
void
lf_watch_main(Datum arg)
{
	MemoryContext cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	cxt = AllocSetContextCreate(TopMemoryContext, "lease_fence sentinel watch",
								ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	ereport(LOG, errmsg("lease_fence sentinel watch started"));

	for (;;)
	{
		bool		on = lf_sentinels && lf_sentinels[0] != '\0' &&
			lf_sentinel_master && lf_sentinel_master[0] != '\0';

		if (on)
			poll_once(sentinel_fingerprint());
		else
		{
			SpinLockAcquire(&watch->mutex);
			watch->fingerprint = 0;
			SpinLockRelease(&watch->mutex);
		}
		MemoryContextReset(cxt);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 on ? LF_WATCH_POLL_MS : 1000, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* the connections and answers of the old settings are of no use */
			(void) lf_redis_disconnect_all();
			memset(last, 0, sizeof(last));
		}
	}
}

/* Called from _PG_init: the worker and its shared memory, when preloaded. */
void
lf_watch_init(void)
{
	BackgroundWorker worker;

	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = watch_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = watch_shmem_startup;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS;
	worker.bgw_start_time = BgWorkerStart_PostmasterStart;
	worker.bgw_restart_time = 1;
	strlcpy(worker.bgw_library_name, "lease_fence", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "lf_watch_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "lease_fence sentinel watch", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "lease_fence sentinel watch", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}
