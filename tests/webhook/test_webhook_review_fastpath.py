"""The webhook's hot path (issue 14, issue 23): the review envelope is a marshmallow schema
that names every problem by its path on one line, the pod it carries is handed on untouched,
and a routed pod's patch is written literally, exactly what jsonpatch.make_patch wrote."""

from __future__ import annotations

import json

import jsonpatch
import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.webhook.decision import Settings, review
from hami_dcu.webhook.schemas import BadReview, load_review

DCU = keys.DCU_NAMING  # the naming set these tests speak


def dcu_pod(**spec_fields) -> dict:
    return {"metadata": {"name": "p", "namespace": "default"},
            "spec": {**spec_fields, "containers": [{"name": "c", "image": "x", "resources": {"limits": {
                DCU.resources.count: "1", DCU.resources.memory: "2000"}}}]}}


@pytest.mark.parametrize("spec_fields", [{}, {"schedulerName": keys.KUBE_DEFAULT_SCHEDULER}, {"schedulerName": ""},
                                         {"schedulerName": None}])
def test_a_routed_pods_patch_is_what_make_patch_writes(spec_fields):
    pod = dcu_pod(**spec_fields)
    decision = review(pod, Settings(naming=DCU))
    assert decision.reason == "routed"
    after = {"spec": {**pod["spec"], "schedulerName": keys.DEFAULT_SCHEDULER_NAME}}
    assert decision.patch == jsonpatch.make_patch({"spec": pod["spec"]}, after).patch
    assert jsonpatch.apply_patch(pod, decision.patch)["spec"]["schedulerName"] == keys.DEFAULT_SCHEDULER_NAME


def review_body(**request_fields) -> dict:
    request = {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
               "object": {"metadata": {}}, **request_fields}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_a_review_keeps_the_fields_we_read_with_their_defaults():
    body = review_body(extra="dropped", userInfo={"username": "u"}, dryRun=True)
    body["unknown"] = 1
    loaded = load_review(json.dumps(body).encode())
    assert loaded == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "", "name": "",
        "operation": "CREATE", "resource": None, "subResource": "", "userInfo": {"username": "u"},
        "object": {"metadata": {}}, "oldObject": None, "dryRun": True}}


@pytest.mark.parametrize(("change", "problem"), [
    (lambda b: b.pop("apiVersion"), "apiVersion: Missing data for required field."),
    (lambda b: b.update(apiVersion="admission.k8s.io/v2"), "apiVersion: Must be one of"),
    (lambda b: b.update(kind="Review"), "kind: Must be equal to AdmissionReview."),
    (lambda b: b.update(request=None), "request: Field may not be null."),
    (lambda b: b.update(request=[]), "request: Not a JSON object."),
    (lambda b: b["request"].pop("uid"), "request.uid: Missing data for required field."),
    (lambda b: b["request"].update(uid=""), "request.uid: Shorter than minimum length 1."),
    (lambda b: b["request"].update(uid=7), "request.uid: Not a valid string."),
    (lambda b: b["request"].update(operation="PATCH"), "request.operation: Must be one of"),
    (lambda b: b["request"]["kind"].pop("version"), "request.kind.version: Missing data for required field."),
    (lambda b: b["request"].update(resource={"group": ""}), "request.resource.resource: Missing data"),
    (lambda b: b["request"].update(namespace=None), "request.namespace: Field may not be null."),
    (lambda b: b["request"].update(object="pod"), "request.object: Not a JSON object."),
    (lambda b: b["request"].update(dryRun="yes"), "request.dryRun: Not a valid boolean."),
    (lambda b: b["request"].update(dryRun=1), "request.dryRun: Not a valid boolean."),
])
def test_a_malformed_review_names_its_problem(change, problem):
    body = review_body()
    change(body)
    with pytest.raises(BadReview, match="not an AdmissionReview") as raised:
        load_review(json.dumps(body).encode())
    assert problem in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("body", [[], "review", 7, None])
def test_a_body_that_is_not_an_object_says_so(body):
    with pytest.raises(BadReview) as raised:
        load_review(json.dumps(body).encode())
    assert str(raised.value) == "not an AdmissionReview: Not a JSON object."


def test_every_problem_of_a_review_is_named_on_one_line():
    body = review_body(uid="", operation="PATCH")
    del body["kind"]
    with pytest.raises(BadReview) as raised:
        load_review(json.dumps(body).encode())
    assert str(raised.value) == ("not an AdmissionReview: kind: Missing data for required field.; "
                                 "request.uid: Shorter than minimum length 1.; request.operation: Must be one of: "
                                 "CREATE, UPDATE, DELETE, CONNECT.")


def test_the_pod_is_handed_on_as_it_came():
    """The envelope is loaded; the pod object is not copied or walked (the hot path's cost)."""
    body = review_body(object={"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "x": [1]}]}})
    loaded = load_review(json.dumps(body).encode())
    assert loaded["request"]["object"] == body["request"]["object"]
