#!/usr/bin/env bash
# clients/node/ci.sh — build, pack and test the lease-fence npm package the
# way a user gets it. Run by test/clients/run.sh as an unprivileged user with
# cwd = a copy of clients/node, the servers' variables (PGHOST, PGPORT,
# PGDATABASE, PGUSER, LF_NOREDIS_USER, LF_REDIS_SOCK, LF_BOUNCER_HOST,
# LF_BOUNCER_PORT, LF_PORTABLE_PGPORT, LF_PORTABLE_DB), HOME,
# npm_config_cache, LF_CLIENT_WORK (an empty writable dir) and LF_SRC (the
# tree's copy).
#
#   1. npm ci (from package-lock.json), npm run build (tsc), npm pack
#   2. an empty app in $LF_CLIENT_WORK/app: npm init -y, then
#      npm install <the tarball> pg knex ioredis bullmq typescript @types/node
#   3. test/ copied into the app and run there with npm test (the
#      package's scripts/test.js: node --test, TAP, one file at a time — a
#      test pauses Redis: nothing may run beside it), so that they load the
#      installed lease-fence
#   4. examples/node copied, installed with the tarball; two-holders.js and
#      job.js run against appdb, client-side.js against the portable
#      edition's server (LF_PORTABLE_PGPORT, LF_PORTABLE_DB: server 2,
#      without the C library); examples/bullmq (worker.js: BullMQ in the
#      harness's Redis, LF_REDIS_SOCK) against appdb, with bullmq and ioredis
#
# The last line is "node: N passed, N failed" (N: test cases + the examples);
# a file that crashes or prints no count counts as failed. Exits non-zero on
# any failure.
set -uo pipefail

here=$(pwd)
src=${LF_SRC:-$(cd "$here/../.." && pwd)}
work=${LF_CLIENT_WORK:-$(mktemp -d)}
mkdir -p "$work" || exit 1
work=$(cd "$work" && pwd)
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
npm_flags=(--no-audit --no-fund)

passed=0
failed=0

log() { printf '== node: %s\n' "$*"; }
finish() {
	echo "node: $passed passed, $failed failed"
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
	exit $?
}
step() {	# name, logfile, command...: run it, show the log's end on failure
	local name=$1 out=$2; shift 2
	log "$name"
	if ! "$@" >"$out" 2>&1; then
		tail -n 60 "$out"
		log "$name failed"
		return 1
	fi
}

log "node $(node --version), npm $(npm --version)"

# 1. build and pack
step "npm ci" "$work/npm-ci.log" npm ci "${npm_flags[@]}" || { failed=$((failed + 1)); finish; }
step "npm run build (tsc $(node_modules/.bin/tsc --version 2>/dev/null))" "$work/build.log" \
	npm run build || { failed=$((failed + 1)); finish; }
step "npm pack" "$work/pack.log" npm pack --ignore-scripts --pack-destination "$work" ||
	{ failed=$((failed + 1)); finish; }
tgz=$(ls "$work"/lease-fence-*.tgz 2>/dev/null | head -n 1)
if [ -z "$tgz" ]; then
	cat "$work/pack.log"
	log "npm pack made no tarball"
	failed=$((failed + 1)); finish
fi
log "packed $(basename "$tgz"): $(tar -tzf "$tgz" | sort | tr '\n' ' ')"

# 2. an empty app installs the tarball as a user would
app=$work/app
mkdir -p "$app" && cd "$app" || exit 1
step "npm init -y (empty app)" "$work/app-init.log" npm init -y || { failed=$((failed + 1)); finish; }
step "npm install $(basename "$tgz") pg knex ioredis bullmq typescript @types/node" "$work/app-install.log" \
	npm install "${npm_flags[@]}" "$tgz" pg knex ioredis bullmq typescript @types/node || { failed=$((failed + 1)); finish; }
log "installed: $(node -p 'const v = (p) => require(p + "/package.json").version;
	["lease-fence", "pg", "knex", "ioredis", "bullmq", "typescript"].map((p) => p + "@" + v(p)).join(" ")')"

# 3. the tests, against the installed package (not ../src: no source here):
#    npm test, the package's runner (scripts/test.js) as the app's test script
rm -rf "$app/test" "$app/scripts" && cp -R "$here/test" "$app/test" &&
	mkdir -p "$app/scripts" && cp "$here/scripts/test.js" "$app/scripts/test.js" || exit 1
(cd "$app" && npm pkg set scripts.test="node scripts/test.js") || exit 1
count_tap() {	# name, tap output, exit code
	local name=$1 out=$2 rc=$3 ok fail cancelled bad
	ok=$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$out" | tail -n 1)
	if [ -z "$ok" ]; then
		log "$name: did not finish (exit $rc)"
		failed=$((failed + 1)); return
	fi
	fail=$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$out" | tail -n 1)
	cancelled=$(sed -nE 's/^# cancelled ([0-9]+)$/\1/p' "$out" | tail -n 1)
	bad=$(( ${fail:-0} + ${cancelled:-0} ))
	[ "$rc" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	passed=$((passed + ok)); failed=$((failed + bad))
	log "$name: $ok passed, $bad failed"
}
tests=(test/client.test.js test/job.test.js test/leadership.test.js test/knex.test.js test/pool.test.js test/esm.test.mjs
	test/types.test.js test/client-side.test.js test/fair.test.js test/resumable.test.js test/bullmq.test.js)
tap=$work/tap
rm -rf "$tap" && mkdir -p "$tap" || exit 1
log "npm test -- ${tests[*]}"
(cd "$app" && LF_EXPECT_INSTALLED=1 LF_TAP_DIR="$tap" npm test -- "${tests[@]}")
log "npm test: exit $?"
for t in "${tests[@]}"; do
	out=$tap/$(basename "$t").tap
	rc=$(cat "$tap/$(basename "$t").rc" 2>/dev/null || echo 1)
	[ -f "$out" ] || : >"$out"
	count_tap "$t" "$out" "$rc"
done

# 4. the example programs, installed from the tarball, each counted as one:
#    two-holders.js and job.js against appdb (the C edition), client-side.js
#    (the lease taken with ioredis) against the portable edition's portabledb
example=$work/example
rm -rf "$example" && cp -R "$src/examples/node" "$example" || exit 1
rm -rf "$example/node_modules" "$example/package-lock.json"
run_example() {	# name, the line it must print, env...
	local name=$1 line=$2 rc; shift 2
	log "example: node $name"
	(cd "$example" && env "$@" timeout -k 5 120 node "$name") >"$work/example-$name.out" 2>&1
	rc=$?
	cat "$work/example-$name.out"
	if [ "$rc" -eq 0 ] && grep -qxF "$line" "$work/example-$name.out"; then
		passed=$((passed + 1)); log "example $name: passed"
	else
		failed=$((failed + 1)); log "example $name: failed (exit $rc)"
	fi
}
if step "example: npm install $(basename "$tgz") (examples/node)" "$work/example-install.log" \
	bash -c 'cd "$1" && npm install --no-audit --no-fund "$2"' _ "$example" "$tgz"; then
	run_example two-holders.js 'ok: the stale holder was fenced off'
	run_example job.js 'ok: the jobs excluded each other'
	if [ -n "${LF_PORTABLE_PGPORT:-}" ]; then
		run_example client-side.js 'ok: the stale holder was fenced off' PGPORT="$LF_PORTABLE_PGPORT" \
			PGDATABASE="${LF_PORTABLE_DB:-portabledb}" REDIS_URL="${LF_REDIS_SOCK:-}"
	else
		failed=$((failed + 1)); log "example client-side.js: LF_PORTABLE_PGPORT is not set"
	fi
else
	failed=$((failed + 3))
fi

# examples/bullmq: its own app (bullmq, pg and the tarball), BullMQ in the
# harness's Redis
bullmq_example=$work/example-bullmq
rm -rf "$bullmq_example" && cp -R "$src/examples/bullmq" "$bullmq_example" || exit 1
rm -rf "$bullmq_example/node_modules" "$bullmq_example/package-lock.json"
if step "example: npm install $(basename "$tgz") (examples/bullmq)" "$work/example-bullmq-install.log" \
	bash -c 'cd "$1" && npm install --no-audit --no-fund "$2"' _ "$bullmq_example" "$tgz"; then
	example=$bullmq_example
	run_example worker.js 'ok: the job billed each line once' REDIS_URL="${LF_REDIS_SOCK:-}"
else
	failed=$((failed + 1))
fi

finish
