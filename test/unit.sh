#!/usr/bin/env bash
# test/unit.sh — the unit tests: no PostgreSQL server, no Redis.
#
#   bash test/unit.sh                  every part
#   LF_UNIT="c python" bash test/unit.sh
#   LF_ANSWERS=/tmp/answers.json bash test/unit.sh   (every part reads that table)
#
# What the lease protocol's replies mean is written once, in
# scripts/answers.json; each part checks its own reader against every row:
#   c        test/unit/c.sh: the extension's decoder (src/) on every reply,
#            read by hiredis's own RESP reader; the generation arithmetic
#   python   clients/python/unit.sh: the client-side decoder on replies
#            parsed by redis-py, and what each SQL status becomes
#   node     clients/node/unit.sh: the same for the Node library
#   java     clients/java/unit.sh: what each SQL status becomes
#   go       clients/go/unit.sh: what each SQL status becomes (errors.Is)
#   ruby     clients/ruby/unit.sh: what each SQL status becomes in Ruby
#   versions test/unit/versions.sh: every library, and META.json, is
#            versioned with the extension (lease_fence.control's version)
# A part prints TAP ("ok N - ..." / "not ok N - ..."); a part that exits
# non-zero without a "not ok" counts as one failure.  Each part builds into
# its own empty temp dir (LF_UNIT_WORK), never into the tree.  As root,
# the Debian packages the parts need are installed first (test/lib.sh).
# Ends with "N passed, N failed", like test/run.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD
. test/lib.sh

all="c python node java go ruby versions"
parts=${LF_UNIT:-$all}
for p in $parts; do
	[[ " $all " == *" $p "* ]] || { echo "LF_UNIT: unknown part $p ($all)" >&2; exit 2; }
done

case $(. /etc/os-release && echo "$VERSION_ID") in
12) jdk=openjdk-17-jdk-headless ;;
*) jdk=default-jdk-headless ;;
esac
need=(make gcc libhiredis-dev "postgresql-server-dev-$LF_DEBIAN_MAJOR" python3 python3-pytest python3-redis)
[[ " $parts " == *" java "* ]] && need+=("$jdk" junit5 libpostgresql-jdbc-java libgoogle-gson-java)
[[ " $parts " == *" go "* ]] && need+=(golang-go golang-github-jackc-pgx-v4-dev golang-github-gomodule-redigo-dev)
[[ " $parts " == *" ruby "* ]] && need+=(ruby rake ruby-pg ruby-minitest)
if [[ " $parts " == *" node "* ]]; then
	command -v node >/dev/null 2>&1 || need+=(nodejs)
	command -v npm >/dev/null 2>&1 || need+=(npm)
fi
LF_PACKAGES="" lf_need_packages "${need[@]}" || exit 1

# Go's build cache (compiling pgx takes a minute) beside the harness's
# other caches, when there is one to write to
if [ -z "${LF_GOCACHE:-}" ] && mkdir -p "${LF_PG_CACHE:-/var/cache/lease_fence}/gocache-$(id -un)" 2>/dev/null; then
	export LF_GOCACHE=${LF_PG_CACHE:-/var/cache/lease_fence}/gocache-$(id -un)
fi
work=$(mktemp -d /tmp/lease_fence_unit.XXXXXX)
trap 'rm -rf "$work"' EXIT
export LF_ANSWERS=${LF_ANSWERS:-$top/scripts/answers.json}

script_of() {
	case $1 in
		c) echo test/unit/c.sh ;;
		versions) echo test/unit/versions.sh ;;
		*) echo "clients/$1/unit.sh" ;;
	esac
}

passed=0
failed=0
t_all=$(date +%s)
for p in $parts; do
	t0=$(date +%s)
	mkdir -p "$work/$p"
	log=$work/$p.log
	LF_UNIT_WORK=$work/$p bash "$(script_of "$p")" >"$log" 2>&1 </dev/null
	rc=$?
	ok=$(grep -cE '^ok( |$)' "$log")
	bad=$(grep -cE '^not ok( |$)' "$log")
	[ "$rc" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	[ "$rc" -eq 0 ] && [ "$ok" -eq 0 ] && bad=$((bad + 1))	# a part that tested nothing
	if [ "$bad" -gt 0 ]; then
		cat "$log"
	else
		grep -E '^(ok|not ok)( |$)' "$log"
	fi
	echo "== unit $p: $ok passed, $bad failed in $(($(date +%s) - t0)) s"
	passed=$((passed + ok))
	failed=$((failed + bad))
done
echo "== unit: $(($(date +%s) - t_all)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
