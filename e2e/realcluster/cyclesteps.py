"""One node's cycle during a burst, step by step, as the API server's watches show it: the
extender's lock, the Binding, the device plugin's outcome (bind-phase success), the lock's
release and the next lock on the same node. With the node lock a node serves one pod at a time,
so a burst's rate is (nodes busy at once) / (cycle time); this says where a cycle goes.

`StepRecorder` watches nodes and the burst's namespace from its own threads and stamps every
change on the monotonic clock; `steps` (pure) turns the stamps into per-step samples.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from e2e.realcluster.scalestats import quantile
from hami_dcu.common.io.kube import Kube, KubeError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import CodecError, decode_lock

LOCK, UNLOCK, BOUND, ALLOCATED = "lock", "unlock", "bound", "allocated"
# (from, to) of every step reported, in cycle order.
STEPS = (
    ("lock", "bound"),  # the extender's Binding after its lock
    ("bound", "allocated"),  # the kubelet sees the pod, GetPreferredAllocation, Allocate, the outcome write
    ("allocated", "released"),  # the lock release beside the outcome
    ("released", "next lock"),  # the extender's watch sees it, the next waiting bind writes its lock
    ("lock", "next lock"),  # the whole cycle
)


@dataclass(frozen=True)
class Stamp:
    at: float  # monotonic seconds
    kind: str  # LOCK (of `pod`), UNLOCK, BOUND (`pod` to `node`), ALLOCATED (`pod`)
    node: str
    pod: str = ""


@dataclass
class Steps:
    samples: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    busy_mean: float = 0.0  # nodes holding a lock at once, averaged over the burst
    busy_max: int = 0

    def lines(self) -> list[str]:
        out = []
        for step in STEPS:
            values = self.samples.get(step) or []
            if values:
                p50, p90, mean = (1000 * v for v in (quantile(values, 0.5), quantile(values, 0.9),
                                                     sum(values) / len(values)))
                name = f"{step[0]} -> {step[1]}:"
                out.append(f"  {name:<25} n={len(values):3d} p50 {p50:6.0f} ms  p90 {p90:6.0f} ms  mean {mean:6.0f} ms")
        out.append(f"  nodes locked at once: mean {self.busy_mean:.1f}, max {self.busy_max}")
        return out


def steps(stamps: Iterable[Stamp]) -> Steps:
    """Per pod: when its lock appeared, it was bound, its outcome landed, its lock went and the
    node's next lock appeared; each step's samples over every pod that has both ends."""
    ordered = sorted(stamps, key=lambda s: s.at)
    pods: dict[str, dict[str, float]] = defaultdict(dict)
    node_of: dict[str, str] = {}
    locks: dict[str, list[Stamp]] = defaultdict(list)  # node -> its LOCK and UNLOCK stamps
    for stamp in ordered:
        if stamp.kind in (LOCK, UNLOCK):
            locks[stamp.node].append(stamp)
        if stamp.kind == LOCK:
            pods[stamp.pod].setdefault("lock", stamp.at)
        elif stamp.kind == BOUND:
            pods[stamp.pod].setdefault("bound", stamp.at)
            node_of[stamp.pod] = stamp.node
        elif stamp.kind == ALLOCATED:
            pods[stamp.pod].setdefault("allocated", stamp.at)
    for pod, times in pods.items():
        node, locked = node_of.get(pod), times.get("lock")
        if node is None or locked is None:
            continue
        later = [s for s in locks[node] if s.at > locked]
        gone = next((s.at for s in later if s.kind == UNLOCK or s.pod != pod), None)
        if gone is not None:
            times["released"] = gone
        following = next((s.at for s in later if s.kind == LOCK and s.pod != pod), None)
        if following is not None:
            times["next lock"] = following
    result = Steps()
    for start, end in STEPS:
        result.samples[(start, end)] = [t[end] - t[start] for t in pods.values() if start in t and end in t]
    result.busy_mean, result.busy_max = _busy(locks.values())
    return result


def _busy(per_node: Iterable[Sequence[Stamp]]) -> tuple[float, int]:
    """Nodes holding a lock at once, sampled every 0.1 s between the first and last stamp."""
    spans = []
    for stamps in per_node:
        held = None
        for stamp in stamps:
            if stamp.kind == LOCK and held is None:
                held = stamp.at
            elif stamp.kind == UNLOCK and held is not None:
                spans.append((held, stamp.at))
                held = None
    if not spans:
        return 0.0, 0
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    ticks = [first + 0.1 * i for i in range(int((last - first) / 0.1) + 1)]
    counts = [sum(1 for s, e in spans if s <= t < e) for t in ticks]
    return sum(counts) / len(counts), max(counts)


class StepRecorder:
    """Stamps lock changes of every node and binding and outcome of the pods in `namespace`,
    from two watch threads, until `stop`."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.stamps: list[Stamp] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._follow, args=(path, apply), daemon=True) for path, apply in (
            ("/api/v1/nodes", self._node), (f"/api/v1/namespaces/{namespace}/pods", self._pod))]
        self._locks: dict[str, str | None] = {}
        self._pods: dict[str, tuple[str, str]] = {}
        self._listed = threading.Semaphore(0)

    def start(self, timeout: float = 30.0) -> StepRecorder:
        """Returns once both watches have listed: what happens after is stamped."""
        for thread in self._threads:
            thread.start()
        for _ in self._threads:
            self._listed.acquire(timeout=timeout)
        return self

    def stop(self) -> list[Stamp]:
        self._stop.set()
        return list(self.stamps)

    def _follow(self, path: str, apply: object) -> None:
        first = True
        while not self._stop.is_set():
            try:
                listed = self.kube.request("GET", path)
                for item in listed.get("items") or []:
                    apply(item, quiet=True)  # type: ignore[operator]
                if first:
                    first = False
                    self._listed.release()
                for event in self.kube.watch(path, listed["metadata"]["resourceVersion"], 30):
                    if self._stop.is_set():
                        return
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        apply(event["object"], quiet=False)  # type: ignore[operator]
            except KubeError:
                time.sleep(0.2)

    def _node(self, node: dict, quiet: bool) -> None:
        name = node["metadata"]["name"]
        value = (node["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        if self._locks.get(name) == value and name in self._locks:
            return
        self._locks[name] = value
        if quiet:
            return
        holder = ""
        if value:
            try:
                holder = decode_lock(value).name or ""
            except CodecError:
                holder = ""
        self.stamps.append(Stamp(time.monotonic(), LOCK if value else UNLOCK, name, holder))

    def _pod(self, pod: dict, quiet: bool) -> None:
        name = pod["metadata"]["name"]
        node = pod["spec"].get("nodeName") or ""
        phase = (pod["metadata"].get("annotations") or {}).get(keys.POD_BIND_PHASE, "")
        before = self._pods.get(name, ("", ""))
        self._pods[name] = (node, phase)
        if quiet:
            return
        now = time.monotonic()
        if node and not before[0]:
            self.stamps.append(Stamp(now, BOUND, node, name))
        if phase == keys.BIND_PHASE_SUCCESS and before[1] != phase:
            self.stamps.append(Stamp(now, ALLOCATED, node, name))
