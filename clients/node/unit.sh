#!/usr/bin/env bash
# clients/node/unit.sh — the Node library's server-less unit tests: no
# PostgreSQL, no Redis. Run from the repository root (bash
# clients/node/unit.sh; test/unit.sh runs it).
#
#   1. copies what the build needs (package.json, package-lock.json,
#      tsconfig.json, src/, scripts/, test/unit/ and the repository's
#      scripts/*.lua) into a work dir: nothing is written into the source tree
#   2. npm ci there (the lock file's devDependencies: typescript, ioredis —
#      whose RESP parser the tests feed —, pg, ...), npm run build (tsc)
#   3. node --test --test-reporter=tap test/unit/*.test.js: the decoder
#      (src/protocol.ts) against every row of scripts/answers.json, and what
#      each call does with each status (src/outcomes.ts)
#
# Prints TAP (one "ok N - ..." / "not ok N - ..." line per test case, at the
# line's start), ends "node unit: N passed, N failed", exits non-zero when a
# test failed or could not run.
#
# Variables:
#   LF_UNIT_WORK  an empty writable dir for the build (default: a mktemp dir)
#   LF_ANSWERS    the answer table to test against (default: the repository's
#                 scripts/answers.json); a changed row there must fail a test
#   npm_config_cache  npm's cache, as npm reads it (default ~/.npm)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
answers=${LF_ANSWERS:-$repo/scripts/answers.json}
work=${LF_UNIT_WORK:-}
[ -n "$work" ] || work=$(mktemp -d)
mkdir -p "$work" || exit 1
work=$(cd "$work" && pwd)
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

fail() { echo "not ok 1 - node unit: $*"; echo "node unit: 0 passed, 1 failed"; exit 1; }

[ -f "$answers" ] || fail "no answer table at $answers"
answers=$(cd "$(dirname "$answers")" && pwd)/$(basename "$answers")

# the repository's layout, in small: <work>/node/clients/node and <work>/node/scripts
# (scripts/copy-lua.js reads ../../scripts/*.lua)
root=$work/node
pkg=$root/clients/node
rm -rf "$root" && mkdir -p "$pkg" "$root/scripts" || fail "cannot write $work"
cp -R "$here/package.json" "$here/package-lock.json" "$here/tsconfig.json" "$here/src" \
	"$here/scripts" "$pkg/" || fail "cannot copy the package"
mkdir -p "$pkg/test" && cp -R "$here/test/unit" "$pkg/test/unit" || fail "cannot copy test/unit"
cp "$repo"/scripts/*.lua "$root/scripts/" || fail "cannot copy scripts/*.lua"

echo "# node $(node --version), npm $(npm --version); answers: $answers; work: $pkg"
if ! (cd "$pkg" && npm ci --no-audit --no-fund --prefer-offline) >"$work/npm-ci.log" 2>&1; then
	sed 's/^/# /' "$work/npm-ci.log" | tail -n 40
	fail "npm ci failed"
fi
if ! (cd "$pkg" && npm run build) >"$work/build.log" 2>&1; then
	sed 's/^/# /' "$work/build.log" | tail -n 40
	fail "npm run build (tsc) failed"
fi

out=$work/unit.tap
(cd "$pkg" && LF_ANSWERS="$answers" LF_NODE_DIST="$pkg/dist" timeout -k 5 120 \
	node --test --test-reporter=tap test/unit/*.test.js) >"$out" 2>&1
rc=$?
cat "$out"
passed=$(grep -c '^ok ' "$out")
failed=$(grep -c '^not ok ' "$out")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
	echo "not ok $((passed + 1)) - node unit: node --test exited $rc"
	failed=1
fi
[ "$passed" -gt 0 ] || { echo "not ok $((passed + failed + 1)) - node unit: no test ran"; failed=$((failed + 1)); }
echo "node unit: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
