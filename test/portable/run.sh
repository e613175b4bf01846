#!/bin/bash
# test/portable/run.sh — conformance of the portable edition
# (portable/lease_fence_portable.sql) with the C edition's regress tests.
#
# Run as root, like the other test scripts (test/lib.sh): a throwaway
# PostgreSQL (Debian's, copied, WITHOUT the C library: not built here, and
# a lease_fence installed into the machine's PostgreSQL -- the README's
# set-up, a package -- is removed from the copy by lf_make_workdir),
# a non-superuser role lf_owner owning database lf_portable, the portable
# edition installed by that role with psql -f, then the fence-core regress
# files (sql/*.sql) with pg_regress --use-existing, as that role, against the
# same expected/*.out.  Where the portable edition legitimately differs
# (portable/README.md, "Where the portable edition differs"), an alternative
# expected file test/portable/expected/<name>_N.out is added to the copy of
# expected/ the run uses; nothing under expected/ is changed.
#
#   bash test/portable/run.sh              the default files
#   LF_PORTABLE_TESTS="fence dml" bash test/portable/run.sh
#   LF_KEEP=1 ...                          keep the temp dir (diffs in out/)
#
# Prints "portable: N passed, N failed" last; exits non-zero on a failure.
set -u
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"

# the fence-core files that need nothing but the fence API (README.md of
# portable/ says why the others are left out)
TESTS=${LF_PORTABLE_TESTS:-fence full_row_save dml partition truncate_guard protect resource_fence checkpoint portable_generations portable_short_path}
# Files that SET ROLE to roles they create: on PostgreSQL 15 a CREATEROLE
# role is not a member of the roles it creates, so these run as the
# superuser, in the same database, on the edition lf_owner installed (its
# SECURITY DEFINER functions still run as lf_owner)
AS_SUPERUSER=" truncate_guard protect resource_fence checkpoint portable_generations portable_short_path "

# the standby of check_timeline, if it was started
stop_standby() {
	[ -n "${LF_WORK:-}" ] && [ -f "$LF_WORK/standby/postmaster.pid" ] &&
		lf_as_user "$PG_BIN/pg_ctl" -D "$LF_WORK/standby" -m immediate -w stop >/dev/null 2>&1
	return 0
}
trap 'stop_standby; lf_cleanup' EXIT
lf_need_packages || exit 1
lf_make_workdir "$top" || exit 1
# no lf_build_install: the C library is not built, and the copy has none
# of the machine's (lf_remove_installed), so nothing can load it
lf_start_pg || exit 1

PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
# pg_regress and pg_isolation_regress: PGXS's (Debian's package and a
# source build keep it in different places; pg_config knows)
PGXS_DIR=$("$PG_CONFIG" --pkglibdir)/pgxs
# CREATEROLE and SET on session_replication_role: what a managed service's
# database owner typically has (rds_superuser, cloudsqlsuperuser, ...) and
# what the files below use
lf_as_user "${PSQL[@]}" -d postgres -c "CREATE ROLE lf_owner LOGIN NOSUPERUSER CREATEROLE" \
	-c "GRANT SET ON PARAMETER session_replication_role TO lf_owner" \
	-c "CREATE DATABASE lf_portable OWNER lf_owner" || exit 1
# the library cannot be loaded: make sure of it
if lf_as_user "${PSQL[@]}" -d lf_portable -c "LOAD 'lease_fence'" >/dev/null 2>&1; then
	echo "lease_fence.so is loadable in this installation: the portable run must go without it" >&2
	exit 1
fi
lf_log "installing the portable edition as lf_owner"
lf_as_user "${PSQL[@]}" -U lf_owner -d lf_portable -f "$LF_SRC/portable/lease_fence_portable.sql" || exit 1
# installing twice is an in-place replacement
lf_as_user "${PSQL[@]}" -U lf_owner -d lf_portable -f "$LF_SRC/portable/lease_fence_portable.sql" || exit 1

# the input dir: the C edition's sql/ and expected/, plus the alternatives
IN=$LF_WORK/regress_in
lf_as_user mkdir -p "$IN/sql" "$IN/expected" "$LF_WORK/out"
lf_as_user cp "$LF_SRC"/sql/*.sql "$IN/sql/"
# (the files include sql/include/try.sql, from the directory pg_regress runs in: $IN)
lf_as_user cp -r "$LF_SRC"/sql/include "$IN/sql/"
lf_as_user cp "$LF_SRC"/expected/*.out "$IN/expected/"
# and the portable edition's own files (what only it has: next_generation(above))
lf_as_user cp "$LF_SRC"/test/portable/sql/*.sql "$IN/sql/"
for f in "$LF_SRC"/test/portable/expected/*.out; do
	case $f in *_[0-9].out) ;; *) lf_as_user cp "$f" "$IN/expected/" ;; esac
done
# An alternative may differ from the C edition's file only as
# portable/README.md documents: checked here, so that no alternative can
# hide a bug.  Allowed: the CONTEXT lines a PL/pgSQL RAISE adds (an error
# raised in C has none), and the lines of the marked documented differences
# (test/portable/allowed.txt: one extended regex a line, each with the
# README row it stands for).
bad_alt=0
ctx='^(CONTEXT:  )?(PL/pgSQL function lease_fence\.|SQL statement |COPY [a-z_]+, line )'
allowed() { grep -vE '^(#|$)' "$LF_SRC/test/portable/allowed.txt"; }
# check_alt ALT ORIGINAL
check_alt() {
	local extra
	extra=$(diff "$2" "$1" | grep -E '^[<>] ' | sed -E 's/^[<>] //' | grep -vE "$ctx" | grep -vEf <(allowed))
	if [ -n "$extra" ]; then
		echo "$1: differs from $2 beyond the documented differences:" >&2
		printf '%s\n' "$extra" >&2
		bad_alt=1
	fi
}
for f in "$LF_SRC"/test/portable/expected/*_[0-9].out; do
	[ -e "$f" ] || continue
	check_alt "$f" "$LF_SRC/expected/$(basename "$f" | sed -E 's/_[0-9]\.out$/.out/')"
	lf_as_user cp "$f" "$IN/expected/"
done
for f in "$LF_SRC"/test/portable/expected/isolation/*_[0-9].out; do
	[ -e "$f" ] || continue
	check_alt "$f" "$LF_SRC/test/expected/$(basename "$f" | sed -E 's/_[0-9]\.out$/.out/')"
done
[ "$bad_alt" = 0 ] || { echo "portable: 0 passed, 1 failed (an alternative expected file hides more than the documented differences)"; exit 1; }

passed=0 failed=0 failures=()
for t in $TESTS; do
	user=lf_owner
	case "$AS_SUPERUSER" in *" $t "*) user=postgres ;; esac
	if (cd "$IN" && lf_as_user "$PGXS_DIR/src/test/regress/pg_regress" \
		--use-existing --dbname=lf_portable --user="$user" \
		--host="$PGHOST" --port="$PGPORT" --bindir="$PG_BIN" \
		--inputdir="$IN" --outputdir="$LF_WORK/out/$t" "$t") >"$LF_WORK/out/$t.log" 2>&1; then
		passed=$((passed + 1)); echo "ok     $t"
	else
		failed=$((failed + 1)); failures+=("$t"); echo "FAILED $t"
		[ -f "$LF_WORK/out/$t/regression.diffs" ] && head -n "${LF_DIFF_LINES:-60}" "$LF_WORK/out/$t/regression.diffs"
	fi
done
# The isolation specs (test/specs), as lf_owner: their CREATE / DROP
# EXTENSION lines become no-ops (the portable edition stays installed);
# nothing else in them changes, and they are compared with test/expected.
ISO=$LF_WORK/isolation_in
# Every spec of test/specs (the fence core's: none needs more than the fence
# API), then the portable edition's own (portable_epoch_draw runs on the
# promoted standby, below)
c_specs=$(for f in "$LF_SRC"/test/specs/*.spec; do basename "$f" .spec; done | tr '\n' ' ')
ISO_TESTS=${LF_PORTABLE_ISOLATION-${c_specs}portable_heal portable_draw_lock}
lf_as_user mkdir -p "$ISO/specs" "$ISO/expected"
# the portable edition's own specs (test/portable/specs) come as they are
for f in "$LF_SRC"/test/portable/specs/*.spec; do
	lf_as_user cp "$f" "$ISO/specs/"
	lf_as_user cp "$LF_SRC/test/portable/expected/isolation/$(basename "$f" .spec).out" "$ISO/expected/" 2>/dev/null
done
for t in $ISO_TESTS; do
	[ -e "$LF_SRC/test/portable/specs/$t.spec" ] && continue
	sed -E 's/^([[:space:]]*)(CREATE EXTENSION( IF NOT EXISTS)? lease_fence|DROP EXTENSION lease_fence)[^;]*;/\1DO $$BEGIN END$$;/' \
		"$LF_SRC/test/specs/$t.spec" | lf_as_user tee "$ISO/specs/$t.spec" >/dev/null
	lf_as_user cp "$LF_SRC/test/expected/$t.out" "$ISO/expected/"
	if [ -e "$LF_SRC/test/portable/expected/isolation/${t}_1.out" ]; then
		lf_as_user cp "$LF_SRC/test/portable/expected/isolation/${t}_1.out" "$ISO/expected/"
	fi
done
for t in $ISO_TESTS; do
	if lf_as_user "$PGXS_DIR/src/test/isolation/pg_isolation_regress" \
		--use-existing --dbname=lf_portable --user=lf_owner \
		--host="$PGHOST" --port="$PGPORT" --bindir="$PG_BIN" \
		--inputdir="$ISO" --outputdir="$LF_WORK/out/iso_$t" "$t" >"$LF_WORK/out/iso_$t.log" 2>&1; then
		passed=$((passed + 1)); echo "ok     isolation/$t"
	else
		failed=$((failed + 1)); failures+=("isolation/$t"); echo "FAILED isolation/$t"
		[ -f "$LF_WORK/out/iso_$t/regression.diffs" ] && head -n "${LF_DIFF_LINES:-60}" "$LF_WORK/out/iso_$t/regression.diffs"
		[ -f "$LF_WORK/out/iso_$t/regression.diffs" ] || tail -n 20 "$LF_WORK/out/iso_$t.log"
	fi
done

# A new timeline starts a new epoch: a standby of this server (a base
# backup), promoted, draws generations above every one the old primary
# could hand out -- the portable edition reads the timeline from the WAL
# file name, as any role may -- and one epoch only, also after a refused
# heal.
check_timeline() {
	local sb=$LF_WORK/standby port=5434 out hi g1 g2 tl
	lf_as_user "$PG_BIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres -D "$sb" -R -X stream --checkpoint=fast \
		>"$LF_WORK/basebackup.log" 2>&1 || { cat "$LF_WORK/basebackup.log"; return 1; }
	echo "port = $port" | lf_as_user tee -a "$sb/postgresql.conf" >/dev/null
	lf_as_user "$PG_BIN/pg_ctl" -D "$sb" -l "$LF_WORK/standby.log" -w -t 60 start >/dev/null ||
		{ cat "$LF_WORK/standby.log"; return 1; }
	sq() { lf_as_user "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$port" -U lf_owner -d lf_portable "$@"; }
	# the primary goes on drawing after the base backup
	hi=$(lf_as_user "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -U lf_owner -d lf_portable \
		-c "SELECT max(lease_fence.next_generation()) FROM generate_series(1, 5)") || return 1
	out=$(sq -c "SELECT lease_fence.next_generation()" 2>&1)
	case $out in *"cannot draw a generation during recovery"*) ;; *) echo "standby drew: $out"; return 1 ;; esac
	lf_as_user "$PG_BIN/pg_ctl" -D "$sb" -w -t 60 promote >/dev/null || return 1
	# a heal refused on the new timeline moves nothing, not even to the new
	# epoch (setval is not transactional: checked before anything moves)
	out=$(sq -c "SELECT lease_fence.next_generation(9223372036854775807)" 2>&1)
	case $out in *"was not issued by this database"*) ;; *) echo "refused heal: $out"; return 1 ;; esac
	# the first draw on the new timeline, by a role granted nothing, in a
	# transaction it keeps open and then rolls back: another role's draw
	# does not wait for it, and the epoch stays 2 -- the first four
	# generations of epoch 2 (test/portable/specs/portable_epoch_draw.spec;
	# a test point of its own)
	if lf_as_user "$PGXS_DIR/src/test/isolation/pg_isolation_regress" \
		--use-existing --dbname=lf_portable --user=lf_owner \
		--host="$PGHOST" --port="$port" --bindir="$PG_BIN" \
		--inputdir="$ISO" --outputdir="$LF_WORK/out/iso_portable_epoch_draw" portable_epoch_draw \
		>"$LF_WORK/out/iso_portable_epoch_draw.log" 2>&1; then
		passed=$((passed + 1)); echo "ok     isolation/portable_epoch_draw (on the promoted standby)"
	else
		failed=$((failed + 1)); failures+=("isolation/portable_epoch_draw"); echo "FAILED isolation/portable_epoch_draw (on the promoted standby)"
		[ -f "$LF_WORK/out/iso_portable_epoch_draw/regression.diffs" ] &&
			head -n "${LF_DIFF_LINES:-60}" "$LF_WORK/out/iso_portable_epoch_draw/regression.diffs"
		[ -f "$LF_WORK/out/iso_portable_epoch_draw/regression.diffs" ] || tail -n 20 "$LF_WORK/out/iso_portable_epoch_draw.log"
	fi
	g1=$(sq -c "SELECT lease_fence.next_generation()") || return 1
	g2=$(sq -c "SELECT lease_fence.next_generation()") || return 1
	tl=$(sq -c "SELECT last_value FROM lease_fence.timeline_seq") || return 1
	echo "old primary's highest $hi; promoted standby (timeline $tl) draws $g1, $g2"
	# epoch 0 + timeline 2 = epoch 2, whose first value is 2^41 + 1: the
	# spec drew the first four
	[ "$tl" = 2 ] && [ "$g1" = $(((1 << 41) + 5)) ] && [ "$g2" = $((g1 + 1)) ] && [ "$g1" -gt "$hi" ]
}

# An install of an earlier version is upgraded in place by running the
# file again, on the standby promoted above: that install recorded the
# timeline of its epoch (1) in a column generation_timeline.timeline (its
# shape made by hand in database lf_upgrade on the primary, before the base
# backup, with 41 generations drawn).  The value moves to timeline_seq, so
# the first draw after the upgrade starts the epoch of timeline 2 (a value
# read at the upgrade instead, 2, would start none); the column is
# dropped, but not while another transaction holds a lock on the table (an
# installer waiting for it would make every draw queue behind it): then a
# WARNING, and the next run drops it.
make_old_install() {
	lf_as_user "${PSQL[@]}" -d postgres -c "CREATE DATABASE lf_upgrade OWNER lf_owner" &&
	lf_as_user "${PSQL[@]}" -U lf_owner -d lf_upgrade \
		-c "CREATE SCHEMA lease_fence" \
		-c "CREATE SEQUENCE lease_fence.generation_seq AS bigint MINVALUE 1 NO CYCLE" \
		-c "SELECT pg_catalog.setval('lease_fence.generation_seq', 41)" \
		-c "CREATE TABLE lease_fence.generation_timeline (one boolean PRIMARY KEY DEFAULT true CHECK (one), timeline bigint)" \
		-c "INSERT INTO lease_fence.generation_timeline VALUES (true, 1)" >/dev/null
}
check_upgrade() {
	local port=5434 out col g1 g2 tl
	uq() { lf_as_user "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$PGHOST" -p "$port" -U lf_owner -d lf_upgrade "$@"; }
	has_column() {
		uq -c "SELECT count(*) FROM pg_catalog.pg_attribute
		       WHERE attrelid = 'lease_fence.generation_timeline'::regclass AND attname = 'timeline' AND NOT attisdropped"
	}
	# another transaction holds a lock on the table while the file runs:
	# the read returns once the lock is granted
	coproc HOLDER { lf_as_user "$PG_BIN/psql" -X -q -At -h "$PGHOST" -p "$port" -U lf_owner -d lf_upgrade; }
	echo "BEGIN; LOCK TABLE lease_fence.generation_timeline IN ACCESS SHARE MODE; SELECT 'locked';" >&"${HOLDER[1]}"
	read -r out <&"${HOLDER[0]}"
	[ "$out" = locked ] || { echo "the lock holder said: $out"; return 1; }
	out=$(uq -f "$LF_SRC/portable/lease_fence_portable.sql" 2>&1) || { echo "$out"; return 1; }
	case $out in *"WARNING:  column timeline of lease_fence.generation_timeline is no longer used, and was not dropped"*) ;;
		*) echo "the upgrade beside a lock holder said: $out"; return 1 ;; esac
	col=$(has_column) || return 1
	[ "$col" = 1 ] || { echo "the column went while another transaction held a lock on the table"; return 1; }
	echo "COMMIT;" >&"${HOLDER[1]}"
	eval "exec ${HOLDER[1]}>&-"
	wait "$HOLDER_PID"
	out=$(uq -f "$LF_SRC/portable/lease_fence_portable.sql" 2>&1) || { echo "$out"; return 1; }
	[ -z "$out" ] || { echo "the second run said: $out"; return 1; }
	col=$(has_column) || return 1
	g1=$(uq -c "SELECT lease_fence.next_generation()") || return 1
	g2=$(uq -c "SELECT lease_fence.next_generation()") || return 1
	tl=$(uq -c "SELECT last_value FROM lease_fence.timeline_seq") || return 1
	echo "upgraded on timeline 2: columns timeline left $col, draws $g1, $g2, timeline recorded $tl"
	[ "$col" = 0 ] && [ "$g1" = $(((1 << 41) + 1)) ] && [ "$g2" = $((g1 + 1)) ] && [ "$tl" = 2 ]
}
if [ "${LF_PORTABLE_TIMELINE:-1}" = 1 ]; then
	make_old_install || exit 1
	if check_timeline; then
		passed=$((passed + 1)); echo "ok     a promoted standby starts a new epoch"
	else
		failed=$((failed + 1)); failures+=("timeline"); echo "FAILED a promoted standby starts a new epoch"
	fi
	# (on the promoted standby: check_timeline failed before the promotion when it is not there)
	if [ -f "$LF_WORK/standby/postmaster.pid" ] && check_upgrade; then
		passed=$((passed + 1)); echo "ok     an earlier install is upgraded in place"
	else
		failed=$((failed + 1)); failures+=("upgrade"); echo "FAILED an earlier install is upgraded in place"
	fi
	stop_standby
fi

# LF_PORTABLE_UPDATE_ALT=1: after a change to the trigger moved the line
# numbers of the CONTEXT lines, write the results of the files that have an
# alternative into it, then check them as above (run again to see them pass)
if [ "${LF_PORTABLE_UPDATE_ALT:-0}" = 1 ]; then
	for f in "$LF_SRC"/test/portable/expected/*_1.out; do
		t=$(basename "$f" _1.out)
		[ -f "$LF_WORK/out/$t/results/$t.out" ] && cp "$LF_WORK/out/$t/results/$t.out" "$top/test/portable/expected/${t}_1.out"
		[ -f "$top/test/portable/expected/${t}_1.out" ] && check_alt "$top/test/portable/expected/${t}_1.out" "$top/expected/$t.out"
	done
	for f in "$LF_SRC"/test/portable/expected/isolation/*_1.out; do
		t=$(basename "$f" _1.out)
		[ -f "$LF_WORK/out/iso_$t/results/$t.out" ] && cp "$LF_WORK/out/iso_$t/results/$t.out" "$top/test/portable/expected/isolation/${t}_1.out"
		check_alt "$top/test/portable/expected/isolation/${t}_1.out" "$top/test/expected/$t.out"
	done
	[ "$bad_alt" = 0 ] && echo "alternatives updated in $top/test/portable/expected (review: git diff)"
fi

# a server built with assertions (LF_PG=15-cassert, 18) logged no failed
# Assert and nothing logged a PANIC
if ! grep -HnE '^TRAP:|PANIC:' "$LF_WORK/postgres.log" "$LF_WORK"/standby.log 2>/dev/null; then
	passed=$((passed + 1)); echo "ok     logs: no TRAP or PANIC"
else
	failed=$((failed + 1)); failures+=("logs"); echo "FAILED logs: a TRAP or PANIC"
fi

[ ${#failures[@]} -gt 0 ] && [ "${LF_KEEP:-0}" = 1 ] && echo "diffs: $LF_WORK/out/<test>/regression.diffs"
echo "portable: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
