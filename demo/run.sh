#!/usr/bin/env bash
# demo/run.sh — lease_fence in one minute, on a throwaway PostgreSQL and Redis.
#
# Two workers want the same resource.  Worker A takes the Redis lease (ttl
# 1 s) and gets generation gA — then stalls (a GC pause, a frozen VM, a lost
# network) for longer than its lease.  The lease expires; worker B takes it
# with generation gB > gA and writes.  A wakes up, still believes it holds
# the lease, and writes: the fence rejects A's write with SQLSTATE LF001 in
# the same atomic UPDATE, and B's write stands.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/lib.sh"

lf_need_packages || exit 1
trap lf_cleanup EXIT
lf_make_workdir "$top" || exit 1
lf_build_install || exit 1
lf_start_redis || exit 1
lf_start_pg "lease_fence.redis_socket = '$LF_REDIS_SOCK'" || exit 1

q() { lf_as_user "$PG_BIN/psql" -X -q -At -F '|' -v ON_ERROR_STOP=1 "$@"; }

q <<'SQL' >/dev/null
CREATE EXTENSION lease_fence;
CREATE TABLE account (id int PRIMARY KEY, owner text, balance int);
INSERT INTO account VALUES (1, 'nobody', 100);
SELECT lease_fence.protect('account');
SQL

outcomes=()
row() { outcomes+=("$(printf '%-3s %-8s %-34s %-22s %s' "$1" "$2" "$3" "$4" "$5")"); }

# worker A acquires
IFS='|' read -r a_status a_identity a_gen < <(q -c \
	"SELECT status, identity, generation FROM lease_fence.acquire('account:1', 1000)")
row 1 "A" "acquire('account:1', ttl 1000 ms)" "$a_status" "generation $a_gen"

echo "worker A holds the lease with generation $a_gen ... and stalls for 1.5 s"
sleep 1.5

# worker B acquires after A's lease expired, and writes under its generation
IFS='|' read -r b_status b_identity b_gen < <(q -c \
	"SELECT status, identity, generation FROM lease_fence.acquire('account:1', 10000)")
row 2 "B" "acquire('account:1', ttl 10000 ms)" "$b_status" "generation $b_gen"
# (the verdicts below come from what the server answered: psql's exit status
# and its LAST_ERROR_SQLSTATE variable, never from words in captured output)
if q -c "BEGIN" -c "SET LOCAL lease_fence.generation = $b_gen" \
	-c "UPDATE account SET owner = 'worker B', balance = balance + 10 WHERE id = 1" -c "COMMIT" \
	>/dev/null 2>"$LF_WORK/b_write.err"; then
	b_write=committed
else
	b_write="failed (exit $?)"
fi
row 3 "B" "UPDATE ... (generation $b_gen)" "$b_write" ""

# worker A wakes up and writes under its old generation; the script goes on
# after the error so that psql can tell which SQLSTATE it was
a_code=$(lf_as_user "$PG_BIN/psql" -X -q -At 2>"$LF_WORK/a_write.err" <<SQL
\set VERBOSITY verbose
BEGIN;
SET LOCAL lease_fence.generation = $a_gen;
UPDATE account SET owner = 'worker A', balance = balance - 1000 WHERE id = 1;
COMMIT;
\echo :LAST_ERROR_SQLSTATE
SQL
)
a_code=$(printf '%s\n' "$a_code" | tail -n 1)
row 4 "A" "UPDATE ... (generation $a_gen)" "rejected: ${a_code:-none}" ""

# A releases: its identity no longer holds the key, so nothing is deleted
a_rel=$(q -c "SELECT status FROM lease_fence.release('account:1', '$a_identity')")
row 5 "A" "release('account:1', A's identity)" "$a_rel" "B's lease untouched"
b_rel=$(q -c "SELECT status FROM lease_fence.release('account:1', '$b_identity')")
row 6 "B" "release('account:1', B's identity)" "$b_rel" ""

echo
printf '%-3s %-8s %-34s %-22s %s\n' "#" "worker" "call" "outcome" "note"
printf '%s\n' "${outcomes[@]}"
echo
echo "A's write, as PostgreSQL reported it:"
grep -E '^(ERROR|DETAIL|HINT)' "$LF_WORK/a_write.err" | sed 's/^/  /'
echo
echo "the row:"
lf_as_user "$PG_BIN/psql" -X -c "SELECT * FROM account"

if [ "$a_status" = acquired ] && [ "$b_status" = acquired ] && [ "$b_gen" -gt "$a_gen" ] &&
	[ "$b_write" = committed ] && [ "$a_code" = LF001 ] && [ "$a_rel" = not_held ]; then
	echo "outcome: A's stale write was rejected with LF001; B's write stands."
	exit 0
fi
echo "outcome: UNEXPECTED — see the table above" >&2
exit 1
