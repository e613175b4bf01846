/*-------------------------------------------------------------------------
 *
 * latency.c
 *	  How long Redis takes: per operation (acquire, renew, release, commit
 *	  check, keep-alive renew) a histogram of the round trips of its script,
 *	  in fixed buckets, with their count and sum: lease_fence.latency.
 *
 * With lease_fence in shared_preload_libraries the histograms are
 * cluster-wide, in shared memory, as atomics (no lock), like the counters
 * of stats.c, and lease_fence.stats_reset() zeroes them with those;
 * without it each backend keeps its own.  A round trip is timed from
 * before its script is sent to its reply (a NOSCRIPT and the EVAL after it
 * are one); a request that got no reply (unavailable, timed out, or a
 * release after COMMIT whose reply is read later) is not a sample.
 *
 * IDENTIFICATION
 *	  src/base/latency.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "base/stats.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/float.h"

PG_FUNCTION_INFO_V1(lf_latency);

static const char *const op_names[LF_NUM_LATENCY_OPS] = {
	"acquire", "renew", "release", "commit_check", "keepalive_renew"
};

/* the buckets' upper bounds in microseconds; the last bucket is +Inf */
#define LF_NUM_BUCKETS 12
static const uint64 bucket_us[LF_NUM_BUCKETS - 1] = {
	250, 500, 1000, 2000, 5000, 10000, 25000, 50000, 100000, 250000, 1000000
};

typedef struct LfLatencyOp
{
	pg_atomic_uint64 buckets[LF_NUM_BUCKETS];	/* each bucket's own samples */
	pg_atomic_uint64 sum_us;
} LfLatencyOp;

typedef struct LfLatencyLocal
{
	uint64		buckets[LF_NUM_BUCKETS];
	uint64		sum_us;
} LfLatencyLocal;

static LfLatencyOp *shared = NULL;

static LfLatencyLocal local[LF_NUM_LATENCY_OPS];
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
shared_bytes(void)
{
	return sizeof(LfLatencyOp) * LF_NUM_LATENCY_OPS;
}

/* The bucket of a round trip of us microseconds. */
static int
bucket_of(uint64 us)
{
	int			b = 0;

	while (b < LF_NUM_BUCKETS - 1 && us > bucket_us[b])
		b++;
	return b;
}

/* One round trip of operation op took us microseconds. */
void
lf_latency_add(LfLatencyOp_t op, uint64 us)
{
	int			b = bucket_of(us);

	if (shared)
	{
		pg_atomic_fetch_add_u64(&shared[op].buckets[b], 1);
		pg_atomic_fetch_add_u64(&shared[op].sum_us, us);
	}
	else
	{
		local[op].buckets[b]++;
		local[op].sum_us += us;
	}
}

/* Zero every histogram (lease_fence.stats_reset). */
void
lf_latency_reset(void)
{
	int			op;
	int			b;

	for (op = 0; op < LF_NUM_LATENCY_OPS; op++)
	{
		if (shared)
		{
			for (b = 0; b < LF_NUM_BUCKETS; b++)
				pg_atomic_write_u64(&shared[op].buckets[b], 0);
			pg_atomic_write_u64(&shared[op].sum_us, 0);
		}
		else
			memset(&local[op], 0, sizeof(local[op]));
	}
}

static void
latency_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(shared_bytes()));
}

static void
latency_shmem_startup(void)
{
	bool		found;
	int			op;
	int			b;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("lease_fence latency", shared_bytes(), &found);
	if (!found)
		for (op = 0; op < LF_NUM_LATENCY_OPS; op++)
		{
			for (b = 0; b < LF_NUM_BUCKETS; b++)
				pg_atomic_init_u64(&shared[op].buckets[b], 0);
			pg_atomic_init_u64(&shared[op].sum_us, 0);
		}
	LWLockRelease(AddinShmemInitLock);
}

/* Called from _PG_init: shared histograms only when preloaded. */
void
lf_latency_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = latency_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = latency_shmem_startup;
}

/*
 * lease_fence.latency_histogram(): per operation and bucket, the bucket's
 * upper bound in ms (le, Infinity for the last), the samples at or below it
 * (cumulative, as Prometheus counts them), and the operation's count and
 * sum of milliseconds; scope 'cluster' or 'backend'.
 */
Datum
lf_latency(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			op;
	int			b;

	InitMaterializedSRF(fcinfo, 0);
	for (op = 0; op < LF_NUM_LATENCY_OPS; op++)
	{
		uint64		n[LF_NUM_BUCKETS];
		uint64		count = 0;
		uint64		sum_us = shared ? pg_atomic_read_u64(&shared[op].sum_us) : local[op].sum_us;
		uint64		cumulative = 0;

		/* the count is the buckets' total, so that +Inf always equals it */
		for (b = 0; b < LF_NUM_BUCKETS; b++)
		{
			n[b] = shared ? pg_atomic_read_u64(&shared[op].buckets[b]) : local[op].buckets[b];
			count += n[b];
		}
		for (b = 0; b < LF_NUM_BUCKETS; b++)
		{
			Datum		values[6];
			bool		nulls[6] = {false, false, false, false, false, false};

			cumulative += n[b];
			values[0] = CStringGetTextDatum(op_names[op]);
			values[1] = Float8GetDatum(b < LF_NUM_BUCKETS - 1 ? bucket_us[b] / 1000.0 : get_float8_infinity());
			values[2] = Int64GetDatum((int64) cumulative);
			values[3] = Int64GetDatum((int64) count);
			values[4] = Float8GetDatum(sum_us / 1000.0);
			values[5] = CStringGetTextDatum(shared ? "cluster" : "backend");
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
