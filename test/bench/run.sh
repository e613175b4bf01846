#!/usr/bin/env bash
# test/bench/run.sh — what lease_fence costs, measured side by side.
#
# Builds and installs the extension from a private copy of the tree, starts a
# throwaway PostgreSQL 15 and redis-server (unix sockets in a temp dir), and
# measures, each comparison interleaved (A B C D, A B C D, ... for
# LF_BENCH_ROUNDS rounds, the order rotated every round) and summarised by
# its median:
#
#   1. a 200k-row UPDATE on a fenced table versus the same UPDATE under
#      suppress_redundant_updates_trigger (the row-trigger machinery alone),
#      under a PL/pgSQL fence trigger, and with no trigger: wall time, the
#      backend's CPU time, and (once, under callgrind, on a smaller table)
#      instructions per row, which other load on the machine cannot move
#      (and, counted the same way, the issued check's worst case per
#      transaction, on the tables of section 2);
#   2. single-row UPDATE transactions (pgbench, 1 and 2 clients), fenced
#      versus unfenced, and fenced with and without fence_resource(); and
#      the issued check at its worst (a generation issued elsewhere in every
#      transaction, so the trigger reads the sequence again each time)
#      versus a table with external tokens;
#   3. one acquire + release cycle through SQL versus its floor (two trivial
#      SQL round trips + SET NX PX + a compare-and-delete script) and versus
#      redis-py's Lock; the same cycle over loopback TCP, plain and TLS, and
#      the Redis commands each cycle sends over both;
#   4. next_generation() versus nextval();
#   5. backend memory (RSS) over many acquire/release cycles and fenced
#      updates;
#   6. the cycle at 1, 4 and 16 clients against the floor at the same
#      concurrency, system calls per cycle (strace), and instructions per
#      cycle (callgrind, a single-user backend);
#   7. a fenced job (lease, one fenced row UPDATE, release) at 1, 4 and 16
#      clients, four ways (test/bench/job.c): lease_fence in three round
#      trips, lease_fence in one (a transaction-scoped acquire, pipelined),
#      and Redis alone as a careful application writes it (one EVALSHA of
#      SET NX PX + INCR, a prepared compare-and-set UPDATE, an EVALSHA
#      compare-and-delete) and with SET NX PX and INCR as two commands: jobs
#      per second, and the CPU time per job of the client, the backends and
#      Redis, and the backends' context switches per job;
#   8. elections (test/bench/elections.py): failover from a frozen leader
#      (its lease's end to the waiting follower's campaign returning: the
#      excess over the TTL, median and p99), after resign(), after the
#      leader's client closes its connection and after pg_terminate_backend;
#      and the split-brain window: old-term writes committed after the new
#      leader's campaign committed, with the old leader writing in a loop;
#   9. fair waiting (test/bench/fair.py): 16 waiters on one resource, holders
#      holding 1 ms, 1,000 grants: the share of grants that went to the
#      queue's next identity (arrival order), and, fair => true against
#      today's unfair wait under the same load, the Redis requests per grant
#      (INFO commandstats) and the time from a release to the next holder's
#      acquire returning (median, p99); with no contention, instructions per
#      acquire + release, fair against unfair (callgrind).
#
# Prints a table and writes test/bench/results/: results.txt (the table),
# samples.csv (every sample), rss_*.dat (the memory series), bench.png (the
# plot).  As root it installs what it needs (Debian packages) and runs the
# servers as the postgres user, like test/run.sh.  About 30 minutes on 2 CPUs
# (section 7 alone: about 11; section 8: about 4; section 9: about 3).
#
# Settings (environment):
#   LF_BENCH_ROUNDS=7          interleaved rounds (sections 1 and 3: plus a warm-up)
#   LF_BENCH_SECONDS=3         seconds per pgbench / redis-py run
#   LF_BENCH_ROWS=200000       rows of the bulk UPDATE
#   LF_BENCH_REDIS_N=50000     requests per redis-benchmark run
#   LF_BENCH_MEM_CYCLES=400000 acquire/release cycles of the memory test
#   LF_BENCH_MEM_UPDATES=1000000 fenced single-row UPDATEs of the memory test
#   LF_BENCH_CG_ROWS=20000     rows of the UPDATE counted under callgrind
#   LF_BENCH_CG_TXNS=2000      transactions of the issued check's worst case
#                              counted under callgrind
#   LF_BENCH_CG_CYCLES=3000    acquire + release cycles counted under callgrind
#   LF_BENCH_CG_JOBS=1000      section 7's jobs counted under callgrind
#   LF_BENCH_CLIENT_ROUNDS=3   interleaved rounds of section 6's throughput
#   LF_BENCH_JOB_ROUNDS=5      interleaved rounds of section 7
#   LF_BENCH_JOB_SECONDS=10    seconds per section 7 run (one mode, one client count)
#   LF_BENCH_JOB_MODES="a job b b2"  section 7's modes (also job_simple: the
#                              one-round-trip job as one simple-query string;
#                              and the controls without a lease, job_nolease
#                              and b_noredis: test/bench/job.c)
#   LF_BENCH_ELECTION_ROUNDS=50 rounds of each measurement of section 8
#   LF_BENCH_ELECTION_TTL_MS=1000 the TTL the frozen leader and the old leader
#                              of the split-brain window campaign with (the
#                              handovers: 10 times it)
#   LF_BENCH_FAIR_ROUNDS=5     interleaved rounds of section 9 (each: an
#                              order run, a fair run, an unfair run and
#                              the pg_advisory_lock baseline)
#   LF_BENCH_FAIR_GRANTS=1000  grants per section 9 run
#   LF_BENCH_FAIR_WAITERS=16   waiters (one more session holds)
#   LF_BENCH_FAIR_HOLD_MS=1    how long a holder holds
#   LF_BENCH_CG_FAIR=3000      acquire + release cycles of section 9 counted
#                              under callgrind (each way)
#   LF_BENCH_OUT=test/bench/results
#   LF_BENCH_ONLY="1 3"        run only these sections (for profiling)
#   LF_PG_ROOT                 run on a PostgreSQL built from source into this
#                              prefix instead of Debian's 15 (a private copy
#                              of it is made, as for the tests)
#   LF_KEEP=1                  keep the temp dir (logs, raw outputs)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$top/test/lib.sh"

ROUNDS=${LF_BENCH_ROUNDS:-7}
SECS=${LF_BENCH_SECONDS:-3}
ROWS=${LF_BENCH_ROWS:-200000}
REDIS_N=${LF_BENCH_REDIS_N:-50000}
MEM_CYCLES=${LF_BENCH_MEM_CYCLES:-400000}
MEM_UPDATES=${LF_BENCH_MEM_UPDATES:-1000000}
CG_ROWS=${LF_BENCH_CG_ROWS:-20000}
CG_TXNS=${LF_BENCH_CG_TXNS:-2000}
CG_CYCLES=${LF_BENCH_CG_CYCLES:-3000}
CG_JOBS=${LF_BENCH_CG_JOBS:-1000}
CLIENT_ROUNDS=${LF_BENCH_CLIENT_ROUNDS:-3}
JOB_ROUNDS=${LF_BENCH_JOB_ROUNDS:-5}
JOB_SECS=${LF_BENCH_JOB_SECONDS:-10}
JOB_MODES=${LF_BENCH_JOB_MODES:-a job b b2}
ELECTION_ROUNDS=${LF_BENCH_ELECTION_ROUNDS:-50}
ELECTION_TTL_MS=${LF_BENCH_ELECTION_TTL_MS:-1000}
FAIR_ROUNDS=${LF_BENCH_FAIR_ROUNDS:-5}
FAIR_GRANTS=${LF_BENCH_FAIR_GRANTS:-1000}
FAIR_WAITERS=${LF_BENCH_FAIR_WAITERS:-16}
FAIR_HOLD_MS=${LF_BENCH_FAIR_HOLD_MS:-1}
CG_FAIR=${LF_BENCH_CG_FAIR:-3000}
OUT=${LF_BENCH_OUT:-$here/results}
PY=/usr/bin/python3			# Debian's, which has python3-redis

# (libpq-dev and libhiredis-dev: section 7 builds a client, test/bench/job.c)
# (python3-psycopg: section 8's driver, test/bench/elections.py)
lf_need_packages gnuplot-nox python3-redis python3-psycopg valgrind strace libpq-dev libhiredis-dev || exit 1

started=$(date +%s)
# the commit measured: the tree is copied now
commit="$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)$( [ -n "$(git -C "$top" status --porcelain -- src scripts sql expected Makefile lease_fence.control 'lease_fence--*.sql' 2>/dev/null)" ] && echo ' (with uncommitted changes)')"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
trap lf_cleanup EXIT
lf_make_workdir "$top" || exit 1
lf_build_install || exit 1
PGBENCH=$PG_BIN/pgbench
lf_start_redis || exit 1
# fsync on: next_generation() exists to make values durable, and its cost is
# a WAL flush.  No checkpoint or autovacuum in the middle of a measurement:
# run.sh vacuums the bulk-UPDATE tables itself.
lf_start_pg "lease_fence.redis_socket = '$LF_REDIS_SOCK'" \
	"shared_preload_libraries = 'lease_fence'" \
	"fsync = on" \
	"shared_buffers = 1GB" \
	"max_wal_size = 20GB" \
	"checkpoint_timeout = 1d" \
	"autovacuum = off" || exit 1

raw=$LF_WORK/raw
lf_as_user mkdir -p "$raw"
samples=$LF_WORK/samples.csv
echo "section,variant,round,value,unit" >"$samples"

want() { [ -z "${LF_BENCH_ONLY:-}" ] || [[ " $LF_BENCH_ONLY " == *" $1 "* ]]; }
sample() { echo "$1,$2,$3,$4,$5" >>"$samples"; }
psql_u() { lf_as_user "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
die() { echo "bench: $*" >&2; exit 1; }

# pgbench SCRIPT CLIENTS [PGOPTIONS] [more pgbench args]: prints tps
pgbench_tps() {
	local script=$1 clients=$2 opts=${3:-}
	shift 3
	local out
	out=$(cd "$LF_WORK" && lf_as_user env PGOPTIONS="$opts" "$PGBENCH" -n -M prepared \
		-c "$clients" -j "$clients" -T "$SECS" -D rows="$ROWS" "$@" \
		-f "$LF_SRC/test/bench/pgbench/$script.sql" 2>&1) || { echo "$out" >&2; die "pgbench $script failed"; }
	echo "$out" | grep -q 'aborted' && { echo "$out" >&2; die "pgbench $script aborted"; }
	echo "$out" | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

# the order of round r: the variants rotated by r
rotate() {
	local r=$1; shift
	local n=$# i
	local a=("$@")
	for ((i = 0; i < n; i++)); do echo "${a[$(((i + r) % n))]}"; done
}

lf_log "setting up ($ROWS rows per table)"
psql_u -v rows="$ROWS" -f "$LF_SRC/test/bench/setup.sql" >"$raw/setup.out" 2>&1 || { cat "$raw/setup.out"; die "setup failed"; }
if want 1; then	# the same schema, smaller, for the instruction counts (section 1, callgrind)
	psql_u -c "CREATE DATABASE cg" && psql_u -d cg -v rows="$CG_ROWS" -f "$LF_SRC/test/bench/setup.sql" \
		>"$raw/setup_cg.out" 2>&1 || { cat "$raw/setup_cg.out"; die "setup of database cg failed"; }
	same_gen_cg=$(psql_u -d cg -c "SELECT fence FROM u_lf_same WHERE id = 1")
fi
same_gen=$(psql_u -c "SELECT fence FROM u_lf_same WHERE id = 1")
if want 1; then	# the portable edition: database p, installed by a non-superuser owner
	psql_u -c "CREATE ROLE lf_portable_owner LOGIN" -c "CREATE DATABASE p OWNER lf_portable_owner" &&
	psql_u -U lf_portable_owner -d p -f "$LF_SRC/portable/lease_fence_portable.sql" &&
	psql_u -U lf_portable_owner -d p -v rows="$ROWS" <<'SQL' >"$raw/setup_p.out" 2>&1 || { cat "$raw/setup_p.out"; die "setup of database p failed"; }
CREATE TABLE u_portable (id int PRIMARY KEY, v bigint NOT NULL, pad text NOT NULL,
                         fence bigint NOT NULL DEFAULT 0) WITH (autovacuum_enabled = off);
SELECT lease_fence.protect('u_portable');
INSERT INTO u_portable SELECT i, i, md5(i::text), 0 FROM generate_series(1, :rows) i;
SELECT lease_fence.next_generation() AS g \gset
BEGIN;
SET LOCAL lease_fence.generation = :g;
UPDATE u_portable SET v = v + 1;
COMMIT;
SQL
fi

# ---------------------------------------------------------------------
# 1. the bulk UPDATE, four ways (and lease_fence twice)
# ---------------------------------------------------------------------
if want 1; then
lf_log "1. $ROWS-row UPDATE: no trigger, built-in C trigger, PL/pgSQL fence, lease_fence"
declare -A utable=([none]=u_none [builtin]=u_builtin [plpgsql]=u_plpgsql [lf_new]=u_lf [lf_same]=u_lf_same [portable]=u_portable)
# the backend's own CPU time (ns, from the scheduler): unlike the wall time
# it does not count waiting for a CPU, so other load on the machine disturbs
# it less
cpu_now="split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint"
for ((r = 0; r <= ROUNDS; r++)); do
	gen=$(psql_u -c "SELECT lease_fence.next_generation()")
	# (the portable edition's generations are its own database's)
	pgen=$(psql_u -U lf_portable_owner -d p -c "SELECT lease_fence.next_generation()")
	for v in $(rotate "$r" none builtin plpgsql lf_new lf_same portable); do
		g=$gen
		db=postgres
		[ "$v" = lf_same ] && g=$same_gen
		# (as the superuser, like the others: the CPU time is read from /proc)
		[ "$v" = portable ] && g=$pgen && db=p
		out=$(psql_u -d "$db" <<SQL 2>&1
VACUUM ${utable[$v]};
BEGIN;
SET LOCAL lease_fence.generation = $g;
SELECT $cpu_now AS c0 \gset
\timing on
UPDATE ${utable[$v]} SET v = v + 1;
\timing off
SELECT 'cpu', ($cpu_now - :c0) / 1e6;
COMMIT;
SQL
		) || { echo "$out" >&2; die "UPDATE on ${utable[$v]} failed"; }
		ms=$(echo "$out" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | head -1)
		cpu=$(echo "$out" | sed -n 's/^cpu|\([0-9.]*\)$/\1/p' | head -1)
		[ -n "$ms" ] && [ -n "$cpu" ] || { echo "$out" >&2; die "no timing for ${utable[$v]}"; }
		if [ "$r" -gt 0 ]; then		# round 0 warms up
			sample update "$v" "$r" "$ms" ms
			sample update_cpu "$v" "$r" "$cpu" ms
		fi
	done
done

fi

# ---------------------------------------------------------------------
# 2. single-row UPDATE transactions, fenced and unfenced
# ---------------------------------------------------------------------
if want 2; then
lf_log "2. single-row UPDATE transactions (pgbench, 1 and 2 clients)"
gen=$(psql_u -c "SELECT lease_fence.next_generation()")
# synchronous_commit = off, so that a commit's WAL flush (the same for both)
# does not hide what the trigger costs; the generation is set for the session
opts="-c synchronous_commit=off -c lease_fence.generation=$gen"
for ((r = 1; r <= ROUNDS; r++)); do
	for c in 1 2; do
		for v in $(rotate "$r" update_none update_lf txn_none txn_lf txn_lf_resource txn_lf_resource_same); do
			o=$opts
			# the application form sets the generation in each transaction
			case $v in txn_*) o="-c synchronous_commit=off" ;; esac
			tps=$(pgbench_tps "$v" "$c" "$o" -D gen="$gen") || exit 1
			sample "rowupdate_c$c" "$v" "$r" "$tps" tps
		done
	done
	# the issued check's worst case, one client
	for v in $(rotate "$r" txn_lf_reread txn_lf_ext); do
		tps=$(pgbench_tps "$v" 1 "-c synchronous_commit=off") || exit 1
		sample reread_c1 "$v" "$r" "$tps" tps
	done
done

fi

# ---------------------------------------------------------------------
# 3. an acquire + release cycle, its floor, and redis-py's Lock
# ---------------------------------------------------------------------
if want 3; then
lf_log "3. acquire + release cycle: lease_fence, the floor, redis-py Lock"
release_lua="if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
redis_us() {	# redis-benchmark, one client, no pipelining: microseconds per request
	local rps
	rps=$(cd "$LF_WORK" && lf_as_user redis-benchmark -s "$LF_REDIS_SOCK" -c 1 -n "$REDIS_N" \
		-r 100000000 --csv "$@" | tail -1 | awk -F'","' '{ print $2 }')
	[ -n "$rps" ] || die "redis-benchmark $1 failed"
	awk -v r="$rps" 'BEGIN { printf "%.3f", 1e6 / r }'
}
# The same cycle over TCP on loopback, plain and TLS, against one more
# redis-server (a plain port and a TLS port, certificates made here): TLS
# must add no round trip per command, only the handshake of each new
# connection (pgbench keeps its session, the session its Redis connection).
tls=$LF_WORK/tls
lf_as_user mkdir -p "$tls"
(cd "$tls" && lf_as_user openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=bench-ca \
	-keyout ca.key -out ca.crt >/dev/null 2>&1 &&
	lf_as_user openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key \
		-out server.csr >/dev/null 2>&1 &&
	printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' | lf_as_user tee ext.cnf >/dev/null &&
	lf_as_user openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
		-extfile ext.cnf -out server.crt >/dev/null 2>&1) || die "could not make the TLS certificates"
tcp_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tls_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
lf_as_user redis-server --port "$tcp_port" --bind 127.0.0.1 --tls-port "$tls_port" \
	--tls-cert-file "$tls/server.crt" --tls-key-file "$tls/server.key" --tls-ca-cert-file "$tls/ca.crt" \
	--tls-auth-clients no --save '' --appendonly no --dir "$tls" --daemonize yes \
	--pidfile "$tls/redis.pid" --logfile "$tls/redis.log" >/dev/null || die "TLS redis-server did not start"
trap 'lf_as_user redis-cli -p "$tcp_port" SHUTDOWN NOSAVE >/dev/null 2>&1; lf_cleanup' EXIT
for i in $(seq 1 50); do
	lf_as_user redis-cli -p "$tcp_port" PING 2>/dev/null | grep -q PONG && break
	sleep 0.1
done
tcp_opts="-c lease_fence.redis_socket= -c lease_fence.redis_host=127.0.0.1 -c lease_fence.redis_port=$tcp_port"
tls_opts="-c lease_fence.redis_socket= -c lease_fence.redis_host=127.0.0.1 -c lease_fence.redis_port=$tls_port -c lease_fence.redis_sslmode=verify-full -c lease_fence.redis_sslrootcert=$tls/ca.crt"
# Redis requests per cycle, plain and TLS: the requests the server received
# over 2,000 cycles of one pgbench session (EVALSHA, EVAL, PING: its
# connection's check and key-prefix check included; not the commands the
# scripts run inside Redis), divided by 2,000
for v in tcp tls; do
	opts=$tcp_opts
	[ "$v" = tls ] && opts=$tls_opts
	lf_as_user redis-cli -p "$tcp_port" CONFIG RESETSTAT >/dev/null
	(cd "$LF_WORK" && lf_as_user env PGOPTIONS="$opts" "$PGBENCH" -n -M prepared -c 1 -t 2000 \
		-f "$LF_SRC/test/bench/pgbench/cycle.sql" >"$raw/commands_$v.out" 2>&1) || { cat "$raw/commands_$v.out"; die "pgbench cycle over $v failed"; }
	n=$(lf_as_user redis-cli -p "$tcp_port" INFO commandstats | tr -d '\r' |
		sed -n 's/^cmdstat_\(evalsha\|eval\|ping\|auth\|select\):calls=\([0-9]*\),.*/\2/p' | awk '{ n += $1 } END { print n + 0 }')
	sample commands "$v" 1 "$(awk -v n="$n" 'BEGIN { printf "%.3f", n / 2000 }')" commands
done
for ((r = 0; r <= ROUNDS; r++)); do
	for v in $(rotate "$r" lease_fence lease_fence_tcp lease_fence_tls sql_floor redis_set redis_eval redispy); do
		case $v in
		lease_fence)
			us=$(pgbench_tps cycle 1 "" | awk '{ printf "%.3f", 1e6 / $1 }') ;;
		lease_fence_tcp)
			us=$(pgbench_tps cycle 1 "$tcp_opts" | awk '{ printf "%.3f", 1e6 / $1 }') ;;
		lease_fence_tls)
			us=$(pgbench_tps cycle 1 "$tls_opts" | awk '{ printf "%.3f", 1e6 / $1 }') ;;
		sql_floor)
			us=$(pgbench_tps floor_sql 1 "" | awk '{ printf "%.3f", 1e6 / $1 }') ;;
		redis_set)
			us=$(redis_us SET 'bench:floor:__rand_int__' v NX PX 30000) ;;
		redis_eval)
			us=$(redis_us EVAL "$release_lua" 1 'bench:floor:__rand_int__' v) ;;
		redispy)
			us=$(cd "$LF_WORK" && lf_as_user "$PY" "$LF_SRC/test/bench/redispy_lock.py" "$LF_REDIS_SOCK" "$SECS" | awk '{ print $2 }') ;;
		esac
		[ -n "$us" ] || die "cycle measurement $v failed"
		[ "$r" -gt 0 ] && sample cycle "$v" "$r" "$us" us
	done
done
lf_as_user redis-cli -p "$tcp_port" SHUTDOWN NOSAVE >/dev/null 2>&1

fi

# ---------------------------------------------------------------------
# 4. next_generation() versus nextval()
# ---------------------------------------------------------------------
CALLS=200000
if want 4; then
lf_log "4. next_generation() versus nextval()"
for ((r = 1; r <= ROUNDS; r++)); do
	for v in $(rotate "$r" nextval next_generation); do
		# one call per transaction, as a client draws them, with the
		# default synchronous_commit and with synchronous_commit = off
		tps=$(pgbench_tps "$v" 1 "") || exit 1
		sample gen_sync "$v" "$r" "$tps" tps
		tps=$(pgbench_tps "$v" 1 "-c synchronous_commit=off") || exit 1
		sample gen_async "$v" "$r" "$tps" tps
		# CALLS calls inside one statement: the function alone
		if [ "$v" = nextval ]; then f="nextval('bench_seq')"; else f="lease_fence.next_generation()"; fi
		out=$(psql_u <<SQL 2>&1
\timing on
SELECT count($f) FROM generate_series(1, $CALLS);
SQL
		) || { echo "$out" >&2; die "$v in one statement failed"; }
		ms=$(echo "$out" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | head -1)
		sample gen_server "$v" "$r" "$(awk -v ms="$ms" -v n="$CALLS" 'BEGIN { printf "%.1f", n / (ms / 1000) }')" calls/s
	done
done
fi

# ---------------------------------------------------------------------
# 6. the cycle under concurrency, and what one cycle costs the backend
# ---------------------------------------------------------------------
# Throughput at 1, 4 and 16 clients (each on a resource of its own) against
# the floor at the same concurrency: two trivial SQL statements (pgbench)
# and lease_fence's own two scripts (redis-benchmark: EVALSHA of the acquire
# script and of the release script, with the SHA1s the extension sends),
# each measured alone.  All of them share the same 2 CPUs, so the floor of
# a cycle is the sum of its parts' times per operation:
# floor tps = 1 / (1/sql + 1/acquire script + 1/release script).  System calls per
# cycle: strace -c -f attached to one pgbench backend, divided by the
# cycles its session completed meanwhile (lease_fence.stats).
if want 6; then
lf_log "6. throughput at 1, 4, 16 clients, and system calls per cycle"
redis_rps() {	# clients, then the command: requests per second
	local c=$1; shift
	local rps
	rps=$(cd "$LF_WORK" && lf_as_user redis-benchmark -s "$LF_REDIS_SOCK" -c "$c" -n "$REDIS_N" \
		-r 100000000 --csv "$@" | tail -1 | awk -F'","' '{ print $2 }')
	[ -n "$rps" ] || die "redis-benchmark $1 failed"
	echo "$rps"
}
# the scripts' SHA1s as the extension sends them (the header the build made
# from scripts/*.lua); one cycle loads both
sha_of() { sed -n "s/^#define LF_LUA_${1^^}_SHA1 \"\([0-9a-f]\{40\}\)\"\$/\1/p" "$LF_SRC/src/redis/lua_scripts.h"; }
acq_sha=$(sha_of acquire)
rel_sha=$(sha_of release)
[ -n "$acq_sha" ] && [ -n "$rel_sha" ] || die "no script SHA1s in src/redis/lua_scripts.h"
psql_u -c "SELECT lease_fence.release('bench-load', (lease_fence.acquire('bench-load', 1000)).identity)" >/dev/null ||
	die "a cycle to load the scripts failed"
[ "$(lf_redis_cli SCRIPT EXISTS "$acq_sha" "$rel_sha" | tr -d '\n')" = 11 ] || die "the scripts are not loaded"
# the keys and arguments of a grant: a fresh lease key and generation key,
# a 32-digit identity, a TTL, a generation, no generation-key TTL
ident6=0123456789abcdef0123456789abcdef
for ((r = 1; r <= CLIENT_ROUNDS; r++)); do
	for c in 1 4 16; do
		for v in $(rotate "$r" lease_fence sql redis_set redis_eval); do
			case $v in
			lease_fence) x=$(pgbench_tps cycle_clients "$c" "") ;;
			sql) x=$(pgbench_tps floor_sql "$c" "") ;;
			redis_set) x=$(redis_rps "$c" EVALSHA "$acq_sha" 2 'bench:floor:{__rand_int__}' \
				'bench:floor:{__rand_int__}:gen' "$ident6" 30000 1000 0) ;;
			redis_eval) x=$(redis_rps "$c" EVALSHA "$rel_sha" 1 'bench:floor:{__rand_int__}' "$ident6") ;;
			esac
			[ -n "$x" ] || die "throughput $v at $c clients failed"
			sample "clients_$c" "$v" "$r" "$x" tps
		done
	done
done

command -v strace >/dev/null || die "strace is missing"
acquired() { psql_u -c "SELECT count FROM lease_fence.stats WHERE operation = 'acquire' AND outcome = 'acquired'"; }
(cd "$LF_WORK" && lf_as_user env PGAPPNAME=bench_strace "$PGBENCH" -n -M prepared -c 1 -T 8 \
	-f "$LF_SRC/test/bench/pgbench/cycle.sql" >"$raw/pgbench_strace.out" 2>&1) &
bg=$!
pid=""
for i in $(seq 1 100); do
	pid=$(psql_u -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'bench_strace'" 2>/dev/null)
	[ -n "$pid" ] && break
	sleep 0.05
done
[ -n "$pid" ] || die "no pgbench backend to trace"
sleep 1		# past the connection's set-up
a0=$(acquired)
timeout -s INT 4 strace -c -f -p "$pid" -o "$raw/strace.txt" >/dev/null 2>&1
a1=$(acquired)
wait "$bg"
calls=$(awk '$NF == "total" { print $4 }' "$raw/strace.txt")
[ -n "$calls" ] && [ "$a1" -gt "$a0" ] || { cat "$raw/strace.txt"; die "strace counted nothing"; }
sample syscalls cycle 1 "$(awk -v s="$calls" -v n="$((a1 - a0))" 'BEGIN { printf "%.2f", s / n }')" calls
awk '$1 ~ /^[0-9.]+$/ && $NF != "total" { print $NF, $4 }' "$raw/strace.txt" |
	while read -r name count; do sample syscall "$name" 1 "$(awk -v s="$count" -v n="$((a1 - a0))" 'BEGIN { printf "%.2f", s / n }')" calls; done

# Where the 16 backends of the cycle spend their time: pg_stat_activity's
# wait event of each, sampled by psql in a loop during a run of its own (the
# sampling takes CPU, so this run's throughput is not reported).  CPU means
# running or runnable; Extension is lease_fence waiting for Redis.
(cd "$LF_WORK" && lf_as_user env PGAPPNAME=bench_waits "$PGBENCH" -n -M prepared -c 16 -j 16 -T 5 \
	-f "$LF_SRC/test/bench/pgbench/cycle_clients.sql" >"$raw/pgbench_waits.out" 2>&1) &
bg=$!
sleep 1
for i in $(seq 1 150); do
	psql_u -c "SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-') FROM pg_stat_activity WHERE application_name = 'bench_waits'"
done >"$raw/waits.txt"
wait "$bg"
n=$(wc -l <"$raw/waits.txt")
[ "$n" -gt 0 ] || die "no wait events sampled"
sort "$raw/waits.txt" | uniq -c | while read -r count name; do
	sample waits "$name" 1 "$(awk -v s="$count" -v n="$n" 'BEGIN { printf "%.3f", s / n }')" share
done
fi

# ---------------------------------------------------------------------
# 5. backend memory over many cycles and fenced updates
# ---------------------------------------------------------------------
# rss_series NAME PGBENCH-ARGS...: run pgbench with one client, sample the
# VmRSS and RssAnon of its backend every half second into $raw/rss_NAME.dat
rss_series() {
	local name=$1; shift
	local dat=$raw/rss_$name.dat pid="" i t0 now st
	(cd "$LF_WORK" && lf_as_user "$PGBENCH" -n -M prepared -c 1 -D rows="$ROWS" "$@" \
		>"$raw/pgbench_$name.out" 2>&1) &
	local bg=$!
	for i in $(seq 1 100); do
		pid=$(psql_u -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'" 2>/dev/null)
		[ -n "$pid" ] && break
		sleep 0.05
	done
	[ -n "$pid" ] || die "no pgbench backend for $name"
	t0=$(date +%s.%N)
	echo "# seconds vmrss_kB rssanon_kB" >"$dat"
	while kill -0 "$bg" 2>/dev/null; do
		st=$(grep -E '^(VmRSS|RssAnon):' "/proc/$pid/status" 2>/dev/null | awk '{ printf "%s ", $2 }')
		now=$(date +%s.%N)
		[ -n "$st" ] && echo "$(awk -v a="$now" -v b="$t0" 'BEGIN { printf "%.2f", a - b }') $st" >>"$dat"
		sleep 0.5
	done
	wait "$bg" || { cat "$raw/pgbench_$name.out" >&2; die "pgbench $name failed"; }
	grep -q 'aborted' "$raw/pgbench_$name.out" && { cat "$raw/pgbench_$name.out" >&2; die "pgbench $name aborted"; }
	return 0
}

if want 5; then
lf_log "5. backend memory: $MEM_CYCLES acquire/release cycles"
rss_series cycles -t "$MEM_CYCLES" -f "$LF_SRC/test/bench/pgbench/cycle.sql"
lf_log "5. backend memory: $MEM_UPDATES fenced single-row UPDATEs"
gen=$(psql_u -c "SELECT lease_fence.next_generation()")
PGOPTIONS_SAVE=${PGOPTIONS:-}
export PGOPTIONS="-c synchronous_commit=off -c lease_fence.generation=$gen"
rss_series updates -t "$MEM_UPDATES" -f "$LF_SRC/test/bench/pgbench/update_mem.sql"
export PGOPTIONS=$PGOPTIONS_SAVE

# five 200k-row fenced UPDATEs (1M row updates) in one session; the backend
# reads its own /proc status between statements
lf_log "5. backend memory: 5 x $ROWS-row fenced UPDATEs in one session"
{
	echo "\\set ON_ERROR_STOP 1"
	echo "SELECT 0, substring(s from 'VmRSS:\\s*(\\d+)'), substring(s from 'RssAnon:\\s*(\\d+)') FROM pg_read_file('/proc/' || pg_backend_pid() || '/status') s;"
	for i in 1 2 3 4 5; do
		echo "BEGIN; SELECT lease_fence.set_generation(lease_fence.next_generation()) \\g /dev/null"
		echo "UPDATE u_mem SET v = v + 1;"
		echo "COMMIT;"
		echo "SELECT $((i * ROWS)), substring(s from 'VmRSS:\\s*(\\d+)'), substring(s from 'RssAnon:\\s*(\\d+)') FROM pg_read_file('/proc/' || pg_backend_pid() || '/status') s;"
	done
} >"$raw/bulk_mem.sql"
psql_u -F ' ' -f "$raw/bulk_mem.sql" >"$raw/rss_bulk.dat" 2>&1 || { cat "$raw/rss_bulk.dat"; die "bulk memory test failed"; }
fi

# ---------------------------------------------------------------------
# 7. a fenced job, four ways, at 1, 4 and 16 clients
# ---------------------------------------------------------------------
# The job an application does with a lease: take it, write one row under its
# token, give it back.  test/bench/job.c runs it in threads, one PostgreSQL
# connection each, each client on a resource and a row of its own (no
# contention: what a job costs, not who waits):
#   a    lease_fence as applications use it today, three round trips:
#        acquire(); BEGIN; set the generation; UPDATE; COMMIT (one string);
#        release()
#   job  lease_fence in one round trip: BEGIN; acquire(scope =>
#        'transaction'); UPDATE; COMMIT, pipelined (libpq's pipeline mode,
#        one sync); the server releases the lease after the COMMIT
#   b    Redis alone, as a careful application writes it, three round
#        trips: one EVALSHA of a script doing SET NX PX and INCR of a token
#        key, the prepared UPDATE ... SET fence = token WHERE fence <= token
#        (autocommit), EVALSHA of a compare-and-delete: the comparison
#   b2   the same with SET NX PX and INCR as two commands (four round trips)
# The backends' CPU time and context switches per job are read from /proc
# around the timed window (all the clients' backends; Redis' CPU time and
# the client's apart: b does in redis-server and in the client what
# lease_fence does in the backend).  Every job
# must succeed, or job.c stops the run.  The commits wait for their WAL
# flush in every mode: fsync and synchronous_commit are on (checked, since
# they are what a real job pays).
if want 7; then
lf_log "7. a fenced job: lease_fence in 3 round trips, in 1 (transaction scope), Redis alone (one script, two commands); 1, 4, 16 clients"
[ "$(psql_u -c "SHOW fsync")" = on ] && [ "$(psql_u -c "SHOW synchronous_commit")" = on ] ||
	die "section 7 needs fsync and synchronous_commit on"
job=$LF_WORK/job
# the headers and the library of the installation under test, when it has
# its own (LF_PG_ROOT); Debian's copy has neither, and -lpq finds Debian's
pg_inc=$("$PG_CONFIG" --includedir)
pg_lib=$("$PG_CONFIG" --libdir)
lf_as_user gcc -O2 -Wall -Wextra -Werror -I"$pg_inc" -o "$job" "$LF_SRC/test/bench/job.c" \
	-L"$pg_lib" -Wl,-rpath,"$pg_lib" -lpq -lhiredis -lpthread >"$raw/job_build.log" 2>&1 ||
	{ cat "$raw/job_build.log"; die "test/bench/job.c did not build"; }
redis_pid=$(cat "$LF_WORK/redis.pid")
for ((r = 1; r <= JOB_ROUNDS; r++)); do
	for c in 1 4 16; do
		for v in $(rotate "$r" $JOB_MODES); do
			out=$(lf_as_user "$job" "$v" "$c" "$JOB_SECS" "$LF_REDIS_SOCK" "$redis_pid" 2>&1) ||
				{ echo "$out" >&2; die "job $v at $c clients failed"; }
			echo "round=$r $out" >>"$raw/job.out"
			field() { echo "$out" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
			[ -n "$(field jobs_per_s)" ] || { echo "$out" >&2; die "job $v at $c clients printed no result"; }
			sample "job_c$c" "$v" "$r" "$(field jobs_per_s)" tps
			sample "job_cpu_c$c" "$v" "$r" "$(field cpu_us_per_job)" us
			sample "job_ctx_c$c" "$v" "$r" "$(field ctx_per_job)" switches
			sample "job_redis_cpu_c$c" "$v" "$r" "$(field redis_cpu_us_per_job)" us
			sample "job_client_cpu_c$c" "$v" "$r" "$(field client_cpu_us_per_job)" us
		done
	done
done

# The system calls of one job in its backend (the one-round-trip job, one
# client): strace -c attached to it for 3 s, divided by the leases its
# session was granted meanwhile (lease_fence.stats)
if [[ " $JOB_MODES " == *" job "* ]]; then
	acquired() { psql_u -c "SELECT count FROM lease_fence.stats WHERE operation = 'acquire' AND outcome = 'acquired'"; }
	(cd "$LF_WORK" && lf_as_user env PGAPPNAME=bench_job_strace "$job" job 1 6 "$LF_REDIS_SOCK" >"$raw/job_strace.out" 2>&1) &
	bg=$!
	for _ in $(seq 1 100); do
		pid=$(psql_u -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'bench_job_strace'" 2>/dev/null)
		[ -n "$pid" ] && break
		sleep 0.05
	done
	[ -n "$pid" ] || die "no job backend to trace"
	sleep 1
	a0=$(acquired)
	timeout -s INT 3 strace -c -f -p "$pid" -o "$raw/job_strace.txt" >/dev/null 2>&1
	a1=$(acquired)
	wait "$bg" || { cat "$raw/job_strace.out"; die "the traced job run failed"; }
	calls=$(awk '$NF == "total" { print $4 }' "$raw/job_strace.txt")
	[ -n "$calls" ] && [ "$a1" -gt "$a0" ] || { cat "$raw/job_strace.txt"; die "strace counted nothing"; }
	sample job_syscalls job 1 "$(awk -v s="$calls" -v n="$((a1 - a0))" 'BEGIN { printf "%.2f", s / n }')" calls
	awk '$1 ~ /^[0-9.]+$/ && $NF != "total" { print $NF, $4 }' "$raw/job_strace.txt" |
		while read -r name count; do sample job_syscall "$name" 1 "$(awk -v s="$count" -v n="$((a1 - a0))" 'BEGIN { printf "%.2f", s / n }')" calls; done
fi
fi

# ---------------------------------------------------------------------
# 8. elections: failover and the split-brain window
# ---------------------------------------------------------------------
# test/bench/elections.py, ELECTION_ROUNDS rounds of each, on one election
# with ttl_ms ELECTION_TTL_MS: a frozen leader (it never renews: its client
# sends nothing more, its backend stays healthy) and a follower waiting in
# campaign(..., wait_ms NULL): the follower's win minus the leader's lease
# end (the time before its campaign was sent + the TTL: an upper bound);
# the follower's win after resign(), after the leader's client closed its
# connection, and after pg_terminate_backend() of the leader's backend; and
# the old leader writing in a loop under its term while the new leader
# campaigns: old-term rows committed after the new leader's campaign did, in
# the commit order of a counter row every transaction updates last (its
# row lock is held to COMMIT).  Times on the monotonic clock of one process.
if want 8 || want elections; then
lf_log "8. elections: failover after a frozen leader, after resign / exit; the split-brain window ($ELECTION_ROUNDS rounds, ttl_ms $ELECTION_TTL_MS)"
(cd "$LF_WORK" && lf_as_user "$PY" "$LF_SRC/test/bench/elections.py" "$ELECTION_ROUNDS" "$ELECTION_TTL_MS") \
	>"$raw/elections.csv" 2>"$raw/elections.log" || { cat "$raw/elections.log" >&2; die "the elections section failed"; }
grep -E '^election_' "$raw/elections.csv" >>"$samples"
fi

# ---------------------------------------------------------------------
# 9. fair waiting: arrival order, requests per grant, handover times
# ---------------------------------------------------------------------
# test/bench/fair.py: FAIR_WAITERS + 1 sessions (one process and connection
# each) acquire one resource in a loop (wait_ms 60000), hold it FAIR_HOLD_MS
# and release it, FAIR_GRANTS grants a run; four runs a round, the order
# rotated: "order" (fair => true, each holder reads queue()'s next identity
# before releasing: the grant after must go to it), "fair" and "unfair"
# (fair => false, today's wait) measured alone: the Redis requests per grant
# (INFO commandstats deltas of what the backends send) and the time from a
# release to the next holder's acquire returning; and "advisory", the
# baseline under the same load: pg_advisory_lock / pg_advisory_unlock of one
# key through the same sessions (no Redis; PostgreSQL wakes one waiter).
if want 9 || want fair; then
lf_log "9. fair waiting: $FAIR_WAITERS waiters, holders hold $FAIR_HOLD_MS ms, $FAIR_GRANTS grants a run, $FAIR_ROUNDS rounds"
: >"$raw/fair.csv"
fair_load0=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= FAIR_ROUNDS; r++)); do
	for v in $(rotate "$r" order fair unfair advisory); do
		(cd "$LF_WORK" && lf_as_user "$PY" "$LF_SRC/test/bench/fair.py" "$v" "$r" "$FAIR_GRANTS" \
			"$FAIR_WAITERS" "$FAIR_HOLD_MS" "$LF_REDIS_SOCK") >>"$raw/fair.csv" 2>>"$raw/fair.log" ||
			{ cat "$raw/fair.log" >&2; die "section 9, $v round $r, failed"; }
	done
done
grep -E '^fair_' "$raw/fair.csv" >>"$samples"
fair_load="$fair_load0 at its start, $(cut -d' ' -f1-3 /proc/loadavg) at its end"
fi

# ---------------------------------------------------------------------
# 1, again: instructions per row, counted by callgrind
# ---------------------------------------------------------------------
# Wall and CPU times move with whatever else runs on the machine; the number
# of instructions an UPDATE executes does not.  Each variant's UPDATE of
# LF_BENCH_CG_ROWS rows runs once in a single-user backend under callgrind,
# which counts only inside the executor (standard_ExecutorRun), on tables in
# the same physical state.  Single-user mode needs the server stopped.
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
if want 1; then
	lf_log "1. instructions per row of the UPDATE (callgrind, $CG_ROWS rows)"
	# a new generation, issued (the fence refuses one that was not: LF004)
	new_gen_cg=$(psql_u -d cg -c "SELECT lease_fence.next_generation()")
	lf_stop_pg
	for v in none builtin plpgsql lf_new lf_same; do
		g=$new_gen_cg
		[ "$v" = lf_same ] && g=$same_gen_cg
		printf 'BEGIN;\nSET LOCAL lease_fence.generation = %s;\nUPDATE %s SET v = v + 1;\nCOMMIT;\n' "$g" "${utable[$v]}" |
			(cd "$LF_WORK" && lf_as_user valgrind --tool=callgrind --callgrind-out-file="$raw/callgrind.$v" \
				--toggle-collect=standard_ExecutorRun "$PG_BIN/postgres" --single -D "$LF_PGDATA" cg) \
			>"$raw/callgrind_$v.log" 2>&1 || { tail -20 "$raw/callgrind_$v.log"; die "callgrind of $v failed"; }
		ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$raw/callgrind_$v.log")
		[ -n "$ir" ] && [ "$ir" -gt 0 ] || { tail -20 "$raw/callgrind_$v.log"; die "no instruction count for $v"; }
		sample update_ir "$v" 1 "$(awk -v i="$ir" -v n="$CG_ROWS" 'BEGIN { printf "%.1f", i / n }')" Ir
	done
	# the issued check at its worst, counted: CG_TXNS transactions, each
	# supplying a generation issued just before by a plain nextval (which
	# leaves the backend's cache behind, as a draw in another backend does),
	# on the checked table and on the one with external tokens; the
	# difference per transaction is the re-read of the sequence and the check
	lf_log "1. instructions per transaction of the issued check's worst case (callgrind, $CG_TXNS transactions)"
	for v in lf_reread lf_ext; do
		t=u_lf_reread
		[ "$v" = lf_ext ] && t=u_lf_ext
		for ((i = 1; i <= CG_TXNS; i++)); do
			printf "BEGIN;\nSELECT lease_fence.set_generation(nextval('lease_fence.generation_seq'));\nUPDATE %s SET v = v + 1 WHERE id = %d;\nCOMMIT;\n" \
				"$t" $(( (i - 1) % CG_ROWS + 1 ))
		done |
			(cd "$LF_WORK" && lf_as_user valgrind --tool=callgrind --callgrind-out-file="$raw/callgrind.$v" \
				--toggle-collect=standard_ExecutorRun "$PG_BIN/postgres" --single -D "$LF_PGDATA" cg) \
			>"$raw/callgrind_$v.log" 2>&1 || { tail -20 "$raw/callgrind_$v.log"; die "callgrind of $v failed"; }
		grep -q 'ERROR' "$raw/callgrind_$v.log" && { grep -m3 -A2 'ERROR' "$raw/callgrind_$v.log"; die "$v failed"; }
		ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$raw/callgrind_$v.log")
		[ -n "$ir" ] && [ "$ir" -gt 0 ] || { tail -20 "$raw/callgrind_$v.log"; die "no instruction count for $v"; }
		sample reread_ir "$v" 1 "$(awk -v i="$ir" -v n="$CG_TXNS" 'BEGIN { printf "%.1f", i / n }')" Ir
	done
fi

# 6, again: instructions per cycle, counted by callgrind inside the executor
# of a single-user backend that runs CG_CYCLES acquire + release cycles in
# one statement (the lateral calls are correlated with the series, so each
# row calls both functions)
if want 6; then
	lf_log "6. instructions per acquire + release cycle (callgrind, $CG_CYCLES cycles)"
	lf_stop_pg
	echo "SELECT count(r.status) FROM generate_series(1, $CG_CYCLES) g, LATERAL lease_fence.acquire('bench-cg', 30000 + 0 * g) a, LATERAL lease_fence.release('bench-cg', a.identity) r WHERE r.status = 'released';" |
		(cd "$LF_WORK" && lf_as_user valgrind --tool=callgrind --callgrind-out-file="$raw/callgrind.cycle" \
			--toggle-collect=standard_ExecutorRun "$PG_BIN/postgres" --single -D "$LF_PGDATA" postgres) \
		>"$raw/callgrind_cycle.log" 2>&1 || { tail -20 "$raw/callgrind_cycle.log"; die "callgrind of the cycle failed"; }
	grep -q "count = \"$CG_CYCLES\"" "$raw/callgrind_cycle.log" || { tail -20 "$raw/callgrind_cycle.log"; die "the callgrind cycles did not all release"; }
	ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$raw/callgrind_cycle.log")
	[ -n "$ir" ] && [ "$ir" -gt 0 ] || { tail -20 "$raw/callgrind_cycle.log"; die "no instruction count for the cycle"; }
	sample cycle_ir cycle 1 "$(awk -v i="$ir" -v n="$CG_CYCLES" 'BEGIN { printf "%.0f", i / n }')" Ir
fi

# 7, again: instructions per job in the backend, counted by callgrind in a
# single-user backend (prepared statements run by EXECUTE): CG_JOBS
# transaction-scoped jobs (BEGIN; acquire(..., 'transaction'); the fenced
# UPDATE; COMMIT), and CG_JOBS of the careful pattern's backend part (its
# compare-and-set UPDATE, autocommit).  Everything the backend runs from
# PostgresMain on is counted -- parsing, planning, the COMMIT, the release
# after it -- less a run that reads no statement (start-up and shut-down),
# divided by the jobs; each count starts from freshly rewritten tables.  The
# difference is what the lease costs the backend in user space, which other
# load cannot move (the kernel's part -- system calls, wake-ups, the WAL
# flush -- is not counted).
if want 7; then
	lf_log "7. instructions per job in the backend (callgrind, $CG_JOBS jobs)"
	lf_stop_pg
	cg_single() {	# name: callgrind a single-user backend on stdin, print its Ir
		# the tables in the same state for every count: rewritten (the runs
		# before left HOT chains and dead rows of their own)
		echo "VACUUM FULL ANALYZE bench_job_item, bench_job_item2, lease_fence.resource_generation;" |
			(cd "$LF_WORK" && lf_as_user "$PG_BIN/postgres" --single -D "$LF_PGDATA" postgres) \
			>"$raw/vacuum_job_$1.log" 2>&1 || { tail -20 "$raw/vacuum_job_$1.log" >&2; die "VACUUM before job $1 failed"; }
		(cd "$LF_WORK" && lf_as_user valgrind --tool=callgrind --callgrind-out-file="$raw/callgrind.job_$1" \
			--toggle-collect=PostgresMain "$PG_BIN/postgres" --single -D "$LF_PGDATA" postgres) \
			>"$raw/callgrind_job_$1.log" 2>&1 || { tail -20 "$raw/callgrind_job_$1.log" >&2; die "callgrind of job $1 failed"; }
		grep -q 'ERROR' "$raw/callgrind_job_$1.log" && { grep -m3 -A2 'ERROR' "$raw/callgrind_job_$1.log" >&2; die "job $1 failed under callgrind"; }
		local ir
		ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$raw/callgrind_job_$1.log")
		[ -n "$ir" ] && [ "$ir" -gt 0 ] || { tail -20 "$raw/callgrind_job_$1.log" >&2; die "no instruction count for job $1"; }
		echo "$ir"
	}
	idle_ir=$(cg_single idle </dev/null) || exit 1
	for v in job b; do
		# prepared, as the clients send them (planned once, not per job)
		ir=$({
			if [ "$v" = job ]; then
				echo "PREPARE acq(text) AS SELECT status FROM lease_fence.acquire(\$1, 5000, scope => 'transaction');"
				echo "PREPARE upd(int) AS UPDATE bench_job_item SET v = v + 1 WHERE id = \$1;"
			else
				echo "PREPARE upd(bigint, int) AS UPDATE bench_job_item2 SET v = v + 1, fence = \$1 WHERE id = \$2 AND fence <= \$1;"
			fi
			for ((i = 1; i <= CG_JOBS; i++)); do
				if [ "$v" = job ]; then
					printf "BEGIN;\nEXECUTE acq('job:cg');\nEXECUTE upd(1);\nCOMMIT;\n"
				else
					printf "EXECUTE upd(%d, 1);\n" $((1000000000000 + i))
				fi
			done
		} | cg_single "$v") || exit 1
		if [ "$v" = job ]; then
			n=$(grep -c 'status = "acquired"' "$raw/callgrind_job_$v.log")
			[ "$n" = "$CG_JOBS" ] || { tail -20 "$raw/callgrind_job_$v.log"; die "$n of $CG_JOBS callgrind jobs acquired"; }
		fi
		sample job_ir "$v" 1 "$(awk -v i="$ir" -v z="$idle_ir" -v n="$CG_JOBS" 'BEGIN { printf "%.0f", (i - z) / n }')" Ir
	done
fi

# 9, again: instructions per acquire + release with no contention (one
# session, the resource free every time), fair => true against false, both
# with wait_ms 1000 (the waiting path; nobody waits, so neither waits):
# callgrind inside the executor of a single-user backend, CG_FAIR cycles in
# one statement each, as section 6 counts its cycle
if want 9 || want fair; then
	lf_log "9. instructions per acquire + release, fair and unfair, no contention (callgrind, $CG_FAIR cycles)"
	lf_stop_pg
	for v in unfair fair; do
		f=false
		[ "$v" = fair ] && f=true
		echo "SELECT count(r.status) FROM generate_series(1, $CG_FAIR) g, LATERAL lease_fence.acquire('bench-cg-$v', 30000 + 0 * g, 0, 'explicit', 1000, false, $f) a, LATERAL lease_fence.release('bench-cg-$v', a.identity) r WHERE r.status = 'released';" |
			(cd "$LF_WORK" && lf_as_user valgrind --tool=callgrind --callgrind-out-file="$raw/callgrind.fair_$v" \
				--toggle-collect=standard_ExecutorRun "$PG_BIN/postgres" --single -D "$LF_PGDATA" postgres) \
			>"$raw/callgrind_fair_$v.log" 2>&1 || { tail -20 "$raw/callgrind_fair_$v.log"; die "callgrind of the $v cycle failed"; }
		grep -q "count = \"$CG_FAIR\"" "$raw/callgrind_fair_$v.log" || { tail -20 "$raw/callgrind_fair_$v.log"; die "the $v callgrind cycles did not all release"; }
		ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$raw/callgrind_fair_$v.log")
		[ -n "$ir" ] && [ "$ir" -gt 0 ] || { tail -20 "$raw/callgrind_fair_$v.log"; die "no instruction count for the $v cycle"; }
		sample fair_ir "$v" 1 "$(awk -v i="$ir" -v n="$CG_FAIR" 'BEGIN { printf "%.0f", i / n }')" Ir
	done
fi

# ---------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------
elapsed=$(( $(date +%s) - started ))
{
	echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit=$commit"
	echo "cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs"
	echo "memory=$(free -g | awk '/^Mem:/ { print $2 " GiB" }')"
	echo "kernel=$(uname -sr)"
	echo "postgres=$("$PG_BIN/postgres" --version | sed 's/^postgres (PostgreSQL) //')"
	echo "redis=$(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')"
	echo "python_redis=$("$PY" -c 'import redis; print(redis.__version__)')"
	echo "rounds=$ROUNDS"
	echo "seconds=$SECS"
	echo "rows=$ROWS"
	echo "redis_n=$REDIS_N"
	echo "calls=$CALLS"
	echo "mem_cycles=$MEM_CYCLES"
	echo "mem_updates=$MEM_UPDATES"
	echo "elapsed=$elapsed"
	echo "load=${load_start} at the start, ${load_end:-?} at the end (1, 5, 15 min)"
	echo "cg_rows=$CG_ROWS"
	echo "cg_txns=$CG_TXNS"
	echo "cg_cycles=$CG_CYCLES"
	echo "cg_jobs=$CG_JOBS"
	echo "job_rounds=$JOB_ROUNDS"
	echo "job_seconds=$JOB_SECS"
	echo "election_rounds=$ELECTION_ROUNDS"
	echo "election_ttl_ms=$ELECTION_TTL_MS"
	echo "fair_rounds=$FAIR_ROUNDS"
	echo "fair_grants=$FAIR_GRANTS"
	echo "fair_waiters=$FAIR_WAITERS"
	echo "fair_hold_ms=$FAIR_HOLD_MS"
	echo "cg_fair=$CG_FAIR"
	echo "fair_load=${fair_load:-?}"
} >"$raw/meta.txt"

mkdir -p "$OUT"
cp "$samples" "$OUT/samples.csv"
for f in rss_cycles.dat rss_updates.dat rss_bulk.dat; do
	if [ -f "$raw/$f" ]; then cp "$raw/$f" "$OUT/$f"; else rm -f "$OUT/$f"; fi
done
"$PY" "$here/report.py" "$raw/meta.txt" "$OUT" || die "report failed"
if [ -z "${LF_BENCH_ONLY:-}" ]; then
	(cd "$OUT" && gnuplot "$here/plot.gp") || die "gnuplot failed"
fi
rm -f "$OUT/ratios.dat"
cat "$OUT/results.txt"
echo
lf_log "wrote $OUT/results.txt, $OUT/samples.csv, $OUT/bench.png (${elapsed}s)"
