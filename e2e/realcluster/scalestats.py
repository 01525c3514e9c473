"""The arithmetic of a scale run (pure): rates and latencies of a burst, and differences of
Prometheus counters scraped before and after it.

Times are monotonic seconds taken by one process (the harness): when each pod's create was sent
and when its watch first showed the pod bound.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

LabelKey = tuple[str, ...]


@dataclass
class Burst:
    """What the harness saw of one burst."""

    pods: int
    created: dict[str, float] = field(default_factory=dict)  # pod -> its create sent
    bound: dict[str, float] = field(default_factory=dict)  # pod -> first seen with spec.nodeName
    running: dict[str, float] = field(default_factory=dict)  # pod -> first seen Running
    nodes: dict[str, str] = field(default_factory=dict)  # pod -> its node
    refused: dict[str, str] = field(default_factory=dict)  # pod -> why its create failed
    failed: dict[str, str] = field(default_factory=dict)  # pod -> why it ended Failed

    @property
    def started(self) -> float:
        return min(self.created.values())

    def pods_per_second(self) -> float:
        """Pods bound per second, from the first create sent to the last pod seen bound."""
        if not self.bound:
            return 0.0
        elapsed = max(self.bound.values()) - self.started
        return len(self.bound) / elapsed if elapsed > 0 else float("inf")

    def create_to_bound(self) -> list[float]:
        return sorted(self.bound[p] - self.created[p] for p in self.bound if p in self.created)

    def bound_to_running(self) -> list[float]:
        return sorted(self.running[p] - self.bound[p] for p in self.running if p in self.bound)


def quantile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; 0 for no samples."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline > 0 else float("inf")


def samples(text: str, family: str, by: Sequence[str] = (), suffix: str = "") -> dict[LabelKey, float]:
    """Sum of the samples `family + suffix` (e.g. "_count" of a histogram) in Prometheus text,
    grouped by the labels `by`. Lines of other metrics are skipped before parsing (an
    extender's /metrics holds a line per card and figure)."""
    name = family + suffix
    kept = "\n".join(line for line in text.splitlines()
                     if line.startswith(name) or line.startswith(f"# TYPE {family} ")
                     or line.startswith(f"# HELP {family} "))
    totals: dict[LabelKey, float] = defaultdict(float)
    for metric in text_string_to_metric_families(kept + "\n"):
        for sample in metric.samples:
            if sample.name == name:
                totals[tuple(sample.labels.get(label, "") for label in by)] += sample.value
    return dict(totals)


def deltas(before: Mapping[LabelKey, float], after: Mapping[LabelKey, float]) -> dict[LabelKey, float]:
    """What each counter gained between two scrapes (a series new in `after` gained all of it)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value - before.get(key, 0.0)}


def net_of_background(gained: Mapping[LabelKey, float], background: Mapping[LabelKey, float],
                      background_seconds: float, seconds: float) -> dict[LabelKey, float]:
    """What a burst of `seconds` gained beyond the background (what the same counters gained
    over `background_seconds` with no burst: leases, plugin reports, watches), never below 0.
    Without it a slow burst would be charged more of the background per pod than a fast one."""
    scale = seconds / background_seconds if background_seconds > 0 else 0.0
    net = {key: value - background.get(key, 0.0) * scale for key, value in gained.items()}
    return {key: value for key, value in net.items() if value > 0}


def per_pod(gained: Mapping[LabelKey, float], pods: int, top: int = 8) -> list[tuple[LabelKey, float]]:
    """The largest gains divided by the pods of the burst, largest first."""
    if pods <= 0:
        return []
    ranked = sorted(gained.items(), key=lambda item: (-item[1], item[0]))
    return [(key, value / pods) for key, value in ranked[:top]]


def histogram_mean(sums: Mapping[LabelKey, float], counts: Mapping[LabelKey, float], key: LabelKey = ()) -> float:
    count = counts.get(key, 0.0)
    return sums.get(key, 0.0) / count if count else 0.0


def nodes_used(nodes: Iterable[str]) -> int:
    return len(set(nodes))


def final_line(nodes: int, pods: int, dcu_per_s: float, plain_per_s: float, label: str = "scale") -> str:
    """The one line bench/scale.py ends with, for the largest run it made (`scale-dra`: the
    line before it, for DRA mode's)."""
    return (f"{label}: nodes={nodes} pods={pods} dcu_pods_per_s={dcu_per_s:.1f} plain_pods_per_s={plain_per_s:.1f} "
            f"ratio={ratio(plain_per_s, dcu_per_s):.2f}")
