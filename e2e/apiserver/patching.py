"""The three patch flavours the API server accepts (k8s-protocols.md §4.2)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

JSON = dict[str, Any]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# Lists that strategic merge merges by a key instead of replacing them whole.
_MERGE_KEYS = {"containers": "name", "initContainers": "name", "conditions": "type", "volumes": "name"}


class PatchError(ValueError):
    """The patch cannot be applied: answered 422."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Merge patch, except that the known keyed lists merge element by element."""
    if isinstance(patch, list) and field in _MERGE_KEYS and isinstance(target, list):
        key = _MERGE_KEYS[field]
        merged = [copy.deepcopy(x) for x in target]
        index = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, dict)}
        for item in patch:
            if isinstance(item, dict) and item.get(key) in index:
                i = index[item[key]]
                merged[i] = strategic_merge_patch(merged[i], item)
            else:
                merged.append(copy.deepcopy(item))
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # directives ($patch, $retainKeys) are not needed by our components
        if value is None:
            result.pop(key, None)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, key)
    return result


def apply_patch(obj: JSON, content_type: str, body: Any) -> JSON:
    kind = content_type.split(";")[0].strip()
    if kind == JSON_PATCH:
        if not isinstance(body, list):
            raise PatchError("a JSON patch must be an array of operations")
        try:
            return jsonpatch.apply_patch(obj, body)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
            raise PatchError(str(exc)) from exc
    if not isinstance(body, dict):
        raise PatchError("a merge patch must be a JSON object")
    if kind == MERGE:
        return merge_patch(obj, body)
    if kind == STRATEGIC:
        return strategic_merge_patch(obj, body)
    raise PatchError(f"unsupported patch content type {content_type!r}")
