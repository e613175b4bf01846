#!/usr/bin/env bash
# clients/go/unit.sh — the Go client's server-less unit tests, as TAP.
#
#   bash clients/go/unit.sh      (from anywhere; test/unit.sh runs it from
#                                 the repository root)
#
# A copy of the module in the work dir, vendor/ made by vendor.sh (Debian's
# Go sources: no module proxy, no network), then only the tests that need
# no server — TestAnswerTable (every "statuses" row of scripts/answers.json
# against acquireResult / renewResult / releaseResult),
# TestReleaseUnexpectedStatus, TestTranslateBySQLState — with
# `go test -v ./...`, one TAP line per test case.
#
# Environment:
#   LF_UNIT_WORK   an empty writable directory for the build (default: a new
#                  mktemp directory, removed at the end); nothing is written
#                  into the source tree (GOCACHE is there too, or LF_GOCACHE)
#   LF_ANSWERS     the answer table to test against (default: scripts/answers.json
#                  of this repository), e.g. an edited copy, to see a changed row fail
#
# Exit status: 0 when every test case passed; non-zero when one failed, or
# the build failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [ -n "${LF_UNIT_WORK:-}" ]; then
	work=$LF_UNIT_WORK/go
	mkdir -p "$work" || exit 1
else
	work=$(mktemp -d) || exit 1
	trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
fi

answers=${LF_ANSWERS:-$repo/scripts/answers.json}
case "$answers" in /*) ;; *) answers=$PWD/$answers ;; esac
if [ ! -f "$answers" ]; then
	echo "not ok 1 - go: the answer table $answers does not exist"
	exit 1
fi
echo "# go: answers from $answers"
command -v go >/dev/null || { echo "not ok 1 - go: go not found (Debian: golang-go)"; exit 1; }
[ -d /usr/share/gocode/src/github.com/jackc/pgx/v4 ] ||
	{ echo "not ok 1 - go: no pgx v4 under /usr/share/gocode (Debian: golang-github-jackc-pgx-v4-dev)"; exit 1; }

mod=$work/mod
mkdir -p "$mod" && cp "$here"/*.go "$here"/go.mod "$mod/" && bash "$here/vendor.sh" "$mod" ||
	{ echo "not ok 1 - go: cannot copy the module into $mod and vendor it"; exit 1; }
export GOCACHE=${LF_GOCACHE:-$work/gocache} GOFLAGS="-mod=vendor -trimpath" GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0

cd "$mod" || exit 1
LF_ANSWERS=$answers go test -count=1 -v \
	-run '^(TestAnswerTable|TestReleaseUnexpectedStatus|TestTranslateBySQLState)$' ./... >"$work/unit.log" 2>&1
go_rc=$?
bash "$here/gotap.sh" <"$work/unit.log" | grep -v '^# counts: '
tap_rc=${PIPESTATUS[0]}
if [ "$tap_rc" -ne 0 ] || [ "$go_rc" -ne 0 ]; then
	grep -q '^\(not \)\?ok ' < <(bash "$here/gotap.sh" <"$work/unit.log") ||
		sed 's/^/# /' "$work/unit.log"
	[ "$tap_rc" -eq 0 ] && echo "not ok - go: go test failed (exit $go_rc)"
	exit 1
fi
exit 0
