# Sourced by build-hami.sh and build-volcano.sh: where a peer's source tarball is and where its
# build is cached. Each script defines `here`, `cache` and `say` before calling it.
#
# peer_source PEER TARBALL VAR: sets `src` (the tarball: $VAR, or TARBALL in ../shared/peers),
# `gover` and `out` (the cache directory, keyed by the tarball's sha256 and the Go version);
# exits 3 with one line when Go or the tarball is missing (the suites then skip saying so).
peer_source() {
    local peer=$1 tarball=$2 var=$3
    src=${!var:-$here/../../../shared/peers}
    if [ -d "$src" ]; then src="$src/$tarball"; fi
    if ! command -v go >/dev/null; then
        say "no Go toolchain on PATH: $peer's scheduler cannot be built"
        exit 3
    fi
    if [ ! -f "$src" ]; then
        say "no $peer source tarball at $src (set $var to it)"
        exit 3
    fi
    gover=$(go env GOVERSION)
    out="$cache/$(echo "$peer" | tr '[:upper:]' '[:lower:]')/$(sha256sum "$src" | cut -c1-16)-$gover"
}
