"""The local API server's watches: a subscription to the store, the events since a resource
version or the current objects first, then every change as this watcher's selectors see it, in
batches, with BOOKMARKs where the client allows them; each ends at its timeout, when the client
goes away, or at shutdown (`end_all`).
"""

from __future__ import annotations

import asyncio
import functools
import json
from typing import TYPE_CHECKING

from aiohttp import web

from hami_dcu.cli.localcluster.apiserver.resources import JSON, KINDS, status_body, with_kind
from hami_dcu.cli.localcluster.apiserver.selectors import Predicate
from hami_dcu.cli.localcluster.apiserver.store import Change, Store, StoreError

if TYPE_CHECKING:
    from hami_dcu.cli.localcluster.apiserver.app import Target

_dumps = functools.partial(json.dumps, separators=(",", ":"))
DISCONNECT_POLL_SECONDS = 2.0  # how often an idle watch checks that its client is still there
# What a watch's queue carries: a Change to consider; an int, the rv for a BOOKMARK (queued
# in order with the changes, so it never promises an rv whose events are still in flight);
# None when the server stops.
WatchItem = Change | int | None


class Watches:
    def __init__(self, store: Store) -> None:
        self.store = store
        # Open watches' queues: on shutdown each gets None and ends its stream cleanly
        # (a terminated chunked body), as kube-apiserver does when it stops.
        self._queues: set[asyncio.Queue[WatchItem]] = set()

    def end_all(self) -> None:
        for queue in list(self._queues):
            queue.put_nowait(None)

    async def serve(self, request: web.Request, t: Target, predicate: Predicate | None, timeout: float,
                    interval: float | None) -> web.StreamResponse:
        """One watch. The caller checked what can fail with a 4xx before the 200 (the selectors
        into `predicate`, the timeout); `interval`: seconds between BOOKMARKs, or None."""
        rv_text = request.query.get("resourceVersion", "")
        start_rv: int | None = None
        if rv_text not in ("", "0"):
            try:
                start_rv = int(rv_text)
            except ValueError:
                raise StoreError(400, "BadRequest", f"invalid resource version: {rv_text!r}") from None

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[WatchItem] = asyncio.Queue()

        def on_change(change: Change) -> None:  # under the store lock, on any thread
            if change.resource == t.resource:
                loop.call_soon_threadsafe(queue.put_nowait, change)

        expired: StoreError | None = None
        initial: list[JSON] = []
        with self.store.lock:  # subscribe and read the starting point atomically: no gap, no repeat
            unsubscribe = self.store.subscribe(on_change)
            if start_rv is None:
                items, _ = self.store.list(t.resource, t.namespace, predicate, copy=False)
                initial = [{"type": "ADDED", "object": with_kind(t.resource, o)} for o in items]
            else:
                try:
                    initial = [e for c in self.store.changes_since(start_rv)
                               if (e := _event_for(c, t, predicate)) is not None]
                except StoreError as exc:
                    expired = exc
        self._queues.add(queue)
        try:
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            if expired is not None:
                unsubscribe()
                # In-stream ERROR with a Status, as kube does for a compacted rv.
                await response.write(_line({"type": "ERROR", "object": status_body(
                    expired.code, expired.reason, expired.message)}))
                return response
            if initial:
                await response.write(b"".join(_line(e) for e in initial))
            await self._stream(request, response, t, predicate, queue, loop.time() + timeout, interval)
        except ConnectionError:
            pass  # the client went away
        finally:
            unsubscribe()
            self._queues.discard(queue)
        return response

    async def _stream(self, request: web.Request, response: web.StreamResponse, t: Target,
                      predicate: Predicate | None, queue: asyncio.Queue[WatchItem], deadline: float,
                      bookmark_interval: float | None) -> None:
        loop = asyncio.get_running_loop()
        next_bookmark = loop.time() + bookmark_interval if bookmark_interval else None
        last_rv = ""  # of the last line sent: a bookmark that would repeat it is skipped
        while True:
            now = loop.time()
            if now >= deadline:
                return
            if next_bookmark is not None and now >= next_bookmark:
                next_bookmark = now + (bookmark_interval or 0)
                with self.store.lock:
                    rv = int(self.store.resource_version)
                    loop.call_soon(queue.put_nowait, rv)
            wait = min(deadline - now, DISCONNECT_POLL_SECONDS)
            if next_bookmark is not None:
                wait = max(0.0, min(wait, next_bookmark - now))
            try:
                first = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                if request.transport is None or request.transport.is_closing():
                    return  # disconnected while idle: stop holding a subscription
                continue
            # Drain what is already queued into one write: bursts of writes (hundreds of
            # pods created) cost one chunk per wakeup, not one per event.
            batch = [first]
            while not queue.empty():
                batch.append(queue.get_nowait())
            lines = []
            stop = False
            for item in batch:
                if item is None:
                    stop = True
                    break
                if isinstance(item, int):
                    if str(item) != last_rv:
                        last_rv = str(item)
                        kind, api_version = KINDS[t.resource]
                        lines.append(_line({"type": "BOOKMARK", "object": {
                            "kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last_rv}}}))
                elif (event := _event_for(item, t, predicate)) is not None:
                    last_rv = event["object"]["metadata"]["resourceVersion"]
                    lines.append(_line(event))
            if lines:
                await response.write(b"".join(lines))
            if stop:
                return


def _event_for(change: Change, t: Target, predicate: Predicate | None) -> JSON | None:
    """A change as this watcher sees it: objects leaving its selector are DELETED for it,
    objects entering it are ADDED, as kube-apiserver's filtered watches do."""
    if change.resource != t.resource:
        return None
    obj = change.object
    if t.namespace is not None and obj["metadata"].get("namespace") != t.namespace:
        return None
    if predicate is None:
        kind: str | None = change.type
    else:
        old_match = change.old is not None and predicate(change.old)
        new_match = change.new is not None and predicate(change.new)
        if change.type == "DELETED":
            kind = "DELETED" if old_match else None
        elif old_match and new_match:
            kind = "MODIFIED"
        elif new_match:
            kind = "ADDED"
        elif old_match:
            kind = "DELETED"
        else:
            kind = None
    if kind is None:
        return None
    return {"type": kind, "object": with_kind(t.resource, obj)}


def _line(event: JSON) -> bytes:
    return (_dumps(event) + "\n").encode()
