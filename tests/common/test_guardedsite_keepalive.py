"""A kept-alive connection is the client's to close (common/io/connlimits.py, common/io/guardedsite.py):
a newer connection of the same client at its cap waits, and aiohttp's own keep-alive timeout
does not end an idle connection before our deadline does. Found in CI: kube-apiserver's
reviews failed with "connection reset by peer" in a burst (e2e/test_realcluster_webhook_burst.py)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hami_dcu.common.io.connlimits import EVICTION_GRACE, ConnectionLimits
from hami_dcu.common.io.guardedsite import serve_guarded


async def ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def app() -> web.Application:
    application = web.Application()
    application.router.add_post("/review", ok)
    return application


async def post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"POST /review HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), 5)
    while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b""):
        pass
    await asyncio.wait_for(reader.readexactly(2), 5)
    return status


async def test_a_newer_connection_of_a_client_at_its_cap_does_not_close_its_kept_alive_one() -> None:
    runner, site = await serve_guarded(app(), "127.0.0.1", 0, ConnectionLimits(max_per_client=1))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", site.bound_port)
        assert (await post(reader, writer)).startswith(b"HTTP/1.1 200")
        # A second connection from the same address, as a client's pool dials while all of
        # its connections seem busy: parked, while the first sits kept alive past the grace.
        _, newer = await asyncio.open_connection("127.0.0.1", site.bound_port)
        await asyncio.sleep(EVICTION_GRACE * 4)
        assert (await post(reader, writer)).startswith(b"HTTP/1.1 200")
        assert site.dropped == 0
        newer.close()
        writer.close()
    finally:
        await runner.cleanup()


async def test_aiohttp_keeps_an_idle_connection_longer_than_our_idle_deadline() -> None:
    limits = ConnectionLimits()
    runner, site = await serve_guarded(app(), "127.0.0.1", 0, limits)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", site.bound_port)
        assert (await post(reader, writer)).startswith(b"HTTP/1.1 200")
        (guard,) = site.by_transport.values()
        # aiohttp's request handler, the protocol our guard forwards to: its own keep-alive
        # timeout (75 s by default in older aiohttp releases) must not close the connection first.
        assert guard.inner._keepalive_timeout > limits.idle_timeout  # type: ignore[attr-defined]
        writer.close()
    finally:
        await runner.cleanup()
