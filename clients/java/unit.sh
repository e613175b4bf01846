#!/usr/bin/env bash
# clients/java/unit.sh — the Java client's server-less unit tests, as TAP.
#
#   bash clients/java/unit.sh      (from anywhere; test/unit.sh runs it from
#                                   the repository root)
#
# Builds the library and its tests with ./build.sh (javac and Debian's jars;
# nothing is run against a server), then runs only the test classes that need
# no server — TranslateTest (SQLSTATEs and statuses to exceptions) and
# AnswerTableTest (every "statuses" row of scripts/answers.json against
# LeaseFence.acquireResult / renewResult / releaseResult) — with the JUnit
# console launcher, and prints one TAP line per test case ("ok N - ..." /
# "not ok N - ...") from its XML report (unit/JunitXmlTap.java).
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

# the library and the tests, compiled (build.sh runs nothing without LF_JDBC_URL)
if ! env -u LF_JDBC_URL LF_JAVA_BUILD="$work/build" LF_JAVA_LIB="$LIB" \
	bash "$here/build.sh" >"$work/build.log" 2>&1; then
	sed 's/^/# /' "$work/build.log"
	echo "not ok 1 - java: build.sh failed"
	exit 1
fi

standalone=$LIB/junit-platform-console-standalone.jar
[ -f "$standalone" ] ||
	standalone=$(ls -1 "$LIB"/junit-platform-console-standalone-[0-9]*.jar 2>/dev/null | sort -V | tail -n 1)
pgjdbc=$LIB/postgresql.jar
[ -f "$pgjdbc" ] || pgjdbc=$(ls -1 "$LIB"/postgresql-[0-9]*.jar 2>/dev/null | sort -V | tail -n 1)
if [ -z "$standalone" ] || [ ! -f "$standalone" ]; then
	echo "not ok 1 - java: no junit-platform-console-standalone.jar under $LIB (Debian: junit5)"
	exit 1
fi
launcher=(java "-Dlf.answers=$answers" -jar "$standalone")
if java -jar "$standalone" --help 2>&1 | grep -qE '^[[:space:]]+execute([[:space:]]|$)'; then
	launcher+=(execute)		# JUnit 1.10+
fi
rm -rf "$work/reports"
"${launcher[@]}" --disable-banner --disable-ansi-colors --details=none \
	--class-path "$work/build/test-classes:$work/build/lease-fence.jar:$pgjdbc" \
	--select-class dev.leasefence.TranslateTest --select-class dev.leasefence.AnswerTableTest \
	--reports-dir "$work/reports" >"$work/launcher.log" 2>&1
launcher_rc=$?

report=$(ls -1 "$work"/reports/TEST-junit-jupiter*.xml 2>/dev/null | head -n 1)
if [ -z "$report" ]; then
	sed 's/^/# /' "$work/launcher.log"
	echo "not ok 1 - java: the JUnit launcher wrote no report (exit $launcher_rc)"
	exit 1
fi
java "$here/unit/JunitXmlTap.java" "$report"
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
