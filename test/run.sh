#!/usr/bin/env bash
# test/run.sh — run every test suite of lease_fence, from a fresh machine.
#
# As root it installs the Debian packages it needs, builds the extension as
# the postgres user in a private copy of the tree, installs it, starts a
# throwaway PostgreSQL 15 in a temp dir (unix socket only), and runs
#   - pg_regress   (sql/, expected/)
#   - isolation    (test/specs/, test/expected/)
#   - TAP          (test/t/, clusters of their own, Redis servers of their own)
#   - clients      (test/clients/run.sh: Python, Node.js, PgBouncer)
# then stops everything and prints "N passed, N failed".
# LF_KEEP=1 keeps the temp dir for inspection.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/lib.sh"

lf_need_packages || exit 1
trap lf_cleanup EXIT
lf_make_workdir "$top"
lf_build_install || exit 1
lf_start_pg || exit 1

passed=0
failed=0

# pg_regress and pg_isolation_regress (PostgreSQL 15) print one line per test:
#   test name   ... ok   12 ms   |   test name   ... FAILED   12 ms
# (adds to passed / failed, and sets summary; no subshell, or the sums are lost)
count_regress() {
	local out=$1 ok bad
	ok=$(grep -cE '^(test )?\s*\S+\s+\.\.\. ok' "$out")
	bad=$(grep -cE '^(test )?\s*\S+\s+\.\.\. (FAILED|failed)' "$out")
	passed=$((passed + ok)); failed=$((failed + bad))
	summary="$ok passed, $bad failed"
}

run_suite() {
	local name=$1; shift
	local out=$LF_WORK/$name.out rc
	lf_log "$name"
	(cd "$LF_SRC" && lf_as_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER" \
		make -s installcheck "$@") >"$out" 2>&1
	rc=$?
	cat "$out"
	return $rc
}

# pg_regress
run_suite regress ISOLATION= TAP_TESTS=
rc=$?
count_regress "$LF_WORK/regress.out"
if [ $rc -ne 0 ]; then
	[ -f "$LF_SRC/regression.diffs" ] && { head -c 20000 "$LF_SRC/regression.diffs"; echo; }
	grep -qE '\.\.\. (FAILED|failed)' "$LF_WORK/regress.out" || failed=$((failed + 1))
fi
lf_log "regress: $summary"

# isolation
run_suite isolation REGRESS= TAP_TESTS=
rc=$?
count_regress "$LF_WORK/isolation.out"
if [ $rc -ne 0 ]; then
	[ -f "$LF_SRC/output_iso/regression.diffs" ] && { head -c 20000 "$LF_SRC/output_iso/regression.diffs"; echo; }
	grep -qE '\.\.\. (FAILED|failed)' "$LF_WORK/isolation.out" || failed=$((failed + 1))
fi
lf_log "isolation: $summary"

# TAP: every "ok" / "not ok" line of prove -v is one assertion; a script that
# dies without a "not ok" still counts as one failure
lf_stop_pg   # TAP tests start clusters of their own
run_suite tap REGRESS= ISOLATION= PROVE_FLAGS=-v
rc=$?
ok=$(grep -cE '^ok [0-9]+' "$LF_WORK/tap.out")
bad=$(grep -cE '^not ok [0-9]+' "$LF_WORK/tap.out")
if [ $rc -ne 0 ]; then
	[ "$bad" -eq 0 ] && bad=1
	for f in "$LF_SRC"/tmp_check/log/*.log; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
	done
fi
passed=$((passed + ok)); failed=$((failed + bad))
lf_log "tap: $ok passed, $bad failed"

# real clients: Python, Node.js, PgBouncer (a runner with servers of its own;
# its own closing line is renamed so that only the total below is read as one)
lf_log "clients"
bash "$top/test/clients/run.sh" >"$LF_WORK/clients.out" 2>&1
rc=$?
sed -E 's/^([0-9]+ passed, [0-9]+ failed)$/clients: \1/' "$LF_WORK/clients.out"
ok=$(sed -nE 's/^([0-9]+) passed, [0-9]+ failed$/\1/p' "$LF_WORK/clients.out" | tail -n 1)
bad=$(sed -nE 's/^[0-9]+ passed, ([0-9]+) failed$/\1/p' "$LF_WORK/clients.out" | tail -n 1)
ok=${ok:-0}; bad=${bad:-0}
[ $rc -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
passed=$((passed + ok)); failed=$((failed + bad))
lf_log "clients: $ok passed, $bad failed"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
