"""The node's vDCUs, kept together: the allocator's state (CU bitsets, pipes, vdev ids), the
plugin's own grant records (grantstore.py, kubeletids.py) and the files containers see (the
vdev directory with its vdev0.conf, the exporter's /etc/vdev copy).

The order makes a crash harmless: a grant is taken in memory, its record written (the
commit point), then the files a container sees; removal goes the other way. A restart takes
the grants back from the records alone. The caller (service.py) holds the plugin's lock
around every call here; this class decides nothing (core.py does) and speaks to no API.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from hami_dcu.deviceplugin.core import UNSERVED_CARD, Paths, PluginCore
from hami_dcu.deviceplugin.grantstore import GrantStore
from hami_dcu.deviceplugin.kubeletids import KubeletIds
from hami_dcu.node.allocator import Grant, NodeState
from hami_dcu.node.vdev import VDEV_CONF, VdevDir, VdevSpec, render_conf, write_atomic

log = logging.getLogger(__name__)


class Vdevs:
    def __init__(self, core: PluginCore) -> None:
        self.core = core
        self.node = core.node
        self.paths: Paths = core.paths
        self.state = NodeState(compute_units={c.index: c.card.compute_units for c in core.cards.values()})
        self.grants = GrantStore(self.paths.state_dir)
        # Beside each grant record (<dirname>.ids): the kubelet ids it serves, for usage metrics.
        self.kubelet_ids = KubeletIds(self.paths.state_dir)

    @property
    def live(self) -> int:
        """How many vDCUs are granted on this node now."""
        return len(self.state.vdevs_used)

    # --- restart safety ------------------------------------------------------------------

    def rebuild(self) -> int:
        """Take back every grant recorded in the plugin's own state dir (run at start); the
        reconcile then drops those of pods no longer live on this node."""
        restored = 0
        self.grants.adopt_legacy(self.paths.vdev_dir)
        for dirname, record in self.named_records():
            # Restored even for a card no longer served: its vdev id stays taken until the
            # pod goes, so /etc/vdev/vdev<N>.conf is never shared by two live vDCUs.
            self.state.restore(record)
            self._restore_conf(dirname)
            restored += 1
        if restored:
            log.info("node %s: restored %d vDCU grants from %s", self.node, restored, self.paths.state_dir)
        return restored

    def _restore_conf(self, dirname: str) -> None:
        """The container's vdev0.conf is written without fsync (Allocate's critical path);
        the grant record is durable. After a crash, or a tenant's edit, the container's copy
        is put back from the record before the kubelet restarts anything on this node."""
        text = self.grants.conf_text(dirname)
        conf = self.paths.vdev_dir / dirname / VDEV_CONF
        if text is None or not conf.parent.is_dir():
            return
        try:
            if conf.read_text() == text:
                return
        except OSError:
            pass
        log.warning("node %s: vdev %s: configuration restored from the plugin's record", self.node, dirname)
        write_atomic(conf, text)

    def named_records(self) -> list[tuple[str, VdevDir]]:
        """(dirname, grant) of every record, on the card index this plugin now uses for its
        card. From the state dir only: the vdev dirs are mounted into containers."""
        found = []
        for dirname, record, bus_id in self.grants.records():
            current = self.core.current_index(record, bus_id)
            if current.card_index != record.card_index:
                index = current.card_index
                log.warning("node %s: vdev %s is on card %s, %s (its name says index %d)", self.node, dirname,
                            bus_id, "no longer served" if index == UNSERVED_CARD else f"now index {index}",
                            record.card_index)
            found.append((dirname, current))
        return found

    # --- Allocate ------------------------------------------------------------------------

    def write(self, spec: VdevSpec, kubelet_ids: Sequence[str]) -> Path:
        """Record the grant, then write the files its container sees; returns its directory."""
        self.grants.save(spec)  # first: a vdev dir never exists without the plugin's record
        self.kubelet_ids.save(spec.dirname, kubelet_ids)
        host_dir = self.paths.vdev_dir / spec.dirname
        # The record just written is the durable copy (rebuild restores this one from it):
        # no fsync here, on the Allocate's critical path.
        write_atomic(host_dir / VDEV_CONF, render_conf(spec, device_id=0), durable=False)
        # The exporter's copy is not what the container reads: atomic is enough, no fsync.
        write_atomic(self.paths.etc_vdev / f"vdev{spec.vdev}.conf", render_conf(spec, device_id=spec.card_index),
                     durable=False)
        return host_dir

    def undo(self, written: Sequence[tuple[Grant, VdevSpec]]) -> None:
        """Take back what a failed Allocate granted and wrote."""
        for grant, spec in written:
            try:
                self._remove_files(spec.dirname, grant.vdev)
            except OSError as exc:  # reconcile removes it later: the pod is failed, not live
                log.warning("node %s: could not remove vdev %s: %s", self.node, spec.dirname, exc)
            self.state.release(grant)

    # --- reconcile -------------------------------------------------------------------------

    def remove(self, stale: Sequence[tuple[str, VdevDir]]) -> list[str]:
        """Remove the grants of pods gone or finished (core.stale_records); their names."""
        removed = []
        for dirname, record in stale:
            self._remove_files(dirname, record.vdev)
            self.state.release(record)
            removed.append(dirname)
            log.info("node %s: removed vdev %s of a pod that is gone or finished", self.node, dirname)
        return removed

    def remove_unrecorded(self) -> list[str]:
        """vdev dirs the plugin holds no record of were not made by it (or their grant is gone):
        never taken for a grant, removed."""
        recorded = {name for name, _, _ in self.grants.records()}
        try:
            stray = sorted(p.name for p in self.paths.vdev_dir.iterdir() if p.is_dir() and p.name not in recorded)
        except FileNotFoundError:
            return []
        for name in stray:
            shutil.rmtree(self.paths.vdev_dir / name, ignore_errors=True)
            log.warning("node %s: removed vdev dir %s, of which the plugin holds no record", self.node, name)
        return stray

    def _remove_files(self, dirname: str, vdev: int) -> None:
        self.grants.remove(dirname)
        self.kubelet_ids.remove(dirname)
        shutil.rmtree(self.paths.vdev_dir / dirname, ignore_errors=True)
        (self.paths.etc_vdev / f"vdev{vdev}.conf").unlink(missing_ok=True)
