"""DRA mode: list + watch of ResourceSlices and ResourceClaims into `DraUsage` (drausage.py),
which /prioritize reads to pack pods onto the fullest nodes that fit; and of
ResourceClaimTemplates, which the webhook in this process asks (`template`) before it reads one
it would reuse (webhook/draclaims.py): a pod's admission then costs no template read. The
quota reservations claims carry (keys.QUOTA_RESERVATION) are noted as the watch shows them,
which tells the webhook a claim it admitted was stored, even one deleted since
(`reservations_seen`).

The same discipline as the pod and node informer (informer.py), from the same loop
(listwatch.py): list, watch from the list's resourceVersion, watch again from the last version
seen when a stream ends, list again on 410 Gone and every `resync` seconds, back off on errors
up to 30 s. Each object is trimmed to the fields the usage reads as it arrives, so a cluster's
claims never sit whole in memory.

The webhook in this process reads the card sizes from the slices too: `slice_digest` (set by
the composition root, scheduler/command.py) reduces each slice as it arrives to what the
webhook keeps of it, and `slice_digests` hands over all of them with a version that changes
with any slice, so the webhook never lists the slices itself (issue 40, item 6: its lists, 41
MiB each decoded at 1,000 nodes, several at once in a burst, took the RSS past 1 GiB).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.keys import QUOTA_RESERVATION
from hami_dcu.scheduler.drausage import DraUsage
from hami_dcu.scheduler.listwatch import list_and_watch, list_pages
from hami_dcu.scheduler.seenreservations import SeenReservations

log = logging.getLogger(__name__)
JSON = dict[str, Any]
SLICES, CLAIMS, TEMPLATES = "resourceslices", "resourceclaims", "resourceclaimtemplates"


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
    kept: JSON = {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
    annotations = meta.get("annotations")
    reservation = annotations.get(QUOTA_RESERVATION) if isinstance(annotations, dict) else None
    if isinstance(reservation, str):
        kept["annotations"] = {QUOTA_RESERVATION: reservation}
    return {"metadata": kept, "status": {"allocation": {"devices": {"results": results}}} if results else {}}


def slim_template(obj: JSON) -> JSON:
    """What the webhook's trust check reads (webhook/templatetrust.py): labels and spec."""
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "labels": meta.get("labels") or {}, "resourceVersion": meta.get("resourceVersion")},
            "spec": obj.get("spec") or {}}


def _template_key(obj: JSON) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class DraInformer:
    def __init__(self, kube: AsyncKube, usage: DraUsage, resync: float = 300.0, watch_timeout: int = 240,
                 page_size: int = 500) -> None:
        self.kube = kube
        self.usage = usage
        self.resync = resync
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.synced = asyncio.Event()  # slices and claims listed: /prioritize can rank
        self._listed: set[str] = set()
        self._templates: dict[tuple[str, str], JSON] = {}
        # Per slice name, what `slice_digest` keeps of it (None: nothing is kept).
        self.slice_digest: Callable[[JSON], object] | None = None
        self._digests: dict[str, object] = {}
        self._digests_version = 0
        self.reservations_seen = SeenReservations(QUOTA_RESERVATION)

    async def run(self) -> None:
        await asyncio.gather(self._loop(SLICES), self._loop(CLAIMS), self._loop(TEMPLATES))

    def reservation_seen(self, reservation: str) -> bool:
        """True once the watch has shown a claim carrying `reservation` (webhook/draclaims.py)."""
        return reservation in self.reservations_seen

    def template(self, namespace: str, name: str) -> JSON | None:
        """The ResourceClaimTemplate `namespace/name` as the watch last showed it; None when it
        showed none (or has not listed yet): the caller reads the API then."""
        return self._templates.get((namespace, name))

    def slice_digests(self) -> tuple[int, Iterable[object]] | None:
        """Every slice's digest (see `slice_digest`) and a version that changes whenever one
        does; None until the slices are listed. The iterable is a live view: read it now."""
        if SLICES not in self._listed:
            return None
        return self._digests_version, self._digests.values()

    def _digest(self, obj: JSON) -> None:
        if self.slice_digest is not None:
            self._digests[str((obj.get("metadata") or {}).get("name") or "")] = self.slice_digest(obj)
            self._digests_version += 1

    def _forget_digest(self, obj: JSON) -> None:
        if self._digests.pop(str((obj.get("metadata") or {}).get("name") or ""), None) is not None:
            self._digests_version += 1

    async def _loop(self, resource: str) -> None:
        path = f"{names.RESOURCE_API}/{resource}"
        await list_and_watch(self.kube, resource, path, lambda: self._list(resource, path),
                             lambda event: self._apply(resource, event), resync=self.resync,
                             watch_timeout=self.watch_timeout)

    async def _list(self, resource: str, path: str) -> str:
        keep: Callable[[JSON], JSON] = {SLICES: slim_slice, CLAIMS: slim_claim, TEMPLATES: slim_template}[resource]
        listing = await list_pages(self.kube, path, self.page_size, keep)
        if resource == SLICES:
            self.usage.replace_slices(listing.items)
            self._digests = {}
            self._digests_version += 1
            for listed in listing.items:
                self._digest(listed)
        elif resource == CLAIMS:
            self.usage.replace_claims(listing.items)
            for claim in listing.items:
                self.reservations_seen.note(claim)
        else:
            self._templates = {_template_key(t): t for t in listing.items}
        log.info("listed %d %s at resourceVersion %s", len(listing.items), resource, listing.resource_version)
        self._listed.add(resource)
        if {SLICES, CLAIMS} <= self._listed:
            self.synced.set()
        return listing.resource_version

    def _apply(self, resource: str, event: JSON) -> str | None:
        kind = event.get("type")
        raw = event.get("object")
        obj = raw if isinstance(raw, dict) else {}
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            return rv
        if resource == TEMPLATES:
            if kind == "DELETED":
                self._templates.pop(_template_key(obj), None)
            else:
                self._templates[_template_key(obj)] = slim_template(obj)
        elif resource == SLICES:
            if kind == "DELETED":
                self.usage.delete_slice(obj)
                self._forget_digest(obj)
            else:
                slim = slim_slice(obj)
                self.usage.apply_slice(slim)
                self._digest(slim)
        else:
            self.reservations_seen.note(obj)
            if kind == "DELETED":
                self.usage.delete_claim(obj)
            else:
                self.usage.apply_claim(slim_claim(obj))
        return rv
