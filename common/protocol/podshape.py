"""The JSON types of the pod fields our components read, checked before any decision.

The API server only ever sends well-typed pods; a body posted straight to the webhook or the
extender need not be. Rather than let a `"metadata": "x"` surface as an AttributeError deep
in a decision (a 500, or "internal error"), the first wrongly typed field is named here, by
its path. Absent and null fields are fine: every reader treats them as empty. Fields we do
not read are not checked. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}


def pod_shape_problem(pod: object) -> str | None:
    """The first wrongly typed field of `pod`, as "<path> must be <type>", or None."""
    if not isinstance(pod, dict):
        return "pod must be an object"
    return _metadata_problem(pod.get("metadata")) or _spec_problem(pod.get("spec"))


def _wrong(value: object, kind: type, path: str) -> str | None:
    if value is None or isinstance(value, kind):
        return None
    return f"{path} must be {_TYPE_NAMES[kind]}, got {_json_type(value)}"


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return _TYPE_NAMES.get(type(value), "null")


def _string_map_problem(value: object, path: str) -> str | None:
    problem = _wrong(value, dict, path)
    if problem or value is None:
        return problem
    assert isinstance(value, dict)
    for key, item in value.items():
        if not isinstance(item, str):
            return f"{path}.{key[:63]} must be a string, got {_json_type(item)}"
    return None


def _metadata_problem(meta: object) -> str | None:
    problem = _wrong(meta, dict, "metadata")
    if problem or meta is None:
        return problem
    assert isinstance(meta, dict)
    for name in ("name", "generateName", "namespace", "uid"):
        problem = _wrong(meta.get(name), str, f"metadata.{name}")
        if problem:
            return problem
    return (_string_map_problem(meta.get("labels"), "metadata.labels")
            or _string_map_problem(meta.get("annotations"), "metadata.annotations"))


def _spec_problem(spec: object) -> str | None:
    problem = _wrong(spec, dict, "spec")
    if problem or spec is None:
        return problem
    assert isinstance(spec, dict)
    for name in ("nodeName", "schedulerName"):
        problem = _wrong(spec.get(name), str, f"spec.{name}")
        if problem:
            return problem
    for section in ("initContainers", "containers"):
        containers = spec.get(section)
        problem = _wrong(containers, list, f"spec.{section}")
        if problem:
            return problem
        for index, container in enumerate(containers or []):
            problem = _container_problem(container, f"spec.{section}[{index}]")
            if problem:
                return problem
    return None


def _container_problem(container: Any, path: str) -> str | None:
    if not isinstance(container, dict):
        return f"{path} must be an object, got {_json_type(container)}"
    problem = _wrong(container.get("name"), str, f"{path}.name")
    if problem:
        return problem
    resources = container.get("resources")
    problem = _wrong(resources, dict, f"{path}.resources")
    if problem:
        return problem
    for section in ("limits", "requests"):
        # Quantity values are checked by common.protocol.requests, with a message about the quantity.
        problem = _wrong((resources or {}).get(section), dict, f"{path}.resources.{section}")
        if problem:
            return problem
    context = container.get("securityContext")
    problem = _wrong(context, dict, f"{path}.securityContext")
    if problem:
        return problem
    return _wrong((context or {}).get("privileged"), bool, f"{path}.securityContext.privileged")
