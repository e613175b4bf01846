# test/lib.sh — shared by test/run.sh, demo/run.sh and test/bench: install what
# is missing, make a private copy of the tree and of the PostgreSQL
# installation that an unprivileged user owns, build and install the extension
# into that copy, and start / stop throwaway servers.
#
# Nothing here touches a server it did not start, nor the machine's own
# PostgreSQL installation: every server lives in a temp dir, listens on a unix
# socket inside it (and nothing else), runs from the private installation
# copy, and is stopped by lf_cleanup.  Two runs at once cannot swap
# lease_fence.so under each other.

# The PostgreSQL major this Debian release ships: 15 on Debian 12, 17 on
# Debian 13 (a run on 17 is one inside test/debian_root.sh's root).
if [ -z "${LF_DEBIAN_MAJOR:-}" ]; then
	case $(cut -d. -f1 /etc/debian_version 2>/dev/null) in
		13 | trixie*) LF_DEBIAN_MAJOR=17 ;;
		*) LF_DEBIAN_MAJOR=15 ;;
	esac
fi
# LF_REDIS picks the key-value server every script starts (test/README.md,
# "Redis or Valkey"): redis (the default: Debian's redis-server, redis-cli,
# redis-sentinel) or valkey (valkey-server, valkey-cli, valkey-sentinel:
# Debian 13's Valkey 8, so only inside test/debian_root.sh's root, LF_PG=17).
# For valkey, LF_REDIS_SERVER, LF_REDIS_CLI and LF_REDIS_SENTINEL are set
# (unless given) and exported: every program that starts a server or talks
# to one (lf_start_redis, the TAP modules in test/perl, the fault run, the
# client tests) takes its programs from them.
LF_REDIS=${LF_REDIS:-redis}
case $LF_REDIS in
	valkey)
		LF_REDIS_PACKAGES="valkey-server valkey-sentinel valkey-tools"
		export LF_REDIS_SERVER=${LF_REDIS_SERVER:-/usr/bin/valkey-server}
		export LF_REDIS_CLI=${LF_REDIS_CLI:-/usr/bin/valkey-cli}
		export LF_REDIS_SENTINEL=${LF_REDIS_SENTINEL:-/usr/bin/valkey-sentinel}
		;;
	*) LF_REDIS_PACKAGES="redis-server redis-sentinel redis-tools" ;;
esac
export LF_REDIS
LF_PACKAGES="make gcc postgresql-$LF_DEBIAN_MAJOR postgresql-server-dev-$LF_DEBIAN_MAJOR libhiredis-dev libssl-dev openssl $LF_REDIS_PACKAGES libipc-run-perl rsync"
# the PostgreSQL installation a run copies: Debian's unless told otherwise
# (lf_make_workdir sets PG_BIN and PG_CONFIG to the private copy)
LF_PG_ROOT=${LF_PG_ROOT:-}
PG_BIN=/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin
# LF_INSTALLED=1: use the machine's Debian PostgreSQL installation as it is, with
# lease_fence already installed in it (the .deb): no copy, no build.
# LF_INSTALLED_ROOT: where that installation is (default /, the machine's;
# test/deb.sh points it at a private copy it extracted the package into)
LF_INSTALLED=${LF_INSTALLED:-0}
LF_INSTALLED_ROOT=${LF_INSTALLED_ROOT:-}
LF_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

lf_log() { printf '%s\n' "== $*" >&2; }

# LF_PG picks the PostgreSQL a run uses (test/README.md, "Supported PostgreSQL
# versions"):
#   15            Debian's postgresql-15 package (the default)
#   15-cassert    15 built from Debian's source with assertions
#   17, 18        17 / 18 built the same way (17-cassert, 18-cassert also work)
# A build with assertions is made once by test/pg_build.sh into a cache and
# sets LF_PG_ROOT, which the scripts this one starts inherit.
lf_select_pg() {
	local major
	case ${LF_PG:-$LF_DEBIAN_MAJOR} in
		"$LF_DEBIAN_MAJOR" | "$LF_DEBIAN_MAJOR-debian") return 0 ;;
		15-cassert) major=15 ;;
		18 | 18-cassert) major=18 ;;
		17) echo "LF_PG=17 runs inside Debian 13's root: test/run.sh enters it (test/debian_root.sh)" >&2; return 2 ;;
		*) echo "LF_PG=$LF_PG: expected one of 15, 15-cassert, 17, 18" >&2; return 2 ;;
	esac
	LF_PG_ROOT=$(bash "$LF_LIB_DIR/pg_build.sh" "$major") || return 1
	export LF_PG_ROOT
	unset LF_PG
}

# LF_REDIS is one of redis, valkey; valkey only where Debian packages it
# (Debian 13: the LF_PG=17 runs, inside test/debian_root.sh's root)
lf_select_redis() {
	case $LF_REDIS in
		redis) return 0 ;;
		valkey)
			[ "$LF_DEBIAN_MAJOR" = 17 ] && return 0
			echo "LF_REDIS=valkey needs LF_PG=17: Valkey is packaged by Debian 13, not Debian 12; an LF_PG=17 run happens inside a Debian 13 root (test/debian_root.sh)" >&2
			return 2
			;;
		*) echo "LF_REDIS=$LF_REDIS: expected redis or valkey" >&2; return 2 ;;
	esac
}

# Install the Debian packages that are missing (as root), or say what to do.
lf_need_packages() {
	local missing=() p
	lf_select_redis || return 1
	for p in $LF_PACKAGES "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		{
			echo "lease_fence's scripts need these Debian packages, which are not installed:"
			echo "  ${missing[*]}"
			echo "Install them as root (apt-get install ${missing[*]}), or run this script as root,"
			echo "which installs them; then any user can run it: it builds and installs lease_fence"
			echo "into a private copy of PostgreSQL, so no 'make install' as root is needed."
		} >&2
		return 1
	fi
	lf_log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# one apt-get at a time: .ci/run runs majors side by side, and a second
	# apt-get would find dpkg locked and fail
	(
		flock -w 1800 9 || exit 1
		apt-get update -qq >/dev/null
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	) 9>/run/lock/lease_fence-apt.lock
}

# PostgreSQL refuses to run as root: as root, servers and tests run as the
# postgres user that the Debian packages create.  Every command run as that
# user starts in a directory it can enter: the caller's when that is inside
# the temp dir, the temp dir otherwise (a clone in root's 0700 home is not).
if [ "$(id -u)" -eq 0 ]; then LF_USER=postgres; else LF_USER=$(id -un); fi
lf_as_user() {
	local dir=$PWD
	case "$dir/" in
		"${LF_WORK:-/nonexistent}"/*) ;;
		*) dir=${LF_WORK:-/} ;;
	esac
	if [ "$(id -u)" -eq 0 ]; then
		(cd "$dir" && runuser -u "$LF_USER" -- "$@")
	else
		(cd "$dir" && "$@")
	fi
}

# A temp dir with a copy of the source tree and of the PostgreSQL
# installation, both owned by $LF_USER.  Sets LF_WORK (the temp dir), LF_SRC
# (the tree), PG_BIN and PG_CONFIG (the installation).
#
# The installation copy keeps PostgreSQL's relative layout, so its programs
# find their share and lib directories (PostgreSQL installations are
# relocatable); the extension is installed into it without root.
lf_make_workdir() {
	local top=$1 root
	lf_select_redis || return 1
	lf_select_pg || return 1
	LF_WORK=$(mktemp -d /tmp/lease_fence.XXXXXX)
	chmod 755 "$LF_WORK"
	LF_SRC=$LF_WORK/src
	rsync -a --exclude .git --exclude '*.o' --exclude '*.so' --exclude '*.bc' \
		--exclude results --exclude output_iso --exclude tmp_check "$top"/ "$LF_SRC"/
	root=$LF_WORK/pg
	if [ "$LF_INSTALLED" = 1 ]; then
		# the installed package is what is tested: nothing is copied
		PG_BIN=${LF_INSTALLED_ROOT:-}/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin
	elif [ -n "$LF_PG_ROOT" ]; then
		# a PostgreSQL built from source into its own prefix (test/pg_build.sh)
		cp -a "$LF_PG_ROOT" "$root"
		PG_BIN=$root/bin
	else
		lf_copy_debian_pg "$root"
		PG_BIN=$root/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin
	fi
	PG_CONFIG=$PG_BIN/pg_config
	export PG_CONFIG
	# what the user installed into the machine's PostgreSQL (the README's
	# set-up, a package) is not this tree's: gone from the copy, so that no
	# run depends on it (the portable suite's server must not load it)
	[ "$LF_INSTALLED" = 1 ] || lf_remove_installed || return 1
	[ "$(id -u)" -eq 0 ] && chown -R "$LF_USER" "$LF_WORK"
	return 0
}

# Remove every lease_fence file from the installation $PG_CONFIG names (the
# private copy): the library, its bitcode, the control file and the
# scripts -- what `make install` and the Debian package put there.
lf_remove_installed() {
	local lib share
	lib=$("$PG_CONFIG" --pkglibdir) && share=$("$PG_CONFIG" --sharedir) || return 1
	case $lib/ in "$LF_WORK"/*) ;; *) echo "lf_remove_installed: $lib is not in the private copy $LF_WORK" >&2; return 1 ;; esac
	rm -rf "$lib"/lease_fence.so "$lib"/bitcode/lease_fence "$lib"/bitcode/lease_fence.index.bc \
		"$share"/extension/lease_fence.control "$share"/extension/lease_fence--*.sql
}

# Copy the machine's Debian PostgreSQL installation into ROOT, keeping its
# layout under usr/ (its programs find their share and lib directories
# relative to their own; PostgreSQL installations are relocatable).
lf_copy_debian_pg() {
	local root=$1
	mkdir -p "$root/usr/lib/postgresql" "$root/usr/share/postgresql" "$root/usr/include" &&
		cp -a "/usr/lib/postgresql/$LF_DEBIAN_MAJOR" "$root/usr/lib/postgresql/" &&
		cp -a "/usr/share/postgresql/$LF_DEBIAN_MAJOR" "$root/usr/share/postgresql/" &&
		# headers are only read: a link will do
		ln -s /usr/include/postgresql "$root/usr/include/postgresql"
}

# Build and install into the private installation as the unprivileged user
# (warnings are errors): no root needed.
lf_build_install() {
	if [ "$LF_INSTALLED" = 1 ]; then
		[ -f "${LF_INSTALLED_ROOT:-}/usr/share/postgresql/$LF_DEBIAN_MAJOR/extension/lease_fence.control" ] && return 0
		echo "LF_INSTALLED=1 but lease_fence is not installed in PostgreSQL $LF_DEBIAN_MAJOR${LF_INSTALLED_ROOT:+ under $LF_INSTALLED_ROOT} (install the .deb)" >&2
		return 1
	fi
	lf_log "building lease_fence"
	lf_as_user make -s -C "$LF_SRC" PG_CONFIG="$PG_CONFIG" WERROR=1 "$@" >"$LF_WORK/build.log" 2>&1 || { cat "$LF_WORK/build.log"; return 1; }
	lf_as_user make -s -C "$LF_SRC" PG_CONFIG="$PG_CONFIG" install >>"$LF_WORK/build.log" 2>&1 || { cat "$LF_WORK/build.log"; return 1; }
}

# The older PostgreSQL of the TAP files that cross majors (pg_upgrade, a
# publisher of an older major): sets and exports LF_OLD_PG, an installation
# prefix (its programs in bin/) with this tree's lease_fence installed, and
# LF_OLD_PG_MAJOR, its major.  A run on a major above Debian's (18 on
# Debian 12) gets a private copy of Debian's PostgreSQL (15) in
# $LF_WORK/pg<major>, with lease_fence built for it (warnings are errors)
# from a clean copy of the run's tree and installed there, as the
# unprivileged user; any other run, its own installation (the same major).
lf_old_pg() {
	local major old src t0
	major=$("$PG_CONFIG" --version | sed -nE 's/^PostgreSQL ([0-9]+).*/\1/p')
	[ -n "$major" ] || { echo "lf_old_pg: no major in $("$PG_CONFIG" --version)" >&2; return 1; }
	if [ "$major" -le "$LF_DEBIAN_MAJOR" ]; then
		export LF_OLD_PG=${PG_BIN%/bin} LF_OLD_PG_MAJOR=$major
		return 0
	fi
	t0=$(date +%s)
	old=$LF_WORK/pg$LF_DEBIAN_MAJOR
	src=$LF_WORK/src$LF_DEBIAN_MAJOR
	lf_copy_debian_pg "$old" || return 1
	[ "$(id -u)" -eq 0 ] && chown -R "$LF_USER" "$old"
	PG_CONFIG=$old/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin/pg_config lf_remove_installed || return 1
	lf_as_user rsync -a --exclude '*.o' --exclude '*.so' --exclude '*.bc' \
		--exclude results --exclude output_iso --exclude tmp_check "$LF_SRC"/ "$src"/ &&
		lf_as_user make -s -C "$src" PG_CONFIG="$old/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin/pg_config" WERROR=1 \
			>"$LF_WORK/build$LF_DEBIAN_MAJOR.log" 2>&1 &&
		lf_as_user make -s -C "$src" PG_CONFIG="$old/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin/pg_config" install \
			>>"$LF_WORK/build$LF_DEBIAN_MAJOR.log" 2>&1 ||
		{ cat "$LF_WORK/build$LF_DEBIAN_MAJOR.log"; return 1; }
	export LF_OLD_PG=$old/usr/lib/postgresql/$LF_DEBIAN_MAJOR LF_OLD_PG_MAJOR=$LF_DEBIAN_MAJOR
	lf_log "old PostgreSQL: Debian's $LF_DEBIAN_MAJOR with lease_fence, copied and built in $(($(date +%s) - t0)) s"
}

# Start a throwaway PostgreSQL on a unix socket in $LF_WORK.  Extra
# postgresql.conf lines can be given as arguments.  LF_PG_PORT picks the
# port (5432: only the socket's name), LF_PG_LISTEN a TCP address (none; the
# JDBC tests use 127.0.0.1, with a pg_hba.conf of their own).  Sets PGHOST, PGPORT,
# PGUSER, PGDATABASE for the caller.
lf_start_pg() {
	local line port=${LF_PG_PORT:-5432}
	LF_PGDATA=$LF_WORK/pgdata
	lf_as_user "$PG_BIN/initdb" -D "$LF_PGDATA" -U postgres -A trust --no-sync \
		--locale=C.UTF-8 -E UTF8 >"$LF_WORK/initdb.log" 2>&1 || { cat "$LF_WORK/initdb.log"; return 1; }
	{
		echo "listen_addresses = '${LF_PG_LISTEN:-}'"
		echo "unix_socket_directories = '$LF_WORK'"
		echo "port = $port"
		echo "fsync = off"
		for line in "$@"; do echo "$line"; done
	} | lf_as_user tee -a "$LF_PGDATA/postgresql.conf" >/dev/null
	lf_as_user "$PG_BIN/pg_ctl" -D "$LF_PGDATA" -l "$LF_WORK/postgres.log" -w -t 60 start >/dev/null \
		|| { cat "$LF_WORK/postgres.log"; return 1; }
	export PGHOST=$LF_WORK PGPORT=$port PGUSER=postgres PGDATABASE=postgres
}

lf_stop_pg() {
	if [ -n "${LF_PGDATA:-}" ] && [ -f "$LF_PGDATA/postmaster.pid" ]; then
		lf_as_user "$PG_BIN/pg_ctl" -D "$LF_PGDATA" -m fast -w stop >/dev/null 2>&1 ||
			lf_as_user "$PG_BIN/pg_ctl" -D "$LF_PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi
}

# Start a throwaway redis-server (valkey-server with LF_REDIS=valkey) on a
# unix socket in $LF_WORK (no TCP, no persistence), as $LF_USER so the
# PostgreSQL server can use the socket.  Sets LF_REDIS_SOCK.
lf_start_redis() {
	LF_REDIS_SOCK=$LF_WORK/redis.sock
	lf_as_user "${LF_REDIS_SERVER:-redis-server}" --port 0 --unixsocket "$LF_REDIS_SOCK" --unixsocketperm 700 \
		--save '' --appendonly no --dir "$LF_WORK" --daemonize yes \
		--pidfile "$LF_WORK/redis.pid" --logfile "$LF_WORK/redis.log" >/dev/null || return 1
	local i
	for i in $(seq 1 50); do
		lf_redis_cli PING 2>/dev/null | grep -q PONG && return 0
		sleep 0.1
	done
	cat "$LF_WORK/redis.log"; return 1
}

lf_redis_cli() { lf_as_user "${LF_REDIS_CLI:-redis-cli}" -s "$LF_REDIS_SOCK" "$@"; }

lf_stop_redis() {
	if [ -n "${LF_REDIS_SOCK:-}" ] && [ -f "$LF_WORK/redis.pid" ]; then
		lf_redis_cli SHUTDOWN NOSAVE >/dev/null 2>&1 ||
			kill "$(cat "$LF_WORK/redis.pid")" 2>/dev/null || true
	fi
}

# The fault-injection run (test/faults/faults.py: test/README.md) on this
# run's build, as $LF_USER, with its servers under $LF_WORK/faults.  Its
# settings (LF_FAULTS_*) come from the environment.  Prints its report and
# returns its exit status.
lf_faults() {
	lf_as_user mkdir -p "$LF_WORK/faults" || return 1
	lf_as_user /usr/bin/python3 "$LF_SRC/test/faults/faults.py" \
		--pg-bin "$PG_BIN" --work "$LF_WORK/faults"
}

# The fault-injection run's self-test (test/faults/mutants.py): builds of
# this run's tree with one patch each (a fence that accepts a lower
# generation, an acquire without NX), each in copies under $LF_WORK/mutants,
# each run briefly; prints one "ok - mutant <name> caught by <property>"
# per mutant, and returns non-zero when one was not caught.
# LF_FAULTS_MUTANTS=none skips it.
lf_faults_mutants() {
	[ "${LF_FAULTS_MUTANTS:-}" = none ] && return 0
	lf_as_user mkdir -p "$LF_WORK/faults" "$LF_WORK/mutants" || return 1
	lf_as_user /usr/bin/python3 "$LF_SRC/test/faults/mutants.py" --src "$LF_SRC" \
		--pg-root "$LF_WORK/pg" --pg-bin "$PG_BIN" --work "$LF_WORK/mutants" \
		--faults-work "$LF_WORK/faults"
}

# What a fault-injection run that was itself killed left running: its
# PostgreSQL servers (a postmaster.pid in a data dir of $LF_WORK/faults) and
# its Redis servers (a pid file beside each, checked to be a process whose
# working directory is that server's directory, so a reused pid is left
# alone).  Its workers exit by themselves once their driver is gone.
lf_stop_faults() {
	local d pid cwd
	[ -n "${LF_WORK:-}" ] && [ -d "$LF_WORK/faults" ] || return 0
	# (the self-test's runs are one level deeper: faults/mutant-<name>/)
	for d in "$LF_WORK"/faults/*/*/data "$LF_WORK"/faults/mutant-*/*/*/data; do
		[ -f "$d/postmaster.pid" ] &&
			lf_as_user "$PG_BIN/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1
	done
	for d in "$LF_WORK"/faults/*/*/ "$LF_WORK"/faults/mutant-*/*/*/; do
		[ -f "$d/pid" ] || continue
		pid=$(cat "$d/pid")
		cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || continue
		[ "$cwd/" = "$d" ] && kill -9 "$pid" 2>/dev/null
	done
	return 0
}

# Stop what we started and remove the temp dir (kept when LF_KEEP=1).
lf_cleanup() {
	lf_stop_faults
	lf_stop_redis
	lf_stop_pg
	if [ -n "${LF_WORK:-}" ] && [ -d "$LF_WORK" ]; then
		if [ "${LF_KEEP:-0}" = 1 ]; then lf_log "kept $LF_WORK"; else rm -rf "$LF_WORK"; fi
	fi
}
