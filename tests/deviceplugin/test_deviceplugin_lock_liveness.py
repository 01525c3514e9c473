"""The node lock after Allocate (issue 12, cause 1): a release that fails is retried, and the
reconcile frees any lock whose holder no longer needs it, counted by reason."""

from datetime import UTC, datetime, timedelta

import pytest
from dp_helpers import dev

from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol import lockpurpose as purpose

DCU = keys.DCU_NAMING  # the naming set these tests speak


def released(core, reason):
    return core.metrics.value("hami_dcu_plugin_node_lock_releases_total", node="n1", reason=reason)


def test_a_lock_release_that_fails_after_a_successful_allocate_is_retried(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    real_patch = dcu_node.kube.patch_node_metadata
    failures = {"left": 10}  # more than one release call retries by itself: an outage of a moment

    def flaky_lock_writes(name, annotations=None, labels=None, resource_version=None):
        if keys.NODE_LOCK in (annotations or {}) and failures["left"]:
            failures["left"] -= 1
            raise KubeError(500, "InternalError", "injected before commit")
        return real_patch(name, annotations, labels, resource_version)

    dcu_node.kube.patch_node_metadata = flaky_lock_writes
    try:
        core.allocate([["DCU-S1-fake-0"]])
        assert core.idle(30)  # the release follows the answer
    finally:
        dcu_node.kube.patch_node_metadata = real_patch
    assert failures["left"] == 0
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert dcu_node.lock_value() is None


def test_an_allocate_survives_a_lost_answer_writing_the_pod(dcu_node):
    """The pod write lands but its answer is a 500: the pod must not be failed for it."""
    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    real_patch = dcu_node.kube.patch_pod_metadata
    lost = {"left": 1}

    def answer_lost_once(namespace, name, annotations=None, labels=None, resource_version=None):
        result = real_patch(namespace, name, annotations, labels, resource_version)
        if lost["left"]:
            lost["left"] -= 1
            raise KubeError(500, "InternalError", "injected after commit")
        return result

    dcu_node.kube.patch_pod_metadata = answer_lost_once
    try:
        core.allocate([["DCU-S1-fake-0"]])
    finally:
        dcu_node.kube.patch_pod_metadata = real_patch
    assert lost["left"] == 0
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert dcu_node.annotation("p", DCU.pod_devices_to_allocate) == ";"
    assert dcu_node.lock_value() is None


def lock_for(dcu_node, name, age=0.0):
    clock = (lambda: datetime.now(UTC) - timedelta(seconds=age)) if age else (lambda: datetime.now(UTC))
    NodeLock(dcu_node.kube, clock=clock).take("n1", "default", name)


@pytest.mark.parametrize(("setup", "reason"), [
    ("running", purpose.HOLDER_RUNNING),
    ("success", purpose.ALLOCATION_DONE),
    ("elsewhere", purpose.BOUND_ELSEWHERE),
    ("unbound", purpose.HOLDER_UNBOUND),
    ("gone", purpose.HOLDER_GONE),
])
def test_reconcile_frees_a_lock_whose_holder_no_longer_needs_it(dcu_node, setup, reason):
    core = dcu_node.core()
    kube = dcu_node.kube
    if setup in ("running", "success"):
        dcu_node.bind("h", [("c", [dev("S1", 1000, 10)])], lock=False)
        if setup == "running":
            kube.patch_pod_status("default", "h", {"phase": "Running"})
        else:
            kube.patch_pod_metadata("default", "h", annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
        lock_for(dcu_node, "h")
    elif setup == "elsewhere":
        kube.create_node({"metadata": {"name": "other"}})
        dcu_node.bind("h", [("c", [dev("S1", 1000, 10)])], lock=False, node="other")
        lock_for(dcu_node, "h")
    elif setup == "unbound":
        kube.create_pod("default", {"metadata": {"name": "h"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        lock_for(dcu_node, "h", age=60)  # its bind died between the lock and the Binding
    else:
        kube.create_pod("default", {"metadata": {"name": "h"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        lock_for(dcu_node, "h")
        kube.delete_pod("default", "h")
    core.reconcile()
    assert dcu_node.lock_value() is None
    assert released(core, reason) == 1


def test_reconcile_keeps_the_lock_of_a_holder_waiting_for_its_allocate(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("waiting", [("c", [dev("S1", 1000, 10)])])
    kube = dcu_node.kube
    kube.create_pod("default", {"metadata": {"name": "young"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    core.reconcile()
    assert dcu_node.lock_value() is not None  # bound here, allocating: the kubelet will call
    NodeLock(kube).release("n1", "default", "waiting")
    lock_for(dcu_node, "young")
    core.reconcile()
    assert dcu_node.lock_value() is not None  # unbound, but within the bind window
