"""List + watch of nodes and pods into the cache, and of ResourceQuotas into the quota book.

Per resource, in the loop both informers share (listwatch.py): list (fill the cache, diffing
out what vanished), watch from the list's resourceVersion, re-watch from the last seen version
when a stream ends, list again on 410 Gone, and list again every `resync` seconds anyway so a
missed event cannot leave a stale holding behind for long (HAMi's did: Project-HAMi/HAMi#2923).
Other errors back off 1 s doubling to 30 s. `synced` is set once every first list is in. Nodes and pods are listed in
pages (`limit`/`continue`) and kept only in the fields the cache reads (slim.py).

After every event and list, the node locks the cache found needless (their holder is
gone, finished, running, done with its allocation or bound elsewhere) are handed to
`on_needless_lock`, so a node is freed as soon as the watch shows it can be.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import NeedlessLock, PodRelist
from hami_dcu.scheduler.listwatch import list_and_watch, list_pages
from hami_dcu.scheduler.quotas import QuotaBook
from hami_dcu.scheduler.signal import CacheSignal
from hami_dcu.scheduler.slim import slim_node, slim_pod

log = logging.getLogger(__name__)
JSON = dict[str, Any]
NeedlessLockHandler = Callable[[NeedlessLock], Awaitable[object]]


class Informer:
    def __init__(
        self,
        kube: AsyncKube,
        cache: ClusterCache,
        on_needless_lock: NeedlessLockHandler | None = None,
        resync: float = 300.0,
        watch_timeout: int = 240,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        quotas: QuotaBook | None = None,
        page_size: int = 500,
        on_listed: Callable[[str], None] | None = None,
        changed: CacheSignal | None = None,
    ) -> None:
        self.kube = kube
        self.changed = changed  # notified after every event and list the cache takes in
        self.page_size = page_size
        self.on_listed = on_listed  # after each list of nodes or pods is in the cache
        # Handed every pod the list or watch shows (not deleted), whole, before it is trimmed:
        # DRA mode's webhook creates the templates a stored pod waits for (webhook/deferredtemplates.py).
        self.on_pod: Callable[[JSON], None] | None = None
        self.cache = cache
        self.quotas = quotas
        self._resources = {"nodes", "pods"} | ({"resourcequotas"} if quotas is not None else set())
        self.on_needless_lock = on_needless_lock
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.wall_clock = wall_clock
        self.synced = asyncio.Event()
        self._listed: set[str] = set()
        self._tasks: set[asyncio.Task[object]] = set()

    async def run(self) -> None:
        await asyncio.gather(*(self._loop(resource) for resource in sorted(self._resources)))

    async def _loop(self, resource: str) -> None:
        await list_and_watch(self.kube, resource, f"/api/v1/{resource}", lambda: self._list(resource),
                             lambda event: self._take(resource, event), resync=self.resync,
                             watch_timeout=self.watch_timeout)

    async def _list(self, resource: str) -> str:
        if resource == "nodes":
            listing = await list_pages(self.kube, "/api/v1/nodes", self.page_size, slim_node)
            self.cache.replace_nodes(listing.items, self.wall_clock())
            count, rv = len(listing.items), listing.resource_version
        elif resource == "resourcequotas":
            assert self.quotas is not None
            listing = await self.kube.list_resource_quotas()
            self.quotas.replace(listing.items)
            count, rv = len(listing.items), listing.resource_version
        else:
            count, rv = await self._list_pods()
        self._release_needless()
        if self.changed is not None:
            self.changed.notify_all()
        log.info("listed %d %s at resourceVersion %s", count, resource, rv)
        self._listed.add(resource)
        if self.on_listed is not None and resource in ("nodes", "pods"):
            self.on_listed(resource)
        if self._listed == self._resources:
            self.synced.set()
        return rv

    async def _list_pods(self) -> tuple[int, str]:
        """Page by page into the cache (how many, at which resourceVersion): each page's
        objects are garbage before the next arrives, so memory holds one page of pods,
        never the whole list."""
        relist = PodRelist()
        token, count = "", 0
        while True:
            page = await self.kube.list_page("/api/v1/pods", self.page_size, token, self._keep_pod)
            self.cache.relist_pods_page(relist, page.items)
            count += len(page.items)
            token = page.continue_token
            if not token:
                break
        self.cache.relist_pods_done(relist)
        self.cache.pods_listed_at(page.resource_version)
        return count, page.resource_version

    def _keep_pod(self, pod: JSON) -> JSON:
        self._hand_on(pod)
        return slim_pod(pod)

    def _hand_on(self, pod: JSON) -> None:
        if self.on_pod is None:
            return
        try:
            self.on_pod(pod)
        except Exception:  # a bug there must not stop the cache from following the pods
            log.exception("the pod hook failed on %s/%s", (pod.get("metadata") or {}).get("namespace"),
                          (pod.get("metadata") or {}).get("name"))

    def _take(self, resource: str, event: JSON) -> str | None:
        rv = self._apply(resource, event)
        self._release_needless()
        self._notify(resource, event)
        return rv

    def _apply(self, resource: str, event: JSON) -> str | None:
        kind = event.get("type")
        obj = event.get("object") or {}
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if resource == "pods" and rv:
                self.cache.pods_listed_at(rv)
            return rv
        if resource == "nodes":
            if kind == "DELETED":
                self.cache.delete_node((obj.get("metadata") or {}).get("name", ""))
            else:
                self.cache.apply_node(obj, self.wall_clock())
        elif resource == "resourcequotas":
            assert self.quotas is not None
            if kind == "DELETED":
                self.quotas.delete(obj)
            else:
                self.quotas.apply(obj)
        elif kind == "DELETED":
            self.cache.delete_pod(obj)
        else:
            self._hand_on(obj)
            self.cache.apply_pod(obj)
        return rv

    def _notify(self, resource: str, event: JSON) -> None:
        """Wake whoever waits on the node this event concerns: a node's own, or the node a pod
        is bound to (a pod bound nowhere, a quota: no node in particular)."""
        if self.changed is None:
            return
        obj = event.get("object") or {}
        if resource == "nodes":
            node = (obj.get("metadata") or {}).get("name")
        elif resource == "pods":
            node = (obj.get("spec") or {}).get("nodeName")
        else:
            node = None
        self.changed.notify(node or None)

    def _release_needless(self) -> None:
        """Free the nodes whose lock holder the watch just showed to be done with them."""
        needless = self.cache.take_needless_locks()
        if self.on_needless_lock is None:
            return
        for lock in needless:
            log.info("node %s: lock holder %s no longer needs it (%s): releasing", lock.node, lock.holder,
                     lock.reason)
            task = asyncio.ensure_future(self.on_needless_lock(lock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
