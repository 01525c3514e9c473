"""What the cache knows about node locks' holders.

* Which nodes' locks name each pod, so a pod event can tell whether a lock it holds is still
  needed (lockpurpose.py): a holder seen finished, running, done or failed with its
  allocation, bound elsewhere, or deleted. Such locks queue as `NeedlessLock`s for the
  service to release.
* Holders we saw lock a node whose allocation our pod watch has not shown yet: another
  scheduler replica's pods. A bind waits for them to settle (bind.py): each is accounted for
  once its allocation is in the cache, or once its lock went away at a version our pod watch
  has passed without the pod ever showing an allocation (its bind failed).
"""

from __future__ import annotations

from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.scheduler.cacherecords import NeedlessLock, NodeEntry, PodKey, lock_key
from hami_dcu.scheduler.nodetable import NodeTable
from hami_dcu.scheduler.placements import Placements
from hami_dcu.scheduler.podtable import PodTable


class LockHolders:
    def __init__(self, nodes: NodeTable, pods: PodTable, placements: Placements) -> None:
        self._nodes = nodes
        self._pods = pods
        self._placements = placements
        self._locked_by: dict[PodKey, set[str]] = {}  # pod -> nodes whose lock names it
        self._needless: list[NeedlessLock] = []
        # Per node: holder -> resourceVersion at which we saw its lock go (None: still held).
        self._unsettled: dict[str, dict[PodKey, str | None]] = {}

    def lock_changed(self, entry: NodeEntry, value: str | None) -> None:
        """The node's lock is now `value`: index its holder, and note when an unsettled
        holder's lock went."""
        old = lock_key(entry.lock())
        if old is not None:
            pending = self._unsettled.get(entry.name)
            if pending is not None and old in pending:
                pending[old] = entry.resource_version  # released (or replaced) at this version
            nodes = self._locked_by.get(old)
            if nodes is not None:
                nodes.discard(entry.name)
                if not nodes:
                    del self._locked_by[old]
        entry.lock_value = value
        new = lock_key(entry.lock())
        if new is not None:
            self._locked_by.setdefault(new, set()).add(entry.name)

    def judge_new_holder(self, entry: NodeEntry) -> None:
        """A lock just appeared: is its holder one we already know to be done with it?"""
        key = lock_key(entry.lock())
        record = self._pods.named(key) if key is not None else None
        if key is not None and record is not None:
            self.judge(key, record.state)

    def judge(self, key: PodKey, state: purpose.HolderState | None) -> None:
        """Queue the locks naming pod `key` that it no longer needs (None: the pod is gone)."""
        for node in sorted(self._locked_by.get(key, ())):
            entry = self._nodes.get(node)
            if entry is None or not entry.lock_value:
                continue
            reason = purpose.HOLDER_GONE if state is None else purpose.state_reason(state, node)
            if reason is not None:
                self._needless.append(NeedlessLock(node, entry.lock_value, f"{key[0]}/{key[1]}", reason))

    def locks_any(self, key: PodKey) -> bool:
        """Some node's lock names this pod."""
        return key in self._locked_by

    def holders(self) -> list[PodKey]:
        return list(self._locked_by)

    def needless(self, node: str) -> str | None:
        """Why the current lock of `node` is no longer needed, as far as the watch has shown
        its holder (None: needed, or the holder is not known here)."""
        entry = self._nodes.get(node)
        key = lock_key(entry.lock()) if entry is not None else None
        record = self._pods.named(key) if key is not None else None
        return purpose.state_reason(record.state, node) if record is not None else None

    def take_needless(self) -> list[NeedlessLock]:
        found, self._needless = self._needless, []
        return list({(lock.node, lock.value): lock for lock in found}.values())

    def note_holder(self, entry: NodeEntry) -> None:
        """A holder of the node's lock whose allocation is not counted yet, and not ours:
        binds to the node wait until it settles."""
        key = lock_key(entry.lock())
        if key is None or self._placements.knows(key):
            return  # nobody named, or our own bind
        record = self._pods.named(key)
        if record is not None and record.node == entry.name:
            return  # its allocation is already counted
        self._unsettled.setdefault(entry.name, {}).setdefault(key, None)

    def counted(self, node: str, key: PodKey) -> None:
        """The pod's allocation on `node` is in the cache: it is settled there."""
        pending = self._unsettled.get(node)
        if pending:
            pending.pop(key, None)

    def gone(self, key: PodKey) -> None:
        """The pod is deleted: no node waits for it any more."""
        for pending in self._unsettled.values():
            pending.pop(key, None)

    def stop_waiting(self, node: str) -> None:
        """The node's pods were read from the API: every earlier holder is accounted for."""
        self._unsettled.pop(node, None)

    def settled(self, node: str) -> bool:
        """True when every earlier lock holder of `node` is accounted for. resourceVersions
        are compared as numbers, which etcd's are; anything else counts as unsettled."""
        pending = self._unsettled.get(node)
        if not pending:
            return True
        seen = self._pods.resource_version
        for key, released in list(pending.items()):
            if released is not None and released.isdigit() and seen.isdigit() and int(seen) >= int(released):
                del pending[key]
        return not pending
