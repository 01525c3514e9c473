"""A wake-up for code that waits on the cache (a bind waiting for a node's lock to go, or
for the watch to show its own lock): the informer notifies after every event it applies,
so a waiter reacts within the event's own loop turn instead of a polling interval later.

Keyed by node: a bind waits for its own node's events (the node object, pods bound to it) and
for relists; an event of another node, or of a pod bound nowhere yet, does not wake it. In a
burst hundreds of such events come each second, and each woke every waiting bind to re-judge
its lock for nothing. A waiter that needs something no keyed event brings (a deadline, a newer
/filter's choice, a lock holder deleted before it was bound) still wakes at its timeout.
"""

from __future__ import annotations

import asyncio


class CacheSignal:
    def __init__(self) -> None:
        self._any = asyncio.Event()  # waiters without a key: every change wakes them
        self._keyed: dict[str, asyncio.Event] = {}  # only keys someone waits for

    def notify(self, key: str | None = None) -> None:
        """The cache changed, about node `key` (None: about no node in particular): wake the
        waiters without a key and those waiting for `key`."""
        self._any.set()
        self._any = asyncio.Event()
        if key is not None:
            event = self._keyed.pop(key, None)
            if event is not None:
                event.set()

    def notify_all(self) -> None:
        """The cache was refilled (a list): wake every waiter."""
        self.notify()
        keyed, self._keyed = self._keyed, {}
        for event in keyed.values():
            event.set()

    async def wait(self, timeout: float, key: str | None = None) -> None:
        """Until the next change (about `key`, when given), or `timeout` seconds (what a
        waiter re-checks on its own, such as deadlines and assumption expiry, does not come
        as an event)."""
        if key is None:
            event = self._any
        elif key in self._keyed:
            event = self._keyed[key]
        else:
            event = self._keyed[key] = asyncio.Event()
        try:
            await asyncio.wait_for(event.wait(), max(0.0, timeout))
        except TimeoutError:
            pass
