"""Pod field types: the first wrongly typed field named by its path, well-typed pods pass."""

import pytest

from hami_dcu.common.protocol.podshape import pod_shape_problem


def pod(**spec_fields):
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u", "labels": {"a": "b"},
                         "annotations": {"k": "v"}},
            "spec": {"schedulerName": "s", "nodeName": "n",
                     "initContainers": [{"name": "i"}],
                     "containers": [{"name": "c", "resources": {"limits": {"hygon.com/dcunum": "1"}, "requests": {}},
                                     "securityContext": {"privileged": False}}], **spec_fields}}


@pytest.mark.parametrize("value", [pod(), {}, {"metadata": None, "spec": None},
                                   {"spec": {"containers": [{"resources": None, "securityContext": None}]}}])
def test_well_typed_pods_pass(value):
    assert pod_shape_problem(value) is None


@pytest.mark.parametrize(("value", "problem"), [
    ("x", "pod must be an object"),
    ({"metadata": "x"}, "metadata must be an object, got a string"),
    ({"metadata": [1]}, "metadata must be an object, got a list"),
    ({"metadata": {"name": 5}}, "metadata.name must be a string, got a number"),
    ({"metadata": {"uid": True}}, "metadata.uid must be a string, got a boolean"),
    ({"metadata": {"namespace": {}}}, "metadata.namespace must be a string, got an object"),
    ({"metadata": {"labels": "x"}}, "metadata.labels must be an object, got a string"),
    ({"metadata": {"annotations": {"a": 1}}}, "metadata.annotations.a must be a string, got a number"),
    ({"metadata": {"annotations": {"a": None}}}, "metadata.annotations.a must be a string, got null"),
    ({"spec": []}, "spec must be an object, got a list"),
    ({"spec": {"nodeName": 1}}, "spec.nodeName must be a string"),
    ({"spec": {"schedulerName": ["x"]}}, "spec.schedulerName must be a string"),
    ({"spec": {"containers": "abc"}}, "spec.containers must be a list"),
    ({"spec": {"initContainers": {}}}, "spec.initContainers must be a list"),
    ({"spec": {"containers": [{}, 5]}}, "spec.containers[1] must be an object, got a number"),
    ({"spec": {"containers": [{"name": []}]}}, "spec.containers[0].name must be a string"),
    ({"spec": {"containers": [{"resources": "x"}]}}, "spec.containers[0].resources must be an object"),
    ({"spec": {"initContainers": [{"resources": {"requests": []}}]}},
     "spec.initContainers[0].resources.requests must be an object"),
    ({"spec": {"containers": [{"securityContext": 1}]}}, "spec.containers[0].securityContext must be an object"),
    ({"spec": {"containers": [{"securityContext": {"privileged": "true"}}]}},
     "spec.containers[0].securityContext.privileged must be a boolean, got a string"),
])
def test_first_wrongly_typed_field_is_named(value, problem):
    found = pod_shape_problem(value)
    assert found is not None and found.startswith(problem), found


def test_a_long_annotation_key_is_cut_in_the_message():
    problem = pod_shape_problem({"metadata": {"annotations": {"k" * 10_000: 1}}})
    assert problem is not None and len(problem) < 150
