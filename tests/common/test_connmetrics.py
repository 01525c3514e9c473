"""hami_dcu_http_connections_closed_total counts every connection a listener closed itself, by
reason, and nothing a client closed: a client's "connection reset by peer" that the counter
does not show came from elsewhere (common/io/connmetrics.py)."""

from __future__ import annotations

import asyncio

from aiohttp import web
from prometheus_client import CollectorRegistry

from hami_dcu.common.io.connlimits import ConnectionLimits
from hami_dcu.common.io.connmetrics import CLOSED_METRIC, ClosedConnections
from hami_dcu.common.io.guardedsite import CLOSE_REASONS, serve_guarded


async def ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def app() -> web.Application:
    application = web.Application()
    application.router.add_post("/review", ok)
    return application


def closed(registry: CollectorRegistry, listener: str, reason: str) -> float:
    value = registry.get_sample_value(f"{CLOSED_METRIC}_total", {"listener": listener, "reason": reason})
    assert value is not None, f"no sample for {listener}/{reason}"
    return value


async def wait_for(predicate: object, timeout: float = 5.0) -> None:
    assert callable(predicate)
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_every_reason_is_exported_at_zero_before_any_close() -> None:
    registry = CollectorRegistry()
    ClosedConnections(registry).recorder("webhook")
    assert {reason: closed(registry, "webhook", reason) for reason in CLOSE_REASONS} == dict.fromkeys(CLOSE_REASONS,
                                                                                                       0.0)


async def test_a_connection_without_headers_in_time_is_counted_under_its_listener() -> None:
    registry = CollectorRegistry()
    metrics = ClosedConnections(registry)
    runner, site = await serve_guarded(app(), "127.0.0.1", 0, ConnectionLimits(header_timeout=0.2),
                                       on_close=metrics.recorder("webhook"))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", site.bound_port)
        writer.write(b"POST /review HTTP/1.1\r\n")  # never finishes its headers
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        await wait_for(lambda: closed(registry, "webhook", "header_timeout") == 1)
        assert all(closed(registry, "webhook", reason) == 0 for reason in CLOSE_REASONS if reason != "header_timeout")
        writer.close()
    finally:
        await runner.cleanup()


async def test_a_client_closing_its_own_connection_counts_nothing() -> None:
    registry = CollectorRegistry()
    metrics = ClosedConnections(registry)
    runner, site = await serve_guarded(app(), "127.0.0.1", 0, on_close=metrics.recorder("extender"))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", site.bound_port)
        writer.write(b"POST /review HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 200")
        writer.close()
        await wait_for(lambda: not site.connections)
        assert all(closed(registry, "extender", reason) == 0 for reason in CLOSE_REASONS)
    finally:
        await runner.cleanup()


async def test_a_parked_connection_that_never_gets_a_place_is_counted_refused() -> None:
    registry = CollectorRegistry()
    metrics = ClosedConnections(registry)
    limits = ConnectionLimits(header_timeout=0.3, max_connections=1, max_per_client=1)
    runner, site = await serve_guarded(app(), "127.0.0.1", 0, limits, on_close=metrics.recorder("webhook"))
    try:
        # The first holds the one place mid-request (headers sent, the body never), so the second waits parked.
        _, holder = await asyncio.open_connection("127.0.0.1", site.bound_port)
        holder.write(b"POST /review HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
        await wait_for(lambda: site.book.open == 1)
        _, writer = await asyncio.open_connection("127.0.0.1", site.bound_port)
        await wait_for(lambda: closed(registry, "webhook", "refused") >= 1)
        holder.close()
        writer.close()
    finally:
        await runner.cleanup()
