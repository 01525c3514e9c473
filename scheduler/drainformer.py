"""DRA mode: list + watch of ResourceSlices and ResourceClaims into `DraUsage` (drausage.py),
which /prioritize reads to pack pods onto the fullest nodes that fit.

The same discipline as the pod and node informer (informer.py): list, watch from the list's
resourceVersion, watch again from the last version seen when a stream ends, list again on
410 Gone and every `resync` seconds, back off on errors up to 30 s. Each object is trimmed to
the fields the usage reads as it arrives, so a cluster's claims never sit whole in memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from hami_dcu.common.kube import AsyncKube, GoneError
from hami_dcu.dra import names
from hami_dcu.scheduler.drausage import DraUsage

log = logging.getLogger(__name__)
JSON = dict[str, Any]
SLICES, CLAIMS = "resourceslices", "resourceclaims"


def slim_slice(obj: JSON) -> JSON:
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
            "spec": obj.get("spec") or {}}


def slim_claim(obj: JSON) -> JSON:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, dict) else None
    devices = allocation.get("devices") if isinstance(allocation, dict) else None
    results = devices.get("results") if isinstance(devices, dict) else None
    return {"metadata": {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
            "status": {"allocation": {"devices": {"results": results}}} if results else {}}


class DraInformer:
    def __init__(self, kube: AsyncKube, usage: DraUsage, resync: float = 300.0, watch_timeout: int = 240,
                 page_size: int = 500) -> None:
        self.kube = kube
        self.usage = usage
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.synced = asyncio.Event()
        self._listed: set[str] = set()

    async def run(self) -> None:
        await asyncio.gather(self._loop(SLICES), self._loop(CLAIMS))

    async def _loop(self, resource: str) -> None:
        path = f"{names.RESOURCE_API}/{resource}"
        backoff = 1.0
        while True:
            try:
                rv = await self._list(resource, path)
                backoff = 1.0
                resync_at = time.monotonic() + self.resync
                while (remaining := resync_at - time.monotonic()) > 0:
                    timeout = max(1, min(self.watch_timeout, int(remaining)))
                    async for event in self.kube.watch(path, rv, timeout_seconds=timeout):
                        rv = self._apply(resource, event) or rv
            except GoneError:
                log.info("%s watch expired (410): listing again", resource)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API server is down, or has no DRA: retry
                log.warning("%s list/watch failed: %s; retrying in %.0fs", resource, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _list(self, resource: str, path: str) -> str:
        keep: Callable[[JSON], JSON] = slim_slice if resource == SLICES else slim_claim
        items: list[JSON] = []
        token = ""
        while True:
            page = await self.kube.list_page(path, self.page_size, token, keep)
            items.extend(page.items)
            token = page.continue_token
            if not token:
                break
        if resource == SLICES:
            self.usage.replace_slices(items)
        else:
            self.usage.replace_claims(items)
        log.info("listed %d %s at resourceVersion %s", len(items), resource, page.resource_version)
        self._listed.add(resource)
        if self._listed == {SLICES, CLAIMS}:
            self.synced.set()
        return page.resource_version

    def _apply(self, resource: str, event: JSON) -> str | None:
        kind = event.get("type")
        raw = event.get("object")
        obj = raw if isinstance(raw, dict) else {}
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            return rv
        if resource == SLICES:
            if kind == "DELETED":
                self.usage.delete_slice(obj)
            else:
                self.usage.apply_slice(slim_slice(obj))
        elif kind == "DELETED":
            self.usage.delete_claim(obj)
        else:
            self.usage.apply_claim(slim_claim(obj))
        return rv
