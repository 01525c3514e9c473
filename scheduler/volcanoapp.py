"""The HTTP shell of hami-dcu as upstream Volcano's extender (volcanoverbs.py decides):
`POST /volcano/<verb>` for the verbs of Volcano's extender plugin, on a listener of its own
(`--volcano-bind`), reached by Volcano's scheduler.

Each answer is HTTP 200 with the verb's own error field (volcanowire.py): a malformed request,
a cache not synced yet, a pod that cannot be placed, a write the API server refused. Only a
bug of ours is a 500 (common/protocol/errors.py's rule), logged naming the pod and node.

allocateFunc writes the allocation on the pod with a merge patch under the extender's own
identity (the ServiceAccount whose Bindings carry it on the /bind path), before Volcano binds
the pod; deallocateFunc removes it again, with the pod's resourceVersion as a precondition,
and only while the pod still carries what was written and is not bound. No node lock is taken.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from hami_dcu.common.io.body import BodyError, read_body
from hami_dcu.common.io.failures import Component, FailureReporter
from hami_dcu.common.io.kube import AsyncKube, ConflictError, KubeError, NotFoundError
from hami_dcu.common.protocol import objects, safejson
from hami_dcu.scheduler.extender import WireError
from hami_dcu.scheduler.service import SchedulerService
from hami_dcu.scheduler.volcanoevict import Purpose
from hami_dcu.scheduler.volcanoverbs import Undo, VolcanoRefused, VolcanoVerbs
from hami_dcu.scheduler.volcanowire import (
    ABSTAIN,
    ERROR,
    PERMIT,
    REJECT,
    event_reply,
    evict_reply,
    parse_event,
    parse_evict,
    parse_predicate,
    parse_prioritize,
    predicate_reply,
    prioritize_reply,
)

log = logging.getLogger(__name__)
JSON = dict[str, Any]
PREFIX = "/volcano"
VERBS = web.AppKey("volcano_verbs", VolcanoVerbs)
SERVICE = web.AppKey("volcano_service", SchedulerService)
FAILURES = web.AppKey("volcano_failures", FailureReporter)
# onSessionOpen carries the session's whole snapshot (every job, node and task); 10 MiB is
# Volcano's own cap on what it reads back, far below what it sends.
MAX_BODY = 256 * 1024 * 1024
_NOT_SYNCED = "hami-dcu's scheduler cache is not synced yet"
_VOTES = {PERMIT: "permit", REJECT: "reject", ABSTAIN: "abstain"}


def _reply(body: JSON) -> web.Response:
    return web.Response(body=json.dumps(body, separators=(",", ":")), content_type="application/json")


async def _body(request: web.Request) -> object:
    try:
        raw = await read_body(request, MAX_BODY)
        return safejson.loads(raw)
    except (BodyError, safejson.JsonError) as exc:
        raise WireError(str(exc)) from exc


def _failed(request: web.Request, exc: Exception, subject: str, answer: Callable[[str], JSON]) -> web.Response:
    failure = request.app[FAILURES].failed(exc, subject)
    if failure.expected:
        return _reply(answer(failure.message))
    return web.json_response(answer(failure.message), status=failure.http_status)


async def _synced(request: web.Request) -> bool:
    service = request.app[SERVICE]
    return await service.wait_synced(service.settings.sync_wait)


async def handle_predicate(request: web.Request) -> web.Response:
    try:
        args = parse_predicate(await _body(request))
    except WireError as exc:
        log.warning("volcano predicate: %s", exc)
        return _reply(predicate_reply(str(exc), ERROR))
    if not await _synced(request):
        return _reply(predicate_reply(_NOT_SYNCED, ERROR))
    try:
        request.app[VERBS].predicate(args.task, args.node)
    except VolcanoRefused as exc:
        return _reply(predicate_reply(str(exc), exc.code))
    except Exception as exc:
        return _failed(request, exc, f"volcano predicate of pod {args.task.who} on node {args.node}",
                       lambda m: predicate_reply(m, ERROR))
    return _reply(predicate_reply())


async def handle_prioritize(request: web.Request) -> web.Response:
    try:
        args = parse_prioritize(await _body(request))
    except WireError as exc:
        log.warning("volcano prioritize: %s", exc)
        return _reply(prioritize_reply({}, str(exc)))
    return _reply(prioritize_reply(request.app[VERBS].prioritize(args.task, args.nodes)))


async def handle_allocate(request: web.Request) -> web.Response:
    try:
        task = parse_event(await _body(request))
    except WireError as exc:
        log.warning("volcano allocateFunc: %s", exc)
        return _reply(event_reply(str(exc)))
    if not await _synced(request):
        return _reply(event_reply(_NOT_SYNCED))
    verbs = request.app[VERBS]
    try:
        write = verbs.allocate(task)
        if write is None:
            return _reply(event_reply())
        try:
            await _kube(request).patch_pod_metadata(write.namespace, write.name, annotations=dict(write.annotations))
        except KubeError as exc:
            verbs.write_failed(write)
            raise VolcanoRefused(f"pod {task.who} on node {task.node}: its allocation could not be written: {exc}"
                                 ) from exc
    except VolcanoRefused as exc:
        log.warning("volcano allocateFunc refused: %s", exc)
        return _reply(event_reply(str(exc)))
    except Exception as exc:
        return _failed(request, exc, f"volcano allocateFunc of pod {task.who} on node {task.node}", event_reply)
    return _reply(event_reply())


async def handle_deallocate(request: web.Request) -> web.Response:
    try:
        task = parse_event(await _body(request))
    except WireError as exc:
        log.warning("volcano deallocateFunc: %s", exc)
        return _reply(event_reply(str(exc)))
    try:
        undo = request.app[VERBS].deallocate(task)
        if undo is not None:
            await remove_allocation(_kube(request), undo)
    except KubeError as exc:
        message = f"pod {task.who} on node {task.node}: its allocation could not be removed: {exc}"
        log.warning("volcano deallocateFunc: %s", message)
        return _reply(event_reply(message))
    except Exception as exc:
        return _failed(request, exc, f"volcano deallocateFunc of pod {task.who} on node {task.node}", event_reply)
    return _reply(event_reply())


async def remove_allocation(kube: AsyncKube, undo: Undo, attempts: int = 3) -> bool:
    """Remove what allocate wrote, as long as the pod is unbound and still carries it (a
    compare-and-swap on its resourceVersion); True when removed, False when left alone."""
    for _ in range(attempts):
        try:
            pod = await kube.get_pod(undo.namespace, undo.name)
        except NotFoundError:
            return False
        found = objects.annotations(pod)
        if objects.node_name(pod) or any(found.get(k) != v for k, v in undo.written.items()):
            log.info("volcano deallocate %s/%s: pod bound or rewritten since, its annotations left as they are",
                     undo.namespace, undo.name)
            return False
        version = str(objects.metadata(pod).get("resourceVersion") or "") or None
        try:
            await kube.patch_pod_metadata(undo.namespace, undo.name, annotations=dict.fromkeys(undo.written),
                                          resource_version=version)
        except ConflictError:
            continue
        log.info("volcano deallocate %s/%s: allocation for node %s removed", undo.namespace, undo.name, undo.node)
        return True
    raise ConflictError(409, "Conflict", f"pod {undo.namespace}/{undo.name} kept changing")


def _evict(purpose: Purpose) -> Callable[[web.Request], Awaitable[web.Response]]:
    """preemptable and reclaimable: the evictees whose going frees a card for the evictor
    (volcanoevict.py). A request we cannot read, or a cache not synced, abstains: Volcano's
    other plugins decide as if we were not asked."""
    async def handle(request: web.Request) -> web.Response:
        try:
            args = parse_evict(await _body(request))
        except WireError as exc:
            log.warning("volcano %s: %s", purpose.value, exc)
            return _reply(evict_reply(ABSTAIN))
        if not await _synced(request):
            log.warning("volcano %s for %s: %s; abstained", purpose.value, args.evictor.who, _NOT_SYNCED)
            return _reply(evict_reply(ABSTAIN))
        try:
            answer = request.app[VERBS].evictable(purpose, args)
        except Exception as exc:
            return _failed(request, exc, f"volcano {purpose.value} for pod {args.evictor.who}",
                           lambda _m: evict_reply(ABSTAIN))
        chosen = set(answer.victims)
        victims = [sent for task, sent in zip(args.evictees, args.sent, strict=True) if task.uid in chosen]
        log.info("volcano %s for %s among %d evictee(s): %s (%s)", purpose.value, args.evictor.who,
                 len(args.evictees), _VOTES.get(answer.status, answer.status), answer.why)
        return _reply(evict_reply(answer.status, victims))
    return handle


def _session(settle: Callable[[VolcanoVerbs], None]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        try:
            await read_body(request, MAX_BODY)  # the snapshot: not read, only drained
        except BodyError as exc:
            log.warning("volcano %s: %s", request.path, exc)
        settle(request.app[VERBS])
        return _reply({})
    return handle


def _kube(request: web.Request) -> AsyncKube:
    kube = request.app[SERVICE].kube
    if kube is None:
        raise VolcanoRefused("this scheduler has no API access")
    return kube


def build_volcano_app(service: SchedulerService) -> web.Application:
    """The Volcano verbs under PREFIX (Volcano POSTs to urlPrefix + "/" + verb), with the
    probes. The service's lifecycle belongs to the extender listener's app."""
    app = web.Application(client_max_size=MAX_BODY)
    app[SERVICE] = service
    app[VERBS] = VolcanoVerbs(service.cache, service.filter, service.settings.filter, service.monotonic,
                              service.wall_clock)
    app[FAILURES] = FailureReporter(Component.SCHEDULER, service.metrics.registry, log)
    routes: dict[str, Callable[[web.Request], Awaitable[web.Response]]] = {
        "predicate": handle_predicate,
        "prioritize": handle_prioritize,
        "allocateFunc": handle_allocate,
        "deallocateFunc": handle_deallocate,
        "preemptable": _evict(Purpose.PREEMPT),
        "reclaimable": _evict(Purpose.RECLAIM),
        "onSessionOpen": _session(VolcanoVerbs.session_open),
        "onSessionClose": _session(VolcanoVerbs.session_close),
    }
    for verb, handler in routes.items():
        app.router.add_post(f"{PREFIX}/{verb}", handler)
    return app
