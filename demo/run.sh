#!/usr/bin/env bash
# demo/run.sh — lease_fence in one minute, on a throwaway PostgreSQL.
#
# Two workers hold the same lease one after the other.  Worker A took
# generation g1, then stalled (GC pause, VM freeze, lost network) long past
# its lease; worker B took the lease with generation g2 > g1 and wrote.  When
# A wakes up it still believes it holds the lease and writes — and the fence
# rejects the write with SQLSTATE LF001, inside the same atomic UPDATE.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/lib.sh"

lf_need_packages || exit 1
trap lf_cleanup EXIT
lf_make_workdir "$top"
lf_build_install || exit 1
lf_start_pg || exit 1

psql_demo() { lf_as_user psql -X -q -v ON_ERROR_STOP=1 "$@"; }

echo
echo "== setup: a table fenced by lease_fence"
psql_demo <<'SQL'
CREATE EXTENSION lease_fence;
CREATE TABLE account (id int PRIMARY KEY, owner text, balance int);
INSERT INTO account VALUES (1, 'nobody', 100);
SELECT lease_fence.protect('account') \g /dev/null
SQL

g1=$(psql_demo -At -c "SELECT lease_fence.next_generation()")
echo "worker A is granted the lease with generation $g1 ... and stalls"
g2=$(psql_demo -At -c "SELECT lease_fence.next_generation()")
echo "A's lease expires; worker B is granted it with generation $g2"

echo
echo "== worker B writes under generation $g2"
psql_demo <<SQL
BEGIN;
SET LOCAL lease_fence.generation = $g2;
UPDATE account SET owner = 'worker B', balance = balance + 10 WHERE id = 1;
COMMIT;
SQL

echo "== worker A wakes up and writes under its old generation $g1"
out=$(lf_as_user psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=verbose 2>&1 <<SQL
\set VERBOSITY verbose
BEGIN;
SET LOCAL lease_fence.generation = $g1;
UPDATE account SET owner = 'worker A', balance = balance - 1000 WHERE id = 1;
COMMIT;
SQL
)
rc=$?
printf '%s\n' "$out" | grep -E '^(ERROR|DETAIL|HINT)'

echo
echo "== the row, as B left it"
psql_demo -c "SELECT * FROM account"

if [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q 'LF001'; then
	echo "outcome: A's stale write was rejected with LF001; B's write stands."
	exit 0
fi
echo "outcome: UNEXPECTED — A's stale write was not rejected with LF001" >&2
exit 1
