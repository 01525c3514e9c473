"""The three patch flavours the API server accepts: JSON patch, merge patch, strategic merge patch.

`apply_patch` may reuse parts of the target in its result and, for JSON patch, changes the
target in place: the store always hands it a private copy.
"""

from __future__ import annotations

from typing import Any

import jsonpatch

from hami_dcu.cli.localcluster.apiserver.resources import JSON, clone
from hami_dcu.common.protocol.errors import CliError

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
MAX_JSON_PATCH_OPS = 10000  # kube-apiserver's limit

# Lists that strategic merge merges by a key instead of replacing them whole (the
# patchMergeKey of the core types we touch). Looked up by field name alone: the names
# do not collide within the objects we serve.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "addresses": "type",
}


class PatchError(CliError, ValueError):
    """The patch cannot be applied: 422 Invalid, or 415 for an unknown content type."""

    def __init__(self, message: str, code: int = 422, reason: str = "Invalid") -> None:
        self.code = code
        self.reason = reason
        super().__init__(message)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Merge patch, except that the keyed lists in MERGE_KEYS merge element by element
    (an element `{"$patch": "delete", <key>: ...}` removes one), and a map with
    `"$patch": "replace"` replaces instead of merging. Other directives are ignored."""
    if isinstance(patch, list) and field in MERGE_KEYS and isinstance(target, list):
        return _merge_keyed_list(target, patch, MERGE_KEYS[field])
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return {k: clone(v) for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # $retainKeys, $setElementOrder/...: our components never send them
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, key)
    return result


def _merge_keyed_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    merged = list(target)
    index = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, dict)}
    deleted: set[Any] = set()
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            merged.append(clone(item))
            continue
        if item.get("$patch") == "delete":
            deleted.add(item[key])
        elif item[key] in index:
            i = index[item[key]]
            merged[i] = strategic_merge_patch(merged[i], item)
        else:
            index[item[key]] = len(merged)
            merged.append(strategic_merge_patch({}, item))
    if deleted:
        merged = [m for m in merged if not (isinstance(m, dict) and m.get(key) in deleted)]
    return merged


def json_patch(target: JSON, ops: Any) -> JSON:
    """RFC 6902, applied in place. A failed `test` or a bad path is 422, as kube answers."""
    if not isinstance(ops, list):
        raise PatchError("json patch must be an array of operations", code=400, reason="BadRequest")
    if len(ops) > MAX_JSON_PATCH_OPS:
        raise PatchError(f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPS}, got {len(ops)}",
                         code=422, reason="RequestEntityTooLarge")
    try:
        result = jsonpatch.apply_patch(target, ops, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError,
            IndexError, ValueError) as exc:
        raise PatchError(f"the server rejected our request due to an error in our request: {exc}") from exc
    if not isinstance(result, dict):
        raise PatchError("the patch replaced the object with a non-object")
    return result


def apply_patch(obj: JSON, content_type: str, body: Any) -> JSON:
    """Apply `body` to `obj` by the semantics `content_type` names (parameters ignored)."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        return json_patch(obj, body)
    if kind not in (MERGE, STRATEGIC):
        raise PatchError(f"the body of the request was in an unknown format - accepted media types include: "
                         f"{JSON_PATCH}, {MERGE}, {STRATEGIC}", code=415, reason="UnsupportedMediaType")
    if not isinstance(body, dict):
        raise PatchError("the patch must be a JSON object", code=400, reason="BadRequest")
    return merge_patch(obj, body) if kind == MERGE else strategic_merge_patch(obj, body)
