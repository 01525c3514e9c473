"""The quota ledger's I/O (dra/quotagate.py says what it is and why): the namespace's DCU
limits read from its ResourceQuotas, and the ledger ConfigMap read and replaced with a
compare-and-swap. The decisions are quotagate's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from hami_dcu.common.io.kube import ConflictError, Kube, KubeError, NotFoundError
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.quota import QuotaLimits, limits_from
from hami_dcu.dra import quotagate
from hami_dcu.dra.core import PrepareFailed
from hami_dcu.dra.quotagate import Entry, Held

log = logging.getLogger(__name__)
JSON = dict[str, Any]
ATTEMPTS = 10  # replaces lost to other drivers' before a Prepare gives up (the kubelet retries it)
FROM_CACHE = {"resourceVersion": "0"}


class QuotaRefused(PrepareFailed):
    """The claim does not fit its namespace's DCU quota beside the claims already prepared."""


class QuotaLedger:
    def __init__(self, kube: Kube, namespace: str, name: str, node: str, resources: ResourceNames,
                 wall: Callable[[], float] = time.time) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.node = node
        self.resources = resources
        self.wall = wall

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}"

    def limits(self, namespace: str) -> QuotaLimits:
        """The namespace's DCU limits (from the API server's cache: quotas change rarely, and a
        quota set a moment ago is the webhook's to enforce first). Raises KubeError."""
        listed = self.kube.request("GET", f"/api/v1/namespaces/{namespace}/resourcequotas", query=FROM_CACHE)
        return limits_from(listed.get("items") or [], self.resources)

    def enter(self, namespace: str, claim: str, uid: str, held: Held, limits: QuotaLimits,
              prepared: Callable[[], Iterable[str]]) -> None:
        """Add claim `uid` to the ledger when it fits; raises QuotaRefused when it does not,
        PrepareFailed when the ledger cannot be read or written."""
        who = f"ResourceClaim {namespace}/{claim}"
        for _attempt in range(ATTEMPTS):
            ledger = self._read(who)
            data = dict(ledger.get("data") or {})
            entries = quotagate.read_namespace(data, namespace)
            if uid in entries:
                return  # a Prepare tried again: its claim is counted already
            now = self.wall()
            for leftover in quotagate.leftovers(entries, self.node, prepared(), now):
                del entries[leftover]
            problem = quotagate.refusal(limits, entries, uid, held, self.resources)
            if problem is not None:
                for gone in self._gone_nodes(entries):
                    entries = {u: e for u, e in entries.items() if e.node != gone}
                problem = quotagate.refusal(limits, entries, uid, held, self.resources)
            if problem is not None:
                raise QuotaRefused(f"{who} {problem} (the DCU quota of namespace {namespace}, counted over the "
                                   f"claims prepared on every node; it is prepared once others are released)")
            entries[uid] = Entry(claim=claim, node=self.node, held=held, since=now)
            if self._replace(ledger, quotagate.write_namespace(data, namespace, entries), who):
                log.info("node %s: %s counted against the DCU quota of namespace %s (%d MiB, %s%% of a card)",
                         self.node, who, namespace, held.memory, held.cores)
                return
        raise PrepareFailed(f"{who}: the DCU quota ledger {self.namespace}/{self.name} changed under {ATTEMPTS} "
                            "attempts to count it; the kubelet will try again")

    def leave(self, namespace: str, uid: str) -> bool:
        """Take claim `uid` out of the ledger; True when it was there. Raises KubeError."""
        if uid not in quotagate.read_namespace(self._get(FROM_CACHE).get("data") or {}, namespace):
            return False
        for _attempt in range(ATTEMPTS):
            ledger = self._get(None)
            data = dict(ledger.get("data") or {})
            entries = quotagate.read_namespace(data, namespace)
            if entries.pop(uid, None) is None:
                return False
            try:
                self._put(ledger, quotagate.write_namespace(data, namespace, entries))
            except ConflictError:
                continue
            return True
        raise KubeError(409, "Conflict", f"the DCU quota ledger changed under {ATTEMPTS} attempts to remove {uid}")

    def prune(self, prepared: Iterable[str]) -> list[str]:
        """Remove this node's leftovers (dra/quotagate.py) in every namespace; the UIDs removed.
        Read from the cache first: most cycles find none. Raises KubeError."""
        live = set(prepared)
        found = self._leftovers(self._get(FROM_CACHE), live)
        if not found:
            return []
        for _attempt in range(ATTEMPTS):
            ledger = self._get(None)
            data = dict(ledger.get("data") or {})
            removed: list[str] = []
            for namespace in list(data):
                entries = quotagate.read_namespace(data, namespace)
                gone = quotagate.leftovers(entries, self.node, live, self.wall())
                if gone:
                    data = quotagate.write_namespace(data, namespace, {u: e for u, e in entries.items()
                                                                       if u not in gone})
                    removed += gone
            if not removed:
                return []
            try:
                self._put(ledger, data)
            except ConflictError:
                continue
            log.warning("node %s: removed %d leftover DCU quota ledger entries: %s", self.node, len(removed),
                        ", ".join(removed))
            return removed
        return []

    # --- the ConfigMap ---------------------------------------------------------------------

    def _leftovers(self, ledger: JSON, live: set[str]) -> list[str]:
        data = ledger.get("data") or {}
        return [uid for namespace in data
                for uid in quotagate.leftovers(quotagate.read_namespace(data, namespace), self.node, live, self.wall())]

    def _get(self, query: dict[str, str] | None) -> JSON:
        found: JSON = self.kube.request("GET", self.path, query=query)
        return found

    def _read(self, who: str) -> JSON:
        try:
            return self._get(None)  # authoritative: the compare-and-swap starts from the stored object
        except NotFoundError as exc:
            raise PrepareFailed(f"{who}: its namespace has a DCU quota, and the quota ledger ConfigMap "
                                f"{self.namespace}/{self.name} (made by the chart) is missing: it cannot be "
                                "counted; reinstall or upgrade the chart") from exc
        except KubeError as exc:
            raise PrepareFailed(f"{who}: cannot read the DCU quota ledger: {exc}") from exc

    def _replace(self, ledger: JSON, data: JSON, who: str) -> bool:
        try:
            self._put(ledger, data)
        except ConflictError:
            return False
        except KubeError as exc:
            raise PrepareFailed(f"{who}: cannot write the DCU quota ledger: {exc}") from exc
        return True

    def _put(self, ledger: JSON, data: JSON) -> None:
        # The object as read (its labels and Helm's annotations kept), its resourceVersion the
        # precondition: a replace after another driver's fails with a conflict.
        body = {**ledger, "apiVersion": "v1", "kind": "ConfigMap", "data": data}
        self.kube.request("PUT", self.path, body=body)

    def _gone_nodes(self, entries: dict[str, Entry]) -> list[str]:
        """Nodes of other drivers' entries that no longer exist (their driver cannot remove them)."""
        gone = []
        for node in sorted({e.node for e in entries.values() if e.node != self.node}):
            try:
                self.kube.request("GET", f"/api/v1/nodes/{node}", query=FROM_CACHE)
            except NotFoundError:
                gone.append(node)
            except KubeError:
                continue
        return gone
