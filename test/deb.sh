#!/usr/bin/env bash
# test/deb.sh — the release archive and the Debian package, as a user gets
# them, for the PostgreSQL this Debian release ships (15 on Debian 12; 17 on
# Debian 13, where .ci/run runs it inside test/debian_root.sh's root).  As
# root, from a git checkout:
#   1. `make dist` makes dist/lease_fence-VERSION.zip (the committed HEAD)
#      with META.json, the control file, every install / upgrade script and
#      the sources (with scripts/: the Lua scripts and embed.sh), LICENSE,
#      CHANGELOG.md and docs/; META.json's version is the control file's
#      default_version, and it is what PGXN accepts (its prereqs name only
#      PostgreSQL; resources; license; semantic versions; files present)
#   2. the .deb is built from that archive with pg_buildext
#      (dpkg-buildpackage -b, as the postgres user): postgresql-NN-lease-fence,
#      after `pg_buildext updatecontrol` names this release's majors in
#      debian/control, as a Debian maintainer would
#   3. the package is put where a user's PostgreSQL NN would have it, and
#      tried: CREATE EXTENSION works on a throwaway server of that
#      installation, and demo/run.sh runs against it (LF_INSTALLED=1: no
#      build, no copy).  Where it is put:
#        - in a root of the tests' own (test/debian_root.sh sets
#          LF_IN_TEST_ROOT=1): dpkg -i, into /usr/lib/postgresql/NN and
#          /usr/share/postgresql/NN of that root;
#        - anywhere else (the machine itself): dpkg-deb -x into a private
#          copy of PostgreSQL NN (LF_INSTALLED_ROOT), from which any
#          lease_fence the user installed was removed first.  The machine's
#          installation and its dpkg database are not touched: a lease_fence
#          the user installed (the README's set-up, a package) stays as it
#          was, which the last test point checks;
#   4. in the root of its own, dpkg -r removes it again, leaving no
#      lease_fence file behind
# and prints "N passed, N failed".
#
# In the root, the package is removed on every exit path, and a
# postgresql-NN-lease-fence installed there before we started is left alone
# and the test refuses to run.  NN below is $LF_DEBIAN_MAJOR (test/lib.sh).
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/lib.sh"

PKG=postgresql-$LF_DEBIAN_MAJOR-lease-fence
# dpkg -i only in a root of the tests' own (test/debian_root.sh)
own_root=${LF_IN_TEST_ROOT:-0}
[ "$(id -u)" -eq 0 ] || { echo "test/deb.sh builds a package as the postgres user: run it as root" >&2; exit 1; }
lf_need_packages build-essential debhelper postgresql-server-dev-all dpkg-dev unzip git || exit 1
if [ "$own_root" = 1 ] && dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q 'install ok installed'; then
	echo "$PKG is installed already (not by this test): remove it (dpkg -r $PKG) to run this test" >&2
	exit 1
fi

passed=0
failed=0
check() {
	local name=$1; shift
	if "$@"; then passed=$((passed + 1)); echo "ok - $name"
	else failed=$((failed + 1)); echo "not ok - $name"; fi
}

# dpkg, one at a time with the apt-get of every other run on the machine
# (or in the same Debian root): test/lib.sh's lock
dpkg_locked() { flock -w 1800 /run/lock/lease_fence-apt.lock dpkg "$@"; }

installed=0
deb_cleanup() {
	if [ "$installed" = 1 ]; then dpkg_locked -r "$PKG" >/dev/null 2>&1; fi
	lf_cleanup
}
trap deb_cleanup EXIT

# the workdir gives us a temp dir the postgres user owns; LF_INSTALLED=1
# makes it copy no PostgreSQL installation (the package is for Debian's own)
unset LF_PG LF_PG_ROOT
LF_INSTALLED_ROOT=
LF_INSTALLED=1
lf_make_workdir "$top" || exit 1
out=$LF_WORK/deb

# the machine's lease_fence files in PostgreSQL NN (none, or the user's), with
# their checksums: the same at the end, outside a root of our own
machine_files() {
	find "/usr/lib/postgresql/$LF_DEBIAN_MAJOR/lib" "/usr/share/postgresql/$LF_DEBIAN_MAJOR/extension" \
		-name 'lease_fence*' -type f -exec md5sum {} + 2>/dev/null | sort
	dpkg-query -W -f='${Package} ${Version} ${Status}\n' "$PKG" 2>/dev/null
}
machine_before=$(machine_files)

# 1. make dist
version=$(sed -nE '0,/"version"/s/^ *"version": *"([^"]+)".*/\1/p' "$top/META.json")
mkdir -p "$out"
git -C "$top" rev-parse -q --verify HEAD >/dev/null 2>&1 ||
	{ echo "not a git checkout: make dist needs one" >&2; exit 1; }
(cd "$top" && make -s dist PG_CONFIG="/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin/pg_config") >"$out/dist.log" 2>&1
zip=$top/dist/lease_fence-$version.zip
check "make dist makes dist/lease_fence-$version.zip" [ -s "$zip" ]
(cd "$out" && unzip -q "$zip") || exit 1
src=$out/lease_fence-$version
dist_complete() {
	local f missing=0
	for f in META.json README.md LICENSE CHANGELOG.md docs/reference.md Makefile lease_fence.control src/base/compat.h debian/control debian/rules \
		$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$top/Makefile" | sed -nE 's/^DATA = //p') scripts/embed.sh $(cd "$top" && echo scripts/*.lua) \
		portable/lease_fence_portable.sql portable/README.md; do
		[ -f "$src/$f" ] || { echo "missing from the archive: $f"; missing=1; }
	done
	[ ! -e "$src/.ci" ] || { echo ".ci is in the archive"; missing=1; }
	[ "$missing" = 0 ]
}
check "the archive has META.json, LICENSE, CHANGELOG.md, the reference, the control file, every script, the sources and the portable edition" dist_complete
meta_matches() {
	local control
	control=$(sed -nE "s/^default_version = '([^']+)'.*/\1/p" "$src/lease_fence.control")
	python3 - "$src/META.json" "$control" <<-'PY'
	import json, sys
	m = json.load(open(sys.argv[1]))
	need = ["name", "abstract", "version", "maintainer", "license", "provides", "meta-spec", "release_status", "prereqs"]
	problems = ["META.json lacks " + k for k in need if k not in m]
	if not m.get("version", "").startswith(sys.argv[2] + "."):
	    problems.append("META.json version %s is not the control file's %s" % (m.get("version"), sys.argv[2]))
	if m.get("provides", {}).get("lease_fence", {}).get("version") != m.get("version"):
	    problems.append("provides.lease_fence.version differs from version")
	# PGXN resolves prereqs by name: only PostgreSQL and PGXN distributions
	# belong there (hiredis and Redis are Debian packages: the README says so)
	for phase, rels in m.get("prereqs", {}).items():
	    for rel, names in rels.items():
	        for name in names:
	            if name != "PostgreSQL":
	                problems.append("prereqs.%s.%s names %s, which is not on PGXN" % (phase, rel, name))
	if not set(m.get("resources", {})) & {"homepage", "bugtracker", "repository"}:
	    problems.append("META.json has no resources (homepage, bugtracker or repository)")
	if m.get("license") != "postgresql":
	    problems.append("license is not postgresql")
	if m.get("release_status") not in ("stable", "testing", "unstable"):
	    problems.append("release_status is not stable, testing or unstable")
	if m.get("meta-spec", {}).get("version") != "1.0.0":
	    problems.append("meta-spec.version is not 1.0.0")
	import os, re
	if not re.match(r"^\d+\.\d+\.\d+$", m.get("version", "")):
	    problems.append("version is not a semantic version")
	for ext, p in m.get("provides", {}).items():
	    for key in ("file", "docfile"):
	        if p.get(key) and not os.path.exists(os.path.join(os.path.dirname(sys.argv[1]), p[key])):
	            problems.append("provides.%s.%s: %s is not in the archive" % (ext, key, p[key]))
	if problems: print("\n".join(problems))
	sys.exit(1 if problems else 0)
	PY
}
check "META.json is valid for PGXN and its version is the control file's default_version" meta_matches

# 2. the .deb, from the archive, as the postgres user
chown -R "$LF_USER" "$out"
lf_log "building $PKG with pg_buildext"
(cd "$src" && lf_as_user pg_buildext updatecontrol && lf_as_user dpkg-buildpackage -us -uc -b) >"$out/build.log" 2>&1
deb=$(ls "$out/${PKG}_"*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || tail -n 30 "$out/build.log"
check "dpkg-buildpackage makes $PKG" [ -n "$deb" ]
[ -n "$deb" ] || exit 1
deb_contents() {
	local list
	list=$(dpkg-deb -c "$deb") || return 1
	grep -q "/usr/lib/postgresql/$LF_DEBIAN_MAJOR/lib/lease_fence\\.so\$" <<<"$list" &&
		grep -q "/usr/share/postgresql/$LF_DEBIAN_MAJOR/extension/lease_fence\\.control\$" <<<"$list" &&
		grep -q "/usr/share/postgresql/$LF_DEBIAN_MAJOR/extension/lease_fence--1\\.0\\.sql\$" <<<"$list"
}
check "the package holds lease_fence.so and the extension files for $LF_DEBIAN_MAJOR" deb_contents

# 3. the package where PostgreSQL NN has it: dpkg -i in a root of our own,
# else its files extracted into a private copy of the installation
inst=""
if [ "$own_root" = 1 ]; then
	if dpkg_locked -i "$deb" >"$out/install.log" 2>&1; then installed=1; inst=/; else cat "$out/install.log"; fi
	check "dpkg -i $PKG installs (in a root of the tests' own)" [ "$installed" = 1 ]
else
	copy=$LF_WORK/installed
	extract() {
		local lib
		lf_copy_debian_pg "$copy" || return 1
		# (lf_remove_installed reads PG_CONFIG: the copy's, for the moment)
		PG_CONFIG=$copy/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin/pg_config lf_remove_installed || return 1
		dpkg-deb -x "$deb" "$copy" || return 1
		lib=$copy/usr/lib/postgresql/$LF_DEBIAN_MAJOR/lib
		[ -f "$lib/lease_fence.so" ] && [ -f "$copy/usr/share/postgresql/$LF_DEBIAN_MAJOR/extension/lease_fence.control" ]
	}
	if extract >"$out/install.log" 2>&1; then inst=$copy; else cat "$out/install.log"; fi
	check "$PKG's files, extracted into a private copy of PostgreSQL $LF_DEBIAN_MAJOR, are where that installation loads them" [ -n "$inst" ]
fi
if [ -n "$inst" ]; then
	PG_BIN=${inst%/}/usr/lib/postgresql/$LF_DEBIAN_MAJOR/bin
	lf_start_pg || exit 1
	create_ext() {
		local v control
		control=$(sed -nE "s/^default_version = '([^']+)'.*/\1/p" "$top/lease_fence.control")
		v=$(lf_as_user "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 \
			-c 'CREATE EXTENSION lease_fence' \
			-c "SELECT extversion FROM pg_extension WHERE extname = 'lease_fence'") || return 1
		[ "$v" = "$control" ] || { echo "installed version $v, expected $control"; return 1; }
	}
	check "CREATE EXTENSION lease_fence from the package (version of the control file)" create_ext
	lf_stop_pg

	lf_log "demo against the installed package"
	(cd "$src" && LF_INSTALLED=1 LF_INSTALLED_ROOT=${inst%/} bash demo/run.sh) >"$out/demo.out" 2>&1
	rc=$?
	cat "$out/demo.out"
	check "demo (LF_INSTALLED=1) exits 0" [ "$rc" -eq 0 ]
	check "demo: A's stale write is rejected with LF001" \
		grep -qE '^4 +A +UPDATE .* rejected: LF001' "$out/demo.out"
	check "demo: nothing was built" bash -c "! grep -q 'building lease_fence' \"\$1\"" _ "$out/demo.out"
fi

# 4. remove (in the root), or the machine as it was
if [ "$installed" = 1 ]; then
	dpkg_locked -r "$PKG" >"$out/remove.log" 2>&1 && installed=0
	gone() {
		[ "$installed" = 0 ] || { cat "$out/remove.log"; return 1; }
		! ls "/usr/lib/postgresql/$LF_DEBIAN_MAJOR/lib/lease_fence.so" "/usr/share/postgresql/$LF_DEBIAN_MAJOR"/extension/lease_fence* 2>/dev/null
	}
	check "dpkg -r removes every file of the package" gone
elif [ "$own_root" != 1 ]; then
	unchanged() {
		local now
		now=$(machine_files)
		[ "$now" = "$machine_before" ] && return 0
		echo "before:"; echo "${machine_before:-(no lease_fence file, no $PKG)}"
		echo "after:"; echo "${now:-(no lease_fence file, no $PKG)}"
		return 1
	}
	check "the machine's PostgreSQL $LF_DEBIAN_MAJOR is as it was ($(grep -c '/lease_fence' <<<"$machine_before") lease_fence files before, the same after)" unchanged
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
