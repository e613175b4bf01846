#!/usr/bin/env bash
# clients/python/unit.sh — the Python client's server-less unit tests
# (tests/unit/: the answer table scripts/answers.json, row by row, against
# the client-side decoder and the verbs' row translation), as TAP: one
# "ok N - test" / "not ok N - test" line per test case, pytest's own output
# as "# " comment lines; exits non-zero when a test failed or none ran.
#
# Run from the repository root (or anywhere: paths are found from this
# file) with Debian's /usr/bin/python3 (pytest, redis-py); no PostgreSQL,
# no Redis, psycopg not needed.
#
#   LF_ANSWERS     the answer table to read (default: the repository's
#                  scripts/answers.json), e.g. a changed copy to see the
#                  tests fail
#   LF_UNIT_WORK   a writable directory for the package copy and the report
#                  (in its python-unit/; default: a new mktemp -d directory,
#                  removed at the end)
#
# Writes nothing into the source tree: the package is copied (with the
# repository's scripts/*.lua, as the wheel ships them) into LF_UNIT_WORK,
# pytest runs with -p no:cacheprovider and PYTHONDONTWRITEBYTECODE=1.
set -uo pipefail

PY=/usr/bin/python3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
work=${LF_UNIT_WORK:-}
if [ -z "$work" ]; then
	work=$(mktemp -d) || { echo "not ok 1 - python: no work directory"; exit 1; }
	trap 'rm -rf "$work"' EXIT		# ours: removed at the end
fi
work=$work/python-unit
answers=${LF_ANSWERS:-$top/scripts/answers.json}

fail() {
	echo "not ok 1 - python: $1"
	exit 1
}

[ -f "$answers" ] || fail "no answer table at $answers"
rm -rf "$work" && mkdir -p "$work/pkg/lease_fence/scripts" || fail "cannot write $work"
cp -r "$here/src/lease_fence/." "$work/pkg/lease_fence/" || fail "cannot copy the package"
cp "$top"/scripts/*.lua "$work/pkg/lease_fence/scripts/" || fail "cannot copy scripts/*.lua"
find "$work/pkg" -name __pycache__ -prune -exec rm -rf {} +

# the TAP plugin: one line per test case (its failing setup or teardown
# counts as that case's failure; a collection error is a case of its own)
cat >"$work/pkg/lf_tap.py" <<'PYEOF'
import os

_n = 0
_out = open(os.environ["LF_TAP_OUT"], "w", buffering=1)
_failed = set()


def _line(ok, name, extra=""):
    global _n
    _n += 1
    _out.write(f"{'ok' if ok else 'not ok'} {_n} - python: {name}{extra}\n")


def pytest_collectreport(report):
    if report.failed:
        _line(False, f"collect {report.nodeid or '.'}")


def pytest_runtest_logreport(report):
    if report.failed and report.nodeid not in _failed:
        _failed.add(report.nodeid)
        _line(False, report.nodeid)
    elif report.when == "call" and report.passed:
        _line(True, report.nodeid)
    elif report.skipped and report.when in ("setup", "call"):
        _line(True, report.nodeid, " # SKIP")


def pytest_sessionfinish(session, exitstatus):
    _out.write(f"1..{_n}\n")
    _out.close()
PYEOF

tap=$work/tap.txt
(cd "$work" && env -u PYTHONPATH -u PYTHONHOME PYTHONPATH="$work/pkg" PYTHONDONTWRITEBYTECODE=1 \
	LF_ANSWERS="$answers" LF_TAP_OUT="$tap" \
	"$PY" -m pytest -p no:cacheprovider -p lf_tap -q -rfE -c /dev/null \
	--rootdir "$work" "$here/tests/unit") >"$work/pytest.log" 2>&1
rc=$?
sed 's/^/# /' "$work/pytest.log"
[ -f "$tap" ] || fail "pytest did not run (exit $rc)"
cat "$tap"
passed=$(grep -c '^ok ' "$tap")
failed=$(grep -c '^not ok ' "$tap")
echo "# python: $passed passed, $failed failed (answers: $answers)"
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ]; then
	[ "$failed" -ne 0 ] || echo "not ok $((passed + 1)) - python: pytest exit $rc"
	exit 1
fi
exit 0
