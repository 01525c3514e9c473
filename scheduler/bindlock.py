"""The node-lock half of a `/bind` (bind.py says what the whole bind does): take the node's
lock for the attempt, then wait until the cache holds every earlier holder's allocation.

The wait is on the cache, not the API: a lock the cache shows held by a live bind is waited
out there (the informer wakes the attempt after every event about the node, signal.py),
asking the API about it once a second, or soon when the watch shows its holder done with it;
anything else is asked at once, by a compare-and-swap on the node version the cache holds.
A write that finds the node changed waits for the watch to bring the newer version, and
reads the node only if the watch shows nothing new. One deadline (the attempt's) covers the
whole wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from hami_dcu.common.io.kube import AsyncKube, KubeError
from hami_dcu.common.io.nodelock import Held, LockContention, LockError, LockStale, LockUncertain, NodeLock
from hami_dcu.scheduler.bindattempt import AlreadyBound, Attempt, BindError, BindSettings, check_current, read_pod
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import NodeView
from hami_dcu.scheduler.metrics import SchedulerMetrics
from hami_dcu.scheduler.signal import CacheSignal

# Part of the bind: its lines keep the bind's logger name (log filters and the tests use it).
log = logging.getLogger("hami_dcu.scheduler.bind")
# How soon a waiting bind asks the API about a lock whose holder the watch shows done with it
# (its own release and the janitor's are normally faster; this covers both being slow).
_NEEDLESS_RECHECK = 0.2
# How often a bind waiting on a live lock asks the API whether its holder still needs it
# (the watch normally shows the release first).
_LOCKED_RECHECK = 1.0
# How long a bind whose lock write found the node changed waits for the watch to show the
# newer version before it reads the node instead.
_STALE_WAIT = 0.5
# Longest wait between two looks at the cache without an event.
_WAKE_AT_LEAST = 0.1


@dataclass
class _LockWait:
    """Where one attempt's wait for the node lock stands."""

    next_api_check: float  # monotonic: from then on, a lock the cache shows held is asked about
    stale_version: str | None = None  # a node version our lock write found stale


class NodeLocking:
    def __init__(
        self,
        kube: AsyncKube,
        cache: ClusterCache,
        lock: NodeLock,
        settings: BindSettings,
        metrics: SchedulerMetrics,
        wall_clock: Callable[[], datetime],
        monotonic: Callable[[], float],
        changed: CacheSignal | None,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.lock = lock
        self.settings = settings
        self.metrics = metrics
        self.wall_clock = wall_clock
        self.monotonic = monotonic
        self.changed = changed  # the informer's wake-up after each event (polling without it)

    async def acquire(self, attempt: Attempt) -> None:
        """Take the node's lock for the attempt (its value lands in `attempt.lock_value`)."""
        started = self.monotonic()
        # A lock the cache shows with a live holder (a bind just before ours, its Allocate
        # under way) is waited out on the cache: asking the API now would cost two round
        # trips to learn what the watch already says. Anything else is asked at once.
        wait = _LockWait(started + _LOCKED_RECHECK if self._looks_live(attempt.args.node) else started)
        try:
            while not await self._turn(attempt, wait):
                pass
        finally:
            self.metrics.lock_wait_seconds.observe(self.monotonic() - started)
            if attempt.contended:
                self.metrics.lock_contention.inc()

    async def _turn(self, attempt: Attempt, wait: _LockWait) -> bool:
        """One look at the node: True once the attempt holds its lock, False to look again."""
        args = attempt.args
        if self.cache.bound_node(args.uid, args.namespace, args.pod_name) is not None:
            raise AlreadyBound(await read_pod(self.kube, attempt))  # another attempt finished first
        check_current(self.cache, attempt)
        entry = self.cache.node(args.node)
        if entry is not None and entry.lock_value and await self._waited_on_cache(attempt, entry, wait):
            return False
        version = _unlocked_version(entry, wait)
        try:
            held = await self.kube.call(self.lock.take, args.node, args.namespace, args.pod_name, version,
                                        version is None)
        except LockStale as exc:
            # The node changed after the version the cache showed unlocked: the watch
            # brings the newer one in a moment (locked by someone else, or not).
            attempt.api_calls += exc.calls
            wait.stale_version = version
            self._check_deadline(attempt, "a newer version of the node")
            await self.wait_for_cache(args.node, _STALE_WAIT)
            return False
        except LockContention as exc:
            await self._contended(attempt, exc, wait)
            return False
        except LockUncertain as exc:
            attempt.lock_value = exc.value  # maybe in place: the undo removes it if so
            raise BindError(f"cannot lock node {args.node}: {exc}") from exc
        except (LockError, KubeError) as exc:
            raise BindError(f"cannot lock node {args.node}: {exc}") from exc
        self._took(attempt, held, version)
        return True

    async def _waited_on_cache(self, attempt: Attempt, entry: NodeView, wait: _LockWait) -> bool:
        """The cache shows the node locked: wait for the watch to show the release, asking the
        API once a second whether the holder still needs it (NodeLock takes it over if not).
        False when it is time to ask the API."""
        if self.cache.lock_needless(entry.name):
            # The watch shows the holder done with the lock, its release is slow (or lost):
            # ask the API soon, NodeLock takes such a lock over.
            wait.next_api_check = min(wait.next_api_check, self.monotonic() + _NEEDLESS_RECHECK)
        if self.monotonic() >= wait.next_api_check:
            return False
        lock = entry.lock()
        holder = lock.holder if lock else "an unreadable lock"
        self._check_deadline(attempt, holder)
        self._say_waiting(attempt, holder)
        await self.wait_for_cache(entry.name, min(wait.next_api_check, attempt.deadline) - self.monotonic())
        return True

    async def _contended(self, attempt: Attempt, exc: LockContention, wait: _LockWait) -> None:
        """The API shows the node locked by someone else: wait for the release."""
        attempt.api_calls += 2
        attempt.contended = True
        wait.next_api_check = self.monotonic() + _LOCKED_RECHECK
        if exc.same_pod:  # another attempt for this pod holds it: has it bound the pod?
            pod = await read_pod(self.kube, attempt)
            if (pod.get("spec") or {}).get("nodeName"):
                raise AlreadyBound(pod) from None
        holder = "another bind of this pod" if exc.same_pod else exc.lock.holder
        self._check_deadline(attempt, holder)
        self._say_waiting(attempt, holder)
        await self.wait_for_cache(attempt.args.node, min(wait.next_api_check, attempt.deadline) - self.monotonic())

    def _took(self, attempt: Attempt, held: Held, version: str | None) -> None:
        attempt.lock_value = held.value
        attempt.api_calls += held.calls
        if version is not None and held.written is not None and held.calls == 1:
            # A compare-and-swap on the version the cache holds: nothing happened to the
            # node in between, so what the write returned is the cache's next state and
            # every earlier lock is known. No need to wait for the watch to echo it.
            self.cache.apply_node(held.written, self.wall_clock())
        if held.takeover is not None:
            self.metrics.lock_takeovers.labels(held.takeover.reason).inc()

    def _looks_live(self, node: str) -> bool:
        """The cache shows `node` locked by a bind younger than the bind window whose holder
        the watch does not show done with it."""
        entry = self.cache.node(node)
        lock = entry.lock() if entry is not None and entry.lock_value else None
        if lock is None or lock.name is None or self.cache.lock_needless(node):
            return False
        return self.wall_clock() - lock.since < self.settings.bind_window

    async def settle(self, attempt: Attempt) -> None:
        """Until the cache shows our own lock and every earlier holder of the node settled
        (its allocation counted, or its bind known failed); when the watches lag past
        `settle_wait`, the node's pods are read from the API instead."""
        args = attempt.args
        deadline = self.monotonic() + self.settings.settle_wait
        while self.monotonic() < deadline:
            entry = self.cache.node(args.node)
            if entry is not None and entry.lock_value == attempt.lock_value and self.cache.settled(args.node):
                return
            await self.wait_for_cache(args.node, deadline - self.monotonic())
        # The watches lag (or a previous holder never bound): read the node's pods directly.
        log.info("bind %s: watches not settled for node %s, listing its pods", args.pod, args.node)
        attempt.api_calls += 1
        try:
            listed = await self.kube.list_pods(field_selector=f"spec.nodeName={args.node}")
        except KubeError as exc:
            raise BindError(f"cannot list pods of node {args.node}: {exc}") from exc
        self.cache.take_listed_pods(args.node, listed.items)

    async def wait_for_cache(self, node: str, timeout: float) -> None:
        """Until the informer applies the next event about `node` (or a relist), at most
        `timeout` (and never longer than _WAKE_AT_LEAST: deadlines, a newer /filter's choice
        and a lock holder gone before its bind come as no event about the node)."""
        timeout = min(max(timeout, 0.0), _WAKE_AT_LEAST)
        if self.changed is None:
            await asyncio.sleep(min(timeout, self.settings.poll))
        else:
            await self.changed.wait(timeout, node)

    def _check_deadline(self, attempt: Attempt, holder: str) -> None:
        if self.monotonic() >= attempt.deadline:
            raise BindError(f"node {attempt.args.node} stayed locked by {holder} for "
                            f"{self.settings.lock_wait:.0f}s")

    def _say_waiting(self, attempt: Attempt, holder: str) -> None:
        """Why this bind is slow, once per attempt however often it wakes."""
        attempt.waited_for_holder = True
        if not attempt.waiting_logged:
            attempt.waiting_logged = True
            log.info("bind %s to node %s: waiting for the node lock held by %s (at most %.0f s)", attempt.args.pod,
                     attempt.args.node, holder, max(0.0, attempt.deadline - self.monotonic()))


def _unlocked_version(entry: NodeView | None, wait: _LockWait) -> str | None:
    """The node version the cache shows unlocked, for a compare-and-swap; None to have
    NodeLock read the node first (no version known, or the watch has not caught up with
    the one our last write found stale)."""
    if entry is None or not entry.present or entry.lock_value or not entry.resource_version:
        return None
    return None if entry.resource_version == wait.stale_version else entry.resource_version
