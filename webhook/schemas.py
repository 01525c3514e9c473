"""AdmissionReview (admission.k8s.io/v1 and v1beta1): what we read from the API server is
checked field by field before any decision is made; what we answer is built to the wire
contract (docs/architecture.md, Wire formats).

The checks are written out rather than declared with a schema library: on the webhook's
hot path a declarative loader (marshmallow) cost more than the whole admission decision
(~130 µs of a ~250 µs review), for a dozen fields. `load_review` returns the review with
only the fields we read, defaults filled in, and refuses anything else with every problem
named by its path, e.g. `{"request": {"uid": ["Missing data for required field."]}}`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from hami_dcu.common import safejson
from hami_dcu.common.errors import WebhookError

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
_MISSING = "Missing data for required field."
_NULL = "Field may not be null."
_NOT_STRING = "Not a valid string."
_NOT_MAPPING = "Not a valid mapping type."
_NOT_BOOLEAN = "Not a valid boolean."
JSON = dict[str, Any]


class BadReview(WebhookError, ValueError):
    """The body is not an AdmissionReview we can answer: a 400 with this message."""


def load_review(body: bytes) -> dict[str, Any]:
    try:
        data = safejson.loads(body)
    except safejson.JsonError as exc:
        raise BadReview(str(exc)) from exc
    if not isinstance(data, dict):
        raise BadReview("body is not a JSON object")
    problems: JSON = {}
    api_version = _string(data, "apiVersion", problems, required=True)
    if api_version is not None and api_version not in API_VERSIONS:
        problems["apiVersion"] = [f"Must be one of: {', '.join(API_VERSIONS)}."]
    kind = _string(data, "kind", problems, required=True)
    if kind is not None and kind != "AdmissionReview":
        problems["kind"] = ["Must be equal to AdmissionReview."]
    request = _nested(data, "request", problems, _request, required=True)
    if problems:
        raise BadReview(f"not an AdmissionReview: {json.dumps(problems, sort_keys=True)}")
    return {"apiVersion": api_version, "kind": kind, "request": request}


def _request(raw: JSON, problems: JSON) -> JSON:
    uid = _string(raw, "uid", problems, required=True)
    if uid == "":
        problems["uid"] = ["Shorter than minimum length 1."]
    operation = _string(raw, "operation", problems, required=True)
    if operation is not None and operation not in OPERATIONS:
        problems["operation"] = [f"Must be one of: {', '.join(OPERATIONS)}."]
    dry_run = raw.get("dryRun", False)
    if not isinstance(dry_run, bool):
        problems["dryRun"] = [_NOT_BOOLEAN]
    return {
        "uid": uid,
        "kind": _nested(raw, "kind", problems, _kind, required=True),
        "namespace": _string(raw, "namespace", problems, default=""),
        "name": _string(raw, "name", problems, default=""),
        "operation": operation,
        "resource": _nested(raw, "resource", problems, _resource, required=False),
        "subResource": _string(raw, "subResource", problems, default=""),
        "userInfo": _mapping(raw, "userInfo", problems),
        "object": _mapping(raw, "object", problems),
        "oldObject": _mapping(raw, "oldObject", problems),
        "dryRun": dry_run,
    }


def _kind(raw: JSON, problems: JSON) -> JSON:
    return {"group": _string(raw, "group", problems, default=""),
            "version": _string(raw, "version", problems, required=True),
            "kind": _string(raw, "kind", problems, required=True)}


def _resource(raw: JSON, problems: JSON) -> JSON:
    return {"group": _string(raw, "group", problems, default=""),
            "version": _string(raw, "version", problems, default=""),
            "resource": _string(raw, "resource", problems, required=True)}


def _string(raw: JSON, key: str, problems: JSON, *, required: bool = False, default: str = "") -> str | None:
    if key not in raw:
        if required:
            problems[key] = [_MISSING]
            return None
        return default
    value = raw[key]
    if value is None:
        problems[key] = [_NULL]
        return None
    if not isinstance(value, str):
        problems[key] = [_NOT_STRING]
        return None
    return value


def _mapping(raw: JSON, key: str, problems: JSON) -> JSON | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, dict):
        problems[key] = [_NOT_MAPPING]
        return None
    return value


def _nested(raw: JSON, key: str, problems: JSON, load: Any, *, required: bool) -> JSON | None:
    value = raw.get(key)
    if value is None:
        if key in raw and required:
            problems[key] = [_NULL]
        elif required:
            problems[key] = [_MISSING]
        return None
    if not isinstance(value, dict):
        problems[key] = {"_schema": ["Invalid input type."]}
        return None
    inner: JSON = {}
    loaded = load(value, inner)
    if inner:
        problems[key] = inner
        return None
    return loaded


def build_response(
    api_version: str,
    uid: str,
    allowed: bool,
    *,
    message: str = "",
    patch: list[dict[str, Any]] | None = None,
    warnings: list[str] | None = None,
    code: int = 403,
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "message": message, "reason": "Forbidden" if code == 403 else ""}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}
