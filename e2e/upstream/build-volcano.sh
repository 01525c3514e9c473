#!/usr/bin/env bash
# Builds Volcano's scheduler (volcano-sh/volcano v1.15.1, ./cmd/scheduler) from the source
# tarball in ../shared/peers/ (or $VOLCANO_SRC: the tarball, or the folder holding it), for the
# suites that run hami-dcu as the extender of the real Volcano (issue 34). Nothing of Volcano goes
# into the product: the binary lives in the per-user cache, keyed by the tarball's sha256 and the
# Go version, and is built once; later runs only print its path. Volcano's CRDs (PodGroup, Queue,
# Job..., the tarball's installer/helm/chart/volcano/crd/bases) are kept beside it at crd/: the
# suites install them from there.
#
#   e2e/upstream/build-volcano.sh            # prints the path of the vc-scheduler binary
#   VOLCANO_SRC=/elsewhere/volcano-v1.15.1-src.tar.gz e2e/upstream/build-volcano.sh
#
# Exit status 3 with one line on stderr when Go or the tarball is missing (the suites skip with
# that line); any other failure is a failed build. A cold build took 13m45s on 2 cores shared
# with other work (load 15; 4m37s of CPU, every dependency from the Go module proxy), 98 MB;
# progress goes to stderr every minute.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMI_DCU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-dcu}
say() { echo "volcano build: $*" >&2; }
. "$here/peer.sh"
peer_source Volcano volcano-v1.15.1-src.tar.gz VOLCANO_SRC
binary="$out/vc-scheduler"
if [ -x "$binary" ] && [ -d "$out/crd" ]; then
    echo "$binary"
    exit 0
fi

started=$SECONDS
elapsed() { local s=$((SECONDS - started)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
mkdir -p "$out"
staging=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT
tar xzf "$src" -C "$staging"
tree=$(find "$staging" -mindepth 1 -maxdepth 1 -type d | head -1)
say "Volcano ($src, $gover) is not built yet: building ./cmd/scheduler once into $out" \
    "(downloads Go modules on first use; about 5 to 14 minutes cold on 2 cores)"
. "$here/heartbeat.sh"
build_with_heartbeat "Volcano's scheduler" \
    bash -c 'cd "$1" && go build -trimpath -ldflags "-s -w" -o "$2" ./cmd/scheduler' _ "$tree" "$staging/vc-scheduler" \
    || exit 1
# The CRDs travel with the binary (the v1 set: the tarball's crd/v1 points at bases/).
rm -rf "$out/crd"
cp -rL "$tree/installer/helm/chart/volcano/crd/bases" "$out/crd"
cp "$tree/LICENSE" "$out/LICENSE"
mv "$staging/vc-scheduler" "$binary"
say "built in $(elapsed): later runs reuse $out"
echo "$binary"
