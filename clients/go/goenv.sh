# clients/go/goenv.sh — sourced by unit.sh and ci.sh: the offline Go build
# environment, as Debian's own Go packages build. GOPATH mode
# (GO111MODULE=off): imports resolve in $work/gopath/src first, then in
# Debian's /usr/share/gocode/src (pgx v4, pgconn, redigo, ...); no module
# proxy, no network; GOCACHE in $work, or LF_GOCACHE (a build cache the
# harness keeps beside its other caches: Go's cache is safe to share). The module is copied to
# $work/gopath/src/github.com/leasefence/lease_fence/clients/go.

lf_go_env() {	# work here
	local work=$1 here=$2 dst
	dst=$work/gopath/src/github.com/leasefence/lease_fence/clients/go
	export GO111MODULE=off GOPATH=$work/gopath:/usr/share/gocode GOCACHE=${LF_GOCACHE:-$work/gocache}
	export GOFLAGS= GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0
	rm -rf "$dst" && mkdir -p "$dst" "$GOCACHE" || return 1
	cp "$here"/*.go "$here/go.mod" "$dst/" || return 1
}
