"""Whether a ResourceClaimTemplate found under the name the webhook would give one is ours to
reuse (pure, no I/O).

The webhook names its templates by a hash of their spec (common/protocol/dra/translate.py), so anyone able to
create templates in a namespace can compute the name a request shape will use and plant a
template there first: a share rewritten to name it would then get whatever that template asks
(a whole card, another device class, claim labels of its choosing). A template is reused only
when it carries our owner label and its spec is exactly the one we would create; the API
server's own defaulting (empty metadata, `creationTimestamp: null`, canonical quantities) is
not a difference.
"""

from __future__ import annotations

from typing import Any

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.dra.quantity import canonical
from hami_dcu.common.protocol.untrusted import shown

JSON = dict[str, Any]


def foreign_template(found: Any, wanted: JSON, namespace: str) -> str | None:
    """Why `found` (the stored object under `wanted`'s name) must not be reused, or None."""
    name = wanted["metadata"]["name"]
    problems = []
    meta = found.get("metadata") if isinstance(found, dict) else None
    labels = (meta.get("labels") if isinstance(meta, dict) else None) or {}
    owner = labels.get(names.OWNER_LABEL) if isinstance(labels, dict) else None
    if owner != names.OWNER:
        seen = "no such label" if owner is None else f"{names.OWNER_LABEL}={shown(owner)}"
        problems.append(f"it is not labelled {names.OWNER_LABEL}={names.OWNER} ({seen})")
    spec = found.get("spec") if isinstance(found, dict) else None
    if _comparable(spec) != _comparable(wanted["spec"]):
        problems.append("its spec is not the one hami-dcu writes for this request")
    if not problems:
        return None
    return (f"DRA mode: ResourceClaimTemplate {namespace}/{name}, which this pod's DCU request would use, exists "
            f"but was not made by hami-dcu: {'; '.join(problems)}. It is not used; whoever created it (or an "
            f"administrator) must delete it, then create the pod again")


def _comparable(value: Any) -> Any:
    return canonical(_pruned(value))


def _pruned(value: Any) -> Any:
    """`value` without nulls and empty objects or lists: the API server writes an unset
    template metadata as `{"creationTimestamp": null}`, which says nothing."""
    if isinstance(value, dict):
        kept = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value
