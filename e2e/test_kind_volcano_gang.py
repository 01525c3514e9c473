"""A Volcano gang on one node, served together (issue 34): three DCU shares of one card, with
the allocation our extender's Volcano allocate writes (scheduler/allocation.py, the product's
bytes), bound to one node within milliseconds of each other, as Volcano's binder dispatches a
session's binds. All three await the kubelet's Allocate at once with no node lock; the device
plugin asks the kubelet's pod resources List which one each call admits
(deviceplugin/admissions.py). Every pod runs, and the vdev0.conf each container reads names
its own memory and a compute-unit mask disjoint from the others'.

The allocation is written as Volcano's identity by a pod patch before the Binding (the order
of upstream Volcano's allocateFunc and bind): admission lets no one create a pod that carries
it, so the pods cannot be created with it and spec.nodeName at once.

    flock /tmp/kind.lock pytest -m kind e2e/test_kind_volcano_gang.py
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from e2e.kindcluster import RELEASE_NAMESPACE, KindBackend
from e2e.scenarios import wait_until
from e2e.volcano_scenarios import HCU, volcano, volcano_pod
from e2e.volcano_standin import STRATEGIC_MERGE
from hami_dcu.cli.localcluster.pods import Ctr
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice
from hami_dcu.scheduler.allocation import allocation_annotations

pytestmark = pytest.mark.kind

# name -> (memory MiB, cores %): three shares of one card
GANG = {"gang-a": (1000, 10), "gang-b": (2000, 25), "gang-c": (3000, 40)}


@pytest.fixture
def volcano_mode(kind: KindBackend) -> KindBackend:
    kind.ensure_mode("volcano")
    kind.clean()
    return kind


def _mask(conf: dict[str, list[str]]) -> int:
    low, high = (int(word, 16) for word in conf["cu_mask"])
    return low | high << 64


def test_three_shares_of_one_card_bound_together_each_run_on_their_own_share(volcano_mode: KindBackend) -> None:
    kind = volcano_mode
    node = sorted(kind.cards)[0]
    card = kind.cards[node][0]
    standin = volcano(kind)  # Volcano's identity: its writes pass admission as Volcano's
    pods = {name: volcano_pod(kind, name, [Ctr("main", 1, memory, cores, names=HCU.resources)])
            for name, (memory, cores) in GANG.items()}
    now = datetime.now(UTC)
    for name, (memory, cores) in GANG.items():
        device = ContainerDevice(uuid=card.id_in(HCU), type=HCU.device_type, usedmem=memory, usedcores=cores)
        annotations = allocation_annotations(HCU, [[device]], node, now)  # what allocateFunc writes
        standin.kube.request("PATCH", f"/api/v1/namespaces/{kind.namespace}/pods/{name}",
                             body={"metadata": {"annotations": annotations}}, content_type=STRATEGIC_MERGE)
    with ThreadPoolExecutor(max_workers=len(pods)) as binds:
        for done in [binds.submit(standin.bind, pod, node) for pod in pods.values()]:
            done.result()

    def all_running() -> bool:
        for name in GANG:
            status = kind.kube.get_pod(kind.namespace, name).get("status") or {}
            assert status.get("phase") != "Failed", f"{name} failed: {status.get('reason')}: {status.get('message')}"
            if status.get("phase") != "Running":
                return False
        return True

    wait_until("the gang of three Running", all_running, timeout=120, interval=0.5)

    masks: dict[str, int] = {}
    for name, (memory, cores) in GANG.items():
        pod = kind.kube.get_pod(kind.namespace, name)
        assert pod["metadata"]["annotations"][keys.POD_BIND_PHASE] == keys.BIND_PHASE_SUCCESS
        conf = kind.vdev_conf_inside(name)  # read inside the container
        assert conf["PciBusId"] == [card.pci_bus_id], (name, conf)
        assert conf["mem"] == [f"{memory} MiB"], (name, conf)
        assert conf["cu_count"] == [str(cores * card.compute_units // 100)], (name, conf)
        masks[name] = _mask(conf)
        assert bin(masks[name]).count("1") == cores * card.compute_units // 100, (name, conf)
    names = sorted(masks)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            assert masks[first] & masks[second] == 0, f"{first} and {second} share compute units: {masks}"
    plugin = kind.plugin_pod(node)
    assert plugin is not None
    log = kind.kubectl("logs", "-n", RELEASE_NAMESPACE, plugin, timeout=30)
    named = [line for line in log.splitlines() if "as the pod being admitted" in line]
    print("device plugin, the kubelet's List naming the admitted pod:", *named, sep="\n  ")
    # Bound within milliseconds, the gang awaited together: some call was decided by the List.
    assert any("awaiting" in line for line in named), "no Allocate found several pods awaiting"
