"""Allocate applies admission's checks before serving (issue 21): a pod that came past the
webhook and the extender (bound with a lock, as the scheduler would) still gets nothing its
share cannot be enforced for, and a multi-card share is never served as whole cards."""

from __future__ import annotations

import re

import pytest
from dp_helpers import dev

from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, encode_pod_devices
from hami_dcu.common.protocol.podchecks import CheckSettings, Stage, refusal_of
from hami_dcu.deviceplugin.core import AllocateFailed

DCU = keys.DCU_NAMING  # the naming set these tests speak

NODE = "n1"


def bind_as_scheduler(node, name: str, containers: list[dict], devices: list[list[ContainerDevice]],
                      init: list[dict] | None = None) -> dict:
    """The pod as written (no webhook), then what /bind writes: the lock, and a Binding."""
    node.kube.create_pod("default", {"metadata": {"name": name, "labels": {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}},
                                     "spec": {"containers": containers, "initContainers": init or [],
                                              "schedulerName": keys.DEFAULT_SCHEDULER_NAME}})
    value = encode_pod_devices(devices)
    NodeLock(node.kube).acquire(NODE, "default", name)
    node.kube.create_binding("default", name, NODE, annotations={
        DCU.pod_devices_to_allocate: value, DCU.pod_devices_allocated: value, keys.POD_NODE: NODE,
        keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING, keys.POD_BIND_TIME: "1754532001",
        keys.POD_TIME: "1754532000"})
    return node.kube.get_pod("default", name)


def limits(**values: object) -> dict:
    names = {"num": DCU.resources.count, "mem": DCU.resources.memory,
             "cores": DCU.resources.cores}
    return {"limits": {names[k]: str(v) for k, v in values.items()}}


def two_card_share(node) -> tuple[dict, list[str]]:
    pod = bind_as_scheduler(node, "two", [{"name": "train", "resources": limits(num=2, mem=1000, cores=10)}],
                            [[dev("S1", 1000, 10), dev("S2", 1000, 10)]])
    return pod, ["DCU-S1-fake-0", "DCU-S2-fake-0"]


def privileged(node) -> tuple[dict, list[str]]:
    pod = bind_as_scheduler(node, "priv", [{"name": "main", "resources": limits(num=1, mem=1000),
                                            "securityContext": {"privileged": True}}], [[dev("S1", 1000, 100)]])
    return pod, ["DCU-S1-fake-0"]


def init_share(node) -> tuple[dict, list[str]]:
    pod = bind_as_scheduler(node, "init", [{"name": "main", "resources": limits(num=1)}],
                            [[dev("S1", 500, 100)], [dev("S2", 65520, 100)]],
                            init=[{"name": "setup", "resources": limits(num=1, mem=500)}])
    return pod, ["DCU-S1-fake-0"]


@pytest.mark.parametrize("attack", [two_card_share, privileged, init_share])
def test_allocate_refuses_with_admissions_words_and_serves_nothing(dcu_node, attack):
    core = dcu_node.core()
    pod, ids = attack(dcu_node)
    expected = refusal_of(pod, CheckSettings(DCU.resources), Stage.SERVE)
    assert expected is not None
    with pytest.raises(AllocateFailed, match=re.escape(expected.message)):
        core.allocate([ids])
    name = pod["metadata"]["name"]
    assert dcu_node.annotation(name, keys.POD_BIND_PHASE) == keys.BIND_PHASE_FAILED
    assert dcu_node.lock_value() is None
    assert not dcu_node.paths.vdev_dir.exists() or not any(dcu_node.paths.vdev_dir.iterdir())
    events = dcu_node.kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    assert any(e["reason"] == "DCUAllocationFailed" and expected.check in e["message"] for e in events)


def test_a_share_split_over_cards_in_the_annotations_is_never_served_whole(dcu_node):
    # The spec asks for two whole cards, the allocation names parts of two: no vdev file can
    # describe that, and serving it would hand over both cards unlimited.
    core = dcu_node.core()
    dcu_node.bind("split", [("c", [dev("S1", 1000, 10), dev("S2", 65520, 100)])])
    with pytest.raises(AllocateFailed, match="a share of 2 cards \\(DCU-S1 in part\\) cannot be enforced"):
        core.allocate([["DCU-S1-fake-0", "DCU-S2-fake-0"]])
    assert dcu_node.annotation("split", keys.POD_BIND_PHASE) == keys.BIND_PHASE_FAILED


def test_a_native_sidecar_share_is_served_its_vdcu(dcu_node):
    core = dcu_node.core()
    bind_as_scheduler(dcu_node, "side", [{"name": "main", "resources": limits(num=1)}],
                      [[dev("S1", 500, 10)], [dev("S2", 65520, 100)]],
                      init=[{"name": "proxy", "restartPolicy": "Always", "resources": limits(num=1, mem=500,
                                                                                            cores=10)}])
    (sidecar,) = core.allocate([["DCU-S1-fake-0"]])
    assert any(path == "/etc/vdev/docker/" for path, _, _ in sidecar.mounts)
    (app,) = core.allocate([["DCU-S2-fake-0"]])
    assert not any(path == "/etc/vdev/docker/" for path, _, _ in app.mounts)
    assert dcu_node.annotation("side", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
