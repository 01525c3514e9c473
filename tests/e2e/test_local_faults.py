"""A bounded fault campaign on the local cluster (issue 12): 30 pods over 3 nodes with API
faults on every write (500s, 409s, delays, post-commit 500s and lost answers). Whatever the
faults, the system settles with every invariant holding."""

from e2e import invariants
from e2e.faultrun import FaultPlan, Workload, run
from hami_dcu.cli.localcluster.apiserver.faults import ERROR_AFTER_COMMIT, LOST_AFTER_COMMIT

FAULTS = FaultPlan(error_rate=0.1, conflict_rate=0.1, delay_rate=0.05, delay_seconds=0.5, post_commit_rate=0.05,
                   seed=12)


def test_thirty_pods_through_api_faults_settle_with_every_invariant():
    workload = Workload(nodes=3, cards_per_node=2, pods=30, seed=12)  # 24 slots for 30 pods
    result = run(workload, FAULTS, timeout=45.0, quiet_wait=10.0)
    assert result.faults["500"] and result.faults["409"]
    assert result.faults[ERROR_AFTER_COMMIT] + result.faults[LOST_AFTER_COMMIT] > 0
    assert result.settled_at is not None, f"not settled: {result.running} Running, {result.pending} Pending"
    assert result.quiet_at is not None, "a node stayed locked after the last pod"
    assert result.running == 24  # every slot used: no pod Pending while a card could hold it
    assert result.violations == []


def test_the_invariant_checks_catch_what_they_promise():
    """The checks themselves, on hand-made snapshots: each one fires when it should."""
    register = "DCU-A,4,1000,100,DCU-K100_AI,0,true,0,hami:"
    node = {"metadata": {"name": "n", "annotations": {"hami.io/node-dcu-register": register,
                                                      "hami.io/mutex.lock": "2026-01-01T00:00:00Z,ns,p"}}}

    def pod(name, phase, memory, node_name="n"):
        return {"metadata": {"name": name, "annotations": {
                    "hami.io/dcu-devices-allocated": f"DCU-A,DCU,{memory},10:;"} if node_name else {}},
                "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"limits": {
                    "hygon.com/dcunum": "1", "hygon.com/dcumem": str(memory), "hygon.com/dcucores": "10"}}}]},
                "status": {"phase": phase}}

    assert invariants.over_capacity([node], [pod("a", "Running", 600), pod("b", "Running", 600)])
    assert not invariants.over_capacity([node], [pod("a", "Running", 600), pod("b", "Failed", 600)])
    assert invariants.locks_left([node]) == ["node n locked: 2026-01-01T00:00:00Z,ns,p"]
    assert invariants.pending_that_fit([node], [pod("a", "Running", 600), pod("w", "Pending", 300, None)])
    assert not invariants.pending_that_fit([node], [pod("a", "Running", 600), pod("w", "Pending", 500, None)])
    assert invariants.failed_without_event([pod("f", "Failed", 1)], [])
    assert not invariants.failed_without_event([pod("f", "Failed", 1)],
                                               [{"type": "Warning", "involvedObject": {"name": "f"}}])
    conf = "PciBusId: 0000:3D:00.0\ncu_mask: 0x{:016x}\ncu_mask: 0x0000000000000000\n"
    assert invariants.overlapping_masks({"n": {"a": conf.format(0b0110), "b": conf.format(0b0100)}})
    assert not invariants.overlapping_masks({"n": {"a": conf.format(0b0011), "b": conf.format(0b1100)}})
