"""Kubernetes Events about pods, rate-limited so a pod retried every second does not flood
the API server: one event per pod and reason per `interval`, unless the message changed
and `min_interval` has passed."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)
JSON = dict[str, Any]
Post = Callable[[JSON, str, str, str], Awaitable[object]]


class EventLimiter:
    def __init__(self, interval: float = 60.0, min_interval: float = 10.0, max_entries: int = 50_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.min_interval = min_interval
        self.max_entries = max_entries
        self.clock = clock
        self._last: dict[tuple[str, str], tuple[float, str]] = {}

    def allow(self, pod_key: str, reason: str, message: str) -> bool:
        now = self.clock()
        key = (pod_key, reason)
        last = self._last.get(key)
        if last is not None:
            elapsed, previous = now - last[0], last[1]
            if elapsed < self.min_interval or (elapsed < self.interval and previous == message):
                return False
        if len(self._last) >= self.max_entries:
            self._last.clear()  # a crude bound; losing history only allows one extra event
        self._last[key] = (now, message)
        return True


class EventSink:
    """Posts events through `post(regarding, reason, message, type)`; failures are logged,
    never raised: an event is a courtesy, not part of the decision."""

    def __init__(self, post: Post, limiter: EventLimiter | None = None) -> None:
        self.post = post
        self.limiter = limiter or EventLimiter()

    async def emit(self, pod: JSON, reason: str, message: str, event_type: str = "Normal",
                   limited: bool = True) -> bool:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}#{meta.get('uid')}"
        if limited and not self.limiter.allow(key, reason, message):
            return False
        try:
            await self.post(pod, reason, message, event_type)
        except Exception as exc:  # the API being down must not fail scheduling
            log.warning("pod %s/%s: event %s not recorded: %s", meta.get("namespace"), meta.get("name"), reason, exc)
            return False
        return True
