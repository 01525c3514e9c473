"""What a tenant's container can reach on a DCU node, on kind (real kubelet, real containerd).

An attacker holding one share looks around from inside its container for what belongs to others:
the other pods' vdev0.conf, the other cards' DRM nodes, the device plugin's and the kubelet's
sockets (`/var/lib/kubelet/device-plugins`, `plugins_registry`, `pod-resources`: whoever reaches
them can list every pod's devices or register a rival plugin). A pod with no DCU limits, the
user's own DCU annotations or not, must get nothing of a card at all. Every check reads the
container's own view (`/proc/mounts`, `ls`, `find`), the way an attacker would.

Plain pods that mount `/dev/kfd` or the kubelet's sockets by hostPath are Pod Security's job
(SECURITY.md: tenant namespaces run `baseline` or `restricted`), not tested here.

    pytest -m kind e2e/test_kind_node_attacks.py
"""

from __future__ import annotations

import re

import pytest

from e2e.kindcluster import WORKERS, KindBackend
from e2e.scenarios import allocation, wait_running
from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.protocol import keys

pytestmark = pytest.mark.kind

# Everything of a node's DCU side a container could be handed, by path inside the container.
DCU_PATHS = ("/dev/kfd", "/dev/mkfd", "/dev/dri", "/etc/vdev", "/opt/hygondriver", "/opt/hyhal")
KUBELET_PATHS = ("/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/var/lib/kubelet/plugins_registry",
                 "/var/lib/kubelet/pod-resources", "/var/lib/kubelet/plugins")
# find over the container's own tree; /proc and /sys are the kernel's views, not files a runtime mounts.
FIND = r"find / \( -path /proc -o -path /sys \) -prune -o"


@pytest.fixture
def dp(kind: KindBackend) -> KindBackend:
    kind.ensure_mode("devicePlugin")
    kind.clean()
    return kind


def _exists(b: KindBackend, pod: str, path: str) -> bool:
    return b.pod_exec(pod, "sh", "-c", f"[ -e {path} ] && echo yes || echo no").strip() == "yes"


def _dri_nodes(b: KindBackend, pod: str) -> set[str]:
    return set(b.pod_exec(pod, "ls", "/dev/dri").split())


def _mount_points(b: KindBackend, pod: str) -> list[str]:
    return [line.split()[1] for line in b.pod_exec(pod, "cat", "/proc/mounts").splitlines()]


def test_a_share_sees_only_its_own_card_vdev_and_no_node_socket(dp: KindBackend) -> None:
    node = WORKERS[0]
    first, second = dp.cards[node][0], dp.cards[node][1]
    pinned = {"alice": first, "mallory": second}
    for name, card in pinned.items():
        manifest = pod_manifest(name, [Ctr("main", 1, 1000, 10)], {keys.USE_DCU_UUID: card.id})
        manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        dp.kube.create_pod(dp.namespace, manifest)
    pods = {name: wait_running(dp, name, timeout=120) for name in pinned}
    for name, card in pinned.items():
        [[device]] = allocation(pods[name])
        assert device.uuid == card.id, f"{name} was pinned to {card.id}, got {device.uuid}"

    # One card's pair of DRM nodes each (cardN and renderD(128+N)), and not the other's.
    seen = {name: _dri_nodes(dp, name) for name in pinned}
    for name, nodes in seen.items():
        cards = [n for n in nodes if re.fullmatch(r"card\d+", n)]
        renders = [n for n in nodes if re.fullmatch(r"renderD\d+", n)]
        assert len(cards) == 1 and len(renders) == 1 and len(nodes) == 2, f"{name} sees /dev/dri: {sorted(nodes)}"
        assert int(renders[0][len("renderD"):]) == 128 + int(cards[0][len("card"):]), sorted(nodes)
    assert not seen["alice"] & seen["mallory"], f"two cards' pods share DRM nodes: {seen}"

    mallory_uid = pods["mallory"]["metadata"]["uid"]
    alice_uid = pods["alice"]["metadata"]["uid"]
    # Mallory's vdev directory is the only one in her container: one file, her own.
    assert dp.pod_exec("mallory", "find", "/etc/vdev", "-type", "f").split() == ["/etc/vdev/docker/vdev0.conf"]
    # Nothing named after Alice's pod (her vdev directory on the node is <uid>_main_<n>) is anywhere.
    found = dp.pod_exec("mallory", "sh", "-c", f"{FIND} -name '*{alice_uid}*' -print; true")
    assert not found.strip(), f"mallory sees alice's files: {found}"
    assert alice_uid not in dp.pod_exec("mallory", "cat", "/proc/mounts")

    # No socket of the node at all: not the device plugin's, the kubelet's registration or its
    # pod-resources API, nor containerd's.
    sockets = dp.pod_exec("mallory", "sh", "-c", f"{FIND} -type s -print; true")
    assert not sockets.strip(), f"sockets reachable from a share's container: {sockets}"
    for path in KUBELET_PATHS:
        assert not _exists(dp, "mallory", path), f"{path} is visible inside a share's container"
    mounts = _mount_points(dp, "mallory")
    assert not [m for m in mounts if "kubelet" in m or "containerd" in m], mounts
    assert mallory_uid not in " ".join(mounts), "the container sees a node path naming its own pod"


@pytest.mark.parametrize("annotated", [False, True], ids=["plain", "with-dcu-annotations"])
def test_a_pod_without_dcu_limits_gets_no_dcu_device(dp: KindBackend, annotated: bool) -> None:
    node = WORKERS[0]
    # The user's own DCU annotations (which card, which type) mean nothing without limits.
    annotations = {keys.USE_DCU_UUID: dp.cards[node][0].id} if annotated else {}
    manifest = pod_manifest("plain", [Ctr("main")], annotations)
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    dp.kube.create_pod(dp.namespace, manifest)
    pod = wait_running(dp, "plain", timeout=120)
    assert pod["spec"]["nodeName"] == node
    assert not allocation(pod), "a pod with no DCU limits was given an allocation"
    for path in DCU_PATHS:
        assert not _exists(dp, "plain", path), f"{path} inside a pod that asked for no DCU"
    environment = dp.pod_exec("plain", "env")
    assert not [line for line in environment.splitlines() if line.startswith(("HIP_", "ROCR_", "HYGON_"))], environment
