#!/usr/bin/env bash
# test/valgrind.sh — lease_fence under valgrind memcheck, in two phases, each
# against a throwaway PostgreSQL 15 whose postmaster, and so every backend it
# forks, runs under valgrind:
#
#   regress  the pg_regress suite (sql/, expected/), --leak-check=no;
#   redis    every Redis path of the lease helper (test/valgrind_redis.sql)
#            against a throwaway redis-server on a unix socket, with
#            shared_preload_libraries = 'lease_fence' and --leak-check=full,
#            to catch hiredis replies and contexts that are leaked or used
#            after free; then the TLS paths (test/valgrind_redis_tls.sql)
#            against a TLS port of the same Redis, certificates by openssl.
#
# Both run by default; `bash test/valgrind.sh redis` (or LF_VALGRIND_PHASES=
# "redis") runs one.  As root it installs what it needs (valgrind too), builds
# and installs the extension like test/run.sh, starts each server itself
# (pg_ctl cannot put valgrind in front of postgres), stops it, and counts:
#   - error reports: one per distinct error context per process, as valgrind
#     prints them into $LF_WORK/valgrind*/valgrind.<pid>.log
#   - those with a stack frame in lease_fence (lease_fence.so, src/*.c) or in
#     libhiredis: these are printed in full, and make the script fail;
#   - (redis phase) definite and indirect leak records; a definite leak with
#     a lease_fence or hiredis frame fails the run.  PostgreSQL does not free
#     everything at exit, so most leak records are its own: those are counted
#     and listed briefly, never a failure.
# Reports elsewhere in the server are listed (kind and top frames) but do not
# fail the run: PostgreSQL from Debian is not built with USE_VALGRIND, and
# test/valgrind.supp only hides the false positives seen so far.
#
# Slow: about 85 s on 2 cores for the regress phase, about 95 s for
# the redis phase; the start-up and shutdown timeouts are generous.  Ends with
# one line: "valgrind.sh: ... OK" or "... FAILED".  Environment:
#   LF_KEEP=1            keep the temp dir (logs, regression.diffs)
#   LF_VALGRIND_PHASES   "regress redis" (default), or one of them
#   LF_VALGRIND_GENSUPP=1  print a suppression after each report in the logs
#   LF_VALGRIND_TIMEOUT  seconds to wait for start-up and shutdown (600)
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/lib.sh"

VG_TIMEOUT=${LF_VALGRIND_TIMEOUT:-600}
VG_JOB=            # pid of the background job that runs valgrind (runuser or valgrind)
VG_PM_PID=         # postmaster pid, from postmaster.pid, once it is up
VG_DIR=            # this phase's valgrind log directory
VG_PGLOG=          # this phase's server log
VG_OPTS=()         # this phase's extra valgrind options
VG_REDIS_PW=lf-valgrind-$$-$RANDOM   # requirepass of the redis phase, set and reset by it

# Stop the postmaster this script started, and only that one: pg_ctl signals
# the pid in our own data directory's postmaster.pid; the last resort signals
# that pid only if it is still the process we recorded at start-up.
vg_stop_pg() {
	local i
	[ -n "${LF_PGDATA:-}" ] || return 0
	if [ -f "$LF_PGDATA/postmaster.pid" ]; then
		lf_log "stopping the server (valgrind makes shutdown slow)"
		lf_as_user "$PG_BIN/pg_ctl" -D "$LF_PGDATA" -m fast -w -t "$VG_TIMEOUT" stop >/dev/null 2>&1 ||
			lf_as_user "$PG_BIN/pg_ctl" -D "$LF_PGDATA" -m immediate -w -t 120 stop >/dev/null 2>&1
	fi
	# postmaster.pid is gone before valgrind has written its last words
	# (ERROR SUMMARY): wait for the process itself to end
	if [ -n "$VG_JOB" ]; then
		for ((i = 0; i < VG_TIMEOUT; i++)); do
			kill -0 "$VG_JOB" 2>/dev/null || break
			sleep 1
		done
	fi
	if [ -n "$VG_PM_PID" ] && vg_is_ours "$VG_PM_PID"; then
		lf_log "postmaster $VG_PM_PID still running after ${VG_TIMEOUT}s: SIGKILL"
		kill -KILL "$VG_PM_PID" 2>/dev/null
	fi
	if [ -n "$VG_JOB" ]; then
		wait "$VG_JOB" 2>/dev/null
		VG_JOB=
	fi
	return 0
}

# Is pid still the postmaster we started on our data directory?
vg_is_ours() {
	local pid=$1
	[ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "-D $LF_PGDATA"
}

# Stop the redis-server of the redis phase (started by lf_start_redis, or by
# the redisctl helper after a deliberate stop): SHUTDOWN, with the phase's
# password if a step left requirepass set, then SIGTERM to the pid in our own
# pidfile if that process is still a redis-server on our socket.
vg_stop_redis() {
	local pid i
	[ -n "${LF_REDIS_SOCK:-}" ] && [ -f "$LF_WORK/redis.pid" ] || return 0
	pid=$(cat "$LF_WORK/redis.pid" 2>/dev/null)
	lf_as_user redis-cli -s "$LF_REDIS_SOCK" SHUTDOWN NOSAVE >/dev/null 2>&1
	lf_as_user env REDISCLI_AUTH="$VG_REDIS_PW" redis-cli -s "$LF_REDIS_SOCK" SHUTDOWN NOSAVE >/dev/null 2>&1
	for ((i = 0; i < 50; i++)); do
		[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 0
		sleep 0.1
	done
	if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'redis-server' &&
		[ "$(readlink "/proc/$pid/cwd")" = "$LF_WORK" ]; then
		kill -TERM "$pid" 2>/dev/null
	fi
	return 0
}

vg_cleanup() {
	vg_stop_pg
	vg_stop_redis
	vg_topology_stop
	lf_cleanup
}

# vg_start_pg supp phase [postgresql.conf lines...]
# initdb (not under valgrind), then start
#   valgrind ... "${VG_OPTS[@]}" postgres -D $LF_PGDATA
# in the background as $LF_USER and wait until it accepts connections.  The
# regress phase uses $LF_WORK/pgdata, valgrind/ and postgres.log, any other
# phase pgdata-<phase>, valgrind-<phase>/ and postgres-<phase>.log.
vg_start_pg() {
	local supp=$1 phase=$2 sfx= i line
	shift 2
	[ "$phase" = regress ] || sfx=-$phase
	VG_DIR=$LF_WORK/valgrind$sfx
	VG_PGLOG=$LF_WORK/postgres$sfx.log
	LF_PGDATA=$LF_WORK/pgdata$sfx
	lf_as_user mkdir -p "$VG_DIR"
	lf_as_user "$PG_BIN/initdb" -D "$LF_PGDATA" -U postgres -A trust --no-sync \
		--locale=C.UTF-8 -E UTF8 >"$LF_WORK/initdb$sfx.log" 2>&1 || { cat "$LF_WORK/initdb$sfx.log"; return 1; }
	{
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$LF_WORK'"
		echo "port = 5432"
		echo "fsync = off"
		# llvmjit under valgrind is slow and noisy, and not ours
		echo "jit = off"
		# backends start slowly under valgrind
		echo "authentication_timeout = '10min'"
		# to tell which test a backend's log belongs to (pg_regress sets
		# application_name = pg_regress/<test>)
		echo "log_connections = on"
		echo "log_line_prefix = '%m [%p] %a '"
		for line in "$@"; do echo "$line"; done
	} | lf_as_user tee -a "$LF_PGDATA/postgresql.conf" >/dev/null

	local vg=(valgrind
		--trace-children=yes --track-origins=yes --leak-check=no
		--read-var-info=no --num-callers=40 --error-limit=no
		--fullpath-after="$LF_SRC/"
		--suppressions="$supp"
		--log-file="$VG_DIR/valgrind.%p.log"
		"${VG_OPTS[@]}")
	[ "${LF_VALGRIND_GENSUPP:-0}" = 1 ] && vg+=(--gen-suppressions=all)

	lf_log "[$phase] starting postgres under valgrind"
	lf_as_user "${vg[@]}" "$PG_BIN/postgres" -D "$LF_PGDATA" >"$VG_PGLOG" 2>&1 </dev/null &
	VG_JOB=$!
	VG_PM_PID=
	for ((i = 0; i < VG_TIMEOUT; i++)); do
		if "$PG_BIN/pg_isready" -q -h "$LF_WORK" -p 5432 -t 5; then
			VG_PM_PID=$(head -n 1 "$LF_PGDATA/postmaster.pid" 2>/dev/null)
			lf_log "[$phase] postmaster $VG_PM_PID up after ${i}s"
			export PGHOST=$LF_WORK PGPORT=5432 PGUSER=postgres PGDATABASE=postgres
			return 0
		fi
		if ! kill -0 "$VG_JOB" 2>/dev/null; then
			lf_log "postgres under valgrind exited during start-up"
			cat "$VG_PGLOG"
			wait "$VG_JOB" 2>/dev/null
			VG_JOB=
			return 1
		fi
		sleep 1
	done
	lf_log "postgres under valgrind did not accept connections within ${VG_TIMEOUT}s"
	tail -n 40 "$VG_PGLOG"
	return 1
}

# Parse valgrind's text logs.  One line per error report on stdout:
#   file <TAB> pid <TAB> ours(0|1) <TAB> signature <TAB> report (lines joined
#   by \x1f) <TAB> class
# A report is a block of lines (between blank "==pid== " lines) whose first
# line is flush left and whose second is the "at 0x..." of a stack; valgrind's
# own warnings and "Process terminating" notes are not errors.  "ours" means a
# frame (in the error's stack or, with --track-origins, in its origin stack)
# in lease_fence.so, in one of our sources, which --fullpath-after shows as
# src/<file>.c, or in libhiredis.  The signature is the kind plus the stack
# without addresses, to count the same context once across processes.  The
# class is "error", or for a leak record (--leak-check=full) "definite",
# "indirect", "possible" or "reachable"; a leak's signature leaves out its
# sizes and loss record number.
vg_parse_logs() {
	awk '
	function flush(   i, ours, sig, rep, line, cls) {
		if (n >= 2 && blk[1] !~ /^[ \t]/ && blk[2] ~ /^[ \t]+at 0x/ &&
		    blk[1] !~ /^(Warning:|Process terminating|HEAP SUMMARY|LEAK SUMMARY)/) {
			cls = "error"
			if (blk[1] ~ / are definitely lost in loss record /) cls = "definite"
			else if (blk[1] ~ / are indirectly lost in loss record /) cls = "indirect"
			else if (blk[1] ~ / are possibly lost in loss record /) cls = "possible"
			else if (blk[1] ~ / are still reachable in loss record /) cls = "reachable"
			ours = 0; sig = (cls == "error") ? blk[1] : cls " leak"; rep = blk[1]
			for (i = 2; i <= n; i++) {
				line = blk[i]
				if (line ~ /lease_fence\.so|libhiredis|\(src\/[^ ()\/]+\.[ch]:[0-9]+\)/) ours = 1
				rep = rep "\037" line
				if (line ~ /^[ \t]+(at|by) 0x/) {
					sub(/0x[0-9A-Fa-f]+: /, "", line); gsub(/^[ \t]+/, "", line)
					sig = sig " | " line
				}
			}
			printf "%s\t%s\t%d\t%s\t%s\t%s\n", bfile, bpid, ours, sig, rep, cls
		}
		n = 0
	}
	FNR == 1 { flush() }
	{
		if (!match($0, /^==[0-9]+== ?/)) next      # --pid-- notes, suppressions
		pid = substr($0, 3, RLENGTH - 3); sub(/==.*/, "", pid)
		line = substr($0, RLENGTH + 1)
		if (line ~ /^[ \t]*$/) { flush(); next }
		blk[++n] = line; bfile = FILENAME; bpid = pid
	}
	END { flush() }
	' "$@"
}

# The logs of this phase: sets the array vg_logs, and parses them into
# $VG_DIR/reports.tsv.  Returns 2 when there are none.
vg_collect() {
	shopt -s nullglob
	vg_logs=("$VG_DIR"/valgrind.*.log)
	shopt -u nullglob
	if [ ${#vg_logs[@]} -eq 0 ]; then
		lf_log "no valgrind logs in $VG_DIR: did valgrind run at all?"
		return 2
	fi
	vg_parse_logs "${vg_logs[@]}" >"$VG_DIR/reports.tsv"
}

# Print the reports of reports.tsv selected by an awk condition, one per
# distinct context: how many there were, in which processes (with the
# application_name of the first, from the server log), and the report.
vg_print_reports() {
	local cond=$1 reports=$VG_DIR/reports.tsv
	awk -F'\t' "$cond"' { n[$4]++; if (!($4 in first)) { first[$4] = NR; f[$4] = $1; p[$4] = $2; r[$4] = $5 }
			pids[$4] = pids[$4] (pids[$4] == "" ? "" : ",") $2 }
		END { for (s in n) printf "%d\t%d\t%s\t%s\t%s\t%s\n", first[s], n[s], f[s], p[s], pids[s], r[s] }' "$reports" |
	sort -n |
	while IFS=$'\t' read -r _ count file pid pids rep; do
		local test
		test=$(grep -F "[$pid] " "$VG_PGLOG" | grep -o 'application_name=[^ ]*' | head -n 1)
		echo
		echo "== $(basename "$file") (pid $pid${test:+, $test}); $count report(s), pids $pids"
		printf '%s\n' "$rep" | tr '\037' '\n'
	done
}

vg_summarise() {
	local reports=$VG_DIR/reports.tsv vg_logs
	local nlogs total distinct ours ours_distinct
	vg_collect || return 2
	nlogs=${#vg_logs[@]}
	total=$(wc -l <"$reports")
	distinct=$(cut -f4 "$reports" | sort -u | wc -l)
	ours=$(awk -F'\t' '$3 == 1' "$reports" | wc -l)
	ours_distinct=$(awk -F'\t' '$3 == 1 { print $4 }' "$reports" | sort -u | wc -l)

	# valgrind's own tally, per process (a forked child inherits its parent's
	# counts, so these overlap; shown as a cross-check only)
	local summaries unfinished suppressed
	summaries=$(grep -h 'ERROR SUMMARY:' "${vg_logs[@]}" | grep -cv 'ERROR SUMMARY: 0 errors')
	unfinished=$(grep -L 'ERROR SUMMARY:' "${vg_logs[@]}" | wc -l)
	suppressed=$(grep -h 'ERROR SUMMARY:' "${vg_logs[@]}" |
		sed -n 's/.*(suppressed: \([0-9]*\) from.*/\1/p' | awk '{ n += $1 } END { print n + 0 }')

	echo
	echo "valgrind: $nlogs process logs in $VG_DIR ($unfinished ended without an ERROR SUMMARY)"
	echo "valgrind: $total error reports in total ($distinct distinct contexts)," \
		"$summaries processes with a non-zero ERROR SUMMARY;" \
		"$suppressed errors suppressed by test/valgrind.supp"
	echo "valgrind: $ours error reports with a frame in lease_fence or hiredis ($ours_distinct distinct contexts)"

	if [ "$total" -gt 0 ]; then
		echo
		echo "-- error reports by kind (reports, distinct contexts)"
		awk -F'\t' '{ k = $4; sub(/ \|.*/, "", k); sub(/ of size [0-9]+/, "", k); r[k]++; if (!seen[$4]++) c[k]++ }
			END { for (k in r) printf "  %5d %4d  %s\n", r[k], c[k], k }' "$reports" | sort -rn
	fi
	if [ "$total" -gt "$ours" ]; then
		echo
		echo "-- contexts outside lease_fence (reports: kind | top frames)"
		awk -F'\t' '$3 == 0 { n[$4]++ }
			END { for (s in n) { k = split(s, f, / \| /); t = f[1];
				for (i = 2; i <= k && i <= 6; i++) t = t " | " f[i];
				printf "  %5d  %s\n", n[s], t } }' "$reports" | sort -rn | head -n 40
	fi
	if [ "$ours" -gt 0 ]; then
		echo
		echo "-- error reports with a frame in lease_fence or hiredis (one per distinct context)"
		vg_print_reports '$3 == 1'
	fi
	[ "$ours" -eq 0 ]
}

# Is the server log free of crashed server processes?  (Prints them.)
vg_no_crash() {
	local crash='was terminated by signal|server process \(PID [0-9]+\) exited with exit code'
	if grep -qE "$crash" "$VG_PGLOG"; then
		lf_log "a server process crashed:"
		grep -E "$crash" "$VG_PGLOG"
		return 1
	fi
	return 0
}

# ---------------------------------------------------------------- regress
phase_regress() {
	local start=$SECONDS out=$LF_WORK/regress.out rc ok bad vrc
	VG_OPTS=()
	vg_start_pg "$LF_SRC/test/valgrind.supp" regress || { R_SUMMARY="regress: server did not start"; return 1; }

	lf_log "[regress] pg_regress (under valgrind: slow)"
	(cd "$LF_SRC" && lf_as_user env PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER" \
		make -s installcheck ISOLATION= TAP_TESTS=) >"$out" 2>&1
	rc=$?
	cat "$out"
	ok=$(grep -cE '^(test )?\s*\S+\s+\.\.\. ok' "$out")
	bad=$(grep -cE '^(test )?\s*\S+\s+\.\.\. (FAILED|failed)' "$out")
	if [ $rc -ne 0 ]; then
		[ -f "$LF_SRC/regression.diffs" ] && { head -c 20000 "$LF_SRC/regression.diffs"; echo; }
		[ "$bad" -eq 0 ] && bad=1
	fi
	lf_log "[regress] under valgrind: $ok passed, $bad failed ($((SECONDS - start))s)"

	# valgrind writes its last words (and ERROR SUMMARY) when each process exits
	vg_stop_pg
	lf_log "[regress] server stopped after $((SECONDS - start))s"
	vg_no_crash || bad=$((bad + 1))

	vg_summarise
	vrc=$?
	echo
	echo "regress under valgrind: $ok passed, $bad failed"
	local nours
	nours=$(awk -F'\t' '$3 == 1' "$VG_DIR/reports.tsv" 2>/dev/null | wc -l)
	R_SUMMARY="regress: $ok passed, $bad failed, $nours lease_fence error reports ($((SECONDS - start))s)"
	[ "$bad" -eq 0 ] && [ "$vrc" -eq 0 ]
}

# ---------------------------------------------------------------- redis
# The helper that test/valgrind_redis.sql calls through psql's \! (as
# $LF_USER, like the servers): redis-cli on the phase's socket, stop and start
# that Redis, CLIENT PAUSE, wait for a pause to end, and wait for a backend's
# valgrind log to be complete.  "expect", "calls" and "wait-exit" print a
# STEP line like the SQL's vg_step().
vg_write_redisctl() {
	local f=$LF_WORK/bin/redisctl
	lf_as_user mkdir -p "$LF_WORK/bin"
	lf_as_user tee "$f" >/dev/null <<'REDISCTL'
#!/usr/bin/env bash
# generated by test/valgrind.sh for test/valgrind_redis.sql
set -u
sock=$LF_REDIS_SOCK
cli() { redis-cli -s "$sock" "$@"; }
step() {	# name got want detail
	local v=FAIL
	[ "$2" = "$3" ] && v=ok
	printf 'STEP|%s|%s|%s|%s|%s\n' "$1" "$2" "$3" "$v" "$4"
}
cmd=$1
shift
case $cmd in
cli) cli "$@" ;;
stop)	# SHUTDOWN, then wait until the pidfile and the socket are gone
	cli SHUTDOWN NOSAVE >/dev/null 2>&1
	for ((i = 0; i < 100; i++)); do
		[ -e "$LF_WORK/redis.pid" ] || [ -S "$sock" ] || exit 0
		sleep 0.1
	done
	echo "redisctl: Redis did not stop" >&2; exit 1 ;;
start)
	. "$LF_SRC/test/lib.sh"
	lf_start_redis >/dev/null ;;
pause)	# returns once the pause is in effect
	cli CLIENT PAUSE "$1" ALL >/dev/null ;;
wait)	# redis-cli's own PING is paused with every other client: returns once the pause is over
	timeout 60 redis-cli -s "$sock" PING >/dev/null ;;
expect)	# expect name want redis-cli-args...
	name=$1 want=$2
	shift 2
	got=$(cli "$@" 2>&1 | tr '\n' ' ')
	step "$name" "${got% }" "$want" "redis-cli $*" ;;
calls)	# calls name want command: calls of that command since CONFIG RESETSTAT
	got=$(cli INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$3:calls=\([0-9]*\),.*/\1/p")
	step "$1" "${got:-0}" "$2" "INFO commandstats cmdstat_$3" ;;
terminate-later | cancel-later)	# pg_terminate_backend(pid) / pg_cancel_backend(pid) in a second, from a background psql
	f=pg_terminate_backend
	[ "$cmd" = cancel-later ] && f=pg_cancel_backend
	(sleep 1; "$PG_BIN/psql" -X -Atq -c "SELECT $f($1)") </dev/null >/dev/null 2>&1 &
	;;
wait-exit)	# wait-exit name pid: that backend's valgrind log is complete
	log=$VG_DIR/valgrind.$2.log
	got=running
	for ((i = 0; i < 600; i++)); do
		grep -q 'ERROR SUMMARY' "$log" 2>/dev/null && { got=exited; break; }
		sleep 0.2
	done
	step "$1" "$got" exited "valgrind.$2.log" ;;
*) echo "redisctl: unknown command $cmd" >&2; exit 2 ;;
esac
REDISCTL
	lf_as_user chmod 755 "$f"
}

# The redis phase: summary of its steps and of valgrind's reports.
vg_summarise_redis() {
	local reports=$VG_DIR/reports.tsv vg_logs out=$1
	local nlogs unfinished errs errs_ours leaks_def leaks_ind def_ours ind_ours procs_def
	vg_collect || return 2
	nlogs=${#vg_logs[@]}
	unfinished=$(grep -L 'ERROR SUMMARY:' "${vg_logs[@]}" | wc -l)
	errs=$(awk -F'\t' '$6 == "error"' "$reports" | wc -l)
	errs_ours=$(awk -F'\t' '$6 == "error" && $3 == 1' "$reports" | wc -l)
	leaks_def=$(awk -F'\t' '$6 == "definite"' "$reports" | wc -l)
	leaks_ind=$(awk -F'\t' '$6 == "indirect"' "$reports" | wc -l)
	def_ours=$(awk -F'\t' '$6 == "definite" && $3 == 1' "$reports" | wc -l)
	ind_ours=$(awk -F'\t' '$6 == "indirect" && $3 == 1' "$reports" | wc -l)
	procs_def=$(awk -F'\t' '$6 == "definite" { print $2 }' "$reports" | sort -u | wc -l)

	echo
	echo "valgrind[redis]: $nlogs process logs in $VG_DIR ($unfinished ended without an ERROR SUMMARY)"
	echo "valgrind[redis]: $errs error reports in total (invalid read/write, uninitialised, ...)," \
		"$((leaks_def + leaks_ind)) leak records ($leaks_def definite in $procs_def processes, $leaks_ind indirect)"
	echo "valgrind[redis]: $errs_ours error reports with a lease_fence or hiredis frame"
	echo "valgrind[redis]: $def_ours definite leaks with a lease_fence or hiredis frame ($ind_ours indirect)"

	if [ "$errs" -gt "$errs_ours" ]; then
		echo
		echo "-- error reports outside lease_fence and hiredis (reports: kind | top frames)"
		awk -F'\t' '$6 == "error" && $3 == 0 { n[$4]++ }
			END { for (s in n) { k = split(s, f, / \| /); t = f[1];
				for (i = 2; i <= k && i <= 6; i++) t = t " | " f[i];
				printf "  %5d  %s\n", n[s], t } }' "$reports" | sort -rn | head -n 20
	fi
	if [ $((leaks_def + leaks_ind)) -gt $((def_ours + ind_ours)) ]; then
		echo
		echo "-- PostgreSQL's own leak records (reports: class | allocation frames), not failures"
		awk -F'\t' '($6 == "definite" || $6 == "indirect") && $3 == 0 { n[$4]++ }
			END { for (s in n) { k = split(s, f, / \| /); t = f[1];
				for (i = 2; i <= k && i <= 7; i++) t = t " | " f[i];
				printf "  %5d  %s\n", n[s], t } }' "$reports" | sort -rn | head -n 20
	fi
	if [ "$errs_ours" -gt 0 ]; then
		echo
		echo "-- error reports with a lease_fence or hiredis frame (one per distinct context)"
		vg_print_reports '$6 == "error" && $3 == 1'
	fi
	if [ $((def_ours + ind_ours)) -gt 0 ]; then
		echo
		echo "-- leak records with a lease_fence or hiredis frame (one per distinct context)"
		vg_print_reports '($6 == "definite" || $6 == "indirect") && $3 == 1'
	fi
	VG_REDIS_COUNTS="$errs error reports, $errs_ours with a lease_fence/hiredis frame;"
	VG_REDIS_COUNTS+=" $leaks_def definite leak records, $def_ours with a lease_fence/hiredis frame"
	[ "$errs_ours" -eq 0 ] && [ "$def_ours" -eq 0 ] && [ "$unfinished" -eq 0 ]
}

# vg_step name got want detail: a STEP line, like vg_step() in the SQL
vg_step() {
	local v=FAIL
	[ "$2" = "$3" ] && v=ok
	printf 'STEP|%s|%s|%s|%s|%s\n' "$1" "$2" "$3" "$v" "$4"
}

# Wait (up to 120 s) until valgrind has written the ERROR SUMMARY of process
# pid, its last words after the leak check.
vg_wait_log() {
	local i log=$VG_DIR/valgrind.$1.log
	for ((i = 0; i < 600; i++)); do
		grep -q 'ERROR SUMMARY' "$log" 2>/dev/null && return 0
		sleep 0.2
	done
	return 1
}

# ---------------------------------------------------------------- topology
# Sentinel and Cluster for test/valgrind_redis_topology.sql, on 127.0.0.1
# ports of their own: two cluster nodes sharing the 16384 slots, and a
# master (no replica) watched by one sentinel.  Each is a daemon with a
# pidfile in $LF_WORK/topology; vg_topology_stop signals only those pids,
# and only while they are still a redis process in that directory.
VG_TOPO_DIR=
# a free port below 55535 whose cluster bus port (+10000) is free too
vg_free_port() {
	python3 -c '
import random, socket
while True:
    p = random.randrange(20000, 30000)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
        print(p); break
    except OSError:
        pass'
}
vg_topology_start() {
	local d=$LF_WORK/topology p i
	VG_TOPO_DIR=$d
	TOPO_C1=$(vg_free_port) TOPO_C2=$(vg_free_port) TOPO_M=$(vg_free_port) TOPO_S=$(vg_free_port)
	export TOPO_C1 TOPO_C2 TOPO_M TOPO_S
	for p in "$TOPO_C1" "$TOPO_C2" "$TOPO_M"; do
		lf_as_user mkdir -p "$d/$p" || return 1
		local extra=()
		[ "$p" = "$TOPO_M" ] || extra=(--cluster-enabled yes --cluster-config-file nodes.conf)
		lf_as_user redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
			--daemonize yes --pidfile "$d/$p/pid" --logfile "$d/$p/log" --dir "$d/$p" \
			"${extra[@]}" || return 1
	done
	for p in "$TOPO_C1" "$TOPO_C2" "$TOPO_M"; do
		for ((i = 0; i < 100; i++)); do
			lf_as_user redis-cli -p "$p" PING 2>/dev/null | grep -q PONG && break
			sleep 0.1
		done
	done
	lf_as_user redis-cli -p "$TOPO_C1" CLUSTER ADDSLOTSRANGE 0 8191 >/dev/null &&
		lf_as_user redis-cli -p "$TOPO_C2" CLUSTER ADDSLOTSRANGE 8192 16383 >/dev/null &&
		lf_as_user redis-cli -p "$TOPO_C1" CLUSTER MEET 127.0.0.1 "$TOPO_C2" >/dev/null || return 1
	lf_as_user mkdir -p "$d/$TOPO_S" || return 1
	printf '%s\n' "port $TOPO_S" "bind 127.0.0.1" "dir $d/$TOPO_S" "logfile $d/$TOPO_S/log" \
		"daemonize yes" "pidfile $d/$TOPO_S/pid" "sentinel monitor vg 127.0.0.1 $TOPO_M 1" |
		lf_as_user tee "$d/$TOPO_S/sentinel.conf" >/dev/null
	lf_as_user redis-sentinel "$d/$TOPO_S/sentinel.conf" || return 1
	for ((i = 0; i < 300; i++)); do
		if lf_as_user redis-cli -p "$TOPO_C1" CLUSTER INFO 2>/dev/null | grep -q cluster_state:ok &&
			lf_as_user redis-cli -p "$TOPO_C2" CLUSTER INFO 2>/dev/null | grep -q cluster_state:ok &&
			lf_as_user redis-cli -p "$TOPO_S" SENTINEL get-master-addr-by-name vg 2>/dev/null | grep -q "^$TOPO_M\$"; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}
vg_topology_stop() {
	local f pid
	[ -n "$VG_TOPO_DIR" ] || return 0
	for f in "$VG_TOPO_DIR"/*/pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'redis-' &&
			[ "$(readlink "/proc/$pid/cwd")" = "$(dirname "$f")" ]; then
			kill -TERM "$pid" 2>/dev/null
		fi
	done
	VG_TOPO_DIR=
}

# vgtopo, for test/valgrind_redis_topology.sql: move the slot of a key from
# the node that has it to the other one, in two steps
vg_write_vgtopo() {
	lf_as_user tee "$LF_WORK/bin/vgtopo" >/dev/null <<'VGTOPO'
#!/usr/bin/env bash
# generated by test/valgrind.sh for test/valgrind_redis_topology.sql
#   vgtopo migrate-start KEY...   IMPORTING / MIGRATING, then MIGRATE the keys
#   vgtopo migrate-end KEY        SETSLOT NODE on both nodes
set -eu
cmd=$1; shift
slot=$(redis-cli -p "$TOPO_C1" CLUSTER KEYSLOT "$1")
if [ "$slot" -lt 8192 ]; then from=$TOPO_C1 to=$TOPO_C2; else from=$TOPO_C2 to=$TOPO_C1; fi
from_id=$(redis-cli -p "$from" CLUSTER NODES | awk '/myself/ { print $1 }')
to_id=$(redis-cli -p "$to" CLUSTER NODES | awk '/myself/ { print $1 }')
case $cmd in
migrate-start)
	redis-cli -p "$to" CLUSTER SETSLOT "$slot" IMPORTING "$from_id"
	redis-cli -p "$from" CLUSTER SETSLOT "$slot" MIGRATING "$to_id"
	redis-cli -p "$from" MIGRATE 127.0.0.1 "$to" "" 0 5000 KEYS "$@" ;;
migrate-end)
	# the importing node takes the slot: after MIGRATING it is the "to" one
	redis-cli -p "$to" CLUSTER SETSLOT "$slot" NODE "$to_id"
	redis-cli -p "$from" CLUSTER SETSLOT "$slot" NODE "$to_id" ;;
esac
VGTOPO
	lf_as_user chmod 755 "$LF_WORK/bin/vgtopo"
}

phase_redis() {
	local start=$SECONDS sql=$LF_SRC/test/valgrind_redis.sql sql_term=$LF_SRC/test/valgrind_redis_terminate.sql
	local sql_tls=$LF_SRC/test/valgrind_redis_tls.sql
	local sql_topo=$LF_SRC/test/valgrind_redis_topology.sql
	local out=$LF_WORK/redis-steps.out
	local err=$LF_WORK/redis-steps.err rc bad=0 name pid got
	local pw_right=$LF_WORK/redis-pw-right pw_wrong=$LF_WORK/redis-pw-wrong pw_badmode=$LF_WORK/redis-pw-badmode

	lf_start_redis || { R_SUMMARY="redis: redis-server did not start"; return 1; }
	lf_log "[redis] redis-server on $LF_REDIS_SOCK"
	# password files owned by the server's user: 0600 right and wrong, and
	# one with group and world read, which the backend must refuse
	printf '%s\n' "$VG_REDIS_PW" | lf_as_user tee "$pw_right" >/dev/null
	printf '%s\n' "not-$VG_REDIS_PW" | lf_as_user tee "$pw_wrong" >/dev/null
	printf '%s\n' "$VG_REDIS_PW" | lf_as_user tee "$pw_badmode" >/dev/null
	lf_as_user chmod 600 "$pw_right" "$pw_wrong"
	lf_as_user chmod 644 "$pw_badmode"
	vg_write_redisctl

	VG_OPTS=(--leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite)
	# command_timeout_ms 500: several times a normal round trip under
	# valgrind, well inside a 3000 ms CLIENT PAUSE (so is a 500 ms cleanup)
	vg_start_pg "$LF_SRC/test/valgrind.supp" redis \
		"shared_preload_libraries = 'lease_fence'" \
		"lease_fence.redis_socket = '$LF_REDIS_SOCK'" \
		"lease_fence.command_timeout_ms = 500" \
		"lease_fence.cleanup_timeout_ms = 500" \
		"lease_fence.connect_timeout_ms = 2000" \
		"log_disconnections = on" ||
		{ R_SUMMARY="redis: server did not start"; return 1; }

	local env=(env PATH="$LF_WORK/bin:$PATH" LF_WORK="$LF_WORK" LF_SRC="$LF_SRC" PG_BIN="$PG_BIN"
		LF_REDIS_SOCK="$LF_REDIS_SOCK" VG_DIR="$VG_DIR" VG_REDIS_PW="$VG_REDIS_PW"
		PGHOST="$PGHOST" PGPORT="$PGPORT" PGUSER="$PGUSER" PGDATABASE="$PGDATABASE")
	lf_log "[redis] test/valgrind_redis.sql (three sessions, under valgrind: slow)"
	lf_as_user "${env[@]}" timeout 300 "$PG_BIN/psql" -X -At -v pw_right="$pw_right" -v pw_wrong="$pw_wrong" \
		-v pw_badmode="$pw_badmode" -f "$sql" >"$out" 2>"$err"
	rc=$?
	lf_log "[redis] psql exited with $rc after $((SECONDS - start))s"
	vg_step psql_exit_status "$rc" 0 "psql -f test/valgrind_redis.sql" >>"$out"

	# its last session ended with Redis stopped: the release of its session
	# lease at backend exit cannot be confirmed
	pid=$(sed -n 's/^PID|//p' "$out" | tail -n 1)
	vg_wait_log "$pid"
	got=$(grep -F "[$pid] " "$VG_PGLOG" | grep -c 'could not confirm the release of resource "vg:exit-down"')
	vg_step exit_cleanup_redis_down "$got" 1 "server log of pid $pid" >>"$out"

	# a backend terminated while it waits for a paused Redis
	lf_start_redis || { R_SUMMARY="redis: redis-server did not restart"; return 1; }
	lf_log "[redis] test/valgrind_redis_terminate.sql"
	lf_as_user "${env[@]}" timeout 120 "$PG_BIN/psql" -X -At -f "$sql_term" >>"$out" 2>>"$err"
	rc=$?
	vg_step terminate_psql_lost_connection "$rc" 2 "psql -f test/valgrind_redis_terminate.sql" >>"$out"
	pid=$(sed -n 's/^PID|//p' "$out" | tail -n 1)
	vg_wait_log "$pid"
	got=$(grep -F "[$pid] " "$VG_PGLOG" | grep -c 'FATAL:  terminating connection due to administrator command')
	vg_step terminate_fatal "$got" 1 "server log of pid $pid" >>"$out"
	lf_as_user timeout 30 redis-cli -s "$LF_REDIS_SOCK" PING >/dev/null 2>&1   # returns when the pause is over

	# TLS: the same Redis gets a TLS port (CONFIG SET), certificates by openssl
	local tls=$LF_WORK/tls tls_port
	lf_as_user mkdir -p "$tls"
	if ! (cd "$tls" &&
		for ca in ca otherca; do
			lf_as_user openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=vg $ca" \
				-keyout $ca.key -out $ca.crt || exit 1
		done &&
		for n in server client; do
			lf_as_user openssl req -newkey rsa:2048 -nodes -subj "/CN=$n" -keyout $n.key -out $n.csr || exit 1
		done &&
		printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' | lf_as_user tee server.ext >/dev/null &&
		printf 'extendedKeyUsage=clientAuth\n' | lf_as_user tee client.ext >/dev/null &&
		lf_as_user openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
			-extfile server.ext -out server.crt &&
		lf_as_user openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
			-extfile client.ext -out client.crt &&
		lf_as_user cp client.key client-open.key && lf_as_user chmod 600 client.key && lf_as_user chmod 644 client-open.key
	) >"$tls/openssl.log" 2>&1; then
		cat "$tls/openssl.log"; R_SUMMARY="redis: could not make the TLS certificates"; return 1
	fi
	tls_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	lf_redis_cli CONFIG SET tls-cert-file "$tls/server.crt" tls-key-file "$tls/server.key" \
		tls-ca-cert-file "$tls/ca.crt" tls-auth-clients optional >/dev/null &&
		lf_redis_cli CONFIG SET tls-port "$tls_port" | grep -q OK ||
		{ R_SUMMARY="redis: could not open a TLS port"; return 1; }
	lf_log "[redis] test/valgrind_redis_tls.sql (TLS port $tls_port)"
	lf_as_user "${env[@]}" timeout 300 "$PG_BIN/psql" -X -At -v tls_port="$tls_port" -v ca="$tls/ca.crt" \
		-v otherca="$tls/otherca.crt" -v cert="$tls/client.crt" -v key="$tls/client.key" \
		-v key_open="$tls/client-open.key" -f "$sql_tls" >>"$out" 2>>"$err"
	rc=$?
	vg_step tls_psql_exit_status "$rc" 0 "psql -f test/valgrind_redis_tls.sql" >>"$out"

	# Sentinel and Cluster: routing, slot map, ASK, TRYAGAIN, MOVED, WAIT
	vg_write_vgtopo
	if vg_topology_start; then
		lf_log "[redis] test/valgrind_redis_topology.sql (cluster on $TOPO_C1 and $TOPO_C2, sentinel on $TOPO_S)"
		lf_as_user "${env[@]}" TOPO_C1="$TOPO_C1" TOPO_C2="$TOPO_C2" timeout 300 "$PG_BIN/psql" -X -At \
			-v c1="$TOPO_C1" -v sentinels="127.0.0.1:$TOPO_S" -f "$sql_topo" >>"$out" 2>>"$err"
		rc=$?
	else
		lf_log "[redis] the cluster and the sentinel did not start (see $LF_WORK/topology)"
		rc=start-failed
	fi
	vg_topology_stop
	vg_step topology_psql_exit_status "$rc" 0 "psql -f test/valgrind_redis_topology.sql" >>"$out"

	# every backend that ran SQL (or connected at all) must have exited, and
	# valgrind must have written its leak report, before the server stops
	for pid in $(sed -n 's/.* \[\([0-9]*\)\] .*LOG:  connection received.*/\1/p' "$VG_PGLOG" | sort -un); do
		if vg_wait_log "$pid"; then
			vg_step "backend_exited_${pid}" exited exited "valgrind.$pid.log" >>"$out"
		else
			vg_step "backend_exited_${pid}" running exited "valgrind.$pid.log" >>"$out"
		fi
	done

	# the steps: every name in the scripts (but *_unreached) prints at least
	# one line, all ok
	echo
	echo "-- redis phase steps (name | got | want | verdict | detail)"
	grep '^STEP|' "$out" | awk -F'|' '{ printf "  %-5s %-32s %-26s %s\n", $5, $2, $3, $6 }'
	local names
	names=$( { grep -ho "vg_step('[A-Za-z0-9_]*'" "$sql" "$sql_term" "$sql_tls" "$sql_topo" | sed "s/vg_step('//; s/'//"
		grep -hoE 'redisctl (expect|calls|wait-exit) [A-Za-z0-9_]+' "$sql" "$sql_term" "$sql_tls" "$sql_topo" | awk '{ print $3 }'
		echo psql_exit_status exit_cleanup_redis_down terminate_psql_lost_connection terminate_fatal tls_psql_exit_status topology_psql_exit_status | tr ' ' '\n'; } |
		grep -v '_unreached$' | sort -u)
	local nsteps=0 nfail
	for name in $names; do
		nsteps=$((nsteps + 1))
		if ! grep -q "^STEP|$name|" "$out"; then
			echo "  MISSING $name"
			bad=$((bad + 1))
		fi
	done
	nfail=$(grep -c '^STEP|.*|FAIL|' "$out")
	bad=$((bad + nfail))
	if [ -s "$err" ]; then
		echo
		echo "-- psql stderr (warnings and the expected errors)"
		sed 's/^/  /' "$err"
	fi
	echo
	echo "-- leases and counters"
	grep -E '^(LEASE|STAT)\|' "$out" | sed 's/^/  /'

	vg_stop_pg
	lf_log "[redis] server stopped after $((SECONDS - start))s"
	vg_no_crash || bad=$((bad + 1))
	vg_stop_redis

	vg_summarise_redis "$out"
	local vrc=$?
	local nok
	nok=$(grep -c '^STEP|.*|ok|' "$out")
	echo
	echo "redis under valgrind: $nsteps steps, $nok checks ok, $bad failed"
	R_SUMMARY="redis: $nsteps steps, $bad failed; ${VG_REDIS_COUNTS:-no valgrind logs} ($((SECONDS - start))s)"
	[ "$bad" -eq 0 ] && [ "$vrc" -eq 0 ]
}

# ---------------------------------------------------------------- main
phases=${*:-${LF_VALGRIND_PHASES:-regress redis}}
for p in $phases; do
	case $p in
	regress | redis) ;;
	*) echo "unknown phase '$p' (regress, redis)" >&2; exit 2 ;;
	esac
done

lf_need_packages valgrind || exit 1
trap vg_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
lf_make_workdir "$top" || exit 1
lf_build_install || exit 1
t0=$SECONDS
failed=0
summary=()
for p in $phases; do
	R_SUMMARY=
	"phase_$p" || failed=$((failed + 1))
	vg_stop_pg
	summary+=("$R_SUMMARY")
done
echo
line="valgrind.sh:"
for s in "${summary[@]}"; do line+=" $s |"; done
line+=" $((SECONDS - t0))s"
if [ "$failed" -eq 0 ]; then echo "$line: OK"; else echo "$line: FAILED"; fi
[ "$failed" -eq 0 ]
