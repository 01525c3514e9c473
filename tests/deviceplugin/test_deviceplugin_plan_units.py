"""The device plugin's pure Allocate helpers (CU counts, preferred slots, rival pods) and its
node loop's pacing."""

from hami_dcu.common.keys import DCU_NAMING
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

    loop = NodeLoop(core=None, server=None, interval=30.0)
    loop.stopping = Recorder()
    loop.once = lambda: outcomes.pop(0)
    loop.run()
    assert waits == [30.0, RETRY_AFTER_FAILURE, 30.0] and RETRY_AFTER_FAILURE == 5.0
