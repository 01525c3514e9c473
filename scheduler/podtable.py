"""The cache's pods: the ones holding a share of a node (with their allocation), and the DCU
pods not bound yet (with what they ask).

A pod holds while it is not Succeeded/Failed and not deleted, on the node it is bound to,
read from its `dcu-devices-allocated` annotation (cacherecords.holding_node says where it
counts). Its holding sits on that node's entry under the pod's uid; this table keeps the
record the holding was made from, found by uid or by namespace/name.

Pods not bound yet that ask for DCUs are kept apart, by namespace (`WaitingPods`): in Volcano
mode an admitted pod counts against its namespace's quota from its admission, not from its
placement (scheduler/quotas.py).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from hami_dcu.scheduler.cacherecords import Holding, PodKey, PodRecord, WaitingPod, pod_holding
from hami_dcu.scheduler.nodetable import NodeTable


class PodsView(Protocol):
    """The pods holding, as the metrics and the quota book read them (the cache alone changes them)."""

    @property
    def resource_version(self) -> str: ...
    def get(self, uid: str) -> PodRecord | None: ...
    def named(self, key: PodKey) -> PodRecord | None: ...
    def __contains__(self, uid: object) -> bool: ...
    def records(self) -> list[PodRecord]: ...
    def holding(self, record: PodRecord) -> Holding | None: ...


class WaitingView(Protocol):
    """The DCU pods not bound yet, as the quota book reads them."""

    def in_namespace(self, namespace: str) -> list[WaitingPod]: ...
    def __len__(self) -> int: ...


class PodTable:
    def __init__(self, nodes: NodeTable, allocated_key: str) -> None:
        self._nodes = nodes
        self._allocated_key = allocated_key  # the naming set's dcu-devices-allocated
        self._records: dict[str, PodRecord] = {}
        self._uids: dict[PodKey, str] = {}
        # The newest resourceVersion the pod watch delivered (events and lists).
        self.resource_version = ""

    def get(self, uid: str) -> PodRecord | None:
        return self._records.get(uid)

    def named(self, key: PodKey) -> PodRecord | None:
        uid = self._uids.get(key)
        return self._records[uid] if uid is not None else None

    def __contains__(self, uid: object) -> bool:
        return uid in self._records

    def uids(self) -> Collection[str]:
        return self._records.keys()

    def records(self) -> list[PodRecord]:
        return list(self._records.values())

    def holding(self, record: PodRecord) -> Holding | None:
        """What the pod holds on its node, as counted there (None: nothing counted)."""
        entry = self._nodes.get(record.node)
        return entry.holdings.get(record.uid) if entry is not None else None

    def expected_holding(self, record: PodRecord) -> Holding:
        """What the pod's record says it holds (a relist compares the node's count with it)."""
        return pod_holding(record, self._allocated_key)

    def put(self, record: PodRecord) -> None:
        """Record the pod and count its allocation on its node."""
        self.drop(record.uid)
        self._records[record.uid] = record
        self._uids[(record.namespace, record.name)] = record.uid
        self._nodes.hold(record.node, record.uid, pod_holding(record, self._allocated_key))

    def drop(self, uid: str) -> None:
        record = self._records.pop(uid, None)
        if record is None:
            return
        self._uids.pop((record.namespace, record.name), None)
        self._nodes.release(record.node, uid)

    def saw_version(self, rv: str) -> None:
        """A pod event at `rv`: the watch has passed it (numbers only move forward)."""
        if rv.isdigit() and (not self.resource_version.isdigit() or int(rv) > int(self.resource_version)):
            self.resource_version = rv


class WaitingPods:
    """DCU pods not bound yet, by namespace then uid."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, WaitingPod]] = {}
        self._namespace_of: dict[str, str] = {}

    def put(self, uid: str, waiting: WaitingPod | None) -> None:
        """What the pod asks now (None: it asks nothing here any more, or it is bound)."""
        self.drop(uid)
        if waiting is not None:
            self._by_namespace.setdefault(waiting.namespace, {})[uid] = waiting
            self._namespace_of[uid] = waiting.namespace

    def drop(self, uid: str) -> None:
        namespace = self._namespace_of.pop(uid, None)
        if namespace is None:
            return
        pods = self._by_namespace.get(namespace)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self._by_namespace[namespace]

    def uids(self) -> list[str]:
        return list(self._namespace_of)

    def in_namespace(self, namespace: str) -> list[WaitingPod]:
        return list(self._by_namespace.get(namespace, {}).values())

    def __len__(self) -> int:
        return len(self._namespace_of)
