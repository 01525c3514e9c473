"""`GET /metrics` of one Prometheus registry on its own port, for the processes whose main
port is not HTTP (the kubelet plugins speak gRPC on a socket): one helper, so every such port
gets the same connection limits as the HTTP ports of ours."""

from __future__ import annotations

import logging
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hami_dcu.common.io.connlimits import DEFAULT_LIMITS, ConnectionLimits
from hami_dcu.common.io.guardedsite import ThreadedServer

log = logging.getLogger(__name__)


class HasRegistry(Protocol):
    registry: CollectorRegistry


def serve(metrics: HasRegistry, bind: str, limits: ConnectionLimits = DEFAULT_LIMITS) -> ThreadedServer:
    """Serve `/metrics` on `host:port` (port 0: any free port) in a daemon thread, under the
    same connection limits as every HTTP port of ours (prometheus_client's own server gave
    each connection a thread for as long as the client kept it)."""
    host, _, port = bind.rpartition(":")

    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    server = ThreadedServer(app, host.strip("[]") or "0.0.0.0", int(port), limits)
    log.info("metrics on http://%s:%s/metrics", host or "0.0.0.0", server.server_port)
    return server
