#!/usr/bin/env bash
# Builds Prometheus (github.com/prometheus/prometheus/cmd/prometheus, pinned in
# e2e/upstream/prometheus/go.mod) for the kind suite's PromQL check (e2e/test_kind_promql.py):
# it scrapes the chart's metrics endpoints and answers every PromQL expression the docs name
# through its HTTP API. No web UI assets are built (the API needs none).
#
# The binary lands in a per-user cache keyed by version and is built once: when it is there,
# this script only prints its path. Go's module and build caches are per-user too.
#
#   e2e/upstream/build-prometheus.sh            # prints the path of the prometheus binary
#   HAMI_DCU_CACHE=/somewhere e2e/upstream/build-prometheus.sh
#
# Needs `go` and the Go module proxy (exit status 3 and one line without Go). What it builds,
# about how long that takes and, every minute, that it is still at it go to stderr; stdout is
# only the path.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMI_DCU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-dcu}

if ! command -v go >/dev/null; then
    echo "prometheus build: no Go toolchain (go) on PATH: the PromQL check cannot run" >&2
    exit 3
fi

version=$(cd "$here/prometheus" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
# remove_all_sd: no service discovery compiled in (the cloud SDKs are most of the build; the
# check scrapes static targets). In the key: a binary with discovery is another binary.
tags=remove_all_sd
out="$cache/prometheus/$version-$tags"
binary="$out/prometheus"

if [ -x "$binary" ]; then
    echo "$binary"
    exit 0
fi

say() { echo "prometheus build: $*" >&2; }
started=$SECONDS
elapsed() { local s=$((SECONDS - started)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

mkdir -p "$out"
staging=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT

# builtinassets: the web UI's assets are not embedded (none are in the module); the API is all
# the check uses. The stamped version is the module's.
say "prometheus $version is not built yet: building it once into $out" \
    "(downloads Go modules on first use)"
. "$here/heartbeat.sh"
ldflags="-s -w -X github.com/prometheus/common/version.Version=$version"
build_with_heartbeat "prometheus $version" \
    bash -c 'cd "$1" && go build -trimpath -tags "$4" -ldflags "$3" -o "$2" github.com/prometheus/prometheus/cmd/prometheus' \
    _ "$here/prometheus" "$staging/prometheus" "$ldflags" "$tags" \
    || exit 1
mv "$staging/prometheus" "$binary"
say "done in $(elapsed): later runs reuse $binary"
echo "$binary"
