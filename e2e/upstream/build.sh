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
# Needs `go` and the Go module proxy; a cold build on 2 cores takes 10-20 minutes.
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
minor=${k8s_version#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
stamp="-X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
stamp="$stamp -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
stamp="$stamp -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"

echo "building etcd $etcd_version and Kubernetes $k8s_version into $out" >&2
(cd "$here/etcd" && go build -trimpath -o "$staging/etcd" go.etcd.io/etcd/server/v3)
(cd "$here/kube" && go build -trimpath -ldflags "-s -w $stamp" -o "$staging/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler)
for b in "${binaries[@]}"; do mv "$staging/$b" "$out/$b"; done
echo "$out"
