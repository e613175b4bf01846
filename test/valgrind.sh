#!/usr/bin/env bash
# test/valgrind.sh — the pg_regress suite (sql/, expected/) against a
# throwaway PostgreSQL 15 whose postmaster, and so every backend it forks,
# runs under valgrind memcheck; then a summary of valgrind's error reports.
#
# As root it installs what it needs (valgrind too), builds and installs the
# extension like test/run.sh, starts the server itself (pg_ctl cannot put
# valgrind in front of postgres), runs `make installcheck` with the isolation
# and TAP suites switched off, stops the server, and counts:
#   - error reports: one per distinct error context per process, as valgrind
#     prints them into $LF_WORK/valgrind/valgrind.<pid>.log
#   - those with a stack frame in lease_fence (lease_fence.so, src/*.c):
#     these are printed in full, and make the script fail.
# Reports elsewhere in the server are listed (kind and top frames) but do not
# fail the run: PostgreSQL from Debian is not built with USE_VALGRIND, and
# test/valgrind.supp only hides the false positives seen so far.
#
# Slow: about 75 s on 2 cores for a suite of 6-8 tests; the start-up and
# shutdown timeouts are generous.  Environment:
#   LF_KEEP=1            keep the temp dir (logs, regression.diffs)
#   LF_VALGRIND_GENSUPP=1  print a suppression after each report in the logs
#   LF_VALGRIND_TIMEOUT  seconds to wait for start-up and shutdown (600)
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/lib.sh"

VG_TIMEOUT=${LF_VALGRIND_TIMEOUT:-600}
VG_JOB=            # pid of the background job that runs valgrind (runuser or valgrind)
VG_PM_PID=         # postmaster pid, from postmaster.pid, once it is up

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

vg_cleanup() {
	vg_stop_pg
	lf_cleanup
}

# initdb (not under valgrind), then start
#   valgrind ... postgres -D $LF_PGDATA
# in the background as $LF_USER and wait until it accepts connections.
vg_start_pg() {
	local supp=$1 vgdir=$LF_WORK/valgrind i
	LF_PGDATA=$LF_WORK/pgdata
	lf_as_user mkdir -p "$vgdir"
	lf_as_user "$PG_BIN/initdb" -D "$LF_PGDATA" -U postgres -A trust --no-sync \
		--locale=C.UTF-8 -E UTF8 >"$LF_WORK/initdb.log" 2>&1 || { cat "$LF_WORK/initdb.log"; return 1; }
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
	} | lf_as_user tee -a "$LF_PGDATA/postgresql.conf" >/dev/null

	local vg=(valgrind
		--trace-children=yes --track-origins=yes --leak-check=no
		--read-var-info=no --num-callers=40 --error-limit=no
		--fullpath-after="$LF_SRC/"
		--suppressions="$supp"
		--log-file="$vgdir/valgrind.%p.log")
	[ "${LF_VALGRIND_GENSUPP:-0}" = 1 ] && vg+=(--gen-suppressions=all)

	lf_log "starting postgres under valgrind"
	lf_as_user "${vg[@]}" "$PG_BIN/postgres" -D "$LF_PGDATA" >"$LF_WORK/postgres.log" 2>&1 </dev/null &
	VG_JOB=$!
	for ((i = 0; i < VG_TIMEOUT; i++)); do
		if "$PG_BIN/pg_isready" -q -h "$LF_WORK" -p 5432 -t 5; then
			VG_PM_PID=$(head -n 1 "$LF_PGDATA/postmaster.pid" 2>/dev/null)
			lf_log "postmaster $VG_PM_PID up after ${i}s"
			export PGHOST=$LF_WORK PGPORT=5432 PGUSER=postgres PGDATABASE=postgres
			return 0
		fi
		if ! kill -0 "$VG_JOB" 2>/dev/null; then
			lf_log "postgres under valgrind exited during start-up"
			cat "$LF_WORK/postgres.log"
			wait "$VG_JOB" 2>/dev/null
			VG_JOB=
			return 1
		fi
		sleep 1
	done
	lf_log "postgres under valgrind did not accept connections within ${VG_TIMEOUT}s"
	tail -n 40 "$LF_WORK/postgres.log"
	return 1
}

# Parse valgrind's text logs.  One line per error report on stdout:
#   file <TAB> pid <TAB> ours(0|1) <TAB> signature <TAB> report (lines joined by \x1f)
# A report is a block of lines (between blank "==pid== " lines) whose first
# line is flush left and whose second is the "at 0x..." of a stack; valgrind's
# own warnings and "Process terminating" notes are not errors.  "ours" means a
# frame (in the error's stack or, with --track-origins, in its origin stack)
# in lease_fence.so or in one of our sources, which --fullpath-after shows as
# src/<file>.c.  The signature is the kind plus the stack without addresses,
# to count the same context once across processes.
vg_parse_logs() {
	awk '
	function flush(   i, ours, sig, rep, line) {
		if (n >= 2 && blk[1] !~ /^[ \t]/ && blk[2] ~ /^[ \t]+at 0x/ &&
		    blk[1] !~ /^(Warning:|Process terminating|HEAP SUMMARY|LEAK SUMMARY)/) {
			ours = 0; sig = blk[1]; rep = blk[1]
			for (i = 2; i <= n; i++) {
				line = blk[i]
				if (line ~ /lease_fence\.so|\(src\/[^ ()\/]+\.[ch]:[0-9]+\)/) ours = 1
				rep = rep "\037" line
				if (line ~ /^[ \t]+(at|by) 0x/) {
					sub(/0x[0-9A-Fa-f]+: /, "", line); gsub(/^[ \t]+/, "", line)
					sig = sig " | " line
				}
			}
			printf "%s\t%s\t%d\t%s\t%s\n", bfile, bpid, ours, sig, rep
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

vg_summarise() {
	local vgdir=$LF_WORK/valgrind reports=$LF_WORK/valgrind/reports.tsv
	local nlogs total distinct ours ours_distinct
	shopt -s nullglob
	local logs=("$vgdir"/valgrind.*.log)
	shopt -u nullglob
	nlogs=${#logs[@]}
	if [ "$nlogs" -eq 0 ]; then
		lf_log "no valgrind logs in $vgdir: did valgrind run at all?"
		return 2
	fi
	vg_parse_logs "${logs[@]}" >"$reports"
	total=$(wc -l <"$reports")
	distinct=$(cut -f4 "$reports" | sort -u | wc -l)
	ours=$(awk -F'\t' '$3 == 1' "$reports" | wc -l)
	ours_distinct=$(awk -F'\t' '$3 == 1 { print $4 }' "$reports" | sort -u | wc -l)

	# valgrind's own tally, per process (a forked child inherits its parent's
	# counts, so these overlap; shown as a cross-check only)
	local summaries unfinished suppressed
	summaries=$(grep -h 'ERROR SUMMARY:' "${logs[@]}" | grep -cv 'ERROR SUMMARY: 0 errors')
	unfinished=$(grep -L 'ERROR SUMMARY:' "${logs[@]}" | wc -l)
	suppressed=$(grep -h 'ERROR SUMMARY:' "${logs[@]}" |
		sed -n 's/.*(suppressed: \([0-9]*\) from.*/\1/p' | awk '{ n += $1 } END { print n + 0 }')

	echo
	echo "valgrind: $nlogs process logs in $vgdir ($unfinished ended without an ERROR SUMMARY)"
	echo "valgrind: $total error reports in total ($distinct distinct contexts)," \
		"$summaries processes with a non-zero ERROR SUMMARY;" \
		"$suppressed errors suppressed by test/valgrind.supp"
	echo "valgrind: $ours error reports with a frame in lease_fence ($ours_distinct distinct contexts)"

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
		echo "-- error reports with a frame in lease_fence (one per distinct context)"
		awk -F'\t' '$3 == 1 && !seen[$4]++ { print $1 "\t" $2 "\t" $5 }' "$reports" |
		while IFS=$'\t' read -r file pid rep; do
			local test
			test=$(grep -F "[$pid] " "$LF_WORK/postgres.log" | grep -o 'application_name=[^ ]*' | head -n 1)
			echo
			echo "== $(basename "$file") (pid $pid${test:+, $test})"
			printf '%s\n' "$rep" | tr '\037' '\n'
		done
	fi
	[ "$ours" -eq 0 ]
}

lf_need_packages valgrind || exit 1
trap vg_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
lf_make_workdir "$top"
lf_build_install || exit 1
start=$SECONDS
vg_start_pg "$LF_SRC/test/valgrind.supp" || exit 1

lf_log "regress (under valgrind: slow)"
out=$LF_WORK/regress.out
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
lf_log "regress under valgrind: $ok passed, $bad failed ($((SECONDS - start))s)"

# valgrind writes its last words (and ERROR SUMMARY) when each process exits
vg_stop_pg
lf_log "server stopped after $((SECONDS - start))s"
crash='was terminated by signal|server process \(PID [0-9]+\) exited with exit code'
if grep -qE "$crash" "$LF_WORK/postgres.log"; then
	lf_log "a server process crashed:"
	grep -E "$crash" "$LF_WORK/postgres.log"
	bad=$((bad + 1))
fi

vg_summarise
vrc=$?
echo
echo "regress under valgrind: $ok passed, $bad failed"
[ "$bad" -eq 0 ] && [ "$vrc" -eq 0 ]
