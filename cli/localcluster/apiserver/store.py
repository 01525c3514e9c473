"""The object store: raw dicts, one global resourceVersion, a bounded event history, and
watch fan-out.

Thread-safe: request handlers (on the server's loop) and test or harness threads use it at
the same time. Stored objects are never mutated after they are committed; every write
stores a new dict. That discipline lets the HTTP layer serialize stored objects and let
watch events share them without copying (pass `copy=False`), while in-process callers get
private copies by default.
"""

from __future__ import annotations

import builtins
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from hami_dcu.cli.localcluster.apiserver.patching import STRATEGIC, PatchError, apply_patch
from hami_dcu.cli.localcluster.apiserver.resources import CLUSTER_SCOPED, JSON, KINDS, clone, now_rfc3339
from hami_dcu.common.protocol.errors import CliError


class StoreError(CliError):
    """Answered as a v1 Status with this code, reason and (optional) details."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        super().__init__(message)


def not_found(resource: str, name: str) -> StoreError:
    return StoreError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})


def conflict(resource: str, name: str) -> StoreError:
    # The exact text of kube-apiserver's optimistic-concurrency failure; clients grep for it.
    return StoreError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object has been '
                      "modified; please apply your changes to the latest version and try again",
                      {"name": name, "kind": resource})


@dataclass(frozen=True, slots=True)
class Change:
    """One committed write: what a watch turns into ADDED / MODIFIED / DELETED.
    `old` and `new` are the stored objects themselves: never mutate them."""

    rv: int
    resource: str
    type: str
    old: JSON | None
    new: JSON | None

    @property
    def object(self) -> JSON:
        """The state a watcher is shown: the new one, or the last one for a deletion."""
        obj = self.new if self.new is not None else self.old
        assert obj is not None
        return obj


Key = tuple[str, str, str]  # resource, namespace ("" when cluster scoped), name


class Store:
    """Objects by (resource, namespace, name). Namespaced resources take the namespace;
    cluster-scoped ones ignore it (pass "")."""

    def __init__(self, history: int = 10000) -> None:
        self._objects: dict[Key, JSON] = {}
        self._rv = 1
        self._history: deque[Change] = deque(maxlen=history)
        # A watch from rv=N needs every change after N: N must be >= _oldest_rv - 1.
        self._oldest_rv = 1
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._subscribers: list[Callable[[Change], None]] = []

    @property
    def lock(self) -> threading.RLock:
        """Held across a subscribe and a read to start a watch without gap or repeat."""
        return self._lock

    # --- reads ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    def get(self, resource: str, namespace: str, name: str, *, copy: bool = True) -> JSON:
        """The object, or StoreError 404. `copy=False` returns the stored dict: read only."""
        with self._lock:
            obj = self._objects.get(self._key(resource, namespace, name))
        if obj is None:
            raise not_found(resource, name)
        return clone(obj) if copy else obj

    def find(self, resource: str, namespace: str, name: str, *, copy: bool = True) -> JSON | None:
        """Like get, but None when missing."""
        with self._lock:
            obj = self._objects.get(self._key(resource, namespace, name))
        if obj is None:
            return None
        return clone(obj) if copy else obj

    def list(self, resource: str, namespace: str | None = None, predicate: Callable[[JSON], bool] | None = None,
             *, copy: bool = True) -> tuple[list[JSON], str]:
        """(matching objects, the store's resourceVersion at the time of the read).
        `namespace=None` means all namespaces."""
        with self._lock:
            items = [obj for (res, ns, _), obj in self._objects.items()
                     if res == resource and (namespace is None or ns == namespace)
                     and (predicate is None or predicate(obj))]
            rv = str(self._rv)
        return ([clone(o) for o in items] if copy else items), rv

    # --- writes --------------------------------------------------------------------------

    def create(self, resource: str, namespace: str, obj: JSON, *, copy: bool = True) -> JSON:
        """Store a new object: uid, creationTimestamp and resourceVersion are assigned,
        `generateName` is honoured, an existing name is 409 AlreadyExists.
        `copy=False` hands `obj` over to the store and returns the stored dict (read only)."""
        if copy:
            obj = clone(obj)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        obj.pop("kind", None)  # lists carry no kind; watch events add it back
        obj.pop("apiVersion", None)
        with self._lock:
            if not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix:
                    raise StoreError(422, "Invalid", f"{resource}: metadata.name: Required value: name or "
                                     "generateName is required")
                meta["name"] = self._generated_name(resource, namespace, prefix)
            key = self._key(resource, namespace, meta["name"])
            if key in self._objects:
                raise StoreError(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists',
                                 {"name": meta["name"], "kind": resource})
            if resource in CLUSTER_SCOPED:
                meta.pop("namespace", None)
            else:
                meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            self._commit(key, resource, "ADDED", None, obj)
        return clone(obj) if copy else obj

    def update(self, resource: str, namespace: str, name: str, change: Callable[[JSON], JSON],
               precondition_rv: str | None = None, *, copy: bool = True) -> JSON:
        """Apply `change` to a private copy of the stored object and store what it returns,
        atomically. A stale `precondition_rv` is 409 Conflict, as kube-apiserver answers.
        Identity fields (name, namespace, uid, creationTimestamp) stay the server's."""
        with self._lock:
            key = self._key(resource, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise not_found(resource, name)
            if precondition_rv is not None and precondition_rv != current["metadata"].get("resourceVersion"):
                raise conflict(resource, name)
            updated = change(clone(current))
            meta = updated.get("metadata")
            if not isinstance(meta, dict):
                meta = updated["metadata"] = {}
            for field in ("name", "namespace", "uid", "creationTimestamp"):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
            updated.pop("kind", None)
            updated.pop("apiVersion", None)
            self._commit(key, resource, "MODIFIED", current, updated)
        return clone(updated) if copy else updated

    def replace(self, resource: str, namespace: str, name: str, obj: JSON, *, copy: bool = True) -> JSON:
        """PUT semantics: the whole object; its metadata.resourceVersion, if set, must be current."""
        body = clone(obj) if copy else obj
        rv = (body.get("metadata") or {}).get("resourceVersion")
        return self.update(resource, namespace, name, lambda _current: body, precondition_rv=rv, copy=copy)

    def patch(self, resource: str, namespace: str, name: str, body: Any, content_type: str = STRATEGIC,
              *, copy: bool = True) -> JSON:
        """PATCH semantics (merge, strategic merge or JSON patch by content type). A merge
        patch carrying metadata.resourceVersion is a precondition (409 when stale); a patch
        that cannot be applied is 422 (415 for an unknown content type)."""
        precondition = None
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            precondition = body["metadata"].get("resourceVersion")

        def change(current: JSON) -> JSON:
            try:
                return apply_patch(current, content_type, body)
            except PatchError as exc:
                raise StoreError(exc.code, exc.reason, str(exc)) from exc

        return self.update(resource, namespace, name, change, precondition_rv=precondition, copy=copy)

    def delete(self, resource: str, namespace: str, name: str, *, uid: str | None = None,
               resource_version: str | None = None, copy: bool = True) -> JSON:
        """Remove now (no graceful termination) and return the last state, with the
        deletion's resourceVersion. `uid` / `resource_version` are DeleteOptions preconditions."""
        with self._lock:
            key = self._key(resource, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise not_found(resource, name)
            meta = current["metadata"]
            if uid is not None and uid != meta.get("uid"):
                raise StoreError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                 f"UID in object meta: {meta.get('uid')}", {"name": name, "kind": resource})
            if resource_version is not None and resource_version != meta.get("resourceVersion"):
                raise conflict(resource, name)
            self._rv += 1
            final = {**current, "metadata": {**meta, "resourceVersion": str(self._rv)}}
            del self._objects[key]
            # `old` is the last state, stamped with the deletion's rv, as DELETED events show it.
            self._publish(Change(self._rv, resource, "DELETED", final, None))
        return clone(final) if copy else final

    # --- watch support -------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Change], None]) -> Callable[[], None]:
        """Call `callback` for every change from now on, under the store lock (keep it
        short, never block). Returns the unsubscribe function."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def changes_since(self, rv: int) -> builtins.list[Change]:  # `list` in this class is the method
        """Changes strictly after `rv`; StoreError 410 Expired when some left the history."""
        with self._lock:
            if rv < self._oldest_rv - 1:
                raise StoreError(410, "Expired", f"too old resource version: {rv} ({self._rv})")
            if not self._history or rv >= self._history[-1].rv:
                return []
            # Every write bumps the rv by one, so the history is dense: index by arithmetic.
            start = max(0, rv - self._history[0].rv + 1)
            return list(islice(self._history, start, None))

    def compact(self) -> None:
        """Forget the history, as etcd compaction does: watches from older rvs get 410."""
        with self._lock:
            self._history.clear()
            self._oldest_rv = self._rv + 1

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Block until `predicate()` holds (re-checked after every write, under the store
        lock, so it may read the store) or the timeout ends; returns whether it held."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    # --- internals -----------------------------------------------------------------------

    def _key(self, resource: str, namespace: str, name: str) -> Key:
        if resource not in KINDS:
            raise StoreError(404, "NotFound", f"the server could not find the requested resource ({resource})")
        return (resource, "" if resource in CLUSTER_SCOPED else namespace, name)

    def _generated_name(self, resource: str, namespace: str, prefix: str) -> str:
        while True:  # kube retries a clash too (it answers 409 after a few tries; we just loop)
            name = prefix + uuid.uuid4().hex[:5]
            if self._key(resource, namespace, name) not in self._objects:
                return name

    def _commit(self, key: Key, resource: str, kind: str, old: JSON | None, new: JSON) -> None:
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[key] = new
        self._publish(Change(self._rv, resource, kind, old, new))

    def _publish(self, change: Change) -> None:
        if len(self._history) == self._history.maxlen:
            self._oldest_rv = self._history[0].rv + 1
        self._history.append(change)
        for callback in list(self._subscribers):
            callback(change)
        self._changed.notify_all()
