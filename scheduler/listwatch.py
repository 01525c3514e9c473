"""The list-then-watch discipline both informers follow (informer.py for nodes, pods and
quotas; drainformer.py for ResourceSlices and ResourceClaims), written once. What an informer
does with a list or an event is its own; when to list, where to watch from and how to wait
after a failure is this module's.

Per resource: list (the informer fills its state and names the list's resourceVersion), watch
from that version, watch again from the last version an event carried when a stream ends,
list again on 410 Gone, and list again every `resync` seconds anyway so a missed event cannot
leave stale state behind for long. Other errors back off 1 s doubling to 30 s, and a list that
succeeds starts the backoff over. Cancelling the task stops it at once, whatever it awaits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hami_dcu.common.io.kube import AsyncKube, GoneError, ObjectList

log = logging.getLogger(__name__)
JSON = dict[str, Any]

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 30.0

Relist = Callable[[], Awaitable[str]]  # fill from a fresh list; return the list's resourceVersion
TakeEvent = Callable[[JSON], str | None]  # take one watch event; return its resourceVersion if it has one


async def list_and_watch(kube: AsyncKube, resource: str, path: str, relist: Relist, take: TakeEvent, *,
                         resync: float, watch_timeout: int,
                         sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Run until cancelled: `relist`, then hand every event watched at `path` to `take`.
    `resource` names the resource in the log; `sleep` waits out a backoff."""
    backoff = FIRST_BACKOFF
    while True:
        try:
            rv = await relist()
            backoff = FIRST_BACKOFF
            resync_at = time.monotonic() + resync
            while (remaining := resync_at - time.monotonic()) > 0:
                timeout = max(1, min(watch_timeout, int(remaining)))
                async for event in kube.watch(path, rv, timeout_seconds=timeout):
                    rv = take(event) or rv
        except GoneError:
            log.info("%s watch expired (410): listing again", resource)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the API server is down, answered nonsense, or serves no such resource: retry
            log.warning("%s list/watch failed: %s; retrying in %.0fs", resource, exc, backoff)
            await sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)


async def list_pages(kube: AsyncKube, path: str, page_size: int, keep: Callable[[JSON], JSON]) -> ObjectList:
    """The whole list, `page_size` objects per request, each kept only in the fields `keep`
    returns: one page of whole objects in memory at a time, never the whole list."""
    items: list[JSON] = []
    token = ""
    while True:
        page = await kube.list_page(path, page_size, token, keep)
        items.extend(page.items)
        token = page.continue_token
        if not token:
            return ObjectList(items, page.resource_version)
