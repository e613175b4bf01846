/*
 * test/bench/job.c — section 7 of test/bench/run.sh: one fenced job, done
 * the ways a client can do it, by N clients for S seconds.
 *
 *   job MODE CLIENTS SECONDS REDIS_SOCKET [REDIS_PID]
 *
 * A job is: take a lease on a resource of the client's own, write one row
 * of its own under the lease's fencing token, give the lease back.  Client i
 * (1..N) works on resource / key 'job:<i>' and on row id i, so no client
 * waits for another's lease: what is measured is what a job costs, not
 * contention.  Each client is a thread with one PostgreSQL connection (the
 * environment's PGHOST etc.) and one Redis connection of its own.
 *
 * MODE
 *   a           lease_fence as an application uses it today, three round
 *               trips: acquire(); one string BEGIN; set_config(generation);
 *               UPDATE; COMMIT; release()
 *   job         one round trip: BEGIN; acquire(scope => 'transaction');
 *               UPDATE; COMMIT in libpq's pipeline mode (prepared
 *               statements, one sync): the transaction-scoped lease is the
 *               transaction's generation, and the server releases it after
 *               the COMMIT
 *   job_simple  the same four statements as one simple-query string
 *   b           what a careful application writes instead, with Redis
 *               alone, in three round trips: one EVALSHA of a script that
 *               does SET NX PX and INCR of a token key, the prepared
 *               UPDATE that compares and writes the token (fence <= token),
 *               EVALSHA of the compare-and-delete release
 *   b2          the same with SET NX PX and INCR sent as two commands (four
 *               round trips)
 *
 * and two controls, which take no lease: what the PostgreSQL part of a job
 * costs by itself
 *   job_nolease job's pipeline with the acquire replaced by a SELECT of
 *               constants (BEGIN; SELECT; UPDATE; COMMIT, one sync)
 *   b_noredis   b's UPDATE alone, its token a clock reading in µs (rows
 *               32 + i, so that b's own rows keep their tokens)
 *
 * Prints one line of key=value pairs: the jobs done, the time, the jobs per
 * second, and what the jobs cost the PostgreSQL backends (CPU time from
 * /proc/<pid>/stat, voluntary + involuntary context switches from
 * /proc/<pid>/status, read right before and right after the timed window),
 * the redis-server (REDIS_PID, same way) and this process (getrusage).  The
 * backends must be readable: run as the user the server runs as.
 *
 * Every job must complete as intended (lease granted, one row updated,
 * lease released); anything else exits non-zero with what happened: a
 * benchmark that counts failures as work measures nothing.
 *
 * Build: gcc -O2 -Wall -Wextra -Werror -I$(pg_config --includedir) job.c
 *        -lpq -lhiredis -lpthread (hiredis 0.14 API only)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

enum mode { MODE_A, MODE_JOB, MODE_JOB_SIMPLE, MODE_B, MODE_B2, MODE_JOB_NOLEASE, MODE_B_NOREDIS };

static enum mode mode;
static const char *mode_name;
static const char *redis_socket;
static atomic_int stop;
static pthread_barrier_t ready;		/* all clients connected and prepared */
static pthread_barrier_t go;		/* the "before" figures are read */

/* the compare-and-delete release of modes b and b2 */
static const char release_lua[] =
	"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/* mode b's acquire: the lock and its token in one script (nil: not granted) */
static const char acquire_lua[] =
	"if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
	"return redis.call('incr', KEYS[2]) else return false end";

struct client
{
	pthread_t	thread;
	int			id;				/* 1..N: resource 'job:<id>', row id */
	PGconn	   *pg;
	redisContext *redis;
	pid_t		backend;
	char		sha[41];		/* modes b, b2: the release script's SHA1 */
	char		acquire_sha[41];	/* mode b: the acquire script's SHA1 */
	uint64_t	rng;
	long		jobs;
};

static void
die(const char *fmt, ...)
{
	va_list		ap;

	fprintf(stderr, "job: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	/* the other clients are mid-job: no clean shutdown is owed to them */
	_exit(1);
}

/* what went wrong with a result (libpq's message, or its status) */
static const char *
pg_why(PGconn *pg, PGresult *res)
{
	if (res && PQresultErrorMessage(res)[0])
		return PQresultErrorMessage(res);
	if (res)
		return PQresStatus(PQresultStatus(res));
	return PQerrorMessage(pg);
}

static void
expect(struct client *c, PGresult *res, ExecStatusType want, const char *what)
{
	if (!res || PQresultStatus(res) != want)
		die("client %d (%s): %s: %s", c->id, mode_name, what, pg_why(c->pg, res));
}

static void
prepare(struct client *c, const char *name, const char *sql, int nparams)
{
	PGresult   *res = PQprepare(c->pg, name, sql, nparams, NULL);

	expect(c, res, PGRES_COMMAND_OK, name);
	PQclear(res);
}

static redisReply *
redis_cmd(struct client *c, const char *fmt, ...)
{
	va_list		ap;
	redisReply *r;

	va_start(ap, fmt);
	r = redisvCommand(c->redis, fmt, ap);
	va_end(ap);
	if (!r)
		die("client %d (%s): Redis: %s", c->id, mode_name, c->redis->errstr);
	if (r->type == REDIS_REPLY_ERROR)
		die("client %d (%s): Redis: %s", c->id, mode_name, r->str);
	return r;
}

/* xorshift64*: a lock identity per job, no locking between threads */
static uint64_t
next_random(struct client *c)
{
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return c->rng * UINT64_C(2685821657736338717);
}

/* SCRIPT LOAD: the script's SHA1 into sha[41] */
static void
script_load(struct client *c, const char *script, char *sha)
{
	redisReply *r = redis_cmd(c, "SCRIPT LOAD %s", script);

	if (r->type != REDIS_REPLY_STRING || r->len != 40)
		die("client %d: SCRIPT LOAD: unexpected reply", c->id);
	memcpy(sha, r->str, 40);
	sha[40] = '\0';
	freeReplyObject(r);
}

static void
connect_client(struct client *c)
{
	PGresult   *res;

	c->pg = PQconnectdb("");
	if (PQstatus(c->pg) != CONNECTION_OK)
		die("client %d: PostgreSQL: %s", c->id, PQerrorMessage(c->pg));
	res = PQexec(c->pg, "SELECT pg_backend_pid()");
	expect(c, res, PGRES_TUPLES_OK, "pg_backend_pid()");
	c->backend = (pid_t) atol(PQgetvalue(res, 0, 0));
	PQclear(res);
	if (getrandom(&c->rng, sizeof c->rng, 0) != sizeof c->rng)
		die("getrandom: %s", strerror(errno));
	c->rng |= 1;

	switch (mode)
	{
		case MODE_A:
			prepare(c, "acquire", "SELECT acquired, generation, identity, status FROM lease_fence.acquire($1, 5000)", 1);
			prepare(c, "release", "SELECT released, status FROM lease_fence.release($1, $2)", 2);
			break;
		case MODE_JOB:
		case MODE_JOB_NOLEASE:
			prepare(c, "begin", "BEGIN", 0);
			if (mode == MODE_JOB)
				prepare(c, "acquire", "SELECT acquired, generation, status FROM lease_fence.acquire($1, 5000, scope => 'transaction')", 1);
			else
				prepare(c, "acquire", "SELECT true, 0::bigint, $1::text", 1);
			prepare(c, "update", "UPDATE bench_job_item SET v = v + 1 WHERE id = $1", 1);
			prepare(c, "commit", "COMMIT", 0);
			/* for good: every job is one pipeline and one sync */
			if (!PQenterPipelineMode(c->pg))
				die("client %d: PQenterPipelineMode: %s", c->id, PQerrorMessage(c->pg));
			break;
		case MODE_JOB_SIMPLE:
			break;
		case MODE_B_NOREDIS:
			prepare(c, "update", "UPDATE bench_job_item2 SET v = v + 1, fence = $1 WHERE id = $2 AND fence <= $1", 2);
			break;
		case MODE_B:
		case MODE_B2:
			c->redis = redisConnectUnix(redis_socket);
			if (!c->redis || c->redis->err)
				die("client %d: Redis %s: %s", c->id, redis_socket,
					c->redis ? c->redis->errstr : "out of memory");
			script_load(c, release_lua, c->sha);
			if (mode == MODE_B)
				script_load(c, acquire_lua, c->acquire_sha);
			prepare(c, "update", "UPDATE bench_job_item2 SET v = v + 1, fence = $1 WHERE id = $2 AND fence <= $1", 2);
			break;
	}
}

/* a: acquire; BEGIN; set_config; UPDATE; COMMIT; release — 3 round trips */
static void
job_a(struct client *c, const char *resource, const char *id)
{
	const char *p[2];
	char		sql[256];
	char		identity[80];
	char		generation[32];
	PGresult   *res;
	int			n;

	p[0] = resource;
	res = PQexecPrepared(c->pg, "acquire", 1, p, NULL, NULL, 0);
	expect(c, res, PGRES_TUPLES_OK, "acquire");
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		die("client %d (a): acquire of %s not granted: status %s", c->id, resource, PQgetvalue(res, 0, 3));
	snprintf(generation, sizeof generation, "%s", PQgetvalue(res, 0, 1));
	snprintf(identity, sizeof identity, "%s", PQgetvalue(res, 0, 2));
	PQclear(res);

	/* one string, one round trip; each statement's result is checked */
	snprintf(sql, sizeof sql,
			 "BEGIN; SELECT set_config('lease_fence.generation', '%s', true); "
			 "UPDATE bench_job_item SET v = v + 1 WHERE id = %s; COMMIT",
			 generation, id);
	if (!PQsendQuery(c->pg, sql))
		die("client %d (a): %s", c->id, PQerrorMessage(c->pg));
	n = 0;
	while ((res = PQgetResult(c->pg)) != NULL)
	{
		n++;
		if (n == 2)
			expect(c, res, PGRES_TUPLES_OK, "set_config");
		else
			expect(c, res, PGRES_COMMAND_OK, n == 1 ? "BEGIN" : n == 3 ? "UPDATE" : "COMMIT");
		if (n == 3 && strcmp(PQcmdTuples(res), "1") != 0)
			die("client %d (a): UPDATE of row %s updated %s rows", c->id, id, PQcmdTuples(res));
		if (n == 4 && strcmp(PQcmdStatus(res), "COMMIT") != 0)
			die("client %d (a): COMMIT answered %s", c->id, PQcmdStatus(res));
		PQclear(res);
	}
	if (n != 4)
		die("client %d (a): %d results for the transaction, expected 4", c->id, n);

	p[1] = identity;
	res = PQexecPrepared(c->pg, "release", 2, p, NULL, NULL, 0);
	expect(c, res, PGRES_TUPLES_OK, "release");
	if (strcmp(PQgetvalue(res, 0, 1), "released") != 0)
		die("client %d (a): release of %s: status %s", c->id, resource, PQgetvalue(res, 0, 1));
	PQclear(res);
}

/* the next result of a pipeline, checked; then the NULL that ends it */
static PGresult *
pipeline_result(struct client *c, ExecStatusType want, const char *what)
{
	PGresult   *res = PQgetResult(c->pg);
	PGresult   *end;

	expect(c, res, want, what);
	if ((end = PQgetResult(c->pg)) != NULL)
		die("client %d (job): %s: more than one result", c->id, what);
	return res;
}

/* job: BEGIN; acquire(scope => 'transaction'); UPDATE; COMMIT — pipelined */
static void
job_pipeline(struct client *c, const char *resource, const char *id)
{
	const char *p[1];
	PGresult   *res;
	char		status[64];

	p[0] = resource;
	if (!PQsendQueryPrepared(c->pg, "begin", 0, NULL, NULL, NULL, 0) ||
		!PQsendQueryPrepared(c->pg, "acquire", 1, p, NULL, NULL, 0))
		die("client %d (job): %s", c->id, PQerrorMessage(c->pg));
	p[0] = id;
	if (!PQsendQueryPrepared(c->pg, "update", 1, p, NULL, NULL, 0) ||
		!PQsendQueryPrepared(c->pg, "commit", 0, NULL, NULL, NULL, 0) ||
		!PQpipelineSync(c->pg))
		die("client %d (job): %s", c->id, PQerrorMessage(c->pg));

	PQclear(pipeline_result(c, PGRES_COMMAND_OK, "BEGIN"));
	/*
	 * A lease that was not granted stops the run although the pipeline
	 * went on: its UPDATE ran without a generation, which this lenient
	 * table lets through (an application would write the fence as
	 * lease_fence.current_generation(), or protect the table strict).
	 */
	res = pipeline_result(c, PGRES_TUPLES_OK, "acquire");
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
	{
		snprintf(status, sizeof status, "%s", PQgetvalue(res, 0, 2));
		die("client %d (job): acquire of %s not granted: status %s", c->id, resource, status);
	}
	PQclear(res);
	res = pipeline_result(c, PGRES_COMMAND_OK, "UPDATE");
	if (strcmp(PQcmdTuples(res), "1") != 0)
		die("client %d (job): UPDATE of row %s updated %s rows", c->id, id, PQcmdTuples(res));
	PQclear(res);
	res = pipeline_result(c, PGRES_COMMAND_OK, "COMMIT");
	if (strcmp(PQcmdStatus(res), "COMMIT") != 0)
		die("client %d (job): COMMIT answered %s", c->id, PQcmdStatus(res));
	PQclear(res);
	res = PQgetResult(c->pg);
	if (!res || PQresultStatus(res) != PGRES_PIPELINE_SYNC)
		die("client %d (job): expected the pipeline's sync, got %s", c->id, pg_why(c->pg, res));
	PQclear(res);
}

/* job_simple: the same four statements, one simple-query string */
static void
job_simple(struct client *c, const char *resource, const char *id)
{
	char		sql[256];
	PGresult   *res;
	int			n = 0;

	snprintf(sql, sizeof sql,
			 "BEGIN; SELECT acquired, generation, status FROM lease_fence.acquire('%s', 5000, scope => 'transaction'); "
			 "UPDATE bench_job_item SET v = v + 1 WHERE id = %s; COMMIT",
			 resource, id);
	if (!PQsendQuery(c->pg, sql))
		die("client %d (job_simple): %s", c->id, PQerrorMessage(c->pg));
	while ((res = PQgetResult(c->pg)) != NULL)
	{
		n++;
		if (n == 2)
		{
			expect(c, res, PGRES_TUPLES_OK, "acquire");
			if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
				die("client %d (job_simple): acquire of %s not granted: status %s",
					c->id, resource, PQgetvalue(res, 0, 2));
		}
		else
			expect(c, res, PGRES_COMMAND_OK, n == 1 ? "BEGIN" : n == 3 ? "UPDATE" : "COMMIT");
		if (n == 3 && strcmp(PQcmdTuples(res), "1") != 0)
			die("client %d (job_simple): UPDATE of row %s updated %s rows", c->id, id, PQcmdTuples(res));
		if (n == 4 && strcmp(PQcmdStatus(res), "COMMIT") != 0)
			die("client %d (job_simple): COMMIT answered %s", c->id, PQcmdStatus(res));
		PQclear(res);
	}
	if (n != 4)
		die("client %d (job_simple): %d results for the transaction, expected 4", c->id, n);
}

/*
 * b: EVALSHA (SET NX PX + INCR token); UPDATE ... WHERE fence <= token;
 * EVALSHA release.  b2: SET NX PX and INCR as two commands.
 */
static void
job_b(struct client *c, const char *resource, const char *id)
{
	char		identity[33];
	char		token[32];
	const char *p[2];
	redisReply *r;
	PGresult   *res;

	snprintf(identity, sizeof identity, "%016" PRIx64 "%016" PRIx64, next_random(c), next_random(c));
	if (mode == MODE_B)
	{
		r = redis_cmd(c, "EVALSHA %s 2 %s %s:token %s 5000", c->acquire_sha, resource, resource, identity);
		if (r->type != REDIS_REPLY_INTEGER)
			die("client %d (b): acquire script on %s not granted (%s)", c->id, resource,
				r->type == REDIS_REPLY_NIL ? "nil: the key exists" : "unexpected reply");
	}
	else
	{
		r = redis_cmd(c, "SET %s %s NX PX 5000", resource, identity);
		if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0)
			die("client %d (b2): SET %s NX PX not granted (%s)", c->id, resource,
				r->type == REDIS_REPLY_NIL ? "nil: the key exists" : "unexpected reply");
		freeReplyObject(r);
		r = redis_cmd(c, "INCR %s:token", resource);
		if (r->type != REDIS_REPLY_INTEGER)
			die("client %d (b2): INCR %s:token: unexpected reply", c->id, resource);
	}
	snprintf(token, sizeof token, "%lld", r->integer);
	freeReplyObject(r);

	p[0] = token;
	p[1] = id;
	res = PQexecPrepared(c->pg, "update", 2, p, NULL, NULL, 0);
	expect(c, res, PGRES_COMMAND_OK, "UPDATE");
	if (strcmp(PQcmdTuples(res), "1") != 0)
		die("client %d (%s): UPDATE of row %s with token %s updated %s rows", c->id, mode_name, id, token, PQcmdTuples(res));
	PQclear(res);

	r = redis_cmd(c, "EVALSHA %s 1 %s %s", c->sha, resource, identity);
	if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
		die("client %d (%s): release of %s did not delete it", c->id, mode_name, resource);
	freeReplyObject(r);
}

/* b_noredis: b's UPDATE alone, under a token that only grows */
static void
job_b_noredis(struct client *c, const char *id)
{
	char		token[32];
	const char *p[2];
	PGresult   *res;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(token, sizeof token, "%lld", (long long) ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
	p[0] = token;
	p[1] = id;
	res = PQexecPrepared(c->pg, "update", 2, p, NULL, NULL, 0);
	expect(c, res, PGRES_COMMAND_OK, "UPDATE");
	if (strcmp(PQcmdTuples(res), "1") != 0)
		die("client %d (b_noredis): UPDATE of row %s with token %s updated %s rows", c->id, id, token, PQcmdTuples(res));
	PQclear(res);
}

static void *
run_client(void *arg)
{
	struct client *c = arg;
	char		resource[32];
	char		id[16];

	snprintf(resource, sizeof resource, "job:%d", c->id);
	snprintf(id, sizeof id, "%d", mode == MODE_B_NOREDIS ? 32 + c->id : c->id);
	connect_client(c);
	pthread_barrier_wait(&ready);
	pthread_barrier_wait(&go);
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
	{
		switch (mode)
		{
			case MODE_A:
				job_a(c, resource, id);
				break;
			case MODE_JOB:
			case MODE_JOB_NOLEASE:
				job_pipeline(c, resource, id);
				break;
			case MODE_B_NOREDIS:
				job_b_noredis(c, id);
				break;
			case MODE_JOB_SIMPLE:
				job_simple(c, resource, id);
				break;
			case MODE_B:
			case MODE_B2:
				job_b(c, resource, id);
				break;
		}
		c->jobs++;
	}
	return NULL;
}

/* CPU time (µs) and context switches of a process, from /proc */
struct usage
{
	double		cpu_us;
	long		ctx;
};

static struct usage
proc_usage(pid_t pid)
{
	char		path[64];
	char		buf[4096];
	FILE	   *f;
	size_t		len;
	char	   *p;
	unsigned long utime,
				stime;
	long		v = -1,
				nv = -1;
	struct usage u;

	snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
	if (!(f = fopen(path, "r")))
		die("%s: %s", path, strerror(errno));
	len = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* the fields after the command name, which may hold spaces: state is 3 */
	if (!(p = strrchr(buf, ')')) ||
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
		die("%s: cannot parse", path);
	u.cpu_us = (double) (utime + stime) * 1e6 / (double) sysconf(_SC_CLK_TCK);

	snprintf(path, sizeof path, "/proc/%d/status", (int) pid);
	if (!(f = fopen(path, "r")))
		die("%s: %s", path, strerror(errno));
	while (fgets(buf, sizeof buf, f))
	{
		sscanf(buf, "voluntary_ctxt_switches: %ld", &v);
		sscanf(buf, "nonvoluntary_ctxt_switches: %ld", &nv);
	}
	fclose(f);
	if (v < 0 || nv < 0)
		die("%s: no context switch counts", path);
	u.ctx = v + nv;
	return u;
}

static struct usage
backends_usage(struct client *clients, int n)
{
	struct usage sum = {0, 0};

	for (int i = 0; i < n; i++)
	{
		struct usage u = proc_usage(clients[i].backend);

		sum.cpu_us += u.cpu_us;
		sum.ctx += u.ctx;
	}
	return sum;
}

static double
self_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
	int			n;
	double		seconds,
				t0,
				t1,
				self0,
				self1;
	pid_t		redis_pid = 0;
	struct client *clients;
	struct usage b0,
				b1,
				r0 = {0, 0},
				r1 = {0, 0};
	long		jobs = 0;
	struct timespec nap;

	if (argc < 5 || argc > 6)
	{
		fprintf(stderr, "usage: %s a|job|job_simple|b|b2|job_nolease|b_noredis CLIENTS SECONDS REDIS_SOCKET [REDIS_PID]\n", argv[0]);
		return 2;
	}
	mode_name = argv[1];
	if (strcmp(mode_name, "a") == 0)
		mode = MODE_A;
	else if (strcmp(mode_name, "job") == 0)
		mode = MODE_JOB;
	else if (strcmp(mode_name, "job_simple") == 0)
		mode = MODE_JOB_SIMPLE;
	else if (strcmp(mode_name, "b") == 0)
		mode = MODE_B;
	else if (strcmp(mode_name, "b2") == 0)
		mode = MODE_B2;
	else if (strcmp(mode_name, "job_nolease") == 0)
		mode = MODE_JOB_NOLEASE;
	else if (strcmp(mode_name, "b_noredis") == 0)
		mode = MODE_B_NOREDIS;
	else
		die("unknown mode %s", mode_name);
	n = atoi(argv[2]);
	seconds = atof(argv[3]);
	redis_socket = argv[4];
	if (argc == 6)
		redis_pid = (pid_t) atol(argv[5]);
	if (n < 1 || seconds <= 0)
		die("CLIENTS and SECONDS must be positive");
	/* rows 1..32 are the clients', 33..64 b_noredis's (test/bench/setup.sql) */
	if (n > 32)
		die("at most 32 clients");

	clients = calloc(n, sizeof *clients);
	if (!clients)
		die("out of memory");
	pthread_barrier_init(&ready, NULL, n + 1);
	pthread_barrier_init(&go, NULL, n + 1);
	for (int i = 0; i < n; i++)
	{
		clients[i].id = i + 1;
		if (pthread_create(&clients[i].thread, NULL, run_client, &clients[i]) != 0)
			die("pthread_create failed");
	}

	/* every client connected and prepared: read, then let them go */
	pthread_barrier_wait(&ready);
	b0 = backends_usage(clients, n);
	if (redis_pid)
		r0 = proc_usage(redis_pid);
	self0 = self_cpu_us();
	t0 = now();
	pthread_barrier_wait(&go);

	nap.tv_sec = (time_t) seconds;
	nap.tv_nsec = (long) ((seconds - (double) nap.tv_sec) * 1e9);
	while (nanosleep(&nap, &nap) != 0 && errno == EINTR)
		;
	atomic_store(&stop, 1);
	/* each client finishes the job it is in: the window ends with the last */
	for (int i = 0; i < n; i++)
	{
		pthread_join(clients[i].thread, NULL);
		jobs += clients[i].jobs;
	}
	t1 = now();
	b1 = backends_usage(clients, n);
	if (redis_pid)
		r1 = proc_usage(redis_pid);
	self1 = self_cpu_us();

	if (jobs == 0)
		die("no job completed in %.1f s", t1 - t0);
	printf("mode=%s clients=%d jobs=%ld seconds=%.3f jobs_per_s=%.1f cpu_us_per_job=%.1f ctx_per_job=%.2f"
		   " redis_cpu_us_per_job=%.1f client_cpu_us_per_job=%.1f\n",
		   mode_name, n, jobs, t1 - t0, jobs / (t1 - t0),
		   (b1.cpu_us - b0.cpu_us) / jobs, (double) (b1.ctx - b0.ctx) / jobs,
		   redis_pid ? (r1.cpu_us - r0.cpu_us) / jobs : -1.0, (self1 - self0) / jobs);

	for (int i = 0; i < n; i++)
	{
		PQfinish(clients[i].pg);
		if (clients[i].redis)
			redisFree(clients[i].redis);
	}
	free(clients);
	return 0;
}
