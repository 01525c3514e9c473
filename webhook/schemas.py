"""AdmissionReview (admission.k8s.io/v1 and v1beta1) as marshmallow schemas: what we read
from the API server is validated before any decision is made; what we answer is built to the
wire contract (docs/architecture.md, Wire formats).

Only the envelope is declared. The objects it carries (the pod, the old pod, userInfo) are
`JsonObject` fields, handed on untouched: the pod fields a decision reads are checked by
`common/protocol/podshape.py`, and a full pod schema would cost more than the decision itself. One
schema instance serves every review (building one costs more than a load). `load_review`
returns the review with only the fields we read, defaults filled in, and refuses anything
else with every problem named by its path, e.g. `request.uid: Missing data for required field.`
"""

from __future__ import annotations

import base64
import json
from typing import Any

from marshmallow import ValidationError, fields, validate

from hami_dcu.common.protocol import safejson
from hami_dcu.common.protocol.errors import WebhookError
from hami_dcu.common.protocol.schema import JsonBoolean, JsonObject, Strict, load, one_line

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class KindSchema(Strict):
    group = fields.String(load_default="")
    version = fields.String(required=True)
    kind = fields.String(required=True)


class ResourceSchema(Strict):
    group = fields.String(load_default="")
    version = fields.String(load_default="")
    resource = fields.String(required=True)


class RequestSchema(Strict):
    uid = fields.String(required=True, validate=validate.Length(min=1))
    kind = fields.Nested(KindSchema, required=True)
    namespace = fields.String(load_default="")
    name = fields.String(load_default="")
    operation = fields.String(required=True, validate=validate.OneOf(OPERATIONS))
    resource = fields.Nested(ResourceSchema, load_default=None)
    subResource = fields.String(load_default="")
    userInfo = JsonObject(load_default=None)
    object = JsonObject(load_default=None)
    oldObject = JsonObject(load_default=None)
    dryRun = JsonBoolean(load_default=False)


class ReviewSchema(Strict):
    apiVersion = fields.String(required=True, validate=validate.OneOf(API_VERSIONS))
    kind = fields.String(required=True, validate=validate.Equal("AdmissionReview"))
    request = fields.Nested(RequestSchema, required=True)


_REVIEW = ReviewSchema()


class BadReview(WebhookError, ValueError):
    """The body is not an AdmissionReview we can answer: a 400 with this message."""


def load_review(body: bytes) -> dict[str, Any]:
    try:
        data = safejson.loads(body)
    except safejson.JsonError as exc:
        raise BadReview(str(exc)) from exc
    try:
        review: dict[str, Any] = load(_REVIEW, data)
    except ValidationError as exc:
        raise BadReview(f"not an AdmissionReview: {one_line(exc.messages)}") from exc
    return review


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
