"""Field and label selectors as the API server understands them (k8s-protocols.md §6.4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]
Predicate = Callable[[JSON], bool]


class SelectorError(ValueError):
    """A selector the server does not support: answered 400."""


POD_FIELDS = {"spec.nodeName", "spec.schedulerName", "status.phase", "metadata.name", "metadata.namespace",
              "spec.restartPolicy", "spec.serviceAccountName"}
GENERIC_FIELDS = {"metadata.name", "metadata.namespace"}


def _field_value(obj: JSON, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _split_requirement(text: str) -> tuple[str, str, str]:
    for op in ("!=", "==", "="):
        if op in text:
            key, _, value = text.partition(op)
            return key.strip(), "!=" if op == "!=" else "=", value.strip()
    raise SelectorError(f"invalid selector requirement {text!r}")


def field_selector(text: str | None, resource: str) -> Predicate:
    if not text:
        return lambda _obj: True
    allowed = POD_FIELDS if resource == "pods" else GENERIC_FIELDS
    requirements = []
    for part in text.split(","):
        if not part.strip():
            continue
        key, op, value = _split_requirement(part)
        if key not in allowed:
            raise SelectorError(f'"{key}" is not a known field selector: only "{", ".join(sorted(allowed))}"')
        requirements.append((key, op, value))

    def match(obj: JSON) -> bool:
        for key, op, value in requirements:
            equal = _field_value(obj, key) == value
            if equal != (op == "="):
                return False
        return True

    return match


def label_selector(text: str | None) -> Predicate:
    """Equality (`a=b`, `a==b`, `a!=b`) and existence (`a`, `!a`) requirements, ANDed."""
    if not text:
        return lambda _obj: True
    checks: list[Callable[[dict[str, str]], bool]] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        if "=" in part:
            key, op, value = _split_requirement(part)
            if op == "=":
                checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
            else:
                checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif part.startswith("!"):
            absent = part[1:].strip()
            checks.append(lambda labels, k=absent: k not in labels)
        else:
            checks.append(lambda labels, k=part: k in labels)

    def match(obj: JSON) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return match


def combine(*predicates: Predicate) -> Predicate:
    return lambda obj: all(p(obj) for p in predicates)
