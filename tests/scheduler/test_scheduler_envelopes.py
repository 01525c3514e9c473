"""The extender's envelopes as kube-scheduler's Go types decode them: keys in any case (an exact
match winning), null lists and counts as empty, and every problem named by the envelope and
the field's path on one line."""

import pytest

from hami_dcu.scheduler.extender import (
    BindArgs,
    NodeVictims,
    WireError,
    parse_bind_args,
    parse_filter_args,
    parse_preemption_args,
)

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u-p"}, "spec": {"containers": [{"name": "c"}]}}


def refused(parse, body) -> str:
    with pytest.raises(WireError) as raised:
        parse(body)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_keys_match_in_any_case_and_an_exact_match_wins():
    other = {"metadata": {"name": "other"}}
    args = parse_filter_args({"pod": other, "Pod": POD, "NODENAMES": ["n1"]})
    assert args.pod is POD and args.node_names == ["n1"] and args.nodes is None
    assert parse_bind_args({"podname": "p", "podNamespace": "ns", "poduid": "u", "NODE": "n1"}) == \
        BindArgs(pod_name="p", namespace="ns", uid="u", node="n1")
    assert parse_bind_args({"podname": "p", "node": "n1"}) == BindArgs("p", "default", "", "n1")
    assert parse_filter_args({"pod": POD, "nodenames": ["n1"]}).node_names == ["n1"]


def test_nodes_mode_keeps_the_node_objects():
    node = {"metadata": {"name": "n1", "labels": {"a": "b"}}, "status": {"x": 1}}
    args = parse_filter_args({"Pod": POD, "Nodes": {"items": [node]}, "NodeNames": None})
    assert args.node_names is None and args.nodes == [node] and args.candidate_names() == ["n1"]
    assert parse_filter_args({"Pod": POD, "Nodes": {"items": None}}).nodes == []


@pytest.mark.parametrize(("body", "message"), [
    ([], "ExtenderArgs: Not a JSON object."),
    ({"NodeNames": ["n1"]}, "ExtenderArgs.Pod: Missing data for required field."),
    ({"Pod": None, "NodeNames": ["n1"]}, "ExtenderArgs.Pod: Field may not be null."),
    ({"Pod": POD}, "ExtenderArgs: neither NodeNames nor Nodes given."),
    ({"Pod": POD, "NodeNames": ["n1", 2]}, "ExtenderArgs.NodeNames: Not a list of strings."),
    ({"Pod": POD, "Nodes": []}, "ExtenderArgs.Nodes: Not a JSON object."),
    ({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}},
     "ExtenderArgs.Nodes.items[0].metadata.name: Not a valid string."),
    ({"Pod": {**POD, "spec": {"containers": "x"}}, "NodeNames": []},
     "ExtenderArgs.Pod: spec.containers must be a list, got a string"),
])
def test_a_malformed_filter_names_the_field(body, message):
    assert refused(parse_filter_args, body) == message


@pytest.mark.parametrize(("body", "message"), [
    ({"PodNamespace": "default", "Node": "n1"}, "ExtenderBindingArgs.PodName: Missing data for required field."),
    ({"PodName": "", "Node": "n1"}, "ExtenderBindingArgs.PodName: Not a valid Kubernetes name: ''."),
    ({"PodName": "p\nforged", "Node": "n1"}, "ExtenderBindingArgs.PodName: Not a valid Kubernetes name: 'p\\nforged'."),
    ({"PodName": "p", "Node": 5}, "ExtenderBindingArgs.Node: Not a valid string."),
    ({"PodName": "p", "Node": "n1", "PodUID": "a b"},
     "ExtenderBindingArgs.PodUID: Not a valid UID (up to 128 printable ASCII characters): 'a b'."),
])
def test_a_malformed_bind_names_the_field(body, message):
    assert refused(parse_bind_args, body) == message


@pytest.mark.parametrize("namespace", [None, ""])
def test_a_bind_without_a_namespace_is_for_default(namespace):
    assert parse_bind_args({"PodName": "p", "PodNamespace": namespace, "Node": "n1"}).namespace == "default"


def test_victims_by_uid_win_over_whole_pods_and_nulls_are_empty():
    body = {"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {"uid": "whole"}}]}},
            "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "meta"}], "NumPDBViolations": 2},
                                      "n2": {"Pods": None, "NumPDBViolations": None}}}
    assert parse_preemption_args(body).nodes == {"n1": NodeVictims(["meta"], 2), "n2": NodeVictims([], 0)}
    assert parse_preemption_args({"Pod": POD}).nodes == {}


@pytest.mark.parametrize(("victims", "message"), [
    ({"NodeNameToMetaVictims": []}, "ExtenderPreemptionArgs.NodeNameToMetaVictims: Not a JSON object."),
    ({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": ""}]}}},
     "ExtenderPreemptionArgs.NodeNameToMetaVictims.n1.value.Pods[0].UID: Not a valid UID"),
    ({"NodeNameToMetaVictims": {"n1": {"NumPDBViolations": True}}},
     "ExtenderPreemptionArgs.NodeNameToMetaVictims.n1.value.NumPDBViolations: Not a valid integer."),
    ({"NodeNameToVictims": {"n1": {"Pods": [{"metadata": {}}]}}},
     "ExtenderPreemptionArgs.NodeNameToVictims.n1.value.Pods[0].metadata.uid: Missing data for required field."),
])
def test_malformed_victims_name_the_node_and_field(victims, message):
    assert refused(parse_preemption_args, {"Pod": POD, **victims}).startswith(message)
