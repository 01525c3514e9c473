#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok, pinned in e2e/upstream/kwok/go.mod) for the scale harness
# (e2e/realcluster/kwokscale.py, bench/scale.py): one process that keeps thousands of fake
# Nodes Ready and moves the pods bound to them to Running. kwok's own default Stages (what it
# does to nodes and pods, and when) are copied from its module into stages/ beside the binary.
#
# The binary lands in a per-user cache keyed by version and is built once: when it is there,
# this script only prints its path. Go's module and build caches are per-user too.
#
#   e2e/upstream/build-kwok.sh            # prints the path of the kwok binary
#   HAMI_DCU_CACHE=/somewhere e2e/upstream/build-kwok.sh
#
# Needs `go` and the Go module proxy; a cold build on 2 cores takes about 5-10 minutes. What it
# builds, about how long that takes and, every minute, that it is still at it go to stderr;
# stdout is only the path.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMI_DCU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-dcu}

version=$(cd "$here/kwok" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
out="$cache/kwok/kwok-$version"
binary="$out/kwok"
stages=(node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease
        pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete)

# kwok's default Stages, from the module the binary is built from (downloaded by `go mod download`).
copy_stages() {
    local module s
    module=$(cd "$here/kwok" && go mod download -json sigs.k8s.io/kwok | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    mkdir -p "$out/stages.tmp"
    for s in "${stages[@]}"; do cp "$module/kustomize/stage/$s.yaml" "$out/stages.tmp/"; done
    rm -rf "$out/stages"
    mv "$out/stages.tmp" "$out/stages"
}

if [ -x "$binary" ]; then
    [ -d "$out/stages" ] || copy_stages
    echo "$binary"
    exit 0
fi

say() { echo "kwok build: $*" >&2; }
started=$SECONDS
elapsed() { local s=$((SECONDS - started)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

mkdir -p "$out"
staging=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT

# kwok stamps its own version in pkg/consts; no -X settings apply (version-ldflags.sh is for
# Kubernetes' component-base).
say "kwok $version is not built yet: building it once into $out" \
    "(downloads Go modules on first use; about 5-10 minutes cold on 2 cores)"
. "$here/heartbeat.sh"
build_with_heartbeat "kwok $version" \
    bash -c 'cd "$1" && go build -trimpath -ldflags "-s -w" -o "$2" sigs.k8s.io/kwok/cmd/kwok' _ "$here/kwok" "$staging/kwok" \
    || exit 1
copy_stages
mv "$staging/kwok" "$binary"
say "done in $(elapsed): later runs reuse $binary"
echo "$binary"
