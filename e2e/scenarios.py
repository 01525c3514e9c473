"""Whole-system scenarios, written once and run on every cluster backend.

A backend (the local cluster, or kind) gives a `Kube` client, its nodes and their mock
cards, a way to read the vdev files a node's device plugin wrote, and restarts of the
plugin and the scheduler. Scenarios only create pods and read objects through the API,
so they mean the same on both backends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hami_dcu.cli.localcluster.pods import Ctr, MockCard, events_for, pod_manifest
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_node_devices, decode_pod_devices

DCU = keys.DCU_NAMING  # the naming set the shared scenarios speak

JSON = dict[str, Any]


class ClusterBackend(Protocol):
    kube: Kube
    namespace: str
    cards: dict[str, list[MockCard]]  # node -> its cards, in plugin index order

    def vdev_files(self, node: str) -> dict[str, str]:
        """vdev directory name -> content of its vdev0.conf, on that node."""

    def restart_device_plugin(self, node: str) -> None: ...

    def restart_scheduler(self) -> None: ...


# --- pod helpers ---------------------------------------------------------------------------


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def phase(kube: Kube, namespace: str, name: str) -> str:
    try:
        return kube.get_pod(namespace, name)["status"].get("phase", "")
    except NotFoundError:
        return "Gone"


def wait_running(backend: ClusterBackend, name: str, timeout: float = 60.0) -> JSON:
    def running() -> JSON | None:
        pod = backend.kube.get_pod(backend.namespace, name)
        status = pod.get("status") or {}
        if status.get("phase") == "Failed":
            raise AssertionError(f"pod {name} failed: {status.get('message') or status.get('reason')}")
        return pod if status.get("phase") == "Running" else None

    return wait_until(f"pod {name} Running", running, timeout)


def allocation(pod: JSON, naming: keys.Naming = DCU) -> list[list[Any]]:
    key = naming.pod_devices_allocated
    return decode_pod_devices((pod["metadata"].get("annotations") or {}).get(key, ""), key)


def vdev_for(backend: ClusterBackend, pod: JSON, container: str) -> dict[str, str]:
    """The parsed vdev0.conf the plugin wrote for this pod's container (keys: lines' names;
    the two cu_mask lines become cu_mask1 and cu_mask2)."""
    node = pod["spec"]["nodeName"]
    prefix = f"{pod['metadata']['uid']}_{container}_"
    matches = [content for dirname, content in backend.vdev_files(node).items() if dirname.startswith(prefix)]
    assert len(matches) == 1, f"expected one vdev dir for {prefix} on {node}, found {len(matches)}"
    parsed: dict[str, str] = {}
    masks = 0
    for line in matches[0].splitlines():
        key, _, value = line.partition(":")
        if key == "cu_mask":
            masks += 1
            key = f"cu_mask{masks}"
        parsed[key] = value.strip()
    return parsed


def card_of(backend: ClusterBackend, node: str, card_id: str, naming: keys.Naming = DCU) -> MockCard:
    return next(c for c in backend.cards[node] if c.id_in(naming) == card_id)


def assert_no_card_over_capacity(backend: ClusterBackend, naming: keys.Naming = DCU) -> None:
    """Per card, the live pods' allocations fit the registered slots, memory and cores."""
    usage: dict[str, list[int]] = {}
    for pod in backend.kube.list_pods(namespace=backend.namespace).items:
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for container in allocation(pod, naming):
            for dev in container:
                slot = usage.setdefault(dev.uuid, [0, 0, 0])
                slot[0] += 1
                slot[1] += dev.usedmem
                slot[2] += dev.usedcores
    for node in backend.cards:
        annotations = backend.kube.get_node(node)["metadata"].get("annotations") or {}
        for card in decode_node_devices(annotations[naming.node_register], naming.node_register):
            slots, memory, cores = usage.get(card.id, [0, 0, 0])
            assert slots <= card.count, f"{card.id}: {slots} slots > {card.count}"
            assert memory <= card.devmem, f"{card.id}: {memory} MiB > {card.devmem}"
            assert cores <= card.devcore, f"{card.id}: {cores}% > {card.devcore}"


def assert_no_lock_left(backend: ClusterBackend) -> None:
    for node in backend.cards:
        annotations = backend.kube.get_node(node)["metadata"].get("annotations") or {}
        assert keys.NODE_LOCK not in annotations, f"node {node} still locked: {annotations[keys.NODE_LOCK]}"


# --- the scenarios -------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[ClusterBackend], None]
    nodes: int = 2
    cards_per_node: int = 2
    restarts: bool = False  # needs restart_device_plugin / restart_scheduler


SCENARIOS: list[Scenario] = []


def scenario(nodes: int = 2, cards_per_node: int = 2, restarts: bool = False) -> Callable[..., Any]:
    def register(fn: Callable[[ClusterBackend], None]) -> Callable[[ClusterBackend], None]:
        SCENARIOS.append(Scenario(fn.__name__, fn, nodes, cards_per_node, restarts))
        return fn

    return register


@scenario()
def shared_pod_gets_its_vdev(b: ClusterBackend) -> None:
    created = b.kube.create_pod(b.namespace, pod_manifest("shared", [Ctr("main", 1, 2000, 15)]))
    assert created["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER_NAME, "webhook did not route the pod"
    pod = wait_running(b, "shared")
    annotations = pod["metadata"]["annotations"]
    assert annotations[keys.POD_BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    (dev,) = allocation(pod)[0]
    assert (dev.usedmem, dev.usedcores) == (2000, 15)
    card = card_of(b, pod["spec"]["nodeName"], dev.uuid)
    conf = vdev_for(b, pod, "main")
    assert conf["PciBusId"] == card.pci_bus_id
    assert conf["cu_mask1"] == "0x000000000003ffff" and conf["cu_mask2"] == "0x0000000000000000"
    assert conf["cu_count"] == str(15 * card.compute_units // 100)
    assert conf["mem"] == "2000 MiB"
    assert_no_lock_left(b)


def first_card(b: ClusterBackend) -> MockCard:
    return b.cards[sorted(b.cards)[0]][0]


@scenario(nodes=1, cards_per_node=1)
def fifth_pod_waits_with_a_reason(b: ClusterBackend) -> None:
    # Pinned to one card, so the scenario means the same on any topology.
    pin = {keys.USE_DCU_UUID: first_card(b).id}
    for i in range(4):
        b.kube.create_pod(b.namespace, pod_manifest(f"fill{i}", [Ctr("c", 1, 1000, 10)], pin))
    for i in range(4):
        wait_running(b, f"fill{i}")
    b.kube.create_pod(b.namespace, pod_manifest("fifth", [Ctr("c", 1, 1000, 10)], pin))

    def reason() -> str | None:
        for event in events_for(b.kube, b.namespace, "fifth"):
            if event.get("reason") in ("FailedScheduling", "FilteringFailed"):
                return event.get("message")
        return None

    message = wait_until("a FailedScheduling event for the fifth pod", reason, timeout=30)
    assert "slot" in message.lower(), message
    assert phase(b.kube, b.namespace, "fifth") == "Pending"
    assert_no_card_over_capacity(b)


def _placement(b: ClusterBackend, policy: str) -> tuple[str, str]:
    first = b.kube.create_pod(
        b.namespace, pod_manifest(f"{policy}-a", [Ctr("c", 1, 1000, 10)], {keys.NODE_SCHEDULER_POLICY: policy})
    )
    node_a = wait_running(b, first["metadata"]["name"])["spec"]["nodeName"]
    second = b.kube.create_pod(
        b.namespace, pod_manifest(f"{policy}-b", [Ctr("c", 1, 1000, 10)], {keys.NODE_SCHEDULER_POLICY: policy})
    )
    node_b = wait_running(b, second["metadata"]["name"])["spec"]["nodeName"]
    return node_a, node_b


@scenario(nodes=2, cards_per_node=1)
def binpack_packs_and_spread_spreads(b: ClusterBackend) -> None:
    a, c = _placement(b, "binpack")
    assert a == c, f"binpack put the two pods on {a} and {c}"
    for name in ("binpack-a", "binpack-b"):
        b.kube.delete_pod(b.namespace, name)
    wait_until(
        "binpack pods gone", lambda: all(phase(b.kube, b.namespace, n) == "Gone" for n in ("binpack-a", "binpack-b"))
    )
    a, c = _placement(b, "spread")
    assert a != c, f"spread put both pods on {a}"


@scenario(nodes=1, cards_per_node=2)
def type_and_uuid_selection(b: ClusterBackend) -> None:
    node = next(iter(b.cards))
    wanted = b.cards[node][0]
    pod = b.kube.create_pod(
        b.namespace, pod_manifest("pinned", [Ctr("c", 1, 1000, 10)], {keys.USE_DCU_UUID: wanted.id})
    )
    assert allocation(wait_running(b, pod["metadata"]["name"]))[0][0].uuid == wanted.id
    avoided = b.kube.create_pod(
        b.namespace, pod_manifest("avoid", [Ctr("c", 1, 1000, 10)], {keys.NOUSE_DCU_UUID: wanted.id})
    )
    assert allocation(wait_running(b, avoided["metadata"]["name"]))[0][0].uuid != wanted.id
    b.kube.create_pod(b.namespace, pod_manifest("wrong-type", [Ctr("c", 1, 1000, 10)], {DCU.use_type: "Z100"}))

    def mismatch() -> str | None:
        return next(
            (
                e["message"]
                for e in events_for(b.kube, b.namespace, "wrong-type")
                if "type" in e.get("message", "").lower()
            ),
            None,
        )

    wait_until("a type-mismatch reason", mismatch, timeout=30)
    assert phase(b.kube, b.namespace, "wrong-type") == "Pending"


@scenario(nodes=1, cards_per_node=2)
def a_native_sidecar_keeps_its_card(b: ClusterBackend) -> None:
    """A native sidecar (an init container with restartPolicy Always) holds its card for the
    pod's life: the app container gets the other card, and a second such pod pinned to the
    same two cards does not fit."""
    node = next(iter(b.cards))
    ids = [c.id for c in b.cards[node][:2]]

    def manifest(name: str) -> JSON:
        made = pod_manifest(name, [Ctr("proxy", 1, init=True), Ctr("main", 1)], {keys.USE_DCU_UUID: ",".join(ids)})
        made["spec"]["initContainers"][0]["restartPolicy"] = "Always"
        return made

    b.kube.create_pod(b.namespace, manifest("sidecar-a"))
    proxy, main = allocation(wait_running(b, "sidecar-a"))
    assert sorted([proxy[0].uuid, main[0].uuid]) == sorted(ids), (proxy, main)
    b.kube.create_pod(b.namespace, manifest("sidecar-b"))
    wait_until("sidecar-b's scheduling failure", lambda: events_for(b.kube, b.namespace, "sidecar-b"), timeout=30)
    assert phase(b.kube, b.namespace, "sidecar-b") == "Pending"


@scenario(nodes=1, cards_per_node=1)
def a_native_sidecar_shares_a_card_with_its_app_container(b: ClusterBackend) -> None:
    """A native sidecar may hold a share (the webhook refuses shares in regular init
    containers only): the sidecar's share beside the app container's on one card, both
    counted (issue 23: status counted only the larger)."""
    made = pod_manifest("sidecar-share", [Ctr("proxy", 1, 1000, 10, init=True), Ctr("main", 1, 2000, 20)],
                        {keys.USE_DCU_UUID: first_card(b).id})
    made["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    b.kube.create_pod(b.namespace, made)
    proxy, main = allocation(wait_running(b, "sidecar-share"))
    assert proxy[0].uuid == main[0].uuid == first_card(b).id, (proxy, main)
    assert_no_card_over_capacity(b)


@scenario(nodes=1, cards_per_node=1)
def init_container_sharing_is_denied(b: ClusterBackend) -> None:
    manifest = pod_manifest("init-share", [Ctr("setup", 1, 1000, 10, init=True), Ctr("main", 1)])
    try:
        b.kube.create_pod(b.namespace, manifest)
    except KubeError as exc:
        assert "init" in exc.message.lower(), exc.message
    else:
        raise AssertionError("a pod sharing a DCU in an init container was admitted")
    assert phase(b.kube, b.namespace, "init-share") == "Gone"


@scenario(nodes=1, cards_per_node=2)
def dcu_none_dcu_containers(b: ClusterBackend) -> None:
    b.kube.create_pod(b.namespace, pod_manifest("mixed", [Ctr("a", 1, 1000, 20), Ctr("none"), Ctr("b", 1, 3000, 30)]))
    pod = wait_running(b, "mixed")
    entries = allocation(pod)
    assert [len(e) for e in entries] == [1, 0, 1]
    assert (entries[0][0].usedmem, entries[2][0].usedmem) == (1000, 3000)
    assert vdev_for(b, pod, "a")["mem"] == "1000 MiB"
    assert vdev_for(b, pod, "b")["mem"] == "3000 MiB"


@scenario(nodes=1, cards_per_node=2)
def whole_card_pod(b: ClusterBackend) -> None:
    b.kube.create_pod(b.namespace, pod_manifest("whole", [Ctr("c", 2)]))
    pod = wait_running(b, "whole")
    devices = allocation(pod)[0]
    assert len({d.uuid for d in devices}) == 2
    node = pod["spec"]["nodeName"]
    assert all(d.usedmem == card_of(b, node, d.uuid).memory_mib and d.usedcores == 100 for d in devices)
    assert not [d for d in b.vdev_files(node) if d.startswith(pod["metadata"]["uid"])], "whole cards get no vdev"
    b.kube.create_pod(
        b.namespace, pod_manifest("after-whole", [Ctr("c", 1, 100, 1)], {keys.USE_DCU_UUID: devices[0].uuid})
    )
    time.sleep(1)
    assert phase(b.kube, b.namespace, "after-whole") == "Pending", "a whole card was shared"


@scenario(nodes=1, cards_per_node=1)
def delete_frees_share_and_vdev(b: ClusterBackend) -> None:
    pin = {keys.USE_DCU_UUID: first_card(b).id}
    b.kube.create_pod(b.namespace, pod_manifest("big", [Ctr("c", 1, 60000, 90)], pin))
    pod = wait_running(b, "big")
    node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
    b.kube.create_pod(b.namespace, pod_manifest("waits", [Ctr("c", 1, 60000, 90)], pin))
    time.sleep(1)
    assert phase(b.kube, b.namespace, "waits") == "Pending"
    b.kube.delete_pod(b.namespace, "big")
    wait_running(b, "waits")
    wait_until(
        "the deleted pod's vdev dir removed",
        lambda: not [d for d in b.vdev_files(node) if d.startswith(uid)],
        timeout=60,
    )


@scenario(nodes=1, cards_per_node=2, restarts=True)
def restarts_lose_nothing(b: ClusterBackend) -> None:
    b.kube.create_pod(b.namespace, pod_manifest("before", [Ctr("c", 1, 1000, 50)]))
    before = wait_running(b, "before")
    node = before["spec"]["nodeName"]
    mask_before = vdev_for(b, before, "c")["cu_mask1"]
    b.restart_device_plugin(node)
    b.restart_scheduler()
    b.kube.create_pod(
        b.namespace, pod_manifest("after", [Ctr("c", 1, 1000, 50)], {keys.USE_DCU_UUID: allocation(before)[0][0].uuid})
    )
    after = wait_running(b, "after")
    mask_after = vdev_for(b, after, "c")["cu_mask1"]
    assert int(mask_before, 16) & int(mask_after, 16) == 0, f"CU masks overlap: {mask_before} {mask_after}"
    assert_no_card_over_capacity(b)
    assert vdev_for(b, before, "c")["cu_mask1"] == mask_before


@scenario(nodes=10, cards_per_node=3)
def hundred_pods_over_ten_nodes(b: ClusterBackend) -> None:
    names = [f"bulk{i:03d}" for i in range(100)]
    for i, name in enumerate(names):
        b.kube.create_pod(b.namespace, pod_manifest(name, [Ctr("c", 1, 4000 + (i % 5) * 1000, 5 + i % 20)]))
    wait_until(
        "100 pods Running",
        lambda: sum(phase(b.kube, b.namespace, n) == "Running" for n in names) == 100,
        timeout=240,
        interval=0.5,
    )
    assert_no_card_over_capacity(b)
    assert_no_lock_left(b)


@dataclass
class Topology:
    nodes: int
    cards_per_node: int
    names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.names = [f"node{i}" for i in range(self.nodes)]
