#!/usr/bin/env bash
# test/bench/portable_vs_c.sh — the portable edition's PL/pgSQL fence trigger
# (portable/lease_fence_portable.sql) against the C trigger, on a 200k-row
# UPDATE under a current generation.  A light measurement, not test/bench/run.sh.
#
# Builds and installs the C extension into a private copy of PostgreSQL 15
# (test/lib.sh), starts a throwaway server, makes two databases — c (CREATE
# EXTENSION lease_fence) and p (the portable script, installed by a
# non-superuser owner) — with the same table, and times
#   UPDATE t SET v = v + 1      (200k rows; every row's fence becomes G)
# in each, interleaved c p c p ... for LF_BENCH_ROUNDS rounds (default 5)
# after one warm-up round each, plus the same UPDATE with no trigger.
# Prints the medians and the ratio portable / C.  Run as root like the
# other test scripts (the server runs as the postgres user).
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"
ROUNDS=${LF_BENCH_ROUNDS:-5}
ROWS=${LF_BENCH_ROWS:-200000}

trap lf_cleanup EXIT
lf_need_packages || exit 1
lf_make_workdir "$top" || exit 1
lf_build_install || exit 1
lf_start_pg "shared_buffers = 256MB" "synchronous_commit = off" "autovacuum = off" || exit 1

PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
lf_as_user "${PSQL[@]}" -d postgres -c "CREATE ROLE lf_owner LOGIN" \
	-c "CREATE DATABASE c" -c "CREATE DATABASE p OWNER lf_owner" -c "CREATE DATABASE n" || exit 1
lf_as_user "${PSQL[@]}" -d c -c "CREATE EXTENSION lease_fence" || exit 1
lf_as_user "${PSQL[@]}" -U lf_owner -d p -f "$LF_SRC/portable/lease_fence_portable.sql" || exit 1

setup="CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, fence bigint NOT NULL DEFAULT 0) WITH (fillfactor = 50);
INSERT INTO t (id, v) SELECT i, 0 FROM generate_series(1, $ROWS) i;"
for db in c p; do
	lf_as_user "${PSQL[@]}" -U "$([ $db = p ] && echo lf_owner || echo postgres)" -d $db \
		-c "$setup" -c "SELECT lease_fence.protect('t')" \
		-c "SELECT count(lease_fence.next_generation()) FROM generate_series(1, 1000)" >/dev/null || exit 1
done
lf_as_user "${PSQL[@]}" -d n -c "$setup" >/dev/null || exit 1
for db in c p n; do lf_as_user "$PG_BIN/vacuumdb" -q -d $db -z >/dev/null; done

# one timed UPDATE in database $1 under generation $2: prints milliseconds
timed_update() {
	local user=postgres
	[ "$1" = p ] && user=lf_owner
	lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -U $user -d "$1" <<SQL | sed -nE 's/^Time: ([0-9.]+) ms.*/\1/p' | tail -1
BEGIN;
SET LOCAL lease_fence.generation = $2;
\\timing on
UPDATE t SET v = v + 1;
\\timing off
COMMIT;
SQL
	lf_as_user "$PG_BIN/psql" -X -q -U $user -d "$1" -c "VACUUM t" >/dev/null
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

declare -A times
g=1
for r in $(seq 0 "$ROUNDS"); do
	for db in c p n; do
		ms=$(timed_update $db $g)
		[ -n "$ms" ] || { echo "UPDATE failed in $db" >&2; exit 1; }
		# round 0 is the warm-up
		[ "$r" -gt 0 ] && times[$db]+="$ms "
	done
	g=$((g + 1))
done
# every row carries the last generation in both fenced databases
for db in c p; do
	user=postgres; [ $db = p ] && user=lf_owner
	lf_as_user "${PSQL[@]}" -U $user -d $db -tAc \
		"SELECT count(*) = $ROWS AND min(fence) = $((g - 1)) AND max(fence) = $((g - 1)) FROM t" | grep -qx t ||
		{ echo "database $db: fences not as expected" >&2; exit 1; }
done

c=$(tr ' ' '\n' <<<"${times[c]}" | grep . | median)
p=$(tr ' ' '\n' <<<"${times[p]}" | grep . | median)
n=$(tr ' ' '\n' <<<"${times[n]}" | grep . | median)
printf '%s-row UPDATE, median of %s rounds (ms): no trigger %s, C fence %s, portable fence %s\n' "$ROWS" "$ROUNDS" "$n" "$c" "$p"
awk -v c="$c" -v p="$p" -v n="$n" 'BEGIN {
	printf "portable / C: %.2fx   (trigger cost over no trigger: C %.0f ms, portable %.0f ms, %.2fx)\n", p / c, c - n, p - n, (p - n) / (c - n) }'
