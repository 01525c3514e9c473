#!/usr/bin/env bash
# Builds HAMi's scheduler process (Project-HAMi/HAMi v2.10.0, ./cmd/scheduler) from the source
# tarball in ../shared/peers/ (or $HAMI_SRC: the tarball, or the folder holding it), for the
# suites and benches that run hami-dcu against the real HAMi. Nothing of HAMi goes into the
# product: the binary lives in the per-user cache, keyed by the tarball's sha256 and the Go
# version, and is built once; later runs only print its path. The extracted source tree stays
# beside it at src/ (extracted on its own where a binary was built before the tree was kept):
# e2e/hami/cardorder.py compiles HAMi's pkg/scheduler tests there with a probe of ours.
#
#   e2e/upstream/build-hami.sh            # prints the path of the hami-scheduler binary
#   HAMI_SRC=/elsewhere/hami-v2.10.0-src.tar.gz e2e/upstream/build-hami.sh
#
# Exit status 3 with one line on stderr when Go or the tarball is missing (the suites skip with
# that line); any other failure is a failed build. A cold build on 2 cores takes about 8
# minutes (every dependency from the Go module proxy); progress goes to stderr every minute.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMI_DCU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-dcu}
say() { echo "hami build: $*" >&2; }
. "$here/peer.sh"
peer_source HAMi hami-v2.10.0-src.tar.gz HAMI_SRC
binary="$out/hami-scheduler"
tree="$out/src"
if [ -x "$binary" ] && [ -d "$tree" ]; then
    echo "$binary"
    exit 0
fi

started=$SECONDS
elapsed() { local s=$((SECONDS - started)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
mkdir -p "$out"
staging=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT
if [ ! -d "$tree" ]; then
    tar xzf "$src" -C "$staging"
    top=$(find "$staging" -mindepth 1 -maxdepth 1 -type d | head -1)
    # one rename, so a tree is whole or absent; a concurrent run that got there first wins
    mv -T "$top" "$tree" 2>/dev/null || [ -d "$tree" ]
fi
if [ -x "$binary" ]; then
    echo "$binary"
    exit 0
fi
# The chart travels with the binary: the tests install HAMi's own chart and read its device
# configuration, exactly as released.
say "HAMi ($src, $gover) is not built yet: building ./cmd/scheduler once into $out" \
    "(downloads Go modules on first use; about 8 minutes cold on 2 cores)"
. "$here/heartbeat.sh"
build_with_heartbeat "HAMi's scheduler" \
    bash -c 'cd "$1" && go build -trimpath -ldflags "-s -w" -o "$2" ./cmd/scheduler' _ "$tree" "$staging/hami-scheduler" \
    || exit 1
rm -rf "$out/charts"
cp -r "$tree/charts" "$out/charts"
mv "$staging/hami-scheduler" "$binary"
say "built in $(elapsed): later runs reuse $out"
echo "$binary"
