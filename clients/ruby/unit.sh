#!/usr/bin/env bash
# clients/ruby/unit.sh — the Ruby client's server-less unit tests
# (test/unit/: the answer table's "statuses", row by row, against the
# verbs' row translation), as TAP: one "ok N - test" / "not ok N - test"
# line per test case, minitest's own output as "# " comment lines; exits
# non-zero when a test failed or none ran.
#
# `rake test:unit` (Rakefile). Needs Debian's ruby, rake and ruby-minitest;
# no PostgreSQL, no Redis.
#
#   LF_ANSWERS     the answer table to read (default: the repository's
#                  scripts/answers.json), e.g. a changed copy to see the
#                  tests fail
#   LF_UNIT_WORK   a writable directory for the library copy and the report
#                  (in its ruby-unit/; default: a new mktemp -d directory,
#                  removed at the end)
#
# Writes nothing into the source tree: lib/ and test/unit/ are copied into
# LF_UNIT_WORK and run from there.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
work=${LF_UNIT_WORK:-}
if [ -z "$work" ]; then
	work=$(mktemp -d) || { echo "not ok 1 - ruby: no work directory"; exit 1; }
	trap 'rm -rf "$work"' EXIT		# ours: removed at the end
fi
work=$work/ruby-unit
answers=${LF_ANSWERS:-$top/scripts/answers.json}

fail() {
	echo "not ok 1 - ruby: $1"
	exit 1
}

command -v ruby >/dev/null 2>&1 || fail "no ruby (apt-get install ruby ruby-minitest)"
[ -f "$answers" ] || fail "no answer table at $answers"
rm -rf "$work" && mkdir -p "$work" || fail "cannot write $work"
cp -r "$here/lib" "$here/test" "$here/Rakefile" "$work/" || fail "cannot copy the library"

# minitest's verbose output has one "Class#test_x = 0.00 s = ." line per
# case (. passed, F failed, E error, S skipped)
(cd "$work" && LF_ANSWERS="$answers" rake test:unit TESTOPTS=-v) >"$work/minitest.log" 2>&1
rc=$?
sed 's/^/# /' "$work/minitest.log"
n=0 failed=0
while IFS= read -r line; do
	name=${line%% = *}
	mark=${line##* = }
	n=$((n + 1))
	case $mark in
	.) echo "ok $n - ruby: $name" ;;
	S) echo "ok $n - ruby: $name # SKIP" ;;
	*) echo "not ok $n - ruby: $name"; failed=$((failed + 1)) ;;
	esac
done < <(grep -E '^[A-Za-z_:]+#[A-Za-z0-9_?!]+ = [0-9.]+ s = [.FES]$' "$work/minitest.log")
echo "1..$n"
echo "# ruby: $((n - failed)) passed, $failed failed (answers: $answers)"
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$n" -eq 0 ]; then
	[ "$failed" -ne 0 ] || echo "not ok $((n + 1)) - ruby: minitest exit $rc"
	exit 1
fi
exit 0
