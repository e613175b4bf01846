#!/usr/bin/env bash
# test/pg_build.sh — build a PostgreSQL server with assertions for the test
# matrix, once, into a cache, and print its prefix.
#
#   bash test/pg_build.sh 18        -> /var/cache/lease_fence/pg18
#
# The source is Debian's source package of that major (15 from bookworm, 17
# from trixie, 18 from sid), fetched through a private apt configuration of
# its own (its own sources list, lists and archive directories under the
# cache): the machine's apt sources are never read or changed.  The
# upstream tarball in it is built with
#   --enable-cassert --enable-debug --enable-tap-tests --with-openssl
# and CFLAGS=-Og (ECPG left out), and installed into <cache>/pgNN: the
# server and client programs, headers, PGXS with pg_regress, pg_isolation_regress, isolationtester and the TAP
# perl modules (PostgreSQL::Test::Cluster) — everything `make installcheck`
# of lease_fence needs, and nothing more (no contrib, no docs).
#
# A finished install writes <cache>/pgNN.stamp last, naming that recipe; an
# install without its stamp (an interrupted build), or whose stamp names
# another recipe, is removed and built again.  A present stamp
# means nothing is downloaded or built.  Needs root (apt-get, the cache).
#
#   LF_PG_CACHE   the cache directory (default /var/cache/lease_fence)
#   LF_PG_JOBS    make -j (default: the number of CPUs)
set -euo pipefail

major=${1:?usage: test/pg_build.sh 15|17|18}
cache=${LF_PG_CACHE:-/var/cache/lease_fence}
jobs=${LF_PG_JOBS:-$(nproc)}
prefix=$cache/pg$major
stamp=$cache/pg$major.stamp

say() { printf '%s\n' "== pg_build $major: $*" >&2; }

# what a build is: a cached one made otherwise (an older version of this
# script) is built again
recipe="--enable-cassert --enable-debug --enable-tap-tests --with-openssl, CFLAGS=-Og, no ECPG, run path \$ORIGIN-relative"
built() { [ -f "$stamp" ] && grep -qF -- "$recipe" "$stamp" && [ -x "$prefix/bin/postgres" ]; }

# The build's programs and libraries find its own libraries (psql, pg_ctl,
# isolationtester their libpq; libpqwalreceiver too) by a run path relative
# to where each file is ($ORIGIN), so the build and every copy of it work
# wherever they are and whoever runs them: test/lib.sh copies it into each
# run's temp dir, and the copy uses its own libpq.  (An absolute run path
# into a cache the test user cannot reach -- LF_PG_CACHE=$(mktemp -d)/cache --
# left psql 18 on the system's older libpq: "undefined symbol:
# PQgetCurrentTimeUSec".)  bin/ finds ../lib, lib/postgresql/ (the
# server's modules) finds .., and lib/postgresql/pgxs/src/test/*/ (pg_regress,
# isolationtester) finds ../../../../..; one list for all of them.
rpath='$$ORIGIN/../lib:$$ORIGIN/..:$$ORIGIN/../../../../..'

# The cache itself enterable by the test user, for what that user keeps in
# it (the Go build cache of the client tests, test/clients/run.sh); the
# builds do not need it (their run path is relative)
cache_enterable() {
	[ -d "$cache" ] && [ "$(id -u)" -eq 0 ] && chmod a+rx "$cache" 2>/dev/null
	return 0
}

if built; then
	cache_enterable
	echo "$prefix"
	exit 0
fi

# one build of a major at a time: a second caller waits, then finds the stamp
mkdir -p "$cache"
cache_enterable
exec 9>"$cache/pg$major.lock"
flock 9
if built; then
	echo "$prefix"
	exit 0
fi

case $major in
	15) suite=bookworm ;;
	17) suite=trixie ;;
	18) suite=sid ;;
	*) echo "pg_build: no source suite known for PostgreSQL $major" >&2; exit 2 ;;
esac

# what a build needs beyond what test/lib.sh installs (tarballs of 18 no
# longer carry the generated parser files: bison and flex)
need=(make gcc pkg-config bison flex libssl-dev libreadline-dev zlib1g-dev libicu-dev libipc-run-perl bzip2)
missing=()
for p in "${need[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	# one apt-get at a time (test/lib.sh takes the same lock)
	(
		flock -w 1800 7 || exit 1
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	) 7>/run/lock/lease_fence-apt.lock
fi

# A private apt configuration: the Debian archive this machine already uses
# (the first deb.debian.org-style URI of its own sources), deb-src lines only.
apt_dir=$cache/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$cache/src"
# (the lists are shared by all majors: one apt-get at a time)
exec 8>"$apt_dir/lock"
mirror=$(sed -nE 's/^URIs:[[:space:]]*(\S+\/debian)\/?$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[ -n "$mirror" ] || mirror=$(sed -nE 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?(\S+\/debian)\/?[[:space:]].*/\2/p' /etc/apt/sources.list 2>/dev/null | head -n 1)
[ -n "$mirror" ] || { echo "pg_build: found no Debian archive in this machine's apt sources" >&2; exit 1; }
echo "deb-src $mirror $suite main" >"$apt_dir/$suite.list"
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/$suite.list" -o Dir::Etc::sourceparts=-
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir"
	-o "Dir::Cache::archives=$apt_dir/archives" -o APT::Sandbox::User=root)

t0=$(date +%s)
tarball=$(ls "$cache/src"/postgresql-"$major"_"$major".*.orig.tar.bz2 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$tarball" ]; then
	say "fetching Debian's source package postgresql-$major ($suite)"
	flock 8
	apt-get "${apt_opts[@]}" -qq update
	(cd "$cache/src" && apt-get "${apt_opts[@]}" -qq source --download-only "postgresql-$major") || {
		echo "pg_build: apt-get source postgresql-$major ($suite) failed: the archive does not serve it" >&2
		exit 3
	}
	flock -u 8
	tarball=$(ls "$cache/src"/postgresql-"$major"_"$major".*.orig.tar.bz2 | sort -V | tail -n 1)
fi
version=$(basename "$tarball" | sed -E 's/^postgresql-[0-9]+_([0-9.]+)\.orig\.tar\.bz2$/\1/')

# a half-finished earlier attempt is started over
rm -rf "$prefix" "$stamp" "$cache/build/pg$major"
mkdir -p "$cache/build/pg$major"
say "building PostgreSQL $version with assertions into $prefix (make -j$jobs)"
tar -xjf "$tarball" -C "$cache/build/pg$major" --strip-components=1
cd "$cache/build/pg$major"
log=$cache/pg$major.build.log
{
	# -Og (with --enable-debug's -g): built for debugging, and about a third
	# less compile time than configure's default -O2 (src/backend/utils/adt:
	# 36 CPU-seconds against 58 on the CI machine); the tests wait on
	# servers far more than they compute
	CFLAGS=-Og ./configure --prefix="$prefix" --enable-cassert --enable-debug --enable-tap-tests --with-openssl &&
		# nothing here uses ECPG (embedded SQL in C): not built
		sed -i 's/^SUBDIRS = libpq ecpg$/SUBDIRS = libpq/' src/interfaces/Makefile &&
		# (rpathdir on the command line: every sub-make links with it)
		make -j"$jobs" rpathdir="$rpath" &&
		make install rpathdir="$rpath" &&
		# PGXS's installcheck runs these from <pgxs>/src/test/...: the
		# isolation tester and the TAP modules (src/Makefile installs them
		# with the rest on every version here; explicit, to be sure)
		make -C src/test/isolation install rpathdir="$rpath" &&
		make -C src/test/perl install
} >"$log" 2>&1 || { tail -n 40 "$log" >&2; echo "pg_build: build failed, log in $log" >&2; exit 1; }

# (PGXS lives in <prefix>/lib/postgresql/pgxs: the prefix has no
# "postgres" in its name)
pgxs=$("$prefix/bin/pg_config" --pkglibdir)/pgxs
for f in "$prefix"/bin/{postgres,initdb,pg_ctl,psql,pg_config} \
	"$pgxs"/src/test/regress/pg_regress \
	"$pgxs"/src/test/isolation/{pg_isolation_regress,isolationtester} \
	"$pgxs"/src/test/perl/PostgreSQL/Test/Cluster.pm; do
	[ -e "$f" ] || { echo "pg_build: $f is missing after install" >&2; exit 1; }
done
# every program and library that needs libpq finds the build's own, by its
# relative run path (ldd: never the system's)
for f in "$prefix"/bin/* "$prefix"/lib/postgresql/*.so "$pgxs"/src/test/regress/pg_regress \
	"$pgxs"/src/test/isolation/{pg_isolation_regress,isolationtester}; do
	libpq=$(ldd "$f" 2>/dev/null | sed -nE 's/^\s*libpq\.so\.5 => (\S+).*/\1/p' || true)
	[ -z "$libpq" ] && continue
	[ "$(readlink -f "$libpq")" = "$(readlink -f "$prefix/lib/libpq.so.5")" ] ||
		{ echo "pg_build: $f loads $libpq, not the build's libpq" >&2; exit 1; }
done
cd "$cache"
rm -rf "$cache/build/pg$major"
t1=$(date +%s)
printf 'PostgreSQL %s from %s, %s, built in %s s on %s CPUs\n' \
	"$version" "$suite" "$recipe" $((t1 - t0)) "$(nproc)" >"$stamp"
say "$(cat "$stamp")"
echo "$prefix"
