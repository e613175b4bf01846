#!/usr/bin/env bash
# test/layers.sh — every call in src/ goes down the layers, and a file's
# layer is its folder (docs/design.md, "The layers"):
#   0 src/base/    the counters, the histograms, differences between majors
#   1 src/fence/   the fence: no Redis at all
#   2 src/redis/   the only files that know the protocol (hiredis)
#   3 src/lease/   the leases
#   4 src/*.c      the module's entry (_PG_init)
# Reads the object files, as the linker would: `nm` says which file defines
# each global symbol and which files use it; an edge A -> B is a symbol A
# uses and B defines.  Fails, naming files and symbol,
#   - on an edge to a higher layer (an upward call);
#   - on a loop between files of one layer (calls inside a layer are fine
#     as long as they never come back);
#   - on any symbol of hiredis or OpenSSL used below the Redis layer;
#   - on a function of a layer's internal header (src/LAYER/internal.h:
#     the Redis layer's command senders and key names) used
#     from another folder: above the Redis layer a script is run by its own
#     typed function (src/redis/redis.h), nobody builds an argv;
#   - on an object file in no layer's folder;
#   - reading the sources beside the objects (else this repository's src/):
#     any file outside src/redis/ that includes hiredis, mentions redisReply
#     or REDIS_REPLY_, or includes a layer's internal header from another
#     folder.
#
#   bash test/layers.sh [DIR]       DIR: src/ with its objects (default: src)
#   bash test/layers.sh --self-test [DIR]
#                                   check DIR, then break each rule in a copy
#                                   of it (probe objects, planted sources) and
#                                   check that each is refused (test/run.sh's
#                                   "layers" suite)
set -uo pipefail

LAYERS="base fence redis lease"

layer_of() {	# folder -> number; the top (src/*.c) is one above the last
	local i=0 l
	[ "$1" = . ] && { echo 4; return; }
	for l in $LAYERS; do
		[ "$l" = "$1" ] && { echo "$i"; return; }
		i=$((i + 1))
	done
	echo -1
}

# the functions a layer's internal header declares: "name folder" per line
internal_symbols() {
	local dir=$1 h
	for h in "$dir"/*/internal.h; do
		[ -e "$h" ] || continue
		# a declaration's name: the word before "(" on an extern line
		sed -nE 's/^extern[^(]*[^A-Za-z0-9_(]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\(.*/\1/p' "$h" |
			sed "s|\$| $(basename "$(dirname "$h")")|"
	done
}

check() {
	local dir=$1 o rel folder l
	local -A layer defs internal
	local -a files=() problems=()
	while read -r sym folder; do internal[$sym]=$folder; done < <(internal_symbols "$dir")

	while IFS= read -r o; do
		rel=${o#"$dir"/}; rel=${rel%.o}
		folder=$(dirname "$rel")
		l=$(layer_of "$folder")
		files+=("$rel")
		if [ "$l" -lt 0 ]; then
			problems+=("$rel.o: not in a layer's folder (src/{${LAYERS// /,}}/ or src/ for the module's entry)")
			continue
		fi
		layer[$rel]=$l
		# global definitions: text, data, bss, read-only, common
		while read -r sym; do defs[$sym]=$rel; done < <(nm "$o" | awk 'NF == 3 && $2 ~ /^[TDBRC]$/ { print $3 }')
	done < <(find "$dir" -name '*.o' | sort)
	[ ${#files[@]} -gt 0 ] || { echo "layers: no object files under $dir (run make first)"; return 2; }

	# edges inside a layer, for the loop check: "from to sym" lines
	local -a same=()
	local uses=0 from to sym
	for from in "${files[@]}"; do
		[ -n "${layer[$from]+x}" ] || continue
		while read -r sym; do
			to=${defs[$sym]:-}
			if [ -n "${internal[$sym]+x}" ] && [ "$(dirname "$from")" != "${internal[$sym]}" ]; then
				problems+=("$from uses $sym, internal to src/${internal[$sym]}/ (its internal.h): call the layer's typed functions instead")
			fi
			if [ -z "$to" ]; then
				# from outside lease_fence: only the Redis layer and above may use hiredis or OpenSSL
				if [ "${layer[$from]}" -lt 2 ] && [[ $sym =~ ^(redis|freeReplyObject|SSL_|TLS_|OPENSSL_|ERR_|X509|EVP_|PEM_|BIO_) ]]; then
					problems+=("$from (layer ${layer[$from]}) uses $sym of hiredis or OpenSSL: only layer 2 and above may")
				fi
				continue
			fi
			[ "$to" = "$from" ] && continue
			[ -n "${layer[$to]+x}" ] || continue
			uses=$((uses + 1))
			if [ "${layer[$to]}" -gt "${layer[$from]}" ]; then
				problems+=("upward call: $from (layer ${layer[$from]}) uses $sym of $to (layer ${layer[$to]})")
			elif [ "${layer[$to]}" -eq "${layer[$from]}" ]; then
				same+=("$from $to $sym")
			fi
		done < <(nm "$dir/$from.o" | awk '$1 == "U" { print $2 }' | sort -u)
	done

	# a loop inside a layer: a depth-first walk of its edges
	local -A next via state
	local e a b s
	for e in "${same[@]}"; do
		read -r a b s <<<"$e"
		[[ " ${next[$a]:-} " == *" $b "* ]] || next[$a]="${next[$a]:-} $b"
		via["$a>$b"]=$s
	done
	local loop=""
	walk() {	# walk NODE PATH: sets loop to "a -> b (sym) -> ... -> a"
		local n=$1 p=$2 m
		state[$n]=open
		for m in ${next[$n]:-}; do
			[ -n "$loop" ] && return
			if [ "${state[$m]:-}" = open ]; then
				loop="$p -> $m (${via["$n>$m"]})"
				loop="${loop#*"$m "}"; loop="$m $loop"
				return
			fi
			[ -z "${state[$m]:-}" ] && walk "$m" "$p -> $m (${via["$n>$m"]})"
		done
		state[$n]=done
	}
	for a in "${!next[@]}"; do
		[ -n "$loop" ] && break
		[ -z "${state[$a]:-}" ] && walk "$a" "$a"
	done
	[ -z "$loop" ] || problems+=("loop inside a layer: $loop")

	# the sources: hiredis only in the Redis layer, internal headers only in their folder
	local srcdir=$dir c hits h
	compgen -G "$srcdir/*/*.c" >/dev/null || srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/src
	while IFS= read -r c; do
		rel=${c#"$srcdir"/}
		folder=$(dirname "$rel")
		if [ "$folder" != redis ]; then
			hits=$(grep -nE '#[[:space:]]*include[[:space:]]*[<"]hiredis/|redisReply|REDIS_REPLY_' "$c" | head -3 | tr '\n' ' ')
			[ -z "$hits" ] || problems+=("$rel includes hiredis or touches a redisReply outside the Redis layer (src/redis/): $hits")
		fi
		for h in $(grep -oE '#[[:space:]]*include[[:space:]]*"[a-z_]+/internal\.h"' "$c" | sed -E 's/.*"([a-z_]+)\/internal\.h"/\1/'); do
			[ "$h" = "$folder" ] || problems+=("$rel includes $h/internal.h: a layer's internal header is for its own folder")
		done
	done < <(find "$srcdir" -name '*.[ch]' | sort)

	if [ ${#problems[@]} -gt 0 ]; then
		printf 'layers: %s\n' "${problems[@]}"
		echo "layers: ${#files[@]} files, $uses uses of another file's symbols, ${#problems[@]} problems"
		return 1
	fi
	echo "layers: ${#files[@]} files in the folders of their layers, $uses uses of another file's symbols, every one downward or inside a layer without a loop; nothing below src/redis/ uses hiredis or OpenSSL; no source outside src/redis/ includes hiredis or touches a redisReply; no layer's internal functions used from outside it"
	return 0
}

if [ "${1:-}" != "--self-test" ]; then
	check "${1:-$(cd "$(dirname "$0")/.." && pwd)/src}"
	exit $?
fi

# --self-test: the real objects pass, and each rule, broken on purpose in a
# copy of them (a probe object, or a planted line in a source), fails with
# the file and symbol named
src=$(cd "${2:-$(cd "$(dirname "$0")/.." && pwd)/src}" && pwd)
srcroot=$src
compgen -G "$srcroot/*/*.c" >/dev/null || srcroot=$(cd "$(dirname "$0")/.." && pwd)/src
tmp=$(mktemp -d /tmp/lease_fence_layers.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
point() {
	if [ "$1" = ok ]; then passed=$((passed + 1)); echo "ok - $2"
	else failed=$((failed + 1)); echo "not ok - $2"; fi
}
out=$(check "$src"); rc=$?
echo "$out"
[ $rc -eq 0 ] && point ok "src/: every call goes down or stays in its layer without a loop; no Redis below src/redis/" ||
	point bad "src/: every call goes down or stays in its layer without a loop; no Redis below src/redis/"

# a copy of src/: its objects and sources, folder by folder
copy() {
	rm -rf "$tmp/$1"; mkdir -p "$tmp/$1"
	(cd "$src" && find . -name '*.o' -print0 | cpio -0pdm --quiet "$tmp/$1")
	(cd "$srcroot" && find . -name '*.[ch]' -print0 | cpio -0pdm --quiet "$tmp/$1")
}
# probe(name, folder, C source...): the copy plus probeN.o in that folder
probe() {
	local name=$1 folder=$2 i=0 code
	shift 2
	copy "$name"
	mkdir -p "$tmp/$name/$folder"
	for code in "$@"; do
		i=$((i + 1))
		printf '%s\n' "$code" >"$tmp/$name/$folder/probe$i.c"
		cc -c -o "$tmp/$name/$folder/probe$i.o" "$tmp/$name/$folder/probe$i.c" || return 2
		rm "$tmp/$name/$folder/probe$i.c"
	done
	check "$tmp/$name"
}
expect_refused() {
	local what=$1 pattern=$2 out rc
	shift 2
	out=$(probe "$@"); rc=$?
	if [ $rc -eq 1 ] && grep -qE "$pattern" <<<"$out"; then point ok "refused: $what"
	else echo "$out"; point bad "refused: $what"; fi
}
# a fence file calling the keep-alive (as 1.2's fence did)
expect_refused "a file of src/fence/ calling the lease layer (lf_keepalive_state_of)" \
	'upward call: fence/probe1 \(layer 1\) uses lf_keepalive_state_of of lease/keepalive \(layer 3\)' \
	upward fence 'extern const char *lf_keepalive_state_of(const char *); const char *lf_probe(void) { return lf_keepalive_state_of("x"); }'
# a loop inside the Redis layer (as 1.2's TLS file calling the connection file back)
expect_refused "a loop between two files of src/redis/" \
	'loop inside a layer: redis/probe[12] -> redis/probe[12] \(lf_probe_[ab]\) -> redis/probe[12]' \
	loop redis 'extern int lf_probe_b(void); int lf_probe_a(void) { return lf_probe_b(); }' \
	'extern int lf_probe_a(void); int lf_probe_b(void) { return lf_probe_a(); }'
# the fence reaching hiredis
expect_refused "a file of src/fence/ using hiredis (freeReplyObject)" \
	'fence/probe1 \(layer 1\) uses freeReplyObject of hiredis or OpenSSL' \
	hiredis fence 'extern void freeReplyObject(void *); void lf_probe(void *r) { freeReplyObject(r); }'
# a command of its own (an argv) above the Redis layer
expect_refused "a file of src/lease/ sending its own command (lf_redis_command, internal to src/redis/)" \
	'lease/probe1 uses lf_redis_command, internal to src/redis/' \
	runner lease 'extern int lf_redis_command(void); int lf_probe(void) { return lf_redis_command(); }'
# an object in no layer's folder
expect_refused "an object file in no layer's folder" \
	'misc/probe1.o: not in a layer' \
	unplaced misc 'int lf_unplaced_probe;'

# planted(name, file, line, pattern, what): the copy with LINE put first in FILE
planted() {
	local name=$1 file=$2 line=$3 pattern=$4 what=$5 out rc
	copy "$name"
	printf '%s\n' "$line" | cat - "$srcroot/$file" >"$tmp/$name/$file"
	out=$(check "$tmp/$name"); rc=$?
	if [ $rc -eq 1 ] && grep -qE "$pattern" <<<"$out"; then point ok "refused: $what"
	else echo "$out"; point bad "refused: $what"; fi
}
planted hiredis_src lease/lease.c '#include <hiredis/hiredis.h>' \
	'lease/lease.c includes hiredis or touches a redisReply outside the Redis layer' \
	"a lease-layer source including hiredis (a planted #include in lease/lease.c)"
planted reply_src lease/keepalive.c 'static int lf_probe(const struct redisReply *r) { return r != 0; }' \
	'lease/keepalive.c includes hiredis or touches a redisReply' \
	"a lease-layer source touching a redisReply (lease/keepalive.c)"
planted reply_type_src fence/fence_trigger.c '#define LF_PROBE REDIS_REPLY_INTEGER' \
	'fence/fence_trigger.c includes hiredis or touches a redisReply' \
	"a fence source naming REDIS_REPLY_INTEGER"
planted internal_src lease/lease.c '#include "redis/internal.h"' \
	'lease/lease.c includes redis/internal.h' \
	"a lease-layer source including the Redis layer's internal header"
# the Redis layer's own files may
copy redis_own
printf '#include <hiredis/hiredis.h>\n#include "redis/internal.h"\n' | cat - "$srcroot/redis/redis_reply.c" >"$tmp/redis_own/redis/redis_reply.c"
out=$(check "$tmp/redis_own"); rc=$?
[ $rc -eq 0 ] && point ok "allowed: hiredis and the internal header in the Redis layer's own files (src/redis/)" ||
	{ echo "$out"; point bad "allowed: hiredis and the internal header in the Redis layer's own files (src/redis/)"; }

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
