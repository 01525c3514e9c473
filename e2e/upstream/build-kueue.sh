#!/usr/bin/env bash
# Builds Kueue (sigs.k8s.io/kueue v0.17.0, ./cmd/kueue) from the Go module proxy, for the suite
# that puts Kueue in front of hami-dcu on the real control plane (e2e/test_realcluster_kueue.py,
# issue 37). Nothing of Kueue goes into the product: the binary lives in the per-user cache, keyed
# by Kueue's version and the Go version, and is built once; later runs only print its path.
# Kueue's CRDs (ClusterQueue, LocalQueue, ResourceFlavor, Workload..., the module's
# config/components/crd/bases) and its webhook configurations (config/components/webhook) are
# kept beside it at crd/ and webhook/: the suite installs them from there.
#
#   e2e/upstream/build-kueue.sh            # prints the path of the kueue binary
#   HAMI_DCU_CACHE=/somewhere e2e/upstream/build-kueue.sh
#
# Exit status 3 with one line on stderr when Go or the module is not to be had (the suite skips
# with that line); any other failure is a failed build. The build happens inside the module's own
# directory (read-only in Go's module cache) so that Kueue's go.mod and go.sum pin every
# dependency, as Kueue's release does. A cold build took 11m04s on 2 cores shared with other work
# (load 10; 5m17s of CPU, every dependency from the Go module proxy), 87 MB; progress goes to
# stderr every minute.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMI_DCU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-dcu}
say() { echo "kueue build: $*" >&2; }
version=v0.17.0

command -v go >/dev/null || { echo "no go on PATH: Kueue $version is built from the Go module proxy" >&2; exit 3; }
gover=$(go env GOVERSION)
out="$cache/kueue/kueue-$version-$gover"
binary="$out/kueue"
if [ -x "$binary" ] && [ -d "$out/crd" ] && [ -d "$out/webhook" ]; then
    echo "$binary"
    exit 0
fi

# `go mod download` outside any module fetches the module's zip (GOFLAGS may say -mod=...: not
# for this command).
module=$(cd / && GOFLAGS= go mod download -json "sigs.k8s.io/kueue@$version" 2>/dev/null \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || true
if [ -z "$module" ] || [ ! -d "$module/cmd/kueue" ]; then
    echo "sigs.k8s.io/kueue@$version is not to be had from the Go module proxy ($(go env GOPROXY))" >&2
    exit 3
fi

started=$SECONDS
elapsed() { local s=$((SECONDS - started)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
mkdir -p "$out"
staging=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT
say "Kueue $version ($gover) is not built yet: building ./cmd/kueue once into $out" \
    "(downloads Go modules on first use; some 5 to 15 minutes cold on 2 cores)"
. "$here/heartbeat.sh"
build_with_heartbeat "Kueue $version" \
    bash -c 'cd "$1" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$2" ./cmd/kueue' \
    _ "$module" "$staging/kueue" \
    || exit 1
rm -rf "$out/crd" "$out/webhook"
cp -r "$module/config/components/crd/bases" "$out/crd"
cp -r "$module/config/components/webhook" "$out/webhook"
chmod -R u+w "$out/crd" "$out/webhook"
cp "$module/LICENSE" "$out/LICENSE"
chmod u+w "$out/LICENSE"
mv "$staging/kueue" "$binary"
say "built in $(elapsed): later runs reuse $out"
echo "$binary"
