"""The object store: raw dicts, one global resourceVersion, a bounded event history, and
watch fan-out. Thread-safe: request handlers (on the server's loop) and test or harness
threads use it at the same time."""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]

KINDS = {
    "nodes": ("Node", "v1"),
    "pods": ("Pod", "v1"),
    "namespaces": ("Namespace", "v1"),
    "events": ("Event", "v1"),
    "secrets": ("Secret", "v1"),
    "configmaps": ("ConfigMap", "v1"),
    "mutatingwebhookconfigurations": ("MutatingWebhookConfiguration", "admissionregistration.k8s.io/v1"),
}
CLUSTER_SCOPED = {"nodes", "namespaces", "mutatingwebhookconfigurations"}


class StoreError(Exception):
    """Answered as a v1 Status with this code and reason."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Change:
    """One committed write: what a watch turns into ADDED / MODIFIED / DELETED."""

    rv: int
    resource: str
    type: str
    old: JSON | None
    new: JSON | None


Key = tuple[str, str, str]  # resource, namespace ("" when cluster scoped), name


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def with_kind(resource: str, obj: JSON) -> JSON:
    kind, api_version = KINDS[resource]
    return {"kind": kind, "apiVersion": api_version, **obj}


class Store:
    def __init__(self, history: int = 10000) -> None:
        self._objects: dict[Key, JSON] = {}
        self._rv = 1
        self._history: deque[Change] = deque(maxlen=history)
        self._oldest_rv = 1
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._subscribers: list[Callable[[Change], None]] = []

    # --- reads ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    def get(self, resource: str, namespace: str, name: str) -> JSON:
        with self._lock:
            obj = self._objects.get(self._key(resource, namespace, name))
            if obj is None:
                raise StoreError(404, "NotFound", f'{resource} "{name}" not found')
            return copy.deepcopy(obj)

    def list(self, resource: str, namespace: str | None = None,
             predicate: Callable[[JSON], bool] = lambda _o: True) -> tuple[list[JSON], str]:
        with self._lock:
            items = [copy.deepcopy(obj) for (res, ns, _), obj in self._objects.items()
                     if res == resource and (namespace is None or ns == namespace) and predicate(obj)]
            return items, str(self._rv)

    # --- writes --------------------------------------------------------------------------

    def create(self, resource: str, namespace: str, obj: JSON) -> JSON:
        with self._lock:
            meta = obj.setdefault("metadata", {})
            if not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix:
                    raise StoreError(422, "Invalid", f"{resource}: metadata.name or generateName is required")
                meta["name"] = prefix + uuid.uuid4().hex[:5]
            key = self._key(resource, namespace, meta["name"])
            if key in self._objects:
                raise StoreError(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists')
            if resource not in CLUSTER_SCOPED:
                meta["namespace"] = namespace
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            obj.pop("kind", None)
            obj.pop("apiVersion", None)
            self._commit(key, resource, "ADDED", None, obj)
            return copy.deepcopy(obj)

    def update(self, resource: str, namespace: str, name: str, change: Callable[[JSON], JSON],
               precondition_rv: str | None = None) -> JSON:
        """Apply `change` to a copy of the stored object and store the result atomically.
        A stale `precondition_rv` is a 409 Conflict, as a real API server answers."""
        with self._lock:
            key = self._key(resource, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise StoreError(404, "NotFound", f'{resource} "{name}" not found')
            if precondition_rv is not None and precondition_rv != current["metadata"].get("resourceVersion"):
                raise StoreError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object '
                                 "has been modified; please apply your changes to the latest version and try again")
            updated = change(copy.deepcopy(current))
            meta = updated.setdefault("metadata", {})
            # Identity fields are the server's, whatever the patch said.
            for field in ("name", "namespace", "uid", "creationTimestamp"):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
            updated.pop("kind", None)
            updated.pop("apiVersion", None)
            self._commit(key, resource, "MODIFIED", current, updated)
            return copy.deepcopy(updated)

    def delete(self, resource: str, namespace: str, name: str) -> JSON:
        with self._lock:
            key = self._key(resource, namespace, name)
            current = self._objects.get(key)
            if current is None:
                raise StoreError(404, "NotFound", f'{resource} "{name}" not found')
            final = copy.deepcopy(current)
            self._rv += 1
            final["metadata"]["resourceVersion"] = str(self._rv)
            del self._objects[key]
            self._publish(Change(self._rv, resource, "DELETED", current, final))
            return copy.deepcopy(final)

    # --- watch support -------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Change], None]) -> Callable[[], None]:
        """Call `callback` (under the store lock: keep it short) for every change from now on."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def changes_since(self, rv: int) -> list[Change]:
        """Changes strictly after `rv`; StoreError 410 when they left the history."""
        with self._lock:
            if rv < self._oldest_rv - 1:
                raise StoreError(410, "Expired", f"too old resource version: {rv} ({self._rv})")
            return [c for c in self._history if c.rv > rv]

    def compact(self) -> None:
        """Forget the history, as etcd compaction does: older watches get 410."""
        with self._lock:
            self._history.clear()
            self._oldest_rv = self._rv + 1

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
        """Block until `predicate()` holds (re-checked after every write) or the timeout ends."""
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
        return (resource, "" if resource in CLUSTER_SCOPED else namespace, name)

    def _commit(self, key: Key, resource: str, kind: str, old: JSON | None, new: JSON) -> None:
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[key] = new
        self._publish(Change(self._rv, resource, kind, old, copy.deepcopy(new)))

    def _publish(self, change: Change) -> None:
        if len(self._history) == self._history.maxlen:
            self._oldest_rv = self._history[0].rv + 1
        self._history.append(change)
        for callback in list(self._subscribers):
            callback(change)
        self._changed.notify_all()
