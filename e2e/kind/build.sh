#!/usr/bin/env bash
# Builds the kind world for the kind suite on a machine with no container registry, from
# Debian packages and Go modules only, into a per-user cache keyed by versions:
#
#   kind          sigs.k8s.io/kind
#   kubelet, kubeadm, kubectl, kube-proxy
#                 from the module set of e2e/upstream/kube (the Go build cache is shared with
#                 the control plane e2e/upstream/build.sh builds, which this runs first)
#   containerd 2  github.com/containerd/containerd/v2 (Debian's 1.6 is too old for kubelet 1.37)
#   CoreDNS       the plugins of kubeadm's Corefile only (e2e/kind/coredns)
#   images        every image `kubeadm config images list` names, under that exact name:
#                 control-plane binaries with their shared libraries, kube-proxy on the node's
#                 root filesystem, a static pause, CoreDNS alone
#   node image    a Debian bookworm root filesystem (debootstrap) with systemd, runc, CNI
#                 plugins, iptables, containerd, the Kubernetes binaries, e2e/kind/node/*
#                 (entrypoint, units, a small CNI in place of kindnetd), the images preloaded
#   python base   a Debian bookworm root filesystem with python3, for the project's image
#   kube-router   github.com/cloudnativelabs/kube-router/v2, its firewall only, on a Debian root
#                 filesystem with iptables and ipset: NetworkPolicy enforced (the NetworkPolicy test)
#
# Each piece is built once; when everything is present this only prints, as `key=value`
# lines: kind, kubectl, node_image, python_base, k8s_version, kube_router_image, kube_router_bin. Docker must be running
# (e2e/kind/docker-host.sh up). Progress goes to stderr with the time each step took.
#
#   e2e/kind/build.sh
#   HAMI_DCU_CACHE=/somewhere e2e/kind/build.sh
#   e2e/kind/build.sh --rootfs-only    # only the Debian root filesystems (no Go)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
upstream=$(cd "$here/../upstream" && pwd)
cache=${HAMI_DCU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hami-dcu}
kind_cache=$cache/kind
export DOCKER_BUILDKIT=0  # the classic builder needs no buildx plugin and pulls nothing

KIND_VERSION=v0.33.0
CONTAINERD_VERSION=v2.4.2
COREDNS_VERSION=$(cd "$here/coredns" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
NODE_PACKAGES="systemd systemd-sysv dbus iptables iproute2 conntrack ethtool socat util-linux mount
    kmod ca-certificates runc containernetworking-plugins procps libseccomp2 bash coreutils
    findutils grep sed gawk tar gzip busybox-static"
PYTHON_PACKAGES="python3 python3-venv ca-certificates"
KUBE_ROUTER_VERSION=v2.1.0
NETPOL_PACKAGES="iptables ipset iproute2 ca-certificates"

step_started=0
say() { echo "kind-build: $*" >&2; }
step() { step_started=$SECONDS; say "$* ..."; }
done_step() { say "  done in $((SECONDS - step_started)) s"; }
hash_of() { cat "$@" | sha256sum | cut -c1-12; }
# docker build, quiet unless it fails (the classic builder's deprecation notice is noise here).
docker_build() {
    local log
    log=$(mktemp)
    if ! docker build -q "$@" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}

mkdir -p "$kind_cache/bin" "$kind_cache/rootfs"

# --- Debian root filesystems -----------------------------------------------------------------

minbase=$kind_cache/rootfs/minbase-$DEBIAN_SUITE.tar
if [ ! -s "$minbase" ]; then
    step "debootstrap --variant=minbase $DEBIAN_SUITE (about 1.5 min)"
    command -v debootstrap >/dev/null || { say "debootstrap is missing: apt-get install debootstrap"; exit 1; }
    tmp=$(mktemp -d)
    debootstrap --variant=minbase "$DEBIAN_SUITE" "$tmp/root" "$DEBIAN_MIRROR" >&2
    tar -C "$tmp/root" -cf "$minbase.tmp" .
    mv "$minbase.tmp" "$minbase"
    rm -rf "$tmp"
    done_step
fi

# rootfs_with NAME PACKAGES: the minbase tree plus Debian packages, as a tar (cached by list).
rootfs_with() {
    local name=$1 packages=$2 out tmp
    out=$kind_cache/rootfs/$name-$(echo "$packages" | tr -s ' \n' ' ' | sha256sum | cut -c1-12).tar
    if [ ! -s "$out" ]; then
        step "root filesystem '$name': apt-get install $(echo $packages | wc -w) packages (about 1-2 min)"
        tmp=$(mktemp -d)
        mkdir "$tmp/root"
        tar -C "$tmp/root" -xf "$minbase"
        cp /etc/resolv.conf "$tmp/root/etc/resolv.conf"
        printf '#!/bin/sh\nexit 101\n' >"$tmp/root/usr/sbin/policy-rc.d"  # start no service
        chmod +x "$tmp/root/usr/sbin/policy-rc.d"
        # shellcheck disable=SC2086
        if ! { chroot "$tmp/root" apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive chroot "$tmp/root" apt-get install -y -qq --no-install-recommends $packages
        } >"$tmp/apt.log" 2>&1; then
            tail -30 "$tmp/apt.log" >&2
            say "apt-get failed in the '$name' root filesystem"
            exit 1
        fi
        chroot "$tmp/root" apt-get clean
        rm -rf "$tmp/root/var/lib/apt/lists/"* "$tmp/root/usr/sbin/policy-rc.d"
        : >"$tmp/root/etc/resolv.conf"
        tar -C "$tmp/root" -cf "$out.tmp" .
        mv "$out.tmp" "$out"
        rm -rf "$tmp"
        done_step
    fi
    echo "$out"
}

# docker_image_from_tar TAR IMAGE [--change ...]: import a root filesystem once.
docker_image_from_tar() {
    local tar=$1 image=$2
    shift 2
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        step "docker import $image"
        docker import "$@" "$tar" "$image" >/dev/null
        done_step
    fi
}

node_rootfs=$(rootfs_with node "$NODE_PACKAGES")
node_base=hami-dcu-e2e/node-rootfs:$(basename "$node_rootfs" .tar | sed 's/^node-//')
docker_image_from_tar "$node_rootfs" "$node_base"

python_rootfs=$(rootfs_with python "$PYTHON_PACKAGES")
python_imported=hami-dcu-e2e/python-rootfs:$(basename "$python_rootfs" .tar | sed 's/^python-//')
docker_image_from_tar "$python_rootfs" "$python_imported"
# The base trusts what this machine trusts (its CA bundle: the package registries may be reached
# through a TLS-inspecting proxy), so pip inside `docker build` reaches them as the host does.
host_ca=/etc/ssl/certs/ca-certificates.crt
python_base=hami-dcu-e2e/python-base:$DEBIAN_SUITE-$(hash_of <(echo "$python_imported") "$host_ca")
if ! docker image inspect "$python_base" >/dev/null 2>&1; then
    step "python base image $python_base"
    context=$(mktemp -d)
    cp "$host_ca" "$context/ca-certificates.crt"
    {
        echo "FROM $python_imported"
        echo "COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt"
        echo "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
            "PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"
        echo 'CMD ["python3"]'
    } >"$context/Dockerfile"
    docker_build -t "$python_base" "$context"
    rm -rf "$context"
    done_step
fi

if [ "${1:-}" = "--rootfs-only" ]; then
    exit 0
fi

# --- Go-built tools -------------------------------------------------------------------------

kind_bin=$kind_cache/bin/kind-$KIND_VERSION
if [ ! -x "$kind_bin" ]; then
    step "building kind $KIND_VERSION (about 1 min cold)"
    tmp=$(mktemp -d)
    GOBIN=$tmp go install "sigs.k8s.io/kind@$KIND_VERSION"
    mv "$tmp/kind" "$kind_bin"
    rm -rf "$tmp"
    done_step
fi

containerd_dir=$kind_cache/bin/containerd-$CONTAINERD_VERSION
if [ ! -x "$containerd_dir/containerd-shim-runc-v2" ]; then
    step "building containerd $CONTAINERD_VERSION (about 2 min cold)"
    tmp=$(mktemp -d)
    CGO_ENABLED=0 GOBIN=$tmp go install -tags "no_btrfs no_devmapper no_zfs" \
        "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
        "github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION" \
        "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
    mkdir -p "$containerd_dir"
    mv "$tmp"/* "$containerd_dir/"
    rm -rf "$tmp"
    done_step
fi

coredns_bin=$kind_cache/bin/coredns-$COREDNS_VERSION-$(hash_of "$here/coredns/main.go" "$here/coredns/go.sum")
if [ ! -x "$coredns_bin" ]; then
    step "building CoreDNS $COREDNS_VERSION with kubeadm's plugins (about 2.5 min cold)"
    (cd "$here/coredns" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$coredns_bin.tmp" .)
    mv "$coredns_bin.tmp" "$coredns_bin"
    done_step
fi

# --- Kubernetes ------------------------------------------------------------------------------

control_plane=$(bash "$upstream/build.sh")  # etcd, kube-apiserver, -controller-manager, -scheduler
k8s_version=$(cd "$upstream/kube" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
node_bins=$control_plane/node
if [ ! -x "$node_bins/kube-proxy" ]; then
    step "building kubelet, kubeadm, kubectl, kube-proxy $k8s_version (about 3 min after the control plane)"
    stamp=$(bash "$upstream/version-ldflags.sh" "$k8s_version")
    tmp=$(mktemp -d "$control_plane/.node.XXXXXX")
    (cd "$upstream/kube" && go build -trimpath -ldflags "-s -w $stamp" -o "$tmp/" \
        k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm \
        k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy)
    rm -rf "$node_bins"
    mv "$tmp" "$node_bins"
    done_step
fi

# --- Images kubeadm asks for -----------------------------------------------------------------

# Bump when a recipe below changes: the saved images are reused while this and the inputs match.
IMAGES_RECIPE=1
images_dir=$kind_cache/images/$k8s_version-$(hash_of <(echo "$IMAGES_RECIPE $coredns_bin") "$here/pause.c")
mkdir -p "$images_dir"
mapfile -t wanted < <("$node_bins/kubeadm" config images list --kubernetes-version "$k8s_version" 2>/dev/null)
[ "${#wanted[@]}" -gt 0 ] || { say "kubeadm listed no images"; exit 1; }
# The image the e2e scenarios' pods run (e2e/scenarios.py TEST_IMAGE), preloaded beside them.
test_image=hami-dcu-e2e/busybox:1
wanted+=("$test_image")

# An image holding the given dynamically linked binaries in /usr/local/bin, with exactly the
# shared libraries (and the loader) they are linked against; no shell, nothing else.
image_of_binaries() {
    local image=$1 context
    shift
    context=$(mktemp -d)
    mkdir -p "$context/root/usr/local/bin" "$context/root/tmp" "$context/root/etc"
    local b lib
    for b in "$@"; do
        cp "$b" "$context/root/usr/local/bin/"
        for lib in $(ldd "$b" 2>/dev/null | grep -o '/[^ ]*'); do
            mkdir -p "$context/root$(dirname "$lib")"
            cp -L "$lib" "$context/root$lib"
        done
    done
    echo 'hosts: files dns' >"$context/root/etc/nsswitch.conf"
    echo 'root:x:0:0:root:/root:/sbin/nologin' >"$context/root/etc/passwd"
    printf 'FROM scratch\nCOPY root/ /\n' >"$context/Dockerfile"
    docker_build -t "$image" "$context"
    rm -rf "$context"
}

image_tar() { echo "$images_dir/$(echo "$1" | tr '/:' '__').tar"; }

for image in "${wanted[@]}"; do
    tar=$(image_tar "$image")
    [ -s "$tar" ] && continue
    step "image $image"
    name=${image##*/}
    name=${name%%:*}
    case $name in
    kube-apiserver | kube-controller-manager | kube-scheduler | etcd)
        image_of_binaries "$image" "$control_plane/$name"
        ;;
    kube-proxy)
        context=$(mktemp -d)
        cp "$node_bins/kube-proxy" "$context/"
        printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\n' "$node_base" >"$context/Dockerfile"
        docker_build -t "$image" "$context"
        rm -rf "$context"
        ;;
    pause)
        context=$(mktemp -d)
        gcc -static -O2 -o "$context/pause" "$here/pause.c"
        printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$context/Dockerfile"
        docker_build -t "$image" "$context"
        rm -rf "$context"
        ;;
    busybox)
        context=$(mktemp -d)
        mkdir -p "$context/bin"
        tar -C "$context" -xf "$node_rootfs" ./usr/bin/busybox
        mv "$context/usr/bin/busybox" "$context/bin/busybox"
        for applet in $("$context/bin/busybox" --list); do
            [ "$applet" = busybox ] || ln -s busybox "$context/bin/$applet"
        done
        printf 'FROM scratch\nCOPY bin /bin\nENV PATH=/bin\nCMD ["sh"]\n' >"$context/Dockerfile"
        rm -rf "$context/usr"
        docker_build -t "$image" "$context"
        rm -rf "$context"
        ;;
    coredns)
        context=$(mktemp -d)
        cp "$coredns_bin" "$context/coredns"
        printf 'FROM scratch\nCOPY coredns /coredns\nEXPOSE 53 53/udp\nENTRYPOINT ["/coredns"]\n' >"$context/Dockerfile"
        docker_build -t "$image" "$context"
        rm -rf "$context"
        ;;
    *)
        say "no recipe for the image $image that kubeadm $k8s_version asks for"
        exit 1
        ;;
    esac
    docker save "$image" -o "$tar.tmp"
    mv "$tar.tmp" "$tar"
    done_step
done

# --- Node image ------------------------------------------------------------------------------

node_inputs=$(hash_of "$0" "$here"/node/* "$containerd_dir/containerd" "$node_bins/kubelet" <(printf '%s\n' "${wanted[@]}"))
node_image=hami-dcu-e2e/kind-node:$k8s_version-$node_inputs
if ! docker image inspect "$node_image" >/dev/null 2>&1; then
    step "node image $node_image"
    context=$(mktemp -d)
    cp "$containerd_dir"/* "$node_bins/kubelet" "$node_bins/kubeadm" "$node_bins/kubectl" "$context/"
    cp "$here"/node/* "$context/"
    echo "$k8s_version" >"$context/version"
    cat >"$context/Dockerfile" <<EOF
FROM $node_base
COPY containerd ctr containerd-shim-runc-v2 /usr/local/bin/
COPY kubelet kubeadm kubectl /usr/bin/
COPY entrypoint pod-network /usr/local/bin/
COPY containerd.toml /etc/containerd/config.toml
COPY containerd.service kubelet.service pod-network.service /etc/systemd/system/
COPY default-storage.yaml /kind/manifests/default-storage.yaml
COPY version /kind/version
# systemd in a container: no gettys, no udev, no hardware or kernel-module units; the three
# services of a node, nothing else started at boot.
RUN rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
        /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
        /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup* \\
    && systemctl mask getty.target systemd-udevd.service systemd-udev-trigger.service systemd-modules-load.service \\
        sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount systemd-logind.service \\
    && systemctl enable containerd.service kubelet.service pod-network.service \\
    && echo 'ReadKMsg=no' >>/etc/systemd/journald.conf \\
    && mkdir -p /etc/cni/net.d /opt/cni/bin /var/lib/kubelet /etc/kubernetes/manifests /etc/cdi /var/run/cdi \\
    && ln -sf /usr/local/bin/ctr /usr/bin/ctr
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint"]
EOF
    docker_build -t "$node_image.unloaded" "$context"
    rm -rf "$context"
    # Preload the images: containerd imports them (without unpacking: no overlay snapshots on
    # the build container's overlay root) into /var, which kind's /var volume carries to
    # every node; containerd unpacks on first use.
    loader=$(docker run -d --privileged --entrypoint /usr/local/bin/containerd "$node_image.unloaded")
    for _ in $(seq 1 30); do docker exec "$loader" ctr version >/dev/null 2>&1 && break; sleep 1; done
    for image in "${wanted[@]}"; do
        docker exec -i "$loader" ctr -n k8s.io images import --no-unpack --all-platforms - <"$(image_tar "$image")" \
            >/dev/null 2>&1
    done
    docker stop -t 10 "$loader" >/dev/null
    docker commit \
        --change 'ENTRYPOINT ["/usr/local/bin/entrypoint"]' --change 'CMD []' \
        --change 'ENV container=docker' \
        "$loader" "$node_image" >/dev/null
    docker rm "$loader" >/dev/null
    docker rmi "$node_image.unloaded" >/dev/null
    done_step
fi

# --- a network plugin that enforces NetworkPolicy (e2e/test_kind_networkpolicy.py) -------------
# The node's small CNI routes pods but enforces no policy. kube-router's firewall alone (no
# routing, no service proxy) adds NetworkPolicy enforcement on top of it with iptables and ipset:
# the kernels here have ipset and xt_set but no nft queue, which kube-network-policies needs.
# v2.1.0 is the one version the module proxy serves; it runs in the throwaway test cluster only.
kube_router_bin=$kind_cache/bin/kube-router-$KUBE_ROUTER_VERSION
if [ ! -x "$kube_router_bin" ]; then
    step "building kube-router $KUBE_ROUTER_VERSION (about 3-5 min cold)"
    tmp=$(mktemp -d)
    CGO_ENABLED=0 GOBIN=$tmp go install "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
    mv "$tmp/kube-router" "$kube_router_bin"
    rm -rf "$tmp"
    done_step
fi
netpol_rootfs=$(rootfs_with netpol "$NETPOL_PACKAGES")
netpol_base=hami-dcu-e2e/netpol-rootfs:$(basename "$netpol_rootfs" .tar | sed 's/^netpol-//')
docker_image_from_tar "$netpol_rootfs" "$netpol_base"
kube_router_image=hami-dcu-e2e/kube-router:$KUBE_ROUTER_VERSION-$(echo "$netpol_base" | sha256sum | cut -c1-8)
if ! docker image inspect "$kube_router_image" >/dev/null 2>&1; then
    step "image $kube_router_image"
    context=$(mktemp -d)
    cp "$kube_router_bin" "$context/kube-router"
    printf 'FROM %s\nCOPY kube-router /usr/local/bin/kube-router\nENTRYPOINT ["/usr/local/bin/kube-router"]\n' \
        "$netpol_base" >"$context/Dockerfile"
    docker_build -t "$kube_router_image" "$context"
    rm -rf "$context"
    done_step
fi

echo "kind=$kind_bin"
echo "kubectl=$node_bins/kubectl"
echo "node_image=$node_image"
echo "python_base=$python_base"
echo "k8s_version=$k8s_version"
echo "kube_router_image=$kube_router_image"
echo "kube_router_bin=$kube_router_bin"
