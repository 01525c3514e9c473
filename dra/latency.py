"""The DRA half of the pod-latency histograms (common/io/podlatency.py): once a claim is
prepared, for each pod it is reserved for, how long ago the pod was bound (bound-to-allocated)
and how long it waited to be bound (create-to-bound, from its PodScheduled condition).

The pods are read after the kubelet has its answer, on a thread of their own: a metric never
delays a container's start, and a failed read only skips a sample. Each pod is counted once,
however many of its claims are prepared, and a retried Prepare answered from the driver's
records is not counted again.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hami_dcu.common.io.kube import Kube, KubeError
from hami_dcu.common.io.podlatency import DRA
from hami_dcu.common.protocol.podtimes import bound_at, created_at, seconds_between
from hami_dcu.dra.metrics import DriverMetrics

log = logging.getLogger(__name__)
JSON = dict[str, Any]
PODS_PER_CLAIM = 4  # a claim shared by many pods costs at most this many reads
REMEMBERED = 4096  # pods already counted, newest kept


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


def reserved_pods(claim: JSON) -> list[PodRef]:
    """The pods a claim is reserved for (`status.reservedFor`, core pods only), at most
    PODS_PER_CLAIM of them."""
    meta = claim.get("metadata") or {}
    namespace = meta.get("namespace")
    status = claim.get("status")
    reserved = status.get("reservedFor") if isinstance(status, dict) else None
    if not isinstance(reserved, list) or not isinstance(namespace, str):
        return []
    pods: list[PodRef] = []
    for entry in reserved:
        if not isinstance(entry, dict) or entry.get("resource") != "pods" or entry.get("apiGroup"):
            continue
        name, uid = entry.get("name"), entry.get("uid")
        if isinstance(name, str) and name and isinstance(uid, str) and uid:
            pods.append(PodRef(namespace, name, uid))
        if len(pods) == PODS_PER_CLAIM:
            break
    return pods


class PodLatency:
    def __init__(self, kube: Kube, node: str, metrics: DriverMetrics,
                 wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 submit: Callable[..., Future[None]] | None = None) -> None:
        self.kube = kube
        self.node = node
        self.metrics = metrics
        self.wall_clock = wall_clock
        self._submit = submit or ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"latency-{node}").submit
        self._counted: OrderedDict[str, None] = OrderedDict()

    def prepared(self, claim: JSON) -> None:
        """Call right after preparing `claim` (the moment the kubelet gets its answer)."""
        answered = self.wall_clock()
        fresh = [pod for pod in reserved_pods(claim) if pod.uid not in self._counted]
        for pod in fresh:
            self._counted[pod.uid] = None
        while len(self._counted) > REMEMBERED:
            self._counted.popitem(last=False)
        if fresh:
            self._submit(self._observe, fresh, answered)

    def _observe(self, pods: list[PodRef], answered: datetime) -> None:
        for ref in pods:
            try:
                pod = self.kube.get_pod(ref.namespace, ref.name)
            except KubeError as exc:
                log.debug("node %s: pod %s/%s not read for its latency: %s", self.node, ref.namespace, ref.name, exc)
                continue
            meta = pod.get("metadata") or {}
            if meta.get("uid") != ref.uid or (pod.get("spec") or {}).get("nodeName") != self.node:
                continue  # another pod by that name now, or not this node's: not ours to time
            bound = bound_at(pod)
            waited = seconds_between(bound, answered)
            if waited is not None:
                self.metrics.bound_to_allocated_seconds.labels(self.node, DRA).observe(waited)
            queued = seconds_between(created_at(pod), bound) if bound is not None else None
            if queued is not None:
                self.metrics.create_to_bound_seconds.labels(DRA).observe(queued)
