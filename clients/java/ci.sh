#!/usr/bin/env bash
# clients/java/ci.sh — build the Java client and run its JUnit tests
# (build.sh), run them again through the library's test command `mvn test`
# offline with Debian's Maven (when installed) and package the jar with it,
# and run the examples examples/java/TwoHolders.java and
# examples/quartz/NightlyReport.java against the built jar, as a user would.
#
# Run by test/clients/run.sh from a copy of the tree, cwd = clients/java, with
# LF_JDBC_URL, LF_JDBC_USER, LF_JDBC_PASSWORD_FILE, LF_REDIS_SOCK, LF_SRC and
# LF_CLIENT_WORK (a writable empty dir: the build goes there; build/ here
# without it). The last line is exactly "java: N passed, N failed": N counts
# the JUnit test cases of build.sh (skipped ones in neither), `mvn test`
# (one), `mvn package` (one) and each example; a build that fails, or a
# launcher that writes no report, counts as one failure.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=${LF_SRC:-$(cd "$here/../.." && pwd)}
if [ -n "${LF_CLIENT_WORK:-}" ]; then
	export LF_JAVA_BUILD=$LF_CLIENT_WORK/build
else
	export LF_JAVA_BUILD=${LF_JAVA_BUILD:-$here/build}
fi
BUILD=$LF_JAVA_BUILD
LIB=${LF_JAVA_LIB:-/usr/share/java}

passed=0
failed=0
finish() {
	echo "java: $passed passed, $failed failed"
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
	exit
}

echo "== java: ./build.sh (build in $BUILD)"
rc=0
bash "$here/build.sh" || rc=$?
if [ -f "$BUILD/test-counts" ]; then
	read -r tests skipped failures errors <"$BUILD/test-counts"
	bad=$((failures + errors))
	ok=$((tests - skipped - bad))
	[ "$rc" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	[ "$tests" -eq 0 ] && bad=1		# ran no test: the launcher found no engine or class
	passed=$((passed + ok)); failed=$((failed + bad))
	echo "== java: JUnit: $ok passed, $bad failed, $skipped skipped"
else
	echo "== java: build.sh did not run the tests (exit $rc)"
	failed=$((failed + 1))
fi

# pom.xml: `mvn test`, the library's own test command, with the same sources
# and tests through Debian's Maven, offline, against Debian's repository
# (/usr/share/maven-repo; .mvn/maven.config says so), against this run's
# servers: every test runs (a skipped one counts as a failure: the servers
# are there); then `mvn package` (tests not run again) makes the jar. Each
# is one case. Skipped, and said so, when maven or its plugins are not
# installed (test/clients/run.sh installs them; Debian: maven libmaven-compiler-plugin-java
# libmaven-resources-plugin-java libmaven-jar-plugin-java libsurefire-java
# libmaven-install-plugin-java libgoogle-gson-java libquartz2-java).
if command -v mvn >/dev/null && [ -d /usr/share/maven-repo/org/apache/maven/plugins/maven-surefire-plugin ]; then
	# the versions this repository holds (pom.xml names Debian 12's; Debian 13
	# packages newer ones): the highest numbered directory of each artifact
	repo=/usr/share/maven-repo
	versions=()
	for pv in lf.pgjdbc.version=org/postgresql/postgresql \
		lf.junit.version=org/junit/jupiter/junit-jupiter \
		lf.gson.version=com/google/code/gson/gson \
		lf.quartz.version=org/quartz-scheduler/quartz \
		lf.slf4j.version=org/slf4j/slf4j-nop \
		lf.resources.version=org/apache/maven/plugins/maven-resources-plugin \
		lf.compiler.version=org/apache/maven/plugins/maven-compiler-plugin \
		lf.surefire.version=org/apache/maven/plugins/maven-surefire-plugin \
		lf.jar.version=org/apache/maven/plugins/maven-jar-plugin \
		lf.install.version=org/apache/maven/plugins/maven-install-plugin; do
		v=$(ls -1 "$repo/${pv#*=}" 2>/dev/null | grep -E '^[0-9]' | sort -V | tail -n 1)
		[ -n "$v" ] && versions+=("-D${pv%%=*}=$v")
	done
	mvn_args=(-o -B -q -Dmaven.repo.local="$repo" "${versions[@]}" -Dlf.maven.target="$BUILD/maven")
	echo "== java: mvn test (Debian's maven-repo: ${versions[*]}; build in $BUILD/maven)"
	rc=0
	(cd "$here" && mvn "${mvn_args[@]}" test) >"$BUILD/maven-test.log" 2>&1 || rc=$?
	# tests skipped failures errors, summed over surefire's reports
	read -r mt ms mf me < <(cat "$BUILD"/maven/surefire-reports/TEST-*.xml 2>/dev/null |
		grep -o '<testsuite [^>]*' | awk '{
			for (i = 1; i <= NF; i++) if (split($i, kv, "=") == 2) { gsub(/"/, "", kv[2]); n[kv[1]] += kv[2] }
		} END { printf "%d %d %d %d\n", n["tests"], n["skipped"], n["failures"], n["errors"] }')
	echo "== java: mvn test: exit $rc; $mt tests, $ms skipped, $mf failures, $me errors"
	if [ "$rc" -eq 0 ] && [ "$mt" -gt 0 ] && [ $((ms + mf + me)) -eq 0 ]; then
		passed=$((passed + 1))
		echo "== java: mvn test passed"
	else
		tail -n 60 "$BUILD/maven-test.log"
		failed=$((failed + 1))
		echo "== java: mvn test FAILED"
	fi
	echo "== java: mvn package -DskipTests"
	if (cd "$here" && mvn "${mvn_args[@]}" -DskipTests package) >"$BUILD/maven.log" 2>&1 &&
		[ -f "$BUILD/maven/lease-fence-1.5.0.jar" ]; then
		passed=$((passed + 1))
		echo "== java: mvn package passed"
	else
		tail -n 40 "$BUILD/maven.log"
		failed=$((failed + 1))
		echo "== java: mvn package FAILED"
	fi
else
	echo "== java: mvn test and package SKIPPED: Debian's maven and its plugins are not installed"
fi

# The example, compiled and run against the jar on a classpath
if [ ! -f "$BUILD/lease-fence.jar" ]; then
	echo "== java: no jar: the example cannot run"
	failed=$((failed + 1))
	finish
fi
pgjdbc=$LIB/postgresql.jar
[ -f "$pgjdbc" ] || pgjdbc=$(ls -1 "$LIB"/postgresql-[0-9]*.jar 2>/dev/null | sort -V | tail -n 1)
example=$src/examples/java/TwoHolders.java
cp="$BUILD/lease-fence.jar:$pgjdbc"
echo "== java: example $example"
rm -rf "$BUILD/example"
mkdir -p "$BUILD/example"
if javac --release 17 -encoding UTF-8 -cp "$cp" -d "$BUILD/example" "$example" &&
	timeout -k 5 120 java -cp "$BUILD/example:$cp" TwoHolders; then
	passed=$((passed + 1))
	echo "== java: example passed"
else
	failed=$((failed + 1))
	echo "== java: example FAILED"
fi

# The Quartz example: a real scheduler, a FencedQuartzJob fired twice with
# the same data (the second resumes from the first's checkpoint), compiled
# and run against the jar, pgjdbc and Debian's Quartz (libquartz2-java)
quartz=$LIB/quartz2.jar
slf4j=$LIB/slf4j-api.jar
example=$src/examples/quartz/NightlyReport.java
qcp="$cp:$quartz:$slf4j"
[ -f "$LIB/slf4j-nop.jar" ] && qcp=$qcp:$LIB/slf4j-nop.jar
echo "== java: example $example"
rm -rf "$BUILD/example-quartz"
mkdir -p "$BUILD/example-quartz"
if javac --release 17 -encoding UTF-8 -cp "$qcp" -d "$BUILD/example-quartz" "$example" &&
	timeout -k 5 120 java -cp "$BUILD/example-quartz:$qcp" NightlyReport; then
	passed=$((passed + 1))
	echo "== java: quartz example passed"
else
	failed=$((failed + 1))
	echo "== java: quartz example FAILED"
fi
finish
