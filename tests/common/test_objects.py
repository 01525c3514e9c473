"""common/protocol/objects.py: the typed views read a part the one way the code always read it
(`(obj.get("metadata") or {}).get(...)`): a missing or null part reads as empty, a present one
is the object's own value."""

import pytest

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.objects import Pod

POD: Pod = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": {"a": "1"}},
    "spec": {"nodeName": "n1", "schedulerName": "hami-scheduler", "initContainers": [{"name": "i"}],
             "containers": [{"name": "c"}]},
    "status": {"phase": "Pending"},
}


def test_a_full_pod_reads_its_own_values():
    assert objects.metadata(POD) is POD["metadata"]
    assert objects.annotations(POD) is POD["metadata"]["annotations"]
    assert (objects.name(POD), objects.namespace(POD)) == ("p", "ns")
    assert objects.pod_spec(POD) is POD["spec"]
    assert (objects.node_name(POD), objects.scheduler_name(POD), objects.phase(POD)) == (
        "n1", "hami-scheduler", "Pending")
    assert objects.init_containers(POD) == [{"name": "i"}]
    assert objects.containers(POD) is POD["spec"]["containers"]


@pytest.mark.parametrize("pod", [{}, {"metadata": None, "spec": None, "status": None},
                                 {"metadata": {"annotations": None}, "spec": {"containers": None}, "status": {}}])
def test_a_missing_or_null_part_reads_as_empty(pod):
    assert objects.metadata(pod) == (pod.get("metadata") or {})
    assert objects.annotations(pod) == {}
    assert objects.name(pod) is None and objects.namespace(pod) is None
    assert objects.pod_spec(pod) == (pod.get("spec") or {})
    assert objects.node_name(pod) is None and objects.scheduler_name(pod) is None
    assert objects.phase(pod) is None and objects.pod_status(pod) == {}
    assert objects.init_containers(pod) == [] and objects.containers(pod) == []


def test_a_node_reads_its_status_and_annotations():
    node = {"metadata": {"name": "n1", "annotations": {"hami.io/mutex.lock": "x"}},
            "status": {"allocatable": {"hygon.com/dcunum": "4"}}}
    assert objects.node_status(node)["allocatable"] == {"hygon.com/dcunum": "4"}
    assert objects.annotations(node) == {"hami.io/mutex.lock": "x"}
    assert objects.node_status({"status": None}) == {}


def test_a_part_of_the_wrong_type_fails_as_the_code_always_did():
    # No view hides a malformed object: `.get` on a list raises, as `(obj.get("metadata") or {}).get` did.
    with pytest.raises(AttributeError):
        objects.annotations({"metadata": ["not", "a", "map"]})
