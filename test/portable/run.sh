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
TESTS=${LF_PORTABLE_TESTS:-fence full_row_save dml partition truncate_guard protect resource_fence checkpoint adopt portable_generations portable_short_path portable_adopt}
# Files that SET ROLE to roles they create: on PostgreSQL 15 a CREATEROLE
# role is not a member of the roles it creates, so these run as the
# superuser, in the same database, on the edition lf_owner installed (its
# SECURITY DEFINER functions still run as lf_owner)
AS_SUPERUSER=" truncate_guard protect resource_fence checkpoint adopt portable_generations portable_short_path portable_adopt "
# Files that run in a database of their own, the edition installed there
# by lf_owner: adopt refuses every generation up to a new epoch, which the
# next files would meet (the C edition's file installs the extension again)
OWN_DB=" adopt portable_adopt "

# the standby of check_timeline, if it was started
stop_standby() {
	[ -n "${LF_WORK:-}" ] && [ -f "$LF_WORK/standby/postmaster.pid" ] &&
		lf_as_user "$PG_BIN/pg_ctl" -D "$LF_WORK/standby" -m immediate -w stop >/dev/null 2>&1
	return 0
}
# the subscriber of check_switchover, if it was started
SUB_PORT=5435
stop_subscriber() {
	[ -n "${LF_WORK:-}" ] && [ -f "$LF_WORK/subscriber/postmaster.pid" ] &&
		lf_as_user "$PG_BIN/pg_ctl" -D "$LF_WORK/subscriber" -m immediate -w stop >/dev/null 2>&1
	return 0
}
trap 'stop_standby; stop_subscriber; lf_cleanup' EXIT
lf_need_packages || exit 1
lf_make_workdir "$top" || exit 1
# no lf_build_install: the C library is not built, and the copy has none
# of the machine's (lf_remove_installed), so nothing can load it
# (wal_level logical: the switchover below publishes from this server)
lf_start_pg "wal_level = logical" || exit 1

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
# CREATE / DROP EXTENSION lease_fence become no-ops, as in the isolation
# specs below (the portable edition stays installed)
lf_as_user sed -i -E 's/^(CREATE EXTENSION( IF NOT EXISTS)? lease_fence|DROP EXTENSION( IF EXISTS)? lease_fence)[^;]*;/DO $$BEGIN END$$;/' "$IN"/sql/*.sql
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
	db=lf_portable
	case "$OWN_DB" in *" $t "*)
		db=lf_portable_$t
		lf_as_user "${PSQL[@]}" -d postgres -c "CREATE DATABASE $db OWNER lf_owner" &&
			lf_as_user "${PSQL[@]}" -U lf_owner -d "$db" -f "$LF_SRC/portable/lease_fence_portable.sql" || exit 1 ;;
	esac
	if (cd "$IN" && lf_as_user "$PGXS_DIR/src/test/regress/pg_regress" \
		--use-existing --dbname="$db" --user="$user" \
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

# A switchover to a logical replica (the portable edition on both servers,
# installed by the non-superuser lf_owner, no C library): this server
# publishes database lf_switch's fenced tables (one partitioned) and its
# resource fences and checkpoints to a second server; holders write on the
# publisher; once the subscriber has caught up and the writers stopped, the
# old primary's highest_issued() is read (and more generations drawn there
# after it), the subscription is stopped, the subscriber protects its
# tables and adopts the generations with that value.  Four points:
# adopt_generations()'s refusals move nothing; the new primary's holders'
# writes stand; every holder of the old primary is refused with LF004 and
# the adoption's message; no generation drawn on the new primary equals one
# the old one issued.
# opsql PORT ROLE SQL...: one psql session on database lf_switch, verbose
# errors (the SQLSTATE is in the message line), output and errors together
opsql() {
	local port=$1 role=$2
	shift 2
	lf_as_user "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -v VERBOSITY=verbose \
		-h "$PGHOST" -p "$port" -U "$role" -d lf_switch "$@" 2>&1
}
old() { opsql "$PGPORT" "$@"; }
new() { opsql "$SUB_PORT" "$@"; }
# point NAME RESULT: a test point of the switchover ($fail_why says why it failed)
point() {
	if [ "$2" = 0 ]; then
		passed=$((passed + 1)); echo "ok     switchover: $1"
	else
		failed=$((failed + 1)); failures+=("switchover: $1"); echo "FAILED switchover: $1"
		printf '%s\n' "$fail_why" | sed 's/^/       /'
	fi
}
# what each side runs as lf_owner: the tables, protected on both; on the
# subscriber (as a blue/green deployment's copy of the database would be)
# with the fence triggers and TRUNCATE guards enabled for origin only until
# the switchover: a portable fence cannot tell the apply worker from a
# writer, and would refuse the replicated fences above this database's own
# generations (LF004: the subscription stalls) -- the apply worker runs as
# session_replication_role replica, so it skips them (portable/README.md)
SCHEMA_SQL="CREATE TABLE public.account (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL DEFAULT 0);
CREATE TABLE public.ledger (id int, region text, note text, fence bigint NOT NULL DEFAULT 0, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE public.ledger_eu PARTITION OF public.ledger FOR VALUES IN ('eu');
CREATE TABLE public.ledger_us PARTITION OF public.ledger FOR VALUES IN ('us');
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.account, public.ledger TO lf_app;
GRANT EXECUTE ON FUNCTION lease_fence.fence_resource(text), lease_fence.checkpoint(text, jsonb) TO lf_app;"
PROTECT_SQL="SELECT lease_fence.protect('public.account'); SELECT lease_fence.protect('public.ledger');"
ORIGIN_ONLY_SQL='DO $$DECLARE m regclass; BEGIN
	FOR m IN SELECT t.relid FROM lease_fence.protected p, pg_partition_tree(p.relid) t
	         UNION SELECT p.relid FROM lease_fence.protected p LOOP
		IF EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = m AND g.tgname = $t$zz_lease_fence$t$) THEN
			EXECUTE format($f$ALTER TABLE %s ENABLE TRIGGER zz_lease_fence$f$, m);
		END IF;
		EXECUTE format($f$ALTER TABLE %s ENABLE TRIGGER zz_lease_fence_truncate$f$, m);
	END LOOP;
END$$;'
ADOPTION_STATE="SELECT lease_fence.highest_issued(), (SELECT count(*) FROM lease_fence.generation_adoption),
	COALESCE(pg_catalog.pg_sequence_last_value('lease_fence.adoption_floor_seq'), -1)"
check_switchover() {
	local sb=$LF_WORK/subscriber out g0 g1 g2 g3 g4 v f before r n1 n2 more w
	# the publisher: database lf_switch, the edition, the tables, two rows
	lf_as_user "${PSQL[@]}" -d postgres -c "CREATE ROLE lf_app LOGIN" \
		-c "CREATE DATABASE lf_switch OWNER lf_owner" >/dev/null || return 1
	old lf_owner -f "$LF_SRC/portable/lease_fence_portable.sql" >/dev/null || return 1
	old lf_owner -c "$SCHEMA_SQL" -c "$PROTECT_SQL" -c "INSERT INTO public.account VALUES (1, 100, 0), (2, 200, 0)" >/dev/null || return 1
	old postgres -c "CREATE PUBLICATION lf_pub FOR TABLE public.account, public.ledger,
		lease_fence.resource_generation, lease_fence.resource_checkpoint" >/dev/null || return 1
	# the subscriber: a server of its own, the same roles, the edition, the tables
	lf_as_user "$PG_BIN/initdb" -D "$sb" -U postgres -A trust --no-sync --locale=C.UTF-8 -E UTF8 \
		>"$LF_WORK/subscriber_initdb.log" 2>&1 || { cat "$LF_WORK/subscriber_initdb.log"; return 1; }
	printf '%s\n' "listen_addresses = ''" "unix_socket_directories = '$LF_WORK'" "port = $SUB_PORT" "fsync = off" |
		lf_as_user tee -a "$sb/postgresql.conf" >/dev/null
	lf_as_user "$PG_BIN/pg_ctl" -D "$sb" -l "$LF_WORK/subscriber.log" -w -t 60 start >/dev/null ||
		{ cat "$LF_WORK/subscriber.log"; return 1; }
	lf_as_user "${PSQL[@]}" -p "$SUB_PORT" -d postgres -c "CREATE ROLE lf_owner LOGIN NOSUPERUSER CREATEROLE" \
		-c "CREATE ROLE lf_app LOGIN" -c "CREATE DATABASE lf_switch OWNER lf_owner" >/dev/null || return 1
	new lf_owner -f "$LF_SRC/portable/lease_fence_portable.sql" >/dev/null || return 1
	new lf_owner -c "$SCHEMA_SQL" -c "$PROTECT_SQL" -c "$ORIGIN_ONLY_SQL" >/dev/null || return 1
	new postgres -c "CREATE SUBSCRIPTION lf_sub CONNECTION 'host=$PGHOST port=$PGPORT dbname=lf_switch user=postgres'
		PUBLICATION lf_pub" >/dev/null || return 1

	# holders on the old primary: g0 then g1 write the accounts, g1
	# checkpoints job:1, g2 writes the ledger (both partitions) and fences job:2
	g0=$(old lf_app -c "SELECT lease_fence.next_generation()") &&
	g1=$(old lf_app -c "SELECT lease_fence.next_generation()") &&
	g2=$(old lf_app -c "SELECT lease_fence.next_generation()") || return 1
	old lf_app -c "BEGIN" -c "SELECT lease_fence.set_generation($g0)" -c "UPDATE public.account SET balance = balance + 1" -c "COMMIT" \
		-c "BEGIN" -c "SELECT lease_fence.set_generation($g1, 'job:1')" -c "UPDATE public.account SET balance = balance + 1 WHERE id = 1" \
		-c "SELECT lease_fence.checkpoint('job:1', '{\"step\": 1}')" -c "COMMIT" \
		-c "BEGIN" -c "SELECT lease_fence.set_generation($g2, 'job:2')" \
		-c "INSERT INTO public.ledger (id, region, note) VALUES (1, 'eu', 'g2'), (2, 'us', 'g2')" -c "COMMIT" >/dev/null || return 1
	# the writers stop; the subscriber catches up (every row as written)
	w="SELECT (SELECT string_agg(id || ':' || fence, ',' ORDER BY id) FROM public.account)
	   || '|' || (SELECT string_agg(id || region || ':' || fence, ',' ORDER BY id) FROM public.ledger)
	   || '|' || (SELECT string_agg(resource || ':' || generation, ',' ORDER BY resource) FROM lease_fence.resource_generation)
	   || '|' || (SELECT string_agg(resource || ':' || generation, ',' ORDER BY resource) FROM lease_fence.resource_checkpoint)"
	want=$(old lf_owner -c "$w") || return 1
	for _ in $(seq 600); do
		out=$(new lf_owner -c "$w")
		[ "$out" = "$want" ] && break
		sleep 0.1
	done
	[ "$out" = "$want" ] || { echo "the subscriber did not catch up: $out, not $want"; return 1; }
	# the value, then more draws on the old primary after it was read
	v=$(old lf_owner -c "SELECT lease_fence.highest_issued()") &&
	g3=$(old lf_app -c "SELECT lease_fence.next_generation()") &&
	g4=$(old lf_app -c "SELECT max(lease_fence.next_generation()) FROM generate_series(1, 5)") || return 1
	echo "old primary: holders $g0 $g1 $g2, highest issued $v read, then $g3 .. $g4 drawn"
	# the switch: the subscription stops, the new primary protects its
	# tables again (every fence trigger and guard enabled always)
	new postgres -c "ALTER SUBSCRIPTION lf_sub DISABLE" >/dev/null &&
	new lf_owner -c "$PROTECT_SQL" >/dev/null || return 1
	out=$(new lf_owner -c "SELECT string_agg(array_to_string(problems, '; '), '; ') FROM lease_fence.protected_tables WHERE NOT ok")
	[ -z "$out" ] || { echo "protected again, yet: $out"; return 1; }

	# 1. the refusals move nothing: a value below the highest fence (job:2's
	# g2) or negative is 22023, a role that is not the owner 42501
	before=$(new lf_owner -c "$ADOPTION_STATE") || return 1
	fail_why=
	f=$((g2 - 1))
	out=$(new lf_owner -c "SELECT lease_fence.adopt_generations($f)")
	case $out in *"ERROR:  22023: old_highest_issued $f is below a fence this database holds"*"DETAIL:  "*" holds generation $g2, so the database it came from issued at least that. Nothing was changed."*) ;;
		*) fail_why+="adopt_generations($f): $out"$'\n' ;; esac
	out=$(new lf_owner -c "SELECT lease_fence.adopt_generations(-1)")
	case $out in *"ERROR:  22023: "*) ;; *) fail_why+="adopt_generations(-1): $out"$'\n' ;; esac
	new lf_owner -c "GRANT EXECUTE ON FUNCTION lease_fence.adopt_generations(bigint) TO lf_app" >/dev/null || return 1
	out=$(new lf_app -c "SELECT lease_fence.adopt_generations($v)")
	case $out in *"ERROR:  42501: must be superuser or the role that installed lease_fence to adopt generations"*) ;;
		*) fail_why+="adopt_generations($v) by lf_app: $out"$'\n' ;; esac
	out=$(new lf_owner -c "$ADOPTION_STATE")
	[ "$out" = "$before" ] || fail_why+="refused, yet moved: $before before, $out after"$'\n'
	[ -z "$fail_why" ]; point "adopt_generations() refused below the highest fence (22023) and to a non-owner (42501), nothing moved" $?

	# the adoption, by the owner (no superuser): the next epoch above v
	r=$(new lf_owner -c "SELECT lease_fence.adopt_generations($v)") || { echo "$r"; return 1; }
	echo "new primary adopted $v: refuses up to $r"

	# 2. every holder of the old primary is refused, each where it would
	# have passed before the adoption (a fence at or below its generation)
	fail_why=
	refused() {  # refused LABEL OUT
		case $2 in *"ERROR:  LF004: generation issued before lease_fence.adopt_generations(): write rejected by fence"*"refuses every generation up to $r."*"HINT:  Take the lease again on this database"*) ;;
			*) fail_why+="$1: $2"$'\n' ;; esac
	}
	refused "g1 UPDATE account 2 (fence $g0)" "$(new lf_app -c "BEGIN" -c "SELECT lease_fence.set_generation($g1)" -c "UPDATE public.account SET balance = 0 WHERE id = 2")"
	refused "g2 UPDATE ledger (fence $g2)" "$(new lf_app -c "BEGIN" -c "SELECT lease_fence.set_generation($g2)" -c "UPDATE public.ledger SET note = 'late' WHERE id = 2")"
	refused "g2 fences job:2 (fence $g2)" "$(new lf_app -c "BEGIN" -c "SELECT lease_fence.set_generation($g2, 'job:2')")"
	refused "g1 checkpoints job:1 (fence $g1)" "$(new lf_app -c "BEGIN" -c "SELECT lease_fence.set_generation($g1)" -c "SELECT lease_fence.checkpoint('job:1', '{\"step\": 2}')")"
	refused "g2 TRUNCATE ledger (highest fence $g2)" "$(new lf_app -c "BEGIN" -c "SELECT lease_fence.set_generation($g2)" -c "TRUNCATE public.ledger")"
	refused "g3 (drawn after v) INSERT ledger" "$(new lf_app -c "BEGIN" -c "SELECT lease_fence.set_generation($g3)" -c "INSERT INTO public.ledger (id, region) VALUES (3, 'eu')")"
	refused "g4 INSERT account, fence written" "$(new lf_app -c "INSERT INTO public.account VALUES (3, 0, $g4)")"
	out=$(new lf_owner -c "$w")
	[ "$out" = "$want" ] || fail_why+="the refused writes changed something: $out, not $want"$'\n'
	[ -z "$fail_why" ]; point "every holder of the old primary is refused with LF004 and the adoption's message (rows, partitions, TRUNCATE, resource fence, checkpoint)" $?

	# 3. the new primary's holders: their writes stand
	fail_why=
	n1=$(new lf_app -c "SELECT lease_fence.next_generation()") &&
	n2=$(new lf_app -c "SELECT lease_fence.next_generation()") || return 1
	out=$(new lf_app -c "BEGIN" -c "SELECT lease_fence.set_generation($n1, 'job:1')" -c "UPDATE public.account SET balance = balance + 10" \
		-c "SELECT lease_fence.checkpoint('job:1', '{\"step\": 2}')" -c "COMMIT" \
		-c "BEGIN" -c "SELECT lease_fence.set_generation($n2, 'job:2')" -c "UPDATE public.ledger SET note = 'n2'" \
		-c "INSERT INTO public.ledger (id, region) VALUES (3, 'eu')" -c "COMMIT") || fail_why+="new holders: $out"$'\n'
	out=$(new lf_owner -c "$w")
	[ "$out" = "1:$n1,2:$n1|1eu:$n2,2us:$n2,3eu:$n2|job:1:$n1,job:2:$n2|job:1:$n1" ] || fail_why+="after the new holders: $out"$'\n'
	[ "$r" = $(((v >> 40) + 1 << 40)) ] && [ "$n1" = $((r + 1)) ] || fail_why+="adopted $r for $v, first draw $n1"$'\n'
	[ -z "$fail_why" ]; point "the new primary's holders write (generations from $n1 = refused_through + 1)" $?

	# 4. no generation of the new primary is one the old one issued: every
	# draw on the new is above everything the old drew, also after v
	fail_why=
	more=$(new lf_app -c "SELECT min(g) || ' ' || count(DISTINCT g) FROM (SELECT lease_fence.next_generation() AS g FROM generate_series(1, 5)) d") || return 1
	[ "$n1" -gt "$g4" ] && [ "${more% *}" -gt "$g4" ] && [ "${more#* }" = 5 ] || fail_why+="old drew up to $g4; new drew $n1, $n2, then min/distinct $more"$'\n'
	[ -z "$fail_why" ]; point "no generation drawn on the new primary equals one the old primary issued" $?
}
if [ "${LF_PORTABLE_SWITCHOVER:-1}" = 1 ]; then
	if ! check_switchover; then
		failed=$((failed + 1)); failures+=("switchover"); echo "FAILED switchover: its set-up"
	fi
	stop_subscriber
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
