#!/usr/bin/env bash
# test/layers.sh — every call in src/ goes one way: down the layers of
# docs/design.md ("Layers"), and within a layer from a file to one listed
# before it below.  Reads the object files, as the linker would: `nm` says
# which file defines each global symbol and which files use it; an edge
# A -> B is a symbol A uses and B defines.  Fails, naming file and symbol,
#   - on any edge to a file that is not listed before its caller (an upward
#     call, or a loop, which always contains one);
#   - on any symbol of hiredis or OpenSSL used by a file below the Redis
#     layer (the fence must work with no Redis at all);
#   - on an object file the list does not place;
#   - on any source file (src/*.c, src/*.h) outside the Redis layer's own
#     (src/redis_*, src/redis.h) that includes hiredis or mentions
#     redisReply or REDIS_REPLY_: above the Redis layer nobody sees a
#     reply, only its typed answer (LfAnswer, src/redis.h); below it nobody
#     knows Redis.  Read from the sources beside the objects (DIR), else
#     from this repository's src/.
#
#   bash test/layers.sh [DIR]       DIR holds the .o files (default: src)
#   bash test/layers.sh --self-test [DIR]
#                                   check DIR, then build probe objects that
#                                   break each rule and check that each is
#                                   refused (test/run.sh's "layers" suite)
set -uo pipefail

# The layers, lowest first: "layer file" per line.  This table is the one
# written list of them (docs/design.md, "The layers", is written from it);
# every call goes to a file listed before its caller.
#   0  the counters
#   1  the fence: no Redis at all
#   2  Redis: the only files that know the protocol (hiredis)
#   3  the leases
#   4  the module's entry (_PG_init)
ORDER="
0 latency
0 stats
1 extension
1 generation
1 current_generation
1 resource_fence
1 repair
1 fence_trigger
2 redis_reply
2 redis_settings
2 redis_tls
2 redis_conn
2 redis_watch
2 redis_topology
2 redis_script
3 keepalive
3 keepalive_worker
3 lease_table
3 lease_registry
3 lease
4 lease_fence
"
# LF_LAYERS_PLACE="probe:fence_trigger" places a probe object of the
# self-test right after a listed file, in its layer

check() {
	local dir=$1 o name
	local -A rank layer defs
	local -a files=() problems=()
	local i=0 line l f
	while read -r l f; do
		[ -n "$f" ] || continue
		rank[$f]=$i; layer[$f]=$l; i=$((i + 1))
		if [ -n "${LF_LAYERS_PLACE:-}" ] && [ "${LF_LAYERS_PLACE#*:}" = "$f" ]; then
			rank[${LF_LAYERS_PLACE%%:*}]=$i; layer[${LF_LAYERS_PLACE%%:*}]=$l; i=$((i + 1))
		fi
	done <<<"$ORDER"

	for o in "$dir"/*.o; do
		[ -e "$o" ] || { echo "layers: no object files in $dir (run make first)"; return 2; }
		name=$(basename "$o" .o)
		files+=("$name")
		[ -n "${rank[$name]+x}" ] || problems+=("$name.o: not placed in any layer (add it to test/layers.sh and docs/design.md)")
		# global definitions: text, data, bss, read-only, common
		while read -r sym; do defs[$sym]=$name; done < <(nm "$o" | awk 'NF == 3 && $2 ~ /^[TDBRC]$/ { print $3 }')
	done

	local uses=0 from to sym
	for from in "${files[@]}"; do
		[ -n "${rank[$from]+x}" ] || continue
		while read -r sym; do
			to=${defs[$sym]:-}
			if [ -z "$to" ]; then
				# from outside lease_fence: only the Redis layer and above may use hiredis or OpenSSL
				if [ "${layer[$from]}" -lt 2 ] && [[ $sym =~ ^(redis|freeReplyObject|SSL_|TLS_|OPENSSL_|ERR_|X509|EVP_|PEM_|BIO_) ]]; then
					problems+=("$from (layer ${layer[$from]}) uses $sym of hiredis or OpenSSL: only layer 2 and above may")
				fi
				continue
			fi
			[ "$to" = "$from" ] && continue
			[ -n "${rank[$to]+x}" ] || continue
			uses=$((uses + 1))
			if [ "${rank[$to]}" -ge "${rank[$from]}" ]; then
				if [ "${layer[$to]}" -gt "${layer[$from]}" ]; then
					problems+=("upward call: $from (layer ${layer[$from]}) uses $sym of $to (layer ${layer[$to]})")
				else
					problems+=("call against the order of layer ${layer[$from]}: $from uses $sym of $to, which is listed after it")
				fi
			fi
		done < <(nm "$dir/$from.o" | awk '$1 == "U" { print $2 }' | sort -u)
	done

	# hiredis in the sources: only the Redis layer's own files
	local srcdir=$dir c base hits
	compgen -G "$srcdir/*.c" >/dev/null || srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/src
	for c in "$srcdir"/*.c "$srcdir"/*.h; do
		[ -e "$c" ] || continue
		base=$(basename "$c")
		case $base in
			redis_* | redis.h) continue ;;
		esac
		hits=$(grep -nE '#[[:space:]]*include[[:space:]]*[<"]hiredis/|redisReply|REDIS_REPLY_' "$c" | head -3 | tr '\n' ' ')
		[ -z "$hits" ] || problems+=("$base includes hiredis or touches a redisReply outside the Redis layer (src/redis_*, src/redis.h): $hits")
	done

	if [ ${#problems[@]} -gt 0 ]; then
		printf 'layers: %s\n' "${problems[@]}"
		echo "layers: ${#files[@]} files, $uses uses of another file's symbols, ${#problems[@]} problems"
		return 1
	fi
	echo "layers: ${#files[@]} files, $uses uses of another file's symbols, every one downward; nothing below layer 2 uses hiredis or OpenSSL; no source outside src/redis_* and src/redis.h includes hiredis or touches a redisReply"
	return 0
}

if [ "${1:-}" != "--self-test" ]; then
	check "${1:-$(cd "$(dirname "$0")/.." && pwd)/src}"
	exit $?
fi

# --self-test: the real objects pass, and each rule, broken on purpose by a
# probe object file added to a copy of them, fails with the symbol named
src=${2:-$(cd "$(dirname "$0")/.." && pwd)/src}
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
[ $rc -eq 0 ] && point ok "src/: no loop, no upward call, no Redis below layer 2" ||
	point bad "src/: no loop, no upward call, no Redis below layer 2"

# probe(name, after, C source): a copy of src's objects plus probe.o, placed
# right after the listed file "after", in its layer
probe() {
	local name=$1 after=$2 code=$3
	rm -rf "$tmp/$name"; mkdir -p "$tmp/$name"
	cp "$src"/*.o "$tmp/$name"/
	printf '%s\n' "$code" >"$tmp/$name/probe.c"
	cc -c -o "$tmp/$name/probe.o" "$tmp/$name/probe.c" || return 2
	rm "$tmp/$name/probe.c"
	LF_LAYERS_PLACE="probe:$after" check "$tmp/$name"
}
expect_refused() {
	local what=$1 pattern=$2 out rc
	shift 2
	out=$(probe "$@"); rc=$?
	if [ $rc -eq 1 ] && grep -qE "$pattern" <<<"$out"; then point ok "refused: $what"
	else echo "$out"; point bad "refused: $what"; fi
}
# a fence file calling the keep-alive (as 1.2's fence did): a probe in
# layer 1 that calls the lease layer
expect_refused "a layer-1 file calling the lease layer (lf_keepalive_state_of)" \
	'upward call: probe \(layer 1\) uses lf_keepalive_state_of of keepalive \(layer 3\)' \
	upward fence_trigger 'extern const char *lf_keepalive_state_of(const char *); const char *lf_probe(void) { return lf_keepalive_state_of("x"); }'
# a loop inside the Redis layer (as 1.2's TLS file calling the connection
# file back): a probe below redis_conn that calls it
expect_refused "a call up the order inside a layer (below redis_conn, calling it)" \
	'call against the order of layer 2: probe uses lf_conn_command of redis_conn' \
	loop redis_settings 'extern int lf_conn_command(void); int lf_probe(void) { return lf_conn_command(); }'
# the fence reaching hiredis
expect_refused "a layer-1 file using hiredis (freeReplyObject)" \
	'probe \(layer 1\) uses freeReplyObject of hiredis or OpenSSL' \
	hiredis fence_trigger 'extern void freeReplyObject(void *); void lf_probe(void *r) { freeReplyObject(r); }'
# hiredis above the Redis layer, in the sources: a copy of src/ whose
# lease.c includes hiredis, and one whose keepalive.c looks into a reply
srcroot=$(cd "$src" && pwd)
[ -e "$srcroot/lease.c" ] || srcroot=$(cd "$(dirname "$0")/.." && pwd)/src
planted() {
	local name=$1 file=$2 line=$3 pattern=$4 what=$5 out rc
	rm -rf "$tmp/$name"; mkdir -p "$tmp/$name"
	cp "$src"/*.o "$tmp/$name"/ && cp "$srcroot"/*.c "$srcroot"/*.h "$tmp/$name"/
	printf '%s\n' "$line" | cat - "$srcroot/$file" >"$tmp/$name/$file"
	out=$(check "$tmp/$name"); rc=$?
	if [ $rc -eq 1 ] && grep -qE "$pattern" <<<"$out"; then point ok "refused: $what"
	else echo "$out"; point bad "refused: $what"; fi
}
planted hiredis_src lease.c '#include <hiredis/hiredis.h>' \
	'lease.c includes hiredis or touches a redisReply outside the Redis layer' \
	"a lease-layer source including hiredis (a planted #include in lease.c)"
planted reply_src keepalive.c 'static int lf_probe(const struct redisReply *r) { return r != 0; }' \
	'keepalive.c includes hiredis or touches a redisReply' \
	"a lease-layer source touching a redisReply (keepalive.c)"
planted reply_type_src fence_trigger.c '#define LF_PROBE REDIS_REPLY_INTEGER' \
	'fence_trigger.c includes hiredis or touches a redisReply' \
	"a fence source naming REDIS_REPLY_INTEGER"
# the Redis layer's own files may: a planted include in redis_script.c passes
out=$(rm -rf "$tmp/redis_own"; mkdir -p "$tmp/redis_own"; cp "$src"/*.o "$tmp/redis_own"/;
	cp "$srcroot"/*.c "$srcroot"/*.h "$tmp/redis_own"/;
	printf '#include <hiredis/hiredis.h>\n' | cat - "$srcroot/redis_reply.c" >"$tmp/redis_own/redis_reply.c";
	check "$tmp/redis_own"); rc=$?
[ $rc -eq 0 ] && point ok "allowed: hiredis in the Redis layer's own files (src/redis_*)" ||
	{ echo "$out"; point bad "allowed: hiredis in the Redis layer's own files (src/redis_*)"; }

# an object file nobody placed
out=$(rm -rf "$tmp/unplaced"; mkdir -p "$tmp/unplaced"; cp "$src"/*.o "$tmp/unplaced"/;
	echo 'int lf_unplaced_probe;' >"$tmp/unplaced/stray.c"; cc -c -o "$tmp/unplaced/stray.o" "$tmp/unplaced/stray.c";
	rm "$tmp/unplaced/stray.c"; check "$tmp/unplaced"); rc=$?
[ $rc -eq 1 ] && grep -q 'stray.o: not placed in any layer' <<<"$out" && point ok "refused: an object file in no layer" ||
	{ echo "$out"; point bad "refused: an object file in no layer"; }

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
