"""The one-writer rule for allocation state (issue 11, findings 2 and 3), as a table."""

import pytest

from hami_dcu.common.protocol import keys, writers
from hami_dcu.common.protocol.writers import BINDING, NODE, POD, Caller, Identities

DCU = keys.DCU_NAMING  # the naming set these tests speak

SCHEDULER = "system:serviceaccount:kube-system:hami-dcu-scheduler"
PLUGIN = "system:serviceaccount:kube-system:hami-dcu-device-plugin"
IDS = Identities(scheduler=frozenset({SCHEDULER}), device_plugin=frozenset({PLUGIN}))
TENANT = Caller("alice")
EXTENDER = Caller(SCHEDULER)
PLUGIN_N0 = Caller(PLUGIN, node="node0")


def pod(node: str | None = None, **annotations: str) -> dict:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": "p", "annotations": dict(annotations)}, "spec": spec}


def node_obj(name: str, **annotations: str) -> dict:
    return {"metadata": {"name": name, "annotations": dict(annotations)}}


ALLOC = {"hami.io/dcu-devices-allocated": "DCU-A,DCU,1000,10:;", "hami.io/vgpu-node": "node0"}
TO_ALLOC = DCU.pod_devices_to_allocate


@pytest.mark.parametrize(("kind", "caller", "new", "old", "refused"), [
    # finding 3: a tenant forges a holding at CREATE, whatever the pod
    (POD, TENANT, pod(**ALLOC), None, "hami.io/dcu-devices-allocated, hami.io/vgpu-node"),
    # finding 2: a tenant rewrites the allocation after the Binding
    (POD, TENANT, pod("node0", **{TO_ALLOC: "x"}), pod("node0", **{TO_ALLOC: "y"}), TO_ALLOC),
    (POD, TENANT, pod("node0"), pod("node0", **{TO_ALLOC: "y"}), TO_ALLOC),  # removing is writing too
    (POD, TENANT, pod("node0", **{TO_ALLOC: "y"}, other="1"), pod("node0", **{TO_ALLOC: "y"}), None),
    (POD, TENANT, pod(other="1"), None, None),
    (BINDING, TENANT, pod(**ALLOC), None, "hami.io/dcu-devices-allocated"),
    (BINDING, EXTENDER, pod(**ALLOC), None, None),
    (BINDING, PLUGIN_N0, pod(**ALLOC), None, "hami.io/dcu-devices-allocated"),
    # the plugin records progress on its own pods only, and never the scheduler's accounting
    (POD, PLUGIN_N0, pod("node0", **{TO_ALLOC: ";"}), pod("node0", **{TO_ALLOC: "y"}), None),
    (POD, PLUGIN_N0, pod("node1", **{TO_ALLOC: ";"}), pod("node1", **{TO_ALLOC: "y"}), "only its own node"),
    (POD, PLUGIN_N0, pod("node0", **ALLOC), pod("node0"), "hami.io/dcu-devices-allocated"),
    (POD, Caller(PLUGIN), pod("node0", **{TO_ALLOC: ";"}), pod("node0", **{TO_ALLOC: "y"}), "names no node"),
    # nodes: the lock is the extender's and the plugin's; registration the plugin's, on its node
    (NODE, EXTENDER, node_obj("node1", **{keys.NODE_LOCK: "l"}), node_obj("node1"), None),
    (NODE, EXTENDER, node_obj("node1", **{DCU.node_register: "r"}), node_obj("node1"), DCU.node_register),
    (NODE, PLUGIN_N0, node_obj("node0", **{DCU.node_register: "r"}), node_obj("node0"), None),
    (NODE, PLUGIN_N0, node_obj("node1", **{DCU.node_register: "r"}), node_obj("node1"), "not node node1"),
    (NODE, PLUGIN_N0, node_obj("node1", other="x"), node_obj("node1"), "not node node1"),  # NodeRestriction-like
    (NODE, Caller("system:node:node0"), node_obj("node0", **{DCU.node_register: "r", keys.NODE_LOCK: "l"}),
     node_obj("node0", **{DCU.node_register: "r"}), keys.NODE_LOCK),
    (NODE, TENANT, node_obj("node0", other="x"), node_obj("node0", other="y"), None),
])
def test_judge(kind, caller, new, old, refused):
    why = writers.judge(kind, caller, new, old, IDS)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why


HAMI_SCHEDULER = Caller("system:serviceaccount:kube-system:hami-scheduler",
                        groups=frozenset({"system:serviceaccounts", "system:serviceaccounts:kube-system"}))
HAMI_PLUGIN = Caller("system:serviceaccount:kube-system:hami-device-plugin",
                     groups=frozenset({"system:serviceaccounts", "hami-plugins"}))
BESIDE_HAMI = Identities(scheduler=frozenset({SCHEDULER}), device_plugin=frozenset({PLUGIN}),
                         node_lock_users=frozenset({HAMI_SCHEDULER.username}),
                         node_lock_groups=frozenset({"hami-plugins"}))
SHARED = {keys.POD_NODE: "node0", keys.POD_TIME: "1", keys.POD_BIND_PHASE: "allocating", keys.POD_BIND_TIME: "1"}
REGISTERED = {DCU.node_register: "r"}


def gpu_pod(node: str | None = None, resource: str = "nvidia.com/gpu", section: str = "limits",
            init: bool = False, **annotations: str) -> dict:
    manifest = pod(node, **annotations)
    containers = [{"name": "c", "resources": {section: {resource: "1"}}}]
    manifest["spec"]["initContainers" if init else "containers"] = containers
    return manifest


@pytest.mark.parametrize(("kind", "caller", "new", "old", "refused"), [
    # HAMi's scheduler places its own (non-DCU) pods: the keys it shares with us are its to write
    (POD, HAMI_SCHEDULER, gpu_pod(**SHARED), gpu_pod(), None),
    (POD, HAMI_SCHEDULER, gpu_pod(**SHARED), None, None),
    (POD, TENANT, pod(**SHARED), None, None),
    # ... but not on a DCU pod, of either naming set, in any container or section
    (POD, HAMI_SCHEDULER, gpu_pod(resource="hygon.com/dcunum", **SHARED), gpu_pod(resource="hygon.com/dcunum"),
     "hami.io/bind-phase, hami.io/bind-time, hami.io/vgpu-node, hami.io/vgpu-time"),
    (POD, HAMI_SCHEDULER, gpu_pod(resource="hygon.com/hcumem", section="requests", **SHARED), None,
     "hami.io/vgpu-node"),
    (POD, HAMI_SCHEDULER, gpu_pod(resource="hygon.com/dcucores", init=True, **SHARED), None, "hami.io/vgpu-node"),
    # a pod carrying our allocation is a DCU pod, before or after the write
    (POD, HAMI_SCHEDULER, pod("node0", **{TO_ALLOC: "y", keys.POD_BIND_PHASE: "failed"}),
     pod("node0", **{TO_ALLOC: "y"}), "hami.io/bind-phase"),
    (POD, HAMI_SCHEDULER, pod("node0", **{TO_ALLOC: "y"}), pod("node0", **{TO_ALLOC: "y", keys.POD_BIND_PHASE: "s"}),
     "hami.io/bind-phase"),
    # our own allocation keys stay ours on every pod
    (POD, HAMI_SCHEDULER, gpu_pod(**{"hami.io/hcu-devices-allocated": "x"}), gpu_pod(),
     "hami.io/hcu-devices-allocated"),
    # a Binding shows nothing of its pod: the shared keys are guarded on every Binding
    (BINDING, HAMI_SCHEDULER, pod(**{keys.POD_BIND_PHASE: "allocating"}), None, "hami.io/bind-phase"),
    (BINDING, HAMI_SCHEDULER, pod(), None, None),
    # the node lock: anyone's on a node without DCUs; on a DCU node ours and the listed ones'
    (NODE, HAMI_SCHEDULER, node_obj("gpu0", **{keys.NODE_LOCK: "l"}), node_obj("gpu0"), None),
    (NODE, TENANT, node_obj("gpu0", **{keys.NODE_LOCK: "l"}), node_obj("gpu0"), None),
    (NODE, HAMI_SCHEDULER, node_obj("node0", **REGISTERED, **{keys.NODE_LOCK: "l"}), node_obj("node0", **REGISTERED),
     None),
    (NODE, HAMI_PLUGIN, node_obj("node0", **REGISTERED), node_obj("node0", **REGISTERED, **{keys.NODE_LOCK: "l"}),
     None),
    (NODE, TENANT, node_obj("node0", **REGISTERED, **{keys.NODE_LOCK: "l"}), node_obj("node0", **REGISTERED),
     keys.NODE_LOCK),
    (NODE, Caller("system:node:node0"), node_obj("node0", **{"hami.io/node-hcu-register": "r", keys.NODE_LOCK: "l"}),
     node_obj("node0", **{"hami.io/node-hcu-register": "r"}), keys.NODE_LOCK),
    # listed identities get the lock only, never the registration (a node becoming a DCU node
    # with its lock in the same write is refused for the registration)
    (NODE, HAMI_SCHEDULER, node_obj("gpu0", **REGISTERED, **{keys.NODE_LOCK: "l"}), node_obj("gpu0"),
     DCU.node_register),
])
def test_judge_beside_hami(kind, caller, new, old, refused):
    why = writers.judge(kind, caller, new, old, BESIDE_HAMI)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why, why


def test_the_listed_lock_writers_are_trusted_with_nothing_when_not_listed():
    mixed = node_obj("node0", **REGISTERED, **{keys.NODE_LOCK: "l"})
    assert keys.NODE_LOCK in writers.judge(NODE, HAMI_SCHEDULER, mixed, node_obj("node0", **REGISTERED), IDS)


def test_nobody_is_trusted_without_identities():
    assert writers.judge(BINDING, EXTENDER, pod(**ALLOC), None, Identities()) is not None


@pytest.mark.parametrize(("user_info", "expected"), [
    ({"username": PLUGIN, "extra": {writers.NODE_NAME_EXTRA: ["node0"]}}, Caller(PLUGIN, "node0")),
    ({"username": PLUGIN, "groups": ["a", 3, "b"]}, Caller(PLUGIN, groups=frozenset({"a", "b"}))),
    ({"username": PLUGIN, "groups": "a"}, Caller(PLUGIN)),
    ({"username": PLUGIN, "extra": {writers.NODE_NAME_EXTRA: ["node0", "node1"]}}, Caller(PLUGIN)),
    ({"username": PLUGIN, "extra": {writers.NODE_NAME_EXTRA: "node0"}}, Caller(PLUGIN)),
    ({"username": 7, "extra": []}, Caller("")),
    (None, Caller("")),
])
def test_caller_from_user_info(user_info, expected):
    assert Caller.from_user_info(user_info) == expected


# --- Volcano mode (issue 24): Volcano's scheduler writes the allocation of its own pods --------

VOLCANO_USER = "system:serviceaccount:volcano-system:volcano-scheduler"
VOLCANO_IDS = Identities(scheduler=frozenset({SCHEDULER}), device_plugin=frozenset({PLUGIN}),
                         volcano=frozenset({VOLCANO_USER}))
FORK_POD = {"hami.io/hcu-devices-to-allocate": "HCU-A,HCU,2048,50:", "hami.io/hcu-devices-allocated":
            "HCU-A,HCU,2048,50:", keys.POD_BIND_PHASE: "allocating", keys.POD_NODE: "node0"}


@pytest.mark.parametrize(("kind", "new", "old", "ids", "refused"), [
    (POD, pod(**FORK_POD), pod(), VOLCANO_IDS, None),  # the fork's allocate patch
    (POD, pod(), pod(**FORK_POD), VOLCANO_IDS, None),  # its Release, stripping the keys
    (NODE, node_obj("node0", **{"hami.io/node-handshake-hcu": "Requesting_2026.01.01 10:00:00"}), node_obj("node0"),
     VOLCANO_IDS, None),
    (NODE, node_obj("node0", **{keys.NODE_LOCK: "2026-01-01T00:00:00Z,ns,p"}), node_obj("node0"), VOLCANO_IDS, None),
    # it never registers cards, and without Volcano mode it writes nothing
    (NODE, node_obj("node0", **{"hami.io/node-hcu-register": "x:"}), node_obj("node0"), VOLCANO_IDS,
     "hami.io/node-hcu-register"),
    (POD, pod(**FORK_POD), pod(), IDS, "hami.io/bind-phase"),
])
def test_volcano_writes_what_its_hygon_deviceshare_writes_and_nothing_else(kind, new, old, ids, refused):
    why = writers.judge(kind, Caller(VOLCANO_USER), new, old, ids)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why


def test_the_lock_writers_come_from_the_command_line():
    import argparse

    from hami_dcu.common.io.writer_flags import add_identity_arguments, identities_from
    parser = argparse.ArgumentParser()
    add_identity_arguments(parser)
    args = parser.parse_args(["--scheduler-identity", SCHEDULER, "--node-lock-user", "u1", "--node-lock-user", "u2",
                              "--node-lock-group", "g"])
    expected = Identities(scheduler=frozenset({SCHEDULER}), node_lock_users=frozenset({"u1", "u2"}),
                          node_lock_groups=frozenset({"g"}))
    assert identities_from(args) == expected
    assert identities_from(parser.parse_args([])) == Identities()


# --- issue 21: within its node, a device plugin changes only its own keys -------------------


def with_spec(obj: dict, **fields) -> dict:
    copy = {**obj, "spec": {**obj.get("spec", {}), **fields}}
    return copy


def labelled(obj: dict, **labels) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "labels": labels}}


BOUND = pod("node0", **{TO_ALLOC: "y"})


@pytest.mark.parametrize(("kind", "new", "old", "refused"), [
    (POD, pod("node0", **{TO_ALLOC: ";", keys.POD_BIND_PHASE: "success"}), BOUND, None),
    (POD, with_spec(BOUND, containers=[{"name": "c", "image": "attacker/shell"}]), BOUND, "on its pods only"),
    (POD, labelled(BOUND, app="x"), BOUND, "on its pods only"),
    (POD, pod("node0", **{TO_ALLOC: "y"}, team="x"), BOUND, "on its pods only"),
    (POD, pod("node0", **{TO_ALLOC: "y"}), None, "no create"),
    (NODE, node_obj("node0", **{DCU.node_handshake: "h"}), node_obj("node0"), None),
    (NODE, labelled(node_obj("node0"), **{"node-restriction.kubernetes.io/trusted": "1"}), node_obj("node0"),
     "on its node only the annotations hami.io/mutex.lock, hami.io/node-dcu-register"),
    (NODE, with_spec(node_obj("node0"), unschedulable=True), node_obj("node0"), "on its node only"),
    (NODE, node_obj("node0", team="x"), node_obj("node0"), "on its node only"),
])
def test_a_plugin_changes_only_its_own_keys_on_its_node(kind, new, old, refused):
    why = writers.judge(kind, PLUGIN_N0, new, old, IDS)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why, why
    # Nobody else is narrowed by this rule (RBAC and the other rules decide for them).
    assert writers.plugin_fields(kind, TENANT, new, old, IDS) is None


@pytest.mark.parametrize(("kind", "new", "old", "refused"), [
    (NODE, node_obj("node1", **{keys.NODE_LOCK: "l"}), node_obj("node1"), None),
    (NODE, node_obj("node1"), node_obj("node1", **{keys.NODE_LOCK: "l"}), None),
    (NODE, with_spec(node_obj("node1"), taints=[{"key": "evil", "effect": "NoSchedule"}]), node_obj("node1"),
     "not update nodes node1 otherwise"),
    (NODE, with_spec(node_obj("node1"), unschedulable=True), node_obj("node1"), "may change on nodes only"),
    (NODE, labelled(node_obj("node1"), dcu="off"), node_obj("node1"), "may change on nodes only"),
    (NODE, node_obj("node1", team="x"), node_obj("node1"), "may change on nodes only"),
    (POD, labelled(BOUND, app="x"), BOUND, "not update pods p otherwise"),
    (BINDING, pod(**ALLOC), None, None),
])
def test_the_extender_changes_only_the_lock_of_a_node(kind, new, old, refused):
    why = writers.judge(kind, EXTENDER, new, old, IDS)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why, why


VOLCANO_IDS = Identities(scheduler=frozenset({SCHEDULER}), device_plugin=frozenset({PLUGIN}),
                         volcano=frozenset({"system:serviceaccount:volcano-system:volcano-scheduler"}))


@pytest.mark.parametrize(("new", "old", "refused"), [
    (pod(**ALLOC), pod(), None),  # allocateFunc: the allocation of a pod not bound yet
    (pod(), pod(**ALLOC), None),  # deallocateFunc: removed again
    (pod("node0", **ALLOC), pod("node0"), "not update pods p otherwise"),  # a bound pod: only by its Binding
    (pod(**ALLOC, team="x"), pod(), "not update pods p otherwise"),  # nothing but the allocation
    (labelled(pod(**ALLOC), app="x"), pod(), "not update pods p otherwise"),
    (with_spec(pod(**ALLOC), containers=[{"name": "c", "image": "x"}]), pod(), "not update pods p otherwise"),
])
def test_in_volcano_mode_the_extender_writes_the_allocation_of_an_unbound_pod(new, old, refused):
    """Upstream Volcano (issue 34): the extender's allocateFunc and deallocateFunc write the pod
    before Volcano binds it (scheduler/volcanoapp.py); the chart's CEL says the same."""
    why = writers.judge(POD, EXTENDER, new, old, VOLCANO_IDS)
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why, why
    # Outside Volcano mode the extender writes pods only through their Binding.
    assert writers.judge(POD, EXTENDER, pod(**ALLOC), pod(), IDS) is not None
