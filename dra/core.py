"""The driver's node-side work: claims in, vDCUs and CDI specs out, and back. No Kubernetes
and no gRPC here (the shell fetches claims and speaks to the kubelet).

Prepare turns each share of a claim into a vDCU with the node layer's allocator (CU bitset,
pipe, vdev id) and vdev file, writes the claim's CDI spec, and answers with CDI ids. The order
makes a crash harmless: grants are taken in memory, the record is written (the commit point),
then the files a container sees; Unprepare removes the files, then the record. A restart takes
the grants back from the records and rewrites their files. Both calls are idempotent per claim
UID, as the kubelet retries them.

Two driver processes may run on the node at once (a rolling update: dra/sharedstate.py): every
call holds the node state's lock and reloads the records first when the other one changed them,
so the memory here is never a stale copy when it decides.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.errors import DraError
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.dra import cdi
from hami_dcu.dra.claims import ClaimRefused, Share, cards_by_device, plan_claim, who
from hami_dcu.dra.holdings import conflict
from hami_dcu.dra.records import PreparedClaim, PreparedDevice, RecordStore, VdevGrant
from hami_dcu.dra.sharedstate import Hold, SharedState
from hami_dcu.node import layout
from hami_dcu.node.allocator import AllocationError, NodeState
from hami_dcu.node.discovery import DcuCard
from hami_dcu.node.vdev import VDEV_CONF, render_conf, write_atomic

log = logging.getLogger(__name__)
UNSERVED_CARD = -1  # card index of a restored grant whose card is no longer served
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")  # a claim UID also names files: nothing else passes


class PrepareFailed(DraError, RuntimeError):
    """The claim was not prepared; nothing of it is left in memory or on disk."""


@dataclass(frozen=True)
class DraPaths:
    vdev_dir: Path = Path("/usr/local/vgpu/dcu")
    etc_vdev: Path = Path("/etc/vdev")
    cdi_dir: Path = Path("/var/run/cdi")
    state_dir: Path = Path("/var/lib/hami-dcu/dra")  # records: mounted into no container
    dev_root: Path = Path("/dev")
    driver_dir: Path = Path("/opt/dtk")
    hyhal_dir: Path = Path(layout.HYHAL_DIR)

    @property
    def host(self) -> cdi.HostPaths:
        return cdi.HostPaths(dev_root=self.dev_root, vdev_dir=self.vdev_dir, driver_dir=self.driver_dir,
                             hyhal_dir=self.hyhal_dir)


class DriverCore:
    def __init__(self, node: str, cards: list[DcuCard], paths: DraPaths | None = None) -> None:
        self.node = node
        self.paths = paths or DraPaths()
        self.cards = cards_by_device(cards)
        self.index_by_bus_id = {c.card.pci_bus_id.upper(): c.index for c in cards}
        self._compute_units = {c.index: c.card.compute_units for c in cards}
        self.state = NodeState(compute_units=dict(self._compute_units))
        self.store = RecordStore(self.paths.state_dir / "claims")
        self.shared = SharedState(self.paths.state_dir, self.store.directory)
        self.prepared: dict[str, PreparedClaim] = {}

    # --- the node state, shared with another driver process (dra/sharedstate.py) ------------

    @contextmanager
    def holding(self) -> Iterator[Hold]:
        """The node state's lock, the memory reloaded from the records when they changed."""
        with self.shared.hold() as hold:
            if hold.stale:
                self._reload()
            yield hold

    def _reload(self, report_moves: bool = False) -> None:
        """The grants and prepared claims, from the records alone (they are the truth)."""
        state = NodeState(compute_units=dict(self._compute_units))
        prepared: dict[str, PreparedClaim] = {}
        for record in self.store.load_all():
            record = self._current_indices(record, report_moves)
            for device in record.devices:
                grant = device.vdev_dir(record.uid)
                if grant is not None:
                    state.restore(grant)
            prepared[record.uid] = record
        self.state, self.prepared = state, prepared

    def record(self, uid: str) -> PreparedClaim | None:
        """The claim's record as the node has it now (another process may have written it)."""
        with self.holding():
            return self.prepared.get(uid)

    # --- restart ---------------------------------------------------------------------------

    def rebuild(self) -> int:
        """Take back every recorded claim's grants and rewrite its files (run at start)."""
        with self.shared.hold():
            self._reload(report_moves=True)
            for record in self.prepared.values():
                try:
                    self._write_files(record)
                except OSError as exc:  # the record still holds the grants; Unprepare cleans up
                    log.error("node %s: could not rewrite the files of claim %s: %s", self.node, record.uid, exc)
            count = len(self.prepared)
        if count:
            log.info("node %s: restored %d prepared claims from %s", self.node, count, self.store.directory)
        return count

    def _current_indices(self, record: PreparedClaim, report_moves: bool = False) -> PreparedClaim:
        """SMI indices shift when a card disappears; the PCI bus id does not. A card no longer
        served keeps its grant apart (index -1), never charged to the card now at its index."""
        devices = []
        for device in record.devices:
            if device.vdev is not None:
                index = self.index_by_bus_id.get(device.pci_bus_id.upper(), UNSERVED_CARD)
                if index != device.vdev.card_index:
                    if report_moves:  # once, at start: not again at each reload
                            log.warning("node %s: claim %s device %s is now card index %d (was %d)", self.node,
                                    record.uid, device.device, index, device.vdev.card_index)
                    device = replace(device, vdev=replace(device.vdev, card_index=index))
            devices.append(device)
        return PreparedClaim(record.uid, record.namespace, record.name, tuple(devices))

    # --- prepare ---------------------------------------------------------------------------

    def prepare(self, claim: JSON) -> PreparedClaim:
        meta = objects.metadata(claim)
        uid = str(meta.get("uid") or "")
        if not _UID.fullmatch(uid):
            raise PrepareFailed(f"{who(claim)}: unusable UID {uid!r}")
        with self.holding() as hold:
            done = self.prepared.get(uid)
            if done is not None:  # the kubelet asks again after its restart or a lost answer
                return done
            try:
                shares = plan_claim(claim, self.node, self.cards)
            except ClaimRefused as exc:
                raise PrepareFailed(str(exc)) from exc
            if (why := conflict(shares, self.prepared.values(), uid)) is not None:
                raise PrepareFailed(f"{who(claim)}: {why}")
            vdevs = [s for s in shares if not s.whole]
            if len(vdevs) > 1:
                # One vdev file per container (/etc/vdev/docker/vdev0.conf), as in device-plugin mode.
                raise PrepareFailed(f"{who(claim)}: {len(vdevs)} shared devices in one claim; a share (cores or "
                                    "memory below the whole card) is one device per claim")
            devices: list[PreparedDevice] = []
            try:
                for share in shares:
                    devices.append(self._grant(claim, share))
            except PrepareFailed:
                self._release(uid, devices)
                raise
            record = PreparedClaim(uid=uid, namespace=str(meta.get("namespace") or ""), name=str(meta.get("name")),
                                   devices=tuple(devices))
            hold.changed()
            try:
                self.store.save(record)
                self.prepared[uid] = record
                self._write_files(record)
            except OSError as exc:
                self._forget(record)
                raise PrepareFailed(f"{who(claim)}: cannot write its files on node {self.node}: {exc}") from exc
        log.info("node %s: prepared %s (%s): %s", self.node, who(claim), uid, ", ".join(_describe(d) for d in
                                                                                         record.devices))
        return record

    def _grant(self, claim: JSON, share: Share) -> PreparedDevice:
        grant = None
        if not share.whole:
            try:
                g = self.state.allocate(share.card.index, share.cu_count)
            except AllocationError as exc:
                raise PrepareFailed(f"{who(claim)}: device {share.device}: {exc}") from exc
            grant = VdevGrant(card_index=g.card_index, cu_mask=g.cu_mask, pipe=g.pipe, vdev=g.vdev,
                              cu_count=share.cu_count, memory_mib=share.memory_mib)
        return PreparedDevice(request=share.request, pool=share.pool, device=share.device, share_id=share.share_id,
                              pci_bus_id=share.card.card.pci_bus_id, dri_card=share.card.drm.card,
                              dri_render=share.card.drm.render, vdev=grant, admin=share.admin)

    def _write_files(self, record: PreparedClaim) -> None:
        for device in record.devices:
            spec = device.vdev_spec(record.uid)
            if spec is None:
                continue
            write_atomic(self.paths.vdev_dir / spec.dirname / VDEV_CONF, render_conf(spec, device_id=0))
            # The exporter's copy names the card index, as device-plugin mode writes it.
            write_atomic(self.paths.etc_vdev / f"vdev{spec.vdev}.conf", render_conf(spec, device_id=spec.card_index),
                         durable=False)
        write_atomic(self.paths.cdi_dir / cdi.spec_file_name(record.uid),
                     json.dumps(cdi.claim_spec(record, self.paths.host), indent=1) + "\n")

    # --- unprepare -------------------------------------------------------------------------

    def unprepare(self, uid: str) -> bool:
        """Free the claim's vDCUs and files; False when it was not prepared here (nothing to do)."""
        if not _UID.fullmatch(uid):
            raise PrepareFailed(f"unusable claim UID {uid!r}")
        with self.holding() as hold:
            record = self.prepared.get(uid)
            if record is None:
                return False
            hold.changed()
            self._forget(record)
        log.info("node %s: unprepared claim %s/%s (%s)", self.node, record.namespace, record.name, uid)
        return True

    def _forget(self, record: PreparedClaim) -> None:
        """Files first, then the record, then the grants: a crash in between leaves a record
        whose files the restart rewrites and the kubelet's retry removes."""
        (self.paths.cdi_dir / cdi.spec_file_name(record.uid)).unlink(missing_ok=True)
        for device in record.devices:
            spec = device.vdev_spec(record.uid)
            if spec is not None:
                shutil.rmtree(self.paths.vdev_dir / spec.dirname, ignore_errors=True)
                (self.paths.etc_vdev / f"vdev{spec.vdev}.conf").unlink(missing_ok=True)
        self.store.remove(record.uid)
        self.prepared.pop(record.uid, None)
        self._release(record.uid, record.devices)

    def _release(self, uid: str, devices: list[PreparedDevice] | tuple[PreparedDevice, ...]) -> None:
        for device in devices:
            grant = device.vdev_dir(uid)
            if grant is not None:
                self.state.release(grant)

    # --- reconcile -------------------------------------------------------------------------

    def prepared_claims(self) -> list[PreparedClaim]:
        with self.holding():
            return list(self.prepared.values())


def _describe(device: PreparedDevice) -> str:
    if device.vdev is None:
        return f"{device.device} whole"
    g = device.vdev
    return f"{device.device} vDCU {g.vdev} ({g.cu_count} CUs mask {g.cu_mask:#x}, {g.memory_mib} MiB, pipe {g.pipe})"
