"""What the server knows about each resource, and JSON helpers shared by every module."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]

CORE = "v1"
ADMISSION = "admissionregistration.k8s.io/v1"

# plural -> (kind, apiVersion). The plural is what appears in URLs and in store keys.
KINDS: dict[str, tuple[str, str]] = {
    "nodes": ("Node", CORE),
    "pods": ("Pod", CORE),
    "namespaces": ("Namespace", CORE),
    "events": ("Event", CORE),
    "secrets": ("Secret", CORE),
    "configmaps": ("ConfigMap", CORE),
    "resourcequotas": ("ResourceQuota", CORE),
    "mutatingwebhookconfigurations": ("MutatingWebhookConfiguration", ADMISSION),
}
CLUSTER_SCOPED = frozenset({"nodes", "namespaces", "mutatingwebhookconfigurations"})
# Subresources served per resource (binding is a POST-only pod subresource).
SUBRESOURCES: dict[str, frozenset[str]] = {
    "pods": frozenset({"status", "binding"}),
    "nodes": frozenset({"status"}),
    "namespaces": frozenset({"status"}),
}


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_kind(resource: str, obj: JSON) -> JSON:
    """A shallow copy with kind and apiVersion, as watch events and single objects carry them."""
    kind, api_version = KINDS[resource]
    return {"kind": kind, "apiVersion": api_version, **obj}


def clone(value: Any) -> Any:
    """Deep copy of a JSON tree; several times faster than copy.deepcopy, which matters
    when a list copies hundreds of pods."""
    if isinstance(value, dict):
        return {k: clone(v) if isinstance(v, dict | list) else v for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) if isinstance(v, dict | list) else v for v in value]
    return value


def status_body(code: int, reason: str, message: str, details: JSON | None = None) -> JSON:
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                  "status": "Failure" if code >= 400 else "Success"}
    if message:
        body["message"] = message
    if reason:
        body["reason"] = reason
    if details:
        body["details"] = details
    body["code"] = code
    return body
