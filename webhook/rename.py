"""Pods written for the other naming set, renamed to the set this cluster speaks (pure).

HAMi renamed every Hygon name from `dcu` to `hcu` with no alias (docs/architecture.md, Naming
sets), so a manifest written for one set is Pending for ever on a cluster that speaks the other. A
mutating webhook may change a pod's resources at CREATE: the other set's resource names
(limits and requests of every container and init container) and type-selection
annotations become this set's, and admission warns about each rename. A container that
names the same thing in both sets is refused: which one was meant cannot be known.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any

from hami_dcu.common.protocol.keys import Naming, other_naming

JSON = dict[str, Any]
_SECTIONS = ("limits", "requests")


@dataclass(frozen=True)
class Adopted:
    pod: JSON  # the pod as this set names it (the input itself when nothing was renamed)
    renames: list[tuple[str, str]] = field(default_factory=list)  # (from, to), in the order found
    conflict: str = ""  # why the pod cannot be renamed

    def warnings(self, naming: Naming) -> list[str]:
        return [f"{old} renamed to {new} (this cluster speaks the {naming.name} names)" for old, new in self.renames]


@functools.cache
def _maps(naming: Naming) -> tuple[dict[str, str], dict[str, str]]:
    """(resource renames, annotation renames) from the other set into `naming`."""
    other = other_naming(naming)
    return (dict(zip(other.resources.all(), naming.resources.all(), strict=True)),
            {other.use_type: naming.use_type, other.nouse_type: naming.nouse_type})


def adopt_names(pod: JSON, naming: Naming) -> Adopted:
    resource_map, annotation_map = _maps(naming)
    if not _mentions(pod, resource_map, annotation_map):
        return Adopted(pod)
    renamed = copy.deepcopy(pod)
    found: list[tuple[str, str]] = []
    spec = renamed.get("spec") or {}
    for section_name in ("initContainers", "containers"):
        for container in spec.get(section_name) or []:
            resources = container.get("resources") or {}
            for section in _SECTIONS:
                values = resources.get(section)
                problem = _rename(values, resource_map, found, f"container {container.get('name')} {section}")
                if problem:
                    return Adopted(pod, conflict=problem)
    annotations = (renamed.get("metadata") or {}).get("annotations")
    problem = _rename(annotations, annotation_map, found, "the pod's annotations")
    if problem:
        return Adopted(pod, conflict=problem)
    return Adopted(renamed, list(dict.fromkeys(found)))


def _mentions(pod: JSON, resource_map: dict[str, str], annotation_map: dict[str, str]) -> bool:
    """The cheap test first: most pods name nothing of the other set."""
    spec = pod.get("spec") or {}
    for section_name in ("initContainers", "containers"):
        for container in spec.get(section_name) or []:
            resources = container.get("resources") or {}
            for section in _SECTIONS:
                values = resources.get(section)
                if values and not resource_map.keys().isdisjoint(values):
                    return True
    annotations = (pod.get("metadata") or {}).get("annotations")
    return bool(annotations and not annotation_map.keys().isdisjoint(annotations))


def _rename(values: dict[str, Any] | None, mapping: dict[str, str], found: list[tuple[str, str]],
            where: str) -> str:
    """Rename in place; the conflict, if any."""
    if not values:
        return ""
    for old, new in mapping.items():
        if old not in values:
            continue
        if new in values:
            return f"{where} name both {old} and {new}: keep one"
        values[new] = values.pop(old)
        found.append((old, new))
    return ""
