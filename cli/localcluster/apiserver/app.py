"""The aiohttp application: the Kubernetes REST subset our components use.

One catch-all route parses the path itself, because the core API's paths overlap
(`/api/v1/nodes/n1/status` and `/api/v1/namespaces/ns/pods` have the same shape).
Responses serialize stored objects directly (the store never mutates a committed object),
so a request costs at most the one copy the store makes for the write itself.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from hami_dcu.cli.localcluster.apiserver.discovery import add_discovery_routes
from hami_dcu.cli.localcluster.apiserver.faults import AFTER_COMMIT, ERROR_AFTER_COMMIT, LOST_AFTER_COMMIT, Faults
from hami_dcu.cli.localcluster.apiserver.hooks import (
    CREATE,
    UPDATE,
    AdmissionAttributes,
    AdmissionDenied,
    AdmissionHook,
)
from hami_dcu.cli.localcluster.apiserver.patching import JSON_PATCH, PatchError, apply_patch
from hami_dcu.cli.localcluster.apiserver.resources import (
    CLUSTER_SCOPED,
    JSON,
    KINDS,
    SUBRESOURCES,
    clone,
    now_rfc3339,
    status_body,
    with_kind,
)
from hami_dcu.cli.localcluster.apiserver.selectors import (
    Predicate,
    SelectorError,
    combine,
    field_selector,
    label_selector,
)
from hami_dcu.cli.localcluster.apiserver.store import Store, StoreError, conflict
from hami_dcu.cli.localcluster.apiserver.strategy import prepare_create, prepare_update
from hami_dcu.cli.localcluster.apiserver.tables import table, wants_table
from hami_dcu.cli.localcluster.apiserver.watches import Watches
from hami_dcu.common.protocol.codec import format_rfc3339

log = logging.getLogger(__name__)

_dumps = functools.partial(json.dumps, separators=(",", ":"))
DEFAULT_WATCH_SECONDS = 1800.0  # kube's --min-request-timeout
_SNAPSHOTS_KEPT = 64  # paged lists in progress; an older continue token gets 410 Expired
# kube answers DELETE with the object for these, and with a Success Status otherwise.
RETURNS_DELETED_OBJECT = frozenset({"pods", "namespaces"})
VERSION = {"major": "1", "minor": "33", "gitVersion": "v1.33.0-hami-local", "gitCommit": "0" * 40,
           "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0",
           "compiler": "gc", "platform": "linux/amd64"}
# Who a request without a known bearer token is: the local cluster's administrator.
DEFAULT_USER: JSON = {"username": "local-cluster", "groups": ["system:masters", "system:authenticated"]}
# How often an admitted update is worked out again when the pod changed under it (kube's
# GuaranteedUpdate retries the same way when the client set no resourceVersion).
_ADMITTED_UPDATE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Target:
    """What a URL addresses. `namespace` is None for cluster-scoped resources and for
    all-namespace collections (`GET /api/v1/pods`)."""

    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None


def error_response(code: int, reason: str, message: str, details: JSON | None = None) -> web.Response:
    return web.json_response(status_body(code, reason, message, details), status=code, dumps=_dumps)


def object_response(resource: str, obj: JSON, status: int = 200) -> web.Response:
    # Single objects carry kind and apiVersion, as from kube-apiserver; list items do not.
    return web.json_response(with_kind(resource, obj), status=status, dumps=_dumps)


def _path_not_found(path: str) -> StoreError:
    return StoreError(404, "NotFound", f"the server could not find the requested resource ({path})")


def parse_path(path: str) -> Target:
    """`/api/v1[/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]`, and the same under
    `/apis/{group}/{version}` for the group resources."""
    group_version, rest = _group_version(path)
    namespace = None
    # `namespaces/x/pods...` is a namespaced path; `namespaces/x[/status]` is a Namespace.
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in KINDS:
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3 or rest[0] not in KINDS or KINDS[rest[0]][1] != group_version:
        raise _path_not_found(path)
    target = Target(rest[0], namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)
    if not _served(target):
        raise _path_not_found(path)
    return target


def _group_version(path: str) -> tuple[str, list[str]]:
    """The API group/version a path names, and the parts after it."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        return "v1", parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return f"{parts[1]}/{parts[2]}", parts[3:]
    raise _path_not_found(path)


def _served(target: Target) -> bool:
    """Whether the resource's scope allows the namespace given, and it has that subresource."""
    cluster_scoped = target.resource in CLUSTER_SCOPED
    if cluster_scoped and target.namespace is not None:
        return False
    if not cluster_scoped and target.namespace is None and target.name is not None:
        return False  # `/api/v1/pods/x`: objects need their namespace
    return target.subresource is None or target.subresource in SUBRESOURCES.get(target.resource, ())


def _object_at(obj: JSON, key: str) -> JSON:
    """obj[key] when it is an object; else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _is_true(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


class ApiApp:
    """Routes plus the hooks the server exposes: `admission` (see hooks.py) and
    `bookmark_interval` (seconds between BOOKMARKs on watches that allow them; None, the
    default, sends none, which real servers may also do). `users` maps bearer tokens to the
    userInfo admission sees (an unknown token is DEFAULT_USER: tokens are not checked)."""

    def __init__(self, store: Store, faults: Faults) -> None:
        self.store = store
        self.faults = faults
        self.admission: AdmissionHook | None = None
        self.users: dict[str, JSON] = {}
        self.bookmark_interval: float | None = None
        self.graceful_pod_deletion = False
        self.watches = Watches(store)
        # Paged lists: the rest of each list snapshot by continue token (oldest dropped first).
        self._snapshots: dict[str, tuple[list[JSON], str]] = {}
        self._next_token = 0
        self.app = web.Application(client_max_size=8 * 1024 * 1024)
        self.app.on_shutdown.append(self._end_watches)
        for version in ("/version", "/version/"):  # the generated VersionApi asks for "/version/"
            self.app.router.add_get(version, self._version)
        for probe in ("/healthz", "/livez", "/readyz"):
            self.app.router.add_get(probe, self._healthy)
        add_discovery_routes(self.app)  # what kubectl asks first (hami-dcu demo --keep)
        self.app.router.add_route("*", "/{tail:.*}", self.dispatch)

    async def _end_watches(self, _app: web.Application) -> None:
        self.watches.end_all()

    async def _version(self, _request: web.Request) -> web.Response:
        return web.json_response(VERSION)

    async def _healthy(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        fault, delay = self.faults.decide(request.method, request.path)
        if delay:
            await asyncio.sleep(delay)
        if fault is not None and fault not in AFTER_COMMIT:
            return self._injected(fault, request.path)
        answer = await self._answer(request)
        if fault == ERROR_AFTER_COMMIT:
            return error_response(500, "InternalError", "Internal error occurred: injected fault after commit")
        if fault == LOST_AFTER_COMMIT:
            # The write is in the store; the client never hears so (a timeout, a dropped
            # connection behind a load balancer).
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        return answer

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        try:
            target = parse_path(request.path)
            return await self._serve(request, target)
        except StoreError as exc:
            return error_response(exc.code, exc.reason, exc.message, exc.details)
        except SelectorError as exc:
            return error_response(400, "BadRequest", str(exc))
        except Exception as exc:  # a bug here must still answer like an API server
            log.exception("local API server: %s %s failed", request.method, request.path)
            return error_response(500, "InternalError", f"Internal error occurred: {exc!r}")

    def _injected(self, fault: str, path: str) -> web.Response:
        if fault == "409":
            try:
                t = parse_path(path)
                exc = conflict(t.resource, t.name or "")
            except StoreError:
                exc = StoreError(409, "Conflict", "the object has been modified; please apply your changes to the "
                                 "latest version and try again")
            return error_response(409, "Conflict", exc.message, exc.details)
        return error_response(500, "InternalError", "Internal error occurred: injected fault")

    async def _serve(self, request: web.Request, t: Target) -> web.StreamResponse:
        method = request.method
        ns = t.namespace or ""
        if t.name is None:
            if method == "GET":
                if _is_true(request.query.get("watch")):
                    return await self._watch(request, t)
                return self._list(request, t)
            if method == "POST" and (t.namespace is not None or t.resource in CLUSTER_SCOPED):
                return await self._create(request, t)
        elif t.subresource is None or t.subresource == "status":
            if method == "GET":
                obj = self.store.get(t.resource, ns, t.name, copy=False)
                if wants_table(request.headers.get("Accept", "")):
                    return web.json_response(table(t.resource, [obj], obj["metadata"].get("resourceVersion", "")),
                                             dumps=_dumps)
                return object_response(t.resource, obj)
            if method == "PUT":
                return await self._replace(request, t)
            if method == "PATCH":
                return await self._patch(request, t)
            if method == "DELETE" and t.subresource is None:
                return await self._delete(request, t)
        elif t.subresource == "binding" and method == "POST":
            return await self._bind(request, t)
        return error_response(405, "MethodNotAllowed", f"the server does not allow this method on the requested "
                              f"resource ({method} {request.path})")

    # --- verbs ---------------------------------------------------------------------------

    def _predicate(self, request: web.Request, t: Target) -> Predicate | None:
        return combine(field_selector(request.query.get("fieldSelector"), t.resource),
                       label_selector(request.query.get("labelSelector")))

    def _list(self, request: web.Request, t: Target) -> web.Response:
        token = request.query.get("continue")
        if token:
            snapshot = self._snapshots.pop(token, None)
            if snapshot is None:
                return error_response(410, "Expired", "The provided continue parameter is too old to display a "
                                      "consistent list result. You can start a new list without the continue "
                                      "parameter.")
            items, rv = snapshot
        else:
            items, rv = self.store.list(t.resource, t.namespace, self._predicate(request, t), copy=False)
        if wants_table(request.headers.get("Accept", "")):  # kubectl get: server-side printing
            return web.json_response(table(t.resource, items, rv), dumps=_dumps)
        metadata: JSON = {"resourceVersion": rv}
        limit = _int_query(request, "limit")
        if limit and len(items) > limit:
            # As kube-apiserver: every page shows the first page's snapshot (stored objects are
            # never mutated, so keeping references is a consistent snapshot).
            items, rest = items[:limit], items[limit:]
            self._next_token += 1
            next_token = f"page-{self._next_token}"
            self._snapshots[next_token] = (rest, rv)
            while len(self._snapshots) > _SNAPSHOTS_KEPT:
                self._snapshots.pop(next(iter(self._snapshots)))
            metadata.update({"continue": next_token, "remainingItemCount": len(rest)})
        kind, api_version = KINDS[t.resource]
        return web.json_response({"kind": f"{kind}List", "apiVersion": api_version,
                                  "metadata": metadata, "items": items}, dumps=_dumps)

    async def _create(self, request: web.Request, t: Target) -> web.Response:
        obj = await _json_object(request)
        ns = t.namespace or ""
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        if t.resource not in CLUSTER_SCOPED:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise StoreError(400, "BadRequest", "the namespace of the provided object does not match the "
                                 "namespace sent on the request")
            self.store.get("namespaces", "", ns, copy=False)  # 404 for a missing namespace, as kube does
        prepare_create(t.resource, obj)
        hook = self.admission
        if t.resource == "pods" and hook is not None:
            obj = await self._admit(hook, request, CREATE, t, obj)
            prepare_create(t.resource, obj)
        return object_response(t.resource, self.store.create(t.resource, ns, obj, copy=False), status=201)

    def user_of(self, request: web.Request) -> JSON:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        return self.users.get(token, DEFAULT_USER) if scheme.lower() == "bearer" else DEFAULT_USER

    async def _admit(self, hook: AdmissionHook, request: web.Request, operation: str, t: Target, obj: JSON,
                     old: JSON | None = None) -> JSON:
        namespace = t.namespace or ""
        name = t.name or (obj.get("metadata") or {}).get("name") or ""
        attributes = AdmissionAttributes(operation, t.resource, t.subresource or "", namespace, name, obj, old,
                                         self.store.find("namespaces", "", namespace), self.user_of(request))
        try:
            admitted = await hook(attributes)
        except AdmissionDenied as exc:
            raise StoreError(exc.code, exc.reason, exc.message) from exc
        if not isinstance(admitted, dict):
            raise StoreError(500, "InternalError", "Internal error occurred: admission returned no object")
        return admitted

    async def _update(self, request: web.Request, t: Target, change: Callable[[JSON], JSON],
                      precondition: str | None) -> JSON:
        """store.update, with admission in between where a hook is set: the pod as it would be
        stored is admitted, then committed only if the stored pod is still the one it was worked
        out from (else worked out and admitted again, unless the client named a version)."""
        ns, name = t.namespace or "", t.name or ""
        hook = self.admission
        if hook is None or t.resource != "pods":
            return self.store.update(t.resource, ns, name, change, precondition_rv=precondition, copy=False)
        for _ in range(_ADMITTED_UPDATE_ATTEMPTS):
            current = self.store.get(t.resource, ns, name)
            version = current["metadata"].get("resourceVersion")
            if precondition is not None and precondition != version:
                raise conflict(t.resource, name)
            proposed = change(clone(current))
            meta = proposed.get("metadata")
            if isinstance(meta, dict):  # what the store keeps of the old object, as the webhook will see it
                meta.update({k: v for k, v in current["metadata"].items()
                             if k in ("name", "namespace", "uid", "creationTimestamp")})
            admitted = await self._admit(hook, request, UPDATE, t, proposed, current)
            try:
                return self.store.update(t.resource, ns, name, _replacing_with(admitted),
                                         precondition_rv=version, copy=False)
            except StoreError as exc:
                if exc.code != 409 or precondition is not None:
                    raise
        raise conflict(t.resource, name)

    async def _replace(self, request: web.Request, t: Target) -> web.Response:
        body = await _json_object(request)
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != t.name:
            raise StoreError(400, "BadRequest", f"the name of the object ({meta['name']}) does not match the name "
                             f"on the URL ({t.name})")
        if not meta.get("name"):
            raise StoreError(422, "Invalid", f"{t.resource} \"{t.name}\" is invalid: metadata.name: Required value")

        def change(current: JSON) -> JSON:
            return prepare_update(t.resource, t.subresource, current, body)

        updated = await self._update(request, t, change, meta.get("resourceVersion") or None)
        return object_response(t.resource, updated)

    async def _patch(self, request: web.Request, t: Target) -> web.Response:
        body = await _json_body(request)
        content_type = request.headers.get("Content-Type", "")
        precondition = None
        if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
            # A merge patch carrying a resourceVersion is a compare-and-swap, as in kube-apiserver.
            precondition = body["metadata"].get("resourceVersion")
        json_patch = content_type.split(";")[0].strip().lower() == JSON_PATCH

        def change(current: JSON) -> JSON:
            try:
                # JSON patch works in place, and prepare_update still needs the old object.
                patched = apply_patch(clone(current) if json_patch else current, content_type, body)
            except PatchError as exc:
                raise StoreError(exc.code, exc.reason, str(exc)) from exc
            return prepare_update(t.resource, t.subresource, current, patched)

        updated = await self._update(request, t, change, precondition)
        return object_response(t.resource, updated)

    async def _delete(self, request: web.Request, t: Target) -> web.Response:
        # propagationPolicy is accepted and ignored; DeleteOptions preconditions are honoured.
        # gracePeriodSeconds counts only with graceful_pod_deletion (see _mark_for_deletion).
        body = await _json_body(request)
        preconditions = (body or {}).get("preconditions") or {} if isinstance(body, dict) else {}
        ns = t.namespace or ""
        if t.resource == "pods" and self.graceful_pod_deletion:
            marked = self._mark_for_deletion(ns, t.name or "", body if isinstance(body, dict) else {},
                                             request.query.get("gracePeriodSeconds"))
            if marked is not None:
                return object_response(t.resource, marked)
        deleted = self.store.delete(t.resource, ns, t.name or "", uid=preconditions.get("uid"),
                                    resource_version=preconditions.get("resourceVersion"), copy=False)
        if t.resource == "namespaces":
            self._delete_namespace_contents(t.name or "")
        if t.resource in RETURNS_DELETED_OBJECT:
            return object_response(t.resource, deleted)
        details = {"name": t.name, "kind": t.resource, "uid": deleted["metadata"].get("uid")}
        return web.json_response(status_body(200, "", "", details), dumps=_dumps)

    def _mark_for_deletion(self, namespace: str, name: str, options: JSON, query_grace: str | None) -> JSON | None:
        """kube-apiserver's graceful deletion of a pod (pod strategy CheckGracefulDelete): a pod
        bound to a node, not yet terminal, with a grace period > 0 only gets deletionTimestamp
        and deletionGracePeriodSeconds; its kubelet stops it and deletes it with grace 0. None
        when the pod is to be deleted now."""
        try:
            pod = self.store.get("pods", namespace, name)
        except StoreError:
            return None
        grace = options.get("gracePeriodSeconds", query_grace)
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        try:
            grace = int(grace)
        except (TypeError, ValueError):
            return None
        phase = (pod.get("status") or {}).get("phase")
        if grace <= 0 or not (pod.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
            return None
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return pod  # already terminating: a second DELETE changes nothing

        def mark(current: JSON) -> JSON:
            meta = current.setdefault("metadata", {})
            meta["deletionTimestamp"] = format_rfc3339(datetime.now(UTC) + timedelta(seconds=grace))
            meta["deletionGracePeriodSeconds"] = grace
            return current

        return self.store.update("pods", namespace, name, mark)

    def _delete_namespace_contents(self, namespace: str) -> None:
        # What the namespace controller eventually does; done at once here.
        for resource in KINDS:
            if resource in CLUSTER_SCOPED:
                continue
            items, _ = self.store.list(resource, namespace, copy=False)
            for item in items:
                try:
                    self.store.delete(resource, namespace, item["metadata"]["name"], copy=False)
                except StoreError:
                    pass  # deleted concurrently

    async def _bind(self, request: web.Request, t: Target) -> web.Response:
        body = await _json_object(request)
        meta = _object_at(body, "metadata")
        target = _object_at(body, "target")
        if meta.get("name") != t.name:
            raise StoreError(400, "BadRequest", "name in URL does not match name in Binding object")
        if not target.get("name"):
            raise StoreError(400, "BadRequest", "target.name: Required value")
        if target.get("kind", "") not in ("", "Node"):
            raise StoreError(400, "BadRequest", f'target.kind: Unsupported value: "{target.get("kind")}": supported '
                             'values: "", "Node"')
        if self.admission is not None:
            # The Binding is admitted as kube-apiserver admits it: CREATE of pods/binding.
            binding = {**body, "metadata": {**meta, "namespace": t.namespace or ""}}
            admitted = await self._admit(self.admission, request, CREATE, t, binding)
            meta = _object_at(admitted, "metadata")
        node = target["name"]
        annotations = meta.get("annotations") or {}

        def bind(pod: JSON) -> JSON:
            pod_meta = pod["metadata"]
            if meta.get("uid") and meta["uid"] != pod_meta.get("uid"):
                raise StoreError(409, "Conflict", f"Precondition failed: UID in precondition: {meta['uid']}, "
                                 f"UID in object meta: {pod_meta.get('uid')}", {"name": t.name, "kind": "pods"})
            if meta.get("resourceVersion") and meta["resourceVersion"] != pod_meta.get("resourceVersion"):
                raise conflict("pods", t.name or "")
            if pod_meta.get("deletionTimestamp"):
                raise StoreError(409, "Conflict", f"pod {t.name} is being deleted, cannot be assigned to a host")
            spec = pod.setdefault("spec", {})
            if spec.get("nodeName"):
                raise StoreError(409, "Conflict", f'pod {t.name} is already assigned to node "{spec["nodeName"]}"')
            if spec.get("schedulingGates"):
                raise StoreError(409, "Conflict", f"pod {t.name} has non-empty .spec.schedulingGates")
            spec["nodeName"] = node
            if annotations:
                pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **annotations}
            status = pod.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                               "lastTransitionTime": now_rfc3339()})
            status["conditions"] = conditions
            return pod

        self.store.update("pods", t.namespace or "", t.name or "", bind, copy=False)
        # kube answers a Binding with a Status, not the Binding.
        return web.json_response(status_body(201, "", ""), status=201, dumps=_dumps)
    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        # Everything that can fail with a 4xx is checked before the 200 is sent.
        predicate = self._predicate(request, t)
        timeout = _float_query(request, "timeoutSeconds") or DEFAULT_WATCH_SECONDS
        interval = self.bookmark_interval if _is_true(request.query.get("allowWatchBookmarks")) else None
        return await self.watches.serve(request, t, predicate, timeout, interval)


def _replacing_with(obj: JSON) -> Callable[[JSON], JSON]:
    """A store.update change that writes `obj` whatever is stored."""
    return lambda _latest: obj


def _int_query(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    if value is None or value == "":
        return None
    if not value.isdigit():
        raise StoreError(400, "BadRequest", f"{name}: expected a whole number, got {value!r}")
    return int(value)


def _float_query(request: web.Request, name: str) -> float | None:
    text = request.query.get(name)
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise StoreError(400, "BadRequest", f"invalid {name}: {text!r}") from None


async def _json_body(request: web.Request) -> Any:
    # Whatever the Content-Type says (the 37.x client sends none on POST), the body is JSON.
    raw = await request.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise StoreError(400, "BadRequest", f"the body of the request is not valid JSON: {exc}") from exc


async def _json_object(request: web.Request) -> JSON:
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise StoreError(400, "BadRequest", "the body of the request must be a JSON object")
    return body
