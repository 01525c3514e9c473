"""The webhook's half of the one-writer rule: which object an AdmissionRequest writes, and
whether its writer may (common/writers.py decides; this module only reads the request)."""

from __future__ import annotations

from typing import Any

from hami_dcu.common import writers
from hami_dcu.common.writers import Caller, Identities

_RESOURCE_OF_KIND = {"Pod": "pods", "Binding": "pods", "Node": "nodes"}


def written_kind(request: dict[str, Any]) -> str | None:
    """writers.POD, BINDING or NODE; None for anything else. A Binding is the pods/binding
    subresource: its annotations land on the pod without a pod UPDATE being admitted."""
    resource = (request.get("resource") or {}).get("resource") or _RESOURCE_OF_KIND.get(request["kind"]["kind"])
    if resource == "pods":
        binding = request.get("subResource") == "binding" or request["kind"]["kind"] == "Binding"
        return writers.BINDING if binding else writers.POD
    if resource == "nodes":
        return writers.NODE
    return None


def refusal(request: dict[str, Any], identities: Identities) -> str | None:
    """Why this CREATE or UPDATE may not be admitted, or None."""
    operation = request["operation"]
    if operation not in ("CREATE", "UPDATE"):
        return None
    kind = written_kind(request)
    if kind is None:
        return None
    old = request.get("oldObject") if operation == "UPDATE" else None
    return writers.judge(kind, Caller.from_user_info(request.get("userInfo")), request.get("object"), old,
                         identities)
