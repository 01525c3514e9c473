"""The aiohttp application: the Kubernetes REST subset our components use.

One catch-all route parses the path itself, because the core API's paths overlap
(`/api/v1/nodes/n1/status` and `/api/v1/namespaces/ns/pods` have the same shape).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from hami_dcu.e2e.apiserver.faults import Faults
from hami_dcu.e2e.apiserver.patching import PatchError, apply_patch
from hami_dcu.e2e.apiserver.selectors import SelectorError, combine, field_selector, label_selector
from hami_dcu.e2e.apiserver.store import CLUSTER_SCOPED, KINDS, Change, Store, StoreError, now_rfc3339, with_kind

log = logging.getLogger(__name__)
JSON = dict[str, Any]


class AdmissionDenied(Exception):
    """Raised by the admission hook: the create fails with this code and message."""

    def __init__(self, message: str, code: int = 400) -> None:
        self.code = code
        super().__init__(message)


# (resource, namespace, object, namespace object or None) -> the object to store
AdmissionHook = Callable[[str, str, JSON, JSON | None], Awaitable[JSON]]


@dataclass
class Target:
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None


def status_body(code: int, reason: str, message: str) -> JSON:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, "code": code}


def error_response(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(status_body(code, reason, message), status=code)


def parse_path(path: str) -> Target:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest = parts[2:]
    elif parts[:3] == ["apis", "admissionregistration.k8s.io", "v1"]:
        rest = parts[3:]
    else:
        raise StoreError(404, "NotFound", f"the server could not find the requested resource {path}")
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or rest[0] not in KINDS or len(rest) > 3:
        raise StoreError(404, "NotFound", f"the server could not find the requested resource {path}")
    resource = rest[0]
    if resource in CLUSTER_SCOPED and namespace is not None:
        raise StoreError(404, "NotFound", f"{resource} is not namespaced")
    return Target(resource, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)


class ApiApp:
    def __init__(self, store: Store, faults: Faults) -> None:
        self.store = store
        self.faults = faults
        self.admission: AdmissionHook | None = None
        self.app = web.Application(client_max_size=8 * 1024 * 1024)
        self.app.router.add_route("*", "/{tail:.*}", self.dispatch)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        fault, delay = self.faults.decide(request.method, request.path)
        if delay:
            await asyncio.sleep(delay)
        if fault == "500":
            return error_response(500, "InternalError", "injected fault: internal error")
        if fault == "409":
            return error_response(409, "Conflict", "injected fault: the object has been modified")
        try:
            target = parse_path(request.path)
            return await self._serve(request, target)
        except StoreError as exc:
            return error_response(exc.code, exc.reason, exc.message)
        except (SelectorError, ValueError) as exc:
            return error_response(400, "BadRequest", str(exc))

    async def _serve(self, request: web.Request, t: Target) -> web.StreamResponse:
        method = request.method
        ns = t.namespace or ""
        if t.name is None:
            if method == "GET":
                if request.query.get("watch", "").lower() in ("true", "1"):
                    return await self._watch(request, t)
                return self._list(request, t)
            if method == "POST":
                return await self._create(request, t)
        elif t.subresource is None:
            if method == "GET":
                return web.json_response(self.store.get(t.resource, ns, t.name))
            if method == "PUT":
                return await self._replace(request, t)
            if method == "PATCH":
                return await self._patch(request, t, only_status=False)
            if method == "DELETE":
                return web.json_response(self.store.delete(t.resource, ns, t.name))
        elif t.subresource == "status":
            if method == "GET":
                return web.json_response(self.store.get(t.resource, ns, t.name))
            if method == "PATCH":
                return await self._patch(request, t, only_status=True)
            if method == "PUT":
                return await self._replace(request, t, only_status=True)
        elif t.subresource == "binding" and t.resource == "pods" and method == "POST":
            return await self._bind(request, t)
        return error_response(405, "MethodNotAllowed", f"{method} is not supported on {request.path}")

    # --- verbs ---------------------------------------------------------------------------

    def _predicate(self, request: web.Request, t: Target) -> Callable[[JSON], bool]:
        return combine(field_selector(request.query.get("fieldSelector"), t.resource),
                       label_selector(request.query.get("labelSelector")))

    def _list(self, request: web.Request, t: Target) -> web.Response:
        items, rv = self.store.list(t.resource, t.namespace, self._predicate(request, t))
        kind, api_version = KINDS[t.resource]
        return web.json_response({"kind": f"{kind}List", "apiVersion": api_version,
                                  "metadata": {"resourceVersion": rv}, "items": items})

    async def _create(self, request: web.Request, t: Target) -> web.Response:
        obj = await _json_body(request)
        if not isinstance(obj, dict):
            raise StoreError(400, "BadRequest", "body must be a JSON object")
        ns = t.namespace or ""
        if t.resource not in CLUSTER_SCOPED:
            self.store.get("namespaces", "", ns)  # 404 for a missing namespace, as kube does
        if t.resource == "pods":
            _default_pod(obj)
            if self.admission is not None:
                try:
                    namespace_obj = self.store.get("namespaces", "", ns)
                    obj = await self.admission("pods", ns, obj, namespace_obj)
                except AdmissionDenied as exc:
                    return error_response(exc.code, "Forbidden" if exc.code == 403 else "BadRequest", str(exc))
        if t.resource == "namespaces":
            meta = obj.setdefault("metadata", {})
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
        return web.json_response(self.store.create(t.resource, ns, obj), status=201)

    async def _replace(self, request: web.Request, t: Target, only_status: bool = False) -> web.Response:
        body = await _json_body(request)
        if not isinstance(body, dict):
            raise StoreError(400, "BadRequest", "body must be a JSON object")
        rv = (body.get("metadata") or {}).get("resourceVersion")

        def change(current: JSON) -> JSON:
            if only_status:
                current["status"] = body.get("status", {})
                return current
            return body

        updated = self.store.update(t.resource, t.namespace or "", t.name or "", change, precondition_rv=rv)
        return web.json_response(updated)

    async def _patch(self, request: web.Request, t: Target, only_status: bool) -> web.Response:
        body = await _json_body(request)
        content_type = request.headers.get("Content-Type", "")
        precondition = None
        if isinstance(body, dict):
            precondition = (body.get("metadata") or {}).get("resourceVersion")

        def change(current: JSON) -> JSON:
            try:
                patched = apply_patch(current, content_type, body)
            except PatchError as exc:
                raise StoreError(422, "Invalid", f"the patch cannot be applied: {exc}") from exc
            if only_status:
                current["status"] = patched.get("status", {})
                return current
            return patched

        updated = self.store.update(t.resource, t.namespace or "", t.name or "", change, precondition_rv=precondition)
        return web.json_response(updated)

    async def _bind(self, request: web.Request, t: Target) -> web.Response:
        body = await _json_body(request)
        meta = (body or {}).get("metadata") or {}
        target = (body or {}).get("target") or {}
        if meta.get("name") != t.name:
            raise StoreError(400, "BadRequest", "name in URL does not match name in Binding object")
        if not target.get("name"):
            raise StoreError(422, "Invalid", "target.name: Required value")
        if target.get("kind", "") not in ("", "Node"):
            raise StoreError(422, "Invalid", f"target.kind: must be empty or Node, got {target.get('kind')}")

        def bind(pod: JSON) -> JSON:
            spec = pod.setdefault("spec", {})
            if spec.get("nodeName"):
                raise StoreError(409, "Conflict", f'pod {t.name} is already assigned to node "{spec["nodeName"]}"')
            if meta.get("uid") and meta["uid"] != pod["metadata"].get("uid"):
                raise StoreError(409, "Conflict", f"Precondition failed: UID in precondition: {meta['uid']}, "
                                 f"UID in object meta: {pod['metadata'].get('uid')}")
            if pod["metadata"].get("deletionTimestamp"):
                raise StoreError(409, "Conflict", f"pod {t.name} is being deleted, cannot be assigned to a host")
            spec["nodeName"] = target["name"]
            annotations = meta.get("annotations") or {}
            if annotations:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
            return pod

        self.store.update("pods", t.namespace or "", t.name or "", bind)
        return web.json_response(status_body(201, "", ""), status=201)

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        predicate = self._predicate(request, t)
        timeout = float(request.query.get("timeoutSeconds", "1800"))
        rv_text = request.query.get("resourceVersion", "")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Change | None] = asyncio.Queue()

        def on_change(change: Change) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, change)

        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        backlog: list[JSON] = []
        with self.store._lock:  # subscribe and read the starting point atomically: no gap, no repeat
            unsubscribe = self.store.subscribe(on_change)
            if rv_text in ("", "0"):
                items, _ = self.store.list(t.resource, t.namespace, predicate)
                backlog = [{"type": "ADDED", "object": with_kind(t.resource, o)} for o in items]
            else:
                try:
                    changes = self.store.changes_since(int(rv_text))
                except StoreError as exc:
                    unsubscribe()
                    await response.write(_line({"type": "ERROR", "object": status_body(exc.code, exc.reason,
                                                                                       exc.message)}))
                    return response
                for change in changes:
                    event = _event_for(change, t, predicate)
                    if event:
                        backlog.append(event)
        try:
            for event in backlog:
                await response.write(_line(event))
            deadline = loop.time() + timeout
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    change = await asyncio.wait_for(queue.get(), remaining)
                except TimeoutError:
                    break
                if change is None:
                    break
                event = _event_for(change, t, predicate)
                if event:
                    await response.write(_line(event))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            unsubscribe()
        return response


def _event_for(change: Change, t: Target, predicate: Callable[[JSON], bool]) -> JSON | None:
    """A change as this watcher sees it: objects leaving its selector are DELETED for it,
    objects entering it are ADDED."""
    if change.resource != t.resource:
        return None
    obj = change.new or change.old or {}
    if t.namespace is not None and (obj.get("metadata") or {}).get("namespace") != t.namespace:
        return None
    old_match = change.old is not None and predicate(change.old)
    new_match = change.new is not None and predicate(change.new)
    if change.type == "DELETED":
        kind = "DELETED" if old_match else None
        obj = change.new or change.old or {}
    elif old_match and new_match:
        kind = "MODIFIED"
    elif new_match:
        kind = "ADDED"
    elif old_match:
        kind = "DELETED"
    else:
        kind = None
    if kind is None:
        return None
    return {"type": kind, "object": with_kind(t.resource, obj)}


def _line(event: JSON) -> bytes:
    return (json.dumps(event, separators=(",", ":")) + "\n").encode()


async def _json_body(request: web.Request) -> Any:
    # The 37.x client sends no Content-Type on POST: the body is JSON whatever the header says.
    raw = await request.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise StoreError(400, "BadRequest", f"request body is not JSON: {exc}") from exc


def _default_pod(pod: JSON) -> None:
    """What API-server defaulting does before admission, for the fields we read."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("schedulerName", "default-scheduler")
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
