"""The driver's Kubernetes side: claims fetched for Prepare, checked against their namespace's
DCU quota (dra/ledger.py), their status.devices written (dra/claimstatus.py), the node's
ResourceSlice kept current, claims that vanished while nobody unprepared them freed. Decisions
are the pure modules' (claims, slices, conflict, claimstatus, quotagate); this one does the API
calls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.dra import claimstatus, quotagate, slices
from hami_dcu.dra.claims import ClaimRefused, plan_claim
from hami_dcu.dra.conflict import device_plugin_serving
from hami_dcu.dra.core import DriverCore, PrepareFailed
from hami_dcu.dra.latency import PodLatency
from hami_dcu.dra.ledger import QuotaLedger, QuotaRefused
from hami_dcu.dra.metrics import DriverMetrics
from hami_dcu.dra.records import PreparedClaim
from hami_dcu.dra.server import ClaimRef
from hami_dcu.node.health import Problem

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


def _described(device: JSON) -> str:
    taints = device.get("taints") or []
    return device["name"] + "".join(f" (tainted {t['key']}={t.get('value', '')}:{t['effect']})" for t in taints)


def claim_path(namespace: str, name: str) -> str:
    return f"{names.RESOURCE_API}/namespaces/{namespace}/resourceclaims/{name}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class DriverService:
    def __init__(self, kube: Kube, core: DriverCore, slots: int, health: Callable[[], Mapping[str, Problem | None]],
                 count_resources: tuple[str, ...] | None = None, metrics: DriverMetrics | None = None,
                 latency: PodLatency | None = None, *, naming: Naming,
                 claim_recheck: float = CLAIM_RECHECK, clock: Callable[[], float] = time.monotonic,
                 ledger: QuotaLedger | None = None, now: Callable[[], str] = _now,
                 taint_effect: str = slices.NO_SCHEDULE) -> None:
        self.kube = kube
        self.ledger = ledger  # None: no quota check at Prepare (the webhook's alone)
        self.now = now
        self.metrics = metrics or DriverMetrics()
        self.latency = latency or PodLatency(kube, core.node, self.metrics)
        self.core = core
        self.node = core.node
        self.slots = slots
        self.health = health  # card id -> why it is unhealthy (None: healthy)
        self.count_resources = count_resources or (naming.resources.count,)
        self.health_now: dict[str, Problem | None] = {}
        self.unhealthy_since: dict[str, str] = {}  # card id -> when it turned unhealthy (RFC3339)
        self.taint_effect = taint_effect
        # Whether the API server keeps device taints: None until a slice with a taint was
        # written, False where it dropped them (unhealthy cards are then left out of the slice).
        self.taints_kept: bool | None = None
        self.conflict: str | None = None
        self.publish_lock = threading.Lock()
        self.claim_recheck = claim_recheck
        self.clock = clock
        self._checked: dict[str, float] = {}  # claim UID -> when it was last seen allocated
        # Prepared claims whose status.devices could not be written: claim UID -> its metadata,
        # written again by the reconcile and by the kubelet's next Prepare of it.
        self._status_pending: dict[str, JSON] = {}

    # --- kubelet calls ---------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> PreparedClaim:
        done = self.core.record(ref.uid)
        if done is not None:  # answered from the record even while the API server is away
            pending = self._status_pending.get(ref.uid)
            if pending is not None:
                self._write_status(pending, done)
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
            counted = self._enter_quota(claim, ref)
            try:
                record = self._prepare(claim)
            except PrepareFailed:
                if counted:
                    self._leave_quota(ref.namespace, ref.uid)
                raise
        except PrepareFailed as exc:
            self.metrics.prepares.labels(self.node, "failed").inc()
            self._event({"kind": "ResourceClaim", "metadata": claim.get("metadata") or {}}, "DCUPrepareFailed",
                        f"node {self.node}: {exc}")
            reason = claimstatus.QUOTA_EXCEEDED if isinstance(exc, QuotaRefused) else claimstatus.PREPARE_FAILED
            self._write_failure(claim, reason, f"node {self.node}: {exc}")
            raise
        self.metrics.prepares.labels(self.node, "success").inc()
        self._checked[ref.uid] = self.clock()
        self.latency.prepared(claim)
        self._write_status(claim.get("metadata") or {}, record)
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
        record = self.core.record(ref.uid)
        self.core.unprepare(ref.uid)
        self._checked.pop(ref.uid, None)
        self._status_pending.pop(ref.uid, None)
        if record is None:
            return
        # The vDCU is freed: the claim no longer says it is ready (a claim that stays allocated,
        # a standalone one whose pod went away, would say so until its next pod). A deallocated
        # or deleted claim has nothing left to clear (Kubernetes drops status.devices itself).
        self._apply_status({"name": record.name, "namespace": record.namespace, "uid": record.uid}, [])
        self._leave_quota(record.namespace, record.uid)

    # --- the namespace DCU quota (dra/quotagate.py) ------------------------------------------

    def _enter_quota(self, claim: JSON, ref: ClaimRef) -> bool:
        """Count the claim in the quota ledger when its namespace has a DCU quota; True when it
        was counted. Raises QuotaRefused when it does not fit, PrepareFailed when it cannot tell."""
        if self.ledger is None:
            return False
        try:
            shares = plan_claim(claim, self.node, self.core.cards)
        except ClaimRefused as exc:
            raise PrepareFailed(str(exc)) from exc
        held = quotagate.held_by(shares)
        if not held:
            return False
        try:
            limits = self.ledger.limits(ref.namespace)
        except KubeError as exc:
            raise PrepareFailed(f"ResourceClaim {ref.namespace}/{ref.name}: cannot read the ResourceQuotas of its "
                                f"namespace: {exc}") from exc
        if not limits:
            return False
        self.ledger.enter(ref.namespace, ref.name, ref.uid, held, limits, self._prepared_uids)
        return True

    def _prepared_uids(self) -> list[str]:
        return [record.uid for record in self.core.prepared_claims()]

    def _leave_quota(self, namespace: str, uid: str) -> None:
        if self.ledger is None:
            return
        try:
            self.ledger.leave(namespace, uid)
        except KubeError as exc:  # its entry becomes a leftover, which the reconcile removes
            log.warning("node %s: could not take claim %s/%s out of the DCU quota ledger (the reconcile will): %s",
                        self.node, namespace, uid, exc)

    # --- status.devices (dra/claimstatus.py) -------------------------------------------------

    def _write_status(self, meta: JSON, record: PreparedClaim) -> None:
        """Say on the claim what was prepared. A failure does not fail the Prepare: the vDCU is
        made and its CDI spec written, so the pod can run, and status.devices is for people
        (nothing in Kubernetes reads it to run the pod, and the quota check counts the ledger,
        not this). Failing would turn an API blip after the work was done into a pod that does
        not start. It is logged with the claim and node, counted, and written again by the
        reconcile and by the kubelet's next Prepare of the claim until it is written."""
        entries = claimstatus.prepared_entries(record, self.core.cards, self.now(),
                                                   claimstatus.generation_of(meta))
        if self._apply_status(meta, entries):
            self._status_pending.pop(record.uid, None)
        else:
            self._status_pending[record.uid] = {k: meta.get(k) for k in ("name", "namespace", "uid", "generation")}

    def _write_failure(self, claim: JSON, reason: str, message: str) -> None:
        meta = claim.get("metadata") or {}
        entries = claimstatus.failed_entries(claim, self.node, reason, message, self.now())
        if entries and not claimstatus.says_already(claim, entries):
            self._apply_status(meta, entries)

    def _apply_status(self, meta: JSON, entries: list[JSON]) -> bool:
        namespace, name = meta.get("namespace"), meta.get("name")
        try:
            self.kube.request("PATCH", claim_path(str(namespace), str(name)) + "/status",
                              query={"fieldManager": claimstatus.FIELD_MANAGER, "force": "true"},
                              body=claimstatus.apply_body(meta, entries), content_type=claimstatus.APPLY)
        except NotFoundError:
            return True  # deleted: nothing to say it on
        except KubeError as exc:
            self.metrics.status_writes.labels(self.node, "failed").inc()
            action = "write" if entries else "clear"
            log.error("node %s: could not %s status.devices of ResourceClaim %s/%s: %s", self.node, action,
                      namespace, name, exc)
            return False
        self.metrics.status_writes.labels(self.node, "success").inc()
        return True

    def _retry_status(self) -> None:
        for uid, meta in list(self._status_pending.items()):
            record = self.core.record(uid)
            if record is None:
                self._status_pending.pop(uid, None)
            else:
                self._write_status(meta, record)

    # --- the ResourceSlice -----------------------------------------------------------------

    def refresh_health(self) -> bool:
        """Re-read card health; True when it changed (then publish)."""
        try:
            health = dict(self.health())
        except Exception as exc:  # an SMI failure must not kill the driver: the last answer stands
            log.warning("node %s: health check failed: %s", self.node, exc)
            return False
        if health == self.health_now:
            return False
        for card_id, problem in sorted(health.items()):
            before = self.health_now.get(card_id)
            if problem is None and before is not None:
                log.info("node %s: card %s is now healthy", self.node, card_id)
                self.unhealthy_since.pop(card_id, None)
            elif problem is not None and problem != before:
                log.warning("node %s: card %s is now unhealthy (%s): %s", self.node, card_id, problem.reason,
                            problem.message)
                self.unhealthy_since.setdefault(card_id, self.now())
                if self.taints_kept is False:
                    self.taints_kept = None  # ask again: the API server may have been upgraded since
        self.health_now = health
        return True

    def publish(self) -> bool:
        """Make the node's slice say what its cards are and which are unhealthy (none when a
        device plugin serves the node). True when something was written."""
        with self.publish_lock:
            written, dropped = self._publish_once()
            if dropped:
                # The write just made showed the API server drops device taints: write the slice
                # again at once, the unhealthy cards left out as before taints.
                self._publish_once()
            return written

    def _publish_once(self) -> tuple[bool, bool]:
        """(written, the API server dropped the taints written)."""
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
            taints = slices.unhealthy_taints(cards, self.health_now, self.taint_effect, self.unhealthy_since,
                                             published, self.now())
            spec = slices.slice_spec(self.node, cards, taints, self.slots, generation + 1,
                                     tainting=self.taints_kept is not False)
            if slices.same_devices(published, spec):
                return False, False
        body = slices.resource_slice(self.node, node["metadata"].get("uid"), spec)
        if published is not None:
            body["metadata"]["resourceVersion"] = published["metadata"]["resourceVersion"]
        if slices.has_taints(spec) and self.taints_kept is None:
            # Ask before the first tainted write: where the API server drops device taints
            # (before 1.36, or DRADeviceTaints off), a tainted card written for real would look
            # healthy to the scheduler until the next write. A dry run answers with the object
            # as it would be stored, and stores nothing.
            self.taints_kept = not slices.taints_dropped(self._write(published, body, dry_run=True), spec)
            if not self.taints_kept:
                self._taints_off()
                body["spec"] = spec = slices.slice_spec(self.node, cards, taints, self.slots, generation + 1,
                                                        tainting=False)
                if slices.same_devices(published, spec):
                    return False, False
        stored = self._write(published, body)
        dropped = slices.taints_dropped(stored, spec)
        if dropped:  # the API server changed since the dry run
            self.taints_kept = False
            self._taints_off()
        log.info("node %s: published ResourceSlice %s generation %d: %s", self.node, names.slice_name(self.node),
                 generation + 1, ", ".join(_described(d) for d in spec["devices"]) or "no devices")
        return True, dropped

    def _write(self, published: JSON | None, body: JSON, dry_run: bool = False) -> JSON:
        query = {"dryRun": "All"} if dry_run else None
        if published is None:
            stored: JSON = self.kube.request("POST", SLICES, body=body, query=query)
        else:
            stored = self.kube.request("PUT", f"{SLICES}/{names.slice_name(self.node)}", body=body, query=query)
        return stored

    def _taints_off(self) -> None:
        log.warning("node %s: the API server drops device taints (Kubernetes before 1.36, or the DRADeviceTaints "
                    "feature gate off): unhealthy cards are left out of the ResourceSlice instead of tainted",
                    self.node)

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
        if max_age is None:  # the periodic reconcile, not a Prepare short of room
            self._retry_status()
            self._prune_ledger()
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

    def _prune_ledger(self) -> None:
        if self.ledger is None:
            return
        try:
            self.ledger.prune(self._prepared_uids())
        except KubeError as exc:
            log.warning("node %s: could not check the DCU quota ledger for leftovers: %s", self.node, exc)

    def _event(self, regarding: JSON, reason: str, message: str) -> None:
        try:
            self.kube.create_event(regarding, reason, message, "Warning", component=COMPONENT)
        except KubeError as exc:
            log.warning("node %s: could not record event %s: %s", self.node, reason, exc)

