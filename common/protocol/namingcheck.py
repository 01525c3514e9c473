"""Is a component of the other naming set at work in this cluster? (pure)

Components that speak different sets do not see each other: a scheduler reads the
registration key of its own set only, a device plugin advertises the count resource of its
own set only, so a mixed cluster leaves pods Pending with nothing saying why. At start-up
the scheduler and every device plugin look for the other set's traces and report each as a
Warning event and a log line (`report` below says what to change):

* a node that registers its cards only under the other set's key: its device plugin (ours
  or Hygon's) speaks the other set;
* a node whose other-set handshake a HAMi scheduler is stamping `Requesting_`: a scheduler
  of the other set works with that node;
* a Pending pod that asks for the other set's count resource and was not renamed at
  admission: its users (or a HAMi webhook) speak the other set;
* a pod that carries the other set's allocation: a scheduler of the other set placed it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hami_dcu.common.protocol import keys, objects
from hami_dcu.common.protocol.keys import Naming, other_naming
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.common.protocol.requests import pod_asks_for_count

EVENT_REASON = "NamingMismatch"
_SHOWN = 5


def _name(obj: JSON) -> str:
    meta = objects.metadata(obj)
    return f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


@dataclass
class Traces:
    """Objects that show the other naming set at work."""

    other: Naming
    registering: list[str] = field(default_factory=list)  # nodes registered only under the other set
    requested: list[str] = field(default_factory=list)  # nodes a scheduler of the other set handshakes with
    pending: list[str] = field(default_factory=list)  # Pending pods asking for the other set's cards
    placed: list[str] = field(default_factory=list)  # pods a scheduler of the other set allocated cards to

    def __bool__(self) -> bool:
        return bool(self.registering or self.requested or self.pending or self.placed)


def find_traces(nodes: Iterable[JSON], pods: Iterable[JSON], naming: Naming) -> Traces:
    other = other_naming(naming)
    traces = Traces(other)
    for node in nodes:
        annotations = objects.annotations(node)
        if other.node_register in annotations and naming.node_register not in annotations:
            traces.registering.append(_name(node))
        if str(annotations.get(other.node_handshake, "")).startswith(keys.HANDSHAKE_REQUESTING):
            traces.requested.append(_name(node))
    for pod in pods:
        phase = objects.phase(pod)
        if phase not in ("Succeeded", "Failed") and other.pod_devices_allocated in objects.annotations(pod):
            traces.placed.append(_name(pod))
        if phase not in (None, "Pending"):
            continue
        if pod_asks_for_count(pod, other.resources.count):  # naming it with 0 asks for nothing
            traces.pending.append(_name(pod))
    return traces


def _some(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def report(component: str, naming: Naming, traces: Traces) -> str:
    """One message that says what was seen and what to change."""
    other = traces.other
    seen = []
    if traces.registering:
        seen.append(f"node(s) {_some(traces.registering)} register cards only as {other.node_register}")
    if traces.requested:
        seen.append(f"a scheduler of the {other.name} set handshakes with node(s) {_some(traces.requested)} "
                    f"({other.node_handshake})")
    if traces.pending:
        seen.append(f"Pending pod(s) {_some(traces.pending)} ask for {other.resources.count}")
    if traces.placed:
        seen.append(f"pod(s) {_some(traces.placed)} carry {other.pod_devices_allocated}")
    return (f"this {component} speaks the {naming.name} names, but {'; '.join(seen)}: components of the "
            f"{other.name} set (HAMi {'master or Hygon v3' if other.name == 'hcu' else 'v2.10'}) are at work. "
            f"Give every component the same naming set (hami-dcu --naming, chart value naming)")
