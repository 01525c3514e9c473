"""Malformed admission reviews an attacker can send straight to the webhook (the API server
would never): each gets a 400 with a reason that names the problem, never a 500, and the
server keeps answering well-formed reviews."""

import json

import pytest
from test_webhook_server import post, review

from hami_dcu.common.protocol import keys

DCU = keys.DCU_NAMING  # the naming set these tests speak


def with_pod(**overrides) -> bytes:
    body = review()
    body["request"]["object"].update(overrides)
    return json.dumps(body).encode()


def with_container(**fields) -> bytes:
    body = review()
    body["request"]["object"]["spec"]["containers"][0].update(fields)
    return json.dumps(body).encode()


def nested(depth: int) -> bytes:
    # The pod carries a value nested `depth` levels deep in a field nobody reads.
    body = json.dumps(review()).encode()
    return body.replace(b'"spec": {', b'"spec": {"x": ' + b"[" * depth + b"]" * depth + b", ", 1)


ATTACKS = {
    "nested-1000": (nested(1000), "nested deeper than"),
    "nested-100000": (b"[" * 100_000 + b"]" * 100_000, "nested deeper than"),
    "nested-200": (nested(200), "nested deeper than"),
    "metadata-string": (with_pod(metadata="x"), "metadata must be an object"),
    "metadata-list": (with_pod(metadata=[1]), "metadata must be an object"),
    "name-object": (with_pod(metadata={"name": {"a": 1}}), "metadata.name must be a string"),
    "labels-string": (with_pod(metadata={"labels": "x"}), "metadata.labels must be an object"),
    "annotations-list": (with_pod(metadata={"annotations": ["a"]}), "metadata.annotations must be an object"),
    "annotation-value-int": (with_pod(metadata={"annotations": {"a": 1}}), "metadata.annotations.a must be a string"),
    "spec-string": (with_pod(spec="x"), "spec must be an object"),
    "containers-string": (with_pod(spec={"containers": "abc"}), "spec.containers must be a list"),
    "init-containers-object": (with_pod(spec={"initContainers": {}, "containers": []}),
                               "spec.initContainers must be a list"),
    "container-int": (with_pod(spec={"containers": [5]}), "spec.containers[0] must be an object"),
    "container-name-object": (with_container(name={"a": 1}), "spec.containers[0].name must be a string"),
    "resources-list": (with_container(resources=[]), "spec.containers[0].resources must be an object"),
    "limits-list": (with_container(resources={"limits": [DCU.resources.count]}),
                    "spec.containers[0].resources.limits must be an object"),
    "security-context-string": (with_container(securityContext="x"),
                                "spec.containers[0].securityContext must be an object"),
    "privileged-string": (with_container(securityContext={"privileged": "true"}),
                          "spec.containers[0].securityContext.privileged must be a boolean"),
    "node-name-object": (with_pod(spec={"nodeName": {"a": 1}, "containers": []}), "spec.nodeName must be a string"),
    "scheduler-name-list": (with_pod(spec={"schedulerName": ["x"], "containers": []}),
                            "spec.schedulerName must be a string"),
    "quantity-5000-digits": (with_container(resources={"limits": {DCU.resources.count: "1" * 5000}}),
                             "out of range"),
    "json-int-5000-digits": (json.dumps(review()).encode().replace(b'"1"', b"1" * 5000), "not JSON"),
    "nan-constant": (json.dumps(review()).encode().replace(b'"1"', b"NaN"), "not JSON"),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_malformed_review_gets_400_with_a_reason(served_webhook, attack):
    body, reason = ATTACKS[attack]
    status, answer = post(served_webhook, body)
    assert status in (200, 400), answer
    if status == 200:  # an invalid DCU request is the pod's fault: a denial that names it
        assert answer["response"]["allowed"] is False
        assert reason in answer["response"]["status"]["message"]
        assert len(answer["response"]["status"]["message"]) < 300
    else:
        assert reason in answer["error"]
        assert "Error" not in answer["error"]  # a reason for a person, not a Python exception name
    assert post(served_webhook, json.dumps(review()).encode())[0] == 200


def test_reasonable_nesting_is_still_answered(served_webhook):
    # Real pods nest ~20 levels (managedFields mirror the spec); 40 must pass untouched.
    status, answer = post(served_webhook, nested(40))
    assert status == 200 and answer["response"]["allowed"] is True


def test_non_pod_object_with_odd_metadata_is_allowed_unchanged(served_webhook):
    body = review()
    body["request"]["kind"]["kind"] = "ConfigMap"
    body["request"]["object"] = {"metadata": "x"}
    status, answer = post(served_webhook, json.dumps(body).encode())
    assert status == 200 and answer["response"]["allowed"] is True and "patch" not in answer["response"]
