#!/usr/bin/env bash
# test/readme_setup.sh — the README's set-up, on this machine, as a reader
# follows it: the block after "<!-- check: setup -->" in README.md (taken out
# by test/readme_check.py, as the readme suite takes it), run as root from
# this clone with bash -e.  .ci/run runs it first, so that every run after
# it is the README's test command after its set-up: the runs must pass with
# the user's lease_fence installed in the system's PostgreSQL 15, that
# server running with lease_fence preloaded, and Redis on 127.0.0.1:6379 —
# and leave all of it as it is (test/deb.sh's last test point checks the
# installation).
#
#   bash test/readme_setup.sh --on-this-machine
#
# It changes the machine as the README does (packages, make install into
# the system's PostgreSQL 15, a conf.d file, a restart of that server, role
# and database app): for a CI machine, hence the argument.  Where systemd
# does not run (a container), the block's `systemctl restart postgresql` is
# done by the service's init script; Redis, which apt starts unless a
# policy-rc.d refuses (a container's does), is started by `service`.  A second run on the same machine first
# drops the database and role app that the first made (it leaves a mark in
# /var/lib/lease_fence-ci), and the lease_fence keys its database left in
# that Redis (starting it first: on a machine restarted since, it does not
# run, and would load them from its dump), else the block's CREATE ROLE or
# the key_prefix's claim would fail; a role app this
# script did not make is left alone, and the block fails on it.
#
# Prints one test point a line and "N passed, N failed" last.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
[ "${1:-}" = --on-this-machine ] || {
	echo "usage: bash test/readme_setup.sh --on-this-machine (it installs into and restarts the system's PostgreSQL 15)" >&2
	exit 2
}
[ "$(id -u)" -eq 0 ] || { echo "test/readme_setup.sh: the README's set-up runs as root" >&2; exit 1; }

mark_dir=/var/lib/lease_fence-ci
mark=$mark_dir/readme-setup
work=$(mktemp -d /tmp/lease_fence_setup.XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
check() {
	local name=$1; shift
	if "$@"; then passed=$((passed + 1)); echo "ok - $name"
	else failed=$((failed + 1)); echo "not ok - $name"; fi
}
say() { printf '%s\n' "== readme_setup: $*" >&2; }

/usr/bin/python3 "$top/test/readme_check.py" --block setup "$top/README.md" >"$work/setup.sh" || exit 1

# no systemd here: `systemctl ACTION UNIT` as the unit's init script does it
if [ ! -d /run/systemd/system ]; then
	mkdir "$work/bin"
	cat >"$work/bin/systemctl" <<-'SH'
	#!/bin/sh
	# test/readme_setup.sh: this machine runs no systemd; ACTION UNIT by the init script
	[ $# -eq 2 ] || { echo "systemctl (test/readme_setup.sh): only ACTION UNIT" >&2; exit 2; }
	exec service "${2%.service}" "$1"
	SH
	chmod 755 "$work/bin/systemctl"
	export PATH=$work/bin:$PATH
	say "no systemd: systemctl ACTION UNIT runs the unit's init script"
fi

psql_pg() { runuser -u postgres -- psql -X -q -At "$@"; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 PING 2>/dev/null)" = PONG ]; }
start_redis() {
	service redis-server start >/dev/null 2>&1
	for _ in $(seq 1 50); do redis_up && return 0; sleep 0.1; done
	return 1
}

# what an earlier run of this script made, which the block makes again
if [ -f "$mark" ]; then
	if ! psql_pg -c 'SELECT 1' >/dev/null 2>&1; then
		pg_ctlcluster 15 main start >/dev/null 2>&1 || true
	fi
	say "dropping the database and role app an earlier run made ($(cat "$mark"))"
	psql_pg -v ON_ERROR_STOP=1 -c 'DROP DATABASE IF EXISTS app' -c 'DROP ROLE IF EXISTS app' || exit 1
	# and the keys its database left in that Redis: the key_prefix's owner
	# (another database now) and the generations it granted.  Redis may not
	# run (a machine restarted since: no service manager brings it back), and
	# would load those keys from its dump once the block starts it: start it
	# first, and stop if they cannot be deleted.
	if command -v redis-cli >/dev/null; then
		redis_up || start_redis
		redis_up || { echo "readme_setup: Redis on 127.0.0.1:6379 does not answer; the keys an earlier run left cannot be deleted" >&2; exit 1; }
		redis-cli -h 127.0.0.1 -p 6379 --scan --pattern 'lease_fence:*' |
			xargs -r redis-cli -h 127.0.0.1 -p 6379 DEL >/dev/null
		left=$(redis-cli -h 127.0.0.1 -p 6379 --scan --pattern 'lease_fence:*' | wc -l)
		[ "$left" -eq 0 ] || { echo "readme_setup: $left lease_fence keys an earlier run left are still in that Redis" >&2; exit 1; }
	fi
fi

# the block, as written, in this clone; its apt-get takes the lock of the
# scripts' own apt-get calls (test/lib.sh), which the background of
# .ci/run may be using.  (flock -o: the lock is flock's own, never the
# block's -- a server the block starts must not inherit it and keep it.)
say "the README's set-up block (README.md, \"Set up\")"
(cd "$top" && flock -w 1800 -o /run/lock/lease_fence-apt.lock bash -e "$work/setup.sh") \
	</dev/null >"$work/setup.log" 2>&1
rc=$?
mkdir -p "$mark_dir" && echo "$(date -u +%FT%TZ) from $top" >"$mark"
tail -n 30 "$work/setup.log"
check "the README's set-up block runs as written, as root, with bash -e (exit status $rc)" [ "$rc" -eq 0 ]

# Redis listens on 127.0.0.1:6379, as step 1 says (apt starts it, unless a
# policy-rc.d refuses, as a container's does)
redis_up || start_redis
check "Redis answers on 127.0.0.1:6379, as step 1 says" redis_up

preloaded() {
	local spl v control
	spl=$(psql_pg -c 'SHOW shared_preload_libraries') || return 1
	[[ "$spl" == *lease_fence* ]] || { echo "shared_preload_libraries = '$spl'"; return 1; }
	control=$(sed -nE "s/^default_version = '([^']+)'.*/\1/p" "$top/lease_fence.control")
	v=$(psql_pg -d app -c "SELECT extversion FROM pg_extension WHERE extname = 'lease_fence'") || return 1
	[ "$v" = "$control" ] || { echo "database app has lease_fence '$v', expected $control"; return 1; }
}
check "the system's PostgreSQL 15 runs with lease_fence preloaded, and database app has the extension" preloaded
acquire_here() {
	local out
	out=$(psql_pg -d app -v ON_ERROR_STOP=1 -c 'BEGIN' \
		-c "SELECT status FROM lease_fence.acquire('readme-setup:check', 1000, scope => 'transaction')" -c 'COMMIT') || return 1
	[ "$out" = acquired ] || { echo "acquire said: $out"; return 1; }
}
check "an acquire in database app reaches that Redis (acquired)" acquire_here

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
