"""A dropped connection schedules a full garbage collection only where it pays: on a TLS
listener (each connection's 256 KiB of buffers sit in reference cycles), not on a plain one
(the extender's loopback, whose connections kube-scheduler opens and drops all through a burst)."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from aiohttp import web

from hami_dcu.common.io import gcpolicy, guardedsite


@pytest.fixture
def collections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made: list[int] = []
    monkeypatch.setattr(gcpolicy, "release_garbage", lambda: made.append(1))
    monkeypatch.setattr(guardedsite, "COLLECT_EVERY", 0.01)
    return made


async def dropped_then_waited(context: ssl.SSLContext | None) -> None:
    runner, site = await guardedsite.serve_guarded(web.Application(), "127.0.0.1", 0, ssl_context=context)
    try:
        site.note_dropped("127.0.0.1", "pushed out", guardedsite.CLOSED_PUSHED_OUT)
        site.note_dropped("127.0.0.1", "pushed out", guardedsite.CLOSED_PUSHED_OUT)
        await asyncio.sleep(0.1)
    finally:
        await runner.cleanup()


async def test_a_plain_listener_collects_nothing_for_dropped_connections(collections: list[int]) -> None:
    await dropped_then_waited(None)
    assert collections == []


async def test_a_tls_listener_collects_once_for_drops_close_together(collections: list[int]) -> None:
    await dropped_then_waited(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
    assert collections == [1]
