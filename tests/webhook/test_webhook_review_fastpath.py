"""The webhook's hot path written out (issue 14): the review envelope is checked field by
field, and a routed pod's patch is written literally; both must say exactly what the
general tools (a schema library, jsonpatch.make_patch) said."""

from __future__ import annotations

import json

import jsonpatch
import pytest

from hami_dcu.common import keys
from hami_dcu.webhook.decision import Settings, review
from hami_dcu.webhook.schemas import BadReview, load_review


def dcu_pod(**spec_fields) -> dict:
    return {"metadata": {"name": "p", "namespace": "default"},
            "spec": {**spec_fields, "containers": [{"name": "c", "image": "x", "resources": {"limits": {
                keys.DEFAULT_COUNT_RESOURCE: "1", keys.DEFAULT_MEMORY_RESOURCE: "2000"}}}]}}


@pytest.mark.parametrize("spec_fields", [{}, {"schedulerName": keys.KUBE_DEFAULT_SCHEDULER}, {"schedulerName": ""},
                                         {"schedulerName": None}])
def test_a_routed_pods_patch_is_what_make_patch_writes(spec_fields):
    pod = dcu_pod(**spec_fields)
    decision = review(pod, Settings())
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
    (lambda b: b.pop("apiVersion"), '"apiVersion": ["Missing data for required field."]'),
    (lambda b: b.update(apiVersion="admission.k8s.io/v2"), '"apiVersion": ["Must be one of'),
    (lambda b: b.update(kind="Review"), '"kind": ["Must be equal to AdmissionReview."]'),
    (lambda b: b.update(request=None), '"request": ["Field may not be null."]'),
    (lambda b: b.update(request=[]), '"request": {"_schema": ["Invalid input type."]}'),
    (lambda b: b["request"].pop("uid"), '"uid": ["Missing data for required field."]'),
    (lambda b: b["request"].update(uid=""), '"uid": ["Shorter than minimum length 1."]'),
    (lambda b: b["request"].update(uid=7), '"uid": ["Not a valid string."]'),
    (lambda b: b["request"].update(operation="PATCH"), '"operation": ["Must be one of'),
    (lambda b: b["request"]["kind"].pop("version"), '"kind": {"version": ["Missing data for required field."]}'),
    (lambda b: b["request"].update(resource={"group": ""}), '"resource": {"resource": ["Missing data'),
    (lambda b: b["request"].update(namespace=None), '"namespace": ["Field may not be null."]'),
    (lambda b: b["request"].update(object="pod"), '"object": ["Not a valid mapping type."]'),
    (lambda b: b["request"].update(dryRun="yes"), '"dryRun": ["Not a valid boolean."]'),
])
def test_a_malformed_review_names_its_problem(change, problem):
    body = review_body()
    change(body)
    with pytest.raises(BadReview, match="not an AdmissionReview") as raised:
        load_review(json.dumps(body).encode())
    assert problem in str(raised.value)
