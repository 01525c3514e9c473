"""Start-up detection of components of the other naming set (pure part)."""

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.namingcheck import find_traces, report


def node(name: str, **annotations: str) -> dict:
    return {"metadata": {"name": name, "annotations": annotations}}


def pod(name: str, phase: str = "Pending", limits: dict | None = None, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits or {}}}]}, "status": {"phase": phase}}


def test_a_cluster_of_one_set_shows_nothing():
    nodes = [node("a", **{"hami.io/node-dcu-register": "x:", "hami.io/node-handshake-dcu": "Requesting_2026"})]
    pods = [pod("p", limits={"hygon.com/dcunum": "1"})]
    assert not find_traces(nodes, pods, keys.DCU_NAMING)


def test_every_trace_of_the_other_set_is_found_and_reported():
    nodes = [
        node("hygon-v3", **{"hami.io/node-hcu-register": "HCU-A,4,1,100,HCU-K100,0,true,0,hami:"}),
        node("both", **{"hami.io/node-hcu-register": "x:", "hami.io/node-dcu-register": "y:"}),
        node("asked", **{"hami.io/node-handshake-hcu": "Requesting_2026-11-23 10:00:00"}),
    ]
    pods = [pod("waiting", limits={"hygon.com/hcunum": "1"}), pod("running", "Running", {"hygon.com/hcunum": "1"}),
            pod("placed", "Running", annotations={"hami.io/hcu-devices-allocated": "HCU-A,HCU,1,1:;"}),
            pod("done", "Succeeded", annotations={"hami.io/hcu-devices-allocated": "HCU-A,HCU,1,1:;"})]
    traces = find_traces(nodes, pods, keys.DCU_NAMING)
    assert (traces.registering, traces.requested, traces.pending, traces.placed) == (
        ["hygon-v3"], ["asked"], ["ml/waiting"], ["ml/placed"])
    message = report("scheduler", keys.DCU_NAMING, traces)
    assert message.startswith("this scheduler speaks the dcu names, but node(s) hygon-v3 register cards only as "
                              "hami.io/node-hcu-register; a scheduler of the hcu set handshakes with node(s) asked")
    assert "Pending pod(s) ml/waiting ask for hygon.com/hcunum" in message
    assert "pod(s) ml/placed carry hami.io/hcu-devices-allocated" in message
    assert message.endswith("Give every component the same naming set (hami-dcu --naming, chart value naming)")


def test_many_objects_are_counted_not_listed():
    nodes = [node(f"n{i:02}", **{"hami.io/node-dcu-register": "x:"}) for i in range(12)]
    message = report("device plugin", keys.HCU_NAMING, find_traces(nodes, [], keys.HCU_NAMING))
    assert "node(s) n00, n01, n02, n03, n04 and 7 more register cards only as hami.io/node-dcu-register" in message
    assert "components of the dcu set (HAMi v2.10)" in message


def test_a_pending_pod_asking_for_zero_of_the_other_sets_count_is_no_trace():
    """Issue 35, finding 1: naming a count with 0 asks for nothing; a tenant's zero-count pod
    must not make a component report the other naming set at work."""
    pods = [pod("zero", limits={"hygon.com/hcunum": "0"}), pod("asks", limits={"hygon.com/hcunum": "1"})]
    assert find_traces([], pods, keys.DCU_NAMING).pending == ["ml/asks"]
