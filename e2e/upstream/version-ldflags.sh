#!/usr/bin/env bash
# Prints the -ldflags -X settings that stamp a Kubernetes binary built from Go modules with its
# version (what `kubelet --version` reports and version-dependent code paths read).
#   e2e/upstream/version-ldflags.sh v1.37.2
set -euo pipefail
version=$1
minor=${version#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
echo "-X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
    "-X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "-X k8s.io/client-go/pkg/version.gitVersion=$version"
