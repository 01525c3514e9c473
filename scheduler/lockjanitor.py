"""Frees node locks that outlived their purpose, so no node waits for the 5-minute expiry.

Two ways in:
* the watch: the cache queues a lock as soon as a pod event shows its holder done with it
  (finished, running, bind-phase success/failed, bound elsewhere, deleted);
  `release(NeedlessLock)` removes it by its exact value. A lock the holder's device plugin
  releases itself (beside the pod's outcome: lockpurpose.PLUGIN_RELEASES) is left to it for
  `plugin_grace` seconds, and released here only if the watch still shows it then: racing the
  plugin cost a node read per pod, and a write and a conflict whenever we won;
* a sweep every few seconds over the locks older than the bind window, for what a watch
  event cannot show: a holder that never got bound (its bind died with a restarted
  scheduler or a lost answer), an expired or malformed lock, an event missed. Each such
  lock costs one GET of its holder per sweep; fresh locks cost nothing.
The decision is lockpurpose.release_reason; every removal is counted by reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from hami_dcu.common.io.kube import AsyncKube, KubeError, NotFoundError
from hami_dcu.common.io.nodelock import LockError, NodeLock
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.codec import CodecError, LockValue, decode_lock
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import NeedlessLock
from hami_dcu.scheduler.metrics import SchedulerMetrics

log = logging.getLogger(__name__)
_RELEASE_ATTEMPTS = 3


class LockJanitor:
    def __init__(
        self,
        kube: AsyncKube,
        cache: ClusterCache,
        lock: NodeLock,
        metrics: SchedulerMetrics,
        wall_clock: Callable[[], datetime],
        plugin_grace: float = 0.0,
    ) -> None:
        self.kube = kube
        self.plugin_grace = plugin_grace
        self.cache = cache
        self.lock = lock
        self.metrics = metrics
        self.wall_clock = wall_clock
        self._releasing: set[tuple[str, str]] = set()  # (node, value) being released now

    async def release_value(self, node: str, value: str) -> bool:
        """Remove exactly this lock value, retrying API errors a little. False when it was
        not there (any more) or could not be removed: the sweep tries again later."""
        for attempt in range(_RELEASE_ATTEMPTS):
            try:
                return await self.kube.call(self.lock.release_value, node, value)
            except (LockError, KubeError) as exc:
                log.warning("node %s: releasing lock %r failed (attempt %d): %s", node, value, attempt + 1, exc)
                await asyncio.sleep(0.1 * (attempt + 1))
        return False

    async def release(self, needless: NeedlessLock) -> bool:
        key = (needless.node, needless.value)
        if key in self._releasing:
            return False  # another event already asked for it
        self._releasing.add(key)
        try:
            if needless.reason in purpose.PLUGIN_RELEASES and self.plugin_grace > 0:
                await asyncio.sleep(self.plugin_grace)
                entry = self.cache.node(needless.node)
                if entry is None or entry.lock_value != needless.value:
                    return False  # released by the plugin (or replaced): nothing left to do
            removed = await self.release_value(needless.node, needless.value)
        finally:
            self._releasing.discard(key)
        if removed:
            self.metrics.lock_releases.labels(needless.reason).inc()
            log.info("node %s: released the lock of %s (%s)", needless.node, needless.holder, needless.reason)
        return removed

    async def sweep(self) -> int:
        """Judge every lock older than the bind window through the API; returns how many
        were released."""
        now = self.wall_clock()
        released = 0
        for entry in self.cache.nodes():
            name, value = entry.name, entry.lock_value
            if not value:
                continue
            try:
                lock: LockValue | None = decode_lock(value)
            except CodecError:
                lock = None
            if lock is not None and now - lock.since <= self.lock.bind_window:
                continue  # young: a bind or an Allocate is most likely still using it
            reason = await self._judge(name, lock, now)
            if reason is not None:
                holder = lock.holder if lock is not None else "nobody (unreadable)"
                released += await self.release(NeedlessLock(name, value, holder, reason))
        return released

    async def _judge(self, node: str, lock: LockValue | None, now: datetime) -> str | None:
        holder = None
        if lock is not None and lock.name is not None:
            try:
                holder = await self.kube.get_pod(lock.namespace or "", lock.name)
            except NotFoundError:
                holder = None
            except KubeError as exc:
                log.info("node %s: cannot read lock holder %s: %s", node, lock.holder, exc)
                return None
        return purpose.release_reason(lock, holder, node, now, self.lock.timeout, self.lock.bind_window)

    async def run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not end the sweeping for good
                log.exception("node lock sweep failed")
