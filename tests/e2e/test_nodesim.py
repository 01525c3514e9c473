"""The scale harness's node side (e2e/realcluster/nodesim.py) against the local API server: it
registers each fake node's cards as the device plugin does, and serves a DCU pod bound there
with the plugin's own Allocate (outcome on the pod, node lock released); a pod it cannot serve
fails as a kubelet fails it."""

from datetime import UTC, datetime

from e2e.realcluster.nodesim import NodeSimulator, impersonating
from e2e.scenarios import wait_until
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import Kube
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, decode_node_devices, encode_pod_devices, encode_unix_seconds

NS = "default"
DCU = keys.DCU_NAMING


def _node(kube: Kube, name: str) -> None:
    kube.create_node({"metadata": {"name": name}, "status": {"allocatable": {DCU.resources.count: "8"}}})


def _bind(kube: Kube, name: str, node: str, card: str, lock: bool = True) -> dict:
    """What the extender's /bind does: the node lock, then a Binding carrying the allocation."""
    pod = kube.create_pod(NS, pod_manifest(name, [Ctr("main", 1, 2000, 10)]))
    if lock:
        NodeLock(kube).take(node, NS, name)
    devices = encode_pod_devices([[ContainerDevice(card, "DCU", 2000, 10)]], DCU.pod_devices_allocated)
    stamp = encode_unix_seconds(datetime.now(UTC))
    kube.create_binding(NS, name, node, pod["metadata"]["uid"], {
        DCU.pod_devices_to_allocate: devices, DCU.pod_devices_allocated: devices, keys.POD_NODE: node,
        keys.POD_TIME: stamp, keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING, keys.POD_BIND_TIME: stamp})
    return pod


def test_registers_the_cards_and_serves_a_bound_pod_with_the_plugins_allocate(kube, tmp_path):
    _node(kube, "fake-0")
    cards = default_cards("fake-0", 2)
    simulator = NodeSimulator(kube, "system:serviceaccount:kube-system:plugin", {"fake-0": cards}, tmp_path,
                              register_interval=3600, workers=2).start()
    try:
        annotations = kube.get_node("fake-0")["metadata"]["annotations"]
        registered = decode_node_devices(annotations[DCU.node_register], DCU.node_register)
        assert [(d.id, d.count) for d in registered] == [(c.id, keys.DEFAULT_SLOTS_PER_CARD) for c in cards]
        assert annotations[DCU.node_handshake].startswith("Reported")

        _bind(kube, "share", "fake-0", cards[1].id)

        def served() -> dict | None:
            pod = kube.get_pod(NS, "share")
            return pod if pod["metadata"]["annotations"].get(keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS else None

        pod = wait_until("the pod allocated", served, timeout=20)
        # The release goes beside the pod's outcome (deviceplugin/service.py), so it may land just after.
        wait_until("the node lock released",
                   lambda: keys.NODE_LOCK not in (kube.get_node("fake-0")["metadata"].get("annotations") or {}),
                   timeout=20)
        (vdev,) = (tmp_path / "fake-0" / "vdev").iterdir()
        assert vdev.name.startswith(pod["metadata"]["uid"])
        assert f"PciBusId: {cards[1].pci_bus_id}" in (vdev / "vdev0.conf").read_text()
    finally:
        simulator.stop()


def test_a_pod_bound_without_the_lock_fails_admission_as_on_a_kubelet(kube, tmp_path):
    _node(kube, "fake-1")
    cards = default_cards("fake-1", 1)
    simulator = NodeSimulator(kube, "system:serviceaccount:kube-system:plugin", {"fake-1": cards}, tmp_path,
                              register_interval=3600, workers=1).start()
    try:
        _bind(kube, "unlocked", "fake-1", cards[0].id, lock=False)
        pod = wait_until("the pod Failed", lambda: (p := kube.get_pod(NS, "unlocked"))["status"].get("phase")
                         == "Failed" and p, timeout=20)
        assert pod["status"]["reason"] == "UnexpectedAdmissionError"
        assert "no pod holds the node lock" in pod["status"]["message"]
        assert not (tmp_path / "fake-1" / "vdev").exists() or not any((tmp_path / "fake-1" / "vdev").iterdir())
    finally:
        simulator.stop()


def test_each_nodes_client_acts_as_the_plugin_of_that_node(kube):
    first = impersonating(kube, "system:serviceaccount:kube-system:plugin", "fake-7")
    second = impersonating(kube, "system:serviceaccount:kube-system:plugin", "fake-8")
    headers = first.api_client.default_headers
    assert headers["Impersonate-User"] == "system:serviceaccount:kube-system:plugin"
    assert headers["Impersonate-Extra-authentication.kubernetes.io%2Fnode-name"] == "fake-7"
    assert second.api_client.default_headers["Impersonate-Extra-authentication.kubernetes.io%2Fnode-name"] == "fake-8"
    assert "Impersonate-User" not in kube.api_client.default_headers  # the admin client is left as it was
    assert first.api_client.rest_client is kube.api_client.rest_client  # one connection pool for every node
