"""AdmissionReview (admission.k8s.io/v1 and v1beta1) as marshmallow schemas: what we read
from the API server is validated before any decision is made; what we answer is built to
the wire contract (k8s-protocols.md §3)."""

from __future__ import annotations

import base64
import json
from typing import Any

from marshmallow import EXCLUDE, Schema, ValidationError, fields, validate

from hami_dcu.common import safejson

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


class KindSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    group = fields.String(load_default="")
    version = fields.String(required=True)
    kind = fields.String(required=True)


class ResourceSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    group = fields.String(load_default="")
    version = fields.String(load_default="")
    resource = fields.String(required=True)


class RequestSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    uid = fields.String(required=True, validate=validate.Length(min=1))
    kind = fields.Nested(KindSchema, required=True)
    namespace = fields.String(load_default="")
    name = fields.String(load_default="")
    operation = fields.String(required=True, validate=validate.OneOf(["CREATE", "UPDATE", "DELETE", "CONNECT"]))
    resource = fields.Nested(ResourceSchema, load_default=None)
    subResource = fields.String(load_default="")
    userInfo = fields.Dict(allow_none=True, load_default=None)
    object = fields.Dict(allow_none=True, load_default=None)
    oldObject = fields.Dict(allow_none=True, load_default=None)
    dryRun = fields.Boolean(load_default=False)


class ReviewSchema(Schema):
    class Meta:
        unknown = EXCLUDE

    apiVersion = fields.String(required=True, validate=validate.OneOf(API_VERSIONS))
    kind = fields.String(required=True, validate=validate.Equal("AdmissionReview"))
    request = fields.Nested(RequestSchema, required=True)


_review_schema = ReviewSchema()


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer: a 400 with this message."""


def load_review(body: bytes) -> dict[str, Any]:
    try:
        data = safejson.loads(body)
    except safejson.JsonError as exc:
        raise BadReview(str(exc)) from exc
    if not isinstance(data, dict):
        raise BadReview("body is not a JSON object")
    try:
        return _review_schema.load(data)
    except ValidationError as exc:
        raise BadReview(f"not an AdmissionReview: {json.dumps(exc.messages, sort_keys=True)}") from exc


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
