#!/usr/bin/env bash
# clients/java/unit.sh — the Java client's server-less unit tests, as TAP.
#
#   bash clients/java/unit.sh      (from anywhere; test/unit.sh runs it from
#                                   the repository root)
#
# Compiles the library and the server-less tests into LF_UNIT_WORK with javac
# and Debian's jars, as build.sh does, then runs only the test classes that need
# no server — TranslateTest (SQLSTATEs and statuses to exceptions) and
# AnswerTableTest (every "statuses" row of scripts/answers.json against
# LeaseFence.acquireResult / renewResult / releaseResult) — with the JUnit
# console launcher, and prints one TAP line per test case ("ok N - ..." /
# "not ok N - ...") from its XML report (unit/JunitXmlTap.java). No server, no network; well under a minute.
#
# Environment:
#   LF_UNIT_WORK   an empty writable directory for the build output (default:
#                  a new mktemp directory, removed at the end); nothing is
#                  written into the source tree
#   LF_ANSWERS     the answer table to test against (default:
#                  scripts/answers.json of this repository), e.g. an edited
#                  copy, to see a changed row fail
#   LF_JAVA_LIB    where Debian's jars are (default /usr/share/java)
#
# Exit status: 0 when every test case passed; non-zero when one failed, or
# the build, the launcher or the report failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
LIB=${LF_JAVA_LIB:-/usr/share/java}

if [ -n "${LF_UNIT_WORK:-}" ]; then
	work=$LF_UNIT_WORK/java
	mkdir -p "$work" || exit 1
else
	work=$(mktemp -d) || exit 1
	trap 'rm -rf "$work"' EXIT
fi

answers=${LF_ANSWERS:-$repo/scripts/answers.json}
case "$answers" in /*) ;; *) answers=$PWD/$answers ;; esac
if [ ! -f "$answers" ]; then
	echo "not ok 1 - java: the answer table $answers does not exist"
	exit 1
fi
echo "# java: answers from $answers"

need_jar() {	# name: the unversioned jar under $LIB, else the newest versioned one
	local f=$LIB/$1.jar
	[ -f "$f" ] || f=$(ls -1 "$LIB"/"$1"-[0-9]*.jar 2>/dev/null | sort -V | tail -n 1)
	if [ -z "$f" ] || [ ! -f "$f" ]; then
		echo "not ok 1 - java: no $1.jar under $LIB (Debian: $2)"
		exit 1
	fi
	printf '%s\n' "$f"
}
command -v javac >/dev/null || { echo "not ok 1 - java: javac not found (Debian: openjdk-17-jdk-headless)"; exit 1; }
pgjdbc=$(need_jar postgresql libpostgresql-jdbc-java) || exit 1
standalone=$(need_jar junit-platform-console-standalone junit5) || exit 1
api=$(need_jar junit-jupiter-api junit5) || exit 1
gson=$(need_jar gson libgoogle-gson-java) || exit 1
cp=$pgjdbc:$api:$gson
for j in opentest4j apiguardian-api junit-platform-commons; do
	f=$(ls -1 "$LIB/$j.jar" "$LIB"/"$j"-[0-9]*.jar 2>/dev/null | head -n 1)
	[ -n "$f" ] && cp=$cp:$f
done

# One javac, as build.sh compiles (--release 17, the same jars): the library,
# the server-less test classes and the report converter. (build.sh, run by
# ci.sh, compiles every test class.)
rm -rf "$work/classes"
mkdir -p "$work/classes"
{
	# not dev.leasefence.quartz: it needs Quartz, the unit tests do not
	find "$here/src/main/java" -name '*.java' -not -path '*/dev/leasefence/quartz/*'
	for t in TranslateTest AnswerTableTest; do
		echo "$here/src/test/java/dev/leasefence/$t.java"
	done
	echo "$here/unit/JunitXmlTap.java"
} >"$work/sources.txt"
if ! javac --release 17 -encoding UTF-8 -Xlint:all -Xlint:-serial -cp "$cp" \
	-d "$work/classes" @"$work/sources.txt" >"$work/build.log" 2>&1; then
	sed 's/^/# /' "$work/build.log"
	echo "not ok 1 - java: the build failed"
	exit 1
fi

# JUnit 1.10+ wants the "execute" subcommand, 1.9 (Debian 12) the options alone
launcher=(java "-Dlf.answers=$answers" -jar "$standalone")
v=$(basename "$(readlink -f "$standalone")" .jar)
v=${v##*-}
case "$v" in
	1.[0-9] | 1.[0-9].*) ;;
	[0-9]*) launcher+=(execute) ;;
esac
rm -rf "$work/reports"
"${launcher[@]}" --disable-banner --disable-ansi-colors --details=none \
	--class-path "$work/classes:$pgjdbc:$gson" \
	--select-class dev.leasefence.TranslateTest --select-class dev.leasefence.AnswerTableTest \
	--reports-dir "$work/reports" >"$work/launcher.log" 2>&1
launcher_rc=$?

report=$(ls -1 "$work"/reports/TEST-junit-jupiter*.xml 2>/dev/null | head -n 1)
if [ -z "$report" ]; then
	sed 's/^/# /' "$work/launcher.log"
	echo "not ok 1 - java: the JUnit launcher wrote no report (exit $launcher_rc)"
	exit 1
fi
java -cp "$work/classes" JunitXmlTap "$report"
tap_rc=$?
if [ "$tap_rc" -eq 1 ]; then
	exit 1			# a test case failed: its TAP line says which and why
fi
if [ "$tap_rc" -ne 0 ] || [ "$launcher_rc" -ne 0 ]; then
	sed 's/^/# /' "$work/launcher.log"
	echo "not ok - java: the JUnit launcher failed (exit $launcher_rc), report: exit $tap_rc"
	exit 1
fi
exit 0
