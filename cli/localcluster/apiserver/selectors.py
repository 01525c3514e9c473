"""Field and label selectors as the API server understands them.

Both compile once per request into a predicate over the raw object, so a watch pays for
parsing once, not per event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hami_dcu.cli.localcluster.apiserver.resources import JSON
from hami_dcu.common.protocol.errors import CliError

Predicate = Callable[[JSON], bool]


class SelectorError(CliError, ValueError):
    """A selector the server does not support: answered 400 BadRequest."""


GENERIC_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
# The field labels kube-apiserver registers per resource, beyond the generic two.
FIELDS: dict[str, frozenset[str]] = {
    "pods": GENERIC_FIELDS | {
        "spec.nodeName", "spec.schedulerName", "spec.restartPolicy", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
    },
    "nodes": GENERIC_FIELDS | {"spec.unschedulable"},
    "events": GENERIC_FIELDS | {
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
        "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
        "reason", "reportingComponent", "source", "type",
    },
    "secrets": GENERIC_FIELDS | {"type"},
    "namespaces": GENERIC_FIELDS | {"status.phase"},
}
# Booleans are printed the Go way, and an absent one reads as false.
BOOLEAN_FIELDS = frozenset({"spec.hostNetwork", "spec.unschedulable"})


def _field_value(obj: JSON, path: str) -> str:
    if path == "source":  # events: the reporting component, old or new style
        return str((obj.get("source") or {}).get("component") or obj.get("reportingComponent") or "")
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if path in BOOLEAN_FIELDS:
        return "true" if value else "false"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _split_requirement(text: str) -> tuple[str, str, str]:
    """`key op value` with op one of `!=`, `==`, `=` (returned as `!=` or `=`)."""
    for op in ("!=", "==", "="):
        if op in text:
            key, _, value = text.partition(op)
            return key.strip(), "!=" if op == "!=" else "=", value.strip()
    raise SelectorError(f"invalid selector: {text!r}; can't understand it")


def field_selector(text: str | None, resource: str) -> Predicate | None:
    """The predicate for `fieldSelector`, None when there is nothing to check.
    An unknown field is a SelectorError, as kube answers 400 for it."""
    if not text:
        return None
    allowed = FIELDS.get(resource, GENERIC_FIELDS)
    requirements: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        if not part.strip():
            continue
        key, op, value = _split_requirement(part)
        if key not in allowed:
            raise SelectorError(f'field label not supported: "{key}" is not a known field selector: '
                                f'only "{", ".join(sorted(allowed))}"')
        requirements.append((key, op == "=", value))
    if not requirements:
        return None

    def match(obj: JSON) -> bool:
        return all((_field_value(obj, key) == value) == equal for key, equal, value in requirements)

    return match


def _split_outside_parens(text: str) -> list[str]:
    """Split on commas, except those inside `in (a,b)` value sets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


LabelCheck = Callable[[dict[str, str]], bool]


def _label_requirement(part: str) -> LabelCheck:
    words = part.split(None, 1)
    if len(words) == 2 and words[1].split(None, 1)[0] in ("in", "notin"):
        # Set-based: `key in (a, b)`, `key notin (a, b)`.
        key, rest = words[0], words[1]
        op, _, values_text = rest.partition(" ")
        values_text = values_text.strip()
        if not (values_text.startswith("(") and values_text.endswith(")")):
            raise SelectorError(f"invalid label selector {part!r}: expected a parenthesized value set")
        values = frozenset(v.strip() for v in values_text[1:-1].split(",") if v.strip())
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if "=" in part:
        key, op, value = _split_requirement(part)
        if not key:
            raise SelectorError(f"invalid label selector {part!r}: empty key")
        if op == "=":
            return lambda labels: labels.get(key) == value
        return lambda labels: labels.get(key) != value
    if part.startswith("!"):
        absent = part[1:].strip()
        return lambda labels: absent not in labels
    if " " in part:
        raise SelectorError(f"invalid label selector {part!r}")
    return lambda labels: part in labels


def label_selector(text: str | None) -> Predicate | None:
    """The predicate for `labelSelector`: equality (`a=b`, `a==b`, `a!=b`), existence
    (`a`, `!a`) and set (`a in (x,y)`, `a notin (x)`) requirements, ANDed. None when empty."""
    if not text:
        return None
    checks = [_label_requirement(part) for part in _split_outside_parens(text)]
    if not checks:
        return None

    def match(obj: JSON) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return match


def combine(*predicates: Predicate | None) -> Predicate | None:
    """AND of the given predicates, skipping Nones; None when there are none."""
    active = [p for p in predicates if p is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    return lambda obj: all(p(obj) for p in active)
