"""The webhook's half of the one-writer rule: which object an AdmissionRequest writes, and
whether its writer may (common/protocol/writers.py decides; this module only reads the request).

Where no ValidatingAdmissionPolicy can run (Kubernetes below 1.30, or the chart's policies
switched off), the chart registers the webhook for pod UPDATEs and Bindings too, and this is
the rule they meet. On pods it guards DCU pods only, as the chart's policy does: HAMi's own
scheduler and device plugins write the keys it shares with us (`vgpu-node`, `bind-phase`, ...)
on the pods they place, and hami-dcu must not block them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_dcu.common.protocol import keys, writers
from hami_dcu.common.protocol.requests import names_dcu, pod_containers
from hami_dcu.common.protocol.writers import Caller, Identities

_RESOURCE_OF_KIND = {"Pod": "pods", "Binding": "pods", "Node": "nodes"}
# Either naming set: a pod of the other set is renamed into ours at CREATE, and its allocation
# is hami-dcu's to write as much as one of ours (common/protocol/keys.py).
_NAMINGS = (keys.DCU_NAMING, keys.HCU_NAMING)
_ALLOCATION_KEYS = keys.DCU_NAMING.pod_allocation_keys | keys.HCU_NAMING.pod_allocation_keys


def written_kind(request: dict[str, Any]) -> str | None:
    """writers.POD, BINDING or NODE; None for anything else. A Binding is the pods/binding
    subresource, or the same object posted to the namespace's legacy `bindings` resource: its
    annotations land on the pod without a pod UPDATE being admitted."""
    resource = (request.get("resource") or {}).get("resource") or _RESOURCE_OF_KIND.get(request["kind"]["kind"])
    if resource == "bindings":
        return writers.BINDING
    if resource == "pods":
        binding = request.get("subResource") == "binding" or request["kind"]["kind"] == "Binding"
        return writers.BINDING if binding else writers.POD
    if resource == "nodes":
        return writers.NODE
    return None


def _names_dcu(obj: Mapping[str, Any] | None) -> bool:
    if not isinstance(obj, Mapping):
        return False
    containers = [c for c in pod_containers(dict(obj)) if isinstance(c, Mapping)]
    return any(names_dcu(c, naming.resources) for c in containers for naming in _NAMINGS)


def dcu_write(kind: str, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None) -> bool:
    """Whether the write concerns a DCU pod: one whose containers name either naming set's
    resources, or which carries (or carried) either set's allocation keys. A Binding carries
    no spec: it is a DCU write when its annotations hold an allocation key. Nodes: always."""
    if kind == writers.NODE:
        return True
    carried = any(not _ALLOCATION_KEYS.isdisjoint(writers.annotations_of(obj)) for obj in (new, old))
    if kind == writers.BINDING:
        return carried
    return carried or _names_dcu(new) or _names_dcu(old)


def refusal(request: dict[str, Any], identities: Identities) -> str | None:
    """Why this CREATE or UPDATE may not be admitted, or None."""
    operation = request["operation"]
    if operation not in ("CREATE", "UPDATE"):
        return None
    kind = written_kind(request)
    if kind is None:
        return None
    new = request.get("object")
    old = request.get("oldObject") if operation == "UPDATE" else None
    caller = Caller.from_user_info(request.get("userInfo"))
    if not dcu_write(kind, new, old):
        # A device plugin still writes nothing outside its own node, DCU pod or not.
        return writers.plugin_scope(kind, caller, new, identities)
    return writers.judge(kind, caller, new, old, identities)
