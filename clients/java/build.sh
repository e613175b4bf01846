#!/usr/bin/env bash
# clients/java/build.sh — build the lease_fence Java client and run its tests.
#
#   ./build.sh            compile src/main/java (javac --release 17) against
#                         pgjdbc, write $BUILD/lease-fence.jar, compile
#                         src/test/java against that jar and JUnit 5, and,
#                         when LF_JDBC_URL is set, run the tests with the
#                         JUnit console launcher
#
# Only Debian's jars: pgjdbc (libpostgresql-jdbc-java), Quartz 2.3
# (libquartz2-java: compiles dev.leasefence.quartz, an optional dependency
# the rest of the jar never loads; its tests also need slf4j-api), and for the tests
# JUnit 5 (junit5) and Gson (libgoogle-gson-java: the answer table's JSON),
# found under /usr/share/java (or LF_JAVA_LIB) by name, whatever their version.
# No Maven (pom.xml is there for Maven users; ci.sh checks it), no Gradle, no
# network.
#
# Environment:
#   LF_JAVA_BUILD   build directory (default: build/ beside this script)
#   LF_JDBC_URL     jdbc:postgresql://host:port/db — run the tests against it
#   LF_JDBC_USER, LF_JDBC_PASSWORD_FILE   who the tests log in as
#
# After a test run, $BUILD/test-counts holds "tests skipped failures errors"
# from the JUnit XML report (ci.sh reads it). Exit status: non-zero when the
# build failed or a test failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${LF_JAVA_BUILD:-$here/build}
LIB=${LF_JAVA_LIB:-/usr/share/java}
VERSION=1.5.0

log() { printf '%s\n' "java build: $*" >&2; }

# A jar under $LIB by name: the unversioned link if there is one, else the
# newest versioned one (name-1.2.3.jar).
find_jar() {
	local name=$1 f
	if [ -f "$LIB/$name.jar" ]; then
		printf '%s\n' "$LIB/$name.jar"
		return 0
	fi
	f=$(ls -1 "$LIB"/"$name"-[0-9]*.jar 2>/dev/null | sort -V | tail -n 1 || true)
	if [ -n "$f" ]; then
		printf '%s\n' "$f"
		return 0
	fi
	return 1
}

need_jar() {
	find_jar "$1" || { log "cannot find $1.jar under $LIB (Debian package: $2)"; exit 1; }
}

command -v javac >/dev/null || { log "javac not found (Debian: openjdk-17-jdk-headless or default-jdk-headless)"; exit 1; }
command -v jar >/dev/null || { log "jar not found (a JDK, not a JRE)"; exit 1; }

PGJDBC=$(need_jar postgresql libpostgresql-jdbc-java)
QUARTZ=$(need_jar quartz2 libquartz2-java)
SLF4J=$(need_jar slf4j-api libslf4j-java)
SLF4J_NOP=$(find_jar slf4j-nop || true)
JUPITER_API=$(need_jar junit-jupiter-api junit5)
GSON=$(need_jar gson libgoogle-gson-java)
OPENTEST4J=$(find_jar opentest4j || true)
APIGUARDIAN=$(find_jar apiguardian-api || true)
COMMONS=$(find_jar junit-platform-commons || true)

log "$(javac -version 2>&1), pgjdbc $(basename "$(readlink -f "$PGJDBC")")"

rm -rf "$BUILD/classes" "$BUILD/test-classes" "$BUILD/test-reports" "$BUILD/test-counts" \
	"$BUILD/lease-fence.jar"
mkdir -p "$BUILD/classes" "$BUILD/test-classes"

# the library: the core against pgjdbc alone (it must never need Quartz),
# then dev.leasefence.quartz against it and Quartz
find "$here/src/main/java" -name '*.java' -not -path '*/dev/leasefence/quartz/*' | sort \
	>"$BUILD/main-sources.txt"
javac --release 17 -encoding UTF-8 -Xlint:all -Xlint:-serial \
	-cp "$PGJDBC" -d "$BUILD/classes" @"$BUILD/main-sources.txt"
find "$here/src/main/java/dev/leasefence/quartz" -name '*.java' | sort >"$BUILD/quartz-sources.txt"
javac --release 17 -encoding UTF-8 -Xlint:all -Xlint:-serial \
	-cp "$BUILD/classes:$PGJDBC:$QUARTZ" -d "$BUILD/classes" @"$BUILD/quartz-sources.txt"

cat >"$BUILD/MANIFEST.MF" <<EOF
Implementation-Title: lease_fence Java client
Implementation-Version: $VERSION
Implementation-Vendor: lease_fence
Specification-Title: lease_fence Java client
Specification-Version: $VERSION
Automatic-Module-Name: dev.leasefence
EOF
jar --create --file "$BUILD/lease-fence.jar" --manifest "$BUILD/MANIFEST.MF" \
	-C "$BUILD/classes" .
log "wrote $BUILD/lease-fence.jar"

# the tests, against the jar (as a user would)
test_cp=$BUILD/lease-fence.jar:$PGJDBC:$JUPITER_API:$GSON:$QUARTZ:$SLF4J
for j in "$OPENTEST4J" "$APIGUARDIAN" "$COMMONS"; do
	[ -n "$j" ] && test_cp=$test_cp:$j
done
find "$here/src/test/java" -name '*.java' | sort >"$BUILD/test-sources.txt"
javac --release 17 -encoding UTF-8 -cp "$test_cp" -d "$BUILD/test-classes" @"$BUILD/test-sources.txt"
log "compiled the tests"

if [ -z "${LF_JDBC_URL:-}" ]; then
	log "LF_JDBC_URL is not set: tests compiled, not run"
	exit 0
fi

# The JUnit console launcher: the standalone jar (Debian's carries its engines
# on its manifest Class-Path). JUnit 1.10+ has an "execute" subcommand; 1.9
# takes the options alone.
STANDALONE=$(need_jar junit-platform-console-standalone junit5)
launcher=(java -jar "$STANDALONE")
help=$(java -jar "$STANDALONE" --help 2>&1 || true)
if printf '%s\n' "$help" | grep -qE '^[[:space:]]+execute([[:space:]]|$)'; then
	launcher+=(execute)
fi
run_cp=$BUILD/test-classes:$BUILD/lease-fence.jar:$PGJDBC:$GSON:$QUARTZ:$SLF4J
[ -n "$SLF4J_NOP" ] && run_cp=$run_cp:$SLF4J_NOP		# quiet: Quartz logs through slf4j
mkdir -p "$BUILD/test-reports"
rc=0
"${launcher[@]}" --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests \
	--class-path "$run_cp" --scan-class-path "$BUILD/test-classes" \
	--reports-dir "$BUILD/test-reports" || rc=$?

# counts from the XML report: tests, skipped, failures, errors
report=$(ls -1 "$BUILD"/test-reports/TEST-junit-jupiter*.xml 2>/dev/null | head -n 1 || true)
if [ -z "$report" ]; then
	log "no JUnit report (launcher exit $rc)"
	exit 1
fi
attr() {	# name: the attribute of the first <testsuite> element
	grep -o "<testsuite [^>]*" "$report" | head -n 1 | grep -oE " $1=\"[0-9]+\"" |
		grep -oE '[0-9]+' || echo 0
}
printf '%s %s %s %s\n' "$(attr tests)" "$(attr skipped)" "$(attr failures)" "$(attr errors)" \
	>"$BUILD/test-counts"
if [ "$(attr tests)" -eq 0 ]; then
	log "JUnit ran no test"
	exit 1
fi
log "JUnit: $(attr tests) tests, $(attr skipped) skipped, $(attr failures) failures, $(attr errors) errors (launcher exit $rc)"
exit "$rc"
