#!/usr/bin/env bash
# test/unit/c.sh — the extension's server-less unit tests: no PostgreSQL
# server, no Redis.  Builds a small test binary (test/unit/lf_unit.c) with
# the project's own src/redis/redis_reply.c (the one decoder of script replies),
# src/fence/generation_math.h and src/lease/lease.h, against pg_config's server headers,
# hiredis and libpgport, with the project's warnings as errors, then checks
#   - the decoder against every row of the answer table (replies; errors,
#     for every script; transport), each reply read by hiredis's reader
#     whole, in two pieces at every cut and byte by byte
#     (test/unit/answers.py, /usr/bin/python3, standard library only);
#   - the generation / epoch / heal / validity arithmetic, the bounded
#     reader and the text from Redis, also under valgrind when it is there.
# Prints TAP lines ("ok N - ..." / "not ok N - ..."), then "# c: N passed,
# N failed"; exits non-zero when any failed or the binary could not be
# built.  Run from anywhere; writes nothing into the source tree.
#
#   LF_UNIT_WORK=DIR     where to build (default: a new mktemp -d, removed)
#   LF_ANSWERS=FILE      the answer table to check against (default:
#                        scripts/answers.json of this repository)
#   PG_CONFIG=...        pg_config to take the headers from (default: on PATH)
#   CC=...               the compiler (default: cc)
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
answers=${LF_ANSWERS:-$root/scripts/answers.json}
pg_config=${PG_CONFIG:-pg_config}
cc=${CC:-cc}
python=/usr/bin/python3
[ -x "$python" ] || python=python3

if [ -n "${LF_UNIT_WORK:-}" ]; then
	work=$LF_UNIT_WORK/c
	mkdir -p "$work" || { echo "not ok 1 - c: cannot make $work"; exit 1; }
else
	work=$(mktemp -d /tmp/lf_unit_c.XXXXXX) || exit 1
	trap 'rm -rf "$work"' EXIT
fi

n=0
passed=0
failed=0
emit() {
	# relay unnumbered TAP lines ("ok - x" / "not ok - x" / "# ..."), numbered
	local line
	while IFS= read -r line; do
		case $line in
			"ok - "*) n=$((n + 1)); passed=$((passed + 1)); echo "ok $n - ${line#ok - }" ;;
			"not ok - "*) n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - ${line#not ok - }" ;;
			*) echo "# ${line#\# }" ;;
		esac
	done
}

incdir=$("$pg_config" --includedir-server 2>/dev/null)
libdir=$("$pg_config" --libdir 2>/dev/null)
pkglibdir=$("$pg_config" --pkglibdir 2>/dev/null)
libpgport=
for d in "$libdir" "$pkglibdir" "$(dirname "$pkglibdir")/lib"; do
	[ -f "$d/libpgport.a" ] && { libpgport="$d/libpgport.a"; break; }
done
if [ -z "$incdir" ] || [ ! -f "$incdir/postgres.h" ]; then
	echo "not ok 1 - c: build the test binary (no server headers from $pg_config)"
	echo "# c: 0 passed, 1 failed"
	exit 1
fi

# the project's warnings (the Makefile's PG_CFLAGS with WERROR=1)
flags="-std=gnu99 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Werror -fwrapv -fno-strict-aliasing"
if ! $cc $flags -I"$root/src" -I"$incdir" -o "$work/lf_unit" \
		"$root/test/unit/lf_unit.c" "$root/src/redis/redis_reply.c" \
		${libpgport:+"$libpgport"} -lhiredis -lm >"$work/build.log" 2>&1; then
	sed 's/^/# /' "$work/build.log"
	echo "not ok 1 - c: build the test binary (cc, server headers, hiredis)"
	echo "# c: 0 passed, 1 failed"
	exit 1
fi
n=1; passed=1
echo "ok 1 - c: build the test binary with the project's src/redis/redis_reply.c (-Wall -Wextra -Werror)"

emit < <("$work/lf_unit" --arith; [ $? -le 1 ] || echo "not ok - the arithmetic checks ran to their end")
emit < <("$python" "$root/test/unit/answers.py" "$work/lf_unit" "$answers" 2>&1; rc=$?;
	[ $rc -le 1 ] || echo "not ok - the answer table's checks ran to their end (exit $rc)")
# the bounded reader's refusals free what they had read: the arithmetic
# checks again under valgrind, when the machine has it
if command -v valgrind >/dev/null 2>&1; then
	if valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=9 \
			"$work/lf_unit" --arith >"$work/valgrind.out" 2>"$work/valgrind.log"; then
		emit <<<"ok - the checks under valgrind: no invalid access, nothing leaked (the refused replies included)"
	else
		sed 's/^/# /' "$work/valgrind.log"
		emit <<<"not ok - the checks under valgrind: no invalid access, nothing leaked (the refused replies included)"
	fi
fi

echo "# c: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$n" -gt 1 ]
