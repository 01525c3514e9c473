#!/usr/bin/env bash
# Builds the upstream control plane the real-cluster suite runs against, from Go modules:
# etcd (e2e/upstream/etcd) and kube-apiserver, kube-controller-manager, kube-scheduler
# (e2e/upstream/kube, k8s.io/kubernetes with every staging module pinned by `replace`).
#
# The binaries land in a per-user cache keyed by version and are built once: when they are
# there, this script only prints their directory. Go's own module and build caches are
# per-user too ($GOMODCACHE, $GOCACHE), so a rebuild after a version bump is incremental.
#
#   e2e/upstream/build.sh            # prints the directory holding the four binaries
#   HAMI_DCU_CACHE=/somewhere e2e/upstream/build.sh
#
# Needs `go` and the Go module proxy; a cold build on 2 cores takes 10-20 minutes. What it
# builds, about how long that takes and, every minute, that it is still at it, go to stderr
# (the real-cluster tests show these lines under pytest); stdout is only the directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${HAMI_DCU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-dcu}

module_version() { (cd "$here/$1" && go list -m -f '{{.Version}}' "$2"); }

k8s_version=$(module_version kube k8s.io/kubernetes)
etcd_version=$(module_version etcd go.etcd.io/etcd/server/v3)
out="$cache/upstream/k8s-$k8s_version-etcd-$etcd_version"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler)

complete() {
    local b
    for b in "${binaries[@]}"; do [ -x "$out/$b" ] || return 1; done
}

if complete; then
    echo "$out"
    exit 0
fi

mkdir -p "$out"
staging=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT

# What `kube-apiserver --version` reports, and what version-dependent code paths read.
stamp=$(bash "$here/version-ldflags.sh" "$k8s_version")

say() { echo "upstream build: $*" >&2; }
started=$SECONDS
elapsed() { local s=$((SECONDS - ${1:-$started})); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

# Runs one build step in the background and says every minute that it is still running, so
# a cold build is never a silent quarter of an hour.
step() {
    local what=$1 estimate=$2 dir=$3 step_start=$SECONDS pid
    shift 3
    say "building $what (cold, on 2 cores: about $estimate; cached Go builds take seconds)"
    (cd "$dir" && "$@") &
    pid=$!
    while ! wait_for "$pid" "${HAMI_DCU_BUILD_HEARTBEAT:-60}"; do say "still building $what ($(elapsed "$step_start") so far)"; done
    wait "$pid" || { say "building $what failed after $(elapsed "$step_start")"; return 1; }
    say "built $what in $(elapsed "$step_start")"
}

# True once `pid` has exited, false if it still runs after `seconds`.
wait_for() {
    local pid=$1 seconds=$2 i
    for ((i = 0; i < ${seconds%.*} * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

say "etcd $etcd_version and Kubernetes $k8s_version are not built yet: building them once into $out" \
    "(downloads Go modules on first use; 10-20 minutes cold on 2 cores)"
step "etcd $etcd_version" "3-5 minutes" "$here/etcd" go build -trimpath -o "$staging/etcd" go.etcd.io/etcd/server/v3
step "kube-apiserver, kube-controller-manager, kube-scheduler $k8s_version" "10-15 minutes" "$here/kube" \
    go build -trimpath -ldflags "-s -w $stamp" -o "$staging/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler
for b in "${binaries[@]}"; do mv "$staging/$b" "$out/$b"; done
say "done in $(elapsed): later runs reuse $out"
echo "$out"
