"""A wake-up for code that waits on the cache (a bind waiting for a node's lock to go, or
for the watch to show its own lock): the informer notifies after every event it applies,
so a waiter reacts within the event's own loop turn instead of a polling interval later.
"""

from __future__ import annotations

import asyncio


class CacheSignal:
    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        """The cache changed: wake every current waiter."""
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        """Until the next change, or `timeout` seconds (what a waiter re-checks on its own,
        such as deadlines and assumption expiry, does not come as an event)."""
        event = self._event
        try:
            await asyncio.wait_for(event.wait(), max(0.0, timeout))
        except TimeoutError:
            pass
