"""The local cluster's stand-in for kube-scheduler with the hami-scheduler profile.

It does what kube-scheduler does for pods whose `spec.schedulerName` is ours and that have
no node: call the extender's `/filter` over HTTP with nodeCacheCapable arguments (pod +
node names), then `/bind` with the node it returned. Failures back the pod off (1 s
doubling to 10 s by default, like kube-scheduler's pod backoff) and leave a
`FailedScheduling` event on the pod (at most one per pod and message a minute, as
kube-scheduler's event correlator does, so a pod that keeps not fitting does not flood the
API server). Filters run one at a time (kube-scheduler's scheduling cycle), binds run
concurrently (its binding cycle). A bind that outlives `http_timeout` is abandoned, not
cancelled on the extender's side: the pod goes back to the queue and is filtered and bound
again while the first call may still be running, as with kube-scheduler.

Use it from asyncio (`await loop.run()`) or from plain code (`start()` / `stop()` run it
on a background thread).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from hami_dcu.common.io.kube import AsyncKube, Kube, KubeError
from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.events import EventLimiter

log = logging.getLogger(__name__)
JSON = dict[str, Any]


@dataclass
class _Backoff:
    delay: float
    until: float


@dataclass
class LoopStats:
    bound: dict[str, str] = field(default_factory=dict)  # "ns/name" -> node
    filter_failures: Counter[str] = field(default_factory=Counter)
    bind_failures: Counter[str] = field(default_factory=Counter)


class SchedulerLoop:
    def __init__(
        self,
        kube: Kube,
        extender_url: str,
        scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME,
        interval: float = 0.05,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        http_timeout: float = 30.0,
    ) -> None:
        self.kube = AsyncKube(kube)
        self.extender_url = extender_url.rstrip("/")
        self.scheduler_name = scheduler_name
        self.interval = interval
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.http_timeout = http_timeout
        self.stats = LoopStats()
        self._events = EventLimiter(interval=60.0, min_interval=10.0)
        self._backoff: dict[str, _Backoff] = {}
        self._binding: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    # --- asyncio API -------------------------------------------------------------------

    async def run(self) -> None:
        self._stop = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=self.http_timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                while not self._stop.is_set():
                    try:
                        await self.cycle(session)
                    except (KubeError, aiohttp.ClientError, TimeoutError) as exc:
                        log.warning("scheduling cycle failed: %s", exc)
                    try:
                        await asyncio.wait_for(self._stop.wait(), self.interval)
                    except TimeoutError:
                        pass
            finally:
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def cycle(self, session: aiohttp.ClientSession) -> int:
        """One pass over the pending pods; returns how many were sent to /bind."""
        pending = await self.kube.list_pods(field_selector=f"spec.nodeName=,spec.schedulerName={self.scheduler_name}")
        if not pending.items:
            return 0
        nodes = await self.kube.list_nodes()
        names = [n["metadata"]["name"] for n in nodes.items if not (n.get("spec") or {}).get("unschedulable")]
        now = asyncio.get_running_loop().time()
        sent = 0
        for pod in pending.items:
            meta = pod["metadata"]
            key = f"{meta.get('namespace', 'default')}/{meta['name']}"
            # kube-scheduler's assumed-pod cache: a pod it just bound may still be listed as
            # pending for a moment; it is never scheduled twice.
            if meta.get("deletionTimestamp") or key in self._binding or key in self.stats.bound:
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            backoff = self._backoff.get(key)
            if backoff is not None and backoff.until > now:
                continue
            node = await self._filter(session, pod, key, names)
            if node is None:
                continue
            self._binding.add(key)
            task = asyncio.ensure_future(self._bind(session, pod, key, node))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            sent += 1
        return sent

    # --- verbs -------------------------------------------------------------------------

    async def _filter(self, session: aiohttp.ClientSession, pod: JSON, key: str, names: list[str]) -> str | None:
        body = {"Pod": pod, "Nodes": None, "NodeNames": names}
        try:
            async with session.post(f"{self.extender_url}/filter", json=body) as response:
                if response.status != 200:
                    raise RuntimeError(f"filter answered HTTP {response.status}")
                result = await response.json()
        except (aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
            await self._failed(pod, key, f"extender /filter failed: {exc}", self.stats.filter_failures)
            return None
        error = _field(result, "Error")
        chosen = _field(result, "NodeNames") or []
        if error:
            await self._failed(pod, key, f"extender /filter error: {error}", self.stats.filter_failures)
            return None
        if not chosen:
            failed = _field(result, "FailedNodes") or {}
            failed.update(_field(result, "FailedAndUnresolvableNodes") or {})
            await self._failed(pod, key, no_node_available(len(names), failed.values()), self.stats.filter_failures)
            return None
        if chosen[0] not in names:
            await self._failed(pod, key, f"extender returned unknown node {chosen[0]}", self.stats.filter_failures)
            return None
        return str(chosen[0])

    async def _bind(self, session: aiohttp.ClientSession, pod: JSON, key: str, node: str) -> None:
        meta = pod["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": meta.get("namespace", "default"),
                "PodUID": meta.get("uid", ""), "Node": node}
        try:
            async with session.post(f"{self.extender_url}/bind", json=body) as response:
                result = await response.json() if response.status == 200 else {"Error": f"HTTP {response.status}"}
            error = _field(result, "Error")
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = f"extender /bind failed: {exc}"
        finally:
            self._binding.discard(key)
        if error:
            await self._failed(pod, key, f"binding to {node} failed: {error}", self.stats.bind_failures)
            return
        self._backoff.pop(key, None)
        self.stats.bound[key] = node
        log.info("scheduled %s on %s", key, node)

    async def _failed(self, pod: JSON, key: str, message: str, counter: Counter[str]) -> None:
        counter[key] += 1
        now = asyncio.get_running_loop().time()
        previous = self._backoff.get(key)
        delay = min(previous.delay * 2, self.max_backoff) if previous else self.initial_backoff
        self._backoff[key] = _Backoff(delay, now + delay)
        log.info("pod %s not scheduled (retry in %.1fs): %s", key, delay, message)
        if not self._events.allow(key, "FailedScheduling", message):
            return
        try:
            await self.kube.create_event(pod, "FailedScheduling", message, "Warning", component=self.scheduler_name)
        except KubeError as exc:
            log.warning("pod %s: FailedScheduling event not recorded: %s", key, exc)

    # --- thread API --------------------------------------------------------------------

    def start(self) -> SchedulerLoop:
        ready = threading.Event()

        def main() -> None:
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            task = self._loop.create_task(self.run())
            self._loop.call_soon(ready.set)
            self._loop.run_until_complete(task)
            self._loop.close()

        self._thread = threading.Thread(target=main, name="scheduler-loop", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)
        self.kube.close()


def _field(obj: JSON, name: str) -> Any:
    if name in obj:
        return obj[name]
    folded = name.casefold()
    return next((v for k, v in obj.items() if k.casefold() == folded), None)


def no_node_available(nodes: int, reasons: Iterable[str]) -> str:
    """kube-scheduler's FitError text: nodes counted per distinct reason, "<count> <reason>"
    entries sorted as strings, joined by ", " (schedule_one.go). Reasons are not attributed to
    nodes, so a reason that differs per node is listed once per node."""
    counts = Counter(reasons)
    entries = sorted(f"{count} {reason}" for reason, count in counts.items())
    return f"0/{nodes} nodes are available: {', '.join(entries)}."
