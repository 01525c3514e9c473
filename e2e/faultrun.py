"""A fault campaign on the local cluster: a burst of DCU pods, API faults on writes, pods
Running over time, then the reliability invariants (e2e/invariants.py).

Used by the bounded fault test (tests/e2e) and by `bench/faults.py`. The same topology and
seed give the same pods and, per request, the same fault draws, so a run with faults is
compared with a fault-free run of the same workload.

What is faulted: every write (POST/PUT/PATCH/DELETE), the harness's own pod creations
included (they are retried as a controller would), except the kubelet stand-in's pod
status writes: a real kubelet's status manager retries those until they land, the
stand-in does not, and a lost "Running" would say nothing about hami-dcu.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from e2e import invariants
from hami_dcu.cli.localcluster.apiserver.faults import WRITE_METHODS
from hami_dcu.cli.localcluster.cluster import LocalCluster
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import ConflictError, Kube, KubeError

log = logging.getLogger(__name__)
JSON = dict[str, Any]


@dataclass(frozen=True)
class Workload:
    nodes: int = 5
    cards_per_node: int = 4
    pods: int = 200
    seed: int = 1

    def manifests(self) -> list[JSON]:
        """One DCU container each; slots (4 per card) run out before memory or cores do."""
        draw = random.Random(self.seed)
        return [pod_manifest(f"w{i:03d}", [Ctr("c", 1, draw.randrange(2000, 12001, 500), draw.randint(5, 24))])
                for i in range(self.pods)]


@dataclass(frozen=True)
class FaultPlan:
    error_rate: float = 0.0  # 500 before the write is applied
    conflict_rate: float = 0.0  # 409 before the write is applied
    delay_rate: float = 0.0
    delay_seconds: float = 0.0
    post_commit_rate: float = 0.0  # applied, then 500 or the answer lost
    seed: int = 7

    @property
    def active(self) -> bool:
        return bool(self.error_rate or self.conflict_rate or self.delay_rate or self.post_commit_rate)


def faulted(method: str, path: str) -> bool:
    return method in WRITE_METHODS and not (method == "PATCH" and path.endswith("/status"))


@dataclass
class RunResult:
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (seconds, pods Running)
    settled_at: float | None = None  # no Pending pod fits any card, none allocating
    quiet_at: float | None = None  # after that, no node locked any more
    running: int = 0
    pending: int = 0
    failed: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)

    def running_at(self, seconds: float) -> int:
        return max((count for at, count in self.timeline if at <= seconds), default=0)


def create_all(kube: Kube, namespace: str, manifests: list[JSON], parallel: int = 8) -> None:
    """Create the pods as a controller would: several at a time, each retried until it exists."""
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="create") as pool:
        for future in [pool.submit(_create, kube, namespace, m) for m in manifests]:
            future.result()


def _create(kube: Kube, namespace: str, manifest: JSON, attempts: int = 20) -> None:
    for attempt in range(attempts):
        try:
            kube.create_pod(namespace, manifest)
            return
        except KubeError as exc:
            if isinstance(exc, ConflictError) and exc.reason == "AlreadyExists":
                return  # created by an attempt whose answer was lost
            if attempt + 1 == attempts:
                raise
            log.debug("creating pod %s: %s, retrying", manifest["metadata"]["name"], exc)
            time.sleep(0.05)


def run(workload: Workload, plan: FaultPlan, timeout: float = 120.0, quiet_wait: float = 30.0,
        report: Callable[[float, int], None] | None = None, sample: float = 0.25) -> RunResult:
    """Run the workload to the settled point (or `timeout`), wait up to `quiet_wait` for the
    last node lock to go, then check every invariant."""
    specs = {f"node{i}": default_cards(f"node{i}", workload.cards_per_node) for i in range(workload.nodes)}
    result = RunResult()
    with LocalCluster(specs, namespace="faults", naming=invariants.DCU) as cluster:
        assert cluster.api is not None
        faults = cluster.api.faults
        if plan.active:
            faults.configure(seed=plan.seed, error_rate=plan.error_rate, conflict_rate=plan.conflict_rate,
                             delay_rate=plan.delay_rate, delay_seconds=plan.delay_seconds,
                             post_commit_rate=plan.post_commit_rate, match=faulted)
        started = time.monotonic()
        # Submitted as a burst while the clock runs (a Job's controller at work): the
        # scheduler starts on the first pods while the last are still being created.
        creating = ThreadPoolExecutor(max_workers=1, thread_name_prefix="burst")
        created = creating.submit(create_all, cluster.kube, cluster.namespace, workload.manifests())
        creating.shutdown(wait=False)
        while (now := time.monotonic() - started) < timeout:
            pods = cluster.kube.list_pods(namespace=cluster.namespace).items
            nodes = cluster.kube.list_nodes().items
            running = sum(1 for p in pods if p["status"].get("phase") == "Running")
            result.timeline.append((now, running))
            if report is not None:
                report(now, running)
            if created.done() and _settled(nodes, pods):
                result.settled_at = now
                break
            time.sleep(sample)
        created.result()  # a creation that failed for good is the harness's error, not a result
        if result.settled_at is not None:
            deadline = time.monotonic() + quiet_wait
            while time.monotonic() < deadline:
                if not invariants.locks_left(cluster.kube.list_nodes().items):
                    result.quiet_at = time.monotonic() - started
                    break
                time.sleep(sample)
        result.faults = Counter(faults.injected)
        faults.clear()
        result.violations = _violations(cluster)
        pods = cluster.kube.list_pods(namespace=cluster.namespace).items
        phases = Counter(p["status"].get("phase") for p in pods)
        result.running, result.pending, result.failed = phases["Running"], phases["Pending"], phases["Failed"]
    return result


def _settled(nodes: list[JSON], pods: list[JSON]) -> bool:
    """Nothing left to do: no pod bound and not yet admitted, no Pending pod that would fit."""
    admitting = any(p["spec"].get("nodeName") and p["status"].get("phase") == "Pending" for p in pods)
    return not admitting and not invariants.pending_that_fit(nodes, pods)


def _violations(cluster: LocalCluster) -> list[str]:
    kube = cluster.kube
    pods = kube.list_pods(namespace=cluster.namespace).items
    nodes = kube.list_nodes().items
    events = kube.request("GET", f"/api/v1/namespaces/{cluster.namespace}/events")["items"]
    return (invariants.over_capacity(nodes, pods)
            + invariants.overlapping_masks({name: cluster.vdev_files(name) for name in cluster.nodes})
            + invariants.locks_left(nodes)
            + invariants.pending_that_fit(nodes, pods)
            + invariants.failed_without_event(pods, events))
