#!/usr/bin/env bash
# clients/go/vendor.sh [DIR] — makes DIR/vendor (default: this directory's)
# from Debian's packaged Go sources, so that `go test ./...` runs in module
# mode with no module proxy and no network.
#
#   cd clients/go && bash vendor.sh && go test ./...
#
# Every module that go.mod requires is a symlink vendor/<module path> to
# $LF_GOCODE/src/<module path> (default /usr/share/gocode: golang-go's
# golang-github-* packages), and vendor/modules.txt lists each module as
# required (its go.mod version; the sources are Debian's, whatever their
# version) with every package under it. The go command then builds with
# -mod=vendor on its own (go.mod says go >= 1.14 and vendor/ exists).
# A module that go.mod replaces by a directory (`replace M => ../dir`, as
# a program using this library from a checkout does) is linked there instead.
# vendor/ is made again on every run and is not committed (.gitignore).
# Fails, naming it, when a required module is not installed.
set -euo pipefail

dir=$(cd "${1:-$(dirname "$0")}" && pwd)
gocode=${LF_GOCODE:-/usr/share/gocode}/src
[ -f "$dir/go.mod" ] || { echo "vendor.sh: no go.mod in $dir" >&2; exit 1; }

# "path version" of every requirement, in a require block or on one line
mods=$(awk '
	/^require \($/ { inblock = 1; next }
	inblock && /^\)/ { inblock = 0; next }
	inblock && NF >= 2 { print $1, $2; next }
	/^require [^(]/ { print $2, $3 }
' "$dir/go.mod")

# "path dir" of every replacement by a directory (one-line form)
reps=$(awk '$1 == "replace" && $3 == "=>" && $4 ~ /^[.\/]/ { print $2, $4 }' "$dir/go.mod")

rm -rf "$dir/vendor"
mkdir -p "$dir/vendor"
while read -r mod version; do
	[ -n "$mod" ] || continue
	root=$gocode/$mod
	rep=$(awk -v m="$mod" '$1 == m { print $2 }' <<<"$reps")
	if [ -n "$rep" ]; then
		case $rep in /*) root=$rep ;; *) root=$(cd "$dir/$rep" && pwd) ;; esac
	fi
	if [ ! -f "$root/go.mod" ]; then
		echo "vendor.sh: $mod is not under $gocode (Debian: golang-$(echo "$mod" |
			sed 's|^github\.com/||; s|^golang\.org/x/|golang-x-|; s|/v[0-9]*$||; s|[/.]|-|g' |
			tr 'A-Z' 'a-z')-dev)" >&2
		exit 1
	fi
	mkdir -p "$dir/vendor/$(dirname "$mod")"
	ln -s "$root" "$dir/vendor/$mod"
	printf '# %s %s%s\n## explicit\n' "$mod" "$version" "${rep:+ => $rep}"
	# its packages: directories with Go files, not testdata, not _ or .
	# directories, not a nested module
	nested=$(cd "$root" && find . -mindepth 2 -name go.mod -printf '%h/\n' | sed 's|^\./||')
	(cd "$root" && find . \( -name testdata -o -name '[._]?*' -o -name vendor \) -prune -o \
		-name '*.go' -printf '%h\n') | sed 's|^\.\(/\)\?||' | sort -u | while read -r sub; do
		inner=0
		for n in $nested; do [[ "$sub/" == "$n"* ]] && inner=1; done
		[ "$inner" -eq 0 ] && echo "$mod${sub:+/$sub}"
	done
done <<<"$mods" >"$dir/vendor/modules.txt"
# the replacements themselves, as `go mod vendor` records them
while read -r mod rep; do
	[ -z "$mod" ] || printf '# %s => %s\n' "$mod" "$rep"
done <<<"$reps" >>"$dir/vendor/modules.txt"
