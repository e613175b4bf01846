#!/usr/bin/env bash
# test/unit/versions.sh — every client library, and META.json, says the
# extension's version: the control file's default_version X.Y as X.Y.0 (the
# libraries are versioned with the extension).  Reads the files only: the
# package manifests (pyproject.toml, package.json and its lock file,
# pom.xml, the gem's version.rb) and the version each library reports at
# run time (lease_fence.__version__, LeaseFence.VERSION, build.sh's jar,
# Go's Version).  Prints TAP lines ("ok N - ..."), exits non-zero when any
# failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
control=$(sed -nE "s/^default_version = '([^']+)'.*/\1/p" "$root/lease_fence.control")
want="$control.0"
n=0
failed=0
check() {	# name, the version found
	n=$((n + 1))
	if [ "$2" = "$want" ]; then
		echo "ok $n - $1 says $want, the extension's version"
	else
		failed=$((failed + 1))
		echo "not ok $n - $1 says '$2', not $want (lease_fence.control: $control)"
	fi
}
first() { sed -nE "$1" "$2" | head -n 1; }
check "META.json" "$(first 's/^ *"version": *"([^"]+)".*/\1/p' "$root/META.json")"
check "clients/python/pyproject.toml" "$(first 's/^version = "([^"]+)".*/\1/p' "$root/clients/python/pyproject.toml")"
check "lease_fence.__version__" "$(first 's/^__version__ = "([^"]+)".*/\1/p' "$root/clients/python/src/lease_fence/__init__.py")"
check "clients/node/package.json" "$(first 's/^  "version": "([^"]+)".*/\1/p' "$root/clients/node/package.json")"
check "clients/node/package-lock.json" "$(first 's/^  "version": "([^"]+)".*/\1/p' "$root/clients/node/package-lock.json")"
check "clients/java/pom.xml" "$(first 's/^  <version>([^<]+)<\/version>.*/\1/p' "$root/clients/java/pom.xml")"
check "clients/java/build.sh" "$(first 's/^VERSION=(.+)$/\1/p' "$root/clients/java/build.sh")"
check "LeaseFence.VERSION (Java)" "$(first 's/.*String VERSION = "([^"]+)".*/\1/p' "$root/clients/java/src/main/java/dev/leasefence/LeaseFence.java")"
check "Version (Go)" "$(first 's/^const Version = "([^"]+)".*/\1/p' "$root/clients/go/leasefence.go")"
check "LeaseFence::VERSION (Ruby)" "$(first 's/^ *VERSION = "([^"]+)".*/\1/p' "$root/clients/ruby/lib/lease_fence/version.rb")"
[ "$failed" -eq 0 ]
