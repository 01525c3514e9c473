"""The extender's HTTP servers (aiohttp): /filter, /bind, /preempt, /prioritize, /healthz,
/readyz, /metrics.

`build_app` is the extender listener kube-scheduler calls (loopback in the chart: only its
neighbour container reaches it); `build_side_app` is a listener for the other audiences (the
API server's webhook calls and the kubelet's probes, or Prometheus), which never serves
/filter or /bind.

Every answer to /filter and /bind is HTTP 200 with the error, if any, in `Error`: kube-scheduler
reads a body only from a 200 (any other status is a transport failure to it). One bad request
never takes the server down: it gets its own Error and nothing changes. The one exception is
a bug of ours (common/protocol/errors.py's rule): a 500 with a short message, its traceback logged
naming the pod and counted in hami_dcu_internal_errors_total; kube-scheduler retries the pod
as it would after an Error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hami_dcu.common.io.body import BODY_DEADLINE, BodyError, read_body
from hami_dcu.common.io.failures import Component, FailureReporter
from hami_dcu.common.protocol import safejson
from hami_dcu.scheduler.extender import WireError, parse_bind_args, parse_filter_args, parse_preemption_args
from hami_dcu.scheduler.service import SchedulerService

log = logging.getLogger(__name__)
JSON = dict[str, Any]
SERVICE = web.AppKey("scheduler_service", SchedulerService)
BODY_CAP = web.AppKey("body_cap", int)
BODY_DEADLINE_KEY = web.AppKey("body_deadline", float)
FAILURES = web.AppKey("failures", FailureReporter)
# 5,000 full Node objects (nodeCacheCapable: false) run to tens of MiB.
MAX_BODY = 256 * 1024 * 1024


def _reply(body: dict[str, Any]) -> web.Response:
    return web.Response(body=json.dumps(body, separators=(",", ":")), content_type="application/json")


async def _json(request: web.Request) -> object:
    try:
        raw = await read_body(request, request.app[BODY_CAP], request.app[BODY_DEADLINE_KEY])
    except BodyError as exc:
        raise WireError(str(exc)) from exc
    try:
        return safejson.loads(raw)
    except safejson.JsonError as exc:
        raise WireError(str(exc)) from exc


def _who(pod: JSON) -> str:
    meta = pod.get("metadata") or {}  # its shape was checked by the parser
    return f"pod {meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _failed(request: web.Request, exc: Exception, subject: str, expected: Callable[[str], web.Response]
            ) -> web.Response:
    """What a verb raised instead of answering: an expected failure answered by `expected` with
    its message (a 200, the protocol's way), a bug as a 500."""
    failure = request.app[FAILURES].failed(exc, subject)
    if failure.expected:
        return expected(failure.message)
    return web.json_response({"Error": failure.message}, status=failure.http_status)


def _no_nodes(error: str) -> web.Response:
    return _reply({"Nodes": None, "NodeNames": None, "FailedNodes": {}, "Error": error})


def _bind_error(error: str) -> web.Response:
    return _reply({"Error": error})


def _no_victims(_error: str = "") -> web.Response:
    return _reply({"NodeNameToMetaVictims": {}})  # no error field in this reply: no victims


def _no_scores(_error: str = "") -> web.Response:
    return web.Response(body="[]", content_type="application/json")


async def handle_filter(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    try:
        args = parse_filter_args(await _json(request))
    except WireError as exc:
        return _no_nodes(str(exc))
    if not await service.wait_synced(service.settings.sync_wait):
        return _no_nodes("scheduler cache not synced yet")
    await service.filter_turn()
    try:
        return _reply(service.filter_pod(args))
    except Exception as exc:  # a bug must cost one pod one retry, not the server
        return _failed(request, exc, f"/filter of {_who(args.pod)}", _no_nodes)


async def handle_bind(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    try:
        args = parse_bind_args(await _json(request))
    except WireError as exc:
        return _bind_error(str(exc))
    if not await service.wait_synced(service.settings.sync_wait):
        return _bind_error("scheduler cache not synced yet")
    try:
        return _reply(await service.bind_pod(args))
    except Exception as exc:
        return _failed(request, exc, f"/bind of pod {args.pod} to node {args.node}", _bind_error)


async def handle_prioritize(request: web.Request) -> web.Response:
    """DRA mode's packing. kube-scheduler only logs a prioritize error, so a bad request gets
    an empty list (no scores: nothing changes)."""
    service = request.app[SERVICE]
    try:
        args = parse_filter_args(await _json(request))
    except WireError as exc:
        log.warning("prioritize: %s", exc)
        return _no_scores()
    try:
        scores = service.prioritize_pod(args)
    except Exception as exc:
        return _failed(request, exc, f"/prioritize of {_who(args.pod)}", _no_scores)
    return web.Response(body=json.dumps(scores, separators=(",", ":")), content_type="application/json")


async def handle_preempt(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    try:
        args = parse_preemption_args(await _json(request))
    except WireError as exc:
        log.warning("preempt: %s", exc)
        return _no_victims()
    if not await service.wait_synced(service.settings.sync_wait):
        return _no_victims()
    try:
        return _reply(await service.preempt_pod(args))
    except Exception as exc:
        return _failed(request, exc, f"/preempt of {_who(args.pod)}", _no_victims)


async def handle_healthz(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def handle_readyz(request: web.Request) -> web.Response:
    if request.app[SERVICE].synced:
        return web.Response(text="ok")
    return web.Response(status=503, text="cache not synced")


async def handle_metrics(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[SERVICE].metrics.registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


def build_app(service: SchedulerService, manage_lifecycle: bool = True, max_body: int = MAX_BODY,
              body_deadline: float = BODY_DEADLINE, metrics: bool = True) -> web.Application:
    app = web.Application(client_max_size=max_body)
    app[SERVICE] = service
    app[BODY_CAP] = max_body
    app[BODY_DEADLINE_KEY] = body_deadline
    app[FAILURES] = FailureReporter(Component.SCHEDULER, service.metrics.registry, log)
    app.router.add_post("/filter", handle_filter)
    app.router.add_post("/bind", handle_bind)
    app.router.add_post("/preempt", handle_preempt)
    app.router.add_post("/prioritize", handle_prioritize)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    if metrics:
        app.router.add_get("/metrics", handle_metrics)
    if manage_lifecycle:
        async def lifecycle(_app: web.Application) -> Any:
            service.start()
            yield
            await service.stop()

        app.cleanup_ctx.append(lifecycle)
    return app


def build_side_app(service: SchedulerService, probes: bool = True, metrics: bool = False) -> web.Application:
    """A listener without /filter and /bind: the probes (/healthz, /readyz) and/or /metrics.
    The service's lifecycle belongs to the extender listener's app."""
    app = web.Application()
    app[SERVICE] = service
    if probes:
        app.router.add_get("/healthz", handle_healthz)
        app.router.add_get("/readyz", handle_readyz)
    if metrics:
        app.router.add_get("/metrics", handle_metrics)
    return app
