"""The driver's Kubernetes side: claims fetched for Prepare, the node's ResourceSlice kept
current, claims that vanished while nobody unprepared them freed. Decisions are the pure
modules' (claims, slices, conflict); this one does the API calls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from hami_dcu.common.keys import DCU_NAMING, Naming
from hami_dcu.common.kube import Kube, KubeError, NotFoundError
from hami_dcu.dra import names, slices
from hami_dcu.dra.conflict import device_plugin_serving
from hami_dcu.dra.core import DriverCore, PrepareFailed
from hami_dcu.dra.latency import PodLatency
from hami_dcu.dra.metrics import DriverMetrics
from hami_dcu.dra.records import PreparedClaim
from hami_dcu.dra.server import ClaimRef

log = logging.getLogger(__name__)
JSON = dict[str, Any]
COMPONENT = "hami-dcu-dra-driver"
SLICES = f"{names.RESOURCE_API}/resourceslices"
# Periodic checks read the API server's watch cache (resourceVersion "0": no etcd round trip).
# A cached answer may be a moment old: a write is always preceded by an authoritative read.
FROM_CACHE = {"resourceVersion": "0"}
# How long a prepared claim seen allocated goes unchecked. The kubelet unprepares the claims of
# pods it removes; the reconcile only catches claims deleted while the driver could not hear it,
# so checking each one every few minutes is enough, where a read of every prepared claim every
# cycle cost the API server (claims per node x nodes) reads per cycle. A Prepare that fails for
# want of room checks again at once (RECHECK_ON_FAILURE).
CLAIM_RECHECK = 300.0
RECHECK_ON_FAILURE = 5.0


def claim_path(namespace: str, name: str) -> str:
    return f"{names.RESOURCE_API}/namespaces/{namespace}/resourceclaims/{name}"


class DriverService:
    def __init__(self, kube: Kube, core: DriverCore, slots: int, health: Callable[[], dict[str, bool]],
                 count_resources: tuple[str, ...] | None = None, metrics: DriverMetrics | None = None,
                 latency: PodLatency | None = None, naming: Naming = DCU_NAMING,
                 claim_recheck: float = CLAIM_RECHECK, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.metrics = metrics or DriverMetrics()
        self.latency = latency or PodLatency(kube, core.node, self.metrics)
        self.core = core
        self.node = core.node
        self.slots = slots
        self.health = health
        self.count_resources = count_resources or (naming.resources.count,)
        self.health_now: dict[str, bool] = {}
        self.conflict: str | None = None
        self.publish_lock = threading.Lock()
        self.claim_recheck = claim_recheck
        self.clock = clock
        self._checked: dict[str, float] = {}  # claim UID -> when it was last seen allocated

    # --- kubelet calls ---------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> PreparedClaim:
        done = self.core.prepared.get(ref.uid)
        if done is not None:  # answered from the record even while the API server is away
            return done
        try:
            claim = self.kube.request("GET", claim_path(ref.namespace, ref.name))
        except KubeError as exc:
            raise PrepareFailed(f"ResourceClaim {ref.namespace}/{ref.name}: cannot read it: {exc}") from exc
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise PrepareFailed(f"ResourceClaim {ref.namespace}/{ref.name} is now UID {uid}, the kubelet asked for "
                                f"{ref.uid}: it was deleted and created again")
        try:
            record = self._prepare(claim)
        except PrepareFailed as exc:
            self.metrics.prepares.labels(self.node, "failed").inc()
            self._event({"kind": "ResourceClaim", "metadata": claim.get("metadata") or {}}, "DCUPrepareFailed",
                        f"node {self.node}: {exc}")
            raise
        self.metrics.prepares.labels(self.node, "success").inc()
        self._checked[ref.uid] = self.clock()
        self.latency.prepared(claim)
        return record

    def _prepare(self, claim: JSON) -> PreparedClaim:
        """The core's Prepare; when it fails, claims gone since their last check may hold the
        room this one needs: those are freed and the Prepare is tried once more."""
        try:
            return self.core.prepare(claim)
        except PrepareFailed:
            if not self.reconcile(max_age=RECHECK_ON_FAILURE):
                raise
        return self.core.prepare(claim)

    def unprepare(self, ref: ClaimRef) -> None:
        self.core.unprepare(ref.uid)
        self._checked.pop(ref.uid, None)

    # --- the ResourceSlice -----------------------------------------------------------------

    def refresh_health(self) -> bool:
        """Re-read card health; True when it changed (then publish)."""
        try:
            health = self.health()
        except Exception as exc:  # an SMI failure must not kill the driver: the last answer stands
            log.warning("node %s: health check failed: %s", self.node, exc)
            return False
        if health == self.health_now:
            return False
        for card_id, healthy in sorted(health.items()):
            if self.health_now.get(card_id, True) != healthy:
                log.log(logging.INFO if healthy else logging.WARNING, "node %s: card %s is now %s", self.node,
                        card_id, "healthy" if healthy else "unhealthy")
        self.health_now = health
        return True

    def publish(self) -> bool:
        """Make the node's slice say what its healthy cards are (none when a device plugin
        serves the node). True when something was written."""
        with self.publish_lock:
            node = self.kube.request("GET", f"/api/v1/nodes/{self.node}", query=FROM_CACHE)
            conflict = device_plugin_serving(node, self.count_resources)
            if conflict != self.conflict:
                self.conflict = conflict
                if conflict:
                    log.error("%s", conflict)
                    self._event({"kind": "Node", "metadata": {"name": self.node, "uid": node["metadata"].get("uid")}},
                                "DCUModeConflict", conflict)
            cards = [] if conflict else list(self.core.cards.values())
            for query in (FROM_CACHE, None):  # the cache may lag our own last write: write on the stored one
                published = self._read_slice(query)
                generation = int(((published or {}).get("spec") or {}).get("pool", {}).get("generation") or 0)
                spec = slices.slice_spec(self.node, cards, self.health_now, self.slots, generation)
                if slices.same_devices(published, spec):
                    return False
            spec["pool"]["generation"] = generation + 1
            body = slices.resource_slice(self.node, node["metadata"].get("uid"), spec)
            if published is None:
                self.kube.request("POST", SLICES, body=body)
            else:
                body["metadata"]["resourceVersion"] = published["metadata"]["resourceVersion"]
                self.kube.request("PUT", f"{SLICES}/{names.slice_name(self.node)}", body=body)
            log.info("node %s: published ResourceSlice %s generation %d: %s", self.node,
                     names.slice_name(self.node), generation + 1,
                     ", ".join(d["name"] for d in spec["devices"]) or "no devices")
            return True

    def _read_slice(self, query: dict[str, str] | None) -> JSON | None:
        try:
            found: JSON = self.kube.request("GET", f"{SLICES}/{names.slice_name(self.node)}", query=query)
        except NotFoundError:
            return None
        return found

    def withdraw(self) -> None:
        """Remove the slice (the driver is going away for good: no new allocations here)."""
        try:
            self.kube.request("DELETE", f"{SLICES}/{names.slice_name(self.node)}")
        except NotFoundError:
            pass

    # --- reconcile -------------------------------------------------------------------------

    def reconcile(self, max_age: float | None = None) -> list[str]:
        """Free prepared claims whose ResourceClaim is gone, recreated or deallocated: the
        kubelet unprepares claims it knows, this catches those deleted while nobody could.
        Only claims not seen allocated within `max_age` seconds (default: the recheck period)
        are read, from the API server's cache."""
        max_age = self.claim_recheck if max_age is None else max_age
        freed = []
        for record in self.core.prepared_claims():
            checked = self._checked.get(record.uid)
            if checked is not None and self.clock() - checked < max_age:
                continue
            try:
                claim: JSON | None = self.kube.request("GET", claim_path(record.namespace, record.name),
                                                       query=FROM_CACHE)
            except NotFoundError:
                claim = None
            meta = (claim or {}).get("metadata") or {}
            if claim is not None and meta.get("uid") == record.uid and (claim.get("status") or {}).get("allocation"):
                self._checked[record.uid] = self.clock()
                continue
            self._checked.pop(record.uid, None)
            if self.core.unprepare(record.uid):
                freed.append(record.uid)
                log.info("node %s: freed claim %s/%s (%s): no longer allocated", self.node, record.namespace,
                         record.name, record.uid)
        return freed

    def _event(self, regarding: JSON, reason: str, message: str) -> None:
        try:
            self.kube.create_event(regarding, reason, message, "Warning", component=COMPONENT)
        except KubeError as exc:
            log.warning("node %s: could not record event %s: %s", self.node, reason, exc)
