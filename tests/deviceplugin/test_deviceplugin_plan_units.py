"""The device plugin's pure Allocate helpers (CU counts, preferred slots, rival pods) and its
node loop's pacing."""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.keys import DCU_NAMING, HCU_NAMING
from hami_dcu.deviceplugin.lockless import awaiting_pods
from hami_dcu.deviceplugin.plan import cu_count, preferred_ids, rival_pods


def test_cu_count_and_reference_examples():
    assert cu_count(60, 120) == 72 and cu_count(15, 120) == 18 and cu_count(100, 60) == 60


def test_preferred_allocation_picks_the_scheduled_card():
    pod = {"metadata": {"annotations": {"hami.io/dcu-devices-to-allocate": ";DCU-S2,DCU,1000,10:;"}}}
    available = ["DCU-S1-fake-0", "DCU-S1-fake-1", "DCU-S2-fake-0", "DCU-S2-fake-3"]
    assert preferred_ids(pod, available, [], 1, DCU_NAMING.pod_devices_to_allocate) == ["DCU-S2-fake-0"]
    assert preferred_ids({}, available, [], 2, DCU_NAMING.pod_devices_to_allocate) == ["DCU-S1-fake-0", "DCU-S1-fake-1"]


def test_rival_pods_are_only_pods_still_waiting_for_an_allocate_here():
    def pod(name, phase="Pending", node="n1", bind_phase=None, count=True, deleting=False):
        annotations = {"hami.io/bind-phase": bind_phase} if bind_phase else {}
        meta = {"namespace": "d", "name": name, "uid": name, "annotations": annotations}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        limits = {"hygon.com/dcunum": "1"} if count else {"cpu": "1"}
        return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
            "limits": limits}}]}, "status": {"phase": phase}}

    pods = [
        pod("holder", bind_phase="allocating"),
        pod("admitted", bind_phase="success"),  # waits for its image, not for an Allocate
        pod("refused", bind_phase="failed"),
        pod("running", phase="Running"),
        pod("elsewhere", node="n2"),
        pod("cpu-only", count=False),
        pod("deleting", deleting=True),
        pod("bypass"),
        pod("stale", bind_phase="allocating"),
    ]
    rivals = rival_pods(pods, "holder", "n1", "hygon.com/dcunum")
    assert [r.split(" ")[0] for r in rivals] == ["d/bypass", "d/stale"]


def test_node_loop_waits_the_interval_after_success_and_five_seconds_after_a_failure():
    from hami_dcu.deviceplugin.command import RETRY_AFTER_FAILURE, NodeLoop

    outcomes = [True, False, True]
    waits = []

    class Recorder:
        def is_set(self):
            return not outcomes

        def wait(self, seconds):
            waits.append(seconds)

    loop = NodeLoop(service=None, server=None, interval=30.0)
    loop.stopping = Recorder()
    loop.once = lambda: outcomes.pop(0)
    loop.run()
    assert waits == [30.0, RETRY_AFTER_FAILURE, 30.0] and RETRY_AFTER_FAILURE == 5.0


def _bound_pod(name: str, containers: list[dict], init: list[dict] | None = None,
               bind_phase: str | None = None) -> dict:
    annotations = {keys.POD_BIND_PHASE: bind_phase} if bind_phase else {}
    return {"metadata": {"namespace": "d", "name": name, "uid": name, "annotations": annotations},
            "spec": {"nodeName": "n1", "initContainers": init or [], "containers": containers},
            "status": {"phase": "Pending"}}


def _asking(resource: str, value: object, section: str = "limits", name: str = "c") -> dict:
    return {"name": name, "resources": {section: {resource: value}}}


@pytest.mark.parametrize("naming", [DCU_NAMING, HCU_NAMING], ids=lambda n: n.name)
@pytest.mark.parametrize(("where", "section", "value"), [
    ("container", "limits", "0"), ("container", "requests", "0"), ("container", "limits", 0),
    ("init", "limits", "0"), ("init", "requests", "0"), ("container", "limits", "00"),
])
def test_a_pod_asking_for_zero_of_the_count_is_no_rival_nor_awaiting(naming, where, section, value):
    """Issue 35, finding 1: a tenant pod naming the count resource with 0, kept Pending on the
    node, was a rival of every lock holder (and awaited an Allocate without a lock): the kubelet
    never calls Allocate for 0, so it never cleared and every DCU Allocate there was refused."""
    resource = naming.resources.count
    zero = _asking(resource, value, section)
    pods = [_bound_pod("holder", [_asking(resource, "1")], bind_phase=keys.BIND_PHASE_ALLOCATING),
            _bound_pod("zero", [zero] if where == "container" else [_asking("cpu", "1")],
                       init=[zero] if where == "init" else None)]
    assert rival_pods(pods, "holder", "n1", resource) == []
    assert [a.pod["metadata"]["name"] for a in awaiting_pods(pods, "n1", resource,
                                                             naming.pod_devices_to_allocate)] == []


@pytest.mark.parametrize("naming", [DCU_NAMING, HCU_NAMING], ids=lambda n: n.name)
@pytest.mark.parametrize(("init", "containers"), [
    ([], ["0", "1"]),  # one container asks 0, another 1: the pod still awaits an Allocate
    (["2"], ["0"]),  # an init container asks: the kubelet calls Allocate for it
    ([], ["1Ki"]),  # any whole quantity above 0
])
def test_a_pod_with_any_container_asking_above_zero_is_still_a_rival(naming, init, containers):
    resource = naming.resources.count
    rival = _bound_pod("bypass", [_asking(resource, v, name=f"c{i}") for i, v in enumerate(containers)],
                       init=[_asking(resource, v, name=f"i{i}") for i, v in enumerate(init)])
    pods = [_bound_pod("holder", [_asking(resource, "1")], bind_phase=keys.BIND_PHASE_ALLOCATING), rival]
    assert [r.split(" ")[0] for r in rival_pods(pods, "holder", "n1", resource)] == ["d/bypass"]
    assert [a.pod["metadata"]["name"] for a in awaiting_pods(pods, "n1", resource, naming.pod_devices_to_allocate)
            ] == ["bypass"]


def test_a_count_the_plugin_cannot_read_still_makes_a_rival():
    """Failing closed: a count no reader can parse (the API server would not store one) may yet
    be a request the kubelet serves, so the call stays ambiguous rather than guessed."""
    resource = DCU_NAMING.resources.count
    pods = [_bound_pod("holder", [_asking(resource, "1")], bind_phase=keys.BIND_PHASE_ALLOCATING),
            _bound_pod("odd", [_asking(resource, "1.5")])]
    assert [r.split(" ")[0] for r in rival_pods(pods, "holder", "n1", resource)] == ["d/odd"]
