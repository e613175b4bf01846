#!/usr/bin/env bash
# test/run.sh — run every test suite of lease_fence, from a fresh machine.
#
# As root it installs the Debian packages it needs, builds the extension as
# the postgres user in a private copy of the tree, installs it, starts a
# throwaway PostgreSQL in a temp dir (unix socket only), and runs
#   - layers       test/layers.sh on the objects just built: every call in
#                  src/ goes down the layers (and the check itself refuses
#                  each kind of violation, built on purpose)
#   - docs         test/docs_check.py: docs/reference.md names every
#                  function, view, setting and SQLSTATE of a fresh install,
#                  as the catalog has them; every lease_fence function the
#                  docs' SQL blocks call exists and takes those arguments;
#                  every relative link resolves
#   - pg_regress   (sql/, expected/)
#   - isolation    (test/specs/, test/expected/)
#   - server       a fenced commit and a Redis acquire on the run's server
#   - readme       the README's set-up SQL, its worked example in SQL and
#                  its fenced write from Python, run as they are
#                  (test/readme_check.py)
#   - TAP          (test/t/, clusters of their own, Redis servers of their own)
#   - portable     (test/portable/run.sh: the portable edition installed by
#                  a non-superuser owner on a server without the C library,
#                  the fence core's regress and isolation tests against it)
#   - clients      (test/clients/run.sh: the Python, Node.js and Java
#                  libraries, built, installed and tested; PgBouncer)
#   - demo         (demo/run.sh from a directory the postgres user cannot enter)
#   - valgrind     test/valgrind.sh (memcheck), on Debian's 15 only
#   - faults       test/faults/faults.py, briefly (LF_FAULTS_SECONDS=8):
#                  workers acquire -> fenced write -> release while Sentinel,
#                  Cluster and PostgreSQL fail over and Redis loses leases,
#                  then its self-test against two mutant builds; on
#                  Debian's 15 only
#   - logs         no TRAP (failed Assert) or PANIC in the server logs of the
#                  run (its server's, the TAP clusters' and the fault run's)
# then stops everything and prints "N passed, N failed".
# LF_PG picks the PostgreSQL: 15 (Debian's package, the default), 15-cassert
# or 18, built with assertions by test/pg_build.sh (once, into
# /var/cache/lease_fence), or 17, Debian 13's package, inside a Debian 13
# root (test/debian_root.sh, made once into the same cache); see test/README.md,
# "Supported PostgreSQL versions".
# .ci/run runs them all.
# LF_KEEP=1 keeps the temp dir for inspection.  While working on one part:
#   LF_SUITES="regress tap"        run only these suites (of: layers docs
#                                  regress isolation server readme tap portable
#                                  clients demo valgrind faults logs)
#   LF_TAP="test/t/redis_*.pl"     run only these TAP files (an area)
#   LF_TAP_JOBS=1                  TAP files one at a time (default 2:
#                                  prove -j2; each file has its own servers)
#   LF_REGRESS="fence protect"     run only these pg_regress files
# LF_REDIS=valkey: every server a suite starts is Valkey (valkey-server,
# valkey-sentinel, valkey-cli) instead of Redis; Debian 13's Valkey 8, so
# with LF_PG=17 only (test/README.md, "Redis or Valkey").
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/lib.sh"

# an LF_REDIS that names no server is refused before anything is made
case $LF_REDIS in redis | valkey) ;; *) lf_select_redis; exit 2 ;; esac

# PostgreSQL 17 is Debian 13's own package: the whole run happens inside a
# Debian 13 root of its own (test/debian_root.sh), on a copy of this tree
if [ "${LF_PG:-}" = 17 ] && [ "$LF_DEBIAN_MAJOR" != 17 ]; then
	bash "$top/test/debian_root.sh" run test/run.sh
	exit $?
fi

# the suites, in the order they run; a name that is none of them is an error
all_suites="layers docs regress isolation server readme tap portable clients demo valgrind faults logs"
for s in ${LF_SUITES:-}; do
	[[ " $all_suites " == *" $s "* ]] ||
		{ echo "LF_SUITES: unknown suite $s (one of: $all_suites)" >&2; exit 2; }
done

# Each suite's time: begin NAME closes the one before; the run's last line
# but one lists them all ("== suite times: setup=25 regress=9 ..."), which
# .ci/run reads into its table
suite_times=()
t_name=""
t_from=0
begin() {
	local now
	now=$(date +%s)
	[ -n "$t_name" ] && suite_times+=("$t_name=$((now - t_from))")
	t_name=$1
	t_from=$now
}

begin setup
lf_need_packages || exit 1
trap lf_cleanup EXIT
lf_make_workdir "$top" || exit 1
# TAP clusters and Redis servers take their TCP ports through
# PostgreSQL::Test::Cluster's reservations: one directory per user for all
# runs on the machine, so that runs side by side (.ci/run) never take the
# same port
export PG_TEST_PORT_DIR=${PG_TEST_PORT_DIR:-/tmp/lease_fence_ports-$LF_USER}
lf_as_user mkdir -p "$PG_TEST_PORT_DIR" || exit 1
lf_build_install || exit 1
lf_start_pg || exit 1
lf_log "$("$PG_BIN/postgres" --version), assertions: $(lf_as_user "$PG_BIN/psql" -X -Atc 'SHOW debug_assertions')"

passed=0
failed=0
# valgrind (test/valgrind.sh) runs by default on Debian's 15, the build it is
# written for, and so does the brief fault-injection run (faults); on the
# others only when LF_SUITES names them
default_suites="layers docs regress isolation server readme tap portable clients demo logs"
[ "${LF_PG:-15}" = 15 ] && default_suites="$default_suites valgrind faults"
suites=${LF_SUITES:-$default_suites}
want() { [[ " $suites " == *" $1 "* ]]; }
# the fault-injection run's Python modules (Debian's python3-psycopg and
# python3-redis)
if want faults; then lf_need_packages python3-psycopg python3-redis || exit 1; fi
# the documentation check is Python too; the README's example uses psycopg
if want docs; then lf_need_packages python3 || exit 1; fi
if want readme; then lf_need_packages python3-psycopg || exit 1; fi
# one test point: name, then a command whose success is the behaviour
check() {
	local name=$1; shift
	if "$@"; then passed=$((passed + 1)); echo "ok - $name"
	else failed=$((failed + 1)); echo "not ok - $name"; fi
}

# pg_regress and pg_isolation_regress print one line per test, on 15:
#   test name   ... ok   12 ms   |   test name   ... FAILED   12 ms
# and from 16 on, in TAP form:
#   ok 1   - name   12 ms        |   not ok 2   - name   12 ms
# (adds to passed / failed, and sets summary; no subshell, or the sums are lost)
count_regress() {
	local out=$1 ok bad
	ok=$(grep -cE '^((test )?\s*\S+\s+\.\.\. ok|ok [0-9]+\s+[-+] )' "$out")
	bad=$(grep -cE '^((test )?\s*\S+\s+\.\.\. (FAILED|failed)|not ok [0-9]+\s+[-+] )' "$out")
	passed=$((passed + ok)); failed=$((failed + bad))
	summary="$ok passed, $bad failed"
}

run_suite() {
	local name=$1; shift
	local out=$LF_WORK/$name.out rc
	lf_log "$name"
	(cd "$LF_SRC" && lf_as_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER" \
		make -s installcheck PG_CONFIG="$PG_CONFIG" "$@") >"$out" 2>&1
	rc=$?
	cat "$out"
	return $rc
}

# the layers of src/, read from the object files the build just made
if want layers; then
	begin layers
	lf_log "layers"
	if [ "${LF_LAYERS_SELF_TEST:-1}" = 0 ]; then
		# the check alone, one test point (the self-test, probes breaking
		# each rule that must be refused, checks the checker: the same on
		# every major, so .ci/run runs it once)
		check "layers: every call in src/ goes down the layers" \
			bash "$top/test/layers.sh" "$LF_SRC/src"
	else
		bash "$top/test/layers.sh" --self-test "$LF_SRC/src" >"$LF_WORK/layers.out" 2>&1
		cat "$LF_WORK/layers.out"
		ok=$(grep -cE '^ok - ' "$LF_WORK/layers.out")
		bad=$(grep -cE '^not ok - ' "$LF_WORK/layers.out")
		[ "$ok" -eq 0 ] && [ "$bad" -eq 0 ] && bad=1
		passed=$((passed + ok)); failed=$((failed + bad))
		lf_log "layers: $ok passed, $bad failed"
	fi
fi

# the documentation: docs/reference.md against the catalog of a fresh
# install (every function, view, setting and SQLSTATE), the lease_fence
# calls of the docs' SQL blocks against it (docs/managed.md's against the
# portable edition's), every relative link of the Markdown files; and the
# check refuses each kind of drift
if want docs; then
	begin docs
	lf_log "docs"
	lf_as_user "$PG_BIN/psql" -X -q -c 'CREATE DATABASE lf_docs' &&
		lf_as_user "$PG_BIN/psql" -X -q -d lf_docs -c 'CREATE EXTENSION lease_fence' &&
		/usr/bin/python3 "$LF_SRC/test/docs_check.py" --dump-sql |
		lf_as_user "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 -d lf_docs -f - | grep -v '^LOAD$' >"$LF_WORK/catalog.tsv"
	# the portable edition's functions, for the SQL of its page (docs/managed.md)
	lf_as_user "$PG_BIN/psql" -X -q -c 'CREATE DATABASE lf_docs_portable' &&
		lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d lf_docs_portable \
			-f "$LF_SRC/portable/lease_fence_portable.sql" >"$LF_WORK/docs_portable.log" 2>&1 &&
		/usr/bin/python3 "$LF_SRC/test/docs_check.py" --dump-portable-sql |
		lf_as_user "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 -d lf_docs_portable -f - >"$LF_WORK/catalog_portable.tsv"
	/usr/bin/python3 "$LF_SRC/test/docs_check.py" --root "$LF_SRC" --catalog "$LF_WORK/catalog.tsv" \
		--portable-catalog "$LF_WORK/catalog_portable.tsv" --self-test >"$LF_WORK/docs.out" 2>&1
	cat "$LF_WORK/docs.out"
	lf_as_user "$PG_BIN/psql" -X -q -c 'DROP DATABASE lf_docs' -c 'DROP DATABASE lf_docs_portable'
	# docs/operations.md's postgres_exporter queries, in Debian's exporter (its
	# binary taken out of the .deb, never installed: the package would start
	# a service), as a login role with no grant of its own
	exp=${LF_PG_CACHE:-/var/cache/lease_fence}/exporter/usr/bin/prometheus-postgres-exporter
	if [ ! -x "$exp" ] && [ "$(id -u)" -eq 0 ]; then
		mkdir -p "${exp%/usr/bin/*}" &&
			(cd "$LF_WORK" && apt-get download -q prometheus-postgres-exporter >/dev/null 2>&1) &&
			dpkg-deb -x "$LF_WORK"/prometheus-postgres-exporter_*.deb "${exp%/usr/bin/*}"
	fi
	if [ -x "$exp" ]; then
		lf_as_user mkdir -p "$LF_WORK/exporter"
		# run from the temp dir: the cache may be a directory only root can
		# enter (LF_PG_CACHE a mktemp -d, for a fresh run)
		cp "$exp" "$LF_WORK/exporter/prometheus-postgres-exporter" &&
			chmod 755 "$LF_WORK/exporter/prometheus-postgres-exporter" &&
			exp=$LF_WORK/exporter/prometheus-postgres-exporter
		/usr/bin/python3 "$LF_SRC/test/readme_check.py" --block postgres-exporter "$LF_SRC/docs/operations.md" \
			>"$LF_WORK/exporter/queries.yaml"
		lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 >/dev/null <<-'SQL'
		CREATE ROLE lf_exporter LOGIN;
		CREATE DATABASE lf_mon;
		\c lf_mon
		CREATE EXTENSION lease_fence;
		CREATE TABLE account (id int PRIMARY KEY, balance int);
		CREATE TABLE broken (id int PRIMARY KEY);
		SELECT lease_fence.protect('account'), lease_fence.protect('broken');
		ALTER TABLE broken DISABLE TRIGGER zz_lease_fence;
		SELECT lease_fence.next_generation();
		BEGIN;
		SET LOCAL lease_fence.generation = 1;
		INSERT INTO account VALUES (1, 100);
		COMMIT;
		SQL
		lf_as_user /usr/bin/python3 "$LF_SRC/test/exporter_check.py" "$exp" "$LF_WORK/exporter/queries.yaml" \
			"host=$PGHOST port=$PGPORT user=lf_exporter dbname=lf_mon sslmode=disable" >"$LF_WORK/exporter.out" 2>&1 ||
			grep -q '^not ok - ' "$LF_WORK/exporter.out" ||
			echo "not ok - exporter: test/exporter_check.py failed" >>"$LF_WORK/exporter.out"
		cat "$LF_WORK/exporter.out" >>"$LF_WORK/docs.out"
		lf_as_user "$PG_BIN/psql" -X -q -c 'DROP DATABASE lf_mon' -c 'DROP ROLE lf_exporter' >/dev/null
	else
		echo "not ok - exporter: no prometheus-postgres-exporter (apt-get download, as root, fetches it)" >>"$LF_WORK/docs.out"
	fi
	grep -E '^(not )?ok - exporter' "$LF_WORK/docs.out"
	ok=$(grep -cE '^ok - ' "$LF_WORK/docs.out")
	bad=$(grep -cE '^not ok - ' "$LF_WORK/docs.out")
	[ "$ok" -eq 0 ] && [ "$bad" -eq 0 ] && bad=1
	passed=$((passed + ok)); failed=$((failed + bad))
	lf_log "docs: $ok passed, $bad failed"
fi

# pg_regress
if want regress; then
	begin regress
	run_suite regress ISOLATION= TAP_TESTS= ${LF_REGRESS:+REGRESS="$LF_REGRESS"}
	rc=$?
	count_regress "$LF_WORK/regress.out"
	if [ $rc -ne 0 ]; then
		[ -f "$LF_SRC/regression.diffs" ] && { head -c 20000 "$LF_SRC/regression.diffs"; echo; }
		grep -qE '\.\.\. (FAILED|failed)|^not ok [0-9]' "$LF_WORK/regress.out" || failed=$((failed + 1))
	fi
	lf_log "regress: $summary"
fi

# isolation
if want isolation; then
	begin isolation
	run_suite isolation REGRESS= TAP_TESTS=
	rc=$?
	count_regress "$LF_WORK/isolation.out"
	if [ $rc -ne 0 ]; then
		[ -f "$LF_SRC/output_iso/regression.diffs" ] && { head -c 20000 "$LF_SRC/output_iso/regression.diffs"; echo; }
		grep -qE '\.\.\. (FAILED|failed)|^not ok [0-9]' "$LF_WORK/isolation.out" || failed=$((failed + 1))
	fi
	lf_log "isolation: $summary"
fi

# The two calls that crashed PostgreSQL 16+ when the generation setting's
# check hook malloc'd its value: a fenced write committed under SET LOCAL
# (the GUC machinery frees the value at commit), and an acquire from a real
# Redis (which sets the generation too).  On a build with assertions a
# wrong allocation is a TRAP and the server restarts; without them "pfree
# called with invalid pointer" and a PANIC.  The logs suite below reads the
# server log for both.
if want server; then
	begin server
	lf_log "server: fenced commit and acquire"
	lf_start_redis || exit 1
	sq() { lf_as_user "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -d lf_server "$@"; }
	lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -c 'CREATE DATABASE lf_server' >/dev/null || exit 1
	sq >/dev/null <<-'SQL' || exit 1
	CREATE EXTENSION lease_fence;
	CREATE TABLE account (id int PRIMARY KEY, balance int);
	INSERT INTO account VALUES (1, 100);
	SELECT lease_fence.protect('account');
	SQL
	fenced_commit() {
		local g
		g=$(sq -c 'SELECT lease_fence.next_generation()') || return 1
		sq -c 'BEGIN' -c "SET LOCAL lease_fence.generation = $g" \
			-c 'UPDATE account SET balance = balance + 1 WHERE id = 1' -c 'COMMIT' >/dev/null &&
			[ "$(sq -c 'SELECT fence FROM account WHERE id = 1')" = "$g" ]
	}
	check "server: a fenced UPDATE under SET LOCAL commits and stores its generation" fenced_commit
	acquire_release() {
		local out
		out=$(sq -F ' ' <<-SQL
		SET lease_fence.redis_socket = '$LF_REDIS_SOCK';
		SELECT status, identity FROM lease_fence.acquire('account:1', 10000) \gset a_
		SELECT :'a_status', status FROM lease_fence.release('account:1', :'a_identity');
		SQL
		) || return 1
		[ "$out" = "acquired released" ] || { echo "acquire / release said: $out"; return 1; }
	}
	check "server: acquire from a real Redis, then release" acquire_release
	# the server is the one LF_REDIS names (Valkey 8 says server_name:valkey
	# and valkey_version in INFO server, and redis_version:7.2.4, the
	# Redis it answers as; Redis has no server_name)
	server_is() {
		local info
		info=$(lf_redis_cli INFO server | tr -d '\r') || return 1
		case $LF_REDIS in
			valkey) grep -qx 'server_name:valkey' <<<"$info" && grep -qE '^valkey_version:8\.' <<<"$info" ;;
			*) grep -qE '^redis_version:' <<<"$info" && ! grep -q '^server_name:valkey' <<<"$info" ;;
		esac || { grep -E '^(redis|valkey)_version:|^server_name:' <<<"$info"; return 1; }
	}
	check "server: the server is $LF_REDIS ($("${LF_REDIS_SERVER:-redis-server}" --version | cut -d' ' -f1-3))" server_is
	lf_stop_redis
	lf_log "server: done"
fi

# the README as a reader follows it: its set-up block (valid shell; the
# settings it writes exist and take its values; its SQL, run as it is by the
# postgres superuser), its worked example in SQL, then its Python example,
# run as it is but for the
# address (this server has only a unix socket), which must print what the
# README says it prints.  What the set-up block does to the machine
# (packages, make install, a restart) is what this script does to its copy.
if want readme; then
	begin readme
	lf_log "readme: the set-up and the fenced write from Python"
	lf_start_redis || exit 1
	rd=$LF_WORK/readme
	mkdir -p "$rd" && chmod 755 "$rd"
	check "readme: the set-up and Python blocks are found in README.md" \
		/usr/bin/python3 "$LF_SRC/test/readme_check.py" "$LF_SRC/README.md" "$rd"
	check "readme: the set-up block is valid shell" bash -n "$rd/setup.sh"
	readme_settings() {
		local line name n=0
		while IFS= read -r line; do
			[ -z "$line" ] && continue
			name=${line%%[ =]*}
			n=$((n + 1))
			if [ "$name" = shared_preload_libraries ]; then
				[[ "$line" == *lease_fence* ]] || { echo "does not preload lease_fence: $line"; return 1; }
			else
				lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -c "LOAD 'lease_fence'" -c "SET $line" ||
					{ echo "not a setting lease_fence takes: $line"; return 1; }
			fi
		done <"$rd/settings.txt"
		[ "$n" -gt 0 ]
	}
	check "readme: every setting the set-up block writes exists and takes its value" readme_settings
	readme_sql() {
		lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -f "$rd/setup.sql" >/dev/null &&
			lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 \
				-c "ALTER DATABASE app SET lease_fence.redis_socket = '$LF_REDIS_SOCK'" >/dev/null
	}
	check "readme: the set-up SQL runs as it is (role, database, extension, grants)" readme_sql
	# the worked example in SQL, in psql, in a fresh database (with a key_prefix
	# of its own: one database per prefix): its one ERROR is
	# the stale write's LF001; the explicit lease is renewed and released;
	# the row holds the newest writer's balance and the lease's generation
	readme_example() {
		local out err
		lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -c 'CREATE DATABASE lf_readme' \
			-c "ALTER DATABASE lf_readme SET lease_fence.redis_socket = '$LF_REDIS_SOCK'" \
			-c "ALTER DATABASE lf_readme SET lease_fence.key_prefix = 'lf_readme:'" >/dev/null || return 1
		lf_as_user "$PG_BIN/psql" -X -q -d lf_readme -c 'CREATE EXTENSION lease_fence' >/dev/null || return 1
		out=$( { cat "$rd/example.sql"; echo 'SELECT balance, owner, fence FROM account;'; } |
			lf_as_user "$PG_BIN/psql" -X -At -v VERBOSITY=verbose -d lf_readme -f - 2>"$rd/example.err")
		err=$(grep 'ERROR' "$rd/example.err")
		echo "$out"; cat "$rd/example.err"
		[ "$(grep -c 'ERROR' "$rd/example.err")" = 1 ] &&
			[[ "$err" == *"ERROR:  LF001: stale generation: write rejected by fence"* ]] &&
			grep -qx 't|renewed|[0-9]*|' <<<"$out" && grep -qx 't|released|' <<<"$out" &&
			[ "$(tail -n 1 <<<"$out")" = "110|me|3" ]
	}
	check "readme: the worked example in SQL runs as it is (one ERROR, the stale write's LF001; fence 3)" readme_example
	lf_as_user "$PG_BIN/psql" -X -q -c 'DROP DATABASE IF EXISTS lf_readme' >/dev/null
	readme_python() {
		local out
		out=$(cd "$rd" && lf_as_user env PGHOST="$PGHOST" PGPORT="$PGPORT" /usr/bin/python3 fenced.py 2>&1)
		echo "$out"
		[ "$out" = "$(cat "$rd/expected.txt")" ] || { echo "the README says:"; cat "$rd/expected.txt"; return 1; }
	}
	check "readme: the Python example, as role app, prints what the README says (LF001, then the newest holder's write)" readme_python
	lf_as_user "$PG_BIN/psql" -X -q -c 'DROP DATABASE IF EXISTS app' -c 'DROP ROLE IF EXISTS app' >/dev/null
	lf_stop_redis
fi

# TAP: every "ok" / "not ok" line of prove -v is one assertion; a script that
# dies without a "not ok" still counts as one failure (each such script,
# also when others failed: prove's summary lists it with "Failed: 0")
lf_stop_pg   # TAP tests start clusters of their own
if want tap; then
	begin tap
	# the older PostgreSQL of the files that cross majors (LF_OLD_PG,
	# LF_OLD_PG_MAJOR: test/README.md, "TAP"); its build counts in tap's time
	lf_old_pg || exit 1
	run_suite tap REGRESS= ISOLATION= PROVE_FLAGS="-v -j${LF_TAP_JOBS:-2}" ${LF_TAP:+PROVE_TESTS="$LF_TAP"}
	rc=$?
	ok=$(grep -cE '^ok [0-9]+' "$LF_WORK/tap.out")
	bad=$(grep -cE '^not ok [0-9]+' "$LF_WORK/tap.out")
	if [ $rc -ne 0 ]; then
		bad=$((bad + $(grep -cE '^test/t/[^ ]+\.pl +\(Wstat: [0-9]+ .*Failed: 0\)' "$LF_WORK/tap.out")))
		[ "$bad" -eq 0 ] && bad=1
		# a file that died says why only in its own log (PostgreSQL's test
		# modules send a script's stderr there): the end of each failed one's
		for t in $(sed -nE 's/^(test\/t\/[^ ]+)\.pl +\(Wstat.*/\1/p' "$LF_WORK/tap.out"); do
			f=$LF_SRC/tmp_check/log/regress_log_${t##*/}
			[ -f "$f" ] && { echo "--- $f"; tail -n 60 "$f"; }
		done
		# a bail-out (initdb failed, say) stops prove before its summary:
		# the newest logs are those of the files that ran last
		if grep -q '^Bailout called' "$LF_WORK/tap.out"; then
			for f in $(ls -t "$LF_SRC"/tmp_check/log/regress_log_* 2>/dev/null | head -n "${LF_TAP_JOBS:-2}"); do
				echo "--- $f"; tail -n 60 "$f"
			done
		fi
		for f in "$LF_SRC"/tmp_check/log/*.log; do
			[ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
		done
	fi
	passed=$((passed + ok)); failed=$((failed + bad))
	lf_log "tap: $ok passed, $bad failed"
fi

# A runner with servers of its own (NAME, its script): its output shown with
# its closing line renamed "== NAME: N passed, N failed", so that only the
# total below reads as one; its counts added (no count, or a failing exit
# without a failure counted, is one failure).  The runner's closing line is
# "N passed, N failed" or "NAME: N passed, N failed".
run_runner() {
	local name=$1 script=$2 out=$LF_WORK/$1.out rc ok bad
	lf_log "$name"
	bash "$script" >"$out" 2>&1
	rc=$?
	sed -E "s/^($name: )?([0-9]+ passed, [0-9]+ failed)\$/== $name: \2/" "$out"
	ok=$(sed -nE "s/^($name: )?([0-9]+) passed, [0-9]+ failed\$/\2/p" "$out" | tail -n 1)
	bad=$(sed -nE "s/^($name: )?[0-9]+ passed, ([0-9]+) failed\$/\2/p" "$out" | tail -n 1)
	ok=${ok:-0}; bad=${bad:-0}
	[ $rc -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	passed=$((passed + ok)); failed=$((failed + bad))
	lf_log "$name: $ok passed, $bad failed"
}

# the portable edition (a server of its own, without the C library)
want portable && begin portable && run_runner portable "$top/test/portable/run.sh"
# the client libraries: Python, Node.js, Java
want clients && begin clients && run_runner clients "$top/test/clients/run.sh"

# The README's first command, as a newcomer runs it: from a clone in a
# directory the postgres user cannot enter (mode 0700, owned by root when we
# are root, like root's home) whose path has spaces.  Three test points: it
# exits 0, its table shows A's write rejected with LF001, and no command it
# ran complained about its working directory.
if want demo; then
	begin demo
	lf_log "demo from a private directory"
	priv="$LF_WORK/private home"
	mkdir -m 0700 "$priv"
	rsync -a --exclude .git --exclude '*.o' --exclude '*.so' --exclude '*.bc' \
		--exclude results --exclude output_iso --exclude tmp_check "$top"/ "$priv/lease fence"/
	(cd "$priv/lease fence" && bash demo/run.sh) >"$LF_WORK/demo.out" 2>&1
	rc=$?
	cat "$LF_WORK/demo.out"
	demo_check() { local name=$1; shift; check "demo: $name" "$@"; }
	demo_check "exits 0 from a 0700 directory" [ "$rc" -eq 0 ]
	demo_check "A's stale write is rejected with LF001" \
		grep -qE '^4 +A +UPDATE .* rejected: LF001' "$LF_WORK/demo.out"
	demo_check "no command complains about its directory" \
		bash -c "! grep -qiE 'could not change directory|permission denied' \"\$1\"" _ "$LF_WORK/demo.out"
	lf_log "demo: done"
fi

# valgrind memcheck over the pg_regress suite and every Redis path of the
# helper (test/valgrind.sh, servers of its own): one test point per phase,
# read off its closing line ("regress: N passed, 0 failed, 0 lease_fence error
# reports" and "redis: ... 0 with a lease_fence/hiredis frame ... OK")
if want valgrind; then
	begin valgrind
	lf_log "valgrind"
	bash "$top/test/valgrind.sh" >"$LF_WORK/valgrind.out" 2>&1
	rc=$?
	tail -n 30 "$LF_WORK/valgrind.out"
	# a failed step of the redis phase is printed in its table, long before
	# the tail: show those lines too
	grep -E '^  (FAIL|MISSING) ' "$LF_WORK/valgrind.out"
	last=$(grep '^valgrind.sh: ' "$LF_WORK/valgrind.out" | tail -n 1)
	# each point reads its own phase's part of the closing line
	check "valgrind: the pg_regress suite, no error report with a lease_fence frame" \
		bash -c '[[ "$1" =~ regress:\ [0-9]+\ passed,\ 0\ failed,\ 0\ lease_fence\ error ]]' _ "$last"
	check "valgrind: every Redis path, no error or definite leak with a lease_fence or hiredis frame" \
		bash -c '[[ "$1" =~ redis:\ [0-9]+\ steps,\ 0\ failed\;\ [0-9]+\ error\ reports,\ 0\ with\ a\ lease_fence/hiredis\ frame\;\ [0-9]+\ definite\ leak\ records,\ 0\ with ]]' _ "$last"
	lf_log "valgrind: test/valgrind.sh exit status $rc"
	lf_log "valgrind: done"
fi

# The fault-injection run, briefly (test/faults/faults.py: five scenarios
# of about 10 to 30 s, servers of its own under $LF_WORK/faults), then its
# self-test (test/faults/mutants.py: two mutant builds, each run through one
# brief scenario, must fail): every "ok -" / "not ok -" line of it is one
# test point; its availability report is printed as it is, and its closing
# line renamed, like the client tests'.
if want faults; then
	begin faults
	lf_log "faults"
	(
		LF_FAULTS_SECONDS=${LF_FAULTS_SECONDS:-8} lf_faults
		rc=$?
		# its self-test: the run must fail against each mutant build
		lf_faults_mutants || rc=1
		exit $rc
	) >"$LF_WORK/faults.out" 2>&1
	rc=$?
	sed -E 's/^([0-9]+ passed, [0-9]+ failed)$/faults: \1/' "$LF_WORK/faults.out"
	ok=$(grep -cE '^ok - ' "$LF_WORK/faults.out")
	bad=$(grep -cE '^not ok - ' "$LF_WORK/faults.out")
	[ $rc -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	passed=$((passed + ok)); failed=$((failed + bad))
	lf_log "faults: $ok passed, $bad failed"
fi

# A failed Assert prints "TRAP:" to the server log and a PANIC aborts the
# server: neither may appear in any server log of this run.  The run's own
# server wrote one (it ran the suites above), so there is always a log.
if want logs; then
	begin logs
	logs=("$LF_WORK/postgres.log")
	for f in "$LF_SRC"/tmp_check/log/*.log "$LF_WORK"/faults/*/*/postgres.log; do
		[ -f "$f" ] && logs+=("$f")
	done
	no_trap() {
		[ -s "$LF_WORK/postgres.log" ] || { echo "no server log at $LF_WORK/postgres.log"; return 1; }
		! grep -HnE '^TRAP:|PANIC:' "${logs[@]}"
	}
	check "logs: no TRAP or PANIC in ${#logs[@]} server logs" no_trap
fi

begin ""
lf_log "suite times: ${suite_times[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
