"""The three patch flavours and the resourceVersion precondition, through the real client."""

import json

import pytest
from kubernetes.client.exceptions import ApiException

from hami_dcu.cli.localcluster.apiserver.patching import PatchError, apply_patch, strategic_merge_patch

MERGE = "application/merge-patch+json"
LOCK = "hami.io/mutex.lock"


@pytest.fixture
def n1(core):
    core.create_node({"metadata": {"name": "n1", "annotations": {"keep": "me"}}})
    return "n1"


def annotations(core, name):
    return core.read_node(name).metadata.annotations or {}


@pytest.mark.parametrize("content_type", [None, MERGE])  # None: the client picks strategic merge for a dict
def test_merge_flavours_set_and_null_deletes_an_annotation(core, n1, content_type):
    extra = {"_content_type": content_type} if content_type else {}
    core.patch_node(n1, {"metadata": {"annotations": {LOCK: "t,default,p"}}}, **extra)
    assert annotations(core, n1) == {"keep": "me", LOCK: "t,default,p"}
    core.patch_node(n1, {"metadata": {"annotations": {LOCK: None, "absent": None}}}, **extra)
    assert annotations(core, n1) == {"keep": "me"}


def test_merge_patch_creates_a_missing_annotations_map(core):
    core.create_node({"metadata": {"name": "bare"}})
    core.patch_node("bare", {"metadata": {"annotations": {"a": "1"}}}, _content_type=MERGE)
    assert annotations(core, "bare") == {"a": "1"}


def test_stale_resource_version_in_a_patch_is_409(core, n1):
    rv = core.read_node(n1).metadata.resource_version
    core.patch_node(n1, {"metadata": {"resourceVersion": rv, "annotations": {LOCK: "mine"}}})  # current: wins
    with pytest.raises(ApiException) as info:
        core.patch_node(n1, {"metadata": {"resourceVersion": rv, "annotations": {LOCK: "theirs"}}})
    assert info.value.status == 409
    body = json.loads(info.value.body)
    assert body["reason"] == "Conflict" and body["message"] == (
        'Operation cannot be fulfilled on nodes "n1": the object has been modified; please apply your changes '
        "to the latest version and try again")
    assert annotations(core, n1)[LOCK] == "mine"


def test_json_patch_add_remove_and_escaped_keys(core, n1):
    core.patch_node(n1, [{"op": "add", "path": "/metadata/annotations/hami.io~1mutex.lock", "value": "x"}])
    assert annotations(core, n1) == {"keep": "me", LOCK: "x"}
    core.patch_node(n1, [{"op": "remove", "path": "/metadata/annotations/hami.io~1mutex.lock"}])
    assert annotations(core, n1) == {"keep": "me"}


def test_json_patch_compare_and_swap_failure_is_422(core, n1):
    rv = core.read_node(n1).metadata.resource_version
    swap = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/annotations/owner", "value": "a"}]
    core.patch_node(n1, swap)
    with pytest.raises(ApiException) as info:
        core.patch_node(n1, swap)  # rv moved on: the test op fails
    assert info.value.status == 422
    assert json.loads(info.value.body)["reason"] == "Invalid"


def test_json_patch_bad_path_is_422_and_changes_nothing(core, n1):
    before = core.read_node(n1).metadata.resource_version
    with pytest.raises(ApiException) as info:
        core.patch_node(n1, [{"op": "add", "path": "/metadata/labels/a", "value": "1"},
                             {"op": "remove", "path": "/metadata/nope/x"}])
    assert info.value.status == 422
    after = core.read_node(n1)
    assert after.metadata.resource_version == before and not after.metadata.labels


def test_unknown_patch_type_is_415(core, n1):
    with pytest.raises(ApiException) as info:
        core.patch_node(n1, {"metadata": {"labels": {"a": "b"}}}, _content_type="application/apply-patch+yaml")
    assert info.value.status == 415


def test_strategic_merge_keyed_lists_and_merge_patch_replaces_them(core):
    core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}})
    core.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "b", "image": "z"}]}})
    assert [(c.name, c.image) for c in core.read_namespaced_pod("p", "default").spec.containers] == [
        ("a", "x"), ("b", "z")]
    core.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "c", "image": "w"}]}},
                              _content_type=MERGE)
    assert [c.name for c in core.read_namespaced_pod("p", "default").spec.containers] == ["c"]


def test_strategic_merge_of_conditions_by_type(core):
    core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]}})
    core.patch_namespaced_pod_status("p", "default", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    conditions = core.read_namespaced_pod("p", "default").status.conditions
    assert [(c.type, c.status) for c in conditions] == [("PodScheduled", "True"), ("Ready", "True")]


def test_strategic_directives_unit():
    target = {"conditions": [{"type": "A"}, {"type": "B"}], "m": {"x": 1, "y": 2}}
    patched = strategic_merge_patch(target, {"conditions": [{"type": "A", "$patch": "delete"}],
                                             "m": {"$patch": "replace", "z": 3}})
    assert patched == {"conditions": [{"type": "B"}], "m": {"z": 3}}
    assert target["conditions"] == [{"type": "A"}, {"type": "B"}]  # the target is not touched


def test_patch_errors_unit():
    with pytest.raises(PatchError) as info:
        apply_patch({}, "application/json-patch+json", {"op": "add"})
    assert info.value.code == 400
    with pytest.raises(PatchError) as info:
        apply_patch({}, "application/json-patch+json", [{"op": "add", "path": "/a"}] * 10001)
    assert info.value.code == 422
