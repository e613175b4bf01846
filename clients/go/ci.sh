#!/usr/bin/env bash
# clients/go/ci.sh — the Go client's front door, `go vet ./...` and
# `go test ./...` in module mode, offline (vendor.sh: Debian's Go sources
# as vendor/), against the harness's servers (test/clients/run.sh); then
# examples/go/two_holders, a module of its own that requires this one,
# built and run as a user's program.
#
# Run by test/clients/run.sh from a copy of the tree, cwd = clients/go, with
# PGHOST, PGPORT, PGDATABASE, PGUSER, LF_NOREDIS_USER, LF_REDIS_SOCK, LF_SRC
# and LF_CLIENT_WORK (a writable empty dir: the module copies, their vendor/,
# GOCACHE and the binary go there; nothing is written into the tree). The
# last line is exactly "go: N passed, N failed": N counts the `go test`
# cases (subtests, not their parents), go vet and the example; a skipped
# test counts as failed (the servers are there), a build that fails as one
# failure.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=${LF_SRC:-$(cd "$here/../.." && pwd)}
work=${LF_CLIENT_WORK:?LF_CLIENT_WORK: a writable empty directory}

passed=0
failed=0
finish() {
	echo "go: $passed passed, $failed failed"
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
	exit
}

command -v go >/dev/null || { echo "== go: go not found (Debian: golang-go)"; failed=1; finish; }
echo "== go: $(go version) (module mode, vendor/ from /usr/share/gocode)"
# the library and the example where they sit in the tree (the example's
# go.mod replaces the library by ../../../clients/go)
mod=$work/tree/clients/go
app=$work/tree/examples/go/two_holders
mkdir -p "$mod" "$app" "$work/gocache" &&
	cp "$here"/*.go "$here"/go.mod "$here"/vendor.sh "$mod/" &&
	cp "$src"/examples/go/two_holders/*.go "$src"/examples/go/two_holders/go.mod "$app/" &&
	bash "$here/vendor.sh" "$mod" && bash "$here/vendor.sh" "$app" || { failed=1; finish; }
export GOCACHE=${LF_GOCACHE:-$work/gocache} GOFLAGS="-mod=vendor -trimpath" GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0

echo "== go: go vet ./..."
if (cd "$mod" && go vet ./...) >"$work/vet.log" 2>&1; then
	passed=$((passed + 1)); echo "== go: go vet passed"
else
	cat "$work/vet.log"; failed=$((failed + 1)); echo "== go: go vet FAILED"
fi

echo "== go: go test -v ./... (servers: PGHOST=$PGHOST, Redis $LF_REDIS_SOCK)"
(cd "$mod" && LF_ANSWERS=$src/scripts/answers.json go test -count=1 -timeout 600s -v ./...) >"$work/test.log" 2>&1
rc=$?
bash "$here/gotap.sh" <"$work/test.log" >"$work/test.tap"
cat "$work/test.tap"
read -r _ _ ok bad skipped < <(grep '^# counts: ' "$work/test.tap")
if [ -z "${ok:-}" ] || [ $((ok + bad + skipped)) -eq 0 ]; then
	tail -n 60 "$work/test.log"
	echo "== go: go test ran no test (exit $rc)"
	failed=$((failed + 1))
else
	[ "$rc" -ne 0 ] && [ "$bad" -eq 0 ] && { tail -n 30 "$work/test.log"; bad=1; }
	passed=$((passed + ok)); failed=$((failed + bad + skipped))
	echo "== go: go test: $ok passed, $bad failed, $skipped skipped (counted as failed)"
fi

echo "== go: example $src/examples/go/two_holders"
if (cd "$app" && go build -o "$work/two_holders" .) >"$work/example-build.log" 2>&1 &&
	timeout -k 5 120 "$work/two_holders"; then
	passed=$((passed + 1)); echo "== go: example passed"
else
	cat "$work/example-build.log"; failed=$((failed + 1)); echo "== go: example FAILED"
fi
finish
