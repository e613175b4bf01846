#!/usr/bin/env bash
# clients/go/ci.sh — build the Go client offline against Debian's Go sources,
# run its tests against the harness's servers (test/clients/run.sh), and
# build and run the example examples/go/two_holders as a user's program.
#
# Run by test/clients/run.sh from a copy of the tree, cwd = clients/go, with
# PGHOST, PGPORT, PGDATABASE, PGUSER, LF_NOREDIS_USER, LF_REDIS_SOCK, LF_SRC
# and LF_CLIENT_WORK (a writable empty dir: GOPATH, GOCACHE and the binaries
# go there; nothing is written into the tree). The last line is exactly
# "go: N passed, N failed": N counts the `go test` cases (subtests, not their
# parents), go vet and the example; a skipped test counts as failed (the
# servers are there), a build that fails as one failure.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=${LF_SRC:-$(cd "$here/../.." && pwd)}
work=${LF_CLIENT_WORK:?LF_CLIENT_WORK: a writable empty directory}
module=github.com/leasefence/lease_fence/clients/go

passed=0
failed=0
finish() {
	echo "go: $passed passed, $failed failed"
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
	exit
}

command -v go >/dev/null || { echo "== go: go not found (Debian: golang-go)"; failed=1; finish; }
echo "== go: $(go version) (GOPATH mode against /usr/share/gocode)"
. "$here/goenv.sh"
lf_go_env "$work" "$here" || { failed=1; finish; }
pkg=$work/gopath/src/$module

echo "== go: go vet"
if (cd "$pkg" && go vet .) >"$work/vet.log" 2>&1; then
	passed=$((passed + 1)); echo "== go: go vet passed"
else
	cat "$work/vet.log"; failed=$((failed + 1)); echo "== go: go vet FAILED"
fi

echo "== go: go test -v (servers: PGHOST=$PGHOST, Redis $LF_REDIS_SOCK)"
(cd "$pkg" && LF_ANSWERS=$src/scripts/answers.json go test -count=1 -timeout 600s -v .) >"$work/test.log" 2>&1
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

# The example, as a user's program: its own package in the GOPATH, importing
# the library by its module path; built, then run against this run's servers.
example=$src/examples/go/two_holders
app=$work/gopath/src/example.com/two_holders
echo "== go: example $example"
rm -rf "$app" && mkdir -p "$app" && cp "$example"/*.go "$app/"
if (cd "$app" && go build -o "$work/two_holders" .) >"$work/example-build.log" 2>&1 &&
	timeout -k 5 120 "$work/two_holders"; then
	passed=$((passed + 1)); echo "== go: example passed"
else
	cat "$work/example-build.log"; failed=$((failed + 1)); echo "== go: example FAILED"
fi
finish
