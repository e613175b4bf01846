#!/usr/bin/env bash
# test/debian_root.sh — a Debian 13 (trixie) root for the PostgreSQL 17
# runs, made once, cached, and a way to run a script of this tree inside it.
#
#   bash test/debian_root.sh path            make the root if needed, print its path
#   bash test/debian_root.sh run SCRIPT ARGS  run bash SCRIPT ARGS inside the root,
#                                            on a copy of this tree, as root
#
# Debian 12 has no PostgreSQL 17 and the archive does not serve its source
# package, but Debian 13's binary packages are served: debootstrap makes a
# minimal root with postgresql-17, hiredis 1.x, Redis 8 and Valkey 8 (the
# LF_REDIS=valkey runs) from the Debian archive this machine already uses (its first deb.debian.org-style source,
# found as test/pg_build.sh finds it; the machine's apt sources are never
# read for anything else or changed).  A finished root has a stamp written
# last; one without (an interrupted debootstrap) is made again.  About 2
# minutes and 1.7 GB, once.  A finished root that lacks a package of the
# list below (one made before the package was added to it) gets it from the
# root's own apt, not a new debootstrap.  The root has a policy-rc.d that
# refuses every service start: a package's postinst starts no server (a
# redis-server or valkey-server on port 6379 of the shared loopback).
#
# `run` copies the tree into the root, mounts /proc and binds /dev (with
# /dev/shm and /dev/pts) for the run, chroots, and removes the copy on
# every exit path; the last of the runs inside at the time unmounts.  Inside, test/lib.sh sees Debian 13 and uses its
# PostgreSQL 17 where Debian 12 uses 15; apt-get in the root installs what a
# script needs, from the same archive.  Servers inside share the machine's
# loopback, on the free ports and unix sockets the scripts pick.
#
#   LF_PG_CACHE    the cache directory (default /var/cache/lease_fence)
# Exit status 3: the archive does not serve trixie (nothing to run on).
set -euo pipefail

cache=${LF_PG_CACHE:-/var/cache/lease_fence}
root=$cache/trixie
stamp=$cache/trixie.stamp
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)

say() { printf '%s\n' "== debian_root: $*" >&2; }

[ "$(id -u)" -eq 0 ] || { echo "test/debian_root.sh needs root (debootstrap, chroot, mount)" >&2; exit 1; }

# what the runs need in the root, beyond debootstrap's minimal base
PACKAGES=postgresql-17,postgresql-server-dev-17,libhiredis-dev,libssl-dev,openssl,redis-server,redis-sentinel,redis-tools,valkey-server,valkey-sentinel,valkey-tools,make,gcc,libc6-dev,binutils,libipc-run-perl,rsync,python3,ca-certificates,procps,git,unzip

# No service starts in the root (invoke-rc.d asks policy-rc.d; 101: refused)
no_services() {	# root
	[ -x "$1/usr/sbin/policy-rc.d" ] && return 0
	printf '#!/bin/sh\n# lease_fence: no service starts in this root\nexit 101\n' >"$1/usr/sbin/policy-rc.d"
	chmod 755 "$1/usr/sbin/policy-rc.d"
}

# the packages of the list that a finished root lacks, one a line
missing_packages() {
	local p
	for p in ${PACKAGES//,/ }; do
		chroot "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
	done
}

# A finished root made before a package joined the list gets it from the
# root's apt (under the root's lock: two runs may start at once)
complete_root() {
	local missing
	missing=$(missing_packages)
	[ -z "$missing" ] && return 0
	exec 9>"$cache/trixie.lock"
	flock 9
	no_services "$root"
	missing=$(missing_packages)
	if [ -n "$missing" ]; then
		say "installing into the root: $(echo $missing)"
		cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
		# (the root's apt-get, alone: the runs inside take the same lock)
		if ! chroot "$root" flock -w 1800 /run/lock/lease_fence-apt.lock sh -c \
			'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"' \
			_ $missing >"$cache/trixie.complete.log" 2>&1; then
			tail -n 20 "$cache/trixie.complete.log" >&2
			echo "debian_root: could not install $(echo $missing) into the root" >&2
			exit 1
		fi
	fi
	exec 9>&-
}

make_root() {
	if [ -f "$stamp" ] && [ -x "$root/usr/lib/postgresql/17/bin/postgres" ]; then
		complete_root
		return 0
	fi
	mkdir -p "$cache"
	exec 9>"$cache/trixie.lock"
	flock 9
	if [ -f "$stamp" ] && [ -x "$root/usr/lib/postgresql/17/bin/postgres" ]; then
		exec 9>&-
		complete_root
		return 0
	fi
	command -v debootstrap >/dev/null || {
		say "installing debootstrap"
		# one apt-get at a time (test/lib.sh takes the same lock)
		flock -w 1800 /run/lock/lease_fence-apt.lock \
			env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
	}
	local mirror t0
	mirror=$(sed -nE 's/^URIs:[[:space:]]*(\S+\/debian)\/?$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
	[ -n "$mirror" ] || mirror=$(sed -nE 's/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?(\S+\/debian)\/?[[:space:]].*/\2/p' /etc/apt/sources.list 2>/dev/null | head -n 1)
	[ -n "$mirror" ] || { echo "debian_root: found no Debian archive in this machine's apt sources" >&2; exit 1; }
	rm -rf "$root" "$root.tmp" "$stamp"
	say "debootstrap trixie from $mirror into $root (about 2 minutes, once)"
	t0=$(date +%s)
	if ! debootstrap --variant=minbase --include="$PACKAGES" trixie "$root.tmp" "$mirror" \
		>"$cache/trixie.debootstrap.log" 2>&1; then
		tail -n 20 "$cache/trixie.debootstrap.log" >&2
		rm -rf "$root.tmp"
		if grep -qE 'Failed getting release file|Release signed by unknown|Unable to fetch' "$cache/trixie.debootstrap.log"; then
			echo "debian_root: the archive does not serve trixie" >&2
			exit 3
		fi
		echo "debian_root: debootstrap failed, log in $cache/trixie.debootstrap.log" >&2
		exit 1
	fi
	no_services "$root.tmp"
	# the root's apt lists, for what a script installs later
	chroot "$root.tmp" apt-get update -qq >/dev/null 2>&1 || true
	mv "$root.tmp" "$root"
	printf 'Debian %s with %s, made in %s s\n' "$(cat "$root/etc/debian_version")" \
		"$(chroot "$root.tmp" /usr/lib/postgresql/17/bin/postgres --version 2>/dev/null || echo 'PostgreSQL 17')" \
		$(($(date +%s) - t0)) >"$stamp"
	say "$(cat "$stamp")"
}

case ${1:-} in
	path)
		make_root
		echo "$root"
		;;
	run)
		shift
		script=${1:?usage: test/debian_root.sh run SCRIPT ARGS}
		shift
		make_root
		work=$(mktemp -d "$root/tmp/lf-run.XXXXXX")
		inside=${work#"$root"}
		# Runs in the root side by side (.ci/run's 17 and 17k) share its
		# /proc and /dev: each run enters its pid in trixie.users, and the
		# last one out unmounts them (all under trixie.mounts.lock); a pid
		# that is gone is a run that was killed, and counts no more.
		users=$cache/trixie.users
		cleanup() {
			local f live=0
			exec 7>"$cache/trixie.mounts.lock"
			flock 7
			rm -f "$users/$$"
			for f in "$users"/*; do
				[ -e "$f" ] || continue
				if kill -0 "${f##*/}" 2>/dev/null; then live=1; else rm -f "$f"; fi
			done
			if [ "$live" = 0 ]; then
				for m in "$root/dev" "$root/proc"; do
					mountpoint -q "$m" && { umount -R "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; }
				done
			fi
			flock -u 7
			rm -rf "$work"
		}
		trap cleanup EXIT
		rsync -a --exclude .git --exclude '*.o' --exclude '*.so' --exclude '*.bc' \
			--exclude results --exclude output_iso --exclude tmp_check --exclude dist \
			"$top"/ "$work/src"/
		# the .git of a checkout, for scripts that make an archive of HEAD
		[ -e "$top/.git" ] && git -C "$top" rev-parse -q --verify HEAD >/dev/null 2>&1 &&
			git clone -q --no-local "$top" "$work/git" && mv "$work/git/.git" "$work/src/.git" &&
			rm -rf "$work/git"
		(
			flock 7
			mkdir -p "$users" && echo $$ >"$users/$$"
			mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
			mountpoint -q "$root/dev" || { mount --rbind /dev "$root/dev"; mount --make-rslave "$root/dev"; }
		) 7>"$cache/trixie.mounts.lock"
		# the machine's way out: its resolver, the certificate authorities it
		# added to Debian's (a proxy's, say), and its proxy settings
		cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
		if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
			mkdir -p "$root/usr/local/share/ca-certificates"
			cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
			chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
		fi
		# the run's settings (LF_*, CI) and those ways out go in; nothing
		# else of this environment
		mapfile -t settings < <(env | grep -E '^(LF_[A-Z0-9_]+|CI|NODE_EXTRA_CA_CERTS|SSL_CERT_FILE|SSL_CERT_DIR|[Hh][Tt][Tt][Pp][Ss]?_[Pp][Rr][Oo][Xx][Yy]|[Nn][Oo]_[Pp][Rr][Oo][Xx][Yy])=' | grep -v '^LF_PG_ROOT=')
		set +e
		# (LF_IN_TEST_ROOT: a root of the tests' own, where test/deb.sh may
		# dpkg -i; on the machine itself it never does)
		chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
			"${settings[@]}" LF_IN_TEST_ROOT=1 \
			bash -c 'cd "$1" && shift && exec bash "$@"' _ "$inside/src" "$script" "$@"
		rc=$?
		set -e
		exit $rc
		;;
	*)
		echo "usage: test/debian_root.sh path | run SCRIPT ARGS" >&2
		exit 2
		;;
esac
